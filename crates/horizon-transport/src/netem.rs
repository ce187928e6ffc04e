//! A user-space WAN emulator: a UDP proxy with per-direction delay, jitter, loss and a
//! partition switch, all changeable while it runs. The kernel here has no `tc netem`; tests and
//! the local mesh put this between sites to get realistic backbone latency (85 / 185 / 225 ms).
//!
//! Clients send to [`Netem::local_addr`]; each client address gets its own socket towards the
//! upstream, so replies find their way back. Packets of one direction keep their order (jitter
//! varies the delay without reordering), and each direction's queue is bounded: beyond
//! `max_queue` packets in flight, packets are dropped and counted, like a router's buffer.
//! A client address keeps its session (an upstream socket and two delay lines) for the life of
//! the proxy; at most `max_sessions` clients are served, later ones are dropped and counted.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How one direction behaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    /// One-way delay added to every packet.
    pub delay: Duration,
    /// Extra delay, uniform in `0..=jitter`, per packet.
    pub jitter: Duration,
    /// Share of packets dropped, 0–1.
    pub loss: f64,
}

impl Shape {
    pub const CLEAN: Shape = Shape { delay: Duration::ZERO, jitter: Duration::ZERO, loss: 0.0 };

    /// Half of `rtt` each way, so a round trip through the proxy takes `rtt`.
    pub fn half_rtt(rtt: Duration) -> Shape {
        Shape { delay: rtt / 2, ..Shape::CLEAN }
    }
}

/// What the proxy did, for tests and the `stats` command.
#[derive(Debug, Default)]
pub struct NetemStats {
    pub forwarded: AtomicU64,
    pub lost: AtomicU64,
    pub partitioned: AtomicU64,
    pub overflowed: AtomicU64,
    pub sessions: AtomicU64,
}

/// How to start a proxy.
#[derive(Clone, Debug)]
pub struct NetemConfig {
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
    /// client → upstream
    pub forward: Shape,
    /// upstream → client
    pub back: Shape,
    pub seed: u64,
    /// Packets in flight per direction per client before drops.
    pub max_queue: usize,
    /// Distinct clients served at once; more are refused (dropped and counted).
    pub max_sessions: usize,
}

impl NetemConfig {
    pub fn new(listen: SocketAddr, upstream: SocketAddr, rtt: Duration) -> Self {
        NetemConfig {
            listen,
            upstream,
            forward: Shape::half_rtt(rtt),
            back: Shape::half_rtt(rtt),
            seed: 0,
            max_queue: 4096,
            max_sessions: 1024,
        }
    }
}

#[derive(Debug)]
struct State {
    forward: Shape,
    back: Shape,
    partitioned: bool,
    rng: fastrand::Rng,
}

/// Changes a running proxy. Cheap to clone.
#[derive(Clone, Debug)]
pub struct NetemHandle {
    state: Arc<Mutex<State>>,
    stats: Arc<NetemStats>,
}

impl NetemHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Plain data behind the lock: usable even after a panic elsewhere.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn set_forward(&self, shape: Shape) {
        self.lock().forward = shape;
    }

    pub fn set_back(&self, shape: Shape) {
        self.lock().back = shape;
    }

    /// Cuts (or restores) both directions: every packet is dropped while partitioned.
    pub fn partition(&self, on: bool) {
        self.lock().partitioned = on;
    }

    pub fn shapes(&self) -> (Shape, Shape, bool) {
        let state = self.lock();
        (state.forward, state.back, state.partitioned)
    }

    pub fn stats(&self) -> &NetemStats {
        &self.stats
    }

    /// When a packet sent now in this direction arrives, or `None` if it is dropped.
    fn admit(&self, forward: bool, now: Instant) -> Option<Instant> {
        let mut state = self.lock();
        if state.partitioned {
            self.stats.partitioned.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let shape = if forward { state.forward } else { state.back };
        if shape.loss > 0.0 && state.rng.f64() < shape.loss {
            self.stats.lost.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let jitter = shape.jitter.mul_f64(state.rng.f64());
        Some(now + shape.delay + jitter)
    }
}

/// A running proxy. Dropping it does not stop it; call [`Netem::stop`] (tests end with their
/// runtime anyway).
#[derive(Debug)]
pub struct Netem {
    local: SocketAddr,
    handle: NetemHandle,
    task: tokio::task::JoinHandle<()>,
}

impl Netem {
    pub async fn start(config: NetemConfig) -> std::io::Result<Netem> {
        let socket = Arc::new(UdpSocket::bind(config.listen).await?);
        let local = socket.local_addr()?;
        let handle = NetemHandle {
            state: Arc::new(Mutex::new(State {
                forward: config.forward,
                back: config.back,
                partitioned: false,
                rng: fastrand::Rng::with_seed(config.seed),
            })),
            stats: Arc::default(),
        };
        let task = tokio::spawn(run(socket, config, handle.clone()));
        Ok(Netem { local, handle, task })
    }

    /// Where clients send.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn handle(&self) -> &NetemHandle {
        &self.handle
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

type Packet = (Instant, Vec<u8>);

async fn run(socket: Arc<UdpSocket>, config: NetemConfig, handle: NetemHandle) {
    let mut sessions: HashMap<SocketAddr, mpsc::Sender<Packet>> = HashMap::new();
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buf).await else { continue };
        let now = Instant::now();
        let session = match sessions.get(&from) {
            Some(tx) if !tx.is_closed() => tx.clone(),
            _ => {
                sessions.retain(|_, tx| !tx.is_closed());
                if sessions.len() >= config.max_sessions {
                    handle.stats.overflowed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                match open_session(&socket, &config, &handle, from).await {
                    Ok(tx) => {
                        handle.stats.sessions.fetch_add(1, Ordering::Relaxed);
                        sessions.insert(from, tx.clone());
                        tx
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "netem: cannot open an upstream socket");
                        continue;
                    }
                }
            }
        };
        let Some(at) = handle.admit(true, now) else { continue };
        if session.try_send((at, buf[..len].to_vec())).is_err() {
            handle.stats.overflowed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One client: a socket towards the upstream, a delay line each way.
async fn open_session(
    listen: &Arc<UdpSocket>,
    config: &NetemConfig,
    handle: &NetemHandle,
    client: SocketAddr,
) -> std::io::Result<mpsc::Sender<Packet>> {
    let bind: SocketAddr =
        if config.upstream.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
    let upstream = Arc::new(UdpSocket::bind(bind).await?);
    upstream.connect(config.upstream).await?;
    let (to_upstream, forward_line) = mpsc::channel::<Packet>(config.max_queue);
    let (to_client, back_line) = mpsc::channel::<Packet>(config.max_queue);
    let stats = handle.stats.clone();
    {
        let upstream = upstream.clone();
        let stats = stats.clone();
        tokio::spawn(deliver(forward_line, stats, move |bytes| {
            let upstream = upstream.clone();
            async move { upstream.send(&bytes).await.map(|_| ()) }
        }));
    }
    {
        let listen = listen.clone();
        tokio::spawn(deliver(back_line, stats.clone(), move |bytes| {
            let listen = listen.clone();
            async move { listen.send_to(&bytes, client).await.map(|_| ()) }
        }));
    }
    let handle = handle.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        loop {
            let len = match upstream.recv(&mut buf).await {
                Ok(len) => len,
                // An ICMP "port unreachable" (the upstream is restarting) does not end the flow:
                // a WAN path outlives the process behind it.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
                Err(_) => return,
            };
            let Some(at) = handle.admit(false, Instant::now()) else { continue };
            match to_client.try_send((at, buf[..len].to_vec())) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    handle.stats.overflowed.fetch_add(1, Ordering::Relaxed);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
    });
    Ok(to_upstream)
}

/// Sends each packet at its time, in order: a packet never overtakes the one before it.
async fn deliver<F, Fut>(mut line: mpsc::Receiver<Packet>, stats: Arc<NetemStats>, send: F)
where
    F: Fn(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<()>>,
{
    let mut last = Instant::now();
    while let Some((at, bytes)) = line.recv().await {
        last = last.max(at);
        tokio::time::sleep_until(last).await;
        if send(bytes).await.is_ok() {
            stats.forwarded.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Applies one line of the `horizon netem` control language to a running proxy and says what
/// it did. Commands: `delay MS [forward|back]`, `jitter MS [forward|back]`,
/// `loss P [forward|back]`, `partition on|off`, `stats`, `help`.
pub fn command(handle: &NetemHandle, line: &str) -> Result<String, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let help = "commands: delay MS [forward|back] · jitter MS [forward|back] · loss P [forward|back] · partition on|off · stats · help";
    let directions = |w: Option<&&str>| -> Result<(bool, bool), String> {
        match w.copied() {
            None => Ok((true, true)),
            Some("forward") => Ok((true, false)),
            Some("back") => Ok((false, true)),
            Some(other) => Err(format!("unknown direction {other:?}: use forward or back")),
        }
    };
    let millis = |w: Option<&&str>| -> Result<Duration, String> {
        let w = w.ok_or("missing milliseconds")?;
        let ms: f64 = w.parse().map_err(|_| format!("{w:?} is not a number of milliseconds"))?;
        if !(0.0..=60_000.0).contains(&ms) {
            return Err(format!("{ms} ms is outside 0..=60000"));
        }
        Ok(Duration::from_secs_f64(ms / 1000.0))
    };
    let apply = |forward: bool, back: bool, change: &dyn Fn(&mut Shape)| {
        let (mut f, mut b, _) = handle.shapes();
        if forward {
            change(&mut f);
            handle.set_forward(f);
        }
        if back {
            change(&mut b);
            handle.set_back(b);
        }
    };
    match words.first().copied() {
        Some("delay") => {
            let ms = millis(words.get(1))?;
            let (f, b) = directions(words.get(2))?;
            apply(f, b, &|s| s.delay = ms);
        }
        Some("jitter") => {
            let ms = millis(words.get(1))?;
            let (f, b) = directions(words.get(2))?;
            apply(f, b, &|s| s.jitter = ms);
        }
        Some("loss") => {
            let w = words.get(1).ok_or("missing loss share")?;
            let p: f64 = w.parse().map_err(|_| format!("{w:?} is not a share between 0 and 1"))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("loss {p} is outside 0..=1"));
            }
            let (f, b) = directions(words.get(2))?;
            apply(f, b, &|s| s.loss = p);
        }
        Some("partition") => match words.get(1).copied() {
            Some("on") => handle.partition(true),
            Some("off") => handle.partition(false),
            _ => return Err("partition needs on or off".to_owned()),
        },
        Some("stats") => {}
        Some("help") | None => return Ok(help.to_owned()),
        Some(other) => return Err(format!("unknown command {other:?}; {help}")),
    }
    Ok(describe(handle))
}

/// One line: both shapes, the partition switch and the counters.
pub fn describe(handle: &NetemHandle) -> String {
    let (f, b, partitioned) = handle.shapes();
    let s = handle.stats();
    let shape = |s: Shape| {
        format!(
            "{:.1}±{:.1} ms loss {:.3}",
            s.delay.as_secs_f64() * 1e3,
            s.jitter.as_secs_f64() * 1e3,
            s.loss
        )
    };
    format!(
        "forward {} · back {} · partition {} · forwarded {} lost {} cut {} overflow {} clients {}",
        shape(f),
        shape(b),
        if partitioned { "on" } else { "off" },
        s.forwarded.load(Ordering::Relaxed),
        s.lost.load(Ordering::Relaxed),
        s.partitioned.load(Ordering::Relaxed),
        s.overflowed.load(Ordering::Relaxed),
        s.sessions.load(Ordering::Relaxed),
    )
}
