//! Zones in the tick (design.md §4, "Within a site (SMD, kept)"; `crate::zones` keeps the
//! layout). After bubbles are placed, every counted player in no bubble is counted in the zone
//! holding their position, and each zone's load is sampled and split or merged by SMD's rule,
//! the one every region obeys (`crate::split`: a bubble's parts are cut by the same function).
//!
//! Zones live on the core site and are never scored or moved to another site. Each holds a lease
//! like any region: a zone whose lease expires (its server lost, the core site's agent silent)
//! is granted again on the core site as soon as the drift margin allows, and restored there from
//! its copy (a [`Command::Move`] with reason `Failover` from the core site to itself). Their ids
//! share the bubbles' id space from [`ZONE_IDS_FROM`] up, so a region's id names one region
//! whatever its kind, and a zone id never collides with a bubble's, even across a core restart.

use super::*;
use crate::split::{EXIT_MARGIN_M, Uncut};
use crate::zones::{Zone, ZoneSpec, new_zone, validate_specs};

pub use crate::ids::ZONE_IDS_FROM;

/// One half of a zone just split: its leaf, and the places of the players in it.
type Half = (u32, Vec<u32>);

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
        let slot = self.regions.insert(Entry::Zone(new_zone(id, site, world, bounds, epoch, None)));
        self.zones.add_root(slot, world, bounds);
        let cmd = Command::ZoneCreate { zone: id, site, world, bounds, epoch, reason };
        self.commands.push_back(cmd);
    }

    /// After the zones of a restart are taken back ([`Mesh::handle_restore`]): each
    /// world's zones inside one of its configured boxes (`configured`, the core's `[[zones]]`),
    /// or inside the whole world when it has none, are joined again under a tree of cuts, so
    /// that two neighbours that go quiet merge again. Returns how many trees were rebuilt.
    pub fn regroup_restored_zones(&mut self, configured: &[ZoneSpec]) -> usize {
        let whole = Aabb::point(Vec3::ZERO).expand(self.th.position_limit_m());
        let mut worlds: Vec<WorldId> = self.regions.zones().map(|z| z.world).collect();
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
        leaf: u32,
        epoch: Epoch,
        now: Time,
    ) -> Result<(), InputError> {
        let id = self.zone(leaf).id;
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
        let slot = self.zones.region(leaf);
        let Some(zone) = self.regions.get_mut(slot) else { return };
        zone.granted(epoch);
        let (bubble, core) = (zone.id(), self.sites.core());
        let reason = MoveReason::Failover;
        let cmd = Command::Move { bubble, from: core, to: core, epoch, players, reason };
        self.commands.push_back(cmd);
    }

    fn mint_zone_id(&mut self) -> BubbleId {
        let id = BubbleId(self.next_zone);
        self.next_zone += 1;
        id
    }

    /// Counts every zone's players and splits or merges zones (see the module documentation);
    /// `weight` is this tick's load sample's.
    pub(super) fn balance_zones(
        &mut self,
        sc: &Scratch,
        weight: f64,
        now: Time,
        stats: &mut TickStats,
    ) {
        let leaves = self.zones.leaves();
        let stalled: Vec<u32> =
            leaves.iter().copied().filter(|&l| self.zone(l).stalled_since.is_some()).collect();
        for &leaf in &leaves {
            self.zone_mut(leaf).players = 0;
        }
        // (leaf, place) of every counted player in no bubble: the members of the units that
        // got none this tick (far fewer units than players to visit).
        let mut members = std::mem::take(&mut self.zone_members);
        members.clear();
        for u in (0..sc.units.len()).filter(|&u| sc.cluster_bubble[u] == NONE) {
            for &place in sc.units.members(u) {
                let item = &self.items[place as usize];
                if let Some(leaf) = self.zones.locate(item.world, item.pos) {
                    self.zone_mut(leaf).players += 1;
                    members.push((leaf, place));
                }
            }
        }
        stats.zones = leaves.len() as u32;

        // Stalled zones are granted again on the core site once the drift margin allows.
        let core = self.sites.core();
        for leaf in stalled {
            let id = self.zone(leaf).id;
            let Ok(lease) = self.leases.grant(id, core, now) else { continue };
            let players = self.zone_players(&members, leaf);
            self.restore_zone(leaf, lease.epoch, players);
            stats.moved += 1;
        }

        let mut due = Vec::new();
        for &leaf in &leaves {
            let z = zone_at(&mut self.regions, &self.zones, leaf);
            if z.kind.load.sample(z.players, weight, now, &self.th) {
                due.push(leaf);
            }
        }
        if !due.is_empty() {
            members.sort_unstable();
        }
        for leaf in due {
            let from = members.partition_point(|m| m.0 < leaf);
            let to = members.partition_point(|m| m.0 <= leaf);
            let places: Vec<u32> = members[from..to].iter().map(|m| m.1).collect();
            // Cut, and each half again while it holds more than a server takes: a crowd of any
            // size is on enough servers after one split's samples.
            let mut queue = vec![(leaf, places)];
            while let Some((leaf, places)) = queue.pop() {
                match self.split_zone(leaf, &places, now) {
                    Ok(Some(halves)) => {
                        stats.zone_splits += 1;
                        let cap = self.th.players_per_server as usize;
                        queue.extend(halves.into_iter().filter(|h| h.1.len() > cap));
                    }
                    Ok(None) => {}
                    Err(_) => stats.uncut += 1,
                }
            }
        }

        for (cut, low, high) in self.zones.mergeable() {
            let (a, b) = (self.zone(low), self.zone(high));
            let ready = a.kind.load.settled(now, &self.th)
                && b.kind.load.settled(now, &self.th)
                && a.stalled_since.is_none()
                && b.stalled_since.is_none();
            let together = a.players + b.players;
            let quiet = self.zones.quiet_mut(cut).sample(together, weight, &self.th);
            if quiet && ready {
                let (ended, ended_epoch) = (self.zone(high).id, self.zone(high).epoch);
                let moving = self.zone_players(&members, high);
                let _ = self.leases.revoke(ended, ended_epoch);
                let (kept, ended_slot) = self.zones.merge(cut);
                let ended_players = self.regions.remove(ended_slot).map_or(0, |e| match e {
                    Entry::Zone(z) => z.players,
                    Entry::Bubble(_) => 0,
                });
                let bounds = self.zones.bounds(cut);
                let into = self.regions.zone_mut(kept).expect("the zone kept by a merge");
                into.players += ended_players;
                into.bounds = bounds;
                into.kind.load = crate::split::Load::changed(now, into.players);
                let into = &*into;
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

    /// Cuts zone `leaf`, whose players stand at `places`, by SMD's rule: each half's leaf and
    /// players' places; `None` while it waits for its lease (stalled); why not, when it cannot
    /// be cut (it stays over capacity and is tried again at the next sample).
    fn split_zone(
        &mut self,
        leaf: u32,
        places: &[u32],
        now: Time,
    ) -> Result<Option<[Half; 2]>, Uncut> {
        if self.zone(leaf).stalled_since.is_some() {
            return Ok(None);
        }
        let bounds = self.zone(leaf).bounds;
        let positions: Vec<Vec3> = places.iter().map(|&p| self.items[p as usize].pos).collect();
        let (axis, at) = crate::split::cut(bounds, &positions)?;
        let new_id = self.mint_zone_id();
        let Ok(lease) = self.leases.grant(new_id, self.sites.core(), now) else {
            // Invariant: a new id has no lease yet, so the grant cannot be refused.
            return Ok(None);
        };
        let (low_box, high_box) = bounds.cut(axis, at);
        let (high, low): (Vec<u32>, Vec<u32>) =
            places.iter().partition(|&&p| self.items[p as usize].pos.axis(axis) >= at);
        let moving: Vec<PlayerId> = high.iter().map(|&p| self.members[p as usize].id).collect();
        let (core, world) = (self.sites.core(), self.zone(leaf).world);
        let mut new = new_zone(new_id, core, world, high_box, lease.epoch, Some(now));
        new.players = high.len() as u32;
        let new_slot = self.regions.insert(Entry::Zone(new));
        let kept = self.zone_mut(leaf);
        kept.bounds = low_box;
        kept.kind.load = crate::split::Load::changed(now, 0);
        kept.players = low.len() as u32;
        let split = self.zones.split(leaf, axis, at, new_slot);
        let (kept, new) = (self.zone(split.kept), self.zone(split.new));
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
        Ok(Some([(split.kept, low), (split.new, high)]))
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
    /// player in zone `current` stays in it until [`EXIT_MARGIN_M`] past its edge (SMD's
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
            slot => self.regions.bubble(slot).map(|b| b.id),
        }
    }

    /// The zone around the player at `place`: `current` while within [`EXIT_MARGIN_M`]
    /// of its box, else the zone whose box holds them.
    pub(super) fn zone_around(&self, place: usize, current: Option<BubbleId>) -> Option<BubbleId> {
        let item = &self.items[place];
        let near = |z: &&Zone| z.holds(item.world, item.pos, EXIT_MARGIN_M);
        if let Some(c) = current.and_then(|c| self.zone_by_id(c)).filter(near) {
            return Some(c.id);
        }
        self.zones.locate(item.world, item.pos).map(|leaf| self.zone(leaf).id)
    }

    /// The leases a site's agent holds and renews: the regions running there (on the core
    /// site, its zones too), with their epochs.
    pub fn leases_held(&self, site: SiteId) -> Vec<(BubbleId, Epoch)> {
        self.regions
            .iter()
            .filter(|(_, r)| r.runs_at(site))
            .map(|(_, r)| (r.id(), r.epoch()))
            .collect()
    }

    /// Every zone, with its players as of the last tick.
    pub fn zones(&self) -> impl Iterator<Item = &Zone> {
        self.regions.zones()
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
        self.zones.locate(item.world, item.pos).map(|leaf| self.zone(leaf))
    }

    /// A zone by id.
    pub fn zone_by_id(&self, id: BubbleId) -> Option<&Zone> {
        self.regions.zone(self.regions.slot(id)?)
    }
}

fn sorted(mut ids: Vec<PlayerId>) -> Vec<PlayerId> {
    ids.sort_unstable();
    ids
}
