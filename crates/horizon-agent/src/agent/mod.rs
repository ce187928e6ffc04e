//! The agent's event loop. One task owns all state; connections are pumped into it through
//! bounded queues, and anything that waits on another site runs in a spawned task that reports
//! back as an [`Event::Task`]. Each part of the state has its file: [`core_link`] (register,
//! report, renew, the core's orders), [`bubbles`] (what this site simulates, handovers,
//! restores), [`servers`] (the game servers and their updates), [`players`] (the gateway; a
//! player's session logic is sans-IO in `crate::gateway`), [`peers`] (other sites), [`periodic`]
//! (timers). Not yet a sans-IO machine like the core's: handlers still await game servers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use horizon_proto::control::{self, Control};
use horizon_proto::gateway::{self, Gateway};
use horizon_proto::server::{self, Server};
use horizon_proto::transfer::{self, Transfer};
use horizon_proto::{
    Aabb, Blob, BubbleId, ChannelId, Epoch, ErrorCode, Fault, HandoverId, Input, Inputs, Lease,
    LeaseRef, Name, PlayerId, Region, Role, Seq, StateItem, Tick, Update, Vec3, WorldId,
};
use horizon_transport::tls::{self, Identity, Roots};
use horizon_transport::{
    Conn, Dial, HelloParams, Inbound, InboundRequest, Limits, Link, LinkEvent, Listener, Peer,
    SharedToken, SiteCertificate, StreamReceiver, StreamSender, client_endpoint,
};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

mod bubbles;
mod core_link;
mod peers;
mod periodic;
mod players;
mod servers;

use crate::config::AgentConfig;
use crate::driver::ServerDriver;
use crate::gateway::{InputVerdict, PlayerSession, UpdateVerdict};

/// The loop's queue: every connection's traffic passes here. Pumps wait when it is full.
const EVENT_QUEUE: usize = 8192;
/// Items queued per outbound stream (to a server, a player, a peer). Beyond it, updates are
/// dropped (the next tick replaces them) and inputs wait for their re-send.
const STREAM_QUEUE: usize = 2048;
/// Crossings that arrived before the core's `Members`: kept this long, at most this many.
const CROSSING_TTL: Duration = Duration::from_secs(30);
const MAX_CROSSINGS: usize = 4096;
/// How often every running bubble's state is copied to the core (the universe backup).
const BACKUP_EVERY: Duration = Duration::from_secs(10);
/// An order needing a server waits this long for one to be ready (under the core's request
/// timeout), then is refused.
const SERVER_WAIT: Duration = Duration::from_secs(4);
/// A started server that has not registered after this is stopped.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// A restored bubble's server must run (its first update) within this, else the restore is
/// refused and the core fails the bubble over again.
const RESTORE_DEADLINE: Duration = Duration::from_secs(5);
/// How late an update may reach the agent after its lease's end (the hop from the server).
const WRITE_ALLOWANCE: Duration = Duration::from_millis(250);
/// Player ids asked of the core at a time, and the stock below which more are asked for.
const ID_BLOCK: u32 = 4096;
const ID_LOW: u64 = 1024;
/// A player whose connection dropped is kept this long for its client to reconnect and resume.
const RESUME_GRACE: Duration = Duration::from_secs(30);
/// Snapshot chunk size when feeding a restored copy to a server.
const RESTORE_CHUNK: usize = 64 * 1024;

/// Why an agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("TLS material: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("transport: {0}")]
    Transport(#[from] horizon_transport::Error),
    #[error("site name {0:?}: {1}")]
    Name(String, horizon_proto::NameTooLong),
}

/// Live figures of an agent (for tests and the demo).
#[derive(Debug, Default)]
pub struct AgentStats {
    pub players: AtomicU64,
    pub bubbles: AtomicU64,
    pub servers: AtomicU64,
    pub inputs_received: AtomicU64,
    pub inputs_resent: AtomicU64,
    pub inputs_refused: AtomicU64,
    /// Applied inputs forgotten before a stored copy covered them (a player's kept inputs were
    /// at their limit): a restore from the copy could not replay them.
    pub inputs_uncovered_dropped: AtomicU64,
    /// Updates a game server wrote for a bubble after its lease had ended by this agent's
    /// clock (beyond a 250 ms allowance for the hop): I5 seen from the agent, 0 when the
    /// servers stop on time.
    pub writes_after_lease: AtomicU64,
    /// Players who reconnected from the same client and resumed as themselves.
    pub resumes: AtomicU64,
    pub updates_delivered: AtomicU64,
    pub crossings: AtomicU64,
    pub handovers_in: AtomicU64,
}

/// A running agent.
#[derive(Debug)]
pub struct AgentHandle {
    pub site: String,
    pub servers_addr: SocketAddr,
    pub players_addr: SocketAddr,
    pub transfer_addr: SocketAddr,
    pub stats: Arc<AgentStats>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl AgentHandle {
    /// Stops the agent and its game servers, and waits for it.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Starts an agent: binds its three listeners, dials the core, and runs until shut down.
pub async fn start(
    cfg: AgentConfig,
    driver: Box<dyn ServerDriver>,
) -> Result<AgentHandle, AgentError> {
    let site_name = cfg.site.clone();
    let roots = Roots::load(&cfg.ca)?;
    let identity = Identity::load(&cfg.cert, &cfg.key)?;
    let site = Name::new(cfg.site.clone()).map_err(|e| AgentError::Name(cfg.site.clone(), e))?;
    let limits = Limits::default();
    let servers = Listener::<Server>::bind(
        cfg.listen_servers,
        tls::server_config(&identity, None, ChannelId::Server, &limits)?,
        site.clone(),
        Arc::new(SharedToken(cfg.server_token.clone().into())),
        limits.clone(),
    )?;
    let players = Listener::<Gateway>::bind(
        cfg.listen_players,
        tls::server_config(&identity, None, ChannelId::Gateway, &limits)?,
        site.clone(),
        Arc::new(SharedToken(cfg.player_token.clone().into())),
        limits.clone(),
    )?;
    let transfers = Listener::<Transfer>::bind(
        cfg.listen_transfer,
        tls::server_config(&identity, Some(&roots), ChannelId::Transfer, &limits)?,
        site.clone(),
        Arc::new(SiteCertificate),
        limits.clone(),
    )?;
    let (servers_addr, players_addr, transfer_addr) =
        (servers.local_addr()?, players.local_addr()?, transfers.local_addr()?);
    let endpoint = client_endpoint(cfg.listen_transfer.ip())?;
    let core = Link::<Control>::connect(Dial {
        endpoint: endpoint.clone(),
        addr: cfg.core,
        server_name: horizon_transport::site_dns_name(&cfg.core_site),
        config: tls::client_config(&roots, Some(&identity), ChannelId::Control, &limits)?,
        hello: HelloParams::new(site.clone()),
        limits: limits.clone(),
    });
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    let stats = Arc::new(AgentStats::default());
    let (stop, stop_rx) = watch::channel(false);
    pump_link(core.events, core.inbound, events_tx.clone());
    accept_loop(servers, events_tx.clone(), Event::ServerUp);
    accept_loop(players, events_tx.clone(), Event::PlayerUp);
    accept_loop(transfers, events_tx.clone(), |p: Peer<Transfer>| {
        Event::PeerUp(p.conn, Some(p.inbound))
    });
    let agent = Agent {
        site,
        core: core.link,
        registered: false,
        driver,
        next_server: 0,
        starting: HashMap::new(),
        servers: HashMap::new(),
        bubbles: HashMap::new(),
        players: HashMap::new(),
        sessions: HashMap::new(),
        clients: HashMap::new(),
        conn_clients: HashMap::new(),
        player_ids: std::collections::VecDeque::new(),
        asking_ids: false,
        peers: HashMap::new(),
        dialed: HashMap::new(),
        crossings: HashMap::new(),
        awaiting: HashMap::new(),
        mirrors: HashMap::new(),
        pending_prepare: HashMap::new(),
        pending_restore: HashMap::new(),
        waiting: std::collections::VecDeque::new(),
        joins: Vec::new(),
        leaves: Vec::new(),
        backups: None,
        servers_addr,
        endpoint,
        roots,
        identity,
        limits,
        events: events_tx,
        stats: stats.clone(),
        cfg,
    };
    let task = tokio::spawn(agent.run(events_rx, stop_rx));
    Ok(AgentHandle {
        site: site_name,
        servers_addr,
        players_addr,
        transfer_addr,
        stats,
        stop,
        task,
    })
}

/// Everything that reaches the loop.
enum Event {
    Core(LinkEvent<Control>),
    CoreInbound(Inbound<Control>),
    ServerUp(Peer<Server>),
    ServerInbound(Name, u64, Inbound<Server>),
    ServerItem(Name, StateItem),
    ServerGone(Name, u64),
    PlayerUp(Peer<Gateway>),
    PlayerInbound(u64, Inbound<Gateway>),
    PlayerItem(u64, gateway::Item),
    PlayerGone(u64),
    /// A transfer connection to another site: accepted (with its inbound) or dialed.
    PeerUp(Conn<Transfer>, Option<mpsc::Receiver<Inbound<Transfer>>>),
    PeerInbound(Name, Inbound<Transfer>),
    PeerItem(Name, StateItem),
    PeerGone(Name, u64),
    /// A crossing between two bubbles of this site.
    LocalCross(transfer::Request),
    /// An order that waited for a ready server, with when it was received.
    Waited(Instant, InboundRequest<Control>),
    Task(Done),
}

/// Results of spawned work.
enum Done {
    Registered(control::Reply),
    Renewed {
        sent: Instant,
        reply: control::Reply,
    },
    /// A block of player ids from the core (or why not).
    PlayerIds(Result<control::Reply, String>),
    /// A handover source reached its target and may start mirroring.
    SourceOpened {
        handover: HandoverId,
        bubble: BubbleId,
        stream: Result<mpsc::Sender<StateItem>, String>,
    },
}

struct Srv {
    conn: Conn<Server>,
    out: mpsc::Sender<StateItem>,
    ready: bool,
    tps: f32,
    players: u32,
    bubbles: Vec<BubbleId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    /// Target of a handover: fed by the source, starts at the seal.
    Standby {
        handover: HandoverId,
    },
    /// Source of a handover: still simulating until the freeze.
    Leaving {
        handover: HandoverId,
    },
    /// Source of a handover after the freeze: sealed, waiting for the commit. Never runs again.
    Sealed {
        handover: HandoverId,
    },
    /// Restored from a copy (a failover): the server has the copy and its seal; the bubble
    /// runs from the server's first update under the new epoch, which answers the core.
    Restoring,
}

struct Local {
    lease: Lease,
    /// The lease's end by this agent's clock: `ttl_ms` from when the granting renewal was sent
    /// (or the granting order received). Past it the servers have stopped by their own clocks.
    valid_until: Instant,
    /// This site's players in the bubble were told `Reconnecting` since it stopped.
    told_reconnecting: bool,
    /// The acknowledgements of the bubble's last update (its tick): what a copy made after it
    /// includes at least.
    acked_at: Option<(Tick, Vec<(PlayerId, Seq)>)>,
    region: Region,
    /// The bubble's server; when spread over several (SPEC section 4, within a site), the
    /// server of part 0, which takes new players and makes the handover snapshot.
    server: Name,
    members: HashMap<PlayerId, Name>,
    phase: Phase,
    /// Parts 1.. when the bubble is spread over several servers (part 0 is `server`).
    extra: Vec<Name>,
    /// Where each member is simulated while the bubble is spread; absent: `server`.
    holder: HashMap<PlayerId, Name>,
}

impl Local {
    fn new(lease: Lease, region: Region, server: Name, phase: Phase, received: Instant) -> Self {
        Local {
            lease,
            valid_until: received + Duration::from_millis(u64::from(lease.ttl_ms)),
            told_reconnecting: false,
            acked_at: None,
            region,
            server,
            members: HashMap::new(),
            phase,
            extra: Vec::new(),
            holder: HashMap::new(),
        }
    }

    fn server_of(&self, player: PlayerId) -> &Name {
        self.holder.get(&player).unwrap_or(&self.server)
    }

    /// Every server simulating part of the bubble, part 0 first.
    fn servers(&self) -> impl Iterator<Item = &Name> {
        std::iter::once(&self.server).chain(&self.extra)
    }
}

struct Gw {
    conn: Conn<Gateway>,
    out: mpsc::Sender<gateway::Item>,
    role: Role,
    world: WorldId,
    pos: Vec3,
    vel: Vec3,
    position_seq: u32,
    min_rtt_ms: f32,
    /// Inputs, route and acknowledgements: the sans-IO part.
    session: PlayerSession,
    /// The client it joined from (gateway hello: peer and session), which may resume it.
    client: Option<Client>,
    /// Its connection ended at this time; the player is kept [`RESUME_GRACE`] for the same
    /// client to reconnect.
    gone_since: Option<Instant>,
}

/// A player's client as its hello names it: `peer` and the random `session` of its process.
type Client = (Name, u64);

struct PeerLink {
    conn: Conn<Transfer>,
    out: mpsc::Sender<StateItem>,
    rtt_ms: Option<f32>,
    probes_sent: u32,
    probes_back: u32,
}

struct Crossing {
    at: Instant,
    to: BubbleId,
    last_applied: Seq,
    state: Blob,
}

struct Agent {
    cfg: AgentConfig,
    site: Name,
    core: Link<Control>,
    registered: bool,
    driver: Box<dyn ServerDriver>,
    next_server: u32,
    starting: HashMap<String, Instant>,
    servers: HashMap<Name, Srv>,
    bubbles: HashMap<BubbleId, Local>,
    players: HashMap<PlayerId, Gw>,
    sessions: HashMap<u64, PlayerId>,
    /// The player each client joined as: a reconnecting client (same hello `peer` and
    /// `session`) resumes it.
    clients: HashMap<Client, PlayerId>,
    /// The client of each gateway connection (connection id), from its hello.
    conn_clients: HashMap<u64, Client>,
    /// Player ids the core handed this agent and it has not given yet, oldest block first.
    player_ids: std::collections::VecDeque<std::ops::Range<u64>>,
    /// A `PlayerIds` request is on its way.
    asking_ids: bool,
    peers: HashMap<Name, PeerLink>,
    /// Links this agent dialed, kept alive by holding them.
    dialed: HashMap<Name, Link<Transfer>>,
    crossings: HashMap<PlayerId, Crossing>,
    /// Players whose state is on its way from another bubble: player → bubble here.
    awaiting: HashMap<PlayerId, BubbleId>,
    /// Handover sources: the bubble's snapshot, deltas and seal go to the target.
    mirrors: HashMap<BubbleId, (HandoverId, mpsc::Sender<StateItem>)>,
    pending_prepare: HashMap<HandoverId, InboundRequest<Control>>,
    /// Restores waiting for their server's first update, answered then (or refused at the
    /// deadline).
    pending_restore: HashMap<BubbleId, (Instant, InboundRequest<Control>)>,
    /// Orders waiting for a ready server, oldest first.
    waiting: std::collections::VecDeque<(Instant, InboundRequest<Control>)>,
    joins: Vec<control::PlayerSample>,
    leaves: Vec<PlayerId>,
    /// The universe backup stream to the core (opened at each registration).
    backups: Option<mpsc::Sender<control::Backup>>,
    /// Where this agent's game servers connect.
    servers_addr: SocketAddr,
    endpoint: quinn::Endpoint,
    roots: Roots,
    identity: Identity,
    limits: Limits,
    events: mpsc::Sender<Event>,
    stats: Arc<AgentStats>,
}

impl Agent {
    async fn run(mut self, mut events: mpsc::Receiver<Event>, mut stop: watch::Receiver<bool>) {
        let mut report = tokio::time::interval(Duration::from_millis(self.cfg.report_ms));
        let mut renew = tokio::time::interval(Duration::from_millis(self.cfg.renew_ms));
        let mut housekeeping = tokio::time::interval(Duration::from_millis(200));
        let mut probe = tokio::time::interval(Duration::from_secs(1));
        let mut backup = tokio::time::interval(BACKUP_EVERY);
        for t in [&mut report, &mut renew, &mut housekeeping, &mut probe, &mut backup] {
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        }
        self.top_up_pool();
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                Some(event) = events.recv() => self.event(event).await,
                _ = report.tick() => self.report(),
                _ = renew.tick() => self.renew(),
                _ = housekeeping.tick() => self.housekeeping(),
                _ = probe.tick() => self.probe(),
                _ = backup.tick() => self.backup(),
            }
        }
        tracing::info!(site = %self.site, "agent stopping");
        self.driver.stop_all();
        for gw in self.players.values() {
            gw.conn.close(ErrorCode::ShuttingDown, "agent stopping");
        }
        if let Some(conn) = self.core.current() {
            conn.close(ErrorCode::ShuttingDown, "agent stopping");
        }
    }

    async fn event(&mut self, event: Event) {
        match event {
            Event::Core(LinkEvent::Up(conn)) => self.register(conn),
            Event::Core(LinkEvent::Down(e)) => {
                tracing::warn!(site = %self.site, error = %e, "lost the core");
                self.registered = false;
            }
            Event::Core(LinkEvent::Retry { error, wait }) => {
                tracing::debug!(site = %self.site, %error, ?wait, "core unreachable");
            }
            Event::CoreInbound(Inbound::Request(req)) => {
                self.core_request(req, Instant::now()).await
            }
            Event::Waited(received, req) => self.core_request(req, received).await,
            Event::CoreInbound(Inbound::Stream(_) | Inbound::Datagram(_)) => {}
            Event::ServerUp(peer) => self.server_up(peer),
            Event::ServerInbound(name, id, inbound) => self.server_inbound(name, id, inbound),
            Event::ServerItem(name, item) => self.server_item(&name, item),
            Event::ServerGone(name, id) => self.server_gone(name, id),
            Event::PlayerUp(peer) => self.player_up(peer),
            Event::PlayerInbound(session, inbound) => self.player_inbound(session, inbound),
            Event::PlayerItem(session, item) => self.player_item(session, item),
            Event::PlayerGone(session) => self.player_gone(session),
            Event::PeerUp(conn, inbound) => self.peer_up(conn, inbound),
            Event::PeerInbound(site, inbound) => self.peer_inbound(site, inbound).await,
            Event::PeerItem(site, item) => self.peer_item(&site, item),
            Event::PeerGone(site, id) => {
                if self.peers.get(&site).is_some_and(|p| p.conn.id() == id) {
                    self.peers.remove(&site);
                    tracing::warn!(site = %self.site, peer = %site, "transfer link down");
                }
            }
            Event::LocalCross(req) => {
                let _ = self.peer_request(&req).await;
            }
            Event::Task(done) => self.task_done(done).await,
        }
    }
}

/// The most servers one bubble is spread over.
const MAX_PARTS: usize = 64;

fn unknown(bubble: BubbleId) -> Fault {
    Fault::new(ErrorCode::UnknownBubble, format!("bubble {} is not here", bubble.0))
}

fn name(s: &str) -> Name {
    Name::new(s.chars().take(16).collect::<String>()).unwrap_or_else(|e| unreachable!("{e}"))
}

/// Microseconds on a process-wide monotonic clock (probes compare only our own stamps).
fn now_us() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// A task that owns an outbound stream; the returned queue feeds it.
fn stream_task<C: horizon_proto::Channel>(sender: StreamSender<C>) -> mpsc::Sender<C::Stream>
where
    C::Stream: Send + 'static,
{
    let (tx, rx) = mpsc::channel::<C::Stream>(STREAM_QUEUE);
    tokio::spawn(feed(sender, rx));
    tx
}

/// Opens a stream on `conn` in the background and feeds it from the returned queue.
fn open_stream_task<C: horizon_proto::Channel>(conn: Conn<C>) -> mpsc::Sender<C::Stream>
where
    C::Stream: Send + 'static,
{
    let (tx, rx) = mpsc::channel::<C::Stream>(STREAM_QUEUE);
    tokio::spawn(async move {
        if let Ok(sender) = conn.open_stream().await {
            feed(sender, rx).await;
        }
    });
    tx
}

async fn feed<C: horizon_proto::Channel>(
    mut sender: StreamSender<C>,
    mut rx: mpsc::Receiver<C::Stream>,
) {
    while let Some(item) = rx.recv().await {
        if sender.send(&item).await.is_err() {
            break;
        }
    }
}

/// Forwards one stream's items into the loop, each wrapped by `wrap`, until it ends.
fn forward_stream<C: horizon_proto::Channel>(
    mut rx: StreamReceiver<C>,
    events: mpsc::Sender<Event>,
    wrap: impl Fn(C::Stream) -> Event + Send + 'static,
) {
    tokio::spawn(async move {
        while let Ok(Some(item)) = rx.next().await {
            if events.send(wrap(item)).await.is_err() {
                break;
            }
        }
    });
}

/// Forwards a connection's inbound traffic into the loop — its streams' items through `item`,
/// requests and datagrams through `other` — then `gone` once the connection has ended.
fn pump<C: horizon_proto::Channel>(
    mut inbound: mpsc::Receiver<Inbound<C>>,
    events: mpsc::Sender<Event>,
    item: impl Fn(C::Stream) -> Event + Clone + Send + 'static,
    other: impl Fn(Inbound<C>) -> Event + Send + 'static,
    gone: Event,
) {
    tokio::spawn(async move {
        while let Some(i) = inbound.recv().await {
            match i {
                Inbound::Stream(rx) => forward_stream(rx, events.clone(), item.clone()),
                i => {
                    if events.send(other(i)).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = events.send(gone).await;
    });
}

fn pump_link(
    mut link_events: mpsc::Receiver<LinkEvent<Control>>,
    mut inbound: mpsc::Receiver<Inbound<Control>>,
    events: mpsc::Sender<Event>,
) {
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                e = link_events.recv() => match e { Some(e) => Event::Core(e), None => break },
                i = inbound.recv() => match i { Some(i) => Event::CoreInbound(i), None => break },
            };
            if events.send(event).await.is_err() {
                break;
            }
        }
    });
}

fn accept_loop<C: horizon_proto::Channel>(
    mut listener: Listener<C>,
    events: mpsc::Sender<Event>,
    wrap: impl Fn(Peer<C>) -> Event + Send + 'static,
) {
    tokio::spawn(async move {
        while let Some(peer) = listener.accept().await {
            if events.send(wrap(peer)).await.is_err() {
                break;
            }
        }
        listener.close("agent stopping");
    });
}

/// `lease` with the time since `received` taken off its ttl: the holder counts its lease from
/// when the granting order reached this agent, not from when a server finally took it.
fn remaining(lease: Lease, received: Instant) -> Lease {
    let waited = received.elapsed().as_millis().min(u128::from(lease.ttl_ms)) as u32;
    Lease { ttl_ms: lease.ttl_ms - waited, ..lease }
}
