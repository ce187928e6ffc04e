//! `horizon demo`: the whole mesh on this machine — core at PAR, agents at PAR, MTL and HKG
//! with warm pools of `horizon gameserver` processes, backbone latency emulated (85 / 185 /
//! 225 ms), and 60 simulated players from the three continents with ~10 ms access RTT.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use horizon_core::{CoreStatus, Stage};
use horizon_proto::Role;
use horizon_testkit::bots::{self, Away, BotReport, BotSpec, Motion};
use horizon_testkit::{Sandbox, SandboxOptions};

use crate::faults::{self, Fault, FaultKind, Running};

#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    duration: Option<u64>,
    /// At the end, print one JSON document (the summary lines go to stderr).
    #[arg(long)]
    json: bool,
    /// Where the core's admin API and status page listen.
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
    /// the best site) or `relay` (players enter at their home site, everything is simulated in
    /// the core site's zones; the demo's servers then hold 20 players, so the zone splits).
    #[arg(long, default_value = "dynamic", value_parser = crate::parse_stage)]
    stage: Stage,
}

/// `players_per_server` of the relay stage's demo: its 60 players cut the world's zone.
const RELAY_PLAYERS_PER_SERVER: u32 = 20;
/// `merge_after_samples` of the relay stage's demo, so that zones are joined within a minute.
const RELAY_MERGE_AFTER_SAMPLES: u32 = 10;

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

/// A group of players around one point: the first is the host (joins first).
struct Group {
    host: &'static str,
    guests: &'static [(&'static str, usize)],
    motion: Motion,
}

const GROUPS: &[Group] = &[
    // A Parisian hosting Montrealers: starts on PAR, moves to MTL after the dwell.
    Group {
        host: "PAR",
        guests: &[("MTL", 3)],
        motion: Motion::Wander { radius_m: 40.0, speed_mps: 1.5 },
    },
    Group {
        host: "PAR",
        guests: &[("MTL", 3)],
        motion: Motion::Wander { radius_m: 40.0, speed_mps: 1.5 },
    },
    Group { host: "PAR", guests: &[("MTL", 3)], motion: Motion::Still },
    // A Parisian with four Hong Kong players: HKG wins (no site keeps everyone under the cap).
    Group {
        host: "PAR",
        guests: &[("HKG", 4)],
        motion: Motion::Wander { radius_m: 40.0, speed_mps: 1.5 },
    },
    // One from each continent: Paris is in the middle, it stays.
    Group { host: "PAR", guests: &[("MTL", 1), ("HKG", 1)], motion: Motion::Still },
    Group {
        host: "PAR",
        guests: &[("PAR", 4)],
        motion: Motion::Wander { radius_m: 60.0, speed_mps: 1.5 },
    },
    Group { host: "PAR", guests: &[("PAR", 5)], motion: Motion::Still },
    Group {
        host: "PAR",
        guests: &[("PAR", 4)],
        motion: Motion::Circle { radius_m: 2000.0, speed_mps: 120.0 },
    },
    Group {
        host: "MTL",
        guests: &[("MTL", 3)],
        motion: Motion::Wander { radius_m: 60.0, speed_mps: 1.5 },
    },
    Group {
        host: "MTL",
        guests: &[("MTL", 3)],
        motion: Motion::Circle { radius_m: 2000.0, speed_mps: 120.0 },
    },
    Group {
        host: "HKG",
        guests: &[("HKG", 3)],
        motion: Motion::Wander { radius_m: 60.0, speed_mps: 1.5 },
    },
    Group { host: "HKG", guests: &[("HKG", 3)], motion: Motion::Still },
    // Lone players, each on their own site.
    Group { host: "MTL", guests: &[], motion: Motion::Wander { radius_m: 200.0, speed_mps: 1.5 } },
    Group { host: "MTL", guests: &[], motion: Motion::Still }, // leaves (LEAVERS)
    Group { host: "MTL", guests: &[], motion: Motion::Still }, // flies to group 12 (DASHERS)
    Group { host: "HKG", guests: &[], motion: Motion::Wander { radius_m: 200.0, speed_mps: 1.5 } },
    Group { host: "HKG", guests: &[], motion: Motion::Still }, // leaves (LEAVERS)
    Group { host: "HKG", guests: &[], motion: Motion::Still }, // flies to group 10 (DASHERS)
    Group { host: "PAR", guests: &[], motion: Motion::Still },
    Group { host: "PAR", guests: &[], motion: Motion::Wander { radius_m: 200.0, speed_mps: 1.5 } },
];

/// Groups this far apart never meet.
const GROUP_SPACING_M: f64 = 40_000.0;

/// Lone players who fly to another group (group, target group, after s): a preventive merge
/// folds one bubble into the other, and a player's state crosses to the new holder.
const DASHERS: &[(usize, usize, u64)] = &[(14, 12, 30), (17, 10, 40)];
/// Lone players who leave before the end (group, after s).
const LEAVERS: &[(usize, u64)] = &[(13, 45), (16, 50)];
/// A dasher starts this far from its target, and flies this fast.
const DASH_FROM_M: f64 = 9_000.0;
const DASH_MPS: f64 = 200.0;

/// Under the relay stage, the groups before this one leave after this many seconds: the crowd
/// that cut the world's zone disperses, and the zones are joined again, the latest cut first.
const RELAY_DISPERSE: (usize, u64) = (12, 35);

/// The demo's players, deterministic.
pub(crate) fn population(gateways: &BTreeMap<String, SocketAddr>, stage: Stage) -> Vec<BotSpec> {
    let mut bots = Vec::new();
    for (g, group) in GROUPS.iter().enumerate() {
        let dash = DASHERS.iter().find(|d| d.0 == g);
        let disperse = (stage == Stage::Relay && g < RELAY_DISPERSE.0).then_some(RELAY_DISPERSE.1);
        let leave = LEAVERS
            .iter()
            .find(|l| l.0 == g)
            .map(|l| l.1)
            .into_iter()
            .chain(disperse)
            .min()
            .map(Duration::from_secs);
        let centre = match dash {
            Some(&(_, to, _)) => [to as f64 * GROUP_SPACING_M + DASH_FROM_M, 0.0, 0.0],
            None => [g as f64 * GROUP_SPACING_M, 0.0, 0.0],
        };
        let motion = match dash {
            Some(&(_, to, after)) => Motion::Dash {
                after_s: after as f64,
                to_x: to as f64 * GROUP_SPACING_M + 20.0,
                speed_mps: DASH_MPS,
            },
            None => group.motion,
        };
        let pilots = matches!(group.motion, Motion::Circle { .. });
        let mut members: Vec<&str> = vec![group.host];
        for (site, n) in group.guests {
            members.extend(std::iter::repeat_n(*site, *n));
        }
        for (i, site) in members.iter().enumerate() {
            let Some(&gateway) = gateways.get(*site) else { continue };
            bots.push(BotSpec {
                name: format!("{}-g{g}-{i}", site.to_ascii_lowercase()),
                site: (*site).to_owned(),
                gateway,
                role: if pilots && i == 0 { Role::Pilot } else { Role::Player },
                world: 1,
                start: [centre[0] + 5.0 * i as f64, 0.0, centre[2] + 3.0 * i as f64],
                motion,
                leave_after: leave,
                reconnect_after: None,
                claim: None,
                // Hosts first; guests once the host's bubble exists.
                join_after: Duration::from_millis(if i == 0 {
                    200 * g as u64 % 2000
                } else {
                    7000 + 150 * i as u64
                }),
                input_every: Duration::from_millis(100),
                afk: if g % 4 == 1 && i == 1 {
                    Away::Once(Duration::from_secs(30), Duration::from_secs(15))
                } else {
                    Away::Never
                },
            });
        }
    }
    bots
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
    if args.stage == Stage::Relay {
        opts.thresholds.players_per_server = RELAY_PLAYERS_PER_SERVER;
        opts.thresholds.merge_after_samples = RELAY_MERGE_AFTER_SAMPLES;
        opts.seats_per_server = opts.thresholds.seats_per_server();
    }
    let players_per_server = opts.thresholds.players_per_server;
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
        Some(path) => match faults::load(path, &opts.sites, &opts.sites[0]) {
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
         demo settings: dwell 10 s (SPEC 30 s), hold 20 s (SPEC 180 s) so that moves happen within a minute"
        .to_owned());
    if args.stage == Stage::Relay {
        say(format!(
            "stage relay: every player is simulated in the core site's zones (no bubble); \
             demo settings: {RELAY_PLAYERS_PER_SERVER} players per server (SPEC 75) so that the zone splits, \
             most players leave at {} s and zones merge after {RELAY_MERGE_AFTER_SAMPLES} quiet samples (SPEC 30)",
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
        "status page http://{0}/  ·  /status  ·  /metrics  ·  /livez  ·  /readyz   (working dir {1})",
        sandbox.core.admin_addr,
        dir.display()
    ));
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
    for spec in population(&sandbox.gateways, args.stage) {
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
                        say(format!("drill: fault {} ({:?}) ends", i + 1, fault.kind));
                        faults::end(fault, &sandbox);
                        continue;
                    }
                    Step::Observe => {
                        let status = sandbox.core.status().await.unwrap_or_default();
                        // `running` is in the order faults started; find this one.
                        if let Some(r) = running.iter_mut().find(|r| r.fault == *fault) {
                            faults::observe(r, &status, &snapshot(&reports));
                        }
                        continue;
                    }
                }
                say(format!("drill: fault {} ({:?}) for {} s", i + 1, fault.kind, fault.for_s));
                let status = sandbox.core.status().await.unwrap_or_default();
                let r = faults::start(fault, &sandbox, &status, &snapshot(&reports));
                if let Some(problem) = &r.problem {
                    say(format!("drill: fault {}: {problem}", i + 1));
                }
                running.push(r);
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
    let freezes = sandbox.freezes(false);
    let crossings = sandbox.freezes(true);
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
            "p50": round(bots::quantile(v, 0.5)),
            "p99": round(bots::quantile(v, 0.99)),
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
    let (crossing, crossing_excess, by_pair) = freeze_report(&crossings);
    doc["crossing_freeze_ms"] = crossing;
    doc["crossing_freeze_excess_ms"] = crossing_excess;
    doc["crossing_freeze_excess_ms_by_pair"] = by_pair;
    doc["own_state"] = args.own_state.to_string().into();
    doc["stage"] = args.stage.as_str().into();
    doc["settings"]["players_per_server"] = players_per_server.into();
    doc["settings"]["merge_after_samples"] = merge_after_samples.into();
    doc["bubbles_max"] = cost.bubbles_max.into();
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
        say(format!("final: {doc}"));
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

/// The game servers holding at least one region, per site, as the core's status shows them
/// every 5 s: the most seen, and the players and servers of the busiest moment.
#[derive(Debug, Default)]
struct Cost {
    max_by_site: BTreeMap<String, u64>,
    peak_players: u64,
    peak_servers: u64,
    /// The most players in no bubble at one sample.
    unsimulated_max: u64,
    /// The most zones at one sample.
    zones_max: u64,
    /// The most bubbles at one sample, on any site.
    bubbles_max: u64,
}

impl Cost {
    fn sample(&mut self, status: &CoreStatus) {
        let mut total = 0;
        for s in &status.sites {
            let n = hosting(s) as u64;
            let max = self.max_by_site.entry(s.site.clone()).or_default();
            *max = (*max).max(n);
            total += n;
        }
        self.peak_players = self.peak_players.max(status.players_total as u64);
        let unsimulated = status.players.iter().filter(|p| p.bubble.is_none()).count();
        self.unsimulated_max = self.unsimulated_max.max(unsimulated as u64);
        self.peak_servers = self.peak_servers.max(total);
        self.zones_max = self.zones_max.max(status.zones.len() as u64);
        self.bubbles_max = self.bubbles_max.max(status.bubbles.len() as u64);
    }
}

/// A site's game servers holding at least one region.
fn hosting(site: &horizon_core::status::SiteStatus) -> usize {
    site.servers.iter().flatten().filter(|x| !x.bubbles.is_empty()).count()
}

fn by_site(
    status: &CoreStatus,
    count: fn(&horizon_core::status::SiteStatus) -> usize,
) -> BTreeMap<String, u64> {
    status.sites.iter().map(|s| (s.site.clone(), count(s) as u64)).collect()
}

fn summary_line(
    t: u64,
    status: &CoreStatus,
    reports: &[Arc<Mutex<BotReport>>],
    seen: &mut [usize],
) -> String {
    let mut window: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (r, seen) in reports.iter().zip(seen.iter_mut()) {
        let Ok(r) = r.lock() else { continue };
        window.entry(r.site.clone()).or_default().extend(&r.click_ms[*seen..]);
        *seen = r.click_ms.len();
    }
    let players = by_site(status, |s| s.players);
    let bubbles = by_site(status, |s| s.bubbles);
    let servers = by_site(status, hosting);
    let fmt = |m: &BTreeMap<String, u64>| {
        m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(" ")
    };
    let clicks = window
        .into_iter()
        .map(|(site, mut v)| {
            v.sort_by(f64::total_cmp);
            let q = |p: f64| bots::quantile(&v, p).map_or("-".into(), |x| format!("{x:.0}"));
            format!("{site} {}/{}", q(0.5), q(0.95))
        })
        .collect::<Vec<_>>()
        .join(" ");
    let in_zones: usize = status.zones.iter().map(|z| z.members).sum();
    format!(
        "t={t:>3}s  players {}  |  bubbles {} + zones {} ({in_zones} players) on servers {}  |  handovers {}  |  click-to-screen p50/p95 ms (last 5 s): {clicks}",
        fmt(&players),
        fmt(&bubbles),
        status.zones.len(),
        fmt(&servers),
        status.handovers.committed,
    )
}

/// The freezes players saw when their bubble moved, as their gateways measured them:
/// `freeze_ms` per "FROM-TO" pair {p50, p99, max, samples}, and the excess beyond the physical
/// floor {p50, p99, max, samples}, over the moves whose floor is known (the player's home is one
/// end, or both ends are one site): over all of them, and per pair.
fn freeze_report(
    samples: &[horizon_agent::FreezeSample],
) -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    let stats = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let r = |x: Option<f64>| x.map(|x| (x * 10.0).round() / 10.0);
        serde_json::json!({
            "p50": r(bots::quantile(&v, 0.5)),
            "p99": r(bots::quantile(&v, 0.99)),
            "max": r(v.last().copied()),
            "samples": v.len(),
        })
    };
    let bots::FreezesByPair { gaps_ms: per, excess_ms: excess_per } =
        bots::freezes_by_pair(samples);
    let by_pair = |m: BTreeMap<String, Vec<f64>>| -> serde_json::Value {
        m.into_iter().map(|(pair, v)| (pair, stats(v))).collect::<serde_json::Map<_, _>>().into()
    };
    let all: Vec<f64> = excess_per.values().flatten().copied().collect();
    (by_pair(per), stats(all), by_pair(excess_per))
}

/// The final document. Inputs: `inputs_applied` is what the game counted on each player's
/// entity (its `inputs` counter in the last update the player saw); `inputs_in_flight` are
/// inputs sent but not yet acknowledged when the players stopped; `inputs_unacked_in_ended_sessions`
/// those of sessions a restarted agent ended (never acknowledged, their player gone with the
/// session); so `inputs_applied + inputs_in_flight + inputs_unacked_in_ended_sessions =
/// inputs_sent` when nothing is lost. Each sums every session of each player.
fn final_document(status: &CoreStatus, finals: &[BotReport]) -> serde_json::Value {
    let sum = |f: fn(&BotReport) -> u64| finals.iter().map(f).sum::<u64>();
    let sent = sum(BotReport::total_sent);
    let acked = sum(BotReport::total_acked);
    let ended = sum(BotReport::unacked_in_ended_sessions);
    serde_json::json!({
        "players": finals.iter().filter(|r| r.joined).count(),
        "bubbles_by_site": by_site(status, |s| s.bubbles),
        "handovers": status.handovers.committed,
        "handovers_failed": status.handovers.failed,
        "inputs_sent": sent,
        "inputs_applied": sum(BotReport::total_applied),
        "inputs_acked": acked,
        "inputs_in_flight": sent - (acked + ended).min(sent),
        "inputs_in_flight_max_per_player": finals.iter().map(|r| r.inputs_sent - r.acked.min(r.inputs_sent)).max().unwrap_or(0),
        "inputs_unacked_in_ended_sessions": ended,
        "sessions_ended": sum(|r| r.sessions_ended),
        "inputs_applied_twice": sum(|r| r.applied_twice),
        "state_chain_checked": sum(|r| r.chain_checked),
        "state_chain_breaks": sum(|r| r.chain_breaks),
        "longest_update_gap_ms": finals.iter().map(|r| r.max_gap_ms).fold(0.0, f64::max),
        "click_to_screen_ms": bots::percentiles(finals, |r| &r.click_ms),
        "click_to_update_ms": bots::percentiles(finals, |r| &r.update_click_ms),
        "own_states_received": sum(|r| r.own_states),
        "input_delivery_ms": bots::percentiles(finals, |r| &r.delivery_ms),
        "errors": finals.iter().filter_map(|r| r.error.as_ref().map(|e| format!("{}: {e}", r.name))).collect::<Vec<_>>(),
        "settings": {"tick_s": 5, "dwell_s": 10, "hold_s": 20, "note": "demo settings shorten dwell and hold (SPEC: 30 s, 180 s)"},
    })
}
