//! One full tick (grouping + scoring + hysteresis + bubble decisions) at 10^4, 10^5 and 10^6
//! players, next to a plain memory copy of the same player records for the ratio.
//!
//! The population is realistic for an MMO: mostly groups of 1–20, a few large events of a few
//! hundred, homes weighted 50/30/20 %, pilots, AFK players and NPCs, a tenth of the players moving
//! (walking to fast ships) between ticks. Density is kept constant as the population grows.
//! Players connect in a shuffled order, not group by group, so a group's members are anywhere
//! in the mesh's arrays until its first tick renumbers them (`mesh/order.rs`). Movers go round
//! a circle every two minutes (walkers stay near their group, fast ships leave it and come
//! back), so the state is stationary: every sample measures the same kind of tick, with groups
//! splitting and merging as ships come and go.
//! Each run prints how many units of placement and bubbles the population forms, and the first
//! tick (with the renumbering). Motion is applied outside the timed section; only `Mesh::tick`
//! is measured.
//!
//! A second run of each size, `straight`, moves the movers in straight lines instead: they leave
//! their groups for good and the world drifts; a harder case, kept in sight.
//!
//! Run: `cargo bench -p horizon-mesh --bench tick`

// A benchmark times the brain on the wall clock; the brain itself never reads it (clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use horizon_mesh::rng::Rng;
use horizon_mesh::{
    Generation, Mesh, MeshConfig, Player, PlayerId, PlayerJoin, PlayerUpdate, Role, SiteName,
    Sites, Thresholds, Time, Vec3, WorldId,
};

fn sites() -> Sites {
    let n = |s: &str| SiteName::new(s).expect("valid site name");
    Sites::new(
        vec![n("PAR"), n("MTL"), n("HKG")],
        &n("PAR"),
        &[(n("PAR"), n("MTL"), 85.0), (n("PAR"), n("HKG"), 185.0), (n("MTL"), n("HKG"), 225.0)],
    )
    .expect("valid sites")
}

fn population(n: usize, seed: u64) -> Vec<PlayerJoin> {
    let s = sites();
    let homes: Vec<_> = s.ids().collect();
    let mut rng = Rng::new(seed);
    // Open space is vast: about 1,000 players per 400 km × 400 km, in 16 worlds, so groups sit
    // ~100 km apart, several times the reach of a fast ship (2 km + 500 m/s × 30 s).
    let half = 200_000.0 * (n as f64 / 1_000.0).sqrt();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let size = if rng.unit() < 0.0005 { 200 + rng.below(400) } else { 1 + rng.below(20) };
        let center =
            Vec3::new(rng.range(-half, half), rng.range(-half, half), rng.range(-5e3, 5e3));
        let world = WorldId(rng.below(16) as u32);
        let spread = if size > 100 { 1_500.0 } else { rng.range(5.0, 200.0) };
        let main = (rng.below(10) as usize).min(9);
        let main_home = homes[[0, 0, 0, 0, 0, 1, 1, 1, 2, 2][main]];
        for _ in 0..(size as usize).min(n - out.len()) {
            let home = if rng.unit() < 0.8 { main_home } else { homes[rng.below(3) as usize] };
            let role = match rng.below(20) {
                0 => Role::Npc,
                1 | 2 => Role::Afk,
                3..=5 => Role::Pilot,
                _ => Role::Player,
            };
            let velocity = if rng.unit() < 0.1 {
                let speed =
                    if rng.unit() < 0.8 { rng.range(1.0, 8.0) } else { rng.range(50.0, 500.0) };
                Vec3::new(rng.range(-1.0, 1.0), rng.range(-1.0, 1.0), 0.0) * speed
            } else {
                Vec3::ZERO
            };
            let offset = Vec3::new(rng.range(-spread, spread), rng.range(-spread, spread), 0.0);
            out.push(PlayerJoin {
                id: PlayerId(out.len() as u64 + 1),
                gateway: home,
                access_rtt_ms: rng.range(3.0, 60.0),
                role,
                world,
                position: center + offset,
                velocity,
            });
        }
    }
    // They connect in any order.
    for i in (1..out.len()).rev() {
        out.swap(i, rng.below(i as u64 + 1) as usize);
    }
    out
}

fn setup(n: usize) -> Mesh {
    let config = MeshConfig {
        sites: sites(),
        thresholds: Thresholds::default(),
        generation: Generation(1),
        placement: Default::default(),
        zones: Vec::new(),
    };
    let mut mesh = Mesh::new(config, Time::ZERO).expect("valid config");
    for j in population(n, 42) {
        mesh.handle_join(j).expect("valid join");
    }
    // Two ticks to reach the steady state (bubbles exist, players in unit order).
    for t in [0, 5] {
        let start = Instant::now();
        let stats = mesh.tick(Time::from_secs(t));
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let renumbered = if stats.renumbered { ", players renumbered" } else { "" };
        eprintln!("n = {n}: set-up tick at {t} s: {ms:.1} ms{renumbered}");
        while mesh.poll_command().is_some() {}
    }
    mesh
}

/// Movers advance by `dt_s` and, if `turn`, turn by `dt_s / 120 s` of a full circle.
fn advance(mesh: &mut Mesh, dt_s: f64, turn: bool) {
    let angle = if turn { std::f64::consts::TAU * dt_s / 120.0 } else { 0.0 };
    let (sin, cos) = angle.sin_cos();
    let moves: Vec<(PlayerId, Vec3, Vec3)> = mesh
        .players()
        .iter()
        .filter(|p| p.velocity.norm_sq() > 0.0)
        .map(|p| {
            let v = p.velocity;
            let turned = Vec3::new(v.x * cos - v.y * sin, v.x * sin + v.y * cos, v.z);
            (p.id, p.position + v * dt_s, turned)
        })
        .collect();
    for (id, position, velocity) in moves {
        let update = PlayerUpdate {
            position: Some(position),
            velocity: Some(velocity),
            ..Default::default()
        };
        let _ = mesh.handle_update(id, &update);
    }
}

/// `iters` ticks 5 s apart from `*t` (seconds, advanced past them), each after moving the
/// movers; the time spent in `Mesh::tick` alone.
fn ticks(mesh: &mut Mesh, t: &mut u64, iters: u64, turn: bool) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        advance(mesh, 5.0, turn);
        let start = Instant::now();
        black_box(mesh.tick(Time::from_secs(*t)));
        total += start.elapsed();
        while mesh.poll_command().is_some() {}
        *t += 5;
    }
    total
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("tick");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    for n in [10_000usize, 100_000, 1_000_000] {
        let mut mesh = setup(n);
        let stats = mesh.last_stats();
        eprintln!(
            "n = {n}: {} counted, {} clusters, {} bubbles, {} in zones",
            stats.counted, stats.clusters, stats.bubbles, stats.in_zone
        );
        group.throughput(Throughput::Elements(n as u64));
        // The set-up ticked at 0 and 5 s.
        let mut t = 10;
        group.bench_with_input(BenchmarkId::new("full", n), &n, |b, _| {
            b.iter_custom(|iters| ticks(&mut mesh, &mut t, iters, true))
        });
        let src: Vec<Player> = mesh.players().to_vec();
        let mut dst = src.clone();
        group.bench_with_input(BenchmarkId::new("memcpy_players", n), &n, |b, _| {
            b.iter(|| {
                dst.clone_from_slice(black_box(&src));
                black_box(&dst);
            })
        });
        // The same population with movers that never turn: they leave their groups for good,
        // so the world drifts as the run goes on (at 10⁶, clusters grow from 93,000 to about
        // 112,000 within a minute of ticks, and players are renumbered once or twice): what is
        // measured depends on how long criterion runs. A harder case kept in sight.
        let (mut mesh, mut t) = (setup(n), 10);
        group.bench_with_input(BenchmarkId::new("straight", n), &n, |b, _| {
            b.iter_custom(|iters| ticks(&mut mesh, &mut t, iters, false))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
