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
    }
    vec![Box::new(DATAGRAMS_DROPPED.clone()), Box::new(REPLAYS.clone())]
}
