//! The server side of a channel: accepts connections, runs the hello, keeps one connection per
//! peer (a newer one replaces the older), and hands each peer to the application.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use horizon_proto::{Channel, ErrorCode, Hello, Name};
use tokio::sync::mpsc;

use crate::conn::{Conn, Inbound, Replies, serve_inbound};
use crate::error::Error;
use crate::handshake::{self, Authenticator};
use crate::limits::Limits;
use crate::metrics::{Refusal, TransportStats};

/// A peer that completed its hello. A reconnection of the same peer arrives as a new `Peer`
/// (the previous connection is closed): that is the server side's cue to resynchronise.
#[derive(Debug)]
pub struct Peer<C: Channel> {
    pub conn: Conn<C>,
    /// What the peer initiates: requests, streams, datagrams.
    pub inbound: mpsc::Receiver<Inbound<C>>,
    pub hello: Hello,
    /// Who the client's credential proved it is (a signed token's subject), if it names one.
    pub identity: Option<Name>,
}

/// Accepts connections of channel `C` on one UDP socket.
#[derive(Debug)]
pub struct Listener<C: Channel> {
    endpoint: quinn::Endpoint,
    peers: mpsc::Receiver<Peer<C>>,
}

/// Who a connection is, for "one connection per peer": what its credential proved (a signed
/// token's subject: a player's account, a server's name), else the hello's `peer`, which a
/// site's certificate proves; on the gateway without a proved identity, where `peer` is the
/// client's own word, with the hello's `session` too (a random id the client keeps across its
/// reconnections), so that a client naming itself like another neither evicts it nor reads
/// its remembered replies.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum PeerKey {
    Proved(Name),
    Said { peer: Name, session: Option<u64> },
}

impl PeerKey {
    fn of<C: Channel>(hello: &Hello, identity: &Option<Name>) -> Self {
        if let Some(identity) = identity {
            return PeerKey::Proved(identity.clone());
        }
        let session = (C::ID == horizon_proto::ChannelId::Gateway).then_some(hello.session);
        PeerKey::Said { peer: hello.peer.clone(), session }
    }
}

#[derive(Default)]
struct PeerBook {
    current: HashMap<PeerKey, quinn::Connection>,
    replies: HashMap<PeerKey, Arc<Replies>>,
    order: VecDeque<PeerKey>,
}

impl<C: Channel> Listener<C> {
    /// Binds `addr` and starts accepting. `name` is what the welcome tells clients we are;
    /// what its connections see is counted in `stats` (the daemon's).
    pub fn bind(
        addr: SocketAddr,
        config: quinn::ServerConfig,
        name: Name,
        auth: Arc<dyn Authenticator>,
        limits: Limits,
        stats: TransportStats,
    ) -> Result<Self, Error> {
        let endpoint = crate::link::endpoint(addr, Some(config))?;
        let (tx, peers) = mpsc::channel(limits.inbound_queue);
        let limits = Arc::new(limits);
        tokio::spawn(accept_loop::<C>(endpoint.clone(), name, auth, limits, stats, tx));
        Ok(Listener { endpoint, peers })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.endpoint.local_addr().map_err(|e| Error::Setup(e.to_string()))
    }

    /// The next peer that completed its hello; `None` once the listener is closed.
    pub async fn accept(&mut self) -> Option<Peer<C>> {
        self.peers.recv().await
    }

    /// A handle to change its TLS settings while it runs (see [`ServerTls`]).
    pub fn tls(&self) -> ServerTls {
        ServerTls(self.endpoint.clone())
    }

    /// Closes every connection and stops accepting.
    pub fn close(&self, reason: &str) {
        self.endpoint
            .close(quinn::VarInt::from(ErrorCode::ShuttingDown.to_u16()), reason.as_bytes());
    }
}

/// Changes a listener's TLS settings (a reloaded certificate, key or CA) for the connections
/// that start from now on; connections already up keep theirs.
#[derive(Clone, Debug)]
pub struct ServerTls(quinn::Endpoint);

impl ServerTls {
    pub fn set(&self, config: quinn::ServerConfig) {
        self.0.set_server_config(Some(config));
    }
}

async fn accept_loop<C: Channel>(
    endpoint: quinn::Endpoint,
    name: Name,
    auth: Arc<dyn Authenticator>,
    limits: Arc<Limits>,
    stats: TransportStats,
    peers: mpsc::Sender<Peer<C>>,
) {
    let book = Arc::new(Mutex::new(PeerBook::default()));
    let ids = Arc::new(AtomicU64::new(fastrand::u64(..u64::MAX / 2)));
    let session = fastrand::u64(..);
    // Connections between arrival and their hello: bounded, so a flood of handshakes cannot
    // pile up tasks, and bounded per source address, so one source cannot take every slot.
    // A connection takes a slot only once it proved it owns its address (a QUIC retry: a
    // spoofed Initial costs us one stateless packet), and holds it at most the handshake
    // timeout, QUIC handshake and hello together.
    let pending = Arc::new(tokio::sync::Semaphore::new(limits.inbound_queue.max(1)));
    let sources: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    let per_source = limits.pending_per_source.max(1);
    while let Some(incoming) = endpoint.accept().await {
        let remote = incoming.remote_address();
        if !incoming.remote_address_validated() && incoming.may_retry() {
            stats.retried(C::ID);
            if let Err(e) = incoming.retry() {
                tracing::debug!(channel = C::ID.as_str(), %remote, error = %e, "retry not sent");
            }
            continue;
        }
        let Some(source) = SourceSlot::take(&sources, remote.ip(), per_source) else {
            stats.refused(C::ID, Refusal::PerSource);
            tracing::warn!(channel = C::ID.as_str(), %remote, "too many handshakes from this address, refused");
            incoming.refuse();
            continue;
        };
        let Ok(permit) = pending.clone().try_acquire_owned() else {
            stats.refused(C::ID, Refusal::PendingFull);
            tracing::warn!(channel = C::ID.as_str(), %remote, "too many pending connections, refused");
            incoming.refuse();
            continue;
        };
        let (name, auth, limits, peers, book, ids) =
            (name.clone(), auth.clone(), limits.clone(), peers.clone(), book.clone(), ids.clone());
        let stats = stats.clone();
        tokio::spawn(async move {
            // The QUIC handshake and the hello share one deadline.
            let deadline = tokio::time::Instant::now() + limits.handshake_timeout;
            let refused = |reason: Refusal, why: &dyn std::fmt::Display| {
                stats.refused(C::ID, reason);
                tracing::info!(channel = C::ID.as_str(), %remote, error = %why, "connection refused");
            };
            let quic = match tokio::time::timeout_at(deadline, incoming).await {
                Ok(Ok(quic)) => quic,
                Ok(Err(e)) => return refused(Refusal::HandshakeFailed, &e),
                // No QUIC connection to close with a code: dropping the attempt ends it.
                Err(_) => {
                    return refused(Refusal::HandshakeTimeout, &"QUIC handshake not done in time");
                }
            };
            let hello = handshake::server::<C>(
                quic.clone(),
                &name,
                session,
                auth.as_ref(),
                limits.clone(),
                ids,
                stats.clone(),
            );
            let (conn, hello, identity) = match tokio::time::timeout_at(deadline, hello).await {
                Ok(Ok(done)) => done,
                Ok(Err(e)) => return refused(Refusal::HelloRefused, &e),
                Err(_) => {
                    let why = format!("no hello within {:?}", limits.handshake_timeout);
                    quic.close(quinn::VarInt::from(ErrorCode::Timeout.to_u16()), why.as_bytes());
                    return refused(Refusal::HandshakeTimeout, &why);
                }
            };
            // A peer now: its source's slot goes to the next handshake from there (the pending
            // slot is held until the application takes the peer: bounded either way).
            drop(source);
            let key = PeerKey::of::<C>(&hello, &identity);
            let replies = {
                let mut book = book.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(old) = book.current.insert(key.clone(), quic.clone()) {
                    let reason = b"replaced by a newer connection from the same peer";
                    old.close(quinn::VarInt::from(ErrorCode::Conflict.to_u16()), reason);
                }
                remembered_replies(&mut book, &key, &limits)
            };
            tracing::info!(channel = C::ID.as_str(), peer = %hello.peer, version = conn.version(), "peer connected");
            let (tx, inbound) = mpsc::channel(limits.inbound_queue);
            serve_inbound(&conn, replies, tx);
            let peer_name = hello.peer.clone();
            if peers.send(Peer { conn: conn.clone(), inbound, hello, identity }).await.is_err() {
                conn.close(ErrorCode::ShuttingDown, "listener closed");
                return;
            }
            drop(permit);
            let why = conn.closed().await;
            tracing::info!(channel = C::ID.as_str(), peer = %peer_name, reason = %why, "peer disconnected");
            let mut book = book.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if book.current.get(&key).is_some_and(|c| c.stable_id() == quic.stable_id()) {
                book.current.remove(&key);
            }
        });
    }
}

/// One handshake's share of its source address's slots, given back when dropped.
struct SourceSlot {
    sources: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl SourceSlot {
    fn take(sources: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr, max: usize) -> Option<Self> {
        let mut map = sources.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(ip).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(SourceSlot { sources: sources.clone(), ip })
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut map = self.sources.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// The peer's reply memory, kept across its reconnections; the oldest peer is forgotten when
/// too many are remembered.
fn remembered_replies(book: &mut PeerBook, peer: &PeerKey, limits: &Limits) -> Arc<Replies> {
    if let Some(replies) = book.replies.get(peer) {
        return replies.clone();
    }
    while book.replies.len() >= limits.remembered_peers.max(1) {
        let Some(old) = book.order.pop_front() else { break };
        book.replies.remove(&old);
    }
    let replies = Replies::new(limits.remembered_replies);
    book.replies.insert(peer.clone(), replies.clone());
    book.order.push_back(peer.clone());
    replies
}
