//! The SDK's event loop: one connection to the agent, requests served in order, a tick timer,
//! and the streams of state both ways.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use horizon_proto::server::{Reply, Request, Server};
use horizon_proto::{
    BubbleId, ChannelId, Epoch, ErrorCode, Fault, MAX_CHUNK_BYTES, Name, StateItem,
};
use horizon_transport::tls::{self, Roots};
use horizon_transport::{
    Dial, Error, HelloParams, Inbound, InboundRequest, Limits, Link, LinkEvent, StreamSender,
    client_endpoint,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::game::Game;
use crate::region::{Held, Phase};

/// Items from the agent's streams waiting for the loop. A full queue pauses the reading task,
/// and QUIC flow control pushes back on the agent.
const ITEM_QUEUE: usize = 1024;

/// Where the agent is and who we are.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// This server's name, unique within its site (`mtl-gs-3`).
    pub name: String,
    pub build: String,
    pub agent: SocketAddr,
    /// The agent's site, whose certificate the agent presents.
    pub agent_site: String,
    pub token: String,
    pub tick_ms: u32,
    pub max_players: u32,
    /// Exit when the agent has been unreachable this long (or never answered since start): a
    /// game server never outlives its agent unsupervised (SPEC section 6). Its leases ended
    /// long before (they last 30 s). `None`: wait for the agent forever.
    pub orphan_after: Option<Duration>,
}

/// What the server did, for tests and its own logs.
#[derive(Debug, Default)]
pub struct Counters {
    pub ticks: AtomicU64,
    pub inputs_applied: AtomicU64,
    /// Inputs received again after they were applied, and dropped (a re-send, not an error).
    pub inputs_duplicate: AtomicU64,
    /// Inputs dropped because the pending queue was full (the gateway re-sends them).
    pub inputs_dropped: AtomicU64,
    pub regions: AtomicU64,
}

/// Runs a game server until `stop` turns true. Reconnects to the agent on its own; regions are
/// dropped on a reconnection (the agent re-assigns them from its copies). Ends with
/// [`Error::Lost`] when the agent stayed unreachable for [`ServerOptions::orphan_after`].
pub async fn run<G: Game>(
    opts: ServerOptions,
    roots: Roots,
    game: G,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), Error> {
    let limits = Limits::default();
    let ip = if opts.agent.is_ipv4() {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        std::net::Ipv6Addr::LOCALHOST.into()
    };
    let endpoint = client_endpoint(ip)?;
    let config = tls::client_config(&roots, None, ChannelId::Server, &limits)
        .map_err(|e| Error::Setup(e.to_string()))?;
    let name = Name::new(opts.name.clone()).map_err(|e| Error::Setup(e.to_string()))?;
    let hello = HelloParams::new(name.clone()).with_token(opts.token.clone());
    let parts = Link::<Server>::connect(Dial {
        endpoint,
        addr: opts.agent,
        server_name: horizon_transport::site_dns_name(&opts.agent_site),
        config,
        hello,
        limits,
    });
    let (items_tx, items_rx) = mpsc::channel(ITEM_QUEUE);
    let mut server = GameServer {
        opts,
        game,
        counters,
        link: parts.link,
        regions: HashMap::new(),
        newest: HashMap::new(),
        out: None,
        items_tx,
        load_every: Duration::from_secs(1),
        ticks_this_second: 0,
        tps: 0.0,
    };
    let mut events = parts.events;
    let mut inbound = parts.inbound;
    let mut items_rx = items_rx;
    let mut tick = tokio::time::interval(Duration::from_millis(u64::from(server.opts.tick_ms)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut second = tokio::time::interval(Duration::from_secs(1));
    // Since when the agent has been unreachable (from the start until the first connection).
    let mut alone_since = Some(Instant::now());
    loop {
        if let (Some(since), Some(limit)) = (alone_since, server.opts.orphan_after)
            && since.elapsed() >= limit
        {
            let why = format!(
                "agent {} unreachable for {} s: exiting, a game server never outlives its agent",
                server.opts.agent,
                limit.as_secs()
            );
            tracing::error!(server = %server.opts.name, "{why}");
            return Err(Error::Lost(why));
        }
        tokio::select! {
            _ = stop.changed() => break,
            event = events.recv() => match event {
                Some(LinkEvent::Up(conn)) => {
                    alone_since = None;
                    server.connected(conn).await
                }
                Some(LinkEvent::Down(e)) => {
                    tracing::warn!(server = %server.opts.name, error = %e, "lost the agent");
                    server.out = None;
                    alone_since = Some(Instant::now());
                }
                Some(LinkEvent::Retry { error, wait }) => {
                    tracing::debug!(server = %server.opts.name, %error, ?wait, "agent unreachable");
                }
                None => break,
            },
            Some(inbound) = inbound.recv() => match inbound {
                Inbound::Request(req) => server.request(req).await,
                Inbound::Stream(mut rx) => {
                    let tx = server.items_tx.clone();
                    tokio::spawn(async move {
                        while let Ok(Some(item)) = rx.next().await {
                            if tx.send(item).await.is_err() {
                                break;
                            }
                        }
                    });
                }
                Inbound::Datagram(never) => match never {},
            },
            Some(item) = items_rx.recv() => server.item(item),
            _ = tick.tick() => server.tick().await,
            _ = second.tick() => server.second(),
        }
    }
    if let Some(conn) = server.link.current() {
        conn.close(ErrorCode::ShuttingDown, "game server stopping");
    }
    Ok(())
}

struct GameServer<G: Game> {
    opts: ServerOptions,
    game: G,
    counters: Arc<Counters>,
    link: Link<Server>,
    regions: HashMap<BubbleId, Held<G>>,
    /// The newest epoch seen per bubble: an older assignment is stale.
    newest: HashMap<BubbleId, Epoch>,
    out: Option<StreamSender<Server>>,
    items_tx: mpsc::Sender<StateItem>,
    load_every: Duration,
    ticks_this_second: u32,
    tps: f32,
}

impl<G: Game> GameServer<G> {
    async fn connected(&mut self, conn: horizon_transport::Conn<Server>) {
        self.regions.clear();
        let register = Request::Register {
            server: conn_name(&self.opts.name),
            build: conn_name(&self.opts.build),
            max_players: self.opts.max_players,
        };
        match conn.request(&register).await {
            Ok(Reply::Registered { load_every_ms }) => {
                self.load_every = Duration::from_millis(u64::from(load_every_ms.max(100)));
            }
            Ok(other) => tracing::warn!(?other, "unexpected reply to register"),
            Err(e) => {
                tracing::warn!(error = %e, "registration failed");
                return;
            }
        }
        self.out = conn.open_stream().await.ok();
        if let Err(e) = conn.request(&Request::Ready).await {
            tracing::warn!(error = %e, "ready not acknowledged");
        }
        tracing::info!(server = %self.opts.name, "registered and ready");
    }

    async fn request(&mut self, req: InboundRequest<Server>) {
        let now = Instant::now();
        let reply = self.serve(&req.body, now).await;
        let _ = req.reply(reply).await;
    }

    async fn serve(&mut self, body: &Request, now: Instant) -> Result<Reply, Fault> {
        match body {
            Request::Assign { lease, region, from_snapshot } => {
                let newest = self.newest.entry(lease.bubble).or_insert(lease.epoch);
                if lease.epoch < *newest {
                    return Ok(Reply::Stale { newest: *newest });
                }
                *newest = lease.epoch;
                let lref = horizon_proto::LeaseRef { bubble: lease.bubble, epoch: lease.epoch };
                let until = now + Duration::from_millis(u64::from(lease.ttl_ms));
                let held = Held::new(&self.game, lref, *region, until, *from_snapshot);
                self.regions.insert(lease.bubble, held);
                self.counters.regions.store(self.regions.len() as u64, Ordering::Relaxed);
                tracing::info!(
                    bubble = lease.bubble.0,
                    epoch = lease.epoch.0,
                    standby = from_snapshot,
                    "assigned"
                );
                Ok(Reply::Done)
            }
            Request::Renew { leases, ttl_ms, sent_ago_ms } => {
                let sent =
                    now.checked_sub(Duration::from_millis(u64::from(*sent_ago_ms))).unwrap_or(now);
                let until = sent + Duration::from_millis(u64::from(*ttl_ms));
                for l in leases {
                    if let Some(h) = self.regions.get_mut(&l.bubble).filter(|h| h.lease == *l) {
                        h.renew(until);
                    }
                }
                Ok(Reply::Done)
            }
            Request::Resize { lease, region } => {
                let held = self.held(*lease)?;
                held.region = *region;
                Ok(Reply::Done)
            }
            Request::Join { lease, player, last_applied, state } => {
                let held = self.regions.get_mut(&lease.bubble).filter(|h| h.lease == *lease);
                let held = held.ok_or_else(|| unknown(lease.bubble))?;
                if !held.join(&self.game, *player, *last_applied, &state.0) {
                    tracing::debug!(player = player.0, "join of a player already here: kept as is");
                }
                Ok(Reply::Done)
            }
            Request::Leave { lease, player } => {
                let held = self.regions.get_mut(&lease.bubble).filter(|h| h.lease == *lease);
                let held = held.ok_or_else(|| unknown(lease.bubble))?;
                let (last_applied, state) = held.leave(&self.game, *player).ok_or_else(|| {
                    Fault::new(ErrorCode::Unexpected, format!("player {} is not here", player.0))
                })?;
                Ok(Reply::Left { last_applied, state: horizon_proto::Blob(state) })
            }
            Request::Copy { lease, deltas } => {
                let held = self.regions.get_mut(&lease.bubble).filter(|h| h.lease == *lease);
                let held = held.ok_or_else(|| unknown(lease.bubble))?;
                let chunks = held.snapshot(&self.game, MAX_CHUNK_BYTES, *deltas);
                for chunk in chunks {
                    self.send(StateItem::Snapshot(chunk)).await;
                }
                Ok(Reply::Done)
            }
            Request::Freeze { lease } => {
                let seal = {
                    let held = self.held(*lease)?;
                    if held.phase != Phase::Running {
                        return Err(Fault::new(
                            ErrorCode::Unexpected,
                            "freeze of a region not running",
                        ));
                    }
                    held.seal()
                };
                let tick = seal.tick;
                self.send(StateItem::Seal(seal)).await;
                tracing::info!(bubble = lease.bubble.0, tick = tick.0, "frozen and sealed");
                Ok(Reply::Frozen { tick })
            }
            Request::Release { lease } => {
                let held = self.regions.remove(&lease.bubble).filter(|h| h.lease == *lease);
                self.counters.regions.store(self.regions.len() as u64, Ordering::Relaxed);
                let held = held.ok_or_else(|| unknown(lease.bubble))?;
                Ok(Reply::Released { bubble: held.bubble(), tick: held.tick })
            }
            Request::Regrant { old, lease } => {
                let until = now + Duration::from_millis(u64::from(lease.ttl_ms));
                let lref = horizon_proto::LeaseRef { bubble: lease.bubble, epoch: lease.epoch };
                self.held(*old)?
                    .regrant(lref, until)
                    .map_err(|why| Fault::new(ErrorCode::StaleEpoch, why))?;
                let newest = self.newest.entry(lease.bubble).or_insert(lease.epoch);
                *newest = (*newest).max(lease.epoch);
                tracing::info!(bubble = lease.bubble.0, epoch = lease.epoch.0, "regranted");
                Ok(Reply::Done)
            }
            Request::Register { .. } | Request::Ready | Request::Load { .. } => {
                Err(Fault::new(ErrorCode::Unexpected, "a server request, sent by the agent"))
            }
        }
    }

    fn held(&mut self, lease: horizon_proto::LeaseRef) -> Result<&mut Held<G>, Fault> {
        self.regions
            .get_mut(&lease.bubble)
            .filter(|h| h.lease == lease)
            .ok_or_else(|| unknown(lease.bubble))
    }

    fn item(&mut self, item: StateItem) {
        let now = Instant::now();
        let result = match item {
            StateItem::Inputs(inputs) => {
                let Some(held) = self.regions.get_mut(&inputs.bubble) else { return };
                let done = held.inputs(&self.game, inputs.inputs, now);
                self.count(done);
                Ok(())
            }
            StateItem::Snapshot(s) => match self.regions.get_mut(&s.bubble) {
                Some(held) => held.on_snapshot(&self.game, s),
                None => return,
            },
            StateItem::Delta(d) => match self.regions.get_mut(&d.bubble) {
                Some(held) => held.on_delta(&self.game, d),
                None => return,
            },
            StateItem::Seal(seal) => match self.regions.get_mut(&seal.bubble) {
                Some(held) => {
                    let tick = seal.tick;
                    let r = held.on_seal(&self.game, seal);
                    if r.is_ok() {
                        tracing::info!(
                            bubble = held.bubble().0,
                            tick = tick.0 + 1,
                            "running from the seal"
                        );
                    }
                    r
                }
                None => return,
            },
            StateItem::Update(_) => return,
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "state item refused");
        }
    }

    fn count(&self, done: crate::region::Applied) {
        let c = &self.counters;
        c.inputs_applied.fetch_add(done.applied, Ordering::Relaxed);
        c.inputs_duplicate.fetch_add(done.duplicates, Ordering::Relaxed);
        c.inputs_dropped.fetch_add(done.dropped, Ordering::Relaxed);
    }

    async fn tick(&mut self) {
        let now = Instant::now();
        let mut out = Vec::new();
        for held in self.regions.values_mut() {
            if let Some((update, delta, applied)) = held.step(&self.game, now) {
                self.counters.inputs_applied.fetch_add(applied, Ordering::Relaxed);
                out.push(StateItem::Update(update));
                out.extend(delta.map(StateItem::Delta));
            }
        }
        self.ticks_this_second += 1;
        self.counters.ticks.fetch_add(1, Ordering::Relaxed);
        for item in out {
            self.send(item).await;
        }
    }

    fn second(&mut self) {
        self.tps = self.ticks_this_second as f32;
        self.ticks_this_second = 0;
        let players = self.regions.values().map(Held::players).sum::<usize>() as u32;
        let load = Request::Load { tps: self.tps, players, chunks_loading: 0 };
        let link = self.link.clone();
        if link.current().is_some() {
            tokio::spawn(async move {
                let _ = link.request(&load).await;
            });
        }
    }

    async fn send(&mut self, item: StateItem) {
        let Some(out) = self.out.as_mut() else { return };
        if let Err(e) = out.send(&item).await {
            tracing::warn!(error = %e, "stream to the agent broke");
            self.out = None;
        }
    }
}

fn unknown(bubble: BubbleId) -> Fault {
    Fault::new(ErrorCode::UnknownBubble, format!("bubble {} is not held here", bubble.0))
}

/// A name for the wire, cut to the limit on a character boundary.
fn conn_name(s: &str) -> Name {
    let mut cut = s.len().min(horizon_proto::MAX_NAME_BYTES);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    // At most MAX_NAME_BYTES bytes now, which is all `Name::new` checks.
    Name::new(&s[..cut]).unwrap_or_else(|e| unreachable!("{e}"))
}
