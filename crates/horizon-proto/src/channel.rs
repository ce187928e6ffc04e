//! What every channel shares: the hello, request/reply envelopes, and the [`Channel`] trait that
//! ties a channel's four message types together for the transport.

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::Fault;
use crate::frame::ChannelId;
use crate::types::{Name, RequestId};

/// A message type of one channel.
pub trait Message: Serialize + DeserializeOwned + Debug + Send + Sync + 'static {
    /// A short stable name of the variant (`"register"`), for logs, metrics and fixtures.
    fn kind(&self) -> &'static str;
}

/// What an item costs a queue that holds it: an upper estimate of its encoded size in bytes
/// (its blobs, plus a fixed allowance for its fields and each list entry), cheap to compute,
/// for byte budgets on queues whose items a peer sizes.
pub trait Weigh {
    fn weight(&self) -> usize;
}

/// The allowance for an item's fixed fields, and for each entry of a list in it.
pub(crate) const FIELDS_WEIGHT: usize = 64;
pub(crate) const ENTRY_WEIGHT: usize = 24;

/// One channel: which ALPN/header byte it uses and what travels on it.
pub trait Channel: Debug + Send + Sync + 'static {
    const ID: ChannelId;
    /// Sent on a fresh bidirectional stream, answered by one [`Channel::Reply`].
    type Request: Message;
    type Reply: Message;
    /// Items of long-lived unidirectional streams (state transfer, inputs, updates).
    type Stream: Message + Weigh;
    /// Unreliable QUIC datagrams (probes, positions, pings).
    type Datagram: Message;
}

/// The first frame a client sends, on the connection's first bidirectional stream. Its layout
/// is frozen for every protocol version, so any two builds can at least agree to disagree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Oldest protocol version the client speaks.
    pub min_version: u8,
    /// Newest protocol version the client speaks.
    pub max_version: u8,
    /// Who the client says it is: a site name (control, transfer; must match its certificate),
    /// a server name (server channel), or a player id in decimal (gateway).
    pub peer: Name,
    /// Game servers and players authenticate with a token; sites with their certificate.
    pub token: Option<String>,
    /// Random per client process: a new value tells the server the client restarted.
    pub session: u64,
}

/// The server's answer to a [`Hello`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Welcome {
    /// Version is the highest both sides speak; every later frame carries it.
    Accepted { version: u8, peer: Name, session: u64 },
    /// The connection is closed with this code right after.
    Refused(Fault),
}

/// A request on its own bidirectional stream. A retry reuses the id; the server answers a
/// repeated id from its memory of recent replies instead of running the request again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestFrame<R> {
    pub id: RequestId,
    pub body: R,
}

/// The one reply on a request's stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplyFrame<P> {
    pub id: RequestId,
    pub result: Result<P, Fault>,
}

/// The ways a connection can be used, for channels that use fewer than four.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Never {}

impl Message for Never {
    fn kind(&self) -> &'static str {
        match *self {}
    }
}

/// Implements [`Message::kind`] from a list of `Variant => "name"`.
macro_rules! kinds {
    ($ty:ident { $($variant:ident => $name:literal),* $(,)? }) => {
        impl $crate::channel::Message for $ty {
            fn kind(&self) -> &'static str {
                match self {
                    $($ty::$variant { .. } => $name,)*
                }
            }
        }
        impl $ty {
            /// Every variant's name, in wire order.
            pub const KINDS: &'static [&'static str] = &[$($name),*];
        }
    };
}
pub(crate) use kinds;
