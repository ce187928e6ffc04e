//! The agent's tokio shell around [`AgentMachine`]: it binds the listeners, keeps the
//! connections and their streams, runs the [`ServerDriver`], feeds everything that happens
//! to the machine with the time, and carries out its effects. No logic lives here: each
//! connection is pumped into one bounded queue, each request leaves in a task that reports
//! its answer back, and requests to one game server go through that server's lane, one at a
//! time, in order.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use horizon_proto::control::Control;
use horizon_proto::gateway::{self, Gateway};
use horizon_proto::server::{self, Server};
use horizon_proto::transfer::{self, Transfer};
use horizon_proto::{ChannelId, ErrorCode, HandoverId, Name, StateItem};
use horizon_transport::credential::{self, Keyring, Kind, SharedKeyring, SignedToken};
use horizon_transport::reload::ReloadCause;
use horizon_transport::tls::{self, Identity, Roots};
use horizon_transport::{
    Conn, Dial, HelloParams, Inbound, InboundRequest, Limits, Link, LinkEvent, Listener, Peer,
    SiteCertificate, client_endpoint,
};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::AgentConfig;
use crate::driver::ServerDriver;
use crate::machine::{AgentMachine, ConnId, Effect, Input, MachineConfig, Pending, Token};
use crate::plumbing::{
    Outbound, accept_loop, forward_stream, open_stream_task, pump, pump_link, rtt_ms, server_lane,
    stream_task,
};
use crate::stats::{AgentStats, FreezeSample};

/// Game servers stopping with the agent get this long after SIGTERM before SIGKILL.
const SERVER_STOP_GRACE: Duration = Duration::from_secs(5);
/// The loop's queue: every connection's traffic passes here. Pumps wait when it is full.
const EVENT_QUEUE: usize = 8192;
/// Items queued per outbound stream (to a server, a player, a peer) and requests queued per
/// server lane. Beyond it, stream items are dropped (the next tick replaces an update, inputs
/// wait for their re-send) and requests are answered with an error.
pub(crate) const STREAM_QUEUE: usize = 2048;
/// The bytes queued per outbound stream, at most (with [`STREAM_QUEUE`]): a large bubble's
/// snapshot fits; a peer cannot make the agent hold gigabytes for a slow reader.
pub(crate) const STREAM_QUEUE_BYTES: usize = 64 << 20;
/// How often the driver is asked which servers ended.
const DRIVER_POLL: Duration = Duration::from_millis(200);

/// Why an agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("TLS material: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("transport: {0}")]
    Transport(#[from] horizon_transport::Error),
    #[error("site name {0:?}: {1}")]
    Name(String, horizon_proto::NameTooLong),
    #[error("admin API on {0}: {1}")]
    Admin(SocketAddr, std::io::Error),
    #[error("probe beacon (listen.beacon) on {0}: {1}")]
    Beacon(SocketAddr, std::io::Error),
    #[error("player keys: {0}")]
    Keys(#[from] credential::CredentialError),
    #[error("{}: not a certificate for site {site}: {why}", cert.display())]
    Certificate { cert: std::path::PathBuf, site: String, why: tls::TlsError },
}

/// A running agent.
#[derive(Debug)]
pub struct AgentHandle {
    pub site: String,
    pub servers_addr: SocketAddr,
    pub players_addr: SocketAddr,
    pub transfer_addr: SocketAddr,
    /// The admin API's address, if configured.
    pub admin_addr: Option<SocketAddr>,
    /// The probe beacon's address, if configured.
    pub beacon_addr: Option<SocketAddr>,
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

    /// Ends the agent as a crash would, for drills and tests: no goodbye to anyone. Its loop
    /// is dropped where it stands, so its game servers get SIGKILL (as the parent-death signal
    /// gives them when an agent process dies), its listeners and links close, and nothing is
    /// told to the core, the players or the game servers first. Returns once its ports are
    /// free to bind again (or after 5 s).
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
        drop(self.stop);
        let addrs: Vec<SocketAddr> = [self.servers_addr, self.players_addr, self.transfer_addr]
            .into_iter()
            .chain(self.beacon_addr)
            .collect();
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && addrs.iter().any(|a| std::net::UdpSocket::bind(a).is_err())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Starts an agent: binds its three listeners, dials the core, and runs until shut down.
pub async fn start(
    cfg: AgentConfig,
    driver: Box<dyn ServerDriver>,
) -> Result<AgentHandle, AgentError> {
    let (roots, identity, player_keys) = crate::credentials::load_files(&cfg)?;
    let player_keys = SharedKeyring::new(player_keys);
    // Each game server's token names it, signed by a key only this agent holds.
    let server_keys = SharedKeyring::new(Keyring::random("agent"));
    let site = Name::new(cfg.site.clone()).map_err(|e| AgentError::Name(cfg.site.clone(), e))?;
    let limits = Limits::default();
    let servers = Listener::<Server>::bind(
        cfg.listen_servers,
        tls::server_config(&identity, None, ChannelId::Server, &limits)?,
        site.clone(),
        Arc::new(SignedToken { keys: server_keys.clone(), kind: Kind::Server }),
        limits.clone(),
    )?;
    let players = Listener::<Gateway>::bind(
        cfg.listen_players,
        tls::server_config(&identity, None, ChannelId::Gateway, &limits)?,
        site.clone(),
        Arc::new(SignedToken { keys: player_keys.clone(), kind: Kind::Player }),
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
        addr: cfg.core.clone(),
        // The core's own name: no site's certificate (the core site's neither) passes for it.
        server_name: horizon_transport::tls::CORE_DNS_NAME.to_owned(),
        config: tls::client_config(&roots, Some(&identity), ChannelId::Control, &limits)?,
        hello: HelloParams::new(site.clone()),
        limits: limits.clone(),
    });
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    let stats = Arc::new(AgentStats::default());
    let (stop, stop_rx) = watch::channel(false);
    let metrics = crate::metrics::AgentMetrics::new(&cfg.site, stats.clone());
    let admin_addr = match cfg.listen_admin {
        Some(addr) => Some(serve_admin(addr, &cfg.site, metrics.clone(), stop_rx.clone()).await?),
        None => None,
    };
    let beacon_addr = match cfg.listen_beacon {
        Some(addr) => {
            let beacon = crate::beacon::start(addr, stats.clone(), stop_rx.clone());
            let local = beacon.await.map_err(|e| AgentError::Beacon(addr, e))?;
            tracing::info!(site = %cfg.site, addr = %local, "probe beacon listening");
            Some(local)
        }
        None => None,
    };
    let listener_tls = [
        (servers.tls(), ChannelId::Server, false),
        (players.tls(), ChannelId::Gateway, false),
        (transfers.tls(), ChannelId::Transfer, true),
    ];
    crate::credentials::forward_reloads(&cfg, events_tx.clone());
    pump_link(core.events, core.inbound, events_tx.clone());
    accept_loop(servers, events_tx.clone(), Event::ServerUp);
    accept_loop(players, events_tx.clone(), Event::PlayerUp);
    accept_loop(transfers, events_tx.clone(), |p: Peer<Transfer>| {
        Event::PeerUp(p.conn, Some(p.inbound))
    });
    let machine_cfg = MachineConfig {
        site: site.clone(),
        advertise_transfer: cfg.advertise_transfer.clone(),
        peers: cfg.peers.clone(),
        warm_pool: cfg.warm_pool,
        seats_per_server: cfg.seats_per_server,
        players_per_server: cfg.players_per_server,
        report_every: Duration::from_millis(cfg.report_ms),
        renew_every: Duration::from_millis(cfg.renew_ms),
        server_tick: Duration::from_millis(u64::from(cfg.server_tick_ms)),
        // The configured address, else the bound one unless it is a wildcard.
        advertise_admin: cfg
            .advertise_admin
            .clone()
            .or_else(|| admin_addr.filter(|a| !a.ip().is_unspecified()).map(|a| a.to_string())),
    };
    let shell = Shell {
        machine: AgentMachine::new(machine_cfg, stats.clone(), Instant::now()),
        stats: stats.clone(),
        metrics,
        site: site.clone(),
        core: core.link,
        backup: None,
        driver,
        servers_addr,
        endpoint,
        roots,
        identity,
        credentials: crate::credentials::Credentials {
            cfg: cfg.clone(),
            listener_tls,
            player_keys,
            server_keys,
        },
        limits,
        events: events_tx,
        next_token: 0,
        core_orders: HashMap::new(),
        server_requests: HashMap::new(),
        player_requests: HashMap::new(),
        peer_requests: HashMap::new(),
        servers: HashMap::new(),
        players: HashMap::new(),
        peers: HashMap::new(),
        dialed: HashMap::new(),
        mirrors: HashMap::new(),
        held_ready: Vec::new(),
        pool_states: HashMap::new(),
    };
    let task = tokio::spawn(shell.run(events_rx, stop_rx));
    Ok(AgentHandle {
        site: cfg.site,
        servers_addr,
        players_addr,
        transfer_addr,
        admin_addr,
        beacon_addr,
        stats,
        stop,
        task,
    })
}

/// Binds and serves the admin API until the agent stops; returns its address.
async fn serve_admin(
    addr: SocketAddr,
    site: &str,
    metrics: crate::metrics::AgentMetrics,
    mut stop: watch::Receiver<bool>,
) -> Result<SocketAddr, AgentError> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| AgentError::Admin(addr, e))?;
    let bound = listener.local_addr().map_err(|e| AgentError::Admin(addr, e))?;
    let registry = metrics.registry.clone();
    let source = Arc::new(crate::metrics::AgentSource { site: site.to_owned(), metrics });
    let stopped = async move {
        let _ = stop.changed().await;
    };
    let access = horizon_admin::Access::from_env(bound);
    tokio::spawn(async move {
        if let Err(e) =
            horizon_admin::serve(listener, registry, source, None, access, stopped).await
        {
            tracing::error!(error = %e, "admin API stopped");
        }
    });
    tracing::info!(%bound, "agent admin API serving");
    Ok(bound)
}

/// Everything that reaches the loop.
pub(crate) enum Event {
    Core(LinkEvent<Control>),
    CoreInbound(Inbound<Control>),
    ServerUp(Peer<Server>),
    ServerInbound(Name, ConnId, Inbound<Server>),
    ServerItem(Name, StateItem),
    ServerGone(Name, ConnId),
    PlayerUp(Peer<Gateway>),
    PlayerInbound(ConnId, Inbound<Gateway>),
    PlayerItem(ConnId, gateway::Item),
    PlayerGone(ConnId),
    /// A transfer connection to another site: accepted (with its inbound) or dialed.
    PeerUp(Conn<Transfer>, Option<mpsc::Receiver<Inbound<Transfer>>>),
    PeerInbound(Name, Inbound<Transfer>),
    PeerItem(Name, StateItem),
    PeerGone(Name, ConnId),
    /// A handover stream was opened (or not).
    MirrorOpened(HandoverId, Result<Outbound<StateItem>, String>),
    /// A task's result, for the machine as it is.
    Machine(Input),
    /// Certificates or keys to read again.
    Reload(ReloadCause),
}

/// A game server's connection: its stream and its request lane.
struct ServerIo {
    conn: Conn<Server>,
    out: Outbound<StateItem>,
    lane: mpsc::Sender<(Pending, server::Request)>,
}

struct PlayerIo {
    conn: Conn<Gateway>,
    /// Opened at the first item for the player.
    out: Option<Outbound<gateway::Item>>,
}

struct PeerIo {
    conn: Conn<Transfer>,
    out: Outbound<StateItem>,
}

struct Shell {
    machine: AgentMachine,
    stats: Arc<AgentStats>,
    /// Histograms of what the machine observed (its counters are in `AgentStats`).
    metrics: crate::metrics::AgentMetrics,
    site: Name,
    core: Link<Control>,
    /// The universe backup stream to the core (opened at each connection).
    backup: Option<Outbound<horizon_proto::control::Backup>>,
    driver: Box<dyn ServerDriver>,
    /// Where this agent's game servers connect.
    servers_addr: SocketAddr,
    endpoint: quinn::Endpoint,
    roots: Roots,
    identity: Identity,
    credentials: crate::credentials::Credentials,
    limits: Limits,
    events: mpsc::Sender<Event>,
    next_token: Token,
    core_orders: HashMap<Token, InboundRequest<Control>>,
    server_requests: HashMap<Token, InboundRequest<Server>>,
    player_requests: HashMap<Token, InboundRequest<Gateway>>,
    peer_requests: HashMap<Token, InboundRequest<Transfer>>,
    servers: HashMap<Name, ServerIo>,
    players: HashMap<ConnId, PlayerIo>,
    peers: HashMap<Name, PeerIo>,
    /// Links this agent dialed, kept alive by holding them.
    dialed: HashMap<Name, Link<Transfer>>,
    mirrors: HashMap<HandoverId, Outbound<StateItem>>,
    /// `Ready` requests of servers their driver does not count ready yet (one per server).
    held_ready: Vec<(Name, ConnId, Token)>,
    /// Each server's pool state as last told to the driver (`true`: hosting).
    pool_states: HashMap<Name, bool>,
}

impl Shell {
    async fn run(mut self, mut events: mpsc::Receiver<Event>, mut stop: watch::Receiver<bool>) {
        let mut driver_poll = tokio::time::interval(DRIVER_POLL);
        driver_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let deadline = self.machine.poll_timeout();
            tokio::select! {
                _ = stop.changed() => break,
                Some(event) = events.recv() => self.event(event),
                _ = tokio::time::sleep_until(deadline) => {
                    self.machine.handle_timeout(Instant::now());
                }
                _ = driver_poll.tick() => {
                    for (server, why) in self.driver.poll_ended() {
                        self.machine.handle(Input::ServerEnded { server, why }, Instant::now());
                    }
                    self.release_ready();
                    self.tell_pool_states();
                }
            }
            self.carry_out();
        }
        tracing::info!(site = %self.site, "agent stopping");
        // Game servers get SIGTERM and a grace period to finish, then SIGKILL.
        self.driver.terminate_all();
        let grace = Instant::now() + SERVER_STOP_GRACE;
        while self.driver.running() > 0 && Instant::now() < grace {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.driver.poll_ended();
        }
        self.driver.stop_all();
        for p in self.players.values() {
            p.conn.close(ErrorCode::ShuttingDown, "agent stopping");
        }
        if let Some(conn) = self.core.current() {
            conn.close(ErrorCode::ShuttingDown, "agent stopping");
        }
    }

    /// Tells the driver each server whose pool state changed since it was last told.
    fn tell_pool_states(&mut self) {
        let now: HashMap<Name, bool> =
            self.machine.hosting().map(|(name, hosting)| (name.clone(), hosting)).collect();
        for (name, hosting) in &now {
            if self.pool_states.get(name) != Some(hosting) {
                self.driver.set_hosting(name.as_str(), *hosting);
            }
        }
        self.pool_states = now;
    }

    /// Passes on the held `Ready` of each server its driver now counts ready.
    fn release_ready(&mut self) {
        let held = std::mem::take(&mut self.held_ready);
        for (server, conn, token) in held {
            if self.driver.ready(server.as_str()) {
                let request = server::Request::Ready;
                self.feed(Input::ServerRequest { server, conn, token, request });
            } else {
                self.held_ready.push((server, conn, token));
            }
        }
    }

    fn token(&mut self) -> Token {
        self.next_token += 1;
        self.next_token
    }

    fn feed(&mut self, input: Input) {
        self.machine.handle(input, Instant::now());
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Core(LinkEvent::Up(conn)) => {
                self.backup = Some(open_stream_task(conn));
                self.feed(Input::CoreUp);
            }
            Event::Core(LinkEvent::Down(e)) => {
                self.backup = None;
                self.feed(Input::CoreDown { error: e.to_string() });
            }
            Event::Core(LinkEvent::Retry { error, wait }) => {
                tracing::debug!(site = %self.site, %error, ?wait, "core unreachable");
            }
            Event::CoreInbound(Inbound::Request(req)) => {
                let token = self.token();
                let order = req.body.clone();
                self.core_orders.insert(token, req);
                self.feed(Input::CoreOrder { token, order });
            }
            Event::CoreInbound(Inbound::Stream(_) | Inbound::Datagram(_)) => {}
            Event::ServerUp(peer) => self.server_up(peer),
            Event::ServerInbound(server, conn, Inbound::Request(req)) => {
                let token = self.token();
                let request = req.body.clone();
                self.server_requests.insert(token, req);
                // A server is ready when it says so and its platform agrees (a pod's Ready
                // condition): until then its `Ready` waits here, one per server.
                let platform_ready = self.driver.ready(server.as_str());
                if matches!(request, server::Request::Ready) && !platform_ready {
                    if self.held_ready.iter().any(|(s, ..)| *s == server) {
                        let fault = horizon_proto::Fault::new(ErrorCode::Unexpected, "Ready twice");
                        self.effect(Effect::AnswerServer { token, result: Err(fault) });
                    } else {
                        self.held_ready.push((server, conn, token));
                    }
                    return;
                }
                self.feed(Input::ServerRequest { server, conn, token, request });
            }
            Event::ServerInbound(..) => {}
            Event::ServerItem(server, item) => self.feed(Input::ServerItem { server, item }),
            Event::ServerGone(server, conn) => {
                self.held_ready.retain(|(s, c, _)| (s, *c) != (&server, conn));
                if self.servers.get(&server).is_some_and(|s| s.conn.id() == conn) {
                    self.servers.remove(&server);
                }
                self.feed(Input::ServerGone { server, conn });
            }
            Event::PlayerUp(peer) => {
                let conn = peer.conn.id();
                // The gateway's authenticator proved the account (a signed player token).
                let Some(client) = peer.identity.clone() else {
                    peer.conn.close(ErrorCode::Unauthorized, "no player account");
                    return;
                };
                pump(
                    peer.inbound,
                    self.events.clone(),
                    move |item| Event::PlayerItem(conn, item),
                    move |i| Event::PlayerInbound(conn, i),
                    Event::PlayerGone(conn),
                );
                self.players.insert(conn, PlayerIo { conn: peer.conn, out: None });
                self.feed(Input::PlayerUp { conn, client });
            }
            Event::PlayerInbound(conn, inbound) => {
                let rtt_ms = self.players.get(&conn).map_or(0.0, |p| rtt_ms(&p.conn));
                match inbound {
                    Inbound::Request(req) => {
                        let token = self.token();
                        let request = req.body.clone();
                        self.player_requests.insert(token, req);
                        self.feed(Input::PlayerRequest { conn, token, request, rtt_ms });
                    }
                    Inbound::Datagram(datagram) => {
                        self.feed(Input::PlayerDatagram { conn, datagram, rtt_ms })
                    }
                    Inbound::Stream(_) => {}
                }
            }
            Event::PlayerItem(conn, item) => self.feed(Input::PlayerItem { conn, item }),
            Event::PlayerGone(conn) => {
                self.players.remove(&conn);
                self.feed(Input::PlayerGone { conn });
            }
            Event::PeerUp(conn, inbound) => self.peer_up(conn, inbound),
            Event::PeerInbound(site, inbound) => match inbound {
                Inbound::Request(req) => {
                    let token = self.token();
                    let request = req.body.clone();
                    self.peer_requests.insert(token, req);
                    self.feed(Input::PeerRequest { site, token, request });
                }
                Inbound::Stream(rx) => {
                    forward_stream(rx, self.events.clone(), move |item| {
                        Event::PeerItem(site.clone(), item)
                    });
                }
                Inbound::Datagram(probe) => self.feed(Input::PeerDatagram { site, probe }),
            },
            Event::PeerItem(site, item) => self.feed(Input::PeerItem { site, item }),
            Event::PeerGone(site, conn) => {
                if self.peers.get(&site).is_some_and(|p| p.conn.id() == conn) {
                    self.peers.remove(&site);
                }
                self.feed(Input::PeerGone { site, conn });
            }
            Event::MirrorOpened(handover, result) => {
                let result = result.map(|tx| {
                    self.mirrors.insert(handover, tx);
                });
                self.feed(Input::MirrorOpened { handover, result });
            }
            Event::Machine(input) => self.feed(input),
            Event::Reload(cause) => self.reload(cause),
        }
    }

    /// Reads the certificate, key, CA and player keys again: new connections use them,
    /// those up keep theirs. If anything fails to load, nothing changes (and it is said).
    fn reload(&mut self, cause: ReloadCause) {
        match self.credentials.load(&self.limits) {
            Ok(reloaded) => {
                let new = self.credentials.install(reloaded);
                self.core.set_tls(new.control);
                for link in self.dialed.values() {
                    link.set_tls(new.transfer.clone());
                }
                (self.roots, self.identity) = (new.roots, new.identity);
                horizon_transport::metrics::reloaded(true);
                tracing::info!(site = %self.site, cause = cause.as_str(), player_key = %new.signing, "certificate, CA and player keys reloaded");
            }
            Err(why) => {
                horizon_transport::metrics::reloaded(false);
                tracing::error!(site = %self.site, cause = cause.as_str(), %why, "reload failed: what was loaded before stays in use");
            }
        }
    }

    fn server_up(&mut self, peer: Peer<Server>) {
        let server = peer.hello.peer.clone();
        let id = peer.conn.id();
        let (n, m) = (server.clone(), server.clone());
        pump(
            peer.inbound,
            self.events.clone(),
            move |item| Event::ServerItem(n.clone(), item),
            move |i| Event::ServerInbound(m.clone(), id, i),
            Event::ServerGone(server.clone(), id),
        );
        let out = open_stream_task(peer.conn.clone());
        let lane = server_lane(peer.conn.clone(), server.clone(), self.events.clone());
        self.servers.insert(server.clone(), ServerIo { conn: peer.conn, out, lane });
        self.feed(Input::ServerUp { server, conn: id });
    }

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
        self.peers.insert(site.clone(), PeerIo { conn, out });
        self.feed(Input::PeerUp { site, conn: id });
    }

    /// Carries out the machine's effects, feeding back at once what fails on the spot.
    fn carry_out(&mut self) {
        while let Some(effect) = self.machine.poll_effect() {
            self.effect(effect);
        }
    }

    fn effect(&mut self, effect: Effect) {
        match effect {
            Effect::ToCore { pending, request } => {
                let core = self.core.clone();
                let events = self.events.clone();
                tokio::spawn(async move {
                    let result = core.request(&request).await.map_err(|e| e.to_string());
                    let _ =
                        events.send(Event::Machine(Input::CoreReplied { pending, result })).await;
                });
            }
            Effect::AnswerCore { token, result } => {
                if let Some(req) = self.core_orders.remove(&token) {
                    tokio::spawn(req.reply(result));
                }
            }
            Effect::Backup(item) => {
                if let Some(out) = &self.backup
                    && !out.try_send(item)
                {
                    self.stats.stream_items_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Effect::StartServer { server } => {
                let started = self.credentials.server_token(&server).and_then(|t| {
                    self.driver.start(&server, self.servers_addr, &t).map_err(|e| e.to_string())
                });
                if let Err(e) = started {
                    self.feed(Input::ServerNotStarted { server, why: e });
                }
            }
            Effect::StopServer { server } => self.driver.stop(&server),
            Effect::ToServer { server, pending, request } => {
                let refused = match self.servers.get(&server) {
                    Some(s) => match s.lane.try_send((pending, request)) {
                        Ok(()) => None,
                        Err(e) => Some((e.into_inner().0, "the server's request queue is full")),
                    },
                    None => Some((pending, "the server is gone")),
                };
                if let Some((pending, why)) = refused {
                    let result = Err(why.to_owned());
                    self.feed(Input::ServerReplied { server, pending, result });
                }
            }
            Effect::ServerStream { server, item } => {
                if let Some(s) = self.servers.get(&server)
                    && !s.out.try_send(item)
                {
                    self.stats.stream_items_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Effect::AnswerServer { token, result } => {
                if let Some(req) = self.server_requests.remove(&token) {
                    tokio::spawn(req.reply(result));
                }
            }
            Effect::ToPlayer { conn, item } => {
                if let Some(p) = self.players.get_mut(&conn) {
                    let out = p.out.get_or_insert_with(|| open_stream_task(p.conn.clone()));
                    if !out.try_send(item) {
                        self.stats.stream_items_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Effect::PlayerDatagram { conn, datagram } => {
                if let Some(p) = self.players.get(&conn) {
                    let _ = p.conn.send_datagram(&datagram);
                }
            }
            Effect::ClosePlayer { conn, code, reason } => {
                if let Some(p) = self.players.get(&conn) {
                    p.conn.close(code, &reason);
                }
            }
            Effect::AnswerPlayer { token, result } => {
                if let Some(req) = self.player_requests.remove(&token) {
                    tokio::spawn(req.reply(result));
                }
            }
            Effect::DialPeer { site, addr } => self.dial_peer(site, addr),
            Effect::ToPeer { site, pending, request } => match self.peers.get(&site) {
                Some(peer) => {
                    let conn = peer.conn.clone();
                    let events = self.events.clone();
                    tokio::spawn(async move {
                        let result = conn.request(&request).await.map_err(|e| e.to_string());
                        let input = Input::PeerReplied { site, pending, result };
                        let _ = events.send(Event::Machine(input)).await;
                    });
                }
                None => {
                    let result = Err("no transfer link".to_owned());
                    self.feed(Input::PeerReplied { site, pending, result });
                }
            },
            Effect::PeerStream { site, item } => {
                if let Some(peer) = self.peers.get(&site)
                    && !peer.out.try_send(item)
                {
                    self.stats.stream_items_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Effect::PeerDatagram { site, probe } => {
                if let Some(peer) = self.peers.get(&site) {
                    let _ = peer.conn.send_datagram(&probe);
                }
            }
            Effect::AnswerPeer { token, result } => {
                if let Some(req) = self.peer_requests.remove(&token) {
                    tokio::spawn(req.reply(result));
                }
            }
            Effect::OpenMirror { site, handover, bubble, epoch } => {
                let Some(peer) = self.peers.get(&site) else {
                    let result = Err(format!("no transfer link to {site}"));
                    self.feed(Input::MirrorOpened { handover, result });
                    return;
                };
                let conn = peer.conn.clone();
                let events = self.events.clone();
                tokio::spawn(async move {
                    let open = transfer::Request::Open { handover, bubble, epoch };
                    let stream = match conn.request(&open).await {
                        Ok(transfer::Reply::Accepted { .. }) => match conn.open_stream().await {
                            Ok(sender) => Ok(stream_task(sender)),
                            Err(e) => Err(e.to_string()),
                        },
                        Ok(other) => Err(format!("unexpected reply {other:?}")),
                        Err(e) => Err(e.to_string()),
                    };
                    let _ = events.send(Event::MirrorOpened(handover, stream)).await;
                });
            }
            Effect::Mirror { handover, item } => {
                if let Some(tx) = self.mirrors.get(&handover)
                    && !tx.try_send(item)
                {
                    tracing::warn!(handover = handover.0, "handover stream full or closed");
                }
            }
            Effect::Crossed { from, to, gap, floor } => {
                let (from, to) = (from.to_string(), to.to_string());
                self.metrics.crossed(FreezeSample { from, to, gap, floor });
            }
            Effect::InputsServed { delays, access_rtt } => {
                self.metrics.inputs_served(&delays, access_rtt)
            }
            Effect::Freeze { from, to, gap, floor } => {
                let (from, to) = (from.to_string(), to.to_string());
                self.metrics.freeze(FreezeSample { from, to, gap, floor });
            }
            Effect::CloseMirror { handover } => {
                self.mirrors.remove(&handover);
            }
        }
    }

    fn dial_peer(&mut self, site: Name, addr: horizon_transport::Target) {
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
                let event = tokio::select! {
                    e = link_events.recv() => match e {
                        Some(LinkEvent::Up(conn)) => Event::PeerUp(conn, None),
                        Some(_) => continue,
                        None => break,
                    },
                    i = inbound.recv() => match i {
                        Some(i) => Event::PeerInbound(peer.clone(), i),
                        None => break,
                    },
                };
                if events.send(event).await.is_err() {
                    break;
                }
            }
        });
        self.dialed.insert(site, parts.link);
    }
}
