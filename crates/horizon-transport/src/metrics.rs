//! What a daemon's endpoints saw, by channel: plain counters each daemon owns
//! ([`TransportStats`], handed to its listeners and dials), read into Prometheus families at
//! scrape ([`TransportStats::collector`]). Two daemons in one process (the demo) count apart.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use horizon_proto::ChannelId;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};

/// Why an inbound connection was refused before it became a peer (label `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Every handshake slot was taken.
    PendingFull,
    /// Too many handshakes from one address.
    PerSource,
    /// The QUIC handshake and the hello did not finish in time.
    HandshakeTimeout,
    /// The QUIC handshake failed.
    HandshakeFailed,
    /// The hello was refused: bad token, certificate, version or frame.
    HelloRefused,
}

impl Refusal {
    pub const ALL: [Refusal; 5] = [
        Refusal::PendingFull,
        Refusal::PerSource,
        Refusal::HandshakeTimeout,
        Refusal::HandshakeFailed,
        Refusal::HelloRefused,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::PendingFull => "pending_full",
            Refusal::PerSource => "per_source",
            Refusal::HandshakeTimeout => "handshake_timeout",
            Refusal::HandshakeFailed => "handshake_failed",
            Refusal::HelloRefused => "hello_refused",
        }
    }
}

const CHANNELS: usize = ChannelId::ALL.len();

/// One counter per channel.
type PerChannel = [AtomicU64; CHANNELS];

#[derive(Debug, Default)]
struct Counts {
    datagrams_dropped: PerChannel,
    replays: PerChannel,
    address_validations: PerChannel,
    refused: [PerChannel; Refusal::ALL.len()],
    /// Credential reloads: `[ok, failed]`.
    reloads: [AtomicU64; 2],
}

/// A daemon's transport counters. Cheap to clone (clones count together); a fresh one counts
/// apart (what a client that exports no metrics passes).
#[derive(Clone, Debug, Default)]
pub struct TransportStats(Arc<Counts>);

fn index(channel: ChannelId) -> usize {
    ChannelId::ALL.iter().position(|&c| c == channel).unwrap_or_default()
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl TransportStats {
    /// Counts a reload of credentials.
    pub fn reloaded(&self, ok: bool) {
        bump(&self.0.reloads[usize::from(!ok)]);
    }

    /// Reloads of credentials with this result so far.
    pub fn reload_count(&self, ok: bool) -> u64 {
        read(&self.0.reloads[usize::from(!ok)])
    }

    pub(crate) fn refused(&self, channel: ChannelId, reason: Refusal) {
        bump(&self.0.refused[reason as usize][index(channel)]);
    }

    /// Connections of `channel` refused for `reason` so far.
    pub fn refused_count(&self, channel: ChannelId, reason: Refusal) -> u64 {
        read(&self.0.refused[reason as usize][index(channel)])
    }

    pub(crate) fn retried(&self, channel: ChannelId) {
        bump(&self.0.address_validations[index(channel)]);
    }

    /// Retries sent on `channel` so far.
    pub fn retry_count(&self, channel: ChannelId) -> u64 {
        read(&self.0.address_validations[index(channel)])
    }

    pub(crate) fn datagram_dropped(&self, channel: ChannelId) {
        bump(&self.0.datagrams_dropped[index(channel)]);
    }

    pub(crate) fn replayed(&self, channel: ChannelId) {
        bump(&self.0.replays[index(channel)]);
    }

    /// These counters as Prometheus families, read at each scrape (every channel's and
    /// reason's series exists from the start, at 0), to register in the daemon's registry.
    pub fn collector(&self) -> Box<dyn Collector> {
        let descs = FAMILIES
            .iter()
            .map(|(name, help, labels, _)| {
                let labels = labels.iter().map(|l| l.to_string()).collect();
                Desc::new(name.to_string(), help.to_string(), labels, HashMap::new())
                    .unwrap_or_else(|e| unreachable!("a constant, valid metric definition: {e}"))
            })
            .collect();
        Box::new(StatsCollector { stats: self.clone(), descs })
    }
}

/// The label value of a channel.
pub fn channel_label(channel: ChannelId) -> &'static str {
    match channel {
        ChannelId::Control => "control",
        ChannelId::Transfer => "transfer",
        ChannelId::Server => "server",
        ChannelId::Gateway => "gateway",
    }
}

/// A family's series: each one's label values and count.
type Series = Vec<(Vec<&'static str>, u64)>;

/// A family: its name, help, label names, and how its series are read.
type Family = (&'static str, &'static str, &'static [&'static str], fn(&Counts) -> Series);

/// Every family.
const FAMILIES: [Family; 5] = [
    (
        "horizon_credential_reloads_total",
        "Reloads of this daemon's certificate, key, CA and signing keys (on SIGHUP or a file change), by result: ok, or failed (what was loaded before stays in use; the log says why).",
        &["result"],
        |c| vec![(vec!["ok"], read(&c.reloads[0])), (vec!["failed"], read(&c.reloads[1]))],
    ),
    (
        "horizon_transport_datagrams_dropped_total",
        "Inbound datagrams dropped because the application's queue was full, by channel.",
        &["channel"],
        |c| by_channel(&c.datagrams_dropped),
    ),
    (
        "horizon_transport_replays_total",
        "Retried requests answered from the reply cache instead of being run again, by channel.",
        &["channel"],
        |c| by_channel(&c.replays),
    ),
    (
        "horizon_transport_connections_refused_total",
        "Inbound connections refused before they became a peer, by channel and reason: pending_full (every handshake slot taken), per_source (too many handshakes from one address), handshake_timeout (the QUIC handshake and the hello did not finish in time), handshake_failed, hello_refused (bad token, certificate, version or frame).",
        &["channel", "reason"],
        |c| {
            let each = ChannelId::ALL.into_iter().flat_map(|channel| {
                Refusal::ALL.into_iter().map(move |reason| {
                    let n = read(&c.refused[reason as usize][index(channel)]);
                    (vec![channel_label(channel), reason.as_str()], n)
                })
            });
            each.collect()
        },
    ),
    (
        "horizon_transport_address_validations_total",
        "QUIC retries sent: a new connection proves it owns its source address before it takes a handshake slot, by channel.",
        &["channel"],
        |c| by_channel(&c.address_validations),
    ),
];

fn by_channel(counters: &PerChannel) -> Series {
    let each =
        ChannelId::ALL.into_iter().map(|c| (vec![channel_label(c)], read(&counters[index(c)])));
    each.collect()
}

/// Reads a [`TransportStats`] at each scrape.
struct StatsCollector {
    stats: TransportStats,
    descs: Vec<Desc>,
}

impl Collector for StatsCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        FAMILIES
            .iter()
            .map(|(name, help, labels, series)| {
                let mut family = MetricFamily::default();
                family.set_name(name.to_string());
                family.set_help(help.to_string());
                family.set_field_type(MetricType::COUNTER);
                let metrics = series(&self.stats.0).into_iter().map(|(values, n)| {
                    let pairs = labels.iter().zip(values).map(|(name, value)| {
                        let mut pair = LabelPair::default();
                        pair.set_name(name.to_string());
                        pair.set_value(value.to_owned());
                        pair
                    });
                    let mut metric = proto::Metric::from_label(pairs.collect());
                    let mut counter = proto::Counter::default();
                    counter.set_value(n as f64);
                    metric.set_counter(counter);
                    metric
                });
                family.set_metric(metrics.collect());
                family
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(stats: &TransportStats) -> String {
        let registry = prometheus::Registry::new();
        registry.register(stats.collector()).expect("registers");
        prometheus::TextEncoder::new().encode_to_string(&registry.gather()).expect("encodes")
    }

    #[test]
    fn every_series_exists_at_zero_and_each_daemon_counts_its_own() {
        let (a, b) = (TransportStats::default(), TransportStats::default());
        let text = render(&a);
        assert!(text.contains(
            "horizon_transport_connections_refused_total{channel=\"gateway\",reason=\"hello_refused\"} 0"
        ));
        assert!(text.contains("horizon_credential_reloads_total{result=\"failed\"} 0"));
        let series = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(series, 2 + 4 + 4 + 4 * 5 + 4, "{text}");
        a.refused(ChannelId::Server, Refusal::PerSource);
        a.refused(ChannelId::Server, Refusal::PerSource);
        a.retried(ChannelId::Gateway);
        a.replayed(ChannelId::Control);
        a.datagram_dropped(ChannelId::Transfer);
        a.clone().reloaded(false);
        let text = render(&a);
        for line in [
            "horizon_transport_connections_refused_total{channel=\"server\",reason=\"per_source\"} 2",
            "horizon_transport_address_validations_total{channel=\"gateway\"} 1",
            "horizon_transport_replays_total{channel=\"control\"} 1",
            "horizon_transport_datagrams_dropped_total{channel=\"transfer\"} 1",
            "horizon_credential_reloads_total{result=\"failed\"} 1",
            "horizon_credential_reloads_total{result=\"ok\"} 0",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert_eq!(a.refused_count(ChannelId::Server, Refusal::PerSource), 2);
        assert_eq!(b.refused_count(ChannelId::Server, Refusal::PerSource), 0);
        assert_eq!((b.retry_count(ChannelId::Gateway), b.reload_count(false)), (0, 0));
    }
}
