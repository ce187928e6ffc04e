//! The whole mesh in one test: a real core, three real agents, `horizon gameserver` processes
//! started by the agents' process drivers, and simulated players — over real QUIC on loopback
//! with the WAN emulator between sites (85 / 185 / 225 ms) and 10 ms of access.
//! This file holds the helpers, the first whole-mesh test and the platform's readiness; each
//! other file one job's tests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use horizon_core::{CoreStatus, Stage};
use horizon_testkit::bots::{self, BotReport, BotSpec, Motion};
use horizon_testkit::{Sandbox, SandboxOptions};

#[path = "../common/mod.rs"]
mod common;
mod restarts;
mod routes;
mod spread;
mod stages;

use common::{
    LoneMontrealer, bot, finish, holder_of, lone_montrealer, play_on_3_s_and_finish,
    played_through_a_failover, three_sites, wait_for,
};

/// One plain HTTP GET against the admin API; the whole response.
async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("admin API reachable");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("request sent");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("response read");
    out
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The site simulating `player` now (its bubble's, or its zone's), from the core's status.
fn site_of(status: &CoreStatus, player: u64) -> Option<String> {
    status.site_of(player).map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn players_are_simulated_near_home_and_a_group_moves_without_losing_or_replaying_input() {
    let dir = std::env::temp_dir().join(format!("horizon-sandbox-{}", std::process::id()));
    let mut opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    opts.thresholds.period_ms = 2_000;
    opts.thresholds.dwell_ms = 4_000;
    opts.thresholds.hold_ms = 6_000;
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(
        sandbox.wait_ready(2, Duration::from_secs(30)).await,
        "game servers ready at every site"
    );
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).unwrap();

    let mut specs = vec![bot("mtl-lone", "MTL", &sandbox, 0.0, 0)];
    // 3 MTL + 1 PAR: the Parisian arrives first (in PAR's zone), the Montrealers join it; the
    // group's bubble is carved out of the zone for MTL once MTL has been best for the dwell.
    specs.push(bot("par-host", "PAR", &sandbox, 100_000.0, 0));
    for i in 0..3 {
        specs.push(bot(&format!("mtl-guest-{i}"), "MTL", &sandbox, 100_010.0 + i as f64, 3_000));
    }
    // A Montrealer among three Parisians stays simulated in Paris.
    for i in 0..3 {
        specs.push(bot(&format!("par-{i}"), "PAR", &sandbox, 200_000.0 + i as f64, 0));
    }
    specs.push(bot("mtl-at-par", "MTL", &sandbox, 200_010.0, 3_000));
    // Three cheating Montrealers, 200 km away, claim to stand with them: were claims believed,
    // 4 MTL to 3 PAR would pull that group to Montreal.
    for i in 0..3 {
        specs.push(BotSpec {
            claim: Some([200_005.0 + i as f64, 0.0, 0.0]),
            ..bot(&format!("mtl-cheat-{i}"), "MTL", &sandbox, 400_000.0 + i as f64, 0)
        });
    }
    // Two players alone, 9 km apart, each with a bubble; then the Parisian flies to the
    // Montrealer: a preventive merge moves one of them into the other's bubble, with its state.
    specs.push(BotSpec { motion: Motion::Still, ..bot("mtl-met", "MTL", &sandbox, 300_000.0, 0) });
    specs.push(BotSpec {
        motion: Motion::Dash { after_s: 5.0, to_x: 300_050.0, speed_mps: 200.0 },
        ..bot("par-flyer", "PAR", &sandbox, 309_000.0, 0)
    });

    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut running = Vec::new();
    for spec in specs {
        running.push(bots::spawn(
            spec,
            roots.clone(),
            sandbox.player_tokens.clone(),
            stop_rx.clone(),
        ));
    }
    tokio::time::sleep(Duration::from_secs(24)).await;
    let status = sandbox.core.status().await.expect("status");
    let admin = sandbox.core.admin_addr;
    let (livez, readyz, metrics, page, json) = (
        get(admin, "/livez").await,
        get(admin, "/readyz").await,
        get(admin, "/metrics").await,
        get(admin, "/").await,
        get(admin, "/status").await,
    );
    let mtl_admin = sandbox
        .agents
        .iter()
        .find(|a| a.site == "MTL")
        .and_then(|a| a.admin_addr)
        .expect("the agent's admin API");
    // Each agent told the core where its admin API is: the core's status lists it.
    assert_eq!(
        status.site("MTL").and_then(|s| s.admin.clone()),
        Some(mtl_admin.to_string()),
        "sites[].admin"
    );
    let (agent_ready, agent_metrics, agent_status) = (
        get(mtl_admin, "/readyz").await,
        get(mtl_admin, "/metrics").await,
        get(mtl_admin, "/status").await,
    );
    let crossings: u64 = sandbox
        .agents
        .iter()
        .map(|a| a.stats.crossings.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    stop.send(true).unwrap();
    let mut reports: BTreeMap<String, BotReport> = BTreeMap::new();
    for (report, task) in running {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        let r = report.lock().unwrap().clone();
        reports.insert(r.name.clone(), r);
    }
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    for r in reports.values() {
        assert_eq!(r.error, None, "{}", r.name);
        assert!(r.inputs_sent > 50 && r.chain_checked > 50, "{} played: {r:?}", r.name);
        assert_eq!(r.applied, r.acked, "{}: every acknowledged input applied, once", r.name);
        assert_eq!(r.applied_twice, 0, "{}: no input applied twice", r.name);
        assert_eq!(r.chain_breaks, 0, "{}: the region's state chain never breaks", r.name);
        assert!(
            r.inputs_sent - r.acked < 20,
            "{}: nothing lost, only the last inputs in flight: {r:?}",
            r.name
        );
    }
    let player = |name: &str| reports[name].player.expect("joined");
    assert_eq!(
        site_of(&status, player("mtl-lone")).as_deref(),
        Some("MTL"),
        "a lone Montrealer is simulated in Montreal"
    );
    assert_eq!(site_of(&status, player("mtl-at-par")).as_deref(), Some("PAR"));
    // The region (bubble or zone) simulating them.
    let bubble_of = |name: &str| {
        status.players.iter().find(|p| p.player == player(name)).and_then(|p| p.bubble)
    };
    for i in 0..3 {
        let cheat = format!("mtl-cheat-{i}");
        assert_ne!(bubble_of(&cheat), bubble_of("par-0"), "{cheat} placed where it claimed");
        assert_eq!(site_of(&status, player(&cheat)).as_deref(), Some("MTL"), "{cheat}");
    }
    for name in ["par-host", "mtl-guest-0", "mtl-guest-1", "mtl-guest-2"] {
        assert_eq!(
            site_of(&status, player(name)).as_deref(),
            Some("MTL"),
            "{name}: 3 MTL + 1 PAR end on MTL"
        );
    }
    let carved: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("horizon_core_carves_total{change=\"carve\",site=\"MTL\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(carved >= 1.0, "the group's bubble carved out for MTL:\n{metrics}");
    let lone = median(&reports["mtl-lone"].click_ms);
    let far = median(&reports["mtl-at-par"].click_ms);
    // Relative, not absolute: load slows both alike (the lone one measured 89 ms under
    // `stress-ng --cpu 2`, 35 ms idle). The Atlantic's 85 ms round trip is the emulator's, not
    // the CPU's: half of it is a bound with 2x headroom.
    assert!(
        far > lone + 42.0,
        "an MTL player simulated in Paris pays the Atlantic: {far:.1} vs {lone:.1} ms"
    );
    // The merge moved one of the two into the other's bubble (state and seqs carried over:
    // `applied == acked` above would fail if the entity restarted empty).
    let (met, flyer) = (&reports["mtl-met"], &reports["par-flyer"]);
    assert_eq!(
        site_of(&status, player("mtl-met")),
        site_of(&status, player("par-flyer")),
        "merged"
    );
    assert!(
        met.bubbles_seen + flyer.bubbles_seen >= 3,
        "someone changed bubble: {met:?} {flyer:?}"
    );
    assert!(crossings >= 1, "the player's state crossed to the new holder");
    // The admin API: health, Prometheus text with site labels, the page, the status JSON.
    assert!(livez.starts_with("HTTP/1.1 200") && livez.ends_with("ok\n"), "{livez}");
    assert!(readyz.starts_with("HTTP/1.1 200") && readyz.ends_with("ready\n"), "{readyz}");
    for line in [
        "# TYPE horizon_handovers_total counter",
        "outcome=\"committed\"",
        "horizon_bubbles{site=\"MTL\"}",
        "horizon_players{home_site=\"MTL\"}",
        "horizon_core_tick_seconds_count",
        "horizon_backbone_rtt_seconds{from=\"MTL\",to=\"PAR\"}",
        "horizon_build_info{daemon=\"core\"",
        "process_resident_memory_bytes",
    ] {
        assert!(metrics.contains(line), "/metrics lacks {line}:\n{metrics}");
    }
    assert!(page.contains("id=\"regions\"") && page.contains("id=\"timeline\""), "the console");
    // Each agent serves its own: registered with a ready server, its counters, its status.
    assert!(agent_ready.starts_with("HTTP/1.1 200"), "{agent_ready}");
    for line in
        ["horizon_agent_registered{site=\"MTL\"} 1", "horizon_agent_inputs_total{site=\"MTL\"}"]
    {
        assert!(agent_metrics.contains(line), "agent /metrics lacks {line}:\n{agent_metrics}");
    }
    let body = agent_status.split("\r\n\r\n").nth(1).unwrap_or_default();
    let s: horizon_agent::AgentStatus = serde_json::from_str(body).expect("the agent's status");
    assert!(s.registered && s.players >= 1 && s.servers_ready >= 1, "{s:?}");
    // Every running bubble's state reaches the universe backup (copies every 10 s), accepted
    // from the current holder under the current epoch.
    let backups: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("horizon_backups_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(backups >= 5.0, "state copies accepted: {backups}\n{metrics}");
    let body = json.split("\r\n\r\n").nth(1).unwrap_or_default();
    let doc: serde_json::Value = serde_json::from_str(body).expect("/status is JSON");
    assert_eq!(doc["sites"].as_array().map(Vec::len), Some(3));
    // Groups as the brain sees them: the host and its three guests are one, homes counted.
    let host = player("par-host");
    let group = doc["groups"]
        .as_array()
        .and_then(|g| {
            g.iter().find(|g| g["players"].as_array().is_some_and(|p| p.contains(&host.into())))
        })
        .expect("the host's group");
    assert_eq!(group["homes"]["MTL"], 3, "{group}");
    assert_eq!(group["homes"]["PAR"], 1, "{group}");
    assert!(group["bubble"].is_u64(), "one bubble holds the group: {group}");
    // The carve froze the group for a moment (its players crossing from the zone into the
    // bubble on MTL), not for seconds.
    let gap = reports["mtl-guest-0"].max_gap_ms;
    assert!(gap < 1_000.0, "longest update gap across the carve: {gap:.0} ms");
    eprintln!(
        "click-to-screen p50: lone MTL {lone:.1} ms, MTL in PAR's zone {far:.1} ms; carve gap {gap:.0} ms"
    );
}

/// What a player must see whatever the mesh did: every acknowledged input applied once,
/// nothing lost but the last inputs in flight, one unbroken chain per simulation, no freeze
/// of a second or more.
fn played_cleanly(r: &BotReport) {
    played_cleanly_within(r, 1_000.0);
}

/// [`played_cleanly`], with no freeze of `gap_ms` or more.
fn played_cleanly_within(r: &BotReport, gap_ms: f64) {
    assert_eq!(r.error, None, "{}", r.name);
    assert_eq!(r.applied, r.acked, "{}: every acknowledged input applied, once", r.name);
    assert_eq!(r.applied_twice, 0, "{}", r.name);
    assert_eq!(r.chain_breaks, 0, "{}", r.name);
    assert!(r.inputs_sent - r.acked < 20, "{}: nothing lost: {r:?}", r.name);
    assert!(r.max_gap_ms < gap_ms, "{}: longest update gap {:.0} ms", r.name, r.max_gap_ms);
}

/// The epoch of the bubble simulating `player`, from the core's status.
fn epoch_of(status: &CoreStatus, player: u64) -> Option<u64> {
    status.placement(player).map(|b| b.epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_is_ready_only_once_its_platform_says_so_too() {
    let dir = std::env::temp_dir().join(format!("horizon-sandbox-gate-{}", std::process::id()));
    let mut opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = ready.clone();
    opts.drivers = Some(horizon_testkit::DriverFactory(Arc::new(move |p| {
        let driver = horizon_testkit::TappedDriver::new(p).gated(flag.clone());
        Ok(Box::new(driver) as Box<dyn horizon_agent::ServerDriver>)
    })));
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(
        !sandbox.wait_ready(1, Duration::from_secs(8)).await,
        "servers that said Ready are not counted while their platform does not agree"
    );
    ready.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(sandbox.wait_ready(2, Duration::from_secs(10)).await, "ready once it agrees");
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
