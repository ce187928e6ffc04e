//! agent ↔ agent: state transfer for handovers and border crossings, inputs forwarded from a
//! player's home gateway to the site that simulates them, updates back, and backbone probes.
//! Mutual TLS with site certificates; one connection per pair of sites, opened by either.

use serde::{Deserialize, Serialize};

use crate::channel::{Channel, kinds};
use crate::frame::ChannelId;
use crate::state::StateItem;
use crate::types::{Blob, BubbleId, Epoch, HandoverId, Name, PlayerId, Seq};

/// The transfer channel's types.
#[derive(Debug)]
pub enum Transfer {}

impl Channel for Transfer {
    const ID: ChannelId = ChannelId::Transfer;
    type Request = Request;
    type Reply = Reply;
    type Stream = StateItem;
    type Datagram = Probe;
}

/// A request between agents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// source → target: the stream that follows carries this handover's snapshot, deltas and
    /// seal. The target checks `epoch` against its pre-authorisation from the core.
    Open { handover: HandoverId, bubble: BubbleId, epoch: Epoch },
    /// A player crosses from a bubble simulated at the sender into one simulated at the
    /// receiver: the player's state and the last input applied.
    Cross {
        player: PlayerId,
        from: BubbleId,
        to: BubbleId,
        /// The epoch the receiver holds `to` under (fencing).
        epoch: Epoch,
        last_applied: Seq,
        state: Blob,
    },
    /// A request for `to` handed to a site on the way (the direct link between `from` and
    /// `to` is down or much slower than going round): the receiver, if it is not `to`, passes
    /// it on over its own route and answers with `to`'s answer. `hops` counts the sites it
    /// went through; a relay refuses (`not_ready`) one past [`MAX_HOPS`] or with no route. A
    /// relayed request is never itself a `Relay` inside.
    Relay { from: Name, to: Name, hops: u8, request: Box<Request> },
}

/// The most sites a relayed request or item goes through before it is dropped.
pub const MAX_HOPS: u8 = 3;

kinds!(Request {
    Open => "open",
    Cross => "cross",
    Relay => "relay",
});

/// A reply between agents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Done,
    /// To `Open`: send from this tick (the target already has everything before it).
    Accepted {
        from_tick: crate::types::Tick,
    },
}

kinds!(Reply {
    Done => "done",
    Accepted => "accepted",
});

/// Backbone RTT probes, as datagrams. The prober timestamps with its own clock; the echo
/// returns it untouched, so clocks never need to agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Probe {
    Ping { seq: u32, sent_us: u64 },
    Echo { seq: u32, sent_us: u64 },
}

kinds!(Probe {
    Ping => "ping",
    Echo => "echo",
});
