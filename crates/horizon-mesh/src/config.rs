//! Sites, the backbone RTT matrix and every threshold, parsed once and valid by construction.

use crate::ids::{SiteId, SiteName};
use crate::player::Role;

/// A configuration problem, naming what is wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("no sites are configured")]
    NoSites,
    #[error("site {0} is listed twice")]
    DuplicateSite(SiteName),
    #[error("the core site {0} is not in the site list")]
    UnknownCore(SiteName),
    #[error("backbone pair {a}-{b} names an unknown site")]
    UnknownSiteInPair { a: String, b: String },
    #[error("backbone pair {0}-{0} pairs a site with itself (its RTT is always 0)")]
    SelfPair(SiteName),
    #[error("backbone pair {a}-{b} is given more than once (pairs are unordered)")]
    DuplicatePair { a: SiteName, b: SiteName },
    #[error("backbone RTT between {a} and {b} is missing")]
    MissingPair { a: SiteName, b: SiteName },
    #[error("backbone RTT {a}-{b} = {ms} ms must be a finite number >= 0")]
    BadRtt { a: SiteName, b: SiteName, ms: f64 },
    #[error("more than {max} sites are configured")]
    TooManySites { max: usize },
    #[error("threshold {key} = {value} is invalid: {why}")]
    BadThreshold { key: &'static str, value: f64, why: &'static str },
    #[error("zones[{index}]: {why}")]
    BadZone { index: usize, why: String },
    #[error("delegations[{index}]: {why}")]
    BadDelegation { index: usize, why: String },
    #[error("sites.coordinates.{site}: {why}")]
    BadPlace { site: String, why: String },
}

/// Light in fibre covers about 200,000 km/s: 200 km per millisecond, one way.
pub const FIBRE_KM_PER_MS: f64 = 200.0;

/// Where a site is on Earth (`[sites.coordinates]`), in degrees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Place {
    pub lat: f64,
    pub lon: f64,
}

impl Place {
    /// Checks the degrees: what is wrong, if anything.
    pub fn problem(&self) -> Option<String> {
        let ok = |v: f64, limit: f64| v.is_finite() && v.abs() <= limit;
        if !ok(self.lat, 90.0) {
            return Some(format!("latitude {} must be within ±90 degrees", self.lat));
        }
        if !ok(self.lon, 180.0) {
            return Some(format!("longitude {} must be within ±180 degrees", self.lon));
        }
        None
    }

    /// The physical floor of a round trip to `other`: the great-circle distance there and back
    /// at fibre speed. No backbone is faster: a measurement below it is a probe or clock bug.
    pub fn floor_rtt_ms(&self, other: &Place) -> f64 {
        use geo::{Distance, Haversine, Point};
        let metres =
            Haversine.distance(Point::new(self.lon, self.lat), Point::new(other.lon, other.lat));
        2.0 * metres / 1000.0 / FIBRE_KM_PER_MS
    }
}

/// The most load samples a zone rule may wait for (about a day of one-second samples).
pub const MAX_SAMPLES: u32 = 100_000;

/// The most sites a mesh may have (the scoring keeps per-site arrays).
pub const MAX_SITES: usize = 64;

/// The configured sites, the core site and the backbone RTT between every pair.
#[derive(Clone, Debug)]
pub struct Sites {
    names: Vec<SiteName>,
    core: SiteId,
    /// Row-major `n × n`, symmetric, zero diagonal, milliseconds.
    backbone_ms: Vec<f64>,
    /// Each site's place, if configured.
    places: Vec<Option<Place>>,
}

impl Sites {
    /// Builds the site table. `backbone` must give every unordered pair exactly once.
    /// Returns every problem found, not just the first.
    pub fn new(
        names: Vec<SiteName>,
        core: &SiteName,
        backbone: &[(SiteName, SiteName, f64)],
    ) -> Result<Self, Vec<ConfigError>> {
        Sites::placed(names, core, backbone, &[])
    }

    /// [`Sites::new`] with some sites' places: a pair of placed sites missing from `backbone`
    /// starts at its physical floor ([`Place::floor_rtt_ms`]: a lower bound, until measured),
    /// and a measurement below the floor is not believed ([`Sites::set_backbone_ms`]).
    pub fn placed(
        names: Vec<SiteName>,
        core: &SiteName,
        backbone: &[(SiteName, SiteName, f64)],
        places: &[(SiteName, Place)],
    ) -> Result<Self, Vec<ConfigError>> {
        let mut errors = Vec::new();
        if names.is_empty() {
            errors.push(ConfigError::NoSites);
        }
        if names.len() > MAX_SITES {
            errors.push(ConfigError::TooManySites { max: MAX_SITES });
        }
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                errors.push(ConfigError::DuplicateSite(n.clone()));
            }
        }
        let index = |n: &SiteName| names.iter().position(|m| m == n);
        let core_ix = index(core);
        if core_ix.is_none() && !names.is_empty() {
            errors.push(ConfigError::UnknownCore(core.clone()));
        }
        let n = names.len();
        let mut matrix = vec![f64::NAN; n * n];
        for i in 0..n {
            matrix[i * n + i] = 0.0;
        }
        for (a, b, ms) in backbone {
            let (Some(i), Some(j)) = (index(a), index(b)) else {
                errors.push(ConfigError::UnknownSiteInPair { a: a.to_string(), b: b.to_string() });
                continue;
            };
            if i == j {
                errors.push(ConfigError::SelfPair(a.clone()));
                continue;
            }
            if !ms.is_finite() || *ms < 0.0 {
                errors.push(ConfigError::BadRtt { a: a.clone(), b: b.clone(), ms: *ms });
                continue;
            }
            if !matrix[i * n + j].is_nan() {
                errors.push(ConfigError::DuplicatePair { a: a.clone(), b: b.clone() });
                continue;
            }
            matrix[i * n + j] = *ms;
            matrix[j * n + i] = *ms;
        }
        let mut placed = vec![None; n];
        for (site, place) in places {
            match (index(site), place.problem()) {
                (Some(i), None) => placed[i] = Some(*place),
                (None, _) => errors.push(ConfigError::BadPlace {
                    site: site.to_string(),
                    why: "not a listed site".into(),
                }),
                (_, Some(why)) => {
                    errors.push(ConfigError::BadPlace { site: site.to_string(), why })
                }
            }
        }
        for i in 0..n {
            for j in i + 1..n {
                if let (true, Some(a), Some(b)) = (matrix[i * n + j].is_nan(), placed[i], placed[j])
                {
                    let floor = a.floor_rtt_ms(&b);
                    matrix[i * n + j] = floor;
                    matrix[j * n + i] = floor;
                }
                if matrix[i * n + j].is_nan() {
                    errors.push(ConfigError::MissingPair {
                        a: names[i].clone(),
                        b: names[j].clone(),
                    });
                }
            }
        }
        match core_ix {
            Some(c) if errors.is_empty() => {
                Ok(Sites { names, core: SiteId(c as u16), backbone_ms: matrix, places: placed })
            }
            _ => Err(errors),
        }
    }

    /// Number of sites.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Always false: a `Sites` has at least the core site.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn core(&self) -> SiteId {
        self.core
    }

    pub fn id(&self, name: &str) -> Option<SiteId> {
        self.names.iter().position(|n| n.as_str() == name).map(|i| SiteId(i as u16))
    }

    pub fn name(&self, id: SiteId) -> &SiteName {
        &self.names[id.index()]
    }

    /// Every site, in configuration order.
    pub fn ids(&self) -> impl ExactSizeIterator<Item = SiteId> + Clone + use<> {
        (0..self.names.len() as u16).map(SiteId)
    }

    /// Backbone RTT in ms between two sites (0 for the same site).
    pub fn backbone_ms(&self, a: SiteId, b: SiteId) -> f64 {
        self.backbone_ms[a.index() * self.names.len() + b.index()]
    }

    /// Backbone RTTs in ms from every site to `to`, by site index (matrices are symmetric).
    pub fn backbone_to(&self, to: SiteId) -> &[f64] {
        let n = self.names.len();
        &self.backbone_ms[to.index() * n..(to.index() + 1) * n]
    }

    /// Records a new measurement of the backbone RTT (agents measure it continuously).
    /// Non-finite or negative samples are ignored; one below the pair's physical floor is not
    /// believed either (a probe or clock bug), and the floor is returned.
    pub fn set_backbone_ms(&mut self, a: SiteId, b: SiteId, ms: f64) -> Result<(), f64> {
        if a == b || !ms.is_finite() || ms < 0.0 {
            return Ok(());
        }
        if let Some(floor) = self.floor_ms(a, b).filter(|&floor| ms < floor) {
            return Err(floor);
        }
        let n = self.names.len();
        self.backbone_ms[a.index() * n + b.index()] = ms;
        self.backbone_ms[b.index() * n + a.index()] = ms;
        Ok(())
    }

    /// Where a site is, if configured.
    pub fn place(&self, id: SiteId) -> Option<Place> {
        self.places[id.index()]
    }

    /// The physical floor of the round trip between two placed sites ([`Place::floor_rtt_ms`]).
    pub fn floor_ms(&self, a: SiteId, b: SiteId) -> Option<f64> {
        Some(self.place(a)?.floor_rtt_ms(&self.place(b)?))
    }
}

/// Weight of each counted role in a group's cost. NPCs always weigh 0 and are never counted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    pub pilot: f64,
    pub player: f64,
    pub afk: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights { pilot: 2.0, player: 1.0, afk: 0.05 }
    }
}

impl Weights {
    pub fn of(&self, role: Role) -> f64 {
        match role {
            Role::Pilot => self.pilot,
            Role::Player => self.player,
            Role::Afk => self.afk,
            Role::Npc => 0.0,
        }
    }
}

/// Every threshold of design.md §3, §4 and §6, with the defaults of design.md.
#[derive(Clone, Debug, PartialEq)]
pub struct Thresholds {
    /// Scoring period.
    pub period_ms: u64,
    /// Fairness cap on any counted player's latency.
    pub cap_ms: f64,
    /// Minimum gain per counted player (weighted) to move a bubble.
    pub gain_ms: f64,
    /// How long the same better site must stay best before a move.
    pub dwell_ms: u64,
    /// Minimum time between two moves of a bubble (failover excepted).
    pub hold_ms: u64,
    pub weights: Weights,
    /// Grouping radius at rest; players this close interact.
    pub group_radius_m: f64,
    /// Border margin at rest: a member closer than this to its bubble's edge moves the border.
    pub border_margin_m: f64,
    /// Preventive-merge distance at rest: groups closer than this share one site.
    pub merge_distance_m: f64,
    /// Speed scaling: every distance above grows by `speed × lead_s`.
    pub lead_s: f64,
    /// Players one game server holds before its region is split.
    pub players_per_server: u32,
    /// A server below this tick rate is overloaded.
    pub tps_min: f64,
    /// Two parts merge when their players fit in this share of one server.
    pub merge_fill_ratio: f64,
    /// A game server takes new regions while its players fill less than this share of
    /// `players_per_server` (design.md §8, "Cost"): the rest is headroom for regions that grow.
    pub pack_fill_ratio: f64,
    /// A region (a zone, a bubble's part) is split once it has been overloaded for this many
    /// load samples, each weighing the time since the previous one in seconds (a slow reporter
    /// still splits after ~10 s): `crate::split`.
    pub split_after_samples: u32,
    /// The two halves of a region's most recent cut are joined once their combined players
    /// have stayed within `merge_fill_ratio × players_per_server` for this many samples.
    pub merge_after_samples: u32,
    /// No split or merge in a bubble or zone for this long after its last change.
    pub settle_ms: u64,
    /// Lease validity from the holder's renewal send time.
    pub lease_ttl_ms: u64,
    /// Extra wait before re-granting an expired lease elsewhere (clock drift).
    pub lease_drift_margin_ms: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            period_ms: 5_000,
            cap_ms: 180.0,
            gain_ms: 25.0,
            dwell_ms: 30_000,
            hold_ms: 180_000,
            weights: Weights::default(),
            group_radius_m: 300.0,
            border_margin_m: 300.0,
            merge_distance_m: 2_000.0,
            lead_s: 30.0,
            players_per_server: 75,
            tps_min: 20.0,
            merge_fill_ratio: 0.8,
            pack_fill_ratio: 0.8,
            split_after_samples: 10,
            merge_after_samples: 30,
            settle_ms: 15_000,
            lease_ttl_ms: 30_000,
            lease_drift_margin_ms: 2_000,
        }
    }
}

impl Thresholds {
    /// Checks every value, returning all problems found.
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut check = |key: &'static str, value: f64, ok: bool, why: &'static str| {
            if !ok || !value.is_finite() {
                errors.push(ConfigError::BadThreshold { key, value, why });
            }
        };
        let pos = "must be > 0";
        let nonneg = "must be >= 0";
        check("period_ms", self.period_ms as f64, self.period_ms > 0, pos);
        check("cap_ms", self.cap_ms, self.cap_ms > 0.0, pos);
        check("gain_ms", self.gain_ms, self.gain_ms >= 0.0, nonneg);
        check("weights.pilot", self.weights.pilot, self.weights.pilot > 0.0, pos);
        check("weights.player", self.weights.player, self.weights.player > 0.0, pos);
        check("weights.afk", self.weights.afk, self.weights.afk > 0.0, pos);
        check("group_radius_m", self.group_radius_m, self.group_radius_m > 0.0, pos);
        check("border_margin_m", self.border_margin_m, self.border_margin_m > 0.0, pos);
        check(
            "merge_distance_m",
            self.merge_distance_m,
            self.merge_distance_m >= self.group_radius_m,
            "must be >= group_radius_m (players farther apart than the merge distance are never grouped)",
        );
        check("lead_s", self.lead_s, self.lead_s >= 0.0, nonneg);
        check(
            "players_per_server",
            self.players_per_server as f64,
            self.players_per_server > 0,
            pos,
        );
        check("tps_min", self.tps_min, self.tps_min >= 0.0, nonneg);
        check(
            "merge_fill_ratio",
            self.merge_fill_ratio,
            self.merge_fill_ratio > 0.0 && self.merge_fill_ratio <= 1.0,
            "must be in (0, 1]",
        );
        check(
            "pack_fill_ratio",
            self.pack_fill_ratio,
            self.pack_fill_ratio > 0.0 && self.pack_fill_ratio <= 1.0,
            "must be in (0, 1]",
        );
        for (key, n) in [
            ("split_after_samples", self.split_after_samples),
            ("merge_after_samples", self.merge_after_samples),
        ] {
            check(key, f64::from(n), (1..=MAX_SAMPLES).contains(&n), "must be in 1..=100000");
        }
        check("lease_ttl_ms", self.lease_ttl_ms as f64, self.lease_ttl_ms > 0, pos);
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }

    /// Players a game server takes new regions up to: `players_per_server × pack_fill_ratio`,
    /// at least one.
    pub fn seats_per_server(&self) -> u32 {
        ((f64::from(self.players_per_server) * self.pack_fill_ratio).floor() as u32).max(1)
    }

    /// The largest coordinate (metres, any axis) a position may have: the grouping grid's range.
    pub fn position_limit_m(&self) -> f64 {
        crate::grouping::Grouper::max_coordinate(self.group_radius_m.min(self.merge_distance_m))
    }

    /// `margin(v) = base + v · lead` (design.md §4).
    pub fn scaled(&self, base_m: f64, speed_mps: f64) -> f64 {
        base_m + speed_mps * self.lead_s
    }
}
