//! Simulated players: they connect to their home agent's gateway (through the emulated access
//! link), join, move, send inputs `(player, seq)` and measure what a player sees.
//!
//! - **click-to-screen**: from sending input `seq` to the first state showing it: the player's
//!   own state sent the moment the input was applied (`Own`, when the game server sends it
//!   early) or the first update whose `acked ≥ seq`, whichever comes first (inputs start with
//!   the first update, as a client acts once the world is on screen); and, beside it, to the
//!   update alone (the batched path), so one run compares both;
//! - **applied once**: the reference game counts the inputs applied to each entity; a view
//!   with `inputs > last_seq` means an input was applied twice;
//! - **continuity**: every view carries the region's hash chain before and after its step;
//!   two consecutive ticks of one bubble must chain, across handovers too;
//! - **freeze**: the longest gap between two updates of the same bubble;
//! - **input delivery**: from sending input `seq` to the end of the server tick that applied it
//!   (the view's wall clock; meaningful when players and servers share a machine's clock).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use horizon_proto::gateway::{self, Gateway};
use horizon_proto::{Blob, ChannelId, Name, PlayerId, Role, Seq, Vec3, WorldId};
use horizon_sdk::reference::{OwnView, View, encode_input, encode_move_to};
use horizon_transport::tls::{self, Roots};
use horizon_transport::{Dial, HelloParams, Inbound, Limits, Link, client_endpoint};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

mod sent;
use sent::Sent;

/// How a bot moves.
#[derive(Clone, Copy, Debug)]
pub enum Motion {
    Still,
    /// Back and forth along x around its start, at `speed_mps`, within `radius_m`.
    Wander {
        radius_m: f64,
        speed_mps: f64,
    },
    /// Around its start on a circle (a pilot).
    Circle {
        radius_m: f64,
        speed_mps: f64,
    },
    /// Still until `after_s`, then along x to `to_x` at `speed_mps`, and still again: joins
    /// another group (a preventive merge, a border crossing).
    Dash {
        after_s: f64,
        to_x: f64,
        speed_mps: f64,
    },
}

/// A join refused `not_ready` is tried again this often, for this long.
const JOIN_RETRY_EVERY: Duration = Duration::from_millis(250);
const JOIN_NOT_READY_FOR: Duration = Duration::from_secs(10);

/// When a bot is away from keyboard: role AFK (which weighs 0.05 in placement where a player
/// weighs 1), no inputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Away {
    #[default]
    Never,
    /// From `.0` after joining, for `.1`.
    Once(Duration, Duration),
    /// Away and back every `period` from joining, away first if `first`: a group whose
    /// majority swaps sides on this beat moves between sites (the handover bench).
    Alternating { period: Duration, first: bool },
}

impl Away {
    /// Whether the bot is away `since` after joining.
    pub fn at(self, since: Duration) -> bool {
        match self {
            Away::Never => false,
            Away::Once(from, len) => since >= from && since < from + len,
            Away::Alternating { period, first } => {
                let beats = since.as_nanos() / period.as_nanos().max(1);
                beats.is_multiple_of(2) == first
            }
        }
    }
}

/// One simulated player.
#[derive(Clone, Debug)]
pub struct BotSpec {
    pub name: String,
    /// Home site (for the figures; the gateway address decides it for real).
    pub site: String,
    pub gateway: SocketAddr,
    pub role: Role,
    pub world: u32,
    pub start: [f64; 3],
    pub motion: Motion,
    pub join_after: Duration,
    pub input_every: Duration,
    /// When the bot is away from keyboard (role AFK, no inputs).
    pub afk: Away,
    /// Leaves the universe this long after joining (before the end of the run).
    pub leave_after: Option<Duration>,
    /// Drop the connection this long after joining (a mobile blip) and reconnect from the same
    /// client: the gateway must resume the same player.
    pub reconnect_after: Option<Duration>,
    /// A cheating client: every `Position` datagram claims it stands here, wherever its game
    /// server put it. Placement must not follow.
    pub claim: Option<[f64; 3]>,
    /// The site whose gateway `gateway` is (its certificate's name); `None`: `site`. Under the
    /// measure stage everyone enters at the core site.
    pub enters_at: Option<String>,
    /// Measure these sites' beacons before joining, and join with the table.
    pub measure: Option<Measure>,
}

/// What a measuring bot probes, and how it lies.
#[derive(Clone, Debug, Default)]
pub struct Measure {
    /// Each site's beacon, as this bot reaches it.
    pub beacons: Vec<(String, SocketAddr)>,
    /// A lying client: claims this round trip (ms) to this site, whatever it measured.
    pub lie: Option<(String, f64)>,
    /// Each site's gateway, as this bot reaches it: the bot joins the one of the site it
    /// measured lowest (design.md §2), instead of [`BotSpec::gateway`]. Empty: `gateway`.
    pub gateways: BTreeMap<String, SocketAddr>,
}

/// What a bot measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BotReport {
    pub name: String,
    pub site: String,
    pub player: Option<u64>,
    /// The site whose beacon answered fastest, for a bot that measured them.
    pub nearest_measured: Option<String>,
    /// The site whose gateway it joined.
    pub entered_at: Option<String>,
    pub joined: bool,
    /// Left before the end (`leave_after`).
    pub left_early: bool,
    pub inputs_sent: u64,
    /// Highest seq acknowledged by an update.
    pub acked: u64,
    /// Inputs the game applied to this player's entity (its own counter, from the last view).
    pub applied: u64,
    /// Largest `inputs - last_seq` seen: inputs applied more than once.
    pub applied_twice: u64,
    pub updates: u64,
    pub chain_checked: u64,
    pub chain_breaks: u64,
    /// Times the player's simulation went back in time to a copy of the universe backup (a
    /// failover restore): its chain restarts from the copy, which is not a break.
    pub restores_seen: u64,
    /// The longest step forward, in ticks, between two views of one simulation: 1 when every
    /// tick was seen. A region started again elsewhere without its state (its ticks counted
    /// on from far past the old server's) jumps.
    pub tick_jump_max: u64,
    /// Times the player reconnected and the gateway resumed them as the same player.
    pub resumed: u64,
    /// Times the player's connection was lost without the client wanting it (its agent
    /// restarted) and the client dialed again.
    pub connections_lost: u64,
    /// Sessions that ended without the player leaving: a restarted agent remembers nobody, so
    /// the client joined again as a new player (a new id). The figures above are the current
    /// session's; `earlier` sums those of the sessions that ended.
    pub sessions_ended: u64,
    pub earlier: EarlierSessions,
    /// `Reconnecting` notices received from the gateway.
    pub reconnecting_seen: u64,
    /// When each notice came (seconds since the Unix epoch; the first 256).
    pub reconnecting_at: Vec<f64>,
    pub max_gap_ms: f64,
    /// Every silence of more than [`GAP_RECORDED_MS`] between two updates: (when it began, in
    /// seconds since the Unix epoch, how long it lasted in ms) — a drill reads them to see when
    /// a fault stopped a player and when they played again.
    pub gaps: Vec<(f64, f64)>,
    /// When the last update arrived, in seconds since the Unix epoch (0 before the first).
    pub last_update_at: f64,
    /// From sending `Join` to the first update of the player's simulation (first session).
    pub first_update_ms: Option<f64>,
    pub bubbles_seen: u64,
    /// Simulations (game servers' regions) the player's views came from: more than the
    /// bubbles seen when a bubble spread over several servers moved the player between them.
    pub simulations_seen: u64,
    /// Own states received (sent by the game server ahead of the tick's update).
    pub own_states: u64,
    #[serde(skip)]
    pub click_ms: Vec<f64>,
    /// Click-to-screen by the batched update alone, whatever came before it.
    #[serde(skip)]
    pub update_click_ms: Vec<f64>,
    #[serde(skip)]
    pub delivery_ms: Vec<f64>,
    pub error: Option<String>,
}

/// The inputs of a bot's sessions that ended (see [`BotReport::sessions_ended`]).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct EarlierSessions {
    pub inputs_sent: u64,
    pub acked: u64,
    pub applied: u64,
}

impl BotReport {
    /// Inputs sent in every session.
    pub fn total_sent(&self) -> u64 {
        self.inputs_sent + self.earlier.inputs_sent
    }
    /// Inputs acknowledged in every session.
    pub fn total_acked(&self) -> u64 {
        self.acked.min(self.inputs_sent) + self.earlier.acked
    }
    /// Inputs the game counted on the player's entities, every session.
    pub fn total_applied(&self) -> u64 {
        self.applied + self.earlier.applied
    }
    /// Inputs of ended sessions never acknowledged: sent when the session's agent died, their
    /// fate unknown to the client (the entity they were for is gone with the session).
    pub fn unacked_in_ended_sessions(&self) -> u64 {
        self.earlier.inputs_sent - self.earlier.acked
    }
}

/// How long a bot waits for its gateway after losing its connection.
const REJOIN_WITHIN: Duration = Duration::from_secs(60);

/// Waits for the link's next connection (not `old`) and resumes the session `credential`
/// names on it (if any), or joins as a new player once the gateway refused the credential
/// (`unauthorized`: the session is over). Again and again while the agent cannot take the
/// player yet (a restarted agent that has not heard from the core), until `within` has
/// passed. Returns the connection, the player, the seq to send from, and the new credential.
async fn rejoin(
    link: &Link<Gateway>,
    old: u64,
    credential: &str,
    join: &gateway::Request,
    within: Duration,
) -> Result<(horizon_transport::Conn<Gateway>, PlayerId, Seq, String), String> {
    let until = Instant::now() + within;
    let mut resume = (!credential.is_empty())
        .then(|| gateway::Request::Resume { credential: credential.to_owned() });
    loop {
        let fresh = async {
            loop {
                if let Some(c) = link.current().filter(|c| c.id() != old) {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let conn = tokio::time::timeout_at(until, fresh)
            .await
            .map_err(|_| format!("reconnect: no new connection in {} s", within.as_secs()))?;
        match conn.request(resume.as_ref().unwrap_or(join)).await {
            Ok(gateway::Reply::Joined { player, resume_after, resume: credential, .. }) => {
                return Ok((conn, player, resume_after, credential));
            }
            Ok(other) => return Err(format!("rejoin: unexpected reply {other:?}")),
            Err(horizon_transport::Error::Fault(f))
                if f.code == horizon_proto::ErrorCode::Unauthorized && resume.is_some() =>
            {
                tracing::info!(reason = %f.message, "resume refused; joining as a new player");
                resume = None;
            }
            Err(e) if Instant::now() < until => {
                tracing::debug!(error = %e, "rejoin refused; trying again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(format!("rejoin: {e}")),
        }
    }
}

/// Signs players' tokens for test clients, as a studio's auth service would (with the
/// mesh's player keys).
#[derive(Clone, Debug)]
pub struct PlayerTokens(pub Arc<horizon_transport::Keyring>);

impl PlayerTokens {
    /// A token for `account`, valid for a day.
    pub fn mint(&self, account: &str) -> String {
        let until = std::time::SystemTime::now() + Duration::from_secs(24 * 3600);
        self.0
            .mint(horizon_transport::credential::Kind::Player, account, until)
            .unwrap_or_else(|e| panic!("account {account:?}: {e}"))
    }
}

/// Starts a bot, its account its name; it runs until `stop` turns true, then leaves.
pub fn spawn(
    spec: BotSpec,
    roots: Roots,
    tokens: PlayerTokens,
    stop: watch::Receiver<bool>,
) -> (Arc<Mutex<BotReport>>, tokio::task::JoinHandle<()>) {
    let token = tokens.mint(&spec.name);
    let report = Arc::new(Mutex::new(BotReport {
        name: spec.name.clone(),
        site: spec.site.clone(),
        ..BotReport::default()
    }));
    let r = report.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = run(spec, roots, token, stop, r.clone()).await {
            lock(&r).error = Some(e);
        }
    });
    (report, task)
}

fn lock(r: &Mutex<BotReport>) -> std::sync::MutexGuard<'_, BotReport> {
    r.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn run(
    spec: BotSpec,
    roots: Roots,
    token: String,
    mut stop: watch::Receiver<bool>,
    report: Arc<Mutex<BotReport>>,
) -> Result<(), String> {
    tokio::select! {
        _ = tokio::time::sleep(spec.join_after) => {}
        _ = stop.changed() => return Ok(()),
    }
    let mut pos = Vec3 { x: spec.start[0], y: spec.start[1], z: spec.start[2] };
    let world = WorldId(spec.world);
    // A measuring client measures every site before it dials its gateway.
    let mut gateway_addr = spec.gateway;
    let mut enters_at = spec.enters_at.clone().unwrap_or_else(|| spec.site.clone());
    let first_join = match &spec.measure {
        None => gateway::Request::Join { role: spec.role, world, pos },
        Some(m) => {
            let opts = horizon_sdk::probe::ProbeOptions::default();
            let measured = horizon_sdk::probe::measure(&m.beacons, opts).await;
            let lowest = horizon_sdk::probe::lowest(&measured).map(|s| s.site.clone());
            if let Some(site) = &lowest
                && let Some(&addr) = m.gateways.get(site)
            {
                gateway_addr = addr;
                enters_at = site.clone();
            }
            lock(&report).nearest_measured = lowest;
            let mut probes = horizon_sdk::probe::table(&measured, opts.samples);
            if let Some((site, ms)) = &m.lie {
                for p in probes.iter_mut().filter(|p| p.site.as_str() == site) {
                    p.answered = p.sent;
                    p.median_us = (ms * 1000.0) as u32;
                }
            }
            gateway::Request::JoinMeasured { role: spec.role, world, pos, probes }
        }
    };
    let limits = Limits::default();
    let endpoint =
        client_endpoint(std::net::Ipv4Addr::LOCALHOST.into()).map_err(|e| e.to_string())?;
    let config =
        tls::client_config(&roots, None, ChannelId::Gateway, &limits).map_err(|e| e.to_string())?;
    let name = Name::new(spec.name.clone()).map_err(|e| e.to_string())?;
    let parts = Link::<Gateway>::connect(Dial {
        endpoint,
        addrs: vec![gateway_addr.into()],
        server_name: horizon_transport::site_dns_name(&enters_at),
        config,
        hello: HelloParams::new(name).with_token(token),
        limits,
        stats: horizon_transport::TransportStats::default(),
    });
    let mut conn =
        parts.link.connected(Duration::from_secs(15)).await.map_err(|e| format!("connect: {e}"))?;
    let join_sent = Instant::now();
    // `not_ready`: the agent has no player id to give yet (it has not reached the core since
    // it started). A client tries again; the wait counts in its join-to-first-update time.
    let joined = loop {
        match conn.request(&first_join).await {
            Err(horizon_transport::Error::Fault(f))
                if f.code == horizon_proto::ErrorCode::NotReady
                    && join_sent.elapsed() < JOIN_NOT_READY_FOR =>
            {
                tokio::time::sleep(JOIN_RETRY_EVERY).await;
            }
            joined => break joined.map_err(|e| format!("join: {e}"))?,
        }
    };
    let gateway::Reply::Joined { mut player, resume: mut credential, .. } = joined else {
        return Err(format!("join: unexpected reply {joined:?}"));
    };
    {
        let mut r = lock(&report);
        r.player = Some(player.0);
        r.joined = true;
        r.entered_at = Some(enters_at.clone());
    }
    let mut inputs = conn.open_stream().await.map_err(|e| format!("input stream: {e}"))?;
    let mut reconnect_at = spec.reconnect_after.map(|d| Instant::now() + d);
    let (updates_tx, mut updates) = mpsc::channel(1024);
    let mut inbound = parts.inbound;
    tokio::spawn(async move {
        while let Some(i) = inbound.recv().await {
            if let Inbound::Stream(mut rx) = i {
                let tx = updates_tx.clone();
                tokio::spawn(async move {
                    while let Ok(Some(item)) = rx.next().await {
                        if tx.send((Instant::now(), item)).await.is_err() {
                            break;
                        }
                    }
                });
            }
        }
    });
    let joined_at = Instant::now();
    let mut input_timer = tokio::time::interval(spec.input_every);
    let mut move_timer = tokio::time::interval(Duration::from_millis(100));
    let mut seq = 0u64;
    // The inputs not acknowledged yet, and how far the screen shows them.
    let mut sent = Sent::default();
    // (bubble, origin, tick, chain, at) of the last view followed.
    let mut last: Option<(u64, u64, u64, u64, Instant)> = None;
    // The last update of a session that ended, until the new session's first.
    let mut silent_since: Option<Instant> = None;
    let mut position_seq = 0u32;
    let mut afk = false;
    let mut vel = Vec3::default();
    let mut heading = 1.0;
    let leave_at = spec.leave_after.map(|d| joined_at + d);
    loop {
        let leave = async {
            match leave_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let blip = async {
            match reconnect_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.changed() => break,
            _ = blip => {
                reconnect_at = None;
                // The connection drops; the link dials again from the same client (hello
                // peer and session), and the player joins again.
                let old = conn.id();
                conn.close(horizon_proto::ErrorCode::ShuttingDown, "connection lost");
                let join = gateway::Request::Join { role: spec.role, world, pos };
                let (c, again, resume_after, fresh) = rejoin(&parts.link, old, "", &join, Duration::from_secs(15)).await?;
                conn = c;
                credential = fresh;
                if again != player {
                    return Err(format!("rejoined as player {} instead of {}", again.0, player.0));
                }
                lock(&report).resumed += 1;
                inputs = conn.open_stream().await.map_err(|e| format!("input stream: {e}"))?;
                sent.resend(&mut inputs, resume_after).await?;
            }
            why = conn.closed() => {
                // Lost without the client wanting it (the agent died): dial again and resume
                // the session with its credential (or join as a new player if it is over).
                tracing::debug!(bot = %spec.name, reason = %why, "gateway connection lost");
                lock(&report).connections_lost += 1;
                let join = gateway::Request::Join { role: spec.role, world, pos };
                let (c, again, resume_after, fresh) =
                    rejoin(&parts.link, conn.id(), &credential, &join, REJOIN_WITHIN).await?;
                conn = c;
                credential = fresh;
                inputs = conn.open_stream().await.map_err(|e| format!("input stream: {e}"))?;
                if again == player {
                    lock(&report).resumed += 1;
                    sent.resend(&mut inputs, resume_after).await?;
                } else {
                    // A new session (its credential was refused: the session had ended): a new
                    // player, its inputs counted from 1; the world is on screen again with its
                    // first update.
                    let mut r = lock(&report);
                    r.sessions_ended += 1;
                    r.earlier.inputs_sent += r.inputs_sent;
                    r.earlier.acked += r.acked.min(r.inputs_sent);
                    r.earlier.applied += r.applied;
                    (r.inputs_sent, r.acked, r.applied) = (0, 0, 0);
                    r.player = Some(again.0);
                    player = again;
                    seq = 0;
                    sent = Sent::default();
                    silent_since = last.map(|(.., at)| at);
                    last = None;
                }
            }
            _ = leave => {
                lock(&report).left_early = true;
                break;
            }
            _ = input_timer.tick() => {
                let since = joined_at.elapsed();
                let want_afk = spec.afk.at(since);
                if want_afk != afk {
                    afk = want_afk;
                    let role = if afk { Role::Afk } else { spec.role };
                    let _ = conn.request(&gateway::Request::SetRole { role }).await;
                }
                // Like a client, act only once the world is on screen (the first update).
                if afk || last.is_none() {
                    continue;
                }
                seq += 1;
                // The first input enters the world where the bot joined (the game server puts it
                // there: placement knows only what the servers say); then velocities.
                let bytes = if seq == 1 {
                    let mm = |m: f64| (m * 1000.0).round() as i64;
                    Blob(encode_move_to([mm(pos.x), mm(pos.y), mm(pos.z)]))
                } else {
                    let mm_s = |v: f64| (v * 1000.0) as i32;
                    Blob(encode_input([mm_s(vel.x), mm_s(vel.y), mm_s(vel.z)]))
                };
                let item = gateway::Item::Input { seq: Seq(seq), bytes: bytes.clone() };
                sent.pending.insert(seq, (Instant::now(), wall_us(), bytes));
                lock(&report).inputs_sent = seq;
                // A connection going fails this: its `closed` arm dials again, and the input,
                // kept, is sent again from `resume_after` if the player resumes.
                let _ = inputs.send(&item).await;
            }
            _ = move_timer.tick() => {
                let t = joined_at.elapsed().as_secs_f64();
                let (p, v) = motion(spec.motion, spec.start, t, &mut heading, pos);
                pos = p;
                vel = v;
                position_seq += 1;
                let said = spec.claim.map_or(pos, |[x, y, z]| Vec3 { x, y, z });
                let datagram = gateway::Datagram::Position { seq: position_seq, world, pos: said, vel };
                let _ = conn.send_datagram(&datagram);
            }
            Some((at, item)) = updates.recv() => {
                let (bubble, tick, acked, bytes) = match item {
                    gateway::Item::Update { bubble, tick, acked, bytes } => (bubble, tick, acked, bytes),
                    gateway::Item::Own { seq: applied, bytes, .. } => {
                        // Only this session's (a session that ended may still have some queued).
                        if applied.0 > seq {
                            continue;
                        }
                        let mut r = lock(&report);
                        r.own_states += 1;
                        r.click_ms.extend(sent.own(applied.0, at));
                        if let Some(own) = OwnView::decode(&bytes.0) {
                            let e = own.entity;
                            r.applied_twice = r.applied_twice.max(e.inputs.saturating_sub(e.last_seq));
                        }
                        continue;
                    }
                    gateway::Item::Reconnecting { .. } => {
                        let mut r = lock(&report);
                        r.reconnecting_seen += 1;
                        if r.reconnecting_at.len() < MAX_GAPS {
                            r.reconnecting_at.push(wall_us() as f64 / 1e6 - at.elapsed().as_secs_f64());
                        }
                        continue;
                    }
                    gateway::Item::Input { .. } => continue,
                };
                // An update still queued from a session that ended (the agent restarted)
                // acknowledges inputs this session never sent: not this session's.
                if acked.0 > seq {
                    continue;
                }
                let mut r = lock(&report);
                if r.first_update_ms.is_none() {
                    r.first_update_ms = Some(at.duration_since(join_sent).as_secs_f64() * 1000.0);
                }
                r.updates += 1;
                r.last_update_at = wall_us() as f64 / 1e6 - at.elapsed().as_secs_f64();
                r.acked = r.acked.max(acked.0);
                let view = View::decode(&bytes.0);
                let done = sent.update(acked.0, at);
                r.click_ms.extend(done.first_shown_ms);
                r.update_click_ms.extend(done.update_ms);
                if let Some(v) = &view {
                    let delivered = done.sent_wall_us.iter().map(|w| v.wall_us.saturating_sub(*w) as f64 / 1000.0);
                    r.delivery_ms.extend(delivered);
                }
                let Some(view) = view else { continue };
                if let Some(e) = view.entity(player) {
                    r.applied = e.inputs;
                    r.applied_twice = r.applied_twice.max(e.inputs.saturating_sub(e.last_seq));
                }
                // One simulation's views chain tick after tick, across handovers too (the
                // target continues the source's). Another server of the same bubble (spread
                // over several) is another simulation: followed from its first view on.
                match last {
                    Some((b, origin, t, chain, seen)) if b == bubble.0 => {
                        if origin != view.origin {
                            r.simulations_seen += 1;
                        } else if tick.0 <= t {
                            // One simulation's updates reach a player in order: going back is
                            // a restore from a copy, whose timeline is followed from here.
                            r.restores_seen += 1;
                        } else {
                            r.tick_jump_max = r.tick_jump_max.max(tick.0 - t);
                            if tick.0 == t + 1 {
                                r.chain_checked += 1;
                                if view.prev_chain != chain {
                                    r.chain_breaks += 1;
                                }
                            }
                        }
                        let gap = at.duration_since(seen).as_secs_f64() * 1000.0;
                        r.max_gap_ms = r.max_gap_ms.max(gap);
                        if gap > GAP_RECORDED_MS && r.gaps.len() < MAX_GAPS {
                            let began = wall_us() as f64 / 1e6 - at.elapsed().as_secs_f64() - gap / 1000.0;
                            r.gaps.push((began, gap));
                        }
                    }
                    Some(_) | None => {
                        r.bubbles_seen += 1;
                        r.simulations_seen += 1;
                        // The silence across a new session counts like any other.
                        if let Some(seen) = silent_since.take() {
                            let gap = at.duration_since(seen).as_secs_f64() * 1000.0;
                            r.max_gap_ms = r.max_gap_ms.max(gap);
                            if gap > GAP_RECORDED_MS && r.gaps.len() < MAX_GAPS {
                                let began = wall_us() as f64 / 1e6 - at.elapsed().as_secs_f64() - gap / 1000.0;
                                r.gaps.push((began, gap));
                            }
                        }
                    }
                }
                last = Some((bubble.0, view.origin, tick.0, view.chain, at));
            }
        }
    }
    let _ = conn.request(&gateway::Request::Leave).await;
    Ok(())
}

/// Silences between updates longer than this are recorded in [`BotReport::gaps`]: three
/// updates missed (a drain's move, a crossing under load) and longer.
pub const GAP_RECORDED_MS: f64 = 100.0;
/// At most this many gaps are recorded per player.
const MAX_GAPS: usize = 256;

fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Where a bot is at `t` seconds, and its velocity.
fn motion(m: Motion, start: [f64; 3], t: f64, heading: &mut f64, pos: Vec3) -> (Vec3, Vec3) {
    match m {
        Motion::Still => (pos, Vec3::default()),
        Motion::Wander { radius_m, speed_mps } => {
            let mut x = pos.x + *heading * speed_mps * 0.1;
            if (x - start[0]).abs() > radius_m {
                *heading = -*heading;
                x = pos.x;
            }
            (Vec3 { x, ..pos }, Vec3 { x: *heading * speed_mps, y: 0.0, z: 0.0 })
        }
        Motion::Dash { after_s, to_x, speed_mps } => {
            let left = to_x - pos.x;
            if t < after_s || left.abs() < 1.0 {
                return (pos, Vec3::default());
            }
            let v = speed_mps.copysign(left);
            let step = (v * 0.1).clamp(-left.abs(), left.abs());
            (Vec3 { x: pos.x + step, ..pos }, Vec3 { x: v, y: 0.0, z: 0.0 })
        }
        Motion::Circle { radius_m, speed_mps } => {
            let w = speed_mps / radius_m.max(1.0);
            let a = w * t;
            let p = Vec3 {
                x: start[0] + radius_m * a.cos(),
                y: start[1],
                z: start[2] + radius_m * a.sin(),
            };
            let v = Vec3 { x: -speed_mps * a.sin(), y: 0.0, z: speed_mps * a.cos() };
            (p, v)
        }
    }
}
