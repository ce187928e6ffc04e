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
            return Ok(gateway::Reply::Joined { player, home, resume_after: Seq(acked.0 + 1) });
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
            let resume_after = Seq(p.session.acked().0 + 1);
            self.sessions.joined(conn, player, None);
            self.stats.resumes.fetch_add(1, Ordering::Relaxed);
            tracing::info!(site = %home, player = player.0, resume_after = resume_after.0, "player resumed");
            return Ok(gateway::Reply::Joined { player, home, resume_after });
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
        self.outbox.joined(core_link::sample(player, &p));
        self.report_joins_soon(now);
        self.players.insert(player, p);
        self.stats.players.store(self.players.len() as u64, Ordering::Relaxed);
        tracing::debug!(site = %home, player = player.0, rtt_ms, "player joined");
        if let Some(probes) = probes {
            self.probe_table(player, probes, rtt_ms);
        }
        Ok(gateway::Reply::Joined { player, home, resume_after: Seq(1) })
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
        if local.extra.is_empty() {
            let server = local.server.clone();
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
