//! The mesh: players in, placement decisions out (SPEC sections 3, 4 and 6).
//!
//! Poll-style and sans-IO: feed it with `handle_*(…, now)`, call [`Mesh::handle_timeout`] when
//! [`Mesh::poll_timeout`] says so, and drain [`Mesh::poll_command`]. Every tick (5 s by default):
//!
//! 1. **Clusters.** Counted players (NPCs never count) are grouped at the speed-scaled *merge*
//!    distance: groups closer than it must share a site (preventive merge), so the cluster is the
//!    unit of placement and a bubble always holds whole clusters.
//! 2. **Continuity.** Each cluster keeps the bubble most of its weight was in. A cluster that owns
//!    no bubble is created one (or split off its old one); a cluster owning several merges them on
//!    the site the scoring picks for the union; a bubble nobody owns is deleted.
//! 3. **Borders.** A member closer to its bubble's edge than its margin moves the border with it;
//!    bubbles whose boxes would overlap are merged, so no two regions ever overlap.
//! 4. **Scoring and hysteresis** pick each bubble's site; failover ignores hold and dwell.
//! 5. **Load.** Within a site, an overloaded bubble is cut across more servers through the widest
//!    gap between its groups; the latest cut is undone when load stays low.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::bubble::{Bubble, Cut, LoadState, part_of, widest_gap};
use crate::config::{ConfigError, Sites, Thresholds};
use crate::geom::{Aabb, Vec3};
use crate::grouping::{Grouper, Groups, Item};
use crate::ids::{BubbleId, Epoch, Generation, PlayerId, SiteId, WorldId};
use crate::lease::{LeaseError, LeaseTable};
use crate::player::{Player, PlayerJoin, PlayerUpdate};
use crate::scoring::{Hysteresis, MoveReason, SiteScore, Tally, best_site, latency_ms};
use crate::time::{Span, Time};

const NONE: u32 = u32::MAX;

/// Everything the mesh is configured with.
#[derive(Clone, Debug)]
pub struct MeshConfig {
    pub sites: Sites,
    pub thresholds: Thresholds,
    /// The core generation, persisted by the caller before serving (epochs build on it).
    pub generation: Generation,
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
    BadNumber {
        field: &'static str,
        value: f64,
        extra: &'static str,
    },
    #[error("home site index {0} is not configured")]
    UnknownSite(usize),
    #[error(transparent)]
    Lease(#[from] LeaseError<SiteId>),
}

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
}

/// Why a bubble ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteReason {
    /// Its last counted player left.
    Empty,
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
    /// Hand a bubble over to another site under the new `epoch` (SPEC section 5).
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
    Enter {
        bubble: BubbleId,
        site: SiteId,
        from_site: Option<SiteId>,
        players: Vec<PlayerId>,
    },
    /// Fold bubble `from` into `into` (preventive merge); `from`'s lease is revoked.
    Merge {
        into: BubbleId,
        from: BubbleId,
        from_site: SiteId,
        into_site: SiteId,
        players: Vec<PlayerId>,
    },
    /// End a bubble and revoke its lease.
    Delete {
        bubble: BubbleId,
        site: SiteId,
        epoch: Epoch,
        reason: DeleteReason,
    },
    /// Moving border: the bubble's box follows its players.
    Border { bubble: BubbleId, bounds: Aabb },
    /// Re-cut a bubble across `parts.len()` servers of its site.
    Servers {
        bubble: BubbleId,
        site: SiteId,
        parts: Vec<Aabb>,
        reason: LoadReason,
    },
    /// A bubble's lease expired: its site stopped, players see "reconnecting" until the failover.
    Stalled {
        bubble: BubbleId,
        site: SiteId,
        since: Time,
    },
}

/// Figures of one tick, for logs, metrics and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct TickStats {
    pub players: u32,
    pub counted: u32,
    pub clusters: u32,
    pub bubbles: u32,
    pub in_zone: u32,
    pub created: u32,
    pub moved: u32,
    pub merged: u32,
    pub deleted: u32,
    pub borders: u32,
    pub load_changes: u32,
}

/// The brain. See the module documentation.
#[derive(Debug)]
pub struct Mesh {
    sites: Sites,
    th: Thresholds,
    players: Vec<Player>,
    /// Per player: slot of its bubble, or `NONE` (core zone, or NPC).
    player_bubble: Vec<u32>,
    /// Per player: joined since the last tick.
    fresh: Vec<bool>,
    player_index: FxHashMap<PlayerId, u32>,
    bubbles: Vec<Option<Bubble>>,
    free_slots: Vec<u32>,
    bubble_index: FxHashMap<BubbleId, u32>,
    next_bubble: u64,
    leases: LeaseTable<BubbleId, SiteId>,
    /// Ready servers per site (`None`: unlimited). The core site can always host, through zones.
    ready: Vec<Option<u32>>,
    used: Vec<u32>,
    down: Vec<bool>,
    /// Slots freed during a tick, reusable only from the next one (slots name bubbles within a tick).
    retired_slots: Vec<u32>,
    next_tick: Time,
    commands: VecDeque<Command>,
    last_stats: TickStats,
    scratch: Scratch,
}

/// Per-tick buffers, kept to avoid reallocating a million-entry vector every 5 s.
#[derive(Debug, Default)]
struct Scratch {
    grouper: Grouper,
    items: Vec<Item>,
    item_player: Vec<u32>,
    tallies: Vec<Tally>,
    cluster_box: Vec<(Aabb, f64)>,
    cluster_bubble: Vec<u32>,
    /// Per bubble slot: the tally index (cluster) describing it this tick.
    slot_tally: Vec<u32>,
    /// Per bubble slot: created, moved or merged this tick (no scoring until the next one).
    touched: Vec<bool>,
    /// Per bubble slot at the start of the tick: its site and hysteresis (split-offs inherit them).
    prior: Vec<Option<(SiteId, Hysteresis)>>,
    /// Per bubble slot at the start of the tick: the slot it was merged into, if it was.
    absorbed_into: Vec<u32>,
    /// Counted players per bubble slot, as compressed rows (player indices).
    member_offsets: Vec<u32>,
    member_list: Vec<u32>,
}

impl Scratch {
    fn members(&self, slot: u32) -> &[u32] {
        let s = slot as usize;
        if s + 1 >= self.member_offsets.len() {
            return &[];
        }
        &self.member_list[self.member_offsets[s] as usize..self.member_offsets[s + 1] as usize]
    }
}

impl Mesh {
    pub fn new(config: MeshConfig, now: Time) -> Result<Self, Vec<ConfigError>> {
        config.thresholds.validate()?;
        let n = config.sites.len();
        let th = config.thresholds;
        Ok(Mesh {
            leases: LeaseTable::new(
                config.generation,
                Span::from_ms(th.lease_ttl_ms),
                Span::from_ms(th.lease_drift_margin_ms),
            ),
            sites: config.sites,
            th,
            players: Vec::new(),
            player_bubble: Vec::new(),
            fresh: Vec::new(),
            player_index: FxHashMap::default(),
            bubbles: Vec::new(),
            free_slots: Vec::new(),
            bubble_index: FxHashMap::default(),
            next_bubble: 1,
            ready: vec![None; n],
            used: vec![0; n],
            down: vec![false; n],
            retired_slots: Vec::new(),
            next_tick: now,
            commands: VecDeque::new(),
            last_stats: TickStats::default(),
            scratch: Scratch::default(),
        })
    }

    // ---- inputs -------------------------------------------------------------------------------

    /// A player connected to their home agent.
    pub fn handle_join(&mut self, join: PlayerJoin) -> Result<(), InputError> {
        if self.player_index.contains_key(&join.id) {
            return Err(InputError::DuplicatePlayer(join.id));
        }
        if join.home.index() >= self.sites.len() {
            return Err(InputError::UnknownSite(join.home.index()));
        }
        check_rtt(join.access_rtt_ms)?;
        check_vec("position", join.position)?;
        check_vec("velocity", join.velocity)?;
        self.player_index.insert(join.id, self.players.len() as u32);
        self.players.push(Player::from_join(&join));
        self.player_bubble.push(NONE);
        self.fresh.push(true);
        Ok(())
    }

    /// A player changed (position, velocity, role, world, or a new access RTT sample).
    pub fn handle_update(&mut self, id: PlayerId, update: &PlayerUpdate) -> Result<(), InputError> {
        let &i = self
            .player_index
            .get(&id)
            .ok_or(InputError::UnknownPlayer(id))?;
        if let Some(r) = update.access_rtt_ms {
            check_rtt(r)?;
        }
        if let Some(p) = update.position {
            check_vec("position", p)?;
        }
        if let Some(v) = update.velocity {
            check_vec("velocity", v)?;
        }
        self.players[i as usize].apply(update);
        Ok(())
    }

    /// A player disconnected.
    pub fn handle_leave(&mut self, id: PlayerId) -> Result<(), InputError> {
        let i = self
            .player_index
            .remove(&id)
            .ok_or(InputError::UnknownPlayer(id))? as usize;
        self.players.swap_remove(i);
        self.player_bubble.swap_remove(i);
        self.fresh.swap_remove(i);
        if let Some(moved) = self.players.get(i) {
            self.player_index.insert(moved.id, i as u32);
        }
        Ok(())
    }

    /// How many servers are ready on a site (`None`: unlimited).
    pub fn handle_site_capacity(&mut self, site: SiteId, ready: Option<u32>) {
        self.ready[site.index()] = ready;
    }

    /// A site's agent lost (or regained) its link to the core. A down site gets nothing new; its
    /// bubbles keep running until their leases expire, then fail over.
    pub fn handle_site_link(&mut self, site: SiteId, up: bool) {
        self.down[site.index()] = !up;
    }

    /// A backbone RTT measurement between two sites.
    pub fn handle_backbone_rtt(&mut self, a: SiteId, b: SiteId, rtt_ms: f64) {
        self.sites.set_backbone_ms(a, b, rtt_ms);
    }

    /// A batched lease renewal from one site's agent, sent at `sent_at` by its clock and received
    /// at `now`. Returns the outcome for each bubble in order.
    pub fn handle_renewal(
        &mut self,
        site: SiteId,
        bubbles: &[(BubbleId, Epoch)],
        now: Time,
    ) -> Vec<Result<Time, LeaseError<SiteId>>> {
        bubbles
            .iter()
            .map(|&(b, e)| self.leases.renew(b, site, e, now))
            .collect()
    }

    /// A game server reported its tick rate for part `part` of a bubble.
    pub fn handle_server_load(
        &mut self,
        bubble: BubbleId,
        part: usize,
        tps: f64,
    ) -> Result<(), InputError> {
        if !tps.is_finite() || tps < 0.0 {
            return Err(InputError::BadNumber {
                field: "tps",
                value: tps,
                extra: " and >= 0",
            });
        }
        let slot = *self
            .bubble_index
            .get(&bubble)
            .ok_or(InputError::UnknownBubble(bubble))?;
        let b = self.bubbles[slot as usize]
            .as_mut()
            .ok_or(InputError::UnknownBubble(bubble))?;
        let n = b.servers() as usize;
        b.load.tps.resize(n, None);
        if let Some(t) = b.load.tps.get_mut(part) {
            *t = Some(tps);
        }
        Ok(())
    }

    /// The holder of `bubble` (sealed at `epoch`) cannot simulate it any more — its server crashed
    /// and the site has no spare. Failover to another site at once, ignoring hold and dwell.
    pub fn handle_bubble_lost(
        &mut self,
        bubble: BubbleId,
        epoch: Epoch,
        now: Time,
    ) -> Result<(), InputError> {
        let slot = *self
            .bubble_index
            .get(&bubble)
            .ok_or(InputError::UnknownBubble(bubble))?;
        let (site, servers) = {
            let b = self.bubble(slot);
            (b.site, b.servers())
        };
        let tally = self.tally_of_slot(slot);
        let target = self.failover_target(&tally, site, servers);
        let lease = self.leases.transfer(bubble, epoch, target, now)?;
        let players = self.slot_players(slot);
        self.relocate(
            slot,
            target,
            lease.epoch,
            MoveReason::Failover,
            now,
            players,
        );
        Ok(())
    }

    // ---- poll ---------------------------------------------------------------------------------

    /// When [`Mesh::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Time {
        self.leases
            .poll_timeout()
            .map_or(self.next_tick, |t| t.min(self.next_tick))
    }

    /// Runs what is due at `now`: lease expiries, and the tick when its period has come.
    pub fn handle_timeout(&mut self, now: Time) {
        self.expire_leases(now);
        if now >= self.next_tick {
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
        self.player_index
            .get(&id)
            .map(|&i| &self.players[i as usize])
    }

    pub fn bubbles(&self) -> impl Iterator<Item = &Bubble> {
        self.bubbles.iter().flatten()
    }

    pub fn bubble_by_id(&self, id: BubbleId) -> Option<&Bubble> {
        self.bubble_index
            .get(&id)
            .and_then(|&s| self.bubbles[s as usize].as_ref())
    }

    /// The bubble simulating a player, if any (none: a core-site zone, or an NPC).
    pub fn bubble_of(&self, id: PlayerId) -> Option<&Bubble> {
        let &i = self.player_index.get(&id)?;
        match self.player_bubble[i as usize] {
            NONE => None,
            s => self.bubbles[s as usize].as_ref(),
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
        self.bubbles[slot as usize]
            .as_ref()
            .expect("live bubble slot")
    }

    fn bubble_mut(&mut self, slot: u32) -> &mut Bubble {
        self.bubbles[slot as usize]
            .as_mut()
            .expect("live bubble slot")
    }

    fn free(&self, s: SiteId) -> u32 {
        if s == self.sites.core() {
            return u32::MAX;
        }
        self.ready[s.index()].map_or(u32::MAX, |r| r.saturating_sub(self.used[s.index()]))
    }

    fn can_host(&self, s: SiteId, servers: u32) -> bool {
        !self.down[s.index()] && self.free(s) >= servers
    }

    fn weight(&self, p: &Player) -> f64 {
        self.th.weights.of(p.role)
    }

    fn expire_leases(&mut self, now: Time) {
        for (id, lease) in self.leases.expire(now) {
            if let Some(&slot) = self.bubble_index.get(&id) {
                let b = self.bubble_mut(slot);
                b.stalled_since = Some(lease.expires_at);
                let cmd = Command::Stalled {
                    bubble: id,
                    site: b.site,
                    since: lease.expires_at,
                };
                self.commands.push_back(cmd);
            }
        }
    }

    /// One scoring period. Returns its figures (also kept in [`Mesh::last_stats`]).
    pub fn tick(&mut self, now: Time) -> TickStats {
        let mut stats = TickStats {
            players: self.players.len() as u32,
            ..TickStats::default()
        };
        let mut sc = std::mem::take(&mut self.scratch);

        // 1. Clusters at the speed-scaled merge distance.
        sc.items.clear();
        sc.item_player.clear();
        for (i, p) in self.players.iter().enumerate() {
            if p.role.is_counted() {
                let radius = self.th.scaled(self.th.merge_distance_m, p.speed());
                sc.items.push(Item {
                    world: p.world,
                    pos: p.position,
                    radius,
                });
                sc.item_player.push(i as u32);
            } else {
                self.player_bubble[i] = NONE;
            }
        }
        stats.counted = sc.items.len() as u32;
        let mut clusters = sc.grouper.group(&sc.items, self.th.merge_distance_m);
        self.describe(&clusters, &mut sc);
        // Clusters whose claimed boxes overlap form one unit (a fast ship's margins can reach
        // past the merge distance), until every unit's box is clear of the others.
        while let Some(units) = unite_overlapping(&clusters, &sc.items, &sc.cluster_box) {
            clusters = units;
            self.describe(&clusters, &mut sc);
        }
        let nc = clusters.len();
        stats.clusters = nc as u32;

        // 2. Continuity: which cluster owns which bubble.
        let nslots = self.bubbles.len();
        sc.prior.clear();
        sc.prior.extend(
            self.bubbles
                .iter()
                .map(|b| b.as_ref().map(|b| (b.site, b.hysteresis))),
        );
        sc.absorbed_into.clear();
        sc.absorbed_into.resize(nslots, NONE);
        let mut owner: Vec<Option<(u32, f64, PlayerId)>> = vec![None; nslots];
        let mut claims: Vec<Vec<(u32, f64, PlayerId)>> = vec![Vec::new(); nc];
        for (c, claim) in claims.iter_mut().enumerate() {
            for &it in clusters.members(c) {
                let pi = sc.item_player[it as usize] as usize;
                let slot = self.player_bubble[pi];
                let p = &self.players[pi];
                if slot == NONE
                    || self.bubbles[slot as usize]
                        .as_ref()
                        .is_none_or(|b| b.world != p.world)
                {
                    continue;
                }
                let w = self.weight(p);
                match claim.iter_mut().find(|e| e.0 == slot) {
                    Some(e) => {
                        e.1 += w;
                        e.2 = e.2.min(p.id);
                    }
                    None => claim.push((slot, w, p.id)),
                }
            }
            for &(slot, w, min_id) in claim.iter() {
                let better = owner[slot as usize]
                    .is_none_or(|(_, ow, oid)| w > ow || (w == ow && min_id < oid));
                if better {
                    owner[slot as usize] = Some((c as u32, w, min_id));
                }
            }
        }

        sc.slot_tally.clear();
        sc.slot_tally.resize(nslots, NONE);
        sc.touched.clear();
        sc.touched.resize(nslots, false);
        sc.cluster_bubble.clear();
        sc.cluster_bubble.resize(nc, NONE);
        for (c, claim) in claims.iter().enumerate() {
            let mut owned: Vec<u32> = claim
                .iter()
                .filter(|e| owner[e.0 as usize].is_some_and(|o| o.0 == c as u32))
                .map(|e| e.0)
                .collect();
            let slot = match owned.len() {
                0 if claim.is_empty() => self.create_new(c, &clusters, &mut sc, now, &mut stats),
                0 => {
                    // Invariant: a non-empty claim list has a heaviest entry.
                    let source = claim
                        .iter()
                        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.2.cmp(&a.2)))
                        .map(|e| e.0)
                        .expect("non-empty claims");
                    // Invariant: a claimed slot was live at the start of the tick.
                    let (site, hysteresis) =
                        sc.prior[source as usize].expect("claimed slot was live");
                    self.create_split(c, &clusters, &mut sc, site, hysteresis, now, &mut stats)
                }
                1 => {
                    sc.slot_tally[owned[0] as usize] = c as u32;
                    owned[0]
                }
                _ => {
                    owned.sort_by(|a, b| {
                        let (wa, wb) = (weight_in(claim, *a), weight_in(claim, *b));
                        wb.total_cmp(&wa)
                            .then(self.bubble(*a).id.cmp(&self.bubble(*b).id))
                    });
                    for &s in &owned {
                        sc.slot_tally[s as usize] = c as u32;
                    }
                    let members: Vec<(PlayerId, u32)> = clusters
                        .members(c)
                        .iter()
                        .map(|&it| {
                            let pi = sc.item_player[it as usize] as usize;
                            (self.players[pi].id, self.player_bubble[pi])
                        })
                        .collect();
                    let t = sc.tallies[c].clone();
                    let (bx, m) = sc.cluster_box[c];
                    self.merge_bubbles(
                        &owned,
                        &t,
                        claimed_box((bx, m)),
                        members,
                        &mut sc,
                        &mut stats,
                    )
                }
            };
            sc.cluster_bubble[c] = slot;
            if slot != NONE {
                sc.slot_tally.resize(self.bubbles.len(), NONE);
                sc.slot_tally[slot as usize] = c as u32;
            }
        }

        // Bubbles nobody owns any more are deleted.
        for slot in 0..nslots as u32 {
            // Only bubbles live at the start: a slot freed earlier may hold a bubble created just now.
            let was_live = sc.prior[slot as usize].is_some();
            if was_live && owner[slot as usize].is_none() && self.bubbles[slot as usize].is_some() {
                self.delete(slot, DeleteReason::Empty);
                stats.deleted += 1;
            }
        }

        self.report_entries(&clusters, &sc);
        for c in 0..nc {
            let slot = sc.cluster_bubble[c];
            for &it in clusters.members(c) {
                self.player_bubble[sc.item_player[it as usize] as usize] = slot;
            }
        }

        // 3. Moving borders, and no two regions overlapping.
        self.settle_bounds(&clusters, &sc, &mut stats);
        self.index_members(&mut sc);

        // 4. Scoring, hysteresis and failover.
        sc.touched.resize(self.bubbles.len(), false);
        sc.slot_tally.resize(self.bubbles.len(), NONE);
        for slot in 0..self.bubbles.len() as u32 {
            if self.bubbles[slot as usize].is_none() || sc.touched[slot as usize] {
                continue;
            }
            let ti = sc.slot_tally[slot as usize];
            if ti == NONE {
                continue;
            }
            let tally = &sc.tallies[ti as usize];
            let b = self.bubble(slot);
            let (id, site, servers) = (b.id, b.site, b.servers());
            if b.stalled_since.is_some() {
                let target = self.failover_target(tally, site, servers);
                if let Ok(lease) = self.leases.grant(id, target, now) {
                    let players = member_ids(&self.players, sc.members(slot));
                    self.relocate(
                        slot,
                        target,
                        lease.epoch,
                        MoveReason::Failover,
                        now,
                        players,
                    );
                    stats.moved += 1;
                }
                continue;
            }
            let current = SiteScore::of(tally, &self.sites, site);
            let best = best_site(tally, &self.sites, self.th.cap_ms, Some(site), |s| {
                s == site || self.can_host(s, servers)
            });
            let sum_w = tally.sum_w;
            let th = self.th.clone();
            let verdict = self
                .bubble_mut(slot)
                .hysteresis
                .decide(now, &current, &best, sum_w, &th);
            if let crate::scoring::Verdict::Move(reason) = verdict {
                let epoch = self.bubble(slot).epoch;
                if let Ok(lease) = self.leases.transfer(id, epoch, best.site, now) {
                    let players = member_ids(&self.players, sc.members(slot));
                    self.relocate(slot, best.site, lease.epoch, reason, now, players);
                    stats.moved += 1;
                }
            }
        }

        // 5. Load: split across more servers of the site, or undo the latest split.
        self.balance_load(&mut sc, now, &mut stats);

        self.free_slots.append(&mut self.retired_slots);
        for f in self.fresh.iter_mut() {
            *f = false;
        }
        stats.bubbles = self.bubbles().count() as u32;
        stats.in_zone = self
            .player_bubble
            .iter()
            .zip(&self.players)
            .filter(|(s, p)| **s == NONE && p.role.is_counted())
            .count() as u32;
        self.scratch = sc;
        self.last_stats = stats;
        stats
    }

    /// Reports players who enter a bubble that existed before this tick, other than through a
    /// merge (whose command lists them): fresh connections, players from a zone, border crossings.
    fn report_entries(&mut self, clusters: &Groups, sc: &Scratch) {
        let core = self.sites.core();
        for c in 0..clusters.len() {
            let slot = sc.cluster_bubble[c];
            if slot == NONE || sc.prior.get(slot as usize).is_none_or(|p| p.is_none()) {
                continue; // in a zone, or a bubble created this tick (its command lists everyone)
            }
            let mut entering: Vec<(Option<SiteId>, PlayerId)> = Vec::new();
            for &it in clusters.members(c) {
                let pi = sc.item_player[it as usize] as usize;
                let prev = self.player_bubble[pi];
                if prev == slot || sc.absorbed_into.get(prev as usize) == Some(&slot) {
                    continue;
                }
                let from = if self.fresh[pi] {
                    None
                } else if prev == NONE {
                    Some(core)
                } else {
                    sc.prior
                        .get(prev as usize)
                        .copied()
                        .flatten()
                        .map(|(site, _)| site)
                };
                entering.push((from, self.players[pi].id));
            }
            if entering.is_empty() {
                continue;
            }
            entering.sort_unstable();
            let (id, site) = (self.bubble(slot).id, self.bubble(slot).site);
            for chunk in entering.chunk_by(|a, b| a.0 == b.0) {
                let players = chunk.iter().map(|e| e.1).collect();
                self.commands.push_back(Command::Enter {
                    bubble: id,
                    site,
                    from_site: chunk[0].0,
                    players,
                });
            }
        }
    }

    /// Per cluster: tally, member box and the largest speed-scaled border margin.
    fn describe(&self, clusters: &Groups, sc: &mut Scratch) {
        let nc = clusters.len();
        while sc.tallies.len() < nc {
            sc.tallies.push(Tally::new(self.sites.len()));
        }
        sc.cluster_box.clear();
        for c in 0..nc {
            let t = &mut sc.tallies[c];
            t.clear();
            let members = clusters.members(c);
            let first = self.players[sc.item_player[members[0] as usize] as usize].position;
            let mut bx = Aabb::point(first);
            let mut margin: f64 = 0.0;
            for &it in members {
                let p = &self.players[sc.item_player[it as usize] as usize];
                t.add(p, self.th.weights.of(p.role));
                bx = bx.include(p.position);
                margin = margin.max(self.th.scaled(self.th.border_margin_m, p.speed()));
            }
            sc.cluster_box.push((bx, margin));
        }
    }

    fn cluster_players(&self, clusters: &Groups, sc: &Scratch, c: usize) -> Vec<PlayerId> {
        let mut v: Vec<PlayerId> = clusters
            .members(c)
            .iter()
            .map(|&it| self.players[sc.item_player[it as usize] as usize].id)
            .collect();
        v.sort_unstable();
        v
    }

    fn slot_players(&self, slot: u32) -> Vec<PlayerId> {
        let mut v: Vec<PlayerId> = self
            .player_bubble
            .iter()
            .zip(&self.players)
            .filter(|(s, _)| **s == slot)
            .map(|(_, p)| p.id)
            .collect();
        v.sort_unstable();
        v
    }

    fn tally_of_slot(&self, slot: u32) -> Tally {
        let mut t = Tally::new(self.sites.len());
        for (s, p) in self.player_bubble.iter().zip(&self.players) {
            if *s == slot {
                t.add(p, self.weight(p));
            }
        }
        t
    }

    fn failover_target(&self, tally: &Tally, failed: SiteId, servers: u32) -> SiteId {
        best_site(tally, &self.sites, self.th.cap_ms, None, |s| {
            s != failed && self.can_host(s, servers)
        })
        .site
    }

    /// Puts a new bubble in `slot` and accounts its server.
    fn insert_bubble(
        &mut self,
        site: SiteId,
        world: WorldId,
        bounds: Aabb,
        now: Time,
        hysteresis: Hysteresis,
    ) -> Option<(u32, Epoch)> {
        let id = BubbleId(self.next_bubble);
        let lease = self.leases.grant(id, site, now).ok()?;
        self.next_bubble += 1;
        let bubble = Bubble {
            id,
            site,
            world,
            bounds,
            epoch: lease.epoch,
            hysteresis: Hysteresis {
                best_since: None,
                last_move: hysteresis.last_move,
            },
            created_at: now,
            cuts: Vec::new(),
            players: 0,
            stalled_since: None,
            load: LoadState::default(),
        };
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.bubbles[s as usize] = Some(bubble);
                s
            }
            None => {
                self.bubbles.push(Some(bubble));
                self.bubbles.len() as u32 - 1
            }
        };
        self.bubble_index.insert(id, slot);
        self.used[site.index()] += 1;
        Some((slot, lease.epoch))
    }

    fn mark_touched(sc: &mut Scratch, slot: u32) {
        if sc.touched.len() <= slot as usize {
            sc.touched.resize(slot as usize + 1, false);
        }
        sc.touched[slot as usize] = true;
    }

    /// A cluster that was nowhere (fresh players) or waiting in a core-site zone.
    fn create_new(
        &mut self,
        c: usize,
        clusters: &Groups,
        sc: &mut Scratch,
        now: Time,
        stats: &mut TickStats,
    ) -> u32 {
        let members = clusters.members(c);
        let fresh = members
            .iter()
            .all(|&it| self.fresh[sc.item_player[it as usize] as usize]);
        // Where were they? Nowhere (fresh), in a bubble of another world, or in a core-site zone.
        let travelled_from = members.iter().find_map(|&it| {
            let slot = self.player_bubble[sc.item_player[it as usize] as usize];
            sc.prior
                .get(slot as usize)
                .copied()
                .flatten()
                .map(|(site, _)| site)
        });
        let tally = &sc.tallies[c];
        let homes: Vec<usize> = tally.homes().collect();
        let home = match homes[..] {
            [h] => self.sites.ids().nth(h),
            _ => None,
        };
        let site = match home {
            // Alone, or among players of the same home: on the home site...
            Some(home) if self.can_host(home, 1) => home,
            // ... or wait in a core-site zone until it has a server ready.
            Some(_) if travelled_from.is_none() => return NONE,
            _ => {
                best_site(tally, &self.sites, self.th.cap_ms, None, |s| {
                    self.can_host(s, 1)
                })
                .site
            }
        };
        let (bx, m) = sc.cluster_box[c];
        let world = self.players[sc.item_player[members[0] as usize] as usize].world;
        let Some((slot, epoch)) = self.insert_bubble(
            site,
            world,
            claimed_box((bx, m)),
            now,
            Hysteresis::default(),
        ) else {
            return NONE;
        };
        let (previous_site, reason) = match travelled_from {
            _ if fresh => (None, CreateReason::Join),
            Some(site) => (Some(site), CreateReason::Travel),
            None => (Some(self.sites.core()), CreateReason::ServerReady),
        };
        let players = self.cluster_players(clusters, sc, c);
        let b = self.bubble(slot);
        self.commands.push_back(Command::Create {
            bubble: b.id,
            site,
            previous_site,
            world,
            bounds: b.bounds,
            epoch,
            players,
            reason,
        });
        Self::mark_touched(sc, slot);
        stats.created += 1;
        slot
    }

    /// A cluster that walked away from its bubble: a new bubble, on the same site if it can host
    /// it (no handover), keeping the parent's last move so hold still applies.
    #[allow(clippy::too_many_arguments)]
    fn create_split(
        &mut self,
        c: usize,
        clusters: &Groups,
        sc: &mut Scratch,
        parent_site: SiteId,
        parent: Hysteresis,
        now: Time,
        stats: &mut TickStats,
    ) -> u32 {
        let site = if self.can_host(parent_site, 1) {
            parent_site
        } else {
            best_site(&sc.tallies[c], &self.sites, self.th.cap_ms, None, |s| {
                self.can_host(s, 1)
            })
            .site
        };
        let (bx, m) = sc.cluster_box[c];
        let world = self.players[sc.item_player[clusters.members(c)[0] as usize] as usize].world;
        let Some((slot, epoch)) =
            self.insert_bubble(site, world, claimed_box((bx, m)), now, parent)
        else {
            return NONE;
        };
        let players = self.cluster_players(clusters, sc, c);
        let b = self.bubble(slot);
        self.commands.push_back(Command::Create {
            bubble: b.id,
            site,
            previous_site: Some(parent_site),
            world,
            bounds: b.bounds,
            epoch,
            players,
            reason: CreateReason::Split,
        });
        Self::mark_touched(sc, slot);
        stats.created += 1;
        slot
    }

    /// Preventive merge of `slots` (heaviest first) whose union is described by `tally`, at once
    /// (they must not meet across a site border). The union stays on whichever of their sites
    /// scores best for it; no bubble changes site here, so hold and dwell keep governing moves,
    /// and the next ticks may move the union like any bubble. Returns the surviving slot.
    #[allow(clippy::too_many_arguments)]
    fn merge_bubbles(
        &mut self,
        slots: &[u32],
        tally: &Tally,
        bounds: Aabb,
        members: Vec<(PlayerId, u32)>,
        sc: &mut Scratch,
        stats: &mut TickStats,
    ) -> u32 {
        let sites_of: Vec<SiteId> = slots.iter().map(|&s| self.bubble(s).site).collect();
        let best = best_site(tally, &self.sites, self.th.cap_ms, Some(sites_of[0]), |s| {
            sites_of.contains(&s)
        });
        // The core site is always scored; if it won without hosting any of them, keep the heaviest.
        let survivor = slots
            .iter()
            .copied()
            .find(|&s| self.bubble(s).site == best.site)
            .unwrap_or(slots[0]);
        let (into, into_site) = (self.bubble(survivor).id, self.bubble(survivor).site);
        let mut by_slot = members;
        by_slot.sort_unstable_by_key(|m| (m.1, m.0));
        for &s in slots.iter().filter(|&&s| s != survivor) {
            let b = self.bubble(s);
            let (lo, hi) = (
                by_slot.partition_point(|m| m.1 < s),
                by_slot.partition_point(|m| m.1 <= s),
            );
            let moving: Vec<PlayerId> = by_slot[lo..hi].iter().map(|m| m.0).collect();
            let cmd = Command::Merge {
                into,
                from: b.id,
                from_site: b.site,
                into_site,
                players: moving,
            };
            self.commands.push_back(cmd);
            self.remove(s);
            if let Some(a) = sc.absorbed_into.get_mut(s as usize) {
                *a = survivor;
            }
            stats.merged += 1;
        }
        let b = self.bubble_mut(survivor);
        b.bounds = bounds;
        b.hysteresis.best_since = None;
        self.commands.push_back(Command::Border {
            bubble: into,
            bounds,
        });
        Self::mark_touched(sc, survivor);
        survivor
    }

    /// Moves a bubble to `to` under `epoch` and reports it.
    fn relocate(
        &mut self,
        slot: u32,
        to: SiteId,
        epoch: Epoch,
        reason: MoveReason,
        now: Time,
        players: Vec<PlayerId>,
    ) {
        let b = self.bubble_mut(slot);
        let (from, servers, id) = (b.site, b.servers(), b.id);
        b.site = to;
        b.epoch = epoch;
        b.stalled_since = None;
        b.hysteresis.moved(now);
        self.used[from.index()] = self.used[from.index()].saturating_sub(servers);
        self.used[to.index()] += servers;
        self.commands.push_back(Command::Move {
            bubble: id,
            from,
            to,
            epoch,
            players,
            reason,
        });
    }

    /// Frees a slot (its lease revoked, its servers released) without reporting. Its players are
    /// reassigned by the caller; the slot is reused from the next tick on.
    fn remove(&mut self, slot: u32) {
        if let Some(b) = self.bubbles[slot as usize].take() {
            let _ = self.leases.revoke(b.id, b.epoch);
            self.bubble_index.remove(&b.id);
            self.used[b.site.index()] = self.used[b.site.index()].saturating_sub(b.servers());
            self.retired_slots.push(slot);
        }
    }

    /// Builds the per-bubble member rows from `player_bubble`.
    fn index_members(&self, sc: &mut Scratch) {
        let n = self.bubbles.len();
        sc.member_offsets.clear();
        sc.member_offsets.resize(n + 1, 0);
        for (p, &s) in self.players.iter().zip(&self.player_bubble) {
            if s != NONE && p.role.is_counted() {
                sc.member_offsets[s as usize + 1] += 1;
            }
        }
        for i in 0..n {
            sc.member_offsets[i + 1] += sc.member_offsets[i];
        }
        let mut fill = sc.member_offsets[..n].to_vec();
        sc.member_list.clear();
        sc.member_list.resize(sc.member_offsets[n] as usize, 0);
        for (i, (p, &s)) in self.players.iter().zip(&self.player_bubble).enumerate() {
            if s != NONE && p.role.is_counted() {
                sc.member_list[fill[s as usize] as usize] = i as u32;
                fill[s as usize] += 1;
            }
        }
    }

    fn delete(&mut self, slot: u32, reason: DeleteReason) {
        let b = self.bubble(slot);
        let cmd = Command::Delete {
            bubble: b.id,
            site: b.site,
            epoch: b.epoch,
            reason,
        };
        self.commands.push_back(cmd);
        self.remove(slot);
    }

    /// Merges bubbles whose boxes overlap (a fast ship's margins can reach past the merge
    /// distance), until no two bubbles of a world overlap.
    /// Moving border: a bubble keeps its box while every member stays farther than half its
    /// margin from the edge; otherwise the box is reset to the one its players claim (their box
    /// grown by the margin), so the border moves with them, a margin at a time. Claims of
    /// different bubbles (and of players waiting in zones) never overlap, so resetting any stale
    /// box that overlaps another region ends with no overlap at all.
    fn settle_bounds(&mut self, clusters: &Groups, sc: &Scratch, stats: &mut TickStats) {
        let mut claims: Vec<Option<Aabb>> = vec![None; self.bubbles.len()];
        let mut obstacles: Vec<(WorldId, Aabb, u32)> = Vec::new();
        for c in 0..clusters.len() {
            let slot = sc.cluster_bubble[c];
            let claimed = claimed_box(sc.cluster_box[c]);
            if slot == NONE {
                let world = sc.items[clusters.members(c)[0] as usize].world;
                obstacles.push((world, claimed, NONE));
                continue;
            }
            claims[slot as usize] = Some(claimed);
            let bounds = self.bubble(slot).bounds;
            let near_edge = bounds != claimed
                && clusters.members(c).iter().any(|&it| {
                    let p = &self.players[sc.item_player[it as usize] as usize];
                    let margin = self.th.scaled(self.th.border_margin_m, p.speed());
                    bounds.inner_distance(p.position) < margin / 2.0
                });
            if near_edge {
                self.set_bounds(slot, claimed, stats);
            }
        }
        // Bounded: each round resets at least one stale box to its claim.
        loop {
            let mut boxes: Vec<(WorldId, Aabb, u32)> = obstacles.clone();
            for (slot, b) in self.bubbles.iter().enumerate() {
                if let Some(b) = b {
                    boxes.push((b.world, b.bounds, slot as u32));
                }
            }
            let mut reset = false;
            for (a, b) in overlapping(&mut boxes) {
                for slot in [a, b] {
                    if slot == NONE {
                        continue;
                    }
                    // Invariant: every live bubble holds one cluster, so it has a claim.
                    let claimed = claims[slot as usize].expect("a live bubble has a claim");
                    if self.bubble(slot).bounds != claimed {
                        self.set_bounds(slot, claimed, stats);
                        reset = true;
                    }
                }
            }
            if !reset {
                break;
            }
        }
    }

    fn set_bounds(&mut self, slot: u32, bounds: Aabb, stats: &mut TickStats) {
        let b = self.bubble_mut(slot);
        b.bounds = bounds;
        let cmd = Command::Border {
            bubble: b.id,
            bounds,
        };
        self.commands.push_back(cmd);
        stats.borders += 1;
    }

    fn balance_load(&mut self, sc: &mut Scratch, now: Time, stats: &mut TickStats) {
        let pps = self.th.players_per_server;
        // Counted players per bubble part.
        let mut counts: Vec<Vec<u32>> = Vec::with_capacity(self.bubbles.len());
        let mut parts: Vec<Vec<Aabb>> = Vec::with_capacity(self.bubbles.len());
        for b in &self.bubbles {
            let p = b.as_ref().map(|b| b.parts()).unwrap_or_default();
            counts.push(vec![0; p.len()]);
            parts.push(p);
        }
        for (p, &slot) in self.players.iter().zip(&self.player_bubble) {
            if slot != NONE && p.role.is_counted() {
                let s = slot as usize;
                if parts[s].len() == 1 {
                    counts[s][0] += 1;
                } else {
                    let k = part_of(&parts[s], p.position);
                    counts[s][k] += 1;
                }
            }
        }
        for slot in 0..self.bubbles.len() {
            let Some(b) = self.bubbles[slot].as_mut() else {
                continue;
            };
            b.players = counts[slot].iter().sum();
            if b.stalled_since.is_some() {
                continue;
            }
            let low_tps = |i: usize| {
                b.load
                    .tps
                    .get(i)
                    .copied()
                    .flatten()
                    .is_some_and(|t| t < self.th.tps_min)
            };
            let hot = (0..counts[slot].len()).filter(|&i| counts[slot][i] > pps || low_tps(i));
            let hottest = hot.max_by_key(|&i| counts[slot][i]);
            let settled = b
                .load
                .last_change
                .is_none_or(|t| now.since(t) >= Span::from_ms(self.th.settle_ms));
            if let Some(part) = hottest {
                b.load.low_since = None;
                let since = *b.load.overloaded_since.get_or_insert(now);
                if now.since(since) < Span::from_ms(self.th.split_sustain_ms) || !settled {
                    continue;
                }
                let site = b.site;
                if !self.can_host(site, 1) {
                    continue;
                }
                let Some(cut) = self.cut_for(sc, slot as u32, &parts[slot], part) else {
                    continue;
                };
                let b = self.bubble_mut(slot as u32);
                b.cuts.push(cut);
                self.after_load_change(slot as u32, 1, LoadReason::Overload, now);
                stats.load_changes += 1;
                sc.touched.resize(self.bubbles.len(), false);
            } else if let Some(last) = b.cuts.last().copied() {
                b.load.overloaded_since = None;
                let pair = counts[slot][last.part as usize] + counts[slot][b.cuts.len()];
                if (pair as f64) > pps as f64 * self.th.merge_fill_ratio {
                    b.load.low_since = None;
                    continue;
                }
                let since = *b.load.low_since.get_or_insert(now);
                if now.since(since) < Span::from_ms(self.th.merge_low_ms) || !settled {
                    continue;
                }
                b.cuts.pop();
                self.after_load_change(slot as u32, -1, LoadReason::Underload, now);
                stats.load_changes += 1;
            } else {
                b.load.overloaded_since = None;
                b.load.low_since = None;
            }
        }
    }

    fn after_load_change(&mut self, slot: u32, delta: i32, reason: LoadReason, now: Time) {
        let b = self.bubble_mut(slot);
        b.load.last_change = Some(now);
        b.load.overloaded_since = None;
        b.load.low_since = None;
        b.load.tps = vec![None; b.servers() as usize];
        let (id, site, parts) = (b.id, b.site, b.parts());
        let used = &mut self.used[site.index()];
        *used = if delta > 0 {
            *used + 1
        } else {
            used.saturating_sub(1)
        };
        self.commands.push_back(Command::Servers {
            bubble: id,
            site,
            parts,
            reason,
        });
    }

    /// Where to cut part `part` of a bubble: the widest gap between its groups (grouping radius),
    /// so that no group is ever cut. `None` if its players form one unbroken group.
    fn cut_for(&self, sc: &Scratch, slot: u32, parts: &[Aabb], part: usize) -> Option<Cut> {
        let bx = parts[part];
        let members: Vec<&Player> = sc
            .members(slot)
            .iter()
            .map(|&i| &self.players[i as usize])
            .filter(|p| part_of(parts, p.position) == part)
            .collect();
        let items: Vec<Item> = members
            .iter()
            .map(|p| Item {
                world: p.world,
                pos: p.position,
                radius: self.th.scaled(self.th.group_radius_m, p.speed()),
            })
            .collect();
        let groups = Grouper::new().group(&items, self.th.group_radius_m);
        let boxes: Vec<(Aabb, u32)> = (0..groups.len())
            .map(|g| {
                let m = groups.members(g);
                let first = Aabb::point(items[m[0] as usize].pos);
                (
                    m.iter()
                        .fold(first, |b, &i| b.include(items[i as usize].pos)),
                    m.len() as u32,
                )
            })
            .collect();
        let (axis, at, _) = widest_gap(&boxes)?;
        (bx.min.axis(axis) < at && at < bx.max.axis(axis)).then_some(Cut {
            part: part as u16,
            axis: axis as u8,
            at,
        })
    }
}

/// The box a cluster claims: its members' box grown by their largest speed-scaled margin.
fn claimed_box((bx, margin): (Aabb, f64)) -> Aabb {
    bx.expand(margin)
}

/// Overlapping pairs among `boxes` (same world), by sweeping along x.
fn overlapping(boxes: &mut [(WorldId, Aabb, u32)]) -> Vec<(u32, u32)> {
    boxes.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.min.x.total_cmp(&b.1.min.x)));
    let mut pairs = Vec::new();
    for i in 0..boxes.len() {
        for j in i + 1..boxes.len() {
            if boxes[j].0 != boxes[i].0 || boxes[j].1.min.x >= boxes[i].1.max.x {
                break;
            }
            if boxes[i].1.overlaps(&boxes[j].1) {
                pairs.push((boxes[i].2, boxes[j].2));
            }
        }
    }
    pairs
}

/// Joins clusters whose claimed boxes overlap; `None` when no two overlap.
fn unite_overlapping(clusters: &Groups, items: &[Item], boxes: &[(Aabb, f64)]) -> Option<Groups> {
    let mut claims: Vec<(WorldId, Aabb, u32)> = (0..clusters.len())
        .map(|c| {
            (
                items[clusters.members(c)[0] as usize].world,
                claimed_box(boxes[c]),
                c as u32,
            )
        })
        .collect();
    let pairs = overlapping(&mut claims);
    if pairs.is_empty() {
        return None;
    }
    let mut root: Vec<u32> = (0..clusters.len() as u32).collect();
    fn find(root: &mut [u32], mut x: u32) -> u32 {
        while root[x as usize] != x {
            root[x as usize] = root[root[x as usize] as usize];
            x = root[x as usize];
        }
        x
    }
    for (a, b) in pairs {
        let (ra, rb) = (find(&mut root, a), find(&mut root, b));
        root[ra.max(rb) as usize] = ra.min(rb);
    }
    let labels: Vec<u32> = (0..items.len())
        .map(|it| find(&mut root, clusters.group_of(it) as u32))
        .collect();
    Some(Groups::from_labels(&labels, clusters.len()))
}

fn member_ids(players: &[Player], members: &[u32]) -> Vec<PlayerId> {
    let mut v: Vec<PlayerId> = members.iter().map(|&i| players[i as usize].id).collect();
    v.sort_unstable();
    v
}

fn weight_in(claims: &[(u32, f64, PlayerId)], slot: u32) -> f64 {
    claims.iter().find(|e| e.0 == slot).map_or(0.0, |e| e.1)
}

fn check_rtt(ms: f64) -> Result<(), InputError> {
    if ms.is_finite() && ms >= 0.0 {
        Ok(())
    } else {
        Err(InputError::BadNumber {
            field: "access_rtt_ms",
            value: ms,
            extra: " and >= 0",
        })
    }
}

fn check_vec(field: &'static str, v: Vec3) -> Result<(), InputError> {
    if v.is_finite() {
        Ok(())
    } else {
        let bad = [v.x, v.y, v.z]
            .into_iter()
            .find(|c| !c.is_finite())
            .unwrap_or(f64::NAN);
        Err(InputError::BadNumber {
            field,
            value: bad,
            extra: "",
        })
    }
}
