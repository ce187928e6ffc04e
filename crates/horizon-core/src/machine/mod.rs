//! The core's logic as a sans-IO state machine: agents' requests, connections, replies and
//! state copies go in with the time ([`CoreMachine::handle`]); what to do comes out
//! ([`CoreMachine::poll_effect`]): orders to agents, replies, store writes. The shell
//! (`core.rs`) moves the bytes and feeds results back; the tests drive this directly.
//!
//! One owner per fact: the brain ([`Mesh`]) decides where a bubble *should* run; the
//! registry (`registry.rs`) says where it *does* run (it lags the brain during a handover or a
//! restore), and the reconciliation (`reconcile.rs`) which players were told to whom. Handovers are explicit state machines
//! (`handover.rs`), failovers restore the latest copy of the universe backup (`failover.rs`),
//! the brain's commands are carried out in `commands.rs`, ended bubbles whose holder was
//! away are drained from their copy (`drain.rs`), and each player's last stored copy is kept
//! for a restore that lacks them (`keep.rs`).

pub(crate) mod backup;
mod carve;
mod commands;
mod drain;
pub(crate) mod failover;
pub(crate) mod handover;
pub(crate) mod keep;
pub(crate) mod links;
pub mod measure;
mod recent;
mod reconcile;
pub(crate) mod registry;
mod rehome;
mod rejoin;
mod reports;
mod sessions;
pub(crate) mod status;
mod timeline;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use horizon_mesh::{Generation, Mesh, MeshConfig, SiteId, Sites, Thresholds, Time};
use horizon_proto::control;
use horizon_proto::{
    BubbleId, Epoch, ErrorCode, Failure, Fault, HandoverId, Lease, LeaseRef, Name, PlayerId,
};

use crate::stats::{CoreStats, FailoverReason};
pub use crate::store::StoredCopy;
use crate::store::{Record, StoreState};
use handover::{Handover, HandoverPhase};
use std::sync::Arc;

/// Decisions kept for `/status` (`recent_decisions`).
const RECENT_DECISIONS: usize = 200;

/// Identifies one connection of an agent (the transport's connection id).
pub type ConnId = u64;

/// Identifies one request of an agent waiting for the machine's reply (chosen by the shell).
pub type RequestToken = u64;

/// Identifies one order the machine sent; its result comes back as [`Input::OrderDone`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrderId(pub u64);

/// How an order travels to its agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// In the order decided: the shell numbers each order of an agent's lane and sends it at
    /// once; the agent serves each after every earlier one has been answered (`InOrder`).
    Ordered,
    /// At once, next to the ordered ones (the steps of a handover, which wait on other sites).
    Direct,
}

/// What happened, as the shell saw it.
#[derive(Debug)]
pub enum Input {
    /// An agent's control connection is up (authenticated as `site`).
    AgentConnected { site: SiteId, conn: ConnId },
    /// That connection ended.
    AgentDisconnected { site: SiteId, conn: ConnId },
    /// An agent's request, to be answered with [`Effect::Reply`] carrying `token`.
    AgentRequest { site: SiteId, conn: ConnId, token: RequestToken, request: control::Request },
    /// One item of an agent's universe backup stream.
    Backup { site: SiteId, conn: ConnId, item: control::Backup },
    /// The result of an order sent with [`Effect::Send`].
    OrderDone { order: OrderId, result: Result<control::Reply, Failure> },
    /// The latest stored copy of a bubble, asked for with [`Effect::ReadBackup`].
    BackupRead { bubble: BubbleId, copy: Option<StoredCopy> },
    /// A copy kept for players, asked for with [`Effect::ReadPinned`] (`None`: not found).
    PinnedRead { adopt: Adoption, copy: Option<Vec<u8>> },
    /// A store write failed (the shell logs it).
    StoreFailed,
}

// `StoredCopy` is the store's type (`crate::store`): what the machine makes of one.
impl StoredCopy {
    /// What `horizon_restores_total` calls this copy.
    pub(crate) fn kind(&self) -> &'static str {
        match (self.bytes.is_empty(), self.parts.is_empty()) {
            (true, _) => "none",
            (false, true) => "whole",
            (false, false) => "parts",
        }
    }

    /// The order restoring `lease`'s bubble over `region` from this copy.
    pub(crate) fn restore(
        self,
        lease: horizon_proto::Lease,
        region: horizon_proto::Region,
    ) -> control::Request {
        use horizon_proto::{Blob, Tick};
        let (from, tick, copy) = (Epoch(self.epoch), Tick(self.tick), Blob(self.bytes));
        if self.parts.is_empty() {
            control::Request::Restore { lease, region, from, tick, copy }
        } else {
            let parts = self.parts.into_iter().map(Blob).collect();
            control::Request::RestoreParts { lease, region, from, tick, copy, parts }
        }
    }
}

/// What the shell must do, in order.
#[derive(Debug, PartialEq)]
pub enum Effect {
    /// Send `request` to `site`'s agent over connection `conn`.
    Send { site: SiteId, conn: ConnId, lane: Lane, order: OrderId, request: control::Request },
    /// Answer the agent request `token`.
    Reply { token: RequestToken, reply: Result<control::Reply, Fault> },
    /// Append a record to the durable store before carrying out anything after it.
    Persist(Record),
    /// Store a state copy (whole, or one part of a spread bubble).
    PutBackup { bubble: BubbleId, epoch: u64, tick: u64, part: Option<(u32, u32)>, bytes: Vec<u8> },
    /// Read the latest whole copy of a bubble; the answer comes back as [`Input::BackupRead`].
    ReadBackup { bubble: BubbleId },
    /// Keep the whole copy `at` (the latest of its bubble now), holding `players` with their
    /// applied inputs, even once a newer one replaces it: players need it (`keep.rs`). Nothing
    /// waits for it; a failure only loses that help.
    PinBackup { at: CopyAt, players: Vec<(PlayerId, horizon_proto::Seq)> },
    /// Players no longer need the copy `at`.
    UnpinBackup { at: CopyAt },
    /// Read a kept copy; the answer comes back as [`Input::PinnedRead`] with `adopt`.
    ReadPinned { adopt: Adoption },
    /// Close an agent's connection.
    Close { conn: ConnId, code: ErrorCode, why: &'static str },
}

pub use keep::CopyAt;

/// Members of a bubble (under `epoch`) to take from the copy `from` kept for them: the bubble
/// was restored from a copy that lacks them, or a copy of it shows them behind (`keep.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adoption {
    pub bubble: BubbleId,
    pub epoch: u64,
    pub from: CopyAt,
    pub players: Vec<PlayerId>,
}

/// The core's configuration as the machine needs it.
#[derive(Clone, Debug)]
pub struct MachineConfig {
    pub sites: Sites,
    pub thresholds: Thresholds,
    /// The configured zone boxes, opened at the first start (see [`CoreMachine::new`]).
    pub zones: Vec<horizon_mesh::ZoneSpec>,
    /// The rollout stage: what the brain may decide ([`Stage::placement`]).
    pub stage: crate::Stage,
    /// Under `fixed`: what is delegated to which relay site.
    pub delegations: Vec<horizon_mesh::Delegation>,
}

/// What an order's result is for.
#[derive(Clone, Copy, Debug)]
enum Awaiting {
    /// A step of a handover.
    Handover(HandoverId, HandoverPhase),
    /// A failover's restore on its new site.
    Restore(BubbleId, u64),
    /// An ended bubble's restore for its drain (`drain.rs`).
    Drain(BubbleId, u64),
    /// A new region's `Create`.
    Create(BubbleId),
    /// A bubble's `Parts` under its epoch then.
    Parts(BubbleId, u64),
    /// The `Revoke` of a bubble a returning holder ran under an epoch a lost regrant replaced
    /// (the registry's epoch then), after it handed departed players on (`rejoin.rs`).
    HandedOn(BubbleId, u64),
}

/// The core. See the module documentation.
#[derive(Debug)]
pub struct CoreMachine {
    pub(crate) cfg: MachineConfig,
    pub(crate) mesh: Mesh,
    pub(crate) generation: u32,
    /// Leases kept at registrations and renewed since this core began to lead.
    pub(crate) leases_granted: u64,
    /// The agents' sessions (`sessions.rs`).
    pub(crate) agents: sessions::Sessions,
    /// Where each region really runs (`registry.rs`).
    pub(crate) registry: registry::Registry,
    /// Where each player's membership was last sent: player → bubble.
    pub(crate) placed: BTreeMap<PlayerId, BubbleId>,
    /// Who crossed each region's border, kept after the region ends (`reconcile::Trail`).
    pub(crate) trails: BTreeMap<BubbleId, reconcile::Trail>,
    /// Why each bubble being failed over was lost (default: its lease expired).
    pub(crate) loss: BTreeMap<BubbleId, FailoverReason>,
    /// Ended bubbles, and those whose players' states are handed on from their copy.
    drains: drain::Drains,
    /// Each player's best stored copy (`keep.rs`).
    pub(crate) keep: keep::PlayerCopies,
    /// The copy each bubble being restored was restored from (`None`: empty), by epoch.
    restored_from: BTreeMap<BubbleId, (u64, Option<CopyAt>)>,
    /// Bubbles whose restore found its site's agent gone, once already (`failover.rs`): the
    /// second time they wait for that agent's registration, or their lease's end.
    restores_unsent: BTreeSet<BubbleId>,
    /// When the players no agent brought back are next forgotten (`forget_absent_players`).
    next_absent_sweep: Time,
    pub(crate) handovers: BTreeMap<HandoverId, Handover>,
    next_handover: u64,
    next_order: u64,
    awaiting: BTreeMap<OrderId, Awaiting>,
    pub(crate) decisions: recent::Recent<serde_json::Value>,
    /// Sites whose agent said who plays where (`Players`) since this core started: until all
    /// have, the members of a bubble taken back are not all known.
    pub(crate) resynced: BTreeSet<SiteId>,
    /// What happened, in words, for the console (`timeline.rs`).
    pub(crate) timeline: recent::Recent<crate::status::TimelineEvent>,
    pub(crate) assembling: backup::Assembly,
    /// Metadata of the copies in the store (the bytes stay in the store).
    pub(crate) stored: BTreeMap<u64, crate::store::StoredBackup>,
    /// What the core counts: plain atomics the metrics read at each scrape (`stats.rs`).
    pub(crate) stats: Arc<CoreStats>,
    /// The first player id not handed out yet.
    next_player: u64,
    /// Who was handed which player ids (see `reports.rs`).
    pub(crate) ids: reports::IdBlocks,
    /// Stage 1's probe tables of the players online, with their figures (`measure.rs`).
    pub(crate) measure: measure::Measurements,
    /// Groups inside a fixed delegation waiting in a zone at the last tick.
    delegations_waiting: u32,
    /// The backbone between agents as their reports show it (`links.rs`).
    pub(crate) links: links::Backbone,
    effects: VecDeque<Effect>,
}

/// See [`CoreMachine::forget_absent_players`]: first a minute after the start, then every
/// 5 s (players who left the game while placed are forgotten at once, in `reconcile`).
const ABSENT_AFTER_START_MS: u64 = 60_000;
const ABSENT_SWEEP_EVERY_MS: u64 = 5_000;

/// Player ids handed out in one block, at most.
const MAX_ID_BLOCK: u32 = 65_536;

impl CoreMachine {
    /// A core of `generation` (already persisted) over what the store holds.
    pub fn new(
        cfg: MachineConfig,
        generation: u32,
        store: &StoreState,
        now: Time,
    ) -> Result<Self, Vec<horizon_mesh::ConfigError>> {
        // The layout persists: once the store holds zones, they are taken back (`take_back`)
        // and the configured boxes are not opened again.
        let zones_stored = store.leases.keys().any(|&id| BubbleId(id).is_zone());
        let mesh = Mesh::new(
            MeshConfig {
                sites: cfg.sites.clone(),
                thresholds: cfg.thresholds.clone(),
                generation: Generation(generation),
                placement: cfg.stage.placement(),
                zones: if zones_stored { Vec::new() } else { cfg.zones.clone() },
            },
            now,
        )?;
        let mut mesh = mesh;
        mesh.set_delegations(cfg.delegations.clone())?;
        // A relay site hosts nothing new until its agent has registered (`register` brings its
        // link up): a fixed delegation's region is not created on a site nobody runs yet.
        for site in cfg.sites.ids().filter(|&s| s != cfg.sites.core()) {
            mesh.handle_site_link(site, false);
        }
        let mut machine = CoreMachine {
            stats: Arc::new(CoreStats::new(cfg.sites.len())),
            cfg,
            mesh,
            generation,
            agents: sessions::Sessions::default(),
            registry: registry::Registry::default(),
            placed: BTreeMap::new(),
            leases_granted: 0,
            trails: BTreeMap::new(),
            loss: BTreeMap::new(),
            drains: drain::Drains::default(),
            keep: keep::PlayerCopies::default(),
            restored_from: BTreeMap::new(),
            restores_unsent: BTreeSet::new(),
            next_absent_sweep: now + horizon_mesh::Span::from_ms(ABSENT_AFTER_START_MS),
            handovers: BTreeMap::new(),
            // Handover ids carry the generation: never the id of one a previous core ran.
            next_handover: (u64::from(generation) << 32) | 1,
            next_order: 1,
            awaiting: BTreeMap::new(),
            decisions: recent::Recent::new(RECENT_DECISIONS),
            timeline: recent::Recent::new(timeline::TIMELINE),
            resynced: BTreeSet::new(),
            assembling: backup::Assembly::default(),
            stored: store.backups.clone(),
            next_player: store.next_player.max(1),
            ids: reports::IdBlocks::new(store.next_player.max(1)),
            measure: measure::Measurements::default(),
            delegations_waiting: 0,
            links: links::Backbone::default(),
            effects: VecDeque::new(),
        };
        machine.take_back(store, now);
        Ok(machine)
    }

    /// The next thing to do, in order.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// When [`CoreMachine::handle_timeout`] must run next.
    pub fn poll_timeout(&self) -> Time {
        let brain = self.mesh.poll_timeout();
        self.next_drain().map_or(brain, |d| d.min(brain))
    }

    /// Runs what is due: lease expiries, the tick, handover deadlines.
    pub fn handle_timeout(&mut self, now: Time) {
        self.mesh.handle_timeout(now);
        self.carry_out_commands(now);
        self.handover_deadlines(now);
        self.drain_due(now);
        self.forget_absent_players(now);
        self.count_measured(now);
        self.watch_delegations();
        self.count_over_capacity();
    }

    /// The gauge of regions over a server's capacity, per site (`Mesh::regions_over_capacity`).
    fn count_over_capacity(&mut self) {
        for (site, &n) in self.mesh.regions_over_capacity().iter().enumerate() {
            self.stats.regions_over_capacity.set(site, u64::from(n));
        }
    }

    /// Under `fixed`: a delegation whose region is not on its site (not created yet for want
    /// of a server there, or failed over to the core site while its site is cut from it) has
    /// its players in the zones or at the core meanwhile; a gauge and a log line say so.
    fn watch_delegations(&mut self) {
        let waiting = self.mesh.last_stats().delegations_waiting;
        if waiting != self.delegations_waiting {
            if waiting > 0 {
                tracing::warn!(
                    delegations = waiting,
                    "delegations not on their site: the site has no server ready for the region, or is cut from the core (the core site simulates it meanwhile)"
                );
            } else {
                tracing::info!("every delegation's region runs on its site");
            }
            self.delegations_waiting = waiting;
            self.stats.delegations_waiting.set(u64::from(waiting));
        }
    }

    /// `/measure.csv`: the probe tables of the players online (`measure.rs`).
    pub fn measure_csv(&self) -> String {
        self.measure.csv(self.mesh.sites())
    }

    /// Every 5 s: forgets the probe tables of players gone, and counts stage 1's figures into
    /// the metrics.
    fn count_measured(&mut self, now: Time) {
        if !self.measure.count_due(now, horizon_mesh::Span::from_ms(ABSENT_SWEEP_EVERY_MS)) {
            return;
        }
        let mesh = &self.mesh;
        self.measure.sweep(|p| mesh.player(p).is_some(), now);
        let status = self.measure.status(self.mesh.sites(), |p| mesh.player(p).map(|p| p.home));
        for s in self.cfg.sites.ids() {
            let home =
                status.by_home.get(self.cfg.sites.name(s).as_str()).copied().unwrap_or_default();
            self.stats.players_measured.set(s.index(), home.players);
            self.stats.players_would_gain.set(s.index(), home.would_gain);
        }
    }

    /// `player`'s home as the table their gateway believed says, into the brain: every figure
    /// counts them under it from now on. A player the brain does not know yet takes it at their
    /// join (`reports.rs`).
    pub(super) fn take_measured_home(&mut self, player: PlayerId) {
        let Some(home) = self.measure.nearest(player) else { return };
        match self.mesh.handle_measured_home(player, home) {
            Ok(()) | Err(horizon_mesh::InputError::UnknownPlayer(_)) => {}
            Err(e) => {
                tracing::warn!(player = player.0, error = %e, "a measured home not taken");
            }
        }
    }

    /// The copies an earlier core kept for players (from its store), before anything else.
    pub fn take_kept_copies(&mut self, kept: Vec<(CopyAt, crate::store::KeptPlayers)>) {
        let copies: Vec<CopyAt> = kept.iter().map(|(at, _)| *at).collect();
        for (at, players) in kept {
            self.keep.covered(at, &players);
        }
        for at in copies.into_iter().filter(|at| !self.keep.needs(*at)) {
            self.effects.push_back(Effect::UnpinBackup { at });
        }
    }

    /// Players not in the game a minute after this core started (agents re-register within
    /// seconds) no longer need a copy kept: those an earlier core kept for players who left
    /// while it was down.
    fn forget_absent_players(&mut self, now: Time) {
        if now < self.next_absent_sweep {
            return;
        }
        self.next_absent_sweep = now + horizon_mesh::Span::from_ms(ABSENT_SWEEP_EVERY_MS);
        let mesh = &self.mesh;
        let gone = self.keep.forget_unless(|p| mesh.player(p).is_some());
        self.effects.extend(gone.into_iter().map(|at| Effect::UnpinBackup { at }));
    }

    /// Takes one input.
    pub fn handle(&mut self, input: Input, now: Time) {
        match input {
            Input::AgentConnected { site, conn } => self.agent_connected(site, conn),
            Input::AgentDisconnected { site, conn } => {
                if self.agents.disconnected(site, conn) {
                    tracing::warn!(site = %self.cfg.sites.name(site), "agent disconnected");
                    self.mesh.handle_site_link(site, false);
                    let name = self.cfg.sites.name(site);
                    let text = format!(
                        "{name}'s agent disconnected: its regions run until their leases run out, then fail over."
                    );
                    self.note(now, crate::status::EventKind::Fault, None, text);
                }
            }
            Input::AgentRequest { site, conn, token, request } => {
                let reply = if self.agents.speaks(site, conn) {
                    self.agent_request(site, request, now)
                } else {
                    Err(Fault::new(ErrorCode::Conflict, "a newer connection of this site serves"))
                };
                self.effects.push_back(Effect::Reply { token, reply });
            }
            Input::Backup { site, conn, item } => {
                if self.agents.speaks(site, conn) {
                    self.backup(site, item, now);
                }
            }
            Input::OrderDone { order, result } => self.order_done(order, result, now),
            Input::BackupRead { bubble, copy } => self.backup_read(bubble, copy, now),
            Input::PinnedRead { adopt, copy } => self.pinned_read(adopt, copy),
            Input::StoreFailed => self.stats.store_failures.inc(),
        }
    }

    // ---- agents ------------------------------------------------------------------------------

    fn agent_connected(&mut self, site: SiteId, conn: ConnId) {
        // Registration completes with the agent's Register request.
        if !self.agents.connected(site, conn) {
            // The transport closes the connection a newer one replaces; its late events are
            // ignored by connection id.
            tracing::info!(site = %self.cfg.sites.name(site), "agent reconnected");
        }
    }

    fn agent_request(
        &mut self,
        site: SiteId,
        request: control::Request,
        now: Time,
    ) -> Result<control::Reply, Fault> {
        use control::Request as R;
        match request {
            R::Register { transfer_addr, servers, held, .. } => {
                Ok(self.register(site, transfer_addr, servers, &held, now))
            }
            R::Report { joins, leaves, players, backbone, servers } => {
                self.report(site, &joins, &leaves, &players, &backbone, &servers, now);
                Ok(control::Reply::Done)
            }
            R::Positions { regions } => {
                self.positions(site, &regions);
                Ok(control::Reply::Done)
            }
            R::Renew { leases } => Ok(self.renew(site, &leases, now)),
            R::Started { handover, bubble, epoch, .. } => {
                self.started(site, handover, bubble, epoch, now)
            }
            R::Failed { handover, reason } => {
                let Some(h) = self.handover(handover) else {
                    // Already ended (a retried request), or never one of ours.
                    return Ok(control::Reply::Done);
                };
                if h.from != site && h.to != site {
                    self.stats.refused(site, "handover_not_its_own");
                    let why = format!(
                        "site {} takes no part in handover {}",
                        self.cfg.sites.name(site),
                        handover.0
                    );
                    return Err(Fault::new(ErrorCode::Unauthorized, why));
                }
                let frozen = h.phase.freeze_sent();
                self.handover_failed(handover, &reason, frozen, now);
                Ok(control::Reply::Done)
            }
            R::PlayerIds { count } => Ok(self.player_ids(site, count)),
            R::Admin { addr } => {
                // For operators only, shown as given (bounded by the frame limit).
                self.agents.admin(site, addr.chars().take(256).collect());
                Ok(control::Reply::Done)
            }
            R::Pool { warm, max } => {
                if warm > max || max == 0 {
                    let why = format!("a pool of at most {max} servers cannot keep {warm} warm");
                    return Err(Fault::new(ErrorCode::Malformed, why));
                }
                self.agents.pool(site, warm, max);
                Ok(control::Reply::Done)
            }
            R::Players { players } => {
                self.players(site, &players);
                Ok(control::Reply::Done)
            }
            R::Measured { players } => {
                let ids = &self.ids;
                let refused = self.measure.record(
                    self.mesh.sites(),
                    site,
                    &players,
                    |p| ids.owns(site, p),
                    now,
                );
                for _ in 0..refused {
                    self.stats.refused(site, "probe_table");
                }
                for m in &players {
                    self.take_measured_home(m.player);
                }
                Ok(control::Reply::Done)
            }
            R::Rehome { lease } => self.rehome(site, lease, now),
            R::Lost { leases, reason } => {
                tracing::warn!(site = %self.cfg.sites.name(site), %reason, "bubbles lost by their holder");
                self.lost(site, &leases, FailoverReason::ServerLost, now);
                Ok(control::Reply::Done)
            }
            _ => Err(Fault::new(ErrorCode::Unexpected, "a core request, sent by an agent")),
        }
    }

    pub(crate) fn site_name(&self, site: SiteId) -> Name {
        let s = self.cfg.sites.name(site).as_str();
        // Site names are validated at configuration (short ASCII).
        Name::new(s).unwrap_or_else(|e| unreachable!("{e}"))
    }

    /// A lease of `bubble` under `epoch` to send: from `now` on, nobody writes the bubble past
    /// `now + ttl` under it (`Hosted::lease_until`).
    pub(crate) fn lease(&mut self, bubble: BubbleId, epoch: u64, now: Time) -> Lease {
        self.leased_until(bubble, now);
        Lease { bubble, epoch: Epoch(epoch), ttl_ms: self.cfg.thresholds.lease_ttl_ms as u32 }
    }

    /// A lease of `bubble` given (or renewed) at `now`: see `Hosted::lease_until`.
    pub(crate) fn leased_until(&mut self, bubble: BubbleId, now: Time) {
        let until = now + horizon_mesh::Span::from_ms(self.cfg.thresholds.lease_ttl_ms);
        if let Some(reg) = self.registry.get_mut(&bubble) {
            reg.leased_until(until);
        }
    }

    fn next_order(&mut self) -> OrderId {
        let id = OrderId(self.next_order);
        self.next_order += 1;
        id
    }

    /// Queues an order to `site` on the ordered lane. An agent not connected gets nothing
    /// (it resynchronises at registration); counted.
    pub(crate) fn order(&mut self, site: SiteId, request: control::Request) -> Option<OrderId> {
        self.send(site, Lane::Ordered, request)
    }

    fn send(&mut self, site: SiteId, lane: Lane, request: control::Request) -> Option<OrderId> {
        let Some(agent) = self.agents.get(site) else {
            self.stats.order_failures.inc(site.index());
            tracing::warn!(site = %self.cfg.sites.name(site), order = horizon_proto::Message::kind(&request), "order for a site without agent dropped");
            return None;
        };
        let conn = agent.conn;
        let order = self.next_order();
        self.effects.push_back(Effect::Send { site, conn, lane, order, request });
        Some(order)
    }

    fn order_done(&mut self, order: OrderId, result: Result<control::Reply, Failure>, now: Time) {
        match self.awaiting.remove(&order) {
            Some(Awaiting::Handover(h, phase)) => self.handover_step(h, phase, result, now),
            Some(Awaiting::Restore(bubble, epoch)) => self.restored(bubble, epoch, result, now),
            Some(Awaiting::Drain(bubble, epoch)) => self.drain_restored(bubble, epoch, result, now),
            Some(Awaiting::Create(bubble)) => {
                if let Err(why) = result {
                    tracing::debug!(bubble = bubble.0, %why, "create failed");
                    self.stats.order_failures.inc(0);
                }
                self.created(bubble);
            }
            Some(Awaiting::HandedOn(bubble, epoch)) => self.handed_on(bubble, epoch, result, now),
            Some(Awaiting::Parts(bubble, epoch)) => {
                if let Err(why) = result {
                    self.stats.order_failures.inc(0);
                    self.parts_failed(bubble, epoch, &why);
                }
            }
            None => {
                if let Err(why) = result {
                    // The shell logs which order; the count is per core (the site is in the log).
                    tracing::debug!(%why, "order failed");
                    self.stats.order_failures.inc(0);
                }
            }
        }
    }

    pub(crate) fn persist(&mut self, record: Record) {
        self.effects.push_back(Effect::Persist(record));
    }

    /// Persists a bubble's lease as the registry holds it (holder, epoch, region).
    pub(crate) fn persist_lease(&mut self, bubble: BubbleId) {
        let Some(reg) = self.registry.get(&bubble) else { return };
        let (min, max) = (reg.bounds().min, reg.bounds().max);
        let region = crate::store::StoredRegion {
            world: reg.world(),
            min: [min.x, min.y, min.z],
            max: [max.x, max.y, max.z],
        };
        self.persist(Record::Lease {
            bubble: bubble.0,
            epoch: reg.epoch(),
            site: self.cfg.sites.name(reg.site()).to_string(),
            region: Some(region),
        });
    }

    /// One batched renewal. Neither granted nor refused: a handover source's superseded
    /// epoch (it stops at the freeze, well within the lease it has), an epoch superseded by a
    /// regrant to the same holder (the regrant follows), and a bubble the core has
    /// just ended (its `Revoke` follows the member changes that take its players out, in order;
    /// a refusal racing ahead would drop them before their state crossed). Refused: the
    /// target's epoch of a handover given up after its freeze (its lease must run out).
    fn renew(&mut self, site: SiteId, leases: &[LeaseRef], now: Time) -> control::Reply {
        let mut granted = Vec::new();
        let mut refused = Vec::new();
        for l in leases {
            let Some(reg) = self.registry.get(&l.bubble) else { continue };
            if reg.moving().is_some() && reg.site() == site && reg.epoch() == l.epoch.0 {
                continue;
            }
            if reg.site() == site && reg.regrant() == Some((l.epoch.0, reg.epoch())) {
                // Superseded by the `Regrant` on its way to this same holder (a handover given
                // up before its freeze), behind this renewal: a refusal would stop the bubble
                // before it arrives.
                continue;
            }
            if reg.ending_since().is_some() {
                // Ended by the brain, its members still leaving: see `carry_out_commands`.
                continue;
            }
            let given_up = reg
                .moving()
                .and_then(|h| self.handover(h))
                .is_some_and(|h| h.given_up && h.to == site && h.epoch == l.epoch.0);
            if given_up {
                refused.push(*l);
                continue;
            }
            let pair = [(l.bubble, l.epoch)];
            match self.mesh.handle_renewal(site, &pair, now).pop() {
                Some(Ok(_)) => {
                    self.leased_until(l.bubble, now);
                    granted.push(*l);
                }
                _ => refused.push(*l),
            }
        }
        self.stats.renewals.inc(site.index());
        self.granted(granted.len());
        self.stats.leases_refused.add(site.index(), refused.len() as u64);
        control::Reply::Renewed {
            ttl_ms: self.cfg.thresholds.lease_ttl_ms as u32,
            granted,
            refused,
        }
    }

    /// Remembers that `order`'s result is for `what`.
    fn track(&mut self, order: Option<OrderId>, what: Awaiting) -> bool {
        match order {
            Some(o) => {
                self.awaiting.insert(o, what);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
