//! What the agent's pieces share without depending on each other: the events that reach the
//! shell's loop (`agent.rs` runs it, `plumbing.rs` pumps connections into it, `credentials.rs`
//! forwards reloads to it), the bounded queue of an outbound stream, and why an agent could not
//! start.

use std::net::SocketAddr;
use std::sync::Arc;

use horizon_proto::control::Control;
use horizon_proto::gateway::{self, Gateway};
use horizon_proto::server::Server;
use horizon_proto::transfer::Transfer;
use horizon_proto::{Failure, HandoverId, Name, StateItem, Weigh};
use horizon_transport::credential;
use horizon_transport::reload::ReloadCause;
use horizon_transport::tls;
use horizon_transport::{Conn, Inbound, LinkEvent, Peer};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use crate::machine::{ConnId, Input};

/// Items queued per outbound stream (to a server, a player, a peer) and requests queued per
/// server lane. Beyond it, stream items are dropped (the next tick replaces an update, inputs
/// wait for their re-send) and requests are answered with an error.
pub(crate) const STREAM_QUEUE: usize = 2048;
/// The bytes queued per outbound stream, at most (with [`STREAM_QUEUE`]): a large bubble's
/// snapshot fits; a peer cannot make the agent hold gigabytes for a slow reader.
pub(crate) const STREAM_QUEUE_BYTES: usize = 64 << 20;

/// Why an agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("TLS material: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("transport: {0}")]
    Transport(#[from] horizon_transport::Error),
    #[error("site name {0:?}: {1}")]
    Name(String, horizon_proto::NameTooLong),
    #[error("admin API on {0}: {1}")]
    Admin(SocketAddr, std::io::Error),
    #[error("probe beacon (listen.beacon) on {0}: {1}")]
    Beacon(SocketAddr, std::io::Error),
    #[error("player keys: {0}")]
    Keys(#[from] credential::CredentialError),
    #[error("{}: not a certificate for site {site}: {why}", cert.display())]
    Certificate { cert: std::path::PathBuf, site: String, why: tls::TlsError },
}

/// Everything that reaches the loop.
pub(crate) enum Event {
    Core(LinkEvent<Control>),
    CoreInbound(Inbound<Control>),
    ServerUp(Peer<Server>),
    ServerInbound(Name, ConnId, Inbound<Server>),
    ServerItem(Name, StateItem),
    ServerGone(Name, ConnId),
    PlayerUp(Peer<Gateway>),
    PlayerInbound(ConnId, Inbound<Gateway>),
    PlayerItem(ConnId, gateway::Item),
    PlayerGone(ConnId),
    /// A transfer connection to another site: accepted (with its inbound) or dialed.
    PeerUp(Conn<Transfer>, Option<mpsc::Receiver<Inbound<Transfer>>>),
    PeerInbound(Name, Inbound<Transfer>),
    PeerItem(Name, StateItem),
    PeerGone(Name, ConnId),
    /// A handover stream was opened (or not).
    MirrorOpened(HandoverId, Result<Outbound<StateItem>, Failure>),
    /// A task's result, for the machine as it is.
    Machine(Input),
    /// Certificates or keys to read again.
    Reload(ReloadCause),
    /// An operator asked to drain a game server (the admin API): the answer goes back.
    DrainAsked(String, oneshot::Sender<Result<String, horizon_admin::Refused>>),
}

/// The queue of an outbound stream, bounded in items ([`STREAM_QUEUE`]) and in bytes
/// ([`STREAM_QUEUE_BYTES`], by each item's [`Weigh::weight`]): an item is held with its share
/// of the byte budget until the stream task has written it. Beyond either bound it is refused
/// at once (the caller's item is dropped: the next tick replaces an update, inputs wait for
/// their re-send, a handover that loses a chunk fails and is retried).
#[derive(Debug)]
pub(crate) struct Outbound<T> {
    tx: mpsc::Sender<(T, OwnedSemaphorePermit)>,
    bytes: Arc<Semaphore>,
}

impl<T> Clone for Outbound<T> {
    fn clone(&self) -> Self {
        Outbound { tx: self.tx.clone(), bytes: self.bytes.clone() }
    }
}

impl<T: Weigh> Outbound<T> {
    pub(crate) fn new() -> (Self, mpsc::Receiver<(T, OwnedSemaphorePermit)>) {
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        (Outbound { tx, bytes: Arc::new(Semaphore::new(STREAM_QUEUE_BYTES)) }, rx)
    }

    /// Queues `item`; `false` if a bound refused it or the stream is gone.
    pub(crate) fn try_send(&self, item: T) -> bool {
        // An item heavier than the whole budget takes all of it (and waits for an empty queue).
        let weight = item.weight().min(STREAM_QUEUE_BYTES) as u32;
        let Ok(permit) = self.bytes.clone().try_acquire_many_owned(weight) else { return false };
        self.tx.try_send((item, permit)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use horizon_proto::gateway::Item;
    use horizon_proto::{Blob, Seq};

    use super::*;

    fn input(bytes: usize) -> Item {
        Item::Input { seq: Seq(1), bytes: Blob(vec![0; bytes]) }
    }

    #[test]
    fn an_outbound_queue_is_bounded_in_bytes_and_in_items_and_frees_what_was_written() {
        let (queue, mut written) = Outbound::<Item>::new();
        // 1 MiB items: the 64 MiB budget holds 63 of them (each weighs a little more).
        let held = (0..100).take_while(|_| queue.try_send(input(1 << 20))).count();
        assert_eq!(held, 63);
        assert!(!queue.try_send(input(1 << 20)), "full in bytes");
        // Writing one gives its bytes back.
        drop(written.try_recv().expect("an item"));
        assert!(queue.try_send(input(1 << 20)));
        while written.try_recv().is_ok() {}
        // Tiny items: the count bound.
        let held = (0..3000).take_while(|_| queue.try_send(input(1))).count();
        assert_eq!(held, STREAM_QUEUE);
        // An item heavier than the whole budget waits for an empty queue.
        while written.try_recv().is_ok() {}
        assert!(queue.try_send(input(100 << 20)));
        assert!(!queue.try_send(input(1)), "it takes the whole budget");
    }
}
