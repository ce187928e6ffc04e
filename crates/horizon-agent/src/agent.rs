//! The agent's event loop. One task owns all state; connections are pumped into it through
//! bounded queues, and anything that waits on another site runs in a spawned task that reports
//! back as an [`Event::Task`].

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
        site_key: site_key(&cfg.site),
        core: core.link,
        registered: false,
        driver,
        next_server: 0,
        starting: HashMap::new(),
        servers: HashMap::new(),
        bubbles: HashMap::new(),
        players: HashMap::new(),
        sessions: HashMap::new(),
        next_player: 1,
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
}

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
    site_key: u64,
    core: Link<Control>,
    registered: bool,
    driver: Box<dyn ServerDriver>,
    next_server: u32,
    starting: HashMap<String, Instant>,
    servers: HashMap<Name, Srv>,
    bubbles: HashMap<BubbleId, Local>,
    players: HashMap<PlayerId, Gw>,
    sessions: HashMap<u64, PlayerId>,
    next_player: u64,
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

/// A per-site prefix for player ids, so two agents never hand out the same id.
fn site_key(site: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in site.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h & 0xff_ffff) << 40
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

    // ---- core link ---------------------------------------------------------------------------

    fn register(&mut self, conn: Conn<Control>) {
        let held = self
            .bubbles
            .values()
            .filter(|b| b.phase == Phase::Running)
            .map(|b| control::Held {
                lease: LeaseRef { bubble: b.lease.bubble, epoch: b.lease.epoch },
                tick: Tick(0),
            })
            .collect();
        let register = control::Request::Register {
            site: self.site.clone(),
            build: name(env!("CARGO_PKG_VERSION")),
            transfer_addr: self.cfg.advertise_transfer.clone(),
            servers: self.server_loads(),
            held,
        };
        self.backups = Some(open_stream_task(conn.clone()));
        let events = self.events.clone();
        tokio::spawn(async move {
            match conn.request(&register).await {
                Ok(reply) => {
                    let _ = events.send(Event::Task(Done::Registered(reply))).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "registration failed; retried at reconnection")
                }
            }
        });
    }

    /// Every server's load. The servers of a bubble spread over several are listed in part
    /// order (the core reads each part's tick rate from that order).
    fn server_loads(&self) -> Vec<control::ServerLoad> {
        let part = |name: &Name, bubbles: &[BubbleId]| {
            let b = bubbles.first().and_then(|b| self.bubbles.get(b));
            (bubbles.first().map(|b| b.0), b.and_then(|b| b.servers().position(|s| s == name)))
        };
        let mut loads: Vec<_> = self
            .servers
            .iter()
            .map(|(n, s)| {
                let load = control::ServerLoad {
                    server: n.clone(),
                    tps: s.tps,
                    players: s.players,
                    chunks_loading: 0,
                    ready: s.ready && s.bubbles.is_empty(),
                    bubbles: s.bubbles.clone(),
                };
                (part(n, &s.bubbles), load)
            })
            .collect();
        loads.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.server.cmp(&b.1.server)));
        loads.into_iter().map(|(_, l)| l).collect()
    }

    async fn registered(&mut self, reply: control::Reply) {
        let control::Reply::Registered { keep, stop, peers, generation, .. } = reply else {
            tracing::warn!(?reply, "unexpected reply to register");
            return;
        };
        self.registered = true;
        tracing::info!(site = %self.site, generation, peers = peers.len(), "registered with the core");
        for lease in keep {
            if let Some(b) = self.bubbles.get_mut(&lease.bubble) {
                b.lease = lease;
            }
        }
        for lref in stop {
            self.drop_bubble(lref.bubble).await;
        }
        self.adopt_peers(peers);
        // Full resync of this site's players: a restarted core puts them back where they play.
        let players = self
            .players
            .iter()
            .map(|(&id, gw)| control::PlacedPlayer {
                sample: self.sample(id, gw),
                bubble: gw.session.route().map(|(b, _)| *b),
            })
            .collect();
        self.joins.clear();
        let core = self.core.clone();
        tokio::spawn(async move {
            if let Err(e) = core.request(&control::Request::Players { players }).await {
                tracing::warn!(error = %e, "player resync lost; sent again at the next registration");
            }
        });
    }

    /// Dials the sites this agent must dial (one connection per pair: the site whose name
    /// sorts first dials), at the configured address if any, else the one the core gave.
    fn adopt_peers(&mut self, peers: Vec<control::Peer>) {
        for peer in peers {
            let addr = self
                .cfg
                .peers
                .get(peer.site.as_str())
                .copied()
                .or_else(|| peer.transfer_addr.parse().ok());
            // One connection per pair: the site whose name sorts first dials.
            if self.site.as_str() > peer.site.as_str() || self.dialed.contains_key(&peer.site) {
                continue;
            }
            match addr {
                Some(addr) => self.dial_peer(peer.site, addr),
                None => {
                    tracing::warn!(peer = %peer.site, addr = %peer.transfer_addr, "peer address unusable")
                }
            }
        }
    }

    fn dial_peer(&mut self, site: Name, addr: SocketAddr) {
        let config = match tls::client_config(
            &self.roots,
            Some(&self.identity),
            ChannelId::Transfer,
            &self.limits,
        ) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "transfer client config");
                return;
            }
        };
        let parts = Link::<Transfer>::connect(Dial {
            endpoint: self.endpoint.clone(),
            addr,
            server_name: horizon_transport::site_dns_name(site.as_str()),
            config,
            hello: HelloParams::new(self.site.clone()),
            limits: self.limits.clone(),
        });
        let events = self.events.clone();
        let mut link_events = parts.events;
        let mut inbound = parts.inbound;
        let peer = site.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    e = link_events.recv() => match e {
                        Some(LinkEvent::Up(conn)) => {
                            if events.send(Event::PeerUp(conn, None)).await.is_err() { break }
                        }
                        Some(_) => {}
                        None => break,
                    },
                    i = inbound.recv() => match i {
                        Some(i) => {
                            if events.send(Event::PeerInbound(peer.clone(), i)).await.is_err() { break }
                        }
                        None => break,
                    },
                }
            }
        });
        self.dialed.insert(site, parts.link);
    }

    fn report(&mut self) {
        if !self.registered {
            return;
        }
        let Some(conn) = self.core.current() else { return };
        let players = self.players.iter().map(|(&id, gw)| self.sample(id, gw)).collect();
        let backbone = self
            .peers
            .iter()
            .map(|(site, p)| control::BackboneSample {
                site: site.clone(),
                rtt_ms: p.rtt_ms,
                loss: if p.probes_sent == 0 {
                    0.0
                } else {
                    1.0 - p.probes_back.min(p.probes_sent) as f32 / p.probes_sent as f32
                },
            })
            .collect();
        let report = control::Request::Report {
            joins: std::mem::take(&mut self.joins),
            leaves: std::mem::take(&mut self.leaves),
            players,
            backbone,
            servers: self.server_loads(),
        };
        tokio::spawn(async move {
            if let Err(e) = conn.request(&report).await {
                tracing::warn!(error = %e, "report lost");
            }
        });
    }

    fn sample(&self, id: PlayerId, gw: &Gw) -> control::PlayerSample {
        control::PlayerSample {
            player: id,
            access_rtt_ms: gw.min_rtt_ms,
            role: gw.role,
            world: gw.world,
            pos: gw.pos,
            vel: gw.vel,
        }
    }

    /// One batched renewal for every lease this site runs or stands by for. A handover source
    /// is left out: its epoch is superseded, and it stops at the freeze well within its lease.
    fn renew(&mut self) {
        if !self.registered {
            return;
        }
        let leases: Vec<LeaseRef> = self
            .bubbles
            .values()
            .filter(|b| !matches!(b.phase, Phase::Leaving { .. } | Phase::Sealed { .. }))
            .map(|b| LeaseRef { bubble: b.lease.bubble, epoch: b.lease.epoch })
            .collect();
        if leases.is_empty() {
            return;
        }
        let core = self.core.clone();
        let events = self.events.clone();
        let sent = Instant::now();
        tokio::spawn(async move {
            match core.request(&control::Request::Renew { leases }).await {
                Ok(reply) => {
                    let _ = events.send(Event::Task(Done::Renewed { sent, reply })).await;
                }
                Err(e) => tracing::warn!(error = %e, "renewal lost"),
            }
        });
    }

    async fn renewed(&mut self, sent: Instant, reply: control::Reply) {
        let control::Reply::Renewed { ttl_ms, granted, refused } = reply else { return };
        let sent_ago_ms = sent.elapsed().as_millis().min(u128::from(u32::MAX)) as u32;
        let mut per_server: HashMap<Name, Vec<LeaseRef>> = HashMap::new();
        let until = sent + Duration::from_millis(u64::from(ttl_ms));
        for l in granted {
            if let Some(b) = self.bubbles.get_mut(&l.bubble).filter(|b| b.lease.epoch == l.epoch) {
                b.valid_until = b.valid_until.max(until);
                b.told_reconnecting = false;
                for server in b.servers() {
                    per_server.entry(server.clone()).or_default().push(l);
                }
            }
        }
        for (server, leases) in per_server {
            let Some(srv) = self.servers.get(&server) else { continue };
            let conn = srv.conn.clone();
            let req = server::Request::Renew { leases, ttl_ms, sent_ago_ms };
            tokio::spawn(async move {
                let _ = conn.request(&req).await;
            });
        }
        for l in refused {
            if self.bubbles.get(&l.bubble).is_some_and(|b| b.lease.epoch == l.epoch) {
                tracing::warn!(bubble = l.bubble.0, epoch = l.epoch.0, "renewal refused: stopping");
                self.drop_bubble(l.bubble).await;
            }
        }
    }

    /// One order of the core, received at `received` (earlier than now if it waited for a
    /// server: leases it grants count from then).
    async fn core_request(&mut self, req: InboundRequest<Control>, received: Instant) {
        use control::Request as R;
        if self.servers_needed(&req.body) > self.free_servers() {
            // Served when a server is ready (the pool grows for it), or refused at the deadline.
            self.waiting.push_back((received, req));
            self.top_up_pool();
            return;
        }
        let result = match &req.body {
            R::Create { bubble, region, lease } => {
                self.create(*bubble, *region, *lease, received).await
            }
            R::Restore { lease, region, from, tick, copy } => {
                match self.restore(*lease, *region, *from, *tick, copy, received).await {
                    Ok(None) => Ok(control::Reply::Done),
                    Ok(Some(bubble)) => {
                        // Answered at the server's first update under the new epoch.
                        self.pending_restore.insert(bubble, (received, req));
                        return;
                    }
                    Err(fault) => Err(fault),
                }
            }
            R::Covered { players } => {
                self.covered(players);
                Ok(control::Reply::Done)
            }
            R::Resize { lease, region } => self.resize(*lease, *region).await,
            R::Members { lease, players, departed } => {
                self.members(*lease, players.clone(), departed.clone()).await
            }
            R::Route { routes } => {
                self.route(routes.clone());
                Ok(control::Reply::Done)
            }
            R::Peers { peers } => {
                self.adopt_peers(peers.clone());
                Ok(control::Reply::Done)
            }
            R::Prepare { handover, bubble, source, target, lease, .. } => {
                if target == &self.site {
                    self.prepare_target(*handover, *bubble, source.clone(), *lease).await
                } else if source == &self.site {
                    // The snapshot comes from one server: bring a spread bubble back onto it.
                    if let Err(fault) = self.consolidate(*bubble).await {
                        let _ = req.reply(Err(fault)).await;
                        return;
                    }
                    let (h, b, t) = (*handover, *bubble, target.clone());
                    self.prepare_source(h, b, t, *lease, req);
                    return;
                } else {
                    Err(Fault::new(ErrorCode::Unexpected, "prepare for a handover of other sites"))
                }
            }
            R::Freeze { handover } => self.freeze(*handover).await,
            R::Commit { handover } => {
                let h = *handover;
                let bubble = self.bubble_in(|p| {
                    p == Phase::Leaving { handover: h } || p == Phase::Sealed { handover: h }
                });
                if let Some(bubble) = bubble {
                    self.drop_bubble(bubble).await;
                }
                Ok(control::Reply::Done)
            }
            R::Abort { handover, reason } => {
                tracing::warn!(handover = handover.0, %reason, "handover aborted");
                if let Some(b) = self.bubble_in(|p| p == Phase::Standby { handover: *handover }) {
                    self.drop_bubble(b).await;
                }
                if let Some(b) = self.bubble_in(|p| p == Phase::Leaving { handover: *handover }) {
                    self.mirrors.remove(&b);
                    if let Some(local) = self.bubbles.get_mut(&b) {
                        local.phase = Phase::Running;
                    }
                }
                if let Some(b) = self.bubble_in(|p| p == Phase::Sealed { handover: *handover }) {
                    tracing::error!(
                        bubble = b.0,
                        "abort after the seal: the bubble stays sealed until revoked"
                    );
                }
                Ok(control::Reply::Done)
            }
            R::Regrant { old, lease } => self.regrant(*old, *lease).await,
            R::Parts { lease, parts, players } => {
                self.spread(*lease, parts.clone(), players.clone()).await
            }
            R::Revoke { leases } => {
                for l in leases.clone() {
                    if self.bubbles.get(&l.bubble).is_some_and(|b| b.lease.epoch == l.epoch) {
                        self.drop_bubble(l.bubble).await;
                    }
                }
                Ok(control::Reply::Done)
            }
            R::Register { .. }
            | R::Report { .. }
            | R::Renew { .. }
            | R::Started { .. }
            | R::Lost { .. }
            | R::Players { .. }
            | R::Failed { .. } => {
                Err(Fault::new(ErrorCode::Unexpected, "an agent request, sent by the core"))
            }
        };
        let _ = req.reply(result).await;
    }

    /// How many ready servers an order takes.
    fn servers_needed(&self, body: &control::Request) -> usize {
        use control::Request as R;
        match body {
            R::Create { bubble, .. } => usize::from(!self.bubbles.contains_key(bubble)),
            R::Restore { lease, .. } => usize::from(
                self.bubbles.get(&lease.bubble).is_none_or(|b| b.lease.epoch != lease.epoch),
            ),
            R::Prepare { target, .. } => usize::from(target == &self.site),
            // Nothing for a bubble not held here or a cut beyond the limit: refused at once.
            R::Parts { lease, parts, .. } => match self.bubbles.get(&lease.bubble) {
                Some(b) if parts.len() <= MAX_PARTS => {
                    parts.len().saturating_sub(1 + b.extra.len())
                }
                _ => 0,
            },
            _ => 0,
        }
    }

    fn free_servers(&self) -> usize {
        self.servers.values().filter(|s| s.ready && s.bubbles.is_empty()).count()
    }

    fn bubble_in(&self, pred: impl Fn(Phase) -> bool) -> Option<BubbleId> {
        self.bubbles.iter().find(|(_, b)| pred(b.phase)).map(|(&id, _)| id)
    }

    /// A ready server holding nothing, if any.
    fn free_server(&self) -> Option<Name> {
        let mut free: Vec<&Name> = self
            .servers
            .iter()
            .filter(|(_, s)| s.ready && s.bubbles.is_empty())
            .map(|(n, _)| n)
            .collect();
        free.sort();
        free.first().map(|n| (*n).clone())
    }

    async fn assign(&mut self, lease: Lease, region: Region, standby: bool) -> Result<Name, Fault> {
        let server = self.free_server().ok_or_else(|| {
            Fault::new(ErrorCode::NotReady, format!("no ready server at {}", self.site))
        })?;
        let conn = self.servers[&server].conn.clone();
        let reply = conn
            .request(&server::Request::Assign { lease, region, from_snapshot: standby })
            .await
            .map_err(|e| Fault::new(ErrorCode::NotReady, format!("server {server}: {e}")))?;
        if let server::Reply::Stale { newest } = reply {
            return Err(Fault::new(
                ErrorCode::StaleEpoch,
                format!("server has epoch {}", newest.0),
            ));
        }
        if let Some(s) = self.servers.get_mut(&server) {
            s.bubbles.push(lease.bubble);
        }
        self.top_up_pool();
        Ok(server)
    }

    async fn create(
        &mut self,
        bubble: BubbleId,
        region: Region,
        lease: Lease,
        received: Instant,
    ) -> Result<control::Reply, Fault> {
        if self.bubbles.get(&bubble).is_some_and(|b| b.lease.epoch == lease.epoch) {
            return Ok(control::Reply::Done);
        }
        let lease = remaining(lease, received);
        let server = self.assign(lease, region, false).await?;
        tracing::info!(site = %self.site, bubble = bubble.0, epoch = lease.epoch.0, %server, "bubble created");
        self.bubbles.insert(bubble, Local::new(lease, region, server, Phase::Running, received));
        self.stats.bubbles.store(self.bubbles.len() as u64, Ordering::Relaxed);
        Ok(control::Reply::Done)
    }

    /// A failover: run `lease.bubble` here from its latest copy (SPEC section 6). The server
    /// stands by under the new epoch, takes the copy as a snapshot of the older epoch `from`
    /// and a seal at `tick` (no final delta), and runs from `tick + 1`. Returns the bubble when
    /// the answer waits for the server's first update; `None` when it already runs here.
    async fn restore(
        &mut self,
        lease: Lease,
        region: Region,
        from: Epoch,
        tick: Tick,
        copy: &Blob,
        received: Instant,
    ) -> Result<Option<BubbleId>, Fault> {
        let bubble = lease.bubble;
        match self.bubbles.get(&bubble) {
            Some(b) if b.lease.epoch == lease.epoch => return Ok(None),
            Some(b) if b.lease.epoch > lease.epoch => {
                return Err(Fault::new(ErrorCode::StaleEpoch, "a newer epoch runs here"));
            }
            // An older holder here (a stalled copy of this very bubble): it stops for good.
            Some(_) => self.drop_bubble(bubble).await,
            None => {}
        }
        let lease = remaining(lease, received);
        let empty = copy.0.is_empty();
        let server = self.assign(lease, region, !empty).await?;
        tracing::warn!(site = %self.site, bubble = bubble.0, epoch = lease.epoch.0, tick = tick.0, copy_bytes = copy.0.len(), %server, "restoring a bubble from its copy");
        let phase = if empty { Phase::Running } else { Phase::Restoring };
        self.bubbles.insert(bubble, Local::new(lease, region, server.clone(), phase, received));
        self.stats.bubbles.store(self.bubbles.len() as u64, Ordering::Relaxed);
        if empty {
            return Ok(None);
        }
        let Some(out) = self.servers.get(&server).map(|s| s.out.clone()) else {
            return Err(Fault::new(ErrorCode::NotReady, format!("server {server} is gone")));
        };
        let chunks: Vec<&[u8]> = copy.0.chunks(RESTORE_CHUNK).collect();
        let total = chunks.len() as u32;
        let mut items: Vec<StateItem> = chunks
            .into_iter()
            .enumerate()
            .map(|(i, bytes)| {
                StateItem::Snapshot(horizon_proto::Snapshot {
                    bubble,
                    epoch: from,
                    tick,
                    index: i as u32,
                    total,
                    bytes: Blob(bytes.to_vec()),
                })
            })
            .collect();
        items.push(StateItem::Seal(horizon_proto::Seal {
            bubble,
            epoch: from,
            tick,
            final_delta: Blob::default(),
            last_applied: Vec::new(),
        }));
        // The server's stream queue holds far more than one copy's chunks; a full one means
        // the server is stuck, and the deadline refuses the restore.
        tokio::spawn(async move {
            for item in items {
                if out.send(item).await.is_err() {
                    return;
                }
            }
        });
        Ok(Some(bubble))
    }

    /// The core stored copies that include these players' inputs up to `seq`.
    fn covered(&mut self, players: &[control::CoveredInput]) {
        for c in players {
            if let Some(gw) = self.players.get_mut(&c.player) {
                gw.session.covered(c.seq);
            }
        }
    }

    async fn resize(&mut self, lease: LeaseRef, region: Region) -> Result<control::Reply, Fault> {
        let b = self.bubbles.get_mut(&lease.bubble).ok_or_else(|| unknown(lease.bubble))?;
        b.region = region;
        let lease = LeaseRef { bubble: lease.bubble, epoch: b.lease.epoch };
        if !b.extra.is_empty() {
            // Spread: the parts' boxes follow in the next `Parts`.
            return Ok(control::Reply::Done);
        }
        if let Some(srv) = self.servers.get(&b.server) {
            let conn = srv.conn.clone();
            tokio::spawn(async move {
                let _ = conn.request(&server::Request::Resize { lease, region }).await;
            });
        }
        Ok(control::Reply::Done)
    }

    /// The core's full member list of a bubble: join the new, release the departed.
    async fn members(
        &mut self,
        lease: LeaseRef,
        players: Vec<control::Member>,
        departed: Vec<control::Departure>,
    ) -> Result<control::Reply, Fault> {
        let b = self.bubbles.get_mut(&lease.bubble).ok_or_else(|| unknown(lease.bubble))?;
        let held = LeaseRef { bubble: lease.bubble, epoch: b.lease.epoch };
        let standby = matches!(b.phase, Phase::Standby { .. });
        let server = b.server.clone();
        let old: HashMap<PlayerId, Name> = std::mem::take(&mut b.members);
        b.members = players.iter().map(|m| (m.player, m.home.clone())).collect();
        if standby {
            // The snapshot holds the players; the list only says where their updates go.
            return Ok(control::Reply::Done);
        }
        let Some(conn) = self.servers.get(&server).map(|s| s.conn.clone()) else {
            return Err(Fault::new(ErrorCode::NotReady, format!("server {server} is gone")));
        };
        for m in players.iter().filter(|m| !old.contains_key(&m.player)) {
            if m.crossing {
                match self.crossings.remove(&m.player).filter(|c| c.to == lease.bubble) {
                    Some(c) => self.join(&conn, held, m.player, c.last_applied, c.state).await,
                    None => {
                        self.awaiting.insert(m.player, lease.bubble);
                    }
                }
            } else {
                self.join(&conn, held, m.player, Seq(0), Blob::default()).await;
            }
        }
        let departed: HashMap<PlayerId, control::Departure> =
            departed.into_iter().map(|d| (d.player, d)).collect();
        for player in old.keys().filter(|p| !players.iter().any(|m| m.player == **p)) {
            let holder = match self.bubbles.get_mut(&lease.bubble) {
                Some(b) => b.holder.remove(player),
                None => None,
            };
            let conn = holder.and_then(|h| self.server_conn(&h)).unwrap_or_else(|| conn.clone());
            let left = conn.request(&server::Request::Leave { lease: held, player: *player }).await;
            let Ok(server::Reply::Left { last_applied, state }) = left else { continue };
            if let Some(d) = departed.get(player) {
                self.cross(*player, lease.bubble, d.clone(), last_applied, state);
            }
        }
        Ok(control::Reply::Done)
    }

    async fn join(
        &mut self,
        conn: &Conn<Server>,
        lease: LeaseRef,
        player: PlayerId,
        last_applied: Seq,
        state: Blob,
    ) {
        let req = server::Request::Join { lease, player, last_applied, state };
        if let Err(e) = conn.request(&req).await {
            tracing::warn!(player = player.0, error = %e, "join refused by the server");
        }
    }

    /// Sends a departed player's state to the site that simulates them now.
    fn cross(
        &mut self,
        player: PlayerId,
        from: BubbleId,
        d: control::Departure,
        last_applied: Seq,
        state: Blob,
    ) {
        self.stats.crossings.fetch_add(1, Ordering::Relaxed);
        let req = transfer::Request::Cross {
            player,
            from,
            to: d.to.bubble,
            epoch: d.to.epoch,
            last_applied,
            state,
        };
        if d.site == self.site {
            let events = self.events.clone();
            tokio::spawn(async move {
                let _ = events.send(Event::LocalCross(req)).await;
            });
            return;
        }
        let Some(peer) = self.peers.get(&d.site) else {
            tracing::warn!(player = player.0, site = %d.site, "no link to carry a crossing");
            return;
        };
        let conn = peer.conn.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.request(&req).await {
                tracing::warn!(player = player.0, error = %e, "crossing lost");
            }
        });
    }

    fn route(&mut self, routes: Vec<control::PlayerRoute>) {
        for r in routes {
            let Some(gw) = self.players.get_mut(&r.player) else { continue };
            if gw.session.set_route(r.bubble, r.site) {
                // Every input kept goes to the new holder, which applies each (player, seq)
                // once.
                self.resend(r.player, true);
            }
        }
    }

    async fn prepare_target(
        &mut self,
        handover: HandoverId,
        bubble: BubbleId,
        source: Name,
        lease: Lease,
    ) -> Result<control::Reply, Fault> {
        if self.bubbles.get(&bubble).is_some_and(|b| b.phase == Phase::Standby { handover }) {
            return Ok(control::Reply::Prepared { handover });
        }
        let region = Region { world: WorldId(0), bounds: None };
        let server = self.assign(lease, region, true).await?;
        tracing::info!(site = %self.site, bubble = bubble.0, from = %source, %server, "handover target standing by");
        let local = Local::new(lease, region, server, Phase::Standby { handover }, Instant::now());
        self.bubbles.insert(bubble, local);
        self.stats.handovers_in.fetch_add(1, Ordering::Relaxed);
        Ok(control::Reply::Prepared { handover })
    }

    fn prepare_source(
        &mut self,
        handover: HandoverId,
        bubble: BubbleId,
        target: Name,
        lease: Lease,
        req: InboundRequest<Control>,
    ) {
        if self.bubbles.get(&bubble).is_none_or(|b| b.lease.epoch != lease.epoch) {
            tokio::spawn(req.reply(Err(unknown(bubble))));
            return;
        }
        // The state goes over this site's one transfer connection to the target (the core's
        // `target_addr` is what a fresh link would dial; the link exists once both registered).
        let Some(peer) = self.peers.get(&target) else {
            let fault = Fault::new(ErrorCode::NotReady, format!("no transfer link to {target}"));
            tokio::spawn(req.reply(Err(fault)));
            return;
        };
        self.pending_prepare.insert(handover, req);
        let conn = peer.conn.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let open = transfer::Request::Open { handover, bubble, epoch: lease.epoch };
            let stream = match conn.request(&open).await {
                Ok(transfer::Reply::Accepted { .. }) => match conn.open_stream().await {
                    Ok(sender) => Ok(stream_task(sender)),
                    Err(e) => Err(e.to_string()),
                },
                Ok(other) => Err(format!("unexpected reply {other:?}")),
                Err(e) => Err(e.to_string()),
            };
            let _ = events.send(Event::Task(Done::SourceOpened { handover, bubble, stream })).await;
        });
    }

    async fn source_opened(
        &mut self,
        handover: HandoverId,
        bubble: BubbleId,
        stream: Result<mpsc::Sender<StateItem>, String>,
    ) {
        let Some(req) = self.pending_prepare.remove(&handover) else { return };
        let result = match (stream, self.bubbles.get_mut(&bubble)) {
            (Ok(tx), Some(local)) => {
                local.phase = Phase::Leaving { handover };
                let lease = LeaseRef { bubble, epoch: local.lease.epoch };
                let conn = self.servers.get(&local.server).map(|s| s.conn.clone());
                self.mirrors.insert(bubble, (handover, tx));
                match conn {
                    Some(conn) => match conn
                        .request(&server::Request::Copy { lease, deltas: true })
                        .await
                    {
                        Ok(_) => Ok(control::Reply::Done),
                        Err(e) => Err(Fault::new(ErrorCode::NotReady, format!("snapshot: {e}"))),
                    },
                    None => Err(Fault::new(ErrorCode::NotReady, "the bubble's server is gone")),
                }
            }
            (Err(e), _) => Err(Fault::new(ErrorCode::NotReady, format!("transfer to target: {e}"))),
            (_, None) => Err(unknown(bubble)),
        };
        if result.is_err() {
            self.mirrors.remove(&bubble);
            if let Some(local) = self.bubbles.get_mut(&bubble) {
                local.phase = Phase::Running;
            }
        }
        let _ = req.reply(result).await;
    }

    /// Spreads a bubble over `parts.len()` servers of this site, or back onto fewer, and puts
    /// each member on their part's server (SPEC section 4, within a site).
    async fn spread(
        &mut self,
        lease: LeaseRef,
        parts: Vec<Aabb>,
        players: Vec<control::PartMember>,
    ) -> Result<control::Reply, Fault> {
        if parts.is_empty() || parts.len() > MAX_PARTS {
            let why = format!("a bubble has 1 to {MAX_PARTS} parts, not {}", parts.len());
            return Err(Fault::new(ErrorCode::Unexpected, why));
        }
        let local = self
            .bubbles
            .get(&lease.bubble)
            .filter(|b| b.lease.epoch == lease.epoch)
            .ok_or_else(|| unknown(lease.bubble))?;
        if local.phase != Phase::Running {
            return Err(Fault::new(ErrorCode::Conflict, "parts of a bubble not running here"));
        }
        let world = local.region.world;
        let regions: Vec<Region> = if parts.len() == 1 {
            vec![local.region]
        } else {
            parts.iter().map(|&b| Region { world, bounds: Some(b) }).collect()
        };
        let place: HashMap<PlayerId, usize> =
            players.iter().map(|m| (m.player, (m.part as usize).min(parts.len() - 1))).collect();
        self.regroup(lease.bubble, regions, &place).await?;
        tracing::debug!(site = %self.site, bubble = lease.bubble.0, parts = parts.len(), "bubble spread");
        Ok(control::Reply::Done)
    }

    /// Every player of a spread bubble back on its first server, the others released.
    async fn consolidate(&mut self, bubble: BubbleId) -> Result<(), Fault> {
        let Some(local) = self.bubbles.get(&bubble).filter(|b| !b.extra.is_empty()) else {
            return Ok(());
        };
        let region = local.region;
        let place = local.members.keys().map(|&p| (p, 0)).collect();
        self.regroup(bubble, vec![region], &place).await
    }

    /// One server per region (keeping the current ones in order, taking ready ones for new
    /// parts, releasing the surplus), each member moved to the server of its part: `place`,
    /// else the part it is in when that part remains, else the first.
    async fn regroup(
        &mut self,
        bubble: BubbleId,
        regions: Vec<Region>,
        place: &HashMap<PlayerId, usize>,
    ) -> Result<(), Fault> {
        let local = self.bubbles.get(&bubble).ok_or_else(|| unknown(bubble))?;
        let full = local.lease;
        let lease = LeaseRef { bubble, epoch: full.epoch };
        let mut servers: Vec<Name> = local.servers().cloned().collect();
        while servers.len() < regions.len() {
            let server = self.assign(full, regions[servers.len()], false).await?;
            servers.push(server);
        }
        let local = self.bubbles.get(&bubble).ok_or_else(|| unknown(bubble))?;
        let moves: Vec<(PlayerId, Name, Name)> = local
            .members
            .keys()
            .filter_map(|&p| {
                let from = local.server_of(p).clone();
                let now = servers.iter().position(|s| *s == from).filter(|&i| i < regions.len());
                let part = place.get(&p).copied().or(now).unwrap_or(0);
                let to = servers[part].clone();
                (to != from).then_some((p, from, to))
            })
            .collect();
        for (player, from, to) in moves {
            let (Some(a), Some(b)) = (self.server_conn(&from), self.server_conn(&to)) else {
                continue;
            };
            match a.request(&server::Request::Leave { lease, player }).await {
                Ok(server::Reply::Left { last_applied, state }) => {
                    self.join(&b, lease, player, last_applied, state).await;
                    if let Some(local) = self.bubbles.get_mut(&bubble) {
                        local.holder.insert(player, to);
                    }
                }
                other => {
                    tracing::warn!(player = player.0, ?other, "player not moved between parts")
                }
            }
        }
        for name in servers.drain(regions.len()..) {
            if let Some(srv) = self.servers.get_mut(&name) {
                srv.bubbles.retain(|b| *b != bubble);
                let conn = srv.conn.clone();
                let _ = conn.request(&server::Request::Release { lease }).await;
            }
        }
        for (name, region) in servers.iter().zip(&regions) {
            if let Some(conn) = self.server_conn(name) {
                let _ = conn.request(&server::Request::Resize { lease, region: *region }).await;
            }
        }
        if let Some(local) = self.bubbles.get_mut(&bubble) {
            local.extra = servers[1..].to_vec();
            let main = local.server.clone();
            let extra = &local.extra;
            local.holder.retain(|_, s| *s != main && extra.contains(s));
        }
        self.top_up_pool();
        Ok(())
    }

    fn server_conn(&self, name: &Name) -> Option<Conn<Server>> {
        self.servers.get(name).map(|s| s.conn.clone())
    }

    /// The core abandoned a handover of this bubble before the freeze and re-granted it here
    /// under a newer epoch: whatever was prepared for the old epoch stops (a prepare still
    /// opening its transfer is answered now), the bubble keeps running with its state.
    async fn regrant(&mut self, old: LeaseRef, lease: Lease) -> Result<control::Reply, Fault> {
        let received = Instant::now();
        let local = self
            .bubbles
            .get_mut(&old.bubble)
            .filter(|b| b.lease.epoch == old.epoch)
            .ok_or_else(|| unknown(old.bubble))?;
        if !matches!(local.phase, Phase::Running | Phase::Leaving { .. }) {
            return Err(Fault::new(ErrorCode::Conflict, "regrant of a bubble not running here"));
        }
        let servers: Vec<Name> = local.servers().cloned().collect();
        for server in servers {
            let conn = self
                .server_conn(&server)
                .ok_or_else(|| Fault::new(ErrorCode::NotReady, "the bubble's server is gone"))?;
            match conn.request(&server::Request::Regrant { old, lease }).await {
                Ok(server::Reply::Done) => {}
                Ok(other) => {
                    let why = format!("server replied {other:?}");
                    return Err(Fault::new(ErrorCode::Internal, why));
                }
                Err(e) => return Err(Fault::new(ErrorCode::NotReady, format!("regrant: {e}"))),
            }
        }
        if let Some(local) = self.bubbles.get_mut(&old.bubble) {
            local.phase = Phase::Running;
            local.lease = lease;
            local.valid_until = received + Duration::from_millis(u64::from(lease.ttl_ms));
        }
        self.mirrors.remove(&old.bubble);
        let abandoned: Vec<HandoverId> = self
            .pending_prepare
            .iter()
            .filter(|(_, r)| matches!(&r.body, control::Request::Prepare { bubble, .. } if *bubble == old.bubble))
            .map(|(h, _)| *h)
            .collect();
        for h in abandoned {
            if let Some(req) = self.pending_prepare.remove(&h) {
                let fault = Fault::new(ErrorCode::Conflict, "handover abandoned by the core");
                tokio::spawn(req.reply(Err(fault)));
            }
        }
        tracing::info!(site = %self.site, bubble = old.bubble.0, epoch = lease.epoch.0, "bubble regranted");
        Ok(control::Reply::Done)
    }

    async fn freeze(&mut self, handover: HandoverId) -> Result<control::Reply, Fault> {
        let bubble = self.bubble_in(|p| p == Phase::Leaving { handover }).ok_or_else(|| {
            Fault::new(ErrorCode::Unexpected, format!("no handover {} here", handover.0))
        })?;
        let local = &self.bubbles[&bubble];
        let lease = LeaseRef { bubble, epoch: local.lease.epoch };
        let conn = self
            .servers
            .get(&local.server)
            .map(|s| s.conn.clone())
            .ok_or_else(|| Fault::new(ErrorCode::NotReady, "the bubble's server is gone"))?;
        match conn.request(&server::Request::Freeze { lease }).await {
            Ok(server::Reply::Frozen { tick }) => {
                if let Some(local) = self.bubbles.get_mut(&bubble) {
                    local.phase = Phase::Sealed { handover };
                }
                Ok(control::Reply::Frozen { handover, tick })
            }
            Ok(other) => Err(Fault::new(ErrorCode::Internal, format!("server replied {other:?}"))),
            Err(e) => Err(Fault::new(ErrorCode::NotReady, format!("freeze: {e}"))),
        }
    }

    /// Stops simulating a bubble here (revoked, committed away, refused): the server releases
    /// it and goes back to the pool.
    async fn drop_bubble(&mut self, bubble: BubbleId) {
        let Some(local) = self.bubbles.remove(&bubble) else { return };
        self.mirrors.remove(&bubble);
        self.stats.bubbles.store(self.bubbles.len() as u64, Ordering::Relaxed);
        let lease = LeaseRef { bubble, epoch: local.lease.epoch };
        for name in local.servers() {
            if let Some(srv) = self.servers.get_mut(name) {
                srv.bubbles.retain(|b| *b != bubble);
                let conn = srv.conn.clone();
                let _ = conn.request(&server::Request::Release { lease }).await;
            }
        }
        tracing::info!(site = %self.site, bubble = bubble.0, "bubble released");
    }

    async fn task_done(&mut self, done: Done) {
        match done {
            Done::Registered(reply) => self.registered(reply).await,
            Done::Renewed { sent, reply } => self.renewed(sent, reply).await,
            Done::SourceOpened { handover, bubble, stream } => {
                self.source_opened(handover, bubble, stream).await
            }
        }
    }

    // ---- game servers ------------------------------------------------------------------------

    fn top_up_pool(&mut self) {
        let spare =
            self.servers.values().filter(|s| s.bubbles.is_empty()).count() + self.starting.len();
        // The warm pool, or more while orders wait for several servers at once.
        let demand = self.waiting.iter().map(|(_, r)| self.servers_needed(&r.body)).max();
        let want = self.cfg.warm_pool.max(demand.unwrap_or(0));
        for _ in spare..want {
            let name = format!("{}-gs-{}", self.cfg.site.to_ascii_lowercase(), self.next_server);
            self.next_server += 1;
            match self.driver.start(&name, self.servers_addr) {
                Ok(()) => {
                    self.starting.insert(name, Instant::now());
                }
                Err(e) => {
                    tracing::warn!(site = %self.site, error = %e, "cannot start a game server");
                    break;
                }
            }
        }
    }

    fn server_up(&mut self, peer: Peer<Server>) {
        let name = peer.hello.peer.clone();
        let id = peer.conn.id();
        let conn = peer.conn;
        let (n, m) = (name.clone(), name.clone());
        pump(
            peer.inbound,
            self.events.clone(),
            move |item| Event::ServerItem(n.clone(), item),
            move |i| Event::ServerInbound(m.clone(), id, i),
            Event::ServerGone(name.clone(), id),
        );
        let out = open_stream_task(conn.clone());
        self.starting.remove(name.as_str());
        self.servers.insert(
            name,
            Srv { conn, out, ready: false, tps: 0.0, players: 0, bubbles: Vec::new() },
        );
        self.stats.servers.store(self.servers.len() as u64, Ordering::Relaxed);
    }

    fn server_inbound(&mut self, name: Name, id: u64, inbound: Inbound<Server>) {
        let Inbound::Request(req) = inbound else { return };
        let Some(srv) = self.servers.get_mut(&name).filter(|s| s.conn.id() == id) else { return };
        let reply = match &req.body {
            server::Request::Register { .. } => {
                Ok(server::Reply::Registered { load_every_ms: 1000 })
            }
            server::Request::Ready => {
                srv.ready = true;
                tracing::info!(site = %self.site, server = %name, "game server ready");
                if let Some((received, waiting)) = self.waiting.pop_front() {
                    let events = self.events.clone();
                    tokio::spawn(async move {
                        let _ = events.send(Event::Waited(received, waiting)).await;
                    });
                }
                Ok(server::Reply::Done)
            }
            server::Request::Load { tps, players, .. } => {
                srv.tps = *tps;
                srv.players = *players;
                Ok(server::Reply::Done)
            }
            _ => Err(Fault::new(ErrorCode::Unexpected, "an agent request, sent by a server")),
        };
        tokio::spawn(req.reply(reply));
    }

    fn server_item(&mut self, server: &Name, item: StateItem) {
        match item {
            StateItem::Update(update) => self.fan_out(server, update),
            StateItem::Snapshot(s) if !self.mirrors.contains_key(&s.bubble) => {
                let lease = LeaseRef { bubble: s.bubble, epoch: s.epoch };
                let (tick, index, total, bytes) = (s.tick, s.index, s.total, s.bytes);
                // After a whole copy's last chunk: the inputs it includes (those acknowledged
                // by the update of its tick), so the players' gateways may forget them.
                let covers = self
                    .bubbles
                    .get(&s.bubble)
                    .filter(|b| {
                        b.extra.is_empty() && b.lease.epoch == s.epoch && index + 1 == total
                    })
                    .and_then(|b| b.acked_at.as_ref())
                    .filter(|(at, _)| *at == tick)
                    .map(|(_, acked)| control::Backup::Covers {
                        lease,
                        tick,
                        acked: acked.clone(),
                    });
                let spread = self.bubbles.get(&s.bubble).filter(|b| !b.extra.is_empty());
                let chunk = match spread {
                    None => control::Backup::Chunk { lease, tick, index, total, bytes },
                    Some(local) => {
                        let Some(part) = local.servers().position(|n| n == server) else { return };
                        let parts = 1 + local.extra.len() as u32;
                        let part = part as u32;
                        control::Backup::Part { lease, part, parts, tick, index, total, bytes }
                    }
                };
                if let Some(out) = &self.backups
                    && out.try_send(chunk).is_ok()
                    && let Some(covers) = covers
                {
                    let _ = out.try_send(covers);
                }
            }
            StateItem::Snapshot(ref s) => self.mirror(s.bubble, item.clone()),
            StateItem::Delta(ref d) => self.mirror(d.bubble, item.clone()),
            StateItem::Seal(ref s) => {
                tracing::info!(site = %self.site, bubble = s.bubble.0, tick = s.tick.0, "sealed; seal sent to the target");
                self.mirror(s.bubble, item.clone())
            }
            StateItem::Inputs(_) => {}
        }
    }

    fn mirror(&mut self, bubble: BubbleId, item: StateItem) {
        if let Some((handover, tx)) = self.mirrors.get(&bubble)
            && tx.try_send(item).is_err()
        {
            tracing::warn!(handover = handover.0, "handover stream full or closed");
        }
    }

    /// A server's update goes to every member's home gateway: directly for this site's
    /// players, one copy per other home site.
    fn fan_out(&mut self, server: &Name, update: Update) {
        let Some(local) = self.bubbles.get_mut(&update.bubble) else { return };
        if !local.servers().any(|s| s == server) || update.epoch != local.lease.epoch {
            return;
        }
        if local.extra.is_empty() {
            local.acked_at = Some((update.tick, update.acked.clone()));
        }
        if Instant::now() > local.valid_until + WRITE_ALLOWANCE {
            self.stats.writes_after_lease.fetch_add(1, Ordering::Relaxed);
        }
        if local.phase == Phase::Restoring {
            local.phase = Phase::Running;
            tracing::info!(site = %self.site, bubble = update.bubble.0, tick = update.tick.0, "restored bubble running");
            if let Some((_, req)) = self.pending_restore.remove(&update.bubble) {
                tokio::spawn(req.reply(Ok(control::Reply::Done)));
            }
        }
        if let Phase::Standby { handover } = local.phase {
            // The first update under the new epoch: the target runs. Tell the core.
            local.phase = Phase::Running;
            let started = control::Request::Started {
                handover,
                bubble: update.bubble,
                epoch: update.epoch,
                tick: update.tick,
            };
            tracing::info!(site = %self.site, bubble = update.bubble.0, tick = update.tick.0, "handover target started");
            let core = self.core.clone();
            tokio::spawn(async move {
                if let Err(e) = core.request(&started).await {
                    tracing::warn!(error = %e, "started not delivered");
                }
            });
        }
        let mut remote: Vec<Name> = Vec::new();
        for (player, _) in &update.acked {
            if let Some(home) = local.members.get(player)
                && home != &self.site
                && !remote.contains(home)
            {
                remote.push(home.clone());
            }
        }
        for home in remote {
            if let Some(peer) = self.peers.get(&home) {
                let _ = peer.out.try_send(StateItem::Update(update.clone()));
            }
        }
        let here = self.site.clone();
        self.deliver(&update, &here);
    }

    /// Hands an update from `site` to this site's players it concerns. An update of the
    /// player's bubble under a newer epoch comes from its new holder (epochs fence: only the
    /// current holder's server writes under the newest one): the route follows it — the core
    /// may not be able to tell us (a failover while this site is cut from it) — and every input
    /// kept is sent there, since a restored holder may lack some already applied.
    fn deliver(&mut self, update: &Update, site: &Name) {
        let mut resend = Vec::new();
        let now = Instant::now();
        for (player, acked) in &update.acked {
            let Some(gw) = self.players.get_mut(player) else { continue };
            match gw.session.on_update(update.bubble, update.epoch, *acked, site, now) {
                UpdateVerdict::NotTheirs => continue,
                UpdateVerdict::Deliver { resend_all } => {
                    if resend_all {
                        resend.push(*player);
                    }
                }
            }
            let item = gateway::Item::Update {
                bubble: update.bubble,
                tick: update.tick,
                acked: *acked,
                bytes: update.bytes.clone(),
            };
            if gw.out.try_send(item).is_ok() {
                self.stats.updates_delivered.fetch_add(1, Ordering::Relaxed);
            }
        }
        for player in resend {
            self.resend(player, true);
        }
    }

    fn server_gone(&mut self, name: Name, id: u64) {
        if self.servers.get(&name).is_none_or(|s| s.conn.id() != id) {
            return;
        }
        self.server_lost(&name, "connection closed");
    }

    /// A game server is gone (its process exited, or its connection ended): its bubbles stop
    /// here and the core is told at once, so it restores them from their latest copy on a
    /// spare server of this site, or on another site (SPEC section 6).
    fn server_lost(&mut self, name: &Name, why: &str) {
        let Some(srv) = self.servers.remove(name) else { return };
        self.stats.servers.store(self.servers.len() as u64, Ordering::Relaxed);
        self.driver.stop(name.as_str());
        let mut lost = Vec::new();
        for bubble in srv.bubbles {
            tracing::error!(site = %self.site, server = %name, bubble = bubble.0, %why, "server gone with its bubble");
            let Some(local) = self.bubbles.remove(&bubble) else { continue };
            self.mirrors.remove(&bubble);
            if let Some((_, req)) = self.pending_restore.remove(&bubble) {
                let fault = Fault::new(ErrorCode::NotReady, "the restored bubble's server is gone");
                tokio::spawn(req.reply(Err(fault)));
            }
            let lease = LeaseRef { bubble, epoch: local.lease.epoch };
            if matches!(local.phase, Phase::Running) {
                lost.push(lease);
            }
            for other in local.servers().filter(|s| *s != name) {
                if let Some(srv) = self.servers.get_mut(other) {
                    srv.bubbles.retain(|b| *b != bubble);
                    let conn = srv.conn.clone();
                    tokio::spawn(async move {
                        let _ = conn.request(&server::Request::Release { lease }).await;
                    });
                }
            }
        }
        self.stats.bubbles.store(self.bubbles.len() as u64, Ordering::Relaxed);
        if !lost.is_empty() {
            let core = self.core.clone();
            let request =
                control::Request::Lost { leases: lost, reason: format!("server {name}: {why}") };
            tokio::spawn(async move {
                if let Err(e) = core.request(&request).await {
                    tracing::warn!(error = %e, "lost bubbles not reported (their leases run out at the core)");
                }
            });
        }
        self.top_up_pool();
    }

    // ---- players -----------------------------------------------------------------------------

    fn player_up(&mut self, peer: Peer<Gateway>) {
        // The player exists from its Join; the pump ends when the connection does.
        let session = peer.conn.id();
        pump(
            peer.inbound,
            self.events.clone(),
            move |item| Event::PlayerItem(session, item),
            move |i| Event::PlayerInbound(session, i),
            Event::PlayerGone(session),
        );
    }

    fn player_inbound(&mut self, session: u64, inbound: Inbound<Gateway>) {
        match inbound {
            Inbound::Request(req) => {
                let reply = self.player_request(session, &req);
                tokio::spawn(req.reply(reply));
            }
            Inbound::Datagram(d) => self.player_datagram(session, d),
            Inbound::Stream(_) => {}
        }
    }

    fn player_request(
        &mut self,
        session: u64,
        req: &InboundRequest<Gateway>,
    ) -> Result<gateway::Reply, Fault> {
        match &req.body {
            gateway::Request::Join { role, world, pos } => {
                if let Some(&player) = self.sessions.get(&session) {
                    let acked = self.players.get(&player).map_or(Seq(0), |g| g.session.acked());
                    return Ok(gateway::Reply::Joined {
                        player,
                        home: self.site.clone(),
                        resume_after: Seq(acked.0 + 1),
                    });
                }
                let conn = req.conn().clone();
                let player = PlayerId(self.site_key | self.next_player);
                self.next_player += 1;
                let rtt = conn.stats().rtt.as_secs_f32() * 1000.0;
                let out = open_stream_task(conn.clone());
                let gw = Gw {
                    conn,
                    out,
                    role: *role,
                    world: *world,
                    pos: *pos,
                    vel: Vec3::default(),
                    position_seq: 0,
                    min_rtt_ms: rtt,
                    session: PlayerSession::new(Instant::now()),
                };
                self.joins.push(self.sample(player, &gw));
                self.players.insert(player, gw);
                self.sessions.insert(session, player);
                self.stats.players.store(self.players.len() as u64, Ordering::Relaxed);
                tracing::debug!(site = %self.site, player = player.0, rtt_ms = rtt, "player joined");
                Ok(gateway::Reply::Joined { player, home: self.site.clone(), resume_after: Seq(1) })
            }
            gateway::Request::SetRole { role } => {
                let gw = self.session_player(session)?;
                gw.role = *role;
                Ok(gateway::Reply::Done)
            }
            gateway::Request::Leave => {
                self.player_gone(session);
                Ok(gateway::Reply::Done)
            }
        }
    }

    fn session_player(&mut self, session: u64) -> Result<&mut Gw, Fault> {
        let player = self
            .sessions
            .get(&session)
            .ok_or_else(|| Fault::new(ErrorCode::Unexpected, "join first"))?;
        self.players.get_mut(player).ok_or_else(|| Fault::new(ErrorCode::Unexpected, "join first"))
    }

    fn player_datagram(&mut self, session: u64, d: gateway::Datagram) {
        let Ok(gw) = self.session_player(session) else { return };
        match d {
            gateway::Datagram::Position { seq, world, pos, vel } => {
                if seq > gw.position_seq {
                    gw.position_seq = seq;
                    gw.world = world;
                    gw.pos = pos;
                    gw.vel = vel;
                }
            }
            gateway::Datagram::Ping { nonce, sent_us } => {
                let _ = gw.conn.send_datagram(&gateway::Datagram::Pong { nonce, sent_us });
            }
            gateway::Datagram::Pong { .. } => {}
        }
        // The QUIC estimator is the access RTT; the session minimum is what counts.
        let rtt = gw.conn.stats().rtt.as_secs_f32() * 1000.0;
        if rtt > 0.0 {
            gw.min_rtt_ms = gw.min_rtt_ms.min(rtt);
        }
    }

    fn player_item(&mut self, session: u64, item: gateway::Item) {
        let gateway::Item::Input { seq, bytes } = item else { return };
        let Some(&player) = self.sessions.get(&session) else { return };
        let Some(gw) = self.players.get_mut(&player) else { return };
        self.stats.inputs_received.fetch_add(1, Ordering::Relaxed);
        match gw.session.input(seq, bytes.clone(), Instant::now()) {
            InputVerdict::Duplicate => return,
            InputVerdict::Refused => {
                self.stats.inputs_refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
            InputVerdict::Kept { forgot_applied } => {
                if forgot_applied {
                    // Applied but in no stored copy yet: a restore could no longer replay it.
                    self.stats.inputs_uncovered_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if let Some((bubble, site)) = gw.session.route().cloned() {
            let input = Input { player, seq, bytes };
            self.send_inputs(bubble, &site, vec![input]);
        }
    }

    /// Inputs to whoever simulates `bubble`: this site's server, or another site's agent.
    fn send_inputs(&self, bubble: BubbleId, site: &Name, inputs: Vec<Input>) {
        if site == &self.site {
            self.to_servers(Inputs { bubble, inputs });
        } else if let Some(peer) = self.peers.get(site) {
            let _ = peer.out.try_send(StateItem::Inputs(Inputs { bubble, inputs }));
        }
    }

    /// Inputs of a bubble simulated here, each to the server holding its player.
    fn to_servers(&self, inputs: Inputs) {
        let Some(local) = self.bubbles.get(&inputs.bubble) else { return };
        if local.extra.is_empty() {
            if let Some(srv) = self.servers.get(&local.server) {
                let _ = srv.out.try_send(StateItem::Inputs(inputs));
            }
            return;
        }
        let mut per_server: HashMap<&Name, Vec<Input>> = HashMap::new();
        for input in inputs.inputs {
            per_server.entry(local.server_of(input.player)).or_default().push(input);
        }
        for (name, batch) in per_server {
            if let Some(srv) = self.servers.get(name) {
                let item = Inputs { bubble: inputs.bubble, inputs: batch };
                let _ = srv.out.try_send(StateItem::Inputs(item));
            }
        }
    }

    /// Sends `player`'s inputs again to where they are simulated: with `all`, every input kept
    /// (a new holder, which drops those it applied); else those not acknowledged after
    /// [`RESEND_AFTER`].
    fn resend(&mut self, player: PlayerId, all: bool) {
        let Some(gw) = self.players.get_mut(&player) else { return };
        let Some((bubble, site)) = gw.session.route().cloned() else { return };
        let inputs: Vec<Input> = gw
            .session
            .resend(all, Instant::now())
            .into_iter()
            .map(|(seq, bytes)| Input { player, seq, bytes })
            .collect();
        if inputs.is_empty() {
            return;
        }
        if !all {
            self.stats.inputs_resent.fetch_add(inputs.len() as u64, Ordering::Relaxed);
        }
        self.send_inputs(bubble, &site, inputs);
    }

    fn player_gone(&mut self, session: u64) {
        let Some(player) = self.sessions.remove(&session) else { return };
        if self.players.remove(&player).is_some() {
            self.leaves.push(player);
            self.joins.retain(|j| j.player != player);
        }
        self.stats.players.store(self.players.len() as u64, Ordering::Relaxed);
    }

    // ---- other sites -------------------------------------------------------------------------

    fn peer_up(
        &mut self,
        conn: Conn<Transfer>,
        inbound: Option<mpsc::Receiver<Inbound<Transfer>>>,
    ) {
        let site = conn.peer().clone();
        let id = conn.id();
        if let Some(inbound) = inbound {
            let (a, b) = (site.clone(), site.clone());
            pump(
                inbound,
                self.events.clone(),
                move |item| Event::PeerItem(a.clone(), item),
                move |i| Event::PeerInbound(b.clone(), i),
                Event::PeerGone(site.clone(), id),
            );
        }
        let out = open_stream_task(conn.clone());
        tracing::info!(site = %self.site, peer = %site, "transfer link up");
        self.peers
            .insert(site, PeerLink { conn, out, rtt_ms: None, probes_sent: 0, probes_back: 0 });
    }

    async fn peer_inbound(&mut self, site: Name, inbound: Inbound<Transfer>) {
        match inbound {
            Inbound::Request(req) => {
                let reply = self.peer_request(&req.body).await;
                tokio::spawn(req.reply(reply));
            }
            Inbound::Stream(rx) => {
                forward_stream(rx, self.events.clone(), move |item| {
                    Event::PeerItem(site.clone(), item)
                });
            }
            Inbound::Datagram(probe) => {
                let Some(peer) = self.peers.get_mut(&site) else { return };
                match probe {
                    transfer::Probe::Ping { seq, sent_us } => {
                        let _ = peer.conn.send_datagram(&transfer::Probe::Echo { seq, sent_us });
                    }
                    transfer::Probe::Echo { sent_us, .. } => {
                        let rtt = (now_us().saturating_sub(sent_us)) as f32 / 1000.0;
                        peer.probes_back += 1;
                        peer.rtt_ms = Some(peer.rtt_ms.map_or(rtt, |r| 0.8 * r + 0.2 * rtt));
                    }
                }
            }
        }
    }

    async fn peer_request(&mut self, body: &transfer::Request) -> Result<transfer::Reply, Fault> {
        match body {
            transfer::Request::Open { handover, bubble, epoch } => {
                let local = self
                    .bubbles
                    .get(bubble)
                    .filter(|b| b.phase == Phase::Standby { handover: *handover });
                let local = local.ok_or_else(|| {
                    Fault::new(
                        ErrorCode::NotReady,
                        format!("no standby for handover {}", handover.0),
                    )
                })?;
                if *epoch >= local.lease.epoch {
                    return Err(Fault::new(
                        ErrorCode::StaleEpoch,
                        "the source's epoch is not older",
                    ));
                }
                Ok(transfer::Reply::Accepted { from_tick: Tick(0) })
            }
            transfer::Request::Cross { player, to, epoch, last_applied, state, .. } => {
                let here = self.bubbles.get(to).filter(|b| b.lease.epoch == *epoch);
                if here.is_some() && self.awaiting.get(player) == Some(to) {
                    self.awaiting.remove(player);
                    let local = &self.bubbles[to];
                    let lease = LeaseRef { bubble: *to, epoch: *epoch };
                    if let Some(conn) = self.servers.get(&local.server).map(|s| s.conn.clone()) {
                        self.join(&conn, lease, *player, *last_applied, state.clone()).await;
                    }
                } else if self.crossings.len() < MAX_CROSSINGS {
                    self.crossings.insert(
                        *player,
                        Crossing {
                            at: Instant::now(),
                            to: *to,
                            last_applied: *last_applied,
                            state: state.clone(),
                        },
                    );
                } else {
                    return Err(Fault::new(ErrorCode::Busy, "too many crossings waiting"));
                }
                Ok(transfer::Reply::Done)
            }
        }
    }

    fn peer_item(&mut self, site: &Name, item: StateItem) {
        match item {
            StateItem::Inputs(inputs) => self.to_servers(inputs),
            StateItem::Update(update) => self.deliver(&update, site),
            StateItem::Snapshot(ref s) => self.feed_standby(site, s.bubble, item.clone()),
            StateItem::Delta(ref d) => self.feed_standby(site, d.bubble, item.clone()),
            StateItem::Seal(ref s) => {
                tracing::info!(site = %self.site, bubble = s.bubble.0, tick = s.tick.0, "seal received");
                self.feed_standby(site, s.bubble, item.clone())
            }
        }
    }

    fn feed_standby(&mut self, from: &Name, bubble: BubbleId, item: StateItem) {
        let Some(local) = self.bubbles.get(&bubble) else { return };
        if !matches!(local.phase, Phase::Standby { .. }) {
            tracing::warn!(peer = %from, bubble = bubble.0, "state for a bubble not standing by");
            return;
        }
        if let Some(srv) = self.servers.get(&local.server) {
            let _ = srv.out.try_send(item);
        }
    }

    /// Asks each server for a copy of every bubble it runs; the copies go to the core.
    fn backup(&mut self) {
        if !self.registered {
            return;
        }
        for (&bubble, local) in &self.bubbles {
            if local.phase != Phase::Running {
                continue;
            }
            // A spread bubble: every part's server copies its own state.
            let lease = LeaseRef { bubble, epoch: local.lease.epoch };
            for name in local.servers() {
                let Some(srv) = self.servers.get(name) else { continue };
                let conn = srv.conn.clone();
                tokio::spawn(async move {
                    let _ = conn.request(&server::Request::Copy { lease, deltas: false }).await;
                });
            }
        }
    }

    fn probe(&mut self) {
        let sent_us = now_us();
        for peer in self.peers.values_mut() {
            peer.probes_sent += 1;
            let _ =
                peer.conn.send_datagram(&transfer::Probe::Ping { seq: peer.probes_sent, sent_us });
        }
    }

    /// Restores whose server did not run in time are refused: the core fails them over again.
    fn restore_deadlines(&mut self, now: Instant) {
        let late: Vec<BubbleId> = self
            .pending_restore
            .iter()
            .filter(|(_, (at, _))| now.duration_since(*at) > RESTORE_DEADLINE)
            .map(|(&b, _)| b)
            .collect();
        for bubble in late {
            if let Some((_, req)) = self.pending_restore.remove(&bubble) {
                let fault =
                    Fault::new(ErrorCode::NotReady, "the restored server did not run in time");
                tokio::spawn(req.reply(Err(fault)));
            }
            if let Some(local) = self.bubbles.remove(&bubble) {
                let lease = LeaseRef { bubble, epoch: local.lease.epoch };
                for name in local.servers() {
                    if let Some(srv) = self.servers.get_mut(name) {
                        srv.bubbles.retain(|b| *b != bubble);
                        let conn = srv.conn.clone();
                        tokio::spawn(async move {
                            let _ = conn.request(&server::Request::Release { lease }).await;
                        });
                    }
                }
            }
        }
    }

    /// Bubbles whose lease ran out by this agent's clock have stopped (their servers stop by
    /// their own clocks): this site's players in them are told they are reconnecting.
    fn lease_expiries(&mut self, now: Instant) {
        for (&bubble, local) in self.bubbles.iter_mut() {
            if local.phase != Phase::Running || now < local.valid_until || local.told_reconnecting {
                continue;
            }
            local.told_reconnecting = true;
            tracing::warn!(site = %self.site, bubble = bubble.0, epoch = local.lease.epoch.0, "lease expired: the bubble stopped here");
            for gw in self.players.values_mut() {
                if gw.session.route().is_some_and(|(b, s)| *b == bubble && *s == self.site) {
                    gw.session.told();
                    let reason =
                        format!("{} lost its lease on this part of the universe", self.site);
                    let _ = gw.out.try_send(gateway::Item::Reconnecting { reason });
                }
            }
        }
    }

    fn housekeeping(&mut self) {
        let players: Vec<PlayerId> = self.players.keys().copied().collect();
        for p in players {
            self.resend(p, false);
        }
        let now = Instant::now();
        for gw in self.players.values_mut() {
            if gw.session.stalled(now) {
                let reason = "the simulation is unreachable for now".to_owned();
                let _ = gw.out.try_send(gateway::Item::Reconnecting { reason });
            }
        }
        let now = Instant::now();
        self.crossings.retain(|_, c| now.duration_since(c.at) < CROSSING_TTL);
        while self.waiting.front().is_some_and(|(at, _)| now.duration_since(*at) > SERVER_WAIT) {
            if let Some((_, req)) = self.waiting.pop_front() {
                let fault = Fault::new(
                    ErrorCode::NotReady,
                    format!("no game server ready at {} in time", self.site),
                );
                tokio::spawn(req.reply(Err(fault)));
            }
        }
        let late: Vec<String> = self
            .starting
            .iter()
            .filter(|(_, at)| now.duration_since(**at) > START_TIMEOUT)
            .map(|(n, _)| n.clone())
            .collect();
        for name in late {
            tracing::warn!(site = %self.site, server = %name, "server never registered: stopped");
            self.starting.remove(&name);
            self.driver.stop(&name);
        }
        for (name, why) in self.driver.poll_ended() {
            tracing::warn!(site = %self.site, server = %name, %why, "game server ended");
            self.starting.remove(&name);
            // Its exit is seen here within a housekeeping period, long before its connection
            // times out.
            if let Ok(name) = Name::new(name) {
                self.server_lost(&name, &format!("exited: {why}"));
            }
        }
        self.restore_deadlines(now);
        self.lease_expiries(now);
        self.top_up_pool();
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
