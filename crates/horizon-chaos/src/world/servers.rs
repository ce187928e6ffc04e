//! Game servers: started by their agent's driver, served one request at a time through the
//! agent's lane, ticking by their site's clock. Every update they write is checked.

use super::*;

impl World {
    /// A started server connects to its agent, registers and says it is ready.
    pub(super) fn server_starts(&mut self, site: usize, server: String, inc: u64) {
        if !self.agent_alive(site) {
            return;
        }
        let counters = Arc::new(Counters::default());
        // Own states ahead of the update write nothing and acknowledge nothing, so they cannot
        // break an invariant, and would add a message per input applied, each with a delay
        // drawn from the run's generator (the agent's machine tests their fencing).
        let machine = ServerMachine::new(Reference { tick_ms: TICK_MS }, counters)
            .with_own_state(OwnState::Batched);
        self.servers[site].insert(
            server.clone(),
            Server { machine, inc, lane: VecDeque::new(), lane_busy: false, draining_until: None },
        );
        let n = name(&server);
        self.agent_input(site, agent::Input::ServerUp { server: n.clone(), conn: inc });
        let hello = vec![
            server::Request::Register { server: n, build: name("chaos"), max_players: 100 },
            server::Request::Ready,
        ];
        self.server_requests(site, &server, inc, hello);
        let tick = u64::from(TICK_MS) * 1000;
        self.schedule(tick, Event::ServerTick(site, server.clone(), inc));
        self.schedule(1_000_000, Event::ServerSecond(site, server, inc));
    }

    /// The agent's next request to `server`, once the one before is answered.
    pub(super) fn next_in_lane(&mut self, site: usize, server: &str) {
        let Some(s) = self.servers[site].get_mut(server) else { return };
        if s.lane_busy {
            return;
        }
        let Some((pending, request)) = s.lane.pop_front() else { return };
        s.lane_busy = true;
        let inc = s.inc;
        let at = self.in_order((3, site, 0, inc), self.time.now() + LOCAL_US);
        let what = ToServer::Request { pending: Box::new(pending), request };
        let d = Delivery::ToServer { site, server: server.to_owned(), inc, what };
        self.schedule_at(at, Event::Deliver(Box::new(d)));
    }

    pub(super) fn server_delivery(
        &mut self,
        site: usize,
        server: String,
        inc: u64,
        what: ToServer,
    ) {
        let alive = self.servers[site].get(&server).is_some_and(|s| s.inc == inc);
        if !alive {
            if let ToServer::Request { pending, .. } = what {
                // The server is gone: the request fails at the connection's idle timeout.
                let input = agent::Input::ServerReplied {
                    server: name(&server),
                    pending: *pending,
                    result: Err(Failure::TimedOut { ms: IDLE_US / 1000 }),
                };
                let d = Delivery::ServerToAgent { site, server, inc: 0, input };
                self.schedule(IDLE_US, Event::Deliver(Box::new(d)));
            }
            return;
        }
        let now = self.server_instant(site);
        let Some(s) = self.servers[site].get_mut(&server) else { return };
        match what {
            ToServer::Item(item) => {
                s.machine.item(item, now);
                // What it wrote at once (a target's first tick after its seal) goes out now.
                self.server_items(site, &server, inc);
            }
            ToServer::Request { pending, request } => {
                let result = s.machine.serve(&request, now);
                let accepted = match (&request, &result) {
                    (server::Request::Assign { lease, .. }, Ok(server::Reply::Done))
                    | (server::Request::Continue { lease, .. }, Ok(server::Reply::Done))
                    | (server::Request::Regrant { lease, .. }, Ok(server::Reply::Done)) => {
                        Some((lease.bubble, lease.epoch))
                    }
                    _ => None,
                };
                if let Some((bubble, epoch)) = accepted {
                    self.checker.accepted(self.time.now(), site, &server, bubble, epoch);
                }
                self.server_items(site, &server, inc);
                let input = agent::Input::ServerReplied {
                    server: name(&server),
                    pending: *pending,
                    result: result.map_err(Failure::Refused),
                };
                let at = self.in_order((6, site, 0, inc), self.time.now() + LOCAL_US);
                let d = Delivery::ServerToAgent { site, server, inc, input };
                self.schedule_at(at, Event::Deliver(Box::new(d)));
            }
        }
    }

    /// What the server wrote goes to its agent, in order; updates are checked as written.
    fn server_items(&mut self, site: usize, server: &str, inc: u64) {
        while let Some(item) =
            self.servers[site].get_mut(server).and_then(|s| s.machine.poll_item())
        {
            if let Some(update) = update_of(&item) {
                let local = self.local_us(site);
                self.checker.tick(self.time.now(), local, site, server, update);
            }
            let input = agent::Input::ServerItem { server: name(server), item };
            let at = self.in_order((6, site, 0, inc), self.time.now() + LOCAL_US);
            let d = Delivery::ServerToAgent { site, server: server.to_owned(), inc, input };
            self.schedule_at(at, Event::Deliver(Box::new(d)));
        }
    }

    pub(super) fn server_tick(&mut self, site: usize, server: &str, inc: u64) {
        let now = self.server_instant(site);
        let Some(s) = self.servers[site].get_mut(server).filter(|s| s.inc == inc) else { return };
        s.machine.tick(now);
        let done =
            s.draining_until.map(|until| s.machine.regions() == 0 || self.time.now() >= until);
        self.server_items(site, server, inc);
        if done == Some(true) {
            self.kill_server(site, server, Some("exit status: 0"));
            return;
        }
        // The server's tick timer runs on its site's clock.
        let tick_local = u64::from(TICK_MS) * 1000;
        let next = self.time.global(site, self.local_us(site) + tick_local);
        self.schedule_at(next, Event::ServerTick(site, server.to_owned(), inc));
    }

    /// The load report, then where the game put the players of each region it runs.
    pub(super) fn server_second(&mut self, site: usize, server: &str, inc: u64) {
        let now = self.server_instant(site);
        let Some(s) = self.servers[site].get_mut(server).filter(|s| s.inc == inc) else { return };
        let mut requests = vec![s.machine.load()];
        requests.extend(s.machine.positions(now));
        self.server_requests(site, server, inc, requests);
        self.schedule(1_000_000, Event::ServerSecond(site, server.to_owned(), inc));
    }

    /// Requests of a server to its agent, delivered in order over the local hop.
    fn server_requests(
        &mut self,
        site: usize,
        server: &str,
        inc: u64,
        requests: Vec<server::Request>,
    ) {
        for request in requests {
            let token = self.ids.token();
            let input =
                agent::Input::ServerRequest { server: name(server), conn: inc, token, request };
            let at = self.in_order((6, site, 0, inc), self.time.now() + LOCAL_US);
            let d = Delivery::ServerToAgent { site, server: server.to_owned(), inc, input };
            self.schedule_at(at, Event::Deliver(Box::new(d)));
        }
    }

    /// SIGTERM (a pod deleted, a node drained): the server asks its agent to move its regions
    /// (`Drain`) and simulates on until it holds none, then exits, as `horizon_sdk::run`
    /// does (at its next tick here); after [`DRAIN_GRACE_US`] it exits all the same. Holding
    /// nothing, it exits at once.
    pub(super) fn drain_server(&mut self, site: usize, server: &str) {
        let until = self.time.now() + DRAIN_GRACE_US;
        let Some(s) = self.servers[site].get_mut(server) else { return };
        if s.draining_until.is_some() {
            return;
        }
        s.draining_until = Some(until);
        let (inc, regions) = (s.inc, s.machine.regions());
        self.note(format!("{}: server {server} told to stop ({regions} regions)", SITES[site]));
        if regions == 0 {
            self.kill_server(site, server, Some("exit status: 0"));
            return;
        }
        self.server_requests(site, server, inc, vec![server::Request::Drain]);
    }

    /// The server is gone at once (SIGKILL, or its own exit); its agent's driver notices the
    /// exit shortly, its connection ends at the idle timeout.
    /// With `ended`, the driver reports the exit and why (a crash, a drained server's exit);
    /// without, the agent stopped it.
    pub(super) fn kill_server(&mut self, site: usize, server: &str, ended: Option<&str>) {
        let Some(s) = self.servers[site].remove(server) else { return };
        let how = match ended {
            Some(why) if why.starts_with("signal") => "killed",
            Some(_) => "exited",
            None => "stopped",
        };
        self.note(format!(
            "{}: server {server} {how} ({} regions)",
            SITES[site],
            s.machine.regions()
        ));
        if let Some(why) = ended {
            let why = why.to_owned();
            let ended = agent::Input::ServerEnded { server: server.to_owned(), why };
            let d =
                Delivery::ServerToAgent { site, server: server.to_owned(), inc: 0, input: ended };
            let after = self.rng.below(EXIT_NOTICED_US);
            self.schedule(after, Event::Deliver(Box::new(d)));
        }
        let gone = agent::Input::ServerGone { server: name(server), conn: s.inc };
        let d = Delivery::ServerToAgent { site, server: server.to_owned(), inc: 0, input: gone };
        self.schedule(IDLE_US, Event::Deliver(Box::new(d)));
        // Requests queued in its lane fail at the idle timeout too.
        for (pending, _) in s.lane {
            let input = agent::Input::ServerReplied {
                server: name(server),
                pending,
                result: Err(Failure::TimedOut { ms: IDLE_US / 1000 }),
            };
            let d = Delivery::ServerToAgent { site, server: server.to_owned(), inc: 0, input };
            self.schedule(IDLE_US, Event::Deliver(Box::new(d)));
        }
    }

    /// The server of `site` holding the most regions (the largest bubble's, roughly).
    pub(super) fn busiest_server(&self, site: usize) -> Option<String> {
        self.servers[site]
            .iter()
            .filter(|(_, s)| s.machine.regions() > 0)
            .max_by_key(|(n, s)| (s.machine.regions(), std::cmp::Reverse((*n).clone())))
            .map(|(n, _)| n.clone())
    }

    /// The incarnation of `site`'s game server `server`, if it runs.
    pub(super) fn server_inc(&self, site: usize, server: &str) -> Option<u64> {
        self.servers[site].get(server).map(|s| s.inc)
    }

    /// The agent's `request` joins the lane to `server`; `Some(pending)`, handed back, if the
    /// server is gone.
    pub(super) fn queue_server_request(
        &mut self,
        site: usize,
        server: &str,
        pending: Pending,
        request: server::Request,
    ) -> Option<Pending> {
        let Some(s) = self.servers[site].get_mut(server) else { return Some(pending) };
        s.lane.push_back((pending, request));
        self.next_in_lane(site, server);
        None
    }

    /// `server` (incarnation `inc`) answered its lane's request: the next one goes out.
    pub(super) fn server_lane_free(&mut self, site: usize, server: &str, inc: u64) {
        if let Some(s) = self.servers[site].get_mut(server)
            && s.inc == inc
        {
            s.lane_busy = false;
            self.next_in_lane(site, server);
        }
    }

    /// Every game server of `site` is gone with its agent.
    pub(super) fn servers_gone(&mut self, site: usize) {
        self.servers[site].clear();
    }
}
