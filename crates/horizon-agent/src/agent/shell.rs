//! The agent shell's loop: every event fed to the machine with the time, every effect the
//! machine returns carried out (sockets, streams, the driver, tasks that report back). The
//! state it works on is `Shell`, built by `start` (agent.rs).

use super::*;

impl Shell {
    pub(super) async fn run(
        mut self,
        mut events: mpsc::Receiver<Event>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut driver_poll = tokio::time::interval(DRIVER_POLL);
        driver_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let deadline = self.machine.poll_timeout();
            tokio::select! {
                _ = stop.changed() => break,
                Some(event) = events.recv() => self.event(event),
                _ = tokio::time::sleep_until(Instant::from_std(deadline)) => {
                    self.machine.handle_timeout(machine_now());
                }
                _ = driver_poll.tick() => {
                    for (server, why) in self.driver.poll_ended() {
                        self.machine.handle(Input::ServerEnded { server, why }, machine_now());
                    }
                }
            }
            self.carry_out();
        }
        tracing::info!(site = %self.site, "agent stopping");
        // Game servers find their agent gone first, so that SIGTERM stops them at once: a
        // server told to stop while its agent is there drains its regions to other servers
        // (`Drain`), and none is left to take them. Then SIGTERM and a grace period, then
        // SIGKILL.
        for s in self.servers.values() {
            s.conn.close(ErrorCode::ShuttingDown, "agent stopping");
        }
        self.driver.terminate_all();
        let grace = Instant::now() + SERVER_STOP_GRACE;
        while self.driver.running() > 0 && Instant::now() < grace {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.driver.poll_ended();
        }
        self.driver.stop_all();
        for p in self.players.values() {
            p.conn.close(ErrorCode::ShuttingDown, "agent stopping");
        }
        if let Some(conn) = self.core.current() {
            conn.close(ErrorCode::ShuttingDown, "agent stopping");
        }
    }

    fn token(&mut self) -> Token {
        self.next_token += 1;
        self.next_token
    }

    fn feed(&mut self, input: Input) {
        self.machine.handle(input, machine_now());
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Core(LinkEvent::Up(conn)) => {
                self.backup = Some(open_stream_task(conn));
                self.feed(Input::CoreUp);
            }
            Event::Core(LinkEvent::Down(e)) => {
                self.backup = None;
                self.feed(Input::CoreDown { error: e.to_string() });
            }
            Event::Core(LinkEvent::Retry { error, wait }) => {
                tracing::debug!(site = %self.site, %error, ?wait, "core unreachable");
            }
            Event::CoreInbound(Inbound::Request(req)) => {
                let token = self.token();
                let order = req.body.clone();
                self.core_orders.insert(token, req);
                self.feed(Input::CoreOrder { token, order });
            }
            Event::CoreInbound(Inbound::Stream(_) | Inbound::Datagram(_)) => {}
            Event::ServerUp(peer) => self.server_up(peer),
            Event::ServerInbound(server, conn, Inbound::Request(req)) => {
                let token = self.token();
                let request = req.body.clone();
                self.server_requests.insert(token, req);
                self.feed(Input::ServerRequest { server, conn, token, request });
            }
            Event::ServerInbound(..) => {}
            Event::ServerItem(server, item) => self.feed(Input::ServerItem { server, item }),
            Event::ServerGone(server, conn) => {
                if self.servers.get(&server).is_some_and(|s| s.conn.id() == conn) {
                    self.servers.remove(&server);
                }
                self.feed(Input::ServerGone { server, conn });
            }
            Event::PlayerUp(peer) => {
                let conn = peer.conn.id();
                // The gateway's authenticator proved the account (a signed player token).
                let Some(client) = peer.identity.clone() else {
                    peer.conn.close(ErrorCode::Unauthorized, "no player account");
                    return;
                };
                pump(
                    peer.inbound,
                    self.events.clone(),
                    move |item| Event::PlayerItem(conn, item),
                    move |i| Event::PlayerInbound(conn, i),
                    Event::PlayerGone(conn),
                );
                let account = client.clone();
                self.players.insert(conn, PlayerIo { conn: peer.conn, account, out: None });
                self.feed(Input::PlayerUp { conn, client });
            }
            Event::PlayerInbound(conn, inbound) => {
                let rtt_ms = self.players.get(&conn).map_or(0.0, |p| rtt_ms(&p.conn));
                match inbound {
                    Inbound::Request(req) => {
                        let token = self.token();
                        let request = req.body.clone();
                        self.player_requests.insert(token, (conn, req));
                        if let gateway::Request::Resume { credential } = &request {
                            // Signature and expiry here; the rest is the machine's to judge.
                            let claim = self.credentials.check_resume(credential);
                            self.feed(Input::PlayerResume { conn, token, claim, rtt_ms });
                        } else {
                            self.feed(Input::PlayerRequest { conn, token, request, rtt_ms });
                        }
                    }
                    Inbound::Datagram(datagram) => {
                        self.feed(Input::PlayerDatagram { conn, datagram, rtt_ms })
                    }
                    Inbound::Stream(_) => {}
                }
            }
            Event::PlayerItem(conn, item) => self.feed(Input::PlayerItem { conn, item }),
            Event::PlayerGone(conn) => {
                self.players.remove(&conn);
                self.feed(Input::PlayerGone { conn });
            }
            Event::PeerUp(conn, inbound) => self.peer_up(conn, inbound),
            Event::PeerInbound(site, inbound) => match inbound {
                Inbound::Request(req) => {
                    let token = self.token();
                    let request = req.body.clone();
                    self.peer_requests.insert(token, req);
                    self.feed(Input::PeerRequest { site, token, request });
                }
                Inbound::Stream(rx) => {
                    forward_stream(rx, self.events.clone(), move |item| {
                        Event::PeerItem(site.clone(), item)
                    });
                }
                Inbound::Datagram(probe) => self.feed(Input::PeerDatagram { site, probe }),
            },
            Event::PeerItem(site, item) => self.feed(Input::PeerItem { site, item }),
            Event::PeerGone(site, conn) => {
                if self.peers.get(&site).is_some_and(|p| p.conn.id() == conn) {
                    self.peers.remove(&site);
                }
                self.feed(Input::PeerGone { site, conn });
            }
            Event::MirrorOpened(handover, result) => {
                let result = result.map(|tx| {
                    self.mirrors.insert(handover, tx);
                });
                self.feed(Input::MirrorOpened { handover, result });
            }
            Event::Machine(input) => self.feed(input),
            Event::Reload(cause) => self.reload(cause),
            Event::DrainAsked(server, reply) => {
                let token = self.token();
                self.drain_requests.insert(token, reply);
                self.feed(Input::DrainAsked { token, server });
            }
        }
    }

    /// Reads the certificate, key, CA and player keys again: new connections use them,
    /// those up keep theirs. If anything fails to load, nothing changes (and it is said).
    fn reload(&mut self, cause: ReloadCause) {
        match self.credentials.load(&self.limits) {
            Ok(reloaded) => {
                let new = self.credentials.install(reloaded);
                self.core.set_tls(new.control);
                for link in self.dialed.values() {
                    link.set_tls(new.transfer.clone());
                }
                (self.roots, self.identity) = (new.roots, new.identity);
                self.transport.reloaded(true);
                tracing::info!(site = %self.site, cause = cause.as_str(), player_key = %new.signing, "certificate, CA and player keys reloaded");
            }
            Err(why) => {
                self.transport.reloaded(false);
                tracing::error!(site = %self.site, cause = cause.as_str(), %why, "reload failed: what was loaded before stays in use");
            }
        }
    }

    /// The machine's answer with the session's resumption credential signed in, for `Joined`
    /// and `Credential` (the machine decides who resumes; only the shell holds the keys and
    /// the wall clock). A credential that cannot be signed (an account or site name outside
    /// a credential's characters) stays empty, and the log says why at each answer.
    fn sign_resumption(&self, conn: ConnId, mut reply: gateway::Reply) -> gateway::Reply {
        let (gateway::Reply::Joined { player, resume, .. }
        | gateway::Reply::Credential { player, resume }) = &mut reply
        else {
            return reply;
        };
        let Some(io) = self.players.get(&conn) else { return reply };
        match self.credentials.resume_credential(*player, &io.account) {
            Ok(credential) => *resume = credential,
            Err(why) => {
                tracing::warn!(site = %self.site, player = player.0, %why, "no resumption credential: this player cannot resume after a restart")
            }
        }
        reply
    }

    fn server_up(&mut self, peer: Peer<Server>) {
        let server = peer.hello.peer.clone();
        let id = peer.conn.id();
        let (n, m) = (server.clone(), server.clone());
        pump(
            peer.inbound,
            self.events.clone(),
            move |item| Event::ServerItem(n.clone(), item),
            move |i| Event::ServerInbound(m.clone(), id, i),
            Event::ServerGone(server.clone(), id),
        );
        let out = open_stream_task(peer.conn.clone());
        let lane = server_lane(peer.conn.clone(), server.clone(), self.events.clone());
        self.servers.insert(server.clone(), ServerIo { conn: peer.conn, out, lane });
        self.feed(Input::ServerUp { server, conn: id });
    }

    fn peer_up(
        &mut self,
        conn: Conn<Transfer>,
        inbound: Option<mpsc::Receiver<Inbound<Transfer>>>,
    ) {
        let site = conn.peer().clone();
        let id = conn.id();
        if let Some(inbound) = inbound {
            let (a, b) = (site.clone(), site.clone());
            pump(
                inbound,
                self.events.clone(),
                move |item| Event::PeerItem(a.clone(), item),
                move |i| Event::PeerInbound(b.clone(), i),
                Event::PeerGone(site.clone(), id),
            );
        }
        let out = open_stream_task(conn.clone());
        self.peers.insert(site.clone(), PeerIo { conn, out });
        self.feed(Input::PeerUp { site, conn: id });
    }

    /// Carries out the machine's effects, feeding back at once what fails on the spot.
    fn carry_out(&mut self) {
        while let Some(effect) = self.machine.poll_effect() {
            self.effect(effect);
        }
    }

    fn effect(&mut self, effect: Effect) {
        match effect {
            Effect::ToCore { pending, request } => {
                let core = self.core.clone();
                let events = self.events.clone();
                tokio::spawn(async move {
                    let result = core.request(&request).await.map_err(Failure::from);
                    let _ =
                        events.send(Event::Machine(Input::CoreReplied { pending, result })).await;
                });
            }
            Effect::AnswerCore { token, result } => {
                if let Some(req) = self.core_orders.remove(&token) {
                    tokio::spawn(req.reply(result));
                }
            }
            Effect::Backup(item) => {
                if let Some(out) = &self.backup
                    && !out.try_send(item)
                {
                    self.stats.stream_items_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Effect::StartServer { server } => {
                let started = self.credentials.server_token(&server).and_then(|t| {
                    self.driver.start(&server, self.servers_addr, &t).map_err(|e| e.to_string())
                });
                if let Err(e) = started {
                    self.feed(Input::ServerNotStarted { server, why: e });
                }
            }
            Effect::StopServer { server } => self.driver.stop(&server),
            Effect::TerminateServer { server } => self.driver.terminate(&server),
            Effect::AnswerDrain { token, result } => {
                if let Some(reply) = self.drain_requests.remove(&token) {
                    let _ = reply.send(result);
                }
            }
            Effect::AskPlatformReady { server } => {
                if self.driver.ready(server.as_str()) {
                    self.feed(Input::PlatformReady { server });
                }
            }
            Effect::SetHosting { server, hosting } => {
                self.driver.set_hosting(server.as_str(), hosting)
            }
            Effect::ToServer { server, pending, request } => {
                let refused = match self.servers.get(&server) {
                    Some(s) => match s.lane.try_send((pending, request)) {
                        Ok(()) => None,
                        Err(e) => Some((e.into_inner().0, "the server's request queue is full")),
                    },
                    None => Some((pending, "the server is gone")),
                };
                if let Some((pending, why)) = refused {
                    let result = Err(Failure::Unreachable(why.to_owned()));
                    self.feed(Input::ServerReplied { server, pending, result });
                }
            }
            Effect::ServerStream { server, item } => {
                if let Some(s) = self.servers.get(&server)
                    && !s.out.try_send(item)
                {
                    self.stats.stream_items_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Effect::AnswerServer { token, result } => {
                if let Some(req) = self.server_requests.remove(&token) {
                    tokio::spawn(req.reply(result));
                }
            }
            Effect::ToPlayer { conn, item } => {
                if let Some(p) = self.players.get_mut(&conn) {
                    let out = p.out.get_or_insert_with(|| open_stream_task(p.conn.clone()));
                    if !out.try_send(item) {
                        self.stats.stream_items_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Effect::PlayerDatagram { conn, datagram } => {
                if let Some(p) = self.players.get(&conn) {
                    let _ = p.conn.send_datagram(&datagram);
                }
            }
            Effect::ClosePlayer { conn, code, reason } => {
                if let Some(p) = self.players.get(&conn) {
                    p.conn.close(code, &reason);
                }
            }
            Effect::AnswerPlayer { token, result } => {
                if let Some((conn, req)) = self.player_requests.remove(&token) {
                    let result = result.map(|reply| self.sign_resumption(conn, reply));
                    tokio::spawn(req.reply(result));
                }
            }
            Effect::DialPeer { site, addr } => {
                self.metrics.know_site(site.as_str());
                self.dial_peer(site, addr)
            }
            Effect::ToPeer { site, pending, request } => match self.peers.get(&site) {
                Some(peer) => {
                    let conn = peer.conn.clone();
                    let events = self.events.clone();
                    tokio::spawn(async move {
                        let result = conn.request(&request).await.map_err(Failure::from);
                        let input = Input::PeerReplied { site, pending, result };
                        let _ = events.send(Event::Machine(input)).await;
                    });
                }
                None => {
                    let result = Err(Failure::Unreachable("no transfer link".to_owned()));
                    self.feed(Input::PeerReplied { site, pending, result });
                }
            },
            Effect::PeerStream { site, item } => {
                if let Some(peer) = self.peers.get(&site)
                    && !peer.out.try_send(item)
                {
                    self.stats.stream_items_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Effect::PeerDatagram { site, probe } => {
                if let Some(peer) = self.peers.get(&site) {
                    let _ = peer.conn.send_datagram(&probe);
                }
            }
            Effect::AnswerPeer { token, result } => {
                if let Some(req) = self.peer_requests.remove(&token) {
                    tokio::spawn(req.reply(result));
                }
            }
            Effect::OpenMirror { site, handover, bubble, epoch } => {
                let Some(peer) = self.peers.get(&site) else {
                    let result = Err(Failure::Unreachable(format!("no transfer link to {site}")));
                    self.feed(Input::MirrorOpened { handover, result });
                    return;
                };
                let conn = peer.conn.clone();
                let events = self.events.clone();
                tokio::spawn(async move {
                    let open = transfer::Request::Open { handover, bubble, epoch };
                    let stream = match conn.request(&open).await {
                        Ok(transfer::Reply::Accepted { .. }) => match conn.open_stream().await {
                            Ok(sender) => Ok(stream_task(sender)),
                            Err(e) => Err(Failure::from(e)),
                        },
                        Ok(other) => Err(Failure::Refused(Fault::new(
                            ErrorCode::Unexpected,
                            format!("unexpected reply {other:?}"),
                        ))),
                        Err(e) => Err(Failure::from(e)),
                    };
                    let _ = events.send(Event::MirrorOpened(handover, stream)).await;
                });
            }
            Effect::Mirror { handover, item } => {
                if let Some(tx) = self.mirrors.get(&handover)
                    && !tx.try_send(item)
                {
                    tracing::warn!(handover = handover.0, "handover stream full or closed");
                }
            }
            Effect::Crossed { from, to, gap, floor } => {
                let (from, to) = (from.to_string(), to.to_string());
                self.metrics.crossed(FreezeSample { from, to, gap, floor });
            }
            Effect::InputsServed { delays, access_rtt } => {
                self.metrics.inputs_served(&delays, access_rtt)
            }
            Effect::Freeze { from, to, gap, floor } => {
                let (from, to) = (from.to_string(), to.to_string());
                self.metrics.freeze(FreezeSample { from, to, gap, floor });
            }
            Effect::CloseMirror { handover } => {
                self.mirrors.remove(&handover);
            }
        }
    }

    fn dial_peer(&mut self, site: Name, addr: horizon_transport::Target) {
        let config = match tls::client_config(
            &self.roots,
            Some(&self.identity),
            ChannelId::Transfer,
            &self.limits,
        ) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "transfer client config");
                return;
            }
        };
        let parts = Link::<Transfer>::connect(Dial {
            endpoint: self.endpoint.clone(),
            addrs: vec![addr],
            server_name: horizon_transport::site_dns_name(site.as_str()),
            config,
            hello: HelloParams::new(self.site.clone()),
            limits: self.limits.clone(),
            stats: self.transport.clone(),
        });
        let events = self.events.clone();
        let mut link_events = parts.events;
        let mut inbound = parts.inbound;
        let peer = site.clone();
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    e = link_events.recv() => match e {
                        Some(LinkEvent::Up(conn)) => Event::PeerUp(conn, None),
                        Some(_) => continue,
                        None => break,
                    },
                    i = inbound.recv() => match i {
                        Some(i) => Event::PeerInbound(peer.clone(), i),
                        None => break,
                    },
                };
                if events.send(event).await.is_err() {
                    break;
                }
            }
        });
        self.dialed.insert(site, parts.link);
    }
}
