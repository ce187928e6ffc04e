//! Simulated players: each joins its home agent, acts every 250 ms once its world is on
//! screen (an input, `seq` from 1: the first puts it where it joined, as a game server would,
//! then velocities; a traveler's move is an input too), and watches what it is shown: its
//! entity's counters and the acknowledgements. Placement sees only where the game servers put
//! them: a player never claims a position.

use super::*;

impl World {
    /// Player `p` connects to its home agent: with a session from before (its agent died),
    /// it resumes it with its credential; otherwise it joins as a new player.
    pub(super) fn player_join(&mut self, p: usize) {
        let home = self.players[p].home;
        if !self.agent_alive(home) {
            return;
        }
        let conn = self.ids.conn();
        let token = self.ids.token();
        let now = self.time.now();
        let account = name(&format!("bot-{p}"));
        let player = &mut self.players[p];
        player.conn = conn;
        player.playing = false;
        player.live_from = now;
        player.last_update = now;
        let input = match player.id {
            // The shell checked the credential's signature and expiry: the claim is what
            // the agent judges.
            Some(id) => {
                let claim = agent::Resumption { site: name(SITES[home]), player: id, account };
                agent::Input::PlayerResume { conn, token, claim: Ok(claim), rtt_ms: 20.0 }
            }
            None => {
                player.seq = 0;
                player.sent.clear();
                player.move_next = true;
                player.told = 0;
                player.entity = None;
                let (role, pos) = (player.role, player.pos);
                let request = gateway::Request::Join { role, world: WorldId(0), pos };
                agent::Input::PlayerRequest { conn, token, request, rtt_ms: 20.0 }
            }
        };
        let client = name(&format!("bot-{p}"));
        self.agent_input(home, agent::Input::PlayerUp { conn, client });
        self.player_calls.insert(token, p);
        let d = Delivery::PlayerToAgent { site: home, player: p, conn, input };
        self.schedule(ACCESS_US, Event::Deliver(Box::new(d)));
    }

    pub(super) fn player_delivery(&mut self, p: usize, conn: u64, what: ToPlayer) {
        if self.players[p].conn != conn {
            return;
        }
        match what {
            ToPlayer::Answer(Ok(gateway::Reply::Joined { player, resume_after, .. })) => {
                self.checker.player_id(self.time.now(), player, p);
                let site = SITES[self.players[p].home];
                if self.players[p].id == Some(player) {
                    self.note(format!(
                        "player {} resumed at {site} from seq {}",
                        player.0, resume_after.0
                    ));
                    self.resend_inputs(p, resume_after.0);
                } else {
                    self.players[p].id = Some(player);
                    self.note(format!("player {} joined at {site}", player.0));
                }
            }
            ToPlayer::Answer(Err(f)) if f.code == ErrorCode::Unauthorized => {
                // Its session is over (the player left the game while nobody resumed it): a
                // new player, at once.
                let id = self.players[p].id.take().map_or(0, |i| i.0);
                self.note(format!(
                    "player {id} could not resume ({}): joins as a new player",
                    f.message
                ));
                self.players[p].conn = 0;
                self.player_join(p);
            }
            ToPlayer::Answer(_) => {
                // Refused for now (no player id yet, or the agent has not heard from the core
                // who plays here): try again.
                self.players[p].conn = 0;
                self.schedule(2_000_000, Event::PlayerJoin(p));
            }
            ToPlayer::Item(gateway::Item::Update { acked, bytes, .. }) => {
                self.stats.updates_to_players += 1;
                let now = self.time.now();
                self.note_route_gap(p, now);
                let player = &mut self.players[p];
                player.told = player.told.max(acked.0);
                player.last_update = now;
                if let (Some(id), Some(view)) = (player.id, View::decode(&bytes.0))
                    && let Some(e) = view.entity(id)
                {
                    player.entity = Some((e.inputs, e.last_seq));
                }
                if !player.playing {
                    player.playing = true;
                    self.schedule(INPUT_EVERY_US, Event::PlayerTick(p));
                }
            }
            ToPlayer::Item(_) => {}
        }
    }

    pub(super) fn player_tick(&mut self, p: usize) {
        let player = &mut self.players[p];
        if player.conn == 0 || player.id.is_none() {
            return;
        }
        player.seq += 1;
        let (seq, conn, home) = (player.seq, player.conn, player.home);
        let bytes = if std::mem::take(&mut player.move_next) {
            let mm = |m: f64| (m * 1000.0).round() as i64;
            reference::encode_move_to([mm(player.pos.x), mm(player.pos.y), mm(player.pos.z)])
        } else {
            reference::encode_input([(seq % 7) as i32 * 100 - 300, 0, 0])
        };
        let player = &mut self.players[p];
        if player.sent.len() >= KEPT_INPUTS {
            player.sent.pop_front();
        }
        player.sent.push_back((seq, bytes.clone()));
        let item = gateway::Item::Input { seq: Seq(seq), bytes: horizon_proto::Blob(bytes) };
        self.stats.inputs_sent += 1;
        let input = agent::Input::PlayerItem { conn, item };
        let at = self.in_order((7, home, 0, conn), self.time.now() + ACCESS_US);
        self.schedule_at(
            at,
            Event::Deliver(Box::new(Delivery::PlayerToAgent {
                site: home,
                player: p,
                conn,
                input,
            })),
        );
        self.schedule(INPUT_EVERY_US, Event::PlayerTick(p));
    }

    /// After a resume, as a client does: every input from `from` it still has goes again, in
    /// order (the game applies each once).
    fn resend_inputs(&mut self, p: usize, from: u64) {
        let player = &self.players[p];
        let (conn, home) = (player.conn, player.home);
        let again: Vec<(u64, Vec<u8>)> =
            player.sent.iter().filter(|(s, _)| *s >= from).cloned().collect();
        for (seq, bytes) in again {
            let item = gateway::Item::Input { seq: Seq(seq), bytes: horizon_proto::Blob(bytes) };
            let input = agent::Input::PlayerItem { conn, item };
            let at = self.in_order((7, home, 0, conn), self.time.now() + ACCESS_US);
            let d = Delivery::PlayerToAgent { site: home, player: p, conn, input };
            self.schedule_at(at, Event::Deliver(Box::new(d)));
        }
    }

    /// A traveler moves to another group's place: its next input takes it there.
    pub(super) fn player_move(&mut self, p: usize) {
        self.schedule(TRAVEL_EVERY_US, Event::PlayerMove(p));
        let group = self.rng.below(4) as f64;
        let player = &mut self.players[p];
        player.pos = Vec3 { x: group * 20_000.0 + 30.0 + p as f64, y: 5.0, z: 0.0 };
        player.moves += 1;
        player.move_next = true;
        if player.conn == 0 || player.id.is_none() {
            return;
        }
        let id = player.id.map_or(0, |i| i.0);
        self.note(format!("player {id} moves to group {group}"));
    }

    /// A player outside any partition gets an update at least every [`LIVENESS_S`]; one of
    /// two sites whose transfer link is cut (no other fault in force or recent) at least
    /// every [`ROUTE_ROUND_S`]: traffic goes round through the third site.
    pub(super) fn liveness(&mut self) {
        let now = self.time.now();
        self.route_liveness(now);
        let limit = (LIVENESS_S * 1e6) as u64;
        for p in 0..self.players.len() {
            let player = &self.players[p];
            if player.conn == 0 || player.reported {
                continue;
            }
            let since =
                player.last_update.max(player.live_from).max(self.isolated_until(player.home));
            if now > since + limit {
                let detail = format!(
                    "player {} of {} has had no update for {:.0} s",
                    player.id.map_or(0, |i| i.0),
                    SITES[player.home],
                    (now - since) as f64 / 1e6
                );
                self.players[p].reported = true;
                self.checker.not_live(now, detail);
            }
        }
    }

    /// At the end: every player plays, and none lost an acknowledged input (I4).
    pub(super) fn final_checks(&mut self) {
        let now = self.time.now();
        for p in 0..self.players.len() {
            let player = &self.players[p];
            let Some(id) = player.id else {
                if self.isolated_until(player.home) < now {
                    let detail = format!("player {p} of {} never joined", SITES[player.home]);
                    self.checker.not_live(now, detail);
                }
                continue;
            };
            if now > player.last_update + 10_000_000 && !player.reported {
                let detail = format!(
                    "player {} of {} is not playing at the end (last update {:.1} s)",
                    id.0,
                    SITES[player.home],
                    player.last_update as f64 / 1e6
                );
                self.checker.not_live(now, detail);
            }
            // Every seq it was told was applied is in its entity, and none was skipped
            // (`inputs < last_seq`: a state lost and started again).
            let told = player.told;
            match player.entity {
                Some((inputs, last_seq)) if last_seq < told || inputs < last_seq => {
                    self.checker.lost_input(now, id, told, inputs, last_seq)
                }
                None if told > 0 => self.checker.lost_input(now, id, told, 0, 0),
                _ => {}
            }
        }
    }

    /// The player whose gateway request had agent `token`, answered now.
    pub(super) fn player_answered(&mut self, token: u64) -> Option<usize> {
        self.player_calls.remove(&token)
    }

    /// The gateway requests of `site`'s players, forgotten with its agent.
    pub(super) fn forget_player_calls(&mut self, site: usize) {
        self.player_calls.retain(|_, p| self.players[*p].home != site);
    }

    /// A new player (or NPC), not joined yet: its index.
    pub(super) fn add_player(&mut self, player: Player) -> usize {
        self.players.push(player);
        self.players.len() - 1
    }

    /// The player connected over gateway connection `conn`, if any.
    pub(super) fn player_on(&self, conn: u64) -> Option<usize> {
        self.players.iter().position(|p| p.conn == conn)
    }

    /// Player `p`'s gateway connection (0: none).
    pub(super) fn player_conn(&self, p: usize) -> u64 {
        self.players[p].conn
    }

    /// Every player homed at `site`, in order.
    pub(super) fn players_of(&self, site: usize) -> Vec<usize> {
        (0..self.players.len()).filter(|&p| self.players[p].home == site).collect()
    }

    /// The players of `sites` playing at `now`: joined, connected, updated within the last
    /// second, and not reported already.
    pub(super) fn players_playing_at(&self, sites: &[usize], now: u64) -> Vec<usize> {
        (0..self.players.len())
            .filter(|&p| {
                let pl = &self.players[p];
                sites.contains(&pl.home)
                    && pl.conn != 0
                    && pl.id.is_some()
                    && !pl.reported
                    && pl.last_update + 1_000_000 >= now
            })
            .collect()
    }

    /// `site`'s agent died: its players' connections with it. Their sessions live on at the
    /// core: each resumes when its agent is back.
    pub(super) fn players_disconnected(&mut self, site: usize) {
        for player in &mut self.players {
            if player.home == site && player.conn != 0 {
                player.conn = 0;
            }
        }
    }

    /// An update reached player `p` at `now`: with a transfer cut watched, the gap it ends
    /// counts towards the longest a cut made a player wait.
    fn note_route_gap(&mut self, p: usize, now: u64) {
        if let Some((since, watched)) = self.route_watched()
            && watched.contains(&p)
        {
            let gap = now - self.players[p].last_update.max(since);
            self.stats.cut_gap_max_ms = self.stats.cut_gap_max_ms.max(gap / 1000);
        }
    }

    /// With a transfer cut watched: each of its players goes [`ROUTE_ROUND_S`] at most without
    /// an update (traffic goes round through the third site), or the checker hears of it.
    fn route_liveness(&mut self, now: u64) {
        let Some((since, watched)) = self.route_watched() else { return };
        let limit = (ROUTE_ROUND_S * 1e6) as u64;
        let mut late = Vec::new();
        for &p in watched {
            let player = &self.players[p];
            let since = player.last_update.max(since);
            if player.conn != 0 && !player.reported && now > since + limit {
                late.push((p, since));
            }
        }
        for (p, since) in late {
            let player = &self.players[p];
            let detail = format!(
                "player {} of {} has had no update for {:.1} s while its site's transfer link was cut: not routed round",
                player.id.map_or(0, |i| i.0),
                SITES[player.home],
                (now - since) as f64 / 1e6
            );
            self.players[p].reported = true;
            self.checker.not_routed_round(now, detail);
            self.route_late();
        }
    }
}
