//! Runs a scenario through the real brain in virtual time, checking invariants after every step.

use std::collections::BTreeMap;

use horizon_mesh::{
    Command, ConfigError, DeleteReason, Generation, Mesh, MeshConfig, MoveReason, PlayerId,
    PlayerUpdate, SiteId, Time,
};
use serde::Serialize;

use crate::population::servers::Servers;
use crate::scenario::{EventKind, Scenario};

/// A box as `[x0, y0, z0]..[x1, y1, z1]`, whole metres.
fn boxed(b: &horizon_mesh::Aabb) -> String {
    let c = |v: horizon_mesh::Vec3| format!("[{:.0}, {:.0}, {:.0}]", v.x, v.y, v.z);
    format!("{}..{}", c(b.min), c(b.max))
}

/// A run that could not complete.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error("configuration refused by the mesh: {0:?}")]
    Config(Vec<ConfigError>),
    /// A broken invariant is a bug in the brain: the seed and time reproduce it.
    #[error("invariant broken at t = {t_s} s (seed {seed}): {what}")]
    Invariant { seed: u64, t_s: f64, what: String },
}

/// One change of the site simulating a group of players.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MoveRecord {
    pub t_s: f64,
    pub players: Vec<String>,
    pub from: String,
    pub to: String,
    pub reason: String,
}

/// Where a player ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FinalPlayer {
    pub site: String,
    pub latency_ms: f64,
}

/// One line of the readable timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelineEntry {
    pub t_s: f64,
    pub kind: &'static str,
    pub text: String,
}

/// Counters over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunStats {
    pub ticks: u64,
    pub created: u64,
    pub moved: u64,
    pub merged: u64,
    pub deleted: u64,
    pub borders: u64,
    pub load_changes: u64,
    pub stalled: u64,
    pub max_bubbles: u64,
    pub max_servers: u64,
    pub max_zones: u64,
    /// The most counted players one region (a zone, a bubble's part) held at a tick.
    pub largest_region: u64,
    /// Region-seconds over `players_per_server`: at each tick, the regions over it times the
    /// tick (design.md §4: SMD's rule cuts each within its samples and the settle window).
    pub over_capacity_region_s: f64,
}

/// The result of a run. Serialised as the `--json` document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub name: String,
    pub seed: u64,
    pub duration_s: f64,
    pub tick_s: f64,
    pub moves: Vec<MoveRecord>,
    #[serde(rename = "final")]
    pub final_players: BTreeMap<String, FinalPlayer>,
    /// Bubbles alive at the end, per site.
    pub bubbles_by_site: BTreeMap<String, u32>,
    /// Game servers simulating bubbles at the end, per site.
    pub servers_by_site: BTreeMap<String, u32>,
    /// The most game servers each site ran at once, regions (bubbles' parts and zones) packed
    /// several to a server as the agents seat them.
    pub max_servers_by_site: BTreeMap<String, u32>,
    /// Zones at the end: `{count, splits, merges}`.
    pub zones: ZoneCounts,
    pub stats: RunStats,
    pub timeline: Vec<TimelineEntry>,
}

/// Zones over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ZoneCounts {
    pub count: u32,
    pub splits: u64,
    pub merges: u64,
}

/// How to run a scenario beyond its file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Add an `explain` line to the timeline whenever a bubble's explanation changes (its site,
    /// the best site, the verdict): why it is where it is, as the console shows it
    /// ([`horizon_mesh::Explanation::words`]).
    pub explain: bool,
}

struct Run<'a> {
    sc: &'a Scenario,
    options: RunOptions,
    /// Per bubble, what its last `explain` line said: (site, best, verdict, rule).
    explained: BTreeMap<horizon_mesh::BubbleId, (SiteId, SiteId, &'static str, &'static str)>,
    /// Per group in the zones counting towards a carve (its smallest player id), the site its
    /// last `explain` line named.
    explained_carving: BTreeMap<PlayerId, SiteId>,
    mesh: Mesh,
    servers: Servers,
    names: Vec<String>,
    site_of: BTreeMap<PlayerId, SiteId>,
    last_move: BTreeMap<horizon_mesh::BubbleId, Time>,
    report: Report,
}

/// Runs `sc` to its end.
pub fn run(sc: &Scenario) -> Result<Report, RunError> {
    run_with(sc, RunOptions::default())
}

/// Runs `sc` to its end with `options`.
pub fn run_with(sc: &Scenario, options: RunOptions) -> Result<Report, RunError> {
    let config = MeshConfig {
        sites: sc.sites.clone(),
        thresholds: sc.thresholds.clone(),
        generation: Generation(1),
        placement: sc.placement,
        zones: sc.zones.clone(),
    };
    let mut mesh = Mesh::new(config, Time::ZERO).map_err(RunError::Config)?;
    for &(site, ready) in &sc.ready {
        mesh.handle_site_capacity(site, ready);
    }
    let mut run = Run {
        sc,
        options,
        explained: BTreeMap::new(),
        explained_carving: BTreeMap::new(),
        servers: Servers::new(sc.sites.len(), &sc.thresholds, sc.tick_ms as f64 / 1000.0),
        mesh,
        names: sc.players.iter().map(|p| p.name.clone()).collect(),
        site_of: BTreeMap::new(),
        last_move: BTreeMap::new(),
        report: Report {
            name: sc.name.clone(),
            seed: sc.seed,
            duration_s: sc.duration_ms as f64 / 1000.0,
            tick_s: sc.tick_ms as f64 / 1000.0,
            moves: Vec::new(),
            final_players: BTreeMap::new(),
            bubbles_by_site: BTreeMap::new(),
            servers_by_site: BTreeMap::new(),
            max_servers_by_site: BTreeMap::new(),
            zones: ZoneCounts::default(),
            stats: RunStats::default(),
            timeline: Vec::new(),
        },
    };
    run.go()?;
    Ok(run.report)
}

impl Run<'_> {
    fn name(&self, id: PlayerId) -> &str {
        &self.names[(id.0 - 1) as usize]
    }

    fn site(&self, s: SiteId) -> String {
        self.mesh.sites().name(s).to_string()
    }

    fn note(&mut self, now: Time, kind: &'static str, text: String) {
        self.report.timeline.push(TimelineEntry { t_s: now.as_secs_f64(), kind, text });
    }

    fn list(&self, players: &[PlayerId]) -> String {
        const SHOWN: usize = 8;
        let mut s: Vec<&str> = players.iter().take(SHOWN).map(|&p| self.name(p)).collect();
        let more = players.len().saturating_sub(SHOWN);
        let extra = if more > 0 { format!(" … (+{more})") } else { String::new() };
        s.sort_unstable();
        format!("{}{extra}", s.join(" "))
    }

    fn go(&mut self) -> Result<(), RunError> {
        let sc = self.sc;
        let mut joins: Vec<usize> = (0..sc.players.len()).collect();
        joins.sort_by_key(|&i| (sc.players[i].join_ms, i));
        let mut leaves: Vec<usize> =
            (0..sc.players.len()).filter(|&i| sc.players[i].leave_ms.is_some()).collect();
        leaves.sort_by_key(|&i| (sc.players[i].leave_ms, i));
        let (mut next_join, mut next_leave, mut next_event) = (0, 0, 0);
        let mut link_up = vec![true; sc.sites.len()];
        let mut t_ms = 0u64;
        let mut prev_ms = 0u64;
        loop {
            let now = Time::from_ms(t_ms);
            let dt_s = (t_ms - prev_ms) as f64 / 1000.0;
            // Motion since the previous step.
            if dt_s > 0.0 {
                let moving: Vec<(PlayerId, horizon_mesh::Vec3)> = self
                    .mesh
                    .players()
                    .iter()
                    .filter(|p| p.velocity.norm_sq() > 0.0)
                    .map(|p| (p.id, p.position + p.velocity * dt_s))
                    .collect();
                for (id, pos) in moving {
                    let update = PlayerUpdate { position: Some(pos), ..Default::default() };
                    self.mesh
                        .handle_update(id, &update)
                        .map_err(|e| self.broken(now, e.to_string()))?;
                }
            }
            let first_join = next_join;
            while next_join < joins.len() && sc.players[joins[next_join]].join_ms <= t_ms {
                let p = &sc.players[joins[next_join]];
                self.mesh
                    .handle_join(p.join.clone())
                    .map_err(|e| self.broken(now, e.to_string()))?;
                next_join += 1;
            }
            // Placed at once, as the core does (design.md §4): see `Mesh::place_arrival`.
            for &i in &joins[first_join..next_join] {
                self.mesh.place_arrival(sc.players[i].join.id, now);
            }
            while next_event < sc.events.len() && sc.events[next_event].at_ms <= t_ms {
                match &sc.events[next_event].kind {
                    EventKind::Player { player, update } => {
                        if self.mesh.handle_update(*player, update).is_err() {
                            let text =
                                format!("event for {} ignored: not connected", self.name(*player));
                            self.note(now, "warning", text);
                        }
                    }
                    EventKind::SiteCapacity { site, ready } => {
                        self.mesh.handle_site_capacity(*site, *ready);
                        let n = ready.map_or("unlimited".to_owned(), |n| n.to_string());
                        let text = format!("{}: {n} ready servers", self.site(*site));
                        self.note(now, "site", text);
                    }
                    EventKind::SiteLink { site, up } => {
                        self.mesh.handle_site_link(*site, *up);
                        link_up[site.index()] = *up;
                        let text = format!(
                            "{}: link to core {}",
                            self.site(*site),
                            if *up { "up" } else { "down" }
                        );
                        self.note(now, "site", text);
                    }
                }
                next_event += 1;
            }
            while next_leave < leaves.len()
                && sc.players[leaves[next_leave]].leave_ms.is_some_and(|l| l <= t_ms)
            {
                let id = sc.players[leaves[next_leave]].join.id;
                if self.mesh.handle_leave(id).is_ok() {
                    self.site_of.remove(&id);
                }
                next_leave += 1;
            }
            // The agents of sites with a link renew their leases, one batch per site.
            for site in sc.sites.ids() {
                if link_up[site.index()] {
                    let batch = self.mesh.leases_held(site);
                    let _ = self.mesh.handle_renewal(site, &batch, now);
                }
            }
            self.mesh.handle_timeout(now);
            self.report.stats.ticks += 1;
            while let Some(cmd) = self.mesh.poll_command() {
                self.apply(now, cmd)?;
            }
            self.check(now)?;
            if self.options.explain {
                self.explain(now);
            }
            if t_ms >= sc.duration_ms {
                break;
            }
            prev_ms = t_ms;
            t_ms = (t_ms + sc.tick_ms).min(sc.duration_ms);
        }
        self.finish();
        Ok(())
    }

    /// An `explain` line for every bubble whose site, best site, verdict or rule changed, and
    /// for every group in the zones that starts counting towards a carve (or to another site).
    fn explain(&mut self, now: Time) {
        let carvings = self.mesh.carvings();
        self.explained_carving.retain(|p, _| carvings.iter().any(|c| c.first == *p));
        for c in carvings {
            if self.explained_carving.insert(c.first, c.site) == Some(c.site) {
                continue;
            }
            let words = c.words(self.mesh.sites(), self.mesh.thresholds(), now);
            let text = format!("{} in the zones: {words}", self.name(c.first));
            self.note(now, "explain", text);
        }
        let all = self.mesh.explain_all(now);
        let live: std::collections::BTreeSet<_> = all.iter().map(|e| e.bubble).collect();
        self.explained.retain(|b, _| live.contains(b));
        for e in all {
            let id = e.bubble;
            let verdict = match e.standing.verdict {
                horizon_mesh::Verdict::Stay => "stay",
                horizon_mesh::Verdict::Wait => "wait",
                horizon_mesh::Verdict::Move(_) => "move",
            };
            let rule = match e.rule {
                horizon_mesh::PlacementRule::Scored => "scored",
                horizon_mesh::PlacementRule::Delegated { .. } => "delegated",
                horizon_mesh::PlacementRule::Never(_) => "never",
                horizon_mesh::PlacementRule::FailingOver => "failing_over",
            };
            let key = (e.site, e.best, verdict, rule);
            if self.explained.insert(id, key) == Some(key) {
                continue;
            }
            let costs: Vec<String> = e
                .candidates
                .iter()
                .map(|c| {
                    format!(
                        "{} {:.1} ms{}",
                        self.site(c.site),
                        c.cost_per_player_ms,
                        if c.breaks_cap { " (over the cap)" } else { "" }
                    )
                })
                .collect();
            let words = e.words(self.mesh.sites(), self.mesh.thresholds());
            let text =
                format!("{id} on {}: {words} Per player: {}.", self.site(e.site), costs.join(", "));
            self.note(now, "explain", text);
        }
    }

    fn broken(&self, now: Time, what: String) -> RunError {
        RunError::Invariant { seed: self.sc.seed, t_s: now.as_secs_f64(), what }
    }

    /// Records a change of site for the listed players that actually change.
    fn record_move(&mut self, now: Time, players: &[PlayerId], to: SiteId, reason: &str) {
        let mut by_from: BTreeMap<SiteId, Vec<PlayerId>> = BTreeMap::new();
        for &p in players {
            if let Some(prev) = self.site_of.insert(p, to)
                && prev != to
            {
                by_from.entry(prev).or_default().push(p);
            }
        }
        for (from, ps) in by_from {
            let mut names: Vec<String> = ps.iter().map(|&p| self.name(p).to_owned()).collect();
            names.sort();
            self.report.moves.push(MoveRecord {
                t_s: now.as_secs_f64(),
                players: names,
                from: self.site(from),
                to: self.site(to),
                reason: reason.to_owned(),
            });
        }
    }

    fn apply(&mut self, now: Time, cmd: Command) -> Result<(), RunError> {
        let s = &mut self.report.stats;
        match cmd {
            Command::Create { bubble, site, players, reason, .. } => {
                s.created += 1;
                // Fresh connections have no site yet: recording them logs no move.
                self.record_move(now, &players, site, reason.as_str());
                let text = format!(
                    "{bubble} on {} for {} ({})",
                    self.site(site),
                    self.list(&players),
                    reason.as_str()
                );
                self.note(now, "create", text);
            }
            Command::Move { bubble, from, to, players, reason, .. } => {
                s.moved += 1;
                if matches!(reason, MoveReason::Gain | MoveReason::Cap) {
                    let hold = horizon_mesh::Span::from_ms(self.sc.thresholds.hold_ms);
                    if let Some(&last) = self.last_move.get(&bubble)
                        && now.since(last) < hold
                    {
                        return Err(
                            self.broken(now, format!("{bubble} moved twice within the hold time"))
                        );
                    }
                }
                self.last_move.insert(bubble, now);
                let r = reason.as_str();
                self.record_move(now, &players, to, r);
                let text = format!(
                    "{bubble} {} -> {}: {} ({r})",
                    self.site(from),
                    self.site(to),
                    self.list(&players)
                );
                self.note(now, "move", text);
            }
            Command::Enter { bubble, site, from_site, players } => {
                // Fresh connections have no site yet: recording them logs no move.
                self.record_move(now, &players, site, "border");
                let from = from_site.map_or("connection".to_owned(), |s| self.site(s));
                let text =
                    format!("{bubble} on {} from {from}: {}", self.site(site), self.list(&players));
                self.note(now, "enter", text);
            }
            Command::Merge { into, from, from_site, into_site, players } => {
                s.merged += 1;
                self.record_move(now, &players, into_site, "merge");
                let text = format!(
                    "{from} ({}) into {into} ({}): {}",
                    self.site(from_site),
                    self.site(into_site),
                    self.list(&players)
                );
                self.note(now, "merge", text);
            }
            Command::Delete { bubble, site, reason, .. } => {
                s.deleted += 1;
                let why = match reason {
                    DeleteReason::Empty => "empty",
                    DeleteReason::Stage => "stage",
                    DeleteReason::Dissolve => "dissolve",
                };
                if reason != DeleteReason::Empty {
                    // Its players went back into the core site's zones: those recorded on its
                    // site who are in no bubble now.
                    let back: Vec<PlayerId> = self
                        .site_of
                        .iter()
                        .filter(|&(&p, &s)| s == site && self.mesh.bubble_of(p).is_none())
                        .map(|(&p, _)| p)
                        .collect();
                    self.record_move(now, &back, self.mesh.sites().core(), why);
                }
                let text = format!("{bubble} on {} ({why})", self.site(site));
                self.note(now, "delete", text);
            }
            Command::Border { .. } => s.borders += 1,
            Command::Servers { bubble, site, parts, reason } => {
                s.load_changes += 1;
                let why = match reason {
                    horizon_mesh::LoadReason::Overload => "overload",
                    horizon_mesh::LoadReason::Underload => "underload",
                };
                let text =
                    format!("{bubble} on {}: {} servers ({why})", self.site(site), parts.len());
                self.note(now, "servers", text);
            }
            Command::ZoneCreate { zone, site, bounds, .. } => {
                let text = format!("{zone} on {}: {}", self.site(site), boxed(&bounds));
                self.note(now, "zone", text);
            }
            Command::ZoneSplit { zone, new_zone, bounds, new_bounds, players, .. } => {
                self.report.zones.splits += 1;
                let text = format!(
                    "{zone} split (overload): keeps {}, {new_zone} takes {} with {} players",
                    boxed(&bounds),
                    boxed(&new_bounds),
                    players.len()
                );
                self.note(now, "zone_split", text);
            }
            Command::ZoneMerge { into, from, bounds, players, .. } => {
                self.report.zones.merges += 1;
                let text = format!(
                    "{from} merged into {into} (underload): {} players, now {}",
                    players.len(),
                    boxed(&bounds)
                );
                self.note(now, "zone_merge", text);
            }
            Command::Stalled { bubble, site, .. } => {
                s.stalled += 1;
                let text =
                    format!("{bubble} on {}: lease expired, players reconnecting", self.site(site));
                self.note(now, "stalled", text);
            }
        }
        Ok(())
    }

    /// Invariants after every step: the record of who is where matches the brain, no two bubbles
    /// of a world overlap, every running bubble holds the current epoch of its region.
    fn check(&mut self, now: Time) -> Result<(), RunError> {
        let present: Vec<(PlayerId, Option<SiteId>)> =
            self.mesh.players().iter().map(|p| (p.id, self.mesh.site_of(p.id))).collect();
        for (id, site) in present {
            match site {
                None => {
                    self.site_of.remove(&id);
                }
                Some(site) => {
                    let recorded = *self.site_of.entry(id).or_insert(site);
                    if recorded != site {
                        let what = format!(
                            "{} is simulated on {} but no command moved them from {}",
                            self.name(id),
                            self.site(site),
                            self.site(recorded)
                        );
                        return Err(self.broken(now, what));
                    }
                }
            }
        }
        if let Some((a, b)) = overlapping_bubbles(&self.mesh) {
            return Err(self.broken(now, format!("bubbles {a} and {b} overlap")));
        }
        for b in self.mesh.bubbles() {
            if b.stalled_since.is_none() && !self.mesh.leases().is_current(b.id, b.epoch) {
                return Err(self.broken(now, format!("{} runs without the current epoch", b.id)));
            }
        }
        // Always simulated: a counted player in no bubble plays in a zone.
        if let Some(p) = self.mesh.players().iter().find(|p| {
            p.role.is_counted()
                && self.mesh.bubble_of(p.id).is_none()
                && self.mesh.zone_of(p.id).is_none()
        }) {
            let what = format!("{} is in no bubble and no zone", self.name(p.id));
            return Err(self.broken(now, what));
        }
        let bubbles = self.mesh.bubbles().count() as u64;
        let servers: u64 = self.mesh.bubbles().map(|b| b.servers() as u64).sum();
        self.servers.update(&self.mesh);
        for site in self.mesh.sites().ids() {
            let n = self.servers.site(site.index()).servers;
            let max = self.report.max_servers_by_site.entry(self.site(site)).or_default();
            *max = (*max).max(n);
        }
        let zones = self.mesh.zones().count() as u64;
        let zone_players = self.mesh.zones().map(|z| u64::from(z.players));
        let part_players = self.mesh.bubbles().flat_map(|b| b.part_players()).map(u64::from);
        let largest = zone_players.chain(part_players).max().unwrap_or(0);
        let over: u32 = self.mesh.regions_over_capacity().iter().sum();
        let s = &mut self.report.stats;
        s.largest_region = s.largest_region.max(largest);
        s.over_capacity_region_s += f64::from(over) * self.report.tick_s;
        s.max_bubbles = s.max_bubbles.max(bubbles);
        s.max_servers = s.max_servers.max(servers);
        s.max_zones = s.max_zones.max(zones);
        Ok(())
    }

    fn finish(&mut self) {
        self.report.zones.count = self.mesh.zones().count() as u32;
        for p in self.mesh.players() {
            if let (Some(site), Some(latency)) =
                (self.mesh.site_of(p.id), self.mesh.latency_of(p.id))
            {
                let fp = FinalPlayer { site: self.site(site), latency_ms: latency };
                self.report.final_players.insert(self.name(p.id).to_owned(), fp);
            }
        }
        for b in self.mesh.bubbles() {
            let site = self.mesh.sites().name(b.site).to_string();
            *self.report.bubbles_by_site.entry(site.clone()).or_default() += 1;
            *self.report.servers_by_site.entry(site).or_default() += b.servers();
        }
    }
}

/// Two bubbles of one world whose boxes overlap, if any (sort on min x, then sweep).
pub(crate) fn overlapping_bubbles(
    mesh: &Mesh,
) -> Option<(horizon_mesh::BubbleId, horizon_mesh::BubbleId)> {
    let mut boxes: Vec<_> = mesh.bubbles().map(|b| (b.world, b.bounds, b.id)).collect();
    boxes.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.min.x.total_cmp(&b.1.min.x)));
    for i in 0..boxes.len() {
        for j in i + 1..boxes.len() {
            if boxes[j].0 != boxes[i].0 || boxes[j].1.min.x >= boxes[i].1.max.x {
                break;
            }
            if boxes[i].1.overlaps(&boxes[j].1) {
                return Some((boxes[i].2, boxes[j].2));
            }
        }
    }
    None
}
