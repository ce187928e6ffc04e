//! The WebSocket link to today's server: one thread running the connection (a reader and a
//! writer task on a small runtime of its own), and what the [`Game`](horizon_sdk::Game) calls
//! share with it. Nothing here blocks a caller: a frame to send is queued (a byte budget
//! bounds the queue: a server that stops reading breaks the link rather than grow it), and a
//! report read is kept, the newest per zone, until the next tick takes it.
//!
//! The fence today's servers lack is kept here: the zones written *now* (their ids name the
//! bubble and the epoch); a `players/position` report of any other zone, an older assignment's
//! or a released one's, is refused and counted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use horizon_sdk::EngineLoad;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::message::{self, Reported, Said, Zone};
use crate::game::Broken;
use crate::link::LinkError;

/// The largest frame taken from today's server.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// The most bytes waiting to be written to today's server.
pub const MAX_QUEUED_BYTES: usize = 8 << 20;

/// What today's server last said of itself (`serverinfo`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerInfo {
    pub tps: f32,
    pub chunks_loading: u32,
    pub players: u32,
}

/// What the link counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkCounts {
    /// `players/position` reports of a zone not written now (an older epoch's, a released one's).
    pub reports_refused: u64,
    /// Frames of today's server that could not be parsed.
    pub frames_refused: u64,
}

enum Out {
    Text(String),
    Close,
}

/// The link to one of today's servers. Cheap to clone; every clone is the same link.
#[derive(Clone)]
pub struct TodayLink {
    shared: Arc<Shared>,
    out: mpsc::UnboundedSender<Out>,
}

impl std::fmt::Debug for TodayLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TodayLink").field("counts", &self.counts()).finish()
    }
}

/// A zone written now, with the server's newest report of it not taken yet.
struct Written {
    zone: Zone,
    report: Option<Vec<Reported>>,
}

struct Shared {
    queued: AtomicUsize,
    /// The zones written now, by id.
    live: Mutex<BTreeMap<String, Written>>,
    info: Mutex<Option<ServerInfo>>,
    reports_refused: AtomicU64,
    frames_refused: AtomicU64,
    /// When the server last sent a frame.
    last_heard: Mutex<Instant>,
    broken: Broken,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data whole: a panic elsewhere does not spoil it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TodayLink {
    /// Dials today's server at `url` (`ws://127.0.0.1:8980`), again until `within` has passed
    /// (it may still be starting). `broken` is called when the link ends or breaks.
    pub fn connect(url: &str, within: Duration, broken: Broken) -> Result<TodayLink, String> {
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            live: Mutex::new(BTreeMap::new()),
            info: Mutex::new(None),
            reports_refused: AtomicU64::new(0),
            frames_refused: AtomicU64::new(0),
            last_heard: Mutex::new(Instant::now()),
            broken,
        });
        let (out, out_rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let url = url.to_owned();
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("today-link".to_owned())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
                match rt {
                    Ok(rt) => rt.block_on(run(url, within, thread_shared, out_rx, ready_tx)),
                    Err(e) => {
                        drop(ready_tx.send(Err(format!("cannot start the link's runtime: {e}"))))
                    }
                }
            })
            .map_err(|e| format!("cannot start the link's thread: {e}"))?;
        let connected =
            ready_rx.recv().unwrap_or_else(|_| Err("the link's thread ended".to_owned()));
        connected.map(|()| TodayLink { shared, out })
    }

    /// Queues one frame for today's server.
    pub(crate) fn send(&self, text: String) {
        let len = text.len();
        let queued = self.shared.queued.fetch_add(len, Ordering::SeqCst) + len;
        if queued > MAX_QUEUED_BYTES {
            self.shared.queued.fetch_sub(len, Ordering::SeqCst);
            self.shared.broken.report(&LinkError::Protocol(format!(
                "today's server is not reading: {queued} bytes would wait for it"
            )));
            return;
        }
        if self.out.send(Out::Text(text)).is_err() {
            self.shared.queued.fetch_sub(len, Ordering::SeqCst);
        }
    }

    /// `server/prewarm`.
    pub fn prewarm(&self) {
        self.send(message::prewarm());
    }

    /// Writing `zone` starts: it joins the set sent to the server, and its reports count.
    pub(crate) fn start_zone(&self, zone: Zone) {
        let mut live = lock(&self.shared.live);
        live.insert(zone.id.clone(), Written { zone, report: None });
        self.send(message::zones(live.values().map(|w| &w.zone)));
    }

    /// The bubbles carved out of zone `id` changed: the server gets the whole set again.
    pub(crate) fn carve_zone(&self, id: &str, holes: &[horizon_proto::Aabb]) {
        let mut live = lock(&self.shared.live);
        if let Some(w) = live.get_mut(id) {
            w.zone.holes = holes.to_vec();
            self.send(message::zones(live.values().map(|w| &w.zone)));
        }
    }

    /// Writing `id` stops: it leaves the set sent to the server, and its reports are refused
    /// from now on (the lock orders this against the reader).
    pub(crate) fn stop_zone(&self, id: &str) {
        let mut live = lock(&self.shared.live);
        if live.remove(id).is_some() {
            self.send(message::zones(live.values().map(|w| &w.zone)));
        }
    }

    /// The newest report of a zone written now, taken (`None`: none since the last take).
    pub(crate) fn take_report(&self, id: &str) -> Option<Vec<Reported>> {
        lock(&self.shared.live).get_mut(id).and_then(|w| w.report.take())
    }

    /// What the server last said of itself.
    pub fn info(&self) -> Option<ServerInfo> {
        *lock(&self.shared.info)
    }

    pub(crate) fn engine_load(&self) -> Option<EngineLoad> {
        self.info().map(|i| EngineLoad { tps: i.tps, chunks_loading: i.chunks_loading })
    }

    pub fn counts(&self) -> LinkCounts {
        LinkCounts {
            reports_refused: self.shared.reports_refused.load(Ordering::Relaxed),
            frames_refused: self.shared.frames_refused.load(Ordering::Relaxed),
        }
    }

    /// Waits until the server is ready by design.md §9's rule: `tps` at least `min_tps` and
    /// no chunk loading. `Err` tells what it last said.
    pub fn wait_ready(&self, min_tps: f32, within: Duration) -> Result<ServerInfo, String> {
        let deadline = Instant::now() + within;
        loop {
            let info = self.info();
            if let Some(i) = info.filter(|i| i.tps >= min_tps && i.chunks_loading == 0) {
                return Ok(i);
            }
            if Instant::now() >= deadline {
                return Err(match info {
                    Some(i) => format!(
                        "not ready within {} ms: last said tps {}, {} chunks loading",
                        within.as_millis(),
                        i.tps,
                        i.chunks_loading
                    ),
                    None => format!("said no serverinfo within {} ms", within.as_millis()),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How long since the server last said anything (it reports every second).
    pub fn silent_for(&self) -> Duration {
        lock(&self.shared.last_heard).elapsed()
    }

    /// Reports the link broken (a watchdog's finding).
    pub(crate) fn broke(&self, why: String) {
        self.shared.broken.report(&LinkError::Ended(why));
    }

    /// Closes the link (today's server is told by the WebSocket close).
    pub fn close(&self) {
        let _ = self.out.send(Out::Close);
    }
}

async fn run(
    url: String,
    within: Duration,
    shared: Arc<Shared>,
    mut out: mpsc::UnboundedReceiver<Out>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES));
    let deadline = tokio::time::Instant::now() + within;
    let socket = loop {
        match tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), true).await {
            Ok((socket, _)) => break socket,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                let _ = ready.send(Err(format!("cannot reach today's server at {url}: {e}")));
                return;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let _ = ready.send(Ok(()));
    let (mut write, mut read) = socket.split();
    let writer = {
        let shared = shared.clone();
        async move {
            while let Some(item) = out.recv().await {
                match item {
                    Out::Text(text) => {
                        let len = text.len();
                        let sent = write.send(Message::Text(text.into())).await;
                        shared.queued.fetch_sub(len, Ordering::SeqCst);
                        if let Err(e) = sent {
                            return Some(format!("writing to today's server: {e}"));
                        }
                    }
                    Out::Close => {
                        let _ = write.close().await;
                        return None;
                    }
                }
            }
            None
        }
    };
    let reader = async {
        loop {
            match read.next().await {
                Some(Ok(Message::Text(text))) => said(&shared, text.as_str()),
                Some(Ok(Message::Close(_))) | None => {
                    return "today's server closed the link".to_owned();
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return format!("reading from today's server: {e}"),
            }
        }
    };
    let ended = tokio::select! {
        why = writer => why,
        why = reader => Some(why),
    };
    if let Some(why) = ended {
        shared.broken.report(&LinkError::Ended(why));
    }
}

/// One frame from today's server.
fn said(shared: &Shared, text: &str) {
    *lock(&shared.last_heard) = Instant::now();
    match message::parse(text) {
        Ok(Said::Positions { zone, players }) => {
            let mut live = lock(&shared.live);
            match live.get_mut(&zone) {
                Some(written) => written.report = Some(players),
                None => {
                    shared.reports_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(zone, "a report of a zone not written now: refused");
                }
            }
        }
        Ok(Said::Info { tps, chunks_loading, players }) => {
            *lock(&shared.info) = Some(ServerInfo { tps, chunks_loading, players });
        }
        Ok(Said::Other(what)) => tracing::debug!(what, "today's server said something else"),
        Err(why) => {
            shared.frames_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(why, "a frame of today's server refused");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horizon_proto::{Region, WorldId};

    /// A server of today that sends `frames` once the adapter's zone list arrives; or, with no
    /// frames, one that never reads after the handshake.
    fn fake_server(frames: Vec<String>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                listener.set_nonblocking(true).unwrap();
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let (tcp, _) = listener.accept().await.unwrap();
                let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
                if frames.is_empty() {
                    std::future::pending::<()>().await;
                }
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.to_text().unwrap_or_default().contains(r#""event":"zone""#) {
                        for f in &frames {
                            ws.send(Message::Text(f.clone().into())).await.unwrap()
                        }
                    }
                }
            });
        });
        url
    }

    fn report(zone: &str) -> String {
        format!(
            r#"{{"namespace":"players","event":"position","data":{{"zone":"{zone}","players":[{{"id":"1","position":[1,2,3]}}]}}}}"#
        )
    }

    #[test]
    fn reports_of_a_zone_not_written_now_are_refused() {
        let frames = vec![report("7.3"), report("7.4"), "garbage".to_owned(), report("8.1")];
        let url = fake_server(frames);
        let link = TodayLink::connect(&url, Duration::from_secs(5), Broken::new(|_| {})).unwrap();
        let region = Region { world: WorldId(1), bounds: None };
        link.start_zone(Zone { id: "7.4".to_owned(), region, holes: Vec::new() });
        let deadline = Instant::now() + Duration::from_secs(5);
        while link.counts().reports_refused < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(link.counts(), LinkCounts { reports_refused: 2, frames_refused: 1 });
        let taken = link.take_report("7.4").expect("the written zone's report is kept");
        assert_eq!(taken[0].position, [1.0, 2.0, 3.0]);
        assert_eq!(link.take_report("7.4"), None, "taken once");
        link.stop_zone("7.4");
        assert_eq!(link.take_report("7.4"), None, "a zone stopped has no report");
    }

    #[test]
    fn a_server_that_stops_reading_breaks_the_link_instead_of_growing_the_queue() {
        let url = fake_server(Vec::new());
        let broke = Arc::new(AtomicU64::new(0));
        let b = broke.clone();
        let broken = Broken::new(move |_| {
            b.fetch_add(1, Ordering::SeqCst);
        });
        let link = TodayLink::connect(&url, Duration::from_secs(5), broken).unwrap();
        // Queued faster than any socket drains: the budget trips before memory does.
        let big = "x".repeat(MAX_QUEUED_BYTES / 4 + 1);
        for _ in 0..16 {
            link.send(big.clone());
        }
        assert!(broke.load(Ordering::SeqCst) >= 1, "the link broke");
        assert!(link.shared.queued.load(Ordering::SeqCst) <= MAX_QUEUED_BYTES);
    }
}
