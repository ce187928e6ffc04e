//! New bubbles (design.md §4, "At connection" and the carve): a group placed off the core
//! site gets a bubble of its own there — at once when all its players entered at one site, or
//! carved out of the zones once its best site has held for the dwell time —, and a group that
//! walked away from its bubble gets one on the same site.

use super::tick::member_ids;
use super::*;
use crate::scoring::Verdict;

impl Mesh {
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
}

/// Where a new bubble's players come from, and the hysteresis it starts with.
#[derive(Clone, Copy, Debug)]
struct Origin {
    previous_site: Option<SiteId>,
    reason: CreateReason,
    hysteresis: Hysteresis,
}
