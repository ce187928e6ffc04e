//! `cargo bench -p horizon-godot --bench link`: what one tick of a region costs when the game
//! is GDScript behind the loopback link, next to the same tick of the Rust reference game in
//! process. A tick is what the SDK does every tick: each player's input, the step, the view
//! (the only call that waits for a reply). Needs `godot3-server` on the PATH.

use std::time::{Duration, Instant};

use horizon_godot::{Broken, GodotOptions, host};
use horizon_proto::{Aabb, BubbleId, PlayerId, Region, Seq, Tick, Vec3, WorldId};
use horizon_sdk::Game;
use horizon_sdk::reference::{Reference, encode_input};

const TICKS: u64 = 1_000;

fn ticks<G: Game>(game: &G, players: u64) -> Vec<Duration> {
    let bounds =
        Aabb { min: Vec3 { x: 0.0, y: 0.0, z: 0.0 }, max: Vec3 { x: 1.0, y: 1.0, z: 1.0 } };
    let mut state = game.empty(BubbleId(1), &Region { world: WorldId(1), bounds: Some(bounds) });
    for p in 0..players {
        game.join(&mut state, PlayerId(p), &[]);
    }
    let mut times = Vec::with_capacity(TICKS as usize);
    let mut bytes = 0;
    for tick in 1..=TICKS {
        let started = Instant::now();
        for p in 0..players {
            game.input(&mut state, PlayerId(p), Seq(tick), &encode_input([tick as i32, -3, 7]));
        }
        game.step(&mut state, Tick(tick));
        bytes += game.view(&state, Tick(tick)).len();
        times.push(started.elapsed());
    }
    assert!(bytes > 0);
    times.sort();
    times
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let opts = GodotOptions {
        command: vec!["godot3-server".into()],
        project: std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../godot/reference"),
        server_name: "bench".into(),
        site: "PAR".into(),
        tick_ms: 33,
        connect_within: Duration::from_secs(20),
        reply_within: Duration::from_secs(5),
    };
    let (godot, hosted) = match host::start(&opts, Broken::new(|e| panic!("{e}"))) {
        Ok(started) => started,
        Err(e) => {
            eprintln!("error: {e} (is godot3-server installed?)");
            std::process::exit(1);
        }
    };
    println!("one tick of a region (inputs, step, view), {TICKS} ticks, µs");
    println!(
        "{:>8} {:>22} {:>22} {:>8}",
        "players", "Rust in process p50/p99", "Godot link p50/p99", "ratio"
    );
    for players in [1, 10, 50] {
        let rust = ticks(&Reference { tick_ms: 33 }, players);
        let gd = ticks(&godot, players);
        let p = |v: &[Duration], q: f64| us(v[((v.len() - 1) as f64 * q) as usize]);
        println!(
            "{players:>8} {:>10.1} / {:>9.1} {:>10.1} / {:>9.1} {:>7.0}×",
            p(&rust, 0.5),
            p(&rust, 0.99),
            p(&gd, 0.5),
            p(&gd, 0.99),
            p(&gd, 0.5) / p(&rust, 0.5).max(0.001)
        );
    }
    hosted.stop(Duration::from_secs(2));
}
