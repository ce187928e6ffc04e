//! Identifiers that can only be built valid (parse, don't validate).

use std::fmt;

/// A site's name as configured: 1 to 16 ASCII letters, digits or `_` (e.g. `PAR`).
///
/// `-` is not allowed because configuration writes site pairs as `A-B`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct SiteName(String);

/// Why a site name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("site name {name:?} is invalid: use 1 to 16 ASCII letters, digits or '_'")]
pub struct InvalidSiteName {
    pub name: String,
}

impl SiteName {
    pub fn new(name: &str) -> Result<Self, InvalidSiteName> {
        let ok = (1..=16).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if ok {
            Ok(SiteName(name.to_owned()))
        } else {
            Err(InvalidSiteName { name: name.to_owned() })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SiteName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A site, as an index into the configured [`crate::Sites`]. Only `Sites` hands these out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct SiteId(pub(crate) u16);

impl SiteId {
    /// The index of the site in configuration order.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A player's logical id, stable for the session whatever server simulates them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct PlayerId(pub u64);

/// A world (open space, or one planet). Names are interned by the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct WorldId(pub u32);

/// A bubble's logical id: never changes while the bubble lives, never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct BubbleId(pub u64);

impl fmt::Display for BubbleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}", self.0)
    }
}

/// The core's generation: incremented and persisted by the core before it serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Generation(pub u32);

/// A lease's fencing token. The high 32 bits are the core generation, the low 32 bits a counter,
/// so epochs never go backwards across core restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
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
