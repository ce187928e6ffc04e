//! Agents: their effects carried over the simulated links, the links' lives (up, cut, dead,
//! redialed), and deliveries checked against the connection they were sent on.

use super::*;

impl World {
    pub(super) fn agent_input(&mut self, site: usize, input: agent::Input) {
        if !self.agents[site].alive {
            return;
        }
        let now = self.instant(site);
        self.agents[site].machine.handle(input, now);
        self.after_agent(site);
    }

    pub(super) fn after_agent(&mut self, site: usize) {
        while let Some(effect) = self.agents[site].machine.poll_effect() {
            self.agent_effect(site, effect);
        }
        let at = self.time.global_of(site, self.agents[site].machine.poll_timeout());
        if at < self.agents[site].timer_at {
            self.agents[site].timer_at = at;
            self.schedule_at(at, Event::AgentTimer(site));
        }
    }

    fn agent_effect(&mut self, site: usize, effect: agent::Effect) {
        use agent::Effect as E;
        match effect {
            E::ToCore { pending, request } => {
                let conn = self.control_conn(site);
                if conn == 0 {
                    let result = Err(Failure::Unreachable("not connected".into()));
                    let input = agent::Input::CoreReplied { pending, result };
                    self.schedule(
                        0,
                        Event::Deliver(Box::new(Delivery::CoreToAgent { site, conn: 0, input })),
                    );
                    return;
                }
                let token = self.ids.token();
                if let control::Request::Started { bubble, epoch, .. } = &request {
                    self.stats.handovers_started += 1;
                    self.note(format!(
                        "{} started bubble {} epoch {} (handover)",
                        SITES[site], bubble.0, epoch.0
                    ));
                }
                let renew = match &request {
                    control::Request::Renew { leases } => {
                        Some((self.local_us(site), leases.clone()))
                    }
                    _ => None,
                };
                self.core_call(token, (site, conn, pending, renew));
                let input =
                    core::Input::AgentRequest { site: self.site_id(site), conn, token, request };
                self.send_to_core(site, conn, input, false);
            }
            E::AnswerCore { token, result } => {
                let Some((s, conn, order)) = self.order_answered(token) else { return };
                debug_assert_eq!(s, site);
                if conn != self.control_conn(site) {
                    return;
                }
                let result = result.map_err(Failure::Refused);
                let input = core::Input::OrderDone { order, result };
                self.answers.insert(order, conn);
                self.send_to_core(site, conn, input, false);
            }
            E::Backup(item) => {
                let conn = self.control_conn(site);
                if conn != 0 {
                    let input = core::Input::Backup { site: self.site_id(site), conn, item };
                    self.send_to_core(site, conn, input, true);
                }
            }
            E::StartServer { server } => {
                let inc = self.ids.conn();
                self.schedule(SERVER_START_US, Event::ServerStarts(site, server, inc));
            }
            E::StopServer { server } => self.kill_server(site, &server, None),
            // Nobody asks the simulated agents for a drain (no operator here).
            E::TerminateServer { server } => self.drain_server(site, &server),
            E::AnswerDrain { .. } => {}
            // The simulated platform counts a server ready as soon as it says so, and has no
            // pool labels.
            E::AskPlatformReady { server } => {
                let now = self.instant(site);
                self.agents[site].machine.handle(agent::Input::PlatformReady { server }, now);
            }
            E::SetHosting { .. } => {}
            E::ToServer { server, pending, request } => {
                if let server::Request::Join { lease, player, last_applied, state } = &request {
                    let note = format!(
                        "{} joins player {} to bubble {} on {server} at seq {} ({} bytes)",
                        SITES[site],
                        player.0,
                        lease.bubble.0,
                        last_applied.0,
                        state.0.len()
                    );
                    self.note(note);
                }
                if let Some(pending) =
                    self.queue_server_request(site, server.as_str(), pending, request)
                {
                    // Gone: the request fails when its connection times out.
                    let input = agent::Input::ServerReplied {
                        server: server.clone(),
                        pending,
                        result: Err(Failure::Unreachable("the server is gone".into())),
                    };
                    self.schedule(
                        IDLE_US,
                        Event::Deliver(Box::new(Delivery::ServerToAgent {
                            site,
                            server: server.to_string(),
                            inc: 0,
                            input,
                        })),
                    );
                }
            }
            E::ServerStream { server, item } => {
                let Some(inc) = self.server_inc(site, server.as_str()) else { return };
                let at = self.in_order((3, site, 0, inc), self.time.now() + LOCAL_US);
                let d = Delivery::ToServer {
                    site,
                    server: server.to_string(),
                    inc,
                    what: ToServer::Item(item),
                };
                self.schedule_at(at, Event::Deliver(Box::new(d)));
            }
            E::AnswerServer { .. } => {}
            E::ToPlayer { conn, item } => {
                let Some(player) = self.player_on(conn) else { return };
                let at = self.in_order((4, site, 0, conn), self.time.now() + ACCESS_US);
                let d = Delivery::ToPlayer { player, conn, what: ToPlayer::Item(item) };
                self.schedule_at(at, Event::Deliver(Box::new(d)));
            }
            E::PlayerDatagram { .. } => {}
            // Only for an input over the size limit, which the simulated players never send.
            E::ClosePlayer { .. } => {}
            E::AnswerPlayer { token, result } => {
                let Some(player) = self.player_answered(token) else { return };
                let conn = self.player_conn(player);
                let d = Delivery::ToPlayer { player, conn, what: ToPlayer::Answer(result) };
                self.schedule(ACCESS_US, Event::Deliver(Box::new(d)));
            }
            E::DialPeer { site: peer, addr } => {
                let Some(other) = site_of_addr(&addr) else { return };
                debug_assert_eq!(SITES[other], peer.as_str());
                let pair = (site.min(other), site.max(other));
                if let Some(t) = self.transfers.get_mut(&pair) {
                    t.wanted = true;
                }
                self.redial_peer(pair);
            }
            E::ToPeer { site: peer, pending, request } => {
                if let transfer::Request::Cross { player, to, last_applied, .. } = &request {
                    let note = format!(
                        "{} crosses player {} to {peer} bubble {} at seq {}",
                        SITES[site], player.0, to.0, last_applied.0
                    );
                    self.note(note);
                }
                self.peer_request(site, &peer, PeerWait::Call(pending), request)
            }
            E::PeerStream { site: peer, item } => self.peer_item(site, &peer, item),
            E::PeerDatagram { site: peer, probe } => {
                let Some(to) = index_of(&peer) else { return };
                let pair = (site.min(to), site.max(to));
                let Some(t) = self.transfers.get(&pair) else { return };
                if t.conn == 0 || t.cut || self.rng.unit() < 0.02 {
                    return;
                }
                let conn = t.conn;
                let delay = self.peer_delay(site, to);
                let input = agent::Input::PeerDatagram { site: name(SITES[site]), probe };
                let d = Delivery::Peer { from: site, to, conn, input };
                self.schedule(delay, Event::Deliver(Box::new(d)));
            }
            E::AnswerPeer { token, result } => {
                let Some((caller, callee, conn, wait)) = self.peer_calls.remove(&token) else {
                    return;
                };
                let input = match wait {
                    PeerWait::Call(pending) => agent::Input::PeerReplied {
                        site: name(SITES[callee]),
                        pending,
                        result: result.map_err(Failure::Refused),
                    },
                    PeerWait::Mirror(handover) => {
                        let result = match result {
                            Ok(transfer::Reply::Accepted { .. }) => {
                                self.mirrors.insert(handover, (caller, callee));
                                Ok(())
                            }
                            Ok(other) => Err(Failure::Refused(horizon_proto::Fault::new(
                                ErrorCode::Unexpected,
                                format!("unexpected reply {other:?}"),
                            ))),
                            Err(f) => Err(Failure::Refused(f)),
                        };
                        agent::Input::MirrorOpened { handover, result }
                    }
                };
                self.send_to_peer(callee, caller, conn, input, None);
            }
            E::OpenMirror { site: peer, handover, bubble, epoch } => {
                let request = transfer::Request::Open { handover, bubble, epoch };
                self.peer_request(site, &peer, PeerWait::Mirror(handover), request);
            }
            E::Mirror { handover, item } => {
                let Some(&(from, to)) = self.mirrors.get(&handover) else { return };
                if from == site {
                    self.peer_item(site, &name(SITES[to]), item);
                }
            }
            E::CloseMirror { handover } => {
                self.mirrors.remove(&handover);
            }
            // For the daemon's metrics: the simulator checks the players themselves.
            E::Freeze { .. } | E::InputsServed { .. } | E::Crossed { .. } => {}
        }
    }

    fn peer_request(
        &mut self,
        from: usize,
        peer: &Name,
        wait: PeerWait,
        request: transfer::Request,
    ) {
        let fail = |wait: PeerWait, why: &str| {
            let result = Failure::Unreachable(why.into());
            match wait {
                PeerWait::Call(pending) => {
                    agent::Input::PeerReplied { site: peer.clone(), pending, result: Err(result) }
                }
                PeerWait::Mirror(handover) => {
                    agent::Input::MirrorOpened { handover, result: Err(result) }
                }
            }
        };
        let Some(to) = index_of(peer) else { return };
        let pair = (from.min(to), from.max(to));
        let conn = self.transfers.get(&pair).map_or(0, |t| t.conn);
        if conn == 0 {
            let input = fail(wait, "no transfer link");
            self.schedule(
                0,
                Event::Deliver(Box::new(Delivery::Peer { from: to, to: from, conn: 0, input })),
            );
            return;
        }
        let token = self.ids.token();
        self.peer_calls.insert(token, (from, to, conn, wait));
        let input = agent::Input::PeerRequest { site: name(SITES[from]), token, request };
        self.send_to_peer(from, to, conn, input, None);
    }

    fn peer_item(&mut self, from: usize, peer: &Name, item: StateItem) {
        let Some(to) = index_of(peer) else { return };
        let pair = (from.min(to), from.max(to));
        let conn = self.transfers.get(&pair).map_or(0, |t| t.conn);
        if conn == 0 {
            return;
        }
        let input = agent::Input::PeerItem { site: name(SITES[from]), item };
        self.send_to_peer(from, to, conn, input, Some(5));
    }

    fn send_to_peer(
        &mut self,
        from: usize,
        to: usize,
        conn: u64,
        input: agent::Input,
        stream: Option<u8>,
    ) {
        let pair = (from.min(to), from.max(to));
        let delay = self.peer_delay(from, to);
        let d = Delivery::Peer { from, to, conn, input };
        if let Some(t) = self.transfers.get_mut(&pair)
            && t.cut
        {
            t.held.push(d);
            return;
        }
        let mut at = self.time.now() + delay;
        if let Some(kind) = stream {
            at = self.in_order((kind, from, to, conn), at);
        }
        self.schedule_at(at, Event::Deliver(Box::new(d)));
    }

    // ---- deliveries ----

    pub(super) fn deliver(&mut self, d: Delivery) {
        match d {
            Delivery::ToCore { site, conn, input } => {
                if !self.core_up() {
                    return;
                }
                if let Some(at) = self.core_busy() {
                    // The core is writing to its store.
                    self.schedule_at(
                        at,
                        Event::Deliver(Box::new(Delivery::ToCore { site, conn, input })),
                    );
                    return;
                }
                if site != usize::MAX && self.control_conn(site) != conn {
                    return;
                }
                let mut lane_room = false;
                if let core::Input::OrderDone { order, .. } = &input
                    && site != usize::MAX
                {
                    if self.answers.remove(order).is_none() {
                        // Its connection died on the way: the core learnt it failed then.
                        return;
                    }
                    lane_room = self.control_answered(site, order);
                }
                self.core_input(input);
                if lane_room {
                    self.send_in_order(site, self.time.now());
                }
            }
            Delivery::CoreToAgent { site, conn, input } => {
                if conn != 0 && self.control_conn(site) != conn {
                    return;
                }
                if let agent::Input::CoreOrder { order, .. } = &input {
                    self.order_received(site, order);
                }
                self.agent_input(site, input);
            }
            Delivery::Peer { from, to, conn, input } => {
                let pair = (from.min(to), from.max(to));
                if conn != 0 && self.transfers.get(&pair).is_none_or(|t| t.conn != conn) {
                    return;
                }
                self.agent_input(to, input);
            }
            Delivery::ToServer { site, server, inc, what } => {
                self.server_delivery(site, server, inc, what)
            }
            Delivery::ServerToAgent { site, server, inc, input } => {
                if let agent::Input::ServerReplied { .. } = &input {
                    self.server_lane_free(site, &server, inc);
                }
                let live = inc == 0 || self.server_inc(site, &server) == Some(inc);
                if live
                    || matches!(
                        input,
                        agent::Input::ServerReplied { .. }
                            | agent::Input::ServerGone { .. }
                            | agent::Input::ServerEnded { .. }
                    )
                {
                    self.agent_input(site, input);
                }
            }
            Delivery::ToPlayer { player, conn, what } => self.player_delivery(player, conn, what),
            Delivery::PlayerToAgent { site, player, conn, input } => {
                if self.player_conn(player) == conn {
                    self.agent_input(site, input);
                }
            }
        }
    }

    /// The leases an order grants count for I5 from its receipt; their epochs for I6.
    fn order_received(&mut self, site: usize, order: &control::Request) {
        use control::Request as R;
        let local = self.local_us(site);
        let (what, lease) = match order {
            // Served in its turn; its lease counts from its receipt all the same.
            R::InOrder { order, .. } => return self.order_received(site, order),
            R::Create { lease, .. } => ("create", *lease),
            R::Restore { lease, copy, tick, .. } | R::RestoreParts { lease, copy, tick, .. } => {
                self.stats.restores += 1;
                self.note(format!(
                    "{} restore copy: {} bytes at tick {}",
                    SITES[site],
                    copy.0.len(),
                    tick.0
                ));
                ("restore", *lease)
            }
            R::Prepare { lease, target, .. } if target.as_str() == SITES[site] => {
                ("prepare", *lease)
            }
            R::Regrant { lease, .. } => ("regrant", *lease),
            R::Members { lease, players, departed } => {
                let ids: Vec<String> = players
                    .iter()
                    .map(|m| format!("{}{}", m.player.0, if m.crossing { "*" } else { "" }))
                    .collect();
                let gone: Vec<String> =
                    departed.iter().map(|d| format!("{}→{}", d.player.0, d.to.bubble.0)).collect();
                self.note(format!(
                    "{} members of bubble {}: [{}] departed [{}]",
                    SITES[site],
                    lease.bubble.0,
                    ids.join(" "),
                    gone.join(" ")
                ));
                return;
            }
            R::Revoke { leases } => {
                let which: Vec<String> =
                    leases.iter().map(|l| format!("{}@{}", l.bubble.0, l.epoch.0)).collect();
                self.note(format!("{} revoke [{}]", SITES[site], which.join(" ")));
                return;
            }
            R::Commit { handover } | R::Freeze { handover } => {
                self.note(format!(
                    "{} {} handover {}",
                    SITES[site],
                    if matches!(order, R::Commit { .. }) { "commit" } else { "freeze" },
                    handover.0
                ));
                return;
            }
            R::Abort { handover, reason } => {
                self.note(format!("{} abort handover {}: {reason}", SITES[site], handover.0));
                return;
            }
            _ => return,
        };
        self.checker.order_lease(self.time.now(), what, lease.bubble, lease.epoch);
        let until = local + u64::from(lease.ttl_ms) * 1000;
        self.checker.granted(site, lease.bubble, lease.epoch, until);
        self.note(format!(
            "{} gets {what} of bubble {} epoch {}",
            SITES[site], lease.bubble.0, lease.epoch.0
        ));
    }

    // ---- links ----

    /// The agent–core connection ended: both sides learn it, every request on it fails.
    pub(super) fn control_down(&mut self, site: usize, why: &str) {
        let Some((conn, never_sent)) = self.control_closed(site) else { return };
        self.note(format!("{} lost the core: {why}", SITES[site]));
        // Answers on their way die with the connection: their orders fail at the core, with
        // those never answered; then those never sent.
        let mut failed_orders: Vec<OrderId> =
            self.answers.iter().filter(|(_, c)| **c == conn).map(|(o, _)| *o).collect();
        for order in &failed_orders {
            self.answers.remove(order);
        }
        failed_orders.extend(self.orders_lost(conn));
        for order in failed_orders {
            let result = Err(Failure::Gone("agent connection gone".into()));
            self.core_input(core::Input::OrderDone { order, result });
        }
        for order in never_sent {
            let result = Err(Failure::Unreachable("agent connection gone".into()));
            self.core_input(core::Input::OrderDone { order, result });
        }
        self.core_input(core::Input::AgentDisconnected { site: self.site_id(site), conn });
        for pending in self.core_calls_lost(conn) {
            let result = Err(Failure::Gone("connection lost".into()));
            self.agent_input(site, agent::Input::CoreReplied { pending, result });
        }
        self.agent_input(site, agent::Input::CoreDown { error: why.into() });
        self.schedule(REDIAL_US, Event::Redial(site));
    }

    pub(super) fn redial_peer(&mut self, pair: (usize, usize)) {
        let (a, b) = pair;
        let Some(t) = self.transfers.get(&pair) else { return };
        if t.conn != 0 || !t.wanted {
            return;
        }
        if t.cut || !self.agents[a].alive || !self.agents[b].alive {
            self.schedule(REDIAL_US, Event::RedialPeer(pair));
            return;
        }
        let conn = self.ids.conn();
        if let Some(t) = self.transfers.get_mut(&pair) {
            t.conn = conn;
        }
        self.note(format!("transfer {}–{} up (conn {conn})", SITES[a], SITES[b]));
        self.agent_input(a, agent::Input::PeerUp { site: name(SITES[b]), conn });
        self.agent_input(b, agent::Input::PeerUp { site: name(SITES[a]), conn });
    }

    pub(super) fn transfer_down(&mut self, pair: (usize, usize), why: &str) {
        let Some(t) = self.transfers.get_mut(&pair) else { return };
        let conn = t.conn;
        if conn == 0 {
            return;
        }
        t.conn = 0;
        t.held.clear();
        let (a, b) = pair;
        self.note(format!("transfer {}–{} down: {why}", SITES[a], SITES[b]));
        let calls: Vec<u64> =
            self.peer_calls.iter().filter(|(_, v)| v.2 == conn).map(|(t, _)| *t).collect();
        for token in calls {
            let Some((caller, callee, _, wait)) = self.peer_calls.remove(&token) else { continue };
            let input = match wait {
                PeerWait::Call(pending) => agent::Input::PeerReplied {
                    site: name(SITES[callee]),
                    pending,
                    result: Err(Failure::Gone("connection lost".into())),
                },
                PeerWait::Mirror(handover) => {
                    let result = Err(Failure::Gone("connection lost".into()));
                    agent::Input::MirrorOpened { handover, result }
                }
            };
            self.agent_input(caller, input);
        }
        self.mirrors.retain(|_, (f, t)| !((*f, *t) == (a, b) || (*f, *t) == (b, a)));
        self.agent_input(a, agent::Input::PeerGone { site: name(SITES[b]), conn });
        self.agent_input(b, agent::Input::PeerGone { site: name(SITES[a]), conn });
        self.schedule(REDIAL_US, Event::RedialPeer(pair));
    }

    /// `site`'s agent's timer fired: it runs its timeout if alive and due.
    pub(super) fn agent_timer(&mut self, site: usize) {
        if self.agents[site].alive && self.time.now() >= self.agents[site].timer_at {
            self.agents[site].timer_at = u64::MAX;
            let now = self.instant(site);
            self.agents[site].machine.handle_timeout(now);
            self.after_agent(site);
        }
    }

    /// Whether `site`'s agent runs.
    pub(super) fn agent_alive(&self, site: usize) -> bool {
        self.agents[site].alive
    }

    /// `site`'s agent dies (its machine is replaced when it starts again).
    pub(super) fn agent_down(&mut self, site: usize) {
        self.agents[site].alive = false;
    }

    /// `site`'s agent starts again as `machine`, knowing nothing.
    pub(super) fn agent_started(&mut self, site: usize, machine: AgentMachine) {
        self.agents[site] = Agent { machine, alive: true, timer_at: u64::MAX };
    }

    /// A transfer link's idle timer fired: a connection still cut then is down.
    pub(super) fn transfer_idle(&mut self, pair: (usize, usize), conn: u64) {
        if self.transfers.get(&pair).is_some_and(|t| t.conn == conn && t.cut) {
            self.transfer_down(pair, "idle timeout");
        }
    }

    /// Cuts the transfer link `pair` (both ways): its connection, if there is a link.
    pub(super) fn cut_transfer(&mut self, pair: (usize, usize)) -> Option<u64> {
        let t = self.transfers.get_mut(&pair)?;
        t.cut = true;
        Some(t.conn)
    }

    /// Heals the transfer link `pair`: what the cut held, to deliver now.
    pub(super) fn heal_transfer(&mut self, pair: (usize, usize)) -> Vec<Delivery> {
        match self.transfers.get_mut(&pair) {
            Some(t) => {
                t.cut = false;
                std::mem::take(&mut t.held)
            }
            None => Vec::new(),
        }
    }

    /// `site`'s agent died: its transfer links are down, and those it dialed are no longer
    /// wanted (its next incarnation dials again when the core names its peers).
    pub(super) fn transfers_gone(&mut self, site: usize) {
        let pairs: Vec<(usize, usize)> =
            self.transfers.keys().copied().filter(|(a, b)| *a == site || *b == site).collect();
        for pair in pairs {
            self.transfer_down(pair, "agent killed");
            // The dialer is the site whose name sorts first.
            let dialer = if SITES[pair.0] < SITES[pair.1] { pair.0 } else { pair.1 };
            if dialer == site
                && let Some(t) = self.transfers.get_mut(&pair)
            {
                t.wanted = false;
            }
        }
    }
}

pub(super) fn index_of(site: &Name) -> Option<usize> {
    SITES.iter().position(|s| *s == site.as_str())
}
