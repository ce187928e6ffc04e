//! `horizon`: the one binary. Each subcommand is a thin shell over a library crate.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};

/// Exit code for bad input files or configuration (EX_USAGE).
const EXIT_BAD_INPUT: u8 = 64;
/// Exit code for a broken invariant: a bug, reproducible from the seed (EX_SOFTWARE).
const EXIT_BUG: u8 = 70;

#[derive(Debug, Parser)]
#[command(name = "horizon", version, about = "Horizon, the SMD-G orchestrator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulations over the real placement brain.
    #[command(subcommand)]
    Sim(Sim),
}

#[derive(Debug, Subcommand)]
enum Sim {
    /// Run a scenario file in virtual time and print its timeline (or one JSON document).
    Run {
        /// The scenario (TOML); see docs/scenarios.md.
        file: PathBuf,
        /// Print one JSON document instead of the timeline.
        #[arg(long)]
        json: bool,
        /// Also print every moving-border step.
        #[arg(long)]
        verbose: bool,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Sim(Sim::Run { file, json, verbose }) => sim_run(&file, json, verbose),
    }
}

fn sim_run(file: &std::path::Path, json: bool, verbose: bool) -> ExitCode {
    let scenario = match horizon_sim::Scenario::load(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let started = Instant::now();
    let report = match horizon_sim::run(&scenario) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BUG);
        }
    };
    let wall = started.elapsed();
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::from(EXIT_BUG);
            }
        }
    } else {
        print!("{}", horizon_sim::render_text(&report, verbose));
        println!(
            "\n{} ticks in {:.1} ms of wall time ({:.0}× real time)",
            report.stats.ticks,
            wall.as_secs_f64() * 1000.0,
            report.duration_s / wall.as_secs_f64().max(1e-9)
        );
    }
    ExitCode::SUCCESS
}
