//! The mesh with every game server a real headless Godot 3.2.3 (`godot3-server`, which tests/run
//! installs) running the GDScript reference game (godot/reference) behind `horizon
//! godot-server`: a group handed over from a Godot server in Montreal to one in Hong Kong, a
//! Paris crowd cutting PAR's zone over several Godot servers, a Godot engine killed under its
//! players, and the group's Godot server told to stop (it drains the group to another one) —
//! each checked by the simulated players exactly as with the Rust game server.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use horizon_core::CoreStatus;
use horizon_testkit::bots::{self, BotReport};
use horizon_testkit::{Sandbox, SandboxOptions};

mod common;
use common::{bot, wait_for};

/// The bubble simulating `player` and the server holding it.
fn holder_of(status: &CoreStatus, player: u64) -> Option<(u64, u64, String, String)> {
    let bubble = status.players.iter().find(|p| p.player == player)?.bubble?;
    let epoch = status.bubble(bubble)?.epoch;
    for site in &status.sites {
        for server in site.servers.iter().flatten() {
            if server.bubbles.contains(&bubble) {
                return Some((bubble, epoch, site.site.clone(), server.server.clone()));
            }
        }
    }
    None
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split(' ').nth(2).is_some_and(|state| state != "Z"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn godot_servers_hand_over_spread_a_crowd_restart_a_killed_one_and_drain_a_stopped_one() {
    let dir = std::env::temp_dir().join(format!("horizon-godot-{}", std::process::id()));
    let project = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../godot/reference");
    let mut opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    opts.server_args =
        vec!["godot-server".into(), "--project".into(), project.display().to_string()];
    opts.thresholds.period_ms = 1_000;
    opts.thresholds.dwell_ms = 4_000;
    opts.thresholds.hold_ms = 6_000;
    opts.thresholds.players_per_server = 4;
    opts.thresholds.split_after_samples = 2;
    opts.thresholds.settle_ms = 2_000;
    opts.thresholds.merge_after_samples = 120;
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(2, Duration::from_secs(60)).await, "Godot servers ready");
    let engines: Vec<(u32, String)> =
        ["PAR", "MTL", "HKG"].iter().flat_map(|s| sandbox.server_children(s)).collect();
    assert!(
        engines.len() >= 6 && engines.iter().all(|(_, c)| c.starts_with("godot3-server")),
        "every game server runs its Godot engine: {engines:?}"
    );
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).expect("CA");

    // A Montrealer joined by three Hongkongers: the group moves to a Godot server in Hong Kong.
    let mut specs = vec![bot("mtl-host", "MTL", &sandbox, 100_000.0, 0)];
    for i in 0..3 {
        specs.push(bot(&format!("hkg-guest-{i}"), "HKG", &sandbox, 100_010.0 + i as f64, 3_000));
    }
    // Four groups of three Parisians 600 m apart, for servers that take four players each: they
    // play in PAR's zones (the core site's), cut over several Godot servers, no group cut.
    for g in 0..4 {
        for k in 0..3 {
            specs.push(bot(
                &format!("crowd-{g}-{k}"),
                "PAR",
                &sandbox,
                g as f64 * 600.0 + k as f64 * 3.0,
                0,
            ));
        }
    }
    // A lone Montrealer whose Godot engine will be killed.
    specs.push(bot("mtl-lone", "MTL", &sandbox, 300_000.0, 0));
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let running: Vec<_> = specs
        .into_iter()
        .map(|s| bots::spawn(s, roots.clone(), sandbox.player_tokens.clone(), stop_rx.clone()))
        .collect();
    let id = |name: &str| {
        let (report, _) = running.iter().find(|(r, _)| r.lock().expect("report").name == name)?;
        report.lock().expect("report").player
    };

    let spread = wait_for(&sandbox, 40, |s| (s.zones.len() >= 3).then_some(())).await;
    let moved = wait_for(&sandbox, 40, |s| {
        let (_, _, site, _) = holder_of(s, id("mtl-host")?)?;
        (site == "HKG").then_some(())
    })
    .await;
    // The lone Montrealer's bubble has had a copy taken (every 10 s): its engine is killed.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let lone = id("mtl-lone").expect("the lone Montrealer joined");
    let status = sandbox.core.status().await.expect("status");
    let (bubble, epoch, site, server) = holder_of(&status, lone).expect("simulated");
    assert_eq!(site, "MTL");
    let (sidecar, _) = sandbox
        .server_processes("MTL")
        .into_iter()
        .find(|(_, name)| *name == server)
        .expect("the lone Montrealer's game server");
    let engine = std::fs::read_to_string(format!("/proc/{sidecar}/task/{sidecar}/children"))
        .ok()
        .and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok())
        .expect("its Godot engine");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &engine.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    let at = tokio::time::Instant::now();
    let restored = wait_for(&sandbox, 10, |s| {
        let (b, e, site, now) = holder_of(s, lone)?;
        (b == bubble && e > epoch && now != server).then_some(site)
    })
    .await;
    let restored_after = at.elapsed();
    // The group's Godot server in Hong Kong is told to stop (SIGTERM, as a pod's deletion
    // sends): its sidecar drains the bubble to another Godot server of HKG, state and all.
    let host = id("mtl-host").expect("the host joined");
    let before = sandbox.core.status().await.expect("status");
    let (group, group_epoch, group_site, group_server) = holder_of(&before, host).expect("held");
    let (group_sidecar, _) = sandbox
        .server_processes(&group_site)
        .into_iter()
        .find(|(_, name)| *name == group_server)
        .expect("the group's game server");
    assert!(sandbox.stop_server(&group_site, &group_server), "{group_server} told to stop");
    let drained = wait_for(&sandbox, 15, |s| {
        let (b, e, site, now) = holder_of(s, host)?;
        (b == group && e > group_epoch && now != group_server).then_some(site)
    })
    .await;
    let drained_sidecar_gone =
        wait_for(&sandbox, 15, |_| (!alive(group_sidecar)).then_some(())).await.is_some();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = sandbox.core.status().await.expect("status");
    let sidecar_gone = !alive(sidecar);
    stop.send(true).expect("bots listening");
    let mut reports: BTreeMap<String, BotReport> = BTreeMap::new();
    for (report, task) in running {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        let r = report.lock().expect("report").clone();
        reports.insert(r.name.clone(), r);
    }
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    let orphans: Vec<u32> = engines.iter().map(|(pid, _)| *pid).filter(|p| alive(*p)).collect();

    spread.expect("the Paris crowd's zone cut in three or more");
    moved.expect("the group handed over to a Godot server in Hong Kong");
    assert!(after.handovers.committed >= 1, "{:?}", after.handovers);
    assert!(killed, "Godot engine {engine} killed");
    assert!(sidecar_gone, "its sidecar {sidecar} ended with it (the game server crashed)");
    assert_eq!(restored.as_deref(), Some("MTL"), "restarted on another MTL server");
    assert!(restored_after < Duration::from_secs(3), "restarted after {restored_after:?}");
    assert_eq!(after.failovers.get("MTL"), Some(&1), "{:?}", after.failovers);
    assert!(orphans.is_empty(), "Godot engines outlived their servers: {orphans:?}");
    assert_eq!(drained.as_deref(), Some(group_site.as_str()), "drained within its site");
    assert!(drained_sidecar_gone, "the stopping sidecar exited once it held nothing");
    let failed_over = after.failovers.get(&group_site).copied().unwrap_or(0);
    assert_eq!(failed_over, 0, "a drain, no failover");
    for guest in ["mtl-host", "hkg-guest-0", "hkg-guest-1", "hkg-guest-2"] {
        let r = &reports[guest];
        assert_eq!(r.restores_seen, 0, "{guest} never went back to a copy: {r:?}");
    }
    for r in reports.values() {
        assert_eq!(r.error, None, "{}", r.name);
        assert!(r.inputs_sent > 50 && r.chain_checked > 50, "{} played: {r:?}", r.name);
        assert_eq!(r.applied, r.acked, "{}: every acknowledged input applied, once: {r:?}", r.name);
        assert_eq!(r.applied_twice, 0, "{}", r.name);
        assert_eq!(r.chain_breaks, 0, "{}: the state chain never breaks", r.name);
        assert!(r.inputs_sent - r.acked < 20, "{}: nothing lost: {r:?}", r.name);
        assert!(r.max_gap_ms < 3_000.0, "{}: longest update gap {:.0} ms", r.name, r.max_gap_ms);
    }
    let lone = &reports["mtl-lone"];
    assert!(
        lone.restores_seen >= 1,
        "the lone player's simulation went back to the copy: {lone:?}"
    );
    eprintln!(
        "godot: handover and drain gap {:.0} ms, engine kill → restarted in {restored_after:?}, lone gap {:.0} ms",
        reports["hkg-guest-0"].max_gap_ms, lone.max_gap_ms
    );
}
