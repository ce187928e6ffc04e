//! Transport figures on loopback, each next to its baseline in the same run (compare ratios;
//! absolute numbers depend on the machine):
//! - control round trip: a typed request over QUIC (mutual TLS, one stream per request) vs a raw
//!   UDP echo;
//! - bulk state transfer: snapshot chunks over one QUIC stream vs a plain TCP copy of the same
//!   bytes.
//!
//! `cargo bench -p horizon-transport --bench transport` (add `-- --quick` for a short run).
#![allow(clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use horizon_proto::control::{self, Control};
use horizon_proto::transfer::Transfer;
use horizon_proto::{Blob, BubbleId, Epoch, MAX_CHUNK_BYTES, Name, Snapshot, Tick};
use horizon_transport::tls::{DevCa, client_config, server_config};
use horizon_transport::{
    Dial, HelloParams, Inbound, Limits, Link, LinkEvent, Listener, SiteCertificate,
    client_endpoint, site_dns_name,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn loopback() -> SocketAddr {
    (Ipv4Addr::LOCALHOST, 0).into()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Sites {
    ca: DevCa,
    limits: Limits,
}

impl Sites {
    fn listener<C: horizon_proto::Channel>(&self) -> Listener<C> {
        let config = server_config(
            &self.ca.identity("PAR").unwrap(),
            Some(&self.ca.roots().unwrap()),
            C::ID,
            &self.limits,
        )
        .unwrap();
        Listener::bind(
            loopback(),
            config,
            Name::new("PAR").unwrap(),
            Arc::new(SiteCertificate),
            self.limits.clone(),
            horizon_transport::TransportStats::default(),
        )
        .unwrap()
    }

    async fn link<C: horizon_proto::Channel>(&self, addr: SocketAddr) -> Link<C> {
        let config = client_config(
            &self.ca.roots().unwrap(),
            Some(&self.ca.identity("MTL").unwrap()),
            C::ID,
            &self.limits,
        )
        .unwrap();
        let mut parts = Link::<C>::connect(Dial {
            endpoint: client_endpoint(Ipv4Addr::LOCALHOST.into()).unwrap(),
            addrs: vec![addr.into()],
            server_name: site_dns_name("PAR"),
            config,
            hello: HelloParams::new(Name::new("MTL").unwrap()),
            limits: self.limits.clone(),
            stats: horizon_transport::TransportStats::default(),
        });
        let Some(LinkEvent::Up(_)) = parts.events.recv().await else {
            panic!("link did not come up")
        };
        // Keep draining so the link never pauses on a full event queue.
        tokio::spawn(async move { while parts.events.recv().await.is_some() {} });
        parts.link
    }
}

async fn quic_round_trips(sites: &Sites, n: usize) -> Vec<Duration> {
    let mut listener = sites.listener::<Control>();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Some(mut peer) = listener.accept().await {
            tokio::spawn(async move {
                while let Some(Inbound::Request(request)) = peer.inbound.recv().await {
                    let control::Request::Renew { leases } = &request.body else { continue };
                    let reply = control::Reply::Renewed {
                        ttl_ms: 30_000,
                        granted: leases.clone(),
                        refused: vec![],
                    };
                    let _ = request.reply(Ok(reply)).await;
                }
            });
        }
    });
    let link = sites.link::<Control>(addr).await;
    let body = control::Request::Renew {
        leases: (0..8)
            .map(|b| horizon_proto::LeaseRef { bubble: BubbleId(b), epoch: Epoch(1 << 32 | b) })
            .collect(),
    };
    for _ in 0..200 {
        link.request(&body).await.unwrap();
    }
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        link.request(&body).await.unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    times
}

async fn udp_round_trips(n: usize) -> Vec<Duration> {
    let server = tokio::net::UdpSocket::bind(loopback()).await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((len, from)) = server.recv_from(&mut buf).await {
            let _ = server.send_to(&buf[..len], from).await;
        }
    });
    let client = tokio::net::UdpSocket::bind(loopback()).await.unwrap();
    client.connect(addr).await.unwrap();
    let payload = [7u8; 100];
    let mut buf = [0u8; 2048];
    for _ in 0..200 {
        client.send(&payload).await.unwrap();
        client.recv(&mut buf).await.unwrap();
    }
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        client.send(&payload).await.unwrap();
        client.recv(&mut buf).await.unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    times
}

async fn quic_bulk(sites: &Sites, total: usize) -> Duration {
    let mut listener = sites.listener::<Transfer>();
    let addr = listener.local_addr().unwrap();
    let link = sites.link::<Transfer>(addr).await;
    let mut peer = listener.accept().await.unwrap();
    let chunks = total / MAX_CHUNK_BYTES;
    let conn = link.current().unwrap();
    let started = Instant::now();
    let writer = tokio::spawn(async move {
        let mut stream = conn.open_stream().await.unwrap();
        let bytes = Blob(vec![0x5a; MAX_CHUNK_BYTES - 64]);
        for index in 0..chunks as u32 {
            let item = horizon_proto::StateItem::Snapshot(Snapshot {
                bubble: BubbleId(1),
                epoch: Epoch(1),
                tick: Tick(1),
                index,
                total: chunks as u32,
                bytes: bytes.clone(),
            });
            stream.send(&item).await.unwrap();
        }
        stream.finish();
    });
    let Some(Inbound::Stream(mut receiver)) = peer.inbound.recv().await else { panic!("a stream") };
    let mut got = 0;
    while receiver.next().await.unwrap().is_some() {
        got += 1;
    }
    let elapsed = started.elapsed();
    writer.await.unwrap();
    let stats = link.current().unwrap().quic().stats();
    eprintln!(
        "  (sender: mtu {} bytes, {} lost of {} packets, {} datagrams in {} send calls)",
        stats.path.current_mtu,
        stats.path.lost_packets,
        stats.path.sent_packets,
        stats.udp_tx.datagrams,
        stats.udp_tx.ios,
    );
    let rx = peer.conn.quic().stats().udp_rx;
    eprintln!("  (receiver: {} datagrams in {} receive calls)", rx.datagrams, rx.ios);
    assert_eq!(got, chunks);
    elapsed
}

async fn tcp_bulk(total: usize) -> Duration {
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reader = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        loop {
            let n = socket.read(&mut buf).await.unwrap();
            if n == 0 {
                return got;
            }
            got += n;
        }
    });
    let started = Instant::now();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let chunk = vec![0x5a; MAX_CHUNK_BYTES];
    for _ in 0..total / MAX_CHUNK_BYTES {
        socket.write_all(&chunk).await.unwrap();
    }
    socket.shutdown().await.unwrap();
    let got = reader.await.unwrap();
    assert_eq!(got, total / MAX_CHUNK_BYTES * MAX_CHUNK_BYTES);
    started.elapsed()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (round_trips, bulk_mib, runs) = if quick { (500, 64, 1) } else { (5000, 512, 5) };
    let dir = std::env::temp_dir().join(format!("horizon-bench-{}", std::process::id()));
    let ca = DevCa::new(&dir);
    ca.create(&["PAR", "MTL"], true).unwrap();
    let sites = Sites { ca, limits: Limits::default() };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let quic = quic_round_trips(&sites, round_trips).await;
        let udp = udp_round_trips(round_trips).await;
        println!("control round trip on loopback ({round_trips} sequential requests)");
        for (name, t) in [("quic request/reply", &quic), ("raw udp echo", &udp)] {
            println!(
                "  {name:<20} p50 {:>7.1} µs  p99 {:>7.1} µs",
                us(percentile(t, 0.5)),
                us(percentile(t, 0.99))
            );
        }
        println!(
            "  ratio p50 quic/udp   {:.1}×",
            us(percentile(&quic, 0.5)) / us(percentile(&udp, 0.5))
        );

        let total = bulk_mib << 20;
        let mbps = |d: Duration| total as f64 / d.as_secs_f64() / 1e6;
        // Each QUIC run right next to a TCP run, so a noisy moment hits both of a pair; the
        // ratio quoted is the median of the pairs'.
        let mut pairs: Vec<(f64, f64)> = Vec::with_capacity(runs);
        for _ in 0..runs {
            let quic = mbps(quic_bulk(&sites, total).await);
            let tcp = mbps(tcp_bulk(total).await);
            pairs.push((quic, tcp));
        }
        println!("bulk transfer on loopback ({bulk_mib} MiB, {runs} pairs of runs)");
        for (quic, tcp) in &pairs {
            println!(
                "  quic stream (snapshot chunks) {quic:>6.0} MB/s   plain tcp copy {tcp:>6.0} MB/s   ratio {:.2}",
                quic / tcp
            );
        }
        let mut ratios: Vec<f64> = pairs.iter().map(|(q, t)| q / t).collect();
        ratios.sort_by(f64::total_cmp);
        println!("  ratio quic/tcp, median of pairs {:.2}", ratios[ratios.len() / 2]);
    });
    let _ = std::fs::remove_dir_all(&dir);
}
