//! State in motion, shared by the transfer and server channels: snapshots, deltas, seals,
//! inputs and state updates. The game's bytes are opaque [`Blob`]s; Horizon frames, fences and
//! orders them.

use serde::{Deserialize, Serialize};

use crate::channel::kinds;
use crate::types::{Blob, BubbleId, Epoch, PlayerId, Seq, Tick};

/// One chunk of a bubble's full state at `tick`. A snapshot is `total` chunks, `index` 0-based,
/// each at most [`crate::MAX_CHUNK_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub bubble: BubbleId,
    pub epoch: Epoch,
    pub tick: Tick,
    pub index: u32,
    pub total: u32,
    pub bytes: Blob,
}

/// The changes of one tick, applied in tick order on top of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    pub bubble: BubbleId,
    pub epoch: Epoch,
    pub tick: Tick,
    pub bytes: Blob,
}

/// The last word of a writer: it stopped at `tick` and will never write `epoch` again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seal {
    pub bubble: BubbleId,
    pub epoch: Epoch,
    pub tick: Tick,
    /// The changes of `tick` itself (may be empty).
    pub final_delta: Blob,
    /// For every player of the bubble, the last input sequence number applied.
    pub last_applied: Vec<(PlayerId, Seq)>,
}

/// One player input. The simulating server applies each `(player, seq)` at most once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Input {
    pub player: PlayerId,
    pub seq: Seq,
    pub bytes: Blob,
}

/// Inputs for one bubble, in arrival order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    pub bubble: BubbleId,
    pub inputs: Vec<Input>,
}

/// What some players see after `tick`: one message per tick per bubble, fanned out by gateways.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Update {
    pub bubble: BubbleId,
    pub epoch: Epoch,
    pub tick: Tick,
    /// Per player, the highest input seq reflected in this state (click-to-screen ends here).
    pub acked: Vec<(PlayerId, Seq)>,
    pub bytes: Blob,
}

/// Items of the long-lived streams that carry state: between agents (transfer channel) and
/// between an agent and its game servers (server channel).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateItem {
    /// A bubble's full state: to a new holder, or from a holder for a backup.
    Snapshot(Snapshot),
    /// Each tick's changes (streamed to a handover target, kept as backup).
    Delta(Delta),
    /// The writer's final word after a freeze.
    Seal(Seal),
    /// Players' inputs, towards whoever simulates them (home gateway → simulating site → server).
    Inputs(Inputs),
    /// State for players, back towards their home gateway.
    Update(Update),
    /// agent → server, restoring a bubble whose latest copy was taken spread over several
    /// servers: the copy of one more part, after the `Snapshot` of part 0 and before the
    /// `Seal`. Chunked like a snapshot; once whole, each player it holds joins the state the
    /// `Snapshot` gave, with their applied inputs (the reverse of spreading the bubble).
    PartSnapshot(Snapshot),
    /// agent → server, for a bubble that runs: one chunk of a stored copy (of any bubble) and
    /// the players to take from it. Once whole, each listed player the copy holds joins the
    /// bubble with the copy's state and applied inputs, unless the bubble has applied at
    /// least as many of theirs. `chunk.bubble` and `chunk.epoch` name the bubble that adopts
    /// (under its current epoch: fenced like any write); `chunk.tick` is the copy's.
    Adopt(Adopt),
    /// server → agent → the player's home gateway: one player's own state the moment an input
    /// of theirs was applied, ahead of the tick's [`StateItem::Update`] (design.md §7, "own
    /// state first"). A display hint only: it acknowledges nothing, and the batched update
    /// that follows stays the truth.
    Own(Own),
    /// agent → agent only: an item for `to` handed to a site on the way (see
    /// `transfer::Request::Relay`, which bounds `hops` the same way). Items between two sites
    /// may arrive out of order while a route changes: inputs wait for their gap (the gateway
    /// re-sends what is not acknowledged), and the player's gateway drops an update or own
    /// state that acknowledges fewer of the player's inputs than the last it delivered of the
    /// same bubble and epoch.
    Relay(Box<Relayed>),
}

/// See [`StateItem::Relay`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relayed {
    pub from: crate::types::Name,
    pub to: crate::types::Name,
    pub hops: u8,
    pub item: StateItem,
}

/// The largest [`Own`] state: one player's entity, not a region's. A game whose own states
/// are larger sends none early (the update carries them); an agent refuses larger ones.
pub const MAX_OWN_BYTES: usize = 16 << 10;

/// See [`StateItem::Own`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Own {
    pub bubble: BubbleId,
    pub epoch: Epoch,
    /// The last tick stepped: the state is that tick's plus the inputs applied since.
    pub tick: Tick,
    pub player: PlayerId,
    /// The player's last input applied, which this state reflects.
    pub seq: Seq,
    pub bytes: Blob,
}

/// See [`StateItem::Adopt`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adopt {
    pub chunk: Snapshot,
    pub players: Vec<PlayerId>,
}

impl crate::channel::Weigh for StateItem {
    fn weight(&self) -> usize {
        use crate::channel::{ENTRY_WEIGHT, FIELDS_WEIGHT};
        FIELDS_WEIGHT
            + match self {
                StateItem::Snapshot(s) | StateItem::PartSnapshot(s) => s.bytes.0.len(),
                StateItem::Adopt(a) => a.chunk.bytes.0.len() + a.players.len() * ENTRY_WEIGHT,
                StateItem::Delta(d) => d.bytes.0.len(),
                StateItem::Seal(s) => s.final_delta.0.len() + s.last_applied.len() * ENTRY_WEIGHT,
                StateItem::Inputs(i) => {
                    i.inputs.iter().map(|i| i.bytes.0.len() + ENTRY_WEIGHT).sum::<usize>()
                }
                StateItem::Update(u) => u.bytes.0.len() + u.acked.len() * ENTRY_WEIGHT,
                StateItem::Own(o) => o.bytes.0.len(),
                StateItem::Relay(r) => r.item.weight(),
            }
    }
}

kinds!(StateItem {
    Snapshot => "snapshot",
    Delta => "delta",
    Seal => "seal",
    Inputs => "inputs",
    Update => "update",
    PartSnapshot => "part_snapshot",
    Adopt => "adopt",
    Own => "own",
    Relay => "relay",
});
