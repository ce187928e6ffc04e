//! Helpers the mesh tests share.

use std::path::PathBuf;
use std::time::Duration;

use horizon_core::CoreStatus;
use horizon_proto::Role;
use horizon_testkit::bots::{self, Away, BotReport, BotSpec, Motion};
use horizon_testkit::{Sandbox, SandboxOptions};

/// A three-site sandbox in a directory of its own (`horizon-NAME-PID`), scoring every 2 s
/// unless `tune` says otherwise, two game servers ready at every site; and its CA, for bots.
pub(crate) async fn three_sites(
    name: &str,
    tune: impl FnOnce(&mut SandboxOptions),
) -> (Sandbox, PathBuf, horizon_transport::tls::Roots) {
    let dir = std::env::temp_dir().join(format!("horizon-{name}-{}", std::process::id()));
    let mut opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    opts.thresholds.period_ms = 2_000;
    tune(&mut opts);
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    // Moved here from `lone_montrealer`, not new: two servers per site are ready within a few
    // seconds under `stress-ng --cpu 2` (the cut test, 10 s of cut included, ran in 16 s).
    assert!(sandbox.wait_ready(2, Duration::from_secs(30)).await, "game servers ready");
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).expect("the sandbox CA loads");
    (sandbox, dir, roots)
}

/// A player of `site` at `x` m, wandering, an input every 50 ms, joining after `join_after_ms`.
pub(crate) fn bot(
    name: &str,
    site: &str,
    sandbox: &Sandbox,
    x: f64,
    join_after_ms: u64,
) -> BotSpec {
    BotSpec {
        name: name.to_owned(),
        site: site.to_owned(),
        gateway: sandbox.gateways[site],
        role: Role::Player,
        world: 1,
        start: [x, 0.0, 0.0],
        motion: Motion::Wander { radius_m: 20.0, speed_mps: 1.5 },
        join_after: Duration::from_millis(join_after_ms),
        input_every: Duration::from_millis(50),
        afk: Away::Never,
        leave_after: None,
        reconnect_after: None,
        claim: None,
        enters_at: None,
        measure: None,
    }
}

/// Waits (polling the core's status) until `f` holds, at most `secs` seconds.
pub(crate) async fn wait_for<T>(
    sandbox: &Sandbox,
    secs: u64,
    mut f: impl FnMut(&CoreStatus) -> Option<T>,
) -> Option<T> {
    for _ in 0..secs * 5 {
        if let Some(status) = sandbox.core.status().await
            && let Some(t) = f(&status)
        {
            return Some(t);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// The bubble simulating `player` and the server holding it, from the core's status.
#[allow(dead_code)] // (not every test crate that shares this module reads it)
pub(crate) fn holder_of(status: &CoreStatus, player: u64) -> Option<(u64, String, String)> {
    let bubble = status.players.iter().find(|p| p.player == player)?.bubble?;
    for site in &status.sites {
        for server in site.servers.iter().flatten() {
            if server.bubbles.contains(&bubble) {
                return Some((bubble, site.site.clone(), server.server.clone()));
            }
        }
    }
    None
}

/// What a player must see across a failover: every acknowledged input applied once and
/// nothing lost (the gateway re-sends what the restored copy lacks), the chain unbroken
/// (going back to the copy is a restore, not a break), and a freeze shorter than `max_gap_ms`.
#[allow(dead_code)] // (not every test crate that shares this module reads it)
pub(crate) fn played_through_a_failover(r: &BotReport, max_gap_ms: f64) {
    assert_eq!(r.error, None, "{}", r.name);
    assert_eq!(r.applied, r.acked, "{}: every acknowledged input applied, once: {r:?}", r.name);
    assert_eq!(r.applied_twice, 0, "{}", r.name);
    assert_eq!(r.chain_breaks, 0, "{}", r.name);
    assert!(r.inputs_sent - r.acked < 20, "{}: nothing lost: {r:?}", r.name);
    assert!(r.max_gap_ms < max_gap_ms, "{}: longest update gap {:.0} ms", r.name, r.max_gap_ms);
}

/// Bots running: each one's live report, and its task.
pub(crate) type Bots =
    Vec<(std::sync::Arc<std::sync::Mutex<BotReport>>, tokio::task::JoinHandle<()>)>;

/// Stops the bots, collects their reports and tears the sandbox down.
#[allow(dead_code)] // (not every test crate that shares this module reads it)
pub(crate) async fn finish(
    sandbox: Sandbox,
    dir: &std::path::Path,
    stop: tokio::sync::watch::Sender<bool>,
    running: Bots,
) -> Vec<BotReport> {
    stop.send(true).expect("bots listening");
    let mut reports = Vec::new();
    for (report, task) in running {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        reports.push(report.lock().expect("report").clone());
    }
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    reports
}

/// A lone Montrealer playing in a three-site sandbox tuned by `tune`, once their bubble has had
/// a copy taken by the universe backup (every 10 s).
#[allow(dead_code)] // (not every test crate that shares this module reads it)
pub(crate) struct LoneMontrealer {
    pub(crate) sandbox: Sandbox,
    pub(crate) dir: PathBuf,
    pub(crate) stop: tokio::sync::watch::Sender<bool>,
    pub(crate) running: Bots,
    pub(crate) player: u64,
    pub(crate) bubble: u64,
    /// The server simulating the bubble.
    pub(crate) server: String,
}

#[allow(dead_code)] // (not every test crate that shares this module reads it)
pub(crate) async fn lone_montrealer(
    name: &str,
    tune: impl FnOnce(&mut SandboxOptions),
) -> LoneMontrealer {
    let (sandbox, dir, roots) = three_sites(name, tune).await;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let spec = bot("mtl-lone", "MTL", &sandbox, 0.0, 0);
    let running = vec![bots::spawn(spec, roots, sandbox.player_tokens.clone(), stop_rx)];
    let report = running[0].0.clone();
    let player = move || report.lock().expect("bot report").player;
    let (bubble, site, server) = wait_for(&sandbox, 30, |s| holder_of(s, player()?))
        .await
        .expect("the Montrealer is simulated");
    assert_eq!(site, "MTL");
    tokio::time::sleep(Duration::from_secs(12)).await;
    let player = player().expect("joined");
    LoneMontrealer { sandbox, dir, stop, running, player, bubble, server }
}

/// Plays on for 3 s, then ends the run: the first bot's updates before and after, the core's
/// last status, and the bots' reports.
#[allow(dead_code)] // (not every test crate that shares this module reads it)
pub(crate) async fn play_on_3_s_and_finish(
    sandbox: Sandbox,
    dir: &std::path::Path,
    stop: tokio::sync::watch::Sender<bool>,
    running: Bots,
) -> (u64, u64, Option<CoreStatus>, Vec<BotReport>) {
    let updates = || running[0].0.lock().expect("report").updates;
    let before = updates();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = updates();
    let last = sandbox.core.status().await;
    (before, after, last, finish(sandbox, dir, stop, running).await)
}
