//! The whole mesh in one test: a real core, three real agents, `horizon gameserver` processes
//! started by the agents' process drivers, and simulated players — over real QUIC on loopback
//! with the WAN emulator between sites (85 / 185 / 225 ms) and 10 ms of access.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use horizon_core::{CoreStatus, Stage};
use horizon_testkit::bots::{self, BotReport, BotSpec, Motion};
use horizon_testkit::{Sandbox, SandboxOptions};

mod common;
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

/// The site simulating `player` now, from the core's status.
fn site_of(status: &CoreStatus, player: u64) -> Option<String> {
    status.placement(player).map(|b| b.site.clone())
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
    // 3 MTL + 1 PAR: the Parisian arrives first (a PAR bubble), the Montrealers join it.
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
    let bubble_of = |name: &str| status.placement(player(name)).map(|b| b.bubble);
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
    assert!(status.handovers.committed >= 1, "{:?}", status.handovers);
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
    // The handover froze the group for a moment, not for seconds.
    let gap = reports["mtl-guest-0"].max_gap_ms;
    assert!(gap < 1_000.0, "longest update gap across the handover: {gap:.0} ms");
    eprintln!(
        "click-to-screen p50: lone MTL {lone:.1} ms, MTL in a PAR bubble {far:.1} ms; handover gap {gap:.0} ms"
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
async fn a_cut_transfer_link_is_routed_round_through_the_third_site_and_nothing_is_lost() {
    let (sandbox, dir, roots) = three_sites("route-round", |_| {}).await;
    // Three Parisians and a Montrealer in one group: their bubble runs at PAR, the
    // Montrealer's inputs and updates cross the PAR–MTL link.
    let mut specs: Vec<BotSpec> =
        (0..3).map(|i| bot(&format!("par-{i}"), "PAR", &sandbox, 5.0 * i as f64, 0)).collect();
    specs.push(bot("mtl-guest", "MTL", &sandbox, 15.0, 0));
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let running: Vec<_> = specs
        .into_iter()
        .map(|s| bots::spawn(s, roots.clone(), sandbox.player_tokens.clone(), stop_rx.clone()))
        .collect();
    let guest = running[3].0.clone();
    let guest_id = move || guest.lock().unwrap().player;
    let placed = wait_for(&sandbox, 30, |s| holder_of(s, guest_id()?)).await;
    let (_, site, _) = placed.expect("the Montrealer is simulated");
    assert_eq!(site, "PAR", "the group plays at PAR");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let gap_before = running[3].0.lock().unwrap().max_gap_ms;

    // Cut for 10 s: the agents see the link silent within 1.25 s and go round through HKG;
    // the core sees it at their next reports (every 2 s). Looked at until 9 s into the cut.
    assert!(sandbox.partition_transfer("PAR", "MTL", true));
    let cut_at = Instant::now();
    let relayed =
        |site: &str| sandbox.agent_stats(site).map(|s| s.routes_relayed.load(Ordering::Relaxed));
    let round = |s: &CoreStatus| -> Vec<(String, String, String)> {
        s.routes.iter().map(|r| (r.from.clone(), r.to.clone(), r.via.clone())).collect()
    };
    let want = [("MTL", "PAR", "HKG"), ("PAR", "MTL", "HKG")]
        .map(|(a, b, c)| (a.into(), b.into(), c.into()));
    let mut seen = None;
    while seen.is_none() && cut_at.elapsed() < Duration::from_secs(9) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let status = sandbox.core.status().await.expect("status");
        let ends = (relayed("PAR"), relayed("MTL"));
        if ends == (Some(1), Some(1)) && round(&status) == want {
            seen = Some(cut_at.elapsed());
        }
    }
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(cut_at.elapsed())).await;
    assert!(sandbox.partition_transfer("PAR", "MTL", false));
    let healed_at = Instant::now();
    let mut direct = None;
    while direct.is_none() && healed_at.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if (relayed("PAR"), relayed("MTL")) == (Some(0), Some(0)) {
            direct = Some(healed_at.elapsed());
        }
    }
    let count = |site: &str, f: fn(&horizon_agent::AgentStats) -> &std::sync::atomic::AtomicU64| {
        sandbox.agent_stats(site).map_or(0, |s| f(s).load(Ordering::Relaxed))
    };
    let sent_round = count("MTL", |s| &s.relayed_sent) + count("PAR", |s| &s.relayed_sent);
    let through = count("HKG", |s| &s.relayed_through);
    let reports = finish(sandbox, &dir, stop, running).await;

    let seen = seen.expect("both ends went round through HKG, and the core's /status says so");
    let direct = direct.expect("both ends direct again once the link healed");
    let r = &reports[3];
    println!(
        "both ends round and the core told {:.1} s into the cut, direct {:.1} s after the heal; the Montrealer's longest gap: {:.0} ms (before the cut: {gap_before:.0} ms)",
        seen.as_secs_f64(),
        direct.as_secs_f64(),
        r.max_gap_ms
    );
    // About 1.5 s (1 s of silence, the next probe, a relayed round trip); 2.1 s measured with
    // both cores busy: 7 s is over 3× that. A 10 s cut not routed round leaves a gap of 10 s
    // at least.
    let gaps = (r.max_gap_ms, &r.gaps);
    assert!(r.max_gap_ms < 7_000.0, "routed round within 7 s: (longest, every gap) {gaps:?}");
    assert!(sent_round > 0 && through > 0, "sent round {sent_round}, passed on by HKG {through}");
    for r in &reports {
        assert_eq!(r.error, None, "{}", r.name);
        assert_eq!(r.applied, r.acked, "{}: every acknowledged input applied, once", r.name);
        assert_eq!(r.applied_twice, 0, "{}", r.name);
        assert!(r.inputs_sent - r.acked < 20, "{}: nothing lost: {r:?}", r.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_across_a_cut_link_goes_round_through_the_third_site() {
    let (sandbox, dir, roots) = three_sites("handover-round", |opts| {
        opts.thresholds.dwell_ms = 4_000;
        opts.thresholds.hold_ms = 14_000;
    })
    .await;
    // PAR and MTL agents cannot reach each other; both reach HKG and the core.
    assert!(sandbox.partition_transfer("PAR", "MTL", true));

    let mut specs = vec![bot("par-host", "PAR", &sandbox, 0.0, 0)];
    for i in 0..3 {
        specs.push(bot(&format!("mtl-guest-{i}"), "MTL", &sandbox, 10.0 + i as f64, 3_000));
    }
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let running: Vec<_> = specs
        .into_iter()
        .map(|s| bots::spawn(s, roots.clone(), sandbox.player_tokens.clone(), stop_rx.clone()))
        .collect();
    let host = || running[0].0.lock().unwrap().player;

    // The host's bubble starts at PAR; once three Montrealers join, the move to MTL is decided
    // after the dwell, and its state goes PAR → HKG → MTL.
    let mut moved = None;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let status = sandbox.core.status().await.expect("status");
        let Some(p) = host() else { continue };
        if site_of(&status, p).as_deref() == Some("MTL") {
            moved = Some(status);
            break;
        }
    }
    let through =
        sandbox.agent_stats("HKG").map_or(0, |s| s.relayed_through.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reports = finish(sandbox, &dir, stop, running).await;

    let moved = moved.expect("the group reached MTL through HKG");
    let longest = reports.iter().map(|r| r.max_gap_ms).fold(0.0, f64::max);
    println!("the longest gap of a player through the move: {longest:.0} ms");
    assert!(moved.handovers.committed >= 1, "{:?}", moved.handovers);
    assert!(through > 0, "HKG passed the handover's state and the guests' traffic on");
    for r in &reports {
        // Playing on through the move, whichever way it went. The seal and the first updates
        // from MTL go round through HKG: 431 ms measured under `stress-ng --cpu 2`, so 1.5 s.
        played_cleanly_within(r, 1_500.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_is_spread_over_several_servers_without_cutting_a_group_and_restored_from_its_part_copies()
 {
    let dir = std::env::temp_dir().join(format!("horizon-parts-{}", std::process::id()));
    let mut opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    opts.thresholds.period_ms = 1_000;
    opts.thresholds.players_per_server = 4;
    opts.thresholds.split_sustain_ms = 2_000;
    opts.thresholds.settle_ms = 2_000;
    opts.thresholds.merge_low_ms = 120_000;
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(2, Duration::from_secs(30)).await, "game servers ready");
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).unwrap();

    // Four groups of three Parisians, 600 m apart: one bubble (within the merge distance), four
    // groups (beyond the grouping radius), twelve players for servers that take four each.
    let mut specs = Vec::new();
    for g in 0..4 {
        for k in 0..3 {
            let x = g as f64 * 600.0 + k as f64 * 3.0;
            specs.push(bot(&format!("crowd-{g}-{k}"), "PAR", &sandbox, x, 0));
        }
    }
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let running: Vec<_> = specs
        .into_iter()
        .map(|s| bots::spawn(s, roots.clone(), sandbox.player_tokens.clone(), stop_rx.clone()))
        .collect();

    let mut spread = None;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let status = sandbox.core.status().await.expect("status");
        let parts = status.bubbles.iter().map(|b| b.parts.len()).max().unwrap_or(0);
        if parts >= 3 {
            spread = Some(status);
            break;
        }
    }
    // Play on, spread, for a while: inputs, updates, leases and a round of state copies (every
    // 10 s) through every part's server. A loaded machine may need longer for the first round:
    // wait for three part copies, up to 20 s more.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let backups = dir.join("store").join("backups");
    let copies = || -> Vec<String> {
        std::fs::read_dir(&backups)
            .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default()
    };
    for _ in 0..40 {
        if copies().iter().filter(|f| f.contains(".part")).count() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let status = sandbox.core.status().await.expect("status");
    let part_copies = copies();
    // A server of the spread bubble crashes: the bubble is restored on one server from its
    // parts' copies, every player's state in it.
    let bubble_now = status.bubbles.first().map(|b| (b.bubble, b.epoch));
    let victim = status
        .site("PAR")
        .and_then(|par| {
            par.servers.iter().flatten().find(|s| s.players > 0 && !s.bubbles.is_empty())
        })
        .map(|s| s.server.clone());
    let killed = victim.as_ref().is_some_and(|v| sandbox.kill_server("PAR", v));
    let restored = wait_for(&sandbox, 10, |s| {
        let (bubble, epoch) = bubble_now?;
        let b = s.bubble(bubble)?;
        (b.epoch > epoch && !b.restoring).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = sandbox.core.status().await.expect("status");
    let reports = finish(sandbox, &dir, stop, running).await;

    let spread = spread.expect("the crowd's bubble was spread over three servers");
    let bubbles = &spread.bubbles;
    assert_eq!(bubbles.len(), 1, "one bubble for the whole crowd: {bubbles:?}");
    assert_eq!(bubbles[0].site, "PAR");
    let bubble = bubbles[0].bubble;
    // Every group whole on one server, several servers holding the bubble.
    let par = status.site("PAR").expect("PAR");
    let holding: Vec<&horizon_core::status::ServerStatus> =
        par.servers.iter().flatten().filter(|s| s.bubbles.contains(&bubble)).collect();
    assert!(holding.len() >= 3, "servers holding the bubble: {holding:?}");
    for s in &holding {
        assert!(s.players > 0 && s.players % 3 == 0, "whole groups per server: {s:?}");
    }
    assert!(killed, "a server of the bubble killed: {victim:?}");
    restored.expect("the bubble restored under a newer epoch");
    assert_eq!(after.restores.get("parts"), Some(&1), "from its part copies: {:?}", after.restores);
    assert_eq!(after.players.len(), 12, "every player still there: {:?}", after.players);
    for r in &reports {
        assert!(r.inputs_sent > 50, "{} played: {r:?}", r.name);
        // Everyone's inputs applied once and none lost across the restore: each player's
        // state came back from its part's copy, what the copy lacked re-sent by its gateway.
        played_through_a_failover(r, 3_000.0);
        assert!(r.updates > 0 && r.inputs_sent - r.acked < 20, "{} plays again: {r:?}", r.name);
    }
    // Each part's server's tick rate reached the brain (the agent lists them in part order).
    let spread_now = status.bubbles.first().expect("the bubble");
    let tps = spread_now.tps.as_ref().expect("tick rates per part");
    assert!(
        tps.len() >= 3 && tps.iter().all(|t| t.is_some_and(|t| t > 10.0)),
        "tick rate of every part: {spread_now:?}"
    );
    // State copies of the spread bubble: one per part, from each part's server.
    for part in 0..3 {
        let file = format!("{bubble}.part{part}.bin");
        assert!(part_copies.contains(&file), "{file} in the universe backup: {part_copies:?}");
    }
    let moved = reports.iter().filter(|r| r.simulations_seen > r.bubbles_seen).count();
    assert!(moved >= 6, "players carried to another part's server, state and seqs: {moved}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overfull_server_gives_its_lighter_bubble_to_another_server_and_nobody_loses_an_input() {
    let dir = std::env::temp_dir().join(format!("horizon-relieve-{}", std::process::id()));
    let mut opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    opts.thresholds.period_ms = 1_000;
    // Servers of 6 players, new regions seated up to 4 of them.
    opts.thresholds.players_per_server = 6;
    opts.seats_per_server = opts.thresholds.seats_per_server();
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(2, Duration::from_secs(30)).await, "game servers ready");
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let spawn = |name: &str, x: f64| {
        let spec = bot(name, "PAR", &sandbox, x, 0);
        bots::spawn(spec, roots.clone(), sandbox.player_tokens.clone(), stop_rx.clone())
    };
    // Two Parisians 5 km apart: two bubbles, both seated on one server.
    let mut running = vec![spawn("a-0", 0.0), spawn("b-0", 5_000.0)];
    let player = |r: &(Arc<std::sync::Mutex<BotReport>>, _)| r.0.lock().expect("report").player;
    let shared = wait_for(&sandbox, 30, |s| {
        let (a, b) = (player(&running[0])?, player(&running[1])?);
        let (a, b) = (holder_of(s, a)?, holder_of(s, b)?);
        (a.0 != b.0 && a.2 == b.2).then_some((a, b))
    })
    .await
    .expect("two bubbles on one server");
    // Their groups grow to 4 and 3: 7 players on a server of 6.
    for (name, x) in [("a-1", 3.0), ("a-2", 6.0), ("a-3", 9.0), ("b-1", 5_003.0), ("b-2", 5_006.0)]
    {
        running.push(spawn(name, x));
    }
    let grown = wait_for(&sandbox, 30, |s| {
        let n = |b: u64| s.bubble(b).map(|b| b.players);
        (n(shared.0.0)? == 4 && n(shared.1.0)? == 3).then_some(())
    })
    .await;
    // 10 s over its 6 players: the server gives the lighter bubble, b's, to another server.
    let moved = wait_for(&sandbox, 40, |s| {
        let b =
            s.site("PAR")?.servers.iter().flatten().find(|x| x.bubbles.contains(&shared.1.0))?;
        (b.server != shared.1.2).then(|| b.server.clone())
    })
    .await;
    // Play on there for a while.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let status = sandbox.core.status().await.expect("status");
    let moves: u64 = sandbox
        .every_agent_stats()
        .map(|a| a.regions_moved.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    let reports = finish(sandbox, &dir, stop, running).await;

    grown.expect("the two bubbles grew to 4 and 3 players");
    let to = moved.expect("bubble b moved to another server");
    assert_eq!(moves, 1, "one region moved");
    let par = status.site("PAR").expect("PAR");
    let holds = |b: u64| par.servers.iter().flatten().find(|x| x.bubbles.contains(&b));
    assert_eq!(holds(shared.0.0).map(|x| &x.server), Some(&shared.0.2), "the heavier stays");
    assert_eq!(holds(shared.1.0).map(|x| &x.server), Some(&to));
    assert_eq!(status.players.len(), 7, "{:?}", status.players);
    for r in &reports {
        played_cleanly(r);
        assert!(r.inputs_sent > 50, "{} played: {r:?}", r.name);
        // Carried to the other server with their state and seqs; its ticks go on after the old
        // server's: nobody sees the bubble's time go back.
        assert_eq!(r.restores_seen, 0, "{}: {r:?}", r.name);
        // The region moved with its whole state (snapshot, deltas, seal under a newer epoch):
        // the new server continues the old one's simulation tick after tick, chained, rather
        // than starting an empty region whose ticks jump past the old server's.
        assert!(r.tick_jump_max < 100, "{}: {r:?}", r.name);
        assert!(r.chain_checked > 0 && r.chain_breaks == 0, "{}: {r:?}", r.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_game_server_s_bubble_restarts_from_its_copy_on_the_same_site_within_3_s() {
    let m = lone_montrealer("crash", |_| {}).await;
    let (sandbox, player, bubble, server) = (&m.sandbox, m.player, m.bubble, m.server.clone());
    let epoch = epoch_of(&sandbox.core.status().await.unwrap(), player);
    assert!(sandbox.kill_server("MTL", &server), "{server} killed");
    let restored = wait_for(sandbox, 10, |s| {
        let (b, site, now) = holder_of(s, player)?;
        (b == bubble && now != server && epoch_of(s, player) > epoch).then_some((site, s.clone()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reports = finish(m.sandbox, &m.dir, m.stop, m.running).await;
    let (site, status) = restored.expect("the bubble was restored on another server");
    assert_eq!(site, "MTL", "on a spare server of the same site");
    assert_eq!(status.failovers.get("MTL"), Some(&1), "{:?}", status.failovers);
    let r = &reports[0];
    assert!(r.restores_seen >= 1, "the player's simulation went back to the copy: {r:?}");
    played_through_a_failover(r, 3_000.0);
    eprintln!("server crash: longest update gap {:.0} ms", r.max_gap_ms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_cut_from_the_core_stops_at_its_lease_and_its_players_resume_on_the_core_site() {
    let m = lone_montrealer("cut", |opts| {
        opts.thresholds.lease_ttl_ms = 10_000;
        opts.thresholds.lease_drift_margin_ms = 2_000;
    })
    .await;
    let (sandbox, player, bubble) = (&m.sandbox, m.player, m.bubble);
    let updates = || m.running[0].0.lock().unwrap().updates;
    let cut = tokio::time::Instant::now();
    assert!(sandbox.partition_core("MTL", true));
    // Lease (10 s) + margin (2 s) after the last renewal (at most 5 s before the cut), then
    // the restore on PAR.
    let moved = wait_for(sandbox, 30, |s| {
        let restored = s.bubble(bubble).is_some_and(|b| !b.restoring);
        (site_of(s, player).as_deref() == Some("PAR") && restored).then_some(())
    })
    .await;
    let moved_after = cut.elapsed();
    let updates_then = updates();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let updates_after = updates();
    assert!(sandbox.partition_core("MTL", false));
    tokio::time::sleep(Duration::from_secs(8)).await;
    let status = sandbox.core.status().await.unwrap();
    let reports = finish(m.sandbox, &m.dir, m.stop, m.running).await;
    moved.expect("restored on the core site");
    assert!(moved_after < Duration::from_secs(22), "restored {moved_after:?} after the cut");
    assert!(
        updates_after > updates_then + 20,
        "playing again on PAR: {updates_then} → {updates_after}"
    );
    let r = &reports[0];
    assert!(r.reconnecting_seen >= 1, "the player was told: {r:?}");
    assert_eq!(site_of(&status, player).as_deref(), Some("PAR"), "stays after heal");
    // The freeze spans the lease's end to the restore: under lease + margin + a few seconds.
    played_through_a_failover(r, 20_000.0);
    eprintln!(
        "relay cut: restored {moved_after:?} after the cut; longest gap {:.0} ms",
        r.max_gap_ms
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_restarted_within_the_leases_finds_the_relay_playing_and_takes_its_bubble_back() {
    let m = lone_montrealer("restart", |_| {}).await;
    let LoneMontrealer { mut sandbox, dir, stop, running, player, bubble, .. } = m;
    let before = sandbox.core.status().await.expect("status");
    let (generation, epoch) = (before.generation, epoch_of(&before, player));
    sandbox.restart_core(Duration::from_secs(5)).await.expect("the core restarts");
    let back = tokio::time::Instant::now();
    let status = wait_for(&sandbox, 15, |s| {
        (holder_of(s, player)?.0 == bubble && s.site("MTL").is_some_and(|m| m.agent_connected))
            .then(|| s.clone())
    })
    .await;
    let back_after = back.elapsed();
    let (_, _, last, reports) = play_on_3_s_and_finish(sandbox, &dir, stop, running).await;
    let status = status.unwrap_or_else(|| {
        let l = last.unwrap_or_default();
        panic!(
            "the player is back in their bubble at the restarted core: sites {:?} bubbles {:?} players {:?} decisions {:?}",
            l.sites, l.bubbles, l.players, l.recent_decisions
        )
    });
    assert_eq!(status.generation, generation + 1, "a new generation");
    assert_eq!(epoch_of(&status, player), epoch, "the relay kept its lease: same epoch");
    assert_eq!(site_of(&status, player).as_deref(), Some("MTL"));
    assert!(back_after < Duration::from_secs(15), "taken back {back_after:?} after the restart");
    let r = &reports[0];
    assert_eq!(r.restores_seen, 0, "the relay's bubble never stopped: {r:?}");
    played_through_a_failover(r, 1_000.0);
    eprintln!("core restart: bubble taken back {back_after:?} after the core was back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_restarted_into_the_relay_stage_hands_the_relays_bubble_back_to_a_core_zone() {
    let m = lone_montrealer("restage", |_| {}).await;
    let LoneMontrealer { mut sandbox, dir, stop, running, player, bubble, .. } = m;
    sandbox.restart_core_at(Stage::Relay, Duration::from_secs(2)).await.expect("the core restarts");
    // The bubble is taken back, then ended: its player crosses into the core site's zone with
    // their state, as a player walking out of a bubble does.
    let zoned = wait_for(&sandbox, 30, |s| {
        let in_zone = s.zones.iter().any(|z| z.members == 1 && !z.restoring);
        (s.bubbles.is_empty() && in_zone && site_of(s, player).is_none()).then(|| s.clone())
    })
    .await;
    let (updates_then, updates_after, last, reports) =
        play_on_3_s_and_finish(sandbox, &dir, stop, running).await;
    let status = zoned.unwrap_or_else(|| {
        let l = last.unwrap_or_default();
        panic!("the player plays in a zone: bubbles {:?} zones {:?}", l.bubbles, l.zones)
    });
    assert_eq!(status.stage, "relay");
    assert!(status.bubble(bubble).is_none(), "the relay's bubble ended");
    assert!(updates_after > updates_then + 20, "playing on: {updates_then} → {updates_after}");
    let r = &reports[0];
    assert_eq!(r.restores_seen, 0, "a crossing, not a restore: {r:?}");
    played_through_a_failover(r, 3_000.0);
    eprintln!("relay stage: longest update gap {:.0} ms across the restart", r.max_gap_ms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_restarted_into_the_fixed_stage_makes_the_bubble_in_a_delegation_its_region_and_hands_it_to_its_site()
 {
    let m = lone_montrealer("refix", |_| {}).await;
    let LoneMontrealer { mut sandbox, dir, stop, running, player, bubble, .. } = m;
    // The box around the Montrealer (world 1, x = 0) delegated to HKG from the restart on.
    let region = horizon_mesh::Aabb {
        min: horizon_mesh::Vec3 { x: -5_000.0, y: -5_000.0, z: -5_000.0 },
        max: horizon_mesh::Vec3 { x: 5_000.0, y: 5_000.0, z: 5_000.0 },
    };
    let hkg = sandbox.core_config().sites.id("HKG").expect("HKG is a site");
    sandbox
        .restart_core_with(
            |config| {
                config.stage = Stage::Fixed;
                config.delegations = vec![horizon_mesh::Delegation {
                    world: horizon_mesh::WorldId(1),
                    bounds: Some(region),
                    site: hkg,
                }];
            },
            Duration::from_secs(2),
        )
        .await
        .expect("the core restarts");
    // The bubble taken back becomes the delegation's region (its box) and goes to HKG by a
    // handover: the player keeps their bubble, nothing restored, nothing lost.
    let placed = wait_for(&sandbox, 40, |s| {
        let b = s.bubble(bubble)?;
        let handed = b.site == "HKG" && b.moving.is_none() && !b.restoring;
        (handed && site_of(s, player).as_deref() == Some("HKG")).then(|| s.clone())
    })
    .await;
    let (updates_then, updates_after, last, reports) =
        play_on_3_s_and_finish(sandbox, &dir, stop, running).await;
    let status = placed.unwrap_or_else(|| {
        let l = last.unwrap_or_default();
        panic!("the region on HKG: bubbles {:?} decisions {:?}", l.bubbles, l.recent_decisions)
    });
    assert_eq!(status.stage, "fixed");
    assert_eq!(status.bubbles.len(), 1, "one region: {:?}", status.bubbles);
    let b = status.bubble(bubble).expect("the region");
    assert_eq!(b.bounds, [[-5_000.0; 3], [5_000.0; 3]], "the delegation's box");
    assert!(updates_after > updates_then + 20, "playing on: {updates_then} → {updates_after}");
    let r = &reports[0];
    assert_eq!(r.restores_seen, 0, "a handover, not a restore: {r:?}");
    played_through_a_failover(r, 3_000.0);
    eprintln!("fixed stage: longest update gap {:.0} ms across the restart", r.max_gap_ms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_whose_connection_drops_resumes_as_the_same_player_with_nothing_lost() {
    let (sandbox, dir, roots) = three_sites("blip", |_| {}).await;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut spec = bot("mtl-blip", "MTL", &sandbox, 0.0, 0);
    spec.reconnect_after = Some(Duration::from_secs(8));
    let running = vec![bots::spawn(spec, roots, sandbox.player_tokens.clone(), stop_rx)];
    tokio::time::sleep(Duration::from_secs(16)).await;
    let status = sandbox.core.status().await.expect("status");
    let resumes =
        sandbox.agent_stats("MTL").map(|s| s.resumes.load(std::sync::atomic::Ordering::Relaxed));
    let reports = finish(sandbox, &dir, stop, running).await;
    let r = &reports[0];
    assert_eq!(r.resumed, 1, "rejoined as the same player: {r:?}");
    assert_eq!(resumes, Some(1));
    let player = r.player.expect("joined");
    assert_eq!(site_of(&status, player).as_deref(), Some("MTL"), "still in its bubble");
    let players = status.players.len();
    assert_eq!(players, 1, "one player, not a second one for the new connection");
    played_through_a_failover(r, 2_000.0);
    eprintln!("reconnect: longest gap {:.0} ms", r.max_gap_ms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_agent_takes_its_game_servers_with_it_and_its_players_join_again_as_new_players()
{
    let m = lone_montrealer("agent-crash", |_| {}).await;
    let LoneMontrealer { mut sandbox, dir, stop, running, player, .. } = m;
    let servers_before = sandbox.server_processes("MTL");
    assert!(!servers_before.is_empty(), "MTL runs game servers");
    sandbox.restart_agent("MTL", Duration::from_secs(3)).await.expect("the agent restarts");
    let back = tokio::time::Instant::now();
    let report = running[0].0.clone();
    // The new session plays: simulated, its inputs acknowledged as they go. Waited for, not
    // slept on: the restarted agent starts its game servers afresh, slow on a loaded machine.
    let new_session = move || {
        let r = report.lock().expect("bot report");
        let playing = r.acked > 20 && r.inputs_sent.saturating_sub(r.acked) < 20;
        r.player.filter(|p| *p != player && playing)
    };
    let again = wait_for(&sandbox, 20, |s| {
        let p = new_session()?;
        (holder_of(s, p).is_some() && s.players.iter().all(|x| x.player != player)).then_some(p)
    })
    .await;
    let back_after = back.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let alive: Vec<u32> = servers_before
        .iter()
        .map(|(pid, _)| *pid)
        .filter(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
        .filter(|pid| {
            // A zombie not reaped yet is dead.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.split(' ').nth(2).is_none_or(|state| state != "Z"))
        })
        .collect();
    let reports = finish(sandbox, &dir, stop, running).await;
    let again = again.expect("the player joined again and is simulated");
    assert!(again > player, "a new id, never one handed out before: {player} then {again}");
    assert!(alive.is_empty(), "the crashed agent's game servers died with it: {alive:?} still run");
    assert!(back_after < Duration::from_secs(15), "playing again {back_after:?} after the restart");
    let r = &reports[0];
    assert_eq!(r.error, None);
    assert_eq!(r.sessions_ended, 1, "{r:?}");
    assert_eq!(r.resumed, 0, "a new session, not a resumed one: {r:?}");
    assert_eq!(r.applied_twice, 0);
    assert_eq!(r.chain_breaks, 0);
    assert_eq!(r.applied, r.acked, "the new session's inputs applied once each: {r:?}");
    assert!(r.acked > 20 && r.inputs_sent - r.acked < 20, "the new session plays: {r:?}");
    eprintln!("agent crash: playing again {back_after:?} after the agent was back");
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

/// Stage 1 on real processes: under `measure` everyone enters at the core site's gateway and
/// plays in its zones; each client measures every site's beacon (through emulated distances:
/// a Hong Konger is 185 ms of backbone from Paris) and joins with its table. The core counts
/// each player under the site of their lowest RTT, with who would gain from a relay site, and
/// exports the tables. A client claiming Paris is 5 ms away, from Hong Kong, is not believed:
/// it still plays, but is counted under no home it claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_measure_stage_the_core_counts_who_would_gain_and_a_lying_table_is_not_believed()
{
    let dir = std::env::temp_dir().join(format!("horizon-measure-{}", std::process::id()));
    let mut opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    opts.stage = Stage::Measure;
    let mut sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(1, Duration::from_secs(30)).await, "game servers ready");
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).expect("the sandbox CA loads");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut running = Vec::new();
    for (name, home, lie) in
        [("par-1", "PAR", None), ("hkg-1", "HKG", None), ("hkg-liar", "HKG", Some(5.0))]
    {
        let mut beacons = Vec::new();
        for site in ["PAR", "MTL", "HKG"] {
            let (_, beacon) = sandbox.reach(home, site).await.expect("emulators").expect("a site");
            beacons.push((site.to_owned(), beacon));
        }
        let (gateway, _) = sandbox.reach(home, "PAR").await.expect("emulators").expect("PAR");
        let spec = BotSpec {
            gateway,
            enters_at: Some("PAR".to_owned()),
            measure: Some(bots::Measure {
                beacons,
                lie: lie.map(|ms| ("PAR".to_owned(), ms)),
                gateways: BTreeMap::new(),
            }),
            ..bot(name, home, &sandbox, 0.0, 0)
        };
        running.push(bots::spawn(
            spec,
            roots.clone(),
            sandbox.player_tokens.clone(),
            stop_rx.clone(),
        ));
    }
    let counted = wait_for(&sandbox, 30, |s| (s.measure.players == 2).then(|| s.clone())).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let last = sandbox.core.status().await.unwrap_or_default();
    let csv = get(sandbox.core.admin_addr, "/measure.csv").await;
    let par = sandbox.agent_stats("PAR").expect("PAR's agent");
    let (accepted, contradicted, not_nearest) = (
        par.probe_tables_accepted.load(std::sync::atomic::Ordering::Relaxed),
        par.probe_tables_contradicted.load(std::sync::atomic::Ordering::Relaxed),
        par.joins_not_nearest.load(std::sync::atomic::Ordering::Relaxed),
    );
    let reports = finish(sandbox, &dir, stop, running).await;
    let status = counted.unwrap_or_else(|| panic!("two tables believed: {:?}", last.measure));
    assert_eq!(status.stage, "measure");
    assert!(last.bubbles.is_empty(), "everything in the core site's zones: {:?}", last.bubbles);
    let m = &last.measure;
    assert_eq!(m.players, 2, "the liar's table is not counted: {m:?}");
    let (par_home, hkg_home) = (m.by_home["PAR"], m.by_home["HKG"]);
    assert_eq!((par_home.players, par_home.would_gain, par_home.entered_here), (1, 0, 1), "{m:?}");
    assert_eq!((hkg_home.players, hkg_home.would_gain, hkg_home.entered_here), (1, 1, 0), "{m:?}");
    assert!(!m.by_home.contains_key("MTL"), "{m:?}");
    assert_eq!((accepted, contradicted, not_nearest), (2, 1, 1));
    assert!(csv.contains("200 OK") && csv.contains("player,site,rtt_ms"), "{csv}");
    let lines: Vec<&str> = csv.lines().filter(|l| l.contains(",PAR,")).collect();
    assert_eq!(lines.len(), 2, "one PAR line per believed player: {csv}");
    // The export is what `horizon sim measure` reads: stage 1's report from real connections.
    let body = csv.split("\r\n\r\n").nth(1).unwrap_or_default();
    let opts = horizon_sim::measure::MeasureOptions {
        core: "PAR".into(),
        frame_ms: 35.0,
        gain_ms: 25.0,
        cap_ms: 180.0,
    };
    let report = horizon_sim::measure::measure(body, &opts).expect("horizon sim measure reads it");
    assert_eq!((report.players, report.gaining), (2, 1), "{report:?}");
    assert_eq!(report.by_home["HKG"].players, 1, "{report:?}");
    for r in &reports {
        assert!(r.joined && r.updates > 20, "{} plays in a core zone: {r:?}", r.name);
        played_cleanly(r);
    }
    assert_eq!(reports[0].nearest_measured.as_deref(), Some("PAR"));
    assert_eq!(reports[1].nearest_measured.as_deref(), Some("HKG"));
}

/// design.md §2 on real processes: a client measures every site's beacon from where it
/// lives (Hong Kong: 10 ms from HKG, 195 from PAR, 235 from MTL), joins the gateway of the site
/// it measured lowest, and that site is its home; the gateway believes its table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_joins_the_site_it_measured_nearest_and_it_is_its_home() {
    let dir = std::env::temp_dir().join(format!("horizon-nearest-{}", std::process::id()));
    let opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    let mut sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(1, Duration::from_secs(30)).await, "game servers ready");
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).expect("the sandbox CA loads");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let (mut beacons, mut gateways) = (Vec::new(), BTreeMap::new());
    for site in ["PAR", "MTL", "HKG"] {
        let (gateway, beacon) = sandbox.reach("HKG", site).await.expect("emulators").expect("site");
        beacons.push((site.to_owned(), beacon));
        gateways.insert(site.to_owned(), gateway);
    }
    // Told PAR's gateway, it goes where its own measure says.
    let spec = BotSpec {
        measure: Some(bots::Measure { beacons, lie: None, gateways }),
        ..bot("hkg-measuring", "PAR", &sandbox, 0.0, 0)
    };
    let running = vec![bots::spawn(spec, roots, sandbox.player_tokens.clone(), stop_rx)];
    let report = running[0].0.clone();
    let player = move || report.lock().expect("bot report").player;
    let home = wait_for(&sandbox, 30, |s| {
        let p = player()?;
        s.players.iter().find(|x| x.player == p).map(|x| x.home.clone())
    })
    .await;
    let hkg = sandbox.agent_stats("HKG").expect("HKG's agent");
    let believed = hkg.probe_tables_accepted.load(std::sync::atomic::Ordering::Relaxed);
    let reports = finish(sandbox, &dir, stop, running).await;
    let r = &reports[0];
    assert_eq!(r.nearest_measured.as_deref(), Some("HKG"), "{r:?}");
    assert_eq!(r.entered_at.as_deref(), Some("HKG"), "{r:?}");
    assert_eq!(home.as_deref(), Some("HKG"), "its home is the site it joined");
    assert_eq!(believed, 1);
    played_cleanly(r);
}
