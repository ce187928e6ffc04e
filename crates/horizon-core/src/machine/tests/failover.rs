//! Failovers: a relay cut from the core, a lost server, a restore that fails or goes
//! unanswered, a zone whose lease runs out.

use super::*;

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

#[test]
fn a_restore_whose_only_site_has_no_agent_waits_for_it_instead_of_failing_over_for_ever() {
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    // PAR's agent is away (restarting), and neither MTL nor HKG has a server to spare: the
    // core site, always a candidate, is the only place the brain can put the bubble.
    let par = h.site("PAR");
    let conn = h.conn("PAR");
    h.core.handle(Input::AgentDisconnected { site: par, conn }, h.now);
    for site in ["MTL", "HKG"] {
        let id = h.site(site);
        h.core.mesh.handle_site_capacity(id, Some(0));
    }
    let lost = control::Request::Lost {
        leases: vec![LeaseRef { bubble, epoch: Epoch(epoch) }],
        reason: "server exited".into(),
    };
    h.request("MTL", lost).unwrap();
    assert_eq!(h.hosted(1).1, "PAR");
    // The restore cannot go out: the brain is asked once more, and picks PAR again...
    h.log.clear();
    h.core.handle(Input::BackupRead { bubble, copy: None }, h.now);
    h.drain(|_| {});
    assert!(h.log.contains(&Effect::ReadBackup { bubble }), "failed over again once");
    assert_eq!(h.hosted(1).1, "PAR");
    // ... and then the bubble waits for PAR's agent, instead of another failover at once,
    // and another, for ever (chaos: `--overlapping --seed 0`, a core spinning at one instant).
    h.log.clear();
    h.core.handle(Input::BackupRead { bubble, copy: None }, h.now);
    h.drain(|_| {});
    assert!(!h.log.iter().any(|e| matches!(e, Effect::ReadBackup { .. })), "{:?}", h.log);
    assert!(h.core.registry[&bubble].restoring());
    // PAR's agent registers again: the restore goes out to it.
    h.connect("PAR");
    h.drain(|_| {});
    assert!(h.log.contains(&Effect::ReadBackup { bubble }), "{:?}", h.log);
    h.log.clear();
    h.core.handle(Input::BackupRead { bubble, copy: None }, h.now);
    h.drain(|_| {});
    assert!(
        h.sent()
            .iter()
            .any(|(s, _, r)| s == "PAR" && matches!(r, control::Request::Restore { .. })),
        "{:?}",
        h.sent()
    );
}

/// An agent that restarted (holding nothing, knowing nobody) is told, in its registration's
/// answer, the players who entered at its gateway: where each plays and how far a stored
/// copy holds their inputs, so their clients resume them there. Another site hears of none.
#[test]
fn a_restarted_agent_is_told_its_players_where_they_play_and_what_their_copy_holds() {
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    copy(&mut h, "MTL", bubble, epoch, 40, 7);
    let mtl = h.site("MTL");
    let conn = h.conn("MTL");
    h.core.handle(Input::AgentDisconnected { site: mtl, conn }, h.now);
    h.core.handle(Input::AgentConnected { site: mtl, conn: 999 }, h.now);
    let again = register("MTL", Vec::new(), &[]);
    let control::Reply::Registered { homed, .. } = h.request("MTL", again).unwrap() else {
        panic!()
    };
    let listed: Vec<_> =
        homed.iter().map(|p| (p.sample.player, p.route.as_ref().map(|r| r.0), p.covered)).collect();
    assert_eq!(listed, [(PlayerId(1), Some(bubble), Seq(7))]);
    let par = register("PAR", Vec::new(), &[]);
    let control::Reply::Registered { homed, .. } = h.request("PAR", par).unwrap() else { panic!() };
    assert!(homed.is_empty(), "{homed:?}");
}
