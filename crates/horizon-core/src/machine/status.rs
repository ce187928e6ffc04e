//! The status document (`/status`) and the gauges the metrics read (`stats.rs`), refreshed
//! after every step of the shell's loop: read-only views of the machine.

use std::collections::{BTreeMap, BTreeSet};

use horizon_mesh::{PlacementRule, Time, Verdict};
use horizon_proto::PlayerId;

use super::CoreMachine;
use super::registry::Hosted;
use crate::stats::HandoverOutcome;
use crate::status::{
    BubbleStatus, Candidate, CarvingStatus, Change, CoreStatus, Explain, GroupStatus,
    HandoverCounts, PlayerStatus, PoolBounds, RegionLife, Rules, ServerStatus, SiteStatus,
    StaleRefused, ZoneChanges, ZoneStatus,
};

/// Groups listed in the status JSON, largest first.
const STATUS_GROUPS: usize = 500;

impl CoreMachine {
    /// What the core counts, read by its metrics at each scrape (gauges refreshed by
    /// [`CoreMachine::refresh_gauges`]).
    pub(crate) fn stats(&self) -> std::sync::Arc<crate::stats::CoreStats> {
        self.stats.clone()
    }

    /// Zone splits and merges this core carried out: `(splits, merges)`.
    pub fn zone_changes(&self) -> (u64, u64) {
        self.stats.zone_changes()
    }

    /// Bubbles carved out of the core site's zones and dissolved back into them, since start.
    pub fn carves(&self) -> (u64, u64) {
        self.stats.carves()
    }

    /// Sets the gauges from the registry and the agents' reports (after every step of the
    /// shell's loop).
    pub fn refresh_gauges(&mut self) {
        let n = self.cfg.sites.len();
        let (mut bubbles, mut simulated) = (vec![0u64; n], vec![0u64; n]);
        for (b, r) in &self.registry {
            bubbles[r.site().index()] += u64::from(!b.is_zone());
            simulated[r.site().index()] += r.members().len() as u64;
        }
        let (mut players, mut unsimulated) = (vec![0u64; n], vec![0u64; n]);
        for p in self.mesh.players() {
            players[p.home.index()] += 1;
        }
        // In no bubble (few): simulated if the core placed them in their zone.
        for p in self.mesh.unsimulated().filter(|p| self.placed_in(p.id).is_none()) {
            unsimulated[p.home.index()] += 1;
        }
        self.stats.zones.set(self.mesh.zones().count() as u64);
        for s in self.cfg.sites.ids() {
            let i = s.index();
            self.stats.bubbles.set(i, bubbles[i]);
            self.stats.players.set(i, players[i]);
            self.stats.players_simulated.set(i, simulated[i]);
            self.stats.unsimulated.set(i, unsimulated[i]);
            let agent = self.agents.get(s);
            self.stats.agent_connected.set(i, u64::from(agent.is_some()));
            let servers = agent.map_or(&[][..], |a| &a.servers[..]);
            let ready = servers.iter().filter(|s| s.ready).count() as u64;
            let busy = servers.iter().filter(|s| !s.bubbles.is_empty()).count() as u64;
            self.stats.servers(s, ready, busy);
        }
    }

    /// The brain's proximity groups, each with its bubble (if all of it is in one) and homes.
    /// The largest groups; with `private`, their player ids (else only their homes).
    fn groups(&self, private: bool) -> Vec<GroupStatus> {
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
                let players = if private { g.iter().map(|p| p.0).collect() } else { Vec::new() };
                GroupStatus { players, homes, bubble }
            })
            .collect()
    }

    /// Why a bubble is where it is, with site names.
    fn explain(&self, e: &horizon_mesh::Explanation) -> Explain {
        let name = |s: horizon_mesh::SiteId| self.cfg.sites.name(s).to_string();
        let st = &e.standing;
        Explain {
            rule: match e.rule {
                PlacementRule::Scored => "scored",
                PlacementRule::Delegated { .. } => "delegated",
                PlacementRule::Never(_) => "never",
                PlacementRule::FailingOver => "failing_over",
            }
            .to_owned(),
            counted: e.counted,
            weight: e.weight,
            candidates: e
                .candidates
                .iter()
                .map(|c| Candidate {
                    site: name(c.site),
                    cost_ms: c.cost_per_player_ms,
                    worst_ms: c.worst_ms,
                    breaks_cap: c.breaks_cap,
                    can_host: c.can_host,
                })
                .collect(),
            best: name(e.best),
            gain_ms: st.gain_ms,
            fixes_cap: st.fixes_cap,
            verdict: match st.verdict {
                Verdict::Stay => "stay",
                Verdict::Wait => "wait",
                Verdict::Move(_) => "move",
            }
            .to_owned(),
            dwell_s: st.dwelt.as_secs_f64(),
            hold_left_s: st.hold_left.as_secs_f64(),
            words: e.words(self.mesh.sites(), self.mesh.thresholds()),
        }
    }

    /// Where region `id` runs (the servers its holder last reported), since when, and its
    /// last change.
    fn life(&self, id: horizon_proto::BubbleId, r: &Hosted, now: Time) -> RegionLife {
        let servers = self.agents.get(r.site()).map_or_else(Vec::new, |agent| {
            agent
                .servers
                .iter()
                .filter(|s| s.bubbles.contains(&id))
                .map(|s| s.server.to_string())
                .collect()
        });
        RegionLife {
            servers,
            age_s: now.since(r.since()).as_secs_f64(),
            last_change: r
                .changed()
                .as_ref()
                .map(|(t, text)| Change { t_ms: t.as_ms(), text: text.clone() }),
        }
    }

    /// The status document served at `/status`.
    /// `page` says which players to list (ids above `after`, at most `limit`); the document says
    /// how many there are (`players_total`) and where the next page starts (`players_next`).
    pub fn status(&self, now: Time, page: horizon_admin::Page) -> CoreStatus {
        let name = |s: horizon_mesh::SiteId| self.cfg.sites.name(s).to_string();
        let bounds =
            |b: &horizon_proto::Aabb| [[b.min.x, b.min.y, b.min.z], [b.max.x, b.max.y, b.max.z]];
        // Each member under their home (a measured one, else their gateway's site).
        let homes = |r: &Hosted| {
            r.members().iter().fold(BTreeMap::new(), |mut m, (p, gateway)| {
                let home = self.mesh.player(*p).map_or(*gateway, |p| p.home);
                *m.entry(name(home)).or_default() += 1;
                m
            })
        };

        let sites = self
            .cfg
            .sites
            .ids()
            .map(|s| {
                let agent = self.agents.get(s);
                let servers = agent.map(|a| {
                    a.servers
                        .iter()
                        .map(|x| ServerStatus {
                            server: x.server.to_string(),
                            tps: x.tps,
                            players: x.players,
                            ready: x.ready,
                            bubbles: x.bubbles.iter().map(|b| b.0).collect(),
                        })
                        .collect()
                });
                SiteStatus {
                    site: name(s),
                    core: s == self.cfg.sites.core(),
                    agent_connected: agent.is_some(),
                    admin: agent.map(|a| a.admin.clone()).filter(|a| !a.is_empty()),
                    players: self.mesh.players().iter().filter(|p| p.home == s).count(),
                    bubbles: self
                        .registry
                        .iter()
                        .filter(|(b, r)| r.site() == s && !b.is_zone())
                        .count(),
                    servers,
                    backbone_rtt_ms: self
                        .cfg
                        .sites
                        .ids()
                        .filter(|o| *o != s)
                        .map(|o| (name(o), self.mesh.sites().backbone_ms(s, o)))
                        .collect(),
                    pool: agent.and_then(|a| a.pool).map(|(warm, max)| PoolBounds { warm, max }),
                }
            })
            .collect();
        let explained: BTreeMap<horizon_proto::BubbleId, horizon_mesh::Explanation> =
            self.mesh.explain_all(now).into_iter().map(|e| (e.bubble, e)).collect();
        let bubbles = self
            .registry
            .iter()
            .filter(|(id, _)| !id.is_zone())
            .map(|(id, r)| BubbleStatus {
                bubble: id.0,
                site: name(r.site()),
                epoch: r.epoch(),
                world: r.world(),
                bounds: bounds(&r.bounds()),
                players: r.members().len(),
                homes: homes(r),
                moving: r.moving().map(|h| h.0),
                restoring: r.restoring(),
                tps: self.mesh.bubble_by_id(*id).map(|b| b.part_tps()),
                parts: r.parts().iter().map(bounds).collect(),
                load: self.mesh.bubble_counting(*id, now).unwrap_or_default(),
                life: self.life(*id, r, now),
                explain: explained.get(id).map(|e| self.explain(e)),
            })
            .collect();
        // Player ids and positions only for an authenticated reader (horizon-admin's Access).
        let mut listed: Vec<&horizon_mesh::Player> = self
            .mesh
            .players()
            .iter()
            .filter(|p| page.private && page.after.is_none_or(|a| p.id.0 > a))
            .collect();
        listed.sort_by_key(|p| p.id.0);
        let limit = page.limit.max(1);
        let next = (listed.len() > limit).then(|| listed[limit - 1].id.0);
        listed.truncate(limit);
        let players = listed
            .into_iter()
            .map(|p| PlayerStatus {
                player: p.id.0,
                home: name(p.home),
                gateway: name(p.gateway),
                home_measured: p.home_measured,
                world: p.world.0,
                pos: [p.position.x, p.position.y, p.position.z],
                bubble: self.placed_in(PlayerId(p.id.0)).map(|b| b.0),
                latency_ms: self.mesh.latency_of(p.id),
            })
            .collect();
        let ended = |o| self.stats.handovers_ended(o);
        // Groups in the zones counting towards a carve, with the zone each plays in.
        let (site_names, th) = (self.mesh.sites(), self.mesh.thresholds());
        let carvings: Vec<(Option<horizon_proto::BubbleId>, CarvingStatus)> = self
            .mesh
            .carvings()
            .into_iter()
            .map(|c| {
                let zone = self.mesh.zone_of(c.first).map(|z| z.id);
                let status = CarvingStatus {
                    first: c.first.0,
                    players: c.players,
                    site: site_names.name(c.site).to_string(),
                    gain_ms: c.gain_ms,
                    dwelt_s: now.since(c.since).as_secs_f64(),
                    words: c.words(site_names, th, now),
                };
                (zone, status)
            })
            .collect();
        let per_site =
            |c: &crate::stats::PerSite| self.cfg.sites.ids().map(|s| c.get(s.index())).sum::<u64>();
        let (links, routes) = self.links_status();
        CoreStatus {
            core: name(self.cfg.sites.core()),
            generation: self.generation(),
            leases_granted: self.leases_granted(),
            stage: self.cfg.stage.as_str().to_owned(),
            measure: self
                .measure
                .status(self.mesh.sites(), |p| self.mesh.player(p).map(|p| p.home)),
            uptime_s: now.as_secs_f64(),
            tick: self.mesh.last_stats(),
            handovers: HandoverCounts {
                committed: ended(HandoverOutcome::Committed),
                failed: ended(HandoverOutcome::Abandoned) + ended(HandoverOutcome::GivenUp),
                in_flight: self.handovers_in_flight(),
            },
            stale_refused: StaleRefused {
                copies: per_site(&self.stats.backups_refused),
                renewals: per_site(&self.stats.leases_refused),
            },
            failovers: self
                .cfg
                .sites
                .ids()
                .map(|s| (name(s), self.stats.failovers_to(s)))
                .collect(),
            restores: self.stats.restores_by_copy(),
            sites,
            bubbles,
            zones: self
                .mesh
                .zones()
                .map(|z| {
                    let reg = self.registry.get(&z.id);
                    let carving = carvings
                        .iter()
                        .filter(|(zone, _)| *zone == Some(z.id))
                        .map(|(_, c)| c.clone())
                        .collect();
                    ZoneStatus {
                        zone: z.id.0,
                        epoch: z.epoch.0,
                        world: z.world.0,
                        bounds: bounds(&z.bounds),
                        players: z.players,
                        members: reg.map_or(0, |r| r.members().len()),
                        restoring: reg.is_some_and(Hosted::restoring),
                        site: name(reg.map_or(self.cfg.sites.core(), |r| r.site())),
                        homes: reg.map(homes).unwrap_or_default(),
                        load: self.mesh.zone_counting(z.id, now),
                        carving,
                        life: reg.map(|r| self.life(z.id, r, now)).unwrap_or_default(),
                    }
                })
                .collect(),
            zone_changes: {
                let (splits, merges) = self.stats.zone_changes();
                ZoneChanges { splits, merges }
            },
            groups: self.groups(page.private),
            players,
            players_total: self.mesh.players().len(),
            players_next: next,
            recent_decisions: self.decisions.newest_first().take(50).cloned().collect(),
            timeline: self.timeline.newest_first().cloned().collect(),
            rules: Rules {
                cap_ms: self.cfg.thresholds.cap_ms,
                gain_ms: self.cfg.thresholds.gain_ms,
                dwell_s: self.cfg.thresholds.dwell_ms as f64 / 1000.0,
                hold_s: self.cfg.thresholds.hold_ms as f64 / 1000.0,
            },
            links,
            routes,
        }
    }
}
