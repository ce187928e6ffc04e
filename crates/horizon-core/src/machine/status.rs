//! The status document (`/status`) and the gauges refreshed before `/metrics` is rendered:
//! read-only views of the machine.

use std::collections::{BTreeMap, BTreeSet};

use horizon_mesh::Time;
use horizon_proto::PlayerId;

use super::CoreMachine;
use crate::metrics::HandoverOutcome;

/// Groups listed in the status JSON, largest first.
const STATUS_GROUPS: usize = 500;

impl CoreMachine {
    /// The exposition text served at `/metrics`.
    pub fn metrics_text(&mut self) -> String {
        self.refresh_gauges();
        horizon_admin::render(&self.metrics.registry)
    }

    /// The core's metrics registry (rendered by the admin API; gauges refreshed by
    /// [`CoreMachine::refresh_gauges`]).
    pub fn registry(&self) -> prometheus::Registry {
        self.metrics.registry.clone()
    }

    /// Sets the gauges from the registry and the agents' reports (after every step of the
    /// shell's loop).
    pub fn refresh_gauges(&mut self) {
        let n = self.cfg.sites.len();
        let mut bubbles = vec![0u64; n];
        for r in self.registry.values() {
            bubbles[r.site.index()] += 1;
        }
        let mut players = vec![0u64; n];
        for p in self.mesh.players() {
            players[p.home.index()] += 1;
        }
        for s in self.cfg.sites.ids() {
            let i = s.index();
            self.metrics.bubbles.set(i, bubbles[i]);
            self.metrics.players.set(i, players[i]);
            let agent = self.agents.get(&s);
            self.metrics.agent_connected.set(i, u64::from(agent.is_some()));
            let servers = agent.map_or(&[][..], |a| &a.servers[..]);
            let ready = servers.iter().filter(|s| s.ready).count() as u64;
            let busy = servers.iter().filter(|s| !s.bubbles.is_empty()).count() as u64;
            self.metrics.servers(s, ready, busy);
        }
    }

    /// The brain's proximity groups, each with its bubble (if all of it is in one) and homes.
    fn groups(&self) -> Vec<serde_json::Value> {
        let mut groups = self.mesh.groups();
        groups.sort_by_key(|g| std::cmp::Reverse(g.len()));
        groups
            .into_iter()
            .take(STATUS_GROUPS)
            .map(|g| {
                let mut homes: BTreeMap<String, usize> = BTreeMap::new();
                let mut bubbles = BTreeSet::new();
                for &p in &g {
                    if let Some(player) = self.mesh.player(p) {
                        *homes.entry(self.cfg.sites.name(player.home).to_string()).or_default() +=
                            1;
                    }
                    bubbles.insert(self.mesh.bubble_of(p).map(|b| b.id.0));
                }
                let bubble = match bubbles.len() {
                    1 => bubbles.into_iter().next().flatten(),
                    _ => None,
                };
                serde_json::json!({
                    "players": g.iter().map(|p| p.0).collect::<Vec<_>>(),
                    "homes": homes,
                    "bubble": bubble,
                })
            })
            .collect()
    }

    /// The status document served at `/status`.
    /// `page` says which players to list (ids above `after`, at most `limit`); the document says
    /// how many there are (`players_total`) and where the next page starts (`players_next`).
    pub fn status(&self, now: Time, page: horizon_admin::Page) -> serde_json::Value {
        let sites: Vec<serde_json::Value> = self
            .cfg
            .sites
            .ids()
            .map(|s| {
                let agent = self.agents.get(&s);
                serde_json::json!({
                    "site": self.cfg.sites.name(s).to_string(),
                    "core": s == self.cfg.sites.core(),
                    "agent_connected": agent.is_some(),
                    "players": self.mesh.players().iter().filter(|p| p.home == s).count(),
                    "bubbles": self.registry.values().filter(|r| r.site == s).count(),
                    "servers": agent.map_or(serde_json::Value::Null, |a| serde_json::json!(a.servers.iter().map(|x| serde_json::json!({
                        "server": x.server.to_string(), "tps": x.tps, "players": x.players, "ready": x.ready,
                        "bubbles": x.bubbles.iter().map(|b| b.0).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>())),
                    "backbone_rtt_ms": self.cfg.sites.ids().filter(|o| *o != s).map(|o| (self.cfg.sites.name(o).to_string(), self.mesh.sites().backbone_ms(s, o))).collect::<BTreeMap<_, _>>(),
                })
            })
            .collect();
        let bubbles: Vec<serde_json::Value> = self
            .registry
            .iter()
            .map(|(id, r)| {
                serde_json::json!({
                    "bubble": id.0,
                    "site": self.cfg.sites.name(r.site).to_string(),
                    "epoch": r.epoch,
                    "world": r.world,
                    "bounds": [[r.bounds.min.x, r.bounds.min.y, r.bounds.min.z], [r.bounds.max.x, r.bounds.max.y, r.bounds.max.z]],
                    "players": r.members.len(),
                    "homes": r.members.values().fold(BTreeMap::<String, usize>::new(), |mut m, h| { *m.entry(self.cfg.sites.name(*h).to_string()).or_default() += 1; m }),
                    "moving": r.moving.map(|h| h.0),
                    "restoring": r.restoring,
                    "tps": self.mesh.bubble_by_id(horizon_mesh::BubbleId(id.0)).map(|b| b.part_tps().to_vec()),
                    "parts": r.parts.iter().map(|b| [[b.min.x, b.min.y, b.min.z], [b.max.x, b.max.y, b.max.z]]).collect::<Vec<_>>(),
                })
            })
            .collect();
        let mut listed: Vec<&horizon_mesh::Player> =
            self.mesh.players().iter().filter(|p| page.after.is_none_or(|a| p.id.0 > a)).collect();
        listed.sort_by_key(|p| p.id.0);
        let limit = page.limit.max(1);
        let next = (listed.len() > limit).then(|| listed[limit - 1].id.0);
        listed.truncate(limit);
        let players: Vec<serde_json::Value> = listed
            .into_iter()
            .map(|p| {
                serde_json::json!({
                    "player": p.id.0,
                    "home": self.cfg.sites.name(p.home).to_string(),
                    "world": p.world.0,
                    "pos": [p.position.x, p.position.y, p.position.z],
                    "bubble": self.placed.get(&PlayerId(p.id.0)).map(|b| b.0),
                    "latency_ms": self.mesh.latency_of(p.id),
                })
            })
            .collect();
        serde_json::json!({
            "core": self.cfg.sites.name(self.cfg.sites.core()).to_string(),
            "generation": self.generation,
            "uptime_s": now.as_secs_f64(),
            "tick": self.mesh.last_stats(),
            "handovers": {
                "committed": self.metrics.handovers_ended(HandoverOutcome::Committed),
                "failed": self.metrics.handovers_ended(HandoverOutcome::Abandoned) + self.metrics.handovers_ended(HandoverOutcome::GivenUp),
                "in_flight": self.handovers.len(),
            },
            "stale_refused": {
                "copies": self.cfg.sites.ids().map(|s| self.metrics.backups_refused.get(s.index())).sum::<u64>(),
                "renewals": self.cfg.sites.ids().map(|s| self.metrics.leases_refused.get(s.index())).sum::<u64>(),
            },
            "failovers": self.cfg.sites.ids().map(|s| (self.cfg.sites.name(s).to_string(), self.metrics.failovers_to(s))).collect::<BTreeMap<_, _>>(),
            "sites": sites,
            "bubbles": bubbles,
            "groups": self.groups(),
            "players": players,
            "players_total": self.mesh.players().len(),
            "players_next": next,
            "recent_decisions": self.decisions.iter().rev().take(50).collect::<Vec<_>>(),
        })
    }
}
