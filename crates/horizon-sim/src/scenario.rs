//! Scenario files (TOML): parsed once, every problem reported with its key.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use horizon_mesh::{
    Placement, PlayerId, PlayerJoin, PlayerUpdate, Role, SiteId, Sites, Thresholds, Vec3, WorldId,
    ZoneSpec,
};
use serde::Deserialize;

use horizon_mesh::rng::Rng;

/// Limits that keep a scenario from exhausting memory or running forever.
pub const MAX_PLAYERS: usize = 2_000_000;
pub const MAX_DURATION_S: f64 = horizon_mesh::file::MAX_SECONDS;
pub const MAX_STEPS: u64 = 10_000_000;

/// One problem in a scenario file (the brain's tables' type: they are read alike).
pub use horizon_mesh::file::Problem;

/// A scenario file that cannot be run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    pub file: PathBuf,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(f, "{}: {n} problem{}", self.file.display(), if n == 1 { "" } else { "s" })?;
        for p in &self.problems {
            write!(f, "\n  {}: {}", p.key, p.why)?;
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    #[serde(default)]
    seed: u64,
    duration_s: f64,
    tick_s: Option<f64>,
    /// `smdg` (the default), or a baseline: `all_core` is today's SMD (zones only).
    placement: Option<String>,
    sites: RawSites,
    #[serde(default)]
    thresholds: RawThresholds,
    #[serde(default)]
    players: Vec<RawPlayer>,
    #[serde(default)]
    crowds: Vec<RawCrowd>,
    #[serde(default)]
    events: Vec<RawEvent>,
    #[serde(default)]
    site_events: Vec<RawSiteEvent>,
    #[serde(default)]
    zones: Vec<RawZone>,
}

/// `[[zones]]`: a configured zone box of a world (a world with none is one zone).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawZone {
    world: Option<String>,
    min: [f64; 3],
    max: [f64; 3],
}

pub(crate) use horizon_mesh::file::{SitesTable as RawSites, ThresholdsTable as RawThresholds};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlayer {
    id: String,
    home: String,
    access_rtt_ms: f64,
    role: Option<String>,
    world: Option<String>,
    position: Option<[f64; 3]>,
    velocity: Option<[f64; 3]>,
    join_s: Option<f64>,
    leave_s: Option<f64>,
}

/// Many players generated from the seed: `count` players spread uniformly in a sphere.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCrowd {
    id_prefix: String,
    count: u32,
    /// Share of players per home site, e.g. `{ PAR = 0.4, MTL = 0.3, HKG = 0.3 }`.
    homes: BTreeMap<String, f64>,
    access_rtt_ms: Option<[f64; 2]>,
    role: Option<String>,
    world: Option<String>,
    center: Option<[f64; 3]>,
    radius_m: Option<f64>,
    join_s: Option<f64>,
    leave_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    at_s: f64,
    player: String,
    access_rtt_ms: Option<f64>,
    role: Option<String>,
    world: Option<String>,
    position: Option<[f64; 3]>,
    velocity: Option<[f64; 3]>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSiteEvent {
    at_s: f64,
    site: String,
    /// New number of ready servers (a negative value means unlimited).
    ready_servers: Option<i64>,
    /// `false`: the site's agent loses its link to the core; `true`: it comes back.
    link_up: Option<bool>,
}

/// A player of the scenario.
#[derive(Clone, Debug)]
pub struct ScenarioPlayer {
    pub name: String,
    pub join: PlayerJoin,
    pub join_ms: u64,
    pub leave_ms: Option<u64>,
}

/// Something that happens at a time.
#[derive(Clone, Debug)]
pub enum EventKind {
    Player { player: PlayerId, update: PlayerUpdate },
    SiteCapacity { site: SiteId, ready: Option<u32> },
    SiteLink { site: SiteId, up: bool },
}

#[derive(Clone, Debug)]
pub struct TimedEvent {
    pub at_ms: u64,
    pub kind: EventKind,
}

/// A validated scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    pub duration_ms: u64,
    pub tick_ms: u64,
    pub sites: Sites,
    pub ready: Vec<(SiteId, Option<u32>)>,
    pub thresholds: Thresholds,
    pub players: Vec<ScenarioPlayer>,
    pub events: Vec<TimedEvent>,
    pub worlds: Vec<String>,
    pub placement: Placement,
    /// Configured zone boxes.
    pub zones: Vec<ZoneSpec>,
}

/// Reads `path` and parses it with `parse`, naming the file in every problem.
pub(crate) fn load_file<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, Vec<Problem>>,
) -> Result<T, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: path.to_owned(),
        problems: vec![Problem { key: "file".into(), why: format!("cannot read: {e}") }],
    })?;
    parse(&text).map_err(|problems| ScenarioError { file: path.to_owned(), problems })
}

/// Deserialises TOML text; a syntax error or an unknown key is one problem keyed `file`.
pub(crate) fn from_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, Vec<Problem>> {
    toml::from_str(text).map_err(|e: toml::de::Error| {
        vec![Problem { key: "file".into(), why: e.to_string().trim_end().replace('\n', "\n    ") }]
    })
}

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        load_file(path, Self::parse)
    }

    /// Parses and validates scenario text.
    pub fn parse(text: &str) -> Result<Self, Vec<Problem>> {
        Builder::default().build(from_toml::<RawScenario>(text)?)
    }
}

#[derive(Default)]
pub(crate) struct Builder {
    pub(crate) problems: Vec<Problem>,
    worlds: Vec<String>,
}

/// Collects every problem of a file while building its parts; shared by scenario and population
/// files so sites and thresholds read the same everywhere.
impl Builder {
    pub(crate) fn bad(&mut self, key: impl Into<String>, why: impl Into<String>) {
        self.problems.push(Problem { key: key.into(), why: why.into() });
    }

    pub(crate) fn seconds(&mut self, key: &str, s: f64) -> u64 {
        horizon_mesh::file::seconds(key, s, &mut self.problems)
    }

    fn world(&mut self, name: Option<&str>) -> WorldId {
        let name = name.unwrap_or("space");
        let i = match self.worlds.iter().position(|w| w == name) {
            Some(i) => i,
            None => {
                self.worlds.push(name.to_owned());
                self.worlds.len() - 1
            }
        };
        WorldId(i as u32)
    }

    fn role(&mut self, key: &str, role: Option<&str>) -> Role {
        match role {
            None => Role::Player,
            Some(r) => Role::parse(r).unwrap_or_else(|| {
                self.bad(key, format!("unknown role {r:?}: use pilot, player, afk or npc"));
                Role::Player
            }),
        }
    }

    fn vec3(&mut self, key: &str, v: Option<[f64; 3]>) -> Vec3 {
        let [x, y, z] = v.unwrap_or([0.0; 3]);
        let v = Vec3::new(x, y, z);
        if !v.is_finite() {
            self.bad(key, "every coordinate must be a finite number");
            return Vec3::ZERO;
        }
        v
    }

    fn rtt(&mut self, key: &str, ms: f64) -> f64 {
        if !ms.is_finite() || ms < 0.0 {
            self.bad(key, format!("must be a finite number of milliseconds >= 0, got {ms}"));
            return 0.0;
        }
        ms
    }

    fn build(mut self, raw: RawScenario) -> Result<Scenario, Vec<Problem>> {
        let duration_ms = self.seconds("duration_s", raw.duration_s);
        let tick_ms = self.seconds("tick_s", raw.tick_s.unwrap_or(5.0));
        if tick_ms == 0 {
            self.bad("tick_s", "must be > 0");
        } else if duration_ms / tick_ms > MAX_STEPS {
            self.bad("tick_s", format!("duration_s / tick_s exceeds {MAX_STEPS} steps"));
        }
        if raw.name.trim().is_empty() {
            self.bad("name", "must not be empty");
        }

        let sites = self.sites(&raw.sites);
        let thresholds = self.thresholds(&raw.thresholds, tick_ms);
        let Some(sites) = sites else {
            return Err(self.problems);
        };
        let mut ready = Vec::new();
        for (name, &n) in &raw.sites.ready_servers {
            match sites.id(name) {
                Some(s) => ready.push((s, Some(n))),
                None => self.bad(format!("sites.ready_servers.{name}"), "not a site in sites.list"),
            }
        }

        let mut players: Vec<ScenarioPlayer> = Vec::new();
        let mut index: BTreeMap<String, PlayerId> = BTreeMap::new();
        for (i, p) in raw.players.iter().enumerate() {
            let key = |f: &str| format!("players[{i}].{f}");
            let Some(home) = sites.id(&p.home) else {
                self.bad(key("home"), format!("{:?} is not a site in sites.list", p.home));
                continue;
            };
            let join = PlayerJoin {
                id: PlayerId(players.len() as u64 + 1),
                gateway: home,
                access_rtt_ms: self.rtt(&key("access_rtt_ms"), p.access_rtt_ms),
                role: self.role(&key("role"), p.role.as_deref()),
                world: self.world(p.world.as_deref()),
                position: self.vec3(&key("position"), p.position),
                velocity: self.vec3(&key("velocity"), p.velocity),
            };
            self.add_player(&mut players, &mut index, &key("id"), &p.id, join, p.join_s, p.leave_s);
        }
        let mut rng = Rng::new(raw.seed);
        for (i, c) in raw.crowds.iter().enumerate() {
            self.crowd(i, c, &sites, &mut rng, &mut players, &mut index);
        }
        if players.len() > MAX_PLAYERS {
            self.bad("players", format!("at most {MAX_PLAYERS} players, got {}", players.len()));
        }

        let mut events = Vec::new();
        for (i, e) in raw.events.iter().enumerate() {
            let key = |f: &str| format!("events[{i}].{f}");
            let at_ms = self.seconds(&key("at_s"), e.at_s);
            let Some(&player) = index.get(&e.player) else {
                self.bad(key("player"), format!("no player has id {:?}", e.player));
                continue;
            };
            let update = PlayerUpdate {
                access_rtt_ms: e.access_rtt_ms.map(|r| self.rtt(&key("access_rtt_ms"), r)),
                role: e.role.as_deref().map(|r| self.role(&key("role"), Some(r))),
                world: e.world.as_deref().map(|w| self.world(Some(w))),
                position: e.position.map(|p| self.vec3(&key("position"), Some(p))),
                velocity: e.velocity.map(|v| self.vec3(&key("velocity"), Some(v))),
            };
            if update == PlayerUpdate::default() {
                self.bad(
                    format!("events[{i}]"),
                    "changes nothing: give access_rtt_ms, role, world, position or velocity",
                );
            }
            events.push(TimedEvent { at_ms, kind: EventKind::Player { player, update } });
        }
        for (i, e) in raw.site_events.iter().enumerate() {
            let key = |f: &str| format!("site_events[{i}].{f}");
            let at_ms = self.seconds(&key("at_s"), e.at_s);
            let Some(site) = sites.id(&e.site) else {
                self.bad(key("site"), format!("{:?} is not a site in sites.list", e.site));
                continue;
            };
            if e.ready_servers.is_none() && e.link_up.is_none() {
                self.bad(
                    format!("site_events[{i}]"),
                    "changes nothing: give ready_servers or link_up",
                );
            }
            if let Some(n) = e.ready_servers {
                let ready = u32::try_from(n).ok();
                events.push(TimedEvent { at_ms, kind: EventKind::SiteCapacity { site, ready } });
            }
            if let Some(up) = e.link_up {
                events.push(TimedEvent { at_ms, kind: EventKind::SiteLink { site, up } });
            }
        }
        events.sort_by_key(|e| e.at_ms);

        let placement = match raw.placement.as_deref() {
            None => Placement::Smdg,
            Some(p) => Placement::parse(p).unwrap_or_else(|| {
                self.bad(
                    "placement",
                    format!("unknown placement {p:?}: use smdg, all_core, creator or one_shot"),
                );
                Placement::Smdg
            }),
        };
        let mut zones = Vec::new();
        for z in &raw.zones {
            let world = self.world(z.world.as_deref());
            let (min, max) =
                (Vec3::new(z.min[0], z.min[1], z.min[2]), Vec3::new(z.max[0], z.max[1], z.max[2]));
            zones.push(ZoneSpec { world, bounds: horizon_mesh::Aabb { min, max } });
        }
        if let Err(errors) =
            horizon_mesh::zones::validate_specs(&zones, thresholds.position_limit_m())
        {
            for e in errors {
                let horizon_mesh::ConfigError::BadZone { index, why } = e else { continue };
                self.bad(format!("zones[{index}]"), why);
            }
        }
        if !self.problems.is_empty() {
            return Err(self.problems);
        }
        Ok(Scenario {
            name: raw.name,
            seed: raw.seed,
            duration_ms,
            tick_ms,
            sites,
            ready,
            thresholds,
            players,
            events,
            worlds: self.worlds,
            placement,
            zones,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn add_player(
        &mut self,
        players: &mut Vec<ScenarioPlayer>,
        index: &mut BTreeMap<String, PlayerId>,
        key: &str,
        name: &str,
        join: PlayerJoin,
        join_s: Option<f64>,
        leave_s: Option<f64>,
    ) {
        if name.is_empty() {
            self.bad(key, "must not be empty");
        }
        if index.insert(name.to_owned(), join.id).is_some() {
            self.bad(key, format!("player id {name:?} is used twice"));
        }
        let join_ms = self.seconds(&key.replace(".id", ".join_s"), join_s.unwrap_or(0.0));
        let leave_ms = leave_s.map(|s| self.seconds(&key.replace(".id", ".leave_s"), s));
        if leave_ms.is_some_and(|l| l <= join_ms) {
            self.bad(key.replace(".id", ".leave_s"), "must be after join_s");
        }
        players.push(ScenarioPlayer { name: name.to_owned(), join, join_ms, leave_ms });
    }

    fn crowd(
        &mut self,
        i: usize,
        c: &RawCrowd,
        sites: &Sites,
        rng: &mut Rng,
        players: &mut Vec<ScenarioPlayer>,
        index: &mut BTreeMap<String, PlayerId>,
    ) {
        let key = |f: &str| format!("crowds[{i}].{f}");
        let mut shares: Vec<(SiteId, f64)> = Vec::new();
        for (name, &share) in &c.homes {
            match sites.id(name) {
                Some(s) if share.is_finite() && share > 0.0 => shares.push((s, share)),
                Some(_) => self.bad(key(&format!("homes.{name}")), "share must be a number > 0"),
                None => self.bad(key(&format!("homes.{name}")), "not a site in sites.list"),
            }
        }
        if shares.is_empty() {
            self.bad(key("homes"), "give at least one home site with a share > 0");
            return;
        }
        if c.count as usize > MAX_PLAYERS {
            self.bad(key("count"), format!("at most {MAX_PLAYERS}"));
            return;
        }
        let total: f64 = shares.iter().map(|s| s.1).sum();
        let [lo, hi] = c.access_rtt_ms.unwrap_or([5.0, 30.0]);
        if !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi) {
            self.bad(key("access_rtt_ms"), "must be [min, max] with 0 <= min <= max");
            return;
        }
        let radius = c.radius_m.unwrap_or(100.0);
        if !radius.is_finite() || radius < 0.0 {
            self.bad(key("radius_m"), "must be a finite number >= 0");
            return;
        }
        let role = self.role(&key("role"), c.role.as_deref());
        let world = self.world(c.world.as_deref());
        let center = self.vec3(&key("center"), c.center);
        // Homes are dealt in proportion to shares, deterministically (largest remainder first).
        let mut homes: Vec<SiteId> = Vec::with_capacity(c.count as usize);
        for (s, share) in &shares {
            let n = (c.count as f64 * share / total).floor() as usize;
            homes.extend(std::iter::repeat_n(*s, n));
        }
        let mut k = 0;
        while homes.len() < c.count as usize {
            homes.push(shares[k % shares.len()].0);
            k += 1;
        }
        for (j, home) in homes.into_iter().enumerate() {
            // A point uniformly in the sphere (rejection sampling, bounded).
            let mut offset = Vec3::ZERO;
            for _ in 0..64 {
                let v = Vec3::new(rng.range(-1.0, 1.0), rng.range(-1.0, 1.0), rng.range(-1.0, 1.0));
                if v.norm_sq() <= 1.0 {
                    offset = v * radius;
                    break;
                }
            }
            let join = PlayerJoin {
                id: PlayerId(players.len() as u64 + 1),
                gateway: home,
                access_rtt_ms: rng.range(lo, hi.max(lo + f64::EPSILON)),
                role,
                world,
                position: center + offset,
                velocity: Vec3::ZERO,
            };
            let name = format!("{}{}", c.id_prefix, j + 1);
            self.add_player(players, index, &key("id_prefix"), &name, join, c.join_s, c.leave_s);
        }
    }

    pub(crate) fn sites(&mut self, raw: &RawSites) -> Option<Sites> {
        horizon_mesh::file::sites(raw, &mut self.problems)
    }

    pub(crate) fn thresholds(&mut self, raw: &RawThresholds, tick_ms: u64) -> Thresholds {
        horizon_mesh::file::thresholds(raw, tick_ms, &mut self.problems)
    }
}
