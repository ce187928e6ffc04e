//! Values shared by every channel. Wire types are defined here, apart from the brain's, so the
//! wire stays frozen while the brain evolves; the daemons convert at the boundary.

use serde::{Deserialize, Serialize};

use crate::frame::MAX_NAME_BYTES;

/// Identifies a request so a retry (same id, possibly on a new connection) is served once.
/// Unique per sender for the sender's whole life (a counter seeded from the clock at start).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequestId(pub u64);

/// A bubble's logical id. Never changes while the bubble lives, whatever server hosts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BubbleId(pub u64);

/// A lease's fencing token: `core_generation << 32 | counter`, strictly increasing per bubble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Epoch(pub u64);

/// A player's logical id, stable for the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PlayerId(pub u64);

/// A world: open space or one planet. Positions are local to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorldId(pub u32);

/// One handover, chosen by the core; names every message of that handover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HandoverId(pub u64);

/// A simulation tick number of one bubble (monotonic across handovers: the target starts at
/// the sealed tick + 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Tick(pub u64);

/// A player input's sequence number, per player, starting at 1. A server never applies a
/// `(player, seq)` twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Seq(pub u64);

/// A short name (site, server, build): UTF-8, at most [`MAX_NAME_BYTES`] bytes. Checked when
/// decoded, so an over-long name is a malformed frame.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Name(String);

/// Why a [`Name`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("name of {len} bytes is longer than {MAX_NAME_BYTES}")]
pub struct NameTooLong {
    pub len: usize,
}

impl Name {
    pub fn new(name: impl Into<String>) -> Result<Self, NameTooLong> {
        let name = name.into();
        if name.len() > MAX_NAME_BYTES {
            Err(NameTooLong { len: name.len() })
        } else {
            Ok(Name(name))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Name {
    type Error = NameTooLong;
    fn try_from(name: String) -> Result<Self, NameTooLong> {
        Name::new(name)
    }
}

impl From<Name> for String {
    fn from(name: Name) -> String {
        name.0
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Opaque game bytes (snapshots, deltas, inputs, updates). Horizon moves them, never reads them.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Blob(#[serde(with = "serde_bytes")] pub Vec<u8>);

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Blob({} bytes)", self.0.len())
    }
}

/// A position or velocity in a world's local frame: metres, metres per second.
#[derive(Clone, Copy, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Vec3 {
    pub x: f64,
    pub y: f64,
    pub z: f64,
}

/// An axis-aligned box in a world's local frame, metres.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Aabb {
    pub min: Vec3,
    pub max: Vec3,
}

/// A region of the universe: a box of a world, or the whole world (`bounds: None`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Region {
    pub world: WorldId,
    pub bounds: Option<Aabb>,
}

/// What a player is doing, which sets their weight in scoring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    Pilot,
    Player,
    Afk,
    Npc,
}

/// A right to simulate one bubble: valid for `ttl_ms` counted by the holder's own monotonic
/// clock from when it *sent* the request that was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub bubble: BubbleId,
    pub epoch: Epoch,
    pub ttl_ms: u32,
}

/// A lease named without its duration (renewals, revocations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRef {
    pub bubble: BubbleId,
    pub epoch: Epoch,
}
