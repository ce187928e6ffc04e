//! The agent's tokio shell around [`AgentMachine`]: it binds the listeners, keeps the
//! connections and their streams, runs the [`ServerDriver`], feeds everything that happens
//! to the machine with the time, and carries out its effects. No logic lives here: each
//! connection is pumped into one bounded queue, each request leaves in a task that reports
//! its answer back, and requests to one game server go through that server's lane, one at a
//! time, in order.
//!
//! This file starts the agent (listeners, links, admin API, beacon) and holds the shell's state;
//! `agent/shell.rs` is the loop that feeds the machine and carries out its effects.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use horizon_proto::control::Control;
use horizon_proto::gateway::{self, Gateway};
use horizon_proto::server::{self, Server};
use horizon_proto::transfer::{self, Transfer};
use horizon_proto::{ChannelId, ErrorCode, Failure, Fault, HandoverId, Name, StateItem};
use horizon_transport::credential::{Keyring, Kind, SharedKeyring, SignedToken};
use horizon_transport::reload::ReloadCause;
use horizon_transport::tls::{self, Identity, Roots};
use horizon_transport::{
    Conn, Dial, HelloParams, Inbound, InboundRequest, Limits, Link, LinkEvent, Listener, Peer,
    SiteCertificate, TransportStats, client_endpoint,
};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::AgentConfig;
use crate::driver::ServerDriver;
use crate::events::{AgentError, Event, Outbound};
use crate::machine::{AgentMachine, ConnId, Effect, Input, MachineConfig, Pending, Token};
use crate::plumbing::{open_stream_task, pump_link, rtt_ms, server_lane, stream_task};
use crate::stats::{AgentStats, FreezeSample};
use horizon_transport::plumbing::{accept_loop, forward_stream, pump};

/// Game servers stopping with the agent get this long after SIGTERM before SIGKILL.
const SERVER_STOP_GRACE: Duration = Duration::from_secs(5);
/// The loop's queue: every connection's traffic passes here. Pumps wait when it is full.
const EVENT_QUEUE: usize = 8192;
/// How often the driver is asked which servers ended.
const DRIVER_POLL: Duration = Duration::from_millis(200);

/// The time as the machine takes it: a plain `std` instant, read from tokio's clock (so the
/// shell's tests with a paused clock drive the machine too).
fn machine_now() -> std::time::Instant {
    Instant::now().into_std()
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
    /// What its listeners and links saw (refusals, replays, credential reloads).
    pub transport: TransportStats,
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
    // What this agent's endpoints see, counted apart from any other daemon in the process.
    let transport = TransportStats::default();
    let agent_transport = transport.clone();
    let servers = Listener::<Server>::bind(
        cfg.listen_servers,
        tls::server_config(&identity, None, ChannelId::Server, &limits)?,
        site.clone(),
        Arc::new(SignedToken { keys: server_keys.clone(), kind: Kind::Server }),
        limits.clone(),
        transport.clone(),
    )?;
    let players = Listener::<Gateway>::bind(
        cfg.listen_players,
        tls::server_config(&identity, None, ChannelId::Gateway, &limits)?,
        site.clone(),
        Arc::new(SignedToken { keys: player_keys.clone(), kind: Kind::Player }),
        limits.clone(),
        transport.clone(),
    )?;
    let transfers = Listener::<Transfer>::bind(
        cfg.listen_transfer,
        tls::server_config(&identity, Some(&roots), ChannelId::Transfer, &limits)?,
        site.clone(),
        Arc::new(SiteCertificate),
        limits.clone(),
        transport.clone(),
    )?;
    let (servers_addr, players_addr, transfer_addr) =
        (servers.local_addr()?, players.local_addr()?, transfers.local_addr()?);
    let endpoint = client_endpoint(cfg.listen_transfer.ip())?;
    // Quicker to call the core dead than the other links: a standby takes over in seconds.
    let control = Limits::control();
    let core = Link::<Control>::connect(Dial {
        endpoint: endpoint.clone(),
        addrs: cfg.core.clone(),
        // The core's own name: no site's certificate (the core site's neither) passes for it.
        server_name: horizon_transport::tls::CORE_DNS_NAME.to_owned(),
        config: tls::client_config(&roots, Some(&identity), ChannelId::Control, &control)?,
        hello: HelloParams::new(site.clone()),
        limits: control,
        stats: transport.clone(),
    });
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    let stats = Arc::new(AgentStats::default());
    let (stop, stop_rx) = watch::channel(false);
    let metrics =
        crate::metrics::AgentMetrics::new(&cfg.site, &cfg.core_site, stats.clone(), &transport);
    let admin_addr = match cfg.listen_admin {
        Some(addr) => Some(
            serve_admin(addr, &cfg.site, metrics.clone(), events_tx.clone(), stop_rx.clone())
                .await?,
        ),
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
    // The loop's end (a shutdown, or a crash in a drill) ends the listeners at once. The game
    // servers' ends sooner, as the shutdown begins: a server that lost its agent must find no
    // agent to register with while the shell stops its processes (its SIGTERM is then handled
    // at once, with nothing to drain to).
    let never = std::future::pending::<()>;
    let mut stopping = stop_rx.clone();
    let shutdown = async move {
        let _ = stopping.changed().await;
    };
    accept_loop(servers, events_tx.clone(), Event::ServerUp, shutdown, "agent stopping");
    accept_loop(players, events_tx.clone(), Event::PlayerUp, never(), "agent stopping");
    let peer = |p: Peer<Transfer>| Event::PeerUp(p.conn, Some(p.inbound));
    accept_loop(transfers, events_tx.clone(), peer, never(), "agent stopping");
    let machine_cfg = MachineConfig {
        site: site.clone(),
        advertise_transfer: cfg.advertise_transfer.clone(),
        peers: cfg.peers.clone(),
        warm_pool: cfg.warm_pool,
        max_servers: cfg.max_servers,
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
        machine: AgentMachine::new(machine_cfg, stats.clone(), machine_now()),
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
        transport,
        events: events_tx,
        next_token: 0,
        core_orders: HashMap::new(),
        server_requests: HashMap::new(),
        player_requests: HashMap::new(),
        peer_requests: HashMap::new(),
        drain_requests: HashMap::new(),
        servers: HashMap::new(),
        players: HashMap::new(),
        peers: HashMap::new(),
        dialed: HashMap::new(),
        mirrors: HashMap::new(),
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
        transport: agent_transport,
        stop,
        task,
    })
}

/// Binds and serves the admin API until the agent stops; returns its address.
async fn serve_admin(
    addr: SocketAddr,
    site: &str,
    metrics: crate::metrics::AgentMetrics,
    events: mpsc::Sender<Event>,
    mut stop: watch::Receiver<bool>,
) -> Result<SocketAddr, AgentError> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| AgentError::Admin(addr, e))?;
    let bound = listener.local_addr().map_err(|e| AgentError::Admin(addr, e))?;
    let registry = metrics.registry.clone();
    let source = Arc::new(crate::metrics::AgentSource { site: site.to_owned(), metrics, events });
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

mod shell;

/// A game server's connection: its stream and its request lane.
struct ServerIo {
    conn: Conn<Server>,
    out: Outbound<StateItem>,
    lane: mpsc::Sender<(Pending, server::Request)>,
}

struct PlayerIo {
    conn: Conn<Gateway>,
    /// The account its signed token named: what the resumption credentials this gateway
    /// signs for the connection's player are bound to.
    account: Name,
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
    /// The transport's counters (every listener's and link's of this agent).
    transport: TransportStats,
    events: mpsc::Sender<Event>,
    next_token: Token,
    core_orders: HashMap<Token, InboundRequest<Control>>,
    server_requests: HashMap<Token, InboundRequest<Server>>,
    /// Each with the connection it came on.
    player_requests: HashMap<Token, (ConnId, InboundRequest<Gateway>)>,
    peer_requests: HashMap<Token, InboundRequest<Transfer>>,
    /// Operators' drains waiting for the machine's answer.
    drain_requests:
        HashMap<Token, tokio::sync::oneshot::Sender<Result<String, horizon_admin::Refused>>>,
    servers: HashMap<Name, ServerIo>,
    players: HashMap<ConnId, PlayerIo>,
    peers: HashMap<Name, PeerIo>,
    /// Links this agent dialed, kept alive by holding them.
    dialed: HashMap<Name, Link<Transfer>>,
    mirrors: HashMap<HandoverId, Outbound<StateItem>>,
}
