//! The agent's tokio shell under a paused clock, with a fake `ServerDriver`: the machine's
//! timers, the warm pool and the driver's reports go through the real loop (no game server
//! process, no core: its address refuses).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use horizon_agent::{AgentConfig, DriverError, ServerDriver};
use horizon_transport::tls::DevCa;

#[derive(Clone, Default)]
struct Fake {
    /// What the agent asked: "start NAME" / "stop NAME" / "stop all".
    calls: Arc<Mutex<Vec<String>>>,
    /// Servers to report as ended at the next poll.
    ended: Arc<Mutex<Vec<(String, String)>>>,
}

impl ServerDriver for Fake {
    fn start(&mut self, name: &str, _agent: SocketAddr, token: &str) -> Result<(), DriverError> {
        assert!(token.starts_with(&format!("hz1.server.{name}.")), "{token}");
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(format!("start {name}"));
        Ok(())
    }
    fn stop(&mut self, name: &str) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(format!("stop {name}"));
    }
    fn poll_ended(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
    fn stop_all(&mut self) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push("stop all".into());
    }
    fn running(&self) -> usize {
        0
    }
}

fn config(dir: &std::path::Path) -> AgentConfig {
    let ca = DevCa::new(dir);
    ca.create(&["MTL", "PAR"], true).expect("dev certificates");
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    AgentConfig {
        site: "MTL".into(),
        // Nothing listens there: the core stays unreachable.
        core: vec![SocketAddr::from(([127, 0, 0, 1], 9)).into()],
        core_site: "PAR".into(),
        listen_servers: any,
        listen_players: any,
        listen_transfer: any,
        listen_admin: None,
        listen_beacon: Some(any),
        advertise_admin: None,
        advertise_transfer: "127.0.0.1:1".into(),
        ca: ca.ca_cert(),
        cert: ca.site_cert("MTL"),
        key: ca.site_key("MTL"),
        player_keys: {
            let keys = dir.join("player.keys");
            std::fs::write(&keys, horizon_transport::Keyring::generate_file("k1"))
                .expect("a key file");
            keys
        },
        warm_pool: 2,
        max_servers: 8,
        seats_per_server: 60,
        players_per_server: 75,
        server_tick_ms: 33,
        server_program: "/bin/false".into(),
        server_args: vec!["gameserver".into()],
        driver: horizon_agent::DriverChoice::Process,
        peers: BTreeMap::new(),
        report_ms: 1000,
        renew_ms: 5000,
    }
}

#[tokio::test(start_paused = true)]
async fn servers_that_never_register_are_stopped_and_replaced_and_an_exit_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::default();
    let agent = horizon_agent::start(config(dir.path()), Box::new(fake.clone())).await.unwrap();
    let calls = || fake.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(calls(), ["start mtl-gs-0", "start mtl-gs-1"], "the warm pool");
    // They never connect: after 30 s each is stopped, and the pool is topped up again.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after = calls();
    for expected in ["stop mtl-gs-0", "stop mtl-gs-1", "start mtl-gs-2", "start mtl-gs-3"] {
        assert!(after.iter().any(|c| c == expected), "{expected} missing from {after:?}");
    }
    // The driver reports a starting server's exit: it is replaced within a poll.
    fake.ended
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(("mtl-gs-2".into(), "exit status: 1".into()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(calls().iter().any(|c| c == "start mtl-gs-4"), "{:?}", calls());
    agent.shutdown().await;
    assert_eq!(calls().last().map(String::as_str), Some("stop all"));
}

#[tokio::test]
async fn the_probe_beacon_answers_pings_even_while_the_core_is_unreachable() {
    use horizon_proto::beacon::{Ping, Pong};
    let dir = tempfile::tempdir().unwrap();
    let agent = horizon_agent::start(config(dir.path()), Box::new(Fake::default())).await.unwrap();
    let beacon = agent.beacon_addr.expect("listen.beacon is configured");
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(beacon).await.unwrap();
    let mut answered = Vec::new();
    for nonce in 0..3 {
        client.send(&Ping { nonce, client_ns: 7 }.encode()).await.unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(10), client.recv(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        answered.push(Pong::decode(&buf[..n]).expect("a pong").nonce);
    }
    assert_eq!(answered, [0, 1, 2]);
    let pongs = agent.stats.beacon_pongs.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(pongs, 3);
    agent.shutdown().await;
}
