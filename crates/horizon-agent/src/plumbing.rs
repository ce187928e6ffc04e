//! How connections' traffic reaches the agent's loop and leaves it: pumps from each
//! connection's inbound queue into the loop's one queue, tasks owning outbound streams, a game
//! server's ordered request lane, the listeners' accept loops. No logic: bytes and events.

use std::sync::Arc;

use horizon_proto::control::Control;
use horizon_proto::server::{self, Server};
use horizon_proto::{Name, Weigh};
use horizon_transport::{Conn, Inbound, LinkEvent, Listener, Peer, StreamReceiver, StreamSender};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::agent::{Event, STREAM_QUEUE, STREAM_QUEUE_BYTES};
use crate::machine::{Input, Pending};

pub(crate) fn rtt_ms<C: horizon_proto::Channel>(conn: &Conn<C>) -> f32 {
    conn.stats().rtt.as_secs_f32() * 1000.0
}

/// A game server's request lane: one request at a time, in order, each answer fed back.
/// Requests still queued when the connection ends are answered with its error.
pub(crate) fn server_lane(
    conn: Conn<Server>,
    server: Name,
    events: mpsc::Sender<Event>,
) -> mpsc::Sender<(Pending, server::Request)> {
    let (tx, mut rx) = mpsc::channel::<(Pending, server::Request)>(STREAM_QUEUE);
    tokio::spawn(async move {
        while let Some((pending, request)) = rx.recv().await {
            let result = conn.request(&request).await.map_err(|e| e.to_string());
            let input = Input::ServerReplied { server: server.clone(), pending, result };
            if events.send(Event::Machine(input)).await.is_err() {
                break;
            }
        }
    });
    tx
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
    fn new() -> (Self, mpsc::Receiver<(T, OwnedSemaphorePermit)>) {
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

/// A task that owns an outbound stream; the returned queue feeds it.
pub(crate) fn stream_task<C: horizon_proto::Channel>(sender: StreamSender<C>) -> Outbound<C::Stream>
where
    C::Stream: Send + 'static,
{
    let (tx, rx) = Outbound::new();
    tokio::spawn(feed(sender, rx));
    tx
}

/// Opens a stream on `conn` in the background and feeds it from the returned queue.
pub(crate) fn open_stream_task<C: horizon_proto::Channel>(conn: Conn<C>) -> Outbound<C::Stream>
where
    C::Stream: Send + 'static,
{
    let (tx, rx) = Outbound::new();
    tokio::spawn(async move {
        if let Ok(sender) = conn.open_stream().await {
            feed(sender, rx).await;
        }
    });
    tx
}

async fn feed<C: horizon_proto::Channel>(
    mut sender: StreamSender<C>,
    mut rx: mpsc::Receiver<(C::Stream, OwnedSemaphorePermit)>,
) {
    // Each item's share of the byte budget is given back once it is written.
    while let Some((item, _bytes)) = rx.recv().await {
        match sender.send(&item).await {
            Ok(()) => {}
            // One item over a limit is dropped, not the stream: everything else on it goes on.
            Err(horizon_transport::Error::Encode(e)) => {
                tracing::error!(channel = C::ID.as_str(), error = %e, "a stream item not sent");
            }
            Err(_) => break,
        }
    }
}

/// Forwards one stream's items into the loop, each wrapped by `wrap`, until it ends.
pub(crate) fn forward_stream<C: horizon_proto::Channel>(
    mut rx: StreamReceiver<C>,
    events: mpsc::Sender<Event>,
    wrap: impl Fn(C::Stream) -> Event + Send + 'static,
) {
    tokio::spawn(async move {
        while let Ok(Some(item)) = rx.next().await {
            if events.send(wrap(item)).await.is_err() {
                break;
            }
        }
    });
}

/// Forwards a connection's inbound traffic into the loop — its streams' items through `item`,
/// requests and datagrams through `other` — then `gone` once the connection has ended.
pub(crate) fn pump<C: horizon_proto::Channel>(
    mut inbound: mpsc::Receiver<Inbound<C>>,
    events: mpsc::Sender<Event>,
    item: impl Fn(C::Stream) -> Event + Clone + Send + 'static,
    other: impl Fn(Inbound<C>) -> Event + Send + 'static,
    gone: Event,
) {
    tokio::spawn(async move {
        while let Some(i) = inbound.recv().await {
            match i {
                Inbound::Stream(rx) => forward_stream(rx, events.clone(), item.clone()),
                i => {
                    if events.send(other(i)).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = events.send(gone).await;
    });
}

pub(crate) fn pump_link(
    mut link_events: mpsc::Receiver<LinkEvent<Control>>,
    mut inbound: mpsc::Receiver<Inbound<Control>>,
    events: mpsc::Sender<Event>,
) {
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                e = link_events.recv() => match e { Some(e) => Event::Core(e), None => break },
                i = inbound.recv() => match i { Some(i) => Event::CoreInbound(i), None => break },
            };
            if events.send(event).await.is_err() {
                break;
            }
        }
    });
}

pub(crate) fn accept_loop<C: horizon_proto::Channel>(
    mut listener: Listener<C>,
    events: mpsc::Sender<Event>,
    wrap: impl Fn(Peer<C>) -> Event + Send + 'static,
) {
    tokio::spawn(async move {
        loop {
            // The loop's end (a shutdown, or a crash in a drill) ends the listener at once.
            let peer = tokio::select! {
                peer = listener.accept() => peer,
                _ = events.closed() => break,
            };
            let Some(peer) = peer else { break };
            if events.send(wrap(peer)).await.is_err() {
                break;
            }
        }
        listener.close("agent stopping");
    });
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
