//! The player gateway: sessions (see `gateway.rs` for the sans-IO part), inputs to wherever each player is simulated.

use super::*;

impl AgentMachine {
    pub(super) fn player_request(
        &mut self,
        conn: ConnId,
        request: &gateway::Request,
        rtt_ms: f32,
        now: Instant,
    ) -> Result<gateway::Reply, Fault> {
        match request {
            gateway::Request::Join { role, world, pos } => {
                self.player_join(conn, *role, *world, *pos, None, rtt_ms, now)
            }
            gateway::Request::JoinMeasured { role, world, pos, probes } => {
                if let Some(why) = probes::malformed(probes) {
                    return Err(Fault::new(ErrorCode::Malformed, why));
                }
                self.player_join(conn, *role, *world, *pos, Some(probes), rtt_ms, now)
            }
            gateway::Request::SetRole { role } => {
                let p = self.session_player(conn)?;
                p.role = *role;
                Ok(gateway::Reply::Done)
            }
            gateway::Request::Leave => {
                if let Some(player) = self.sessions.left(conn) {
                    self.remove_player(player);
                }
                Ok(gateway::Reply::Done)
            }
            gateway::Request::Credential => {
                // The shell signs it (`resume` is filled in on the way out).
                let player = self.sessions.player(conn).ok_or_else(|| {
                    Fault::new(ErrorCode::Unexpected, "join first: a credential names a player")
                })?;
                Ok(gateway::Reply::Credential { player, resume: String::new() })
            }
            gateway::Request::Resume { .. } => Err(Fault::new(
                ErrorCode::Internal,
                "a resumption credential is checked by the shell (Input::PlayerResume)",
            )),
        }
    }

    /// A `Resume` whose credential the shell found signed and current: the same player goes
    /// on, on this connection, when the credential is this site's, names this connection's
    /// account, and its player is still in the game here (connected elsewhere, gone for less
    /// than [`RESUME_GRACE`], or kept from the core's list since this agent started).
    /// Anything else is refused (`unauthorized`) and counted by reason; nothing changes.
    pub(super) fn player_resume(
        &mut self,
        conn: ConnId,
        claim: Result<Resumption, String>,
        rtt_ms: f32,
    ) -> Result<gateway::Reply, Fault> {
        let claim = claim.map_err(|why| {
            self.refuse_resume(ResumeRefused::Invalid, format!("resumption credential: {why}"))
        })?;
        let home = self.cfg.site.clone();
        if claim.site != home {
            let why = format!("this credential resumes a session at {}, not {home}", claim.site);
            return Err(self.refuse_resume(ResumeRefused::OtherSite, why));
        }
        let account = self.sessions.client(conn);
        if account.as_ref() != Some(&claim.account) {
            let why = "this credential is another account's";
            return Err(self.refuse_resume(ResumeRefused::OtherAccount, why.to_owned()));
        }
        if !self.sessions.homed_known() {
            let why = "this gateway just started and has not heard from the core yet: try again";
            return Err(Fault::new(ErrorCode::NotReady, why));
        }
        let player = claim.player;
        let Some(p) = self.players.get_mut(&player) else {
            let why = format!("player {} is not in the game at {home} (it left)", player.0);
            return Err(self.refuse_resume(ResumeRefused::Unknown, why));
        };
        if p.client.as_ref().is_some_and(|c| *c != claim.account) {
            let why = "this credential is another account's";
            return Err(self.refuse_resume(ResumeRefused::OtherAccount, why.to_owned()));
        }
        p.conn = conn;
        p.gone_since = None;
        p.client = Some(claim.account.clone());
        if rtt_ms > 0.0 {
            p.min_rtt_ms = p.min_rtt_ms.min(rtt_ms);
        }
        let resume_after = p.session.resume_after();
        self.sessions.joined(conn, player, Some(claim.account));
        self.stats.resumes.fetch_add(1, Ordering::Relaxed);
        tracing::info!(site = %home, player = player.0, resume_after = resume_after.0, "player resumed by credential");
        Ok(gateway::Reply::Joined { player, home, resume_after, resume: String::new() })
    }

    /// Counts a refused `Resume` and says why.
    fn refuse_resume(&mut self, reason: ResumeRefused, why: String) -> Fault {
        let counter = match reason {
            ResumeRefused::Invalid => &self.stats.resumes_refused_invalid,
            ResumeRefused::OtherSite => &self.stats.resumes_refused_other_site,
            ResumeRefused::OtherAccount => &self.stats.resumes_refused_other_account,
            ResumeRefused::Unknown => &self.stats.resumes_refused_unknown,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        tracing::info!(site = %self.cfg.site, ?reason, %why, "resume refused");
        Fault::new(ErrorCode::Unauthorized, why)
    }

    /// The core's list of the players who entered at this site (`Registered`). An agent that
    /// just started knows none of them: each is kept as a player gone a moment ago, routed
    /// where the core says it plays, its inputs acknowledged as far as a stored copy holds
    /// them; its client resumes it within [`RESUME_GRACE`] or it leaves. Later lists are
    /// ignored: this agent knows its players itself.
    pub(super) fn adopt_homed(&mut self, homed: Vec<control::HomedPlayer>, now: Instant) {
        if !self.sessions.learn_homed() {
            return;
        }
        let mut kept = 0;
        for h in homed {
            let id = h.sample.player;
            if self.players.contains_key(&id) {
                continue;
            }
            let mut session = PlayerSession::resumed(now, h.covered);
            if let Some((bubble, site)) = h.route {
                session.set_route(bubble, site);
            }
            let p = Player {
                conn: NO_CONN,
                role: h.sample.role,
                world: h.sample.world,
                pos: h.sample.pos,
                vel: h.sample.vel,
                position_seq: 0,
                min_rtt_ms: h.sample.access_rtt_ms,
                session,
                last_acked: None,
                client: None,
                gone_since: Some(now),
                probes: None,
            };
            self.players.insert(id, p);
            kept += 1;
        }
        self.stats.players.store(self.players.len() as u64, Ordering::Relaxed);
        if kept > 0 {
            tracing::info!(site = %self.cfg.site, players = kept, "players kept for their clients to resume");
        }
    }

    /// A join, with the client's probe table if it sent one (checked here: see `probes.rs`).
    #[allow(clippy::too_many_arguments)]
    fn player_join(
        &mut self,
        conn: ConnId,
        role: Role,
        world: WorldId,
        pos: Vec3,
        probes: Option<&Vec<gateway::SiteProbe>>,
        rtt_ms: f32,
        now: Instant,
    ) -> Result<gateway::Reply, Fault> {
        let home = self.cfg.site.clone();
        if !finite(pos) {
            let why = "a position must be finite (docs/protocol.md, Vec3)";
            return Err(Fault::new(ErrorCode::Malformed, why));
        }
        if let Some(player) = self.sessions.player(conn) {
            let acked = self.players.get(&player).map_or(Seq(0), |p| p.session.acked());
            let resume_after = Seq(acked.0 + 1);
            return Ok(gateway::Reply::Joined {
                player,
                home,
                resume_after,
                resume: String::new(),
            });
        }
        let client = self.sessions.client(conn);
        let known = client.as_ref().and_then(|c| self.sessions.player_of(c));
        if let Some(player) = known
            && let Some(p) = self.players.get_mut(&player)
        {
            // The same client reconnected (a mobile blip): the same player resumes,
            // its kept inputs and place untouched.
            p.conn = conn;
            p.gone_since = None;
            let resume_after = p.session.resume_after();
            self.sessions.joined(conn, player, None);
            self.stats.resumes.fetch_add(1, Ordering::Relaxed);
            tracing::info!(site = %home, player = player.0, resume_after = resume_after.0, "player resumed");
            return Ok(gateway::Reply::Joined {
                player,
                home,
                resume_after,
                resume: String::new(),
            });
        }
        let player = self.next_player_id().ok_or_else(|| {
            Fault::new(ErrorCode::NotReady, "no player id to give yet: the core is unreachable")
        })?;
        let p = Player {
            conn,
            role,
            world,
            pos,
            vel: Vec3::default(),
            position_seq: 0,
            min_rtt_ms: rtt_ms,
            session: PlayerSession::new(now),
            last_acked: None,
            client: client.clone(),
            gone_since: None,
            probes: None,
        };
        self.sessions.joined(conn, player, client);
        self.outbox.joined(sample(player, &p));
        self.report_joins_soon(now);
        self.players.insert(player, p);
        self.stats.players.store(self.players.len() as u64, Ordering::Relaxed);
        tracing::debug!(site = %home, player = player.0, rtt_ms, "player joined");
        if let Some(probes) = probes {
            self.probe_table(player, probes, rtt_ms);
        }
        Ok(gateway::Reply::Joined { player, home, resume_after: Seq(1), resume: String::new() })
    }

    /// A new player's probe table: believed (kept for stage 1's figures, sent to the core with
    /// the next report) or contradicted by what this gateway measures (dropped, counted).
    fn probe_table(&mut self, player: PlayerId, probes: &[gateway::SiteProbe], rtt_ms: f32) {
        let site = self.cfg.site.as_str();
        let verdict = probes::check(probes, site, rtt_ms, |s| self.peer_rtt_ms(s));
        match verdict {
            Ok(nearest) => {
                self.stats.probe_tables_accepted.fetch_add(1, Ordering::Relaxed);
                if nearest != site {
                    self.stats.joins_not_nearest.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(p) = self.players.get_mut(&player) {
                    p.probes = Some(probes.to_vec());
                    self.outbox.measured(player);
                }
            }
            Err(why) => {
                self.stats.probe_tables_contradicted.fetch_add(1, Ordering::Relaxed);
                tracing::info!(site = %self.cfg.site, player = player.0, rtt_ms, %why, "probe table not believed");
            }
        }
    }

    pub(super) fn session_player(&mut self, conn: ConnId) -> Result<&mut Player, Fault> {
        let player = self
            .sessions
            .player(conn)
            .ok_or_else(|| Fault::new(ErrorCode::Unexpected, "join first"))?;
        self.players.get_mut(&player).ok_or_else(|| Fault::new(ErrorCode::Unexpected, "join first"))
    }

    pub(super) fn player_datagram(&mut self, conn: ConnId, d: gateway::Datagram, rtt_ms: f32) {
        let Ok(p) = self.session_player(conn) else { return };
        // The transport's estimator is the access RTT; the session minimum is what counts.
        if rtt_ms > 0.0 {
            p.min_rtt_ms = p.min_rtt_ms.min(rtt_ms);
        }
        match d {
            gateway::Datagram::Position { seq, world, pos, vel } => {
                // Unreliable anyway: a position that is not finite is dropped, not answered.
                if seq > p.position_seq && finite(pos) && finite(vel) {
                    p.position_seq = seq;
                    p.world = world;
                    p.pos = pos;
                    p.vel = vel;
                }
            }
            gateway::Datagram::Ping { nonce, sent_us } => {
                let datagram = gateway::Datagram::Pong { nonce, sent_us };
                self.effects.push_back(Effect::PlayerDatagram { conn, datagram });
            }
            gateway::Datagram::Pong { .. } => {}
        }
    }

    pub(super) fn player_item(&mut self, conn: ConnId, item: gateway::Item, now: Instant) {
        let gateway::Item::Input { seq, bytes } = item else { return };
        let Some(player) = self.sessions.player(conn) else { return };
        let Some(p) = self.players.get_mut(&player) else { return };
        self.stats.inputs_received.fetch_add(1, Ordering::Relaxed);
        match p.session.input(seq, bytes.clone(), now) {
            InputVerdict::Duplicate => return,
            InputVerdict::Refused => {
                self.stats.inputs_refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
            InputVerdict::TooLarge => {
                self.stats.inputs_refused.fetch_add(1, Ordering::Relaxed);
                self.stats.inputs_too_large.fetch_add(1, Ordering::Relaxed);
                let reason = format!(
                    "input {} of {} bytes: over the limit of {} bytes",
                    seq.0,
                    bytes.0.len(),
                    crate::gateway::MAX_INPUT_BYTES
                );
                tracing::warn!(player = player.0, %reason, "player's connection closed");
                let code = horizon_proto::ErrorCode::TooLarge;
                self.effects.push_back(Effect::ClosePlayer { conn, code, reason });
                return;
            }
            InputVerdict::Kept { forgot_applied } => {
                if forgot_applied {
                    // Applied but in no stored copy yet: a restore could no longer replay it.
                    self.stats.inputs_uncovered_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if let Some((bubble, site)) = p.session.route().cloned() {
            let input = PlayerInput { player, seq, bytes };
            self.send_inputs(bubble, &site, vec![input]);
        }
    }

    /// Inputs to whoever simulates `bubble`: this site's server, or another site's agent. In
    /// batches of at most [`MAX_BATCH_BYTES`] of input bytes (a re-send after a long freeze
    /// may hold a thousand inputs): every item stays far under the frame limit.
    pub(super) fn send_inputs(&mut self, bubble: BubbleId, site: &Name, inputs: Vec<PlayerInput>) {
        let here = site == &self.cfg.site;
        if !here && !self.reaches(site) {
            return;
        }
        let mut send = |inputs: Vec<PlayerInput>| {
            if here {
                self.inputs_to_servers(Inputs { bubble, inputs });
            } else {
                self.stream_to(site, StateItem::Inputs(Inputs { bubble, inputs }));
            }
        };
        // One input, or a few: as they are (the hot path allocates nothing more).
        if inputs.iter().map(|i| i.bytes.0.len()).sum::<usize>() <= MAX_BATCH_BYTES {
            return send(inputs);
        }
        for batch in batches(inputs) {
            send(batch);
        }
    }

    /// Inputs of a bubble simulated here, each to the server holding its player.
    pub(super) fn inputs_to_servers(&mut self, inputs: Inputs) {
        let Some(local) = self.bubbles.get(&inputs.bubble) else { return };
        if local.extra().is_empty() {
            let server = local.server().clone();
            self.effects
                .push_back(Effect::ServerStream { server, item: StateItem::Inputs(inputs) });
            return;
        }
        let mut per_server: BTreeMap<Name, Vec<PlayerInput>> = BTreeMap::new();
        for input in inputs.inputs {
            per_server.entry(local.server_of(input.player).clone()).or_default().push(input);
        }
        for (server, batch) in per_server {
            let item = StateItem::Inputs(Inputs { bubble: inputs.bubble, inputs: batch });
            self.effects.push_back(Effect::ServerStream { server, item });
        }
    }

    /// Sends `player`'s inputs again to where they are simulated: with `all`, every input kept
    /// (a new holder, which drops those it applied); else those not acknowledged after
    /// [`RESEND_AFTER`].
    pub(super) fn resend(&mut self, player: PlayerId, all: bool, now: Instant) {
        let Some(p) = self.players.get_mut(&player) else { return };
        let Some((bubble, site)) = p.session.route().cloned() else { return };
        let inputs: Vec<PlayerInput> = p
            .session
            .resend(all, now)
            .into_iter()
            .map(|(seq, bytes)| PlayerInput { player, seq, bytes })
            .collect();
        if inputs.is_empty() {
            return;
        }
        if !all {
            self.stats.inputs_resent.fetch_add(inputs.len() as u64, Ordering::Relaxed);
        }
        self.send_inputs(bubble, &site, inputs);
    }

    /// The next player id of the blocks the core handed out (more are asked for when few are
    /// left). `None` when there is none: the core was never reached since this agent started.
    /// Hands a player's own state from `site` to them, if the bubble and epoch are those of
    /// their updates now (an own state never moves a route: the next update does).
    pub(super) fn deliver_own(&mut self, own: &Own, site: &Name) {
        let Some(p) = self.players.get(&own.player) else { return };
        if !p.session.shows(own.bubble, own.epoch, site)
            || p.last_acked
                .is_some_and(|(b, e, s)| (b, e) == (own.bubble, own.epoch) && own.seq < s)
        {
            return;
        }
        let item = gateway::Item::Own {
            bubble: own.bubble,
            tick: own.tick,
            seq: own.seq,
            bytes: own.bytes.clone(),
        };
        self.effects.push_back(Effect::ToPlayer { conn: p.conn, item });
        self.stats.own_delivered.fetch_add(1, Ordering::Relaxed);
    }

    /// Hands an update from `site` to this site's players it concerns. An update of the
    /// player's bubble under a newer epoch comes from its new holder (epochs fence: only the
    /// current holder's server writes under the newest one): the route follows it — the core
    /// may not be able to tell us (a failover while this site is cut from it) — and every input
    /// kept is sent there, since a restored holder may lack some already applied.
    pub(super) fn deliver(&mut self, update: &Update, site: &Name, now: Instant) {
        let mut resend = Vec::new();
        let mut freezes = Vec::new();
        let mut crossings = Vec::new();
        for (player, acked) in &update.acked {
            let Some(p) = self.players.get_mut(player) else { continue };
            // Within one epoch a player's acknowledgements never go back (the servers of a
            // spread bubble tick on counts of their own, but pass each player on with its
            // inputs applied): fewer is an older state, late.
            let this = (update.bubble, update.epoch, *acked);
            if p.last_acked.is_some_and(|(b, e, s)| (b, e) == (this.0, this.1) && this.2 < s) {
                continue;
            }
            match p.session.on_update(update.bubble, update.epoch, *acked, site, now) {
                UpdateVerdict::NotTheirs => continue,
                UpdateVerdict::Deliver { resend_all } => {
                    p.last_acked = Some(this);
                    if resend_all {
                        resend.push(*player);
                    }
                }
            }
            if let Some(moved) = p.session.take_moved() {
                freezes.push(moved);
            }
            crossings.extend(p.session.take_crossed());
            let delays = p.session.take_served();
            if !delays.is_empty() {
                let access_rtt = Duration::from_secs_f64(f64::from(p.min_rtt_ms.max(0.0)) / 1000.0);
                self.effects.push_back(Effect::InputsServed { delays, access_rtt });
            }
            let item = gateway::Item::Update {
                bubble: update.bubble,
                tick: update.tick,
                acked: *acked,
                bytes: update.bytes.clone(),
            };
            self.effects.push_back(Effect::ToPlayer { conn: p.conn, item });
            self.stats.updates_delivered.fetch_add(1, Ordering::Relaxed);
        }
        for player in resend {
            self.resend(player, true, now);
        }
        for m in freezes {
            let floor = self.freeze_floor(&m.from, &m.to);
            self.effects.push_back(Effect::Freeze { from: m.from, to: m.to, gap: m.gap, floor });
        }
        for c in crossings {
            let floor = self.freeze_floor(&c.from, &c.to);
            self.effects.push_back(Effect::Crossed { from: c.from, to: c.to, gap: c.gap, floor });
        }
    }

    /// Whether `player` is one of this site's (it joined here).
    pub(super) fn is_home_of(&self, player: PlayerId) -> bool {
        self.players.contains_key(&player)
    }

    /// Every input kept of the players simulated at `site` goes again (the route there
    /// changed; the server applies each once).
    pub(super) fn resend_towards(&mut self, site: &Name, now: Instant) {
        let players: Vec<PlayerId> = self
            .players
            .iter()
            .filter(|(_, p)| p.session.route().is_some_and(|(_, s)| s == site))
            .map(|(&id, _)| id)
            .collect();
        for player in players {
            self.resend(player, true, now);
        }
    }

    /// This site's players, for the debug view.
    pub(super) fn player_count(&self) -> usize {
        self.players.len()
    }

    /// The core stored copies that include these players' inputs up to `seq`.
    pub(super) fn covered(&mut self, players: &[control::CoveredInput]) {
        for c in players {
            if let Some(p) = self.players.get_mut(&c.player) {
                p.session.covered(c.seq);
            }
        }
    }

    /// `player`'s updates come from `bubble` at `site` from now on: every input kept goes
    /// there (the new holder applies each (player, seq) once). Nothing for a player not homed
    /// here or a route unchanged.
    pub(super) fn follow_route(
        &mut self,
        player: PlayerId,
        bubble: BubbleId,
        site: Name,
        now: Instant,
    ) {
        if let Some(p) = self.players.get_mut(&player)
            && p.session.set_route(bubble, site)
        {
            self.resend(player, true, now);
        }
    }

    /// Every player of this site as the core samples them, with the bubble each plays in as
    /// their gateway knows (a registration's resync).
    pub(super) fn placed_players(&self) -> Vec<control::PlacedPlayer> {
        self.players
            .iter()
            .map(|(&id, p)| control::PlacedPlayer {
                sample: sample(id, p),
                bubble: p.session.route().map(|(b, _)| *b),
            })
            .collect()
    }

    /// Players whose probe table this gateway believed.
    pub(super) fn measured_players(&self) -> Vec<PlayerId> {
        self.players.iter().filter(|(_, p)| p.probes.is_some()).map(|(&id, _)| id).collect()
    }

    /// Every player of this site as the core samples them (a report).
    pub(super) fn player_samples(&self) -> Vec<control::PlayerSample> {
        self.players.iter().map(|(&id, p)| sample(id, p)).collect()
    }

    /// `player`'s believed probe table with their access round trip, if they are still here
    /// and sent one.
    pub(super) fn measured(&self, player: PlayerId) -> Option<control::MeasuredPlayer> {
        let p = self.players.get(&player)?;
        Some(control::MeasuredPlayer {
            player,
            access_rtt_ms: p.min_rtt_ms,
            probes: p.probes.clone()?,
        })
    }

    /// `bubble`'s lease ran out here: its players homed here and routed to it are told they
    /// are reconnecting (once).
    pub(super) fn tell_reconnecting(&mut self, bubble: BubbleId) {
        for p in self.players.values_mut() {
            if p.session.route().is_some_and(|(b, s)| *b == bubble && *s == self.cfg.site) {
                p.session.told();
                let reason =
                    format!("{} lost its lease on this part of the universe", self.cfg.site);
                let item = gateway::Item::Reconnecting { reason };
                self.effects.push_back(Effect::ToPlayer { conn: p.conn, item });
            }
        }
    }

    /// The players' part of housekeeping: the inputs kept counted, those not acknowledged in
    /// time sent again, players whose simulation went silent told they are reconnecting.
    pub(super) fn players_housekeeping(&mut self, now: Instant) {
        let kept: usize = self.players.values().map(|p| p.session.kept()).sum();
        self.stats.inputs_unacked.store(kept as u64, Ordering::Relaxed);
        let players: Vec<PlayerId> = self.players.keys().copied().collect();
        for p in players {
            self.resend(p, false, now);
        }
        for p in self.players.values_mut() {
            if p.session.stalled(now) {
                let reason = "the simulation is unreachable for now".to_owned();
                let item = gateway::Item::Reconnecting { reason };
                self.effects.push_back(Effect::ToPlayer { conn: p.conn, item });
            }
        }
    }

    fn next_player_id(&mut self) -> Option<PlayerId> {
        let id = self.player_ids.next()?;
        self.ask_ids();
        Some(id)
    }

    /// Asks the core for another block of player ids when few are left.
    pub(super) fn ask_ids(&mut self) {
        if !self.is_registered() || !self.player_ids.ask(ID_LOW) {
            return;
        }
        self.ask_core(Then::PlayerIds, control::Request::PlayerIds { count: ID_BLOCK });
    }

    pub(super) fn ids_granted(&mut self, reply: Result<control::Reply, Failure>) {
        let block = match reply {
            Ok(control::Reply::PlayerIds { first, count }) => Some(first..first + u64::from(count)),
            Ok(other) => {
                tracing::warn!(?other, "unexpected reply to player ids");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "no player ids from the core; asked again later");
                None
            }
        };
        self.player_ids.answered(block);
    }

    /// A gateway connection ended: its player stays [`RESUME_GRACE`] for its client to
    /// reconnect (without a client identity, it leaves at once).
    pub(super) fn player_gone(&mut self, conn: ConnId, now: Instant) {
        let Some(player) = self.sessions.ended(conn) else { return };
        match self.players.get_mut(&player) {
            Some(p) if p.client.is_some() => p.gone_since = Some(now),
            _ => self.remove_player(player),
        }
    }

    /// Players whose client did not come back in time leave.
    pub(super) fn resume_deadlines(&mut self, now: Instant) {
        let late: Vec<PlayerId> = self
            .players
            .iter()
            .filter(|(_, p)| {
                p.gone_since.is_some_and(|t| now.saturating_duration_since(t) >= RESUME_GRACE)
            })
            .map(|(&p, _)| p)
            .collect();
        for player in late {
            self.remove_player(player);
        }
    }

    /// The player leaves: the core is told at the next report.
    pub(super) fn remove_player(&mut self, player: PlayerId) {
        if self.players.remove(&player).is_some() {
            self.outbox.left(player);
        }
        self.sessions.forget(player);
        self.stats.players.store(self.players.len() as u64, Ordering::Relaxed);
    }
}

/// Why a `Resume` was refused (`horizon_agent_resumes_refused_total{reason}`).
#[derive(Clone, Copy, Debug)]
enum ResumeRefused {
    /// Forged, expired, malformed, or signed by a key this site does not have.
    Invalid,
    /// Another site's session.
    OtherSite,
    /// The connection's account is not the credential's.
    OtherAccount,
    /// The player left, or its session ended (no client resumed it in time).
    Unknown,
}

/// Input bytes in one `Inputs` item at most (with their headers, far under the 1 MiB frame).
pub(crate) const MAX_BATCH_BYTES: usize = 256 << 10;

/// `inputs` cut into batches of at most [`MAX_BATCH_BYTES`] (each at least one input).
fn batches(inputs: Vec<PlayerInput>) -> Vec<Vec<PlayerInput>> {
    let mut out: Vec<Vec<PlayerInput>> = Vec::new();
    let mut bytes = 0;
    for input in inputs {
        let len = input.bytes.0.len();
        match out.last_mut() {
            Some(batch) if bytes + len <= MAX_BATCH_BYTES => batch.push(input),
            _ => {
                bytes = 0;
                out.push(vec![input]);
            }
        }
        bytes += len;
    }
    out
}

/// Every coordinate is a number (not NaN, not infinite).
fn finite(v: Vec3) -> bool {
    v.x.is_finite() && v.y.is_finite() && v.z.is_finite()
}

pub(super) fn sample(id: PlayerId, p: &Player) -> control::PlayerSample {
    control::PlayerSample {
        player: id,
        access_rtt_ms: p.min_rtt_ms,
        role: p.role,
        world: p.world,
        pos: p.pos,
        vel: p.vel,
    }
}
