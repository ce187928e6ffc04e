//! A bubble spread over several servers of this site, or brought back onto one (design.md §4,
//! within a site), or a whole region moved off an overfull server. A regroup is a few
//! steps, each waiting on servers: take a ready server for each new part (one at a time), move
//! each member whose part changed (`Leave` from its server, `Join` on the new one with its
//! state), then release the surplus and give every server its box.
//!
//! A server simulating more than `players_per_server` for [`RELIEVE_AFTER`] with several
//! regions gives whole ones away as today's SMD does ([`give_away`]: heaviest first, to the
//! lighter side): each moves with its whole state under a newer epoch from the core
//! (`rehome.rs`). Only while the core is unreachable does a region move here, players only, by
//! a regroup whose one part is on the server [`pick`](horizon_mesh::packing::pick) names.
//! While a region moves, the core's member changes for it wait (a departure must find its
//! player where it is), and its copies for the universe backup are skipped (a copy would miss
//! the players in flight).

use horizon_mesh::packing::give_away;

use super::*;

/// A regroup under way.
pub(super) struct Regroup {
    regions: Vec<Region>,
    /// The part each member goes to (members not listed stay in their part, if it remains).
    place: BTreeMap<PlayerId, usize>,
    /// The current servers, part 0 first, then those taken for new parts.
    servers: Vec<Name>,
    /// Members leaving one server for another, not yet answered.
    moving: usize,
    /// The bubble's lease when the regroup began (what new parts' servers are given).
    lease: LeaseRef,
    then: AfterRegroup,
}

/// What a regroup is for.
#[derive(Debug)]
pub(super) enum AfterRegroup {
    /// A `Parts` order, answered when done.
    Answer { token: Token },
    /// A handover source's `Prepare`: the snapshot comes from one server.
    PrepareSource { token: Token, handover: HandoverId, target: Name, lease: Lease },
    /// The whole region moves off `from`, an overfull server; `rounds` of moves so far.
    Relieve { from: Name, rounds: u32 },
    /// The part on `from`, a server that is stopping, moves to another server (`drain.rs`):
    /// taken last, it goes back to index `at` once there, so that every part keeps the index
    /// (and the box) the core knows it by, its copies included.
    Drain { from: Name, at: usize },
}

impl AfterRegroup {
    fn token(&self) -> Option<Token> {
        match self {
            AfterRegroup::Answer { token } | AfterRegroup::PrepareSource { token, .. } => {
                Some(*token)
            }
            AfterRegroup::Relieve { .. } | AfterRegroup::Drain { .. } => None,
        }
    }
}

impl Regroup {
    /// A whole region moving to another server (its servers all change).
    pub(super) fn relocates(&self) -> bool {
        matches!(self.then, AfterRegroup::Relieve { .. })
    }
}

impl AgentMachine {
    /// `bubble` is being spread, brought together or moved between servers here.
    pub(super) fn regrouping(&self, bubble: BubbleId) -> bool {
        self.regroups.contains_key(&bubble)
    }

    /// `bubble` is moving, whole, to another server here (all its servers change).
    pub(super) fn relocating(&self, bubble: BubbleId) -> bool {
        self.regroups.get(&bubble).is_some_and(|r| r.relocates())
    }

    /// Spreads a bubble over `parts.len()` servers of this site, or back onto fewer, and puts
    /// each member on their part's server. Answered when done.
    pub(super) fn spread(
        &mut self,
        token: Token,
        lease: LeaseRef,
        parts: Vec<Aabb>,
        players: Vec<control::PartMember>,
        now: Instant,
    ) -> Result<(), Fault> {
        if parts.is_empty() || parts.len() > MAX_PARTS {
            let why = format!("a bubble has 1 to {MAX_PARTS} parts, not {}", parts.len());
            return Err(Fault::new(ErrorCode::Unexpected, why));
        }
        let local = self
            .bubbles
            .get(&lease.bubble)
            .filter(|b| b.lease().epoch == lease.epoch)
            .ok_or_else(|| unknown(lease.bubble))?;
        if local.phase() != Phase::Running {
            return Err(Fault::new(ErrorCode::Conflict, "parts of a bubble not running here"));
        }
        let world = local.region().world;
        let regions: Vec<Region> = if parts.len() == 1 {
            vec![local.region()]
        } else {
            parts.iter().map(|&b| Region { world, bounds: Some(b) }).collect()
        };
        let place =
            players.iter().map(|m| (m.player, (m.part as usize).min(parts.len() - 1))).collect();
        self.start_regroup(lease.bubble, regions, place, AfterRegroup::Answer { token }, now)
    }

    /// Every player of a spread bubble back on its first server, the others released; then
    /// `then`. At once when the bubble is on one server.
    pub(super) fn consolidate(
        &mut self,
        bubble: BubbleId,
        then: AfterRegroup,
        now: Instant,
    ) -> Result<(), Fault> {
        let local = self.bubbles.get(&bubble).ok_or_else(|| unknown(bubble))?;
        if local.extra().is_empty() {
            self.regrouped(bubble, then);
            return Ok(());
        }
        let region = local.region();
        let place = local.members().keys().map(|&p| (p, 0)).collect();
        self.start_regroup(bubble, vec![region], place, then, now)
    }

    fn start_regroup(
        &mut self,
        bubble: BubbleId,
        regions: Vec<Region>,
        place: BTreeMap<PlayerId, usize>,
        then: AfterRegroup,
        now: Instant,
    ) -> Result<(), Fault> {
        if self.regroups.contains_key(&bubble) {
            return Err(Fault::new(ErrorCode::Conflict, "the bubble's parts are changing already"));
        }
        let local = self.bubbles.get(&bubble).ok_or_else(|| unknown(bubble))?;
        let servers = match &then {
            // Every part on a server taken now.
            AfterRegroup::Relieve { .. } => Vec::new(),
            // The parts that stay, in order: the last part's server is taken now.
            AfterRegroup::Drain { from, .. } => {
                local.servers().filter(|s| *s != from).cloned().collect()
            }
            _ => local.servers().cloned().collect(),
        };
        let lease = local.lease_ref();
        self.regroups.insert(bubble, Regroup { regions, place, servers, moving: 0, lease, then });
        self.advance_regroup(bubble, now);
        Ok(())
    }

    /// The next step: a server for the next new part, else the members' moves.
    fn advance_regroup(&mut self, bubble: BubbleId, now: Instant) {
        let (Some(regroup), Some(local)) = (self.regroups.get(&bubble), self.bubbles.get(&bubble))
        else {
            return;
        };
        if regroup.servers.len() < regroup.regions.len() {
            let part = regroup.servers.len();
            let (lease, region) = (local.lease(), regroup.regions[part]);
            let players = regroup.place.values().filter(|&&p| p == part).count() as u32;
            let from_tick = regroup.relocates().then(|| {
                let last = local.acked_at().as_ref().map_or(0, |(t, _)| t.0);
                Tick(last + RELOCATE_TICK_GAP)
            });
            let job = AssignJob::Part { lease: local.lease_ref(), from_tick };
            // The new server's lease ends when this site's does, not `ttl_ms` from now.
            let ttl = Duration::from_millis(u64::from(lease.ttl_ms));
            let granted = local.valid_until().checked_sub(ttl).unwrap_or(now);
            if let Err(fault) = self.assign(lease, region, players, false, job, granted, now) {
                self.regroup_failed(bubble, fault, now);
            }
            return;
        }
        let moves: Vec<(PlayerId, Name, Name)> = local
            .members()
            .keys()
            .filter_map(|&p| {
                let from = local.server_of(p).clone();
                let kept = regroup.servers.iter().position(|s| *s == from);
                let now = kept.filter(|&i| i < regroup.regions.len());
                let part = regroup.place.get(&p).copied().or(now).unwrap_or(0);
                let to = regroup.servers[part].clone();
                (to != from).then_some((p, from, to))
            })
            .filter(|(_, from, to)| self.fleet.contains(from) && self.fleet.contains(to))
            .collect();
        let lease = local.lease_ref();
        if let Some(regroup) = self.regroups.get_mut(&bubble) {
            regroup.moving = moves.len();
        }
        if moves.is_empty() {
            self.finish_regroup(bubble, now);
            return;
        }
        for (player, from, to) in moves {
            self.part_moves.insert((bubble, player), None);
            let then = Then::Left { bubble, player, then: AfterLeave::Part { to } };
            self.ask_server(&from, then, server::Request::Leave { lease, player });
        }
    }

    /// Holds a state joining `player` while they move between `bubble`'s servers (see
    /// `part_moves`): of two, the newer. Gives it back when they are not moving.
    pub(super) fn hold_for_part_move(
        &mut self,
        bubble: BubbleId,
        player: PlayerId,
        last_applied: Seq,
        state: Blob,
    ) -> Option<(Seq, Blob)> {
        let Some(held) = self.part_moves.get_mut(&(bubble, player)) else {
            return Some((last_applied, state));
        };
        if held.as_ref().is_none_or(|(seq, _)| *seq <= last_applied) {
            *held = Some((last_applied, state));
        }
        None
    }

    /// `player`'s move between `bubble`'s servers is answered: the state held for them
    /// meanwhile, if any.
    pub(super) fn part_move_done(
        &mut self,
        bubble: BubbleId,
        player: PlayerId,
    ) -> Option<(Seq, Blob)> {
        self.part_moves.remove(&(bubble, player)).flatten()
    }

    /// `bubble` stopped here: its members' moves between servers are forgotten.
    pub(super) fn forget_part_moves(&mut self, bubble: BubbleId) {
        self.part_moves.retain(|(b, _), _| *b != bubble);
    }

    /// A server took a new part of `bubble`.
    pub(super) fn part_assigned(&mut self, lease: LeaseRef, server: Name, now: Instant) {
        let bubble = lease.bubble;
        match self.regroups.get_mut(&bubble) {
            Some(regroup) => {
                regroup.servers.push(server);
                self.advance_regroup(bubble, now);
            }
            None => {
                // The regroup was abandoned meanwhile: the server goes back.
                if self.release(&server, bubble) {
                    let request = server::Request::Release { lease };
                    self.ask_server(&server, Then::Nothing("release"), request);
                }
            }
        }
    }

    /// One member of `bubble` changed servers (or could not).
    pub(super) fn part_moved(&mut self, bubble: BubbleId, now: Instant) {
        let Some(regroup) = self.regroups.get_mut(&bubble) else { return };
        regroup.moving = regroup.moving.saturating_sub(1);
        if regroup.moving == 0 {
            self.finish_regroup(bubble, now);
        }
    }

    fn finish_regroup(&mut self, bubble: BubbleId, now: Instant) {
        let Some(mut regroup) = self.regroups.remove(&bubble) else { return };
        let Some(local) = self.bubbles.get(&bubble) else {
            if let Some(token) = regroup.then.token() {
                self.answer(token, Err(unknown(bubble)));
            }
            return;
        };
        let parts = regroup.regions.len();
        let mut keep: Vec<Name> = regroup.servers[..parts].to_vec();
        if let AfterRegroup::Drain { at, .. } = regroup.then
            && at < parts
        {
            // The stopping server's part, taken last, back at its index.
            keep[at..].rotate_right(1);
            regroup.regions[at..].rotate_right(1);
        }
        // A region moving whole: players who joined its old server meanwhile (a crossing that
        // came, a fresh start) move too, in another round.
        if let AfterRegroup::Relieve { rounds, .. } = &mut regroup.then {
            let behind = local.members().keys().any(|p| !keep.contains(local.server_of(*p)));
            if behind && *rounds < RELOCATE_ROUNDS {
                *rounds += 1;
                self.regroups.insert(bubble, regroup);
                self.advance_regroup(bubble, now);
                return;
            }
        }
        let lease = local.lease_ref();
        let old: Vec<Name> = local.servers().cloned().collect();
        // The surplus taken or kept, and the old servers a move left.
        let left = old.iter().filter(|s| !regroup.servers.contains(s));
        let released: Vec<Name> = regroup.servers[parts..].iter().chain(left).cloned().collect();
        // Servers taken now hold the lease as it was when they were: brought up to date (a
        // renewal or a regrant may have come meanwhile, and went only to the old servers).
        let taken: Vec<Name> = keep.iter().filter(|s| !old.contains(s)).cloned().collect();
        let ttl_ms = local.valid_until().saturating_duration_since(now).as_millis();
        let ttl_ms = ttl_ms.min(u128::from(local.lease().ttl_ms)) as u32;
        let current = Lease { ttl_ms, ..local.lease() };
        for name in released {
            if self.release(&name, bubble) {
                self.ask_server(
                    &name,
                    Then::Nothing("release"),
                    server::Request::Release { lease },
                );
            }
        }
        for name in taken {
            if regroup.lease.epoch != lease.epoch {
                let request = server::Request::Regrant { old: regroup.lease, lease: current };
                self.ask_server(&name, Then::Nothing("regrant"), request);
            }
            let request = server::Request::Renew { leases: vec![lease], ttl_ms, sent_ago_ms: 0 };
            self.ask_server(&name, Then::Nothing("renew"), request);
        }
        for (name, region) in keep.iter().zip(&regroup.regions) {
            let request = server::Request::Resize { lease, region: *region };
            self.ask_server(name, Then::Nothing("resize"), request);
        }
        if let Some(local) = self.bubbles.get_mut(&bubble) {
            local.spread_over(&keep, &regroup.regions);
            let main = local.server();
            tracing::debug!(site = %self.cfg.site, bubble = bubble.0, parts, server = %main, "bubble parts changed");
        }
        self.apply_deferred(bubble, now);
        self.top_up_pool(now);
        self.regrouped(bubble, regroup.then);
    }

    fn regrouped(&mut self, bubble: BubbleId, then: AfterRegroup) {
        match then {
            AfterRegroup::Answer { token } => self.answer(token, Ok(control::Reply::Done)),
            AfterRegroup::PrepareSource { token, handover, target, lease } => {
                self.prepare_source(token, handover, lease.bubble, target, lease)
            }
            AfterRegroup::Drain { from, .. } => {
                self.stats.regions_moved.fetch_add(1, Ordering::Relaxed);
                tracing::info!(site = %self.cfg.site, bubble = bubble.0, %from, "part of a spread bubble moved off a stopping server");
            }
            AfterRegroup::Relieve { from, rounds } => {
                self.stats.regions_moved.fetch_add(1, Ordering::Relaxed);
                let to = self.bubbles.get(&bubble).map(|b| b.server().clone());
                tracing::info!(site = %self.cfg.site, bubble = bubble.0, %from, to = ?to, rounds, "region moved off an overfull server");
            }
        }
    }

    /// The member changes and adoptions that waited for a region's move (see the module), now.
    pub(super) fn apply_deferred(&mut self, bubble: BubbleId, now: Instant) {
        let Some(local) = self.bubbles.get_mut(&bubble).filter(|b| b.phase() == Phase::Running)
        else {
            return;
        };
        let adopts = local.take_adopts();
        if let Some((players, departed)) = local.take_deferred() {
            let lease = local.lease_ref();
            let _ = self.members(lease, players, departed, now);
        }
        for (players, copy) in adopts {
            self.send_adopt(bubble, players, copy);
        }
    }

    /// A step failed: servers taken for new parts go back, and the order is refused (a move
    /// off an overfull server is given up: the member changes that waited for it apply now).
    pub(super) fn regroup_failed(&mut self, bubble: BubbleId, fault: Fault, now: Instant) {
        match self.abandon_regroup(bubble) {
            Some(token) => self.answer(token, Err(fault)),
            None => {
                tracing::debug!(site = %self.cfg.site, bubble = bubble.0, error = %fault.message, "region not moved off its server");
            }
        }
        // What waited for the move applies where the players are (member lists wait only for
        // a region moving whole, adoptions for any move).
        self.apply_deferred(bubble, now);
    }

    /// Stops a regroup (the bubble is gone or a step failed): the servers it took for new
    /// parts go back. Returns the waiting order's token.
    pub(super) fn abandon_regroup(&mut self, bubble: BubbleId) -> Option<Token> {
        let regroup = self.regroups.remove(&bubble)?;
        let current: Vec<Name> =
            self.bubbles.get(&bubble).map(|b| b.servers().cloned().collect()).unwrap_or_default();
        for name in regroup.servers.iter().filter(|s| !current.contains(s)) {
            let holds = self.fleet.get(name).is_some_and(|s| s.holds(bubble));
            if holds && self.release(name, bubble) {
                let request = server::Request::Release { lease: regroup.lease };
                self.ask_server(name, Then::Nothing("release"), request);
            }
        }
        regroup.then.token()
    }

    /// Servers over `players_per_server` with several regions, for [`RELIEVE_AFTER`] and not
    /// within [`RELIEVE_SETTLE`] of their last move, give whole regions away (see the module).
    pub(super) fn relieve_servers(&mut self, now: Instant) {
        let cap = self.cfg.players_per_server;
        let over: Vec<(Name, bool)> = self
            .fleet
            .iter()
            .map(|(n, s)| {
                (n.clone(), s.ready() && s.regions().len() >= 2 && self.seated(n, s) > cap)
            })
            .collect();
        let mut due = Vec::new();
        for (name, over) in over {
            if self.fleet.overfull_due(&name, over, now, RELIEVE_AFTER, RELIEVE_SETTLE) {
                due.push(name);
            }
        }
        for name in due {
            self.relieve(&name, now);
        }
    }

    fn relieve(&mut self, server: &Name, now: Instant) {
        let Some(s) = self.fleet.get(server) else { return };
        let regions: Vec<(BubbleId, u32)> =
            s.regions().iter().map(|&b| (b, self.members_on(server, b))).collect();
        let away: Vec<BubbleId> = give_away(&regions, self.cfg.players_per_server)
            .into_iter()
            .filter(|&b| self.movable(b, server))
            .collect();
        if away.is_empty() {
            // What it would give is busy (a handover, a regrant): tried again next time.
            return;
        }
        self.fleet.relieved(server, now);
        let players: u32 = regions.iter().map(|(_, p)| p).sum();
        tracing::info!(site = %self.cfg.site, %server, players, regions = regions.len(), moving = away.len(), "overfull game server gives regions away");
        for bubble in away {
            if self.is_registered() {
                // With its state, under a newer epoch from the core (`rehome.rs`).
                self.rehome(bubble, server, now);
                continue;
            }
            let Some(local) = self.bubbles.get(&bubble) else { continue };
            let region = local.region();
            let place = local.members().keys().map(|&p| (p, 0)).collect();
            let then = AfterRegroup::Relieve { from: server.clone(), rounds: 0 };
            if let Err(fault) = self.start_regroup(bubble, vec![region], place, then, now) {
                tracing::debug!(site = %self.cfg.site, bubble = bubble.0, error = %fault.message, "region not moved off its server");
            }
        }
    }

    /// Whether `bubble` may move whole off `server` now: it runs there alone (not spread), and
    /// nothing else is changing it.
    pub(super) fn movable(&self, bubble: BubbleId, server: &Name) -> bool {
        self.steady(bubble)
            && self
                .bubbles
                .get(&bubble)
                .is_some_and(|l| l.extra().is_empty() && l.server() == server)
    }

    /// Running here under a lease the core renews, and nothing is changing it (a regroup, a
    /// move, a regrant, a handover's stream, a restore).
    fn steady(&self, bubble: BubbleId) -> bool {
        let busy = self.regroups.contains_key(&bubble)
            || self.rehoming(bubble)
            || self.regranting(bubble)
            || self.sources.streams(bubble)
            || self.restores.is_waiting(bubble);
        !busy
            && self.bubbles.get(&bubble).is_some_and(|l| {
                l.phase() == Phase::Running && l.refused_at().is_none() && !l.told_reconnecting()
            })
    }

    /// Moves the part of spread `bubble` that `from` (stopping) simulates to another ready
    /// server, with its members' states; the other parts stay where they are. When it cannot
    /// start now (not spread over `from`, or busy), it is tried again at the next housekeeping.
    pub(super) fn drain_part(&mut self, bubble: BubbleId, from: &Name, now: Instant) {
        if !self.steady(bubble) {
            return;
        }
        let Some(local) = self.bubbles.get(&bubble) else { return };
        let servers: Vec<&Name> = local.servers().collect();
        let Some(at) = servers.iter().position(|s| *s == from) else { return };
        if servers.len() < 2 || local.part_regions().len() != servers.len() {
            return;
        }
        // A regroup takes new servers at the end: the stopping server's part goes last while
        // it moves (each member placed by the index of the server it stays on, or the new
        // one), and back to index `at` when done (`finish_regroup`).
        let mut regions = local.part_regions().to_vec();
        let moving = regions.remove(at);
        regions.push(moving);
        let staying: Vec<&Name> = servers.iter().copied().filter(|s| *s != from).collect();
        let place = local
            .members()
            .keys()
            .map(|&p| {
                let on = local.server_of(p);
                (p, staying.iter().position(|s| *s == on).unwrap_or(staying.len()))
            })
            .collect();
        let then = AfterRegroup::Drain { from: from.clone(), at };
        if let Err(fault) = self.start_regroup(bubble, regions, place, then, now) {
            tracing::debug!(site = %self.cfg.site, bubble = bubble.0, error = %fault.message, "a stopping server's part not moved yet");
        }
    }
}
