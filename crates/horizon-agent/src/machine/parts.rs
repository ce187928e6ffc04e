//! A bubble spread over several servers of this site, or brought back onto one (SPEC section
//! 4, within a site). A regroup is a few steps, each waiting on servers: take a ready server
//! for each new part (one at a time), move each member whose part changed (`Leave` from its
//! server, `Join` on the new one with its state), then release the surplus and give every
//! server its box.

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
}

impl AfterRegroup {
    fn token(&self) -> Token {
        match self {
            AfterRegroup::Answer { token } | AfterRegroup::PrepareSource { token, .. } => *token,
        }
    }
}

impl AgentMachine {
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
            .filter(|b| b.lease.epoch == lease.epoch)
            .ok_or_else(|| unknown(lease.bubble))?;
        if local.phase != Phase::Running {
            return Err(Fault::new(ErrorCode::Conflict, "parts of a bubble not running here"));
        }
        let world = local.region.world;
        let regions: Vec<Region> = if parts.len() == 1 {
            vec![local.region]
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
        if local.extra.is_empty() {
            self.regrouped(then);
            return Ok(());
        }
        let region = local.region;
        let place = local.members.keys().map(|&p| (p, 0)).collect();
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
        let servers = local.servers().cloned().collect();
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
            let (lease, region) = (local.lease, regroup.regions[part]);
            let players = regroup.place.values().filter(|&&p| p == part).count() as u32;
            let job = AssignJob::Part { lease: local.lease_ref() };
            if let Err(fault) = self.assign(lease, region, players, false, job, now, now) {
                self.regroup_failed(bubble, fault);
            }
            return;
        }
        let moves: Vec<(PlayerId, Name, Name)> = local
            .members
            .keys()
            .filter_map(|&p| {
                let from = local.server_of(p).clone();
                let kept = regroup.servers.iter().position(|s| *s == from);
                let now = kept.filter(|&i| i < regroup.regions.len());
                let part = regroup.place.get(&p).copied().or(now).unwrap_or(0);
                let to = regroup.servers[part].clone();
                (to != from).then_some((p, from, to))
            })
            .filter(|(_, from, to)| {
                self.servers.contains_key(from) && self.servers.contains_key(to)
            })
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
            let then = Then::Left { bubble, player, then: AfterLeave::Part { to } };
            self.ask_server(&from, then, server::Request::Leave { lease, player });
        }
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
            self.answer(regroup.then.token(), Err(unknown(bubble)));
            return;
        };
        let lease = local.lease_ref();
        let surplus: Vec<Name> = regroup.servers.drain(regroup.regions.len()..).collect();
        for name in surplus {
            if self.release(&name, bubble) {
                self.ask_server(
                    &name,
                    Then::Nothing("release"),
                    server::Request::Release { lease },
                );
            }
        }
        for (name, region) in regroup.servers.iter().zip(&regroup.regions) {
            let request = server::Request::Resize { lease, region: *region };
            self.ask_server(name, Then::Nothing("resize"), request);
        }
        if let Some(local) = self.bubbles.get_mut(&bubble) {
            local.extra = regroup.servers[1..].to_vec();
            let main = local.server.clone();
            let extra = &local.extra;
            local.holder.retain(|_, s| *s != main && extra.contains(s));
            tracing::debug!(site = %self.cfg.site, bubble = bubble.0, parts = regroup.regions.len(), "bubble parts changed");
        }
        self.top_up_pool(now);
        self.regrouped(regroup.then);
    }

    fn regrouped(&mut self, then: AfterRegroup) {
        match then {
            AfterRegroup::Answer { token } => self.answer(token, Ok(control::Reply::Done)),
            AfterRegroup::PrepareSource { token, handover, target, lease } => {
                self.prepare_source(token, handover, lease.bubble, target, lease)
            }
        }
    }

    /// A step failed: servers taken for new parts go back, and the order is refused.
    pub(super) fn regroup_failed(&mut self, bubble: BubbleId, fault: Fault) {
        let token = self.abandon_regroup(bubble);
        if let Some(token) = token {
            self.answer(token, Err(fault));
        }
    }

    /// Stops a regroup (the bubble is gone or a step failed): the servers it took for new
    /// parts go back. Returns the waiting order's token.
    pub(super) fn abandon_regroup(&mut self, bubble: BubbleId) -> Option<Token> {
        let regroup = self.regroups.remove(&bubble)?;
        let current: Vec<Name> =
            self.bubbles.get(&bubble).map(|b| b.servers().cloned().collect()).unwrap_or_default();
        for name in regroup.servers.iter().filter(|s| !current.contains(s)) {
            let holds = self.servers.get(name).is_some_and(|s| s.bubbles.contains(&bubble));
            if holds && self.release(name, bubble) {
                let request = server::Request::Release { lease: regroup.lease };
                self.ask_server(name, Then::Nothing("release"), request);
            }
        }
        Some(regroup.then.token())
    }
}
