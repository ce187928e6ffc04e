//! Population files (TOML): who plays when, from where, and how they move. Parsed once, every
//! problem reported with its key, like scenario files.

use std::collections::BTreeMap;
use std::path::Path;

use horizon_mesh::{SiteId, Sites, Thresholds};
use serde::Deserialize;

use crate::scenario::{
    Builder, Problem, RawSites, RawThresholds, ScenarioError, from_toml, load_file,
};

/// Bounds that keep a population run finite.
pub const MAX_PLAYERS: u32 = 2_000_000;
pub const MAX_HOURS: f64 = 24.0 * 7.0;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPopulation {
    name: String,
    #[serde(default)]
    seed: u64,
    players: u32,
    hours: f64,
    tick_s: Option<f64>,
    frame_ms: Option<f64>,
    sample_every_s: Option<f64>,
    sites: RawSites,
    #[serde(default)]
    thresholds: RawThresholds,
    homes: BTreeMap<String, RawHome>,
    sessions: RawSessions,
    behaviour: RawBehaviour,
    world: RawWorld,
    events: RawEvents,
    /// The `fixed` policy's delegations (the rollout's stage 3).
    #[serde(default)]
    delegations: Vec<horizon_mesh::file::DelegationTable>,
    /// How much longer than the great circle a city's route to its home site is.
    path_stretch: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHome {
    share: f64,
    peak_utc_h: f64,
    trough: f64,
    access_rtt_ms: RawRtt,
    #[serde(default)]
    cities: Vec<RawCity>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCity {
    name: String,
    lat: f64,
    lon: f64,
    share: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRtt {
    median: f64,
    p95: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSessions {
    mean_min: f64,
    min_min: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBehaviour {
    pilot_share: f64,
    walk_mps: [f64; 2],
    fly_mps: [f64; 2],
    walk_trip_km: f64,
    fly_trip_km: f64,
    stay_min: [f64; 2],
    poi_share: f64,
    poi_home_affinity: f64,
    afk_per_hour: f64,
    afk_mean_min: f64,
    party_share: f64,
    party_size: [u32; 2],
    party_mixed: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorld {
    players_per_world: u32,
    size_km: f64,
    points_of_interest: u32,
    poi_radius_m: f64,
    npcs_per_poi: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvents {
    per_day: f64,
    players: [u32; 2],
    duration_min: f64,
}

/// One home site's players.
#[derive(Clone, Debug, PartialEq)]
pub struct Home {
    pub site: SiteId,
    /// Share of the average concurrent players.
    pub share: f64,
    /// The busiest hour of the day, UTC.
    pub peak_utc_h: f64,
    /// Activity at the quietest hour relative to the busiest (0..=1).
    pub trough: f64,
    /// Access RTT: log-normal with this median and 95th percentile; with `cities`, the last
    /// mile alone (the route from the city to the site is added).
    pub access_median_ms: f64,
    pub access_p95_ms: f64,
    /// Where this home's players live (`[[homes.X.cities]]`); empty: at the site.
    pub cities: Vec<City>,
}

/// A city a home site's players live in.
#[derive(Clone, Debug, PartialEq)]
pub struct City {
    pub name: String,
    pub place: horizon_mesh::Place,
    /// Share of the home's players.
    pub share: f64,
    /// Its players' route to the home site and back: the great circle at fibre speed
    /// ([`horizon_mesh::Place::floor_rtt_ms`]) times `path_stretch`. Added to their last mile.
    pub route_ms: f64,
}

/// The default `path_stretch`: the design's backbone round trips over their physical floors
/// (PAR–MTL 85 / 55, PAR–HKG 185 / 96, MTL–HKG 225 / 124: 1.5 to 1.9).
pub const DEFAULT_PATH_STRETCH: f64 = 1.7;

/// How players behave.
#[derive(Clone, Debug, PartialEq)]
pub struct Behaviour {
    pub pilot_share: f64,
    pub walk_mps: [f64; 2],
    pub fly_mps: [f64; 2],
    pub walk_trip_m: f64,
    /// Pilots not heading for a point of interest fly to a point within this distance.
    pub fly_trip_m: f64,
    pub stay_s: [f64; 2],
    /// Chance a trip's target is a point of interest (else a point nearby, or anywhere by ship).
    pub poi_share: f64,
    /// Chance a point of interest is picked among those of the player's own community.
    pub poi_home_affinity: f64,
    pub afk_per_hour: f64,
    pub afk_mean_s: f64,
    pub party_share: f64,
    pub party_size: [u32; 2],
    /// Chance each member of a party has their own home (drawn by shares) rather than the leader's.
    pub party_mixed: f64,
}

/// The worlds players move in: flat star systems of the same size, as many as it takes to keep
/// `players_per_world` (density stays the same at every population size).
#[derive(Clone, Debug, PartialEq)]
pub struct World {
    pub players_per_world: u32,
    pub size_m: f64,
    pub points_of_interest: u32,
    pub poi_radius_m: f64,
    pub npcs_per_poi: u32,
}

/// Large events: a crowd gathers at one point of interest.
#[derive(Clone, Debug, PartialEq)]
pub struct Events {
    pub per_day: f64,
    pub players: [u32; 2],
    pub duration_s: f64,
}

/// A validated population.
#[derive(Clone, Debug)]
pub struct PopulationConfig {
    pub name: String,
    pub seed: u64,
    /// Average concurrent players over a day.
    pub players: u32,
    pub hours: f64,
    pub tick_ms: u64,
    /// Server frame time added to the network latency for click-to-screen.
    pub frame_ms: f64,
    /// Period of the time series (bubbles per site over the day).
    pub sample_every_ms: u64,
    pub sites: Sites,
    pub thresholds: Thresholds,
    pub homes: Vec<Home>,
    pub session_mean_s: f64,
    pub session_min_s: f64,
    pub behaviour: Behaviour,
    pub world: World,
    pub events: Events,
    /// What the `fixed` policy (the rollout's stage 3) delegates to which relay site; none:
    /// `fixed` places as `all_core`.
    pub delegations: Vec<horizon_mesh::Delegation>,
}

/// The population bundled with Horizon (`simulations/population/default.toml`).
pub const DEFAULT: &str = include_str!("../../../../simulations/population/default.toml");

impl PopulationConfig {
    /// Reads and validates a population file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        load_file(path, Self::parse)
    }

    /// The bundled default population.
    pub fn default_population() -> Self {
        #[allow(clippy::expect_used)] // The bundled file is checked by a test.
        Self::parse(DEFAULT).expect("the bundled population file is valid")
    }

    /// Parses and validates population text.
    pub fn parse(text: &str) -> Result<Self, Vec<Problem>> {
        build(from_toml::<RawPopulation>(text)?)
    }

    /// Overrides from the command line, checked like the file's values.
    pub fn with_overrides(
        mut self,
        players: Option<u32>,
        seed: Option<u64>,
        hours: Option<f64>,
    ) -> Result<Self, Vec<Problem>> {
        let mut b = Builder::default();
        if let Some(n) = players {
            check_players(&mut b, "--players", n);
            self.players = n;
        }
        if let Some(h) = hours {
            check_hours(&mut b, "--hours", h);
            self.hours = h;
        }
        if let Some(s) = seed {
            self.seed = s;
        }
        if b.problems.is_empty() { Ok(self) } else { Err(b.problems) }
    }

    /// How many worlds the players spread over.
    pub fn worlds(&self) -> u32 {
        self.players.div_ceil(self.world.players_per_world.max(1)).max(1)
    }

    pub fn duration_ms(&self) -> u64 {
        (self.hours * 3_600_000.0).round() as u64
    }
}

fn check_players(b: &mut Builder, key: &str, n: u32) {
    if n == 0 || n > MAX_PLAYERS {
        b.bad(key, format!("must be between 1 and {MAX_PLAYERS}, got {n}"));
    }
}

fn check_hours(b: &mut Builder, key: &str, h: f64) {
    if !(h.is_finite() && h > 0.0 && h <= MAX_HOURS) {
        b.bad(key, format!("must be a number of hours in (0, {MAX_HOURS}], got {h}"));
    }
}

/// `lo <= x <= hi`, or a problem naming the key.
fn within(b: &mut Builder, key: &str, x: f64, lo: f64, hi: f64) -> f64 {
    if !(x.is_finite() && lo <= x && x <= hi) {
        b.bad(key, format!("must be a number between {lo} and {hi}, got {x}"));
    }
    x
}

/// A `[min, max]` pair with `lo <= min <= max <= hi`.
fn range(b: &mut Builder, key: &str, r: [f64; 2], lo: f64, hi: f64) -> [f64; 2] {
    if !(r.iter().all(|x| x.is_finite() && lo <= *x && *x <= hi) && r[0] <= r[1]) {
        b.bad(key, format!("must be [min, max] with {lo} <= min <= max <= {hi}, got {r:?}"));
    }
    r
}

/// A home's cities, checked: each placed on Earth with a share, the shares adding up to 1, and
/// the home site placed (`[sites.coordinates]`) so that each city's route can be measured.
fn cities(
    b: &mut Builder,
    home: &str,
    raw: &[RawCity],
    site: Option<horizon_mesh::Place>,
    stretch: f64,
) -> Vec<City> {
    if raw.is_empty() {
        return Vec::new();
    }
    let Some(site) = site else {
        b.bad(
            format!("homes.{home}.cities"),
            format!("needs the site's place: [sites.coordinates] {home} = [lat, lon]"),
        );
        return Vec::new();
    };
    let mut cities = Vec::new();
    for (i, c) in raw.iter().enumerate() {
        let key = |f: &str| format!("homes.{home}.cities[{i}].{f}");
        if c.name.trim().is_empty() {
            b.bad(key("name"), "must not be empty");
        }
        let place = horizon_mesh::Place { lat: c.lat, lon: c.lon };
        if let Some(why) = place.problem() {
            b.bad(key("lat/lon"), why);
            continue;
        }
        let share = within(b, &key("share"), c.share, 0.0, 1.0);
        let route_ms = place.floor_rtt_ms(&site) * stretch;
        cities.push(City { name: c.name.clone(), place, share, route_ms });
    }
    let total: f64 = cities.iter().map(|c| c.share).sum();
    if (total - 1.0).abs() > 1e-6 {
        b.bad(
            format!("homes.{home}.cities"),
            format!("shares must add up to 1, they add up to {total}"),
        );
    }
    cities
}

fn build(raw: RawPopulation) -> Result<PopulationConfig, Vec<Problem>> {
    let mut b = Builder::default();
    if raw.name.trim().is_empty() {
        b.bad("name", "must not be empty");
    }
    check_players(&mut b, "players", raw.players);
    check_hours(&mut b, "hours", raw.hours);
    let tick_ms = b.seconds("tick_s", raw.tick_s.unwrap_or(5.0));
    if tick_ms == 0 {
        b.bad("tick_s", "must be > 0");
    }
    let frame_ms = within(&mut b, "frame_ms", raw.frame_ms.unwrap_or(35.0), 0.0, 1_000.0);
    let sample_every_ms = b.seconds("sample_every_s", raw.sample_every_s.unwrap_or(300.0));
    if sample_every_ms < tick_ms {
        b.bad("sample_every_s", "must be at least tick_s");
    }
    let sites = b.sites(&raw.sites);
    let thresholds = b.thresholds(&raw.thresholds, tick_ms.max(1));
    let stretch =
        within(&mut b, "path_stretch", raw.path_stretch.unwrap_or(DEFAULT_PATH_STRETCH), 1.0, 10.0);

    let mut homes = Vec::new();
    if let Some(sites) = &sites {
        for (name, h) in &raw.homes {
            let key = |f: &str| format!("homes.{name}.{f}");
            let Some(site) = sites.id(name) else {
                b.bad(format!("homes.{name}"), "not a site in sites.list");
                continue;
            };
            let share = within(&mut b, &key("share"), h.share, 0.0, 1.0);
            let peak_utc_h = within(&mut b, &key("peak_utc_h"), h.peak_utc_h, 0.0, 24.0);
            let trough = within(&mut b, &key("trough"), h.trough, 0.0, 1.0);
            let median =
                within(&mut b, &key("access_rtt_ms.median"), h.access_rtt_ms.median, 0.1, 1e3);
            let p95 = within(&mut b, &key("access_rtt_ms.p95"), h.access_rtt_ms.p95, median, 1e4);
            let cities = cities(&mut b, name, &h.cities, sites.place(site), stretch);
            homes.push(Home {
                site,
                share,
                peak_utc_h,
                trough,
                access_median_ms: median,
                access_p95_ms: p95,
                cities,
            });
        }
        let total: f64 = homes.iter().map(|h| h.share).sum();
        if homes.is_empty() || total <= 0.0 {
            b.bad("homes", "give at least one home site with a share > 0");
        } else if (total - 1.0).abs() > 1e-6 {
            b.bad("homes", format!("shares must add up to 1, they add up to {total}"));
        }
    }

    let s = &raw.sessions;
    let session_mean_s = within(&mut b, "sessions.mean_min", s.mean_min, 1.0, 24.0 * 60.0) * 60.0;
    let session_min_s = within(&mut b, "sessions.min_min", s.min_min, 0.0, s.mean_min) * 60.0;

    let r = &raw.behaviour;
    let behaviour = Behaviour {
        pilot_share: within(&mut b, "behaviour.pilot_share", r.pilot_share, 0.0, 1.0),
        walk_mps: range(&mut b, "behaviour.walk_mps", r.walk_mps, 0.1, 50.0),
        fly_mps: range(&mut b, "behaviour.fly_mps", r.fly_mps, 1.0, 10_000.0),
        walk_trip_m: within(&mut b, "behaviour.walk_trip_km", r.walk_trip_km, 0.01, 1e3) * 1e3,
        fly_trip_m: within(&mut b, "behaviour.fly_trip_km", r.fly_trip_km, 0.01, 1e5) * 1e3,
        stay_s: range(&mut b, "behaviour.stay_min", r.stay_min, 0.0, 24.0 * 60.0).map(|m| m * 60.0),
        poi_share: within(&mut b, "behaviour.poi_share", r.poi_share, 0.0, 1.0),
        poi_home_affinity: within(
            &mut b,
            "behaviour.poi_home_affinity",
            r.poi_home_affinity,
            0.0,
            1.0,
        ),
        afk_per_hour: within(&mut b, "behaviour.afk_per_hour", r.afk_per_hour, 0.0, 60.0),
        afk_mean_s: within(&mut b, "behaviour.afk_mean_min", r.afk_mean_min, 0.0, 24.0 * 60.0)
            * 60.0,
        party_share: within(&mut b, "behaviour.party_share", r.party_share, 0.0, 1.0),
        party_size: r.party_size,
        party_mixed: within(&mut b, "behaviour.party_mixed", r.party_mixed, 0.0, 1.0),
    };
    let [lo, hi] = r.party_size;
    if !(2 <= lo && lo <= hi && hi <= 100) {
        b.bad(
            "behaviour.party_size",
            format!("must be [min, max] with 2 <= min <= max <= 100, got {:?}", r.party_size),
        );
    }

    let w = &raw.world;
    let world = World {
        players_per_world: w.players_per_world,
        size_m: within(&mut b, "world.size_km", w.size_km, 0.1, 1e5) * 1e3,
        points_of_interest: w.points_of_interest,
        poi_radius_m: within(&mut b, "world.poi_radius_m", w.poi_radius_m, 0.0, 1e5),
        npcs_per_poi: w.npcs_per_poi,
    };
    if !(1..=100_000).contains(&w.points_of_interest) {
        b.bad("world.points_of_interest", "must be between 1 and 100000");
    }
    if w.players_per_world == 0 {
        b.bad("world.players_per_world", "must be at least 1");
    }
    if w.npcs_per_poi > 1_000 {
        b.bad("world.npcs_per_poi", "must be at most 1000");
    }

    let e = &raw.events;
    let events = Events {
        per_day: within(&mut b, "events.per_day", e.per_day, 0.0, 1_000.0),
        players: e.players,
        duration_s: within(&mut b, "events.duration_min", e.duration_min, 0.0, 24.0 * 60.0) * 60.0,
    };
    if e.players[0] > e.players[1] || e.players[1] > MAX_PLAYERS {
        b.bad("events.players", format!("must be [min, max] with min <= max, got {:?}", e.players));
    }

    let Some(sites) = sites else {
        return Err(b.problems);
    };
    let delegations = horizon_mesh::file::delegations(
        &raw.delegations,
        &sites,
        thresholds.position_limit_m(),
        &mut b.problems,
    );
    if !b.problems.is_empty() {
        return Err(b.problems);
    }
    homes.sort_by_key(|h| h.site);
    Ok(PopulationConfig {
        name: raw.name,
        seed: raw.seed,
        players: raw.players,
        hours: raw.hours,
        tick_ms,
        frame_ms,
        sample_every_ms,
        sites,
        thresholds,
        homes,
        session_mean_s,
        session_min_s,
        behaviour,
        world,
        events,
        delegations,
    })
}
