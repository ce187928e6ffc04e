//! The brain's tables as files write them: `[sites]` and `[thresholds]`, read the same way by
//! the core's configuration, scenario files and population files (docs/scenarios.md). Every
//! problem is collected with its dotted key.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use crate::{SiteName, Sites, Thresholds};

/// The longest duration a file may give, in seconds (30 days).
pub const MAX_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

/// One problem in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Where: a dotted key such as `players[2].home`, or `file` for syntax errors.
    pub key: String,
    pub why: String,
}

impl Problem {
    pub fn new(key: impl Into<String>, why: impl Into<String>) -> Self {
        Problem { key: key.into(), why: why.into() }
    }
}

/// `[sites]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SitesTable {
    pub core: String,
    pub list: Vec<String>,
    #[serde(default)]
    pub backbone_rtt_ms: BTreeMap<String, f64>,
    /// Ready game servers per site (the simulators; the core learns them from its agents).
    #[serde(default)]
    pub ready_servers: BTreeMap<String, u32>,
    /// Where sites are: `[latitude, longitude]` in degrees, per site name.
    #[serde(default)]
    pub coordinates: BTreeMap<String, [f64; 2]>,
}

/// `[thresholds]`: each key overrides the default (design.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdsTable {
    cap_ms: Option<f64>,
    gain_ms: Option<f64>,
    dwell_s: Option<f64>,
    hold_s: Option<f64>,
    weights: Option<WeightsTable>,
    group_radius_m: Option<f64>,
    border_margin_m: Option<f64>,
    merge_distance_m: Option<f64>,
    lead_s: Option<f64>,
    players_per_server: Option<u32>,
    tps_min: Option<f64>,
    merge_fill_ratio: Option<f64>,
    pack_fill_ratio: Option<f64>,
    split_after_samples: Option<u32>,
    merge_after_samples: Option<u32>,
    settle_s: Option<f64>,
    lease_ttl_s: Option<f64>,
    lease_drift_margin_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightsTable {
    pilot: Option<f64>,
    player: Option<f64>,
    afk: Option<f64>,
}

/// `s` seconds as milliseconds, or a problem at `key` (negative, not finite, over
/// [`MAX_SECONDS`]) and 0.
pub fn seconds(key: &str, s: f64, problems: &mut Vec<Problem>) -> u64 {
    if !s.is_finite() || s < 0.0 {
        problems
            .push(Problem::new(key, format!("must be a finite number of seconds >= 0, got {s}")));
        return 0;
    }
    if s > MAX_SECONDS {
        problems.push(Problem::new(key, format!("must be at most {MAX_SECONDS} s, got {s}")));
        return 0;
    }
    (s * 1000.0).round() as u64
}

/// The site table of `[sites]`, or `None` with its problems.
pub fn sites(raw: &SitesTable, problems: &mut Vec<Problem>) -> Option<Sites> {
    let mut names = Vec::new();
    for (i, n) in raw.list.iter().enumerate() {
        match SiteName::new(n) {
            Ok(s) => names.push(s),
            Err(e) => problems.push(Problem::new(format!("sites.list[{i}]"), e.to_string())),
        }
    }
    let core = match SiteName::new(&raw.core) {
        Ok(c) => c,
        Err(e) => {
            problems.push(Problem::new("sites.core", e.to_string()));
            return None;
        }
    };
    let mut pairs = Vec::new();
    for (pair, &ms) in &raw.backbone_rtt_ms {
        let key = format!("sites.backbone_rtt_ms.{pair}");
        let parts: Vec<&str> = pair.split('-').collect();
        let written = "a pair is written SITE-SITE, e.g. PAR-MTL";
        let [a, b] = parts[..] else {
            problems.push(Problem::new(key, written));
            continue;
        };
        match (SiteName::new(a), SiteName::new(b)) {
            (Ok(a), Ok(b)) => pairs.push((a, b, ms)),
            _ => problems.push(Problem::new(key, written)),
        }
    }
    let mut places = Vec::new();
    for (site, &[lat, lon]) in &raw.coordinates {
        match SiteName::new(site) {
            Ok(name) => places.push((name, crate::Place { lat, lon })),
            Err(e) => {
                problems.push(Problem::new(format!("sites.coordinates.{site}"), e.to_string()))
            }
        }
    }
    match Sites::placed(names, &core, &pairs, &places) {
        Ok(s) => Some(s),
        Err(errors) => {
            problems.extend(errors.into_iter().map(|e| Problem::new("sites", e.to_string())));
            None
        }
    }
}

/// The thresholds of `[thresholds]` over the defaults, with the tick `tick_ms`; problems
/// (a bad duration, a validation failure) are collected.
pub fn thresholds(raw: &ThresholdsTable, tick_ms: u64, problems: &mut Vec<Problem>) -> Thresholds {
    let mut t = Thresholds { period_ms: tick_ms.max(1), ..Thresholds::default() };
    let mut ms = |key: &str, v: Option<f64>, d: u64| {
        v.map_or(d, |s| seconds(&format!("thresholds.{key}"), s, problems))
    };
    t.dwell_ms = ms("dwell_s", raw.dwell_s, t.dwell_ms);
    t.hold_ms = ms("hold_s", raw.hold_s, t.hold_ms);
    t.settle_ms = ms("settle_s", raw.settle_s, t.settle_ms);
    t.lease_ttl_ms = ms("lease_ttl_s", raw.lease_ttl_s, t.lease_ttl_ms);
    t.lease_drift_margin_ms =
        ms("lease_drift_margin_s", raw.lease_drift_margin_s, t.lease_drift_margin_ms);
    t.cap_ms = raw.cap_ms.unwrap_or(t.cap_ms);
    t.gain_ms = raw.gain_ms.unwrap_or(t.gain_ms);
    t.group_radius_m = raw.group_radius_m.unwrap_or(t.group_radius_m);
    t.border_margin_m = raw.border_margin_m.unwrap_or(t.border_margin_m);
    t.merge_distance_m = raw.merge_distance_m.unwrap_or(t.merge_distance_m);
    t.lead_s = raw.lead_s.unwrap_or(t.lead_s);
    t.players_per_server = raw.players_per_server.unwrap_or(t.players_per_server);
    t.tps_min = raw.tps_min.unwrap_or(t.tps_min);
    t.merge_fill_ratio = raw.merge_fill_ratio.unwrap_or(t.merge_fill_ratio);
    t.pack_fill_ratio = raw.pack_fill_ratio.unwrap_or(t.pack_fill_ratio);
    t.split_after_samples = raw.split_after_samples.unwrap_or(t.split_after_samples);
    t.merge_after_samples = raw.merge_after_samples.unwrap_or(t.merge_after_samples);
    if let Some(w) = &raw.weights {
        t.weights.pilot = w.pilot.unwrap_or(t.weights.pilot);
        t.weights.player = w.player.unwrap_or(t.weights.player);
        t.weights.afk = w.afk.unwrap_or(t.weights.afk);
    }
    if let Err(errors) = t.validate() {
        problems.extend(errors.into_iter().map(|e| Problem::new("thresholds", e.to_string())));
    }
    t
}

/// Reads `[sites]` and `[thresholds]` (absent: the defaults) from any serde format's values
/// (the core's configuration passes TOML ones). `period_ms` is the tick.
pub fn sites_and_thresholds<'de, D: Deserializer<'de>>(
    sites_table: D,
    thresholds_table: Option<D>,
    period_ms: u64,
) -> Result<(Sites, Thresholds), Vec<Problem>> {
    let raw_sites = SitesTable::deserialize(sites_table)
        .map_err(|e| vec![Problem::new("sites", e.to_string())])?;
    let raw_thresholds = match thresholds_table {
        Some(t) => ThresholdsTable::deserialize(t)
            .map_err(|e| vec![Problem::new("thresholds", e.to_string())])?,
        None => ThresholdsTable::default(),
    };
    let mut problems = Vec::new();
    let sites = sites(&raw_sites, &mut problems);
    let thresholds = thresholds(&raw_thresholds, period_ms, &mut problems);
    match sites {
        Some(sites) if problems.is_empty() => Ok((sites, thresholds)),
        _ => Err(problems),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(sites: &str, thresholds: Option<&str>) -> Result<(Sites, Thresholds), Vec<Problem>> {
        let value = |t: &str| t.parse::<toml::Table>().map(toml::Value::Table).expect("TOML");
        sites_and_thresholds(value(sites), thresholds.map(value), 5000)
    }

    #[test]
    fn the_tables_read_with_defaults_and_every_problem_named_by_its_key() {
        let sites = r#"core = "PAR"
            list = ["PAR", "MTL"]
            backbone_rtt_ms = { PAR-MTL = 85 }"#;
        let (s, t) = read(sites, Some("dwell_s = 10")).unwrap();
        assert_eq!((s.len(), t.dwell_ms, t.period_ms), (2, 10_000, 5000));
        assert_eq!(t.hold_ms, Thresholds::default().hold_ms);
        let problems =
            read(&sites.replace("PAR-MTL", "PARMTL"), Some("dwell_s = -1\nsettle_s = 1e12"))
                .unwrap_err();
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        for key in ["sites.backbone_rtt_ms.PARMTL", "thresholds.dwell_s", "thresholds.settle_s"] {
            assert!(keys.contains(&key), "{key} in {problems:?}");
        }
        let unknown = read(sites, Some("dwel_s = 1")).unwrap_err();
        assert!(unknown[0].why.contains("unknown field `dwel_s`"), "{unknown:?}");
    }

    /// A new site simulated from its place alone: its pairs start at their physical floors
    /// (great circle at fibre speed), the configured pairs stay as given, and a measurement
    /// below a floor is not believed.
    #[test]
    fn coordinates_give_each_pair_its_physical_floor_and_a_missing_pair_starts_there() {
        let sites = r#"core = "PAR"
            list = ["PAR", "MTL", "SYD"]
            backbone_rtt_ms = { PAR-MTL = 85 }
            coordinates = { PAR = [48.86, 2.35], MTL = [45.50, -73.57], SYD = [-33.87, 151.21] }"#;
        let (mut s, _) = read(sites, None).unwrap();
        let id = |n: &str| s.id(n).unwrap();
        let (par, mtl, syd) = (id("PAR"), id("MTL"), id("SYD"));
        let floor = s.floor_ms(par, mtl).unwrap();
        // Paris–Montréal is about 5,510 km: 55 ms there and back at 200,000 km/s.
        assert!((floor - 55.1).abs() < 0.5, "{floor}");
        assert_eq!(s.backbone_ms(par, mtl), 85.0, "configured, not replaced");
        let par_syd = s.backbone_ms(par, syd);
        assert_eq!(Some(par_syd), s.floor_ms(par, syd), "left out: starts at its floor");
        assert!((par_syd - 169.9).abs() < 1.0, "Paris–Sydney ~16,990 km: {par_syd}");
        assert_eq!(s.set_backbone_ms(par, mtl, 40.0), Err(floor), "below the floor");
        assert_eq!(s.backbone_ms(par, mtl), 85.0, "not used");
        assert_eq!(s.set_backbone_ms(par, mtl, 90.0), Ok(()));
        assert_eq!(s.backbone_ms(mtl, par), 90.0);
        // Without a place, a pair left out is still missing.
        let unplaced = sites.replace(", SYD = [-33.87, 151.21]", "");
        let problems = read(&unplaced, None).unwrap_err();
        let whys: Vec<&str> = problems.iter().map(|p| p.why.as_str()).collect();
        assert!(whys.iter().any(|w| w.contains("between PAR and SYD is missing")), "{whys:?}");
    }

    #[test]
    fn bad_coordinates_are_named_by_their_key() {
        let sites = r#"core = "PAR"
            list = ["PAR", "MTL"]
            backbone_rtt_ms = { PAR-MTL = 85 }
            coordinates = { PAR = [98.0, 2.35], MTL = [45.5, -273.0], TOK = [35.7, 139.7] }"#;
        let problems = read(sites, None).unwrap_err();
        let whys: Vec<&str> = problems.iter().map(|p| p.why.as_str()).collect();
        assert_eq!(
            whys,
            [
                "sites.coordinates.MTL: longitude -273 must be within ±180 degrees",
                "sites.coordinates.PAR: latitude 98 must be within ±90 degrees",
                "sites.coordinates.TOK: not a listed site",
            ]
        );
    }
}

/// One `[[delegations]]` entry (the `fixed` stage): a world, whole or a box of it, and the
/// relay site it is delegated to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegationTable {
    /// The world's id (default 0).
    #[serde(default)]
    pub world: u32,
    /// The delegated box, in the world's local coordinates (metres); neither: the whole world.
    pub min: Option<[f64; 3]>,
    pub max: Option<[f64; 3]>,
    pub site: String,
}

/// `[[delegations]]`, checked against the sites and the world's range `±limit` m: the
/// delegations, and every problem with its key (`delegations[i].site`, `delegations[i]`).
pub fn delegations(
    raw: &[DelegationTable],
    sites: &Sites,
    limit: f64,
    problems: &mut Vec<Problem>,
) -> Vec<crate::Delegation> {
    let mut out = Vec::new();
    for (i, d) in raw.iter().enumerate() {
        let Some(site) = sites.id(&d.site) else {
            let known: Vec<String> = sites.ids().map(|s| sites.name(s).to_string()).collect();
            let why = format!("{:?} is not a site of [sites] ({})", d.site, known.join(", "));
            problems.push(Problem::new(format!("delegations[{i}].site"), why));
            continue;
        };
        let v = |p: [f64; 3]| crate::Vec3::new(p[0], p[1], p[2]);
        let bounds = match (d.min, d.max) {
            (None, None) => None,
            (Some(min), Some(max)) => Some(crate::Aabb { min: v(min), max: v(max) }),
            _ => {
                let why = "give both min and max, or neither (the whole world)";
                problems.push(Problem::new(format!("delegations[{i}]"), why));
                continue;
            }
        };
        out.push(crate::Delegation { world: crate::WorldId(d.world), bounds, site });
    }
    if let Err(errors) = crate::validate_delegations(&out, sites.core(), limit) {
        for e in errors {
            let crate::ConfigError::BadDelegation { index, why } = e else { continue };
            problems.push(Problem::new(format!("delegations[{index}]"), why));
        }
    }
    out
}
