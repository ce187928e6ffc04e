//! What runs on timers: universe backup copies, probes, restore deadlines, lease expiries, housekeeping.

use super::*;

impl AgentMachine {
    /// Asks each server for a copy of every bubble it runs; the copies go to the core.
    pub(super) fn backup(&mut self) {
        if !self.is_registered() {
            return;
        }
        let mut copies = Vec::new();
        let running = self.bubbles.iter().filter(|(id, b)| {
            b.phase() == Phase::Running && !self.regrouping(**id) && !self.rehome_granted(**id)
        });
        // A bubble whose players are changing servers is copied next time (a copy now would
        // miss the players in flight).
        for (_, local) in running {
            // A spread bubble: every part's server copies its own state.
            for name in local.servers().filter(|n| self.fleet.contains(n)) {
                copies.push((name.clone(), local.lease_ref()));
            }
        }
        for (server, lease) in copies {
            let request = server::Request::Copy { lease, deltas: false };
            self.ask_server(&server, Then::Nothing("backup copy"), request);
        }
    }

    /// Restores whose server did not run in time are refused: the core fails them over again.
    pub(super) fn restore_deadlines(&mut self, now: Instant) {
        for (bubble, token) in self.restores.late(now) {
            let fault = Fault::new(ErrorCode::NotReady, "the restored server did not run in time");
            self.answer(token, Err(fault));
            self.drop_bubble(bubble);
        }
    }

    /// Bubbles whose lease ran out by this agent's clock have stopped (their servers stop by
    /// their own clocks): this site's players in them are told they are reconnecting.
    pub(super) fn lease_expiries(&mut self, now: Instant) {
        let mut lapsed = Vec::new();
        for (&bubble, local) in self.bubbles.iter_mut() {
            if local.phase() != Phase::Running || now < local.valid_until() || !local.lapsed() {
                continue;
            }
            self.stats.leases_lapsed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(site = %self.cfg.site, bubble = bubble.0, epoch = local.lease().epoch.0, "lease expired: the bubble stopped here");
            lapsed.push(bubble);
        }
        for bubble in lapsed {
            self.tell_reconnecting(bubble);
        }
    }

    /// Bubbles refused by the core [`REFUSED_KEEP`] ago, not revoked since: released.
    fn refused_releases(&mut self, now: Instant) {
        let late: Vec<BubbleId> = self
            .bubbles
            .iter()
            .filter(|(_, b)| {
                b.refused_at().is_some_and(|t| now.saturating_duration_since(t) >= REFUSED_KEEP)
            })
            .map(|(&id, _)| id)
            .collect();
        for bubble in late {
            self.drop_bubble(bubble);
        }
    }

    pub(super) fn housekeeping(&mut self, now: Instant) {
        self.ask_platforms();
        self.stop_idle_servers(now);
        self.relieve_servers(now);
        self.drain_servers(now);
        let ready = self.fleet.ready_count() as u64;
        self.stats.servers_ready.store(ready, Ordering::Relaxed);
        self.stats.registered.store(u64::from(self.is_registered()), Ordering::Relaxed);
        self.players_housekeeping(now);
        self.transit.expire_stashed(now);
        self.server_deadlines(now);
        self.restore_deadlines(now);
        self.rehome_deadlines(now);
        self.crossing_deadlines(now);
        self.resume_deadlines(now);
        self.lease_expiries(now);
        self.refused_releases(now);
        self.top_up_pool(now);
    }
}
