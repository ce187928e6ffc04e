//! How connections' traffic reaches the agent's loop and leaves it, beyond what every shell
//! shares (`horizon_transport::plumbing`: accept loops, pumps, stream forwarders): tasks owning
//! outbound streams, a game server's ordered request lane, the core link's pump. No logic:
//! bytes and events.

use horizon_proto::Name;
use horizon_proto::control::Control;
use horizon_proto::server::{self, Server};
use horizon_transport::{Conn, Inbound, LinkEvent, StreamSender};
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
