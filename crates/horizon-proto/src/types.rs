//! Values shared by every channel. Ids, epochs, roles, positions, boxes and regions are the
//! shared vocabulary's (`horizon-types`, the brain's too): the golden bytes prove they encode
//! as the wire always did.

use serde::{Deserialize, Serialize};

use crate::frame::MAX_NAME_BYTES;

pub use horizon_types::{Aabb, BubbleId, Epoch, PlayerId, Region, Role, Vec3, WorldId};

/// Identifies a request so a retry (same id, possibly on a new connection) is served once.
/// Unique per sender for the sender's whole life (a counter seeded from the clock at start).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequestId(pub u64);

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
