//! `horizon godot-server`: a game server whose game is a Godot project's GDScript. This
//! process is the horizon-sdk sidecar (the agent protocol, leases, inputs once and in order,
//! state transfer); it starts Godot on the project and drives the game over a loopback link
//! (crates/horizon-godot, docs/godot.md). The agent starts it like `horizon gameserver`, with
//! the same flags, when the site's `servers.args` say so.

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
    let me = match std::env::current_exe() {
        Ok(me) => me,
        Err(e) => {
            eprintln!("error: cannot find this program to start Godot through: {e}");
            return ExitCode::FAILURE;
        }
    };
    let godot = horizon_godot::GodotOptions {
        // Godot gets SIGKILL when this process dies, however it dies.
        command: vec![me.into(), "exec-tied".into(), "--".into(), args.godot.into()],
        project: args.project,
        server_name: opts.name.clone(),
        site: opts.agent_site.clone(),
        tick_ms: opts.tick_ms,
        connect_within: Duration::from_millis(args.connect_within_ms),
        reply_within: Duration::from_millis(args.reply_within_ms),
    };
    let broken = horizon_godot::Broken::new(|e| {
        eprintln!("error: {e}: this game server ends (Godot killed)");
        std::process::exit(i32::from(EXIT_GAME_BROKEN));
    });
    let (game, hosted) = match horizon_godot::host::start(&godot, broken) {
        Ok(started) => started,
        Err(e @ horizon_godot::HostError::NoProject(_)) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_NO_GODOT);
        }
    };
    tracing::info!(server = %opts.name, engine = %hosted.engine, pid = hosted.pid(), "Godot linked");
    let code = daemons::serve(opts, roots, game);
    hosted.stop(Duration::from_secs(2));
    code
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
