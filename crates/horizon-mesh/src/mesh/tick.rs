//! The tick: units of placement, continuity with existing bubbles, borders and scoring.

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

    /// Puts a new bubble in `slot` and accounts its server.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn insert_bubble(
        &mut self,
        site: SiteId,
        world: WorldId,
        bounds: Aabb,
        players: u32,
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
            players,
            stalled_since: None,
            kind: BubbleState {
                hysteresis: Hysteresis { best_since: None, last_move: hysteresis.last_move },
                created_at: now,
                cuts: Vec::new(),
                kept_empty_until: None,
                load: LoadState::default(),
            },
        };
        Some((self.place_bubble(bubble), lease.epoch))
    }

    /// Stores `bubble` in the table of regions, indexes its box and accounts its seats.
    pub(super) fn place_bubble(&mut self, bubble: Bubble) -> u32 {
        let site = bubble.site;
        let slot = self.regions.insert(Entry::Bubble(bubble));
        self.boxes.insert(self.regions.bubble(slot).expect("just placed"));
        self.used[site.index()] += self.bubble(slot).seats();
        slot
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
        let fresh = members.iter().all(|&i| self.fresh[i as usize]);
        // Where were they? Nowhere (fresh), in a bubble of another world, or in a core-site zone.
        let travelled_from = members.iter().find_map(|&it| {
            let slot = self.player_bubble[it as usize];
            sc.prior.get(slot as usize).copied().flatten().map(|(site, _)| site)
        });
        let tally = &sc.tallies[c];
        let need = (members.len() as u32).max(1);
        let gateways: Vec<usize> = tally.gateways().collect();
        let gateway = match gateways[..] {
            [h] => self.sites.ids().nth(h),
            _ => None,
        };
        let best = |mesh: &Self| {
            best_site(tally, &mesh.sites, mesh.th.cap_ms, None, |s| mesh.can_host(s, need)).site
        };
        let core = self.sites.core();
        let site = match (self.placement, gateway) {
            // SMD: the players play in the zone around them.
            (Placement::AllCore, _) => return NONE,
            // A delegation's region on its site, once it has a server for it; until then its
            // players play in the zone around them (`open_delegations` counts it waiting).
            (Placement::Fixed, _) => match self.unit_site(sc, c) {
                Some(site) if self.can_host(site, need) => site,
                _ => return NONE,
            },
            (Placement::Creator, _) => match self.first_arrival(members) {
                Some(p) if self.can_host(p.gateway, need) => p.gateway,
                Some(_) if travelled_from.is_none() => return NONE,
                _ => best(self),
            },
            // Alone, or among players who entered at one site: on that site...
            (_, Some(gateway)) if self.can_host(gateway, need) => gateway,
            // ... or wait in a core-site zone until it has a server ready.
            (_, Some(_)) if travelled_from.is_none() => return NONE,
            _ => best(self),
        };
        if self.placement == Placement::Smdg
            && (site == core || !self.carve_due(members, tally, gateway, site, fresh, now))
        {
            // SMD-G: a group whose best site is the core site (or not better by the margin a
            // move needs, or not yet for the dwell time) plays in the zones around it.
            return NONE;
        }
        let (previous_site, reason) = match travelled_from {
            _ if fresh => (None, CreateReason::Join),
            Some(site) => (Some(site), CreateReason::Travel),
            // From the zones: a group of one gateway waited for a server there; any other was
            // playing there until the scoring placed it on another site.
            None if gateway.is_some() => (Some(core), CreateReason::ServerReady),
            None => (Some(core), CreateReason::Carve),
        };
        // A carve hands the group's simulation to another site, as a move does: hold counts
        // from it, so the bubble does not dissolve back into the zones straight away.
        let last_move = (reason == CreateReason::Carve).then_some(now);
        let hysteresis = Hysteresis { best_since: None, last_move };
        let origin = Origin { previous_site, reason, hysteresis };
        self.create_bubble(c, clusters, sc, site, origin, now, stats)
    }

    /// Whether a group in the core site's zones (or just connected) is carved out onto
    /// `site`, its best site, now. A group whose players all entered at one site goes there at once, as at
    /// connection. Any other must gain what a move needs over the core site (`gain_ms` per
    /// player, or fixing the fairness cap), as if the zones were its bubble there; and unless
    /// all its players just connected (they have no state to hand over yet), `site` must have
    /// been best for the dwell time, as for a move.
    fn carve_due(
        &mut self,
        members: &[u32],
        tally: &Tally,
        gateway: Option<SiteId>,
        site: SiteId,
        fresh: bool,
        now: Time,
    ) -> bool {
        if gateway.is_some() {
            return true;
        }
        let current = SiteScore::of(tally, &self.sites, self.sites.core());
        let best = SiteScore::of(tally, &self.sites, site);
        let standing = Hysteresis::default().standing(now, &current, &best, tally.sum_w, &self.th);
        if standing.verdict == Verdict::Stay {
            return false;
        }
        if fresh {
            return true;
        }
        // Invariant: a unit has members.
        let first = members.iter().map(|&i| self.members[i as usize].id).min().expect("a member");
        let counting = Carving {
            first,
            players: members.len() as u32,
            site,
            gain_ms: standing.gain_ms,
            fixes_cap: standing.fixes_cap,
            since: now,
        };
        let (carving, seen) = self.carving.entry(first).or_insert((counting, now));
        if carving.site != site {
            *carving = counting;
        }
        carving.players = counting.players;
        carving.gain_ms = counting.gain_ms;
        carving.fixes_cap = counting.fixes_cap;
        *seen = now;
        now.since(carving.since).as_ms() >= self.th.dwell_ms
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

    /// The member who arrived first (ids are handed out in arrival order).
    fn first_arrival(&self, members: &[u32]) -> Option<units::Member> {
        members.iter().map(|&i| self.members[i as usize]).min_by_key(|m| m.id)
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
        let need = (clusters.members(c).len() as u32).max(1);
        let best = |mesh: &Self| {
            best_site(tally, &mesh.sites, mesh.th.cap_ms, None, |s| mesh.can_host(s, need)).site
        };
        let site = match self.placement {
            // SMD-G keeps no bubble on the core site: they walk into the zones around them.
            Placement::Smdg if parent_site == self.sites.core() => return NONE,
            // Its players are on the parent's site already: no seat more (only the site up).
            Placement::Smdg | Placement::AllCore if self.can_host(parent_site, 0) => parent_site,
            // The baselines never re-place a bubble, so a group walking away is a new room or a
            // new session, placed by their own rule.
            Placement::Creator => match self.first_arrival(clusters.members(c)) {
                Some(p) if self.can_host(p.gateway, need) => p.gateway,
                _ => best(self),
            },
            // A delegation's region (its players were in another delegation's): on its site,
            // once it has a server for it.
            Placement::Fixed => match self.unit_site(sc, c) {
                Some(site) if self.can_host(site, need) => site,
                _ => return NONE,
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
        let players = member_ids(&self.members, clusters.members(c));
        let count = players.len() as u32;
        let Some((slot, epoch)) =
            self.insert_bubble(site, world, bounds, count, now, origin.hysteresis)
        else {
            return NONE;
        };
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

    /// Moving border: a bubble keeps its box while every member stays farther than half its
    /// margin from the edge; otherwise the box is reset to the one its players claim (their box
    /// grown by the margin), so the border moves with them, a margin at a time. Claims of
    /// different bubbles (and of players waiting in zones) never overlap, so resetting any stale
    /// box that overlaps another region ends with no overlap at all.
    pub(super) fn settle_bounds(&mut self, sc: &mut Scratch, stats: &mut TickStats) {
        for c in 0..sc.units.len() {
            let slot = sc.cluster_bubble[c];
            let e = &sc.extents[c];
            if slot == NONE {
                continue; // waiting in a zone
            }
            let bounds = self.bubble(slot).bounds;
            // A member within half its margin of the edge is in the alert box, outside `bounds`.
            let near_edge = bounds != e.claim
                && !(bounds.contains(e.alert.min) && bounds.contains(e.alert.max));
            if near_edge {
                self.set_bounds(slot, e.claim, BorderReason::NearEdge, stats);
            }
        }
        // One sweep of every region (players waiting in zones have their claims); then, round
        // after round, only what the boxes reset in the round before overlap: a box that kept
        // its place overlaps nothing new. Claims never overlap, so a box found overlapping is
        // stale and is reset, once: at most as many rounds as bubbles.
        // Regions are pushed in the order the units' claims were sorted in (a bubble's box is
        // near its claim), so sorting them takes little.
        sc.claims_order.clear();
        sc.claims_order.extend(sc.sweep.sorted_ids());
        sc.sweep.clear();
        for &u in &sc.claims_order {
            let (slot, e) = (sc.cluster_bubble[u as usize], &sc.extents[u as usize]);
            match slot {
                NONE => sc.sweep.push(e.world, e.claim, NONE),
                _ => sc.sweep.push(e.world, self.bubble(slot).bounds, slot),
            }
        }
        let mut stale: Vec<u32> =
            sc.sweep.overlapping_nearly_sorted().iter().flat_map(|&(a, b)| [a, b]).collect();
        // The next tick's guess at the order of its claims.
        sc.slots_order.clear();
        sc.slots_order.extend(sc.sweep.sorted_ids().filter(|&slot| slot != NONE));
        let mut reset: Vec<u32> = Vec::new();
        let mut was_reset = vec![false; self.regions.slots()];
        while !stale.is_empty() {
            reset.clear();
            for &slot in &stale {
                if slot == NONE {
                    continue;
                }
                // Invariant: every live bubble holds one unit, so it has a claim.
                let claimed = sc.extents[sc.slot_unit[slot as usize] as usize].claim;
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

    /// Gives a bubble a new box, indexed again.
    fn rebound(&mut self, slot: u32, bounds: Aabb) {
        let b = self.regions.bubble_mut(slot).expect("a live slot");
        self.boxes.remove(b);
        b.bounds = bounds;
        self.boxes.insert(b);
    }

    pub(super) fn set_bounds(
        &mut self,
        slot: u32,
        bounds: Aabb,
        reason: BorderReason,
        stats: &mut TickStats,
    ) {
        self.rebound(slot, bounds);
        let b = self.bubble(slot);
        let cmd = Command::Border { bubble: b.id, bounds, reason };
        self.commands.push_back(cmd);
        stats.borders += 1;
    }
}

/// The ids of the players at `places`, sorted.
pub(super) fn member_ids(members: &[units::Member], places: &[u32]) -> Vec<PlayerId> {
    let mut v: Vec<PlayerId> = places.iter().map(|&p| members[p as usize].id).collect();
    v.sort_unstable();
    v
}

/// Where a new bubble's players come from, and the hysteresis it starts with.
#[derive(Clone, Copy, Debug)]
struct Origin {
    previous_site: Option<SiteId>,
    reason: CreateReason,
    hysteresis: Hysteresis,
}
