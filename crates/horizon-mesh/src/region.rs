//! The region: what one lease covers (design.md §1). Zones and bubbles are its two kinds:
//! everything a lease, a failover, a crossing or a copy needs is the same for both and lives
//! here; what only one kind has is its `kind`. The brain keeps both in one table under one id
//! space and one lease table (`regions.rs`); a tree of cuts under each world finds a position's
//! zone (`zones.rs`), and bubbles' slots follow unit order (`mesh/order.rs`).

use crate::geom::{Aabb, Vec3};
use crate::ids::{BubbleId, Epoch, SiteId, WorldId};
use crate::time::Time;

/// A box of a world that one site simulates under a lease.
#[derive(Clone, Debug, PartialEq)]
pub struct Region<K> {
    /// Zones and bubbles share one id space: a region's id names it whatever its kind, and
    /// never changes while it lives.
    pub id: BubbleId,
    /// The site simulating it (a zone's is the core site).
    pub site: SiteId,
    pub world: WorldId,
    pub bounds: Aabb,
    /// The epoch of its current lease.
    pub epoch: Epoch,
    /// Set when its lease expired (its site stopped renewing it): it waits to be granted again
    /// (a bubble's failover, a zone on another server of the core site).
    pub stalled_since: Option<Time>,
    /// Counted players it simulates, as of the last tick (a bubble at creation: those it was
    /// created for; a zone: those in its box and in no bubble).
    pub players: u32,
    /// What only its kind has: [`crate::bubble::BubbleState`] or [`crate::zones::ZoneState`].
    pub kind: K,
}

impl<K> Region<K> {
    /// Whether `pos` of `world` is in its box grown by `margin` metres (0: the box itself).
    pub fn holds(&self, world: WorldId, pos: Vec3, margin: f64) -> bool {
        self.world == world && self.bounds.expand(margin).contains(pos)
    }

    /// Whether `site` holds it and renews its lease: it runs there.
    pub fn runs_at(&self, site: SiteId) -> bool {
        self.site == site && self.stalled_since.is_none()
    }
}
