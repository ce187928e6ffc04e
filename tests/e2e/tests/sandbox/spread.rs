//! Crowds over several servers of a relay site (MTL: bubbles; the core site's players play in its
//! zones): spread without cutting a group, restored from part copies;
//! an overfull server giving a bubble away.

use super::*;

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
    opts.thresholds.split_after_samples = 2;
    opts.thresholds.settle_ms = 2_000;
    opts.thresholds.merge_after_samples = 120;
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(2, Duration::from_secs(30)).await, "game servers ready");
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).unwrap();

    // Four groups of three Montrealers, 600 m apart: one bubble (within the merge distance), four
    // groups (beyond the grouping radius), twelve players for servers that take four each. The
    // first arrives alone and gets a bubble at once; the others join it 2 s later (twelve at
    // once would wait in the core site's zones for twelve seats ready at MTL, which keeps two
    // servers warm).
    let mut specs = Vec::new();
    for g in 0..4 {
        for k in 0..3 {
            let x = g as f64 * 600.0 + k as f64 * 3.0;
            let after_ms = if g + k == 0 { 0 } else { 2_000 };
            specs.push(bot(&format!("crowd-{g}-{k}"), "MTL", &sandbox, x, after_ms));
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
        .site("MTL")
        .and_then(|mtl| {
            mtl.servers.iter().flatten().find(|s| s.players > 0 && !s.bubbles.is_empty())
        })
        .map(|s| s.server.clone());
    let killed = victim.as_ref().is_some_and(|v| sandbox.kill_server("MTL", v));
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
    assert_eq!(bubbles[0].site, "MTL");
    let bubble = bubbles[0].bubble;
    // Every group whole on one server, several servers holding the bubble.
    let mtl = status.site("MTL").expect("MTL");
    let holding: Vec<&horizon_core::status::ServerStatus> =
        mtl.servers.iter().flatten().filter(|s| s.bubbles.contains(&bubble)).collect();
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
    // State copies of the spread bubble: one per part, from each part's server, named by
    // their layout (`BUBBLE.EPOCH.PARTS.partI.bin`).
    for part in 0..3 {
        let (prefix, suffix) = (format!("{bubble}."), format!(".part{part}.bin"));
        let found = part_copies.iter().any(|f| f.starts_with(&prefix) && f.ends_with(&suffix));
        assert!(found, "{prefix}…{suffix} in the universe backup: {part_copies:?}");
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
        let spec = bot(name, "MTL", &sandbox, x, 0);
        bots::spawn(spec, roots.clone(), sandbox.player_tokens.clone(), stop_rx.clone())
    };
    // Two Montrealers 5 km apart: two bubbles, both seated on one server.
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
            s.site("MTL")?.servers.iter().flatten().find(|x| x.bubbles.contains(&shared.1.0))?;
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
    let mtl = status.site("MTL").expect("MTL");
    let holds = |b: u64| mtl.servers.iter().flatten().find(|x| x.bubbles.contains(&b));
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
