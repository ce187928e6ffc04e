//! What the brain decides: the [`Command`]s the daemons and the simulators carry out, why each
//! was decided, and the figures of one tick.

use crate::geom::Aabb;
use crate::ids::{BubbleId, Epoch, PlayerId, SiteId, WorldId};
use crate::scoring::MoveReason;
use crate::time::Time;

use super::ZoneReason;

/// Why a bubble was created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CreateReason {
    /// Players connected and nobody from another home site was near.
    Join,
    /// The players waited in a core-site zone until a server was ready on their site.
    ServerReady,
    /// Part of a bubble walked away from the rest (beyond the merge distance).
    Split,
    /// The players arrived from a bubble of another world (a planet, open space).
    Travel,
    /// A fixed delegation's region, created on its site as soon as it has a server for it.
    Delegation,
    /// SMD-G: the scoring placed a group playing in the core site's zones on another site;
    /// the bubble is carved out of the zones around it and handed to that site.
    Carve,
}

impl CreateReason {
    /// The name used in reports (as serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            CreateReason::Join => "join",
            CreateReason::ServerReady => "server_ready",
            CreateReason::Split => "split",
            CreateReason::Travel => "travel",
            CreateReason::Delegation => "delegation",
            CreateReason::Carve => "carve",
        }
    }
}

/// Why a bubble ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteReason {
    /// Its last counted player left.
    Empty,
    /// The placement allows no bubble (SMD: the relay stage, after a core of another stage):
    /// its players went back into the zones around them.
    Stage,
    /// SMD-G: its group's best site became the core site (or it was there after a failover
    /// and the scoring keeps it there): it dissolved into the zones around it, its players
    /// crossing into them with their state.
    Dissolve,
}

/// Why a bubble's server count changed within its site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadReason {
    /// A part had more players than a server holds, or a low tick rate, for the sustain time.
    Overload,
    /// The latest split's two parts stayed low long enough: undone.
    Underload,
}

/// Why a bubble's box changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BorderReason {
    /// A member came within half its margin of the edge: the border moves with the players.
    NearEdge,
    /// The old box overlapped another region's claim: reset to the players' own claim.
    Overlap,
    /// Bubbles merged: the union's box.
    Merge,
}

/// What the daemons (and the simulator) must carry out. Player lists are sorted.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// Create a bubble on `site` and grant it `epoch`. `previous_site` is where these players were
    /// simulated until now (`None` for fresh connections): a change of site needs a handover.
    Create {
        bubble: BubbleId,
        site: SiteId,
        previous_site: Option<SiteId>,
        world: WorldId,
        bounds: Aabb,
        epoch: Epoch,
        players: Vec<PlayerId>,
        reason: CreateReason,
    },
    /// Hand a bubble over to another site under the new `epoch` (design.md §5).
    Move {
        bubble: BubbleId,
        from: SiteId,
        to: SiteId,
        epoch: Epoch,
        players: Vec<PlayerId>,
        reason: MoveReason,
    },
    /// Players enter an existing bubble: fresh connections (`from_site` is `None`), players leaving
    /// a core-site zone, or a border crossing from another bubble (a single-player handover when
    /// the site changes).
    Enter { bubble: BubbleId, site: SiteId, from_site: Option<SiteId>, players: Vec<PlayerId> },
    /// Fold bubble `from` into `into` (preventive merge): `players` (those of `from`) change site
    /// when `from_site != into_site`; `from`'s lease is revoked.
    Merge {
        into: BubbleId,
        from: BubbleId,
        from_site: SiteId,
        into_site: SiteId,
        players: Vec<PlayerId>,
    },
    /// End a bubble and revoke its lease.
    Delete { bubble: BubbleId, site: SiteId, epoch: Epoch, reason: DeleteReason },
    /// Moving border: the bubble's box follows its players.
    Border { bubble: BubbleId, bounds: Aabb, reason: BorderReason },
    /// Re-cut a bubble across `parts.len()` servers of its site.
    Servers { bubble: BubbleId, site: SiteId, parts: Vec<Aabb>, reason: LoadReason },
    /// A bubble's lease expired: its site stopped, players see "reconnecting" until the failover.
    Stalled { bubble: BubbleId, site: SiteId, since: Time },
    /// A zone opens on the core site (`mesh/zones.rs`): a configured box at start, or a whole
    /// world when its first player arrives.
    ZoneCreate {
        zone: BubbleId,
        site: SiteId,
        world: WorldId,
        bounds: Aabb,
        epoch: Epoch,
        reason: ZoneReason,
    },
    /// SMD split: `zone` keeps `bounds`; the new zone `new_zone`, granted `new_epoch`, takes
    /// `new_bounds` and `players`, the zone's players who stand in that half.
    ZoneSplit {
        zone: BubbleId,
        new_zone: BubbleId,
        site: SiteId,
        world: WorldId,
        bounds: Aabb,
        new_bounds: Aabb,
        new_epoch: Epoch,
        players: Vec<PlayerId>,
        reason: ZoneReason,
    },
    /// SMD merge: zone `from` ends (its lease revoked) and its `players` join `into`, which now
    /// covers `bounds`.
    ZoneMerge {
        into: BubbleId,
        from: BubbleId,
        site: SiteId,
        bounds: Aabb,
        players: Vec<PlayerId>,
        reason: ZoneReason,
    },
}

/// Figures of one tick, for logs, metrics and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TickStats {
    pub players: u32,
    pub counted: u32,
    pub clusters: u32,
    pub bubbles: u32,
    /// Counted players in no bubble: waiting, or (SMD) played in the core site's zones.
    pub in_zone: u32,
    pub zones: u32,
    pub zone_splits: u32,
    pub zone_merges: u32,
    pub created: u32,
    pub moved: u32,
    pub merged: u32,
    pub deleted: u32,
    pub borders: u32,
    pub load_changes: u32,
    /// Regions (zones and bubbles' parts) due a split that SMD's rule could not cut (too few
    /// players, all on one point, or too thin): they stay over capacity
    /// ([`Mesh::regions_over_capacity`](crate::Mesh::regions_over_capacity)).
    #[serde(default)]
    pub uncut: u32,
    /// Fixed delegations whose region is not on their site after this tick: not created yet
    /// because the site has no server ready for it, or failed over to the core site while
    /// the site is cut from it or full (their players play in the zones, or at the core).
    #[serde(default)]
    pub delegations_waiting: u32,
    /// Players and bubbles were stored again in unit order at the end of this tick (new
    /// places and slots: scattered in memory, they make every pass over them slow; this tick
    /// took longer to fix it).
    pub renumbered: bool,
}
