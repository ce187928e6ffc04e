//! `horizon demo`: the whole mesh on this machine — core at PAR, agents at PAR, MTL and HKG
//! with warm pools of `horizon gameserver` processes, backbone latency emulated (85 / 185 /
//! 225 ms), and 60 simulated players from the three continents with ~10 ms access RTT.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use horizon_core::Stage;
use horizon_testkit::bots::{self, BotReport};
use horizon_testkit::{Sandbox, SandboxOptions, stats};

use crate::faults::{self, Fault, FaultKind, Running};

mod players;
mod report;

use players::{
    DYNAMIC_DISPERSE, FIXED_BOX, FIXED_SITE, FIXED_WORLD, RELAY_DISPERSE, enter_at_the_core,
    population, zoned,
};
use report::{Cost, final_document, freeze_report, summary_line};

#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    duration: Option<u64>,
    /// At the end, print one JSON document (the summary lines go to stderr).
    #[arg(long)]
    json: bool,
    /// Where the core's admin API and console listen.
    #[arg(long, default_value = "127.0.0.1:7480")]
    admin: SocketAddr,
    /// Working directory for certificates and the core's store (default: a fresh temporary one).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// A drill: a TOML list of timed faults to carry out on the running mesh
    /// (`simulations/drills/`, docs/running.md). The JSON document reports each.
    #[arg(long)]
    faults: Option<std::path::PathBuf>,
    /// How agents start game servers: `process` (children of the agent), or `kube` (pods
    /// created, watched and deleted through the Kubernetes API of a fake API server whose fake
    /// kubelet runs them as local processes; docs/running.md).
    #[arg(long, value_enum, default_value_t = Driver::Process)]
    driver: Driver,
    /// What every game server runs: `rust` (`horizon gameserver`, the reference game in Rust),
    /// or `godot` (`horizon godot-server` on the GDScript reference game, godot/reference, in a
    /// headless Godot 3 process; docs/godot.md).
    #[arg(long, value_enum, default_value_t = GameServer::Rust)]
    game_server: GameServer,
    /// The headless Godot binary, for `--game-server godot`.
    #[arg(long, env = "HORIZON_GODOT", default_value = "godot3-server")]
    godot: std::path::PathBuf,
    /// When players see their own input's effect: `early` (the game server sends each player
    /// their own state the moment their input is applied, ahead of the tick's update) or
    /// `batched` (in the tick's update only). The JSON reports click-to-screen both ways:
    /// `click_to_screen_ms` (the first state showing the input) and `click_to_update_ms` (the
    /// update alone).
    #[arg(long, default_value_t = horizon_sdk::OwnState::Early)]
    own_state: horizon_sdk::OwnState,
    /// The core's rollout stage (docs/running.md, "Rolling out"): `dynamic` (SMD-G: bubbles on
    /// the best site), `relay` (players enter at their home site, everything is simulated in
    /// the core site's zones; the demo's servers then hold 20 players, so the zone splits), or
    /// `measure` (as `relay`, but players enter at the core site after measuring every site),
    /// or `fixed` (the players' world is delegated to MTL by configuration).
    #[arg(long, default_value = "dynamic", value_parser = crate::parse_stage)]
    stage: Stage,
    /// Two cores on a three-member etcd that the demo starts on loopback (the `etcd` binary
    /// from PATH: Debian's `etcd-server`); one leads, the other stands by and takes over when
    /// the leader dies or is cut from etcd (drill kinds `kill_core`, `partition_core_store`;
    /// docs/running.md, "A standby core"). Needs a horizon built `--features etcd`.
    #[arg(long)]
    standby: bool,
}

/// `store.election_ttl_s` of the demo's cores with `--standby` (the default).
const STANDBY_ELECTION_TTL_S: u32 = 3;

/// `players_per_server` of the relay stage's demo: its 60 players cut the world's zone.
const RELAY_PLAYERS_PER_SERVER: u32 = 20;
/// `merge_after_samples` of the relay stage's demo, so that zones are joined within a minute.
const RELAY_MERGE_AFTER_SAMPLES: u32 = 10;
/// `players_per_server` of the default stage's demo: the Paris crowd in PAR's zone (21
/// players) cuts it, and the zones are joined again within a minute of its thinning out
/// (`merge_after_samples` as under relay).
const DYNAMIC_PLAYERS_PER_SERVER: u32 = 15;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum GameServer {
    Rust,
    Godot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Driver {
    Process,
    Kube,
}

pub(crate) fn demo(args: DemoArgs) -> ExitCode {
    let runtime =
        match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("error: cannot start the runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
    runtime.block_on(run(args))
}

async fn run(args: DemoArgs) -> ExitCode {
    let program = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot find the horizon binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("horizon-demo-{}", std::process::id()))
    });
    let mut opts = SandboxOptions::three_sites(program, dir.clone());
    opts.thresholds.dwell_ms = 10_000;
    opts.thresholds.hold_ms = 20_000;
    opts.warm_pool = 4;
    opts.admin = args.admin;
    opts.stage = args.stage;
    if zoned(args.stage) {
        opts.thresholds.players_per_server = RELAY_PLAYERS_PER_SERVER;
        opts.thresholds.merge_after_samples = RELAY_MERGE_AFTER_SAMPLES;
        opts.seats_per_server = opts.thresholds.seats_per_server();
    }
    if args.stage == Stage::Dynamic {
        opts.thresholds.players_per_server = DYNAMIC_PLAYERS_PER_SERVER;
        opts.thresholds.merge_after_samples = RELAY_MERGE_AFTER_SAMPLES;
        opts.seats_per_server = opts.thresholds.seats_per_server();
    }
    if args.stage == Stage::Fixed {
        let (min, max) = FIXED_BOX;
        let v = |[x, y, z]: [f64; 3]| horizon_mesh::Vec3 { x, y, z };
        let bounds = horizon_mesh::Aabb { min: v(min), max: v(max) };
        opts.delegations = vec![(FIXED_WORLD, Some(bounds), FIXED_SITE.to_owned())];
    }
    // With a standby: three etcd members, kept (and killed) with the demo.
    let _etcd = if args.standby {
        if !cfg!(feature = "etcd") {
            eprintln!(
                "error: --standby keeps the cores' ownership log in etcd: this horizon was built \
                 without it (cargo build --release -p horizon --features etcd)"
            );
            return ExitCode::from(64);
        }
        match horizon_testkit::EtcdCluster::start(dir.join("etcd"), 3).await {
            Ok(cluster) => {
                opts.standby = Some(horizon_core::EtcdOptions {
                    endpoints: cluster.endpoints(),
                    prefix: "/horizon-demo".into(),
                    election_ttl_s: STANDBY_ELECTION_TTL_S,
                    universe: None,
                    tls: None,
                });
                Some(cluster)
            }
            Err(e) => {
                eprintln!("error: --standby runs a three-member etcd on loopback: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let players_per_server = opts.thresholds.players_per_server;
    let server_tick_ms = opts.server_tick_ms;
    let merge_after_samples = opts.thresholds.merge_after_samples;
    if args.game_server == GameServer::Godot {
        let project = dir.join("godot-reference");
        if let Err(e) = horizon_godot::reference::write_project(&project) {
            eprintln!("error: cannot write the Godot project into {}: {e}", project.display());
            return ExitCode::FAILURE;
        }
        opts.server_args =
            vec!["godot-server".into(), "--project".into(), project.display().to_string()];
        opts.server_args.extend(["--godot".into(), args.godot.display().to_string()]);
    }
    opts.server_args.extend(["--own-state".into(), args.own_state.to_string()]);
    let kube = match args.driver {
        Driver::Process => None,
        Driver::Kube => match crate::kube_demo::KubeDemo::start().await {
            Ok(k) => {
                opts.drivers = Some(k.drivers());
                Some(k)
            }
            Err(e) => {
                eprintln!("error: cannot start the fake Kubernetes API server: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let drill: Vec<Fault> = match &args.faults {
        None => Vec::new(),
        Some(path) => match faults::load(
            path,
            &faults::Mesh { sites: &opts.sites, core: &opts.sites[0], standby: args.standby },
        ) {
            Ok(f) => f,
            Err(errors) => {
                for e in errors {
                    eprintln!("error: {e}");
                }
                return ExitCode::from(64);
            }
        },
    };
    let say = |line: String| {
        if args.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    say("horizon demo: core PAR, agents PAR MTL HKG; backbone 85/185/225 ms, access 10 ms (emulated); tick 5 s; \
         demo settings: dwell 10 s (30 s by default), hold 20 s (180 s by default) so that moves happen within a minute"
        .to_owned());
    if args.stage == Stage::Fixed {
        say(format!(
            "stage fixed: x ≤ 487 km of world {FIXED_WORLD}, where groups 0-12 play, is delegated to {FIXED_SITE} by configuration \
             ([[delegations]]): one region there whatever the scoring says; the others play in PAR's zone, and one flies into the region at 40 s"
        ));
    }
    if args.stage == Stage::Measure {
        say("stage measure: every player enters at PAR's gateway from where they live, having measured \
             every site's probe beacon, and joins with the table; the core counts who would gain from a relay site"
            .to_owned());
    }
    if let Some(etcd) = &opts.standby {
        say(format!(
            "standby: two cores on etcd ({}), election TTL {STANDBY_ELECTION_TTL_S} s: the first leads, the second stands by",
            etcd.endpoints.join(" ")
        ));
    }
    if args.stage == Stage::Dynamic {
        say(format!(
            "stage dynamic: Parisians play in PAR's zones, bubbles are carved out of them for groups \
             placed on MTL or HKG; demo settings: {DYNAMIC_PLAYERS_PER_SERVER} players per server (75 by default) \
             so that the Paris crowd splits its zone, groups {:?} leave at {} s and zones merge after \
             {RELAY_MERGE_AFTER_SAMPLES} quiet samples (30 by default)",
            DYNAMIC_DISPERSE.0, DYNAMIC_DISPERSE.1
        ));
    }
    if zoned(args.stage) {
        say(format!(
            "stage {}: every player is simulated in the core site's zones (no bubble); \
             demo settings: {RELAY_PLAYERS_PER_SERVER} players per server (75 by default) so that the zone splits, \
             most players leave at {} s and zones merge after {RELAY_MERGE_AFTER_SAMPLES} quiet samples (30 by default)",
            args.stage.as_str(),
            RELAY_DISPERSE.1
        ));
    }
    let mut sandbox = match Sandbox::start(opts).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    say(format!(
        "console http://{0}/  ·  /status  ·  /metrics  ·  /livez  ·  /readyz   (working dir {1})",
        sandbox.core.admin_addr,
        dir.display()
    ));
    if let Some(standby) = sandbox.core_admins().get(1) {
        say(format!("standby core admin http://{standby}/  ·  /readyz names the leader"));
    }
    if let Some(k) = &kube {
        say(format!(
            "game servers are pods of the fake Kubernetes API at {}/api/v1/namespaces/{}/pods",
            k.url(),
            crate::kube_demo::NAMESPACE
        ));
    }
    for agent in &sandbox.agents {
        if let Some(admin) = agent.admin_addr {
            say(format!("agent {} admin http://{admin}/  ·  /metrics  ·  /readyz", agent.site));
        }
    }
    if !sandbox.wait_ready(2, Duration::from_secs(30)).await {
        eprintln!("error: game servers did not become ready within 30 s");
        sandbox.shutdown().await;
        return ExitCode::FAILURE;
    }
    let roots = match horizon_transport::tls::Roots::load(&sandbox.ca) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            sandbox.shutdown().await;
            return ExitCode::FAILURE;
        }
    };
    let (stop_bots, stop_rx) = tokio::sync::watch::channel(false);
    let mut reports: Vec<Arc<Mutex<BotReport>>> = Vec::new();
    let mut tasks = Vec::new();
    let mut specs = population(&sandbox.gateways, args.stage);
    if args.stage == Stage::Measure
        && let Err(e) = enter_at_the_core(&mut sandbox, &mut specs).await
    {
        eprintln!("error: {e}");
        sandbox.shutdown().await;
        return ExitCode::FAILURE;
    }
    for spec in specs {
        let (report, task) =
            bots::spawn(spec, roots.clone(), sandbox.player_tokens.clone(), stop_rx.clone());
        reports.push(report);
        tasks.push(task);
    }
    let started = tokio::time::Instant::now();
    let deadline = args.duration.map(|s| started + Duration::from_secs(s));
    let mut every = tokio::time::interval(Duration::from_secs(5));
    every.tick().await;
    let mut seen: Vec<usize> = vec![0; reports.len()];
    let mut cost = Cost::default();
    // The drill's steps: (at s, fault, what), in time order.
    let mut steps: Vec<(f64, usize, Step)> = drill
        .iter()
        .enumerate()
        .flat_map(|(i, f)| {
            let lasting = f.for_s > 0.0 && !f.kind.is_restart();
            let end = lasting.then_some((f.at_s + f.for_s, i, Step::End));
            let look = (f.at_s + f.for_s + faults::OBSERVE_AFTER_S, i, Step::Observe);
            std::iter::once((f.at_s, i, Step::Start)).chain(end).chain(std::iter::once(look))
        })
        .collect();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut steps = std::collections::VecDeque::from(steps);
    let mut running: Vec<Running> = Vec::new();
    let snapshot = |reports: &[Arc<Mutex<BotReport>>]| -> Vec<BotReport> {
        reports.iter().map(|r| r.lock().map(|r| r.clone()).unwrap_or_default()).collect()
    };
    loop {
        let until_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let next_step = async {
            match steps.front() {
                Some(&(at, ..)) => {
                    tokio::time::sleep_until(started + Duration::from_secs_f64(at)).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = every.tick() => {
                let status = sandbox.core.status().await.unwrap_or_default();
                cost.sample(&status);
                let mut line = summary_line(started.elapsed().as_secs(), &status, &reports, &mut seen);
                let now = faults::describe(&running, &reports, faults::now_s());
                if !now.is_empty() {
                    line = format!("{line}  |  {now}");
                }
                say(line);
            }
            _ = next_step => {
                let Some((_, i, step)) = steps.pop_front() else { continue };
                let fault = &drill[i];
                match step {
                    Step::Start => {}
                    Step::End => {
                        say(format!("drill: fault {} ({}) ends", i + 1, fault.kind));
                        faults::end(fault, &sandbox);
                        if fault.kind == FaultKind::PartitionCoreStore {
                            // The fenced core exited; its supervisor starts it again.
                            match sandbox.restart_standby().await {
                                Ok(()) => say(format!("drill: fault {}: the old leader is back, standing by", i + 1)),
                                Err(e) => say(format!("drill: fault {}: the old leader could not stand by again: {e}", i + 1)),
                            }
                        }
                        continue;
                    }
                    Step::Observe => {
                        let status = sandbox.core.status().await.unwrap_or_default();
                        // `running` is in the order faults started; find this one.
                        if let Some(r) = running.iter_mut().find(|r| r.fault == *fault) {
                            faults::observe(r, &status, &snapshot(&reports), &sandbox);
                        }
                        continue;
                    }
                }
                say(format!("drill: fault {} ({}) for {} s", i + 1, fault.kind, fault.for_s));
                let status = sandbox.core.status().await.unwrap_or_default();
                let r = faults::start(fault, &sandbox, &status, &snapshot(&reports));
                if let Some(problem) = &r.problem {
                    say(format!("drill: fault {}: {problem}", i + 1));
                }
                running.push(r);
                if fault.kind.is_takeover()
                    && let Some(r) = running.last_mut()
                {
                    match faults::take_over(r, &mut sandbox).await {
                        Ok(()) => say(format!(
                            "drill: fault {}: the standby leads (generation {}), console now http://{}/",
                            i + 1,
                            sandbox.core.generation,
                            sandbox.core.admin_addr
                        )),
                        Err(e) => {
                            eprintln!("error: the standby did not take over: {e}");
                            sandbox.shutdown().await;
                            return ExitCode::FAILURE;
                        }
                    }
                }
                if fault.kind == FaultKind::RestartCore {
                    if let Err(e) = sandbox.restart_core(Duration::from_secs_f64(fault.for_s)).await {
                        eprintln!("error: the core did not come back: {e}");
                        sandbox.shutdown().await;
                        return ExitCode::FAILURE;
                    }
                    say(format!("drill: fault {}: the core is back", i + 1));
                }
                if let FaultKind::RestartAgent { site } = &fault.kind {
                    if let Err(e) = sandbox.restart_agent(site, Duration::from_secs_f64(fault.for_s)).await {
                        eprintln!("error: the {site} agent did not come back: {e}");
                        sandbox.shutdown().await;
                        return ExitCode::FAILURE;
                    }
                    say(format!("drill: fault {}: the {site} agent is back, knowing nobody", i + 1));
                }
            }
            _ = until_deadline => break,
            signal = crate::daemons::stop_or_hangup() => {
                say(format!("{signal}: stopping players, agents, game servers and the core"));
                break;
            }
        }
    }
    let status = sandbox.core.status().await.unwrap_or_default();
    cost.sample(&status);
    let _ = stop_bots.send(true);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    let finals: Vec<BotReport> = snapshot(&reports);
    let writes_after_lease: u64 = sandbox
        .every_agent_stats()
        .map(|a| a.writes_after_lease.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    let region_moves: u64 = sandbox
        .every_agent_stats()
        .map(|a| a.regions_moved.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    let stopped_idle: u64 = sandbox
        .every_agent_stats()
        .map(|a| a.servers_stopped_idle.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    let freezes = sandbox.freezes(false);
    let crossings = sandbox.freezes(true);
    let physics = report::physics_report(
        &sandbox.freezes_by_home(false),
        &sandbox.core_config().sites,
        f64::from(server_tick_ms),
    );
    let core_site = sandbox.core_site().to_owned();
    let engines: usize = sandbox
        .gateways
        .keys()
        .map(|site| {
            sandbox.server_children(site).iter().filter(|(_, c)| c.contains("godot")).count()
        })
        .sum();
    let pods_by_pool = kube.as_ref().map(|k| k.pods_by_pool());
    sandbox.shutdown().await;
    let mut doc = final_document(&status, &finals);
    let mut first: Vec<f64> = finals.iter().filter_map(|r| r.first_update_ms).collect();
    first.sort_by(f64::total_cmp);
    let round = |x: Option<f64>| x.map(|x| x.round());
    let summary = |v: &[f64]| {
        serde_json::json!({
            "p50": round(stats::quantile(v, 0.5)),
            "p99": round(stats::quantile(v, 0.99)),
            "max": round(v.last().copied()),
            "samples": v.len(),
        })
    };
    doc["join_to_first_update_ms"] = summary(&first);
    let mut by_home: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in &finals {
        if let Some(ms) = r.first_update_ms {
            by_home.entry(r.site.as_str()).or_default().push(ms);
        }
    }
    doc["join_to_first_update_ms_by_home"] = by_home
        .into_iter()
        .map(|(site, mut v)| {
            v.sort_by(f64::total_cmp);
            (site.to_owned(), summary(&v))
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    doc["players_unsimulated_max"] = cost.unsimulated_max.into();
    doc["max_servers_by_site"] = serde_json::json!(cost.max_by_site);
    // The pool: its bounds as each agent gave them, and what ran against them.
    doc["servers_running_max_by_site"] = serde_json::json!(cost.running_max_by_site);
    doc["idle_servers_max_by_site"] = serde_json::json!(cost.idle_max_by_site);
    doc["pool_by_site"] = status
        .sites
        .iter()
        .filter_map(|s| Some((s.site.clone(), serde_json::json!(s.pool?))))
        .collect::<serde_json::Map<_, _>>()
        .into();
    doc["servers_stopped_idle"] = stopped_idle.into();
    doc["zones"] = serde_json::json!({
        "count": cost.zones_max,
        "splits": status.zone_changes.splits,
        "merges": status.zone_changes.merges,
    });
    doc["region_moves"] = region_moves.into();
    let per_server = cost.peak_players as f64 / cost.peak_servers.max(1) as f64;
    doc["players_per_server_at_peak"] = ((per_server * 10.0).round() / 10.0).into();
    let (freeze, excess, by_pair) = freeze_report(&freezes);
    doc["freeze_ms"] = freeze;
    doc["freeze_excess_ms"] = excess;
    doc["freeze_excess_ms_by_pair"] = by_pair;
    (doc["freeze_above_physics_ms"], doc["freeze_above_physics_ms_by_pair"]) = physics;
    let (crossing, crossing_excess, by_pair) = freeze_report(&crossings);
    doc["crossing_freeze_ms"] = crossing;
    doc["crossing_freeze_excess_ms"] = crossing_excess;
    doc["crossing_freeze_excess_ms_by_pair"] = by_pair;
    doc["own_state"] = args.own_state.to_string().into();
    doc["stage"] = args.stage.as_str().into();
    if args.stage == Stage::Measure {
        // Stage 1's figures as the core counted them (players still online at the end), and
        // each player's home by their own measure.
        let m = &status.measure;
        let share = |h: &horizon_core::machine::measure::HomeMeasure| {
            if h.players == 0 { 0.0 } else { h.would_gain as f64 / h.players as f64 }
        };
        let nearest: Vec<(&str, &str)> = finals
            .iter()
            .filter_map(|r| Some((r.site.as_str(), r.nearest_measured.as_deref()?)))
            .collect();
        doc["measure"] = serde_json::json!({
            "players": m.players,
            "by_home": m.by_home,
            "would_gain_share_by_home": m.by_home.iter().map(|(s, h)| (s.clone(), share(h))).collect::<BTreeMap<_, _>>(),
            "home_matches_lowest_rtt_share": m.home_matches_lowest_rtt_share,
            "entered_at_lowest_rtt_share": m.entered_at_lowest_rtt_share,
            // Players online under their home, as the core counts them in every figure.
            "players_by_home": status.sites.iter().map(|s| (s.site.clone(), s.players)).collect::<BTreeMap<_, _>>(),
            "players_measured_nearest_their_home": nearest.iter().filter(|(home, near)| home == near).count(),
            "players_measured": nearest.len(),
        });
    }
    doc["settings"]["players_per_server"] = players_per_server.into();
    doc["settings"]["merge_after_samples"] = merge_after_samples.into();
    doc["bubbles_max"] = cost.bubbles_max.into();
    doc["standby"] = args.standby.into();
    doc["driver"] = if kube.is_some() { "kube" } else { "process" }.into();
    doc["game_server"] = match args.game_server {
        GameServer::Rust => "rust",
        GameServer::Godot => "godot",
    }
    .into();
    // Godot processes under the game servers just before the stop.
    doc["godot_processes"] = engines.into();
    if let Some(k) = &kube {
        // The agents deleted their pods as they stopped (SIGTERM, then the grace period).
        doc["kube_pods_left"] = k.pods_left().into();
        doc["kube_pods_by_pool"] = pods_by_pool.unwrap_or_default();
    }
    if args.faults.is_some() {
        let end = faults::now_s();
        doc["core_site"] = core_site.into();
        doc["faults"] = running.iter().map(|r| faults::report(r, &finals, end)).collect();
        let refused = &status.stale_refused;
        doc["stale_writes_refused"] = (refused.copies + refused.renewals).into();
        doc["writes_after_lease"] = writes_after_lease.into();
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        report::readable(&doc).into_iter().for_each(&say);
    }
    ExitCode::SUCCESS
}

/// One step of a drill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Start,
    End,
    /// Look at where the fault left its players.
    Observe,
}
