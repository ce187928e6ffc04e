//! Bubbles that ended while their holder was away, drained from their copies.

use super::*;

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

/// A Montrealer who crossed into their MTL bubble from an HKG bubble (after its last copy)
/// walks to the Parisians; the brain ends the bubble, its holder hearing. Returns the bubble,
/// its epoch and where the Montrealer plays now; the log is cleared.
fn an_ended_bubble_with_an_arrival(h: &mut Harness) -> (BubbleId, u64, BubbleId) {
    let (old, epoch) = montrealer_in_a_bubble(h);
    for p in 2..5 {
        h.join("PAR", p, 10_000.0 + p as f64);
    }
    h.run_until(h.now.as_ms() + 5_000);
    h.settle();
    let hkg = h.site("HKG");
    let arrival = super::super::reconcile::Arrival { from: BubbleId(99), site: hkg };
    h.core.trails.entry(old).or_default().arrived.insert(PlayerId(1), arrival);
    h.moved(1, 10_000.0);
    for _ in 0..3 {
        h.run_until(h.now.as_ms() + 5_000);
        h.settle();
    }
    assert!(!h.core.registry.contains(&old), "the brain ended the bubble, its holder heard");
    let now_in = h.hosted(1).0;
    h.log.clear();
    (old, epoch, now_in)
}

/// Chaos seed 101501: as above, but the Montrealer had crossed into the bubble from another
/// site's bubble after its last copy, so no copy holds their state: the site they crossed in
/// from, which keeps that crossing a while, is told where they play now.
#[test]
fn an_ended_bubble_whose_server_is_lost_has_what_its_arrivals_crossed_in_with_sent_on() {
    let mut h = Harness::new();
    let (old, epoch, now_in) = an_ended_bubble_with_an_arrival(&mut h);
    let lost = control::Request::Lost {
        leases: vec![LeaseRef { bubble: old, epoch: Epoch(epoch) }],
        reason: "server exited".into(),
    };
    h.request("MTL", lost).unwrap();
    assert_eq!(h.routes_to("HKG", 1), [("recover", now_in)]);
}

/// Chaos `--standby --overlapping` seed 700267: as above, but the holder was cut from the core
/// when the server died, so its `Lost` never came: it registered again without the bubble. The
/// site the player crossed in from is told where they play now all the same.
#[test]
fn an_ended_bubble_its_holder_registers_without_has_what_its_arrivals_crossed_in_with_sent_on() {
    let mut h = Harness::new();
    let (_, _, now_in) = an_ended_bubble_with_an_arrival(&mut h);
    // Its holder comes back, its servers holding nothing: the server running it died meanwhile.
    h.connect("MTL");
    assert_eq!(h.routes_to("HKG", 1), [("recover", now_in)]);
}
