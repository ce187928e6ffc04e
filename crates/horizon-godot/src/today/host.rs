//! Starting (or dialling) one of today's servers and watching it: the adapter starts Godot on
//! the server's project with `-- --port=N` (a free loopback port; or dials a server already
//! running, as a Kubernetes sidecar next to it would), connects, sends `server/prewarm`, and
//! waits until the server is ready by design.md §9's rule before the agent hears of it.
//! Then a watchdog thread checks every second that the process still runs.

use std::ffi::OsString;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::game::TodayGame;
use super::link::{ServerInfo, TodayLink};
use crate::game::Broken;
use crate::host::{HostError, kill, spawn};

/// Which of today's servers.
#[derive(Clone, Debug)]
pub enum TodayServer {
    /// Start one: the program and its first arguments (`["godot3-server"]`), and the project.
    Start { command: Vec<OsString>, project: PathBuf },
    /// Dial one already running: `ws://127.0.0.1:8980`.
    Dial(String),
}

#[derive(Clone, Debug)]
pub struct TodayOptions {
    pub server: TodayServer,
    /// The server must take the connection within this (its start, its world's load).
    pub connect_within: Duration,
    /// After the prewarm, it must be ready within this.
    pub ready_within: Duration,
    /// Ready: ticks per second at least this (design.md §9: 58), and no chunk loading.
    pub ready_tps: f32,
    /// Once ready, the server must say something (it reports every second) at least this
    /// often, or it counts as hung.
    pub silent_within: Duration,
}

/// A linked server of today (its game is returned next to it by [`start`]).
#[derive(Debug)]
pub struct TodayHosted {
    pub url: String,
    /// What it said when it became ready.
    pub ready: ServerInfo,
    link: TodayLink,
    child: Option<Arc<Mutex<Child>>>,
    stopping: Arc<AtomicBool>,
}

/// Starts or dials today's server, prewarms it and waits until it is ready. `broken` is
/// called (from any thread) when the game server cannot go on: the link ended or broke, or
/// the process exited; a process this started is killed first.
pub fn start(opts: &TodayOptions, broken: Broken) -> Result<(TodayGame, TodayHosted), HostError> {
    let (url, child) = match &opts.server {
        TodayServer::Dial(url) => (url.clone(), None),
        TodayServer::Start { command, project } => {
            if !project.join("project.godot").is_file() {
                return Err(HostError::NoProject(project.display().to_string()));
            }
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port();
            let child = spawn(command, project, &[format!("--port={port}")], &[])?;
            (format!("ws://127.0.0.1:{port}"), Some(Arc::new(Mutex::new(child))))
        }
    };
    let stopping = Arc::new(AtomicBool::new(false));
    let kill_and_report = {
        let child = child.clone();
        let stopping = stopping.clone();
        Broken::new(move |e| {
            if !stopping.swap(true, Ordering::SeqCst) {
                tracing::error!(error = %e, "today's server is gone: this game server ends");
                if let Some(child) = &child {
                    kill(child);
                }
                broken.report(e);
            }
        })
    };
    let linked = TodayLink::connect(&url, opts.connect_within, kill_and_report.clone())
        .map_err(HostError::Today)
        .and_then(|link| {
            link.prewarm();
            let ready =
                link.wait_ready(opts.ready_tps, opts.ready_within).map_err(HostError::Today)?;
            Ok((link, ready))
        });
    let (link, ready) = match linked {
        Ok(linked) => linked,
        Err(e) => {
            stopping.store(true, Ordering::SeqCst);
            if let Some(child) = &child {
                let exited = child.lock().unwrap_or_else(|p| p.into_inner()).try_wait();
                kill(child);
                if let Ok(Some(status)) = exited {
                    return Err(HostError::ExitedEarly(status.to_string()));
                }
            }
            return Err(e);
        }
    };
    watch(link.clone(), child.clone(), stopping.clone(), opts.silent_within);
    let game = TodayGame::new(link.clone());
    Ok((game, TodayHosted { url, ready, link, child, stopping }))
}

impl TodayHosted {
    /// The process's id, if this started it.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.lock().unwrap_or_else(|p| p.into_inner()).id())
    }

    pub fn link(&self) -> &TodayLink {
        &self.link
    }

    /// Closes the link; a server this started gets `grace` to exit on its own, then SIGKILL.
    pub fn stop(self, grace: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        self.link.close();
        let Some(child) = self.child else { return };
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.lock().unwrap_or_else(|p| p.into_inner()).try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::warn!("today's server still running after the link closed: killed");
        kill(&child);
    }
}

/// Every 200 ms: the process (if this started it) still runs, and the server still talks.
fn watch(
    link: TodayLink,
    child: Option<Arc<Mutex<Child>>>,
    stopping: Arc<AtomicBool>,
    silent_within: Duration,
) {
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(200));
            if stopping.load(Ordering::SeqCst) {
                return;
            }
            let exited =
                child.as_ref().map(|c| c.lock().unwrap_or_else(|p| p.into_inner()).try_wait());
            let why = match exited {
                Some(Ok(Some(status))) => format!("today's server exited ({status})"),
                Some(Err(e)) => format!("today's server cannot be watched: {e}"),
                _ if link.silent_for() >= silent_within => format!(
                    "today's server said nothing for {} ms: hung",
                    link.silent_for().as_millis()
                ),
                _ => continue,
            };
            link.broke(why);
            return;
        }
    });
}
