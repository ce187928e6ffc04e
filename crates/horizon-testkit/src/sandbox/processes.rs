//! The sandbox's game-server processes, found in `/proc` by the agent address they dial:
//! listed, told to stop (SIGTERM: they drain) or killed (SIGKILL: a crash).

use super::*;

impl Sandbox {
    /// Kills (SIGKILL) the game-server process named `server` of `site`'s agent in this
    /// sandbox (sandboxes running side by side use the same names), as a crash would. False
    /// if no such process runs.
    pub fn kill_server(&self, site: &str, server: &str) -> bool {
        self.signal_server(site, server, "-KILL")
    }

    /// Tells the game-server process named `server` of `site`'s agent to stop (SIGTERM), as a
    /// pod's deletion or a node's drain does: it drains its regions first. False if no such
    /// process runs.
    pub fn stop_server(&self, site: &str, server: &str) -> bool {
        self.signal_server(site, server, "-TERM")
    }

    fn signal_server(&self, site: &str, server: &str, signal: &str) -> bool {
        let Some((pid, _)) = self.server_processes(site).into_iter().find(|(_, n)| n == server)
        else {
            return false;
        };
        std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The game-server processes (pid, server name) running for `site`'s agent in this sandbox
    /// (those started with its address), from `/proc`.
    pub fn server_processes(&self, site: &str) -> Vec<(u32, String)> {
        let Some(agent) = self.agents.iter().find(|a| a.site == site) else { return Vec::new() };
        let agent_addr = agent.servers_addr.to_string();
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        let mut found = Vec::new();
        for entry in dir.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let value = |key: &[u8]| {
                args.windows(2).find(|w| w[0] == key).map(|w| String::from_utf8_lossy(w[1]))
            };
            if value(b"--agent").as_deref() == Some(agent_addr.as_str())
                && args
                    .iter()
                    .any(|a| matches!(*a, b"gameserver" | b"godot-server" | b"godot-adapter"))
                && let Some(name) = value(b"--name")
            {
                found.push((pid, name.into_owned()));
            }
        }
        found
    }

    /// The processes a site's game servers started (a Godot server's engine), as (pid, name).
    pub fn server_children(&self, site: &str) -> Vec<(u32, String)> {
        let mut found = Vec::new();
        for (pid, _) in self.server_processes(site) {
            let path = format!("/proc/{pid}/task/{pid}/children");
            let children = std::fs::read_to_string(path).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                let comm =
                    std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
                found.push((child, comm.trim().to_owned()));
            }
        }
        found
    }
}
