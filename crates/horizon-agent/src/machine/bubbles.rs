//! The bubbles this site runs: creation, restore, adoption, members, regrant, release.
//! Handovers are in `handover.rs`; players' states crossing between bubbles in `crossings.rs`.

use horizon_mesh::packing::{Seat, pick};

use super::*;

impl AgentMachine {
    /// Ready servers that take a new region now: empty, or with a seat left (several regions
    /// share a server, design.md §8).
    pub(super) fn free_servers(&self) -> usize {
        self.fleet.iter().filter(|(n, s)| self.takes_regions(n, s)).count()
    }

    pub(super) fn takes_regions(&self, name: &Name, s: &fleet::GameServer) -> bool {
        s.ready() && (s.regions().is_empty() || self.seated(name, s) < self.cfg.seats_per_server)
    }

    /// The players a server simulates: the larger of what it reported and the members placed
    /// on it since (a report lags by up to a second); a region takes at least one seat (its
    /// players follow it), as in the brain.
    pub(super) fn seated(&self, name: &Name, s: &fleet::GameServer) -> u32 {
        let given: u32 = s.regions().iter().map(|&b| self.players_on(name, b)).sum();
        s.load().1.max(given)
    }

    /// The members of `bubble` that `server` simulates, at least one: a region takes a seat,
    /// one given to the server and not answered yet too.
    pub(super) fn players_on(&self, server: &Name, bubble: BubbleId) -> u32 {
        self.members_on(server, bubble).max(1)
    }

    /// The members of `bubble` that `server` simulates (none for a bubble not known here).
    pub(super) fn members_on(&self, server: &Name, bubble: BubbleId) -> u32 {
        self.bubbles
            .get(&bubble)
            .map_or(0, |l| l.members().keys().filter(|p| l.server_of(**p) == server).count() as u32)
    }

    pub(super) fn bubble_in(&self, pred: impl Fn(Phase) -> bool) -> Option<BubbleId> {
        self.bubbles.iter().find(|(_, b)| pred(b.phase())).map(|(&id, _)| id)
    }

    /// The ready server for a new region of `players` players of `bubble` ([`pick`]: the
    /// fullest with seats left for them, else an empty one; never one already holding a part
    /// of the same bubble), if any.
    pub(super) fn server_for(&self, bubble: BubbleId, players: u32) -> Option<Name> {
        let offered =
            self.fleet.iter().filter(|(_, s)| s.ready() && !s.holds(bubble)).map(|(n, s)| Seat {
                server: n,
                players: self.seated(n, s),
                regions: s.regions().len() as u32,
            });
        pick(offered, players, self.cfg.seats_per_server).cloned()
    }

    /// Gives `lease.bubble` (`players` of them, as far as known) to a server ([`server_for`];
    /// taken at once, so no other order picks it); the server's answer carries on with `job`
    /// ([`AgentMachine::assigned`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn assign(
        &mut self,
        lease: Lease,
        region: Region,
        players: u32,
        standby: bool,
        job: AssignJob,
        received: Instant,
        now: Instant,
    ) -> Result<(), Fault> {
        let server = self.server_for(lease.bubble, players).ok_or_else(|| {
            Fault::new(ErrorCode::NotReady, format!("no ready server at {}", self.cfg.site))
        })?;
        if self.fleet.give(&server, lease.bubble) {
            let hosting = Effect::SetHosting { server: server.clone(), hosting: true };
            self.effects.push_back(hosting);
        }
        let lease = remaining(lease, received, now);
        let request = match job {
            // A region moving whole to this server: its ticks go on after the old server's.
            AssignJob::Part { from_tick: Some(tick), .. } => {
                server::Request::Continue { lease, region, tick }
            }
            _ => server::Request::Assign { lease, region, from_snapshot: standby },
        };
        self.ask_server(&server, Then::Assigned { server: server.clone(), job }, request);
        self.top_up_pool(now);
        Ok(())
    }

    /// The core's `Revoke` (`token`) of `leases`: each held here is dropped, its servers asked
    /// to let it go; `true` when the order is answered after them ([`Then::Released`]), so that
    /// the next order of the core's lane (a newer epoch of the bubble here) never finds the old
    /// one ticking. A lease not held is perhaps still being given to a server: remembered.
    pub(super) fn revoke(&mut self, token: Token, leases: Vec<LeaseRef>) -> bool {
        let mut asked = 0;
        for l in leases {
            if self.bubbles.get(&l.bubble).is_some_and(|b| b.lease().epoch == l.epoch) {
                asked += self.drop_bubble_answering(l.bubble, Some(token));
            } else {
                self.revoked_early(l);
            }
        }
        if asked > 0 {
            self.revoking.insert(token, asked);
        }
        asked > 0
    }

    /// The core revoked `lease`, not held here: if it is being given to a server, that server
    /// lets it go when it has taken it (see [`AgentMachine::assigned`]).
    fn revoked_early(&mut self, lease: LeaseRef) {
        let newest = self.revoked.entry(lease.bubble).or_insert(lease.epoch);
        *newest = (*newest).max(lease.epoch);
        while self.revoked.len() > REVOKED_KEPT {
            self.revoked.pop_first();
        }
    }

    /// `lease` was revoked before it was held, or a newer epoch of its bubble is held here.
    pub(super) fn superseded(&self, lease: LeaseRef) -> bool {
        self.revoked.get(&lease.bubble).is_some_and(|e| *e >= lease.epoch)
            || self.bubbles.get(&lease.bubble).is_some_and(|b| b.lease().epoch > lease.epoch)
    }

    /// A server's answer to an `Assign`.
    pub(super) fn assigned(
        &mut self,
        server: Name,
        job: AssignJob,
        result: Result<server::Reply, Failure>,
        now: Instant,
    ) {
        let refused = match result {
            Ok(server::Reply::Stale { newest }) => {
                Some(Fault::new(ErrorCode::StaleEpoch, format!("server has epoch {}", newest.0)))
            }
            Ok(_) => None,
            // The server's own code when it refused; `timeout` when it did not answer (it may
            // be running it: the core learns so from the code); `not_ready` when unreachable.
            Err(e) => Some(Fault::new(e.code(), format!("server {server}: {e}"))),
        };
        if let Some(fault) = refused {
            let bubble = match &job {
                AssignJob::Create { lease, .. }
                | AssignJob::Restore(RestoreJob { lease, .. })
                | AssignJob::Standby { lease, .. } => lease.bubble,
                AssignJob::Part { lease, .. } | AssignJob::Rehome { lease } => lease.bubble,
            };
            self.release(&server, bubble);
            match job {
                AssignJob::Create { token, .. }
                | AssignJob::Restore(RestoreJob { token, .. })
                | AssignJob::Standby { token, .. } => self.answer(token, Err(fault)),
                AssignJob::Part { lease, .. } => self.regroup_failed(lease.bubble, fault, now),
                AssignJob::Rehome { lease } => {
                    self.rehome_assigned(lease, server, Some(fault), now)
                }
            }
            return;
        }
        if let Some(lease) = job.held_lease()
            && self.superseded(lease)
        {
            // Revoked (or a newer epoch held here) while the server took it: it lets it go.
            tracing::info!(site = %self.cfg.site, bubble = lease.bubble.0, epoch = lease.epoch.0, %server, "a lease revoked while its server took it: released");
            self.revoked.remove(&lease.bubble);
            if self.release(&server, lease.bubble) {
                self.ask_server(
                    &server,
                    Then::Nothing("release"),
                    server::Request::Release { lease },
                );
            }
            let fault = Fault::new(ErrorCode::StaleEpoch, "revoked while its server took it");
            if let Some(token) = job.token() {
                self.answer(token, Err(fault));
            }
            return;
        }
        match job {
            AssignJob::Create { token, region, lease, received } => {
                tracing::info!(site = %self.cfg.site, bubble = lease.bubble.0, epoch = lease.epoch.0, %server, "bubble created");
                let local = Local::new(lease, region, server, Phase::Running, received);
                self.bubbles.insert(lease.bubble, local);
                self.count_bubbles();
                self.answer(token, Ok(control::Reply::Done));
            }
            AssignJob::Restore(job) => self.restored(server, job, now),
            AssignJob::Standby { token, handover, source, lease, received } => {
                tracing::info!(site = %self.cfg.site, bubble = lease.bubble.0, from = %source, %server, "handover target standing by");
                let region = Region { world: WorldId(0), bounds: None };
                let phase = Phase::Standby { handover };
                let local = Local::new(lease, region, server, phase, received);
                self.bubbles.insert(lease.bubble, local);
                self.count_bubbles();
                self.stats.handovers_in.fetch_add(1, Ordering::Relaxed);
                self.answer(token, Ok(control::Reply::Prepared { handover }));
            }
            AssignJob::Part { lease, .. } => self.part_assigned(lease, server, now),
            AssignJob::Rehome { lease } => self.rehome_assigned(lease, server, None, now),
        }
    }

    /// A failover: run `lease.bubble` here from its latest copy (design.md §6). The server
    /// stands by under the new epoch, takes the copy as a snapshot of the older epoch `from`
    /// and a seal at `tick` (no final delta), and runs from `tick + 1`. Answered at the
    /// server's first update (or at once when it already runs here, or the copy is empty).
    /// A copy taken spread over several servers comes back onto one: part 0's copy is the
    /// snapshot, each other part's a `PartSnapshot` whose players join it.
    pub(super) fn restore(
        &mut self,
        token: Token,
        lease: Lease,
        region: Region,
        copy: BackupCopy,
        received: Instant,
        now: Instant,
    ) -> Result<(), Fault> {
        let bubble = lease.bubble;
        match self.bubbles.get(&bubble) {
            Some(b) if b.lease().epoch == lease.epoch => {
                self.answer(token, Ok(control::Reply::Done));
                return Ok(());
            }
            Some(b) if b.lease().epoch > lease.epoch => {
                return Err(Fault::new(ErrorCode::StaleEpoch, "a newer epoch runs here"));
            }
            // An older holder here (a stalled copy of this very bubble): it stops for good.
            Some(_) => self.drop_bubble(bubble),
            None => {}
        }
        let standby = !copy.copy.0.is_empty();
        let job = AssignJob::Restore(RestoreJob { token, region, lease, copy, received });
        // How many players the copy holds is not known before the server reads it.
        self.assign(lease, region, 1, standby, job, received, now)
    }

    fn restored(&mut self, server: Name, job: RestoreJob, now: Instant) {
        let RestoreJob { token, region, lease, copy, received } = job;
        let BackupCopy { from, tick, copy, parts } = copy;
        let bubble = lease.bubble;
        tracing::warn!(site = %self.cfg.site, bubble = bubble.0, epoch = lease.epoch.0, tick = tick.0, copy_bytes = copy.0.len(), parts = parts.len() + 1, %server, "restoring a bubble from its copy");
        let empty = copy.0.is_empty();
        let phase = if empty { Phase::Running } else { Phase::Restoring };
        self.bubbles.insert(bubble, Local::new(lease, region, server.clone(), phase, received));
        self.count_bubbles();
        if empty {
            self.answer(token, Ok(control::Reply::Done));
            return;
        }
        let copies = std::iter::once((true, copy)).chain(parts.into_iter().map(|p| (false, p)));
        for (first, copy) in copies.filter(|(_, c)| !c.0.is_empty()) {
            for chunk in chunked(bubble, from, tick, &copy) {
                let item =
                    if first { StateItem::Snapshot(chunk) } else { StateItem::PartSnapshot(chunk) };
                self.effects.push_back(Effect::ServerStream { server: server.clone(), item });
            }
        }
        let seal = StateItem::Seal(horizon_proto::Seal {
            bubble,
            epoch: from,
            tick,
            final_delta: Blob::default(),
            last_applied: Vec::new(),
        });
        // The server's stream queue holds far more than one copy's chunks; a full one means
        // the server is stuck, and the deadline refuses the restore.
        self.effects.push_back(Effect::ServerStream { server, item: seal });
        self.restores.waiting(bubble, now, token);
    }

    /// A bubble here lacks states of `players` that a stored copy (of it or of another bubble)
    /// holds with more of their inputs (it was restored from a copy without them, or their
    /// state went back on the way in): that copy goes to the server simulating each of them,
    /// which takes those players from it (keeping, of two states of one player, the one that
    /// applied more inputs). While they move between its servers (its parts change), it waits
    /// for the move. (While it moves to another server, the core's orders name the new epoch,
    /// which this site takes only once the region runs there: refused, as stale.)
    pub(super) fn adopt(
        &mut self,
        lease: LeaseRef,
        players: Vec<PlayerId>,
        copy: Blob,
    ) -> Result<control::Reply, Fault> {
        let b = self.bubbles.get(&lease.bubble).ok_or_else(|| unknown(lease.bubble))?;
        if b.lease().epoch != lease.epoch {
            return Err(Fault::new(ErrorCode::StaleEpoch, "another epoch of the bubble runs here"));
        }
        if b.phase() != Phase::Running {
            return Err(Fault::new(ErrorCode::NotReady, "the bubble is not running here yet"));
        }
        tracing::info!(site = %self.cfg.site, bubble = lease.bubble.0, players = players.len(), copy_bytes = copy.0.len(), "players adopted from a stored copy");
        if self.regrouping(lease.bubble) {
            // Its players are moving between its servers (a bubble restored from its parts'
            // copies is spread again): each adopts where it is once the move is done
            // (`apply_deferred`).
            if let Some(b) = self.bubbles.get_mut(&lease.bubble) {
                b.defer_adopt(players, copy);
            }
            return Ok(control::Reply::Done);
        }
        self.send_adopt(lease.bubble, players, copy);
        Ok(control::Reply::Done)
    }

    /// Streams a stored copy to each server of `bubble` simulating some of `players`, naming
    /// those: a server adopts only the players it simulates (it would start the others, a
    /// second entity of theirs beside the one on their own server).
    pub(super) fn send_adopt(&mut self, bubble: BubbleId, players: Vec<PlayerId>, copy: Blob) {
        let Some(b) = self.bubbles.get(&bubble) else { return };
        let epoch = b.lease().epoch;
        let mut by_server: BTreeMap<Name, Vec<PlayerId>> = BTreeMap::new();
        for player in players {
            by_server.entry(b.server_of(player).clone()).or_default().push(player);
        }
        for (server, players) in by_server {
            for chunk in chunked(bubble, epoch, Tick(0), &copy) {
                let item =
                    StateItem::Adopt(horizon_proto::Adopt { chunk, players: players.clone() });
                self.effects.push_back(Effect::ServerStream { server: server.clone(), item });
            }
        }
    }

    pub(super) fn resize(
        &mut self,
        lease: LeaseRef,
        region: Region,
    ) -> Result<control::Reply, Fault> {
        let b = self.bubbles.get_mut(&lease.bubble).ok_or_else(|| unknown(lease.bubble))?;
        b.resized(region);
        let lease = b.lease_ref();
        if !b.extra().is_empty() {
            // Spread: the parts' boxes follow in the next `Parts`.
            return Ok(control::Reply::Done);
        }
        let server = b.server().clone();
        self.ask_server(
            &server,
            Then::Nothing("resize"),
            server::Request::Resize { lease, region },
        );
        Ok(control::Reply::Done)
    }

    /// The core's full member list of a bubble: join the new, release the departed (whose
    /// state crosses to their new bubble when the server has let them go).
    pub(super) fn members(
        &mut self,
        lease: LeaseRef,
        players: Vec<control::Member>,
        departed: Vec<control::Departure>,
        now: Instant,
    ) -> Result<control::Reply, Fault> {
        let moving = self.relocating(lease.bubble)
            || self.rehome_granted(lease.bubble)
            || self.regrants.contains_key(&lease.bubble);
        let b = self.bubbles.get_mut(&lease.bubble).ok_or_else(|| unknown(lease.bubble))?;
        if b.phase() == Phase::Restoring || moving {
            // Its server is still taking the copy, its players are moving to another server,
            // or its servers are taking a newer epoch: the changes wait for it to run there
            // (under that epoch).
            b.defer(players, departed);
            return Ok(control::Reply::Done);
        }
        let held = b.lease_ref();
        let standby = matches!(b.phase(), Phase::Standby { .. });
        let server = b.server().clone();
        let old = b.replace_members(players.iter().map(|m| (m.player, m.home.clone())).collect());
        if standby {
            // The snapshot holds the players; the list only says where their updates go.
            return Ok(control::Reply::Done);
        }
        if !self.fleet.contains(&server) {
            return Err(Fault::new(ErrorCode::NotReady, format!("server {server} is gone")));
        }
        for m in players.iter().filter(|m| !old.contains_key(&m.player)) {
            // Back in a bubble it left: a crossing into it is for here again.
            self.transit.back_in(m.player, lease.bubble);
            // Its state may be here already (a crossing that came first), even when the list
            // does not say it crosses (a resync after this site was cut from the core).
            let stashed = self.transit.unstash(m.player, lease.bubble);
            match stashed {
                Some((last_applied, state)) => {
                    self.join(&server, held, m.player, last_applied, state)
                }
                // Its state is on its way out of here, never taken: the bubble it was sent to
                // never heard the player comes (a core restarted before saying so, and put them
                // back here). They play here now, and so does that state, not a fresh one.
                None if self.transit.sending(m.player) => {
                    let site = self.cfg.site.clone();
                    let d = control::Departure { player: m.player, to: held, site };
                    self.redirect_crossing(m.player, d, now);
                }
                None if m.crossing => {
                    self.transit.await_state(m.player, lease.bubble, now);
                }
                None => self.join(&server, held, m.player, Seq(0), Blob::default()),
            }
        }
        let mut departed: BTreeMap<PlayerId, control::Departure> =
            departed.into_iter().map(|d| (d.player, d)).collect();
        // Right after a registration the core may not know every member yet (a restarted core
        // learns them from each home's `Players`): a member missing without a departure stays
        // until the list is trusted again.
        let trusting = self.trusting_members(now);
        let listed = |p: &PlayerId| players.iter().any(|m| m.player == *p);
        // A departure of a player this list never had: a restored copy may hold them.
        let unknown: Vec<(PlayerId, Option<Name>)> = departed
            .keys()
            .filter(|p| !old.contains_key(p) && !listed(p))
            .map(|p| (*p, None))
            .collect();
        let leaving: Vec<(PlayerId, Option<Name>)> = old
            .iter()
            .filter(|(p, _)| !listed(p))
            .map(|(p, home)| (*p, Some(home.clone())))
            .chain(unknown)
            .collect();
        for (player, home) in &leaving {
            if let Some(d) = departed.get(player) {
                self.transit.forward_later(*player, lease.bubble, d.clone(), now);
            }
            if self.transit.stop_awaiting(*player, lease.bubble) {
                // Its state never came here: it goes on to where the player went when it does.
                if departed.remove(player).is_some() {
                    continue;
                }
            }
            if let Some(home) = home
                && !trusting
                && !departed.contains_key(player)
            {
                if let Some(b) = self.bubbles.get_mut(&lease.bubble) {
                    b.joined(*player, home.clone());
                }
                continue;
            }
            // Its crossing is still on its way from here, to a bubble that moved since: it
            // follows it.
            if home.is_none()
                && let Some(d) = departed.get(player)
                && self.transit.sending(*player)
            {
                self.redirect_crossing(*player, d.clone(), now);
                departed.remove(player);
                continue;
            }
            // Its state came here and was never taken in (the list saying it comes never
            // arrived): it goes on from here.
            if home.is_none()
                && let Some((last_applied, state)) = self.transit.unstash(*player, lease.bubble)
                && let Some(d) = departed.remove(player)
            {
                self.cross(*player, lease.bubble, d, last_applied, state, now);
                continue;
            }
            let holder = self.bubbles.get_mut(&lease.bubble).and_then(|b| b.unheld(*player));
            let from = holder.unwrap_or_else(|| server.clone());
            let then = match departed.remove(player) {
                Some(d) => AfterLeave::Cross { d, from: held },
                None => AfterLeave::Nothing,
            };
            let request = server::Request::Leave { lease: held, player: *player };
            self.ask_server(
                &from,
                Then::Left { bubble: lease.bubble, player: *player, then },
                request,
            );
        }
        Ok(control::Reply::Done)
    }

    /// A server let a player go.
    pub(super) fn left(
        &mut self,
        bubble: BubbleId,
        player: PlayerId,
        then: AfterLeave,
        result: Result<server::Reply, Failure>,
        now: Instant,
    ) {
        // A state that came for a player moving between the bubble's servers meanwhile: it
        // joins them where they are now.
        let came = match then {
            AfterLeave::Part { .. } => self.part_move_done(bubble, player),
            _ => None,
        };
        let Ok(server::Reply::Left { last_applied, state }) = result else {
            tracing::warn!(
                player = player.0,
                bubble = bubble.0,
                ?result,
                "player not let go by its server"
            );
            if let (AfterLeave::Cross { from, .. }, Err(Failure::Unreachable(why))) =
                (&then, &result)
                && self.bubbles.get(&bubble).is_none_or(|b| b.lease_ref() != *from)
            {
                // The state died with its server, which this site heard of after the bubble
                // had gone from here (the core ended it, the player's departure its last
                // order): the core hears it as for a bubble still here, and has what the sites
                // the player crossed in from kept sent on (an ended bubble's loss).
                let request = control::Request::Lost { leases: vec![*from], reason: why.clone() };
                self.ask_core(Then::Nothing("lost bubbles"), request);
            }
            if let AfterLeave::Part { .. } = then {
                if let Some((last_applied, state)) = came
                    && let Some(local) = self.bubbles.get(&bubble)
                {
                    let (server, lease) = (local.server_of(player).clone(), local.lease_ref());
                    self.join(&server, lease, player, last_applied, state);
                }
                self.part_moved(bubble, now);
            }
            return;
        };
        match then {
            AfterLeave::Nothing => {}
            AfterLeave::Cross { d, .. } => self.cross(player, bubble, d, last_applied, state, now),
            AfterLeave::Part { to } => {
                if let Some(local) = self.bubbles.get(&bubble) {
                    let lease = local.lease_ref();
                    self.join(&to, lease, player, last_applied, state);
                    // The server keeps, of two states of a player, the one that applied more.
                    if let Some((last_applied, state)) = came {
                        self.join(&to, lease, player, last_applied, state);
                    }
                    if let Some(local) = self.bubbles.get_mut(&bubble) {
                        local.held_on(player, to);
                    }
                }
                self.part_moved(bubble, now);
            }
        }
    }

    pub(super) fn join(
        &mut self,
        server: &Name,
        lease: LeaseRef,
        player: PlayerId,
        last_applied: Seq,
        state: Blob,
    ) {
        // The player is leaving its server for another of the bubble's (a part move): joined
        // here, the state would stay behind as a second entity of theirs, and the move would
        // carry the older one. It joins them where they go (`left`); of two, the newer.
        let Some((last_applied, state)) =
            self.hold_for_part_move(lease.bubble, player, last_applied, state)
        else {
            return;
        };
        let Some((last_applied, state)) =
            self.rehome_hold_join(lease.bubble, player, last_applied, state)
        else {
            return;
        };
        if let Some(job) = self.regrants.get_mut(&lease.bubble) {
            let server = server.clone();
            job.joins.push(HeldJoin { server, player, last_applied, state });
            return;
        }
        let request = server::Request::Join { lease, player, last_applied, state };
        self.ask_server(server, Then::Joined { player }, request);
    }

    /// `bubble` waits on a regrant of its servers.
    pub(super) fn regranting(&self, bubble: BubbleId) -> bool {
        self.regrants.contains_key(&bubble)
    }

    /// `bubble`'s regrant, ended (its server is gone).
    pub(super) fn take_regrant(&mut self, bubble: BubbleId) -> Option<Regrant> {
        self.regrants.remove(&bubble)
    }

    /// The core abandoned a handover of this bubble before the freeze and re-granted it here
    /// under a newer epoch: whatever was prepared for the old epoch stops (a prepare still
    /// opening its transfer is answered now), the bubble keeps running with its state.
    pub(super) fn regrant(
        &mut self,
        token: Token,
        old: LeaseRef,
        lease: Lease,
        received: Instant,
        now: Instant,
    ) -> Result<(), Fault> {
        // Asked for by this site: the region moves to another server under the new lease.
        if self.rehome_regranted(token, old, lease, received, now) {
            return Ok(());
        }
        let local = self
            .bubbles
            .get(&old.bubble)
            .filter(|b| b.lease().epoch == old.epoch)
            .ok_or_else(|| unknown(old.bubble))?;
        if !matches!(local.phase(), Phase::Running | Phase::Leaving { .. }) {
            return Err(Fault::new(ErrorCode::Conflict, "regrant of a bubble not running here"));
        }
        if self.regrants.contains_key(&old.bubble) {
            return Err(Fault::new(ErrorCode::Conflict, "a regrant of this bubble is under way"));
        }
        let servers: Vec<Name> = local.servers().cloned().collect();
        if let Some(gone) = servers.iter().find(|s| !self.fleet.contains(s)) {
            return Err(Fault::new(ErrorCode::NotReady, format!("server {gone} is gone")));
        }
        let waiting = servers.len();
        let job = Regrant { token, lease, received, waiting, fault: None, joins: Vec::new() };
        self.regrants.insert(old.bubble, job);
        for server in servers {
            let then = Then::Regranted { bubble: old.bubble };
            self.ask_server(&server, then, server::Request::Regrant { old, lease });
        }
        Ok(())
    }

    pub(super) fn regranted(
        &mut self,
        bubble: BubbleId,
        result: Result<server::Reply, Failure>,
        now: Instant,
    ) {
        let Some(job) = self.regrants.get_mut(&bubble) else { return };
        job.waiting = job.waiting.saturating_sub(1);
        let fault = match result {
            Ok(server::Reply::Done) => None,
            Ok(other) => Some(Fault::new(ErrorCode::Internal, format!("server replied {other:?}"))),
            Err(e) => Some(Fault::new(e.code(), format!("regrant: {e}"))),
        };
        if job.fault.is_none() {
            job.fault = fault;
        }
        if job.waiting > 0 {
            return;
        }
        let Some(mut job) = self.regrants.remove(&bubble) else { return };
        let joins = std::mem::take(&mut job.joins);
        self.regrant_done(bubble, job);
        // What waited for the servers to hold the new epoch (or, refused, to keep the old).
        if let Some(lease) = self.bubbles.get(&bubble).map(|b| b.lease_ref()) {
            for j in joins {
                self.join(&j.server, lease, j.player, j.last_applied, j.state);
            }
        }
        self.apply_deferred(bubble, now);
    }

    fn regrant_done(&mut self, bubble: BubbleId, job: Regrant) {
        if let Some(fault) = job.fault {
            self.answer(job.token, Err(fault));
            return;
        }
        let Some(local) = self.bubbles.get_mut(&bubble) else {
            self.answer(job.token, Err(unknown(bubble)));
            return;
        };
        local.regranted(job.lease, job.received);
        self.stop_mirror(bubble);
        for token in self.sources.abandon(bubble) {
            let fault = Fault::new(ErrorCode::Conflict, "handover abandoned by the core");
            self.answer(token, Err(fault));
        }
        tracing::info!(site = %self.cfg.site, bubble = bubble.0, epoch = job.lease.epoch.0, "bubble regranted");
        self.answer(job.token, Ok(control::Reply::Done));
    }

    /// Stops simulating a bubble here (revoked, committed away, refused): its servers release
    /// it and go back to the pool.
    pub(super) fn drop_bubble(&mut self, bubble: BubbleId) {
        self.drop_bubble_answering(bubble, None);
    }

    /// [`drop_bubble`](Self::drop_bubble); with `revoke`, each server's release answers into
    /// that `Revoke` order ([`Then::Released`]). Returns how many servers were asked.
    fn drop_bubble_answering(&mut self, bubble: BubbleId, revoke: Option<Token>) -> usize {
        let Some(local) = self.bubbles.remove(&bubble) else { return 0 };
        self.stop_mirror(bubble);
        self.abandon_regroup(bubble);
        self.forget_part_moves(bubble);
        self.abandon_rehome(bubble);
        self.count_bubbles();
        let lease = local.lease_ref();
        let mut asked = 0;
        for name in local.servers() {
            if self.release(name, bubble) {
                let then = match revoke {
                    Some(token) => Then::Released { token },
                    None => Then::Nothing("release"),
                };
                self.ask_server(name, then, server::Request::Release { lease });
                asked += 1;
            }
        }
        tracing::info!(site = %self.cfg.site, bubble = bubble.0, "bubble released");
        asked
    }

    /// A server asked to let a revoked bubble go answered (or is gone): the `Revoke` is
    /// answered after the last.
    pub(super) fn released(&mut self, token: Token) {
        let Some(left) = self.revoking.get_mut(&token) else { return };
        *left = left.saturating_sub(1);
        if *left == 0 {
            self.revoking.remove(&token);
            self.answer(token, Ok(control::Reply::Done));
        }
    }
}

/// A stored copy as the snapshot chunks a server takes (at most [`RESTORE_CHUNK`] bytes each).
fn chunked(
    bubble: BubbleId,
    epoch: Epoch,
    tick: Tick,
    copy: &Blob,
) -> Vec<horizon_proto::Snapshot> {
    let chunks: Vec<&[u8]> = copy.0.chunks(RESTORE_CHUNK).collect();
    let total = chunks.len() as u32;
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| horizon_proto::Snapshot {
            bubble,
            epoch,
            tick,
            index: i as u32,
            total,
            bytes: Blob(bytes.to_vec()),
        })
        .collect()
}
