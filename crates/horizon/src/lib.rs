//! `horizon`: the one binary, as a library: `src/main.rs` calls [`main`], and so does the
//! end-to-end tests' copy of the binary (`tests/e2e`). Each subcommand is a thin shell over a
//! library crate.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};

mod chaos;
mod config_reference;
mod daemons;
mod demo;
mod faults;
mod godot;
mod kube_demo;

/// Exit code for bad input files or configuration (EX_USAGE).
pub(crate) const EXIT_BAD_INPUT: u8 = 64;
/// Exit code for a broken invariant: a bug, reproducible from the seed (EX_SOFTWARE).
pub(crate) const EXIT_BUG: u8 = 70;
/// Exit code of a core on etcd that stopped leading (its election lease may have lapsed): its
/// supervisor restarts it, and it stands by (EX_TEMPFAIL).
pub(crate) const EXIT_FENCED: u8 = 75;

#[derive(Debug, Parser)]
#[command(name = "horizon", version, about = "Horizon, the SMD-G orchestrator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How logs (stderr) are written: `plain` text (coloured only on a terminal), or `json`,
    /// one object per line, for a log collector. `RUST_LOG` filters them.
    #[arg(long, global = true, value_enum, default_value_t = daemons::LogFormat::Plain)]
    log_format: daemons::LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole mesh on this machine: core, three agents, game servers, 60 players.
    Demo(demo::DemoArgs),
    /// Run the core daemon (control plane) from a configuration file.
    Core(daemons::ConfigArgs),
    /// Run a site's agent from a configuration file (SIGHUP reloads its certificate and keys).
    Agent(daemons::ConfigArgs),
    /// Run the reference game server (started by an agent's process driver).
    Gameserver(daemons::GameServerArgs),
    /// Run a Godot game server: this process speaks the agent protocol and drives the game of a
    /// Godot project over a loopback link (docs/godot.md). Started by an agent's process driver.
    GodotServer(godot::GodotServerArgs),
    /// Run one of today's game servers (design.md §9: WebSocket JSON, no lease) in the mesh:
    /// this process speaks the agent protocol and drives the server, adding the fencing it
    /// lacks (docs/godot.md). Started by an agent's process driver.
    GodotAdapter(godot::GodotAdapterArgs),
    /// Run PROGRAM so that it gets SIGKILL when this process's parent dies (used by
    /// godot-server to start Godot).
    #[command(hide = true)]
    ExecTied {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Simulations over the real placement brain.
    #[command(subcommand)]
    Sim(Sim),
    /// Certificates for the sites' mutual TLS (a dev CA, so the local mesh needs no manual step).
    #[command(subcommand)]
    Certs(Certs),
    /// Player signing keys (docs/security.md): a key file, its rotation, and player tokens
    /// signed with it, as a studio's auth service signs them.
    #[command(subcommand)]
    Keys(Keys),
    /// A WAN emulator: a UDP proxy adding delay, jitter, loss and partitions, changed at run time
    /// by commands on stdin (`delay 100`, `loss 0.01 forward`, `partition on`, `stats`, `help`).
    Netem(NetemArgs),
    /// Print the configuration reference (docs/configuration.md): every key of the core's and
    /// the agents' files, with its type, default, environment variable and meaning.
    ConfigReference,
    /// Measure the round trip to sites' probe beacons (their agents' `listen.beacon`), as a
    /// game client does before it joins: median and loss per site, and the nearest.
    Probe(ProbeArgs),
}

#[derive(Debug, clap::Args)]
struct ProbeArgs {
    /// A site's beacon, as SITE=HOST:PORT (repeat for every site).
    #[arg(required = true, value_name = "SITE=HOST:PORT")]
    beacons: Vec<String>,
    /// Pings per site.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    samples: u32,
    /// How long a ping waits for its answer, in ms.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    timeout_ms: u64,
    /// At most one ping per site this often, in ms (the beacon answers 20 a second per client).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    every_ms: u64,
    /// Print one JSON document (`{sites: [{site, median_ms, loss, samples_ms}], nearest}`).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Certs {
    /// Create a dev CA, the core's certificate and one certificate per site in DIR (`ca.pem`,
    /// `ca.key`, `horizon-core.pem`, `horizon-core.key`, `<SITE>.pem`, `<SITE>.key`). Refuses to
    /// replace an existing CA without --force.
    Init {
        /// The directory to write them in (created if missing).
        #[arg(long)]
        dir: PathBuf,
        /// Comma-separated site names, e.g. PAR,MTL,HKG.
        #[arg(long, value_delimiter = ',', required = true)]
        sites: Vec<String>,
        /// Replace a CA already in DIR (every certificate it signed stops being trusted).
        #[arg(long)]
        force: bool,
    },
    /// Sign a certificate for one more site with the CA already in DIR.
    Add {
        /// The directory holding the CA (`ca.pem`, `ca.key`), where `<SITE>.pem` and
        /// `<SITE>.key` are written.
        #[arg(long)]
        dir: PathBuf,
        /// The new site's name, e.g. SYD.
        #[arg(long)]
        site: String,
    },
}

#[derive(Debug, Subcommand)]
enum Keys {
    /// Write a new key file with one random key. Refuses to replace a file without --force.
    Init {
        /// The key file to write (one `<key id> <base64url secret>` line per key; the first signs).
        #[arg(long)]
        file: PathBuf,
        /// The key's id (1 to 32 of A-Z a-z 0-9 _ -).
        #[arg(long, default_value = "k1")]
        id: String,
        /// Replace FILE if it exists (tokens signed with its keys stop verifying).
        #[arg(long)]
        force: bool,
    },
    /// Put a new random key at the top of FILE: it signs from now on, the others still verify
    /// (remove an old one once the tokens it signed have expired). Agents reload the file.
    Rotate {
        /// The key file to add the new signing key to.
        #[arg(long)]
        file: PathBuf,
        /// The new key's id.
        #[arg(long)]
        id: String,
    },
    /// Print a player token for ACCOUNT signed with FILE's signing key.
    PlayerToken {
        /// The key file whose first key signs the token.
        #[arg(long)]
        file: PathBuf,
        /// The player's account (1 to 64 of A-Z a-z 0-9 _ - @ :).
        #[arg(long)]
        account: String,
        /// Seconds it stays valid (at most ten years).
        #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=315_360_000))]
        ttl_s: u64,
    },
}

#[derive(Debug, clap::Args)]
struct NetemArgs {
    /// Address clients send to.
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Address packets are forwarded to.
    #[arg(long)]
    upstream: std::net::SocketAddr,
    /// One-way delay each direction, in ms (half the round trip).
    #[arg(long, default_value_t = 0.0)]
    delay_ms: f64,
    /// One-way delay of the back direction (upstream → client), if different.
    #[arg(long)]
    back_delay_ms: Option<f64>,
    /// Extra delay per packet, uniform in 0..=J ms, each direction.
    #[arg(long, default_value_t = 0.0)]
    jitter_ms: f64,
    /// Share of packets dropped each direction, 0–1.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Seed of the loss and jitter draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Debug, Subcommand)]
enum Sim {
    /// Run a scenario file in virtual time and print its timeline (or one JSON document).
    Run {
        /// The scenario (TOML); see docs/scenarios.md.
        file: PathBuf,
        /// Print one JSON document instead of the timeline.
        #[arg(long)]
        json: bool,
        /// Also print every moving-border step.
        #[arg(long)]
        verbose: bool,
        /// Also print why each bubble is where it is whenever that changes: each site's cost
        /// per player, the best site, the gain, dwell and hold (what the core's console shows).
        #[arg(long)]
        explain: bool,
    },
    /// Run a day of players from several continents through SMD-G and the placement policies a
    /// studio would otherwise use (all_core, fixed delegations, creator, one_shot, nearest), on
    /// the same seed; the report reads the rollout stage by stage.
    Population {
        /// The population file (TOML); the bundled one by default. See docs/simulations.md.
        file: Option<PathBuf>,
        /// Average concurrent players (overrides the file).
        #[arg(long)]
        players: Option<u32>,
        /// Seed (overrides the file).
        #[arg(long)]
        seed: Option<u64>,
        /// Simulated hours (overrides the file).
        #[arg(long)]
        hours: Option<f64>,
        /// Print one JSON document instead of the summary.
        #[arg(long)]
        json: bool,
        /// Write report.md, report.json and the SVG plots into this directory.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Stage 1: from real RTT samples (CSV `player,site,rtt_ms`), how many players would gain
    /// how much if simulated on their home site instead of the core site.
    Measure {
        /// The samples (CSV).
        file: PathBuf,
        /// The site everything is simulated at today.
        #[arg(long)]
        core: String,
        /// Server frame time added for click-to-screen, in ms.
        #[arg(long, default_value_t = 35.0)]
        frame_ms: f64,
        /// A player gains with at least this much less latency, in ms.
        #[arg(long, default_value_t = 25.0)]
        gain_ms: f64,
        /// The fairness cap, in ms.
        #[arg(long, default_value_t = 180.0)]
        cap_ms: f64,
        /// Print one JSON document instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The whole mesh under faults in virtual time: the real core, agents and game-server
    /// logic over a simulated network, design.md §6's invariants checked after every step.
    /// Exits 1 on any violation. See docs/chaos.md.
    Chaos(chaos::Args),
}

/// `--stage` of `demo` and `sim chaos`: a rollout stage the core runs.
pub(crate) fn parse_stage(s: &str) -> Result<horizon_core::Stage, String> {
    let known: Vec<&str> = horizon_core::Stage::ALL.iter().map(|s| s.as_str()).collect();
    horizon_core::Stage::parse(s)
        .ok_or_else(|| format!("{s:?} is not a stage ({})", known.join(", ")))
}

/// The command line: parses the arguments, runs the subcommand, and says how it ended.
pub fn main() -> ExitCode {
    // A bad option or value exits 64 (EX_USAGE), as bad configuration does; `--help` and
    // `--version` print to stdout and exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(EXIT_BAD_INPUT) } else { ExitCode::SUCCESS };
        }
    };
    let logs = cli.log_format;
    match cli.command {
        Command::Demo(args) => {
            daemons::init_logs("warn,horizon_core=error,horizon_agent=error", logs);
            demo::demo(args)
        }
        Command::Core(args) => {
            daemons::init_logs("warn,horizon_core=info", logs);
            daemons::core(args)
        }
        Command::Agent(args) => {
            daemons::init_logs("warn,horizon_agent=info", logs);
            daemons::agent(args)
        }
        Command::Gameserver(args) => {
            daemons::init_logs("warn", logs);
            daemons::gameserver(args)
        }
        Command::GodotServer(args) => {
            daemons::init_logs("warn", logs);
            godot::godot_server(args)
        }
        Command::GodotAdapter(args) => {
            daemons::init_logs("warn", logs);
            godot::godot_adapter(args)
        }
        Command::ExecTied { command } => godot::exec_tied(command),
        Command::Sim(Sim::Run { file, json, verbose, explain }) => {
            sim_run(&file, json, verbose, horizon_sim::RunOptions { explain })
        }
        Command::Sim(Sim::Population { file, players, seed, hours, json, out }) => {
            sim_population(file.as_deref(), (players, seed, hours), json, out.as_deref())
        }
        Command::Sim(Sim::Chaos(args)) => chaos::chaos(args, logs),
        Command::Sim(Sim::Measure { file, core, frame_ms, gain_ms, cap_ms, json }) => {
            let opts = horizon_sim::measure::MeasureOptions { core, frame_ms, gain_ms, cap_ms };
            sim_measure(&file, &opts, json)
        }
        Command::Certs(certs) => certs_command(certs),
        Command::Keys(keys) => keys_command(keys),
        Command::Netem(args) => netem_command(args),
        Command::Probe(args) => probe_command(args),
        Command::ConfigReference => {
            print!("{}", config_reference::page());
            ExitCode::SUCCESS
        }
    }
}

fn site_names(sites: &[String]) -> Result<Vec<String>, String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for site in sites {
        let name = horizon_mesh::SiteName::new(site.trim()).map_err(|e| e.to_string())?;
        if !seen.insert(name.clone()) {
            return Err(format!("site {name} is listed twice"));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

fn certs_command(certs: Certs) -> ExitCode {
    let result = match certs {
        Certs::Init { dir, sites, force } => site_names(&sites).and_then(|sites| {
            let sites: Vec<&str> = sites.iter().map(String::as_str).collect();
            horizon_transport::tls::DevCa::new(dir).create(&sites, force).map_err(|e| e.to_string())
        }),
        Certs::Add { dir, site } => site_names(&[site]).and_then(|sites| {
            horizon_transport::tls::DevCa::new(dir).add_site(&sites[0]).map_err(|e| e.to_string())
        }),
    };
    match result {
        Ok(written) => {
            for path in written {
                println!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

fn keys_command(keys: Keys) -> ExitCode {
    use horizon_transport::Keyring;
    use horizon_transport::credential::Kind;
    let write_new = |file: &PathBuf, text: &str| {
        // The file holds secrets: readable by its owner only.
        horizon_transport::reload::replace_file(file, text, 0o600)
            .map_err(|e| format!("{}: {e}", file.display()))
    };
    let result = match keys {
        Keys::Init { file, id, force } => {
            if file.exists() && !force {
                Err(format!(
                    "{} exists (--force replaces it: tokens it signed stop working)",
                    file.display()
                ))
            } else {
                let text = Keyring::generate_file(&id);
                Keyring::parse(&text)
                    .and_then(|_| write_new(&file, &text))
                    .map(|()| format!("wrote {} (key {id})", file.display()))
            }
        }
        Keys::Rotate { file, id } => std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: {e}", file.display()))
            .and_then(|old| {
                Keyring::parse(&old).map_err(|e| format!("{}: {e}", file.display()))?;
                let new = Keyring::generate_file(&id);
                let key = new.lines().find(|l| !l.starts_with('#')).unwrap_or_default();
                let mut lines: Vec<&str> = old.lines().collect();
                let at = lines
                    .iter()
                    .position(|l| !l.trim().is_empty() && !l.trim().starts_with('#'))
                    .unwrap_or(lines.len());
                lines.insert(at, key);
                let text = lines.join("\n") + "\n";
                Keyring::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
                write_new(&file, &text)?;
                Ok(format!(
                    "{}: key {id} signs from now on; the others still verify",
                    file.display()
                ))
            }),
        Keys::PlayerToken { file, account, ttl_s } => {
            Keyring::load(&file).map_err(|e| e.to_string()).and_then(|keys| {
                let until = std::time::SystemTime::now() + std::time::Duration::from_secs(ttl_s);
                keys.mint(Kind::Player, &account, until)
                    .map_err(|e| format!("--account {account:?}: {e}"))
            })
        }
    };
    match result {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// `horizon probe`: exit 0 when some site answered, 1 when none did, 64 for a bad argument.
fn probe_command(args: ProbeArgs) -> ExitCode {
    use horizon_sdk::probe::{ProbeOptions, lowest, measure};
    let mut beacons: Vec<(String, std::net::SocketAddr)> = Vec::new();
    for b in &args.beacons {
        let parsed = b.split_once('=').and_then(|(site, addr)| {
            use std::net::ToSocketAddrs;
            let addr = addr.to_socket_addrs().ok()?.next()?;
            Some((site.trim().to_owned(), addr))
        });
        match parsed {
            Some((site, addr)) if !site.is_empty() => beacons.push((site, addr)),
            _ => {
                eprintln!("error: {b:?}: expected SITE=HOST:PORT, a host that resolves");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    let opts = ProbeOptions {
        samples: args.samples,
        timeout: std::time::Duration::from_millis(args.timeout_ms),
        every: std::time::Duration::from_millis(args.every_ms),
    };
    let runtime = match daemons::runtime(false) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let measured = runtime.block_on(measure(&beacons, opts));
    let nearest = lowest(&measured).map(|m| m.site.clone());
    if args.json {
        let doc = serde_json::json!({ "sites": measured, "nearest": nearest });
        println!("{doc}");
    } else {
        for m in &measured {
            let median = m.median_ms.map_or("-".to_owned(), |ms| format!("{ms:.1} ms"));
            println!("{:<8} median {median:>10}  loss {:>3.0} %", m.site, m.loss * 100.0);
        }
        match &nearest {
            Some(site) => println!("nearest: {site}"),
            None => println!("nearest: none answered at least half its pings"),
        }
    }
    if nearest.is_some() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn netem_command(args: NetemArgs) -> ExitCode {
    use horizon_transport::netem::{Netem, NetemConfig, Shape, command, describe};
    let shape = |delay_ms: f64| -> Result<Shape, String> {
        let ms = |what: &str, v: f64| {
            if (0.0..=60_000.0).contains(&v) {
                Ok(std::time::Duration::from_secs_f64(v / 1000.0))
            } else {
                Err(format!("--{what} {v} is outside 0..=60000"))
            }
        };
        if !(0.0..=1.0).contains(&args.loss) {
            return Err(format!("--loss {} is outside 0..=1", args.loss));
        }
        Ok(Shape {
            delay: ms("delay-ms", delay_ms)?,
            jitter: ms("jitter-ms", args.jitter_ms)?,
            loss: args.loss,
        })
    };
    let shapes = shape(args.delay_ms)
        .and_then(|f| Ok((f, shape(args.back_delay_ms.unwrap_or(args.delay_ms))?)));
    let (forward, back) = match shapes {
        Ok(pair) => pair,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let runtime = match daemons::runtime(false) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let mut config = NetemConfig::new(args.listen, args.upstream, std::time::Duration::ZERO);
        (config.forward, config.back, config.seed) = (forward, back, args.seed);
        let netem = match Netem::start(config).await {
            Ok(netem) => netem,
            Err(e) => {
                eprintln!("error: cannot listen on {}: {e}", args.listen);
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        };
        println!("netem {} -> {}: {}", netem.local_addr(), args.upstream, describe(netem.handle()));
        let mut lines =
            tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(tokio::io::stdin()));
        let mut stdin_open = true;
        loop {
            tokio::select! {
                line = lines.next_line(), if stdin_open => match line {
                    Ok(Some(line)) => match command(netem.handle(), &line) {
                        Ok(text) => println!("{text}"),
                        Err(e) => println!("error: {e}"),
                    },
                    // stdin closed (e.g. run in the background): keep forwarding until Ctrl-C.
                    Ok(None) | Err(_) => stdin_open = false,
                },
                _ = daemons::stop_signal() => {
                    println!("{}", describe(netem.handle()));
                    return ExitCode::SUCCESS;
                }
            }
        }
    })
}

fn sim_run(
    file: &std::path::Path,
    json: bool,
    verbose: bool,
    options: horizon_sim::RunOptions,
) -> ExitCode {
    let scenario = match horizon_sim::Scenario::load(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let started = Instant::now();
    let report = match horizon_sim::run_with(&scenario, options) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BUG);
        }
    };
    let wall = started.elapsed();
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::from(EXIT_BUG);
            }
        }
    } else {
        print!("{}", horizon_sim::render_text(&report, verbose));
        println!(
            "\n{} ticks in {:.1} ms of wall time ({:.0}× real time)",
            report.stats.ticks,
            wall.as_secs_f64() * 1000.0,
            report.duration_s / wall.as_secs_f64().max(1e-9)
        );
    }
    ExitCode::SUCCESS
}

fn print_json(value: &impl serde::Serialize) -> ExitCode {
    match serde_json::to_string_pretty(value) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: cannot encode the report: {e}");
            ExitCode::from(EXIT_BUG)
        }
    }
}

fn sim_population(
    file: Option<&std::path::Path>,
    (players, seed, hours): (Option<u32>, Option<u64>, Option<f64>),
    json: bool,
    out: Option<&std::path::Path>,
) -> ExitCode {
    use horizon_sim::population::{PopulationConfig, run_population};
    let (cfg, source) = match file {
        Some(f) => match PopulationConfig::load(f) {
            Ok(c) => (c, f.display().to_string()),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        },
        None => (PopulationConfig::default_population(), "the bundled population".to_owned()),
    };
    let cfg = match cfg.with_overrides(players, seed, hours) {
        Ok(c) => c,
        Err(problems) => {
            for p in problems {
                eprintln!("error: {}: {}", p.key, p.why);
            }
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    eprintln!(
        "{source}: seed {}, {} players, {} h, {} policies",
        cfg.seed,
        cfg.players,
        cfg.hours,
        horizon_sim::population::Policy::ALL.len()
    );
    let report = match run_population(&cfg, |p| {
        eprintln!(
            "  {:>5.1} / {} h simulated, {} online, {:.0} s wall ({:.0} sim-s per wall-s)",
            p.sim_s / 3600.0,
            p.total_s / 3600.0,
            p.online,
            p.wall_s,
            p.sim_s / p.wall_s.max(1e-9)
        );
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BUG);
        }
    };
    if let Some(dir) = out {
        let files = [
            ("report.md", report.markdown()),
            ("latency.svg", report.latency_svg()),
            ("bubbles.svg", report.bubbles_svg()),
            ("online.svg", report.online_svg()),
            ("report.json", serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"),
        ];
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("error: cannot create {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
        for (name, body) in files {
            let path = dir.join(name);
            if let Err(e) = std::fs::write(&path, body) {
                eprintln!("error: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            eprintln!("wrote {}", path.display());
        }
    }
    if json {
        return print_json(&report);
    }
    print_population_summary(&report);
    ExitCode::SUCCESS
}

fn print_population_summary(r: &horizon_sim::PopulationReport) {
    let sites: Vec<&String> = r.series.online_by_home.keys().collect();
    println!(
        "{}: seed {}, {} players, {} h, {:.0} sim-s per wall-s",
        r.name, r.seed, r.players, r.hours, r.sim_seconds_per_wall_second
    );
    print!("\n{:<10}", "policy");
    for s in &sites {
        print!(" {:>16}", format!("{s} p50/p95"));
    }
    println!(" {:>9} {:>10} {:>9}", "over cap", "handovers", "reversed");
    for name in horizon_sim::population::Policy::names() {
        let Some(p) = r.policies.get(name) else { continue };
        print!("{name:<10}");
        for s in &sites {
            let cell = p
                .click_to_screen_ms
                .get(*s)
                .map_or("-".to_owned(), |x| format!("{:.0} / {:.0}", x.p50, x.p95));
            print!(" {cell:>16}");
        }
        println!(
            " {:>8.2}% {:>10} {:>8.1}%",
            100.0 * p.over_cap_share,
            p.handovers,
            100.0 * p.reversed_within_10min_share
        );
    }
    println!("\nclick-to-screen in ms per home site; --out DIR writes the full report with plots");
}

fn sim_measure(
    file: &std::path::Path,
    opts: &horizon_sim::measure::MeasureOptions,
    json: bool,
) -> ExitCode {
    for (name, v) in
        [("--frame-ms", opts.frame_ms), ("--gain-ms", opts.gain_ms), ("--cap-ms", opts.cap_ms)]
    {
        if !(v.is_finite() && v >= 0.0) {
            eprintln!("error: {name} must be a number of milliseconds >= 0, got {v}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    let report = match horizon_sim::measure::measure_file(file, opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if json {
        return print_json(&report);
    }
    print!("{}", report.text());
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every subcommand and every option an operator can type says what it does in `--help`.
    #[test]
    fn every_command_and_option_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_about().is_none() && cmd.get_long_about().is_none() {
                missing.push(format!("{path}: the command"));
            }
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path}: {id}"));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }
}
