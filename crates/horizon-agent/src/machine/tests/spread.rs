//! A bubble spread over servers, and an overfull server giving a region away.

use super::*;

/// `h` registered with `mtl-gs-0` and `mtl-gs-1` ready, and bubble 1 (epoch 1, a lease of
/// `ttl_ms`) running on `mtl-gs-0`.
fn one_bubble_two_servers(mut h: Harness, ttl_ms: u32) -> Harness {
    h.effects();
    h.register();
    h.server_ready("mtl-gs-0");
    h.server_ready("mtl-gs-1");
    let (_, out) = h.order(control::Request::Create {
        bubble: BubbleId(1),
        region: region(),
        lease: lease(1, 1, ttl_ms),
    });
    h.answer_servers(out, done);
    h
}

/// Bubble 1 on `h` (see [`one_bubble_two_servers`]) with members `placed` (player, part), all
/// joined on its server, then the core's `Parts` cutting it in two halves along x with each
/// member on its part. Returns the `Parts` order's token and effects (nothing answered yet).
fn spread_in_two(h: &mut Harness, placed: &[(u64, u32)]) -> (Token, Vec<Effect>) {
    let lref = lref(1);
    let players = placed.iter().map(|&(p, _)| member(p)).collect();
    let (_, out) = h.order(control::Request::Members { lease: lref, players, departed: vec![] });
    h.answer_servers(out, done);
    let half = |x0: f64, x1: f64| Aabb {
        min: Vec3 { x: x0, y: 0.0, z: 0.0 },
        max: Vec3 { x: x1, y: 1.0, z: 1.0 },
    };
    h.order(control::Request::Parts {
        lease: lref,
        parts: vec![half(0.0, 1.0), half(1.0, 2.0)],
        players: placed
            .iter()
            .map(|&(p, part)| control::PartMember { player: PlayerId(p), part })
            .collect(),
    })
}

#[test]
fn spreading_a_bubble_takes_a_server_then_moves_each_member_with_its_state() {
    let mut h = one_bubble_two_servers(Harness::new(2), 10_000);
    let (token, out) = spread_in_two(&mut h, &[(1, 0), (2, 1)]);
    let sent: Vec<String> =
        to_servers(&out).iter().map(|(s, r)| format!("{s}:{}", kind(r))).collect();
    assert_eq!(sent, ["mtl-gs-1:assign"]);
    let out = h.answer_servers(out, |r| match r {
        server::Request::Leave { .. } => {
            Ok(server::Reply::Left { last_applied: Seq(3), state: Blob(vec![9]) })
        }
        _ => Ok(server::Reply::Done),
    });
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    let local = &h.m.bubbles[&BubbleId(1)];
    assert_eq!(local.extra(), [n("mtl-gs-1")]);
    assert_eq!(local.server_of(PlayerId(2)), &n("mtl-gs-1"));
    assert_eq!(local.server_of(PlayerId(1)), &n("mtl-gs-0"));
}

/// [`overfull_server`], cut from the core: a region moves players only, by a regroup.
fn overfull_server_without_its_core() -> Harness {
    let mut h = overfull_server();
    h.feed(Input::CoreDown { error: "cut".into() });
    h
}

#[test]
fn an_overfull_server_cut_from_its_core_gives_its_lighter_region_away_with_every_players_state() {
    let mut h = overfull_server_without_its_core();
    // Over its 4 players for less than 10 s: nothing moves.
    let out = h.advance(Duration::from_secs(9));
    assert!(!to_servers(&out).iter().any(|(_, r)| matches!(r, server::Request::Continue { .. })));
    // Past 10 s: the lighter bubble (2, of 2 players) goes to the other server, which counts
    // its ticks on from far past the old server's last update (tick 0 here: none came).
    let out = h.advance(Duration::from_secs(2));
    let sent: Vec<String> = to_servers(&out)
        .iter()
        .filter(|(_, r)| !matches!(r, server::Request::Renew { .. } | server::Request::Copy { .. }))
        .map(|(s, r)| format!("{s}:{}", kind(r)))
        .collect();
    assert_eq!(sent, ["mtl-gs-1:continue"]);
    assert!(to_servers(&out).iter().any(|(_, r)| matches!(
        r,
        server::Request::Continue { tick, .. } if tick.0 == RELOCATE_TICK_GAP
    )));
    // A member list that comes meanwhile waits for the move: player 6 joins where the bubble
    // runs once it moved.
    let players = [4, 5, 6].into_iter().map(member).collect();
    let (_, waiting) =
        h.order(control::Request::Members { lease: lref(2), players, departed: Vec::new() });
    assert!(to_servers(&waiting).is_empty(), "{waiting:?}");
    let (seen, _) = h.answer_servers_seen(out, |r| match r {
        server::Request::Leave { player, .. } => {
            Ok(server::Reply::Left { last_applied: Seq(7), state: Blob(vec![player.0 as u8]) })
        }
        _ => Ok(server::Reply::Done),
    });
    let mut sent: Vec<String> = Vec::new();
    let mut joined = Vec::new();
    for (s, r) in &seen {
        sent.push(format!("{s}:{}", kind(r)));
        if let server::Request::Join { player, last_applied, state, .. } = r {
            joined.push((s.clone(), player.0, last_applied.0, state.0.clone()));
        }
    }
    // 4 and 5 left with their state and joined with it; the old server let the region go; the
    // new one got the lease as it stands and its box; then 6 joined afresh on the new server.
    assert_eq!(
        joined,
        [
            ("mtl-gs-1".to_owned(), 4, 7, vec![4]),
            ("mtl-gs-1".to_owned(), 5, 7, vec![5]),
            ("mtl-gs-1".to_owned(), 6, 0, vec![]),
        ]
    );
    assert!(sent.contains(&"mtl-gs-0:release".to_owned()), "{sent:?}");
    assert!(sent.contains(&"mtl-gs-1:resize".to_owned()), "{sent:?}");
    assert!(seen.iter().any(|(s, r)| s == "mtl-gs-1"
        && matches!(r, server::Request::Renew { leases, .. } if leases == &[lref(2)])));
    let local = &h.m.bubbles[&BubbleId(2)];
    assert_eq!(local.server(), &n("mtl-gs-1"));
    assert!(local.holder().is_empty() && local.extra().is_empty());
    assert_eq!(h.m.bubbles[&BubbleId(1)].server(), &n("mtl-gs-0"), "the heavier stays");
    assert_eq!(h.m.fleet.get(&n("mtl-gs-0")).unwrap().regions(), [BubbleId(1)]);
    assert_eq!(h.m.stats.regions_moved.load(Ordering::Relaxed), 1);
    // Within its settle window, and then under its 4 players, the server gives nothing more.
    let out = h.advance(Duration::from_secs(30));
    assert!(!to_servers(&out).iter().any(|(_, r)| matches!(r, server::Request::Continue { .. })));
}

#[test]
fn a_move_the_new_server_refuses_is_given_up_and_the_member_list_that_waited_applies() {
    let mut h = overfull_server_without_its_core();
    let out = h.advance(Duration::from_secs(11));
    assert!(to_servers(&out).iter().any(|(s, r)| s == "mtl-gs-1" && kind(r) == "continue"));
    // A member list waits for the move...
    let players = [4, 5, 6].into_iter().map(member).collect();
    let (_, waiting) =
        h.order(control::Request::Members { lease: lref(2), players, departed: Vec::new() });
    assert!(to_servers(&waiting).is_empty());
    // ... which the new server refuses: the bubble stays, and player 6 joins it where it runs.
    let (seen, _) = h.answer_servers_seen(out, |r| match r {
        server::Request::Continue { .. } => {
            Err(Failure::Refused(Fault::new(ErrorCode::NotReady, "refused")))
        }
        _ => Ok(server::Reply::Done),
    });
    let joined: Vec<(String, u64)> = seen
        .iter()
        .filter_map(|(s, r)| match r {
            server::Request::Join { player, .. } => Some((s.clone(), player.0)),
            _ => None,
        })
        .collect();
    assert_eq!(joined, [("mtl-gs-0".to_owned(), 6)]);
    assert_eq!(h.m.bubbles[&BubbleId(2)].server(), &n("mtl-gs-0"));
    assert!(h.m.regroups.is_empty());
    assert_eq!(h.m.stats.regions_moved.load(Ordering::Relaxed), 0);
}

#[test]
fn a_server_with_one_region_over_its_players_keeps_it_for_the_brain_to_cut() {
    let mut h = one_bubble_two_servers(Harness::with_limits(1, 4, 4), 60_000);
    let players = (1..=9).map(member).collect();
    let (_, out) =
        h.order(control::Request::Members { lease: lref(1), players, departed: Vec::new() });
    h.answer_servers(out, done);
    let out = h.advance(Duration::from_secs(30));
    assert!(!to_servers(&out).iter().any(|(_, r)| matches!(
        r,
        server::Request::Assign { .. } | server::Request::Continue { .. }
    )));
    assert_eq!(h.m.stats.regions_moved.load(Ordering::Relaxed), 0);
}

#[test]
fn a_state_that_comes_for_a_player_moving_between_parts_joins_them_where_they_go() {
    let mut h = one_bubble_two_servers(Harness::new(2), 10_000);
    h.feed(Input::PeerUp { site: n("HKG"), conn: 98 });
    let (_, out) = spread_in_two(&mut h, &[(1, 0), (2, 1)]);
    // The new part's server takes it: player 2 is asked to leave `mtl-gs-0`...
    let mut leaves = Vec::new();
    for e in out {
        if let Effect::ToServer { server, pending, request } = e {
            assert_eq!(kind(&request), "assign");
            let result = Ok(server::Reply::Done);
            leaves.extend(h.feed(Input::ServerReplied { server, pending, result }));
        }
    }
    assert_eq!(
        to_servers(&leaves).iter().map(|(s, r)| format!("{s}:{}", kind(r))).collect::<Vec<_>>(),
        ["mtl-gs-0:leave"]
    );
    // ... and before it answers, a newer state of theirs comes (a crossing the core listed
    // them for, late): not joined on the server they are leaving.
    let token = h.token();
    let request = crossing(2, 1, 40);
    let came = h.feed(Input::PeerRequest { site: n("HKG"), token, request });
    assert!(to_servers(&came).is_empty(), "held for the move: {came:?}");
    // The old server lets them go with what it had: both states join them on the new server
    // (which keeps the one that applied more), nothing on the old one.
    let (seen, _) = h.answer_servers_seen(leaves, |r| match r {
        server::Request::Leave { .. } => {
            Ok(server::Reply::Left { last_applied: Seq(3), state: Blob(vec![9]) })
        }
        _ => Ok(server::Reply::Done),
    });
    let joins: Vec<(String, u64, u64)> = seen
        .iter()
        .filter_map(|(s, r)| match r {
            server::Request::Join { player, last_applied, .. } => {
                Some((s.clone(), player.0, last_applied.0))
            }
            _ => None,
        })
        .collect();
    assert_eq!(joins, [("mtl-gs-1".to_owned(), 2, 3), ("mtl-gs-1".to_owned(), 2, 40)]);
    assert_eq!(h.m.bubbles[&BubbleId(1)].server_of(PlayerId(2)), &n("mtl-gs-1"));
    assert!(h.m.part_moves.is_empty());
}

/// The servers each adopt is streamed to, with the players named: (server, [player]).
fn adopts_fed(out: &[Effect]) -> Vec<(String, Vec<u64>)> {
    out.iter()
        .filter_map(|e| match e {
            Effect::ServerStream { server, item: StateItem::Adopt(a) } => {
                Some((server.to_string(), a.players.iter().map(|p| p.0).collect()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn players_of_a_spread_bubble_adopt_a_kept_copy_on_their_own_servers_once_they_stopped_moving() {
    let mut h = one_bubble_two_servers(Harness::new(2), 10_000);
    let lref = lref(1);
    let (_, out) = spread_in_two(&mut h, &[(1, 0), (2, 1), (3, 1)]);
    // A copy kept for players 1 and 2 comes while they move: it waits for the move.
    let adopt = control::Request::Adopt {
        lease: lref,
        players: vec![PlayerId(1), PlayerId(2)],
        copy: Blob(vec![3; 10]),
    };
    let (token, waiting) = h.order(adopt.clone());
    assert_eq!(answers(&waiting), [(token, Ok(control::Reply::Done))]);
    assert!(adopts_fed(&waiting).is_empty(), "{waiting:?}");
    // Once every member is on their part's server, each server adopts its own players.
    let out = h.answer_servers(out, |r| match r {
        server::Request::Leave { .. } => {
            Ok(server::Reply::Left { last_applied: Seq(3), state: Blob(vec![9]) })
        }
        _ => Ok(server::Reply::Done),
    });
    let split = [("mtl-gs-0".to_owned(), vec![1]), ("mtl-gs-1".to_owned(), vec![2])];
    assert_eq!(adopts_fed(&out), split);
    // And so for a copy that comes while it stays spread.
    let (token, out) = h.order(adopt);
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    assert_eq!(adopts_fed(&out), split);
}

#[test]
fn a_stopping_server_hands_its_part_of_a_spread_bubble_to_another_and_the_other_part_stays() {
    let mut h = one_bubble_two_servers(Harness::new(2), 10_000);
    let (_, out) = spread_in_two(&mut h, &[(1, 0), (2, 1)]);
    h.answer_servers(out, |r| match r {
        server::Request::Leave { .. } => {
            Ok(server::Reply::Left { last_applied: Seq(3), state: Blob(vec![9]) })
        }
        _ => Ok(server::Reply::Done),
    });
    h.server_ready("mtl-gs-2");
    h.effects();
    let parts = h.m.bubbles[&BubbleId(1)].part_regions().to_vec();
    // Part 0's server (connection 1) is stopping: its part goes to the ready one.
    let token = h.token();
    let request = server::Request::Drain;
    let out = h.feed(Input::ServerRequest { server: n("mtl-gs-0"), conn: 1, token, request });
    let sent: Vec<String> =
        to_servers(&out).iter().map(|(s, r)| format!("{s}:{}", kind(r))).collect();
    assert_eq!(sent, ["mtl-gs-2:assign"], "no core order: the lease stays as it is");
    let left = std::cell::RefCell::new(Vec::new());
    let joined = std::cell::RefCell::new(Vec::new());
    h.answer_servers(out, |r| match r {
        server::Request::Leave { player, .. } => {
            left.borrow_mut().push(player.0);
            Ok(server::Reply::Left { last_applied: Seq(5), state: Blob(vec![4]) })
        }
        server::Request::Join { player, state, .. } => {
            joined.borrow_mut().push((player.0, state.0.clone()));
            Ok(server::Reply::Done)
        }
        _ => Ok(server::Reply::Done),
    });
    assert_eq!(left.into_inner(), [1], "only the stopping server's player moves");
    assert_eq!(joined.into_inner(), [(1, vec![4])], "with the state it left with");
    let local = &h.m.bubbles[&BubbleId(1)];
    let servers: Vec<&Name> = local.servers().collect();
    assert_eq!(servers, [&n("mtl-gs-2"), &n("mtl-gs-1")], "the new server in the old one's place");
    assert_eq!(local.part_regions(), parts, "each part keeps its index and its box");
    assert_eq!(local.server_of(PlayerId(1)), &n("mtl-gs-2"));
    assert_eq!(local.server_of(PlayerId(2)), &n("mtl-gs-1"));
    assert!(h.m.fleet.get(&n("mtl-gs-0")).is_some_and(|s| s.regions().is_empty()), "released");
}
