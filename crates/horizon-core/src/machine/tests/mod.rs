//! The core's state machine driven directly: agents connect and register, players join, the
//! brain ticks, and the effects say what the core would send. No sockets, no clock.
//! This file holds the harness; each other file one job's tests (crossings and the copies
//! kept for players in `crossings.rs`, failovers in `failover.rs`, …).

use crate::status::EventKind;
use horizon_mesh::{SiteName, Sites, Thresholds};
use horizon_proto::{Role, Seq, Tick, Vec3, WorldId};

use super::*;

pub(crate) fn sites() -> Sites {
    sites_cored_at("PAR")
}

/// PAR, MTL and HKG with the core at `core`. SMD-G keeps no bubble on the core site (its
/// players play in its zones): the tests of handovers between PAR and MTL put the core at
/// HKG ([`Harness::cored_at`]).
pub(crate) fn sites_cored_at(core: &str) -> Sites {
    let name = |s: &str| SiteName::new(s).expect("valid site name");
    Sites::new(
        vec![name("PAR"), name("MTL"), name("HKG")],
        &name(core),
        &[
            (name("PAR"), name("MTL"), 85.0),
            (name("PAR"), name("HKG"), 185.0),
            (name("MTL"), name("HKG"), 225.0),
        ],
    )
    .expect("valid sites")
}

/// A core with every agent connected and registered, three ready servers per site.
struct Harness {
    core: CoreMachine,
    now: Time,
    next_token: RequestToken,
    /// Every effect carried out so far, in order.
    log: Vec<Effect>,
    /// What the core persisted, folded as its store would (the log may be cleared).
    stored: StoreState,
}

const TTL_MS: u64 = 10_000;
const MARGIN_MS: u64 = 2_000;

impl Harness {
    /// A harness around a core already built (a restarted one, say).
    fn around(core: CoreMachine, now: Time) -> Self {
        Harness { core, now, next_token: 1, log: Vec::new(), stored: StoreState::default() }
    }

    fn new() -> Self {
        Harness::with(Thresholds::default())
    }

    fn with(thresholds: Thresholds) -> Self {
        Harness::with_core(thresholds, "PAR")
    }

    /// A harness whose core site is `core` (see [`sites_cored_at`]).
    fn cored_at(core: &str) -> Self {
        Harness::with_core(Thresholds::default(), core)
    }

    fn with_core(thresholds: Thresholds, core: &str) -> Self {
        let thresholds =
            Thresholds { lease_ttl_ms: TTL_MS, lease_drift_margin_ms: MARGIN_MS, ..thresholds };
        let cfg = MachineConfig {
            sites: sites_cored_at(core),
            thresholds,
            zones: Vec::new(),
            stage: crate::Stage::Dynamic,
            delegations: Vec::new(),
        };
        // Player ids below 1000 were handed out by an earlier core: any site may join them
        // (the tests name their players 1, 2, ...).
        let store = StoreState { next_player: 1_000, ..StoreState::default() };
        let core = CoreMachine::new(cfg, 1, &store, Time::ZERO).unwrap();
        let mut h = Harness::around(core, Time::ZERO);
        for site in ["PAR", "MTL", "HKG"] {
            h.connect(site);
        }
        h
    }

    fn site(&self, name: &str) -> SiteId {
        self.core.cfg.sites.id(name).unwrap()
    }

    fn conn(&self, site: &str) -> ConnId {
        self.core.agents.get(self.site(site)).expect("a session").conn
    }

    fn connect(&mut self, name: &str) {
        let site = self.site(name);
        let conn = 100 + site.index() as u64 + 10 * self.next_token;
        self.core.handle(Input::AgentConnected { site, conn }, self.now);
        let servers = (0..3).map(|i| server(&format!("{name}-{i}"), &[])).collect();
        self.request(name, register(name, servers, &[])).unwrap();
    }

    /// Sends an agent request and returns the machine's reply to it.
    fn request(&mut self, site: &str, request: control::Request) -> Result<control::Reply, Fault> {
        let token = self.next_token;
        self.next_token += 1;
        let (site_id, conn) = (self.site(site), self.conn(site));
        self.core.handle(Input::AgentRequest { site: site_id, conn, token, request }, self.now);
        let mut reply = None;
        self.drain(|e| match e {
            Effect::Reply { token: t, reply: r } if *t == token => reply = Some(r.clone()),
            _ => {}
        });
        reply.expect("every request is answered")
    }

    /// Takes every pending effect into the log; `each` sees them first.
    fn drain(&mut self, mut each: impl FnMut(&Effect)) {
        while let Some(e) = self.core.poll_effect() {
            each(&e);
            if let Effect::Persist(record) = &e {
                self.stored.apply(record);
            }
            self.log.push(e);
        }
    }

    /// Advances the clock to `t_ms`, running every timeout due on the way.
    fn run_until(&mut self, t_ms: u64) {
        let end = Time::from_ms(t_ms);
        loop {
            let next = self.core.poll_timeout();
            if next > end {
                break;
            }
            self.now = next.max(self.now);
            self.renew_zones();
            self.core.handle_timeout(self.now);
            self.drain(|_| {});
        }
        self.now = end;
    }

    /// The core site's agent renews its zones' leases, as a running agent renews everything it
    /// holds (the tests renew their bubbles themselves, to choose who stops).
    fn renew_zones(&mut self) {
        let par = self.core.cfg.sites.core();
        let zones: Vec<LeaseRef> = self
            .core
            .registry
            .iter()
            .filter(|(b, r)| b.is_zone() && r.site() == par && r.settled())
            .map(|(&b, r)| r.lease_ref(b))
            .collect();
        if zones.is_empty() || !self.core.agents.has(par) {
            return;
        }
        let core = self.core.cfg.sites.name(par).to_string();
        let _ = self.request(&core, control::Request::Renew { leases: zones });
    }

    /// Orders sent since the log was last cleared, as (site, order id, request).
    fn sent(&self) -> Vec<(String, OrderId, control::Request)> {
        self.log
            .iter()
            .filter_map(|e| match e {
                Effect::Send { site, order, request, .. } => {
                    Some((self.core.cfg.sites.name(*site).to_string(), *order, request.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Answers every order sent to `site` with `Done`, the way an agent would.
    fn ack_all(&mut self, site: &str) {
        let orders: Vec<OrderId> =
            self.sent().into_iter().filter(|(s, ..)| s == site).map(|(_, o, _)| o).collect();
        for order in orders {
            let result = Ok(control::Reply::Done);
            self.core.handle(Input::OrderDone { order, result }, self.now);
        }
        self.drain(|_| {});
    }

    fn join(&mut self, site: &str, player: u64, x: f64) {
        self.report(site, vec![sample(player, x)], Vec::new(), Vec::new());
    }

    /// `site`'s agent reports joins, moves and leaves (its three servers ready).
    fn report(
        &mut self,
        site: &str,
        joins: Vec<control::PlayerSample>,
        players: Vec<control::PlayerSample>,
        leaves: Vec<PlayerId>,
    ) {
        let servers = (0..3).map(|i| server(&format!("{site}-{i}"), &[])).collect();
        let report =
            control::Request::Report { joins, leaves, players, backbone: Vec::new(), servers };
        assert_eq!(self.request(site, report).unwrap(), control::Reply::Done);
    }

    /// The bubble the registry holds for `player`, with its site and epoch.
    fn hosted(&self, player: u64) -> (BubbleId, String, u64) {
        let bubble = self.core.placed[&PlayerId(player)];
        let r = &self.core.registry[&bubble];
        (bubble, self.core.cfg.sites.name(r.site()).to_string(), r.epoch())
    }
}

/// A player at `x` m on world 1.
fn sample(player: u64, x: f64) -> control::PlayerSample {
    control::PlayerSample {
        player: PlayerId(player),
        access_rtt_ms: 10.0,
        role: Role::Player,
        world: WorldId(1),
        pos: Vec3 { x, y: 0.0, z: 0.0 },
        vel: Vec3::default(),
    }
}

/// A site's `Positions` for `region` under `epoch`: each player at `x` m.
fn positions(region: BubbleId, epoch: u64, players: &[(u64, f64)]) -> control::Request {
    let lease = LeaseRef { bubble: region, epoch: Epoch(epoch) };
    let players = players
        .iter()
        .map(|&(player, x)| horizon_proto::server::PlayerPosition {
            player: PlayerId(player),
            pos: Vec3 { x, y: 0.0, z: 0.0 },
            vel: Vec3::default(),
        })
        .collect();
    control::Request::Positions { regions: vec![control::RegionPositions { lease, players }] }
}

/// An agent's `Register`, with its servers and the leases it holds.
fn register(site: &str, servers: Vec<control::ServerLoad>, held: &[LeaseRef]) -> control::Request {
    control::Request::Register {
        site: Name::new(site).unwrap(),
        build: Name::new("test").unwrap(),
        transfer_addr: format!("{site}:7401"),
        servers,
        held: held.iter().map(|&lease| control::Held { lease, tick: Tick(0) }).collect(),
    }
}

fn server(name: &str, bubbles: &[BubbleId]) -> control::ServerLoad {
    control::ServerLoad {
        server: Name::new(name).unwrap(),
        tps: 60.0,
        players: 0,
        chunks_loading: 0,
        ready: bubbles.is_empty(),
        bubbles: bubbles.to_vec(),
    }
}

/// A lone Montrealer gets a bubble at MTL; returns it.
fn montrealer_in_a_bubble(h: &mut Harness) -> (BubbleId, u64) {
    h.join("MTL", 1, 0.0);
    h.run_until(6_000);
    let (bubble, site, epoch) = h.hosted(1);
    assert_eq!(site, "MTL");
    h.ack_all("MTL");
    let renew = control::Request::Renew { leases: vec![LeaseRef { bubble, epoch: Epoch(epoch) }] };
    h.request("MTL", renew).unwrap();
    (bubble, epoch)
}

/// A whole copy of `bubble` from its holder, in one chunk, covering player 1 up to `seq`.
fn copy(h: &mut Harness, site: &str, bubble: BubbleId, epoch: u64, tick: u64, seq: u64) {
    copy_of(h, site, bubble, epoch, tick, &[(1, seq)]);
}

/// A whole copy of `bubble` from its holder, in one chunk, with what it covers: (player, seq).
fn copy_of(
    h: &mut Harness,
    site: &str,
    bubble: BubbleId,
    epoch: u64,
    tick: u64,
    acked: &[(u64, u64)],
) {
    let lease = LeaseRef { bubble, epoch: Epoch(epoch) };
    let (site_id, conn) = (h.site(site), h.conn(site));
    let chunk = control::Backup::Chunk {
        lease,
        tick: Tick(tick),
        index: 0,
        total: 1,
        bytes: horizon_proto::Blob(vec![tick as u8; 8]),
    };
    h.core.handle(Input::Backup { site: site_id, conn, item: chunk }, h.now);
    let acked = acked.iter().map(|&(p, s)| (PlayerId(p), Seq(s))).collect();
    let covers = control::Backup::Covers { lease, tick: Tick(tick), acked };
    h.core.handle(Input::Backup { site: site_id, conn, item: covers }, h.now);
    h.drain(|_| {});
}

impl Harness {
    /// `site`'s server of `bubble` under `epoch` is lost: the failover reads `copy` from the
    /// store and restores it at `site`, which answers every order.
    fn lose(&mut self, site: &str, bubble: BubbleId, epoch: u64, copy: Option<StoredCopy>) {
        let lost = control::Request::Lost {
            leases: vec![LeaseRef { bubble, epoch: Epoch(epoch) }],
            reason: "server exited".into(),
        };
        self.request(site, lost).unwrap();
        self.core.handle(Input::BackupRead { bubble, copy }, self.now);
        self.drain(|_| {});
        self.ack_all(site);
    }

    /// The game server simulating `player` puts them at `x` m: the site holding their region
    /// reports it under the region's lease (the only positions placement uses).
    fn moved(&mut self, player: u64, x: f64) {
        let (region, site, epoch) = self.hosted(player);
        let request = positions(region, epoch, &[(player, x)]);
        assert_eq!(self.request(&site, request).unwrap(), control::Reply::Done);
    }

    /// Acknowledges every order and renews every lease, as healthy agents do.
    fn settle(&mut self) {
        for site in ["PAR", "MTL", "HKG"] {
            self.ack_all(site);
            let leases: Vec<LeaseRef> = self
                .core
                .registry
                .iter()
                .filter(|(_, r)| r.site() == self.site(site))
                .map(|(&b, r)| LeaseRef { bubble: b, epoch: Epoch(r.epoch()) })
                .collect();
            self.request(site, control::Request::Renew { leases }).unwrap();
        }
    }

    /// Routes `site` was sent for `player`, as (kind, bubble).
    fn routes_to(&self, site: &str, player: u64) -> Vec<(&'static str, BubbleId)> {
        let mut out = Vec::new();
        for (s, _, request) in self.sent() {
            let (kind, routes) = match request {
                control::Request::Route { routes } => ("route", routes),
                control::Request::Recover { routes } => ("recover", routes),
                _ => continue,
            };
            if s == site {
                out.extend(
                    routes.iter().filter(|r| r.player.0 == player).map(|r| (kind, r.bubble)),
                );
            }
        }
        out
    }
}

/// Answers the handover's latest step.
fn reply_step(h: &mut Harness, reply: control::Reply) {
    let step = |r: &control::Request| {
        matches!(
            r,
            control::Request::Prepare { .. }
                | control::Request::Members { .. }
                | control::Request::Freeze { .. }
        )
    };
    let (_, order, _) = h.sent().into_iter().rev().find(|(_, _, r)| step(r)).unwrap();
    h.core.handle(Input::OrderDone { order, result: Ok(reply) }, h.now);
    h.drain(|_| {});
}

/// A Montrealer's bubble, joined by three Parisians, moving MTL → PAR up to its `Freeze`
/// (sent, not answered), in a harness whose core is at HKG ([`Harness::cored_at`]). Returns
/// the bubble and the source's epoch (the target's is one more).
fn handover_at_its_freeze(h: &mut Harness) -> (BubbleId, u64) {
    let (bubble, _) = montrealer_in_a_bubble(h);
    for p in 2..5 {
        h.join("PAR", p, 1.0 + p as f64);
    }
    h.log.clear();
    let mut prepare = None;
    for _ in 0..12 {
        h.run_until(h.now.as_ms() + 5_000);
        let sent = h.sent();
        if let Some((_, _, control::Request::Prepare { lease, .. })) =
            sent.iter().find(|(_, _, r)| matches!(r, control::Request::Prepare { .. }))
        {
            prepare = Some(*lease);
            break;
        }
        h.ack_all("MTL");
        h.ack_all("PAR");
        h.log.clear();
        let leases: Vec<LeaseRef> = h.core.registry.iter().map(|(&b, r)| r.lease_ref(b)).collect();
        h.request("MTL", control::Request::Renew { leases }).unwrap();
    }
    let lease =
        prepare.unwrap_or_else(|| panic!("a handover to PAR starts: {:?}", h.core.decisions));
    let epoch = lease.epoch.0 - 1;
    assert!(epoch >= 1);
    reply_step(h, control::Reply::Prepared { handover: HandoverId(1) });
    reply_step(h, control::Reply::Done);
    reply_step(h, control::Reply::Done);
    let sent = h.sent();
    assert!(
        sent.iter().any(|(s, _, r)| s == "MTL" && matches!(r, control::Request::Freeze { .. }))
    );
    (bubble, epoch)
}

fn failed_over(h: &Harness, bubble: BubbleId) -> bool {
    h.log.iter().any(|e| matches!(e, Effect::ReadBackup { bubble: b } if *b == bubble))
}

mod carve;
mod crossings;
mod drain;
mod failover;
mod handovers;
mod homes;
mod positions;
mod rehome;
mod restart;
mod routes;
mod spread;
mod trust;
mod zones;

/// The exposition text `/metrics` would serve for `core` (its gauges refreshed first, as the
/// shell does after a tick).
fn metrics_text(core: &mut CoreMachine) -> String {
    core.refresh_gauges();
    let metrics = crate::metrics::Metrics::new(&core.cfg.sites, core.stats(), &Default::default());
    horizon_admin::render(&metrics.registry)
}
