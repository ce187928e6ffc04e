//! The mesh with every game server one of today's servers (the GDScript stand-in,
//! tests/fixtures/today-standin, on a real `godot3-server`) behind `horizon godot-adapter`: a
//! Montrealer starts in a Paris zone, is handed over to a server in Montreal, and plays on:
//! their moves (JSON, as today's clients send them) acknowledged in order with none lost,
//! their position carried across the handover, and each zone named by its bubble and epoch.

use std::path::PathBuf;
use std::time::Duration;

use horizon_core::CoreStatus;
use horizon_proto::gateway::{self, Gateway};
use horizon_proto::{Blob, ChannelId, Name, Role, Seq, Vec3, WorldId};
use horizon_testkit::{Sandbox, SandboxOptions};
use horizon_transport::tls::{self, Roots};
use horizon_transport::{Dial, HelloParams, Inbound, Limits, Link, client_endpoint};
use serde_json::Value;
use tokio::time::Instant;

/// The site simulating `player`, from the core's status.
fn site_of(status: &CoreStatus, player: u64) -> Option<String> {
    let bubble = status.players.iter().find(|p| p.player == player)?.bubble?;
    status
        .sites
        .iter()
        .find(|s| s.servers.iter().flatten().any(|srv| srv.bubbles.contains(&bubble)))
        .map(|s| s.site.clone())
}

/// One update as the player saw it.
struct Seen {
    at: Instant,
    acked: u64,
    zone: String,
    x: f64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn today_s_servers_behind_the_adapter_hand_a_player_over_across_sites() {
    let dir = std::env::temp_dir().join(format!("horizon-today-{}", std::process::id()));
    let project =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/today-standin");
    let mut opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    opts.server_args =
        vec!["godot-adapter".into(), "--project".into(), project.display().to_string()];
    opts.warm_pool = 1;
    opts.thresholds.period_ms = 1_000;
    opts.thresholds.dwell_ms = 4_000;
    opts.thresholds.hold_ms = 6_000;
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(1, Duration::from_secs(60)).await, "today's servers ready");
    let engines: Vec<(u32, String)> =
        ["PAR", "MTL", "HKG"].iter().flat_map(|s| sandbox.server_children(s)).collect();
    assert!(
        !engines.is_empty() && engines.iter().all(|(_, c)| c.starts_with("godot3-server")),
        "every adapter runs today's server: {engines:?}"
    );

    // A Parisian joined by three Montrealers, as today's clients: JSON moves, walking east at
    // 1 m/s. The group starts in a Paris zone and moves to Montreal.
    let roots = Roots::load(&sandbox.ca).expect("CA");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let start = |site: &str, join_after_ms| {
        let account = format!("today-{site}-{join_after_ms}");
        let token = sandbox.player_tokens.mint(&account);
        let gateway = (site.to_owned(), sandbox.gateways[site], token);
        tokio::spawn(client(gateway, roots.clone(), join_after_ms, stop_rx.clone()))
    };
    let mut clients = vec![start("PAR", 0)];
    for i in 0..3 {
        clients.push(start("MTL", 3_000 + i));
    }
    let mut host = None;
    let mut sites = Vec::new();
    let end = Instant::now() + Duration::from_secs(40);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some(status) = sandbox.core.status().await else { continue };
        host = host.or_else(|| status.players.iter().map(|p| p.player).min());
        if let Some(site) = host.and_then(|p| site_of(&status, p))
            && sites.last() != Some(&site)
        {
            sites.push(site);
        }
    }
    stop.send(true).expect("clients listening");
    let mut played = Vec::new();
    for c in clients {
        played.push(c.await.expect("client task"));
    }
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(sites.first().map(String::as_str), Some("PAR"), "starts in a Paris zone: {sites:?}");
    assert_eq!(sites.last().map(String::as_str), Some("MTL"), "handed over to Montreal: {sites:?}");
    for (i, (sent, seen)) in played.iter().enumerate() {
        let last = seen.last().unwrap_or_else(|| panic!("client {i}: no update"));
        assert!(
            sent - last.acked < 20,
            "client {i}: acknowledged as sent: {} of {sent}",
            last.acked
        );
        assert!(seen.windows(2).all(|w| w[1].acked >= w[0].acked), "client {i}: acks go back");
        let gap = seen.windows(2).map(|w| w[1].at - w[0].at).max().unwrap_or_default();
        assert!(gap < Duration::from_secs(2), "client {i}: longest freeze {gap:?}");
    }
    // The host's zones in the order they were written, each named by bubble and epoch: a
    // newer epoch on the next server, and the position carried across.
    let (_, seen) = &played[0];
    let mut zones: Vec<(&str, f64, f64)> = Vec::new();
    for s in seen.iter().filter(|s| s.x.is_finite()) {
        match zones.last_mut() {
            Some((z, _, end)) if *z == s.zone => *end = s.x,
            _ => zones.push((&s.zone, s.x, s.x)),
        }
    }
    assert!(zones.len() >= 2, "a zone per server: {zones:?}");
    for w in zones.windows(2) {
        let (before, after) = (w[0], w[1]);
        let epoch = |z: &str| z.split('.').nth(1).and_then(|e| e.parse::<u64>().ok());
        assert!(epoch(after.0) > epoch(before.0), "a newer epoch: {zones:?}");
        assert!((after.1 - before.2).abs() < 2.5, "position carried: {zones:?}");
    }
    let x = seen.last().map_or(0.0, |s| s.x);
    assert!(x > 20.0, "walked on at ~1 m/s: x = {x}");
    eprintln!("today: host's zones {zones:?}, sites {sites:?}");
}

/// A player as today's client plays: joins `site`'s gateway after `join_after_ms`, sends a
/// JSON move every 100 ms until `stop`; what it sent and the updates it saw.
async fn client(
    (site, gateway, token): (String, std::net::SocketAddr, String),
    roots: Roots,
    join_after_ms: u64,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (u64, Vec<Seen>) {
    tokio::time::sleep(Duration::from_millis(join_after_ms)).await;
    let limits = Limits::default();
    let config = tls::client_config(&roots, None, ChannelId::Gateway, &limits).expect("tls");
    let parts = Link::<Gateway>::connect(Dial {
        endpoint: client_endpoint(std::net::Ipv4Addr::LOCALHOST.into()).expect("endpoint"),
        addrs: vec![gateway.into()],
        server_name: horizon_transport::site_dns_name(&site),
        config,
        hello: HelloParams::new(Name::new(format!("today-{site}-{join_after_ms}")).expect("name"))
            .with_token(token),
        limits,
        stats: horizon_transport::TransportStats::default(),
    });
    let conn = parts.link.connected(Duration::from_secs(15)).await.expect("connected");
    let join =
        gateway::Request::Join { role: Role::Player, world: WorldId(1), pos: Vec3::default() };
    let gateway::Reply::Joined { player, .. } = conn.request(&join).await.expect("joined") else {
        panic!("not joined");
    };
    let mut inputs = conn.open_stream().await.expect("input stream");
    let (tx, mut rx) = tokio::sync::mpsc::channel(4096);
    let mut inbound = parts.inbound;
    tokio::spawn(async move {
        while let Some(Inbound::Stream(mut s)) = inbound.recv().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Ok(Some(item)) = s.next().await {
                    let _ = tx.send((Instant::now(), item)).await;
                }
            });
        }
    });
    let me = player.0.to_string();
    let mut seen: Vec<Seen> = Vec::new();
    let mut sent = 0u64;
    let mut every = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = every.tick() => {
                sent += 1;
                let bytes = Blob(br#"{"velocity": [1.0, 0.0, 0.0]}"#.to_vec());
                inputs.send(&gateway::Item::Input { seq: Seq(sent), bytes }).await.expect("input");
            }
            Some((at, item)) = rx.recv() => {
                let gateway::Item::Update { acked, bytes, .. } = item else { continue };
                let view: Value = serde_json::from_slice(&bytes.0).expect("a JSON view");
                let mine = view["players"].as_array().into_iter().flatten()
                    .find(|p| p["id"].as_str() == Some(&me));
                let x = mine.and_then(|p| p["position"][0].as_f64()).unwrap_or(f64::NAN);
                let zone = view["zone"].as_str().unwrap_or_default().to_owned();
                seen.push(Seen { at, acked: acked.0, zone, x });
            }
        }
    }
    conn.close(horizon_proto::ErrorCode::ShuttingDown, "done");
    (sent, seen)
}
