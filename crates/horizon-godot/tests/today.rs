//! The adapter for today's servers against the GDScript stand-in (tests/fixtures/today-standin) on a
//! real headless Godot 3.2.3 (`godot3-server`, which tests/run installs), driven as the agent
//! drives a game server: horizon-sdk's `ServerMachine` over the adapter's `TodayGame`. Today's
//! server simulates on its own; what is checked is the fence the adapter adds: a zone is on
//! the server only while its lease is valid, moves are forwarded once and only then, orders
//! and reports of an older epoch are refused, and a handover carries players between two of
//! today's servers.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use horizon_godot::Broken;
use horizon_godot::today::{self, TodayGame, TodayHosted, TodayOptions, TodayServer};
use horizon_proto::server::{Reply, Request};
use horizon_proto::{
    Blob, BubbleId, Epoch, Input, Inputs, Lease, LeaseRef, PlayerId, Region, Seq, StateItem,
    Update, WorldId,
};
use horizon_sdk::{Counters, ServerMachine};
use serde_json::Value;
use tokio::time::Instant;

const GODOT: &str = "godot3-server";
const BUBBLE: BubbleId = BubbleId(7);
const REGION: Region = Region { world: WorldId(1), bounds: None };

type Reports = Arc<Mutex<Vec<String>>>;

/// Today's server started by the adapter, prewarmed and ready; what broke it is recorded.
fn today_server() -> (TodayGame, TodayHosted, Reports) {
    assert!(
        std::process::Command::new(GODOT).arg("--version").output().is_ok(),
        "{GODOT} is needed: apt-get install -y --no-install-recommends godot3-server"
    );
    let project =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/today-standin");
    let opts = TodayOptions {
        server: TodayServer::Start { command: vec![GODOT.into()], project },
        connect_within: Duration::from_secs(15),
        ready_within: Duration::from_secs(30),
        ready_tps: 58.0,
        silent_within: Duration::from_secs(5),
    };
    let reports = Reports::default();
    let r = reports.clone();
    let broken = Broken::new(move |e| r.lock().expect("reports").push(e.to_string()));
    let (game, hosted) = today::host::start(&opts, broken).expect("today's server starts, ready");
    (game, hosted, reports)
}

fn lease(epoch: u64) -> Lease {
    Lease { bubble: BUBBLE, epoch: Epoch(epoch), ttl_ms: 30_000 }
}

fn lref(epoch: u64) -> LeaseRef {
    LeaseRef { bubble: BUBBLE, epoch: Epoch(epoch) }
}

fn serve(m: &mut ServerMachine<TodayGame>, request: Request, now: Instant) -> Reply {
    m.serve(&request, now).unwrap_or_else(|f| panic!("{request:?} refused: {f:?}"))
}

fn moves(player: u64, from_seq: u64, moves: &[&str]) -> StateItem {
    let inputs = moves
        .iter()
        .enumerate()
        .map(|(i, m)| Input {
            player: PlayerId(player),
            seq: Seq(from_seq + i as u64),
            bytes: Blob(m.as_bytes().to_vec()),
        })
        .collect();
    StateItem::Inputs(Inputs { bubble: BUBBLE, inputs })
}

/// Ticks every 50 ms of real time for `secs` (today's server runs in real time), its clock
/// shifted by `ahead` (a lease lapses without waiting 30 s); the updates it sent. What else
/// it sent (a handover's deltas) goes to `rest`.
async fn run_keeping(
    m: &mut ServerMachine<TodayGame>,
    secs: f64,
    ahead: Duration,
    rest: &mut Vec<StateItem>,
) -> Vec<Update> {
    let mut updates = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
        m.tick(Instant::now() + ahead);
        while let Some(item) = m.poll_item() {
            match item {
                StateItem::Update(u) => updates.push(u),
                other => rest.push(other),
            }
        }
    }
    updates
}

async fn run(m: &mut ServerMachine<TodayGame>, secs: f64, ahead: Duration) -> Vec<Update> {
    run_keeping(m, secs, ahead, &mut Vec::new()).await
}

/// A player's position in a view.
fn position(update: &Update, player: u64) -> Option<[f64; 3]> {
    let view: Value = serde_json::from_slice(&update.bytes.0).expect("a JSON view");
    let id = player.to_string();
    let p = view["players"].as_array()?.iter().find(|p| p["id"].as_str() == Some(&id))?;
    let xyz: Vec<f64> = p["position"].as_array()?.iter().filter_map(Value::as_f64).collect();
    Some([xyz[0], xyz[1], xyz[2]])
}

fn zone_of(update: &Update) -> Value {
    serde_json::from_slice::<Value>(&update.bytes.0).expect("a JSON view")["zone"].clone()
}

/// Waits until today's server says (in its `serverinfo`) it holds `players` players.
async fn server_holds(hosted: &TodayHosted, players: u32) -> bool {
    for _ in 0..40 {
        if hosted.link().info().is_some_and(|i| i.players == players) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "current_thread")]
async fn a_zone_lives_on_today_s_server_only_under_a_valid_lease() {
    let (game, hosted, broken) = today_server();
    assert!(hosted.ready.tps >= 58.0 && hosted.ready.chunks_loading == 0, "{:?}", hosted.ready);
    let counters = Arc::new(Counters::default());
    let mut m = ServerMachine::new(game, counters.clone());
    let now = Instant::now();
    let assign = Request::Assign { lease: lease(3), region: REGION, from_snapshot: false };
    serve(&mut m, assign, now);
    for player in [1, 2] {
        let join = Request::Join {
            lease: lref(3),
            player: PlayerId(player),
            last_applied: Seq(0),
            state: Blob(Vec::new()),
        };
        serve(&mut m, join, now);
    }
    // Player 1 walks east at 2 m/s; a move that is not a JSON object is dropped, once.
    m.item(moves(1, 1, &[r#"{"velocity": [2.0, 0.0, 0.0]}"#, "not json"]), now);
    let updates = run(&mut m, 2.0, Duration::ZERO).await;
    let last = updates.last().expect("updates while the lease is valid");
    assert_eq!(zone_of(last), "7.3", "the zone names bubble and epoch");
    assert_eq!(last.acked, vec![(PlayerId(1), Seq(2)), (PlayerId(2), Seq(0))]);
    let [x, _, _] = position(last, 1).expect("player 1 reported");
    assert!((2.0..5.0).contains(&x), "walked ~2 m/s for ~1.5 s: x = {x}");
    assert_eq!(position(last, 2), Some([0.0, 0.0, 0.0]), "player 2 stood still");
    // Where the server says its players are is what placement gets (not what clients claim).
    let reports = m.positions(Instant::now());
    let [Request::Positions { lease, players }] = &reports[..] else { panic!("{reports:?}") };
    assert_eq!(*lease, lref(3));
    let walked = players.iter().find(|p| p.player == PlayerId(1)).expect("player 1 placed");
    assert_eq!(walked.pos.x, x, "the server's newest report");
    assert!(server_holds(&hosted, 2).await, "the server holds both players");
    assert_eq!(m.game().moves_refused(), 1);

    // The lease lapses by the adapter's clock: the zone is released on the server, moves
    // wait, no update goes out.
    let lapsed = Duration::from_secs(31);
    let applied = counters.inputs_applied.load(std::sync::atomic::Ordering::Relaxed);
    m.item(moves(1, 3, &[r#"{"velocity": [0.0, 0.0, 0.0]}"#]), Instant::now() + lapsed);
    let after = run(&mut m, 1.0, lapsed).await;
    assert!(after.is_empty(), "no update without a lease: {}", after.len());
    assert!(server_holds(&hosted, 0).await, "the zone released on the server");
    let now_applied = counters.inputs_applied.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(now_applied, applied, "no move forwarded without a lease");

    // A late renewal brings the lease back: the zone and its players are placed again where
    // the server last saw them, and the move that waited goes through, once.
    let renew = Request::Renew { leases: vec![lref(3)], ttl_ms: 30_000, sent_ago_ms: 0 };
    serve(&mut m, renew, Instant::now() + lapsed);
    let back = run(&mut m, 1.0, lapsed).await;
    let last = back.last().expect("updates again");
    assert_eq!(last.acked[0], (PlayerId(1), Seq(3)));
    let [x2, _, _] = position(last, 1).expect("player 1 placed again");
    assert!(x2 >= x, "placed where it was last seen, not at the origin: {x2} after {x}");
    assert!(server_holds(&hosted, 2).await);
    assert!(broken.lock().expect("reports").is_empty(), "{broken:?}");
    hosted.stop(Duration::from_secs(2));
}

#[tokio::test(flavor = "current_thread")]
async fn orders_and_reports_of_an_older_epoch_are_refused() {
    let (game, hosted, _broken) = today_server();
    let mut m = ServerMachine::new(game, Arc::new(Counters::default()));
    let now = Instant::now();
    serve(&mut m, Request::Assign { lease: lease(3), region: REGION, from_snapshot: false }, now);
    let join = |epoch| Request::Join {
        lease: lref(epoch),
        player: PlayerId(1),
        last_applied: Seq(0),
        state: Blob(Vec::new()),
    };
    serve(&mut m, join(3), now);
    m.item(moves(1, 1, &[r#"{"velocity": [0.0, 0.0, 1.0]}"#]), now);
    run(&mut m, 1.0, Duration::ZERO).await;
    // The handover to another site was abandoned: the same zone goes on under epoch 4.
    serve(&mut m, Request::Regrant { old: lref(3), lease: lease(4) }, Instant::now());
    let updates = run(&mut m, 1.5, Duration::ZERO).await;
    let last = updates.last().expect("updates under the new epoch");
    assert_eq!((last.epoch, zone_of(last)), (Epoch(4), Value::from("7.4")));
    assert!(position(last, 1).is_some_and(|[_, _, z]| z > 0.5), "still walking north");
    // The old epoch's orders are refused; the server's reports of zone 7.3 sent before it
    // heard of 7.4 were refused, not shown.
    let stale = Request::Assign { lease: lease(3), region: REGION, from_snapshot: false };
    assert_eq!(serve(&mut m, stale, Instant::now()), Reply::Stale { newest: Epoch(4) });
    assert!(m.serve(&join(3), Instant::now()).is_err(), "a join under the old epoch");
    assert!(updates.iter().all(|u| zone_of(u) == "7.4"));
    eprintln!(
        "reports of 7.3 refused after the regrant: {}",
        hosted.link().counts().reports_refused
    );
    hosted.stop(Duration::from_secs(2));
}

#[tokio::test(flavor = "current_thread")]
async fn a_handover_carries_players_from_one_of_today_s_servers_to_another() {
    let (source_game, source, _) = today_server();
    let (target_game, target, _) = today_server();
    let mut from = ServerMachine::new(source_game, Arc::new(Counters::default()));
    let mut to = ServerMachine::new(target_game, Arc::new(Counters::default()));
    let now = Instant::now();
    serve(
        &mut from,
        Request::Assign { lease: lease(3), region: REGION, from_snapshot: false },
        now,
    );
    let join = Request::Join {
        lease: lref(3),
        player: PlayerId(1),
        last_applied: Seq(0),
        state: Blob(Vec::new()),
    };
    serve(&mut from, join, now);
    from.item(moves(1, 1, &[r#"{"velocity": [1.0, 0.0, 0.0]}"#]), now);
    run(&mut from, 1.5, Duration::ZERO).await;
    // Prepare: the target stands by with the snapshot and the deltas; freeze; seal.
    serve(&mut to, Request::Assign { lease: lease(4), region: REGION, from_snapshot: true }, now);
    serve(&mut from, Request::Copy { lease: lref(3), deltas: true }, Instant::now());
    let mut carried = Vec::new();
    while let Some(item) = from.poll_item() {
        carried.push(item);
    }
    let at_copy = run_keeping(&mut from, 0.5, Duration::ZERO, &mut carried).await;
    let seen_at_source = position(at_copy.last().expect("updates"), 1).expect("player 1");
    serve(&mut from, Request::Freeze { lease: lref(3) }, Instant::now());
    while let Some(item) = from.poll_item() {
        carried.push(item);
    }
    for item in carried {
        to.item(item, Instant::now());
    }
    assert!(server_holds(&source, 0).await, "the source's zone released at the seal");
    let updates = run(&mut to, 1.5, Duration::ZERO).await;
    let last = updates.last().expect("the target runs from the seal");
    assert_eq!((last.epoch, zone_of(last)), (Epoch(4), Value::from("7.4")));
    assert_eq!(last.acked, vec![(PlayerId(1), Seq(1))], "the applied move came with it");
    let [x, _, _] = position(last, 1).expect("player 1 on the target");
    assert!(
        x > seen_at_source[0] - 1.0,
        "carried from ~{:.1} m, walking on: {x:.1}",
        seen_at_source[0]
    );
    assert!(server_holds(&target, 1).await);
    source.stop(Duration::from_secs(2));
    target.stop(Duration::from_secs(2));
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    let opts = TodayOptions {
        server: TodayServer::Dial("ws://127.0.0.1:9".to_owned()),
        connect_within: Duration::from_millis(300),
        ready_within: Duration::from_secs(1),
        ready_tps: 58.0,
        silent_within: Duration::from_secs(5),
    };
    let err = today::host::start(&opts, Broken::new(|_| {})).expect_err("nobody listens on 9");
    assert!(err.to_string().contains("cannot reach today's server at ws://127.0.0.1:9"), "{err}");
}

#[test]
fn a_server_that_stops_talking_is_reported_hung() {
    use futures_util::{SinkExt, StreamExt};
    // Ready once, then silent (stuck in a loop, say), the connection still open.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("ws://{}", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async move {
            listener.set_nonblocking(true).expect("nonblocking");
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let (tcp, _) = listener.accept().await.expect("accept");
            let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("handshake");
            let info = r#"{"namespace":"serverinfo","event":"report","data":{"tps":60,"chunks_loading":0,"players_number":0}}"#;
            ws.send(tokio_tungstenite::tungstenite::Message::Text(info.into())).await.expect("send");
            while ws.next().await.is_some() {}
        });
    });
    let opts = TodayOptions {
        server: TodayServer::Dial(url),
        connect_within: Duration::from_secs(5),
        ready_within: Duration::from_secs(5),
        ready_tps: 58.0,
        silent_within: Duration::from_millis(800),
    };
    let reports = Reports::default();
    let r = reports.clone();
    let broken = Broken::new(move |e| r.lock().expect("reports").push(e.to_string()));
    let (_game, hosted) = today::host::start(&opts, broken).expect("ready once");
    std::thread::sleep(Duration::from_millis(2_000));
    let reports = reports.lock().expect("reports").clone();
    assert!(
        reports.len() == 1 && reports[0].contains("said nothing for"),
        "reported hung once: {reports:?}"
    );
    hosted.stop(Duration::from_millis(100));
}
