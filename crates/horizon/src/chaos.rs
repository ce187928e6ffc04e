//! `horizon sim chaos`: runs seeds of the whole-mesh fault simulator (`horizon-chaos`) and
//! reports what broke. Progress goes to stderr; stdout is a function of the seeds and the code
//! only (the same seeds and commit print the same bytes).

use std::io::Write;
use std::process::ExitCode;

use horizon_chaos::{
    ChaosOptions, DRAINS_OVERLAPPING_REGRESSION_SEEDS, DRAINS_STANDBY_OVERLAPPING_REGRESSION_SEEDS,
    OVERLAPPING_REGRESSION_SEEDS, REGRESSION_SEEDS, RELAY_OVERLAPPING_REGRESSION_SEEDS,
    RELAY_REGRESSION_SEEDS, Run, STANDBY_OVERLAPPING_REGRESSION_SEEDS, STANDBY_REGRESSION_SEEDS,
    Stage, Summary,
};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How many seeds to run, from --first-seed.
    #[arg(long, default_value_t = 20, conflicts_with = "seed")]
    seeds: u64,
    /// The first seed of the run (seeds are run from it up, --seeds of them).
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Replay one seed and print its trace.
    #[arg(long)]
    seed: Option<u64>,
    /// Simulated seconds per seed.
    #[arg(long, default_value_t = 300.0)]
    seconds: f64,
    /// Also run the regression seeds (seeds that once failed, in this mode and stage).
    #[arg(long)]
    regressions: bool,
    /// A second fault strikes during each: a transfer cut during a partition, a server killed
    /// on a site cut off, ... (docs/chaos.md).
    #[arg(long)]
    overlapping: bool,
    /// The core's rollout stage: `dynamic` (SMD-G, bubbles on the best site) or `relay`
    /// (every player in core-site zones of 3 players a server, so zones split and merge).
    /// `measure` (placed as `relay`, its simulated players do not probe) and `fixed` (no
    /// delegations here) are refused.
    #[arg(long, default_value = "dynamic", value_parser = crate::parse_stage)]
    stage: Stage,
    /// Two cores on a simulated store with an election lease, as with `[store] kind = "etcd"`:
    /// the leader may also be cut from the store, and the store change leader; a killed or
    /// fenced leader's standby takes over, and I7 (at most one core grants) is checked too.
    #[arg(long)]
    standby: bool,
    /// Game servers are told to stop (SIGTERM) where they would be killed: each drains its
    /// regions to another server of its site before it exits (docs/chaos.md).
    #[arg(long)]
    drains: bool,
    /// Worker threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON document (`runs`, `violations`, `unexpected`, `totals`) instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn chaos(args: Args, logs: crate::daemons::LogFormat) -> ExitCode {
    if !(args.seconds.is_finite() && args.seconds >= 60.0) {
        eprintln!("error: --seconds must be at least 60 (a fault and its recovery)");
        return ExitCode::from(crate::EXIT_BAD_INPUT);
    }
    if args.stage == Stage::Measure {
        eprintln!(
            "error: --stage measure places as relay does and its players do not probe here: run --stage relay"
        );
        return ExitCode::from(crate::EXIT_BAD_INPUT);
    }
    let opts = ChaosOptions {
        seconds: args.seconds,
        overlapping: args.overlapping,
        stage: args.stage,
        standby: args.standby,
        drains: args.drains,
    };
    if let Some(seed) = args.seed {
        // The daemons' own logs, to stderr, when asked for (`RUST_LOG=horizon_agent=debug`).
        crate::daemons::init_logs("off", logs);
        let run = horizon_chaos::run_seed(seed, &opts);
        if args.json {
            print_json(&Summary::of(std::slice::from_ref(&run), &opts, seed));
        } else {
            print!("{}", horizon_chaos::render_run(&run, true));
        }
        return verdict(&[run]);
    }
    let threads =
        args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let total = args.seeds;
    let step = (total / 20).max(1);
    let progress = |done: u64| {
        if done.is_multiple_of(step) || done == total {
            eprintln!("chaos: {done}/{total} seeds");
        }
    };
    let mut runs = horizon_chaos::run_seeds(args.first_seed, args.seeds, &opts, threads, &progress);
    if args.regressions {
        let seeds = match (opts.stage, opts.overlapping) {
            _ if opts.standby && opts.overlapping => STANDBY_OVERLAPPING_REGRESSION_SEEDS,
            _ if opts.standby => STANDBY_REGRESSION_SEEDS,
            (Stage::Measure | Stage::Relay | Stage::Fixed, false) => RELAY_REGRESSION_SEEDS,
            (Stage::Measure | Stage::Relay | Stage::Fixed, true) => {
                RELAY_OVERLAPPING_REGRESSION_SEEDS
            }
            (Stage::Dynamic, true) => OVERLAPPING_REGRESSION_SEEDS,
            (Stage::Dynamic, false) => REGRESSION_SEEDS,
        };
        let drained: &[u64] = match (opts.drains, opts.standby, opts.overlapping) {
            (true, true, true) => DRAINS_STANDBY_OVERLAPPING_REGRESSION_SEEDS,
            (true, false, true) => DRAINS_OVERLAPPING_REGRESSION_SEEDS,
            _ => &[],
        };
        for &seed in seeds.iter().chain(drained) {
            if !(args.first_seed..args.first_seed + args.seeds).contains(&seed) {
                runs.push(horizon_chaos::run_seed(seed, &opts));
            }
        }
    }
    if args.json {
        print_json(&Summary::of(&runs, &opts, args.first_seed));
    } else {
        let bad: Vec<&Run> = runs.iter().filter(|r| !r.violations.is_empty()).collect();
        for run in &bad {
            print!("{}", horizon_chaos::render_run(run, false));
            let mut mode = if args.overlapping { " --overlapping" } else { "" }.to_owned();
            if args.stage != Stage::default() {
                mode.push_str(&format!(" --stage {}", args.stage.as_str()));
            }
            if args.standby {
                mode.push_str(" --standby");
            }
            if args.drains {
                mode.push_str(" --drains");
            }
            println!(
                "  replay: horizon sim chaos --seed {} --seconds {}{mode}",
                run.seed, args.seconds
            );
        }
        let s = Summary::of(&runs, &opts, args.first_seed);
        let drains = if opts.drains {
            format!(", {} drains ({} failed over)", s.totals.drains, s.totals.drains_failed_over)
        } else {
            String::new()
        };
        println!(
            "{} seeds × {} s: {} violation(s) in {} seed(s); {} ticks checked, {} inputs, {} restores, {} zone splits, {} zone merges, {} carves, {} dissolves, {} region moves, {} cuts routed round (longest gap {:.1} s, {} relayed){drains}",
            s.runs,
            s.seconds,
            s.violations.len(),
            bad.len(),
            s.totals.ticks_checked,
            s.totals.inputs_sent,
            s.totals.restores,
            s.totals.zone_splits,
            s.totals.zone_merges,
            s.totals.carves,
            s.totals.dissolves,
            s.totals.region_moves,
            s.totals.cuts_routed_round,
            s.totals.cut_gap_max_ms as f64 / 1000.0,
            s.totals.relayed
        );
    }
    verdict(&runs)
}

fn print_json(summary: &Summary) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer_pretty(&mut out, summary);
    let _ = writeln!(out);
}

/// Success when every run kept every invariant.
fn verdict(runs: &[Run]) -> ExitCode {
    // A violation is a bug, reproducible from its seed (docs/running.md, "Exit codes").
    if runs.iter().all(|r| r.violations.is_empty()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_BUG)
    }
}
