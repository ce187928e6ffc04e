//! The tick: units of placement, continuity with existing bubbles, borders and scoring.

use super::*;
use crate::scoring::Verdict;

impl Mesh {
    /// One scoring period. Returns its figures (also kept in [`Mesh::last_stats`]).
    pub fn tick(&mut self, now: Time) -> TickStats {
        let mut stats = TickStats { players: self.players.len() as u32, ..TickStats::default() };
        let mut sc = std::mem::take(&mut self.scratch);

        // 1. Units of placement.
        let units = self.form_units(&mut sc);
        stats.counted = sc.items.len() as u32;
        stats.clusters = units.len() as u32;
        // 2. Continuity with the bubbles of the previous tick.
        self.place_units(&units, &mut sc, now, &mut stats);
        // 3. Moving borders, and no two regions overlapping.
        self.settle_bounds(&units, &mut sc, &mut stats);
        self.index_members(&mut sc);
        // 4. Scoring, hysteresis and failover.
        self.score_bubbles(&mut sc, now, &mut stats);
        // 5. Load: split across more servers of the site, or undo the latest split.
        self.balance_load(&mut sc, now, &mut stats);

        self.free_slots.append(&mut self.retired_slots);
        if self.fresh_count > 0 {
            self.fresh.fill(false);
            self.fresh_count = 0;
        }
        stats.bubbles = self.bubble_index.len() as u32;
        stats.in_zone = (0..units.len())
            .filter(|&u| sc.cluster_bubble[u] == NONE)
            .map(|u| units.members(u).len() as u32)
            .sum();
        self.scratch = sc;
        self.last_stats = stats;
        stats
    }

    /// Which unit keeps which bubble: each unit claims the bubbles its members were in, and a
    /// bubble goes to the unit holding most of its weight. A unit owning none gets a new bubble
    /// (or waits in a zone), one owning several merges them, a bubble nobody owns is deleted.
    fn place_units(&mut self, units: &Groups, sc: &mut Scratch, now: Time, stats: &mut TickStats) {
        let nc = units.len();
        let nslots = self.bubbles.len();
        sc.prior.clear();
        sc.prior.extend(self.bubbles.iter().map(|b| b.as_ref().map(|b| (b.site, b.hysteresis))));
        sc.absorbed_into.clear();
        sc.absorbed_into.resize(nslots, NONE);

        // Claims as compressed rows: unit c claims claims[claim_start[c]..claim_start[c + 1]].
        let mut owner: Vec<Option<(u32, f64, PlayerId)>> = vec![None; nslots];
        let mut claims: Vec<Claim> = Vec::new();
        let mut claim_start: Vec<u32> = Vec::with_capacity(nc + 1);
        for c in 0..nc {
            let start = claims.len();
            claim_start.push(start as u32);
            for &it in units.members(c) {
                let pi = sc.item_player[it as usize] as usize;
                let slot = self.player_bubble[pi];
                let p = &self.players[pi];
                if slot == NONE
                    || self.bubbles[slot as usize].as_ref().is_none_or(|b| b.world != p.world)
                {
                    continue;
                }
                let w = self.weight(p);
                match claims[start..].iter_mut().find(|e| e.slot == slot) {
                    Some(e) => {
                        e.weight += w;
                        e.min_id = e.min_id.min(p.id);
                    }
                    None => claims.push(Claim { slot, weight: w, min_id: p.id }),
                }
            }
            for e in &claims[start..] {
                let better = owner[e.slot as usize]
                    .is_none_or(|(_, ow, oid)| e.weight > ow || (e.weight == ow && e.min_id < oid));
                if better {
                    owner[e.slot as usize] = Some((c as u32, e.weight, e.min_id));
                }
            }
        }
        claim_start.push(claims.len() as u32);

        sc.slot_tally.clear();
        sc.slot_tally.resize(nslots, NONE);
        sc.touched.clear();
        sc.touched.resize(nslots, false);
        sc.cluster_bubble.clear();
        sc.cluster_bubble.resize(nc, NONE);
        for c in 0..nc {
            let claim = &claims[claim_start[c] as usize..claim_start[c + 1] as usize];
            let mut owned: Vec<u32> = claim
                .iter()
                .filter(|e| owner[e.slot as usize].is_some_and(|o| o.0 == c as u32))
                .map(|e| e.slot)
                .collect();
            let slot = match owned.len() {
                0 if claim.is_empty() => self.create_new(c, units, sc, now, stats),
                0 => {
                    // Invariant: a non-empty claim list has a heaviest entry.
                    let source = claim
                        .iter()
                        .max_by(|a, b| a.weight.total_cmp(&b.weight).then(b.min_id.cmp(&a.min_id)))
                        .map(|e| e.slot)
                        .expect("non-empty claims");
                    // Invariant: a claimed slot was live at the start of the tick.
                    let (site, hysteresis) =
                        sc.prior[source as usize].expect("claimed slot was live");
                    self.create_split(c, units, sc, site, hysteresis, now, stats)
                }
                1 => owned[0],
                _ => {
                    let weight =
                        |s: u32| claim.iter().find(|e| e.slot == s).map_or(0.0, |e| e.weight);
                    owned.sort_by(|&a, &b| {
                        weight(b)
                            .total_cmp(&weight(a))
                            .then(self.bubble(a).id.cmp(&self.bubble(b).id))
                    });
                    let members: Vec<(PlayerId, u32)> = units
                        .members(c)
                        .iter()
                        .map(|&it| {
                            let pi = sc.item_player[it as usize] as usize;
                            (self.players[pi].id, self.player_bubble[pi])
                        })
                        .collect();
                    let t = sc.tallies[c].clone();
                    let bounds = sc.extents[c].claim;
                    self.merge_bubbles(&owned, &t, bounds, members, sc, stats)
                }
            };
            sc.cluster_bubble[c] = slot;
            if slot != NONE {
                sc.slot_tally.resize(self.bubbles.len(), NONE);
                sc.slot_tally[slot as usize] = c as u32;
            }
        }

        // Bubbles nobody owns any more are deleted (only those live at the start: a slot freed
        // earlier may hold a bubble created just now).
        for slot in 0..nslots as u32 {
            let was_live = sc.prior[slot as usize].is_some();
            if was_live && owner[slot as usize].is_none() && self.bubbles[slot as usize].is_some() {
                self.delete(slot, DeleteReason::Empty);
                stats.deleted += 1;
            }
        }

        self.report_entries(units, sc);
        for c in 0..nc {
            let slot = sc.cluster_bubble[c];
            for &it in units.members(c) {
                self.player_bubble[sc.item_player[it as usize] as usize] = slot;
            }
        }
    }

    /// Scores every bubble not placed this tick and applies hysteresis; stalled bubbles (expired
    /// lease) fail over as soon as the lease and its drift margin allow.
    fn score_bubbles(&mut self, sc: &mut Scratch, now: Time, stats: &mut TickStats) {
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
                    self.relocate(slot, target, lease.epoch, MoveReason::Failover, now, players);
                    stats.moved += 1;
                }
                continue;
            }
            if self.placement != Placement::Smdg {
                // The baselines never re-place a running bubble.
                continue;
            }
            let current = SiteScore::of(tally, &self.sites, site);
            let best = best_site(tally, &self.sites, self.th.cap_ms, Some(site), |s| {
                s == site || self.can_host(s, servers)
            });
            let (sum_w, th) = (tally.sum_w, &self.th);
            let Some(b) = self.bubbles[slot as usize].as_mut() else {
                continue;
            };
            if let Verdict::Move(reason) = b.hysteresis.decide(now, &current, &best, sum_w, th) {
                let epoch = b.epoch;
                if let Ok(lease) = self.leases.transfer(id, epoch, best.site, now) {
                    let players = member_ids(&self.players, sc.members(slot));
                    self.relocate(slot, best.site, lease.epoch, reason, now, players);
                    stats.moved += 1;
                }
            }
        }
    }

    /// Reports players who enter a bubble that existed before this tick, other than through a
    /// merge (whose command lists them): fresh connections, players from a zone, border crossings.
    pub(super) fn report_entries(&mut self, clusters: &Groups, sc: &Scratch) {
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
                    sc.prior.get(prev as usize).copied().flatten().map(|(site, _)| site)
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

    pub(super) fn cluster_players(
        &self,
        clusters: &Groups,
        sc: &Scratch,
        c: usize,
    ) -> Vec<PlayerId> {
        let mut v: Vec<PlayerId> = clusters
            .members(c)
            .iter()
            .map(|&it| self.players[sc.item_player[it as usize] as usize].id)
            .collect();
        v.sort_unstable();
        v
    }

    pub(super) fn slot_players(&self, slot: u32) -> Vec<PlayerId> {
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

    pub(super) fn tally_of_slot(&self, slot: u32) -> Tally {
        let mut t = Tally::new(self.sites.len());
        for (s, p) in self.player_bubble.iter().zip(&self.players) {
            if *s == slot {
                t.add(p, self.weight(p));
            }
        }
        t
    }

    pub(super) fn failover_target(&self, tally: &Tally, failed: SiteId, servers: u32) -> SiteId {
        best_site(tally, &self.sites, self.th.cap_ms, None, |s| {
            s != failed && self.can_host(s, servers)
        })
        .site
    }

    /// Puts a new bubble in `slot` and accounts its server.
    pub(super) fn insert_bubble(
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
            hysteresis: Hysteresis { best_since: None, last_move: hysteresis.last_move },
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

    pub(super) fn mark_touched(sc: &mut Scratch, slot: u32) {
        if sc.touched.len() <= slot as usize {
            sc.touched.resize(slot as usize + 1, false);
        }
        sc.touched[slot as usize] = true;
    }

    /// A cluster that was nowhere (fresh players) or waiting in a core-site zone.
    pub(super) fn create_new(
        &mut self,
        c: usize,
        clusters: &Groups,
        sc: &mut Scratch,
        now: Time,
        stats: &mut TickStats,
    ) -> u32 {
        let members = clusters.members(c);
        let fresh = members.iter().all(|&it| self.fresh[sc.item_player[it as usize] as usize]);
        // Where were they? Nowhere (fresh), in a bubble of another world, or in a core-site zone.
        let travelled_from = members.iter().find_map(|&it| {
            let slot = self.player_bubble[sc.item_player[it as usize] as usize];
            sc.prior.get(slot as usize).copied().flatten().map(|(site, _)| site)
        });
        let tally = &sc.tallies[c];
        let homes: Vec<usize> = tally.homes().collect();
        let home = match homes[..] {
            [h] => self.sites.ids().nth(h),
            _ => None,
        };
        let best = |mesh: &Self| {
            best_site(tally, &mesh.sites, mesh.th.cap_ms, None, |s| mesh.can_host(s, 1)).site
        };
        let site = match (self.placement, home) {
            (Placement::AllCore, _) => self.sites.core(),
            (Placement::Creator, _) => match self.first_arrival(members, sc) {
                Some(p) if self.can_host(p.home, 1) => p.home,
                Some(_) if travelled_from.is_none() => return NONE,
                _ => best(self),
            },
            // Alone, or among players of the same home: on the home site...
            (_, Some(home)) if self.can_host(home, 1) => home,
            // ... or wait in a core-site zone until it has a server ready.
            (_, Some(_)) if travelled_from.is_none() => return NONE,
            _ => best(self),
        };
        let (previous_site, reason) = match travelled_from {
            _ if fresh => (None, CreateReason::Join),
            Some(site) => (Some(site), CreateReason::Travel),
            None => (Some(self.sites.core()), CreateReason::ServerReady),
        };
        let origin = Origin { previous_site, reason, hysteresis: Hysteresis::default() };
        self.create_bubble(c, clusters, sc, site, origin, now, stats)
    }

    /// The counted member who arrived first (ids are handed out in arrival order).
    fn first_arrival(&self, members: &[u32], sc: &Scratch) -> Option<&Player> {
        members
            .iter()
            .map(|&it| &self.players[sc.item_player[it as usize] as usize])
            .filter(|p| p.role.is_counted())
            .min_by_key(|p| p.id)
    }

    /// A cluster that walked away from its bubble: a new bubble, on the same site if it can host
    /// it (no handover), keeping the parent's last move so hold still applies.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_split(
        &mut self,
        c: usize,
        clusters: &Groups,
        sc: &mut Scratch,
        parent_site: SiteId,
        parent: Hysteresis,
        now: Time,
        stats: &mut TickStats,
    ) -> u32 {
        let tally = &sc.tallies[c];
        let best = |mesh: &Self| {
            best_site(tally, &mesh.sites, mesh.th.cap_ms, None, |s| mesh.can_host(s, 1)).site
        };
        let site = match self.placement {
            Placement::Smdg | Placement::AllCore if self.can_host(parent_site, 1) => parent_site,
            // The baselines never re-place a bubble, so a group walking away is a new room or a
            // new session, placed by their own rule.
            Placement::Creator => match self.first_arrival(clusters.members(c), sc) {
                Some(p) if self.can_host(p.home, 1) => p.home,
                _ => best(self),
            },
            _ => best(self),
        };
        let origin = Origin {
            previous_site: Some(parent_site),
            reason: CreateReason::Split,
            hysteresis: parent,
        };
        self.create_bubble(c, clusters, sc, site, origin, now, stats)
    }

    /// Creates cluster `c`'s bubble on `site` and announces it. `NONE` if the lease is refused.
    #[allow(clippy::too_many_arguments)]
    fn create_bubble(
        &mut self,
        c: usize,
        clusters: &Groups,
        sc: &mut Scratch,
        site: SiteId,
        origin: Origin,
        now: Time,
        stats: &mut TickStats,
    ) -> u32 {
        let (world, bounds) = (sc.extents[c].world, sc.extents[c].claim);
        let Some((slot, epoch)) = self.insert_bubble(site, world, bounds, now, origin.hysteresis)
        else {
            return NONE;
        };
        let players = self.cluster_players(clusters, sc, c);
        let id = self.bubble(slot).id;
        self.commands.push_back(Command::Create {
            bubble: id,
            site,
            previous_site: origin.previous_site,
            world,
            bounds,
            epoch,
            players,
            reason: origin.reason,
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
    pub(super) fn merge_bubbles(
        &mut self,
        slots: &[u32],
        tally: &Tally,
        bounds: Aabb,
        members: Vec<(PlayerId, u32)>,
        sc: &mut Scratch,
        stats: &mut TickStats,
    ) -> u32 {
        let survivor = if self.placement == Placement::Creator {
            // Rooms: everyone joins the oldest room, where it is.
            slots.iter().copied().min_by_key(|&s| self.bubble(s).id).unwrap_or(slots[0])
        } else {
            let sites_of: Vec<SiteId> = slots.iter().map(|&s| self.bubble(s).site).collect();
            let best = best_site(tally, &self.sites, self.th.cap_ms, Some(sites_of[0]), |s| {
                sites_of.contains(&s)
            });
            // The core site is always scored; if it won hosting none of them, keep the heaviest.
            slots.iter().copied().find(|&s| self.bubble(s).site == best.site).unwrap_or(slots[0])
        };
        let (into, into_site) = (self.bubble(survivor).id, self.bubble(survivor).site);
        let mut by_slot = members;
        by_slot.sort_unstable_by_key(|m| (m.1, m.0));
        for &s in slots.iter().filter(|&&s| s != survivor) {
            let b = self.bubble(s);
            let (lo, hi) =
                (by_slot.partition_point(|m| m.1 < s), by_slot.partition_point(|m| m.1 <= s));
            let moving: Vec<PlayerId> = by_slot[lo..hi].iter().map(|m| m.0).collect();
            let cmd =
                Command::Merge { into, from: b.id, from_site: b.site, into_site, players: moving };
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
            reason: BorderReason::Merge,
        });
        Self::mark_touched(sc, survivor);
        survivor
    }

    /// Moves a bubble to `to` under `epoch` and reports it.
    pub(super) fn relocate(
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
        self.commands.push_back(Command::Move { bubble: id, from, to, epoch, players, reason });
    }

    /// Frees a slot (its lease revoked, its servers released) without reporting. Its players are
    /// reassigned by the caller; the slot is reused from the next tick on.
    pub(super) fn remove(&mut self, slot: u32) {
        if let Some(b) = self.bubbles[slot as usize].take() {
            let _ = self.leases.revoke(b.id, b.epoch);
            self.bubble_index.remove(&b.id);
            self.used[b.site.index()] = self.used[b.site.index()].saturating_sub(b.servers());
            self.retired_slots.push(slot);
        }
    }

    /// Builds the per-bubble member rows from `player_bubble`.
    pub(super) fn index_members(&self, sc: &mut Scratch) {
        let n = self.bubbles.len();
        sc.member_offsets.clear();
        sc.member_offsets.resize(n + 1, 0);
        for &pi in &sc.item_player {
            let s = self.player_bubble[pi as usize];
            if s != NONE {
                sc.member_offsets[s as usize + 1] += 1;
            }
        }
        for i in 0..n {
            sc.member_offsets[i + 1] += sc.member_offsets[i];
        }
        let mut fill = sc.member_offsets[..n].to_vec();
        sc.member_list.clear();
        sc.member_list.resize(sc.member_offsets[n] as usize, 0);
        for &pi in &sc.item_player {
            let s = self.player_bubble[pi as usize];
            if s != NONE {
                sc.member_list[fill[s as usize] as usize] = pi;
                fill[s as usize] += 1;
            }
        }
    }

    pub(super) fn delete(&mut self, slot: u32, reason: DeleteReason) {
        let b = self.bubble(slot);
        let cmd = Command::Delete { bubble: b.id, site: b.site, epoch: b.epoch, reason };
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
    pub(super) fn settle_bounds(
        &mut self,
        clusters: &Groups,
        sc: &mut Scratch,
        stats: &mut TickStats,
    ) {
        let mut claims: Vec<Option<Aabb>> = vec![None; self.bubbles.len()];
        let mut obstacles: Vec<(WorldId, Aabb)> = Vec::new();
        for c in 0..clusters.len() {
            let slot = sc.cluster_bubble[c];
            let claimed = sc.extents[c].claim;
            if slot == NONE {
                obstacles.push((sc.extents[c].world, claimed));
                continue;
            }
            claims[slot as usize] = Some(claimed);
            let bounds = self.bubble(slot).bounds;
            // An item's radius is `merge + v·lead`, so its border margin is `border + v·lead`.
            let lead_part = |it: u32| sc.items[it as usize].radius - self.th.merge_distance_m;
            let near_edge = bounds != claimed
                && clusters.members(c).iter().any(|&it| {
                    let margin = self.th.border_margin_m + lead_part(it);
                    bounds.inner_distance(sc.items[it as usize].pos) < margin / 2.0
                });
            if near_edge {
                self.set_bounds(slot, claimed, BorderReason::NearEdge, stats);
            }
        }
        // One sweep of every region (players waiting in zones have their claims); then, round
        // after round, only what the boxes reset in the round before overlap: a box that kept
        // its place overlaps nothing new. Claims never overlap, so a box found overlapping is
        // stale and is reset, once: at most as many rounds as bubbles.
        sc.sweep.clear();
        for &(world, bx) in &obstacles {
            sc.sweep.push(world, bx, NONE);
        }
        for (slot, b) in self.bubbles.iter().enumerate() {
            if let Some(b) = b {
                sc.sweep.push(b.world, b.bounds, slot as u32);
            }
        }
        let mut stale: Vec<u32> =
            sc.sweep.overlapping().iter().flat_map(|&(a, b)| [a, b]).collect();
        let mut reset: Vec<u32> = Vec::new();
        let mut was_reset = vec![false; self.bubbles.len()];
        while !stale.is_empty() {
            reset.clear();
            for &slot in &stale {
                if slot == NONE {
                    continue;
                }
                // Invariant: every live bubble holds one cluster, so it has a claim.
                let claimed = claims[slot as usize].expect("a live bubble has a claim");
                if self.bubble(slot).bounds != claimed {
                    self.set_bounds(slot, claimed, BorderReason::Overlap, stats);
                    reset.push(slot);
                    was_reset[slot as usize] = true;
                }
            }
            // What a reset box overlaps now: boxes still as the sweep holds them (those reset
            // in this loop are claims, like it, so they cannot overlap it).
            stale.clear();
            for &slot in &reset {
                let b = self.bubble(slot);
                for other in sc.sweep.overlapping_with(b.world, b.bounds) {
                    if other != NONE && !was_reset[other as usize] {
                        stale.push(other);
                    }
                }
            }
        }
    }

    pub(super) fn set_bounds(
        &mut self,
        slot: u32,
        bounds: Aabb,
        reason: BorderReason,
        stats: &mut TickStats,
    ) {
        let b = self.bubble_mut(slot);
        b.bounds = bounds;
        let cmd = Command::Border { bubble: b.id, bounds, reason };
        self.commands.push_back(cmd);
        stats.borders += 1;
    }
}

pub(super) fn member_ids(players: &[Player], members: &[u32]) -> Vec<PlayerId> {
    let mut v: Vec<PlayerId> = members.iter().map(|&i| players[i as usize].id).collect();
    v.sort_unstable();
    v
}

/// A unit's claim on a bubble its members were in.
#[derive(Clone, Copy, Debug)]
struct Claim {
    slot: u32,
    /// Weight of the unit's members that were in the bubble.
    weight: f64,
    /// Smallest of their ids (the tie-break).
    min_id: PlayerId,
}

/// Where a new bubble's players come from, and the hysteresis it starts with.
#[derive(Clone, Copy, Debug)]
struct Origin {
    previous_site: Option<SiteId>,
    reason: CreateReason,
    hysteresis: Hysteresis,
}
