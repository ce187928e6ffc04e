//! Bad input against the running mesh (real QUIC on loopback, the real agents and core, game
//! servers as real processes): a flood of connections that never say hello at a gateway while
//! a player joins, an oversized input from one player next to another, a client on the wrong
//! channel, a game server with a wrong token, a player naming themselves like another or
//! holding a forged, expired or other-kind token; a site (its certificate stolen) lying about
//! another site's player; a game server writing a bubble it does not hold, under old, current
//! and ungranted epochs; and credentials rotated under a running agent (player keys, its
//! certificate). Each gets its documented refusal (docs/protocol.md, docs/security.md), and
//! the player next to them notices nothing.

use std::path::PathBuf;
use std::time::Duration;

use horizon_proto::gateway::{self, Gateway};
use horizon_proto::server::Server;
use horizon_proto::{Blob, ChannelId, ErrorCode, Name, Role, Seq, Vec3, WorldId};
use horizon_testkit::bots;
use horizon_testkit::{Sandbox, SandboxOptions};
use horizon_transport::tls::{self, Roots};
use horizon_transport::{
    Dial, Error, HelloParams, Limits, Link, LinkEvent, Refusal, client_endpoint,
};

// Shared by the mesh tests; this one uses only `bot`.
#[allow(dead_code)]
mod common;
use common::bot;

fn dial<C: horizon_proto::Channel>(
    roots: &Roots,
    addr: std::net::SocketAddr,
    hello: HelloParams,
) -> horizon_transport::LinkParts<C> {
    let limits = Limits::default();
    let config = tls::client_config(roots, None, C::ID, &limits).expect("tls");
    Link::<C>::connect(Dial {
        endpoint: client_endpoint(std::net::Ipv4Addr::LOCALHOST.into()).expect("endpoint"),
        addrs: vec![addr.into()],
        server_name: horizon_transport::site_dns_name("MTL"),
        config,
        hello,
        limits,
        stats: horizon_transport::TransportStats::default(),
    })
}

/// One mesh at a time: these tests time refusals and joins, which a machine running five
/// meshes at once on two cores would blur.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The three-site mesh (`shape` changes its options first), its game servers ready; the CA,
/// the directory to remove at the end, and the turn to hold until the test ends.
async fn mesh(
    tag: &str,
    shape: impl FnOnce(&mut SandboxOptions),
) -> (Sandbox, Roots, PathBuf, tokio::sync::MutexGuard<'static, ()>) {
    let turn = ONE_AT_A_TIME.lock().await;
    let dir = std::env::temp_dir().join(format!("horizon-{tag}-{}", std::process::id()));
    let mut opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    shape(&mut opts);
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(1, Duration::from_secs(60)).await, "servers ready");
    let roots = Roots::load(&sandbox.ca).expect("CA");
    (sandbox, roots, dir, turn)
}

/// A bot named `name` playing at MTL, once it has seen 20 updates (its bubble is placed):
/// its report, its task, and what stops it.
async fn playing(
    sandbox: &Sandbox,
    roots: &Roots,
    name: &str,
) -> (
    std::sync::Arc<std::sync::Mutex<bots::BotReport>>,
    tokio::task::JoinHandle<()>,
    tokio::sync::watch::Sender<bool>,
) {
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let spec = bot(name, "MTL", sandbox, 0.0, 0);
    let (report, task) = bots::spawn(spec, roots.clone(), sandbox.player_tokens.clone(), stop_rx);
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    while report.lock().expect("report").updates < 20 && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (report, task, stop)
}

/// The link's first failure (it retries on its own), or `None` if it came up.
async fn first_failure<C: horizon_proto::Channel>(
    parts: &mut horizon_transport::LinkParts<C>,
) -> Option<String> {
    match tokio::time::timeout(Duration::from_secs(5), parts.events.recv()).await {
        Ok(Some(LinkEvent::Retry { error, .. } | LinkEvent::Down(error))) => {
            Some(error.to_string())
        }
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_locks_nobody_out_and_touches_nobody_else() {
    let (sandbox, roots, dir, _one_at_a_time) = mesh("bad-input", |_| {}).await;
    let mtl = sandbox.agents.iter().find(|a| a.site == "MTL").expect("MTL");
    let (gateway_addr, servers_addr) = (mtl.players_addr, mtl.servers_addr);
    let mtl_transport = mtl.transport.clone();

    // 1. Three hundred connections from one address (more than a listener's 256 handshake
    // slots) try their QUIC handshake at MTL's gateway and never say hello; meanwhile a
    // Montrealer joins (from another address) and plays.
    let flooder = client_endpoint("127.0.0.2".parse().expect("address")).expect("endpoint");
    let flood_config =
        tls::client_config(&roots, None, ChannelId::Gateway, &Limits::default()).expect("tls");
    // All at once, as a flood comes.
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..300 {
        let name = horizon_transport::site_dns_name("MTL");
        let connecting = flooder.connect_with(flood_config.clone(), gateway_addr, &name);
        let connecting = connecting.expect("dial");
        flood.spawn(async move { tokio::time::timeout(Duration::from_secs(3), connecting).await });
    }
    let mut held = Vec::new();
    while let Some(done) = flood.join_next().await {
        if let Ok(Ok(Ok(c))) = done {
            held.push(c);
        }
    }
    let held_count = held.len();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let spec = bot("bystander", "MTL", &sandbox, 0.0, 0);
    let (report, task) = bots::spawn(spec, roots.clone(), sandbox.player_tokens.clone(), stop_rx);
    let started = tokio::time::Instant::now();
    while !report.lock().expect("report").joined && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let joined_after = started.elapsed();
    let refused_per_source = mtl_transport.refused_count(ChannelId::Gateway, Refusal::PerSource);

    // 2. A player next to them sends an input over 16 KiB: its connection alone is closed.
    let hello = HelloParams::new(Name::new("oversized").expect("name"))
        .with_token(sandbox.player_tokens.mint("oversized"));
    let parts = dial::<Gateway>(&roots, sandbox.gateways["MTL"], hello);
    let conn = parts.link.connected(Duration::from_secs(10)).await.expect("connected");
    let join =
        gateway::Request::Join { role: Role::Player, world: WorldId(1), pos: Vec3::default() };
    conn.request(&join).await.expect("joined");
    let mut inputs = conn.open_stream().await.expect("input stream");
    let big = gateway::Item::Input { seq: Seq(1), bytes: Blob(vec![7; 17 << 10]) };
    inputs.send(&big).await.expect("sent");
    let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await;

    // 3. A client on the wrong channel (the control ALPN at the gateway's port), and a game
    // server with a wrong token.
    let hello = HelloParams::new(Name::new("MTL").expect("name"));
    let mut wrong_alpn = dial::<horizon_proto::control::Control>(&roots, gateway_addr, hello);
    let alpn = first_failure(&mut wrong_alpn).await;
    let hello = HelloParams::new(Name::new("mtl-gs-99").expect("name")).with_token("guess");
    let mut intruder = dial::<Server>(&roots, servers_addr, hello);
    let token = first_failure(&mut intruder).await;

    // The bystander plays on through all of it (its bubble comes at the brain's next tick).
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    while report.lock().expect("report").updates < 60 && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.send(true).expect("bot listening");
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    let r = report.lock().expect("report").clone();
    drop((wrong_alpn, intruder, parts, held));
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    assert!(joined_after < Duration::from_secs(2), "joined {joined_after:?} into the flood");
    assert!(refused_per_source > 0, "the flood met the per-source limit");
    match closed {
        Ok(Error::Closed { code, reason }) => {
            assert_eq!(code, ErrorCode::TooLarge, "{reason}");
            assert!(reason.contains("over the limit of 16384 bytes"), "{reason}");
        }
        other => panic!("the oversized input's connection: {other:?}"),
    }
    let alpn = alpn.expect("the wrong channel refused");
    // TLS alert 120, no_application_protocol.
    assert!(alpn.contains("error 120"), "{alpn}");
    let token = token.expect("the wrong token refused");
    assert!(token.contains("unauthorized"), "{token}");
    assert_eq!(r.error, None);
    assert_eq!(r.applied, r.acked, "every acknowledged input applied, once: {r:?}");
    assert_eq!((r.applied_twice, r.chain_breaks), (0, 0));
    assert!(r.updates > 40 && r.inputs_sent - r.acked < 20, "played throughout: {r:?}");
    assert!(r.max_gap_ms < 1_000.0, "longest gap {:.0} ms", r.max_gap_ms);
    eprintln!(
        "bad input: joined {joined_after:?} into a flood of 300 (held {held_count}); {alpn}; {token}"
    );
}

/// Joins `site`'s gateway with `hello`: the player id it was given, or why not.
async fn join_as(
    roots: &Roots,
    addr: std::net::SocketAddr,
    hello: HelloParams,
) -> Result<(u64, horizon_transport::LinkParts<Gateway>), String> {
    let mut parts = dial::<Gateway>(roots, addr, hello);
    if let Some(why) = first_failure(&mut parts).await {
        return Err(why);
    }
    let conn = parts.link.connected(Duration::from_secs(5)).await.map_err(|e| e.to_string())?;
    let join =
        gateway::Request::Join { role: Role::Player, world: WorldId(1), pos: Vec3::default() };
    match conn.request(&join).await.map_err(|e| e.to_string())? {
        gateway::Reply::Joined { player, .. } => Ok((player.0, parts)),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_is_who_their_token_says_and_player_keys_rotate_without_a_restart() {
    use horizon_transport::Keyring;
    use horizon_transport::credential::Kind;
    let (sandbox, roots, dir, _one_at_a_time) = mesh("identities", |_| {}).await;
    let mtl = sandbox.agents.iter().find(|a| a.site == "MTL").expect("MTL");
    let (gateway_addr, mtl_transport) = (mtl.players_addr, mtl.transport.clone());
    let tokens = sandbox.player_tokens.clone();
    let hello = |peer: &str, token: String| {
        HelloParams::new(Name::new(peer).expect("name")).with_token(token)
    };

    // Alice plays, as a bot whose account is its name.
    let (report, task, stop) = playing(&sandbox, &roots, "alice").await;
    let alice = report.lock().expect("report").player.expect("alice joined");

    // 1. Mallory, with a good token of her own, names herself "alice" in the hello: she is
    // Mallory, a new player; Alice's connection is not replaced.
    let (mallory, mallory_link) =
        join_as(&roots, gateway_addr, hello("alice", tokens.mint("mallory")))
            .await
            .expect("mallory");
    // 2. A token for "alice" signed by a key the mesh does not hold; a token of another kind
    // (a server's) signed by the right key; an expired one; none at all.
    let stranger = Keyring::parse(&Keyring::generate_file("k1")).expect("a ring");
    let later = std::time::SystemTime::now() + Duration::from_secs(60);
    let forged = stranger.mint(Kind::Player, "alice", later).expect("token");
    let server_kind = tokens.0.mint(Kind::Server, "alice", later).expect("token");
    let expired =
        tokens.0.mint(Kind::Player, "alice", std::time::SystemTime::now()).expect("token");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut refusals = Vec::new();
    for (what, token) in [("forged", forged), ("server kind", server_kind), ("expired", expired)] {
        refusals.push((what, join_as(&roots, gateway_addr, hello("alice", token)).await.err()));
    }
    let no_token =
        join_as(&roots, gateway_addr, HelloParams::new(Name::new("alice").expect("name")))
            .await
            .err();
    refusals.push(("no token", no_token));

    // 3. Rotation: a new key on top of the old one, then the old one removed; the agent reads
    // the file again by itself (no restart, no signal). Alice, connected under the old key,
    // plays on.
    let keys_file = sandbox.ca.with_file_name("player.keys");
    let old = std::fs::read_to_string(&keys_file).expect("keys");
    let new_key = Keyring::generate_file("k2");
    let new_line = new_key.lines().find(|l| !l.starts_with('#')).expect("a key line").to_owned();
    let reloads_before = mtl_transport.reload_count(true);
    let failed_before = mtl_transport.reload_count(false);
    // In one step, as `horizon keys rotate` and a kubelet updating a Secret write it.
    horizon_transport::reload::replace_file(&keys_file, &format!("{new_line}\n{old}"), 0o600)
        .expect("rotated");
    let new_ring = Keyring::parse(&new_line).expect("k2");
    // Each join its own account: two live links of one account would take the connection from
    // each other in turn (one connection per account).
    let k2_token = |account: &str| new_ring.mint(Kind::Player, account, later).expect("token");
    let since = tokio::time::Instant::now();
    let (mut carol, mut attempts, mut slowest, mut last) = (None, 0, Duration::ZERO, None);
    while carol.is_none() && since.elapsed() < Duration::from_secs(10) {
        let attempt = tokio::time::Instant::now();
        match join_as(&roots, gateway_addr, hello("carol", k2_token("carol"))).await {
            Ok(joined) => carol = Some(joined),
            Err(why) => last = Some(why),
        }
        (attempts, slowest) = (attempts + 1, slowest.max(attempt.elapsed()));
        if carol.is_none() {
            // Paced: the agents share this process's two threads with the test.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let k2_accepted_after = since.elapsed();
    let rotation = format!(
        "{attempts} joins tried, the slowest {slowest:?}, the last refusal {last:?}; reloads since the rotation: {} ok, {} failed",
        mtl_transport.reload_count(true) - reloads_before,
        mtl_transport.reload_count(false) - failed_before,
    );
    let k1_still = join_as(&roots, gateway_addr, hello("dave", tokens.mint("dave"))).await;
    horizon_transport::reload::replace_file(&keys_file, &format!("{new_line}\n"), 0o600)
        .expect("k1 retired");
    // Until the refusal names the retired key: a join that fails otherwise (one timed out
    // under stress-ng, its answer over 5 s late) is not the refusal looked for, and the next
    // tries again.
    let since = tokio::time::Instant::now();
    let mut k1_refused: Option<String> = None;
    let retired = |why: &Option<String>| why.as_deref().is_some_and(|w| w.contains("unknown key"));
    while !retired(&k1_refused) && since.elapsed() < Duration::from_secs(20) {
        k1_refused = join_as(&roots, gateway_addr, hello("erin", tokens.mint("erin"))).await.err();
        if !retired(&k1_refused) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // 4. MTL's certificate re-issued (as a renewal writes it): the agent reloads it, new
    // players connect under it, Alice plays on.
    let reloads_mid = mtl_transport.reload_count(true);
    let ca_dir = sandbox.ca.parent().expect("the certificates' directory").to_owned();
    horizon_transport::tls::DevCa::new(&ca_dir).add_site("MTL").expect("re-issued");
    let since = tokio::time::Instant::now();
    while mtl_transport.reload_count(true) == reloads_mid
        && since.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cert_reloaded_after = since.elapsed();
    let after_renewal =
        join_as(&roots, gateway_addr, hello("frank", k2_token("frank"))).await.map(|_| ());
    let acked_then = report.lock().expect("report").acked;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.send(true).expect("bot listening");
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    let r = report.lock().expect("report").clone();
    let reloads = mtl_transport.reload_count(true) - reloads_before;
    drop((mallory_link, carol, k1_still));
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    assert_ne!(mallory, alice, "a hello's name is nobody's id");
    for (what, refusal) in refusals {
        let why = refusal.unwrap_or_else(|| panic!("the {what} token was accepted"));
        assert!(why.contains("unauthorized"), "{what}: {why}");
    }
    // The files are looked at every POLL_EVERY (2 s): a new key verifies after the next look.
    // The bound leaves room for two looks more: a CI run once saw 6.1 s (cause unknown; the
    // message says what the joins and the reloads did, should it happen again).
    let within = horizon_transport::reload::POLL_EVERY * 3 + Duration::from_secs(2);
    assert!(k2_accepted_after < within, "the new key took {k2_accepted_after:?}: {rotation}");
    assert!(retired(&k1_refused), "{k1_refused:?}");
    assert!(reloads >= 3, "three reloads counted, {reloads}");
    assert!(
        cert_reloaded_after < Duration::from_secs(6),
        "the certificate took {cert_reloaded_after:?}"
    );
    assert!(after_renewal.is_ok(), "a player joins after the renewal: {:?}", after_renewal.err());
    assert_eq!(r.error, None, "alice: {r:?}");
    assert_eq!((r.connections_lost, r.applied_twice), (0, 0), "alice untouched: {r:?}");
    assert!(r.acked > acked_then, "alice still acknowledged after the rotation: {r:?}");
    eprintln!(
        "identities: mallory {mallory} ≠ alice {alice}; the new key accepted after {k2_accepted_after:?}"
    );
}

/// The core's `/metrics` page.
async fn core_metrics(admin: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(admin).await.expect("admin API");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: core\r\n\r\n").await.expect("request");
    let mut page = String::new();
    s.read_to_string(&mut page).await.expect("response");
    page
}

/// The value of the series `name{labels}` in a metrics page (0 if absent).
fn series(page: &str, name_and_labels: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name_and_labels).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_is_believed_only_about_the_players_it_owns() {
    use horizon_proto::PlayerId;
    use horizon_proto::control::{self, Control, PlayerSample};
    let (sandbox, roots, dir, _one_at_a_time) = mesh("rogue-site", |_| {}).await;

    // A Montrealer plays, placed at MTL.
    let (report, task, stop) = playing(&sandbox, &roots, "montrealer").await;
    let me = PlayerId(report.lock().expect("report").player.expect("joined"));

    // HKG's agent is cut from the core, and an intruder holding HKG's certificate (a site
    // compromised) speaks for it: it says the Montrealer joined at HKG, moved far away and left.
    assert!(sandbox.partition_core("HKG", true));
    let ca = horizon_transport::tls::DevCa::new(sandbox.ca.parent().expect("certificates"));
    let identity = ca.identity("HKG").expect("HKG's certificate");
    let limits = Limits::default();
    let config =
        tls::client_config(&roots, Some(&identity), ChannelId::Control, &limits).expect("tls");
    let rogue = Link::<Control>::connect(Dial {
        endpoint: client_endpoint(std::net::Ipv4Addr::LOCALHOST.into()).expect("endpoint"),
        addrs: vec![sandbox.core.control_addr.into()],
        server_name: horizon_transport::tls::CORE_DNS_NAME.to_owned(),
        config,
        hello: HelloParams::new(Name::new("HKG").expect("name")),
        limits,
        stats: horizon_transport::TransportStats::default(),
    });
    let conn = rogue.link.connected(Duration::from_secs(10)).await.expect("connected as HKG");
    let register = control::Request::Register {
        site: Name::new("HKG").expect("name"),
        build: Name::new("intruder").expect("name"),
        transfer_addr: "127.0.0.1:9".into(),
        servers: Vec::new(),
        held: Vec::new(),
    };
    conn.request(&register).await.expect("registered");
    let far = PlayerSample {
        player: me,
        access_rtt_ms: 1.0,
        role: Role::Player,
        world: WorldId(1),
        pos: Vec3 { x: 9.0e6, y: 0.0, z: 0.0 },
        vel: Vec3::default(),
    };
    let page = core_metrics(sandbox.core.admin_addr).await;
    let before = |reason: &str| {
        series(&page, &format!("horizon_core_refused_total{{reason=\"{reason}\",site=\"HKG\"}}"))
    };
    let (joins_before, others_before) = (before("player_id_not_its_own"), before("not_its_player"));
    let lie = control::Request::Report {
        joins: vec![far],
        leaves: vec![me],
        players: vec![far],
        backbone: Vec::new(),
        servers: Vec::new(),
    };
    let answer = conn.request(&lie).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let page = core_metrics(sandbox.core.admin_addr).await;
    let after = |reason: &str| {
        series(&page, &format!("horizon_core_refused_total{{reason=\"{reason}\",site=\"HKG\"}}"))
    };
    let status = sandbox.core.status().await.expect("status");
    let placed = status.players.iter().find(|p| p.player == me.0).cloned();
    let acked_then = report.lock().expect("report").acked;
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop((conn, rogue));
    assert!(sandbox.partition_core("HKG", false));
    stop.send(true).expect("bot listening");
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    let r = report.lock().expect("report").clone();
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    assert!(answer.is_ok(), "the rest of a report is applied: {answer:?}");
    assert!(after("player_id_not_its_own") > joins_before, "the join of another's id refused");
    assert!(after("not_its_player") >= others_before + 2.0, "the move and the leave refused");
    let placed = placed.expect("the Montrealer is still in the universe");
    assert_eq!(placed.home, "MTL", "{placed:?}");
    assert!(placed.pos[0].abs() < 1000.0, "not moved by HKG's word: {placed:?}");
    assert_eq!(r.error, None, "{r:?}");
    assert_eq!((r.connections_lost, r.applied_twice), (0, 0), "{r:?}");
    assert!(r.acked > acked_then, "still played after the lie: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_game_server_writing_under_an_old_epoch_or_a_bubble_it_does_not_hold_reaches_nobody() {
    use horizon_proto::{BubbleId, Epoch, PlayerId, StateItem, Tick, Update};
    // MTL's warm pool starts mtl-gs-0 and mtl-gs-1: the second is ours.
    let token = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = token.clone();
    let (sandbox, roots, dir, _one_at_a_time) = mesh("rogue-server", |opts| {
        opts.drivers = Some(horizon_testkit::DriverFactory(std::sync::Arc::new(move |p| {
            let driver = horizon_testkit::TappedDriver::new(p);
            let driver =
                if p.site == "MTL" { driver.taking("mtl-gs-1", slot.clone()) } else { driver };
            Ok(Box::new(driver) as Box<dyn horizon_agent::ServerDriver>)
        })));
    })
    .await;
    let mtl = sandbox.agents.iter().find(|a| a.site == "MTL").expect("MTL");

    // A Montrealer plays on mtl-gs-0 (the only ready server at MTL).
    let (report, task, stop) = playing(&sandbox, &roots, "montrealer").await;
    let me = report.lock().expect("report").player.expect("joined");
    let status = sandbox.core.status().await.expect("status");
    let bubble = status.bubbles.iter().find(|b| b.site == "MTL").expect("the Montrealer's bubble");
    let (id, epoch) = (BubbleId(bubble.bubble), bubble.epoch);

    // mtl-gs-1, with its own token, registers (never says ready: it is given nothing) and
    // writes the Montrealer's bubble: under an older epoch, under the current one (it does not
    // hold it), and a newer one nobody granted; each acknowledging inputs never sent.
    let token = token.lock().expect("token").clone().expect("mtl-gs-1's token");
    let hello = HelloParams::new(Name::new("mtl-gs-1").expect("name")).with_token(token);
    let rogue = dial::<Server>(&roots, mtl.servers_addr, hello);
    let conn = rogue.link.connected(Duration::from_secs(10)).await.expect("connected as mtl-gs-1");
    let register = horizon_proto::server::Request::Register {
        server: Name::new("mtl-gs-1").expect("name"),
        build: Name::new("rogue").expect("name"),
        max_players: 100,
    };
    conn.request(&register).await.expect("registered");
    let refused_before = sandbox
        .agent_stats("MTL")
        .expect("MTL")
        .stale_updates_refused
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut out = conn.open_stream().await.expect("a stream");
    for (n, e) in [epoch - 1, epoch, epoch + 1].into_iter().enumerate() {
        let lie = Update {
            bubble: id,
            epoch: Epoch(e),
            tick: Tick(1_000_000 + n as u64),
            acked: vec![(PlayerId(me), Seq(1_000_000))],
            bytes: Blob(b"not the game".to_vec()),
        };
        out.send(&StateItem::Update(lie)).await.expect("sent");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let refused = sandbox
        .agent_stats("MTL")
        .expect("MTL")
        .stale_updates_refused
        .load(std::sync::atomic::Ordering::Relaxed)
        - refused_before;
    let acked_then = report.lock().expect("report").acked;
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop((out, conn, rogue));
    stop.send(true).expect("bot listening");
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    let r = report.lock().expect("report").clone();
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(refused, 3, "each write refused and counted");
    assert_eq!(r.error, None, "{r:?}");
    assert!(r.acked <= r.inputs_sent, "no acknowledgement the player never earned: {r:?}");
    assert_eq!((r.applied_twice, r.chain_breaks, r.connections_lost), (0, 0, 0), "{r:?}");
    assert!(r.acked > acked_then, "still played: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_at_the_core_locks_out_no_agent_reconnecting() {
    let (mut sandbox, roots, dir, _one_at_a_time) = mesh("core-flood", |_| {}).await;

    // Three hundred connections from one address at the core's control port, each with a
    // good site certificate (a site compromised), none ever saying hello...
    let ca = horizon_transport::tls::DevCa::new(sandbox.ca.parent().expect("certificates"));
    let identity = ca.identity("MTL").expect("MTL's certificate");
    let config =
        tls::client_config(&roots, Some(&identity), ChannelId::Control, &Limits::default())
            .expect("tls");
    let flooder = client_endpoint("127.0.0.2".parse().expect("address")).expect("endpoint");
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..300 {
        let connecting = flooder
            .connect_with(
                config.clone(),
                sandbox.core.control_addr,
                horizon_transport::tls::CORE_DNS_NAME,
            )
            .expect("dial");
        flood.spawn(async move { tokio::time::timeout(Duration::from_secs(3), connecting).await });
    }
    // ... while HKG's agent crashes and comes back: it registers at once.
    sandbox.restart_agent("HKG", Duration::ZERO).await.expect("HKG restarts");
    let up = tokio::time::Instant::now();
    let registered = || {
        sandbox
            .agent_stats("HKG")
            .is_some_and(|s| s.registered.load(std::sync::atomic::Ordering::Relaxed) == 1)
    };
    while !registered() && up.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (registered_after, back) = (up.elapsed(), registered());
    let mut held = Vec::new();
    while let Some(done) = flood.join_next().await {
        if let Ok(Ok(Ok(c))) = done {
            held.push(c);
        }
    }
    let refused = sandbox.core.transport.refused_count(ChannelId::Control, Refusal::PerSource);
    drop(held);
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    assert!(back, "HKG registered again");
    assert!(
        registered_after < Duration::from_secs(2),
        "HKG registered {registered_after:?} into the flood"
    );
    assert!(refused > 0, "the flood met the per-source limit");
    eprintln!(
        "core flood: HKG registered {registered_after:?} after its restart; {refused} refused per source"
    );
}

/// Resumes `credential` on a new connection of `hello`'s account at `addr`: the answer.
async fn resume_as(
    roots: &Roots,
    addr: std::net::SocketAddr,
    hello: HelloParams,
    credential: &str,
) -> Result<gateway::Reply, horizon_proto::ErrorCode> {
    let parts = dial::<Gateway>(roots, addr, hello);
    let conn = parts.link.connected(Duration::from_secs(10)).await.expect("connected");
    let resume = gateway::Request::Resume { credential: credential.to_owned() };
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match conn.request(&resume).await {
            // The agent just started: it has not heard from the core who plays here.
            Err(Error::Fault(f))
                if f.code == horizon_proto::ErrorCode::NotReady
                    && tokio::time::Instant::now() < until =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(Error::Fault(f)) => return Err(f.code),
            Err(e) => panic!("resume: {e}"),
            Ok(reply) => return Ok(reply),
        }
    }
}

/// Issue 45: an agent that crashes and starts again knows nobody, yet its players play on as
/// themselves: the core lists them at its registration, and each client resumes with the
/// credential its gateway gave (signed with the site's player keys, which the new process
/// reads again). The bot's inputs are all applied once across it (its entity's count of
/// inputs catches up with what its updates acknowledge). A credential replayed from another
/// account, or naming another player, resumes nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn players_resume_as_themselves_after_their_agent_restarts_and_nobody_else_can() {
    let (mut sandbox, roots, dir, _one_at_a_time) = mesh("resume", |_| {}).await;
    let gateway_addr = sandbox.gateways["MTL"];
    let tokens = sandbox.player_tokens.clone();
    let hello = |account: &str| {
        HelloParams::new(Name::new(account).expect("name")).with_token(tokens.mint(account))
    };
    let (report, task, stop) = playing(&sandbox, &roots, "alice").await;
    let (alice, acked_before) = {
        let r = report.lock().expect("report");
        (r.player.expect("alice joined"), r.acked)
    };
    // Carol joins by hand and keeps her credential.
    let parts = dial::<Gateway>(&roots, gateway_addr, hello("carol"));
    let conn = parts.link.connected(Duration::from_secs(10)).await.expect("connected");
    let join =
        gateway::Request::Join { role: Role::Player, world: WorldId(1), pos: Vec3::default() };
    let gateway::Reply::Joined { player: carol, resume: credential, .. } =
        conn.request(&join).await.expect("carol joins")
    else {
        panic!("carol: not joined")
    };
    assert!(credential.starts_with("hz1.resume.MTL:"), "{credential}");
    // Her join reaches the core with the agent's next report (within 50 ms of it): a session
    // younger than that dies with its agent. Two seconds is forty times that.
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(conn);
    drop(parts);

    sandbox.restart_agent("MTL", Duration::ZERO).await.expect("MTL restarts");

    let mallory = resume_as(&roots, gateway_addr, hello("mallory"), &credential).await;
    let forged = credential.replacen(&format!(":{}:", carol.0), &format!(":{}:", carol.0 + 1), 1);
    let forged = resume_as(&roots, gateway_addr, hello("carol"), &forged).await;
    let carol_back = resume_as(&roots, gateway_addr, hello("carol"), &credential).await;
    // Alice's client resumes by itself; she plays on until her entity holds every input her
    // updates acknowledge, well past where she was.
    let until = tokio::time::Instant::now() + Duration::from_secs(40);
    let caught_up = loop {
        let (resumed, acked, applied) = {
            let r = report.lock().expect("report");
            (r.resumed, r.acked, r.applied)
        };
        if resumed >= 1 && acked >= acked_before + 50 && applied == acked {
            break true;
        }
        if tokio::time::Instant::now() > until {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = stop.send(true);
    let _ = task.await;
    let r = report.lock().expect("report").clone();
    use std::sync::atomic::Ordering::Relaxed;
    let refused = |reason: &str| {
        sandbox.agent_stats("MTL").map_or(0, |s| match reason {
            "other_account" => s.resumes_refused_other_account.load(Relaxed),
            _ => s.resumes_refused_invalid.load(Relaxed),
        })
    };
    let (other_account, invalid) = (refused("other_account"), refused("invalid"));
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(mallory, Err(horizon_proto::ErrorCode::Unauthorized), "another account's");
    assert_eq!(forged, Err(horizon_proto::ErrorCode::Unauthorized), "forged");
    assert_eq!((other_account, invalid), (1, 1), "each refusal counted by reason");
    match carol_back {
        Ok(gateway::Reply::Joined { player, resume, .. }) => {
            assert_eq!(player, carol, "the same player");
            assert!(resume.starts_with("hz1.resume.MTL:"), "a fresh credential: {resume}");
        }
        other => panic!("carol did not resume: {other:?}"),
    }
    assert_eq!(r.player, Some(alice), "alice is still alice: {r:?}");
    assert_eq!(r.sessions_ended, 0, "no session ended: {r:?}");
    assert!(r.resumed >= 1 && r.connections_lost >= 1, "{r:?}");
    assert!(caught_up, "alice's entity never held every acknowledged input: {r:?}");
    assert_eq!(r.applied_twice, 0, "{r:?}");
    assert!(r.error.is_none(), "{r:?}");
}
