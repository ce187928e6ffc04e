//! The client side of a channel: one connection to one peer, re-established as a whole when
//! it breaks (with backoff), and requests that survive the break by being retried under the
//! same id until their deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use horizon_proto::{Channel, ErrorCode};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::conn::{Conn, Inbound, Replies, serve_inbound};
use crate::error::Error;
use crate::handshake::{self, HelloParams};
use crate::limits::{Limits, MAX_UDP_PAYLOAD_BYTES};
use crate::metrics::TransportStats;

/// Where and how to connect.
#[derive(Debug)]
pub struct Dial {
    /// The local endpoint to connect from (one per process is enough).
    pub endpoint: quinn::Endpoint,
    /// The peer's addresses, each resolved at its connection attempt (a name may move). The
    /// attempts go round them in turn from the first: a peer that may answer at one of several
    /// addresses (a core and its standby) is reached at whichever serves.
    pub addrs: Vec<crate::Target>,
    /// The name the server's certificate must carry (see [`crate::site_dns_name`]).
    pub server_name: String,
    pub config: quinn::ClientConfig,
    pub hello: HelloParams,
    pub limits: Limits,
    /// The daemon's counters, which the link's connections add to (a fresh
    /// `TransportStats::default()` where nothing reads them).
    pub stats: TransportStats,
}

/// A change of the link's state. After every `Up`, the owner resynchronises its full state
/// with the peer (the resync hook of design.md §6).
#[derive(Debug)]
pub enum LinkEvent<C: Channel> {
    Up(Conn<C>),
    Down(Error),
    /// A connection attempt failed; the next one is in `wait`.
    Retry {
        error: Error,
        wait: Duration,
    },
}

/// The parts of a link: the handle for requests, its state changes, and what the peer sends
/// on its own initiative (over every successive connection).
#[derive(Debug)]
pub struct LinkParts<C: Channel> {
    pub link: Link<C>,
    pub events: mpsc::Receiver<LinkEvent<C>>,
    pub inbound: mpsc::Receiver<Inbound<C>>,
}

/// A self-healing connection to one peer. Cheap to clone; dropping every clone closes it.
#[derive(Debug)]
pub struct Link<C: Channel> {
    current: watch::Receiver<Option<Conn<C>>>,
    limits: Arc<Limits>,
    ids: Arc<AtomicU64>,
    tls: Arc<watch::Sender<quinn::ClientConfig>>,
    _stop: Arc<watch::Sender<bool>>,
}

impl<C: Channel> Clone for Link<C> {
    fn clone(&self) -> Self {
        Link {
            current: self.current.clone(),
            limits: self.limits.clone(),
            ids: self.ids.clone(),
            tls: self.tls.clone(),
            _stop: self._stop.clone(),
        }
    }
}

impl<C: Channel> Link<C> {
    /// Starts connecting in the background. The owner must keep reading `events` and
    /// `inbound` (both are bounded; a full queue pauses the link).
    pub fn connect(dial: Dial) -> LinkParts<C> {
        let limits = Arc::new(dial.limits.clone());
        let ids = Arc::new(AtomicU64::new(fastrand::u64(..u64::MAX / 2)));
        let (current_tx, current) = watch::channel(None);
        let (stop_tx, stop) = watch::channel(false);
        let (events_tx, events) = mpsc::channel(16);
        let (inbound_tx, inbound) = mpsc::channel(limits.inbound_queue);
        let (tls_tx, tls) = watch::channel(dial.config.clone());
        let supervisor = Supervisor {
            dial,
            tls,
            limits: limits.clone(),
            ids: ids.clone(),
            current: current_tx,
            events: events_tx,
            inbound: inbound_tx,
            stop,
        };
        tokio::spawn(supervisor.run());
        let tls = Arc::new(tls_tx);
        LinkParts {
            link: Link { current, limits, ids, tls, _stop: Arc::new(stop_tx) },
            events,
            inbound,
        }
    }

    /// Takes new TLS settings (a reloaded certificate, key or CA) for the connections made
    /// from now on; the one up keeps its own.
    pub fn set_tls(&self, config: quinn::ClientConfig) {
        self.tls.send_replace(config);
    }

    /// The connection right now, if up.
    pub fn current(&self) -> Option<Conn<C>> {
        self.current.borrow().clone()
    }

    /// Waits for a connection, at most `within`.
    pub async fn connected(&self, within: Duration) -> Result<Conn<C>, Error> {
        let mut current = self.current.clone();
        let found = tokio::time::timeout(within, current.wait_for(Option::is_some)).await;
        match found {
            Ok(Ok(conn)) => conn.clone().ok_or(Error::Shutdown),
            Ok(Err(_)) => Err(Error::Shutdown),
            Err(_) => Err(Error::Timeout { ms: within.as_millis() as u64 }),
        }
    }

    /// Sends a request and waits for its reply. If the connection breaks first, the request is
    /// sent again under the same id on the next connection (the peer answers a repeated id
    /// from memory), until the request timeout; then it fails with [`Error::Timeout`].
    pub async fn request(&self, body: &C::Request) -> Result<C::Reply, Error> {
        let id =
            horizon_proto::RequestId(self.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let timeout = self.limits.request_timeout;
        let deadline = Instant::now() + timeout;
        let timed_out = || Error::Timeout { ms: timeout.as_millis() as u64 };
        let mut current = self.current.clone();
        let mut failed_on: Option<u64> = None;
        loop {
            let wait = current.wait_for(|c| c.as_ref().is_some_and(|c| Some(c.id()) != failed_on));
            let conn = match tokio::time::timeout_at(deadline, wait).await {
                Ok(Ok(conn)) => conn.clone().ok_or(Error::Shutdown)?,
                Ok(Err(_)) => return Err(Error::Shutdown),
                Err(_) => return Err(timed_out()),
            };
            match tokio::time::timeout_at(deadline, conn.call(id, body)).await {
                Err(_) => return Err(timed_out()),
                Ok(Err(e)) if e.is_connection_lost() => {
                    tracing::debug!(channel = C::ID.as_str(), request = id.0, error = %e, "retrying on the next connection");
                    failed_on = Some(conn.id());
                }
                Ok(result) => return result,
            }
        }
    }
}

/// `not_leader` answers followed in a row before the given addresses are dialed again.
const MAX_REDIRECTS: u32 = 2;

struct Supervisor<C: Channel> {
    dial: Dial,
    /// The client config of the next connection ([`Link::set_tls`]); `dial.config` at first.
    tls: watch::Receiver<quinn::ClientConfig>,
    limits: Arc<Limits>,
    ids: Arc<AtomicU64>,
    current: watch::Sender<Option<Conn<C>>>,
    events: mpsc::Sender<LinkEvent<C>>,
    inbound: mpsc::Sender<Inbound<C>>,
    stop: watch::Receiver<bool>,
}

impl<C: Channel> Supervisor<C> {
    async fn run(self) {
        let replies = Replies::new(self.limits.remembered_replies);
        let mut backoff = self.limits.reconnect_min;
        let mut attempt = 0usize;
        // A core standing by names the leader (`not_leader`): dialed next, at once. Followed
        // at most `MAX_REDIRECTS` times in a row (two standbys naming each other, or a stale
        // name), then the given addresses again.
        let mut redirect: Option<crate::Target> = None;
        let mut redirects = 0;
        // The owner never sends: dropping the last `Link` closes the channel, which is the stop.
        let mut stop = self.stop.clone();
        loop {
            let Some(given) = self.dial.addrs.get(attempt % self.dial.addrs.len().max(1)) else {
                tracing::error!(channel = C::ID.as_str(), "a link with no address to dial");
                return;
            };
            let peer = redirect.take().unwrap_or_else(|| given.clone());
            let peer = &peer;
            let connected = tokio::select! {
                connected = self.connect_once(peer) => connected,
                _ = stop.changed() => return,
            };
            match connected {
                Ok(conn) => {
                    backoff = self.limits.reconnect_min;
                    redirects = 0;
                    serve_inbound(&conn, replies.clone(), self.inbound.clone());
                    self.current.send_replace(Some(conn.clone()));
                    if self.events.send(LinkEvent::Up(conn.clone())).await.is_err() {
                        conn.close(ErrorCode::ShuttingDown, "link dropped");
                        return;
                    }
                    let why = tokio::select! {
                        why = conn.closed() => why,
                        _ = stop.changed() => {
                            conn.close(ErrorCode::ShuttingDown, "link closed by its owner");
                            self.current.send_replace(None);
                            return;
                        }
                    };
                    self.current.send_replace(None);
                    tracing::info!(channel = C::ID.as_str(), %peer, reason = %why, "link down");
                    // With several addresses the next attempt tries another first: a peer gone
                    // silent has most likely left that address (a core that died, while its
                    // standby takes over at the next). With one, it is the same address.
                    attempt += 1;
                    if self.events.send(LinkEvent::Down(why)).await.is_err() {
                        return;
                    }
                }
                Err(Error::Refused(fault))
                    if redirects < MAX_REDIRECTS
                        && let Some(leader) =
                            fault.leader().and_then(|a| crate::Target::parse(a).ok()) =>
                {
                    tracing::info!(channel = C::ID.as_str(), %peer, %leader, "not the leader: dialing the leader it names");
                    redirects += 1;
                    redirect = Some(leader);
                }
                Err(error) => {
                    redirects = 0;
                    attempt += 1;
                    // Jitter keeps many agents from reconnecting in lockstep.
                    let wait = backoff.mul_f64(0.5 + fastrand::f64() / 2.0);
                    backoff = (backoff * 2).min(self.limits.reconnect_max);
                    tracing::info!(channel = C::ID.as_str(), %peer, error = %error, wait_ms = wait.as_millis() as u64, "connect failed");
                    if self.events.send(LinkEvent::Retry { error, wait }).await.is_err() {
                        return;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
        }
    }

    async fn connect_once(&self, peer: &crate::Target) -> Result<Conn<C>, Error> {
        let dial = &self.dial;
        let fail = |why: String| Error::Connect { addr: peer.to_string(), why };
        let ipv4 = dial.endpoint.local_addr().map_or(true, |a| a.is_ipv4());
        let addr = crate::target::resolve(peer, ipv4).await.map_err(fail)?;
        let connecting = dial
            .endpoint
            .connect_with(self.tls.borrow().clone(), addr, &dial.server_name)
            .map_err(|e| fail(e.to_string()))?;
        let quic = match tokio::time::timeout(self.limits.handshake_timeout, connecting).await {
            Ok(Ok(quic)) => quic,
            Ok(Err(e)) => return Err(fail(e.to_string())),
            Err(_) => return Err(fail("handshake timed out".to_owned())),
        };
        handshake::client::<C>(
            quic,
            &dial.hello,
            self.limits.clone(),
            self.ids.clone(),
            dial.stats.clone(),
        )
        .await
    }
}

/// A client endpoint on an ephemeral port of `ip` (e.g. `127.0.0.1` or `0.0.0.0`).
pub fn client_endpoint(ip: std::net::IpAddr) -> Result<quinn::Endpoint, Error> {
    endpoint(SocketAddr::new(ip, 0), None)
}

/// Socket buffer asked of the kernel for every endpoint, each direction.
const UDP_BUFFER_BYTES: usize = 4 << 20;

/// An endpoint on `addr` with socket buffers sized for bulk state transfer.
pub(crate) fn endpoint(
    addr: SocketAddr,
    server: Option<quinn::ServerConfig>,
) -> Result<quinn::Endpoint, Error> {
    let fail = |e: &dyn std::fmt::Display| Error::Setup(format!("endpoint on {addr}: {e}"));
    let mut config = quinn::EndpointConfig::default();
    config
        .max_udp_payload_size(MAX_UDP_PAYLOAD_BYTES)
        .map_err(|e| fail(&format!("max UDP payload: {e}")))?;
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .map_err(|e| fail(&e))?;
    // Room for bursts of large packets: the kernel's default (~200 KiB) overflows at a few
    // hundred MB/s, and those drops look like congestion. Best effort: the kernel caps it.
    let _ = socket.set_recv_buffer_size(UDP_BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(UDP_BUFFER_BYTES);
    socket.bind(&addr.into()).map_err(|e| fail(&e))?;
    let socket: std::net::UdpSocket = socket.into();
    quinn::Endpoint::new(config, server, socket, Arc::new(quinn::TokioRuntime))
        .map_err(|e| fail(&e))
}
