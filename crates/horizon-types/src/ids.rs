//! Logical identifiers and fencing tokens, the same in the brain and on the wire.

use std::fmt;

/// A player's logical id, stable for the session whatever server simulates them.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct PlayerId(pub u64);

/// A world (open space, or one planet). Names are interned by the caller.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct WorldId(pub u32);

/// A region's logical id — a bubble's, or a zone's from [`ZONE_IDS_FROM`] up: never changes while
/// the region lives, never reused.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct BubbleId(pub u64);

/// Zone ids are handed out from here up; bubble ids count up from 1. One id space, so a region
/// id names one region whatever its kind, across core restarts too.
pub const ZONE_IDS_FROM: u64 = 1 << 40;

impl BubbleId {
    /// Whether this id names one of the core site's zones (else a bubble).
    pub fn is_zone(self) -> bool {
        self.0 >= ZONE_IDS_FROM
    }

    /// How an operator reads it: `bubble 12`, or `zone 3` (a zone's id less [`ZONE_IDS_FROM`]:
    /// the first zone is `zone 0`).
    pub fn label(self) -> String {
        match self.is_zone() {
            true => format!("zone {}", self.0 - ZONE_IDS_FROM),
            false => format!("bubble {}", self.0),
        }
    }
}

impl fmt::Display for BubbleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}", self.0)
    }
}

/// The core's generation: incremented and persisted by the core before it serves.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Generation(pub u32);

/// A lease's fencing token. The high 32 bits are the core generation, the low 32 bits a counter,
/// so epochs never go backwards across core restarts.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Epoch(pub u64);

impl Epoch {
    pub fn new(generation: Generation, counter: u32) -> Self {
        Epoch(((generation.0 as u64) << 32) | counter as u64)
    }

    pub fn generation(self) -> Generation {
        Generation((self.0 >> 32) as u32)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}
