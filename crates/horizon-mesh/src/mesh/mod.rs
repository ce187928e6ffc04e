//! The mesh: players in, placement decisions out (design.md §3, §4 and §6).
//!
//! Poll-style and sans-IO: feed it with `handle_*(…, now)`, call [`Mesh::handle_timeout`] when
//! [`Mesh::poll_timeout`] says so, and drain [`Mesh::poll_command`]. Every tick (5 s by default):
//!
//! 1. **Units** (`units.rs`). Counted players (NPCs never count) are grouped at the speed-scaled
//!    *merge* distance: groups closer than that must share a site before they meet (preventive
//!    merge). Groups whose members' boxes meet are joined too (no border fits between them). A
//!    unit claims its members' box grown by its border margin; where two claims overlap (fast
//!    ships reach far) they are cut apart midway through the widest gap between the two units.
//!    A unit is placed whole: a bubble always holds exactly one unit.
//! 2. **Continuity** (`tick.rs`). Each unit keeps the bubble most of its weight was in. A unit
//!    owning no bubble gets one (on the home site, or waits in a core zone for a server); a unit
//!    that walked off gets its own bubble on the same site; a unit owning several merges them onto
//!    whichever of their sites scores best for the union; a bubble nobody owns is deleted.
//! 3. **Borders.** A member within half its margin of its bubble's edge moves the border; a stale
//!    box that overlaps another region is reset to its claim, so no two regions ever overlap.
//! 4. **Scoring and hysteresis** pick each bubble's site; failover ignores hold and dwell.
//! 5. **Load** (`load.rs`). Within a site, a bubble's part overloaded for `split_after_samples`
//!    load samples is cut across one more server, and the latest cut is undone when its halves
//!    stay quiet: SMD's rule (`crate::split`), a dense crowd cut at its median.
//! 6. **Zones** (`zones.rs`). Counted players in no bubble play in the core site's zone around
//!    them; zones are split and joined by the very same rule, as today's SMD does.
//!
//! A tick that finds players or bubbles scattered in memory ends by storing them again in unit
//! order (`order.rs`), so the passes above read them in sequence.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::bubble::{Bubble, BubbleState, Cut, LoadState, part_of};
use crate::config::{ConfigError, Sites, Thresholds};
use crate::geom::{Aabb, Vec3};
use crate::grouping::{Grouper, Groups, Item};
use crate::ids::{BubbleId, Epoch, Generation, PlayerId, SiteId, WorldId};
use crate::lease::{LeaseError, LeaseTable};
use crate::player::{Player, PlayerJoin, PlayerUpdate};
use crate::regions::{Entry, RegionKind, Regions};
use crate::scoring::{Hysteresis, MoveReason, SiteScore, Tally, best_site, latency_ms};
use crate::time::{Span, Time};
use crate::zones::{Zone, ZoneLayout, ZoneSpec};

const NONE: u32 = u32::MAX;

/// Everything the mesh is configured with.
#[derive(Clone, Debug)]
pub struct MeshConfig {
    pub sites: Sites,
    pub thresholds: Thresholds,
    /// The core generation, persisted by the caller before serving (epochs build on it).
    pub generation: Generation,
    /// How bubbles are placed: SMD-G, or a baseline the simulator compares it with.
    pub placement: Placement,
    /// The configured zone boxes (`[[zones]]`); a world with none is one zone.
    pub zones: Vec<ZoneSpec>,
}

/// Where bubbles go. Production runs [`Placement::Smdg`]; the others are the policies a studio
/// would otherwise use, kept in the brain so that simulations compare them on the very same
/// grouping, bubbles, borders, merges and load splits, differing only in the choice of site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// design.md §3: scored at creation and every tick, moved under hysteresis.
    #[default]
    Smdg,
    /// Everything in the core site's zones, no bubble ever carved out: today's SMD.
    AllCore,
    /// On the home of the first player to arrive (the lowest player id: ids are handed out in
    /// arrival order), never moved; a merge keeps the oldest bubble's site; a group walking away
    /// is a new room, placed by the same rule (room-based hosting).
    Creator,
    /// Scored once when a group forms — a bubble is created, groups merge, or a group walks away
    /// from its bubble — (lowest cost within the fairness cap), never re-placed afterwards
    /// (session placement by a managed-hosting queue).
    OneShot,
    /// The rollout's stage 3: players inside a configured delegation's box play in bubbles
    /// on its site, kept there whatever the scoring says; everyone else in the core site's
    /// zones (`delegation.rs`, `mesh/delegations.rs`, [`Mesh::set_delegations`]). Not a policy the population
    /// simulator compares (it needs delegations), so not in [`Placement::ALL`].
    Fixed,
}

impl Placement {
    pub const ALL: [Placement; 4] =
        [Placement::Smdg, Placement::AllCore, Placement::Creator, Placement::OneShot];

    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Smdg => "smdg",
            Placement::AllCore => "all_core",
            Placement::Creator => "creator",
            Placement::OneShot => "one_shot",
            Placement::Fixed => "fixed",
        }
    }

    pub fn parse(s: &str) -> Option<Placement> {
        Placement::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// A refused input; the mesh is unchanged.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InputError {
    #[error("player {0:?} is already connected")]
    DuplicatePlayer(PlayerId),
    #[error("player {0:?} is not connected")]
    UnknownPlayer(PlayerId),
    #[error("bubble {0} does not exist")]
    UnknownBubble(BubbleId),
    #[error("{field} must be finite{extra}, got {value}")]
    BadNumber { field: &'static str, value: f64, extra: &'static str },
    #[error("position coordinate {value} m is beyond ±{limit} m (the grouping grid's range)")]
    PositionOutOfRange { value: f64, limit: f64 },
    #[error("site index {0} is not configured")]
    UnknownSite(usize),
    #[error("player {player:?}'s home is already measured: site index {home}")]
    HomeFixed { player: PlayerId, home: usize },
    #[error(transparent)]
    Lease(#[from] LeaseError<SiteId>),
}

/// The brain. See the module documentation.
#[derive(Debug)]
pub struct Mesh {
    sites: Sites,
    th: Thresholds,
    placement: Placement,
    /// The player records, as given (a departure's index goes to the last one).
    players: Vec<Player>,
    /// Player id → index in `players`.
    player_index: FxHashMap<PlayerId, u32>,
    /// Per player: its *place*, its index in the arrays the tick reads. Places follow players'
    /// indices until the tick stores them in unit order (`order.rs`).
    place_of: Vec<u32>,
    // Per place from here on.
    /// The player at this place (index in `players`).
    player_at: Vec<u32>,
    /// What grouping and scoring read of a player, kept up to date on every input so that a
    /// tick never reads the player records.
    items: Vec<Item>,
    members: Vec<units::Member>,
    /// An NPC, left out of grouping; and how many are.
    npc: Vec<bool>,
    npcs: usize,
    /// Region slot of its bubble, or `NONE` (core zone, or NPC).
    player_bubble: Vec<u32>,
    /// Joined since the last tick.
    fresh: Vec<bool>,
    /// How many players joined since the last tick (the `fresh` flags to reset).
    fresh_count: usize,
    /// Places whose item changed since the last tick, each once (`changed_flag`): grouping
    /// updates its grid for them alone.
    changed: Vec<u32>,
    changed_flag: Vec<bool>,
    /// Every region, zones and bubbles, in one table under one id space (`crate::regions`).
    regions: Regions,
    /// Every bubble's box, for finding the bubble that holds a position (`npcs.rs`).
    boxes: boxes::BubbleBoxes,
    next_bubble: u64,
    leases: LeaseTable<BubbleId, SiteId>,
    /// Ready or hosting servers per site (`None`: unlimited), each with
    /// [`Thresholds::seats_per_server`] seats: several bubbles share a server (design.md §8).
    /// The core site can always host, through zones.
    ready: Vec<Option<u32>>,
    /// Seats taken per site: the sum of [`Bubble::seats`] of the bubbles there.
    used: Vec<u32>,
    down: Vec<bool>,
    next_tick: Time,
    commands: VecDeque<Command>,
    last_stats: TickStats,
    scratch: Scratch,
    /// Players are renumbered in unit order only from this many on (`order.rs`).
    renumber_min_players: usize,
    /// How the core site's zones cut each world (`mesh/zones.rs`): its leaves name zones' slots
    /// in `regions`.
    zones: ZoneLayout,
    /// Under [`Placement::Fixed`]: the configured delegations.
    delegations: Vec<crate::Delegation>,
    next_zone: u64,
    /// When regions' load was last sampled (each sample weighs the time since the previous
    /// one, `crate::split`).
    load_sampled_at: Option<Time>,
    /// SMD-G: groups playing in the core site's zones whose best site is another by the gain
    /// a move needs, by their smallest player id, and the tick that last saw each. A group is
    /// carved out once the same site has been best for the dwell time; entries a tick did not
    /// see are dropped.
    carving: FxHashMap<PlayerId, (Carving, Time)>,
    /// (zone leaf, place) of the players counted in zones at the last tick.
    zone_members: Vec<(u32, u32)>,
    /// Per site index: regions over a server's capacity at the last tick (`load.rs`).
    over_capacity: Vec<u32>,
    /// The latest time an input carried (zones opened between ticks are leased from it).
    now_hint: Time,
}

mod arrival;
mod borders;
mod boxes;
mod command;
mod create;
mod delegations;
mod explain;
mod lifecycle;
mod load;
mod npcs;
mod order;
mod players;
mod restore;
mod sweep;

pub use command::{BorderReason, Command, CreateReason, DeleteReason, LoadReason, TickStats};
pub use explain::{Candidate, Carving, Explanation, PlacementRule};
pub use restore::RestoredRegion;
mod tick;
mod units;
mod zones;

pub use crate::split::{EXIT_MARGIN_M, MIN_GAP_M};
pub use zones::{ZONE_IDS_FROM, ZoneReason};

/// Per-tick buffers, kept to avoid reallocating a million-entry vector every 5 s.
#[derive(Debug, Default)]
struct Scratch {
    grouper: Grouper,
    /// Per bubble slot at the start of the tick: its world (`NONE` for a free slot).
    slot_world: Vec<u32>,
    /// The units of placement of this tick (groups of player indices).
    units: Groups,
    tallies: Vec<Tally>,
    /// The other half of `tallies`' double buffer, used while joining units.
    spare_tallies: Vec<Tally>,
    extents: Vec<units::Extent>,
    /// Per unit, as compressed rows: the bubbles its members were in (`claims[claim_start[u]..]`).
    claims: Vec<units::Claim>,
    claim_start: Vec<u32>,
    cluster_bubble: Vec<u32>,
    /// Per unit, under [`Placement::Fixed`]: the index of the delegation it plays under
    /// (`NONE`: none, it plays in a zone). Every unit of a delegation is joined into one.
    unit_delegation: Vec<u32>,
    /// Per bubble slot: the unit it holds this tick.
    slot_unit: Vec<u32>,
    /// Per bubble slot: created, moved or merged this tick (no scoring until the next one).
    touched: Vec<bool>,
    /// Per bubble slot at the start of the tick: its site and hysteresis (split-offs inherit them).
    prior: Vec<Option<(SiteId, Hysteresis)>>,
    /// Per bubble slot at the start of the tick: the slot it was merged into, if it was.
    absorbed_into: Vec<u32>,
    /// Per bubble slot at the start of the tick: the heaviest unit claiming it (weight, min id).
    owner: Vec<Option<(u32, f64, PlayerId)>>,
    sweep: sweep::Sweep,
    /// Overlapping pairs of claims (clusters', then units').
    pairs: Vec<(u32, u32)>,
    /// Counted players stored apart from the member of their cluster before them.
    breaks: usize,
    /// Bubble slots in the order the last tick sorted their boxes in, and per slot the
    /// clusters claiming it (`slot_claimants[slot_start[s]..slot_start[s + 1]]`): a guess at
    /// the order of this tick's claims.
    slots_order: Vec<u32>,
    slot_start: Vec<u32>,
    slot_claimants: Vec<u32>,
    /// Units' (or clusters') indices in a guessed order of their claims.
    claims_order: Vec<u32>,
}

impl Scratch {
    /// The counted players (indices) of a bubble this tick: those of the unit it holds.
    fn members(&self, slot: u32) -> &[u32] {
        match self.slot_unit.get(slot as usize).copied().unwrap_or(NONE) {
            NONE => &[],
            unit => self.units.members(unit as usize),
        }
    }
}

impl Mesh {
    pub fn new(config: MeshConfig, now: Time) -> Result<Self, Vec<ConfigError>> {
        config.thresholds.validate()?;
        let n = config.sites.len();
        let th = config.thresholds;
        let mut mesh = Mesh {
            leases: LeaseTable::new(
                config.generation,
                Span::from_ms(th.lease_ttl_ms),
                Span::from_ms(th.lease_drift_margin_ms),
            ),
            sites: config.sites,
            th,
            placement: config.placement,
            players: Vec::new(),
            player_index: FxHashMap::default(),
            place_of: Vec::new(),
            player_at: Vec::new(),
            player_bubble: Vec::new(),
            fresh: Vec::new(),
            fresh_count: 0,
            items: Vec::new(),
            members: Vec::new(),
            npc: Vec::new(),
            npcs: 0,
            changed: Vec::new(),
            changed_flag: Vec::new(),
            regions: Regions::default(),
            boxes: boxes::BubbleBoxes::default(),
            next_bubble: 1,
            ready: vec![None; n],
            used: vec![0; n],
            down: vec![false; n],
            next_tick: now,
            commands: VecDeque::new(),
            last_stats: TickStats::default(),
            scratch: Scratch::default(),
            renumber_min_players: order::RENUMBER_MIN_PLAYERS,
            zones: ZoneLayout::default(),
            delegations: Vec::new(),
            next_zone: ZONE_IDS_FROM,
            load_sampled_at: None,
            carving: FxHashMap::default(),
            zone_members: Vec::new(),
            over_capacity: Vec::new(),
            now_hint: now,
        };
        mesh.open_configured_zones(&config.zones, now)?;
        Ok(mesh)
    }

    // ---- inputs: sites (players in `players.rs`, regions in `lifecycle.rs`) -----------------

    /// How many servers are ready on a site, or hosting bubbles (`None`: unlimited). Each seats
    /// [`Thresholds::seats_per_server`] players, whatever the bubbles they hold.
    pub fn handle_site_capacity(&mut self, site: SiteId, ready: Option<u32>) {
        self.ready[site.index()] = ready;
    }

    /// A site's agent lost (or regained) its link to the core. A down site gets nothing new; its
    /// bubbles keep running until their leases expire, then fail over.
    pub fn handle_site_link(&mut self, site: SiteId, up: bool) {
        self.down[site.index()] = !up;
    }

    /// A backbone RTT measurement between two sites. One below the pair's physical floor is
    /// not used: `Err(floor)`.
    pub fn handle_backbone_rtt(&mut self, a: SiteId, b: SiteId, rtt_ms: f64) -> Result<(), f64> {
        self.sites.set_backbone_ms(a, b, rtt_ms)
    }

    // ---- poll ---------------------------------------------------------------------------------

    /// When [`Mesh::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Time {
        self.leases.poll_timeout().map_or(self.next_tick, |t| t.min(self.next_tick))
    }

    /// Runs what is due at `now`: lease expiries, and the tick when its period has come — or
    /// at once when a lease's drift margin has just ended, so that its bubble fails over now
    /// rather than at the next tick.
    pub fn handle_timeout(&mut self, now: Time) {
        self.now_hint = self.now_hint.max(now);
        let regrantable = self.expire_leases(now);
        if now >= self.next_tick || regrantable > 0 {
            self.tick(now);
            self.next_tick = now + Span::from_ms(self.th.period_ms);
        }
    }

    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    // ---- reading ------------------------------------------------------------------------------

    pub fn sites(&self) -> &Sites {
        &self.sites
    }

    pub fn thresholds(&self) -> &Thresholds {
        &self.th
    }

    pub fn leases(&self) -> &LeaseTable<BubbleId, SiteId> {
        &self.leases
    }

    pub fn last_stats(&self) -> TickStats {
        self.last_stats
    }

    pub fn players(&self) -> &[Player] {
        &self.players
    }

    pub fn player(&self, id: PlayerId) -> Option<&Player> {
        self.player_index.get(&id).map(|&i| &self.players[i as usize])
    }

    /// The proximity groups of counted players now (design.md §2), by the tick's grouping
    /// rule, computed on demand: for status pages and tools, not for the tick's hot path.
    pub fn groups(&self) -> Vec<Vec<PlayerId>> {
        let mut items = Vec::new();
        let mut ids = Vec::new();
        for p in self.players.iter().filter(|p| p.role.is_counted()) {
            let radius = self.th.scaled(self.th.merge_distance_m, p.speed());
            items.push(Item { world: p.world, pos: p.position, radius });
            ids.push(p.id);
        }
        let groups = Grouper::new().group(&items, self.th.merge_distance_m);
        (0..groups.len())
            .map(|g| groups.members(g).iter().map(|&i| ids[i as usize]).collect())
            .collect()
    }

    pub fn bubbles(&self) -> impl Iterator<Item = &Bubble> {
        self.regions.bubbles()
    }

    pub fn bubble_by_id(&self, id: BubbleId) -> Option<&Bubble> {
        self.regions.bubble(self.regions.slot(id)?)
    }

    /// Counted players (not NPCs) in no bubble: those the core site's zones hold
    /// ([`Mesh::zone_of`]). Read in place, with no lookup by id: the gauges take it after
    /// every step.
    pub fn unsimulated(&self) -> impl Iterator<Item = &Player> {
        self.players.iter().zip(&self.place_of).filter_map(|(p, &place)| {
            let place = place as usize;
            (!self.npc[place] && self.player_bubble[place] == NONE).then_some(p)
        })
    }

    /// The bubble a counted player is grouped in, if any (none: a core-site zone, or an NPC,
    /// whose region is [`Mesh::region_of`]).
    pub fn bubble_of(&self, id: PlayerId) -> Option<&Bubble> {
        let &i = self.player_index.get(&id)?;
        match self.player_bubble[self.place_of[i as usize] as usize] {
            NONE => None,
            s => self.regions.bubble(s),
        }
    }

    /// The site simulating a counted player: its bubble's, else the core site (zones).
    pub fn site_of(&self, id: PlayerId) -> Option<SiteId> {
        let p = self.player(id)?;
        if !p.role.is_counted() {
            return None;
        }
        Some(self.bubble_of(id).map_or(self.sites.core(), |b| b.site))
    }

    /// The latency used for decisions for a player where they are simulated now.
    pub fn latency_of(&self, id: PlayerId) -> Option<f64> {
        let site = self.site_of(id)?;
        self.player(id).map(|p| latency_ms(&self.sites, p, site))
    }

    // ---- the tick -----------------------------------------------------------------------------

    fn bubble(&self, slot: u32) -> &Bubble {
        // Invariant: slots handed around within a tick refer to live bubbles.
        self.regions.bubble(slot).expect("live bubble slot")
    }

    fn bubble_mut(&mut self, slot: u32) -> &mut Bubble {
        self.regions.bubble_mut(slot).expect("live bubble slot")
    }

    /// The zone at leaf `leaf` of the zone tree.
    fn zone(&self, leaf: u32) -> &Zone {
        // Invariant: a leaf names a live zone's slot.
        self.regions.zone(self.zones.region(leaf)).expect("a leaf names a live zone")
    }

    fn zone_mut(&mut self, leaf: u32) -> &mut Zone {
        zone_at(&mut self.regions, &self.zones, leaf)
    }

    /// Seats left on a site's servers.
    fn free(&self, s: SiteId) -> u32 {
        if s == self.sites.core() {
            return u32::MAX;
        }
        let seats = self.th.seats_per_server();
        self.ready[s.index()]
            .map_or(u32::MAX, |r| r.saturating_mul(seats).saturating_sub(self.used[s.index()]))
    }

    /// Whether a site takes `seats` more players now (see [`Bubble::seats`]).
    fn can_host(&self, s: SiteId, seats: u32) -> bool {
        !self.down[s.index()] && self.free(s) >= seats
    }
}

/// The zone at leaf `leaf`, borrowing only the table and the tree (so that the thresholds and
/// the rest of the mesh stay readable beside it).
fn zone_at<'a>(regions: &'a mut Regions, zones: &ZoneLayout, leaf: u32) -> &'a mut Zone {
    regions.zone_mut(zones.region(leaf)).expect("a leaf names a live zone")
}
