//! How an agent gets game servers: the [`ServerDriver`] seam. The agent decides *how many*
//! (its warm pool) and *which* to stop; a driver only starts and stops them and says when one
//! died. [`ProcessDriver`] runs `horizon gameserver` processes; a Kubernetes driver creates
//! pods from a template behind the same trait.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::process::{Child, Command};

/// Why a driver could not start a server.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("cannot start {program}: {why}")]
    Spawn { program: String, why: String },
    #[error("at the limit of {max} servers")]
    Full { max: usize },
    #[error("cannot start a server now: {why}")]
    Unavailable { why: String },
}

/// Starts and stops this site's game servers. A started server dials the agent and registers
/// under the name it was given; the agent counts it ready from then on.
pub trait ServerDriver: Send + 'static {
    /// Starts a server that registers as `name` with the agent listening at `agent`, holding
    /// `token` (its credential, which names it) in `HORIZON_SERVER_TOKEN`.
    fn start(&mut self, name: &str, agent: SocketAddr, token: &str) -> Result<(), DriverError>;
    /// Stops `name` (no-op if unknown or gone).
    fn stop(&mut self, name: &str);
    /// Servers that ended since the last call, with why.
    fn poll_ended(&mut self) -> Vec<(String, String)>;
    /// Stops everything (agent shutdown).
    fn stop_all(&mut self);

    /// Asks `name` to stop gracefully (SIGTERM; a pod's deletion with its grace period): it
    /// drains its regions to other servers of the site, then exits (an operator's drain).
    fn terminate(&mut self, name: &str) {
        self.stop(name);
    }

    /// Asks every server to stop (SIGTERM, a pod deletion with its grace period); the caller
    /// waits for [`ServerDriver::poll_ended`] to see them go, then calls `stop_all`.
    fn terminate_all(&mut self) {
        self.stop_all();
    }
    /// Servers started and not ended.
    fn running(&self) -> usize;

    /// Whether what runs `name` is ready by the platform's own account (a pod's `Ready`
    /// condition). The agent counts a server ready once it said `Ready` and this holds.
    fn ready(&self, _name: &str) -> bool {
        true
    }

    /// Tells the platform whether `name` holds part of a bubble (`hosting`) or waits in the warm
    /// pool (a pod's `horizon.dev/pool` label). Called when it changes.
    fn set_hosting(&mut self, _name: &str, _hosting: bool) {}
}

/// What every game server of the site is started with.
#[derive(Clone, Debug)]
pub struct ProcessOptions {
    /// The program run for each game server (the `horizon` binary by default).
    pub program: PathBuf,
    /// Its first arguments (`gameserver`, or `godot-server --project DIR`); the agent's own
    /// flags follow: `--agent`, `--site`, `--name`, `--ca`, `--tick-ms`, `--exit-with-parent`.
    pub args: Vec<String>,
    pub site: String,
    /// CA certificate the server verifies the agent with.
    pub ca: PathBuf,
    pub tick_ms: u32,
    pub max_servers: usize,
}

/// Game servers as local child processes. Children die with the agent (`kill_on_drop`, and
/// [`ServerDriver::stop_all`] on shutdown).
#[derive(Debug)]
pub struct ProcessDriver {
    opts: ProcessOptions,
    children: HashMap<String, Child>,
}

impl ProcessDriver {
    pub fn new(opts: ProcessOptions) -> Self {
        ProcessDriver { opts, children: HashMap::new() }
    }
}

impl ServerDriver for ProcessDriver {
    fn start(&mut self, name: &str, agent: SocketAddr, token: &str) -> Result<(), DriverError> {
        if self.children.len() >= self.opts.max_servers {
            return Err(DriverError::Full { max: self.opts.max_servers });
        }
        let o = &self.opts;
        let child = Command::new(&o.program)
            .args(&o.args)
            .args(["--agent", &agent.to_string()])
            .args(["--site", &o.site])
            .args(["--name", name])
            .arg("--ca")
            .arg(&o.ca)
            .args(["--tick-ms", &o.tick_ms.to_string()])
            // It exits if this agent dies, however it dies (parent-death signal).
            .arg("--exit-with-parent")
            // In the environment, never on the command line.
            .env(crate::SERVER_TOKEN_ENV, token)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| DriverError::Spawn {
                program: o.program.display().to_string(),
                why: e.to_string(),
            })?;
        tracing::info!(site = %o.site, server = name, pid = child.id(), "game server started");
        self.children.insert(name.to_owned(), child);
        Ok(())
    }

    fn stop(&mut self, name: &str) {
        if let Some(mut child) = self.children.remove(name) {
            let _ = child.start_kill();
        }
    }

    fn poll_ended(&mut self) -> Vec<(String, String)> {
        let mut ended = Vec::new();
        self.children.retain(|name, child| match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                ended.push((name.clone(), status.to_string()));
                false
            }
            Err(e) => {
                ended.push((name.clone(), e.to_string()));
                false
            }
        });
        ended
    }

    fn stop_all(&mut self) {
        for (_, mut child) in self.children.drain() {
            let _ = child.start_kill();
        }
    }

    fn terminate(&mut self, name: &str) {
        let pid = self.children.get(name).and_then(|c| c.id());
        match pid.and_then(|id| rustix::process::Pid::from_raw(id as i32)) {
            Some(pid) => {
                if let Err(e) = rustix::process::kill_process(pid, rustix::process::Signal::TERM) {
                    tracing::warn!(server = %name, error = %e, "SIGTERM not sent");
                }
            }
            None => tracing::warn!(server = %name, "no such game server process to stop"),
        }
    }

    fn terminate_all(&mut self) {
        for (name, child) in &self.children {
            let pid = child.id().and_then(|id| rustix::process::Pid::from_raw(id as i32));
            if let Some(pid) = pid
                && let Err(e) = rustix::process::kill_process(pid, rustix::process::Signal::TERM)
            {
                tracing::warn!(server = %name, error = %e, "SIGTERM not sent");
            }
        }
    }

    fn running(&self) -> usize {
        self.children.len()
    }
}
