//! Leases, renewals and regrants; servers that exit; restores from a copy, whole or in parts.

use super::*;

#[test]
fn a_lease_not_renewed_stops_the_bubble_at_its_end_and_its_players_are_told() {
    let mut h = running(3_000);
    with_ids(&mut h);
    let (_, conn) = join_player(&mut h);
    // Renewals leave but are never answered (the core is cut off).
    let out = h.advance(Duration::from_millis(2_900));
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::ToCore { request: control::Request::Renew { .. }, .. }))
    );
    let lease_lost = |i: &gateway::Item| matches!(i, gateway::Item::Reconnecting { reason } if reason.contains("lost its lease"));
    assert!(!player_items(&out).iter().any(|(_, i)| lease_lost(i)));
    let out = h.advance(Duration::from_millis(400));
    let told: Vec<_> = player_items(&out).into_iter().filter(|(_, i)| lease_lost(i)).collect();
    assert_eq!(told.len(), 1, "told once, at the lease's end");
    assert_eq!(told[0].0, conn);
}

#[test]
fn a_granted_renewal_counts_from_its_send_and_reaches_the_server_with_its_age() {
    let mut h = running(3_000);
    let out = h.advance(Duration::from_millis(2_000));
    let pending = out
        .into_iter()
        .filter_map(|e| match e {
            Effect::ToCore { pending, request: control::Request::Renew { .. } } => Some(pending),
            _ => None,
        })
        .next_back()
        .expect("a renewal at 2 s");
    let sent = h.now;
    h.now += Duration::from_millis(300);
    let reply = control::Reply::Renewed {
        ttl_ms: 3_000,
        granted: vec![LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) }],
        refused: Vec::new(),
    };
    let out = h.feed(Input::CoreReplied { pending, result: Ok(reply) });
    let renew = to_servers(&out);
    assert!(matches!(
        renew[..],
        [(_, server::Request::Renew { sent_ago_ms: 300, ttl_ms: 3_000, .. })]
    ));
    assert_eq!(h.m.bubbles[&BubbleId(1)].valid_until(), sent + Duration::from_millis(3_000));
}

#[test]
fn a_regrant_answers_once_every_server_of_the_bubble_took_the_new_epoch() {
    let mut h = running(10_000);
    let old = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    let (token, out) = h.order(control::Request::Regrant { old, lease: lease(1, 2, 10_000) });
    assert!(answers(&out).is_empty(), "waits for the server");
    let out = h.answer_servers(out, done);
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    assert_eq!(h.m.bubbles[&BubbleId(1)].lease().epoch, Epoch(2));
}

#[test]
fn a_game_server_that_exits_is_reported_lost_and_replaced() {
    let mut h = running(10_000);
    let out = h.feed(Input::ServerEnded { server: "mtl-gs-0".into(), why: "signal 9".into() });
    let lost = out.iter().find_map(|e| match e {
        Effect::ToCore { request: control::Request::Lost { leases, .. }, .. } => {
            Some(leases.clone())
        }
        _ => None,
    });
    assert_eq!(lost, Some(vec![LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) }]));
    assert!(out.iter().any(|e| matches!(e, Effect::StopServer { server } if server == "mtl-gs-0")));
    assert!(h.m.bubbles.is_empty());
}

#[test]
fn a_restore_feeds_the_copy_and_answers_at_the_servers_first_update() {
    let mut h = Harness::new(1);
    h.effects();
    h.register();
    h.server_ready("mtl-gs-0");
    let (token, out) = h.order(control::Request::Restore {
        lease: lease(5, 3, 10_000),
        region: region(),
        from: Epoch(2),
        tick: Tick(40),
        copy: Blob(vec![7; 100_000]),
    });
    let out = h.answer_servers(out, done);
    let fed: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Effect::ServerStream { item: StateItem::Snapshot(s), .. } => Some(s.index),
            _ => None,
        })
        .collect();
    assert_eq!(fed, [0, 1], "two chunks of 64 KiB");
    assert!(out.iter().any(
        |e| matches!(e, Effect::ServerStream { item: StateItem::Seal(s), .. } if s.tick == Tick(40))
    ));
    assert!(answers(&out).is_empty(), "answered when it runs");
    let out = h.feed(Input::ServerItem { server: n("mtl-gs-0"), item: update(5, 3, 41, &[]) });
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
}

/// Seed 9013801: an agent cut from the core while the source of a handover registered
/// without that bubble; the core took it as gone and drained it elsewhere while its server
/// still ticked here. Every bubble a server here may still write is held.
#[test]
fn a_registration_holds_the_source_of_a_handover_not_frozen_yet_but_not_a_sealed_one() {
    let mut h = running(10_000);
    let held = |h: &mut Harness| -> Vec<u64> {
        h.feed(Input::CoreUp)
            .into_iter()
            .filter_map(|e| match e {
                Effect::ToCore { request: control::Request::Register { held, .. }, .. } => {
                    Some(held.into_iter().map(|x| x.lease.bubble.0).collect::<Vec<_>>())
                }
                _ => None,
            })
            .flatten()
            .collect()
    };
    assert_eq!(held(&mut h), [1], "running");
    let handover = HandoverId(4);
    h.m.bubbles.get_mut(&BubbleId(1)).unwrap().leaving(handover);
    assert_eq!(held(&mut h), [1], "still simulating until the freeze");
    h.m.bubbles.get_mut(&BubbleId(1)).unwrap().sealed(handover);
    assert!(held(&mut h).is_empty(), "sealed: never runs again");
}

#[test]
fn a_copy_kept_for_players_goes_to_the_bubble_s_server_in_chunks_under_its_epoch() {
    let mut h = running(10_000);
    let lref = |epoch| LeaseRef { bubble: BubbleId(1), epoch: Epoch(epoch) };
    let players = vec![PlayerId(9)];
    let adopt = |epoch| control::Request::Adopt {
        lease: lref(epoch),
        players: players.clone(),
        copy: Blob(vec![3; 100_000]),
    };
    let (token, out) = h.order(adopt(1));
    let fed: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Effect::ServerStream { server, item: StateItem::Adopt(a) } => Some((
                server.to_string(),
                a.chunk.index,
                a.chunk.total,
                a.chunk.epoch,
                a.players.clone(),
            )),
            _ => None,
        })
        .collect();
    let chunk = |i| ("mtl-gs-0".to_string(), i, 2, Epoch(1), players.clone());
    assert_eq!(fed, [chunk(0), chunk(1)], "two chunks of 64 KiB to the bubble's server");
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    // Another epoch of the bubble, or a bubble not here: refused, nothing sent.
    for (order, code) in [
        (adopt(2), ErrorCode::StaleEpoch),
        (
            control::Request::Adopt {
                lease: LeaseRef { bubble: BubbleId(8), epoch: Epoch(1) },
                players: vec![],
                copy: Blob(vec![1]),
            },
            ErrorCode::UnknownBubble,
        ),
    ] {
        let (token, out) = h.order(order);
        assert_eq!(answers(&out), [(token, Err(code))]);
        assert!(!out.iter().any(|e| matches!(e, Effect::ServerStream { .. })));
    }
}

#[test]
fn a_restore_from_part_copies_feeds_part_0_then_every_other_part_then_the_seal() {
    let mut h = Harness::new(1);
    h.effects();
    h.register();
    h.server_ready("mtl-gs-0");
    let (token, out) = h.order(control::Request::RestoreParts {
        lease: lease(5, 3, 10_000),
        region: region(),
        from: Epoch(2),
        tick: Tick(40),
        copy: Blob(vec![0; 10]),
        parts: vec![Blob(vec![1; 70_000]), Blob(vec![2; 10])],
    });
    let out = h.answer_servers(out, done);
    let fed: Vec<(&str, u32, u8)> = out
        .iter()
        .filter_map(|e| match e {
            Effect::ServerStream { item: StateItem::Snapshot(s), .. } => {
                Some(("snapshot", s.index, s.bytes.0[0]))
            }
            Effect::ServerStream { item: StateItem::PartSnapshot(s), .. } => {
                Some(("part", s.index, s.bytes.0[0]))
            }
            Effect::ServerStream { item: StateItem::Seal(s), .. } if s.tick == Tick(40) => {
                Some(("seal", 0, 0))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        fed,
        [("snapshot", 0, 0), ("part", 0, 1), ("part", 1, 1), ("part", 0, 2), ("seal", 0, 0)],
        "part 0 as the snapshot, each other part whole in order, then the seal"
    );
    let out = h.feed(Input::ServerItem { server: n("mtl-gs-0"), item: update(5, 3, 41, &[]) });
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
}

#[test]
fn a_restore_whose_server_never_runs_is_refused_at_its_deadline() {
    let mut h = Harness::new(1);
    h.effects();
    h.server_ready("mtl-gs-0");
    let (token, out) = h.order(control::Request::Restore {
        lease: lease(5, 3, 10_000),
        region: region(),
        from: Epoch(2),
        tick: Tick(40),
        copy: Blob(vec![7; 10]),
    });
    h.answer_servers(out, done);
    let out = h.advance(RESTORE_DEADLINE + Duration::from_millis(400));
    assert_eq!(answers(&out), [(token, Err(ErrorCode::NotReady))]);
    assert!(to_servers(&out).iter().any(|(_, r)| matches!(r, server::Request::Release { .. })));
}

#[test]
fn joins_asked_for_while_a_regrant_is_under_way_go_to_the_server_under_the_new_epoch() {
    // `sim chaos --stage relay` seed 9600998: a join sent under the old epoch after the server
    // took the regrant was refused, and the player stayed a member nobody simulated.
    let mut h = running(10_000);
    let old = lref(1);
    let (_, regrant) = h.order(control::Request::Regrant { old, lease: lease(1, 2, 10_000) });
    let asked = to_servers(&regrant);
    assert!(matches!(asked[..], [(_, server::Request::Regrant { .. })]), "{regrant:?}");
    // Meanwhile the core's member list brings player 7 in: it waits for the new epoch.
    let members =
        control::Request::Members { lease: old, players: vec![member(7)], departed: vec![] };
    let (_, out) = h.order(members);
    assert!(to_servers(&out).is_empty(), "no join under the epoch the server is leaving");
    // The server takes the new epoch: the join follows, under it.
    let (seen, _) = h.answer_servers_seen(regrant, done);
    let joins: Vec<&server::Request> =
        seen.iter().map(|(_, r)| r).filter(|r| kind(r) == "join").collect();
    assert!(
        matches!(joins[..], [server::Request::Join { lease, player: PlayerId(7), .. }] if lease.epoch == Epoch(2)),
        "{seen:?}"
    );
}

/// Chaos seed 201286 (I4): cut from the core, the agent registered again holding bubble 1
/// under its old epoch; the core failed it over here under a newer one, and the `Restore`
/// came before the registration's answer, whose `stop` named the old epoch: the restored
/// bubble was dropped by its id, and its players, whom the core believed simulated here, were
/// simulated nowhere until they moved on afresh. A `stop` (or a `keep`) names an epoch: a
/// newer one running here is left alone.
#[test]
fn a_registration_answer_stopping_an_old_epoch_leaves_the_bubble_restored_here_since() {
    let mut h = running(10_000);
    h.server_ready("mtl-gs-1");
    let mut pending_register = None;
    for e in h.feed(Input::CoreUp) {
        if let Effect::ToCore { pending, request: control::Request::Register { .. } } = e {
            pending_register = Some(pending);
        }
    }
    let pending = pending_register.expect("a registration");
    let (token, out) = h.order(control::Request::Restore {
        lease: lease(1, 2, 10_000),
        region: region(),
        from: Epoch(1),
        tick: Tick(40),
        copy: Blob::default(),
    });
    let out = h.answer_servers(out, done);
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    let old = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    let reply = control::Reply::Registered {
        keep: Vec::new(),
        stop: vec![old],
        peers: Vec::new(),
        generation: 1,
        tick_ms: 5000,
        homed: Vec::new(),
    };
    h.feed(Input::CoreReplied { pending, result: Ok(reply) });
    let local = h.m.bubbles.get(&BubbleId(1)).expect("the restored bubble stays");
    assert_eq!(local.lease().epoch, Epoch(2), "under the newer epoch");
}

/// Chaos seed 1170 (I2): the core drained an ended bubble twice in a row on one site, its
/// `Revoke` answered at once; the next order of its lane (the bubble again, under a newer
/// epoch) ran on another server while the old one, its request lane busy, still ticked.
#[test]
fn a_revoke_is_answered_once_the_bubbles_server_has_let_it_go() {
    let mut h = Harness::new(1);
    h.register();
    h.server_ready("mtl-gs-0");
    let (_, out) = h.order(create(1));
    h.answer_servers(out, done);
    let (token, out) = h.order(control::Request::Revoke { leases: vec![lref(1)] });
    assert!(answers(&out).is_empty(), "not before the server let go: {out:?}");
    let (seen, out) = h.answer_servers_seen(out, done);
    assert!(
        seen.iter().any(|(s, r)| s == "mtl-gs-0" && matches!(r, server::Request::Release { .. }))
    );
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
}

#[test]
fn a_lease_revoked_while_its_server_takes_it_is_let_go_and_never_held() {
    let mut h = Harness::new(1);
    h.register();
    h.server_ready("mtl-gs-0");
    h.effects();
    // The server has not answered the assignment when the core revokes the lease.
    let (token, assigning) = h.order(create(1));
    let (_, out) = h.order(control::Request::Revoke { leases: vec![lref(1)] });
    assert_eq!(answers(&out).len(), 1, "nothing held: answered at once");
    let (seen, out) = h.answer_servers_seen(assigning, done);
    assert!(
        seen.iter().any(|(_, r)| matches!(r, server::Request::Release { .. })),
        "the server lets it go: {seen:?}"
    );
    assert_eq!(answers(&out), [(token, Err(ErrorCode::StaleEpoch))]);
    assert!(!h.m.bubbles.contains(&BubbleId(1)));
}
