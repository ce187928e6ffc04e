//! Stage 1, "measure" (design.md §8): from real RTT samples of players to every site, how many
//! players would gain how much if their simulation ran on their home site instead of the core.
//!
//! Input: CSV `player,site,rtt_ms` (a header line is allowed, `#` starts a comment). A player
//! sampled several times against a site keeps the minimum, as the core does (a delay can only
//! raise an RTT). The home site is the one with the lowest RTT. The figures are those of a player
//! alone: in a group, the majority's site wins (design.md §3), so they are an upper bound.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::scenario::{Problem, ScenarioError};

/// Bounds on the input.
pub const MAX_PLAYERS: usize = 5_000_000;
pub const MAX_SITES: usize = 64;

/// What the studio compares against and with which thresholds.
#[derive(Clone, Debug)]
pub struct MeasureOptions {
    /// The site everything is simulated at today.
    pub core: String,
    /// Server frame time added to the network latency for click-to-screen.
    pub frame_ms: f64,
    /// A player "gains" with at least this much less latency.
    pub gain_ms: f64,
    /// The fairness cap.
    pub cap_ms: f64,
}

/// Percentiles in milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spread {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

/// The players of one home site.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HomeFigures {
    pub players: u64,
    /// Click-to-screen when simulated at the core site.
    pub at_core_ms: Spread,
    /// Click-to-screen when simulated at the home site.
    pub at_home_ms: Spread,
    /// Latency saved per player.
    pub gain_ms: Spread,
    /// Share of these players who gain at least `gain_ms`.
    pub gaining_share: f64,
    /// Share above the fairness cap at the core, and at home.
    pub over_cap_at_core_share: f64,
    pub over_cap_at_home_share: f64,
}

/// The result of `horizon sim measure`; serialised as its `--json` document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MeasureReport {
    pub core: String,
    pub frame_ms: f64,
    pub gain_threshold_ms: f64,
    pub cap_ms: f64,
    pub samples: u64,
    /// Players with a sample against the core site (the others cannot be compared).
    pub players: u64,
    pub players_without_core_sample: u64,
    /// Players who would gain at least the threshold, and their share.
    pub gaining: u64,
    pub gaining_share: f64,
    pub by_home: BTreeMap<String, HomeFigures>,
}

fn spread(mut v: Vec<f64>) -> Spread {
    v.sort_by(f64::total_cmp);
    let q = |q: f64| {
        if v.is_empty() {
            return 0.0;
        }
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        (v[i] * 10.0).round() / 10.0
    };
    Spread { p50: q(0.5), p95: q(0.95), p99: q(0.99) }
}

/// Reads a sample file and measures it.
pub fn measure_file(path: &Path, opts: &MeasureOptions) -> Result<MeasureReport, ScenarioError> {
    let err = |problems| ScenarioError { file: path.to_owned(), problems };
    let text = std::fs::read_to_string(path)
        .map_err(|e| err(vec![Problem { key: "file".into(), why: format!("cannot read: {e}") }]))?;
    measure(&text, opts).map_err(err)
}

/// Measures CSV text. Every bad line is reported (up to 20), not just the first.
pub fn measure(text: &str, opts: &MeasureOptions) -> Result<MeasureReport, Vec<Problem>> {
    const SHOWN: usize = 20;
    let mut problems = Vec::new();
    let mut bad = |line: usize, why: String| {
        if problems.len() < SHOWN {
            problems.push(Problem { key: format!("line {line}"), why });
        }
    };
    let mut sites: Vec<String> = Vec::new();
    // Per player: minimum RTT per site index.
    let mut players: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut samples = 0u64;
    let mut errors = 0usize;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if samples == 0 && fields.len() == 3 && fields[2].eq_ignore_ascii_case("rtt_ms") {
            continue; // the header
        }
        let [player, site, rtt] = fields[..] else {
            errors += 1;
            bad(n, format!("expected 3 fields `player,site,rtt_ms`, got {}", fields.len()));
            continue;
        };
        let rtt: f64 = match rtt.parse() {
            Ok(r) if f64::is_finite(r) && r >= 0.0 => r,
            _ => {
                errors += 1;
                bad(n, format!("rtt_ms must be a number of milliseconds >= 0, got {rtt:?}"));
                continue;
            }
        };
        if player.is_empty() || site.is_empty() {
            errors += 1;
            bad(n, "player and site must not be empty".into());
            continue;
        }
        let s = match sites.iter().position(|x| x == site) {
            Some(s) => s,
            None if sites.len() < MAX_SITES => {
                sites.push(site.to_owned());
                sites.len() - 1
            }
            None => {
                errors += 1;
                bad(n, format!("more than {MAX_SITES} sites"));
                continue;
            }
        };
        if !players.contains_key(player) && players.len() >= MAX_PLAYERS {
            errors += 1;
            bad(n, format!("more than {MAX_PLAYERS} players"));
            continue;
        }
        let row = players.entry(player).or_default();
        if row.len() <= s {
            row.resize(s + 1, f64::INFINITY);
        }
        row[s] = row[s].min(rtt);
        samples += 1;
    }
    if errors > SHOWN {
        problems.push(Problem { key: "file".into(), why: format!("{errors} bad lines in all") });
    }
    let Some(core) = sites.iter().position(|s| *s == opts.core) else {
        problems.push(Problem {
            key: "--core".into(),
            why: format!(
                "no sample names the core site {:?} (sites seen: {})",
                opts.core,
                if sites.is_empty() { "none".to_owned() } else { sites.join(", ") }
            ),
        });
        return Err(problems);
    };
    if !problems.is_empty() {
        return Err(problems);
    }

    struct Acc {
        at_core: Vec<f64>,
        at_home: Vec<f64>,
        gain: Vec<f64>,
        gaining: u64,
        over_core: u64,
        over_home: u64,
    }
    let mut by_home: Vec<Acc> = (0..sites.len())
        .map(|_| Acc {
            at_core: Vec::new(),
            at_home: Vec::new(),
            gain: Vec::new(),
            gaining: 0,
            over_core: 0,
            over_home: 0,
        })
        .collect();
    let (mut compared, mut without_core, mut gaining) = (0u64, 0u64, 0u64);
    for row in players.values() {
        let Some(&at_core) = row.get(core).filter(|r| r.is_finite()) else {
            without_core += 1;
            continue;
        };
        // The home site: the lowest RTT; ties go to the core, then to the first site seen.
        let mut home = core;
        for (s, &r) in row.iter().enumerate() {
            if r < row[home] {
                home = s;
            }
        }
        let at_home = row[home];
        let a = &mut by_home[home];
        a.at_core.push(at_core + opts.frame_ms);
        a.at_home.push(at_home + opts.frame_ms);
        a.gain.push(at_core - at_home);
        a.over_core += u64::from(at_core > opts.cap_ms);
        a.over_home += u64::from(at_home > opts.cap_ms);
        if at_core - at_home >= opts.gain_ms {
            a.gaining += 1;
            gaining += 1;
        }
        compared += 1;
    }
    let by_home = by_home
        .into_iter()
        .enumerate()
        .filter(|(_, a)| !a.gain.is_empty())
        .map(|(s, a)| {
            let n = a.gain.len() as f64;
            let figures = HomeFigures {
                players: a.gain.len() as u64,
                at_core_ms: spread(a.at_core),
                at_home_ms: spread(a.at_home),
                gain_ms: spread(a.gain),
                gaining_share: a.gaining as f64 / n,
                over_cap_at_core_share: a.over_core as f64 / n,
                over_cap_at_home_share: a.over_home as f64 / n,
            };
            (sites[s].clone(), figures)
        })
        .collect();
    Ok(MeasureReport {
        core: opts.core.clone(),
        frame_ms: opts.frame_ms,
        gain_threshold_ms: opts.gain_ms,
        cap_ms: opts.cap_ms,
        samples,
        players: compared,
        players_without_core_sample: without_core,
        gaining,
        gaining_share: gaining as f64 / compared.max(1) as f64,
        by_home,
    })
}

impl MeasureReport {
    /// A readable summary.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} samples, {} players compared against the core site {} ({} without a sample of it)",
            self.samples, self.players, self.core, self.players_without_core_sample
        );
        let _ = writeln!(
            s,
            "{} players ({:.1} %) would gain at least {} ms simulated on their home site.\n",
            self.gaining,
            100.0 * self.gaining_share,
            self.gain_threshold_ms
        );
        let _ = writeln!(
            s,
            "{:<8} {:>8} {:>22} {:>22} {:>14} {:>8} {:>16}",
            "home",
            "players",
            "at core p50/p95 (ms)",
            "at home p50/p95 (ms)",
            "gain p50 (ms)",
            "gaining",
            "over cap core/home"
        );
        for (site, h) in &self.by_home {
            let _ = writeln!(
                s,
                "{:<8} {:>8} {:>22} {:>22} {:>14.1} {:>7.1}% {:>16}",
                site,
                h.players,
                format!("{:.0} / {:.0}", h.at_core_ms.p50, h.at_core_ms.p95),
                format!("{:.0} / {:.0}", h.at_home_ms.p50, h.at_home_ms.p95),
                h.gain_ms.p50,
                100.0 * h.gaining_share,
                format!(
                    "{:.1}% / {:.1}%",
                    100.0 * h.over_cap_at_core_share,
                    100.0 * h.over_cap_at_home_share
                ),
            );
        }
        let _ = writeln!(
            s,
            "\nClick-to-screen adds a {} ms server frame. Figures are for a player alone: in a \
             group the majority's site wins, so they are an upper bound on the gain.",
            self.frame_ms
        );
        s
    }
}
