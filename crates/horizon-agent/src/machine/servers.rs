//! This site's game servers: the warm pool, their connections, their state items, updates fanned out to the players' homes, crashes.

use super::*;

impl AgentMachine {
    /// `order` waits for a ready server (the pool grows for it), or is refused at the
    /// deadline; refused at once when too many wait.
    pub(super) fn wait_for_server(&mut self, w: Waiting, now: Instant) {
        if self.waiting.len() >= MAX_WAITING {
            let fault = Fault::new(ErrorCode::Busy, "too many orders waiting for a server");
            self.answer(w.token, Err(fault));
            return;
        }
        self.waiting.push_back(w);
        self.top_up_pool(now);
    }

    /// `server` is no longer being started (it ended, or could not start).
    pub(super) fn not_starting(&mut self, server: &str) {
        self.fleet.not_starting(server);
    }

    /// Orders waiting longer than [`SERVER_WAIT`] for a server are refused; servers that never
    /// registered within [`START_TIMEOUT`] are stopped.
    pub(super) fn server_deadlines(&mut self, now: Instant) {
        while self
            .waiting
            .front()
            .is_some_and(|w| now.saturating_duration_since(w.received) > SERVER_WAIT)
        {
            if let Some(w) = self.waiting.pop_front() {
                let fault = Fault::new(
                    ErrorCode::NotReady,
                    format!("no game server ready at {} in time", self.cfg.site),
                );
                self.answer(w.token, Err(fault));
            }
        }
        for server in self.fleet.late_starts(now, START_TIMEOUT) {
            tracing::warn!(site = %self.cfg.site, %server, "server never registered: stopped");
            self.effects.push_back(Effect::StopServer { server });
        }
    }

    pub(super) fn top_up_pool(&mut self, now: Instant) {
        let spare = self.fleet.spare();
        // The warm pool, or more while orders wait for several servers at once; and one at
        // least while a stopping server still holds regions, for them to move to.
        let demand = self.waiting.iter().map(|w| self.servers_needed(&w.order)).max();
        let draining = usize::from(!self.fleet.draining_with_regions().is_empty());
        let want = self.cfg.warm_pool.max(demand.unwrap_or(0)).max(draining);
        for _ in spare..want {
            let server = self.fleet.start(&self.cfg.site, now);
            self.effects.push_back(Effect::StartServer { server });
        }
    }

    pub(super) fn server_up(&mut self, server: Name, conn: ConnId) {
        // A new server waits in the warm pool until it holds a region.
        self.effects.push_back(Effect::SetHosting { server: server.clone(), hosting: false });
        self.fleet.connected(server, conn);
        self.stats.servers.store(self.fleet.len() as u64, Ordering::Relaxed);
    }

    /// A server is ready when it says so and its platform agrees: its `Ready` waits for
    /// [`Input::PlatformReady`], one per server.
    fn hold_ready(&mut self, server: Name, token: Token) {
        match self.fleet.hold_ready(&server, token) {
            fleet::ReadyHold::Unknown => {}
            fleet::ReadyHold::Twice => {
                let fault = Fault::new(ErrorCode::Unexpected, "Ready twice");
                self.effects.push_back(Effect::AnswerServer { token, result: Err(fault) });
            }
            fleet::ReadyHold::Asked => self.effects.push_back(Effect::AskPlatformReady { server }),
        }
    }

    /// The platform counts `server` ready: its held `Ready` counts now.
    pub(super) fn platform_ready(&mut self, server: Name, now: Instant) {
        let Some(token) = self.fleet.platform_agrees(&server) else { return };
        self.server_ready(server, token, now);
    }

    /// A server is ready (it said so, its platform agrees): the oldest order waiting for one
    /// is served.
    fn server_ready(&mut self, server: Name, token: Token, now: Instant) {
        if !self.fleet.contains(&server) {
            return;
        }
        self.fleet.set_ready(&server);
        tracing::info!(site = %self.cfg.site, %server, "game server ready");
        self.effects.push_back(Effect::AnswerServer { token, result: Ok(server::Reply::Done) });
        if let Some(waiting) = self.waiting.pop_front() {
            self.serve_order(waiting, now);
        }
    }

    /// Asks again for every server whose `Ready` waits for its platform.
    pub(super) fn ask_platforms(&mut self) {
        let asks: Vec<Effect> = self
            .fleet
            .awaiting_platform()
            .map(|n| Effect::AskPlatformReady { server: n.clone() })
            .collect();
        self.effects.extend(asks);
    }

    pub(super) fn server_request(
        &mut self,
        server: Name,
        conn: ConnId,
        token: Token,
        request: server::Request,
        now: Instant,
    ) {
        if !self.fleet.on(&server, conn) {
            let fault = Fault::new(ErrorCode::Unexpected, "not this agent's server");
            self.effects.push_back(Effect::AnswerServer { token, result: Err(fault) });
            return;
        }
        let result = match request {
            server::Request::Register { .. } => {
                Ok(server::Reply::Registered { load_every_ms: 1000 })
            }
            server::Request::Ready => {
                self.hold_ready(server, token);
                return;
            }
            server::Request::Load { tps, players, .. } => {
                self.fleet.set_load(&server, tps, players);
                Ok(server::Reply::Done)
            }
            server::Request::Positions { lease, players } => {
                self.server_positions(server, lease, players)
            }
            server::Request::Drain => {
                self.drain(&server, now);
                Ok(server::Reply::Done)
            }
            _ => Err(Fault::new(ErrorCode::Unexpected, "an agent request, sent by a server")),
        };
        self.effects.push_back(Effect::AnswerServer { token, result });
    }

    /// Where a server's game put the players of a region it runs: kept for the next report to
    /// the core, only from a server that runs that region under that very lease.
    fn server_positions(
        &mut self,
        server: Name,
        lease: LeaseRef,
        players: Vec<server::PlayerPosition>,
    ) -> Result<server::Reply, Fault> {
        if players.len() > server::MAX_POSITIONS {
            let why =
                format!("{} positions: over the limit of {}", players.len(), server::MAX_POSITIONS);
            return Err(Fault::new(ErrorCode::TooLarge, why));
        }
        let runs = self.bubbles.get(&lease.bubble).is_some_and(|b| {
            b.written_by(&server, lease.epoch)
                && matches!(b.phase(), Phase::Running | Phase::Leaving { .. })
        });
        if !runs {
            self.stats.positions_refused.fetch_add(1, Ordering::Relaxed);
            let why =
                format!("bubble {} does not run on this server under that lease", lease.bubble.0);
            return Err(Fault::new(ErrorCode::StaleEpoch, why));
        }
        let players =
            players.into_iter().filter(|p| p.pos.is_finite() && p.vel.is_finite()).collect();
        self.outbox.positions(server, control::RegionPositions { lease, players });
        Ok(server::Reply::Done)
    }

    /// A server answered a request of this machine.
    pub(super) fn server_replied(
        &mut self,
        server: Name,
        then: Then,
        result: Result<server::Reply, Failure>,
        now: Instant,
    ) {
        match then {
            Then::Assigned { server, job } => self.assigned(server, job, result, now),
            Then::Left { bubble, player, then } => self.left(bubble, player, then, result, now),
            Then::Regranted { bubble } => self.regranted(bubble, result, now),
            Then::Released { token } => {
                if let Err(e) = &result {
                    tracing::debug!(%server, error = %e, "release of a revoked bubble failed: its lease ends it");
                }
                self.released(token);
            }
            Then::Frozen { token, handover, bubble } => {
                self.frozen(token, handover, bubble, result)
            }
            Then::Copying { token, handover, bubble } => {
                self.copying(token, handover, bubble, result)
            }
            Then::Rehome { bubble, awaited } => {
                self.rehome_answered(bubble, awaited, result.map(|_| ()), now)
            }
            Then::Joined { player } => {
                if let Err(e) = result {
                    tracing::warn!(%server, player = player.0, error = %e, "join refused by the server");
                }
            }
            Then::Nothing(what) => {
                if let Err(e) = result {
                    tracing::debug!(%server, error = %e, what, "request to a server failed");
                }
            }
            then => tracing::warn!(%server, ?then, "a server's answer to a core request"),
        }
    }

    pub(super) fn server_item(&mut self, server: &Name, item: StateItem, now: Instant) {
        // A region moving to another server here: its state goes there (`rehome.rs`).
        let state_of = match &item {
            StateItem::Snapshot(s) => Some(s.bubble),
            StateItem::Delta(d) => Some(d.bubble),
            StateItem::Seal(s) => Some(s.bubble),
            _ => None,
        };
        if let Some(to) = state_of.and_then(|b| self.rehome_target(server, b)) {
            self.effects.push_back(Effect::ServerStream { server: to, item });
            return;
        }
        match item {
            StateItem::Update(update) => {
                let bubble = update.bubble;
                let landed = self.rehome_landed(server, update.epoch, bubble);
                self.fan_out(server, update, now);
                if landed {
                    self.rehome_settled(bubble, now);
                }
            }
            StateItem::Own(own) => self.own_out(server, own),
            StateItem::Snapshot(s) if !self.sources.streams(s.bubble) => {
                let lease = LeaseRef { bubble: s.bubble, epoch: s.epoch };
                let (tick, index, total, bytes) = (s.tick, s.index, s.total, s.bytes);
                let local = self.bubbles.get(&s.bubble);
                if local.is_some_and(|b| !b.servers().any(|n| n == server)) {
                    // A copy from a server the bubble has left (moved off it meanwhile): its
                    // state is older than the bubble's.
                    return;
                }
                // After a whole copy's last chunk: the inputs it includes (those acknowledged
                // by the update of its tick), so the players' gateways may forget them.
                let covers = self
                    .bubbles
                    .get(&s.bubble)
                    .filter(|b| {
                        b.extra().is_empty() && b.lease().epoch == s.epoch && index + 1 == total
                    })
                    .and_then(|b| b.acked_at())
                    .filter(|(at, _)| *at == tick)
                    .map(|(_, acked)| control::Backup::Covers {
                        lease,
                        tick,
                        acked: acked.clone(),
                    });
                let spread = self.bubbles.get(&s.bubble).filter(|b| !b.extra().is_empty());
                let chunk = match spread {
                    None => control::Backup::Chunk { lease, tick, index, total, bytes },
                    Some(local) => {
                        let Some(part) = local.servers().position(|n| n == server) else { return };
                        let parts = 1 + local.extra().len() as u32;
                        let part = part as u32;
                        control::Backup::Part { lease, part, parts, tick, index, total, bytes }
                    }
                };
                if self.is_registered() {
                    self.effects.push_back(Effect::Backup(chunk));
                    self.effects.extend(covers.map(Effect::Backup));
                }
            }
            StateItem::Snapshot(ref s) => self.mirror(s.bubble, item.clone()),
            StateItem::Delta(ref d) => self.mirror(d.bubble, item.clone()),
            StateItem::Seal(ref s) => {
                tracing::info!(site = %self.cfg.site, bubble = s.bubble.0, tick = s.tick.0, "sealed; seal sent to the target");
                self.mirror(s.bubble, item.clone())
            }
            // Only ever sent to a server (inputs, a restore of a spread bubble, an adoption).
            StateItem::Inputs(_)
            | StateItem::PartSnapshot(_)
            | StateItem::Adopt(_)
            | StateItem::Relay(_) => {}
        }
    }

    pub(super) fn mirror(&mut self, bubble: BubbleId, item: StateItem) {
        match self.sources.stream_to(bubble) {
            None => {}
            // Round through the relay it was opened through, in order behind what went before.
            Some(roles::StreamTo::Relayed { target, via }) => {
                self.stats.relayed_sent.fetch_add(1, Ordering::Relaxed);
                let (from, to) = (self.cfg.site.clone(), target.clone());
                let relayed = horizon_proto::Relayed { from, to, hops: 1, item };
                let item = StateItem::Relay(Box::new(relayed));
                self.effects.push_back(Effect::PeerStream { site: via.clone(), item });
            }
            Some(roles::StreamTo::Direct(handover)) => {
                self.effects.push_back(Effect::Mirror { handover, item });
            }
        }
    }

    /// A server's update goes to every member's home gateway: directly for this site's
    /// players, one copy per other home site.
    pub(super) fn fan_out(&mut self, server: &Name, update: Update, now: Instant) {
        let Some(local) = self.bubbles.get_mut(&update.bubble) else { return };
        if !local.written_by(server, update.epoch) {
            // A server writing a bubble it does not hold, or under another epoch than the
            // lease here (fencing, design.md §6): nobody sees it.
            self.stats.stale_updates_refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(site = %self.cfg.site, %server, bubble = update.bubble.0, epoch = update.epoch.0, "update refused: not the bubble's holder under its current epoch");
            return;
        }
        if local.extra().is_empty() {
            local.acked(update.tick, update.acked.clone());
        }
        if now > local.valid_until() + WRITE_ALLOWANCE {
            self.stats.writes_after_lease.fetch_add(1, Ordering::Relaxed);
        }
        let mut deferred = None;
        let mut restored = None;
        if local.phase() == Phase::Restoring {
            local.running();
            deferred = local.take_deferred().map(|d| (local.lease_ref(), d));
            tracing::info!(site = %self.cfg.site, bubble = update.bubble.0, tick = update.tick.0, "restored bubble running");
            restored = self.restores.ended(update.bubble);
        }
        if let Phase::Standby { handover } = local.phase() {
            // The first update under the new epoch: the target runs. Tell the core.
            local.running();
            let started = control::Request::Started {
                handover,
                bubble: update.bubble,
                epoch: update.epoch,
                tick: update.tick,
            };
            tracing::info!(site = %self.cfg.site, bubble = update.bubble.0, tick = update.tick.0, "handover target started");
            self.effects.push_back(Effect::ToCore {
                pending: Pending(Then::Nothing("started")),
                request: started,
            });
        }
        if let Some(token) = restored {
            self.answer(token, Ok(control::Reply::Done));
        }
        if let Some((lease, (players, departed))) = deferred {
            // The copy is in: the member changes that waited for it.
            let _ = self.members(lease, players, departed, now);
        }
        let Some(local) = self.bubbles.get(&update.bubble) else { return };
        let mut remote: Vec<Name> = Vec::new();
        for (player, _) in &update.acked {
            if let Some(home) = local.members().get(player)
                && home != &self.cfg.site
                && !remote.contains(home)
            {
                remote.push(home.clone());
            }
        }
        for home in remote {
            self.stream_to(&home, StateItem::Update(update.clone()));
        }
        let here = self.cfg.site.clone();
        self.deliver(&update, &here, now);
    }

    /// A player's own state, sent by the server that applied their input ahead of the tick's
    /// update: to their home gateway, fenced like an update (only the bubble's holder under its
    /// current epoch is heard).
    fn own_out(&mut self, server: &Name, own: Own) {
        let holds =
            self.bubbles.get(&own.bubble).is_some_and(|local| local.written_by(server, own.epoch));
        if !holds || own.bytes.0.len() > MAX_OWN_BYTES {
            self.stats.own_refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(site = %self.cfg.site, %server, bubble = own.bubble.0, epoch = own.epoch.0, bytes = own.bytes.0.len(), "own state refused: not the bubble's holder under its current epoch, or too large");
            return;
        }
        if self.is_home_of(own.player) {
            let here = self.cfg.site.clone();
            self.deliver_own(&own, &here);
            return;
        }
        // Another site's player: one copy to their home gateway.
        let home = self.bubbles.get(&own.bubble).and_then(|local| local.members().get(&own.player));
        if let Some(site) = home.cloned() {
            self.stream_to(&site, StateItem::Own(own));
        }
    }

    /// The least a move (or a crossing) from `from` to `to` can freeze this site's players (see
    /// [`Effect::Freeze`]): SPEC §5's `d(S,T) + d(T,h) − d(S,h) + one tick`, one-way delays being
    /// half the measured round trips: this agent's own probes for its links, the core's `Links`
    /// for the pair it is not on. `None` while a round trip it needs is unknown.
    pub(super) fn freeze_floor(&self, from: &Name, to: &Name) -> Option<Duration> {
        let tick = self.cfg.server_tick;
        let own = |site: &Name| Some(f64::from(self.peer_rtt_ms(site.as_str())?.max(0.0)));
        let ms = if *to == self.cfg.site || from == to {
            // d(S,T) = d(S,h), or S = T: they cancel.
            0.0
        } else if *from == self.cfg.site {
            // d(h,T) there and d(T,h) back.
            own(to)?
        } else {
            // Neither end here: S to T by the core's table, then T to here, less S to here.
            let (a, b) = (from.as_str(), to.as_str());
            let between = self.backbone_rtt_ms(a, b)?;
            ((between + own(to)? - own(from)?) / 2.0).max(0.0)
        };
        Some(Duration::from_secs_f64(ms / 1000.0) + tick)
    }

    /// Servers ready and holding nothing beyond the warm pool, idle for [`IDLE_STOP_AFTER`],
    /// are stopped (the longest idle first): the pool follows the load, not the peak. Never
    /// while orders wait for a server.
    pub(super) fn stop_idle_servers(&mut self, now: Instant) {
        let stop = self.waiting.is_empty();
        let stopped = self.fleet.stop_idle(now, self.cfg.warm_pool, IDLE_STOP_AFTER, stop);
        for name in stopped {
            tracing::info!(site = %self.cfg.site, server = %name, "idle game server stopped: more than the warm pool");
            self.effects.push_back(Effect::StopServer { server: name.as_str().to_owned() });
            self.stats.servers_stopped_idle.fetch_add(1, Ordering::Relaxed);
        }
        self.stats.servers.store(self.fleet.len() as u64, Ordering::Relaxed);
    }

    /// A game server is gone (its process exited, or its connection ended): its bubbles stop
    /// here and the core is told at once, so it restores them from their latest copy on a
    /// spare server of this site, or on another site (design.md §6).
    pub(super) fn server_lost(&mut self, name: &Name, why: &str, now: Instant) {
        let draining = self.fleet.get(name).is_some_and(|s| s.draining());
        let Some(regions) = self.fleet.remove(name) else { return };
        if draining {
            self.drained(name, regions.len());
        }
        self.stats.servers.store(self.fleet.len() as u64, Ordering::Relaxed);
        self.effects.push_back(Effect::StopServer { server: name.as_str().to_owned() });
        let mut lost = Vec::new();
        for bubble in regions {
            tracing::error!(site = %self.cfg.site, server = %name, bubble = bubble.0, %why, "server gone with its bubble");
            if self.rehome_server_lost(name, bubble, now) {
                // It stood by for a region moving here: the region stays where it was.
                continue;
            }
            let Some(local) = self.bubbles.remove(&bubble) else { continue };
            // Moving off this server: the core holds it under the move's newer epoch.
            let moving = self.abandon_rehome(bubble);
            self.stop_mirror(bubble);
            self.forget_part_moves(bubble);
            if let Some(token) = self.abandon_regroup(bubble) {
                let fault = Fault::new(ErrorCode::NotReady, "the bubble's server is gone");
                self.answer(token, Err(fault));
            }
            if let Some(token) = self.restores.ended(bubble) {
                let fault = Fault::new(ErrorCode::NotReady, "the restored bubble's server is gone");
                self.answer(token, Err(fault));
            }
            if let Some(job) = self.take_regrant(bubble) {
                let fault = Fault::new(ErrorCode::NotReady, "the bubble's server is gone");
                self.answer(job.token, Err(fault));
            }
            let lease = local.lease_ref();
            if matches!(local.phase(), Phase::Running) {
                lost.push(moving.unwrap_or(lease));
            }
            for other in local.servers().filter(|s| *s != name) {
                if self.release(other, bubble) {
                    let request = server::Request::Release { lease };
                    self.ask_server(other, Then::Nothing("release"), request);
                }
            }
        }
        self.count_bubbles();
        if !lost.is_empty() {
            let request =
                control::Request::Lost { leases: lost, reason: format!("server {name}: {why}") };
            // Not delivered: the leases run out at the core.
            self.ask_core(Then::Nothing("lost bubbles"), request);
        }
        self.top_up_pool(now);
    }
}
