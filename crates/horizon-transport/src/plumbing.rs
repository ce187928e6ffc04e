//! How a daemon's connections reach its one event loop, the same for every shell (the core's
//! and an agent's): an accept loop per listener, a pump per connection from its inbound queue,
//! a forwarder per inbound stream. Each wraps what it carries into the shell's own event type
//! `E` and stops when the loop's queue closes. No logic: bytes and events.

use std::future::Future;

use horizon_proto::Channel;
use tokio::sync::mpsc;

use crate::{Inbound, Listener, Peer, StreamReceiver};

/// Hands each proved peer of `listener` to the loop as `wrap(peer)`, until the loop's queue
/// closes or `stop` resolves; then closes the listener with `why` (its port is free again).
pub fn accept_loop<C: Channel, E: Send + 'static>(
    mut listener: Listener<C>,
    events: mpsc::Sender<E>,
    wrap: impl Fn(Peer<C>) -> E + Send + 'static,
    stop: impl Future<Output = ()> + Send + 'static,
    why: &'static str,
) {
    tokio::spawn(async move {
        tokio::pin!(stop);
        loop {
            let peer = tokio::select! {
                peer = listener.accept() => peer,
                _ = events.closed() => break,
                _ = &mut stop => break,
            };
            let Some(peer) = peer else { break };
            if events.send(wrap(peer)).await.is_err() {
                break;
            }
        }
        listener.close(why);
    });
}

/// Forwards one stream's items into the loop, each wrapped by `wrap`, until it ends.
pub fn forward_stream<C: Channel, E: Send + 'static>(
    mut rx: StreamReceiver<C>,
    events: mpsc::Sender<E>,
    wrap: impl Fn(C::Stream) -> E + Send + 'static,
) where
    C::Stream: Send,
{
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
pub fn pump<C: Channel, E: Send + 'static>(
    mut inbound: mpsc::Receiver<Inbound<C>>,
    events: mpsc::Sender<E>,
    item: impl Fn(C::Stream) -> E + Clone + Send + 'static,
    other: impl Fn(Inbound<C>) -> E + Send + 'static,
    gone: E,
) where
    C::Stream: Send,
{
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
