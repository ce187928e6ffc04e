//! The tick: units of placement, continuity with existing bubbles (new ones in `create.rs`,
//! borders in `borders.rs`), merges, scoring and moves.

use super::*;
use crate::scoring::Verdict;

impl Mesh {
    /// One scoring period. Returns its figures (also kept in [`Mesh::last_stats`]).
    pub fn tick(&mut self, now: Time) -> TickStats {
        let mut stats = TickStats { players: self.players.len() as u32, ..TickStats::default() };
        let mut sc = std::mem::take(&mut self.scratch);

        // 1. Units of placement.
        self.form_units(&mut sc);
        stats.counted = (self.items.len() - self.npcs) as u32;
        stats.clusters = sc.units.len() as u32;
        // 2. Continuity with the bubbles of the previous tick.
        self.place_units(&mut sc, now, &mut stats);
        self.carving.retain(|_, (_, seen)| *seen == now);
        // 3. Moving borders, and no two regions overlapping; fixed delegations' regions.
        self.settle_bounds(&mut sc, &mut stats);
        self.open_delegations(&mut sc, now, &mut stats);
        // 4. Scoring, hysteresis and failover.
        self.score_bubbles(&mut sc, now, &mut stats);
        // 5. Load: a bubble's parts split across more servers of the site, or the latest
        //    split undone; 6. zones: count who plays in them, split and merge them. One rule
        //    for both (`crate::split`), one load sample for every region.
        let weight = crate::split::sample_weight(self.load_sampled_at, now, &self.th);
        self.load_sampled_at = Some(now);
        self.balance_load(&mut sc, weight, now, &mut stats);
        self.balance_zones(&sc, weight, now, &mut stats);
        self.count_over_capacity();

        self.regions.release_retired();
        if self.fresh_count > 0 {
            self.fresh.fill(false);
            self.fresh_count = 0;
        }
        if self.scattered(&sc, stats.counted as usize) {
            self.renumber(&mut sc);
            stats.renumbered = true;
        }
        stats.bubbles = self.regions.bubble_count() as u32;
        stats.in_zone = (0..sc.units.len())
            .filter(|&u| sc.cluster_bubble[u] == NONE)
            .map(|u| sc.units.members(u).len() as u32)
            .sum();
        self.scratch = sc;
        self.last_stats = stats;
        stats
    }

    /// Which unit keeps which bubble: each unit claims the bubbles its members were in, and a
    /// bubble goes to the unit holding most of its weight. A unit owning none gets a new bubble
    /// (or waits in a zone), one owning several merges them, a bubble nobody owns is deleted.
    fn place_units(&mut self, sc: &mut Scratch, now: Time, stats: &mut TickStats) {
        let units = std::mem::take(&mut sc.units);
        let (claims, claim_start) =
            (std::mem::take(&mut sc.claims), std::mem::take(&mut sc.claim_start));
        let claims_of = |c: usize| &claims[claim_start[c] as usize..claim_start[c + 1] as usize];
        let nc = units.len();
        let nslots = self.regions.slots();
        sc.prior.clear();
        sc.prior.extend(
            (0..nslots as u32).map(|s| self.regions.bubble(s).map(|b| (b.site, b.kind.hysteresis))),
        );
        sc.absorbed_into.clear();
        sc.absorbed_into.resize(nslots, NONE);

        // Each bubble goes to the unit holding most of its weight. Under SMD (the relay stage)
        // nobody owns one: bubbles a core of another stage left (taken back after a restart)
        // end, and their players walk back into the zones around them.
        sc.owner.clear();
        sc.owner.resize(nslots, None);
        let zones_only = self.placement == Placement::AllCore;
        // Which units may have a bubble: none under SMD; under fixed delegations, each
        // delegation's unit (the others play in zones).
        let bubbly: Vec<bool> = match self.placement {
            Placement::AllCore => vec![false; nc],
            Placement::Fixed => sc.unit_delegation.iter().map(|&d| d != NONE).collect(),
            _ => vec![true; nc],
        };
        for c in (0..nc).filter(|&c| bubbly[c]) {
            for e in claims_of(c) {
                let better = sc.owner[e.slot as usize]
                    .is_none_or(|(_, ow, oid)| e.weight > ow || (e.weight == ow && e.min_id < oid));
                if better {
                    sc.owner[e.slot as usize] = Some((c as u32, e.weight, e.min_id));
                }
            }
        }

        sc.slot_unit.clear();
        sc.slot_unit.resize(nslots, NONE);
        sc.touched.clear();
        sc.touched.resize(nslots, false);
        sc.cluster_bubble.clear();
        sc.cluster_bubble.resize(nc, NONE);
        let mut owned: Vec<u32> = Vec::new();
        for (c, &may_own) in bubbly.iter().enumerate() {
            let claim = claims_of(c);
            owned.clear();
            owned.extend(
                claim
                    .iter()
                    .filter(|e| sc.owner[e.slot as usize].is_some_and(|o| o.0 == c as u32))
                    .map(|e| e.slot),
            );
            // SMD-G: the core site's zones are a claim too, a bubble on the core site, and a
            // unit with players in them and in bubbles plays where it scores best among them
            // (as a merge keeps the union where it scores best): if that is the core site,
            // the bubbles it owns dissolve into the zones. A stalled bubble fails over first.
            let zones_win = may_own && !claim.is_empty() && {
                let claimed: Vec<u32> = claim
                    .iter()
                    .filter(|e| owned.is_empty() || owned.contains(&e.slot))
                    .map(|e| e.slot)
                    .collect();
                let stalled =
                    |&s: &u32| self.regions.bubble(s).is_some_and(|b| b.stalled_since.is_some());
                let sites: Vec<SiteId> =
                    claimed.iter().filter_map(|&s| sc.prior[s as usize].map(|p| p.0)).collect();
                !claimed.iter().any(stalled)
                    && self.zones_win(units.members(c), &sc.tallies[c], &sites)
            };
            if zones_win {
                for &slot in &owned {
                    self.delete(slot, DeleteReason::Dissolve);
                    stats.deleted += 1;
                }
            }
            let slot = match owned.len() {
                _ if !may_own || zones_win => NONE,
                0 if claim.is_empty() => self.create_new(c, &units, sc, now, stats),
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
                    self.create_split(c, &units, sc, site, hysteresis, now, stats)
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
                        .map(|&i| (self.members[i as usize].id, self.player_bubble[i as usize]))
                        .collect();
                    let t = sc.tallies[c].clone();
                    let bounds = sc.extents[c].claim;
                    self.merge_bubbles(&owned, &t, bounds, members, sc, stats)
                }
            };
            sc.cluster_bubble[c] = slot;
            if slot != NONE {
                sc.slot_unit.resize(self.regions.slots(), NONE);
                sc.slot_unit[slot as usize] = c as u32;
            }
        }

        // Bubbles nobody owns any more are deleted (only those live at the start: a slot freed
        // earlier may hold a bubble created just now), except a delegation's region.
        for slot in 0..nslots as u32 {
            let was_live = sc.prior[slot as usize].is_some();
            let kept = self
                .regions
                .bubble(slot)
                .and_then(|b| b.kind.kept_empty_until)
                .is_some_and(|until| now < until);
            if was_live
                && (!kept || zones_only)
                && sc.owner[slot as usize].is_none()
                && self.regions.bubble(slot).is_some()
                && self.delegation_of_slot(slot).is_none()
            {
                let reason = if zones_only { DeleteReason::Stage } else { DeleteReason::Empty };
                self.delete(slot, reason);
                stats.deleted += 1;
            }
        }

        // Players who changed bubble: report those entering one that existed before, and
        // record where everyone is. A unit whose members were all in its bubble has neither.
        for c in 0..nc {
            let slot = sc.cluster_bubble[c];
            let stayed = match claims_of(c) {
                [only] => only.slot == slot && only.count as usize == units.members(c).len(),
                _ => false,
            };
            if stayed {
                continue;
            }
            self.report_entries(&units, c, sc);
            for &it in units.members(c) {
                self.player_bubble[it as usize] = slot;
            }
        }
        sc.units = units;
        sc.claims = claims;
        sc.claim_start = claim_start;
    }

    /// Scores every bubble not placed this tick and applies hysteresis; stalled bubbles (expired
    /// lease) fail over as soon as the lease and its drift margin allow.
    fn score_bubbles(&mut self, sc: &mut Scratch, now: Time, stats: &mut TickStats) {
        sc.touched.resize(self.regions.slots(), false);
        sc.slot_unit.resize(self.regions.slots(), NONE);
        for slot in 0..self.regions.slots() as u32 {
            if self.regions.bubble(slot).is_none() || sc.touched[slot as usize] {
                continue;
            }
            // A bubble holds one unit; only a delegation's region may hold nobody.
            let ti = sc.slot_unit[slot as usize];
            let delegation = self.delegation_of_slot(slot);
            if ti == NONE && delegation.is_none() {
                continue;
            }
            let nobody;
            let tally = match ti {
                NONE => {
                    nobody = Tally::new(self.sites.len());
                    &nobody
                }
                _ => &sc.tallies[ti as usize],
            };
            let b = self.bubble(slot);
            let (id, site, seats) = (b.id, b.site, b.seats());
            if b.stalled_since.is_some() {
                let target = self.failover_target(tally, site, seats);
                if let Ok(lease) = self.leases.grant(id, target, now) {
                    let players = member_ids(&self.members, sc.members(slot));
                    self.relocate(slot, target, lease.epoch, MoveReason::Failover, now, players);
                    stats.moved += 1;
                }
                continue;
            }
            if self.placement == Placement::Fixed {
                // A delegation's bubble goes back to its site as soon as the site can host it
                // (after a failover to the core site), whatever the scoring says.
                let Some(d) = delegation else { continue };
                let (home, epoch) = (self.delegations[d].site, self.bubble(slot).epoch);
                if home != site
                    && self.can_host(home, seats)
                    && let Ok(lease) = self.leases.transfer(id, epoch, home, now)
                {
                    let players = member_ids(&self.members, sc.members(slot));
                    self.relocate(slot, home, lease.epoch, MoveReason::Delegation, now, players);
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
                s == site || self.can_host(s, seats)
            });
            let (sum_w, th) = (tally.sum_w, &self.th);
            let Some(b) = self.regions.bubble_mut(slot) else {
                continue;
            };
            let core = self.sites.core();
            let verdict = b.kind.hysteresis.decide(now, &current, &best, sum_w, th);
            let held =
                b.kind.hysteresis.last_move.is_some_and(|t| now.since(t).as_ms() < th.hold_ms);
            match verdict {
                // Its group's best site is the core site (or it is there, after a failover, and
                // stays): it dissolves into the zones around it.
                Verdict::Move(_) if best.site == core => self.dissolve(sc, slot, stats),
                Verdict::Stay if site == core && !held => self.dissolve(sc, slot, stats),
                Verdict::Move(reason) => {
                    let epoch = b.epoch;
                    if let Ok(lease) = self.leases.transfer(id, epoch, best.site, now) {
                        let players = member_ids(&self.members, sc.members(slot));
                        self.relocate(slot, best.site, lease.epoch, reason, now, players);
                        stats.moved += 1;
                    }
                }
                Verdict::Stay | Verdict::Wait => {}
            }
        }
    }

    /// SMD-G keeps no bubble on the core site: bubble `slot`'s group plays in the zones around
    /// it from now on (the core's reconciliation moves each player's state into the zone it
    /// stands in, as when a bubble ends under the relay stage).
    fn dissolve(&mut self, sc: &mut Scratch, slot: u32, stats: &mut TickStats) {
        let unit = sc.slot_unit[slot as usize];
        self.delete(slot, DeleteReason::Dissolve);
        stats.deleted += 1;
        sc.slot_unit[slot as usize] = NONE;
        if unit != NONE {
            sc.cluster_bubble[unit as usize] = NONE;
            for &it in sc.units.members(unit as usize) {
                self.player_bubble[it as usize] = NONE;
            }
        }
    }

    /// Reports the players of unit `c` who enter a bubble that existed before this tick, other
    /// than through a merge (whose command lists them): fresh connections, players from a zone,
    /// border crossings.
    fn report_entries(&mut self, units: &Groups, c: usize, sc: &Scratch) {
        let core = self.sites.core();
        let slot = sc.cluster_bubble[c];
        if slot == NONE || sc.prior.get(slot as usize).is_none_or(|p| p.is_none()) {
            return; // in a zone, or a bubble created this tick (its command lists everyone)
        }
        let mut entering: Vec<(Option<SiteId>, PlayerId)> = Vec::new();
        for &it in units.members(c) {
            let prev = self.player_bubble[it as usize];
            if prev == slot || sc.absorbed_into.get(prev as usize) == Some(&slot) {
                continue;
            }
            let from = if self.fresh[it as usize] {
                None
            } else if prev == NONE {
                Some(core)
            } else {
                sc.prior.get(prev as usize).copied().flatten().map(|(site, _)| site)
            };
            entering.push((from, self.members[it as usize].id));
        }
        if entering.is_empty() {
            return;
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

    pub(super) fn slot_players(&self, slot: u32) -> Vec<PlayerId> {
        let mut v: Vec<PlayerId> = self
            .player_bubble
            .iter()
            .zip(&self.members)
            .filter(|(s, _)| **s == slot)
            .map(|(_, m)| m.id)
            .collect();
        v.sort_unstable();
        v
    }

    pub(super) fn tally_of_slot(&self, slot: u32) -> Tally {
        let mut t = Tally::new(self.sites.len());
        for (s, m) in self.player_bubble.iter().zip(&self.members) {
            if *s == slot {
                t.add_one(m.gateway, m.access_ms, m.weight);
            }
        }
        t
    }

    pub(super) fn failover_target(&self, tally: &Tally, failed: SiteId, seats: u32) -> SiteId {
        // A delegation's bubble fails over to the core site, and comes back when its site can
        // host it again.
        let core = self.sites.core();
        if self.placement == Placement::Fixed && failed != core && self.can_host(core, seats) {
            return core;
        }
        best_site(tally, &self.sites, self.th.cap_ms, None, |s| {
            s != failed && self.can_host(s, seats)
        })
        .site
    }

    pub(super) fn mark_touched(sc: &mut Scratch, slot: u32) {
        if sc.touched.len() <= slot as usize {
            sc.touched.resize(slot as usize + 1, false);
        }
        sc.touched[slot as usize] = true;
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
        } else if self.placement == Placement::Fixed {
            // A delegation's region absorbs the others (it is the heaviest claim).
            slots[0]
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
        self.rebound(survivor, bounds);
        let b = self.bubble_mut(survivor);
        b.kind.hysteresis.best_since = None;
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
        let (from, seats, id) = (b.site, b.seats(), b.id);
        b.site = to;
        b.epoch = epoch;
        b.stalled_since = None;
        b.kind.hysteresis.moved(now);
        self.used[from.index()] = self.used[from.index()].saturating_sub(seats);
        self.used[to.index()] += seats;
        self.commands.push_back(Command::Move { bubble: id, from, to, epoch, players, reason });
    }

    /// Frees a slot (its lease revoked, its servers released) without reporting. Its players are
    /// reassigned by the caller; the slot is reused from the next tick on.
    pub(super) fn remove(&mut self, slot: u32) {
        if self.regions.bubble(slot).is_none() {
            return;
        }
        if let Some(Entry::Bubble(b)) = self.regions.remove(slot) {
            let _ = self.leases.revoke(b.id, b.epoch);
            self.boxes.remove(&b);
            self.used[b.site.index()] = self.used[b.site.index()].saturating_sub(b.seats());
        }
    }

    pub(super) fn delete(&mut self, slot: u32, reason: DeleteReason) {
        let b = self.bubble(slot);
        let cmd = Command::Delete { bubble: b.id, site: b.site, epoch: b.epoch, reason };
        self.commands.push_back(cmd);
        self.remove(slot);
    }

    /// SMD-G: whether a unit whose `members` were in bubbles on `sites` (those it owns, else
    /// those it walked out of) plays in the core site's zones instead: some of them played
    /// there (not only just connected), and the core site scores best among those sites.
    fn zones_win(&self, members: &[u32], tally: &Tally, sites: &[SiteId]) -> bool {
        let in_zone = |&i: &u32| self.player_bubble[i as usize] == NONE && !self.fresh[i as usize];
        if self.placement != Placement::Smdg || !members.iter().any(in_zone) {
            return false;
        }
        let core = self.sites.core();
        let best =
            best_site(tally, &self.sites, self.th.cap_ms, Some(core), |s| sites.contains(&s));
        best.site == core
    }
}

/// The ids of the players at `places`, sorted.
pub(super) fn member_ids(members: &[units::Member], places: &[u32]) -> Vec<PlayerId> {
    let mut v: Vec<PlayerId> = places.iter().map(|&p| members[p as usize].id).collect();
    v.sort_unstable();
    v
}
