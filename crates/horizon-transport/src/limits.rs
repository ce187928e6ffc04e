//! Every bound of the transport in one place. Nothing grows without a limit: streams, frames,
//! queues, remembered replies, waiting time.

use std::time::Duration;

use horizon_proto::{MAX_DATAGRAM_BYTES, MAX_FRAME_BYTES};

/// The largest UDP payload path MTU discovery tries, and the largest an endpoint accepts.
///
/// WAN paths stop at Ethernet's 1452 (discovery settles there); loopback, and links with jumbo
/// frames, carry more, and fewer larger packets move bulk state with less work per byte (about
/// 2.5× the throughput of 1452 on loopback, docs/performance.md). The bound keeps segmentation
/// offload working: quinn sends up to 10 packets per system call and the kernel refuses a batch
/// over 64 KiB, which quinn then counts as lost packets, and enough of those trip its black-hole
/// detection back to 1200 bytes. 10 × 6500 stays under.
pub const MAX_UDP_PAYLOAD_BYTES: u16 = 6500;

/// Limits of one endpoint. The defaults suit the control and transfer channels.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest frame payload accepted on a stream or request.
    pub max_frame_bytes: usize,
    /// Largest datagram accepted (header included).
    pub max_datagram_bytes: usize,
    /// Requests a peer may have open at once (QUIC bidirectional stream credit). A peer over
    /// it waits for credit: back-pressure, not buffering.
    pub max_concurrent_requests: u32,
    /// Long-lived streams a peer may have open at once.
    pub max_concurrent_streams: u32,
    /// Inbound requests and streams queued for the application before the transport stops
    /// reading more (back-pressure again); also a listener's connections in their handshake.
    pub inbound_queue: usize,
    /// A listener's connections in their handshake from one source address.
    pub pending_per_source: usize,
    /// Inbound datagrams queued for the application; beyond it they are dropped and counted
    /// (they are unreliable anyway).
    pub datagram_queue: usize,
    /// Replies remembered per peer to answer a retried request id without running it twice.
    pub remembered_replies: usize,
    /// Peers whose replies are remembered by a listener (oldest forgotten first).
    pub remembered_peers: usize,
    /// How long a request may wait for its reply, reconnections included.
    pub request_timeout: Duration,
    /// How long the QUIC handshake and the hello may take, together.
    pub handshake_timeout: Duration,
    /// A connection silent this long is dead.
    pub idle_timeout: Duration,
    /// Keep-alive pings, so idle links are not mistaken for dead ones.
    pub keep_alive: Duration,
    /// Reconnection backoff: first wait and ceiling (doubling, with jitter).
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
    /// Flow-control window per stream and per connection (bytes in flight before the receiver
    /// must read).
    pub stream_window_bytes: u32,
    pub connection_window_bytes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: MAX_FRAME_BYTES,
            max_datagram_bytes: MAX_DATAGRAM_BYTES,
            max_concurrent_requests: 256,
            max_concurrent_streams: 64,
            inbound_queue: 256,
            pending_per_source: 32,
            datagram_queue: 1024,
            remembered_replies: 4096,
            remembered_peers: 1024,
            request_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(10),
            keep_alive: Duration::from_secs(2),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            stream_window_bytes: 8 << 20,
            connection_window_bytes: 32 << 20,
        }
    }
}

/// An agent's link to the core: silent [`Limits::control`]'s idle timeout, it is dead.
const CONTROL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

impl Limits {
    /// The limits of an agent's link to the core (the client's side decides: QUIC takes the
    /// smaller idle timeout of the two). A core that died must be noticed well within a standby's
    /// takeover (SPEC §6: the next core grants within 10 s of the death), so the link is dead
    /// after [`CONTROL_IDLE_TIMEOUT`] of silence (pinged every second: four in a row lost, or a
    /// 4 s stall), and a handshake that gets no answer in 2 s gives way to the next address (a
    /// standby binds its port only once it leads: until then it answers nothing). The backbone's
    /// longest round trip (225 ms) leaves a handshake 8 round trips.
    pub fn control() -> Limits {
        Limits {
            idle_timeout: CONTROL_IDLE_TIMEOUT,
            keep_alive: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(2),
            ..Limits::default()
        }
    }

    /// The quinn transport config these limits imply.
    pub fn transport_config(&self) -> quinn::TransportConfig {
        let mut config = quinn::TransportConfig::default();
        config
            .max_concurrent_bidi_streams(self.max_concurrent_requests.into())
            .max_concurrent_uni_streams(self.max_concurrent_streams.into())
            .keep_alive_interval(Some(self.keep_alive))
            .stream_receive_window(self.stream_window_bytes.into())
            .receive_window(self.connection_window_bytes.into())
            .send_window(u64::from(self.connection_window_bytes))
            .datagram_receive_buffer_size(Some(self.datagram_queue * self.max_datagram_bytes))
            .datagram_send_buffer_size(self.datagram_queue * self.max_datagram_bytes);
        let mut mtu = quinn::MtuDiscoveryConfig::default();
        mtu.upper_bound(MAX_UDP_PAYLOAD_BYTES);
        config.mtu_discovery_config(Some(mtu));
        // The idle timeout is at most 2^62 ms; ours are seconds.
        if let Ok(idle) = quinn::IdleTimeout::try_from(self.idle_timeout) {
            config.max_idle_timeout(Some(idle));
        }
        config
    }
}
