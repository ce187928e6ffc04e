//! `horizon godot-server`: a game server whose game is a Godot project's GDScript. This
//! process is the horizon-sdk sidecar (the agent protocol, leases, inputs once and in order,
//! state transfer); it starts Godot on the project and drives the game over a loopback link
//! (crates/horizon-godot, docs/godot.md). The agent starts it like `horizon gameserver`, with
//! the same flags, when the site's `servers.args` say so.
//!
//! `horizon godot-adapter`: the same for one of today's servers (design.md §9), which speak
//! WebSocket JSON and know no lease: the adapter starts (or dials) it and adds the fencing.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::EXIT_BAD_INPUT;
use crate::daemons::{self, GameServerArgs};

/// Exit code when Godot cannot be started or never dialled the link (EX_UNAVAILABLE).
const EXIT_NO_GODOT: u8 = 69;
/// Exit code when the game broke: Godot exited, hung, or its script broke the API (EX_SOFTWARE).
const EXIT_GAME_BROKEN: u8 = 70;

#[derive(Debug, clap::Args)]
pub(crate) struct GodotServerArgs {
    /// The Godot project: its main scene calls `Horizon.serve(game)` (godot/reference is the
    /// reference game).
    #[arg(long, env = "HORIZON_GODOT_PROJECT")]
    project: PathBuf,
    /// The headless Godot binary.
    #[arg(long, env = "HORIZON_GODOT", default_value = "godot3-server")]
    godot: PathBuf,
    /// Godot must dial the link within this many ms of its start.
    #[arg(long, default_value_t = 20_000)]
    connect_within_ms: u64,
    /// Every call of the game must be answered within this many ms, or the game counts as hung.
    #[arg(long, default_value_t = 5_000)]
    reply_within_ms: u64,
    #[command(flatten)]
    server: GameServerArgs,
}

pub(crate) fn godot_server(args: GodotServerArgs) -> ExitCode {
    let build = format!("horizon-godot {} ({})", env!("CARGO_PKG_VERSION"), args.project.display());
    let (opts, roots) = match daemons::prepare_server(args.server, build) {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    let command = match tied(args.godot) {
        Ok(command) => command,
        Err(code) => return code,
    };
    let godot = horizon_godot::GodotOptions {
        command,
        project: args.project,
        server_name: opts.name.clone(),
        site: opts.agent_site.clone(),
        tick_ms: opts.tick_ms,
        connect_within: Duration::from_millis(args.connect_within_ms),
        reply_within: Duration::from_millis(args.reply_within_ms),
    };
    let (game, hosted) = match horizon_godot::host::start(&godot, exit_when_broken()) {
        Ok(started) => started,
        Err(e) => return start_failed(e),
    };
    tracing::info!(server = %opts.name, engine = %hosted.engine, pid = hosted.pid(), "Godot linked");
    let code = daemons::serve(opts, roots, game);
    hosted.stop(Duration::from_secs(2));
    code
}

#[derive(Debug, clap::Args)]
pub(crate) struct GodotAdapterArgs {
    /// Today's server's Godot project, started with `-- --port=N` on a free loopback port.
    #[arg(long, env = "HORIZON_TODAY_PROJECT", required_unless_present = "dial")]
    project: Option<PathBuf>,
    /// Or a server already running, dialled instead: `ws://127.0.0.1:8980` (the adapter as a
    /// sidecar container next to it).
    #[arg(long, conflicts_with = "project")]
    dial: Option<String>,
    /// The headless Godot binary (with --project).
    #[arg(long, env = "HORIZON_GODOT", default_value = "godot3-server")]
    godot: PathBuf,
    /// The server must take the WebSocket connection within this many ms.
    #[arg(long, default_value_t = 20_000)]
    connect_within_ms: u64,
    /// After `server/prewarm`, it must be ready within this many ms.
    #[arg(long, default_value_t = 60_000)]
    ready_within_ms: u64,
    /// Ready: at least this many ticks per second in its `serverinfo`, and no chunk loading.
    #[arg(long, default_value_t = 58.0)]
    ready_tps: f32,
    /// Once ready, the server must say something (it reports every second) at least every this
    /// many ms, or it counts as hung.
    #[arg(long, default_value_t = 5_000)]
    silent_within_ms: u64,
    #[command(flatten)]
    server: GameServerArgs,
}

pub(crate) fn godot_adapter(args: GodotAdapterArgs) -> ExitCode {
    use horizon_godot::today::{self, TodayOptions, TodayServer};
    let server = match (args.project, args.dial) {
        (Some(project), _) => match tied(args.godot) {
            Ok(command) => TodayServer::Start { command, project },
            Err(code) => return code,
        },
        (None, Some(url)) => TodayServer::Dial(url),
        (None, None) => unreachable!("clap requires --project or --dial"),
    };
    let what = match &server {
        TodayServer::Start { project, .. } => project.display().to_string(),
        TodayServer::Dial(url) => url.clone(),
    };
    let build = format!("horizon-godot-adapter {} ({what})", env!("CARGO_PKG_VERSION"));
    let (opts, roots) = match daemons::prepare_server(args.server, build) {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    let today = TodayOptions {
        server,
        connect_within: Duration::from_millis(args.connect_within_ms),
        ready_within: Duration::from_millis(args.ready_within_ms),
        ready_tps: args.ready_tps,
        silent_within: Duration::from_millis(args.silent_within_ms),
    };
    let (game, hosted) = match today::host::start(&today, exit_when_broken()) {
        Ok(started) => started,
        Err(e) => return start_failed(e),
    };
    tracing::info!(server = %opts.name, url = %hosted.url, ready = ?hosted.ready, "today's server linked");
    let code = daemons::serve(opts, roots, game);
    hosted.stop(Duration::from_secs(2));
    code
}

/// When the game breaks (the engine exited, hung, broke the API, or the link ended): say why
/// and exit [`EXIT_GAME_BROKEN`]; the engine was killed first.
fn exit_when_broken() -> horizon_godot::Broken {
    horizon_godot::Broken::new(|e| {
        eprintln!("error: {e}: this game server ends");
        std::process::exit(i32::from(EXIT_GAME_BROKEN));
    })
}

/// Why the engine could not be started or linked, and the exit code that says it.
fn start_failed(e: horizon_godot::HostError) -> ExitCode {
    eprintln!("error: {e}");
    match e {
        horizon_godot::HostError::NoProject(_) => ExitCode::from(EXIT_BAD_INPUT),
        _ => ExitCode::from(EXIT_NO_GODOT),
    }
}

/// The command starting `godot` through `horizon exec-tied`: Godot gets SIGKILL when this
/// process dies, however it dies.
fn tied(godot: PathBuf) -> Result<Vec<std::ffi::OsString>, ExitCode> {
    match std::env::current_exe() {
        Ok(me) => Ok(vec![me.into(), "exec-tied".into(), "--".into(), godot.into()]),
        Err(e) => {
            eprintln!("error: cannot find this program to start Godot through: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// `horizon exec-tied PROGRAM [ARGS]`: becomes PROGRAM, which gets SIGKILL when the process
/// that started this one dies (how `godot-server` ties Godot to itself without unsafe code).
pub(crate) fn exec_tied(command: Vec<std::ffi::OsString>) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let Some((program, args)) = command.split_first() else {
        eprintln!("error: exec-tied needs a program");
        return ExitCode::from(EXIT_BAD_INPUT);
    };
    if let Err(e) = daemons::tie_to_parent(rustix::process::Signal::KILL) {
        eprintln!("error: exec-tied: {e}");
        return ExitCode::FAILURE;
    }
    let e = std::process::Command::new(program).args(args).exec();
    eprintln!("error: cannot run {}: {e}", program.to_string_lossy());
    ExitCode::from(127)
}
