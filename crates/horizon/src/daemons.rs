//! `horizon core`, `horizon agent` and `horizon gameserver`: thin shells over the libraries.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::{EXIT_BAD_INPUT, EXIT_FENCED};

#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArgs {
    /// The configuration file (TOML); see docs/running.md.
    #[arg(long)]
    config: PathBuf,
    /// Check the configuration and the files it names (the CA, the certificate for this
    /// daemon with its key, an agent's player keys and pod template) and exit: 0 if good, 64
    /// with every problem printed otherwise. Nothing is written or bound.
    #[arg(long)]
    check: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct GameServerArgs {
    /// The agent's game-server endpoint: host:port (a name is resolved at each connection).
    #[arg(long, env = "HORIZON_AGENT", value_parser = parse_target)]
    agent: horizon_transport::Target,
    /// The agent's site (its certificate names it).
    #[arg(long, env = "HORIZON_SITE")]
    site: String,
    /// This server's name, unique within the site.
    #[arg(long, env = "HORIZON_SERVER_NAME")]
    name: String,
    /// The CA certificate that signed the agent's certificate.
    #[arg(long)]
    ca: PathBuf,
    /// Simulation tick, in ms.
    #[arg(long, env = "HORIZON_TICK_MS", default_value_t = 33)]
    tick_ms: u32,
    /// Players this server accepts.
    #[arg(long, default_value_t = 200)]
    max_players: u32,
    /// Exit when the agent has been unreachable this many seconds (0: never): a game server
    /// never outlives its agent unsupervised.
    #[arg(long, default_value_t = 60)]
    orphan_exit_s: u64,
    /// Told to stop (SIGTERM, SIGINT) while holding regions: ask the agent to move them to
    /// other servers of the site with their state, and run until they are gone, for at most
    /// this many seconds (keep it under the pod's terminationGracePeriodSeconds); what is left
    /// then fails over from its copy. 0: stop at once.
    #[arg(long, env = "HORIZON_DRAIN_GRACE_S", default_value_t = 20)]
    drain_grace_s: u64,
    /// Exit (SIGTERM) when the process that started this one dies, however it dies: the
    /// process driver's game servers never outlive their agent.
    #[arg(long)]
    exit_with_parent: bool,
    /// When a player sees their own input's effect: `early`, their own state sent the moment
    /// the input is applied, ahead of the tick's update (for a game that computes it: the
    /// reference games do); `batched`, with everyone's in the tick's update only.
    #[arg(long, env = "HORIZON_OWN_STATE", default_value_t = horizon_sdk::OwnState::Early)]
    own_state: horizon_sdk::OwnState,
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM (what a supervisor or the kubelet sends); returns
/// which, for the log. Each daemon then stops gracefully and exits 0.
pub(crate) async fn stop_signal() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("warning: SIGTERM not handled: {e}");
            let _ = tokio::signal::ctrl_c().await;
            return "Ctrl-C";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        _ = term.recv() => "SIGTERM",
    }
}

/// [`stop_signal`], or SIGHUP, for `horizon demo`: its core and agents run in this process and
/// take SIGHUP as "reload your credentials", so without this a demo would outlive the terminal
/// that started it.
pub(crate) async fn stop_or_hangup() -> &'static str {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        return stop_signal().await;
    };
    tokio::select! {
        signal = stop_signal() => signal,
        _ = hup.recv() => "SIGHUP",
    }
}

fn parse_target(s: &str) -> Result<horizon_transport::Target, String> {
    horizon_transport::Target::parse(s).map_err(|e| e.to_string())
}

/// A runtime for a daemon (`multi`: all cores) or a small tool (one thread).
pub(crate) fn runtime(multi: bool) -> Result<tokio::runtime::Runtime, ExitCode> {
    let mut builder = if multi {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build().map_err(|e| {
        eprintln!("error: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

/// Loads a daemon's configuration (every problem printed, exit 64) and its runtime.
fn prepare<C>(
    load: impl FnOnce() -> Result<C, Vec<String>>,
) -> Result<(C, tokio::runtime::Runtime), ExitCode> {
    let cfg = load().map_err(bad_config)?;
    Ok((cfg, runtime(true)?))
}

/// `--check`: the verdict on a configuration, then (when it loads) on its files.
fn checked<C>(
    loaded: Result<C, Vec<String>>,
    path: &std::path::Path,
    files: impl FnOnce(&C) -> Result<(), Vec<String>>,
) -> ExitCode {
    match loaded.and_then(|cfg| files(&cfg)) {
        Ok(()) => {
            println!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Err(errors) => bad_config(errors),
    }
}

/// The files a configuration names, each opened on its own: every one that cannot be read,
/// under its key. Then, if all can, `parse` reads them (certificates, keys).
fn read_files(
    files: &[(&str, &std::path::Path)],
    parse: impl FnOnce() -> Result<(), String>,
) -> Result<(), Vec<String>> {
    let unreadable: Vec<String> = files
        .iter()
        .filter_map(|(key, path)| {
            std::fs::File::open(path).err().map(|e| format!("{key} = {}: {e}", path.display()))
        })
        .collect();
    if !unreadable.is_empty() {
        return Err(unreadable);
    }
    parse().map_err(|e| vec![e])
}

fn core_files(cfg: &horizon_core::CoreConfig) -> Result<(), Vec<String>> {
    let mut files =
        vec![("tls.ca", cfg.ca.as_path()), ("tls.cert", &cfg.cert), ("tls.key", &cfg.key)];
    // TLS to etcd: its files are read when the core campaigns; missing ones are bad
    // configuration now.
    if let horizon_core::StoreKind::Etcd(etcd) = &cfg.store_kind
        && let Some(tls) = &etcd.tls
    {
        files.push(("store.tls_ca", &tls.ca));
        if let Some((cert, key)) = &tls.identity {
            files.extend([("store.tls_cert", cert.as_path()), ("store.tls_key", key.as_path())]);
        }
    }
    read_files(&files, || {
        horizon_core::load_tls(&cfg.ca, &cfg.cert, &cfg.key).map(drop).map_err(|e| e.to_string())
    })
}

fn agent_files(cfg: &horizon_agent::AgentConfig) -> Result<(), Vec<String>> {
    let files = [
        ("tls.ca", cfg.ca.as_path()),
        ("tls.cert", &cfg.cert),
        ("tls.key", &cfg.key),
        ("tls.player_keys", &cfg.player_keys),
    ];
    read_files(&files, || horizon_agent::load_files(cfg).map(drop).map_err(|e| e.to_string()))
}

fn bad_config(errors: Vec<String>) -> ExitCode {
    for e in errors {
        eprintln!("error: {e}");
    }
    ExitCode::from(EXIT_BAD_INPUT)
}

pub(crate) fn core(args: ConfigArgs) -> ExitCode {
    if args.check {
        return checked(horizon_core::CoreConfig::load(&args.config), &args.config, core_files);
    }
    // Bad files are bad configuration too (exit 64), found before anything starts.
    let load = || {
        let cfg = horizon_core::CoreConfig::load(&args.config)?;
        core_files(&cfg)?;
        Ok(cfg)
    };
    let (cfg, rt) = match prepare(load) {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let start = horizon_core::start(cfg);
        // A standby waits in `start` until it leads: a signal meanwhile ends it cleanly.
        let mut core = tokio::select! {
            started = start => match started {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            },
            signal = stop_signal() => {
                println!("{signal}: core stopping (it was standing by)");
                return ExitCode::SUCCESS;
            }
        };
        println!(
            "core serving: control {} · admin http://{} · generation {}",
            core.control_addr, core.admin_addr, core.generation
        );
        tokio::select! {
            signal = stop_signal() => {
                println!("{signal}: core stopping (store flushed, agents told)");
                core.shutdown().await;
                ExitCode::SUCCESS
            }
            why = core.fenced() => {
                eprintln!("error: {why}; exiting so that this core is restarted as a standby");
                ExitCode::from(EXIT_FENCED)
            }
        }
    })
}

/// An agent's configuration with its driver's: the Kubernetes driver's pod template read and
/// checked too.
fn load_agent(
    path: &std::path::Path,
) -> Result<(horizon_agent::AgentConfig, Option<horizon_kube::KubeOptions>), Vec<String>> {
    let cfg = horizon_agent::AgentConfig::load(path)?;
    let kube = horizon_kube::KubeOptions::from_config(&cfg, |k| std::env::var(k).ok()).map_err(
        |errors| errors.into_iter().map(|e| format!("{}: {e}", path.display())).collect::<Vec<_>>(),
    )?;
    Ok((cfg, kube))
}

pub(crate) fn agent(args: ConfigArgs) -> ExitCode {
    if args.check {
        return checked(load_agent(&args.config), &args.config, |(cfg, _)| agent_files(cfg));
    }
    let load = || {
        let loaded = load_agent(&args.config)?;
        agent_files(&loaded.0)?;
        Ok(loaded)
    };
    let ((cfg, kube), rt) = match prepare(load) {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let driver: Box<dyn horizon_agent::ServerDriver> = match kube {
            Some(opts) => match horizon_kube::KubernetesDriver::connect(opts).await {
                Ok(d) => Box::new(d),
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            },
            None => Box::new(horizon_agent::ProcessDriver::new(horizon_agent::ProcessOptions {
                program: cfg.server_program.clone(),
                args: cfg.server_args.clone(),
                site: cfg.site.clone(),
                ca: cfg.ca.clone(),
                tick_ms: cfg.server_tick_ms,
                max_servers: cfg.max_servers,
            })),
        };
        let agent = match horizon_agent::start(cfg, driver).await {
            Ok(a) => a,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!(
            "agent {} serving: servers {} · players {} · transfer {}",
            agent.site, agent.servers_addr, agent.players_addr, agent.transfer_addr
        );
        let signal = stop_signal().await;
        println!("{signal}: agent stopping (game servers get SIGTERM, then SIGKILL after 5 s)");
        agent.shutdown().await;
        ExitCode::SUCCESS
    })
}

pub(crate) fn gameserver(args: GameServerArgs) -> ExitCode {
    let build = format!("horizon-reference {}", env!("CARGO_PKG_VERSION"));
    let (opts, roots) = match prepare_server(args, build) {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    let game = horizon_sdk::reference::Reference { tick_ms: opts.tick_ms };
    serve(opts, roots, game)
}

/// Checks a game server's arguments and environment (the token, the tick, the CA) and ties
/// it to its parent when asked.
pub(crate) fn prepare_server(
    args: GameServerArgs,
    build: String,
) -> Result<(horizon_sdk::ServerOptions, horizon_transport::tls::Roots), ExitCode> {
    let token = match std::env::var(horizon_agent::SERVER_TOKEN_ENV) {
        Ok(t) if !t.is_empty() => t,
        _ => {
            eprintln!(
                "error: environment variable {} must hold the agent's server token",
                horizon_agent::SERVER_TOKEN_ENV
            );
            return Err(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    if !(5..=1000).contains(&args.tick_ms) {
        eprintln!("error: --tick-ms {} is outside 5..=1000", args.tick_ms);
        return Err(ExitCode::from(EXIT_BAD_INPUT));
    }
    let roots = match horizon_transport::tls::Roots::load(&args.ca) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Err(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    if args.exit_with_parent {
        tie_to_parent(rustix::process::Signal::TERM).map_err(|e| {
            eprintln!("error: --exit-with-parent: {e}");
            ExitCode::FAILURE
        })?;
    }
    let opts = horizon_sdk::ServerOptions {
        name: args.name,
        build,
        agent: args.agent,
        agent_site: args.site,
        token,
        tick_ms: args.tick_ms,
        max_players: args.max_players,
        orphan_after: (args.orphan_exit_s > 0)
            .then(|| std::time::Duration::from_secs(args.orphan_exit_s)),
        own_state: args.own_state,
        drain_grace: std::time::Duration::from_secs(args.drain_grace_s),
    };
    Ok((opts, roots))
}

/// `signal` is sent to this process when the one that started it dies, however it dies.
pub(crate) fn tie_to_parent(signal: rustix::process::Signal) -> Result<(), String> {
    rustix::process::set_parent_process_death_signal(Some(signal)).map_err(|e| e.to_string())?;
    // The parent may have died before the signal was asked for: then this is an orphan.
    if rustix::process::getppid().is_none_or(|p| p.as_raw_nonzero().get() == 1) {
        return Err("the parent is already gone".to_owned());
    }
    Ok(())
}

/// Runs a game server until SIGTERM or SIGINT (exit 0, once its regions moved to other servers
/// of the site or `--drain-grace-s` passed), or until its agent stayed unreachable too long
/// (exit 1).
pub(crate) fn serve<G: horizon_sdk::Game>(
    opts: horizon_sdk::ServerOptions,
    roots: horizon_transport::tls::Roots,
    game: G,
) -> ExitCode {
    let rt = match runtime(false) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            stop_signal().await;
            let _ = stop.send(true);
        });
        let counters = std::sync::Arc::new(horizon_sdk::Counters::default());
        match horizon_sdk::run(opts, roots, game, counters, stop_rx).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings, and info for Horizon's daemons),
/// coloured only on a terminal.
pub(crate) fn init_logs(default: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        // Colours only on a terminal: a file, a pipe or a log collector gets plain text.
        LogFormat::Plain => {
            logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init()
        }
        LogFormat::Json => logs.json().with_current_span(false).try_init(),
    };
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Plain,
    Json,
}
