//! The core's shell: sockets, the store, the clock. Everything it decides is in
//! [`CoreMachine`](crate::machine::CoreMachine); this loop feeds it what happened and carries
//! out its effects. Each agent connection has an ordered lane served by its own task: orders
//! to one site leave in the order they were decided, without waiting for each answer, and
//! the agent serves them in that order; direct orders (handover steps) run as tasks of their
//! own. Every result comes back to the loop as an event.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use horizon_mesh::{SiteId, Time};
use horizon_proto::control::{self, Control};
use horizon_proto::{ChannelId, ErrorCode, Failure, Name};
use horizon_transport::plumbing;
use horizon_transport::tls::{self, Identity, Roots};
use horizon_transport::{
    Conn, Inbound, InboundRequest, Limits, Listener, Peer, SiteCertificate, TransportStats,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::admin::{AdminQuery, CoreSource, PAGE};
use crate::config::CoreConfig;
use crate::machine::{
    ConnId, CoreMachine, Effect, Input, Lane, MachineConfig, OrderId, RequestToken,
};
use crate::store::{Durable, Fence, Store, StoreError};
use crate::writer::{Barrier, Done, Step, Writer};

const EVENT_QUEUE: usize = 4096;
/// Orders queued per agent. A full queue is an error (counted), never a silent wait.
const AGENT_QUEUE: usize = 4096;

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
    /// What the brain refuses in the configuration (sites, zones, delegations), each problem.
    #[error("configuration: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Mesh(Vec<horizon_mesh::ConfigError>),
    #[error("admin API on {addr}: {why}")]
    Admin { addr: SocketAddr, why: String },
    #[error("{}: not a certificate for the core: {why}", cert.display())]
    Certificate { cert: std::path::PathBuf, why: tls::TlsError },
}

/// A running core.
#[derive(Debug)]
pub struct CoreHandle {
    pub control_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub generation: u32,
    /// What its control listener saw (refusals, replays, credential reloads).
    pub transport: TransportStats,
    queries: mpsc::Sender<AdminQuery>,
    stop: watch::Sender<bool>,
    /// The shell's loop: it ends with why, if it stopped on its own (fenced).
    task: JoinHandle<Option<String>>,
    /// Set once the loop has ended and been waited for.
    ended: bool,
    /// On etcd: the task keeping this core's election lease alive.
    keeper: Option<tokio::task::AbortHandle>,
}

impl CoreHandle {
    /// The status document served at `/status`.
    pub async fn status(&self) -> Option<crate::CoreStatus> {
        let (tx, rx) = oneshot::channel();
        let all = horizon_admin::Page { after: None, limit: usize::MAX, private: true };
        self.queries.send(AdminQuery::Status(all, tx)).await.ok()?;
        rx.await.ok()
    }

    /// Stops the core and waits for it.
    pub async fn shutdown(mut self) {
        self.stop().await;
    }

    /// Stops the core and waits for it, keeping the handle (its status answers `None` from
    /// then on). Its ports are free once this returns.
    pub async fn stop(&mut self) {
        let _ = self.stop.send(true);
        if !self.ended {
            let _ = (&mut self.task).await;
            self.ended = true;
        }
    }

    /// Stops the core as a crash would, for tests and drills: on etcd its election lease is
    /// left to expire (not revoked), so a standby takes over only after its TTL. (The loop
    /// still closes its agents' connections: put them behind an emulator and cut it first for
    /// a silent death.)
    pub async fn kill(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
        self.stop().await;
    }

    /// Waits until the core stops on its own, and says why. Only a core on etcd does: when its
    /// election lease may have lapsed (the fence), it stops granting and renewing at once, and
    /// its process should end so that its supervisor restarts it as a standby.
    pub async fn fenced(&mut self) -> String {
        if self.ended {
            return "the core has stopped".to_owned();
        }
        let outcome = (&mut self.task).await;
        self.ended = true;
        match outcome {
            Ok(Some(why)) => why,
            Ok(None) => "the core has stopped".to_owned(),
            Err(e) => format!("the core's loop failed: {e}"),
        }
    }
}

/// Reloads the control listener's certificate, key and CA on SIGHUP or when their files
/// change: new connections use them, agents connected keep theirs. One that does not load
/// changes nothing (logged and counted).
fn reload_tls(
    cfg: &CoreConfig,
    handle: horizon_transport::ServerTls,
    limits: Limits,
    transport: TransportStats,
    mut stop: watch::Receiver<bool>,
) {
    use horizon_transport::reload;
    let (ca, cert, key) = (cfg.ca.clone(), cfg.cert.clone(), cfg.key.clone());
    let mut causes = reload::watch(vec![ca.clone(), cert.clone(), key.clone()], reload::POLL_EVERY);
    tokio::spawn(async move {
        loop {
            // Ends with the core, letting go of the listener's endpoint (its port).
            let cause = tokio::select! {
                _ = stop.changed() => break,
                c = causes.recv() => match c { Some(c) => c, None => break },
            };
            let loaded = load_tls(&ca, &cert, &key).and_then(|(roots, identity)| {
                Ok(tls::server_config(&identity, Some(&roots), ChannelId::Control, &limits)?)
            });
            match loaded {
                Ok(config) => {
                    handle.set(config);
                    transport.reloaded(true);
                    tracing::info!(cause = cause.as_str(), "certificate and CA reloaded");
                }
                Err(e) => {
                    transport.reloaded(false);
                    tracing::error!(cause = cause.as_str(), error = %e, "reload failed: what was loaded before stays in use");
                }
            }
        }
    });
}

/// The core's CA, and its certificate with its key, read and checked as the agents will
/// check them: the key is the certificate's, which chains to the CA and names the core
/// ([`tls::CORE_DNS_NAME`]). At start, at each reload, and for `horizon core --check`.
pub fn load_tls(ca: &Path, cert: &Path, key: &Path) -> Result<(Roots, Identity), CoreError> {
    let roots = Roots::load(ca)?;
    let identity = Identity::load(cert, key)?;
    identity
        .verify(&roots, tls::CORE_DNS_NAME, false)
        .map_err(|why| CoreError::Certificate { cert: cert.to_owned(), why })?;
    Ok((roots, identity))
}

/// Starts the core: checks its certificate, opens the store and persists a new generation
/// before serving, binds the control listener and the admin API, and runs the tick.
///
/// With `[store] kind = "etcd"` it first campaigns (`store/etcd.rs`): while another core leads,
/// it binds only its admin API, whose `/readyz` says it stands by and whose
/// `horizon_core_leader` is 0; elected, it reads the state, bumps the generation, and starts as
/// a restarted core does.
pub async fn start(cfg: CoreConfig) -> Result<CoreHandle, CoreError> {
    let (roots, identity) = load_tls(&cfg.ca, &cfg.cert, &cfg.key)?;
    let (store, generation, fence, keeper) = open_store(&cfg, (&roots, &identity)).await?;
    let core_name = cfg.sites.name(cfg.sites.core()).as_str().to_owned();
    let name = Name::new(core_name.clone()).map_err(|e| CoreError::Config(e.to_string()))?;
    let limits = Limits::default();
    // What the control listener sees, for this core's `/metrics`.
    let transport = TransportStats::default();
    // A standby that redirected agents closed that listener as it was elected: its port may
    // take a moment to be free.
    let bind_until = Instant::now() + CONTROL_PORT_FREE_WITHIN;
    let listener = loop {
        let bound = Listener::<Control>::bind(
            cfg.listen_control,
            tls::server_config(&identity, Some(&roots), ChannelId::Control, &limits)?,
            name.clone(),
            Arc::new(SiteCertificate),
            limits.clone(),
            transport.clone(),
        );
        match bound {
            Err(_) if fence.is_some() && Instant::now() < bind_until => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            bound => break bound?,
        }
    };
    let control_addr = listener.local_addr()?;

    let machine_cfg = MachineConfig {
        sites: cfg.sites.clone(),
        thresholds: cfg.thresholds.clone(),
        zones: cfg.zones.clone(),
        stage: cfg.stage,
        delegations: cfg.delegations.clone(),
    };
    let mut machine = CoreMachine::new(machine_cfg, generation, store.state(), Time::ZERO)
        .map_err(CoreError::Mesh)?;
    machine.take_kept_copies(store.pinned());
    let (queries_tx, queries) = mpsc::channel(64);
    let admin_listener = tokio::net::TcpListener::bind(cfg.listen_admin)
        .await
        .map_err(|e| CoreError::Admin { addr: cfg.listen_admin, why: e.to_string() })?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|e| CoreError::Admin { addr: cfg.listen_admin, why: e.to_string() })?;
    let (stop, stop_rx) = watch::channel(false);
    reload_tls(&cfg, listener.tls(), limits, transport.clone(), stop_rx.clone());
    let source = Arc::new(CoreSource { queries: queries_tx.clone() });
    let mut admin_stop = stop_rx.clone();
    let stopped = async move {
        let _ = admin_stop.changed().await;
    };
    let metrics = crate::metrics::Metrics::new(&cfg.sites, machine.stats(), &transport);
    let registry = metrics.registry.clone();
    leader_gauge(&registry, Some(generation));
    let access = horizon_admin::Access::from_env(admin_addr);
    tokio::spawn(horizon_admin::serve(
        admin_listener,
        registry,
        source,
        Some(PAGE),
        access,
        stopped,
    ));
    let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
    // The port is free again once the core has stopped (a restart binds it anew).
    let mut accept_stop = stop_rx.clone();
    let stopping = async move {
        let _ = accept_stop.changed().await;
    };
    plumbing::accept_loop(listener, events_tx.clone(), Event::AgentUp, stopping, "core stopping");
    tracing::info!(site = %core_name, %control_addr, %admin_addr, generation, stage = cfg.stage.as_str(), "core serving");
    let writer = Writer::start(Box::new(store), events_tx.clone(), Event::Stored)
        .map_err(|e| CoreError::Config(format!("cannot start the store thread: {e}")))?;
    let shell = Shell {
        sites: cfg.sites.clone(),
        machine,
        metrics,
        writer: Some(writer),
        barrier: Barrier::default(),
        started: Instant::now(),
        conns: HashMap::new(),
        replies: HashMap::new(),
        next_token: 1,
        events: events_tx,
        replicated: fence.is_some(),
        fatal: None,
    };
    let task = tokio::spawn(shell.run(events, queries, stop_rx, fence));
    Ok(CoreHandle {
        control_addr,
        admin_addr,
        generation,
        transport,
        queries: queries_tx,
        stop,
        task,
        ended: false,
        keeper,
    })
}

/// `horizon_core_leader`: 1 while this core leads (a core on the file store always does), 0
/// while it stands by; and, leading, `horizon_core_generation`, the generation it serves under.
fn leader_gauge(registry: &prometheus::Registry, leads: Option<u32>) {
    let gauge = |name: &str, help: &str, value: i64| {
        if let Ok(gauge) = prometheus::IntGauge::new(name, help) {
            gauge.set(value);
            let _ = registry.register(Box::new(gauge));
        }
    };
    gauge(
        "horizon_core_leader",
        "1 while this core leads (grants leases, serves agents); 0 while it stands by for another.",
        i64::from(leads.is_some()),
    );
    if let Some(generation) = leads {
        gauge(
            "horizon_core_generation",
            "The generation this core serves under: +1 at every start on its store and every takeover by a standby.",
            i64::from(generation),
        );
    }
}

/// The store the core serves from and the generation it serves under (persisted before
/// anything else); on etcd, the fence its election keeper raises, and that keeper.
type Opened = (Store, u32, Option<Fence>, Option<tokio::task::AbortHandle>);

/// How long an elected standby waits for its redirecting listener's port to be free.
const CONTROL_PORT_FREE_WITHIN: Duration = Duration::from_secs(3);

async fn open_store(cfg: &CoreConfig, tls: (&Roots, &Identity)) -> Result<Opened, CoreError> {
    #[cfg(not(feature = "etcd"))]
    let _ = tls;
    match &cfg.store_kind {
        crate::StoreKind::File => {
            let mut store = Store::open(&cfg.store)?;
            let generation = store.next_generation()?;
            Ok((store, generation, None, None))
        }
        #[cfg(feature = "etcd")]
        crate::StoreKind::Etcd(opts) => {
            let elected = stand_by(cfg, opts, tls).await?;
            let store = Store::replicated(&cfg.store, elected.log, elected.state)?;
            Ok((store, elected.generation, Some(elected.fence), Some(elected.keeper)))
        }
        #[cfg(not(feature = "etcd"))]
        crate::StoreKind::Etcd(_) => Err(CoreError::Config(
            "store.kind = \"etcd\": this build of horizon has no etcd store (build it with \
             `--features etcd`; the container image has it)"
                .to_owned(),
        )),
    }
}

/// Campaigns until this core leads, serving meanwhile an admin API that says it stands by
/// (`/livez` 200, `/readyz` 503 naming the leader, `horizon_core_leader` 0). With
/// `listen.advertise_control`, its control port answers every agent's hello with the leader's
/// address (`not_leader`), which the agent dials next; without, the port stays unbound and
/// agents go on to the next core address they were given.
#[cfg(feature = "etcd")]
async fn stand_by(
    cfg: &CoreConfig,
    opts: &crate::config::EtcdOptions,
    (roots, identity): (&Roots, &Identity),
) -> Result<crate::store::etcd::Leadership, CoreError> {
    let admin_fail =
        |e: std::io::Error| CoreError::Admin { addr: cfg.listen_admin, why: e.to_string() };
    let listener = tokio::net::TcpListener::bind(cfg.listen_admin).await.map_err(admin_fail)?;
    let admin_addr = listener.local_addr().map_err(admin_fail)?;
    let registry = horizon_admin::registry("core");
    leader_gauge(&registry, None);
    // The redirecting listener's refusals, on the standby's `/metrics`.
    let transport = TransportStats::default();
    horizon_admin::register(&registry, transport.collector());
    let standing = Arc::new(std::sync::Mutex::new(crate::admin::Standing::Connecting));
    let source = Arc::new(crate::admin::StandbySource { standing: standing.clone() });
    // Bound before the admin API is served: a port in use fails the start with nothing left
    // running.
    let redirect = match &cfg.advertise_control {
        Some(_) => {
            let name = Name::new(cfg.sites.name(cfg.sites.core()).as_str())
                .map_err(|e| CoreError::Config(e.to_string()))?;
            let limits = Limits::default();
            Some(Listener::<Control>::bind(
                cfg.listen_control,
                tls::server_config(identity, Some(roots), ChannelId::Control, &limits)?,
                name,
                Arc::new(crate::admin::Redirect { standing: standing.clone() }),
                limits,
                transport.clone(),
            )?)
        }
        None => None,
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let access = horizon_admin::Access::from_env(admin_addr);
    let admin =
        tokio::spawn(horizon_admin::serve(listener, registry, source, None, access, async {
            let _ = stopped.await;
        }));
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "core".to_owned());
    let reach = cfg.advertise_control.clone().unwrap_or_else(|| cfg.listen_control.to_string());
    let value = format!("{host} {reach}");
    tracing::info!(store = %opts.prefix, %value, "campaigning to lead (etcd)");
    let universe =
        opts.universe.clone().unwrap_or_else(|| cfg.sites.name(cfg.sites.core()).to_string());
    let elected = crate::store::etcd::lead(opts, value, &universe, |now| {
        let now = match now {
            Some(other) => {
                tracing::info!(leader = %other, "standing by: another core leads");
                crate::admin::Standing::Leads(other.to_owned())
            }
            None => {
                tracing::info!("no core leads: this one should be elected at once");
                crate::admin::Standing::NobodyLeads
            }
        };
        if let Ok(mut s) = standing.lock() {
            *s = now;
        }
    })
    .await;
    let _ = stop.send(());
    let _ = admin.await;
    if let Some(redirect) = redirect {
        redirect.close("this core leads now");
    }
    let elected = elected?;
    tracing::info!(generation = elected.generation, "elected: this core leads");
    Ok(elected)
}

enum Event {
    AgentUp(Peer<Control>),
    AgentInbound(SiteId, ConnId, Inbound<Control>),
    AgentGone(SiteId, ConnId),
    Backup(SiteId, ConnId, control::Backup),
    OrderDone(OrderId, Result<control::Reply, Failure>),
    /// The store thread finished a job.
    Stored(Done),
}

/// One agent connection: how to reach it.
struct AgentConn {
    conn: Conn<Control>,
    ordered: mpsc::Sender<(OrderId, control::Request)>,
}

struct Shell {
    sites: horizon_mesh::Sites,
    machine: CoreMachine,
    /// The registry's own measurements (the tick's wall time); the machine's figures are read
    /// from its stats at each scrape.
    metrics: crate::metrics::Metrics,
    /// The store, on its thread (`None` once closed).
    writer: Option<Writer>,
    /// The machine's effects not carried out yet (they wait behind a write).
    barrier: Barrier,
    started: Instant,
    conns: HashMap<ConnId, AgentConn>,
    /// Agent requests waiting for the machine's reply.
    replies: HashMap<RequestToken, InboundRequest<Control>>,
    next_token: RequestToken,
    events: mpsc::Sender<Event>,
    /// The ownership log is in etcd (`[store] kind = "etcd"`).
    replicated: bool,
    /// Why the core must stop now, before carrying out anything more (a failed write on etcd).
    fatal: Option<String>,
}

impl Shell {
    /// Runs until stopped, or until the fence is raised (then it returns why).
    async fn run(
        mut self,
        mut events: mpsc::Receiver<Event>,
        mut queries: mpsc::Receiver<AdminQuery>,
        mut stop: watch::Receiver<bool>,
        mut fence: Option<Fence>,
    ) -> Option<String> {
        let mut fenced = None;
        loop {
            let next = self.started + Duration::from_millis(self.machine.poll_timeout().as_ms());
            tokio::select! {
                _ = stop.changed() => break,
                why = raised(&mut fence) => {
                    // Nothing more is granted or renewed: the loop ends here, the agents'
                    // connections close, and a standby takes over once the lease lapses.
                    tracing::error!(reason = %why, "fenced: this core stops leading now");
                    fenced = Some(why);
                    break;
                }
                Some(event) = events.recv() => self.event(event),
                Some(query) = queries.recv() => self.query(query),
                _ = tokio::time::sleep_until(next) => {
                    let t0 = Instant::now();
                    self.machine.handle_timeout(self.now());
                    self.metrics.record_tick(t0.elapsed().as_secs_f64());
                    self.machine.refresh_gauges();
                }
            }
            if let Some(why) = self.fatal.take() {
                tracing::error!(reason = %why, "fenced: this core stops leading now");
                fenced = Some(why);
                break;
            }
            self.carry_out();
        }
        let farewell = if fenced.is_some() { "core fenced" } else { "core stopping" };
        for agent in self.conns.values() {
            agent.conn.close(ErrorCode::ShuttingDown, farewell);
        }
        // The store thread finishes what it was sent (flushed), then releases the store.
        drop(events);
        if let Some(writer) = self.writer.take() {
            writer.close().await;
        }
        tracing::info!("core stopped");
        fenced
    }

    fn now(&self) -> Time {
        Time::from_ms(self.started.elapsed().as_millis() as u64)
    }

    fn event(&mut self, event: Event) {
        let now = self.now();
        let input = match event {
            Event::AgentUp(peer) => match self.agent_up(peer) {
                Some(input) => input,
                None => return,
            },
            Event::AgentInbound(site, conn, Inbound::Request(req)) => {
                let token = self.next_token;
                self.next_token += 1;
                let request = req.body.clone();
                self.replies.insert(token, req);
                Input::AgentRequest { site, conn, token, request }
            }
            Event::AgentInbound(site, conn, Inbound::Stream(rx)) => {
                // The universe backup: chunks of state copies, checked against current epochs.
                // (The connection's pump forwards its streams itself; this arm only completes
                // the match, forwarding the same way.)
                let backup = move |item| Event::Backup(site, conn, item);
                plumbing::forward_stream(rx, self.events.clone(), backup);
                return;
            }
            Event::AgentInbound(_, _, Inbound::Datagram(never)) => match never {},
            Event::Backup(site, conn, item) => Input::Backup { site, conn, item },
            Event::AgentGone(site, conn) => {
                self.conns.remove(&conn);
                Input::AgentDisconnected { site, conn }
            }
            Event::OrderDone(order, result) => Input::OrderDone { order, result },
            Event::Stored(Done::Written(result)) => {
                self.barrier.written();
                match result {
                    Ok(()) => return,
                    Err(e) => {
                        // Ownership must be durable before it is used; a store that cannot
                        // write is fatal for a production core (the supervisor restarts it
                        // with a new generation). Counted and logged here. On etcd the core
                        // stops at once, before carrying out anything that waited on the write:
                        // it may have been deposed, and another core may lead.
                        tracing::error!(error = %e, "store write failed");
                        if self.replicated {
                            self.fatal = Some(format!("a write of the ownership log failed: {e}"));
                        }
                        Input::StoreFailed
                    }
                }
            }
            Event::Stored(Done::Read(bubble, copy)) => Input::BackupRead { bubble, copy },
            Event::Stored(Done::Pinned(result)) => {
                if let Err(e) = result {
                    tracing::warn!(error = %e, "a copy players need was not kept");
                }
                return;
            }
            Event::Stored(Done::PinnedRead(adopt, copy)) => Input::PinnedRead { adopt, copy },
        };
        self.machine.handle(input, now);
    }

    fn agent_up(&mut self, peer: Peer<Control>) -> Option<Input> {
        let Some(site) = self.sites.id(peer.hello.peer.as_str()) else {
            peer.conn.close(ErrorCode::Unauthorized, "site not in the core's configuration");
            return None;
        };
        let id = peer.conn.id();
        // Its backup streams' items reach the loop directly; requests as they come.
        plumbing::pump(
            peer.inbound,
            self.events.clone(),
            move |item| Event::Backup(site, id, item),
            move |i| Event::AgentInbound(site, id, i),
            Event::AgentGone(site, id),
        );
        let (ordered, orders) = mpsc::channel::<(OrderId, control::Request)>(AGENT_QUEUE);
        let site_name = self.sites.name(site).to_string();
        tokio::spawn(ordered_lane(peer.conn.clone(), orders, self.events.clone(), site_name));
        self.conns.insert(id, AgentConn { conn: peer.conn, ordered });
        Some(Input::AgentConnected { site, conn: id })
    }

    /// Carries out the machine's effects, in order. Writes go to the store thread; nothing
    /// after a write is carried out until it is durable (the loop takes events meanwhile).
    fn carry_out(&mut self) {
        while let Some(effect) = self.machine.poll_effect() {
            self.barrier.push(effect);
        }
        while let Some(step) = self.barrier.next() {
            match step {
                Step::Now(effect) => self.carry_out_now(effect),
                Step::Store(job) => {
                    let writes = job.writes();
                    if !self.writer.as_ref().is_some_and(|w| w.send(job)) {
                        tracing::error!("the store thread is gone");
                        if writes {
                            self.barrier.written();
                        }
                        self.machine.handle(Input::StoreFailed, self.now());
                    }
                }
            }
        }
    }

    /// Carries out an effect that touches no store.
    fn carry_out_now(&mut self, effect: Effect) {
        match effect {
            Effect::Send { conn, lane, order, request, .. } => {
                self.send(conn, lane, order, request)
            }
            Effect::Reply { token, reply } => {
                if let Some(req) = self.replies.remove(&token) {
                    tokio::spawn(req.reply(reply));
                }
            }
            Effect::Close { conn, code, why } => {
                if let Some(agent) = self.conns.get(&conn) {
                    agent.conn.close(code, why);
                }
            }
            // Store effects go through `carry_out`.
            Effect::Persist(_)
            | Effect::PutBackup { .. }
            | Effect::ReadBackup { .. }
            | Effect::PinBackup { .. }
            | Effect::UnpinBackup { .. }
            | Effect::ReadPinned { .. } => {}
        }
    }

    fn send(&mut self, conn: ConnId, lane: Lane, order: OrderId, request: control::Request) {
        let Some(agent) = self.conns.get(&conn) else {
            self.machine.handle(
                Input::OrderDone {
                    order,
                    result: Err(Failure::Unreachable("agent connection gone".into())),
                },
                self.now(),
            );
            return;
        };
        match lane {
            Lane::Ordered => {
                if agent.ordered.try_send((order, request)).is_err() {
                    tracing::error!("agent order queue full");
                    let result = Err(Failure::Unreachable("agent order queue full".into()));
                    self.machine.handle(Input::OrderDone { order, result }, self.now());
                }
            }
            Lane::Direct => {
                let conn = agent.conn.clone();
                let events = self.events.clone();
                tokio::spawn(async move {
                    let result = conn.request(&request).await.map_err(order_error);
                    let _ = events.send(Event::OrderDone(order, result)).await;
                });
            }
        }
    }

    fn query(&mut self, query: AdminQuery) {
        match query {
            AdminQuery::Ping(tx) => {
                let _ = tx.send(());
            }
            AdminQuery::Status(page, tx) => {
                let _ = tx.send(self.machine.status(self.now(), page));
            }
            AdminQuery::MeasureCsv(tx) => {
                let _ = tx.send(self.machine.measure_csv());
            }
        }
    }
}

/// Waits for the fence to be raised (never, without one).
async fn raised(fence: &mut Option<Fence>) -> String {
    match fence {
        Some(f) => f.raised().await,
        None => std::future::pending().await,
    }
}

/// Sends one agent's ordered orders as `InOrder` requests numbered from 0 under a lane id of
/// this connection, in the order they were decided, without waiting for each answer (at most
/// [`control::MAX_IN_ORDER`] unanswered): a queue of orders costs one trip to the site, not
/// one round trip each. The agent serves them one at a time, so each answer is awaited for at
/// most the request timeout counted from the previous order's answer, and answers reach the
/// loop in order.
async fn ordered_lane(
    conn: Conn<Control>,
    mut orders: mpsc::Receiver<(OrderId, control::Request)>,
    events: mpsc::Sender<Event>,
    site: String,
) {
    let lane = fastrand::u64(..);
    let limit = conn.limits().request_timeout;
    let window = Arc::new(tokio::sync::Semaphore::new(control::MAX_IN_ORDER as usize));
    let mut previous: Option<oneshot::Receiver<()>> = None;
    let mut seq = 0;
    while let Some((order, request)) = orders.recv().await {
        let Ok(permit) = window.clone().acquire_owned().await else { return };
        let kind = horizon_proto::Message::kind(&request);
        let request = control::Request::InOrder { lane, seq, order: Box::new(request) };
        seq += 1;
        // Opened and written here, one after the other: the streams leave in order.
        let sent = conn.send_request(conn.next_id(), &request).await;
        let (done, next) = oneshot::channel::<()>();
        let before = previous.replace(next);
        let (events, site) = (events.clone(), site.clone());
        tokio::spawn(async move {
            let _permit = permit;
            if let Some(before) = before {
                let _ = before.await;
            }
            let result = match sent {
                Ok(sent) => match tokio::time::timeout(limit, sent.reply()).await {
                    Ok(result) => result,
                    Err(_) => {
                        Err(horizon_transport::Error::Timeout { ms: limit.as_millis() as u64 })
                    }
                },
                Err(e) => Err(e),
            };
            let result = result.map_err(|e| {
                tracing::warn!(%site, order = kind, error = %e, "order failed");
                order_error(e)
            });
            let _ = events.send(Event::OrderDone(order, result)).await;
            let _ = done.send(());
        });
    }
}

/// An agent's refusal is a refusal; a connection that ended or a time that ran out leaves the
/// order's fate unknown ([`Failure::may_have_acted`]).
fn order_error(e: horizon_transport::Error) -> Failure {
    Failure::from(e)
}
