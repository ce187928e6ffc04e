//! Measuring the round trip to every site before joining one: the client's side of the probe
//! beacons (docs/protocol.md, "Beacons"; the agent's side is `listen.beacon`).
//!
//! Each site is measured on a socket of its own, all sites at once: [`ProbeOptions::samples`]
//! pings one after the other, each waiting at most [`ProbeOptions::timeout`] for its pong, one
//! every [`ProbeOptions::every`] at most (10 every 100 ms by default: about a second, within
//! the beacon's allowance of a burst of 10 and 20 a second). A pong that comes after its ping's
//! timeout is not counted (its nonce is stale). The result per site is the median of the
//! answered round trips, with the agent's hold time taken out, and the share lost.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use horizon_proto::Name;
use horizon_proto::beacon::{BEACON_BYTES, Ping, Pong};
use horizon_proto::gateway::{MAX_PROBED_SITES, SiteProbe};
use tokio::net::UdpSocket;

/// How a site is measured.
#[derive(Clone, Copy, Debug)]
pub struct ProbeOptions {
    /// Pings per site.
    pub samples: u32,
    /// How long a ping waits for its pong.
    pub timeout: Duration,
    /// At most one ping per site this often.
    pub every: Duration,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            samples: 10,
            timeout: Duration::from_millis(250),
            every: Duration::from_millis(100),
        }
    }
}

/// One site's measure.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SiteRtt {
    pub site: String,
    /// The median answered round trip, in milliseconds (`None`: nothing answered).
    pub median_ms: Option<f64>,
    /// Share of pings unanswered within their timeout.
    pub loss: f64,
    /// Every answered round trip, in milliseconds, in the order sent.
    pub samples_ms: Vec<f64>,
}

/// Measures every `(site, beacon address)` at once; one result per site, in the given order.
/// A site whose beacon cannot even be sent to (no route, a bad address) is all loss.
pub async fn measure(beacons: &[(String, SocketAddr)], opts: ProbeOptions) -> Vec<SiteRtt> {
    let runs = beacons.iter().map(|(site, addr)| {
        let site = site.clone();
        let addr = *addr;
        tokio::spawn(async move { measure_one(site, addr, opts).await })
    });
    let mut out = Vec::new();
    for (run, (site, _)) in runs.collect::<Vec<_>>().into_iter().zip(beacons) {
        out.push(run.await.unwrap_or_else(|_| all_lost(site.clone())));
    }
    out
}

/// The site with the lowest median among those that answered at least half their pings.
pub fn lowest(measured: &[SiteRtt]) -> Option<&SiteRtt> {
    measured
        .iter()
        .filter(|m| m.loss <= 0.5)
        .filter_map(|m| m.median_ms.map(|ms| (ms, m)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, m)| m)
}

/// The table a client sends with its join (`gateway::Request::JoinMeasured`): every measured
/// site, `sent` pings each, at most `MAX_PROBED_SITES` (the first ones). A site name too
/// long for the wire is left out.
pub fn table(measured: &[SiteRtt], sent: u32) -> Vec<SiteProbe> {
    let sent = sent.min(u32::from(u8::MAX));
    measured
        .iter()
        .filter_map(|m| {
            let site = Name::new(m.site.clone()).ok()?;
            let answered = (m.samples_ms.len() as u32).min(sent);
            let median_us = m
                .median_ms
                .map_or(0, |ms| (ms * 1000.0).round().clamp(0.0, u32::MAX as f64) as u32);
            Some(SiteProbe { site, sent: sent as u8, answered: answered as u8, median_us })
        })
        .take(MAX_PROBED_SITES)
        .collect()
}

fn all_lost(site: String) -> SiteRtt {
    SiteRtt { site, median_ms: None, loss: 1.0, samples_ms: Vec::new() }
}

async fn measure_one(site: String, addr: SocketAddr, opts: ProbeOptions) -> SiteRtt {
    let local: SocketAddr =
        if addr.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
    let socket = match UdpSocket::bind(local).await {
        Ok(s) if s.connect(addr).await.is_ok() => s,
        _ => return all_lost(site),
    };
    let origin = Instant::now();
    let ns = |at: Instant| at.saturating_duration_since(origin).as_nanos() as u64;
    // Nonces from a per-run base, so a stray pong of another run is not taken for ours.
    let base = u64::from(std::process::id()) << 32 | u64::from(addr.port()) << 16;
    let mut samples_ms = Vec::new();
    let mut buf = [0u8; BEACON_BYTES + 8];
    for i in 0..opts.samples {
        let sent = Instant::now();
        let nonce = base | u64::from(i);
        if socket.send(&Ping { nonce, client_ns: ns(sent) }.encode()).await.is_err() {
            tokio::time::sleep(opts.every).await;
            continue;
        }
        let deadline = sent + opts.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(Ok(n)) = tokio::time::timeout(left, socket.recv(&mut buf)).await else {
                break;
            };
            let received = Instant::now();
            match Pong::decode(&buf[..n]) {
                Ok(pong) if pong.nonce == nonce => {
                    if let Some(rtt) = pong.rtt_ns(ns(received)) {
                        samples_ms.push(rtt as f64 / 1e6);
                    }
                    break;
                }
                // A late pong of an earlier ping, or noise: keep waiting for ours.
                _ => continue,
            }
        }
        let next = sent + opts.every;
        tokio::time::sleep_until(next).await;
    }
    let mut sorted = samples_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let median_ms = match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    };
    let loss = 1.0 - samples_ms.len() as f64 / f64::from(opts.samples.max(1));
    SiteRtt { site, median_ms, loss, samples_ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtt(site: &str, median: Option<f64>, loss: f64) -> SiteRtt {
        SiteRtt { site: site.into(), median_ms: median, loss, samples_ms: Vec::new() }
    }

    #[test]
    fn the_join_table_says_what_was_sent_answered_and_the_median() {
        let near = SiteRtt {
            site: "PAR".into(),
            median_ms: Some(12.3456),
            loss: 0.2,
            samples_ms: vec![12.0; 8],
        };
        let t = table(&[near, rtt("HKG", None, 1.0)], 10);
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t[0].site.as_str(), t[0].sent, t[0].answered, t[0].median_us),
            ("PAR", 10, 8, 12_346)
        );
        assert_eq!((t[1].site.as_str(), t[1].answered, t[1].median_us), ("HKG", 0, 0));
    }

    #[test]
    fn the_lowest_site_is_the_fastest_that_answered_at_least_half() {
        let m = [
            rtt("PAR", Some(90.0), 0.0),
            rtt("MTL", Some(12.0), 0.6),
            rtt("HKG", Some(40.0), 0.1),
            rtt("SYD", None, 1.0),
        ];
        assert_eq!(lowest(&m).map(|m| m.site.as_str()), Some("HKG"));
        assert_eq!(lowest(&m[3..]), None);
    }

    #[tokio::test]
    async fn a_silent_beacon_is_all_loss_after_its_timeouts() {
        // A bound socket that never answers.
        let quiet = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = quiet.local_addr().unwrap();
        let opts = ProbeOptions {
            samples: 3,
            timeout: Duration::from_millis(20),
            every: Duration::from_millis(20),
        };
        let m = measure(&[("PAR".into(), addr)], opts).await;
        assert_eq!(m, [rtt("PAR", None, 1.0)]);
    }
}
