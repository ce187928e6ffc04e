//! The agent's probe beacon (`listen.beacon`; docs/protocol.md, "Beacons"): answers each
//! client's [`Ping`] with a pong carrying the agent's receive and send times, so clients measure
//! their round trip to this site before they choose where to join.
//!
//! Nothing is allocated per packet: one receive buffer, the pong built on the stack, and a
//! fixed table of token buckets, one per source address ([`Limiter`]). A source sending more
//! than [`RATE_PER_S`] pings a second (after a burst of [`BURST`]) gets no answer for the
//! surplus; malformed packets get none either. Both are counted.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use horizon_proto::beacon::{BEACON_BYTES, Ping};
use tokio::net::UdpSocket;
use tokio::sync::watch;

use crate::AgentStats;

/// Pings answered per second per source address, in the long run.
pub const RATE_PER_S: f64 = 20.0;
/// Pings a source may send at once before the rate applies (a client's 10 samples fit).
pub const BURST: f64 = 10.0;
/// Buckets in the table: sources beyond it share buckets (each evicting the other's).
const SLOTS: usize = 4096;

/// Token buckets per source address, in a table of fixed size: an address hashes (with keys
/// drawn at start, so nobody picks collisions) to one slot; another address found there starts
/// a full bucket of its own. A loopback source is a process of this machine (nothing remote
/// can send from loopback): its bucket is per socket, address and port, so that local players
/// (a sandbox's, all on 127.0.0.1) each get their own.
#[derive(Debug)]
pub struct Limiter {
    slots: Vec<Slot>,
    keys: RandomState,
    rate_per_s: f64,
    burst: f64,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    source: Option<SocketAddr>,
    tokens: f64,
    at: Instant,
}

impl Limiter {
    pub fn new(rate_per_s: f64, burst: f64, now: Instant) -> Self {
        let empty = Slot { source: None, tokens: burst, at: now };
        Limiter { slots: vec![empty; SLOTS], keys: RandomState::new(), rate_per_s, burst }
    }

    /// Whether a ping from `from` at `now` is answered (and takes its token).
    pub fn allow(&mut self, from: SocketAddr, now: Instant) -> bool {
        let source = if from.ip().is_loopback() { from } else { SocketAddr::new(from.ip(), 0) };
        let i = (self.keys.hash_one(source) % SLOTS as u64) as usize;
        let s = &mut self.slots[i];
        if s.source != Some(source) {
            *s = Slot { source: Some(source), tokens: self.burst, at: now };
        }
        let earned = now.saturating_duration_since(s.at).as_secs_f64() * self.rate_per_s;
        s.tokens = (s.tokens + earned).min(self.burst);
        s.at = now;
        if s.tokens >= 1.0 {
            s.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Binds the beacon on `addr` and answers there until `stop` says so; returns the address.
pub(crate) async fn start(
    addr: SocketAddr,
    stats: Arc<AgentStats>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<SocketAddr> {
    let socket = UdpSocket::bind(addr).await?;
    let local = socket.local_addr()?;
    tokio::spawn(serve(socket, stats, stop));
    Ok(local)
}

/// Answers pings on `socket` until `stop` says so (or its sender is gone).
pub async fn serve(socket: UdpSocket, stats: Arc<AgentStats>, mut stop: watch::Receiver<bool>) {
    let origin = Instant::now();
    let ns = |at: Instant| at.saturating_duration_since(origin).as_nanos() as u64;
    let mut limiter = Limiter::new(RATE_PER_S, BURST, origin);
    // Longer than a beacon packet, so a longer datagram is seen as one (and refused).
    let mut buf = [0u8; BEACON_BYTES + 24];
    loop {
        let (len, from) = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    // An ICMP error for an earlier pong (a client gone): nothing to do.
                    tracing::debug!(error = %e, "beacon receive");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let received = Instant::now();
        let Ok(ping) = Ping::decode(&buf[..len]) else {
            stats.beacon_malformed.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        if !limiter.allow(from, received) {
            stats.beacon_limited.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let pong = ping.answer(ns(received), ns(Instant::now())).encode();
        match socket.send_to(&pong, from).await {
            Ok(_) => {
                stats.beacon_pongs.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::debug!(error = %e, %from, "beacon answer not sent"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_gets_its_burst_then_the_rate_and_another_source_its_own_burst() {
        let t0 = Instant::now();
        let mut l = Limiter::new(20.0, 10.0, t0);
        let a: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let b: SocketAddr = "192.0.2.2:4000".parse().unwrap();
        let answered = (0..30).filter(|_| l.allow(a, t0)).count();
        assert_eq!(answered, 10, "the burst, then nothing at the same instant");
        assert_eq!((0..30).filter(|_| l.allow(b, t0)).count(), 10, "b has a burst of its own");
        // 20 a second: one more every 50 ms.
        assert!(!l.allow(a, t0 + Duration::from_millis(40)));
        assert!(l.allow(a, t0 + Duration::from_millis(60)));
        // After a quiet second the burst is back, never more.
        let later = t0 + Duration::from_secs(5);
        assert_eq!((0..30).filter(|_| l.allow(a, later)).count(), 10);
    }

    #[test]
    fn a_remote_address_has_one_bucket_whatever_its_port_and_a_local_socket_one_of_its_own() {
        let t0 = Instant::now();
        let mut l = Limiter::new(20.0, 10.0, t0);
        let remote = |port| SocketAddr::from(([192, 0, 2, 1], port));
        assert_eq!((0..10).filter(|i| l.allow(remote(4000 + i), t0)).count(), 10);
        assert!(!l.allow(remote(5000), t0), "another port of the same address shares the bucket");
        let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!((0..30).filter(|_| l.allow(local(4000), t0)).count(), 10);
        assert_eq!((0..30).filter(|_| l.allow(local(4001), t0)).count(), 10, "a bucket per socket");
    }

    #[tokio::test]
    async fn pings_are_answered_with_the_agents_hold_time_and_anything_else_is_counted() {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let stats = Arc::new(AgentStats::default());
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(serve(socket, stats.clone(), stop_rx));
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.connect(addr).await.unwrap();
        client.send(b"not a beacon").await.unwrap();
        let ping = Ping { nonce: 42, client_ns: 1_000 };
        client.send(&ping.encode()).await.unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(10), client.recv(&mut buf))
            .await
            .expect("a pong")
            .unwrap();
        let pong = horizon_proto::beacon::Pong::decode(&buf[..n]).expect("a pong");
        assert_eq!((pong.nonce, pong.client_ns), (42, 1_000));
        assert!(pong.tx_ns >= pong.rx_ns);
        assert_eq!(stats.beacon_pongs.load(Ordering::Relaxed), 1);
        assert_eq!(stats.beacon_malformed.load(Ordering::Relaxed), 1);
        stop.send(true).unwrap();
        task.await.unwrap();
    }
}
