//! The agent's logic as a sans-IO state machine, the shape of the core's: what happened goes
//! in with the time ([`AgentMachine::handle`]), what to do comes out
//! ([`AgentMachine::poll_effect`]), timers through [`AgentMachine::poll_timeout`]. It never
//! awaits: a request to a game server, a peer or the core leaves as an effect carrying what
//! waits on its answer ([`Pending`]), and the shell hands that back with the result. The shell
//! (`agent.rs`) owns the connections, streams and the [`ServerDriver`](crate::ServerDriver).
//!
//! Requests to one game server are carried out in the order they leave, one at a time (the
//! shell's per-server lane): a `Join` sent before a `Leave` of the same player arrives first.
//!
//! What goes in and out is in [`interface`]. The state is made of parts, each a struct of its
//! own file that alone changes it: [`local`] (the bubbles simulated here), [`fleet`] (the game
//! servers), [`transit`] (players' states between bubbles), [`sessions`], [`outbox`],
//! [`roles`], [`lane`]. The decisions are in files by subject: [`core_link`] (register, report,
//! renew, the core's orders), [`bubbles`] (creation, restores, members, handovers), [`parts`]
//! (a bubble spread over several servers), [`servers`] (the servers' requests and updates),
//! [`players`] (the gateway; a player's session is `crate::gateway`), [`crossings`],
//! [`peers`] (other sites), [`routes`], [`rehome`], [`periodic`] (timers).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use horizon_proto::control;
use horizon_proto::gateway;
use horizon_proto::server;
use horizon_proto::transfer;
use horizon_proto::{
    Aabb, Blob, BubbleId, Epoch, ErrorCode, Failure, Fault, HandoverId, Input as PlayerInput,
    Inputs, Lease, LeaseRef, MAX_OWN_BYTES, Name, Own, PlayerId, Region, Role, Seq, StateItem,
    Tick, Update, Vec3, WorldId,
};
use std::time::Instant;

mod bubbles;
mod carve;
mod core_link;
mod crossings;
mod drain;
mod fleet;
mod handover;
mod interface;
mod lane;
mod local;
mod outbox;
mod parts;
mod peers;
mod pending;
mod periodic;
mod players;
mod probes;
mod rehome;
mod roles;
mod routes;
mod servers;
mod sessions;
#[cfg(test)]
mod tests;
mod transit;

use crate::AgentStats;
use crate::gateway::{InputVerdict, PlayerSession, UpdateVerdict};
pub use interface::{Effect, Input, Resumption};
use local::{Local, Phase};
pub use pending::Pending;
use pending::{AfterLeave, AssignJob, BackupCopy, RestoreJob, Then};

/// Crossings that arrived before the core's `Members`: kept this long (longer than a cut from
/// the core that outlasts a lease, after which the core tells where the player went), at most
/// this many.
const CROSSING_TTL: Duration = Duration::from_secs(180);
const MAX_CROSSINGS: usize = 4096;
/// A crossing to another site is sent again until that site takes it, for this long: more
/// than a lease and a failover, since its bubble may be restored elsewhere meanwhile.
const CROSSING_DEADLINE: Duration = Duration::from_secs(90);
/// A member whose crossing state has not come after this starts afresh (the state replaces
/// the fresh start if it comes later, and the core has it adopt the copy kept for it once a
/// copy shows it behind: `horizon-core` `machine/keep.rs`). 30 s left players who moved on
/// again before it unsimulated for minutes (seed 9100483).
const AWAIT_DEADLINE: Duration = Duration::from_secs(10);
/// A crossing taken is kept this long: its target may fail before a stored copy includes the
/// player, and the core then redirects it to the restored bubble (longer than a lease and a
/// failover).
const CROSSING_KEEP: Duration = Duration::from_secs(60);
/// A bubble whose renewal the core refused has stopped; its servers keep its players' states
/// this long, for the departures the core may still order (it ended the bubble meanwhile),
/// unless the core revokes it first.
const REFUSED_KEEP: Duration = Duration::from_secs(60);
/// A crossing's answer not back after this is taken as lost, and the crossing sent again.
const CROSSING_RETRY: Duration = Duration::from_secs(5);
/// A crossing refused (not expected there yet) is sent again after this.
const CROSSING_BACKOFF: Duration = Duration::from_secs(1);
/// How often every running bubble's state is copied to the core (the universe backup).
const BACKUP_EVERY: Duration = Duration::from_secs(10);
/// How often game servers' exits, deadlines and re-sends are looked at.
const HOUSEKEEPING_EVERY: Duration = Duration::from_millis(200);
/// How often each transfer link is probed (backbone RTT and loss): 4 datagrams of 20 bytes a
/// second each way.
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// A transfer link whose probes have had no echo for this long is down: traffic to that site
/// goes round through a third (`routes.rs`). Four probes lost in a row: a cut is seen 0.75 to
/// 1.25 s after it began (its last echo came up to a probe before it), and its players play
/// again one relayed round trip later.
const LINK_SILENT_AFTER: Duration = Duration::from_millis(1000);
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
/// After a registration, a member list that leaves a player out without saying where they
/// went is not trusted for this long (the core is still learning who plays where).
const RESYNC_GRACE: Duration = Duration::from_secs(10);
/// Snapshot chunk size when feeding a restored copy to a server.
const RESTORE_CHUNK: usize = 64 * 1024;
/// The most servers one bubble is spread over (the brain cuts no further).
const MAX_PARTS: usize = horizon_mesh::split::MAX_PARTS;
/// Revoked leases remembered while their assignment may still be under way (one per bubble;
/// the lowest bubble ids go first beyond this).
const REVOKED_KEPT: usize = 1024;
/// How long a ready server beyond the warm pool stays idle (holding nothing) before it is
/// stopped: regions share servers, so servers empty out as players leave.
const IDLE_STOP_AFTER: Duration = Duration::from_secs(30);
/// How long after a player joins the core hears of it (with whoever joined meanwhile: friends
/// connecting together are placed together).
const JOIN_BATCH: Duration = Duration::from_millis(50);
/// Orders waiting for a ready server, at most.
const MAX_WAITING: usize = 1024;
/// A server simulating more than `players_per_server` for this long gives whole regions away
/// to other servers of the site (today's SMD: 10 load samples, one a second).
const RELIEVE_AFTER: Duration = Duration::from_secs(10);
/// After a server gave regions away, it gives none again for this long (SMD's settle window).
const RELIEVE_SETTLE: Duration = Duration::from_secs(15);
/// Rounds of moves a region's move to another server makes for players that joined its old
/// server meanwhile, at most.
const RELOCATE_ROUNDS: u32 = 4;
/// A region moved whole runs on its new server from this many ticks after the old server's
/// last update: the old one goes on ticking until its players have left it, never this far,
/// so no two states of the region share an (epoch, tick), which names its copies at the core.
const RELOCATE_TICK_GAP: u64 = 100_000;

/// Identifies one connection (the transport's connection id).
pub type ConnId = u64;

/// No connection: a player kept for its client to resume after this agent started (its
/// connection ended with the agent before).
const NO_CONN: ConnId = 0;

/// Identifies a request waiting for the machine's answer (chosen by the shell): a core order
/// ([`Effect::AnswerCore`]), or a server's, player's or peer's request.
pub type Token = u64;

/// A player's account, as their signed token names it (docs/security.md): never the client's
/// own word. The same account connecting again resumes the same player.
pub type Client = Name;

/// What the machine needs of the agent's configuration.
#[derive(Clone, Debug)]
pub struct MachineConfig {
    pub site: Name,
    /// Where other agents reach this one's transfer endpoint (told to the core).
    pub advertise_transfer: String,
    /// Transfer addresses of other sites, overriding what the core says.
    pub peers: BTreeMap<String, horizon_types::Target>,
    pub warm_pool: usize,
    /// The most game servers the site runs (`servers.max`; the driver refuses beyond it).
    pub max_servers: usize,
    /// Players a game server takes new regions up to (several regions share a server).
    pub seats_per_server: u32,
    /// Players a game server simulates at most: past it for [`RELIEVE_AFTER`], a server holding
    /// several regions gives whole ones away to other servers of the site (`parts.rs`).
    pub players_per_server: u32,
    pub report_every: Duration,
    pub renew_every: Duration,
    /// The game servers' tick (part of the physical floor of a handover's freeze).
    pub server_tick: Duration,
    /// Where operators reach this agent's admin API (told to the core for its status and console).
    pub advertise_admin: Option<String>,
}

/// A player this site is the home of.
struct Player {
    /// Its gateway connection (the latest, after a resume).
    conn: ConnId,
    role: Role,
    world: WorldId,
    pos: Vec3,
    vel: Vec3,
    position_seq: u32,
    min_rtt_ms: f32,
    /// Inputs, route and acknowledgements.
    session: PlayerSession,
    /// What the last update delivered acknowledged: an update of the same bubble and epoch
    /// acknowledging fewer of the player's inputs is an older state arriving late (it was held
    /// on a cut link, or came round through a third site while the route changed): dropped.
    last_acked: Option<(BubbleId, Epoch, Seq)>,
    /// The client it joined from, which may resume it (none yet for a player this agent took
    /// from the core's list after it started: its credential names the account).
    client: Option<Client>,
    /// Its connection ended at this time; the player is kept [`RESUME_GRACE`] for the same
    /// client to reconnect.
    gone_since: Option<Instant>,
    /// The probe table it joined with, if it sent one and this gateway believed it (stage 1's
    /// figures; never placement).
    probes: Option<Vec<gateway::SiteProbe>>,
}

struct PeerLink {
    conn: ConnId,
    rtt_ms: Option<f32>,
    probes_sent: u32,
    probes_back: u32,
    /// The last echo of a probe (or the link's start): silent for [`LINK_SILENT_AFTER`], the
    /// link is down for routing.
    last_echo: Instant,
}

/// A core order waiting for a ready server.
struct Waiting {
    received: Instant,
    token: Token,
    order: control::Request,
}

/// A regrant waiting for every server of its bubble.
struct Regrant {
    token: Token,
    lease: Lease,
    received: Instant,
    waiting: usize,
    fault: Option<Fault>,
    /// Joins asked for meanwhile (a crossing's state arriving, an overdue crossing): sent once
    /// every server holds the new epoch, under it. Sent under the old epoch now, a server
    /// that took the regrant first would refuse them as for a bubble it does not hold, and the
    /// player would be a member nobody simulates (`sim chaos --stage relay` seed 9600998).
    joins: Vec<HeldJoin>,
}

/// A join of `player` to a server, held while its bubble's regrant is under way.
struct HeldJoin {
    server: Name,
    player: PlayerId,
    last_applied: Seq,
    state: Blob,
}

/// The timers.
struct Timers {
    report: Instant,
    /// Players joined since the last report: they are told to the core this soon after the
    /// first of them (not at the next report), so a player alone gets its bubble at once.
    joins: Option<Instant>,
    renew: Instant,
    housekeeping: Instant,
    probe: Instant,
    backup: Instant,
}

/// The agent. See the module documentation.
pub struct AgentMachine {
    cfg: MachineConfig,
    stats: Arc<AgentStats>,
    /// The machine's origin: probe stamps count from it.
    origin: Instant,
    timers: Timers,
    effects: VecDeque<Effect>,
    registered: bool,
    /// When the core link last came up (and Register left).
    registered_at: Option<Instant>,
    /// The game servers, connected or starting, and the regions each holds (`fleet.rs`).
    fleet: fleet::Fleet,
    /// The bubbles simulated (or standing by) here (`local.rs`).
    bubbles: local::Locals,
    players: BTreeMap<PlayerId, Player>,
    /// Who is behind each gateway connection (`sessions.rs`).
    sessions: sessions::Sessions,
    /// Player ids the core handed this agent and it has not given yet (`sessions.rs`).
    player_ids: sessions::PlayerIds,
    peers: BTreeMap<Name, PeerLink>,
    /// Every backbone link as the core last said (`control::Request::Links`).
    core_links: Vec<horizon_mesh::routes::LinkView>,
    /// The first hop towards each site reachable now (itself when direct): `routes.rs`.
    routes: BTreeMap<Name, Name>,
    /// Sites this agent dials (the shell keeps those links up).
    dialed: BTreeSet<Name>,
    /// Players' states in transit between bubbles (`transit.rs`).
    transit: transit::Transit,
    /// Handover sources: their streams, opening or open (`roles.rs`).
    sources: roles::Sources,
    /// Restores waiting for their server's first update (`roles.rs`).
    restores: roles::Restores,
    /// Regrants waiting for their servers.
    regrants: BTreeMap<BubbleId, Regrant>,
    /// Bubbles being spread or brought together.
    regroups: BTreeMap<BubbleId, parts::Regroup>,
    /// Leases the core revoked before they were held here (a `Create`, `Restore` or handover
    /// target still being given to a server): the newest epoch per bubble, at most
    /// [`REVOKED_KEPT`]. A server that takes one of them afterwards lets it go at once.
    revoked: BTreeMap<BubbleId, Epoch>,
    /// `Revoke` orders waiting for their servers' releases: how many are still to answer.
    revoking: BTreeMap<Token, usize>,
    /// Members leaving one server of their bubble for another (a part move), each with the
    /// state that came for them meanwhile, if any (`parts.rs`): it joins them where they go,
    /// not the server letting them go, which would keep it as a second entity of theirs.
    part_moves: BTreeMap<(BubbleId, PlayerId), Option<(Seq, Blob)>>,
    /// Regions moving to another server with their state (`rehome.rs`).
    rehomes: BTreeMap<BubbleId, rehome::Rehome>,
    /// Orders waiting for a ready server, oldest first.
    waiting: VecDeque<Waiting>,
    /// The core's ordered lane.
    lane: lane::OrderLane,
    /// What the next report tells the core (`outbox.rs`).
    outbox: outbox::Outbox,
}

impl std::fmt::Debug for AgentMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentMachine")
            .field("site", &self.cfg.site)
            .field("registered", &self.is_registered())
            .field("servers", &self.fleet.len())
            .field("bubbles", &self.bubbles.len())
            .field("players", &self.player_count())
            .field("effects", &self.effects.len())
            .finish_non_exhaustive()
    }
}

impl AgentMachine {
    pub fn new(cfg: MachineConfig, stats: Arc<AgentStats>, now: Instant) -> Self {
        stats.servers_warm_pool.store(cfg.warm_pool as u64, Ordering::Relaxed);
        stats.servers_max.store(cfg.max_servers as u64, Ordering::Relaxed);
        let mut machine = AgentMachine {
            cfg,
            stats,
            origin: now,
            timers: Timers {
                report: now,
                joins: None,
                renew: now,
                housekeeping: now,
                probe: now,
                backup: now,
            },
            effects: VecDeque::new(),
            registered: false,
            registered_at: None,
            fleet: fleet::Fleet::default(),
            bubbles: local::Locals::default(),
            players: BTreeMap::new(),
            sessions: sessions::Sessions::default(),
            player_ids: sessions::PlayerIds::default(),
            peers: BTreeMap::new(),
            core_links: Vec::new(),
            routes: BTreeMap::new(),
            dialed: BTreeSet::new(),
            transit: transit::Transit::default(),
            sources: roles::Sources::default(),
            restores: roles::Restores::default(),
            regrants: BTreeMap::new(),
            regroups: BTreeMap::new(),
            revoked: BTreeMap::new(),
            revoking: BTreeMap::new(),
            part_moves: BTreeMap::new(),
            rehomes: BTreeMap::new(),
            waiting: VecDeque::new(),
            lane: lane::OrderLane::default(),
            outbox: outbox::Outbox::default(),
        };
        machine.top_up_pool(now);
        machine
    }

    /// The next effect to carry out, oldest first.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// When [`AgentMachine::handle_timeout`] is due next.
    pub fn poll_timeout(&self) -> Instant {
        let t = &self.timers;
        let due = t.report.min(t.renew).min(t.housekeeping).min(t.probe).min(t.backup);
        t.joins.map_or(due, |j| j.min(due))
    }

    /// New players are reported to the core [`JOIN_BATCH`] after the first of them, before the
    /// next full report.
    fn report_joins_soon(&mut self, now: Instant) {
        self.timers.joins.get_or_insert(now + JOIN_BATCH);
    }

    /// Runs every timer due at `now`. A timer late by more than its period skips the ticks it
    /// missed.
    pub fn handle_timeout(&mut self, now: Instant) {
        let next = |due: &mut Instant, every: Duration| -> bool {
            if now < *due {
                return false;
            }
            *due = (*due + every).max(now);
            true
        };
        if next(&mut self.timers.report, self.cfg.report_every) {
            self.timers.joins = None;
            self.report(now);
        }
        if self.timers.joins.is_some_and(|due| due <= now) {
            self.timers.joins = None;
            self.report_joins();
        }
        if next(&mut self.timers.renew, self.cfg.renew_every) {
            self.renew(now);
        }
        if next(&mut self.timers.housekeeping, HOUSEKEEPING_EVERY) {
            self.housekeeping(now);
            self.lane_housekeeping(now);
            self.serve_lane(now);
        }
        if next(&mut self.timers.probe, PROBE_EVERY) {
            self.probe(now);
            self.reroute(now);
        }
        if next(&mut self.timers.backup, BACKUP_EVERY) {
            self.backup();
        }
    }

    /// One thing that happened at `now`.
    pub fn handle(&mut self, input: Input, now: Instant) {
        match input {
            Input::CoreUp => self.register(now),
            Input::CoreDown { error } => {
                tracing::warn!(site = %self.cfg.site, %error, "lost the core");
                self.core_lost();
            }
            Input::CoreOrder { token, order } => self.core_order(token, order, now),
            Input::CoreReplied { pending, result } => self.core_replied(pending.0, result, now),
            Input::ServerUp { server, conn } => self.server_up(server, conn),
            Input::ServerRequest { server, conn, token, request } => {
                self.server_request(server, conn, token, request, now)
            }
            Input::PlatformReady { server } => self.platform_ready(server, now),
            Input::ServerItem { server, item } => self.server_item(&server, item, now),
            Input::ServerReplied { server, pending, result } => {
                self.server_replied(server, pending.0, result, now)
            }
            Input::ServerGone { server, conn } => {
                if self.fleet.on(&server, conn) {
                    self.server_lost(&server, "connection closed", now);
                }
            }
            Input::ServerEnded { server, why } => {
                tracing::warn!(site = %self.cfg.site, %server, %why, "game server ended");
                self.not_starting(&server);
                // Its exit is seen within a housekeeping period of the shell, long before its
                // connection times out.
                if let Ok(name) = Name::new(server) {
                    self.server_lost(&name, &format!("exited: {why}"), now);
                }
            }
            Input::ServerNotStarted { server, why } => {
                tracing::warn!(site = %self.cfg.site, %server, %why, "cannot start a game server");
                self.not_starting(&server);
            }
            Input::PlayerUp { conn, client } => {
                self.sessions.connected(conn, client);
            }
            Input::PlayerRequest { conn, token, request, rtt_ms } => {
                let result = self.player_request(conn, &request, rtt_ms, now);
                self.effects.push_back(Effect::AnswerPlayer { token, result });
            }
            Input::DrainAsked { token, server } => {
                let result = self.drain_asked(&server, now);
                self.effects.push_back(Effect::AnswerDrain { token, result });
            }
            Input::PlayerResume { conn, token, claim, rtt_ms } => {
                let result = self.player_resume(conn, claim, rtt_ms);
                self.effects.push_back(Effect::AnswerPlayer { token, result });
            }
            Input::PlayerDatagram { conn, datagram, rtt_ms } => {
                self.player_datagram(conn, datagram, rtt_ms)
            }
            Input::PlayerItem { conn, item } => self.player_item(conn, item, now),
            Input::PlayerGone { conn } => self.player_gone(conn, now),
            Input::PeerUp { site, conn } => self.peer_up(site, conn, now),
            Input::PeerRequest { site, token, request } => {
                self.relayed_request(&site, token, request, now)
            }
            Input::PeerItem { site, item } => self.peer_item(&site, item, now),
            Input::PeerDatagram { site, probe } => self.peer_probe(&site, probe, now),
            Input::PeerReplied { site, pending, result } => match pending.0 {
                Then::Crossed { player } => self.crossed(player, result.is_ok(), now),
                Then::Relayed { token } => self.relayed_answer(token, result),
                Then::MirrorRelayed { handover, target, via } => {
                    self.mirror_relayed(handover, target, via, result)
                }
                then => {
                    if let Err(e) = result {
                        tracing::warn!(peer = %site, error = %e, ?then, "request to a peer failed");
                    }
                }
            },
            Input::PeerGone { site, conn } => self.peer_down(site, conn, now),
            Input::MirrorOpened { handover, result } => self.mirror_opened(handover, result),
        }
        self.serve_lane(now);
    }

    fn ask_core(&mut self, then: Then, request: control::Request) {
        self.effects.push_back(Effect::ToCore { pending: Pending(then), request });
    }

    fn answer(&mut self, token: Token, result: Result<control::Reply, Fault>) {
        self.lane_answered(token);
        self.effects.push_back(Effect::AnswerCore { token, result });
    }

    fn ask_server(&mut self, server: &Name, then: Then, request: server::Request) {
        self.effects.push_back(Effect::ToServer {
            server: server.clone(),
            pending: Pending(then),
            request,
        });
    }

    /// `server` lets `bubble` go (it no longer hosts once it holds nothing): `false` when no
    /// such server is connected.
    fn release(&mut self, server: &Name, bubble: BubbleId) -> bool {
        let Some(emptied) = self.fleet.release(server, bubble) else { return false };
        if emptied {
            let server = server.clone();
            self.effects.push_back(Effect::SetHosting { server, hosting: false });
        }
        true
    }

    /// Microseconds since the machine's origin (probes compare only our own stamps).
    fn stamp_us(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_micros() as u64
    }

    fn count_bubbles(&self) {
        self.stats.bubbles.store(self.bubbles.len() as u64, Ordering::Relaxed);
    }
}

fn unknown(bubble: BubbleId) -> Fault {
    Fault::new(ErrorCode::UnknownBubble, format!("bubble {} is not here", bubble.0))
}

fn name(s: &str) -> Name {
    Name::new(s.chars().take(16).collect::<String>()).unwrap_or_else(|e| unreachable!("{e}"))
}

/// `lease` with the time since `received` taken off its ttl: the holder counts its lease from
/// when the granting order reached this agent, not from when a server finally took it.
fn remaining(lease: Lease, received: Instant, now: Instant) -> Lease {
    let waited =
        now.saturating_duration_since(received).as_millis().min(u128::from(lease.ttl_ms)) as u32;
    Lease { ttl_ms: lease.ttl_ms - waited, ..lease }
}
