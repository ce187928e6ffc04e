//! One real etcd member on free loopback ports (Debian's `etcd-server`; `tests/install` installs
//! it with `etcdctl`), for a sandbox whose cores keep their ownership log in etcd and for the
//! tests of that store. Killed when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::ReservedPort;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// A running etcd member.
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    endpoint: String,
    dir: PathBuf,
    /// Its clients' TLS, when it serves `https://`.
    tls: Option<EtcdTls>,
    /// Its client and peer ports, reserved for as long as it lives (`ports.rs`).
    _ports: Vec<ReservedPort>,
}

/// The certificates of a member serving TLS to clients that must show a certificate of the
/// same CA (`--client-cert-auth`), all PEM files.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A client's certificate and key, for `etcdctl`.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // A frozen member (SIGSTOP) is resumed first so that it dies now.
            let _ = self.signal("CONT");
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` distinct loopback ports for etcd, which cannot report a port it picked itself:
/// reserved below the kernel's ephemeral range ([`ReservedPort`]), so that no `bind(0)` of
/// another process and no other reservation takes one before etcd binds it. A member that
/// exits at start all the same (a process binding such a port by number) is started again on
/// fresh ports ([`START_ATTEMPTS`]).
fn free_ports(n: usize) -> Result<Vec<ReservedPort>, String> {
    (0..n)
        .map(|_| ReservedPort::new().map_err(|e| format!("no loopback port to reserve: {e}")))
        .collect()
}

/// How many times a member (or a cluster) is started on fresh ports when one exits at start.
const START_ATTEMPTS: usize = 3;

/// Why a started member did not become healthy.
#[derive(Debug)]
enum Unhealthy {
    /// It exited: most often a port taken between [`free_ports`] and its bind. Fresh ports help.
    Exited(String),
    /// It cannot be run, or it runs and does not answer `/health` in time: fresh ports would
    /// not help.
    Failed(String),
}

impl Unhealthy {
    fn message(self) -> String {
        match self {
            Unhealthy::Exited(m) | Unhealthy::Failed(m) => m,
        }
    }
}

/// The last lines of a member's log, for an error.
fn log_tail(dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join("\n  ");
    if tail.is_empty() { "(its log is empty)".into() } else { format!("its log ends:\n  {tail}") }
}

impl EtcdServer {
    /// Starts a member whose data lives in `dir` (removed when dropped), and waits until its
    /// `/health` says so (at most 20 s).
    pub async fn start(dir: PathBuf) -> Result<EtcdServer, String> {
        EtcdServer::start_single(dir, None).await
    }

    /// [`EtcdServer::start`], serving clients over TLS only (`https://`), each of which must
    /// show a certificate signed by `tls.ca`.
    pub async fn start_tls(dir: PathBuf, tls: EtcdTls) -> Result<EtcdServer, String> {
        EtcdServer::start_single(dir, Some(tls)).await
    }

    async fn start_single(dir: PathBuf, tls: Option<EtcdTls>) -> Result<EtcdServer, String> {
        let mut attempt = 1;
        loop {
            let mut ports = free_ports(2)?;
            let (client, peer) = (ports[0].addr().port(), ports[1].addr().port());
            let cluster = format!("t=http://127.0.0.1:{peer}");
            let mut etcd =
                EtcdServer::spawn(dir.clone(), "t", client, peer, &cluster, tls.clone())?;
            etcd._ports.append(&mut ports);
            match etcd.healthy_within(Duration::from_secs(20)).await {
                Ok(()) => return Ok(etcd),
                Err(Unhealthy::Exited(_)) if attempt < START_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e.message()),
            }
        }
    }

    /// Runs one member of the cluster `initial_cluster` (`name=peer-url,…`).
    fn spawn(
        dir: PathBuf,
        name: &str,
        client: u16,
        peer: u16,
        initial_cluster: &str,
        tls: Option<EtcdTls>,
    ) -> Result<EtcdServer, String> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let client_url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // Its words go to a log beside its data, quoted when it fails to start.
        let log = std::fs::File::create(dir.join("etcd.log"))
            .map_err(|e| format!("{}: {e}", dir.join("etcd.log").display()))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new("etcd");
        if let Some(t) = &tls {
            command
                .arg("--cert-file")
                .arg(&t.cert)
                .arg("--key-file")
                .arg(&t.key)
                .arg("--trusted-ca-file")
                .arg(&t.ca)
                .arg("--client-cert-auth");
        }
        let child = command
            .args(["--name", name, "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", initial_cluster])
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run etcd ({e}): install it (Debian: etcd-server; tests/install does)"
                )
            })?;
        Ok(EtcdServer { child, endpoint: client_url, dir, tls, _ports: Vec::new() })
    }

    /// Waits until the member's `/health` says so (through `etcdctl` over TLS), or it exits.
    async fn healthy_within(&mut self, within: Duration) -> Result<(), Unhealthy> {
        let deadline = Instant::now() + within;
        let addr = self.endpoint.trim_start_matches("http://").to_owned();
        loop {
            let ready = match self.tls {
                None => healthy(&addr).await,
                Some(_) => {
                    self.etcdctl(&["endpoint", "health"]).is_ok_and(|out| out.status.success())
                }
            };
            if ready {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(Unhealthy::Exited(format!(
                    "etcd at {} exited at start ({status}); {}",
                    self.endpoint,
                    log_tail(&self.dir)
                )));
            }
            if Instant::now() >= deadline {
                return Err(Unhealthy::Failed(format!(
                    "etcd at {} was not healthy within {within:?}; {}",
                    self.endpoint,
                    log_tail(&self.dir)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends `SIG<which>` to the member: `STOP` freezes it (its sockets stay open and nothing
    /// answers), `CONT` resumes it.
    pub fn signal(&self, which: &str) -> Result<(), String> {
        let status = Command::new("kill")
            .arg(format!("-{which}"))
            .arg(self.child.id().to_string())
            .status()
            .map_err(|e| e.to_string())?;
        if status.success() { Ok(()) } else { Err(format!("kill -{which} failed")) }
    }

    /// Runs `etcdctl` against this member (API v3; with a client certificate over TLS).
    pub fn etcdctl(&self, args: &[&str]) -> Result<Output, String> {
        let mut command = Command::new("etcdctl");
        if let Some(t) = &self.tls {
            // The member's certificate names a DNS name, not the loopback address dialed: the
            // client certificate still authenticates (the core's own client checks the name).
            command
                .arg("--insecure-skip-tls-verify")
                .arg("--cacert")
                .arg(&t.ca)
                .arg("--cert")
                .arg(&t.client_cert)
                .arg("--key")
                .arg(&t.client_key);
        }
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint))
            .args(args)
            .output()
            .map_err(|e| format!("cannot run etcdctl ({e}): Debian's etcd-client has it"))
    }

    /// Revokes the lease of every key under `prefix` (as when it expires): whoever held it
    /// loses what it stood for. Returns how many leases were revoked.
    pub fn revoke_leases_under(&self, prefix: &str) -> Result<usize, String> {
        let out = self.etcdctl(&["get", "--prefix", prefix, "-w", "json"])?;
        let doc: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("etcdctl get: {e}"))?;
        let leases: std::collections::BTreeSet<i64> = doc["kvs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|kv| kv["lease"].as_i64())
            .filter(|&l| l != 0)
            .collect();
        for lease in &leases {
            let revoked = self.etcdctl(&["lease", "revoke", &format!("{lease:x}")])?;
            if !revoked.status.success() {
                return Err(String::from_utf8_lossy(&revoked.stderr).into_owned());
            }
        }
        Ok(leases.len())
    }
}

/// A cluster of etcd members on loopback (`horizon demo --standby` runs three, as a studio
/// would: one member lost or slow, the store still answers). Every member is killed when
/// dropped.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl EtcdCluster {
    /// Starts `n` members (1..=7), each under `dir/mN`, and waits until every one is healthy
    /// (at most 30 s: a cluster answers once a majority has elected a leader). A member that
    /// exits at start (a port taken meanwhile) starts the whole cluster again on fresh ports,
    /// up to [`START_ATTEMPTS`] times.
    pub async fn start(dir: PathBuf, n: usize) -> Result<EtcdCluster, String> {
        if !(1..=7).contains(&n) {
            return Err(format!("an etcd cluster of {n} members: 1 to 7"));
        }
        let mut attempt = 1;
        loop {
            match EtcdCluster::start_once(&dir, n).await {
                Ok(cluster) => return Ok(cluster),
                Err(Unhealthy::Exited(_)) if attempt < START_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e.message()),
            }
        }
    }

    async fn start_once(dir: &std::path::Path, n: usize) -> Result<EtcdCluster, Unhealthy> {
        let mut reserved = free_ports(2 * n).map_err(Unhealthy::Failed)?;
        let ports: Vec<(u16, u16)> =
            reserved.chunks(2).map(|p| (p[0].addr().port(), p[1].addr().port())).collect();
        let cluster: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect();
        let cluster = cluster.join(",");
        let mut members = Vec::new();
        for (i, &(client, peer)) in ports.iter().enumerate() {
            let name = format!("m{i}");
            let mut member =
                EtcdServer::spawn(dir.join(&name), &name, client, peer, &cluster, None)
                    .map_err(Unhealthy::Failed)?;
            member._ports.extend(reserved.drain(..2));
            members.push(member);
        }
        // Dropped on failure: every member is killed and its directory removed.
        let mut cluster = EtcdCluster { members };
        for m in &mut cluster.members {
            m.healthy_within(Duration::from_secs(30)).await?;
        }
        Ok(cluster)
    }

    /// Every member's client URL, `http://127.0.0.1:PORT`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.endpoint.clone()).collect()
    }

    pub fn members(&self) -> &[EtcdServer] {
        &self.members
    }
}

/// etcd's `/health` answers `"health":"true"`.
async fn healthy(addr: &str) -> bool {
    let Ok(Ok(mut s)) =
        tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await
    else {
        return false;
    };
    let req = "GET /health HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n";
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut text = String::new();
    let read = tokio::time::timeout(Duration::from_secs(1), s.read_to_string(&mut text)).await;
    matches!(read, Ok(Ok(_))) && text.contains("\"health\":\"true\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member whose port is taken exits at start: that is told at once, with its own words,
    /// so that the cluster is started again on fresh ports instead of waiting 30 s for nothing.
    #[tokio::test]
    async fn a_member_whose_port_is_taken_is_seen_exiting_with_its_log() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = taken.local_addr().unwrap().port();
        let peer = free_ports(1).unwrap();
        let peer = peer[0].addr().port();
        let dir = std::env::temp_dir().join(format!("horizon-etcd-taken-{}", std::process::id()));
        let cluster = format!("t=http://127.0.0.1:{peer}");
        let mut etcd =
            EtcdServer::spawn(dir, "t", client, peer, &cluster, None).expect("etcd runs");
        let began = Instant::now();
        match etcd.healthy_within(Duration::from_secs(30)).await {
            Err(Unhealthy::Exited(message)) => {
                assert!(message.contains("address already in use"), "{message}");
                assert!(began.elapsed() < Duration::from_secs(30), "seen before the deadline");
            }
            other => panic!("a member on a taken port must be seen exiting: {other:?}"),
        }
    }

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports(16).unwrap();
        let distinct: std::collections::BTreeSet<u16> =
            ports.iter().map(|p| p.addr().port()).collect();
        assert_eq!(distinct.len(), 16, "{ports:?}");
    }
}
