//! Zones in the tick (design.md §4, "Within a site (SMD, kept)"; `crate::zones` keeps the
//! layout). After bubbles are placed, every counted player in no bubble is counted in the zone
//! holding their position, and each zone's load is sampled:
//!
//! - **Split.** A zone with more players than `players_per_server`, or whose server reports a
//!   tick rate below `tps_min`, for `split_after_samples` samples is cut on the axis where its players spread most: through the widest gap between
//!   consecutive players in the middle half of them if it is at least [`MIN_GAP_M`] wide, else
//!   at the median (today's SMD rule, so a studio's zones are cut where they are cut today). A
//!   cut that would leave one side empty is skipped.
//! - **Merge.** The two halves of a cut, both still zones, whose players together stay within
//!   `merge_fill_ratio × players_per_server` for `merge_after_samples` samples are joined again,
//!   the most recent split first.
//! - A sample weighs the seconds since the previous one (a tick every 5 s weighs 5), and no zone
//!   splits or merges within `settle_ms` of its last change.
//!
//! Zones live on the core site and are never scored or moved to another site. Each holds a lease
//! like any region: a zone whose lease expires (its server lost, the core site's agent silent)
//! is granted again on the core site as soon as the drift margin allows, and restored there from
//! its copy (a [`Command::Move`] with reason `Failover` from the core site to itself). Their ids
//! share the bubbles' id space from [`ZONE_IDS_FROM`] up, so a region's id names one region
//! whatever its kind, and a zone id never collides with a bubble's, even across a core restart.

use super::*;
use crate::zones::{Zone, ZoneSpec, validate_specs};

/// A gap between two players narrower than this is no place for a cut (SMD's rule).
pub const MIN_GAP_M: f64 = 20.0;

/// How far past its zone's edge a player walks before crossing into the next (SMD's rule).
pub const ZONE_EXIT_MARGIN_M: f64 = 0.4;

pub use crate::ids::ZONE_IDS_FROM;

/// One load sample (a game server's `serverinfo` comes once a second).
const SAMPLE_MS: f64 = 1000.0;

/// Why a zone was split or merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ZoneReason {
    /// Configured in `[[zones]]`.
    Configured,
    /// The first player of a world arrived: the whole world is one zone.
    World,
    /// More players than a server holds, for `split_after_samples` samples.
    Overload,
    /// The two halves' players fitted in `merge_fill_ratio` of a server, for
    /// `merge_after_samples` samples.
    Underload,
}

impl Mesh {
    /// Checks and opens the configured zones (at construction).
    pub(super) fn open_configured_zones(
        &mut self,
        specs: &[ZoneSpec],
        now: Time,
    ) -> Result<(), Vec<ConfigError>> {
        validate_specs(specs, self.th.position_limit_m())?;
        for z in specs {
            self.open_zone(z.world, z.bounds, ZoneReason::Configured, now);
        }
        Ok(())
    }

    /// A world seen for the first time gets one zone covering all of it.
    pub(super) fn open_world(&mut self, world: WorldId) {
        if !self.zones.has_world(world) {
            let limit = self.th.position_limit_m();
            let whole = Aabb::point(Vec3::ZERO).expand(limit);
            self.open_zone(world, whole, ZoneReason::World, self.now_hint);
        }
    }

    fn open_zone(&mut self, world: WorldId, bounds: Aabb, reason: ZoneReason, now: Time) {
        let id = self.mint_zone_id();
        let site = self.sites.core();
        // Invariant: a new id has no lease yet, so the grant cannot be refused.
        let epoch = self.leases.grant(id, site, now).map_or(Epoch(0), |l| l.epoch);
        self.zones.add_root(id, site, world, bounds, epoch, None);
        let cmd = Command::ZoneCreate { zone: id, site, world, bounds, epoch, reason };
        self.commands.push_back(cmd);
    }

    /// After a core restart: a zone the store says was granted, taken back under its id and
    /// epoch (its server may still run it) as a zone of its own; zone ids up to its own are never
    /// handed out again. Call before players join: a world with zones taken back opens no other.
    pub fn handle_restore_zone(
        &mut self,
        restored: RestoredBubble,
        now: Time,
    ) -> Result<(), InputError> {
        let RestoredBubble { id, site, world, bounds, epoch } = restored;
        if site != self.sites.core() {
            return Err(InputError::UnknownSite(site.index()));
        }
        self.leases.restore(id, site, epoch, now)?;
        self.next_zone = self.next_zone.max(id.0 + 1);
        self.zones.add_root(id, site, world, bounds, epoch, None);
        Ok(())
    }

    /// After the zones of a restart are taken back ([`Mesh::handle_restore_zone`]): each
    /// world's zones inside one of its configured boxes (`configured`, the core's `[[zones]]`),
    /// or inside the whole world when it has none, are joined again under a tree of cuts, so
    /// that two neighbours that go quiet merge again. Returns how many trees were rebuilt.
    pub fn regroup_restored_zones(&mut self, configured: &[ZoneSpec]) -> usize {
        let whole = Aabb::point(Vec3::ZERO).expand(self.th.position_limit_m());
        let mut worlds: Vec<WorldId> = self.zones.zones().map(|z| z.world).collect();
        worlds.sort_unstable();
        worlds.dedup();
        let mut rebuilt = 0;
        for world in worlds {
            let boxes: Vec<Aabb> =
                configured.iter().filter(|z| z.world == world).map(|z| z.bounds).collect();
            let boxes = if boxes.is_empty() { vec![whole] } else { boxes };
            rebuilt += boxes.into_iter().filter(|&b| self.zones.regroup(world, b)).count();
        }
        rebuilt
    }

    /// A zone its holder lost (its server crashed, or its agent registered without it): granted
    /// again on the core site at once, under a new epoch, and restored there from its copy (a
    /// [`Command::Move`] with reason `Failover` from the core site to itself), as a lost bubble
    /// is — not at its lease's end.
    pub(super) fn zone_lost(
        &mut self,
        id: BubbleId,
        epoch: Epoch,
        now: Time,
    ) -> Result<(), InputError> {
        let leaf = self.zones.leaf(id).ok_or(InputError::UnknownBubble(id))?;
        let core = self.sites.core();
        let lease = self.leases.transfer(id, epoch, core, now)?;
        // Counted now: the places of the last tick's count are stale between ticks (players
        // left since, and took other places: seed 50001526 of `--stage relay --overlapping`
        // indexed past the end, and the core panicked).
        let players = self.players_in_zone(leaf);
        self.restore_zone(leaf, lease.epoch, players);
        Ok(())
    }

    /// Zone `leaf`, granted again on the core site under `epoch`, is restored there from its
    /// copy with `players` (a failover from the core site to itself).
    fn restore_zone(&mut self, leaf: u32, epoch: Epoch, players: Vec<PlayerId>) {
        let z = self.zones.zone_mut(leaf);
        (z.epoch, z.stalled_since) = (epoch, None);
        let (bubble, core) = (z.id, self.sites.core());
        let reason = MoveReason::Failover;
        let cmd = Command::Move { bubble, from: core, to: core, epoch, players, reason };
        self.commands.push_back(cmd);
    }

    /// A zone's lease expired: it waits to be granted again on the core site.
    pub(super) fn stall_zone(&mut self, id: BubbleId, since: Time) -> bool {
        let Some(leaf) = self.zones.leaf(id) else { return false };
        self.zones.zone_mut(leaf).stalled_since = Some(since);
        let site = self.sites.core();
        self.commands.push_back(Command::Stalled { bubble: id, site, since });
        true
    }

    fn mint_zone_id(&mut self) -> BubbleId {
        let id = BubbleId(self.next_zone);
        self.next_zone += 1;
        id
    }

    /// Counts every zone's players and splits or merges zones (see the module documentation).
    pub(super) fn balance_zones(&mut self, sc: &Scratch, now: Time, stats: &mut TickStats) {
        let weight = match self.zone_sampled_at {
            Some(t) => now.since(t).as_ms() as f64 / SAMPLE_MS,
            None => self.th.period_ms as f64 / SAMPLE_MS,
        };
        self.zone_sampled_at = Some(now);
        let leaves = self.zones.leaves();
        let stalled: Vec<u32> = leaves
            .iter()
            .copied()
            .filter(|&l| self.zones.zone(l).stalled_since.is_some())
            .collect();
        for &leaf in &leaves {
            self.zones.zone_mut(leaf).players = 0;
        }
        // (leaf, place) of every counted player in no bubble: the members of the units that
        // got none this tick (far fewer units than players to visit).
        let mut members = std::mem::take(&mut self.zone_members);
        members.clear();
        for u in (0..sc.units.len()).filter(|&u| sc.cluster_bubble[u] == NONE) {
            for &place in sc.units.members(u) {
                let item = &self.items[place as usize];
                if let Some(leaf) = self.zones.locate(item.world, item.pos) {
                    self.zones.zone_mut(leaf).players += 1;
                    members.push((leaf, place));
                }
            }
        }
        stats.zones = leaves.len() as u32;

        // Stalled zones are granted again on the core site once the drift margin allows.
        let core = self.sites.core();
        for leaf in stalled {
            let id = self.zones.zone(leaf).id;
            let Ok(lease) = self.leases.grant(id, core, now) else { continue };
            let players = self.zone_players(&members, leaf);
            self.restore_zone(leaf, lease.epoch, players);
            stats.moved += 1;
        }

        let (cap, settle) = (self.th.players_per_server, Span::from_ms(self.th.settle_ms));
        let settled = |z: &Zone| z.kind.changed_at.is_none_or(|t| now.since(t) >= settle);
        let mut overloaded = Vec::new();
        let tps_min = self.th.tps_min;
        for &leaf in &leaves {
            let z = self.zones.zone_mut(leaf);
            let slow = z.kind.tps.is_some_and(|t| t < tps_min);
            z.kind.overloaded =
                if z.players > cap || slow { z.kind.overloaded + weight } else { 0.0 };
            if z.kind.overloaded >= f64::from(self.th.split_after_samples) && settled(z) {
                overloaded.push(leaf);
            }
        }
        if !overloaded.is_empty() {
            members.sort_unstable();
        }
        for leaf in overloaded {
            let from = members.partition_point(|m| m.0 < leaf);
            let to = members.partition_point(|m| m.0 <= leaf);
            let places: Vec<u32> = members[from..to].iter().map(|m| m.1).collect();
            if self.split_zone(leaf, &places, now) {
                stats.zone_splits += 1;
            }
        }

        let fill = self.th.merge_fill_ratio * f64::from(cap);
        for (cut, low, high) in self.zones.mergeable() {
            let (a, b) = (self.zones.zone(low), self.zones.zone(high));
            let quiet = f64::from(a.players + b.players) <= fill;
            let ready =
                settled(a) && settled(b) && a.stalled_since.is_none() && b.stalled_since.is_none();
            let samples = self.zones.low_samples_mut(cut);
            *samples = if quiet { *samples + weight } else { 0.0 };
            if *samples >= f64::from(self.th.merge_after_samples) && ready {
                let (ended, ended_epoch) = (self.zones.zone(high).id, self.zones.zone(high).epoch);
                let moving = self.zone_players(&members, high);
                let _ = self.leases.revoke(ended, ended_epoch);
                let (leaf, _) = self.zones.merge(cut, now);
                let into = self.zones.zone(leaf);
                self.commands.push_back(Command::ZoneMerge {
                    into: into.id,
                    from: ended,
                    site: self.sites.core(),
                    bounds: into.bounds,
                    players: moving,
                    reason: ZoneReason::Underload,
                });
                stats.zone_merges += 1;
            }
        }
        self.zone_members = members;
    }

    /// Cuts zone `leaf`, whose players stand at `places`; false when no cut leaves players on
    /// both sides inside its box.
    fn split_zone(&mut self, leaf: u32, places: &[u32], now: Time) -> bool {
        let Some((axis, at)) = self.zone_cut(places) else { return false };
        let bounds = self.zones.zone(leaf).bounds;
        if !(bounds.min.axis(axis) < at && at < bounds.max.axis(axis)) {
            return false;
        }
        if self.zones.zone(leaf).stalled_since.is_some() {
            return false;
        }
        let new_id = self.mint_zone_id();
        let Ok(lease) = self.leases.grant(new_id, self.sites.core(), now) else { return false };
        let split = self.zones.split(leaf, axis, at, new_id, lease.epoch, now);
        let moving: Vec<PlayerId> = places
            .iter()
            .filter(|&&p| self.items[p as usize].pos.axis(axis) >= at)
            .map(|&p| self.members[p as usize].id)
            .collect();
        let moved = moving.len() as u32;
        self.zones.zone_mut(split.kept).players = places.len() as u32 - moved;
        self.zones.zone_mut(split.new).players = moved;
        let (kept, new) = (self.zones.zone(split.kept), self.zones.zone(split.new));
        self.commands.push_back(Command::ZoneSplit {
            zone: kept.id,
            new_zone: new.id,
            site: self.sites.core(),
            world: kept.world,
            bounds: kept.bounds,
            new_bounds: new.bounds,
            new_epoch: new.epoch,
            players: sorted(moving),
            reason: ZoneReason::Overload,
        });
        true
    }

    /// Where SMD cuts a zone whose players stand at `places`: `(axis, at)`, or `None` when
    /// every cut leaves one side empty.
    fn zone_cut(&self, places: &[u32]) -> Option<(usize, f64)> {
        let spread = |axis: usize| {
            let (lo, hi) =
                places.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &p| {
                    let v = self.items[p as usize].pos.axis(axis);
                    (lo.min(v), hi.max(v))
                });
            hi - lo
        };
        let axis = (0..3).max_by(|&a, &b| spread(a).total_cmp(&spread(b)))?;
        let mut v: Vec<f64> =
            places.iter().map(|&p| self.items[p as usize].pos.axis(axis)).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n < 2 {
            return None;
        }
        let (lo, hi) = (n / 4, (3 * n / 4).max(n / 4 + 1).min(n - 1));
        let widest = (lo..hi).max_by(|&i, &j| (v[i + 1] - v[i]).total_cmp(&(v[j + 1] - v[j])));
        let at = match widest {
            Some(i) if v[i + 1] - v[i] >= MIN_GAP_M => (v[i] + v[i + 1]) / 2.0,
            _ => v[n / 2],
        };
        // Players at `at` or beyond go to the high half: both halves must keep someone.
        (v[0] < at && at <= v[n - 1]).then_some((axis, at))
    }

    /// The ids of the counted players in no bubble whose position is in zone `leaf` now, sorted.
    fn players_in_zone(&self, leaf: u32) -> Vec<PlayerId> {
        let ids = (0..self.items.len()).filter_map(|place| {
            let item = &self.items[place];
            let here = !self.npc[place]
                && self.player_bubble[place] == NONE
                && self.zones.locate(item.world, item.pos) == Some(leaf);
            here.then(|| self.members[place].id)
        });
        sorted(ids.collect())
    }

    /// The ids of the counted players a zone held at this tick's count, sorted.
    fn zone_players(&self, members: &[(u32, u32)], leaf: u32) -> Vec<PlayerId> {
        let ids = members.iter().filter(|m| m.0 == leaf).map(|m| self.members[m.1 as usize].id);
        sorted(ids.collect())
    }

    // ---- reading ------------------------------------------------------------------------------

    /// The region simulating a player: their bubble, else the zone around them. A
    /// player in zone `current` stays in it until [`ZONE_EXIT_MARGIN_M`] past its edge (SMD's
    /// `out_of_zone`), so one standing on a cut — a median cut runs through a player — does not
    /// cross back and forth with every step.
    /// An NPC is simulated by the bubble whose box holds it, else by the zone around it
    /// (`npcs.rs`).
    pub fn region_of(&self, id: PlayerId, current: Option<BubbleId>) -> Option<BubbleId> {
        let &i = self.player_index.get(&id)?;
        let place = self.place_of[i as usize] as usize;
        if self.npc[place] {
            return self.npc_region(place, current);
        }
        match self.player_bubble[place] {
            NONE => self.zone_around(place, current),
            slot => self.bubbles[slot as usize].as_ref().map(|b| b.id),
        }
    }

    /// The zone around the player at `place`: `current` while within [`ZONE_EXIT_MARGIN_M`]
    /// of its box, else the zone whose box holds them.
    pub(super) fn zone_around(&self, place: usize, current: Option<BubbleId>) -> Option<BubbleId> {
        let item = &self.items[place];
        let near = |z: &&Zone| z.holds(item.world, item.pos, ZONE_EXIT_MARGIN_M);
        if let Some(c) = current.and_then(|c| self.zone_by_id(c)).filter(near) {
            return Some(c.id);
        }
        self.zones.locate(item.world, item.pos).map(|leaf| self.zones.zone(leaf).id)
    }

    /// The leases a site's agent holds and renews: its running bubbles and (the core site) its
    /// running zones, with their epochs.
    pub fn leases_held(&self, site: SiteId) -> Vec<(BubbleId, Epoch)> {
        let bubbles = self.bubbles().filter(|b| b.runs_at(site)).map(|b| (b.id, b.epoch));
        let zones = self.zones().filter(|z| z.runs_at(site)).map(|z| (z.id, z.epoch));
        bubbles.chain(zones).collect()
    }

    /// Every zone, with its players as of the last tick.
    pub fn zones(&self) -> impl Iterator<Item = &Zone> {
        self.zones.zones()
    }

    /// The zone simulating a counted player who is in no bubble (`None`: in a bubble, an NPC,
    /// or unknown).
    pub fn zone_of(&self, id: PlayerId) -> Option<&Zone> {
        let &i = self.player_index.get(&id)?;
        let place = self.place_of[i as usize] as usize;
        if self.npc[place] || self.player_bubble[place] != NONE {
            return None;
        }
        let item = &self.items[place];
        self.zones.locate(item.world, item.pos).map(|leaf| self.zones.zone(leaf))
    }

    /// A zone by id.
    pub fn zone_by_id(&self, id: BubbleId) -> Option<&Zone> {
        self.zones.leaf(id).map(|leaf| self.zones.zone(leaf))
    }
}

fn sorted(mut ids: Vec<PlayerId>) -> Vec<PlayerId> {
    ids.sort_unstable();
    ids
}
