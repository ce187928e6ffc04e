//! # horizon-chaos — the whole mesh under faults, in virtual time
//!
//! `horizon sim chaos` runs the real logic of every daemon — the core's [`CoreMachine`] (brain,
//! registry, handovers, failover, backup), each site's agent ([`AgentMachine`]) and its game
//! servers ([`ServerMachine`] running the reference game) — over a simulated network
//! (`world.rs` says what it models and what not), with simulated players, and one fault after
//! another drawn from a seed (`faults.rs`). After every step that could break one, it checks
//! design.md §6's invariants I1–I6 and liveness (`checks.rs`); with a standby core
//! (`--standby`), I7 too. A run is a pure function of its
//! seed and the code: the same seed and commit give byte-identical output.
//!
//! [`CoreMachine`]: horizon_core::machine::CoreMachine
//! [`AgentMachine`]: horizon_agent::machine::AgentMachine
//! [`ServerMachine`]: horizon_sdk::ServerMachine

mod checks;
mod faults;
mod world;

use std::sync::atomic::{AtomicU64, Ordering};

use horizon_mesh::rng::Rng;

pub use horizon_core::Stage;
use serde::Serialize;

pub use checks::{LIVENESS_S, ROUTE_ROUND_S, Violation};
pub use faults::{Direction, Fault, SITES, Timed};
pub use world::RunStats;

/// Seeds that once broke an invariant and pass now, replayed by `--regressions` (every
/// `.ci/run`) whatever the range run. What each found is in docs/chaos.md.
pub const REGRESSION_SEEDS: &[u64] = &[
    0, 1, 2, 3, 8, 11, 13, 24, 27, 37, 43, 53, 64, 85, 109, 142, 166, 198, 203, 210, 294, 333, 352,
    392, 430, 456, 459, 469, 575, 658, 994, 1271, 1505, 1883, 7340086, 8801045, 8801223, 9001917,
    9004673, 9010789, 9011017, 9012505, 9013548, 9013801, 9014480, 9015372, 9016462, 9016699,
    9017558, 9100483, 9106018, 9201977, 9410322, 9413471, 9500520, 9500642, 9502119, 9503306,
    9504646, 9505303, 9506328, 9506520, 9508320, 9509257, 100159, 101501, 101780, 201286, 201719,
    9216820, 1170,
];

/// Seeds that once broke an invariant with `drains` and `overlapping`, replayed by
/// `--regressions` in that mode (besides the mode's list without `drains`). 1411, 2627: a
/// drained server's region moving within its site under a newer epoch, the regrant lost with
/// the core's connection; at the registration the bubble failed over at once while the old
/// server still ran it (I2).
pub const DRAINS_OVERLAPPING_REGRESSION_SEEDS: &[u64] = &[1411, 2627];

/// Seeds that once broke an invariant with `drains`, `standby` and `overlapping`, replayed by
/// `--regressions` in that mode. 1196: a drained part moved to the end of its bubble's parts,
/// shifting the others: copies labelled by part mixed two layouts (I4).
pub const DRAINS_STANDBY_OVERLAPPING_REGRESSION_SEEDS: &[u64] = &[1196];

/// What to run.
#[derive(Clone, Debug)]
pub struct ChaosOptions {
    /// Simulated seconds per seed.
    pub seconds: f64,
    /// A second fault strikes during each (see `faults::overlap`).
    pub overlapping: bool,
    /// The core's rollout stage. Under [`Stage::Relay`] every player is in a core-site zone;
    /// under [`Stage::Dynamic`] the core site's players are, and the others' groups in bubbles.
    /// A server holds [`PLAYERS_PER_SERVER`] players, so zones and bubbles' parts split and
    /// merge under the faults.
    pub stage: Stage,
    /// Two cores on a simulated store with an election lease (`world/election.rs`): the
    /// leader may die or be cut from the store, the store may change leader (every lease's TTL
    /// reset), and the standby takes over; I7 is checked too.
    pub standby: bool,
    /// Servers are told to stop (SIGTERM) where they would be killed: they drain their
    /// regions to other servers of their site (`faults::drains`).
    pub drains: bool,
}

impl Default for ChaosOptions {
    fn default() -> Self {
        ChaosOptions {
            seconds: 300.0,
            overlapping: false,
            stage: Stage::Dynamic,
            standby: false,
            drains: false,
        }
    }
}

/// Seeds that once broke an invariant with `standby`, replayed by `--regressions` in that mode.
/// 900588: a player's state kept for a bubble they had left was joined when they came back to
/// it, though a newer state of theirs had passed through since (I4 at the run's end).
pub const STANDBY_REGRESSION_SEEDS: &[u64] = &[900588];

/// Seeds that once broke an invariant with `standby` and `overlapping`, replayed by
/// `--regressions` in that mode. 700267: a bubble's server died while its site was cut from
/// the core, just after a player crossed into it; the brain had ended the bubble meanwhile, and
/// its holder registered again without it, its `Lost` never delivered: nobody asked the site
/// for the crossing it kept, and the player started afresh in the bubble they went on to.
pub const STANDBY_OVERLAPPING_REGRESSION_SEEDS: &[u64] = &[700267];

/// `players_per_server` of the simulated servers, under every stage: small enough that the
/// world's groups (four to five players each) cut their region — a zone of the core site, or a
/// bubble across servers of its site — and a crowd gathering or leaving cuts or joins regions.
pub const PLAYERS_PER_SERVER: u32 = 3;

/// Seeds that once broke an invariant under [`Stage::Relay`], replayed by `--regressions`
/// under it. 9600998: a zone's move off an overfull server was given up and the zone regranted
/// in place; a crossing's state arriving meanwhile was joined under the old epoch, which the
/// server (regranted first) refused, and the player stayed a member nobody simulated (no
/// update for 60 s).
pub const RELAY_REGRESSION_SEEDS: &[u64] = &[30002318, 9600998];

/// Seeds that once broke an invariant under [`Stage::Relay`] with `overlapping`, replayed by
/// `--regressions` in that mode. 50000396: a region moved to another server of its site ran
/// there from tick 0 under the same epoch, so a copy of it carried the (epoch, tick) of an
/// older copy the core kept, and the core took what the new one covered for the old one's:
/// acknowledged inputs lost at the restore that followed.
/// 50001526: a zone lost between ticks was restored with the players of the last tick's count,
/// read by places that players leaving had changed since: the brain indexed past the end.
pub const RELAY_OVERLAPPING_REGRESSION_SEEDS: &[u64] = &[50000396, 50001526];

/// Seeds that once broke an invariant with `overlapping`, replayed by `--regressions` in that
/// mode. 30382: the core restarted and a Paris zone's server died at the same second, just after
/// a player crossed into the zone; the restarted core, with no trail of that crossing, asked
/// nobody for the state the site had kept, and the zone restored them afresh.
pub const OVERLAPPING_REGRESSION_SEEDS: &[u64] = &[
    7, 28, 37, 56, 5724, 6020, 6565, 6707, 7656, 8028, 8051, 8322, 8906, 8965, 9487, 9670, 30133,
    30382, 9232, 5004, 5118,
];

/// One seed's run.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub seed: u64,
    pub faults: Vec<Timed>,
    pub violations: Vec<Violation>,
    pub stats: RunStats,
    /// What happened, in order (faults, connections, grants, kills).
    #[serde(skip)]
    pub trace: Vec<String>,
}

/// The faults a seed's run carries out, and the generator the run goes on with.
fn draw(seed: u64, opts: &ChaosOptions) -> (Vec<Timed>, Rng) {
    let mut rng = Rng::new(seed ^ 0x5eed_c4a0_5000_0000);
    let mut faults = faults::schedule(&mut rng, opts.seconds, opts.standby);
    if opts.overlapping {
        faults::overlap(&mut Rng::new(seed ^ 0x04e4_1a95_0000_0000), opts.seconds, &mut faults);
    }
    if opts.drains {
        faults::drains(&mut faults);
    }
    (faults, rng)
}

/// The faults of a seed's run, without running it.
pub fn schedule_of(seed: u64, opts: &ChaosOptions) -> Vec<Timed> {
    draw(seed, opts).0
}

/// Runs one seed.
pub fn run_seed(seed: u64, opts: &ChaosOptions) -> Run {
    let (faults, rng) = draw(seed, opts);
    let mut world = world::World::new(seed, opts, faults.clone(), rng);
    world.run();
    Run {
        seed,
        faults,
        violations: world.checker.violations.clone(),
        stats: world.stats.clone(),
        trace: std::mem::take(&mut world.trace),
    }
}

/// [`run_seed`], with a panic of the code under test (the brain, a machine) reported as a
/// violation of the seed (`panic`), not lost with its worker's other runs.
fn run_seed_or_panic(seed: u64, opts: &ChaosOptions) -> Run {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_seed(seed, opts)));
    run.unwrap_or_else(|payload| {
        let detail = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic".to_owned());
        let (faults, _) = draw(seed, opts);
        let violation = Violation { seed, invariant: "panic", at_s: f64::NAN, detail };
        Run {
            seed,
            faults,
            violations: vec![violation],
            stats: RunStats::default(),
            trace: Vec::new(),
        }
    })
}

/// Runs `count` seeds from `first` on `threads` threads; `progress` is called after each run
/// with the number done. Runs come back in seed order, every one of them (a seed whose run
/// panicked carries a `panic` violation).
pub fn run_seeds(
    first: u64,
    count: u64,
    opts: &ChaosOptions,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Vec<Run> {
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let mut runs: Vec<Run> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            break;
                        }
                        mine.push(run_seed_or_panic(first + i, opts));
                        progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                    }
                    mine
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect()
    });
    runs.sort_by_key(|r| r.seed);
    runs
}

/// The `--json` document of several runs.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub runs: u64,
    pub seconds: f64,
    pub overlapping: bool,
    pub first_seed: u64,
    pub violations: Vec<Violation>,
    pub totals: RunStats,
}

impl Summary {
    pub fn of(runs: &[Run], opts: &ChaosOptions, first_seed: u64) -> Summary {
        let mut totals = RunStats::default();
        for r in runs {
            let s = &r.stats;
            totals.events += s.events;
            totals.ticks_checked += s.ticks_checked;
            totals.inputs_sent += s.inputs_sent;
            totals.updates_to_players += s.updates_to_players;
            totals.handovers_started += s.handovers_started;
            totals.restores += s.restores;
            totals.zone_splits += s.zone_splits;
            totals.zone_merges += s.zone_merges;
            totals.carves += s.carves;
            totals.dissolves += s.dissolves;
            totals.region_moves += s.region_moves;
            totals.drains += s.drains;
            totals.drains_failed_over += s.drains_failed_over;
            totals.cuts_routed_round += s.cuts_routed_round;
            totals.cut_gap_max_ms = totals.cut_gap_max_ms.max(s.cut_gap_max_ms);
            totals.relayed += s.relayed;
            totals.core_generations = totals.core_generations.max(s.core_generations);
        }
        Summary {
            runs: runs.len() as u64,
            seconds: opts.seconds,
            overlapping: opts.overlapping,
            first_seed,
            violations: runs.iter().flat_map(|r| r.violations.clone()).collect(),
            totals,
        }
    }
}

/// A run's trace as text, and each violation with the last events before it.
pub fn render_run(run: &Run, full: bool) -> String {
    let mut out = format!("seed {}: {} fault(s)\n", run.seed, run.faults.len());
    for f in &run.faults {
        out.push_str(&format!("  at {:>5.0} s  {:?}\n", f.at_s, f.fault));
    }
    let s = &run.stats;
    out.push_str(&format!(
        "  {} events, {} ticks checked, {} inputs sent, {} updates shown, {} restores, {} zone splits, {} zone merges, {} carves, {} dissolves, {} region moves, {} cuts routed round ({} relayed), generation {}{}\n",
        s.events,
        s.ticks_checked,
        s.inputs_sent,
        s.updates_to_players,
        s.restores,
        s.zone_splits,
        s.zone_merges,
        s.carves,
        s.dissolves,
        s.region_moves,
        s.cuts_routed_round,
        s.relayed,
        s.core_generations,
        if s.takeovers > 0 || s.fences > 0 {
            format!(", {} takeovers, {} fenced", s.takeovers, s.fences)
        } else {
            String::new()
        }
    ));
    if full {
        out.push_str("trace:\n");
        for line in &run.trace {
            out.push_str(&format!("  {line}\n"));
        }
    }
    for v in &run.violations {
        out.push_str(&format!("VIOLATION {} at {:.3} s: {}\n", v.invariant, v.at_s, v.detail));
        if !full {
            let before: Vec<&String> = run
                .trace
                .iter()
                .filter(|l| {
                    l.split_whitespace()
                        .next()
                        .and_then(|t| t.parse::<f64>().ok())
                        .is_some_and(|t| t <= v.at_s)
                })
                .collect();
            for line in before.iter().rev().take(25).rev() {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    out
}
