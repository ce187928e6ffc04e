//! A game server that is stopping (`Drain`: SIGTERM, a pod deleted, a node drained, a
//! scale-in) gives every region it holds to another ready server of this site, each with its
//! whole state, by the path an overfull server gives regions away by (`rehome.rs`: the core's
//! newer epoch fences it off first). It takes no region from then on, and the pool keeps a
//! spare server while it holds any (the last ready server of a site keeps its regions until
//! that one is ready). The part of a bubble spread over several servers moves alone, by a
//! regroup that takes another server for it (`parts.rs`: its members leave with their state
//! and join there; the other parts stay). A region busy at the time (handed over, regrouped,
//! regranted) is tried again at each housekeeping; what the server still holds when it
//! goes is lost and fails over from its copy, as after a crash. Either way the drain is
//! counted when the server goes (`horizon_agent_drains_total{outcome}`).

use super::*;

impl AgentMachine {
    /// An operator asked to drain `server` (`POST /servers/{name}/drain` on the admin API):
    /// its regions start moving now, and it is told to stop (SIGTERM; a pod's deletion), as a
    /// node drain would, so that it exits once they have. Refused for a server this agent does
    /// not know, one stopping already, and one holding regions with nowhere for them to go (no
    /// other ready server, and no room to start one under `servers.max`).
    pub(super) fn drain_asked(
        &mut self,
        server: &str,
        now: Instant,
    ) -> Result<String, horizon_admin::Refused> {
        use horizon_admin::Refused;
        let site = self.cfg.site.clone();
        let unknown = || Refused::NotFound(format!("no game server {server} at {site}"));
        let name = Name::new(server).map_err(|_| unknown())?;
        let s = self.fleet.get(&name).ok_or_else(unknown)?;
        if s.draining() {
            return Err(Refused::Conflict(format!("{server} is stopping already")));
        }
        let regions = s.regions().len();
        let elsewhere = self.fleet.iter().any(|(n, o)| *n != name && self.takes_regions(n, o));
        let room = self.fleet.len() < self.cfg.max_servers;
        if regions > 0 && !elsewhere && !room {
            return Err(Refused::Conflict(format!(
                "nowhere to go: {server} holds {regions} region(s), no other server of {site} takes regions, and servers.max ({}) is reached",
                self.cfg.max_servers
            )));
        }
        tracing::info!(site = %site, %server, regions, "drain asked by an operator");
        self.drain(&name, now);
        self.effects.push_back(Effect::TerminateServer { server: server.to_owned() });
        Ok(format!(
            "{server} told to stop: its {regions} region(s) move to other servers of {site} first (horizon_agent_drains_total)"
        ))
    }

    /// `server` said it is stopping.
    pub(super) fn drain(&mut self, server: &Name, now: Instant) {
        if !self.fleet.drain(server) {
            return;
        }
        let regions = self.fleet.get(server).map_or(0, |s| s.regions().len());
        tracing::info!(site = %self.cfg.site, %server, regions, "game server stopping: its regions move to other servers of the site");
        self.drain_regions(server, now);
        // It counts as ready no more: the pool starts its replacement.
        self.top_up_pool(now);
    }

    /// At each housekeeping: the regions of draining servers that could not move yet.
    pub(super) fn drain_servers(&mut self, now: Instant) {
        for server in self.fleet.draining_with_regions() {
            self.drain_regions(&server, now);
        }
    }

    /// Moves every region of `server` that may move now: with the core (without it, a region
    /// cannot be fenced off), and to a ready server (the last one of a site keeps its regions
    /// until the pool's next server is ready, rather than ask the core for a move that has
    /// nowhere to go).
    fn drain_regions(&mut self, server: &Name, now: Instant) {
        if !self.is_registered() {
            return;
        }
        let regions = self.fleet.get(server).map(|s| s.regions().to_vec()).unwrap_or_default();
        for bubble in regions {
            let players = self.members_on(server, bubble).max(1);
            // Part of a bubble spread over several servers: that part moves, by a regroup.
            let spread = self.bubbles.get(&bubble).is_some_and(|l| !l.extra().is_empty());
            if spread {
                self.drain_part(bubble, server, now);
                continue;
            }
            if !self.movable(bubble, server) {
                continue;
            }
            if self.server_for(bubble, players).is_none() {
                tracing::debug!(site = %self.cfg.site, %server, bubble = bubble.0, "a stopping game server keeps its region: no other server is ready yet");
                continue;
            }
            self.rehome(bubble, server, now);
        }
    }

    /// `server`, draining, is gone holding `left` regions: counted.
    pub(super) fn drained(&mut self, server: &Name, left: usize) {
        let outcome =
            if left == 0 { &self.stats.drains_moved } else { &self.stats.drains_failed_over };
        outcome.fetch_add(1, Ordering::Relaxed);
        if left > 0 {
            tracing::warn!(site = %self.cfg.site, %server, regions = left, "game server stopped before its regions could move: they fail over from their copies");
        }
    }
}
