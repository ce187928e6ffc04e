//! How connections' traffic reaches the agent's loop and leaves it: pumps from each
//! connection's inbound queue into the loop's one queue, tasks owning outbound streams, a game
//! server's ordered request lane, the listeners' accept loops. No logic: bytes and events.

use horizon_proto::Name;
use horizon_proto::control::Control;
use horizon_proto::server::{self, Server};
use horizon_transport::{Conn, Inbound, LinkEvent, Listener, Peer, StreamReceiver, StreamSender};
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use crate::events::{Event, Outbound, STREAM_QUEUE};
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
            let result = conn.request(&request).await.map_err(horizon_proto::Failure::from);
            let input = Input::ServerReplied { server: server.clone(), pending, result };
            if events.send(Event::Machine(input)).await.is_err() {
                break;
            }
        }
    });
    tx
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
