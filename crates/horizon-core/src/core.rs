//! The core's event loop: agents in, the brain ticking, its commands out to the agents.
//!
//! One task owns the [`Mesh`], the bubble registry (what really runs where, which lags the
//! brain during a handover) and the store. Each agent has an ordered queue of requests served
//! by its own task, so orders to one site arrive in the order they were decided; handovers run
//! as tasks of their own and report back.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use horizon_mesh::{
    Command, Generation, Mesh, MeshConfig, Placement, PlayerJoin, PlayerUpdate, SiteId, Time,
};
use horizon_proto::control::{self, Control};
use horizon_proto::{
    Aabb, BubbleId, ChannelId, Epoch, ErrorCode, Fault, HandoverId, Lease, LeaseRef, Name,
    PlayerId, Region, Role, Vec3, WorldId,
};
use horizon_transport::tls::{self, Identity, Roots};
use horizon_transport::{Conn, Inbound, InboundRequest, Limits, Listener, Peer, SiteCertificate};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::admin::{self, AdminQuery};
use crate::config::CoreConfig;
use crate::metrics::Metrics;
use crate::store::{Record, Store, StoreError};

const EVENT_QUEUE: usize = 4096;
/// Orders queued per agent. A full queue is an error (counted), never a silent wait.
const AGENT_QUEUE: usize = 4096;
/// Decisions kept for the status page.
const RECENT_DECISIONS: usize = 200;
/// Groups listed in the status JSON, largest first.
const STATUS_GROUPS: usize = 500;
/// How long a handover target has to get ready.
const PREPARE_DEADLINE_MS: u32 = 5_000;

/// Why the core could not start.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("TLS material: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("transport: {0}")]
    Transport(#[from] horizon_transport::Error),
    #[error("configuration: {0}")]
    Config(String),
    #[error("admin API on {addr}: {why}")]
    Admin { addr: SocketAddr, why: String },
}

/// A running core.
#[derive(Debug)]
pub struct CoreHandle {
    pub control_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub generation: u32,
    queries: mpsc::Sender<AdminQuery>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl CoreHandle {
    /// The status document served at `/status`.
    pub async fn status(&self) -> Option<serde_json::Value> {
        let (tx, rx) = oneshot::channel();
        self.queries.send(AdminQuery::Status(tx)).await.ok()?;
        rx.await.ok()
    }

    /// Stops the core and waits for it.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Starts the core: opens the store and persists a new generation before serving, binds the
/// control listener and the admin API, and runs the tick.
pub async fn start(cfg: CoreConfig) -> Result<CoreHandle, CoreError> {
    let mut store = Store::open(&cfg.store)?;
    let generation = store.next_generation()?;
    let roots = Roots::load(&cfg.ca)?;
    let identity = Identity::load(&cfg.cert, &cfg.key)?;
    let core_name = cfg.sites.name(cfg.sites.core()).as_str().to_owned();
    let name = Name::new(core_name.clone()).map_err(|e| CoreError::Config(e.to_string()))?;
    let limits = Limits::default();
    let listener = Listener::<Control>::bind(
        cfg.listen_control,
        tls::server_config(&identity, Some(&roots), ChannelId::Control, &limits)?,
        name,
        Arc::new(SiteCertificate),
        limits,
    )?;
    let control_addr = listener.local_addr()?;
    let mesh = Mesh::new(
        MeshConfig {
            sites: cfg.sites.clone(),
            thresholds: cfg.thresholds.clone(),
            generation: Generation(generation),
            placement: Placement::Smdg,
        },
        Time::ZERO,
    )
    .map_err(|e| CoreError::Config(format!("{e:?}")))?;
    let (queries_tx, queries) = mpsc::channel(64);
    let admin_listener = tokio::net::TcpListener::bind(cfg.listen_admin)
        .await
        .map_err(|e| CoreError::Admin { addr: cfg.listen_admin, why: e.to_string() })?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|e| CoreError::Admin { addr: cfg.listen_admin, why: e.to_string() })?;
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(admin::serve(admin_listener, queries_tx.clone(), stop_rx.clone()));
    let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
    let accept_events = events_tx.clone();
    let mut listener = listener;
    tokio::spawn(async move {
        while let Some(peer) = listener.accept().await {
            if accept_events.send(Event::AgentUp(peer)).await.is_err() {
                break;
            }
        }
    });
    tracing::info!(site = %core_name, %control_addr, %admin_addr, generation, "core serving");
    let core = Core {
        metrics: Metrics::new(&cfg.sites),
        cfg,
        mesh,
        started: Instant::now(),
        generation,
        store,
        agents: HashMap::new(),
        registry: BTreeMap::new(),
        placed: HashMap::new(),
        handovers: HashMap::new(),
        next_handover: 1,
        decisions: VecDeque::new(),
        assembling: BTreeMap::new(),
        events: events_tx,
    };
    let task = tokio::spawn(core.run(events, queries, stop_rx));
    Ok(CoreHandle { control_addr, admin_addr, generation, queries: queries_tx, stop, task })
}

enum Event {
    AgentUp(Peer<Control>),
    AgentInbound(SiteId, u64, Inbound<Control>),
    AgentGone(SiteId, u64),
    /// A handover's source froze and sealed at `tick`; the target starts when the seal lands.
    HandoverFrozen(HandoverId, u64),
    /// A handover step failed; `freeze_sent` when the failing step was the freeze itself (the
    /// source may have sealed, its reply lost).
    HandoverFailed {
        handover: HandoverId,
        why: String,
        freeze_sent: bool,
    },
    OrderFailed {
        site: SiteId,
        kind: &'static str,
        why: String,
    },
    Backup(SiteId, u64, BackupChunk),
}

struct BackupChunk {
    lease: LeaseRef,
    /// For a bubble spread over several servers: (part, parts).
    part: Option<(u32, u32)>,
    tick: u64,
    index: u32,
    total: u32,
    bytes: Vec<u8>,
}

impl From<control::Backup> for BackupChunk {
    fn from(item: control::Backup) -> Self {
        match item {
            control::Backup::Chunk { lease, tick, index, total, bytes } => {
                BackupChunk { lease, part: None, tick: tick.0, index, total, bytes: bytes.0 }
            }
            control::Backup::Part { lease, part, parts, tick, index, total, bytes } => {
                let part = Some((part, parts));
                BackupChunk { lease, part, tick: tick.0, index, total, bytes: bytes.0 }
            }
        }
    }
}

/// A state copy: bubble, epoch, tick, part (`u32::MAX` for a whole copy).
type CopyKey = (BubbleId, u64, u64, u32);

/// Copies being assembled from their chunks, at most this many at once (oldest dropped).
const MAX_BACKUPS_IN_FLIGHT: usize = 256;
/// Largest backup accepted, in chunks.
const MAX_BACKUP_CHUNKS: u32 = 4096;

struct AgentLink {
    conn: Conn<Control>,
    queue: mpsc::Sender<control::Request>,
    transfer_addr: String,
    /// Its Register arrived: it is told about peers, and peers about it.
    registered: bool,
    servers: Vec<control::ServerLoad>,
}

/// A bubble as it really runs (the brain's view changes first during a handover).
#[derive(Clone, Debug)]
struct Reg {
    site: SiteId,
    epoch: u64,
    world: u32,
    bounds: Aabb,
    members: BTreeMap<PlayerId, SiteId>,
    moving: Option<HandoverId>,
    /// The parts last sent to the holder (`Parts`) and each member's part; empty while the
    /// bubble is on one server.
    parts: Vec<Aabb>,
    part_of: BTreeMap<PlayerId, u32>,
}

#[derive(Clone, Debug)]
struct Handover {
    bubble: BubbleId,
    from: SiteId,
    to: SiteId,
    epoch: u64,
    started: Instant,
    frozen_at: Option<Instant>,
}

struct Core {
    cfg: CoreConfig,
    mesh: Mesh,
    started: Instant,
    generation: u32,
    store: Store,
    agents: HashMap<SiteId, AgentLink>,
    registry: BTreeMap<BubbleId, Reg>,
    /// Where each player's membership was last sent: player → bubble.
    placed: HashMap<PlayerId, BubbleId>,
    handovers: HashMap<HandoverId, Handover>,
    next_handover: u64,
    decisions: VecDeque<serde_json::Value>,
    /// Backup copies being assembled: (bubble, epoch, tick) → chunks.
    assembling: BTreeMap<CopyKey, Vec<Option<Vec<u8>>>>,
    metrics: Metrics,
    events: mpsc::Sender<Event>,
}

impl Core {
    /// Takes one chunk of a state copy. A copy is kept only if it comes from the bubble's
    /// current holder under its current epoch (fencing: an old writer's copy is refused); a
    /// part's copy only under the cut in force.
    fn backup(&mut self, site: SiteId, c: BackupChunk) {
        let bubble = c.lease.bubble;
        let current = self.registry.get(&bubble).is_some_and(|r| {
            let cut = match c.part {
                None => true,
                Some((part, parts)) => r.parts.len() == parts as usize && part < parts,
            };
            r.site == site && r.epoch == c.lease.epoch.0 && cut
        });
        if !current || c.total == 0 || c.total > MAX_BACKUP_CHUNKS || c.index >= c.total {
            self.metrics.backups_refused.inc(site.index());
            return;
        }
        let key = (bubble, c.lease.epoch.0, c.tick, c.part.map_or(u32::MAX, |p| p.0));
        if !self.assembling.contains_key(&key) && self.assembling.len() >= MAX_BACKUPS_IN_FLIGHT {
            self.assembling.pop_first();
        }
        let parts = self.assembling.entry(key).or_insert_with(|| vec![None; c.total as usize]);
        if parts.len() != c.total as usize {
            self.assembling.remove(&key);
            self.metrics.backups_refused.inc(site.index());
            return;
        }
        parts[c.index as usize] = Some(c.bytes);
        if parts.iter().any(Option::is_none) {
            return;
        }
        let bytes: Vec<u8> = self
            .assembling
            .remove(&key)
            .unwrap_or_default()
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        let (epoch, tick) = (key.1, key.2);
        let stored = self.store.state().backups.get(&bubble.0);
        let newer = stored.is_none_or(|b| match c.part {
            // A whole copy after a spread one of the same epoch: the bubble is on one server again.
            None => epoch > b.epoch || (epoch == b.epoch && (!b.parts.is_empty() || tick > b.tick)),
            Some((part, parts)) => {
                epoch > b.epoch
                    || (epoch == b.epoch
                        && (b.parts.len() != parts as usize
                            || b.parts[part as usize].is_none_or(|p| p.tick < tick)))
            }
        });
        if !newer {
            return;
        }
        let put = match c.part {
            None => self.store.put_backup(bubble.0, epoch, tick, &bytes),
            Some(part) => self.store.put_backup_part(bubble.0, epoch, part, tick, &bytes),
        };
        match put {
            Ok(()) => self.metrics.backups.inc(site.index()),
            Err(e) => {
                tracing::error!(error = %e, "backup not stored");
                self.metrics.store_failures.inc(0);
            }
        }
    }

    async fn run(
        mut self,
        mut events: mpsc::Receiver<Event>,
        mut queries: mpsc::Receiver<AdminQuery>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let next = self.started + Duration::from_millis(self.mesh.poll_timeout().as_ms());
            tokio::select! {
                _ = stop.changed() => break,
                Some(event) = events.recv() => self.event(event).await,
                Some(query) = queries.recv() => self.query(query),
                _ = tokio::time::sleep_until(next) => self.tick(),
            }
        }
        for agent in self.agents.values() {
            agent.conn.close(ErrorCode::ShuttingDown, "core stopping");
        }
        tracing::info!("core stopped");
    }

    fn now(&self) -> Time {
        Time::from_ms(self.started.elapsed().as_millis() as u64)
    }

    fn site_name(&self, site: SiteId) -> Name {
        let s = self.cfg.sites.name(site).as_str();
        // Site names are validated at configuration (short ASCII).
        Name::new(s).unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn lease(&self, bubble: BubbleId, epoch: u64) -> Lease {
        Lease { bubble, epoch: Epoch(epoch), ttl_ms: self.cfg.thresholds.lease_ttl_ms as u32 }
    }

    // ---- agents ------------------------------------------------------------------------------

    async fn event(&mut self, event: Event) {
        match event {
            Event::AgentUp(peer) => self.agent_up(peer),
            Event::AgentInbound(site, id, Inbound::Request(req)) => {
                if self.agents.get(&site).is_some_and(|a| a.conn.id() == id) {
                    self.agent_request(site, req).await;
                }
            }
            Event::AgentInbound(site, id, Inbound::Stream(mut rx)) => {
                // The universe backup: chunks of state copies, checked against current epochs.
                let events = self.events.clone();
                tokio::spawn(async move {
                    while let Ok(Some(item)) = rx.next().await {
                        let chunk = BackupChunk::from(item);
                        if events.send(Event::Backup(site, id, chunk)).await.is_err() {
                            break;
                        }
                    }
                });
            }
            Event::Backup(site, id, chunk) => {
                if self.agents.get(&site).is_some_and(|a| a.conn.id() == id) {
                    self.backup(site, chunk);
                }
            }
            Event::AgentInbound(_, _, Inbound::Datagram(never)) => match never {},
            Event::AgentGone(site, id) => {
                if self.agents.get(&site).is_some_and(|a| a.conn.id() == id) {
                    tracing::warn!(site = %self.cfg.sites.name(site), "agent disconnected");
                    self.agents.remove(&site);
                    self.mesh.handle_site_link(site, false);
                }
            }
            Event::HandoverFrozen(h, tick) => {
                if let Some(ho) = self.handovers.get_mut(&h) {
                    ho.frozen_at = Some(Instant::now());
                    tracing::info!(handover = h.0, bubble = ho.bubble.0, tick, "source frozen");
                }
            }
            Event::HandoverFailed { handover, why, freeze_sent } => {
                self.handover_failed(handover, &why, freeze_sent)
            }
            Event::OrderFailed { site, kind, why } => {
                self.metrics.order_failures.inc(site.index());
                tracing::warn!(site = %self.cfg.sites.name(site), order = kind, %why, "order failed");
            }
        }
    }

    fn agent_up(&mut self, peer: Peer<Control>) {
        let Some(site) = self.cfg.sites.id(peer.hello.peer.as_str()) else {
            peer.conn.close(ErrorCode::Unauthorized, "site not in the core's configuration");
            return;
        };
        let id = peer.conn.id();
        let events = self.events.clone();
        let mut inbound = peer.inbound;
        tokio::spawn(async move {
            while let Some(i) = inbound.recv().await {
                if events.send(Event::AgentInbound(site, id, i)).await.is_err() {
                    return;
                }
            }
            let _ = events.send(Event::AgentGone(site, id)).await;
        });
        let (queue, mut orders) = mpsc::channel::<control::Request>(AGENT_QUEUE);
        let conn = peer.conn.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            while let Some(order) = orders.recv().await {
                if let Err(e) = conn.request(&order).await {
                    let kind = horizon_proto::Message::kind(&order);
                    let _ =
                        events.send(Event::OrderFailed { site, kind, why: e.to_string() }).await;
                }
            }
        });
        // Registration completes with the agent's Register request.
        self.agents.insert(
            site,
            AgentLink {
                conn: peer.conn,
                queue,
                transfer_addr: String::new(),
                registered: false,
                servers: Vec::new(),
            },
        );
    }

    fn order(&mut self, site: SiteId, order: control::Request) {
        let Some(agent) = self.agents.get(&site) else {
            self.metrics.order_failures.inc(site.index());
            tracing::warn!(site = %self.cfg.sites.name(site), "order for a site without agent dropped");
            return;
        };
        if agent.queue.try_send(order).is_err() {
            self.metrics.order_failures.inc(site.index());
            tracing::error!(site = %self.cfg.sites.name(site), "agent order queue full");
        }
    }

    async fn agent_request(&mut self, site: SiteId, req: InboundRequest<Control>) {
        let now = self.now();
        let reply = match &req.body {
            control::Request::Register { transfer_addr, servers, held, .. } => {
                Ok(self.register(site, transfer_addr.clone(), servers.clone(), held))
            }
            control::Request::Report { joins, leaves, players, backbone, servers } => {
                self.report(site, joins, leaves, players, backbone, servers);
                Ok(control::Reply::Done)
            }
            control::Request::Renew { leases } => Ok(self.renew(site, leases, now)),
            control::Request::Started { handover, bubble, epoch, .. } => {
                self.started(site, *handover, *bubble, *epoch)
            }
            control::Request::Failed { handover, reason } => {
                let frozen = self.handovers.get(handover).is_some_and(|h| h.frozen_at.is_some());
                self.handover_failed(*handover, reason, frozen);
                Ok(control::Reply::Done)
            }
            _ => Err(Fault::new(ErrorCode::Unexpected, "a core request, sent by an agent")),
        };
        tokio::spawn(req.reply(reply));
    }

    fn register(
        &mut self,
        site: SiteId,
        transfer_addr: String,
        servers: Vec<control::ServerLoad>,
        held: &[control::Held],
    ) -> control::Reply {
        self.mesh.handle_site_link(site, true);
        let mut keep = Vec::new();
        let mut stop = Vec::new();
        for h in held {
            let current = self
                .registry
                .get(&h.lease.bubble)
                .is_some_and(|r| r.site == site && r.epoch == h.lease.epoch.0);
            if current {
                keep.push(self.lease(h.lease.bubble, h.lease.epoch.0));
            } else {
                stop.push(h.lease);
            }
        }
        let peers: Vec<control::Peer> = self
            .agents
            .iter()
            .filter(|(s, a)| **s != site && a.registered)
            .map(|(s, a)| control::Peer {
                site: self.site_name(*s),
                transfer_addr: a.transfer_addr.clone(),
            })
            .collect();
        let me = control::Peer { site: self.site_name(site), transfer_addr: transfer_addr.clone() };
        let others: Vec<SiteId> = self
            .agents
            .iter()
            .filter(|(s, a)| **s != site && a.registered)
            .map(|(s, _)| *s)
            .collect();
        for other in others {
            self.order(other, control::Request::Peers { peers: vec![me.clone()] });
        }
        if let Some(agent) = self.agents.get_mut(&site) {
            agent.transfer_addr = transfer_addr;
            agent.servers = servers;
            agent.registered = true;
        }
        self.update_capacity(site);
        tracing::info!(site = %self.cfg.sites.name(site), kept = keep.len(), stopped = stop.len(), "agent registered");
        control::Reply::Registered {
            generation: self.generation,
            tick_ms: self.cfg.thresholds.period_ms as u32,
            keep,
            stop,
            peers,
        }
    }

    fn update_capacity(&mut self, site: SiteId) {
        let Some(agent) = self.agents.get(&site) else { return };
        let ready = agent.servers.iter().filter(|s| s.ready || !s.bubbles.is_empty()).count();
        self.mesh.handle_site_capacity(site, Some(ready as u32));
    }

    fn report(
        &mut self,
        site: SiteId,
        joins: &[control::PlayerSample],
        leaves: &[PlayerId],
        players: &[control::PlayerSample],
        backbone: &[control::BackboneSample],
        servers: &[control::ServerLoad],
    ) {
        for j in joins {
            let join = PlayerJoin {
                id: horizon_mesh::PlayerId(j.player.0),
                home: site,
                access_rtt_ms: f64::from(j.access_rtt_ms),
                role: role(j.role),
                world: horizon_mesh::WorldId(j.world.0),
                position: vec3(j.pos),
                velocity: vec3(j.vel),
            };
            if let Err(e) = self.mesh.handle_join(join) {
                tracing::debug!(player = j.player.0, error = %e, "join refused");
            }
        }
        for p in players {
            let update = PlayerUpdate {
                access_rtt_ms: Some(f64::from(p.access_rtt_ms)),
                role: Some(role(p.role)),
                world: Some(horizon_mesh::WorldId(p.world.0)),
                position: Some(vec3(p.pos)),
                velocity: Some(vec3(p.vel)),
            };
            let _ = self.mesh.handle_update(horizon_mesh::PlayerId(p.player.0), &update);
        }
        for l in leaves {
            let _ = self.mesh.handle_leave(horizon_mesh::PlayerId(l.0));
        }
        for b in backbone {
            if let (Some(other), Some(rtt)) = (self.cfg.sites.id(b.site.as_str()), b.rtt_ms)
                && rtt.is_finite()
                && rtt >= 0.0
            {
                self.mesh.handle_backbone_rtt(site, other, f64::from(rtt));
            }
        }
        // Tick rates feed the brain's load rule (SPEC section 4). The agent lists a spread
        // bubble's servers in part order; a count that does not match the cut in force (a
        // `Parts` on its way) is skipped.
        let mut by_bubble: BTreeMap<BubbleId, Vec<f32>> = BTreeMap::new();
        for srv in servers.iter().filter(|s| s.bubbles.len() == 1) {
            by_bubble.entry(srv.bubbles[0]).or_default().push(srv.tps);
        }
        for (bubble, tps) in by_bubble {
            let in_force = self.registry.get(&bubble).is_some_and(|r| {
                r.site == site && r.moving.is_none() && r.parts.len().max(1) == tps.len()
            });
            if !in_force {
                continue;
            }
            for (part, t) in tps.into_iter().enumerate().filter(|(_, t)| t.is_finite()) {
                let id = horizon_mesh::BubbleId(bubble.0);
                let _ = self.mesh.handle_server_load(id, part, f64::from(t));
            }
        }
        if let Some(agent) = self.agents.get_mut(&site) {
            agent.servers = servers.to_vec();
        }
        self.update_capacity(site);
    }

    /// One batched renewal. Neither granted nor refused: a handover source's superseded
    /// epoch (it stops at the freeze, well within the lease it has) and a bubble the core has
    /// just ended (its `Revoke` follows the member changes that take its players out, in order;
    /// a refusal racing ahead would drop them before their state crossed).
    fn renew(&mut self, site: SiteId, leases: &[LeaseRef], now: Time) -> control::Reply {
        let mut granted = Vec::new();
        let mut refused = Vec::new();
        for l in leases {
            let Some(reg) = self.registry.get(&l.bubble) else { continue };
            if reg.moving.is_some() && reg.site == site && reg.epoch == l.epoch.0 {
                continue;
            }
            let pair = [(horizon_mesh::BubbleId(l.bubble.0), horizon_mesh::Epoch(l.epoch.0))];
            match self.mesh.handle_renewal(site, &pair, now).pop() {
                Some(Ok(_)) => granted.push(*l),
                _ => refused.push(*l),
            }
        }
        self.metrics.renewals.inc(site.index());
        self.metrics.leases_refused.add(site.index(), refused.len() as u64);
        control::Reply::Renewed {
            ttl_ms: self.cfg.thresholds.lease_ttl_ms as u32,
            granted,
            refused,
        }
    }

    // ---- the tick ----------------------------------------------------------------------------

    fn tick(&mut self) {
        let t0 = Instant::now();
        let now = self.now();
        self.mesh.handle_timeout(now);
        let mut revokes = Vec::new();
        while let Some(command) = self.mesh.poll_command() {
            self.decide(&command);
            match command {
                Command::Create { bubble, site, world, bounds, epoch, .. } => {
                    let bubble = BubbleId(bubble.0);
                    let reg = Reg {
                        site,
                        epoch: epoch.0,
                        world: world.0,
                        bounds: aabb(bounds),
                        members: BTreeMap::new(),
                        moving: None,
                        parts: Vec::new(),
                        part_of: BTreeMap::new(),
                    };
                    self.persist(Record::Lease {
                        bubble: bubble.0,
                        epoch: epoch.0,
                        site: self.cfg.sites.name(site).to_string(),
                    });
                    let region = Region { world: WorldId(world.0), bounds: Some(aabb(bounds)) };
                    let lease = self.lease(bubble, epoch.0);
                    self.registry.insert(bubble, reg);
                    self.order(site, control::Request::Create { bubble, region, lease });
                    self.metrics.bubbles_created.inc(site.index());
                }
                Command::Move { bubble, from, to, epoch, reason, .. } => {
                    self.start_handover(BubbleId(bubble.0), from, to, epoch.0, reason.as_str());
                }
                Command::Merge { from, .. } => revokes.push(BubbleId(from.0)),
                Command::Delete { bubble, .. } => revokes.push(BubbleId(bubble.0)),
                Command::Border { bubble, bounds, .. } => {
                    let bubble = BubbleId(bubble.0);
                    if let Some(reg) = self.registry.get_mut(&bubble) {
                        reg.bounds = aabb(bounds);
                        let (site, epoch, world) = (reg.site, reg.epoch, reg.world);
                        let region = Region { world: WorldId(world), bounds: Some(aabb(bounds)) };
                        let lease = LeaseRef { bubble, epoch: Epoch(epoch) };
                        self.order(site, control::Request::Resize { lease, region });
                    }
                }
                Command::Enter { .. } => {}
                Command::Servers { bubble, parts, reason, .. } => {
                    // Carried out by `reconcile_parts` below, with each member's part.
                    tracing::info!(bubble = bubble.0, parts = parts.len(), reason = ?reason, "bubble spread over servers");
                }
                Command::Stalled { bubble, site, .. } => {
                    tracing::error!(bubble = bubble.0, site = %self.cfg.sites.name(site), "bubble stalled: its lease expired");
                }
            }
        }
        self.reconcile();
        for bubble in revokes {
            if let Some(reg) = self.registry.remove(&bubble) {
                self.persist(Record::Gone { bubble: bubble.0 });
                let lease = LeaseRef { bubble, epoch: Epoch(reg.epoch) };
                self.order(reg.site, control::Request::Revoke { leases: vec![lease] });
            }
        }
        self.metrics.ticks.inc(0);
        self.metrics.tick_seconds.observe(t0.elapsed().as_secs_f64());
    }

    fn persist(&mut self, record: Record) {
        if let Err(e) = self.store.append(record) {
            // Ownership must be durable before it is used; a store that cannot write is fatal
            // for a production core. The process supervisor restarts it with a new generation.
            tracing::error!(error = %e, "store write failed");
            self.metrics.store_failures.inc(0);
        }
    }

    fn decide(&mut self, command: &Command) {
        let mut v = serde_json::to_value(command).unwrap_or_default();
        if let Some(obj) = v.as_object_mut() {
            obj.insert("t_ms".into(), self.now().as_ms().into());
            for key in ["site", "from", "to", "from_site", "into_site", "previous_site"] {
                if let Some(id) = obj.get(key).and_then(|x| x.as_u64()) {
                    let name = self
                        .cfg
                        .sites
                        .ids()
                        .find(|s| s.index() as u64 == id)
                        .map(|s| self.cfg.sites.name(s).to_string());
                    if let Some(name) = name {
                        obj.insert(key.into(), name.into());
                    }
                }
            }
            if let Some(players) = obj.remove("players") {
                obj.insert("players".into(), players.as_array().map_or(0, Vec::len).into());
            }
        }
        self.decisions.push_back(v);
        while self.decisions.len() > RECENT_DECISIONS {
            self.decisions.pop_front();
        }
    }

    /// Brings every bubble's member list and every player's route in line with the brain.
    /// Players whose old or new bubble is in a handover wait for its commit.
    fn reconcile(&mut self) {
        let mut touched: BTreeSet<BubbleId> = BTreeSet::new();
        let mut departures: HashMap<BubbleId, Vec<(PlayerId, BubbleId)>> = HashMap::new();
        let mut crossing: BTreeSet<PlayerId> = BTreeSet::new();
        let mut routes: Vec<PlayerId> = Vec::new();
        let mut present: BTreeSet<PlayerId> = BTreeSet::new();
        let moving = |r: &BTreeMap<BubbleId, Reg>, b: Option<BubbleId>| {
            b.and_then(|b| r.get(&b)).is_some_and(|r| r.moving.is_some())
        };
        for p in self.mesh.players() {
            let player = PlayerId(p.id.0);
            present.insert(player);
            let want = self
                .mesh
                .bubble_of(p.id)
                .map(|b| BubbleId(b.id.0))
                .filter(|b| self.registry.contains_key(b));
            let have = self.placed.get(&player).copied();
            if want == have || moving(&self.registry, want) || moving(&self.registry, have) {
                continue;
            }
            if let Some(h) = have.and_then(|h| self.registry.get_mut(&h).map(|r| (h, r))) {
                h.1.members.remove(&player);
                touched.insert(h.0);
                if let Some(w) = want {
                    departures.entry(h.0).or_default().push((player, w));
                }
            }
            match want {
                Some(w) => {
                    if let Some(r) = self.registry.get_mut(&w) {
                        r.members.insert(player, p.home);
                    }
                    touched.insert(w);
                    if have.is_some_and(|h| self.registry.contains_key(&h)) {
                        crossing.insert(player);
                    }
                    self.placed.insert(player, w);
                    routes.push(player);
                }
                None => {
                    self.placed.remove(&player);
                }
            }
        }
        let gone: Vec<PlayerId> =
            self.placed.keys().filter(|p| !present.contains(p)).copied().collect();
        for player in gone {
            if let Some(b) = self.placed.remove(&player)
                && let Some(r) = self.registry.get_mut(&b)
            {
                r.members.remove(&player);
                touched.insert(b);
            }
        }
        for bubble in touched {
            let Some(reg) = self.registry.get(&bubble) else { continue };
            let players = self.member_list(reg, &crossing);
            let departed = departures
                .remove(&bubble)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(player, to)| {
                    let r = self.registry.get(&to)?;
                    Some(control::Departure {
                        player,
                        to: LeaseRef { bubble: to, epoch: Epoch(r.epoch) },
                        site: self.site_name(r.site),
                    })
                })
                .collect();
            let lease = LeaseRef { bubble, epoch: Epoch(reg.epoch) };
            let site = reg.site;
            self.order(site, control::Request::Members { lease, players, departed });
        }
        self.send_routes(routes);
        self.reconcile_parts();
    }

    /// Tells each holder how the brain spreads its bubbles over servers (SPEC section 4, within
    /// a site) and which part holds each member, whenever that changed. Bubbles in a handover
    /// wait for its commit.
    fn reconcile_parts(&mut self) {
        let mut orders = Vec::new();
        for (&bubble, reg) in self.registry.iter_mut() {
            if reg.moving.is_some() {
                continue;
            }
            let Some(b) = self.mesh.bubble_by_id(horizon_mesh::BubbleId(bubble.0)) else {
                continue;
            };
            if b.servers() <= 1 && reg.parts.is_empty() {
                continue;
            }
            let parts = b.parts();
            let part_of: BTreeMap<PlayerId, u32> = reg
                .members
                .keys()
                .filter_map(|&p| {
                    let at = self.mesh.player(horizon_mesh::PlayerId(p.0))?.position;
                    Some((p, horizon_mesh::bubble::part_of(&parts, at) as u32))
                })
                .collect();
            let boxes: Vec<Aabb> = parts.iter().map(|p| aabb(*p)).collect();
            if boxes == reg.parts && part_of == reg.part_of {
                continue;
            }
            let players = part_of
                .iter()
                .map(|(&player, &part)| control::PartMember { player, part })
                .collect();
            let lease = LeaseRef { bubble, epoch: Epoch(reg.epoch) };
            orders
                .push((reg.site, control::Request::Parts { lease, parts: boxes.clone(), players }));
            if boxes.len() > 1 {
                (reg.parts, reg.part_of) = (boxes, part_of);
            } else {
                (reg.parts, reg.part_of) = (Vec::new(), BTreeMap::new());
            }
        }
        for (site, order) in orders {
            self.order(site, order);
        }
    }

    fn member_list(&self, reg: &Reg, crossing: &BTreeSet<PlayerId>) -> Vec<control::Member> {
        reg.members
            .iter()
            .map(|(&player, &home)| control::Member {
                player,
                home: self.site_name(home),
                pos: self.mesh.player(horizon_mesh::PlayerId(player.0)).map_or(
                    Vec3::default(),
                    |p| Vec3 { x: p.position.x, y: p.position.y, z: p.position.z },
                ),
                crossing: crossing.contains(&player),
            })
            .collect()
    }

    /// Tells home agents where their players are simulated now.
    fn send_routes(&mut self, players: Vec<PlayerId>) {
        let mut per_home: BTreeMap<SiteId, Vec<control::PlayerRoute>> = BTreeMap::new();
        for player in players {
            let Some(&bubble) = self.placed.get(&player) else { continue };
            let Some(reg) = self.registry.get(&bubble) else { continue };
            let Some(&home) = reg.members.get(&player) else { continue };
            per_home.entry(home).or_default().push(control::PlayerRoute {
                player,
                bubble,
                site: self.site_name(reg.site),
            });
        }
        for (home, routes) in per_home {
            self.order(home, control::Request::Route { routes });
        }
    }

    // ---- handovers ---------------------------------------------------------------------------

    fn start_handover(
        &mut self,
        bubble: BubbleId,
        from: SiteId,
        to: SiteId,
        epoch: u64,
        reason: &str,
    ) {
        let Some(reg) = self.registry.get(&bubble).cloned() else { return };
        let (Some(source), Some(target)) = (self.agents.get(&from), self.agents.get(&to)) else {
            tracing::warn!(bubble = bubble.0, "handover abandoned: it needs both agents connected");
            self.metrics.handovers_failed.inc(0);
            self.abandon_move(bubble, from, epoch);
            return;
        };
        let h = HandoverId(self.next_handover);
        self.next_handover += 1;
        let (source, target) = (source.conn.clone(), target.conn.clone());
        let target_addr = self.agents[&to].transfer_addr.clone();
        let old = self.lease(bubble, reg.epoch);
        let new = self.lease(bubble, epoch);
        let members = control::Request::Members {
            lease: LeaseRef { bubble, epoch: Epoch(epoch) },
            players: self.member_list(&reg, &BTreeSet::new()),
            departed: Vec::new(),
        };
        let (from_name, to_name) = (self.site_name(from), self.site_name(to));
        tracing::info!(handover = h.0, bubble = bubble.0, from = %from_name, to = %to_name, reason, players = reg.members.len(), "handover starting");
        if let Some(r) = self.registry.get_mut(&bubble) {
            r.moving = Some(h);
        }
        self.handovers.insert(
            h,
            Handover { bubble, from, to, epoch, started: Instant::now(), frozen_at: None },
        );
        let events = self.events.clone();
        tokio::spawn(async move {
            let prepare = |lease: Lease| control::Request::Prepare {
                handover: h,
                bubble,
                source: from_name.clone(),
                target: to_name.clone(),
                target_addr: target_addr.clone(),
                lease,
                deadline_ms: PREPARE_DEADLINE_MS,
            };
            let prepared = async {
                match target
                    .request(&prepare(new))
                    .await
                    .map_err(|e| format!("prepare target: {e}"))?
                {
                    control::Reply::Prepared { .. } => {}
                    other => return Err(format!("prepare target: replied {other:?}")),
                }
                target.request(&members).await.map_err(|e| format!("members to target: {e}"))?;
                source.request(&prepare(old)).await.map_err(|e| format!("prepare source: {e}"))?;
                Ok(())
            };
            let failed = |why: String, freeze_sent: bool| Event::HandoverFailed {
                handover: h,
                why,
                freeze_sent,
            };
            let event = match prepared.await {
                Err(why) => failed(why, false),
                Ok(()) => match source.request(&control::Request::Freeze { handover: h }).await {
                    Ok(control::Reply::Frozen { tick, .. }) => Event::HandoverFrozen(h, tick.0),
                    Ok(other) => failed(format!("freeze: replied {other:?}"), true),
                    Err(e) => failed(format!("freeze: {e}"), true),
                },
            };
            let _ = events.send(event).await;
        });
    }

    fn started(
        &mut self,
        site: SiteId,
        h: HandoverId,
        bubble: BubbleId,
        epoch: Epoch,
    ) -> Result<control::Reply, Fault> {
        let Some(ho) = self.handovers.get(&h).cloned() else {
            // A retried request of a committed handover, or the start of an abandoned one.
            let committed = self.registry.get(&bubble).is_some_and(|r| r.epoch == epoch.0);
            return if committed {
                Ok(control::Reply::Done)
            } else {
                Err(Fault::new(ErrorCode::StaleEpoch, "this handover was abandoned"))
            };
        };
        if ho.to != site || ho.bubble != bubble || ho.epoch != epoch.0 {
            return Err(Fault::new(ErrorCode::StaleEpoch, "started does not match the handover"));
        }
        self.handovers.remove(&h);
        self.persist(Record::Lease {
            bubble: bubble.0,
            epoch: epoch.0,
            site: self.cfg.sites.name(site).to_string(),
        });
        let Some(reg) = self.registry.get_mut(&bubble) else { return Ok(control::Reply::Done) };
        reg.site = site;
        reg.epoch = epoch.0;
        reg.moving = None;
        // The source brought the bubble back to one server for the snapshot; the new holder
        // gets its own `Parts` at the next reconciliation.
        reg.parts.clear();
        reg.part_of.clear();
        let region = Region { world: WorldId(reg.world), bounds: Some(reg.bounds) };
        let players: Vec<PlayerId> = reg.members.keys().copied().collect();
        self.order(ho.from, control::Request::Commit { handover: h });
        self.order(site, control::Request::Resize { lease: LeaseRef { bubble, epoch }, region });
        self.send_routes(players);
        let total = ho.started.elapsed().as_secs_f64();
        let freeze = ho.frozen_at.map(|t| t.elapsed().as_secs_f64());
        self.metrics.handovers.inc(0);
        self.metrics.handover_seconds.observe(total);
        tracing::info!(handover = h.0, bubble = bubble.0, to = %self.cfg.sites.name(site), total_ms = total * 1000.0, since_freeze_ms = freeze.map(|f| f * 1000.0), "handover committed");
        self.reconcile();
        Ok(control::Reply::Done)
    }

    /// A handover that could not complete. Before the freeze the source simply continues
    /// (SPEC section 5): the target drops what it prepared and the bubble is re-granted to the
    /// source under a new epoch. A failed freeze is different: the source may have sealed and
    /// the seal may be on its way to the target, so abandoning now could leave the bubble with
    /// no writer or two. The core then waits for the target's `Started`; if it never comes, the
    /// new epoch is never renewed, its lease expires and the brain fails the bubble over.
    fn handover_failed(&mut self, h: HandoverId, why: &str, freeze_sent: bool) {
        let Some(ho) = self.handovers.get(&h).cloned() else { return };
        if freeze_sent {
            tracing::error!(handover = h.0, bubble = ho.bubble.0, %why, "freeze unconfirmed: waiting for the target to start");
            return;
        }
        self.handovers.remove(&h);
        tracing::error!(handover = h.0, bubble = ho.bubble.0, %why, "handover abandoned before the freeze");
        self.metrics.handovers_failed.inc(0);
        let abort = control::Request::Abort { handover: h, reason: why.to_owned() };
        self.order(ho.to, abort.clone());
        self.order(ho.from, abort);
        self.abandon_move(ho.bubble, ho.from, ho.epoch);
        self.reconcile();
    }

    /// The brain placed `bubble` at a new site under `epoch`, but the handover did not happen:
    /// put it back on `source`, which still simulates it, under a fresh epoch (`Regrant`).
    fn abandon_move(&mut self, bubble: BubbleId, source: SiteId, epoch: u64) {
        let now = self.now();
        let Some(reg) = self.registry.get_mut(&bubble) else { return };
        reg.moving = None;
        // The source brought a spread bubble back onto one server for the snapshot.
        reg.parts.clear();
        reg.part_of.clear();
        let old = LeaseRef { bubble, epoch: Epoch(reg.epoch) };
        let back = self.mesh.handle_move_aborted(
            horizon_mesh::BubbleId(bubble.0),
            horizon_mesh::Epoch(epoch),
            source,
            now,
        );
        match back {
            Ok(epoch) => {
                reg.epoch = epoch.0;
                self.persist(Record::Lease {
                    bubble: bubble.0,
                    epoch: epoch.0,
                    site: self.cfg.sites.name(source).to_string(),
                });
                let lease = self.lease(bubble, epoch.0);
                self.order(source, control::Request::Regrant { old, lease });
            }
            Err(e) => {
                // The brain has moved on (the bubble merged away or ended meanwhile): its own
                // commands end the bubble.
                tracing::warn!(bubble = bubble.0, error = %e, "abandoned move not taken back");
            }
        }
    }

    // ---- admin -------------------------------------------------------------------------------

    fn query(&mut self, query: AdminQuery) {
        match query {
            AdminQuery::Status(tx) => {
                let _ = tx.send(self.status());
            }
            AdminQuery::Metrics(tx) => {
                self.refresh_gauges();
                let _ = tx.send(self.metrics.render(&self.cfg.sites));
            }
        }
    }

    fn refresh_gauges(&mut self) {
        let n = self.cfg.sites.len();
        let mut bubbles = vec![0u64; n];
        for r in self.registry.values() {
            bubbles[r.site.index()] += 1;
        }
        let mut players = vec![0u64; n];
        for p in self.mesh.players() {
            players[p.home.index()] += 1;
        }
        for s in self.cfg.sites.ids() {
            let i = s.index();
            self.metrics.bubbles.set(i, bubbles[i]);
            self.metrics.players.set(i, players[i]);
            let agent = self.agents.get(&s);
            self.metrics.agent_connected.set(i, u64::from(agent.is_some()));
            self.metrics
                .servers_ready
                .set(i, agent.map_or(0, |a| a.servers.iter().filter(|s| s.ready).count() as u64));
        }
    }

    /// The brain's proximity groups, each with its bubble (if all of it is in one) and homes.
    fn groups(&self) -> Vec<serde_json::Value> {
        let mut groups = self.mesh.groups();
        groups.sort_by_key(|g| std::cmp::Reverse(g.len()));
        groups
            .into_iter()
            .take(STATUS_GROUPS)
            .map(|g| {
                let mut homes: BTreeMap<String, usize> = BTreeMap::new();
                let mut bubbles = BTreeSet::new();
                for &p in &g {
                    if let Some(player) = self.mesh.player(p) {
                        *homes.entry(self.cfg.sites.name(player.home).to_string()).or_default() +=
                            1;
                    }
                    bubbles.insert(self.mesh.bubble_of(p).map(|b| b.id.0));
                }
                let bubble = match bubbles.len() {
                    1 => bubbles.into_iter().next().flatten(),
                    _ => None,
                };
                serde_json::json!({
                    "players": g.iter().map(|p| p.0).collect::<Vec<_>>(),
                    "homes": homes,
                    "bubble": bubble,
                })
            })
            .collect()
    }

    fn status(&self) -> serde_json::Value {
        let sites: Vec<serde_json::Value> = self
            .cfg
            .sites
            .ids()
            .map(|s| {
                let agent = self.agents.get(&s);
                serde_json::json!({
                    "site": self.cfg.sites.name(s).to_string(),
                    "core": s == self.cfg.sites.core(),
                    "agent_connected": agent.is_some(),
                    "players": self.mesh.players().iter().filter(|p| p.home == s).count(),
                    "bubbles": self.registry.values().filter(|r| r.site == s).count(),
                    "servers": agent.map_or(serde_json::Value::Null, |a| serde_json::json!(a.servers.iter().map(|x| serde_json::json!({
                        "server": x.server.to_string(), "tps": x.tps, "players": x.players, "ready": x.ready,
                        "bubbles": x.bubbles.iter().map(|b| b.0).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>())),
                    "backbone_rtt_ms": self.cfg.sites.ids().filter(|o| *o != s).map(|o| (self.cfg.sites.name(o).to_string(), self.mesh.sites().backbone_ms(s, o))).collect::<BTreeMap<_, _>>(),
                })
            })
            .collect();
        let bubbles: Vec<serde_json::Value> = self
            .registry
            .iter()
            .map(|(id, r)| {
                serde_json::json!({
                    "bubble": id.0,
                    "site": self.cfg.sites.name(r.site).to_string(),
                    "epoch": r.epoch,
                    "world": r.world,
                    "bounds": [[r.bounds.min.x, r.bounds.min.y, r.bounds.min.z], [r.bounds.max.x, r.bounds.max.y, r.bounds.max.z]],
                    "players": r.members.len(),
                    "homes": r.members.values().fold(BTreeMap::<String, usize>::new(), |mut m, h| { *m.entry(self.cfg.sites.name(*h).to_string()).or_default() += 1; m }),
                    "moving": r.moving.map(|h| h.0),
                    "tps": self.mesh.bubble_by_id(horizon_mesh::BubbleId(id.0)).map(|b| b.part_tps().to_vec()),
                    "parts": r.parts.iter().map(|b| [[b.min.x, b.min.y, b.min.z], [b.max.x, b.max.y, b.max.z]]).collect::<Vec<_>>(),
                })
            })
            .collect();
        let players: Vec<serde_json::Value> = self
            .mesh
            .players()
            .iter()
            .map(|p| {
                serde_json::json!({
                    "player": p.id.0,
                    "home": self.cfg.sites.name(p.home).to_string(),
                    "world": p.world.0,
                    "pos": [p.position.x, p.position.y, p.position.z],
                    "bubble": self.placed.get(&PlayerId(p.id.0)).map(|b| b.0),
                    "latency_ms": self.mesh.latency_of(p.id),
                })
            })
            .collect();
        serde_json::json!({
            "core": self.cfg.sites.name(self.cfg.sites.core()).to_string(),
            "generation": self.generation,
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "tick": self.mesh.last_stats(),
            "handovers": { "committed": self.metrics.handovers.get(0), "failed": self.metrics.handovers_failed.get(0), "in_flight": self.handovers.len() },
            "sites": sites,
            "bubbles": bubbles,
            "groups": self.groups(),
            "players": players,
            "recent_decisions": self.decisions.iter().rev().take(50).collect::<Vec<_>>(),
        })
    }
}

fn role(r: Role) -> horizon_mesh::Role {
    match r {
        Role::Pilot => horizon_mesh::Role::Pilot,
        Role::Player => horizon_mesh::Role::Player,
        Role::Afk => horizon_mesh::Role::Afk,
        Role::Npc => horizon_mesh::Role::Npc,
    }
}

fn vec3(v: Vec3) -> horizon_mesh::Vec3 {
    horizon_mesh::Vec3::new(v.x, v.y, v.z)
}

fn aabb(b: horizon_mesh::Aabb) -> Aabb {
    let v = |p: horizon_mesh::Vec3| Vec3 { x: p.x, y: p.y, z: p.z };
    Aabb { min: v(b.min), max: v(b.max) }
}
