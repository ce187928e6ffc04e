//! Runs one population through every policy at once: one generator, one worker per policy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::Instant;

use horizon_mesh::{
    BubbleId, Command, Generation, Mesh, MeshConfig, MoveReason, Placement, PlayerId, Role, SiteId,
    Span, Time,
};
use rustc_hash::FxHashMap;

use super::config::PopulationConfig;
use super::model::{Population, Step};
use super::policy::Policy;
use super::report::{
    CityFigures, Percentiles, PolicyReport, PopulationFigures, PopulationReport, Reversals, Series,
    SiteSeries,
};
use super::servers::Servers;
use crate::runner::{RunError, overlapping_bubbles};

/// Steps buffered between the generator and each policy (bounded: a slow policy slows the
/// generator instead of growing memory).
const QUEUE_STEPS: usize = 64;
/// Histogram buckets: 1 ms each, latencies at or above the last bucket land in it.
const BUCKETS: usize = 2_000;
/// A handover back to where a bubble came from within this time counts as reversed (flapping).
const REVERSAL_WINDOW_MS: u64 = 600_000;
/// A player gains when their mean latency is at least this much below `all_core`'s.
const GAIN_MS: f64 = 25.0;

/// Progress of a long run, reported every simulated hour.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub sim_s: f64,
    pub total_s: f64,
    pub online: usize,
    pub wall_s: f64,
}

/// Each city's sessions and access round trips, in the order of the file.
fn city_figures(
    cfg: &PopulationConfig,
    access: &BTreeMap<(usize, usize), Vec<f64>>,
) -> Vec<CityFigures> {
    let mut figures = Vec::new();
    for home in &cfg.homes {
        for (i, city) in home.cities.iter().enumerate() {
            let mut rtts = access.get(&(home.site.index(), i)).cloned().unwrap_or_default();
            rtts.sort_by(f64::total_cmp);
            let at = |q: f64| -> f64 {
                let Some(last) = rtts.len().checked_sub(1) else { return 0.0 };
                let v = rtts[((q * rtts.len() as f64).ceil() as usize).saturating_sub(1).min(last)];
                (v * 10.0).round() / 10.0
            };
            figures.push(CityFigures {
                home: cfg.sites.name(home.site).to_string(),
                city: city.name.clone(),
                sessions: rtts.len() as u64,
                route_ms: (city.route_ms * 10.0).round() / 10.0,
                access_p50_ms: at(0.5),
                access_p95_ms: at(0.95),
            });
        }
    }
    figures
}

/// Latency histogram with 1 ms buckets.
#[derive(Clone, Debug)]
pub(crate) struct Histogram {
    pub(crate) counts: Vec<u64>,
    pub(crate) total: u64,
}

impl Histogram {
    fn new() -> Self {
        Histogram { counts: vec![0; BUCKETS], total: 0 }
    }

    fn add(&mut self, ms: f64) {
        let b = (ms.max(0.0) as usize).min(BUCKETS - 1);
        self.counts[b] += 1;
        self.total += 1;
    }

    /// The smallest whole millisecond at or below which a share `q` of the samples lie.
    pub(crate) fn quantile(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let want = (q * self.total as f64).ceil().max(1.0) as u64;
        let mut acc = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            acc += c;
            if acc >= want {
                return (b + 1) as f64;
            }
        }
        BUCKETS as f64
    }

    fn percentiles(&self) -> Percentiles {
        Percentiles {
            p50: self.quantile(0.50),
            p95: self.quantile(0.95),
            p99: self.quantile(0.99),
            samples: self.total,
        }
    }
}

/// What one policy measured.
pub(crate) struct Tracker {
    policy: Policy,
    frame_ms: f64,
    cap_ms: f64,
    /// Click-to-screen per home site (site index), of playing humans (not AFK, not NPC).
    pub(crate) ctos: Vec<Histogram>,
    /// The same, only while alone in their bubble.
    solo: Vec<Histogram>,
    samples: u64,
    over_cap: u64,
    /// Per player id: Σ latency and samples, for the gain against `all_core`.
    pub(crate) per_player: Vec<(f64, u32)>,
    handovers: u64,
    moves: u64,
    reversed: u64,
    crossings: u64,
    /// Counted players alone at the last snapshot (no one within the merge distance): the
    /// solo figure of players in zones, who have no bubble of one to tell it.
    alone: rustc_hash::FxHashSet<PlayerId>,
    zone_splits: u64,
    zone_merges: u64,
    max_zones: u32,
    /// Per bubble: its last move (from, to, when, and what the scoring saw then).
    last_move: FxHashMap<BubbleId, (SiteId, SiteId, Time, Inputs)>,
    /// Reversals by what changed since the move they undo.
    reversed_by: Reversals,
    bubbles: Vec<Vec<u32>>,
    servers: Vec<Vec<u32>>,
    simulated: Vec<Vec<u32>>,
    max_bubbles: Vec<u32>,
    max_servers: Vec<u32>,
    /// The game servers the agents would run (several regions each), seated every tick.
    pool: Servers,
    /// The most counted players simulated, and servers running, at one sample (all sites).
    peak_players: u32,
    peak_servers: u32,
    /// The most servers over `players_per_server` at one sample (all sites).
    max_overfull: u32,
    /// The most players, and the widest side, of any one bubble seen.
    largest_bubble: u32,
    widest_bubble_m: f64,
    mixed_samples: u64,
    grouped_samples: u64,
    wall_s: f64,
}

impl Tracker {
    fn new(policy: Policy, cfg: &PopulationConfig) -> Self {
        let n = cfg.sites.len();
        Tracker {
            policy,
            frame_ms: cfg.frame_ms,
            cap_ms: cfg.thresholds.cap_ms,
            ctos: (0..n).map(|_| Histogram::new()).collect(),
            solo: (0..n).map(|_| Histogram::new()).collect(),
            samples: 0,
            over_cap: 0,
            per_player: Vec::new(),
            handovers: 0,
            moves: 0,
            reversed: 0,
            crossings: 0,
            alone: Default::default(),
            zone_splits: 0,
            zone_merges: 0,
            max_zones: 0,
            last_move: FxHashMap::default(),
            reversed_by: Reversals::default(),
            bubbles: vec![Vec::new(); n],
            servers: vec![Vec::new(); n],
            simulated: vec![Vec::new(); n],
            max_bubbles: vec![0; n],
            max_servers: vec![0; n],
            pool: Servers::new(n, &cfg.thresholds, cfg.tick_ms as f64 / 1000.0),
            peak_players: 0,
            peak_servers: 0,
            max_overfull: 0,
            largest_bubble: 0,
            widest_bubble_m: 0.0,
            mixed_samples: 0,
            grouped_samples: 0,
            wall_s: 0.0,
        }
    }

    fn sample(&mut self, id: PlayerId, home: SiteId, latency_ms: f64, solo: bool) {
        let h = home.index();
        let ctos = latency_ms + self.frame_ms;
        self.ctos[h].add(ctos);
        if solo {
            self.solo[h].add(ctos);
        }
        self.samples += 1;
        if latency_ms > self.cap_ms {
            self.over_cap += 1;
        }
        let i = id.0 as usize;
        if self.per_player.len() <= i {
            self.per_player.resize(i + 1, (0.0, 0));
        }
        let e = &mut self.per_player[i];
        e.0 += latency_ms;
        e.1 += 1;
    }

    /// Counts one of the brain's commands. `scored` tells what scoring reads of a player (role
    /// and access RTT), to tell why a move was reversed.
    fn command(
        &mut self,
        cmd: &Command,
        now: Time,
        scored: impl Fn(PlayerId) -> Option<(Role, f64)>,
    ) {
        match cmd {
            Command::Move { bubble, from, to, players, .. } => {
                self.handovers += 1;
                self.moves += 1;
                let inputs = Inputs::of(players, scored);
                if let Some(&(pf, pt, at, before)) = self.last_move.get(bubble)
                    && pt == *from
                    && pf == *to
                    && now.since(at) <= Span::from_ms(REVERSAL_WINDOW_MS)
                {
                    self.reversed += 1;
                    let r = &mut self.reversed_by;
                    if before.players != inputs.players {
                        r.membership += 1;
                    } else if before.scored != inputs.scored {
                        r.roles += 1;
                    } else {
                        r.unchanged += 1;
                    }
                }
                self.last_move.insert(*bubble, (*from, *to, now, inputs));
            }
            Command::Merge { from, from_site, into_site, .. } => {
                self.last_move.remove(from);
                if from_site != into_site {
                    self.handovers += 1;
                }
            }
            Command::Create { site, previous_site: Some(prev), .. } if prev != site => {
                self.handovers += 1;
            }
            Command::Enter { site, from_site: Some(from), players, .. } if from != site => {
                self.crossings += players.len() as u64;
            }
            Command::Delete { bubble, .. } => {
                self.last_move.remove(bubble);
            }
            Command::ZoneSplit { .. } => self.zone_splits += 1,
            Command::ZoneMerge { .. } => self.zone_merges += 1,
            _ => {}
        }
    }
}

/// What the scoring of a bubble saw when it moved: who was in it, and their roles and access
/// RTTs (hashes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Inputs {
    players: u64,
    scored: u64,
}

impl Inputs {
    fn of(players: &[PlayerId], scored: impl Fn(PlayerId) -> Option<(Role, f64)>) -> Self {
        use std::hash::{Hash, Hasher};
        let mut who = rustc_hash::FxHasher::default();
        let mut how = rustc_hash::FxHasher::default();
        for &p in players {
            p.hash(&mut who);
            if let Some((role, rtt)) = scored(p) {
                role.hash(&mut how);
                rtt.to_bits().hash(&mut how);
            }
        }
        Inputs { players: who.finish(), scored: how.finish() }
    }
}

fn playing(role: Role) -> bool {
    matches!(role, Role::Player | Role::Pilot)
}

/// Feeds the steps to the brain under `placement`, sampling every tick.
fn run_brain(
    cfg: &PopulationConfig,
    placement: Placement,
    steps: Receiver<Arc<Step>>,
) -> Result<Tracker, RunError> {
    let started = Instant::now();
    let mut t = Tracker::new(Policy::Brain(placement), cfg);
    let config = MeshConfig {
        sites: cfg.sites.clone(),
        thresholds: cfg.thresholds.clone(),
        generation: Generation(1),
        placement,
        zones: Vec::new(),
    };
    let mut mesh = Mesh::new(config, Time::ZERO).map_err(RunError::Config)?;
    if placement == Placement::Fixed {
        mesh.set_delegations(cfg.delegations.clone()).map_err(RunError::Config)?;
    }
    let broken = |t_ms: u64, what: String| RunError::Invariant {
        seed: cfg.seed,
        t_s: t_ms as f64 / 1000.0,
        what: format!("{}: {what}", placement.as_str()),
    };
    let hold = Span::from_ms(cfg.thresholds.hold_ms);
    let mut last_gain_move: FxHashMap<BubbleId, Time> = FxHashMap::default();
    let sites: Vec<SiteId> = cfg.sites.ids().collect();
    for step in steps {
        let now = Time::from_ms(step.t_ms);
        for j in &step.joins {
            mesh.handle_join(j.clone()).map_err(|e| broken(step.t_ms, e.to_string()))?;
        }
        // Placed at once, as the core does (design.md §4): see `Mesh::place_arrival`.
        for j in &step.joins {
            mesh.place_arrival(j.id, now);
        }
        for (id, u) in &step.updates {
            mesh.handle_update(*id, u).map_err(|e| broken(step.t_ms, e.to_string()))?;
        }
        for id in &step.leaves {
            mesh.handle_leave(*id).map_err(|e| broken(step.t_ms, e.to_string()))?;
        }
        // Every site's agent renews its leases, one batch per site.
        for &site in &sites {
            let batch = mesh.leases_held(site);
            if !batch.is_empty() {
                // Every link is up: a refused renewal is a bug in the brain.
                for r in mesh.handle_renewal(site, &batch, now) {
                    r.map_err(|e| broken(step.t_ms, e.to_string()))?;
                }
            }
        }
        mesh.handle_timeout(now);
        while let Some(cmd) = mesh.poll_command() {
            if let Command::Move { bubble, reason: MoveReason::Gain | MoveReason::Cap, .. } = &cmd {
                if let Some(&at) = last_gain_move.get(bubble)
                    && now.since(at) < hold
                {
                    return Err(broken(step.t_ms, format!("{bubble} moved twice within hold")));
                }
                last_gain_move.insert(*bubble, now);
            }
            t.command(&cmd, now, |id| mesh.player(id).map(|p| (p.role, p.access_rtt_min_ms)));
        }
        t.pool.update(&mesh);
        let core = cfg.sites.core();
        for p in mesh.players() {
            if !playing(p.role) {
                continue;
            }
            // Outside a bubble, a counted player plays in a core-site zone.
            let bubble = mesh.bubble_of(p.id);
            let site = bubble.map_or(core, |b| b.site);
            let solo = match bubble {
                Some(b) => b.players == 1,
                None => t.alone.contains(&p.id),
            };
            let latency = p.access_rtt_min_ms + cfg.sites.backbone_ms(p.home, site);
            t.sample(p.id, p.home, latency, solo);
        }
        if step.t_ms.is_multiple_of(cfg.sample_every_ms) {
            snapshot(&mut t, &mesh, cfg).map_err(|what| broken(step.t_ms, what))?;
        }
    }
    t.wall_s = started.elapsed().as_secs_f64();
    Ok(t)
}

/// The time series point, and the invariants too costly to check every tick: no two bubbles
/// overlap, every bubble runs under its region's current epoch.
fn snapshot(t: &mut Tracker, mesh: &Mesh, cfg: &PopulationConfig) -> Result<(), String> {
    let n = cfg.sites.len();
    let (mut bubbles, mut servers, mut simulated) = (vec![0u32; n], vec![0u32; n], vec![0u32; n]);
    let mut overfull = 0;
    for (s, count) in servers.iter_mut().enumerate() {
        let now = t.pool.site(s);
        *count = now.servers;
        overfull += now.overfull;
    }
    for b in mesh.bubbles() {
        bubbles[b.site.index()] += 1;
        t.largest_bubble = t.largest_bubble.max(b.players);
        // A delegation's region has the configured box (a whole world, say), not one grown
        // around its players: left out of the widest.
        if mesh.delegation_of(b.id).is_none() {
            let side = (b.bounds.max.x - b.bounds.min.x).max(b.bounds.max.y - b.bounds.min.y);
            t.widest_bubble_m = t.widest_bubble_m.max(side);
        }
        if !mesh.leases().is_current(b.id, b.epoch) {
            return Err(format!("{} runs without the current epoch", b.id));
        }
    }
    let mut homes: FxHashMap<BubbleId, u64> = FxHashMap::default();
    for p in mesh.players() {
        if !p.role.is_counted() {
            continue;
        }
        if let Some(site) = mesh.site_of(p.id) {
            simulated[site.index()] += 1;
        }
        if let Some(b) = mesh.bubble_of(p.id) {
            *homes.entry(b.id).or_default() |= 1 << p.home.index();
        }
    }
    for p in mesh.players() {
        if let Some(b) = mesh.bubble_of(p.id).filter(|_| p.role.is_counted())
            && b.players > 1
        {
            t.grouped_samples += 1;
            if homes.get(&b.id).is_some_and(|m| m.count_ones() > 1) {
                t.mixed_samples += 1;
            }
        }
    }
    if let Some((a, b)) = overlapping_bubbles(mesh) {
        return Err(format!("bubbles {a} and {b} overlap"));
    }
    t.peak_players = t.peak_players.max(simulated.iter().sum());
    t.peak_servers = t.peak_servers.max(servers.iter().sum());
    t.max_overfull = t.max_overfull.max(overfull);
    t.max_zones = t.max_zones.max(mesh.zones().count() as u32);
    t.alone.clear();
    if mesh.unsimulated().next().is_some() {
        t.alone.extend(mesh.groups().into_iter().filter(|g| g.len() == 1).map(|g| g[0]));
    }
    for s in 0..n {
        t.bubbles[s].push(bubbles[s]);
        t.servers[s].push(servers[s]);
        t.simulated[s].push(simulated[s]);
        t.max_bubbles[s] = t.max_bubbles[s].max(bubbles[s]);
        t.max_servers[s] = t.max_servers[s].max(servers[s]);
    }
    Ok(())
}

/// Every player on their home site: access RTT only.
fn run_nearest(cfg: &PopulationConfig, steps: Receiver<Arc<Step>>) -> Tracker {
    let started = Instant::now();
    let mut t = Tracker::new(Policy::Nearest, cfg);
    let n = cfg.sites.len();
    // Per player id: (home, access, role); `None` once gone.
    let mut players: Vec<Option<(SiteId, f64, Role)>> = vec![None];
    let mut online: Vec<u32> = Vec::new();
    for step in steps {
        for j in &step.joins {
            let i = j.id.0 as usize;
            if players.len() <= i {
                players.resize(i + 1, None);
            }
            players[i] = Some((j.gateway, j.access_rtt_ms, j.role));
            if j.role != Role::Npc {
                online.push(i as u32);
            }
        }
        for (id, u) in &step.updates {
            if let (Some(Some(p)), Some(role)) = (players.get_mut(id.0 as usize), u.role) {
                p.2 = role;
            }
        }
        for id in &step.leaves {
            if let Some(p) = players.get_mut(id.0 as usize) {
                *p = None;
            }
        }
        online.retain(|&i| players[i as usize].is_some());
        let mut per_site = vec![0u32; n];
        for &i in &online {
            if let Some((home, access, role)) = players[i as usize] {
                per_site[home.index()] += 1;
                if playing(role) {
                    t.sample(PlayerId(u64::from(i)), home, access, false);
                }
            }
        }
        if step.t_ms.is_multiple_of(cfg.sample_every_ms) {
            for (s, &players) in per_site.iter().enumerate() {
                t.simulated[s].push(players);
                t.bubbles[s].push(0);
                t.servers[s].push(0);
            }
        }
    }
    t.wall_s = started.elapsed().as_secs_f64();
    t
}

/// Runs the population through every policy and returns the report. `progress` is called every
/// simulated hour (and at the end).
pub fn run_population(
    cfg: &PopulationConfig,
    mut progress: impl FnMut(Progress),
) -> Result<PopulationReport, RunError> {
    let started = Instant::now();
    let total_ms = cfg.duration_ms();
    let mut population = Population::new(cfg);
    let mut online_by_home: Vec<Vec<u32>> = vec![Vec::new(); cfg.sites.len()];
    let mut t_h: Vec<f64> = Vec::new();
    let results = std::thread::scope(|scope| {
        let mut senders = Vec::new();
        let mut workers = Vec::new();
        for policy in Policy::ALL {
            let (tx, rx) = sync_channel::<Arc<Step>>(QUEUE_STEPS);
            senders.push(tx);
            workers.push(scope.spawn(move || match policy {
                Policy::Brain(p) => run_brain(cfg, p, rx),
                Policy::Nearest => Ok(run_nearest(cfg, rx)),
            }));
        }
        let mut next_hour_ms = 3_600_000;
        loop {
            let step = population.step();
            let t_ms = step.t_ms;
            if t_ms.is_multiple_of(cfg.sample_every_ms) {
                t_h.push(t_ms as f64 / 3_600_000.0);
                for (s, n) in population.online_by_home().into_iter().enumerate() {
                    online_by_home[s].push(n);
                }
            }
            let step = Arc::new(step);
            // A worker that stopped (an invariant broke) is reported below; keep feeding the rest.
            senders.retain(|tx| tx.send(Arc::clone(&step)).is_ok());
            if t_ms >= next_hour_ms || t_ms >= total_ms {
                next_hour_ms += 3_600_000;
                progress(Progress {
                    sim_s: t_ms as f64 / 1000.0,
                    total_s: total_ms as f64 / 1000.0,
                    online: population.online(),
                    wall_s: started.elapsed().as_secs_f64(),
                });
            }
            if t_ms >= total_ms || senders.is_empty() {
                break;
            }
        }
        drop(senders);
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect::<Vec<_>>()
    });
    let mut trackers = Vec::new();
    for r in results {
        trackers.push(r?);
    }
    let wall_s = started.elapsed().as_secs_f64();
    Ok(build_report(cfg, &population, trackers, t_h, online_by_home, wall_s))
}

fn build_report(
    cfg: &PopulationConfig,
    population: &Population<'_>,
    trackers: Vec<Tracker>,
    t_h: Vec<f64>,
    online_by_home: Vec<Vec<u32>>,
    wall_s: f64,
) -> PopulationReport {
    let name =
        |s: usize| cfg.sites.name(cfg.sites.ids().nth(s).unwrap_or(cfg.sites.core())).to_string();
    let hours = cfg.hours;
    let tick_s = cfg.tick_ms as f64 / 1000.0;
    let st = &population.stats;
    let mean_online = st.online_tick_sum as f64 / st.ticks.max(1) as f64;
    let all_core = trackers.iter().find(|t| t.policy == Policy::Brain(Placement::AllCore));
    let mut policies = BTreeMap::new();
    let mut series = BTreeMap::new();
    let mut mixed_share = 0.0;
    for t in &trackers {
        let per_site = |v: &Vec<Histogram>| -> BTreeMap<String, Percentiles> {
            v.iter()
                .enumerate()
                .filter(|(_, h)| h.total > 0)
                .map(|(s, h)| (name(s), h.percentiles()))
                .collect()
        };
        let gain_share = all_core.map_or(0.0, |base| {
            let (mut gained, mut players) = (0u64, 0u64);
            for (i, &(sum, n)) in t.per_player.iter().enumerate() {
                let Some(&(bsum, bn)) = base.per_player.get(i) else { continue };
                if n == 0 || bn == 0 {
                    continue;
                }
                players += 1;
                if bsum / f64::from(bn) - sum / f64::from(n) >= GAIN_MS {
                    gained += 1;
                }
            }
            gained as f64 / players.max(1) as f64
        });
        if t.policy == Policy::Brain(Placement::Smdg) {
            mixed_share = t.mixed_samples as f64 / t.grouped_samples.max(1) as f64;
        }
        let by_site = |v: &Vec<u32>| -> BTreeMap<String, u32> {
            v.iter().enumerate().map(|(s, &n)| (name(s), n)).collect()
        };
        policies.insert(
            t.policy.as_str().to_owned(),
            PolicyReport {
                click_to_screen_ms: per_site(&t.ctos),
                solo_click_to_screen_ms: per_site(&t.solo),
                over_cap_share: t.over_cap as f64 / t.samples.max(1) as f64,
                handovers: t.handovers,
                handovers_per_hour: t.handovers as f64 / hours,
                handovers_per_hour_per_1000: t.handovers as f64
                    / hours
                    / (mean_online / 1000.0).max(1e-9),
                moves: t.moves,
                reversed_within_10min_share: t.reversed as f64 / t.moves.max(1) as f64,
                reversed: t.reversed_by,
                border_crossings: t.crossings,
                zone_splits: t.zone_splits,
                zone_merges: t.zone_merges,
                max_zones: t.max_zones,
                gain_25ms_vs_all_core_share: gain_share,
                max_bubbles_by_site: by_site(&t.max_bubbles),
                max_servers_by_site: by_site(&t.max_servers),
                max_servers: t.peak_servers,
                players_per_server_at_peak: f64::from(t.peak_players)
                    / f64::from(t.peak_servers.max(1)),
                max_overfull_servers: t.max_overfull,
                overfull_server_s: t.pool.overfull().ticks as f64 * tick_s,
                overfull_server_s_beyond_grace: t.pool.overfull().beyond_grace_ticks as f64
                    * tick_s,
                largest_region_players: t.pool.largest_region(),
                region_moves: t.pool.moved(),
                largest_bubble_players: t.largest_bubble,
                widest_bubble_km: (t.widest_bubble_m / 100.0).round() / 10.0,
                wall_s: t.wall_s,
            },
        );
        let series_of = |v: &Vec<Vec<u32>>| -> BTreeMap<String, Vec<u32>> {
            v.iter().enumerate().map(|(s, xs)| (name(s), xs.clone())).collect()
        };
        series.insert(
            t.policy.as_str().to_owned(),
            SiteSeries {
                bubbles: series_of(&t.bubbles),
                servers: series_of(&t.servers),
                simulated_players: series_of(&t.simulated),
            },
        );
    }
    let online = online_by_home.iter().enumerate().map(|(s, v)| (name(s), v.clone())).collect();
    PopulationReport {
        name: cfg.name.clone(),
        seed: cfg.seed,
        players: cfg.players,
        hours,
        tick_s: cfg.tick_ms as f64 / 1000.0,
        frame_ms: cfg.frame_ms,
        cap_ms: cfg.thresholds.cap_ms,
        delegations: cfg
            .delegations
            .iter()
            .map(|d| {
                let site = cfg.sites.name(d.site);
                match d.bounds {
                    None => format!("world {} → {site}", d.world.0),
                    Some(b) => format!(
                        "a box of world {} ({:.0}..{:.0} m on x) → {site}",
                        d.world.0, b.min.x, b.max.x
                    ),
                }
            })
            .collect(),
        sim_seconds_per_wall_second: hours * 3600.0 / wall_s.max(1e-9),
        wall_s,
        population: PopulationFigures {
            sessions: st.sessions,
            mean_online,
            peak_online: st.peak_online,
            npcs: st.npcs,
            large_events: st.events,
            mixed_home_share_of_grouped: mixed_share,
            cities: city_figures(cfg, &st.access_by_city),
        },
        policies,
        series: Series { t_h, online_by_home: online, policies: series },
        histograms: trackers
            .iter()
            .map(|t| {
                (
                    t.policy.as_str().to_owned(),
                    t.ctos.iter().enumerate().map(|(s, h)| (name(s), h.counts.clone())).collect(),
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use horizon_mesh::{Epoch, Time};

    use super::*;

    #[test]
    fn quantiles_are_the_upper_edge_of_their_millisecond() {
        let mut h = Histogram::new();
        for ms in [10.2, 10.9, 11.5, 40.0] {
            h.add(ms);
        }
        h.add(1e9); // beyond the last bucket: kept in it
        assert_eq!((h.quantile(0.4), h.quantile(0.6), h.quantile(0.8)), (11.0, 12.0, 41.0));
        assert_eq!(h.quantile(1.0), BUCKETS as f64);
        assert_eq!(Histogram::new().quantile(0.5), 0.0);
    }

    #[test]
    fn a_move_back_within_ten_minutes_is_a_reversal_counted_by_what_changed() {
        let cfg = PopulationConfig::default_population();
        let mut t = Tracker::new(Policy::Brain(Placement::Smdg), &cfg);
        let s: Vec<SiteId> = cfg.sites.ids().collect();
        let mv = |from: SiteId, to: SiteId, players: &[u64]| Command::Move {
            bubble: BubbleId(1),
            from,
            to,
            epoch: Epoch(1),
            players: players.iter().map(|&p| PlayerId(p)).collect(),
            reason: MoveReason::Gain,
        };
        let player = |_| Some((Role::Player, 20.0));
        let afk2 =
            |p: PlayerId| Some((if p == PlayerId(2) { Role::Afk } else { Role::Player }, 20.0));
        t.command(&mv(s[0], s[1], &[1, 2]), Time::from_secs(0), player);
        t.command(&mv(s[1], s[0], &[1, 2]), Time::from_secs(300), afk2); // back, 2 went AFK
        t.command(&mv(s[0], s[1], &[1, 2]), Time::from_secs(400), afk2); // back, nothing changed
        t.command(&mv(s[1], s[0], &[1, 2, 3]), Time::from_secs(600), player); // someone joined
        t.command(&mv(s[0], s[2], &[1, 2, 3]), Time::from_secs(900), player); // elsewhere
        t.command(&mv(s[2], s[0], &[1, 2, 3]), Time::from_secs(1_501), player); // too late
        assert_eq!((t.moves, t.handovers, t.reversed), (6, 6, 3));
        assert_eq!(t.reversed_by, Reversals { membership: 1, roles: 1, unchanged: 1 });
    }
}
