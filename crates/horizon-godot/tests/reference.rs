//! The GDScript reference game (godot/reference) against the Rust one, call by call, on a real
//! headless Godot 3.2.3 (`godot3-server`, which tests/run installs): the same bytes for every
//! state, player and view, so the simulated players' checks apply unchanged and a region can
//! move between a Rust and a Godot server. And the sidecar's watchdog on broken projects.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use horizon_godot::{Broken, GodotOptions, host};
use horizon_proto::{Aabb, BubbleId, PlayerId, Region, Seq, Tick, Vec3, WorldId};
use horizon_sdk::Game;
use horizon_sdk::reference::{OwnView, Reference, View, encode_input, encode_move_to};

const GODOT: &str = "godot3-server";

fn project() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../godot/reference")
}

fn options(project: PathBuf) -> GodotOptions {
    assert!(
        std::process::Command::new(GODOT).arg("--version").output().is_ok(),
        "{GODOT} is needed: apt-get install -y --no-install-recommends godot3-server"
    );
    GodotOptions {
        command: vec![GODOT.into()],
        project,
        server_name: "test-gs-1".into(),
        site: "PAR".into(),
        tick_ms: 50,
        connect_within: Duration::from_secs(10),
        reply_within: Duration::from_secs(5),
    }
}

type Reports = Arc<Mutex<Vec<String>>>;

fn recording() -> (Broken, Reports) {
    let reports = Reports::default();
    let r = reports.clone();
    (Broken::new(move |e| r.lock().expect("reports").push(e.to_string())), reports)
}

/// A view without its wall clock (the one field that is not state).
fn view(bytes: &[u8]) -> View {
    let mut v = View::decode(bytes).expect("a reference view");
    v.wall_us = 0;
    v
}

fn own(bytes: &[u8]) -> OwnView {
    let mut v = OwnView::decode(bytes).expect("a reference own state");
    v.wall_us = 0;
    v
}

#[test]
fn the_gdscript_reference_game_gives_the_rust_one_s_bytes_call_by_call() {
    let (broken, reports) = recording();
    let (godot, hosted) = host::start(&options(project()), broken).expect("Godot starts and links");
    assert!(hosted.engine.starts_with("3.2.3"), "engine {:?}", hosted.engine);
    let rust = Reference { tick_ms: 50 };
    let bounds =
        Aabb { min: Vec3 { x: -1.5, y: 0.0, z: 2.25 }, max: Vec3 { x: 10.0, y: 3.0, z: 8.0 } };
    let region = Region { world: WorldId(2), bounds: Some(bounds) };
    let bubble = BubbleId(0x8000_0000_0000_0042); // above 2^63: GDScript holds it negative
    let mut g = godot.empty(bubble, &region);
    let mut r = rust.empty(bubble, &region);
    assert_eq!(godot.encode(&g), rust.encode(&r), "empty state");

    // Player 1 is new; player 2 arrives with its state from another region.
    let mut elsewhere = rust.empty(BubbleId(9), &Region { world: WorldId(0), bounds: None });
    rust.join(&mut elsewhere, PlayerId(2), &[]);
    rust.input(&mut elsewhere, PlayerId(2), Seq(1), &encode_input([-300, 7, 1_000_000]));
    rust.step(&mut elsewhere, Tick(1));
    let carried = rust.leave(&mut elsewhere, PlayerId(2));
    godot.join(&mut g, PlayerId(1), &[]);
    rust.join(&mut r, PlayerId(1), &[]);
    // A player id above 2^63 too: ids sort unsigned in both.
    godot.join(&mut g, PlayerId(u64::MAX - 5), &carried);
    rust.join(&mut r, PlayerId(u64::MAX - 5), &carried);
    for tick in 1..=40u64 {
        let vel = [tick as i32 * -37, 5, i32::MIN / 3];
        if tick % 3 == 0 {
            godot.input(&mut g, PlayerId(1), Seq(tick / 3), &encode_input(vel));
            rust.input(&mut r, PlayerId(1), Seq(tick / 3), &encode_input(vel));
        }
        if tick == 7 {
            // Not a velocity: counted, nothing else.
            godot.input(&mut g, PlayerId(u64::MAX - 5), Seq(2), b"jump");
            rust.input(&mut r, PlayerId(u64::MAX - 5), Seq(2), b"jump");
        }
        if tick == 11 {
            // A move: where the player stands from now on, velocity zero.
            let to = encode_move_to([-5_000_000_123, 42, i64::MAX / 4]);
            godot.input(&mut g, PlayerId(u64::MAX - 5), Seq(3), &to);
            rust.input(&mut r, PlayerId(u64::MAX - 5), Seq(3), &to);
        }
        if tick % 3 == 0 || tick == 11 {
            // What a player sees of themselves the moment their input is applied.
            for p in [PlayerId(1), PlayerId(u64::MAX - 5)] {
                let (go, ro) =
                    (godot.own(&g, p).map(|b| own(&b)), rust.own(&r, p).map(|b| own(&b)));
                assert_eq!(go, ro, "player {}'s own state at tick {tick}", p.0);
                assert!(ro.is_some());
            }
        }
        if tick == 1 || tick == 40 {
            // The places placement uses: players entered once an input of theirs was applied.
            let by_player = |mut p: Vec<horizon_proto::server::PlayerPosition>| {
                p.sort_by_key(|p| p.player);
                p
            };
            let (gp, rp) = (by_player(godot.positions(&g)), by_player(rust.positions(&r)));
            assert_eq!(gp, rp, "positions at tick {tick}");
            assert_eq!(rp.len(), if tick == 1 { 1 } else { 2 }, "{rp:?}");
        }
        godot.step(&mut g, Tick(tick));
        rust.step(&mut r, Tick(tick));
        assert_eq!(
            view(&godot.view(&g, Tick(tick))),
            view(&rust.view(&r, Tick(tick))),
            "tick {tick}"
        );
    }
    assert_eq!(godot.encode(&g), rust.encode(&r), "after 40 ticks");

    // A Rust state taken over by Godot (a handover's snapshot), and on from there.
    let mut g2 = godot.decode(&rust.encode(&r)).expect("Godot decodes the Rust state");
    godot.step(&mut g2, Tick(41));
    rust.step(&mut r, Tick(41));
    assert_eq!(godot.encode(&g2), rust.encode(&r), "after a takeover");
    assert_eq!(godot.leave(&mut g2, PlayerId(1)), rust.leave(&mut r, PlayerId(1)), "a leave");
    assert_eq!(godot.leave(&mut g2, PlayerId(77)), Vec::<u8>::new(), "nobody");
    assert_eq!(godot.own(&g2, PlayerId(77)), None, "nobody's own state");
    assert_eq!(godot.encode(&g2), rust.encode(&r), "after the leave");
    let refused = godot.decode(b"\xff\xff").expect_err("garbage is refused");
    assert!(refused.contains("not a reference game state"), "{refused}");
    drop(g);
    drop(g2);
    assert_eq!(
        godot.encode(&godot.empty(BubbleId(1), &region)),
        rust.encode(&rust.empty(BubbleId(1), &region))
    );
    assert!(reports.lock().unwrap().is_empty(), "{:?}", reports.lock().unwrap());
    hosted.stop(Duration::from_secs(2));
}

fn broken_project(main: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let reference = project();
    for file in ["project.godot", "main.tscn", "postcard.gd", "addons/horizon/horizon.gd"] {
        let to = dir.path().join(file);
        std::fs::create_dir_all(to.parent().expect("in a directory")).expect("created");
        std::fs::copy(reference.join(file), to).expect("copied");
    }
    std::fs::write(dir.path().join("reference_game.gd"), main).expect("written");
    dir
}

#[test]
fn a_script_that_never_links_is_killed_at_the_deadline() {
    // Godot keeps running with no script when one fails to parse: only the deadline ends it.
    let dir = broken_project("extends Node\nfunc _ready(:\n");
    let mut opts = options(dir.path().to_owned());
    opts.connect_within = Duration::from_secs(2);
    let (broken, _) = recording();
    let err = host::start(&opts, broken).expect_err("no link");
    assert!(matches!(err, horizon_godot::HostError::NoLink(_)), "{err}");
}

#[test]
fn a_script_stuck_in_a_call_is_reported_broken_and_godot_killed() {
    let stuck = std::fs::read_to_string(project().join("reference_game.gd"))
        .unwrap()
        .replace("func step(state, tick):\n", "func step(state, tick):\n\twhile true:\n\t\tpass\n");
    let dir = broken_project(&stuck);
    let mut opts = options(dir.path().to_owned());
    opts.reply_within = Duration::from_millis(800);
    let (broken, reports) = recording();
    let (game, hosted) = host::start(&opts, broken).expect("links");
    let pid = hosted.pid();
    let mut state = game.empty(BubbleId(1), &Region { world: WorldId(0), bounds: None });
    game.step(&mut state, Tick(1));
    assert_eq!(game.view(&state, Tick(1)), Vec::<u8>::new(), "no view from a stuck game");
    let reports = reports.lock().unwrap().clone();
    assert!(reports.len() == 1 && reports[0].contains("did not answer View"), "{reports:?}");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "Godot {pid} still there");
}

#[test]
fn godot_exiting_on_its_own_is_reported_by_the_watchdog() {
    let quits = std::fs::read_to_string(project().join("reference_game.gd"))
        .unwrap()
        .replace("func step(state, tick):\n", "func step(state, tick):\n\tget_tree().quit(3)\n");
    let dir = broken_project(&quits);
    let (broken, reports) = recording();
    let (game, _hosted) = host::start(&options(dir.path().to_owned()), broken).expect("links");
    let mut state = game.empty(BubbleId(1), &Region { world: WorldId(0), bounds: None });
    game.step(&mut state, Tick(1));
    let _ = game.view(&state, Tick(1));
    std::thread::sleep(Duration::from_millis(2500));
    let reports = reports.lock().unwrap().clone();
    assert!(!reports.is_empty(), "nobody noticed Godot leave");
    drop(state);
}

#[test]
fn a_script_is_told_when_its_region_may_be_written_and_when_no_longer() {
    // A game recording what it is told, by its optional methods and by the addon's signals;
    // its view is the record.
    let recorder = r#"extends Node

func _ready():
	Horizon.connect("lease_granted", self, "_on_granted")
	Horizon.connect("lease_lost", self, "_on_lost")
	Horizon.serve(self)

func empty(_bubble, _world, _bounds):
	return {"told": []}
func encode(_state):
	return PoolByteArray()
func decode(_bytes):
	return {"told": []}
func join(_state, _player, _bytes):
	pass
func leave(_state, _player):
	return PoolByteArray()
func input(_state, _player, _seq, _bytes):
	pass
func step(_state, _tick):
	pass
func view(state, _tick):
	return PoolStringArray(state.told).join(",").to_utf8()
func lease_granted(state, bubble, epoch):
	state.told.append("granted %d %d" % [bubble, epoch])
func lease_lost(state):
	state.told.append("lost")
func _on_granted(state, _bubble, epoch):
	state.told.append("signal granted %d" % epoch)
func _on_lost(state):
	state.told.append("signal lost")
"#;
    let dir = broken_project(recorder);
    let (broken, reports) = recording();
    let (game, hosted) = host::start(&options(dir.path().to_owned()), broken).expect("links");
    let mut state = game.empty(BubbleId(7), &Region { world: WorldId(0), bounds: None });
    let epoch = 1u64 << 32 | 3;
    game.started(
        &mut state,
        horizon_proto::LeaseRef { bubble: BubbleId(7), epoch: horizon_proto::Epoch(epoch) },
    );
    game.stopped(&mut state);
    let told = String::from_utf8(game.view(&state, Tick(1))).expect("text");
    assert_eq!(told, format!("granted 7 {epoch},signal granted {epoch},lost,signal lost"));
    assert!(reports.lock().unwrap().is_empty(), "{:?}", reports.lock().unwrap());
    drop(state);
    hosted.stop(Duration::from_secs(2));
}
