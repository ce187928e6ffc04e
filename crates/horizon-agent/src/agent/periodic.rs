//! What runs on timers: universe backup copies, probes, restore deadlines, lease expiries, housekeeping.

use super::*;

impl Agent {
    /// Asks each server for a copy of every bubble it runs; the copies go to the core.
    pub(super) fn backup(&mut self) {
        if !self.registered {
            return;
        }
        for (&bubble, local) in &self.bubbles {
            if local.phase != Phase::Running {
                continue;
            }
            // A spread bubble: every part's server copies its own state.
            let lease = LeaseRef { bubble, epoch: local.lease.epoch };
            for name in local.servers() {
                let Some(srv) = self.servers.get(name) else { continue };
                let conn = srv.conn.clone();
                tokio::spawn(async move {
                    let _ = conn.request(&server::Request::Copy { lease, deltas: false }).await;
                });
            }
        }
    }

    pub(super) fn probe(&mut self) {
        let sent_us = now_us();
        for peer in self.peers.values_mut() {
            peer.probes_sent += 1;
            let _ =
                peer.conn.send_datagram(&transfer::Probe::Ping { seq: peer.probes_sent, sent_us });
        }
    }

    /// Restores whose server did not run in time are refused: the core fails them over again.
    pub(super) fn restore_deadlines(&mut self, now: Instant) {
        let late: Vec<BubbleId> = self
            .pending_restore
            .iter()
            .filter(|(_, (at, _))| now.duration_since(*at) > RESTORE_DEADLINE)
            .map(|(&b, _)| b)
            .collect();
        for bubble in late {
            if let Some((_, req)) = self.pending_restore.remove(&bubble) {
                let fault =
                    Fault::new(ErrorCode::NotReady, "the restored server did not run in time");
                tokio::spawn(req.reply(Err(fault)));
            }
            if let Some(local) = self.bubbles.remove(&bubble) {
                let lease = LeaseRef { bubble, epoch: local.lease.epoch };
                for name in local.servers() {
                    if let Some(srv) = self.servers.get_mut(name) {
                        srv.bubbles.retain(|b| *b != bubble);
                        let conn = srv.conn.clone();
                        tokio::spawn(async move {
                            let _ = conn.request(&server::Request::Release { lease }).await;
                        });
                    }
                }
            }
        }
    }

    /// Bubbles whose lease ran out by this agent's clock have stopped (their servers stop by
    /// their own clocks): this site's players in them are told they are reconnecting.
    pub(super) fn lease_expiries(&mut self, now: Instant) {
        for (&bubble, local) in self.bubbles.iter_mut() {
            if local.phase != Phase::Running || now < local.valid_until || local.told_reconnecting {
                continue;
            }
            local.told_reconnecting = true;
            tracing::warn!(site = %self.site, bubble = bubble.0, epoch = local.lease.epoch.0, "lease expired: the bubble stopped here");
            for gw in self.players.values_mut() {
                if gw.session.route().is_some_and(|(b, s)| *b == bubble && *s == self.site) {
                    gw.session.told();
                    let reason =
                        format!("{} lost its lease on this part of the universe", self.site);
                    let _ = gw.out.try_send(gateway::Item::Reconnecting { reason });
                }
            }
        }
    }

    pub(super) fn housekeeping(&mut self) {
        let players: Vec<PlayerId> = self.players.keys().copied().collect();
        for p in players {
            self.resend(p, false);
        }
        let now = Instant::now();
        for gw in self.players.values_mut() {
            if gw.session.stalled(now) {
                let reason = "the simulation is unreachable for now".to_owned();
                let _ = gw.out.try_send(gateway::Item::Reconnecting { reason });
            }
        }
        let now = Instant::now();
        self.crossings.retain(|_, c| now.duration_since(c.at) < CROSSING_TTL);
        while self.waiting.front().is_some_and(|(at, _)| now.duration_since(*at) > SERVER_WAIT) {
            if let Some((_, req)) = self.waiting.pop_front() {
                let fault = Fault::new(
                    ErrorCode::NotReady,
                    format!("no game server ready at {} in time", self.site),
                );
                tokio::spawn(req.reply(Err(fault)));
            }
        }
        let late: Vec<String> = self
            .starting
            .iter()
            .filter(|(_, at)| now.duration_since(**at) > START_TIMEOUT)
            .map(|(n, _)| n.clone())
            .collect();
        for name in late {
            tracing::warn!(site = %self.site, server = %name, "server never registered: stopped");
            self.starting.remove(&name);
            self.driver.stop(&name);
        }
        for (name, why) in self.driver.poll_ended() {
            tracing::warn!(site = %self.site, server = %name, %why, "game server ended");
            self.starting.remove(&name);
            // Its exit is seen here within a housekeeping period, long before its connection
            // times out.
            if let Ok(name) = Name::new(name) {
                self.server_lost(&name, &format!("exited: {why}"));
            }
        }
        self.restore_deadlines(now);
        self.resume_deadlines(now);
        self.lease_expiries(now);
        self.top_up_pool();
    }
}
