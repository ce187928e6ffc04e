//! The core on a real etcd (Debian's `etcd-server`; `tests/run` installs it): election,
//! standby, the generation across leaders, fencing by the leader key's revision, and the
//! keeper's self-fencing when etcd stops answering. Each test runs its own etcd on free ports.
#![cfg(feature = "etcd")]

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use horizon_core::store::etcd::lead;
use horizon_core::store::{Record, StoreState};
use horizon_core::{CoreConfig, EtcdOptions, StoreKind};
use horizon_transport::tls::DevCa;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One etcd member on free loopback ports, killed when dropped.
struct Etcd {
    child: Child,
    endpoint: String,
    _dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.signal("CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    socket.local_addr().expect("its address").port()
}

impl Etcd {
    async fn start() -> Etcd {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (client, peer) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("t={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd must be installed (Debian: etcd-server; tests/run installs it)");
        let etcd = Etcd { child, endpoint: client_url, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let connected = etcd_client::Client::connect([&etcd.endpoint], None).await;
            if let Ok(mut c) = connected
                && c.get("probe", None).await.is_ok()
            {
                return etcd;
            }
            assert!(Instant::now() < deadline, "etcd did not answer within 20 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn options(&self, ttl_s: u32) -> EtcdOptions {
        EtcdOptions {
            endpoints: vec![self.endpoint.clone()],
            prefix: "/horizon-test".into(),
            election_ttl_s: ttl_s,
        }
    }

    /// Stops (`STOP`) or resumes (`CONT`) the member: its sockets stay open, nothing answers.
    fn signal(&self, which: &str) -> std::io::Result<()> {
        let status = Command::new("kill")
            .arg(format!("-{which}"))
            .arg(self.child.id().to_string())
            .status()?;
        assert!(status.success(), "kill -{which}");
        Ok(())
    }

    async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([&self.endpoint], None).await.expect("etcd client")
    }
}

/// A core configuration on etcd in `dir` (certificates made there), admin on `admin`.
fn core_config(dir: &Path, etcd: &Etcd, admin: SocketAddr) -> CoreConfig {
    let ca = DevCa::new(dir.join("certs"));
    ca.create(&["PAR", "MTL"], true).expect("dev certificates");
    let text = format!(
        r#"
        [sites]
        core = "PAR"
        list = ["PAR", "MTL"]
        [sites.backbone_rtt_ms]
        PAR-MTL = 85
        [listen]
        control = "127.0.0.1:0"
        admin = "{admin}"
        [tls]
        ca = "{}"
        cert = "{}"
        key = "{}"
        [store]
        path = "copies"
        "#,
        ca.ca_cert().display(),
        ca.core_cert().display(),
        ca.core_key().display(),
    );
    let mut cfg = CoreConfig::parse(&text, dir).expect("a good configuration");
    cfg.store_kind = StoreKind::Etcd(etcd.options(2));
    cfg
}

/// `GET path` on an admin API: the status code and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_get(addr, path).await.expect("the admin API answers")
}

async fn try_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.ok()?;
    let code = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((code, body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_core_says_so_until_the_leader_stops_then_leads_under_the_next_generation() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let a = horizon_core::start(core_config(&dir.path().join("a"), &etcd, any)).await;
    let a = a.expect("the first core leads");
    assert_eq!(a.generation, 1);
    let b_admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let b_cfg = core_config(&dir.path().join("b"), &etcd, b_admin);
    let b = tokio::spawn(horizon_core::start(b_cfg));
    let deadline = Instant::now() + Duration::from_secs(20);
    let (code, body) = loop {
        if let Ok(Some(answer)) =
            tokio::time::timeout(Duration::from_secs(2), try_get(b_admin, "/readyz")).await
        {
            break answer;
        }
        assert!(Instant::now() < deadline, "the standby's admin API never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("standing by: the core"), "{body}");
    let (_, metrics) = get(b_admin, "/metrics").await;
    assert!(metrics.contains("horizon_core_leader 0"), "{metrics}");
    assert!(!b.is_finished(), "the standby must wait while the first core leads");
    let (_, metrics) = get(a.admin_addr, "/metrics").await;
    assert!(metrics.contains("horizon_core_leader 1"), "{metrics}");

    // A core that stops resigns (its lease revoked): the standby leads at once.
    a.shutdown().await;
    let b = tokio::time::timeout(Duration::from_secs(20), b).await;
    let b = b.expect("the standby leads once the leader stopped").expect("task").expect("started");
    assert_eq!(b.generation, 2, "a new leader serves under the next generation");
    let (code, _) = get(b.admin_addr, "/readyz").await;
    assert_eq!(code, 200);
    let (_, metrics) = get(b.admin_addr, "/metrics").await;
    assert!(metrics.contains("horizon_core_leader 1"), "{metrics}");
    b.shutdown().await;
}

/// Appends `record` from a thread of its own (the store thread's way: it waits on etcd).
fn append_off_runtime(
    mut log: horizon_core::store::etcd::EtcdLog,
    state: StoreState,
    record: Record,
) -> Result<(), String> {
    std::thread::spawn(move || log.append(&state, &record).map_err(|e| e.to_string()))
        .join()
        .expect("the writing thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_whose_election_key_is_gone_commits_nothing_and_is_fenced() {
    let etcd = Etcd::start().await;
    let opts = etcd.options(2);
    let first = lead(&opts, "a".into(), |_| {}).await.expect("a leads");
    assert_eq!(first.generation, 1);
    let written =
        append_off_runtime(first.log, first.state.clone(), Record::PlayerIds { next: 100 });
    assert_eq!(written, Ok(()));

    // Its lease revoked behind its back (as when it expires): another core is elected.
    let mut client = etcd.client().await;
    let leader = client.leader("/horizon-test/leader").await.expect("a leader");
    let lease = leader.kv().expect("the leader's key").lease();
    let b_opts = opts.clone();
    let holder = tokio::spawn(async move { lead(&b_opts, "b".into(), |_| {}).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    client.lease_revoke(lease).await.expect("revoked");
    let second = tokio::time::timeout(Duration::from_secs(10), holder).await;
    let second = second.expect("b is elected").expect("task").expect("b leads");
    assert_eq!(second.generation, 2);
    assert_eq!(second.state.next_player, 100, "what the first leader wrote is read back");
    let reason = tokio::time::timeout(Duration::from_secs(5), first.fence.clone().raised()).await;
    assert!(reason.expect("the first core is fenced").contains("expired"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_writes_nothing_even_before_its_keeper_notices() {
    let etcd = Etcd::start().await;
    let opts = etcd.options(10);
    let first = lead(&opts, "a".into(), |_| {}).await.expect("a leads");
    let mut client = etcd.client().await;
    let leader = client.leader("/horizon-test/leader").await.expect("a leader");
    let lease = leader.kv().expect("the leader's key").lease();
    client.lease_revoke(lease).await.expect("revoked");
    // The keeper sends every 3.3 s: the write comes first, and the guard refuses it.
    let refused =
        append_off_runtime(first.log, first.state, Record::PlayerIds { next: 7 }).unwrap_err();
    assert!(refused.contains("deposed") || refused.contains("fenced"), "{refused}");
    let got = client.get("/horizon-test/next_player", None).await.expect("read");
    assert!(got.kvs().is_empty(), "a deposed core wrote {:?}", got.kvs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_from_etcd_fences_itself_before_its_lease_could_expire() {
    let etcd = Etcd::start().await;
    let ttl = Duration::from_secs(6);
    let mut elected = lead(&etcd.options(6), "a".into(), |_| {}).await.expect("a leads");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(elected.fence.reason().is_none(), "fenced while etcd answers");
    // etcd stops answering; its sockets stay open (a keep-alive stream looks alive).
    etcd.signal("STOP").expect("etcd stopped");
    let cut = Instant::now();
    let why = tokio::time::timeout(ttl * 2, elected.fence.raised()).await;
    let after = cut.elapsed();
    etcd.signal("CONT").expect("etcd resumed");
    let why = why.expect("the fence is raised");
    assert!(why.contains("no keep-alive acknowledged"), "{why}");
    // The last acknowledgement came before the cut: the lease lives at least `ttl` from
    // then, and the core must have stopped before that (a quarter of it earlier).
    assert!(after < ttl, "fenced {after:?} after the cut, the lease may have expired by then");
    assert!(after >= Duration::from_secs(1), "fenced {after:?} after the cut: too eager");
    let refused = append_off_runtime(elected.log, elected.state, Record::PlayerIds { next: 1 });
    assert!(refused.unwrap_err().contains("fenced"));
}
