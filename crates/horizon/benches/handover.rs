//! Handovers through the real daemons: `cargo bench -p horizon --bench handover`.
//!
//! The three sites' daemons (core, agents, Rust reference game servers) over the emulated WAN
//! of `horizon demo` (PAR-MTL 85 ms, PAR-HKG 185 ms, MTL-HKG 225 ms, 10 ms access). For each
//! pair of sites, [`GROUPS`] groups of four players standing still, two homed at each end. The
//! two sides go AFK and come back every [`PERIOD`] in anti-phase, so each group's majority
//! swaps sides on that beat and its bubble moves there and back (scoring every second, dwell
//! 1 s, hold 2 s). Every player's gateway times the gap in their updates at each move; the
//! figures per direction are the freeze p50/p99 and its excess beyond the physical floor
//! `d(S,T) + d(T,h) − d(S,h) + tick` (p50/p99/max), the goal being p99 excess ≤ 10 ms
//! (docs/performance.md keeps the figures). `HORIZON_BENCH_SECONDS` sets how long it plays
//! (default 240: over 200 handovers per pair of sites).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_types)]

use std::path::PathBuf;
use std::time::Duration;

use horizon_proto::Role;
use horizon_testkit::bots::{self, Away, BotSpec, Motion};
use horizon_testkit::{Sandbox, SandboxOptions, stats};

/// Groups per pair of sites.
const GROUPS: usize = 6;
/// How long each side of a group is away, then back.
const PERIOD: Duration = Duration::from_secs(6);
/// Groups stand this far apart: they never share a bubble.
const SPACING_M: f64 = 5_000.0;
const PAIRS: [(&str, &str); 3] = [("PAR", "MTL"), ("PAR", "HKG"), ("MTL", "HKG")];

fn quantile(v: &[f64], p: f64) -> f64 {
    stats::quantile(v, p).unwrap_or(f64::NAN)
}

fn main() {
    let seconds: u64 =
        std::env::var("HORIZON_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(240);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(run(Duration::from_secs(seconds)));
}

async fn run(play: Duration) {
    let dir = std::env::temp_dir().join(format!("horizon-bench-ho-{}", std::process::id()));
    let mut opts =
        SandboxOptions::three_sites(PathBuf::from(env!("CARGO_BIN_EXE_horizon")), dir.clone());
    opts.thresholds.period_ms = 1_000;
    opts.thresholds.dwell_ms = 1_000;
    opts.thresholds.hold_ms = 2_000;
    opts.warm_pool = 3;
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(2, Duration::from_secs(60)).await, "servers ready");
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut specs = Vec::new();
    for (p, (a, b)) in PAIRS.iter().enumerate() {
        for g in 0..GROUPS {
            let x = ((p * GROUPS + g) as f64) * SPACING_M;
            for (i, site) in [a, b, a, b].into_iter().enumerate() {
                specs.push(BotSpec {
                    name: format!("{}-{a}{b}{g}-{i}", site.to_ascii_lowercase()),
                    site: (*site).to_owned(),
                    gateway: sandbox.gateways[*site],
                    role: Role::Player,
                    world: 1,
                    start: [x + 3.0 * i as f64, 0.0, 0.0],
                    motion: Motion::Still,
                    join_after: Duration::from_millis(100 * (specs.len() as u64 % 40)),
                    input_every: Duration::from_millis(100),
                    // `a` away first, then `b`: the majority swaps every PERIOD.
                    afk: Away::Alternating { period: PERIOD, first: site == a },
                    leave_after: None,
                    reconnect_after: None,
                    claim: None,
                    enters_at: None,
                    measure: None,
                });
            }
        }
    }
    let players = specs.len();
    let running: Vec<_> = specs
        .into_iter()
        .map(|spec| {
            bots::spawn(spec, roots.clone(), sandbox.player_tokens.clone(), stop_rx.clone())
        })
        .collect();
    eprintln!("{players} players in {} groups, playing {} s", PAIRS.len() * GROUPS, play.as_secs());
    let started = tokio::time::Instant::now();
    while started.elapsed() < play {
        tokio::time::sleep(Duration::from_secs(30).min(play)).await;
        let timed = sandbox.freezes(false).len();
        eprintln!("t={:>4} s  freezes timed: {timed}", started.elapsed().as_secs());
    }
    stop.send(true).unwrap();
    for (_, task) in running {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    let status = sandbox.core.status().await.unwrap_or_default();
    let samples = sandbox.freezes(false);
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    let stats::FreezesByPair { gaps_ms: gaps, excess_ms: mut excess } =
        stats::freezes_by_pair(&samples);
    let committed = status.handovers.committed;
    println!(
        "handovers committed: {committed} ({players} players, {} s); one freeze timed per player per move",
        play.as_secs()
    );
    println!(
        "| move | freezes timed | ≈ handovers | freeze p50 / p99 ms | excess p50 / p99 / max ms |"
    );
    println!("|---|---:|---:|---|---|");
    for (pair, mut v) in gaps {
        v.sort_by(f64::total_cmp);
        let mut e = excess.remove(&pair).unwrap_or_default();
        e.sort_by(f64::total_cmp);
        println!(
            "| {pair} | {} | {} | {:.1} / {:.1} | {:.1} / {:.1} / {:.1} |",
            v.len(),
            v.len() / 4,
            quantile(&v, 0.5),
            quantile(&v, 0.99),
            quantile(&e, 0.5),
            quantile(&e, 0.99),
            e.last().copied().unwrap_or(f64::NAN),
        );
    }
}
