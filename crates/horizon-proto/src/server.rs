//! agent ↔ game server: the QUIC agent protocol Godot servers speak. The game server dials its
//! site's agent and authenticates with a token in the hello. A server simulates a region only
//! while it holds a valid lease for it, and stamps everything it writes with the lease's epoch.

use serde::{Deserialize, Serialize};

use crate::channel::{Channel, Never, kinds};
use crate::frame::ChannelId;
use crate::state::StateItem;
use crate::types::{
    Aabb, Blob, BubbleId, Epoch, Lease, LeaseRef, Name, PlayerId, Region, Seq, Tick, Vec3,
};

/// The server channel's types.
#[derive(Debug)]
pub enum Server {}

impl Channel for Server {
    const ID: ChannelId = ChannelId::Server;
    type Request = Request;
    type Reply = Reply;
    type Stream = StateItem;
    type Datagram = Never;
}

/// A request between an agent and one of its game servers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// server → agent, first request: who it is and how much it can take.
    Register { server: Name, build: Name, max_players: u32 },
    /// server → agent: loaded and able to take a region (tps ≥ 58, no chunk loading).
    Ready,
    /// server → agent, once per second: health and load.
    Load { tps: f32, players: u32, chunks_loading: u32 },
    /// agent → server: simulate `region` as bubble `lease.bubble` under `lease`, from the
    /// snapshot that follows on a stream (`from_snapshot`) or from an empty region.
    Assign { lease: Lease, region: Region, from_snapshot: bool },
    /// agent → server: batched renewal; the server counts `ttl_ms` from when it receives it
    /// minus `sent_ago_ms`, i.e. from the agent's own renewal send time.
    Renew { leases: Vec<LeaseRef>, ttl_ms: u32, sent_ago_ms: u32 },
    /// agent → server: the bubble's border moved.
    Resize { lease: LeaseRef, region: Region },
    /// agent → server: stop at the next tick and seal (the seal follows on the stream).
    Freeze { lease: LeaseRef },
    /// agent → server: stop simulating now, no seal (revoked or expired).
    Release { lease: LeaseRef },
    /// agent → server: a player enters the bubble with this state (empty for a new player).
    Join { lease: LeaseRef, player: PlayerId, last_applied: Seq, state: Blob },
    /// agent → server: a player leaves the bubble; the reply carries their state.
    Leave { lease: LeaseRef, player: PlayerId },
    /// agent → server: send the bubble's full state on the stream now (a `Snapshot`), then,
    /// with `deltas`, every tick's `Delta` until the freeze or release (handover prepare);
    /// without, a single copy (universe backup).
    Copy { lease: LeaseRef, deltas: bool },
    /// agent → server: keep simulating the region held as `old`, state untouched, under
    /// `lease` (same bubble, newer epoch), valid `lease.ttl_ms` from receipt; `old` is no longer
    /// renewed. Refused for a sealed region.
    Regrant { old: LeaseRef, lease: Lease },
    /// server → agent, at most once per `Load` period for each region running under `lease`:
    /// where the game put each of its players (the authoritative positions placement uses;
    /// what clients claim is never used). A player the game has not entered into the world yet
    /// is left out. At most [`MAX_POSITIONS`] players; the agent refuses a larger report.
    Positions { lease: LeaseRef, players: Vec<PlayerPosition> },
    /// agent → server: simulate `region` as bubble `lease.bubble` under `lease` from an empty
    /// state, as `Assign` without a snapshot does, but counting ticks on from `tick` (its
    /// first step is `tick + 1`): a region moved whole from another server of the site, whose
    /// players follow by `Join`. Its ticks stay after the old server's, so that (epoch, tick)
    /// still names one state of the region.
    Continue { lease: Lease, region: Region, tick: Tick },
    /// agent → server, for a zone it runs under `lease`: the bubbles carved out of its box
    /// (their boxes, at most [`MAX_HOLES`]), simulated elsewhere: the zone's server must not
    /// write inside them (design.md §4). The whole list each time it changes, and again under
    /// each new epoch; none at first.
    Carve { lease: LeaseRef, holes: Vec<Aabb> },
    /// server → agent: it is stopping (SIGTERM: a pod deleted, a node drained, a scale-in).
    /// The agent takes no region to it from now on and moves every region it holds to another
    /// ready server of the site with its whole state (the fenced path an overfull server gives
    /// regions away by: snapshot, deltas, seal), releasing each from it as it lands. Answered
    /// at once; the server simulates what it still holds until each is released, then exits.
    /// What it still holds when it goes is lost, and restored from its copy as after a crash.
    Drain,
}

/// The most holes one `Carve` may list (a zone holding more bubbles is told these).
pub const MAX_HOLES: usize = 4096;

/// The most players one `Positions` report may list (a region holds far fewer).
pub const MAX_POSITIONS: usize = 8192;

/// One player's place in their region's world, as the game server computed it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlayerPosition {
    pub player: PlayerId,
    /// Metres, in the world's frame.
    pub pos: Vec3,
    /// Metres per second.
    pub vel: Vec3,
}

kinds!(Request {
    Register => "register",
    Ready => "ready",
    Load => "load",
    Assign => "assign",
    Renew => "renew",
    Resize => "resize",
    Freeze => "freeze",
    Release => "release",
    Join => "join",
    Leave => "leave",
    Copy => "copy",
    Regrant => "regrant",
    Positions => "positions",
    Continue => "continue",
    Carve => "carve",
    Drain => "drain",
});

/// A reply between an agent and a game server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Done,
    /// To `Register`: how often to send `Load`.
    Registered {
        load_every_ms: u32,
    },
    /// To `Freeze`: stopped after `tick`.
    Frozen {
        tick: Tick,
    },
    /// To `Leave`: the player's state and last applied input, for a border crossing.
    Left {
        last_applied: Seq,
        state: Blob,
    },
    /// To `Assign` with an epoch the server already saw superseded.
    Stale {
        newest: Epoch,
    },
    /// To `Release`: the bubbles the server simulated last, for the record.
    Released {
        bubble: BubbleId,
        tick: Tick,
    },
}

kinds!(Reply {
    Done => "done",
    Registered => "registered",
    Frozen => "frozen",
    Left => "left",
    Stale => "stale",
    Released => "released",
});
