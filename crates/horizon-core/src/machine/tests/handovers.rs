//! Handovers seen from the core: a freeze never started, a regrant lost with its
//! connection, and how the status tells them.

use super::*;

#[test]
fn a_handover_frozen_but_never_started_is_given_up_and_its_target_lease_refused() {
    let mut h =
        Harness::with_core(Thresholds { dwell_ms: 0, hold_ms: 0, ..Thresholds::default() }, "HKG");
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
    let mut h =
        Harness::with_core(Thresholds { dwell_ms: 0, hold_ms: 0, ..Thresholds::default() }, "HKG");
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

/// A Montrealer's bubble (the core at HKG) that the brain moves to PAR as MTL's connection
/// dies: the handover needs both agents, so it is given up at once, and the `Regrant` back to
/// MTL under a new epoch is dropped. MTL's agent connects again (not registered yet); the log
/// is cleared. Returns the bubble, the lease MTL still holds, and the harness.
fn regrant_lost_with_mtls_connection() -> (Harness, BubbleId, LeaseRef) {
    let mut h =
        Harness::with_core(Thresholds { dwell_ms: 0, hold_ms: 0, ..Thresholds::default() }, "HKG");
    let (bubble, _) = montrealer_in_a_bubble(&mut h);
    for p in 2..5 {
        h.join("PAR", p, 1.0 + p as f64);
    }
    let old = h.core.registry[&bubble].lease_ref(bubble);
    let mtl = h.site("MTL");
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
    (h, bubble, old)
}

#[test]
fn a_source_whose_regrant_was_lost_with_its_connection_fails_over_when_it_registers_again() {
    // Seed 1883: a handover MTL → PAR was given up before its freeze while the core could not
    // reach MTL, so its `Regrant` (the bubble back to MTL under a new epoch) was dropped. MTL
    // came back holding the old epoch: it was told to stop the bubble, while the core counted
    // it as held (a regrant "on its way") and waited for the lease to run out: its players
    // saw nothing for a minute. Chaos seed 1411 (`--drains --overlapping`, I2): told to stop
    // at the registration, MTL's server ticked once more under the old epoch beside the
    // bubble restored elsewhere. It is revoked on the ordered lane, and fails over as soon as
    // MTL answered (its servers let go), not at the lease's end.
    let (mut h, bubble, old) = regrant_lost_with_mtls_connection();
    let again = register("MTL", vec![server("MTL-0", &[bubble])], &[old]);
    let control::Reply::Registered { keep, stop, .. } = h.request("MTL", again).unwrap() else {
        panic!()
    };
    assert!(keep.is_empty() && stop.is_empty(), "revoked in order, not stopped at once");
    let revoked = h.sent().into_iter().any(|(s, _, r)| {
        s == "MTL" && matches!(&r, control::Request::Revoke { leases } if leases == &vec![old])
    });
    assert!(revoked, "the old epoch is revoked: {:?}", h.sent());
    assert!(!failed_over(&h, bubble), "not restored while MTL may still run it");
    h.ack_all("MTL");
    assert!(failed_over(&h, bubble), "restored once MTL stopped it: {:?}", h.log);
}

/// Chaos seed 201719 (I2): as above, but a player had left the bubble while MTL was away, so
/// MTL was told to hand their state on (`Members`, then `Revoke`) instead of stopping the
/// bubble at once; the bubble failed over all the same at the registration, and MTL's server,
/// its lease of the old epoch still running, ticked it beside the restored one. It fails over
/// once MTL has stopped it.
#[test]
fn a_source_whose_regrant_was_lost_hands_its_departures_on_and_fails_over_only_once_it_stopped() {
    let (mut h, bubble, old) = regrant_lost_with_mtls_connection();
    // A Parisian left the bubble while MTL was away: their state is only in MTL's server.
    let players = [PlayerId(2)].into_iter().collect();
    let departed = super::super::reconcile::Departed { site: h.site("MTL"), players };
    h.core.trails.entry(bubble).or_default().departed = Some(departed);
    let again = register("MTL", vec![server("MTL-0", &[bubble])], &[old]);
    let control::Reply::Registered { keep, stop, .. } = h.request("MTL", again).unwrap() else {
        panic!()
    };
    assert!(keep.is_empty() && stop.is_empty(), "handed on, not stopped at once");
    let revoked = h.sent().into_iter().any(|(s, _, r)| {
        s == "MTL" && matches!(&r, control::Request::Revoke { leases } if leases == &vec![old])
    });
    assert!(revoked, "the old epoch is revoked after the departures: {:?}", h.sent());
    assert!(!failed_over(&h, bubble), "not restored while MTL may still run it");
    h.ack_all("MTL");
    assert!(failed_over(&h, bubble), "restored once MTL stopped it: {:?}", h.log);
}
