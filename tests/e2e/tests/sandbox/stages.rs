//! The measure stage's counts, and a client joining the site it measured nearest.

use super::*;

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
