//! A core and its standby on a real etcd (Debian's `etcd-server`; `tests/install` installs it):
//! election, the standby's admin API, the generation across leaders, fencing by the leader
//! key's revision, the keeper's self-fencing when etcd stops answering, and a takeover on the
//! running mesh with players. Each test runs its own etcd on free ports.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use horizon_core::store::etcd::lead;
use horizon_core::store::{Record, StoreState};
use horizon_core::{CoreConfig, EtcdOptions, StoreKind};
use horizon_testkit::{EtcdServer, ReservedPort};
use horizon_transport::tls::DevCa;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// A fresh etcd, its data under a directory of its own.
async fn etcd(name: &str) -> EtcdServer {
    let dir = std::env::temp_dir().join(format!("horizon-etcd-{name}-{}", std::process::id()));
    EtcdServer::start(dir).await.expect("etcd runs")
}

fn options(etcd: &EtcdServer, ttl_s: u32) -> EtcdOptions {
    EtcdOptions {
        endpoints: vec![etcd.endpoint().to_owned()],
        prefix: "/horizon-test".into(),
        election_ttl_s: ttl_s,
        universe: None,
        tls: None,
    }
}

/// The value of `key` in etcd, if any.
fn value_of(etcd: &EtcdServer, key: &str) -> Option<String> {
    let out = etcd.etcdctl(&["get", key, "--print-value-only"]).expect("etcdctl get");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// A core configuration on etcd in `dir` (certificates made there), admin on `admin`.
fn core_config(dir: &Path, etcd: &EtcdServer, admin: SocketAddr) -> CoreConfig {
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
    cfg.store_kind = StoreKind::Etcd(options(etcd, 2));
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
async fn a_core_of_another_universe_or_an_older_build_refuses_the_store_and_resigns() {
    let etcd = etcd("universe").await;
    let dir = std::env::temp_dir().join(format!("horizon-universe-{}", std::process::id()));
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    // The first leader names the store: the universe (the core site's name by default) and
    // the key layout.
    let a = horizon_core::start(core_config(&dir.join("a"), &etcd, any)).await;
    a.expect("the first core leads").shutdown().await;
    assert_eq!(value_of(&etcd, "/horizon-test/universe").as_deref(), Some("\"PAR\""));
    assert_eq!(value_of(&etcd, "/horizon-test/format").as_deref(), Some("1"));

    // Another universe given the same prefix: refused, naming both, nothing written.
    let mut other = core_config(&dir.join("b"), &etcd, any);
    if let StoreKind::Etcd(o) = &mut other.store_kind {
        o.universe = Some("staging".into());
    }
    let Err(refused) = horizon_core::start(other).await else { panic!("another universe led") };
    let refused = refused.to_string();
    assert!(refused.contains("holds the universe \"PAR\""), "{refused}");
    assert!(refused.contains("this core serves \"staging\""), "{refused}");
    assert_eq!(value_of(&etcd, "/horizon-test/generation").as_deref(), Some("1"));

    // It resigned (its lease revoked): the universe's own core leads at once, generation 2.
    let c = tokio::time::timeout(
        Duration::from_secs(20),
        horizon_core::start(core_config(&dir.join("c"), &etcd, any)),
    )
    .await
    .expect("no election lease left behind")
    .expect("the universe's core leads");
    assert_eq!(c.generation, 2);
    c.shutdown().await;

    // A store written by a newer build (a key layout this one does not know): refused.
    etcd.etcdctl(&["put", "/horizon-test/format", "2"]).expect("etcdctl put");
    let newer = horizon_core::start(core_config(&dir.join("d"), &etcd, any)).await;
    let Err(newer) = newer else { panic!("a store of a newer layout was led") };
    let newer = newer.to_string();
    assert!(newer.contains("written by a newer Horizon (key layout 2"), "{newer}");
    assert_eq!(value_of(&etcd, "/horizon-test/generation").as_deref(), Some("2"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_core_says_so_until_the_leader_stops_then_leads_under_the_next_generation() {
    let etcd = etcd("standby").await;
    let dir = std::env::temp_dir().join(format!("horizon-standby-{}", std::process::id()));
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let a = horizon_core::start(core_config(&dir.join("a"), &etcd, any)).await;
    let a = a.expect("the first core leads");
    assert_eq!(a.generation, 1);
    let b_admin = ReservedPort::new().expect("a reserved port");
    let b_cfg = core_config(&dir.join("b"), &etcd, b_admin.addr());
    let b_admin = b_admin.addr();
    let b = tokio::spawn(horizon_core::start(b_cfg));
    // The standby's admin API answers from its start; it learns who leads once etcd answers.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        let asked = tokio::time::timeout(Duration::from_secs(2), try_get(b_admin, "/readyz"));
        if let Ok(Some((code, body))) = asked.await {
            assert_eq!(code, 503, "a standby is never ready: {body}");
            if body.contains("standing by: the core") {
                break;
            }
            assert!(body.contains("reaching etcd to learn who leads"), "{body}");
            seen.push(body);
        }
        assert!(Instant::now() < deadline, "the standby never said who leads: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, metrics) = get(b_admin, "/metrics").await;
    assert!(metrics.contains("horizon_core_leader 0"), "{metrics}");
    assert!(!b.is_finished(), "the standby must wait while the first core leads");
    let (_, metrics) = get(a.admin_addr, "/metrics").await;
    assert!(metrics.contains("horizon_core_leader 1"), "{metrics}");

    // Standing by longer than any single etcd request may take (the campaign has no timeout).
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(!b.is_finished(), "the standby still waits");
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
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_core_whose_election_key_is_revoked_stops_and_says_why() {
    let etcd = etcd("revoked").await;
    let dir = std::env::temp_dir().join(format!("horizon-revoked-{}", std::process::id()));
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut cfg = core_config(&dir, &etcd, any);
    cfg.store_kind = StoreKind::Etcd(options(&etcd, 6));
    let mut core = horizon_core::start(cfg).await.expect("the core leads");
    revoke_the_leaders_lease(&etcd);
    // Its keeper's next keep-alive (every 2 s) hears that the lease is gone.
    let why = tokio::time::timeout(Duration::from_secs(6), core.fenced()).await;
    let why = why.expect("the core stopped on its own");
    assert!(why.contains("expired"), "{why}");
    assert!(core.status().await.is_none(), "its loop has ended");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Revokes the leader's election lease (as when it expires): the leader is the candidate
/// whose key is oldest (lowest creation revision).
fn revoke_the_leaders_lease(etcd: &EtcdServer) {
    let out = etcd.etcdctl(&["get", "--prefix", "/horizon-test/leader", "-w", "json"]);
    let doc: serde_json::Value =
        serde_json::from_slice(&out.expect("etcdctl get").stdout).expect("etcdctl's JSON");
    let lease = doc["kvs"]
        .as_array()
        .into_iter()
        .flatten()
        .min_by_key(|kv| kv["create_revision"].as_i64())
        .and_then(|kv| kv["lease"].as_i64())
        .expect("the leader's key and its lease");
    let revoked = etcd.etcdctl(&["lease", "revoke", &format!("{lease:x}")]).expect("etcdctl");
    assert!(revoked.status.success(), "{}", String::from_utf8_lossy(&revoked.stderr));
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
    let etcd = etcd("deposed").await;
    let opts = options(&etcd, 2);
    let first = lead(&opts, "a".into(), "PAR", |_| {}).await.expect("a leads");
    assert_eq!(first.generation, 1);
    let written =
        append_off_runtime(first.log, first.state.clone(), Record::PlayerIds { next: 100 });
    assert_eq!(written, Ok(()));

    // Its lease revoked behind its back (as when it expires): another core is elected.
    let b_opts = opts.clone();
    let holder = tokio::spawn(async move { lead(&b_opts, "b".into(), "PAR", |_| {}).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let leader = value_of(&etcd, "/horizon-test/leader");
    assert_eq!(leader, None, "(the election keys are under leader/, not the name itself)");
    revoke_the_leaders_lease(&etcd);
    let second = tokio::time::timeout(Duration::from_secs(10), holder).await;
    let second = second.expect("b is elected").expect("task").expect("b leads");
    assert_eq!(second.generation, 2);
    assert_eq!(second.state.next_player, 100, "what the first leader wrote is read back");
    let reason = tokio::time::timeout(Duration::from_secs(5), first.fence.clone().raised()).await;
    assert!(reason.expect("the first core is fenced").contains("expired"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_writes_nothing_even_before_its_keeper_notices() {
    let etcd = etcd("guard").await;
    let opts = options(&etcd, 10);
    let first = lead(&opts, "a".into(), "PAR", |_| {}).await.expect("a leads");
    revoke_the_leaders_lease(&etcd);
    // The keeper sends every 3.3 s: the write comes first, and the guard refuses it.
    let refused =
        append_off_runtime(first.log, first.state, Record::PlayerIds { next: 7 }).unwrap_err();
    assert!(refused.contains("deposed") || refused.contains("fenced"), "{refused}");
    let written = value_of(&etcd, "/horizon-test/next_player");
    assert_eq!(written, None, "a deposed core wrote next_player");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_from_etcd_fences_itself_before_its_lease_could_expire() {
    let etcd = etcd("cut").await;
    let ttl = Duration::from_secs(6);
    let mut elected = lead(&options(&etcd, 6), "a".into(), "PAR", |_| {}).await.expect("a leads");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(elected.fence.reason().is_none(), "fenced while etcd answers");
    // etcd stops answering; its sockets stay open (a keep-alive stream looks alive).
    etcd.signal("STOP").expect("etcd stopped");
    let cut = Instant::now();
    let why = tokio::time::timeout(ttl * 2, elected.fence.raised()).await;
    let after = cut.elapsed();
    eprintln!("fenced {after:?} after the cut");
    etcd.signal("CONT").expect("etcd resumed");
    let why = why.expect("the fence is raised");
    assert!(why.contains("no keep-alive acknowledged"), "{why}");
    // The last acknowledgement came before the cut: the lease lives at least `ttl` from
    // then, and the core must have stopped before that (a quarter of it earlier).
    // By construction the fence comes 2.5–4.5 s after the cut (3.5 s under `stress-ng --cpu
    // 2`): the 1.5 s left before the TTL is a thousand times a timer's lateness under load. The
    // lower bound cannot be broken by load, which only delays.
    assert!(after < ttl, "fenced {after:?} after the cut, the lease may have expired by then");
    assert!(after >= Duration::from_secs(1), "fenced {after:?} after the cut: too eager");
    let refused = append_off_runtime(elected.log, elected.state, Record::PlayerIds { next: 1 });
    assert!(refused.unwrap_err().contains("fenced"));
}

mod common;
use common::{
    LoneMontrealer, bot, holder_of, lone_montrealer, play_on_3_s_and_finish,
    played_through_a_failover, wait_for,
};
use horizon_testkit::bots;

/// The running mesh with a standby core: the leader dies as its machine would (every agent's
/// link to it silent, its election lease left to expire). The standby leads within the
/// election TTL under the next generation, every agent finds it and registers, the relay's
/// bubble is taken back with its id and epoch, and no player stops: the relay and the core
/// site's zone simulate on under their leases, which outlive the takeover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_core_takes_over_when_the_leader_dies_and_nobody_stops_playing() {
    let etcd = etcd("takeover").await;
    let standby = EtcdOptions {
        endpoints: vec![etcd.endpoint().to_owned()],
        prefix: "/horizon-takeover".into(),
        election_ttl_s: 3,
        universe: None,
        tls: None,
    };
    let m = lone_montrealer("takeover", |opts| opts.standby = Some(standby)).await;
    let LoneMontrealer { mut sandbox, dir, stop, mut running, player, bubble, .. } = m;
    // A Parisian too, in the core site's zone.
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).expect("the sandbox CA loads");
    let parisian = bot("par", "PAR", &sandbox, 5_000.0, 0);
    running.push(bots::spawn(parisian, roots, sandbox.player_tokens.clone(), stop.subscribe()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = sandbox.core.status().await.expect("status");
    let epoch = before.placement(player).map(|b| b.epoch);
    assert_eq!(before.generation, 1);

    let died = Instant::now();
    sandbox.kill_leader().await;
    sandbox.standby_leads(Duration::from_secs(20)).await.expect("the standby leads");
    let led_after = died.elapsed();
    let status = wait_for(&sandbox, 40, |s| {
        let registered = s.sites.iter().all(|site| site.agent_connected);
        (registered && holder_of(s, player)?.0 == bubble).then(|| s.clone())
    })
    .await;
    let back_after = died.elapsed();
    let (_, _, last, reports) = play_on_3_s_and_finish(sandbox, &dir, stop, running).await;
    let status = status.unwrap_or_else(|| {
        let l = last.unwrap_or_default();
        panic!(
            "every agent back at the new leader, the bubble kept: sites {:?} bubbles {:?}",
            l.sites, l.bubbles
        )
    });
    assert_eq!(status.generation, 2, "the new leader serves under the next generation");
    assert_eq!(status.placement(player).map(|b| b.epoch), epoch, "the relay kept its lease");
    // Measured 3.1 s and 5.3 s with a release build running beside, 2.9 s and 5.4 s under
    // `stress-ng --cpu 2` (11.4 s for the agents when their link to the core waited QUIC's
    // 10 s idle timeout; it waits 4 s now, and load does not stretch a timer). The bounds keep
    // 3× that; the drill holds SPEC §6's 10 s.
    assert!(led_after < Duration::from_secs(10), "the standby led {led_after:?} after the death");
    assert!(back_after < Duration::from_secs(17), "every agent back {back_after:?} after it");
    for r in &reports {
        assert_eq!(r.restores_seen, 0, "{}: nobody's simulation stopped: {r:?}", r.name);
        played_through_a_failover(r, 1_000.0);
    }
    eprintln!(
        "takeover: the standby led {led_after:?} after the leader died; every agent registered with it and the relay's bubble taken back {back_after:?} after; longest update gaps {:?} ms",
        reports.iter().map(|r| r.max_gap_ms.round()).collect::<Vec<_>>()
    );
}

/// A loopback port chosen before its core binds it, kept from every other test's meanwhile.
fn reserved() -> ReservedPort {
    ReservedPort::new().expect("a reserved port")
}

/// The MTL agent of `core_config`'s mesh, given only `core` to dial; no game server.
async fn lone_agent(dir: &Path, core: SocketAddr) -> horizon_agent::AgentHandle {
    let ca = DevCa::new(dir.join("certs"));
    let keys = dir.join("player.keys");
    std::fs::write(&keys, horizon_transport::Keyring::generate_file("k1")).expect("player keys");
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let cfg = horizon_agent::AgentConfig {
        site: "MTL".into(),
        core: vec![core.into()],
        core_site: "PAR".into(),
        listen_servers: any,
        listen_players: any,
        listen_transfer: any,
        listen_admin: None,
        listen_beacon: None,
        advertise_admin: None,
        advertise_transfer: String::new(),
        ca: ca.ca_cert(),
        cert: ca.site_cert("MTL"),
        key: ca.site_key("MTL"),
        player_keys: keys,
        warm_pool: 0,
        max_servers: 1,
        seats_per_server: 60,
        players_per_server: 75,
        server_tick_ms: 33,
        server_program: env!("CARGO_BIN_EXE_horizon-under-test").into(),
        server_args: vec!["gameserver".into()],
        driver: horizon_agent::DriverChoice::Process,
        peers: Default::default(),
        report_ms: 1000,
        renew_ms: 5000,
    };
    let process = horizon_agent::ProcessOptions {
        program: cfg.server_program.clone(),
        args: cfg.server_args.clone(),
        site: "MTL".into(),
        ca: ca.ca_cert(),
        tick_ms: 33,
        max_servers: 1,
    };
    let driver = Box::new(horizon_agent::ProcessDriver::new(process));
    horizon_agent::start(cfg, driver).await.expect("the agent starts")
}

/// Waits (at most 15 s) until `core`'s status shows MTL's agent connected.
async fn agent_at(core: &horizon_core::CoreHandle) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let status = core.status().await.unwrap_or_default();
        if status.sites.iter().any(|s| s.site == "MTL" && s.agent_connected) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// With `listen.advertise_control`, a core standing by answers an agent's hello with the
/// leader's address (`not_leader`), and the agent registers there: an agent given only the
/// standby's address (or one name resolving to every replica) finds the leader. Once the
/// standby leads, the same address serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_sends_an_agent_to_the_leader_and_serves_it_once_it_leads() {
    let etcd = etcd("redirect").await;
    let dir = std::env::temp_dir().join(format!("horizon-redirect-{}", std::process::id()));
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let ports = [reserved(), reserved(), reserved()];
    let [a_control, b_control, b_admin] = [0, 1, 2].map(|i| ports[i].addr());
    let mut a_cfg = core_config(&dir.join("a"), &etcd, any);
    a_cfg.listen_control = a_control;
    a_cfg.advertise_control = Some(a_control.to_string());
    // The same certificates for both cores and the agent (one CA); the copies shared.
    let mut b_cfg = a_cfg.clone();
    let a = horizon_core::start(a_cfg).await.expect("a leads");
    b_cfg.listen_admin = b_admin;
    b_cfg.listen_control = b_control;
    b_cfg.advertise_control = Some(b_control.to_string());
    let b = tokio::spawn(horizon_core::start(b_cfg));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !try_get(b_admin, "/readyz").await.is_some_and(|(_, body)| body.contains("the core")) {
        assert!(Instant::now() < deadline, "the standby never said who leads");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let agent = lone_agent(&dir.join("a"), b_control).await;
    assert!(agent_at(&a).await, "the agent, given only the standby, registered with the leader");

    // The leader stops (resigns): the standby leads on the same address the agent dials.
    a.shutdown().await;
    let b = tokio::time::timeout(Duration::from_secs(20), b).await;
    let b = b.expect("the standby leads").expect("task").expect("started");
    assert_eq!(b.control_addr, b_control);
    assert!(agent_at(&b).await, "the agent registered with the new leader");
    agent.shutdown().await;
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// TLS to etcd (`https://` endpoints, `store.tls_*`): a core with the CA and a client
/// certificate leads; one without a client certificate is refused by etcd's
/// `--client-cert-auth`, and one that does not trust etcd's CA refuses etcd; both say which
/// keys to check, and neither writes anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_reaches_etcd_over_tls_with_its_client_certificate_and_not_without() {
    let dir = std::env::temp_dir().join(format!("horizon-etcd-tls-{}", std::process::id()));
    let ca = DevCa::new(dir.join("etcd-certs"));
    ca.create(&["ETCD", "PAR"], true).expect("dev certificates");
    let tls = horizon_testkit::EtcdTls {
        ca: ca.ca_cert(),
        cert: ca.site_cert("ETCD"),
        key: ca.site_key("ETCD"),
        client_cert: ca.site_cert("PAR"),
        client_key: ca.site_key("PAR"),
    };
    let etcd = EtcdServer::start_tls(dir.join("etcd"), tls).await.expect("etcd over TLS runs");
    assert!(etcd.endpoint().starts_with("https://"), "{}", etcd.endpoint());
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let with = |identity: bool, ca_file: std::path::PathBuf| {
        let mut cfg = core_config(&dir.join("core"), &etcd, any);
        if let StoreKind::Etcd(o) = &mut cfg.store_kind {
            o.tls = Some(horizon_core::EtcdTls {
                ca: ca_file,
                identity: identity.then(|| (ca.site_cert("PAR"), ca.site_key("PAR"))),
                server_name: Some(horizon_transport::site_dns_name("ETCD")),
            });
        }
        cfg
    };
    let core = horizon_core::start(with(true, ca.ca_cert())).await.expect("leads over TLS");
    assert_eq!(core.generation, 1);
    core.shutdown().await;

    let refused = horizon_core::start(with(false, ca.ca_cert())).await;
    let Err(refused) = refused else { panic!("a core without a client certificate led") };
    // (A refused TLS 1.3 handshake reads as an alert, a closed connection or a broken pipe,
    // depending on timing: the error names the keys to check in every case.)
    let refused = refused.to_string();
    assert!(refused.contains("etcd") && refused.contains("store.tls_cert"), "{refused}");
    // Another CA (the core's mesh CA): etcd's certificate is not trusted.
    let mesh_ca = DevCa::new(dir.join("core").join("certs")).ca_cert();
    let untrusted = horizon_core::start(with(true, mesh_ca)).await;
    let Err(untrusted) = untrusted else { panic!("a core led an etcd it does not trust") };
    let untrusted = untrusted.to_string();
    assert!(untrusted.contains("etcd") && untrusted.contains("store.tls_ca"), "{untrusted}");
    assert_eq!(value_of(&etcd, "/horizon-test/generation").as_deref(), Some("1"));
    eprintln!("without a client certificate: {refused}\nnot trusting etcd's CA: {untrusted}");
    let _ = std::fs::remove_dir_all(&dir);
}
