//! The gateway under load: `cargo bench -p horizon --bench gateway`.
//!
//! N players connect to one agent (PAR) with no emulated access delay, all in one group (one
//! bubble on one game server ticking every 10 ms), each sending an input every 10 ms for the
//! measured window. Figures: inputs per second acknowledged, and the time from sending an
//! input to the first update acknowledging it (p50/p99: the gateway, the game server's tick
//! wait — 5 ms on average — and the way back). Next to it, a raw UDP relay of the same bytes:
//! the same number of clients echoing datagrams of an input's size through a user-space
//! relay at the same rate, round trip p50/p99. Compare ratios within one run (the machine is
//! shared); docs/performance.md keeps the figures.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_types)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use horizon_proto::Role;
use horizon_testkit::bots::{self, Away, BotSpec, Motion};
use horizon_testkit::{Sandbox, SandboxOptions};
use tokio::net::UdpSocket;

const PLAYERS: usize = 40;
const INPUT_EVERY: Duration = Duration::from_millis(10);
const WARMUP: Duration = Duration::from_secs(4);
const MEASURE: Duration = Duration::from_secs(8);

fn quantiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let q =
        |p: f64| v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f64::NAN);
    (q(0.5), q(0.99))
}

async fn through_the_gateway() -> (f64, f64, f64) {
    let dir = std::env::temp_dir().join(format!("horizon-bench-gw-{}", std::process::id()));
    let mut opts =
        SandboxOptions::three_sites(PathBuf::from(env!("CARGO_BIN_EXE_horizon")), dir.clone());
    opts.access_ms = 0.0;
    opts.server_tick_ms = 10;
    let sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(2, Duration::from_secs(30)).await, "servers ready");
    let roots = horizon_transport::tls::Roots::load(&sandbox.ca).unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let running: Vec<_> = (0..PLAYERS)
        .map(|i| {
            let spec = BotSpec {
                name: format!("bench-{i}"),
                site: "PAR".into(),
                gateway: sandbox.gateways["PAR"],
                role: Role::Player,
                world: 1,
                start: [i as f64, 0.0, 0.0],
                motion: Motion::Still,
                join_after: Duration::from_millis(20 * i as u64),
                input_every: INPUT_EVERY,
                afk: Away::Never,
                leave_after: None,
                reconnect_after: None,
                claim: None,
                enters_at: None,
                measure: None,
            };
            bots::spawn(spec, roots.clone(), sandbox.player_tokens.clone(), stop_rx.clone())
        })
        .collect();
    tokio::time::sleep(WARMUP).await;
    let at = |f: &dyn Fn(&bots::BotReport) -> usize| -> Vec<usize> {
        running.iter().map(|(r, _)| f(&r.lock().unwrap())).collect()
    };
    let (acked0, clicks0) = (at(&|r| r.acked as usize), at(&|r| r.click_ms.len()));
    tokio::time::sleep(MEASURE).await;
    let acked: usize =
        running.iter().zip(&acked0).map(|((r, _), a0)| r.lock().unwrap().acked as usize - a0).sum();
    let clicks: Vec<f64> = running
        .iter()
        .zip(&clicks0)
        .flat_map(|((r, _), c0)| r.lock().unwrap().click_ms[*c0..].to_vec())
        .collect();
    stop.send(true).unwrap();
    for (_, task) in running {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    let (p50, p99) = quantiles(clicks);
    (acked as f64 / MEASURE.as_secs_f64(), p50, p99)
}

/// The same traffic shape over a raw UDP relay: each client sends a 64-byte datagram every
/// `INPUT_EVERY` through the relay to an echo server and back.
async fn raw_udp_relay() -> (f64, f64, f64) {
    let echo = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let echo_addr = echo.local_addr().unwrap();
    let e = echo.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = e.recv_from(&mut buf).await {
            let _ = e.send_to(&buf[..n], from).await;
        }
    });
    let relay = horizon_transport::netem::Netem::start(horizon_transport::netem::NetemConfig::new(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        echo_addr,
        Duration::ZERO,
    ))
    .await
    .unwrap();
    let relay_addr = relay.local_addr();
    let deadline = Instant::now() + WARMUP.min(Duration::from_secs(1)) + MEASURE;
    let measure_from = Instant::now() + WARMUP.min(Duration::from_secs(1));
    // Every timestamp counts from one origin, so a round trip is now − sent.
    let origin = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..PLAYERS {
        tasks.push(tokio::spawn(async move {
            let sock = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
            sock.connect(relay_addr).await.unwrap();
            let (tx, rx) = (sock.clone(), sock);
            let sender = tokio::spawn(async move {
                let mut every = tokio::time::interval(INPUT_EVERY);
                while Instant::now() < deadline {
                    every.tick().await;
                    let mut msg = [0u8; 64];
                    let t = origin.elapsed().as_nanos() as u64;
                    msg[..8].copy_from_slice(&t.to_le_bytes());
                    let _ = tx.send(&msg).await;
                }
            });
            let mut rtts = Vec::new();
            let mut buf = [0u8; 128];
            while Instant::now() < deadline {
                let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_millis(200), rx.recv(&mut buf)).await
                else {
                    continue;
                };
                if n < 8 {
                    continue;
                }
                let sent = u64::from_le_bytes(buf[..8].try_into().unwrap());
                if Instant::now() >= measure_from {
                    let rtt_ns = (origin.elapsed().as_nanos() as u64).saturating_sub(sent);
                    rtts.push(rtt_ns as f64 / 1e6);
                }
            }
            let _ = sender.await;
            rtts
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    relay.stop();
    let rate = all.len() as f64 / MEASURE.as_secs_f64();
    let (p50, p99) = quantiles(all);
    (rate, p50, p99)
}

fn main() {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (rate, p50, p99) = rt.block_on(through_the_gateway());
    let (udp_rate, udp_p50, udp_p99) = rt.block_on(raw_udp_relay());
    println!(
        "gateway: {PLAYERS} players, an input every {} ms each, {} s measured",
        INPUT_EVERY.as_millis(),
        MEASURE.as_secs()
    );
    println!(
        "  through the agent: {rate:.0} inputs/s acknowledged; input → ack p50 {p50:.2} ms, p99 {p99:.2} ms"
    );
    println!(
        "  raw UDP relay:     {udp_rate:.0} echoes/s; round trip p50 {udp_p50:.3} ms, p99 {udp_p99:.3} ms"
    );
}
