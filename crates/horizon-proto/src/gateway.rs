//! player ↔ agent: the gateway. A player connects once to their home site's agent (the lowest
//! RTT at connection) and stays connected whichever site simulates them; handovers re-route
//! behind the gateway without a reconnection. The agent measures the player's RTT itself.

use serde::{Deserialize, Serialize};

use crate::channel::{Channel, kinds};
use crate::frame::ChannelId;
use crate::types::{Blob, BubbleId, Name, PlayerId, Role, Seq, Tick, Vec3, WorldId};

/// The gateway channel's types.
#[derive(Debug)]
pub enum Gateway {}

impl Channel for Gateway {
    const ID: ChannelId = ChannelId::Gateway;
    type Request = Request;
    type Reply = Reply;
    type Stream = Item;
    type Datagram = Datagram;
}

/// A player's request to their gateway.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Enter the universe (after the hello authenticated the player's token).
    Join { role: Role, world: WorldId, pos: Vec3 },
    /// Change role (e.g. take a ship's controls).
    SetRole { role: Role },
    /// Leave the universe; the connection may close after the reply.
    Leave,
    /// `Join`, with the round trips the client measured to every site's beacon before it
    /// chose this gateway (section 7.6), at most [`MAX_PROBED_SITES`]. The gateway checks the
    /// table against the RTT it measures itself; placement never reads it (design.md §2).
    JoinMeasured { role: Role, world: WorldId, pos: Vec3, probes: Vec<SiteProbe> },
    /// Resume the session `credential` names (the `resume` of an earlier `Joined` or
    /// `Credential` of this site), on a new connection: after the gateway or its agent
    /// restarted, or from another gateway of the same site. Answered with `Joined` (the same
    /// player, the seq to send from) or refused (`unauthorized`: forged, expired, another
    /// site's, another account's, or the player left; `not_ready`: the site is starting).
    Resume { credential: String },
    /// A fresh resumption credential for this session (the one a `Joined` gave expires: ask
    /// again within its lifetime, docs/protocol.md).
    Credential,
}

kinds!(Request {
    Join => "join",
    SetRole => "set_role",
    Leave => "leave",
    JoinMeasured => "join_measured",
    Resume => "resume",
    Credential => "credential",
});

/// Sites in one probe table, at most: a longer table is refused as malformed.
pub const MAX_PROBED_SITES: usize = 32;

/// One site's round trip as a client measured it on the site's probe beacon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteProbe {
    pub site: Name,
    /// Pings sent to the site's beacon, and pongs back within their timeout.
    pub sent: u8,
    pub answered: u8,
    /// The median of the answered round trips, in microseconds (0 when none answered).
    pub median_us: u32,
}

/// The gateway's reply to a player.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Done,
    /// To `Join` and `Resume`: this site is the player's home for the session. `resume_after`
    /// is the next input seq the player should send (1 for a new session): every input from
    /// it that the client still has goes again, and each is applied once. `resume` is the
    /// session's resumption credential (empty if this gateway cannot sign one).
    Joined {
        player: PlayerId,
        home: Name,
        resume_after: Seq,
        resume: String,
    },
    /// To `Credential`: a fresh resumption credential for the session of `player`.
    Credential {
        player: PlayerId,
        resume: String,
    },
}

kinds!(Reply {
    Done => "done",
    Joined => "joined",
    Credential => "credential",
});

/// Items of the gateway's streams.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    /// player → gateway: one input. `seq` starts at 1 and grows by one; a retried input keeps
    /// its seq and is applied once.
    Input { seq: Seq, bytes: Blob },
    /// gateway → player: the state after `tick` of the bubble simulating the player, with the
    /// highest input seq it reflects.
    Update { bubble: BubbleId, tick: Tick, acked: Seq, bytes: Blob },
    /// gateway → player: the simulation is unreachable for now (a relay lost the core); keep the
    /// connection, resume when updates come back.
    Reconnecting { reason: String },
    /// gateway → player: the player's own state right after the game applied input `seq`,
    /// ahead of the next `Update` (sent only by games that compute it). Show it at once; it
    /// acknowledges nothing: inputs are kept until an `Update` acknowledges them.
    Own { bubble: BubbleId, tick: Tick, seq: Seq, bytes: Blob },
}

impl crate::channel::Weigh for Item {
    fn weight(&self) -> usize {
        crate::channel::FIELDS_WEIGHT
            + match self {
                Item::Input { bytes, .. }
                | Item::Update { bytes, .. }
                | Item::Own { bytes, .. } => bytes.0.len(),
                Item::Reconnecting { reason } => reason.len(),
            }
    }
}

kinds!(Item {
    Input => "input",
    Update => "update",
    Reconnecting => "reconnecting",
    Own => "own",
});

/// Unreliable traffic between a player and the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Datagram {
    /// player → gateway: the player's own position as soon as the client computed it, ahead of
    /// the next input batch. Older `seq`s than the newest seen are dropped.
    Position {
        seq: u32,
        world: WorldId,
        pos: Vec3,
        vel: Vec3,
    },
    /// Either way: an echo request, timestamped by the sender's clock.
    Ping {
        nonce: u64,
        sent_us: u64,
    },
    Pong {
        nonce: u64,
        sent_us: u64,
    },
}

kinds!(Datagram {
    Position => "position",
    Ping => "ping",
    Pong => "pong",
});
