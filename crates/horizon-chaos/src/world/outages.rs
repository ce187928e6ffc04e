//! Faults carried out: cuts and heals, kills and restarts.

use super::*;

impl World {
    pub(super) fn fault_start(&mut self, i: usize) {
        let fault = self.faults[i].fault.clone();
        self.note(format!("FAULT {fault:?}"));
        let settled =
            self.last_fault_end.is_none_or(|end| self.time.now() > end + (LIVENESS_S * 1e6) as u64);
        let alone = self.in_force.is_empty() && settled;
        self.in_force.insert(i);
        // Another fault: the cut's players may be held up by it.
        self.route_watch = None;
        if let Fault::CutTransfer { sites, .. } = &fault
            && alone
        {
            let cut = [index(sites[0]), index(sites[1])];
            let now = self.time.now();
            let players = self.players_playing_at(&cut, now);
            self.route_watch = Some(RouteWatch { fault: i, since: now, players, late: false });
        }
        let for_us = (fault.duration_s() * 1e6) as u64;
        for site in fault.isolates() {
            if let Some(s) = SITES.iter().position(|n| *n == site) {
                // Its players cannot be expected to play meanwhile, nor for a while after.
                let until = self.time.now() + for_us + (LIVENESS_S * 1e6) as u64;
                self.isolated_until[s] = self.isolated_until[s].max(until);
            }
        }
        match fault {
            Fault::Partition { site, direction, .. } => {
                let s = index(site);
                let to_core = matches!(direction, Direction::Both | Direction::ToCore);
                let from_core = matches!(direction, Direction::Both | Direction::FromCore);
                let conn = self.cut_control(s, to_core, from_core);
                self.schedule(CONTROL_IDLE_US, Event::ControlIdle(s, conn));
            }
            Fault::CutTransfer { sites, .. } => {
                let (a, b) = (index(sites[0]), index(sites[1]));
                let pair = (a.min(b), a.max(b));
                if let Some(conn) = self.cut_transfer(pair) {
                    self.schedule(IDLE_US, Event::TransferIdle(pair, conn));
                }
            }
            Fault::KillServer { site } => {
                let s = index(site);
                if let Some(server) = self.busiest_server(s) {
                    self.kill_server(s, &server, Some("signal: 9 (SIGKILL)"));
                }
            }
            Fault::DrainServer { site } => {
                let s = index(site);
                if let Some(server) = self.busiest_server(s) {
                    self.drain_server(s, &server);
                }
            }
            Fault::RestartAgent { site, .. } => self.kill_agent(index(site)),
            Fault::RestartCore { .. } => self.kill_core(),
            Fault::Loss { site, rate, .. } => self.set_control_loss(index(site), rate),
            Fault::SlowDisk { ms, .. } => self.slow_disk((ms * 1000.0) as u64),
            Fault::StoreCut { .. } => self.cut_store(true),
            Fault::StoreLeaderChange => self.store_leader_change(),
        }
        if for_us > 0 {
            self.schedule(for_us, Event::FaultEnd(i));
        }
    }

    pub(super) fn fault_end(&mut self, i: usize) {
        let fault = self.faults[i].fault.clone();
        self.note(format!("HEALED {fault:?}"));
        self.in_force.remove(&i);
        self.last_fault_end = Some(self.time.now());
        if let Some(w) = self.route_watch.take_if(|w| w.fault == i)
            && !w.late
        {
            self.stats.cuts_routed_round += 1;
        }
        match fault {
            Fault::Partition { site, .. } => {
                let s = index(site);
                for (to_core, d) in self.heal_control(s) {
                    let delay = self.control_delay(s);
                    let kind = if to_core { 2 } else { 1 };
                    let at =
                        self.in_order((kind, s, 0, self.control_conn(s)), self.time.now() + delay);
                    self.schedule_at(at, Event::Deliver(Box::new(d)));
                }
            }
            Fault::CutTransfer { sites, .. } => {
                let (a, b) = (index(sites[0]), index(sites[1]));
                let pair = (a.min(b), a.max(b));
                for d in self.heal_transfer(pair) {
                    let delay = self.peer_delay(a, b);
                    let at = self.in_order((8, a, b, 0), self.time.now() + delay);
                    self.schedule_at(at, Event::Deliver(Box::new(d)));
                }
            }
            Fault::KillServer { .. } | Fault::DrainServer { .. } => {}
            Fault::RestartAgent { site, .. } => self.schedule(0, Event::AgentBack(index(site))),
            // With a standby, it has taken over already (`election.rs`).
            Fault::RestartCore { .. } if self.has_standby() => {}
            Fault::RestartCore { .. } => self.schedule(0, Event::CoreBack),
            Fault::Loss { site, .. } => self.set_control_loss(index(site), 0.0),
            Fault::SlowDisk { .. } => self.slow_disk(0),
            Fault::StoreCut { .. } => self.cut_store(false),
            Fault::StoreLeaderChange => {}
        }
    }

    /// The agent dies with its game servers (they never outlive it) and its players'
    /// connections; its links end.
    fn kill_agent(&mut self, site: usize) {
        self.agent_down(site);
        self.servers_gone(site);
        self.players_disconnected(site);
        // The core sees the connection end when the port refuses (at once, here).
        self.control_down(site, "agent killed");
        self.transfers_gone(site);
        self.forget_player_calls(site);
    }

    /// The agent starts again, knowing nothing; its players resume with their credentials (the
    /// core lists them at its registration).
    pub(super) fn agent_back(&mut self, site: usize) {
        let machine = self.new_agent(site);
        self.agent_started(site, machine);
        self.note(format!("{} agent started again", SITES[site]));
        self.after_agent(site);
        self.redial(site);
        for p in self.players_of(site) {
            let after = 500_000 + self.rng.below(3_000_000);
            self.schedule(after, Event::PlayerJoin(p));
        }
    }

    /// Until when (global µs) `site` was last isolated by a partition (0: never).
    pub(super) fn isolated_until(&self, site: usize) -> u64 {
        self.isolated_until[site]
    }

    /// The transfer cut watched, if one is: since when, and the players it holds to
    /// [`ROUTE_ROUND_S`].
    pub(super) fn route_watched(&self) -> Option<(u64, &[usize])> {
        self.route_watch.as_ref().map(|w| (w.since, w.players.as_slice()))
    }

    /// A player of the watched cut went [`ROUTE_ROUND_S`] without an update.
    pub(super) fn route_late(&mut self) {
        if let Some(w) = self.route_watch.as_mut() {
            w.late = true;
        }
    }
}

fn index(site: &str) -> usize {
    SITES.iter().position(|s| *s == site).unwrap_or_else(|| unreachable!("site {site}"))
}
