//! A transfer link cut: crossings and handovers go round through the third site.

use super::*;

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
    // MTL and HKG agents cannot reach each other; both reach PAR and the core.
    assert!(sandbox.partition_transfer("MTL", "HKG", true));

    let mut specs = vec![bot("mtl-host", "MTL", &sandbox, 0.0, 0)];
    for i in 0..3 {
        specs.push(bot(&format!("hkg-guest-{i}"), "HKG", &sandbox, 10.0 + i as f64, 3_000));
    }
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let running: Vec<_> = specs
        .into_iter()
        .map(|s| bots::spawn(s, roots.clone(), sandbox.player_tokens.clone(), stop_rx.clone()))
        .collect();
    let host = || running[0].0.lock().unwrap().player;

    // The host's bubble starts at MTL (a bubble: PAR, the core site, would play them in its
    // zones); once three Hongkongers join, the move to HKG is decided after the dwell, and its
    // state goes MTL → PAR → HKG.
    let mut moved = None;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let status = sandbox.core.status().await.expect("status");
        let Some(p) = host() else { continue };
        if site_of(&status, p).as_deref() == Some("HKG") {
            moved = Some(status);
            break;
        }
    }
    let through =
        sandbox.agent_stats("PAR").map_or(0, |s| s.relayed_through.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reports = finish(sandbox, &dir, stop, running).await;

    let moved = moved.expect("the group reached HKG through PAR");
    let longest = reports.iter().map(|r| r.max_gap_ms).fold(0.0, f64::max);
    println!("the longest gap of a player through the move: {longest:.0} ms");
    assert!(moved.handovers.committed >= 1, "{:?}", moved.handovers);
    assert!(through > 0, "PAR passed the handover's state and the guests' traffic on");
    for r in &reports {
        // Playing on through the move, whichever way it went. The seal and the first updates
        // from HKG go round through PAR (PAR → HKG → MTL, 431 ms, was measured under
        // `stress-ng --cpu 2` the other way round; this way is shorter), so 1.5 s.
        played_cleanly_within(r, 1_500.0);
    }
}
