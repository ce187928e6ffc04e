//! The core's state machine driven directly: agents connect and register, players join, the
//! brain ticks, and the effects say what the core would send. No sockets, no clock.
//! Crossings and the copies kept for players are in `crossings.rs`.

use crate::status::EventKind;
use horizon_mesh::{SiteName, Sites, Thresholds};
use horizon_proto::{Role, Seq, Tick, Vec3, WorldId};

use super::*;

pub(crate) fn sites() -> Sites {
    let name = |s: &str| SiteName::new(s).expect("valid site name");
    Sites::new(
        vec![name("PAR"), name("MTL"), name("HKG")],
        &name("PAR"),
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
        let thresholds =
            Thresholds { lease_ttl_ms: TTL_MS, lease_drift_margin_ms: MARGIN_MS, ..thresholds };
        let cfg = MachineConfig {
            sites: sites(),
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
        let par = self.site("PAR");
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
        let _ = self.request("PAR", control::Request::Renew { leases: zones });
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

#[test]
fn a_relay_cut_from_the_core_is_restored_on_the_core_site_from_its_latest_copy_after_lease_and_margin()
 {
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    copy(&mut h, "MTL", bubble, epoch, 40, 7);
    assert!(
        h.sent().iter().any(|(s, _, r)| s == "MTL"
            && matches!(r, control::Request::Covered { players } if players[0].seq == Seq(7))),
        "the home gateway is told which inputs the stored copy covers"
    );
    // The renewal at 6 s is the last one MTL gets through; then its link to the core is cut.
    let renew = control::Request::Renew { leases: vec![LeaseRef { bubble, epoch: Epoch(epoch) }] };
    let reply = h.request("MTL", renew).unwrap();
    assert!(matches!(reply, control::Reply::Renewed { ref granted, .. } if granted.len() == 1));
    let last_renewal = h.now.as_ms();
    let conn = h.conn("MTL");
    let mtl = h.site("MTL");
    h.core.handle(Input::AgentDisconnected { site: mtl, conn }, h.now);
    h.log.clear();
    h.run_until(last_renewal + TTL_MS + MARGIN_MS - 1);
    assert!(
        !h.log.iter().any(|e| matches!(e, Effect::ReadBackup { .. })),
        "no failover before lease + margin: {:?}",
        h.log
    );
    h.run_until(last_renewal + TTL_MS + MARGIN_MS + 6_000);
    let reads: Vec<&Effect> =
        h.log.iter().filter(|e| matches!(e, Effect::ReadBackup { .. })).collect();
    assert_eq!(reads, vec![&Effect::ReadBackup { bubble }]);
    let (_, site, new_epoch) = h.hosted(1);
    assert_eq!(site, "PAR", "restored on the core site");
    assert!(new_epoch > epoch, "a newer epoch fences the cut relay off");
    assert!(h.log.iter().any(|e| matches!(e, Effect::Persist(Record::Lease { epoch: e, site, .. }) if *e == new_epoch && site == "PAR")));
    // The shell reads the copy; the restore goes to PAR with it.
    h.log.clear();
    let stored = StoredCopy { epoch, tick: 40, bytes: vec![40; 8], parts: Vec::new() };
    h.core.handle(Input::BackupRead { bubble, copy: Some(stored) }, h.now);
    h.drain(|_| {});
    let sent = h.sent();
    let (_, order, restore) = sent.iter().find(|(s, ..)| s == "PAR").expect("a restore to PAR");
    let control::Request::Restore { lease, from, tick, copy: bytes, .. } = restore else {
        panic!("{restore:?}")
    };
    assert_eq!((lease.epoch.0, from.0, tick.0, bytes.0.len()), (new_epoch, epoch, 40, 8));
    // Members and routes wait for the restore to be done, then go out.
    assert!(!sent.iter().any(|(_, _, r)| matches!(r, control::Request::Route { .. })));
    let order = *order;
    h.core.handle(Input::OrderDone { order, result: Ok(control::Reply::Done) }, h.now);
    h.drain(|_| {});
    let sent = h.sent();
    assert!(sent.iter().any(|(s, _, r)| s == "PAR"
        && matches!(r, control::Request::Members { players, .. } if players.len() == 1)));
    assert!(!h.core.registry[&bubble].restoring());
    // On heal, MTL re-registers holding the old epoch: told to stop it.
    h.log.clear();
    let conn = 999;
    h.core.handle(Input::AgentConnected { site: mtl, conn }, h.now);
    let again = register("MTL", Vec::new(), &[LeaseRef { bubble, epoch: Epoch(epoch) }]);
    let control::Reply::Registered { keep, stop, .. } = h.request("MTL", again).unwrap() else {
        panic!()
    };
    assert!(keep.is_empty());
    assert_eq!(stop, vec![LeaseRef { bubble, epoch: Epoch(epoch) }]);
    // And its old epoch's copies and renewals are refused.
    let renew = control::Request::Renew { leases: vec![LeaseRef { bubble, epoch: Epoch(epoch) }] };
    let control::Reply::Renewed { granted, .. } = h.request("MTL", renew).unwrap() else {
        panic!()
    };
    assert!(granted.is_empty(), "no renewal of a fenced epoch");
    // The console's timeline tells it, newest first.
    let page = horizon_admin::Page { after: None, limit: 10, private: false };
    let told: Vec<String> =
        h.core.status(h.now, page).timeline.into_iter().rev().map(|e| e.text).collect();
    let at = |words: &str| told.iter().rposition(|t| t.contains(words));
    let steps = [
        "MTL's agent disconnected",
        &format!("bubble {}'s lease on MTL ran out", bubble.0),
        &format!("bubble {} fails over MTL → PAR with 1 player (its lease ran out)", bubble.0),
        &format!("bubble {} restored on PAR from its whole copy (tick 40)", bubble.0),
        "MTL's agent registered",
    ];
    let found: Vec<Option<usize>> = steps.iter().map(|s| at(s)).collect();
    assert!(
        found.iter().all(Option::is_some) && found.is_sorted(),
        "{steps:?} in order in {told:#?}"
    );
    let before = h.core.stats.backups_refused.get(mtl.index());
    copy(&mut h, "MTL", bubble, epoch, 90, 9);
    assert_eq!(h.core.stats.backups_refused.get(mtl.index()), before + 1, "stale copy refused");
}

#[test]
fn a_lost_server_restarts_its_bubble_on_the_same_site_at_once() {
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    copy(&mut h, "MTL", bubble, epoch, 12, 3);
    h.log.clear();
    let lost = control::Request::Lost {
        leases: vec![LeaseRef { bubble, epoch: Epoch(epoch) }],
        reason: "server exited".into(),
    };
    assert_eq!(h.request("MTL", lost).unwrap(), control::Reply::Done);
    let (_, site, new_epoch) = h.hosted(1);
    assert_eq!(site, "MTL", "the site has spare servers");
    assert!(new_epoch > epoch);
    assert!(h.log.contains(&Effect::ReadBackup { bubble }), "restored at once, not at a tick");
    // A second report of the same loss changes nothing.
    h.log.clear();
    let again = control::Request::Lost {
        leases: vec![LeaseRef { bubble, epoch: Epoch(epoch) }],
        reason: "server exited".into(),
    };
    h.request("MTL", again).unwrap();
    assert!(!h.log.iter().any(|e| matches!(e, Effect::ReadBackup { .. })));
}

#[test]
fn a_restore_that_fails_is_failed_over_again_elsewhere() {
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    let lost = control::Request::Lost {
        leases: vec![LeaseRef { bubble, epoch: Epoch(epoch) }],
        reason: "server exited".into(),
    };
    h.request("MTL", lost).unwrap();
    h.log.clear();
    h.core.handle(Input::BackupRead { bubble, copy: None }, h.now);
    h.drain(|_| {});
    let (_, order, _) = h.sent().into_iter().find(|(s, ..)| s == "MTL").expect("restore to MTL");
    let no_server = Fault::new(ErrorCode::NotReady, "no game server ready at MTL in time");
    let result = Err(Failure::Refused(no_server));
    h.core.handle(Input::OrderDone { order, result }, h.now);
    h.drain(|_| {});
    let (_, site, _) = h.hosted(1);
    assert_eq!(site, "PAR", "after a failed restore at MTL, another site");
    assert!(h.log.contains(&Effect::ReadBackup { bubble }));
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
/// (sent, not answered). Returns the bubble and the source's epoch (the target's is one more).
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

#[test]
fn a_handover_frozen_but_never_started_is_given_up_and_its_target_lease_refused() {
    let mut h = Harness::with(Thresholds { dwell_ms: 0, hold_ms: 0, ..Thresholds::default() });
    let (bubble, epoch) = handover_at_its_freeze(&mut h);
    let reply = reply_step;
    reply(&mut h, control::Reply::Frozen { handover: HandoverId(1), tick: Tick(5) });
    let target = LeaseRef { bubble, epoch: Epoch(epoch + 1) };
    let renew = |h: &mut Harness| {
        let req = control::Request::Renew { leases: vec![target] };
        match h.request("PAR", req).unwrap() {
            control::Reply::Renewed { granted, refused, .. } => (granted, refused),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(renew(&mut h).0, vec![target], "renewed while the handover may still commit");
    h.run_until(h.now.as_ms() + handover::HANDOVER_DEADLINE.as_ms() + 5_000);
    assert_eq!(renew(&mut h).1, vec![target], "given up: the target's lease must run out");
    let started = control::Request::Started {
        handover: HandoverId(1),
        bubble,
        epoch: Epoch(epoch + 1),
        tick: Tick(6),
    };
    assert!(h.request("PAR", started).is_err(), "too late to commit");
}

#[test]
fn the_status_explains_why_a_bubble_is_where_it_is_and_tells_its_handover_in_words() {
    let mut h = Harness::with(Thresholds { dwell_ms: 0, hold_ms: 0, ..Thresholds::default() });
    let (bubble, epoch) = handover_at_its_freeze(&mut h);
    let public = horizon_admin::Page { after: None, limit: 100, private: false };
    // Mid-handover the brain already places it on PAR, the best site for 3 Parisians and
    // a Montrealer.
    let doc = h.core.status(h.now, public);
    let b = doc.bubble(bubble.0).unwrap();
    let explain = b.explain.as_ref().unwrap();
    assert_eq!((explain.best.as_str(), explain.rule.as_str()), ("PAR", "scored"));
    assert_eq!(explain.candidates.len(), 3);
    assert!(explain.words.contains("PAR is the best site"), "{}", explain.words);
    let moving = format!("bubble {} moves MTL → PAR with 4 players", bubble.0);
    assert!(doc.timeline.iter().any(|e| e.text.starts_with(&moving)), "{:?}", doc.timeline);
    let handover = *h.core.handovers.keys().next().unwrap();
    let started =
        control::Request::Started { handover, bubble, epoch: Epoch(epoch + 1), tick: Tick(6) };
    h.request("PAR", started).unwrap();
    let doc = h.core.status(h.now, public);
    let committed = &doc.timeline[0];
    assert_eq!((committed.kind, committed.region), (EventKind::Handover, Some(bubble.0)));
    // The test sites' backbone: PAR–MTL 85 ms, so 42.5 ms each way; for the Parisians the
    // seal's way and their own cancel out, the Montrealer's updates come from farther.
    for part in [&format!("bubble {} handed over MTL → PAR", bubble.0), "PAR 0 ms", "MTL 85 ms"] {
        assert!(committed.text.contains(part), "{part} in {}", committed.text);
    }
    let b = doc.bubble(bubble.0).unwrap();
    assert_eq!(b.life.last_change.as_ref().map(|c| &c.text), Some(&committed.text));
    assert_eq!(b.site, "PAR");
}

#[test]
fn a_source_whose_regrant_was_lost_with_its_connection_fails_over_when_it_registers_again() {
    // Seed 1883: a handover MTL → PAR was given up before its freeze while the core could not
    // reach MTL, so its `Regrant` (the bubble back to MTL under a new epoch) was dropped. MTL
    // came back holding the old epoch: it was told to stop the bubble, while the core counted
    // it as held (a regrant "on its way") and waited for the lease to run out: its players
    // saw nothing for a minute.
    let mut h = Harness::with(Thresholds { dwell_ms: 0, hold_ms: 0, ..Thresholds::default() });
    let (bubble, _) = montrealer_in_a_bubble(&mut h);
    for p in 2..5 {
        h.join("PAR", p, 1.0 + p as f64);
    }
    let old = h.core.registry[&bubble].lease_ref(bubble);
    let mtl = h.site("MTL");
    // MTL's connection dies; the brain moves the bubble to PAR at its next tick. The handover
    // needs both agents: it is given up at once, and the regrant to MTL dropped.
    let conn = h.conn("MTL");
    h.core.handle(Input::AgentDisconnected { site: mtl, conn }, h.now);
    h.drain(|_| {});
    for _ in 0..4 {
        if h.core.registry[&bubble].regrant().is_some() {
            break;
        }
        h.run_until(h.now.as_ms() + 5_000);
    }
    let reg = &h.core.registry[&bubble];
    assert_eq!(reg.site(), mtl);
    assert_eq!(reg.regrant(), Some((old.epoch.0, reg.epoch())), "regranted to MTL, not delivered");
    h.log.clear();
    h.core.handle(Input::AgentConnected { site: mtl, conn: conn + 1000 }, h.now);
    let again = register("MTL", vec![server("MTL-0", &[bubble])], &[old]);
    let control::Reply::Registered { keep, stop, .. } = h.request("MTL", again).unwrap() else {
        panic!()
    };
    assert!(keep.is_empty());
    assert_eq!(stop, vec![old], "the old epoch stops");
    assert!(failed_over(&h, bubble), "and the bubble fails over now: {:?}", h.log);
}

/// The core dies with a handover's `Freeze` sent and its outcome unknown, and starts again
/// on its store (generation 2), its agents connected again, none registered yet.
fn restarted_at_the_freeze(h: &Harness) -> Harness {
    let mut state = h.stored.clone();
    state.next_player = state.next_player.max(1_000);
    let core = CoreMachine::new(h.core.cfg.clone(), 2, &state, h.now).unwrap();
    let mut h2 = Harness::around(core, h.now);
    h2.drain(|_| {});
    for site in ["PAR", "MTL", "HKG"] {
        let id = h2.site(site);
        h2.core.handle(Input::AgentConnected { site: id, conn: 500 + id.index() as u64 }, h2.now);
    }
    h2.drain(|_| {});
    h2
}

fn failed_over(h: &Harness, bubble: BubbleId) -> bool {
    h.log.iter().any(|e| matches!(e, Effect::ReadBackup { bubble: b } if *b == bubble))
}

#[test]
fn a_core_restarted_after_a_handover_froze_finds_its_target_running_it_and_never_restores_it() {
    // Seed 9201977: the restarted core restored the bubble on its sealed source's site while
    // the target, started from the seal, still ran it (two writers).
    let mut h = Harness::with(Thresholds { dwell_ms: 0, hold_ms: 0, ..Thresholds::default() });
    let (bubble, epoch) = handover_at_its_freeze(&mut h);
    let persisted = h.log.iter().position(|e| {
        matches!(e, Effect::Persist(Record::Handover { bubble: b, epoch: e, site })
            if *b == bubble.0 && *e == epoch + 1 && site == "PAR")
    });
    let freeze = h
        .log
        .iter()
        .position(|e| matches!(e, Effect::Send { request: control::Request::Freeze { .. }, .. }));
    assert!(persisted.is_some() && persisted < freeze, "the target's epoch is stored first");
    let mut h2 = restarted_at_the_freeze(&h);
    // The sealed source no longer holds it: nothing fails over while the target may run it.
    let servers = vec![server("MTL-0", &[])];
    h2.request("MTL", register("MTL", servers, &[])).unwrap();
    assert!(!failed_over(&h2, bubble), "{:?}", h2.log);
    // The target started from the seal: it is the holder.
    let held = [LeaseRef { bubble, epoch: Epoch(epoch + 1) }];
    let again = register("PAR", vec![server("PAR-0", &[bubble])], &held);
    let control::Reply::Registered { keep, stop, .. } = h2.request("PAR", again).unwrap() else {
        panic!()
    };
    assert_eq!((keep.len(), stop.len()), (1, 0));
    assert_eq!((keep[0].bubble, keep[0].epoch.0), (bubble, epoch + 1));
    let renew = control::Request::Renew { leases: vec![held[0]] };
    let control::Reply::Renewed { granted, .. } = h2.request("PAR", renew).unwrap() else {
        panic!()
    };
    assert_eq!(granted, held);
    assert!(!failed_over(&h2, bubble));
    // Stored as its lease now.
    assert_eq!(h2.stored.leases[&bubble.0].epoch, epoch + 1);
    assert!(h2.stored.handovers.is_empty());
}

/// A handover MTL → PAR at its freeze, the core restarted, and the target registered
/// without the bubble (the seal never reached it).
fn restarted_and_the_target_without_it() -> (Harness, BubbleId, u64) {
    let mut h = Harness::with(Thresholds { dwell_ms: 0, hold_ms: 0, ..Thresholds::default() });
    let (bubble, epoch) = handover_at_its_freeze(&mut h);
    let mut h2 = restarted_at_the_freeze(&h);
    h2.request("PAR", register("PAR", vec![server("PAR-0", &[])], &[])).unwrap();
    assert!(!failed_over(&h2, bubble), "the source may still run it");
    (h2, bubble, epoch)
}

#[test]
fn a_core_restarted_after_sending_a_freeze_its_source_never_got_gives_the_bubble_back_to_it() {
    let (mut h2, bubble, epoch) = restarted_and_the_target_without_it();
    // The source still runs it under its old epoch: kept, then re-granted under a new one.
    let held = [LeaseRef { bubble, epoch: Epoch(epoch) }];
    let again = register("MTL", vec![server("MTL-0", &[bubble])], &held);
    let control::Reply::Registered { keep, stop, .. } = h2.request("MTL", again).unwrap() else {
        panic!()
    };
    assert_eq!((keep.len(), stop.len()), (1, 0));
    let regrant = h2.sent().into_iter().find_map(|(s, _, r)| match r {
        control::Request::Regrant { old, lease } if s == "MTL" => Some((old, lease)),
        _ => None,
    });
    let (old, lease) = regrant.expect("a regrant to the source");
    assert_eq!(old, held[0]);
    assert!(lease.epoch.0 > epoch + 1, "the target's epoch is fenced off");
    assert!(!failed_over(&h2, bubble));
    let holder = h2.core.registry[&bubble].site();
    assert_eq!(h2.core.cfg.sites.name(holder).to_string(), "MTL");
}

#[test]
fn a_core_restarted_mid_freeze_fails_the_bubble_over_once_neither_end_holds_it() {
    let (mut h2, bubble, _) = restarted_and_the_target_without_it();
    h2.request("MTL", register("MTL", vec![server("MTL-0", &[])], &[])).unwrap();
    assert!(failed_over(&h2, bubble), "neither runs it: restored from its copy");
}

#[test]
fn a_restore_left_unanswered_is_held_by_its_site_not_failed_over_at_once() {
    let mut h = Harness::new();
    let (bubble, _) = montrealer_in_a_bubble(&mut h);
    let lost = control::Request::Lost {
        leases: vec![h.core.registry[&bubble].lease_ref(bubble)],
        reason: "server_lost".into(),
    };
    h.request("MTL", lost).unwrap();
    h.core.handle(Input::BackupRead { bubble, copy: None }, h.now);
    h.drain(|_| {});
    let (site, order) = h
        .sent()
        .into_iter()
        .find_map(|(s, o, r)| matches!(r, control::Request::Restore { .. }).then_some((s, o)))
        .expect("a restore");
    h.log.clear();
    let result = Err(Failure::Gone("connection lost".into()));
    h.core.handle(Input::OrderDone { order, result }, h.now);
    h.drain(|_| {});
    assert!(!failed_over(&h, bubble), "its site may run it under the restore's lease");
    assert_eq!(h.hosted(1).1, site);
    assert!(!h.core.registry[&bubble].restoring());
}

#[test]
fn requests_from_a_replaced_connection_are_refused() {
    let mut h = Harness::new();
    let mtl = h.site("MTL");
    let old = h.conn("MTL");
    h.core.handle(Input::AgentConnected { site: mtl, conn: old + 1000 }, h.now);
    let renew = control::Request::Renew { leases: Vec::new() };
    h.core.handle(Input::AgentRequest { site: mtl, conn: old, token: 7, request: renew }, h.now);
    let mut reply = None;
    h.drain(|e| {
        if let Effect::Reply { token: 7, reply: r } = e {
            reply = Some(r.clone());
        }
    });
    assert!(reply.unwrap().is_err());
}

#[test]
fn a_restarted_core_takes_back_what_its_store_held_and_the_relay_keeps_playing() {
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    // What the first core persisted, folded as the store would.
    let mut state = StoreState { next_player: 1_000, ..StoreState::default() };
    for e in &h.log {
        if let Effect::Persist(Record::Lease { bubble, epoch, site, region }) = e {
            let lease =
                crate::store::StoredLease { epoch: *epoch, site: site.clone(), region: *region };
            state.leases.insert(*bubble, lease);
        }
    }
    state
        .leases
        .insert(99, crate::store::StoredLease { epoch: 3, site: "MTL".into(), region: None });
    let cfg = h.core.cfg.clone();
    let mut core = CoreMachine::new(cfg, 2, &state, Time::ZERO).unwrap();
    assert_eq!(core.registry.len(), 2, "taken back; the lease without a region is not");
    // The world's zone comes back as a zone, under its id and epoch (the layout persists).
    let zones: Vec<_> = core.mesh.zones().map(|z| (z.id, z.epoch.0)).collect();
    let [(zone, zone_epoch)] = zones[..] else { panic!("{zones:?}") };
    assert_eq!(core.registry[&zone].epoch(), zone_epoch);
    assert!(core.mesh.bubble_by_id(zone).is_none());
    assert!(matches!(core.poll_effect(), Some(Effect::Persist(Record::Gone { bubble: 99 }))));
    let mut h2 = Harness::around(core, Time::ZERO);
    let mtl = h2.site("MTL");
    h2.core.handle(Input::AgentConnected { site: mtl, conn: 7 }, h2.now);
    let held = [LeaseRef { bubble, epoch: Epoch(epoch) }];
    let again = register("MTL", vec![server("MTL-0", &[bubble])], &held);
    let control::Reply::Registered { keep, stop, generation, .. } =
        h2.request("MTL", again).unwrap()
    else {
        panic!()
    };
    assert_eq!((generation, stop.len()), (2, 0));
    assert_eq!(
        keep.iter().map(|l| (l.bubble, l.epoch.0)).collect::<Vec<_>>(),
        vec![(bubble, epoch)]
    );
    // The agent says who plays where; the player lands back in the same bubble.
    let players = vec![control::PlacedPlayer { sample: sample(1, 0.0), bubble: Some(bubble) }];
    h2.request("MTL", control::Request::Players { players }).unwrap();
    // Its holder is told it is a member (seed 56 with overlapping faults: a holder that
    // restored the bubble from a copy while the core was down never heard of its players).
    let told = h2.sent().into_iter().any(|(site, _, r)| {
        site == "MTL"
            && matches!(&r, control::Request::Members { lease, players, .. }
                if lease.bubble == bubble && players.iter().any(|m| m.player == PlayerId(1)))
    });
    assert!(told, "the holder is sent its members");
    let renew = control::Request::Renew { leases: vec![LeaseRef { bubble, epoch: Epoch(epoch) }] };
    let control::Reply::Renewed { granted, .. } = h2.request("MTL", renew).unwrap() else {
        panic!()
    };
    assert_eq!(granted.len(), 1, "the old generation's lease renews");
    h2.run_until(6_000);
    assert_eq!(h2.hosted(1), (bubble, "MTL".to_owned(), epoch), "same bubble, site, epoch");
    assert!(
        !h2.log
            .iter()
            .any(|e| matches!(e, Effect::Send { request: control::Request::Create { .. }, .. })),
        "no new bubble for the returning player"
    );
}

#[test]
fn a_bubble_taken_back_into_the_relay_stage_waits_for_its_players_then_hands_them_to_a_zone_with_their_state()
 {
    // The sandbox test `a_core_restarted_into_the_relay_stage…` lost a player's state once in
    // five runs: the restarted core's first tick ended the bubble it took back, empty until its
    // players' agent said who plays in it, and the player then joined the zone afresh.
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    let mut state = h.stored.clone();
    state.next_player = state.next_player.max(1_000);
    let mut cfg = h.core.cfg.clone();
    cfg.stage = crate::Stage::Relay;
    let core = CoreMachine::new(cfg, 2, &state, h.now).unwrap();
    let mut h2 = Harness::around(core, h.now);
    h2.drain(|_| {});
    for site in ["PAR", "MTL"] {
        let id = h2.site(site);
        h2.core.handle(Input::AgentConnected { site: id, conn: 500 + id.index() as u64 }, h2.now);
    }
    let zones: Vec<LeaseRef> = h2
        .core
        .registry
        .iter()
        .filter(|(b, _)| b.is_zone())
        .map(|(&b, r)| r.lease_ref(b))
        .collect();
    let on_par: Vec<BubbleId> = zones.iter().map(|l| l.bubble).collect();
    h2.request("PAR", register("PAR", vec![server("PAR-0", &on_par)], &zones)).unwrap();
    let held = [LeaseRef { bubble, epoch: Epoch(epoch) }];
    h2.request("MTL", register("MTL", vec![server("MTL-0", &[bubble])], &held)).unwrap();
    // The brain ticks before MTL's agent says who plays where: the relay stage ends the bubble.
    h2.log.clear();
    h2.run_until(h2.now.as_ms() + 5_000);
    let revoked = |h: &Harness| {
        h.sent().into_iter().any(|(site, _, r)| {
            site == "MTL"
                && matches!(&r, control::Request::Revoke { leases } if leases.iter().any(|l| l.bubble == bubble))
        })
    };
    assert!(!revoked(&h2), "not revoked while its players are unknown: {:?}", h2.sent());
    let players = vec![control::PlacedPlayer { sample: sample(1, 0.0), bubble: Some(bubble) }];
    h2.request("MTL", control::Request::Players { players }).unwrap();
    h2.run_until(h2.now.as_ms() + 5_000);
    let joined: Vec<bool> = h2
        .sent()
        .into_iter()
        .filter_map(|(site, _, r)| match r {
            control::Request::Members { lease, players, .. }
                if site == "PAR" && lease.bubble.is_zone() =>
            {
                players.iter().find(|m| m.player == PlayerId(1)).map(|m| m.crossing)
            }
            _ => None,
        })
        .collect();
    assert_eq!(joined, [true], "the zone takes the player with the state its bubble sends");
}

#[test]
fn player_ids_are_handed_out_in_blocks_never_twice_across_restarts() {
    let mut h = Harness::new();
    let ids = |h: &mut Harness, site: &str, count: u32| match h
        .request(site, control::Request::PlayerIds { count })
        .unwrap()
    {
        control::Reply::PlayerIds { first, count } => first..first + u64::from(count),
        other => panic!("{other:?}"),
    };
    let a = ids(&mut h, "MTL", 100);
    let b = ids(&mut h, "HKG", 100);
    assert_eq!((a.start, a.end, b.start), (1_000, 1_100, 1_100), "{a:?} {b:?}");
    assert_eq!(ids(&mut h, "PAR", 0).count(), 1, "at least one");
    assert_eq!(ids(&mut h, "PAR", u32::MAX).count() as u32, MAX_ID_BLOCK, "at most a block");
    // Persisted before the reply: a restarted core continues after the last block.
    let mut state = StoreState::default();
    for e in &h.log {
        if let Effect::Persist(Record::PlayerIds { next }) = e {
            state.next_player = state.next_player.max(*next);
        }
    }
    let persisted_before_reply =
        h.log.iter().position(|e| matches!(e, Effect::Persist(Record::PlayerIds { .. })))
            < h.log.iter().position(|e| {
                matches!(e, Effect::Reply { reply: Ok(control::Reply::PlayerIds { .. }), .. })
            });
    assert!(persisted_before_reply);
    let cfg = h.core.cfg.clone();
    let core = CoreMachine::new(cfg, 2, &state, Time::ZERO).unwrap();
    let mut h2 = Harness::around(core, Time::ZERO);
    h2.connect("MTL");
    let c = ids(&mut h2, "MTL", 10);
    assert_eq!(c.start, 1_201 + u64::from(MAX_ID_BLOCK), "after every id given before");
}

#[test]
fn a_bubble_ended_while_its_holder_is_away_is_drained_from_its_copy_once_nobody_writes_it() {
    let mut h = Harness::new();
    let (old, epoch) = montrealer_in_a_bubble(&mut h);
    // Its last renewal: nobody writes it after this plus the lease and the drift margin.
    let quiet = h.now.as_ms() + TTL_MS + MARGIN_MS;
    copy(&mut h, "MTL", old, epoch, 40, 7);
    for p in 2..5 {
        h.join("PAR", p, 10_000.0 + p as f64);
    }
    h.run_until(h.now.as_ms() + 5_000);
    let (paris, site, _) = h.hosted(2);
    assert_eq!(site, "PAR");
    h.ack_all("PAR");
    // MTL's agent restarts: connected again, not registered yet, its old servers gone. Its
    // player walks over to the Parisian: the brain ends MTL's bubble, whose holder never hears.
    let mtl = h.site("MTL");
    let conn = 4242;
    h.core.handle(Input::AgentConnected { site: mtl, conn }, h.now);
    let walked = horizon_mesh::PlayerUpdate {
        position: Some(Vec3 { x: 10_000.0, y: 0.0, z: 0.0 }),
        ..Default::default()
    };
    h.core.mesh.handle_update(PlayerId(1), &walked).unwrap();
    h.log.clear();
    h.run_until(quiet - 1);
    assert_eq!(h.hosted(1).0, paris, "the Montrealer plays with the Parisian now");
    assert!(!h.core.registry.contains(&old), "the brain ended the bubble");
    assert!(
        !h.log.iter().any(|e| matches!(e, Effect::ReadBackup { .. })),
        "not drained while its holder may still write it"
    );
    h.run_until(quiet);
    assert!(h.log.contains(&Effect::ReadBackup { bubble: old }), "drained once quiet");
    h.log.clear();
    let stored = StoredCopy { epoch, tick: 40, bytes: vec![40; 8], parts: Vec::new() };
    h.core.handle(Input::BackupRead { bubble: old, copy: Some(stored) }, h.now);
    h.drain(|_| {});
    let sent = h.sent();
    let (_, order, restore) = sent.iter().find(|(s, ..)| s == "PAR").expect("restored at PAR");
    let control::Request::Restore { lease, from, .. } = restore else { panic!("{restore:?}") };
    assert!(lease.epoch.0 > epoch, "a newer epoch fences the old holder off");
    assert_eq!(from.0, epoch);
    let (order, drained) = (*order, lease.epoch);
    h.log.clear();
    h.core.handle(Input::OrderDone { order, result: Ok(control::Reply::Done) }, h.now);
    h.drain(|_| {});
    let sent: Vec<control::Request> = h.sent().into_iter().map(|(_, _, r)| r).collect();
    let [
        control::Request::Members { lease: m, players, departed },
        control::Request::Revoke { leases },
    ] = &sent[..]
    else {
        panic!("{sent:?}")
    };
    assert_eq!((m.bubble, m.epoch), (old, drained));
    assert!(players.is_empty());
    assert_eq!(departed.len(), 1);
    assert_eq!((departed[0].player, departed[0].to.bubble), (PlayerId(1), paris));
    assert_eq!(leases, &vec![LeaseRef { bubble: old, epoch: drained }]);
    assert_eq!(h.core.stats.drains.get(h.site("PAR").index()), 1);
}

/// Seed 9010789: the brain ends a bubble as its player walks away, and its holder hears, but
/// the server dies before letting the player go: its `Lost` comes for a bubble that has ended.
/// The bubble's copy is drained at once (its server is gone: nobody writes it).
#[test]
fn an_ended_bubble_whose_server_is_lost_is_drained_at_once() {
    let mut h = Harness::new();
    let (old, epoch) = montrealer_in_a_bubble(&mut h);
    copy(&mut h, "MTL", old, epoch, 40, 7);
    for p in 2..5 {
        h.join("PAR", p, 10_000.0 + p as f64);
    }
    h.run_until(h.now.as_ms() + 5_000);
    h.settle();
    h.moved(1, 10_000.0);
    for _ in 0..3 {
        h.run_until(h.now.as_ms() + 5_000);
        h.settle();
    }
    assert!(!h.core.registry.contains(&old), "the brain ended the bubble, its holder heard");
    assert!(!h.log.iter().any(|e| matches!(e, Effect::ReadBackup { .. })), "no drain yet");
    let lost = control::Request::Lost {
        leases: vec![LeaseRef { bubble: old, epoch: Epoch(epoch) }],
        reason: "server exited".into(),
    };
    h.request("MTL", lost).unwrap();
    assert!(h.log.contains(&Effect::ReadBackup { bubble: old }), "drained at once");
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

    /// `player`, of `home`, is now at `x` (the home agent's report).
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

fn refused(h: &Harness, site: &str, reason: &str) -> u64 {
    h.core.stats.refused_count(h.site(site), reason)
}

#[test]
fn a_site_speaks_only_for_its_own_players() {
    let mut h = Harness::new();
    montrealer_in_a_bubble(&mut h);
    // PAR claims MTL's player is on the other side of the world and has them leave; the rest
    // of its report goes on.
    h.report("PAR", Vec::new(), vec![sample(1, 9e6)], vec![PlayerId(1)]);
    let p = h.core.mesh.player(horizon_mesh::PlayerId(1)).expect("still there");
    assert_eq!(p.position.x, 0.0, "not moved by another site");
    assert_eq!(refused(&h, "PAR", "not_its_player"), 2);
    // Its home's samples give its RTT and role, never a place: what a client claims is never read.
    h.report("MTL", Vec::new(), vec![sample(1, 9e6)], Vec::new());
    assert_eq!(h.core.mesh.player(horizon_mesh::PlayerId(1)).unwrap().position.x, 0.0);
    // Positions come from the site holding the player's region, under its epoch in force.
    let (region, holder, epoch) = h.hosted(1);
    let other = if holder == "PAR" { "HKG" } else { "PAR" };
    h.request(other, positions(region, epoch, &[(1, 7.0)])).unwrap();
    h.request(&holder, positions(region, epoch + 1, &[(1, 7.0)])).unwrap();
    assert_eq!(h.core.mesh.player(horizon_mesh::PlayerId(1)).unwrap().position.x, 0.0);
    assert_eq!(refused(&h, other, "positions_not_its_region"), 1);
    assert_eq!(refused(&h, &holder, "positions_not_its_region"), 1, "another epoch");
    h.moved(1, 5.0);
    let p = h.core.mesh.player(horizon_mesh::PlayerId(1)).expect("still there");
    assert_eq!(p.position.x, 5.0);
    assert_eq!(refused(&h, "MTL", "not_its_player"), 0);
}

#[test]
fn a_site_joins_only_player_ids_handed_to_it() {
    let mut h = Harness::new();
    let control::Reply::PlayerIds { first, .. } =
        h.request("MTL", control::Request::PlayerIds { count: 10 }).unwrap()
    else {
        panic!("a block of ids");
    };
    assert!(first >= 1_000, "never one handed out before");
    // PAR claims an id of MTL's block (and one never handed out): refused.
    h.join("PAR", first, 0.0);
    h.join("PAR", first + 1_000_000, 0.0);
    assert!(h.core.mesh.player(horizon_mesh::PlayerId(first)).is_none());
    assert!(h.core.mesh.player(horizon_mesh::PlayerId(first + 1_000_000)).is_none());
    assert_eq!(refused(&h, "PAR", "player_id_not_its_own"), 2);
    // MTL joins it.
    h.join("MTL", first, 0.0);
    let p = h.core.mesh.player(horizon_mesh::PlayerId(first)).expect("joined");
    assert_eq!(p.home, h.site("MTL"));
}

#[test]
fn a_site_cannot_fail_a_handover_it_takes_no_part_in() {
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    let id = HandoverId(77);
    let ho = handover::Handover {
        id,
        bubble,
        from: h.site("MTL"),
        to: h.site("PAR"),
        epoch: epoch + 1,
        started: h.now,
        phase: HandoverPhase::PreparingTarget,
        given_up: false,
    };
    h.core.handovers.insert(id, ho);
    let failed = || control::Request::Failed { handover: id, reason: "no".into() };
    let err = h.request("HKG", failed()).expect_err("HKG is neither source nor target");
    assert_eq!(err.code, ErrorCode::Unauthorized, "{err:?}");
    assert!(h.core.handovers.contains_key(&id), "the handover goes on");
    assert_eq!(refused(&h, "HKG", "handover_not_its_own"), 1);
    // Its target may give it up.
    assert_eq!(h.request("PAR", failed()).unwrap(), control::Reply::Done);
    assert!(!h.core.handovers.contains_key(&id));
}

#[test]
fn a_sites_pool_bounds_are_on_the_status_and_impossible_ones_are_refused() {
    let mut h = Harness::new();
    let page = horizon_admin::Page { after: None, limit: 10, private: false };
    assert_eq!(h.core.status(h.now, page).site("MTL").unwrap().pool, None, "not said yet");
    h.request("MTL", control::Request::Pool { warm: 2, max: 64 }).unwrap();
    let said = h.core.status(h.now, page).site("MTL").unwrap().pool;
    assert_eq!(said, Some(crate::status::PoolBounds { warm: 2, max: 64 }));
    for (warm, max) in [(3, 2), (0, 0)] {
        let refused = h.request("MTL", control::Request::Pool { warm, max }).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Malformed);
    }
    assert_eq!(h.core.status(h.now, page).site("MTL").unwrap().pool, said, "kept");
}

#[test]
fn the_status_names_no_player_to_an_unauthenticated_reader() {
    let mut h = Harness::new();
    montrealer_in_a_bubble(&mut h);
    let private = horizon_admin::Page { after: None, limit: 100, private: true };
    let doc = h.core.status(h.now, private);
    assert_eq!(doc.players.len(), 1);
    assert_eq!(doc.groups[0].players, [1]);
    let public = horizon_admin::Page { private: false, ..private };
    let doc = h.core.status(h.now, public);
    assert!(doc.players.is_empty() && doc.groups[0].players.is_empty(), "no id, no position");
    assert_eq!(doc.players_total, 1, "but how many");
    assert_eq!(doc.groups[0].homes.get("MTL"), Some(&1));
}

mod carve;
mod crossings;
mod positions;
mod rehome;

#[test]
fn a_player_alone_at_their_spawn_gets_a_bubble_when_the_join_is_reported_not_at_the_tick() {
    let mut h = Harness::new();
    // No tick runs here: only the report.
    h.join("MTL", 1, 0.0);
    let (bubble, site, _) = h.hosted(1);
    assert_eq!(site, "MTL");
    let created = h.sent().into_iter().any(|(s, _, r)| {
        s == "MTL" && matches!(r, control::Request::Create { bubble: b, .. } if b == bubble)
    });
    assert!(created, "{:?}", h.sent());
}

#[test]
fn the_status_and_metrics_show_the_zone_a_worlds_first_player_opens() {
    let mut h = Harness::new();
    let public = horizon_admin::Page { after: None, limit: 100, private: false };
    assert!(h.core.status(h.now, public).zones.is_empty());
    montrealer_in_a_bubble(&mut h);
    let doc = h.core.status(h.now, public);
    let [zone] = &doc.zones[..] else { panic!("one zone: {:?}", doc.zones) };
    assert!(zone.zone >= horizon_mesh::ZONE_IDS_FROM);
    assert_eq!(zone.players, 0, "the Montrealer plays in a bubble");
    assert!(
        doc.recent_decisions.iter().any(|d| d["command"] == "zone_create" && d["site"] == "PAR"),
        "{:?}",
        doc.recent_decisions
    );
    let text = metrics_text(&mut h.core);
    for line in [
        "horizon_core_zones 1",
        "horizon_core_zone_changes_total{change=\"split\"} 0",
        "horizon_core_zone_changes_total{change=\"merge\"} 0",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

/// The site and id of the first bubble (not zone) the core created since the log was cleared.
fn created_bubble(h: &Harness) -> (String, BubbleId) {
    h.sent()
        .into_iter()
        .find_map(|(s, _, r)| match r {
            control::Request::Create { bubble, .. } if !bubble.is_zone() => Some((s, bubble)),
            _ => None,
        })
        .expect("a bubble for the group")
}

/// The players `site` was told left `region`, in every `Members` since the log was cleared.
fn departed_from(h: &Harness, site: &str, region: BubbleId) -> Vec<u64> {
    h.sent()
        .into_iter()
        .filter_map(|(s, _, r)| match r {
            control::Request::Members { lease, departed, .. }
                if s == site && lease.bubble == region =>
            {
                Some(departed.into_iter().map(|d| d.player.0).collect::<Vec<_>>())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn players_joining_together_play_in_their_zone_at_once_then_cross_into_their_bubble_at_the_tick() {
    let mut h = Harness::new();
    // Two Montrealers spawn 50 m apart in one report: grouping decides at the tick.
    h.report("MTL", vec![sample(1, 0.0), sample(2, 50.0)], Vec::new(), Vec::new());
    let (zone, site, _) = h.hosted(1);
    assert_eq!((zone.is_zone(), site.as_str()), (true, "PAR"));
    assert_eq!(h.hosted(2).0, zone, "both in the world's zone, on the core site");
    let created = h.sent().into_iter().any(|(s, _, r)| {
        s == "PAR" && matches!(r, control::Request::Create { bubble, .. } if bubble == zone)
    });
    assert!(created, "the zone runs on a core-site server: {:?}", h.sent());
    assert_eq!(h.routes_to("MTL", 1), [("route", zone)], "its home gateway routes it there");
    let public = horizon_admin::Page { after: None, limit: 10, private: false };
    assert_eq!(h.core.status(h.now, public).zones[0].members, 2);
    h.core.refresh_gauges();
    assert!(
        metrics_text(&mut h.core).contains("horizon_core_players_unsimulated{home_site=\"MTL\"} 0")
    );
    // The tick gives the group a bubble; the zone simulates them until it runs...
    h.log.clear();
    h.run_until(5_000);
    let (site, bubble) = created_bubble(&h);
    assert_eq!(h.hosted(1).0, zone, "in the zone while their bubble starts");
    assert!(h.sent().iter().all(|(_, _, r)| !matches!(r, control::Request::Members { .. })));
    // ... then both leave the zone with their state.
    h.ack_all(&site);
    assert_eq!(h.hosted(1).0, bubble);
    let departed = departed_from(&h, "PAR", zone);
    assert_eq!(departed, [1, 2], "the zone's server hands both states on");
}

#[test]
fn an_npc_is_simulated_by_its_zone_then_by_the_bubble_that_takes_its_space_and_counts_for_neither()
{
    let mut h = Harness::new();
    let npc = control::PlayerSample { role: Role::Npc, ..sample(3, 20.0) };
    h.report("MTL", vec![sample(1, 0.0), sample(2, 50.0), npc], Vec::new(), Vec::new());
    let (zone, site, _) = h.hosted(3);
    assert_eq!((zone.is_zone(), site.as_str()), (true, "PAR"), "in the zone, as the players");
    assert_eq!(h.routes_to("MTL", 3), [("route", zone)], "its gateway routes it there");
    h.core.refresh_gauges();
    assert!(
        metrics_text(&mut h.core).contains("horizon_core_players_unsimulated{home_site=\"MTL\"} 0")
    );
    // The players' bubble takes the space the NPC stands in: the NPC crosses with them.
    h.log.clear();
    h.run_until(5_000);
    let (site, bubble) = created_bubble(&h);
    h.ack_all(&site);
    assert_eq!(h.hosted(3).0, bubble);
    let departed = departed_from(&h, "PAR", zone);
    assert_eq!(departed, [1, 2, 3], "the zone's server hands the NPC's state on too");
    // It weighs nothing: the bubble is placed and counted for its two players alone.
    assert_eq!(h.core.mesh.bubble_by_id(bubble).map(|b| b.players), Some(2));
}

#[test]
fn configured_zones_open_at_the_first_start_and_a_restart_takes_back_the_stored_layout_instead() {
    let b = |x0: f64, x1: f64| horizon_proto::Aabb {
        min: Vec3 { x: x0, y: -1e3, z: -1e3 },
        max: Vec3 { x: x1, y: 1e3, z: 1e3 },
    };
    let zones = vec![
        horizon_mesh::ZoneSpec { world: WorldId(1), bounds: b(0.0, 1e3) },
        horizon_mesh::ZoneSpec { world: WorldId(1), bounds: b(1e3, 2e3) },
    ];
    let cfg = MachineConfig {
        sites: sites(),
        thresholds: Thresholds::default(),
        zones,
        stage: crate::Stage::Dynamic,
        delegations: Vec::new(),
    };
    let store = StoreState { next_player: 1_000, ..StoreState::default() };
    let mut core = CoreMachine::new(cfg.clone(), 1, &store, Time::ZERO).unwrap();
    core.carry_out_commands(Time::ZERO);
    let mut state = StoreState { next_player: 1_000, ..StoreState::default() };
    while let Some(e) = core.poll_effect() {
        if let Effect::Persist(Record::Lease { bubble, epoch, site, region }) = e {
            let lease = crate::store::StoredLease { epoch, site, region };
            state.leases.insert(bubble, lease);
        }
    }
    assert_eq!(state.leases.len(), 2, "both zones leased and persisted");
    // Restarted with the same configuration: the stored zones, not two more.
    let again = CoreMachine::new(cfg, 2, &state, Time::ZERO).unwrap();
    let ids: Vec<u64> = again.mesh.zones().map(|z| z.id.0).collect();
    assert_eq!(ids, state.leases.keys().copied().collect::<Vec<_>>());
}

#[test]
fn a_zone_whose_lease_runs_out_is_restored_on_another_server_of_the_core_site() {
    let mut h = Harness::new();
    // Two Montrealers joining together play in the world's zone until the tick.
    h.report("MTL", vec![sample(1, 0.0), sample(2, 50.0)], Vec::new(), Vec::new());
    let (zone, _, epoch) = h.hosted(1);
    assert!(zone.is_zone());
    // The core site's agent goes silent: nobody renews the zone's lease.
    let (par, conn) = (h.site("PAR"), h.conn("PAR"));
    h.core.handle(Input::AgentDisconnected { site: par, conn }, h.now);
    h.log.clear();
    h.run_until(TTL_MS + MARGIN_MS + 1_000);
    let read = h.log.iter().any(|e| matches!(e, Effect::ReadBackup { bubble } if *bubble == zone));
    assert!(read, "restored from its copy: {:?}", h.log);
    let reg = &h.core.registry[&zone];
    assert_eq!((reg.site(), reg.restoring()), (par, true), "on the core site, being restored");
    assert!(reg.epoch() > epoch, "under a new epoch that fences the old server off");
    let z = h.core.mesh.zone_by_id(zone).unwrap();
    assert_eq!((z.epoch.0, z.stalled_since), (reg.epoch(), None));
}

/// `site`'s agent reports its transfer links (`None`: down).
fn links_report(h: &mut Harness, site: &str, links: &[(&str, Option<f32>)]) {
    let backbone = links
        .iter()
        .map(|&(to, rtt_ms)| control::BackboneSample {
            site: Name::new(to).unwrap(),
            rtt_ms,
            loss: 0.0,
        })
        .collect();
    let servers = (0..3).map(|i| server(&format!("{site}-{i}"), &[])).collect();
    let report = control::Request::Report {
        joins: Vec::new(),
        leaves: Vec::new(),
        players: Vec::new(),
        backbone,
        servers,
    };
    assert_eq!(h.request(site, report).unwrap(), control::Reply::Done);
}

/// The `Links` orders sent since the log was cleared: (to, the PAR–MTL link's round trip).
fn links_sent(h: &Harness) -> Vec<(String, Option<Option<f32>>)> {
    h.sent()
        .into_iter()
        .filter_map(|(site, _, request)| match request {
            control::Request::Links { links } => {
                let par_mtl = links
                    .iter()
                    .find(|l| [l.a.as_str(), l.b.as_str()] == ["PAR", "MTL"])
                    .map(|l| l.rtt_ms);
                Some((site, par_mtl))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_link_reported_down_is_told_to_every_agent_and_the_status_shows_the_route_round_it() {
    let mut h = Harness::new();
    links_report(&mut h, "PAR", &[("MTL", Some(85.0)), ("HKG", Some(160.0))]);
    links_report(&mut h, "MTL", &[("PAR", Some(88.0)), ("HKG", Some(190.0))]);
    links_report(&mut h, "HKG", &[("PAR", Some(160.0)), ("MTL", Some(190.0))]);
    let status = h.core.status(h.now, horizon_admin::Page::default());
    assert_eq!(status.links.len(), 3);
    assert!(status.routes.is_empty(), "every link direct: {:?}", status.routes);
    h.log.clear();
    // The same figures again: nobody is told anything.
    links_report(&mut h, "MTL", &[("PAR", Some(90.0)), ("HKG", Some(190.0))]);
    assert_eq!(links_sent(&h), []);
    // MTL's link to PAR goes silent: every agent is told, PAR and MTL go round through HKG.
    links_report(&mut h, "MTL", &[("PAR", None), ("HKG", Some(190.0))]);
    let told = links_sent(&h);
    let to: BTreeSet<&str> = told.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(to, BTreeSet::from(["PAR", "MTL", "HKG"]));
    assert!(told.iter().all(|(_, par_mtl)| *par_mtl == Some(None)), "{told:?}");
    let status = h.core.status(h.now, horizon_admin::Page::default());
    let routes: Vec<(String, String, String)> =
        status.routes.iter().map(|r| (r.from.clone(), r.to.clone(), r.via.clone())).collect();
    assert_eq!(
        routes,
        [("MTL".into(), "PAR".into(), "HKG".into()), ("PAR".into(), "MTL".into(), "HKG".into())]
    );
    // A new agent connection is told the table at its registration.
    h.log.clear();
    h.connect("HKG");
    assert_eq!(links_sent(&h), [("HKG".to_owned(), Some(None))]);
}

/// The exposition text `/metrics` would serve for `core` (its gauges refreshed first, as the
/// shell does after a tick).
fn metrics_text(core: &mut CoreMachine) -> String {
    core.refresh_gauges();
    let metrics = crate::metrics::Metrics::new(&core.cfg.sites, core.stats(), &Default::default());
    horizon_admin::render(&metrics.registry)
}
