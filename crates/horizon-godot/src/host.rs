//! Starting the Godot process and watching it: the sidecar listens on a loopback port, starts
//! Godot on the project with `-- --horizon-link=PORT` (and the link key in its environment),
//! and accepts its connection. The addon answers the sidecar's hello with the key, so no other
//! local process can take the link. Then a watchdog thread checks every second that Godot is
//! still running and, when the link was idle for a second, that it still answers (a script
//! stuck in a loop, or a parse error that left Godot running with no script: Godot itself never
//! exits on a script error).

use std::ffi::OsString;
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::game::{Broken, GodotGame};
use crate::link::{Frame, Link, LinkError, Op, PROTOCOL, Status};

/// The environment variable holding the link key.
pub const LINK_KEY_ENV: &str = "HORIZON_LINK_KEY";

/// How to start the Godot process.
#[derive(Clone, Debug)]
pub struct GodotOptions {
    /// The program and its first arguments: `["godot3-server"]`, or a wrapper before it.
    pub command: Vec<OsString>,
    /// The Godot project (its `project.godot` names the main scene, which calls
    /// `Horizon.serve`).
    pub project: PathBuf,
    pub server_name: String,
    pub site: String,
    pub tick_ms: u32,
    /// Godot must dial the link within this (its start, the project's load, `_ready`).
    pub connect_within: Duration,
    /// Every call must be answered within this.
    pub reply_within: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("the Godot project {0} has no project.godot")]
    NoProject(String),
    #[error("cannot start Godot ({program}): {why}")]
    Spawn { program: String, why: String },
    #[error("Godot exited before it dialled the link: {0}")]
    ExitedEarly(String),
    #[error("Godot did not dial the link within {} ms (a script that failed to parse? see its log above)", .0.as_millis())]
    NoLink(Duration),
    #[error("the link's hello failed: {0}")]
    Hello(String),
    #[error("today's server: {0}")]
    Today(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A running Godot process (its game, over the link, is returned next to it by [`start`]).
#[derive(Debug)]
pub struct Hosted {
    /// The engine's version, from the hello.
    pub engine: String,
    link: Arc<Mutex<Link>>,
    child: Arc<Mutex<Child>>,
    stopping: Arc<AtomicBool>,
}

/// Starts Godot and links to it. `broken` is called (from any thread) when the game server
/// cannot go on: Godot exited, stopped answering, or broke the API; Godot is killed first.
pub fn start(opts: &GodotOptions, broken: Broken) -> Result<(GodotGame, Hosted), HostError> {
    if !opts.project.join("project.godot").is_file() {
        return Err(HostError::NoProject(opts.project.display().to_string()));
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let port = listener.local_addr()?.port();
    let key = link_key()?;
    let mut child = spawn(
        &opts.command,
        &opts.project,
        &[format!("--horizon-link={port}")],
        &[(LINK_KEY_ENV, &key)],
    )?;
    let stream = match accept(&listener, &mut child, opts.connect_within) {
        Ok(s) => s,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let mut link = Link::new(stream, opts.reply_within)?;
    let engine = match hello(&mut link, opts, &key) {
        Ok(engine) => engine,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(HostError::Hello(e));
        }
    };
    let link = Arc::new(Mutex::new(link));
    let child = Arc::new(Mutex::new(child));
    let stopping = Arc::new(AtomicBool::new(false));
    let kill_and_report = {
        let child = child.clone();
        let stopping = stopping.clone();
        Broken::new(move |e| {
            if !stopping.load(Ordering::SeqCst) {
                tracing::error!(error = %e, "the Godot game server is broken: Godot killed");
                kill(&child);
                broken.report(e);
            }
        })
    };
    watch(link.clone(), child.clone(), stopping.clone(), kill_and_report.clone());
    let game = GodotGame::new(link.clone(), kill_and_report);
    Ok((game, Hosted { engine, link, child, stopping }))
}

impl Hosted {
    /// The Godot process's id.
    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap_or_else(|p| p.into_inner()).id()
    }

    /// Closes the link (Godot quits on its own when it ends), then kills Godot if it is still
    /// there after `grace`.
    pub fn stop(self, grace: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        self.link.lock().unwrap_or_else(|p| p.into_inner()).close();
        let deadline = Instant::now() + grace;
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::warn!(pid = child.id(), "Godot still running after the link closed: killed");
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Starts Godot on `project` with `user_args` after `--` (the script reads them with
/// `OS.get_cmdline_args()`), Godot's stdout sent to this process's stderr.
pub(crate) fn spawn(
    command: &[OsString],
    project: &Path,
    user_args: &[String],
    env: &[(&str, &str)],
) -> Result<Child, HostError> {
    let (program, args) = command.split_first().ok_or_else(|| HostError::Spawn {
        program: String::new(),
        why: "no Godot command".to_owned(),
    })?;
    Command::new(program)
        .args(args)
        .arg("--path")
        .arg(project)
        .arg("--")
        .args(user_args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        // Godot prints its banner and the script's `print`s on stdout: they are logs, and
        // this process's stdout may be someone's data (the demo's JSON document).
        .stdout(stderr_for_child()?)
        .spawn()
        .map_err(|e| HostError::Spawn {
            program: program.to_string_lossy().into_owned(),
            why: e.to_string(),
        })
}

pub(crate) fn kill(child: &Mutex<Child>) {
    let mut child = child.lock().unwrap_or_else(|p| p.into_inner());
    let _ = child.kill();
    let _ = child.wait();
}

fn stderr_for_child() -> std::io::Result<Stdio> {
    use std::os::fd::AsFd;
    Ok(Stdio::from(std::io::stderr().as_fd().try_clone_to_owned()?))
}

/// 16 random bytes as hex, from the kernel.
fn link_key() -> Result<String, std::io::Error> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn accept(
    listener: &TcpListener,
    child: &mut Child,
    within: Duration,
) -> Result<std::net::TcpStream, HostError> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + within;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(status) = child.try_wait()? {
            return Err(HostError::ExitedEarly(status.to_string()));
        }
        if Instant::now() >= deadline {
            return Err(HostError::NoLink(within));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The hello: the protocol version, then the server's tick, name and site; the addon answers
/// with the link key and the engine's version on two lines.
fn hello(link: &mut Link, opts: &GodotOptions, key: &str) -> Result<String, String> {
    let frame = Frame::new(Op::Hello, PROTOCOL)
        .u32(opts.tick_ms)
        .bytes(opts.server_name.as_bytes())
        .bytes(opts.site.as_bytes());
    let (status, bytes) = link.call(Op::Hello, frame).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if status != Status::Ok {
        return Err(text);
    }
    let (their_key, engine) = text.split_once('\n').unwrap_or((&text, ""));
    if their_key != key {
        return Err("the process on the link does not hold the link key".to_owned());
    }
    Ok(engine.to_owned())
}

/// Every second: Godot still running, and answering when the link was idle.
fn watch(
    link: Arc<Mutex<Link>>,
    child: Arc<Mutex<Child>>,
    stopping: Arc<AtomicBool>,
    broken: Broken,
) {
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            if stopping.load(Ordering::SeqCst) {
                return;
            }
            let exited = child.lock().unwrap_or_else(|p| p.into_inner()).try_wait();
            match exited {
                Ok(None) => {}
                Ok(Some(status)) => {
                    broken.report(&LinkError::Ended(format!("Godot exited ({status})")));
                    return;
                }
                Err(e) => {
                    broken.report(&LinkError::Ended(format!("Godot cannot be watched: {e}")));
                    return;
                }
            }
            let mut link = link.lock().unwrap_or_else(|p| p.into_inner());
            if link.idle_for() >= Duration::from_secs(1)
                && let Err(e) = link.call(Op::Ping, Frame::new(Op::Ping, 0))
            {
                drop(link);
                broken.report(&e);
                return;
            }
        }
    });
}
