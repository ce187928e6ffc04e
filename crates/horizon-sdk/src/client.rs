//! The SDK's event loop: one connection to the agent, requests served in order, a tick timer,
//! and the streams of state both ways.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use horizon_proto::server::{Reply, Request, Server};
use horizon_proto::{ChannelId, ErrorCode, Name, StateItem};
use horizon_transport::tls::{self, Roots};
use horizon_transport::{
    Dial, Error, HelloParams, Inbound, InboundRequest, Limits, Link, LinkEvent, StreamSender,
    client_endpoint,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::game::Game;
use crate::server::{Counters, ServerMachine};

/// Items from the agent's streams waiting for the loop. A full queue pauses the reading task,
/// and QUIC flow control pushes back on the agent.
const ITEM_QUEUE: usize = 1024;

/// Where the agent is and who we are.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// This server's name, unique within its site (`mtl-gs-3`).
    pub name: String,
    pub build: String,
    /// The agent's game-server endpoint: `host:port`, a name resolved at each (re)connection.
    pub agent: horizon_transport::Target,
    /// The agent's site, whose certificate the agent presents.
    pub agent_site: String,
    pub token: String,
    pub tick_ms: u32,
    pub max_players: u32,
    /// Exit when the agent has been unreachable this long (or never answered since start): a
    /// game server never outlives its agent unsupervised (design.md §6). Its leases ended
    /// long before (they last 30 s). `None`: wait for the agent forever.
    pub orphan_after: Option<Duration>,
    /// When players see their own inputs' effect: at once (a game implementing
    /// [`Game::own`](crate::Game::own)) or with the tick's update.
    pub own_state: crate::OwnState,
    /// Told to stop while it holds regions, the server asks its agent to move them to other
    /// servers of the site (`Drain`) and simulates them until each is released, for at most
    /// this long; then it stops, and what it still holds fails over from its copy. Zero: stop
    /// at once.
    pub drain_grace: Duration,
}

/// Runs a game server until `stop` turns true, then drains: while it holds regions and its
/// agent is connected, it asks the agent to move them elsewhere (`Drain`) and runs on until it
/// holds none, for at most [`ServerOptions::drain_grace`]. Reconnects to the agent on its own;
/// regions are dropped on a reconnection (the agent re-assigns them from its copies). Ends
/// with [`Error::Lost`] when the agent stayed unreachable for [`ServerOptions::orphan_after`].
pub async fn run<G: Game>(
    opts: ServerOptions,
    roots: Roots,
    game: G,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), Error> {
    let limits = Limits::default();
    // Any local address of the agent's family (an IPv6 literal, else IPv4: names resolve to
    // their IPv4 address first).
    let ip = if opts.agent.as_str().parse::<SocketAddr>().is_ok_and(|a| a.is_ipv6()) {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    };
    let endpoint = client_endpoint(ip)?;
    let config = tls::client_config(&roots, None, ChannelId::Server, &limits)
        .map_err(|e| Error::Setup(e.to_string()))?;
    let name = Name::new(opts.name.clone()).map_err(|e| Error::Setup(e.to_string()))?;
    let hello = HelloParams::new(name.clone()).with_token(opts.token.clone());
    let parts = Link::<Server>::connect(Dial {
        endpoint,
        addrs: vec![opts.agent.clone()],
        server_name: horizon_transport::site_dns_name(&opts.agent_site),
        config,
        hello,
        limits,
        stats: horizon_transport::TransportStats::default(),
    });
    let (items_tx, items_rx) = mpsc::channel(ITEM_QUEUE);
    let own_state = opts.own_state;
    let mut server = GameServer {
        opts,
        link: parts.link,
        machine: ServerMachine::new(game, counters).with_own_state(own_state),
        out: None,
        items_tx,
        load_every: Duration::from_secs(1),
    };
    let mut events = parts.events;
    let mut inbound = parts.inbound;
    let mut items_rx = items_rx;
    let mut tick = tokio::time::interval(Duration::from_millis(u64::from(server.opts.tick_ms)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut second = tokio::time::interval(Duration::from_secs(1));
    // Since when the agent has been unreachable (from the start until the first connection).
    let mut alone_since = Some(Instant::now());
    // Told to stop: until when it drains.
    let mut draining: Option<Instant> = None;
    loop {
        if let Some(until) = draining
            && (server.machine.regions() == 0
                || server.link.current().is_none()
                || Instant::now() >= until)
        {
            let left = server.machine.regions();
            if left > 0 {
                tracing::warn!(server = %server.opts.name, regions = left, "stopping before every region moved: they fail over from their copies");
            }
            break;
        }
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
            _ = stop.changed(), if draining.is_none() => {
                if server.opts.drain_grace.is_zero()
                    || server.machine.regions() == 0
                    || server.link.current().is_none()
                {
                    break;
                }
                draining = Some(Instant::now() + server.opts.drain_grace);
                server.drain();
            }
            event = events.recv() => match event {
                Some(LinkEvent::Up(conn)) => {
                    alone_since = None;
                    // Registering waits on the agent; a stop meanwhile ends the server at once
                    // (a reconnected server holds no region, so there is nothing to drain).
                    tokio::select! {
                        () = server.connected(conn) => {}
                        _ = stop.changed() => break,
                    }
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
            Some(item) = items_rx.recv() => server.item(item).await,
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
    link: Link<Server>,
    machine: ServerMachine<G>,
    out: Option<StreamSender<Server>>,
    items_tx: mpsc::Sender<StateItem>,
    load_every: Duration,
}

impl<G: Game> GameServer<G> {
    async fn connected(&mut self, conn: horizon_transport::Conn<Server>) {
        self.machine.reconnected();
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
        let reply = self.machine.serve(&req.body, Instant::now());
        // What the request produced (a copy's snapshot, a seal) goes before its reply.
        self.flush().await;
        let _ = req.reply(reply).await;
    }

    async fn item(&mut self, item: StateItem) {
        self.machine.item(item, Instant::now());
        // Players' own states, when inputs were applied (`OwnState::Early`).
        self.flush().await;
    }

    async fn tick(&mut self) {
        self.machine.tick(Instant::now());
        self.flush().await;
    }

    /// Asks the agent to move every region this server holds elsewhere.
    fn drain(&self) {
        let (link, regions) = (self.link.clone(), self.machine.regions());
        tracing::info!(server = %self.opts.name, regions, grace_s = self.opts.drain_grace.as_secs(), "stopping: draining its regions to other servers of the site");
        tokio::spawn(async move {
            if let Err(e) = link.request(&Request::Drain).await {
                tracing::warn!(error = %e, "drain not acknowledged: the regions fail over");
            }
        });
    }

    fn second(&mut self) {
        let mut reports = vec![self.machine.load()];
        reports.extend(self.machine.positions(Instant::now()));
        let link = self.link.clone();
        if link.current().is_some() {
            tokio::spawn(async move {
                for report in reports {
                    let _ = link.request(&report).await;
                }
            });
        }
    }

    async fn flush(&mut self) {
        while let Some(item) = self.machine.poll_item() {
            let Some(out) = self.out.as_mut() else { continue };
            if let Err(e) = out.send(&item).await {
                tracing::warn!(error = %e, "stream to the agent broke");
                self.out = None;
            }
        }
    }
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
