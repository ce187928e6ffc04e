//! The player gateway: sessions (see `gateway.rs` for the sans-IO part), inputs to wherever each player is simulated.

use super::*;

impl Agent {
    pub(super) fn player_up(&mut self, peer: Peer<Gateway>) {
        // The player exists from its Join; the pump ends when the connection does.
        let session = peer.conn.id();
        self.conn_clients.insert(session, (peer.hello.peer.clone(), peer.hello.session));
        pump(
            peer.inbound,
            self.events.clone(),
            move |item| Event::PlayerItem(session, item),
            move |i| Event::PlayerInbound(session, i),
            Event::PlayerGone(session),
        );
    }

    pub(super) fn player_inbound(&mut self, session: u64, inbound: Inbound<Gateway>) {
        match inbound {
            Inbound::Request(req) => {
                let reply = self.player_request(session, &req);
                tokio::spawn(req.reply(reply));
            }
            Inbound::Datagram(d) => self.player_datagram(session, d),
            Inbound::Stream(_) => {}
        }
    }

    pub(super) fn player_request(
        &mut self,
        session: u64,
        req: &InboundRequest<Gateway>,
    ) -> Result<gateway::Reply, Fault> {
        match &req.body {
            gateway::Request::Join { role, world, pos } => {
                if let Some(&player) = self.sessions.get(&session) {
                    let acked = self.players.get(&player).map_or(Seq(0), |g| g.session.acked());
                    return Ok(gateway::Reply::Joined {
                        player,
                        home: self.site.clone(),
                        resume_after: Seq(acked.0 + 1),
                    });
                }
                let conn = req.conn().clone();
                let client = self.conn_clients.get(&session).cloned();
                let known = client.as_ref().and_then(|c| self.clients.get(c)).copied();
                if let Some(player) = known
                    && let Some(gw) = self.players.get_mut(&player)
                {
                    // The same client reconnected (a mobile blip): the same player resumes,
                    // its kept inputs and place untouched.
                    gw.out = open_stream_task(conn.clone());
                    gw.conn = conn;
                    gw.gone_since = None;
                    let resume_after = Seq(gw.session.acked().0 + 1);
                    self.sessions.retain(|_, p| *p != player);
                    self.sessions.insert(session, player);
                    self.stats.resumes.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(site = %self.site, player = player.0, resume_after = resume_after.0, "player resumed");
                    return Ok(gateway::Reply::Joined {
                        player,
                        home: self.site.clone(),
                        resume_after,
                    });
                }
                let player = self.next_player_id().ok_or_else(|| {
                    Fault::new(
                        ErrorCode::NotReady,
                        "no player id to give yet: the core is unreachable",
                    )
                })?;
                let rtt = conn.stats().rtt.as_secs_f32() * 1000.0;
                let out = open_stream_task(conn.clone());
                let gw = Gw {
                    conn,
                    out,
                    role: *role,
                    world: *world,
                    pos: *pos,
                    vel: Vec3::default(),
                    position_seq: 0,
                    min_rtt_ms: rtt,
                    session: PlayerSession::new(Instant::now()),
                    client: client.clone(),
                    gone_since: None,
                };
                if let Some(c) = client {
                    self.clients.insert(c, player);
                }
                self.joins.push(self.sample(player, &gw));
                self.players.insert(player, gw);
                self.sessions.insert(session, player);
                self.stats.players.store(self.players.len() as u64, Ordering::Relaxed);
                tracing::debug!(site = %self.site, player = player.0, rtt_ms = rtt, "player joined");
                Ok(gateway::Reply::Joined { player, home: self.site.clone(), resume_after: Seq(1) })
            }
            gateway::Request::SetRole { role } => {
                let gw = self.session_player(session)?;
                gw.role = *role;
                Ok(gateway::Reply::Done)
            }
            gateway::Request::Leave => {
                if let Some(player) = self.sessions.remove(&session) {
                    self.remove_player(player);
                }
                Ok(gateway::Reply::Done)
            }
        }
    }

    pub(super) fn session_player(&mut self, session: u64) -> Result<&mut Gw, Fault> {
        let player = self
            .sessions
            .get(&session)
            .ok_or_else(|| Fault::new(ErrorCode::Unexpected, "join first"))?;
        self.players.get_mut(player).ok_or_else(|| Fault::new(ErrorCode::Unexpected, "join first"))
    }

    pub(super) fn player_datagram(&mut self, session: u64, d: gateway::Datagram) {
        let Ok(gw) = self.session_player(session) else { return };
        match d {
            gateway::Datagram::Position { seq, world, pos, vel } => {
                if seq > gw.position_seq {
                    gw.position_seq = seq;
                    gw.world = world;
                    gw.pos = pos;
                    gw.vel = vel;
                }
            }
            gateway::Datagram::Ping { nonce, sent_us } => {
                let _ = gw.conn.send_datagram(&gateway::Datagram::Pong { nonce, sent_us });
            }
            gateway::Datagram::Pong { .. } => {}
        }
        // The QUIC estimator is the access RTT; the session minimum is what counts.
        let rtt = gw.conn.stats().rtt.as_secs_f32() * 1000.0;
        if rtt > 0.0 {
            gw.min_rtt_ms = gw.min_rtt_ms.min(rtt);
        }
    }

    pub(super) fn player_item(&mut self, session: u64, item: gateway::Item) {
        let gateway::Item::Input { seq, bytes } = item else { return };
        let Some(&player) = self.sessions.get(&session) else { return };
        let Some(gw) = self.players.get_mut(&player) else { return };
        self.stats.inputs_received.fetch_add(1, Ordering::Relaxed);
        match gw.session.input(seq, bytes.clone(), Instant::now()) {
            InputVerdict::Duplicate => return,
            InputVerdict::Refused => {
                self.stats.inputs_refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
            InputVerdict::Kept { forgot_applied } => {
                if forgot_applied {
                    // Applied but in no stored copy yet: a restore could no longer replay it.
                    self.stats.inputs_uncovered_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if let Some((bubble, site)) = gw.session.route().cloned() {
            let input = Input { player, seq, bytes };
            self.send_inputs(bubble, &site, vec![input]);
        }
    }

    /// Inputs to whoever simulates `bubble`: this site's server, or another site's agent.
    pub(super) fn send_inputs(&self, bubble: BubbleId, site: &Name, inputs: Vec<Input>) {
        if site == &self.site {
            self.to_servers(Inputs { bubble, inputs });
        } else if let Some(peer) = self.peers.get(site) {
            let _ = peer.out.try_send(StateItem::Inputs(Inputs { bubble, inputs }));
        }
    }

    /// Inputs of a bubble simulated here, each to the server holding its player.
    pub(super) fn to_servers(&self, inputs: Inputs) {
        let Some(local) = self.bubbles.get(&inputs.bubble) else { return };
        if local.extra.is_empty() {
            if let Some(srv) = self.servers.get(&local.server) {
                let _ = srv.out.try_send(StateItem::Inputs(inputs));
            }
            return;
        }
        let mut per_server: HashMap<&Name, Vec<Input>> = HashMap::new();
        for input in inputs.inputs {
            per_server.entry(local.server_of(input.player)).or_default().push(input);
        }
        for (name, batch) in per_server {
            if let Some(srv) = self.servers.get(name) {
                let item = Inputs { bubble: inputs.bubble, inputs: batch };
                let _ = srv.out.try_send(StateItem::Inputs(item));
            }
        }
    }

    /// Sends `player`'s inputs again to where they are simulated: with `all`, every input kept
    /// (a new holder, which drops those it applied); else those not acknowledged after
    /// [`RESEND_AFTER`].
    pub(super) fn resend(&mut self, player: PlayerId, all: bool) {
        let Some(gw) = self.players.get_mut(&player) else { return };
        let Some((bubble, site)) = gw.session.route().cloned() else { return };
        let inputs: Vec<Input> = gw
            .session
            .resend(all, Instant::now())
            .into_iter()
            .map(|(seq, bytes)| Input { player, seq, bytes })
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
        let id = loop {
            let block = self.player_ids.front_mut()?;
            match block.next() {
                Some(id) => break id,
                None => {
                    self.player_ids.pop_front();
                }
            }
        };
        self.ask_ids();
        Some(PlayerId(id))
    }

    /// Asks the core for another block of player ids when few are left.
    pub(super) fn ask_ids(&mut self) {
        let left: u64 = self.player_ids.iter().map(|r| r.end - r.start).sum();
        if left >= ID_LOW || self.asking_ids || !self.registered {
            return;
        }
        self.asking_ids = true;
        let core = self.core.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let reply = core
                .request(&control::Request::PlayerIds { count: ID_BLOCK })
                .await
                .map_err(|e| e.to_string());
            let _ = events.send(Event::Task(Done::PlayerIds(reply))).await;
        });
    }

    pub(super) fn ids_granted(&mut self, reply: Result<control::Reply, String>) {
        self.asking_ids = false;
        match reply {
            Ok(control::Reply::PlayerIds { first, count }) => {
                self.player_ids.push_back(first..first + u64::from(count));
            }
            Ok(other) => tracing::warn!(?other, "unexpected reply to player ids"),
            Err(e) => tracing::warn!(error = %e, "no player ids from the core; asked again later"),
        }
    }

    /// A gateway connection ended: its player stays [`RESUME_GRACE`] for its client to
    /// reconnect (without a client identity, it leaves at once).
    pub(super) fn player_gone(&mut self, session: u64) {
        self.conn_clients.remove(&session);
        let Some(player) = self.sessions.remove(&session) else { return };
        match self.players.get_mut(&player) {
            Some(gw) if gw.client.is_some() => gw.gone_since = Some(Instant::now()),
            _ => self.remove_player(player),
        }
    }

    /// Players whose client did not come back in time leave.
    pub(super) fn resume_deadlines(&mut self, now: Instant) {
        let late: Vec<PlayerId> = self
            .players
            .iter()
            .filter(|(_, gw)| gw.gone_since.is_some_and(|t| now.duration_since(t) >= RESUME_GRACE))
            .map(|(&p, _)| p)
            .collect();
        for player in late {
            self.remove_player(player);
        }
    }

    /// The player leaves: the core is told at the next report.
    pub(super) fn remove_player(&mut self, player: PlayerId) {
        if self.players.remove(&player).is_some() {
            self.leaves.push(player);
            self.joins.retain(|j| j.player != player);
        }
        self.clients.retain(|_, p| *p != player);
        self.sessions.retain(|_, p| *p != player);
        self.stats.players.store(self.players.len() as u64, Ordering::Relaxed);
    }
}
