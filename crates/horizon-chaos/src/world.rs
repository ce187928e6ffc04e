//! The simulated mesh: three sites, the real core ([`CoreMachine`]), agents ([`AgentMachine`])
//! and game servers ([`ServerMachine`] running the reference game), simulated players, and a
//! network in virtual time. Everything happens as events of one queue ordered by (time,
//! sequence): the same seed gives the same run.
//!
//! What the network models (and what it does not):
//! - per link one-way delays (the default backbone RTTs (design.md §2), 10 ms access, sub-millisecond within a
//!   site) with jitter; requests and replies travel independently (they may overtake each
//!   other), each stream is in order, datagrams may be lost, reordered or duplicated;
//! - loss on the agent–core link as QUIC sees it: a lost packet is resent after a timeout, so a
//!   message is late, not gone;
//! - partitions, one way or both: messages wait (QUIC resends them) and arrive at the heal, unless
//!   the cut outlasts the idle timeout (4 s on the agent–core link, 10 s elsewhere): then the
//!   connection dies on both sides, every request on it fails, and the agent redials every
//!   second until it gets through;
//! - process deaths: a killed game server's exit is seen by the agent's driver within 200 ms, its
//!   connection ends at the idle timeout; a killed agent takes its game servers and its players'
//!   connections with it (players join again, as new players, once it is back); a killed core
//!   is seen by the agents within a second (the port refuses), and restarts on its store;
//! - clocks: each site's clock (agent and servers) runs at its own rate, within ±0.5 % of the
//!   core's, from its own origin;
//! - the store: every write may be slow; the core does nothing else meanwhile.
//!
//! Not modelled: bandwidth and message sizes, QUIC flow control, TLS, the admin API.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use horizon_agent::AgentStats;
use horizon_agent::machine::{self as agent, AgentMachine, MachineConfig, Pending};
use horizon_core::Stage;
use horizon_core::machine::{self as core, CoreMachine, Lane, OrderId};
use horizon_core::store::{Durable, LeaseClock, MemoryStore};
use horizon_mesh::rng::Rng;
use horizon_mesh::{SiteId, SiteName, Sites, Thresholds, Time};
use horizon_proto::control;
use horizon_proto::gateway;
use horizon_proto::server;
use horizon_proto::transfer;
use horizon_proto::{
    Epoch, ErrorCode, Failure, HandoverId, Name, PlayerId, Role, Seq, StateItem, Vec3, WorldId,
};
use horizon_sdk::reference::{self, Reference, View};
use horizon_sdk::{Counters, OwnState, ServerMachine};
use std::time::Instant;

use crate::checks::{Checker, LIVENESS_S, ROUTE_ROUND_S, update_of};
use crate::faults::{Direction, Fault, SITES, Timed};

const CORE_SITE: usize = 0;
/// Backbone round trips, milliseconds (design.md §2).
const RTT_MS: [[f64; 3]; 3] = [[0.0, 85.0, 185.0], [85.0, 0.0, 225.0], [185.0, 225.0, 0.0]];
/// One way, player to home agent.
const ACCESS_US: u64 = 10_000;
/// One way, within a site (agent and its servers; the core-site agent and the core).
const LOCAL_US: u64 = 300;
/// QUIC's idle timeout: a connection silent this long is dead.
const IDLE_US: u64 = 10_000_000;
/// The agent–core link's idle timeout (`horizon_transport::Limits::control`: an agent notices
/// a dead core within a standby's takeover).
const CONTROL_IDLE_US: u64 = 4_000_000;
/// How often a cut-off agent redials.
const REDIAL_US: u64 = 1_000_000;
const TICK_MS: u32 = 100;
/// `tps_min` of the dynamic stage, for simulated servers that tick at `1000 / TICK_MS` = 10 a
/// second by design (production's 20 is a third of a Godot server's 60): a server ticking at
/// its own rate is not overloaded there, and regions are cut when they hold more than
/// [`crate::PLAYERS_PER_SERVER`]. With production's 20 every region is overloaded at every
/// sample, and SMD's rule cuts every bubble down to single players and joins it back, all run
/// long: a load no site sees (docs/chaos.md tells what it found). The relay stage keeps
/// production's 20 on purpose: its zones are then cut and joined all run long, which is what
/// that stage is for.
const DYNAMIC_TPS_MIN: f64 = 1000.0 / TICK_MS as f64 / 3.0;
const INPUT_EVERY_US: u64 = 250_000;
const WARM_POOL: usize = 2;
/// How often a traveling player moves to another group.
const TRAVEL_EVERY_US: u64 = 30_000_000;
/// A started game server connects this long after.
const SERVER_START_US: u64 = 400_000;
/// How long after its death a game server's exit is noticed (the driver's poll).
const EXIT_NOTICED_US: u64 = 200_000;
/// A server told to stop drains for at most this long (`horizon gameserver --drain-grace-s`'s
/// default).
const DRAIN_GRACE_US: u64 = 20_000_000;

/// Every µs of the run, in order.
#[derive(Debug)]
enum Event {
    CoreTimer,
    AgentTimer(usize),
    ServerTick(usize, String, u64),
    ServerSecond(usize, String, u64),
    ServerStarts(usize, String, u64),
    PlayerTick(usize),
    PlayerJoin(usize),
    PlayerMove(usize),
    Deliver(Box<Delivery>),
    FaultStart(usize),
    FaultEnd(usize),
    ControlIdle(usize, u64),
    TransferIdle((usize, usize), u64),
    Redial(usize),
    RedialPeer((usize, usize)),
    CoreBack,
    AgentBack(usize),
    LivenessCheck,
    /// A standby core's election (`election.rs`).
    Election(election::Step),
}

#[derive(Debug)]
enum Delivery {
    ToCore {
        site: usize,
        conn: u64,
        input: core::Input,
    },
    CoreToAgent {
        site: usize,
        conn: u64,
        input: agent::Input,
    },
    /// Over the transfer link between `from` and `to`.
    Peer {
        from: usize,
        to: usize,
        conn: u64,
        input: agent::Input,
    },
    ToServer {
        site: usize,
        server: String,
        inc: u64,
        what: ToServer,
    },
    ServerToAgent {
        site: usize,
        server: String,
        inc: u64,
        input: agent::Input,
    },
    ToPlayer {
        player: usize,
        conn: u64,
        what: ToPlayer,
    },
    PlayerToAgent {
        site: usize,
        player: usize,
        conn: u64,
        input: agent::Input,
    },
}

#[derive(Debug)]
enum ToServer {
    /// (The agent's continuation is large: boxed, so an item is not.)
    Request {
        pending: Box<Pending>,
        request: server::Request,
    },
    Item(StateItem),
}

#[derive(Debug)]
enum ToPlayer {
    Answer(Result<gateway::Reply, horizon_proto::Fault>),
    Item(gateway::Item),
}

/// An agent's link to the core.
#[derive(Default)]
struct Control {
    /// The connection's id; 0 while there is none.
    conn: u64,
    cut_to_core: bool,
    cut_from_core: bool,
    loss: f64,
    /// Messages waiting for a heal, by direction (true: to the core).
    held: Vec<(bool, Delivery)>,
    /// The core's ordered lane on this connection: the `seq` of its next order (the core
    /// sends them at once, numbered; the agent serves them in order), the orders sent and not
    /// answered yet (at most `control::MAX_IN_ORDER`, as the core's shell keeps), and those
    /// waiting for room.
    next_in_order: u64,
    unanswered: BTreeSet<OrderId>,
    waiting: VecDeque<(OrderId, control::Request)>,
}

/// A transfer link between two agents (the lower index dials).
#[derive(Default)]
struct Transfer {
    conn: u64,
    cut: bool,
    /// The dialer wants it.
    wanted: bool,
    held: Vec<Delivery>,
}

struct Agent {
    machine: AgentMachine,
    alive: bool,
    timer_at: u64,
}

struct Server {
    machine: ServerMachine<Reference>,
    inc: u64,
    /// The agent's request lane to it: queued requests, one out at a time.
    lane: VecDeque<(Pending, server::Request)>,
    lane_busy: bool,
    /// Told to stop: it exits once it holds no region, or at this time (global µs).
    draining_until: Option<u64>,
}

struct Player {
    home: usize,
    /// A player, or an NPC: weightless, but simulated, acknowledged and checked all the same.
    role: Role,
    pos: Vec3,
    conn: u64,
    /// Its gateway session (`None` until joined, and again after its agent died).
    id: Option<PlayerId>,
    seq: u64,
    /// The highest seq the gateway said was applied.
    told: u64,
    /// The latest view of its own entity: (inputs, last_seq).
    entity: Option<(u64, u64)>,
    last_update: u64,
    /// From when it counts for liveness (joined, or the end of a fault that isolated it).
    live_from: u64,
    playing: bool,
    reported: bool,
    /// Travels so far.
    moves: u32,
    /// Its next input is a move to `pos` (entering the world, or a travel), not a velocity.
    move_next: bool,
    /// Its latest inputs (at most [`KEPT_INPUTS`]), sent again after a resume from the seq
    /// its gateway says.
    sent: std::collections::VecDeque<(u64, Vec<u8>)>,
}

/// Inputs a simulated client keeps, as many as its gateway keeps (`MAX_KEPT`): a resume after
/// its agent restarted sends again those after its last stored copy, which may be minutes old
/// (a bubble spread over several servers stores no whole copy).
const KEPT_INPUTS: usize = 1024;

/// Counts of one run, for the report.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RunStats {
    pub events: u64,
    pub ticks_checked: u64,
    pub inputs_sent: u64,
    pub updates_to_players: u64,
    pub handovers_started: u64,
    pub restores: u64,
    pub core_generations: u32,
    /// Zones cut and joined again, over every core generation (relay stage).
    pub zone_splits: u64,
    pub zone_merges: u64,
    /// Bubbles carved out of the core site's zones and dissolved back into them, over every
    /// core generation (the default stage).
    pub carves: u64,
    pub dissolves: u64,
    /// Regions the agents moved whole off an overfull game server to another of their site.
    pub region_moves: u64,
    /// Servers told to stop (`--drains`) that went holding nothing, and those that went before
    /// every region could move (restored from their copies).
    #[serde(skip_serializing_if = "is_zero")]
    pub drains: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub drains_failed_over: u64,
    /// Transfer cuts watched to their end with their players playing on through the third
    /// site (`checks::ROUTE_ROUND_S`), the longest gap in those players' updates during one,
    /// and the transfer items and requests the agents sent round.
    pub cuts_routed_round: u64,
    pub cut_gap_max_ms: u64,
    pub relayed: u64,
    /// With a standby core: times it took over, and times a leader fenced itself.
    #[serde(skip_serializing_if = "is_zero")]
    pub takeovers: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub fences: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One run.
pub(crate) struct World {
    rng: Rng,
    time: timeline::Timeline,
    stage: Stage,
    /// The core's thresholds; the agents seat `seats_per_server` of them per server.
    thresholds: Thresholds,
    sites: Sites,
    site_ids: Vec<SiteId>,
    core: Option<CoreMachine>,
    core_timer_at: u64,
    core_busy_until: u64,
    store: MemoryStore,
    disk_us: u64,
    /// With a standby core: the election on the store (`election.rs`).
    election: Option<election::Election>,
    agents: Vec<Agent>,
    controls: Vec<Control>,
    transfers: BTreeMap<(usize, usize), Transfer>,
    servers: Vec<BTreeMap<String, Server>>,
    players: Vec<Player>,
    ids: ids::Ids,
    /// Agent requests at the core: core token → (site, conn, what waits).
    core_calls: BTreeMap<u64, CoreCall>,
    /// Core orders at an agent: agent token → (site, conn, order).
    orders: BTreeMap<u64, (usize, u64, OrderId)>,
    /// Answers on their way to the core (or held by a cut): order → connection. A connection
    /// that dies before one arrives fails that order at the core, as a QUIC request does.
    answers: BTreeMap<OrderId, u64>,
    /// Peer requests at their receiver: token → (caller, callee, conn, what waits).
    peer_calls: BTreeMap<u64, (usize, usize, u64, PeerWait)>,
    /// Handover streams: handover → (source, target).
    mirrors: BTreeMap<HandoverId, (usize, usize)>,
    /// Gateway requests at an agent: token → player.
    player_calls: BTreeMap<u64, usize>,
    faults: Vec<Timed>,
    /// Sites isolated until (global µs).
    isolated_until: Vec<u64>,
    /// Faults in force, and when the last one ended (global µs).
    in_force: BTreeSet<usize>,
    last_fault_end: Option<u64>,
    /// A transfer cut alone in force: its players must play on through the third site.
    route_watch: Option<RouteWatch>,
    pub(crate) checker: Checker,
    pub(crate) stats: RunStats,
    /// Shared by every agent machine of the run, restarted ones too (only counters are read).
    agent_stats: Arc<AgentStats>,
    pub(crate) trace: Vec<String>,
}

/// A transfer cut in force with no other fault in force or recent (see
/// [`crate::checks::ROUTE_ROUND_S`]).
#[derive(Debug)]
struct RouteWatch {
    fault: usize,
    since: u64,
    /// The players of the two cut sites playing when it began.
    players: Vec<usize>,
    /// One of them went [`ROUTE_ROUND_S`] without an update.
    late: bool,
}

/// An agent's request at the core: (site, connection, what waits, for a renewal: its send time
/// by the site's clock and its leases).
type CoreCall = (usize, u64, Pending, Option<(u64, Vec<horizon_proto::LeaseRef>)>);

#[derive(Debug)]
enum PeerWait {
    Call(Pending),
    Mirror(HandoverId),
}

impl World {
    pub(crate) fn new(
        seed: u64,
        opts: &crate::ChaosOptions,
        faults: Vec<Timed>,
        rng: Rng,
    ) -> World {
        let mut rng = rng;
        let names: Vec<SiteName> = SITES
            .iter()
            .map(|s| SiteName::new(s).unwrap_or_else(|e| unreachable!("{e:?}")))
            .collect();
        let pairs: Vec<(SiteName, SiteName, f64)> = (0..3)
            .flat_map(|a| (a + 1..3).map(move |b| (a, b)))
            .map(|(a, b)| (names[a].clone(), names[b].clone(), RTT_MS[a][b]))
            .collect();
        let sites = Sites::new(names.clone(), &names[CORE_SITE], &pairs)
            .unwrap_or_else(|e| unreachable!("{e:?}"));
        let site_ids =
            names.iter().map(|n| sites.id(n.as_str()).unwrap_or_else(|| unreachable!())).collect();
        let clocks = (0..SITES.len())
            .map(|_| timeline::Clock {
                offset_us: rng.below(1_000_000),
                rate: 1.0 + rng.range(-0.005, 0.005),
            })
            .collect();
        // The one clock read: a fixed origin for the machines' instants. Nothing printed
        // depends on it.
        #[allow(clippy::disallowed_methods)]
        let origin = Instant::now();
        let mut world = World {
            rng,
            time: timeline::Timeline::new((opts.seconds * 1e6) as u64, origin, clocks),
            stage: opts.stage,
            thresholds: match opts.stage {
                Stage::Measure | Stage::Relay | Stage::Fixed => Thresholds {
                    players_per_server: crate::PLAYERS_PER_SERVER,
                    ..Thresholds::default()
                },
                Stage::Dynamic => Thresholds {
                    players_per_server: crate::PLAYERS_PER_SERVER,
                    tps_min: DYNAMIC_TPS_MIN,
                    ..Thresholds::default()
                },
            },
            sites,
            site_ids,
            core: None,
            core_timer_at: u64::MAX,
            core_busy_until: 0,
            store: MemoryStore::default(),
            disk_us: 0,
            election: None,
            agents: Vec::new(),
            controls: (0..SITES.len()).map(|_| Control::default()).collect(),
            transfers: BTreeMap::new(),
            servers: (0..SITES.len()).map(|_| BTreeMap::new()).collect(),
            players: Vec::new(),
            ids: ids::Ids::default(),
            core_calls: BTreeMap::new(),
            orders: BTreeMap::new(),
            answers: BTreeMap::new(),
            peer_calls: BTreeMap::new(),
            mirrors: BTreeMap::new(),
            player_calls: BTreeMap::new(),
            faults,
            isolated_until: vec![0; SITES.len()],
            in_force: BTreeSet::new(),
            last_fault_end: None,
            route_watch: None,
            checker: Checker::new(seed),
            stats: RunStats::default(),
            agent_stats: Arc::new(AgentStats::default()),
            trace: Vec::new(),
        };
        if opts.standby {
            world.election = Some(election::Election::new(&mut world.rng));
        }
        world.start_core();
        for site in 0..SITES.len() {
            let machine = world.new_agent(site);
            world.agents.push(Agent { machine, alive: true, timer_at: u64::MAX });
            world.after_agent(site);
            world.schedule(50_000, Event::Redial(site));
        }
        for a in 0..SITES.len() {
            for b in a + 1..SITES.len() {
                world.transfers.insert((a, b), Transfer::default());
            }
        }
        world.add_players();
        for i in 0..world.faults.len() {
            let at = (world.faults[i].at_s * 1e6) as u64;
            world.schedule_at(at, Event::FaultStart(i));
        }
        world.schedule(1_000_000, Event::LivenessCheck);
        world
    }

    /// Players in groups: most of a group at home on one site, a few from elsewhere.
    fn add_players(&mut self) {
        // (x, homes): a group of players; an NPC with each group but the travelers', and one
        // alone, far from everyone (its zone's).
        let groups: [(f64, &[usize], bool); 5] = [
            (0.0, &[1, 1, 1, 0], true),
            (20_000.0, &[2, 2, 2, 1], true),
            (40_000.0, &[0, 0, 2], true),
            (60_000.0, &[1, 2], false),
            (90_000.0, &[], true),
        ];
        for (x, homes, npc) in groups {
            let roles = homes.iter().map(|&h| (h, Role::Player));
            // An NPC is homed on MTL or HKG in turn (its home routes its inputs, nothing more).
            let npc = npc.then_some((1 + x as usize / 20_000 % 2, Role::Npc));
            for (i, (home, role)) in roles.chain(npc).enumerate() {
                let idx = self.add_player(Player {
                    home,
                    role,
                    pos: Vec3 { x: x + 10.0 * i as f64, y: 0.0, z: 0.0 },
                    conn: 0,
                    id: None,
                    seq: 0,
                    told: 0,
                    entity: None,
                    last_update: 0,
                    live_from: 0,
                    playing: false,
                    reported: false,
                    moves: 0,
                    move_next: true,
                    sent: Default::default(),
                });
                let at = 2_000_000 + self.rng.below(6_000_000);
                self.schedule_at(at, Event::PlayerJoin(idx));
                if x >= 60_000.0 {
                    let at = TRAVEL_EVERY_US + self.rng.below(TRAVEL_EVERY_US);
                    self.schedule_at(at, Event::PlayerMove(idx));
                }
            }
        }
    }

    fn new_agent(&mut self, site: usize) -> AgentMachine {
        let cfg = MachineConfig {
            site: name(SITES[site]),
            advertise_transfer: transfer_addr(site).to_string(),
            peers: BTreeMap::new(),
            warm_pool: WARM_POOL,
            // The agent's default: what the agent tells the core (the simulated driver starts
            // every server it is asked for).
            max_servers: 64,
            seats_per_server: self.thresholds.seats_per_server(),
            players_per_server: self.thresholds.players_per_server,
            report_every: Duration::from_secs(1),
            renew_every: Duration::from_secs(5),
            server_tick: Duration::from_millis(100),
            advertise_admin: None,
        };
        let now = self.instant(site);
        AgentMachine::new(cfg, self.agent_stats.clone(), now)
    }

    // ---- time and scheduling ----

    fn schedule(&mut self, after: u64, event: Event) {
        self.schedule_at(self.time.now() + after, event);
    }

    fn schedule_at(&mut self, at: u64, event: Event) {
        self.time.schedule_at(at, event);
    }

    fn instant(&self, site: usize) -> Instant {
        self.time.instant(site)
    }

    /// [`World::instant`] as the game-server SDK takes it (tokio's type: its shells run on a
    /// paused tokio clock in their tests).
    fn server_instant(&self, site: usize) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.instant(site))
    }

    fn local_us(&self, site: usize) -> u64 {
        self.time.local_us(site)
    }

    fn core_now(&self) -> Time {
        Time::from_ms(self.time.now() / 1000)
    }

    fn note(&mut self, what: String) {
        self.trace.push(format!("{:>9.3} s  {what}", self.time.now() as f64 / 1e6));
    }

    fn jitter(&mut self, base: u64) -> u64 {
        base + (base as f64 * self.rng.range(0.0, 0.1)) as u64 + self.rng.below(2_000)
    }

    /// One way between the core and `site`'s agent, with the link's loss.
    fn control_delay(&mut self, site: usize) -> u64 {
        let base =
            if site == CORE_SITE { LOCAL_US } else { (RTT_MS[CORE_SITE][site] * 500.0) as u64 };
        let mut d = self.jitter(base);
        let loss = self.control_loss(site);
        let rto = (base * 6).max(200_000);
        while loss > 0.0 && self.rng.unit() < loss {
            d += rto;
        }
        d
    }

    fn peer_delay(&mut self, a: usize, b: usize) -> u64 {
        let base = (RTT_MS[a][b] * 500.0) as u64;
        self.jitter(base)
    }

    /// `at` for an item of an ordered stream: never before the stream's previous item.
    fn in_order(&mut self, key: (u8, usize, usize, u64), at: u64) -> u64 {
        self.time.in_order(key, at)
    }

    // ---- the run ----

    /// Runs to the end; returns the invariants' verdicts in `checker`.
    pub(crate) fn run(&mut self) {
        while let Some(event) = self.time.next() {
            self.stats.events += 1;
            self.event(event);
        }
        self.count_zone_changes();
        self.stats.region_moves =
            self.agent_stats.regions_moved.load(std::sync::atomic::Ordering::Relaxed);
        self.stats.relayed =
            self.agent_stats.relayed_sent.load(std::sync::atomic::Ordering::Relaxed);
        self.stats.drains =
            self.agent_stats.drains_moved.load(std::sync::atomic::Ordering::Relaxed);
        self.stats.drains_failed_over =
            self.agent_stats.drains_failed_over.load(std::sync::atomic::Ordering::Relaxed);
        self.final_checks();
        self.stats.ticks_checked = self.checker.ticks_checked;
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::CoreTimer => self.core_timer(),
            Event::AgentTimer(site) => self.agent_timer(site),
            Event::ServerTick(site, name, inc) => self.server_tick(site, &name, inc),
            Event::ServerSecond(site, name, inc) => self.server_second(site, &name, inc),
            Event::ServerStarts(site, name, inc) => self.server_starts(site, name, inc),
            Event::PlayerTick(p) => self.player_tick(p),
            Event::PlayerJoin(p) => self.player_join(p),
            Event::PlayerMove(p) => self.player_move(p),
            Event::Deliver(d) => self.deliver(*d),
            Event::FaultStart(i) => self.fault_start(i),
            Event::FaultEnd(i) => self.fault_end(i),
            Event::ControlIdle(site, conn) => self.control_idle(site, conn),
            Event::TransferIdle(pair, conn) => self.transfer_idle(pair, conn),
            Event::Redial(site) => self.redial(site),
            Event::RedialPeer(pair) => self.redial_peer(pair),
            Event::CoreBack => self.start_core(),
            Event::Election(step) => self.election_step(step),
            Event::AgentBack(site) => self.agent_back(site),
            Event::LivenessCheck => {
                self.liveness();
                self.schedule(1_000_000, Event::LivenessCheck);
            }
        }
    }

    // ---- the core ----

    fn site_index(&self, id: SiteId) -> usize {
        self.site_ids.iter().position(|s| *s == id).unwrap_or(CORE_SITE)
    }

    /// The core's id of `site`.
    fn site_id(&self, site: usize) -> SiteId {
        self.site_ids[site]
    }

    /// The run's thresholds: the core's, and the agents' seats per server.
    fn thresholds(&self) -> &Thresholds {
        &self.thresholds
    }
}

pub(super) fn name(s: &str) -> Name {
    Name::new(s).unwrap_or_else(|e| unreachable!("{e}"))
}

/// The transfer address a site advertises (nothing listens: the simulator routes by it).
fn transfer_addr(site: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, site as u8 + 1], 4433))
}

fn site_of_addr(addr: &horizon_transport::Target) -> Option<usize> {
    (0..SITES.len()).find(|&s| transfer_addr(s).to_string() == addr.as_str())
}

mod agents;
mod core_link;
mod core_machine;
mod election;
mod ids;
mod outages;
mod players;
mod servers;
mod timeline;
