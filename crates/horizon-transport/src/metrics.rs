//! The transport's counters for Prometheus, process-wide, by channel: each daemon registers
//! [`collectors`] in its registry. (Per process: the demo runs its core and agents in one
//! process, so each of their `/metrics` shows the demo's total.)

use std::sync::LazyLock;

use horizon_proto::ChannelId;
use prometheus::core::Collector;
use prometheus::{IntCounterVec, Opts};

fn counter(name: &str, help: &str) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), &["channel"])
        .unwrap_or_else(|e| unreachable!("a constant, valid metric definition: {e}"))
}

static DATAGRAMS_DROPPED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "horizon_transport_datagrams_dropped_total",
        "Inbound datagrams dropped because the application's queue was full, by channel.",
    )
});

static REPLAYS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "horizon_transport_replays_total",
        "Retried requests answered from the reply cache instead of being run again, by channel.",
    )
});

static CONNECTIONS_REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new(
            "horizon_transport_connections_refused_total",
            "Inbound connections refused before they became a peer, by channel and reason: pending_full (every handshake slot taken), per_source (too many handshakes from one address), handshake_timeout (the QUIC handshake and the hello did not finish in time), handshake_failed, hello_refused (bad token, certificate, version or frame).",
        ),
        &["channel", "reason"],
    )
    .unwrap_or_else(|e| unreachable!("a constant, valid metric definition: {e}"))
});

static RETRIES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "horizon_transport_address_validations_total",
        "QUIC retries sent: a new connection proves it owns its source address before it takes a handshake slot, by channel.",
    )
});

static RELOADS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new(
            "horizon_credential_reloads_total",
            "Reloads of this daemon's certificate, key, CA and signing keys (on SIGHUP or a file change), by result: ok, or failed (what was loaded before stays in use; the log says why).",
        ),
        &["result"],
    )
    .unwrap_or_else(|e| unreachable!("a constant, valid metric definition: {e}"))
});

/// Counts a reload of credentials.
pub fn reloaded(ok: bool) {
    RELOADS.with_label_values(&[if ok { "ok" } else { "failed" }]).inc();
}

/// Reloads of credentials with this result so far (tests).
pub fn reload_count(ok: bool) -> u64 {
    RELOADS.with_label_values(&[if ok { "ok" } else { "failed" }]).get()
}

/// Why an inbound connection was refused (label `reason`).
pub(crate) const REFUSALS: [&str; 5] =
    ["pending_full", "per_source", "handshake_timeout", "handshake_failed", "hello_refused"];

pub(crate) fn refused(channel: ChannelId, reason: &'static str) {
    CONNECTIONS_REFUSED.with_label_values(&[channel_label(channel), reason]).inc();
}

pub(crate) fn retried(channel: ChannelId) {
    RETRIES.with_label_values(&[channel_label(channel)]).inc();
}

/// Connections of `channel` refused for `reason` so far (tests).
pub fn refused_count(channel: ChannelId, reason: &str) -> u64 {
    CONNECTIONS_REFUSED.with_label_values(&[channel_label(channel), reason]).get()
}

/// Retries sent on `channel` so far (tests).
pub fn retry_count(channel: ChannelId) -> u64 {
    RETRIES.with_label_values(&[channel_label(channel)]).get()
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

pub(crate) fn datagram_dropped(channel: ChannelId) {
    DATAGRAMS_DROPPED.with_label_values(&[channel_label(channel)]).inc();
}

pub(crate) fn replayed(channel: ChannelId) {
    REPLAYS.with_label_values(&[channel_label(channel)]).inc();
}

/// The transport's metrics, to register in a daemon's registry (every channel's series
/// exists from the start, at 0).
pub fn collectors() -> Vec<Box<dyn Collector>> {
    for channel in ChannelId::ALL {
        let label = [channel_label(channel)];
        DATAGRAMS_DROPPED.with_label_values(&label);
        REPLAYS.with_label_values(&label);
        RETRIES.with_label_values(&label);
        for reason in REFUSALS {
            CONNECTIONS_REFUSED.with_label_values(&[label[0], reason]);
        }
    }
    RELOADS.with_label_values(&["ok"]);
    RELOADS.with_label_values(&["failed"]);
    vec![
        Box::new(RELOADS.clone()),
        Box::new(DATAGRAMS_DROPPED.clone()),
        Box::new(REPLAYS.clone()),
        Box::new(CONNECTIONS_REFUSED.clone()),
        Box::new(RETRIES.clone()),
    ]
}
