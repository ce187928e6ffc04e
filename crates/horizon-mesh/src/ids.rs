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

pub use horizon_types::{BubbleId, Epoch, Generation, PlayerId, WorldId, ZONE_IDS_FROM};
