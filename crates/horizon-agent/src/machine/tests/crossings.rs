//! Crossings: a player's state leaving a bubble for another site's, followed to wherever the
//! player plays now, kept until delivered, sent again to a bubble restored without it.

use super::*;

/// The core's member list of bubble `lref`: player 7, homed at HKG, crossing in (its state
/// on its way).
fn comes_from_hkg(lref: LeaseRef) -> control::Request {
    let member = control::Member {
        player: PlayerId(7),
        home: n("HKG"),
        pos: Vec3::default(),
        crossing: true,
    };
    control::Request::Members { lease: lref, players: vec![member], departed: Vec::new() }
}

/// The core's member list of bubble `lref` saying player 7 left it for PAR's bubble 2.
fn leaves_for_par(lref: LeaseRef) -> control::Request {
    let departure = control::Departure {
        player: PlayerId(7),
        to: LeaseRef { bubble: BubbleId(2), epoch: Epoch(4) },
        site: n("PAR"),
    };
    control::Request::Members { lease: lref, players: Vec::new(), departed: vec![departure] }
}

/// Whether `out` sends a crossing to `site`'s bubble `bubble`.
fn crossed_to(out: &[Effect], site: &str, bubble: u64) -> bool {
    out.iter().any(|e| {
        matches!(e, Effect::ToPeer { site: s, request: transfer::Request::Cross { to, .. }, .. }
            if s.as_str() == site && *to == BubbleId(bubble))
    })
}

/// The core's member list of `lref`'s bubble: player 7, homed here, alone.
fn seven_in(lref: LeaseRef) -> control::Request {
    let member = control::Member {
        player: PlayerId(7),
        home: n(SITE),
        pos: Vec3::default(),
        crossing: false,
    };
    control::Request::Members { lease: lref, players: vec![member], departed: vec![] }
}

#[test]
fn a_departed_players_state_crosses_to_its_new_site_once_the_server_let_it_go() {
    let mut h = running(10_000);
    h.feed(Input::PeerUp { site: n("PAR"), conn: 99 });
    let member = |p| control::Member {
        player: PlayerId(p),
        home: n(SITE),
        pos: Vec3::default(),
        crossing: false,
    };
    let lref = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    let (_, out) = h.order(control::Request::Members {
        lease: lref,
        players: vec![member(7)],
        departed: Vec::new(),
    });
    let out = h.answer_servers(out, done);
    assert_eq!(answers(&out).len(), 1);
    let (_, out) = h.order(leaves_for_par(lref));
    assert!(matches!(to_servers(&out)[..], [(_, server::Request::Leave { .. })]));
    let out = h.answer_servers(out, |_| {
        Ok(server::Reply::Left { last_applied: Seq(12), state: Blob(vec![1, 2, 3]) })
    });
    let cross = out.iter().find_map(|e| match e {
        Effect::ToPeer {
            site,
            request: transfer::Request::Cross { player, to, last_applied, .. },
            ..
        } => Some((site.to_string(), *player, *to, *last_applied)),
        _ => None,
    });
    assert_eq!(cross, Some(("PAR".into(), PlayerId(7), BubbleId(2), Seq(12))));
}

/// Player 7 (home `home`) plays in bubble 1 here, then the core says they left for HKG's
/// bubble 3 and the server lets them go at seq 12: what the agent does then.
fn leaves_bubble_1_for_hkg(h: &mut Harness, home: &str) -> Vec<Effect> {
    let lref = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    let member = control::Member {
        player: PlayerId(7),
        home: n(home),
        pos: Vec3::default(),
        crossing: false,
    };
    let (_, out) = h.order(control::Request::Members {
        lease: lref,
        players: vec![member],
        departed: Vec::new(),
    });
    h.answer_servers(out, done);
    let to_hkg = control::Departure {
        player: PlayerId(7),
        to: LeaseRef { bubble: BubbleId(3), epoch: Epoch(2) },
        site: n("HKG"),
    };
    let (_, out) = h.order(control::Request::Members {
        lease: lref,
        players: Vec::new(),
        departed: vec![to_hkg],
    });
    h.answer_servers(out, |_| {
        Ok(server::Reply::Left { last_applied: Seq(12), state: Blob(vec![1, 2, 3]) })
    })
}

#[test]
fn a_crossing_never_taken_follows_its_player_to_the_bubble_it_plays_in_now() {
    let mut h = running(10_000);
    h.feed(Input::PeerUp { site: n("PAR"), conn: 99 });
    // Player 7 leaves for HKG's bubble 3, whose site this agent cannot reach: its state waits.
    let out = leaves_bubble_1_for_hkg(&mut h, SITE);
    let crossings = |out: &[Effect]| -> Vec<(String, BubbleId, Seq)> {
        out.iter()
            .filter_map(|e| match e {
                Effect::ToPeer {
                    site,
                    request: transfer::Request::Cross { to, last_applied, .. },
                    ..
                } => Some((site.to_string(), *to, *last_applied)),
                _ => None,
            })
            .collect()
    };
    assert!(crossings(&out).is_empty(), "HKG is unreachable: {out:?}");
    // The core placed the player in PAR's bubble 2 since (HKG's bubble never took it): told
    // where it plays now, the crossing goes there.
    let routes =
        vec![control::PlayerRoute { player: PlayerId(7), bubble: BubbleId(2), site: n("PAR") }];
    let (_, out) = h.order(control::Request::Route { routes });
    assert_eq!(crossings(&out), vec![("PAR".to_owned(), BubbleId(2), Seq(12))]);
}

/// Player 7 (of PAR) leaves bubble 1 here for HKG's bubble 3, which takes the state.
fn delivered_to_hkg() -> Harness {
    let mut h = running(10_000);
    h.feed(Input::PeerUp { site: n("PAR"), conn: 99 });
    h.feed(Input::PeerUp { site: n("HKG"), conn: 98 });
    let out = leaves_bubble_1_for_hkg(&mut h, "PAR");
    let pending = out.into_iter().find_map(|e| match e {
        Effect::ToPeer { pending, .. } => Some(pending),
        _ => None,
    });
    let pending = pending.expect("the crossing to HKG");
    h.feed(Input::PeerReplied { site: n("HKG"), pending, result: Ok(transfer::Reply::Done) });
    h
}

#[test]
fn a_crossing_delivered_and_kept_goes_again_to_a_bubble_restored_without_its_player() {
    let mut h = delivered_to_hkg();
    // The player went on from bubble 3 to bubble 5, whose holder died before a copy had them:
    // bubble 5 comes back on PAR from a copy without the player, and this site, which the
    // state came through, is asked for what it kept.
    let routes =
        vec![control::PlayerRoute { player: PlayerId(7), bubble: BubbleId(5), site: n("PAR") }];
    let (_, out) = h.order(control::Request::Recover { routes });
    let again = out.iter().find_map(|e| match e {
        Effect::ToPeer {
            site, request: transfer::Request::Cross { to, last_applied, .. }, ..
        } => Some((site.to_string(), *to, *last_applied)),
        _ => None,
    });
    assert_eq!(again, Some(("PAR".to_owned(), BubbleId(5), Seq(12))));
    // An agent that kept nothing of the player sends nothing.
    let mut h2 = running(10_000);
    let routes =
        vec![control::PlayerRoute { player: PlayerId(7), bubble: BubbleId(5), site: n("PAR") }];
    let (_, out) = h2.order(control::Request::Recover { routes });
    assert!(!out.iter().any(|e| matches!(e, Effect::ToPeer { .. })), "nothing kept: nothing sent");
}

#[test]
fn a_crossing_kept_after_its_player_moved_on_still_answers_a_recover_but_is_not_sent_back() {
    let mut h = delivered_to_hkg();
    let crossings = |out: &[Effect]| -> Vec<(String, BubbleId)> {
        out.iter()
            .filter_map(|e| match e {
                Effect::ToPeer { site, request: transfer::Request::Cross { to, .. }, .. } => {
                    Some((site.to_string(), *to))
                }
                _ => None,
            })
            .collect()
    };
    // The player moves on from HKG's bubble 3 to PAR's bubble 5 (this site, its home, is
    // told): the state kept here is of no use to bubble 5 while bubble 3 hands it on.
    let route = |bubble| vec![control::PlayerRoute { player: PlayerId(7), bubble, site: n("PAR") }];
    let (_, out) = h.order(control::Request::Route { routes: route(BubbleId(5)) });
    assert!(crossings(&out).is_empty(), "nothing sent on a route elsewhere: {out:?}");
    // But bubble 3's holder died before bubble 5 got the player, and bubble 5 comes back from
    // a copy without them: asked, this site sends what it kept.
    let (_, out) = h.order(control::Request::Recover { routes: route(BubbleId(5)) });
    assert_eq!(crossings(&out), [("PAR".to_owned(), BubbleId(5))]);
}

#[test]
fn a_crossing_that_comes_after_its_player_left_the_bubble_goes_on_to_where_they_went() {
    let mut h = running(10_000);
    h.feed(Input::PeerUp { site: n("PAR"), conn: 99 });
    h.feed(Input::PeerUp { site: n("HKG"), conn: 98 });
    let lref = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    // Player 7 comes from HKG (its state on its way), then leaves for PAR before it arrived.
    let (_, out) = h.order(comes_from_hkg(lref));
    assert!(to_servers(&out).is_empty(), "waits for its state");
    let (_, out) = h.order(leaves_for_par(lref));
    assert!(to_servers(&out).is_empty(), "its server never had it: nothing to let go");
    // The state comes now: taken, and sent on to PAR's bubble.
    let token = h.token();
    let request = transfer::Request::Cross {
        player: PlayerId(7),
        from: BubbleId(9),
        to: BubbleId(1),
        epoch: Epoch(1),
        last_applied: Seq(40),
        state: Blob(vec![4, 0]),
    };
    let out = h.feed(Input::PeerRequest { site: n("HKG"), token, request });
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::AnswerPeer { token: t, result: Ok(_) } if *t == token)),
        "taken: {out:?}"
    );
    let on = out.iter().find_map(|e| match e {
        Effect::ToPeer {
            site,
            request: transfer::Request::Cross { player, from, to, last_applied, .. },
            ..
        } => Some((site.to_string(), *player, *from, *to, *last_applied)),
        _ => None,
    });
    assert_eq!(on, Some(("PAR".into(), PlayerId(7), BubbleId(1), BubbleId(2), Seq(40))));
    // It was kept here too: the player coming back into bubble 1 joins with it, not afresh.
    let (_, out) = h.order(comes_from_hkg(lref));
    assert!(
        matches!(
            to_servers(&out)[..],
            [(_, server::Request::Join { player: PlayerId(7), last_applied: Seq(40), .. })]
        ),
        "{out:?}"
    );
}

#[test]
fn a_crossing_between_two_bubbles_of_this_site_is_timed_against_one_tick() {
    let mut h = running(10_000);
    with_ids(&mut h);
    let (player, _) = join_player(&mut h);
    // Bubble 2 on this site too (it shares bubble 1's server).
    let (_, out) = h.order(create(2));
    h.answer_servers(out, done);
    let member = control::Member { player, home: n(SITE), pos: Vec3::default(), crossing: false };
    let lref = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    let (_, out) =
        h.order(control::Request::Members { lease: lref, players: vec![member], departed: vec![] });
    h.answer_servers(out, done);
    let gs = || n("mtl-gs-0");
    h.feed(Input::ServerItem { server: gs(), item: update(1, 1, 5, &[(player.0, 0)]) });
    // The player crossed into bubble 2: routed there, its first update 120 ms later.
    let routes = vec![control::PlayerRoute { player, bubble: BubbleId(2), site: n(SITE) }];
    h.order(control::Request::Route { routes });
    h.advance(Duration::from_millis(120));
    let out = h.feed(Input::ServerItem { server: gs(), item: update(2, 1, 1, &[(player.0, 0)]) });
    let crossed = out.iter().find_map(|e| match e {
        Effect::Crossed { from, to, gap, floor } => Some((from.clone(), to.clone(), *gap, *floor)),
        _ => None,
    });
    let Some((from, to, gap, floor)) = crossed else { panic!("no crossing timed: {out:?}") };
    assert_eq!((from, to), (n(SITE), n(SITE)));
    assert!(gap >= Duration::from_millis(120), "{gap:?}");
    assert_eq!(floor, Some(Duration::from_millis(33)), "one server tick");
}

#[test]
fn a_player_homed_here_crossing_between_two_bubbles_here_is_shown_the_new_one_without_waiting_for_the_route()
 {
    let mut h = running(10_000);
    with_ids(&mut h);
    let (player, conn) = join_player(&mut h);
    let (_, out) = h.order(create(2));
    h.answer_servers(out, done);
    let member =
        |crossing| control::Member { player, home: n(SITE), pos: Vec3::default(), crossing };
    let (one, two) = (
        LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) },
        LeaseRef { bubble: BubbleId(2), epoch: Epoch(1) },
    );
    let (_, out) = h.order(control::Request::Members {
        lease: one,
        players: vec![member(false)],
        departed: vec![],
    });
    h.answer_servers(out, done);
    let gs = || n("mtl-gs-0");
    h.feed(Input::ServerItem { server: gs(), item: update(1, 1, 5, &[(player.0, 0)]) });
    // The core's lists, entered bubble first: 2 expects the player, 1 lets them go.
    let (_, out) = h.order(control::Request::Members {
        lease: two,
        players: vec![member(true)],
        departed: vec![],
    });
    h.answer_servers(out, done);
    let departure = control::Departure { player, to: two, site: n(SITE) };
    let (_, out) = h.order(control::Request::Members {
        lease: one,
        players: vec![],
        departed: vec![departure],
    });
    let joined = std::cell::Cell::new(false);
    h.answer_servers(out, |r| match r {
        server::Request::Leave { .. } => {
            Ok(server::Reply::Left { last_applied: Seq(0), state: Blob(vec![4]) })
        }
        server::Request::Join { lease, state, .. } => {
            joined.set(*lease == two && state.0 == [4]);
            Ok(server::Reply::Done)
        }
        _ => Ok(server::Reply::Done),
    });
    let joined = joined.get();
    assert!(joined, "the state joined bubble 2 at once");
    // No `Route` from the core yet: bubble 2's next update reaches the player all the same.
    h.advance(Duration::from_millis(40));
    let out = h.feed(Input::ServerItem { server: gs(), item: update(2, 1, 1, &[(player.0, 0)]) });
    assert!(player_items(&out).iter().any(|(c, _)| *c == conn), "shown bubble 2: {out:?}");
    let gap = out.iter().find_map(|e| match e {
        Effect::Crossed { gap, .. } => Some(*gap),
        _ => None,
    });
    // The harness's clock is virtual: the gap is exactly the 40 ms it advanced.
    assert_eq!(gap, Some(Duration::from_millis(40)));
}

#[test]
fn a_player_put_back_in_a_bubble_here_while_its_state_waits_to_cross_out_gets_that_state() {
    // Chaos seed 9410322: the core died just after saying player 7 left for PAR's bubble 2;
    // the restarted core put them back here, and the bubble joined them fresh (seq 0) while
    // their state (seq 12) was sent to PAR again and again, never taken.
    let mut h = running(10_000);
    h.feed(Input::PeerUp { site: n("PAR"), conn: 99 });
    let lref = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    let back = seven_in(lref);
    let (_, out) = h.order(back.clone());
    h.answer_servers(out, done);
    let (_, out) = h.order(leaves_for_par(lref));
    h.answer_servers(out, |_| {
        Ok(server::Reply::Left { last_applied: Seq(12), state: Blob(vec![1, 2, 3]) })
    });
    assert!(h.m.transit.sending(PlayerId(7)), "on its way to PAR");
    let joined = std::cell::Cell::new(None);
    let (_, out) = h.order(back);
    h.answer_servers(out, |r| {
        if let server::Request::Join { lease, last_applied, state, .. } = r {
            joined.set(Some((*lease, *last_applied, state.0.clone())));
        }
        Ok(server::Reply::Done)
    });
    assert_eq!(joined.take(), Some((lref, Seq(12), vec![1, 2, 3])), "its state, not a fresh one");
    assert!(!h.m.transit.sending(PlayerId(7)), "no longer sent to PAR");
}

#[test]
fn a_state_sent_on_from_a_bubble_here_its_player_left_is_still_sent_until_taken() {
    // Player 7 left bubble 1 here for PAR's bubble 2; PAR is unreachable, so their state waits
    // here. The core then says bubble 1 (restored from a copy that may lack them) should get
    // it back (`Recover`): the state reaches bubble 1, which the player has left, so it goes on
    // to where they went — and that crossing, sent anew to PAR, must stay on its way until
    // taken, not be forgotten as "taken here".
    let mut h = running(10_000);
    let lref = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    let (_, out) = h.order(seven_in(lref));
    h.answer_servers(out, done);
    let (_, out) = h.order(leaves_for_par(lref));
    h.answer_servers(out, |_| {
        Ok(server::Reply::Left { last_applied: Seq(12), state: Blob(vec![1, 2, 3]) })
    });
    assert!(h.m.transit.sending(PlayerId(7)), "on its way to PAR, which is unreachable");
    let route = control::PlayerRoute { player: PlayerId(7), bubble: BubbleId(1), site: n(SITE) };
    let (_, out) = h.order(control::Request::Recover { routes: vec![route] });
    h.answer_servers(out, done);
    assert!(h.m.transit.sending(PlayerId(7)), "still on its way to PAR");
    // PAR comes back: the state goes there.
    let mut out = h.feed(Input::PeerUp { site: n("PAR"), conn: 99 });
    out.extend(h.advance(Duration::from_secs(1)));
    assert!(crossed_to(&out, "PAR", 2), "sent to PAR's bubble 2: {out:?}");
}

#[test]
fn a_state_sent_on_between_two_bubbles_here_is_kept_as_delivered_into_the_last() {
    // Player 7 left bubble 1 for bubble 2, then bubble 2 for bubble 3, all three here, before
    // bubble 1's server let them go. Their state reaches bubble 2 after they left it, so it
    // goes on into bubble 3, which takes it. What is kept as delivered must be that last
    // crossing: when bubble 3 is restored elsewhere, the state follows it there.
    let mut h = running(10_000);
    h.feed(Input::PeerUp { site: n("PAR"), conn: 99 });
    for bubble in [2, 3] {
        let (_, out) = h.order(create(bubble));
        h.answer_servers(out, done);
    }
    let lref = |b| LeaseRef { bubble: BubbleId(b), epoch: Epoch(1) };
    let (_, out) = h.order(seven_in(lref(1)));
    h.answer_servers(out, done);
    let member = control::Member {
        player: PlayerId(7),
        home: n(SITE),
        pos: Vec3::default(),
        crossing: true,
    };
    let to = |b| control::Departure { player: PlayerId(7), to: lref(b), site: n(SITE) };
    // The core's lists, entered bubble first each time: 2 expects the player and 1 lets them
    // go; then 3 expects them and 2 lets them go. Bubble 1's server answers only after.
    let members = |b, players: Vec<control::Member>, departed: Vec<control::Departure>| {
        control::Request::Members { lease: lref(b), players, departed }
    };
    let (_, out) = h.order(members(2, vec![member.clone()], vec![]));
    h.answer_servers(out, done);
    let (_, leave) = h.order(members(1, vec![], vec![to(2)]));
    let (_, out) = h.order(members(3, vec![member], vec![]));
    h.answer_servers(out, done);
    let (_, out) = h.order(members(2, vec![], vec![to(3)]));
    h.answer_servers(out, done);
    let joined = std::cell::Cell::new(None);
    h.answer_servers(leave, |r| match r {
        server::Request::Leave { .. } => {
            Ok(server::Reply::Left { last_applied: Seq(12), state: Blob(vec![7]) })
        }
        server::Request::Join { lease, .. } => {
            joined.set(Some(lease.bubble));
            Ok(server::Reply::Done)
        }
        _ => Ok(server::Reply::Done),
    });
    assert_eq!(joined.get(), Some(BubbleId(3)), "the state went on into bubble 3");
    // Their server dies; bubble 3 is restored at PAR, from a copy that may lack the player:
    // the state kept here follows it there.
    h.feed(Input::ServerEnded { server: "mtl-gs-0".into(), why: "signal 9".into() });
    let routes =
        vec![control::PlayerRoute { player: PlayerId(7), bubble: BubbleId(3), site: n("PAR") }];
    let (_, out) = h.order(control::Request::Route { routes });
    assert!(crossed_to(&out, "PAR", 3), "sent to PAR's bubble 3: {out:?}");
}

#[test]
fn a_state_kept_for_a_bubble_is_not_used_once_a_newer_state_of_its_player_came_through() {
    // Player 7's state reached bubble 1 after they had left it for PAR: it went on, and was
    // kept in bubble 1 too, in case they came back. Later their newer state crosses from PAR
    // into bubble 3 here. When the core then says they come back into bubble 1 (their state on
    // its way from bubble 3), the old copy kept there must not be joined: it would set them back
    // (seed 900588 of `sim chaos --standby`: 600 acknowledged inputs shown undone).
    let mut h = running(10_000);
    h.feed(Input::PeerUp { site: n("PAR"), conn: 99 });
    h.feed(Input::PeerUp { site: n("HKG"), conn: 98 });
    let (_, out) = h.order(create(3));
    h.answer_servers(out, done);
    let lref = |b| LeaseRef { bubble: BubbleId(b), epoch: Epoch(1) };
    h.order(comes_from_hkg(lref(1)));
    h.order(leaves_for_par(lref(1)));
    let cross = |from, to, seq| transfer::Request::Cross {
        player: PlayerId(7),
        from: BubbleId(from),
        to: BubbleId(to),
        epoch: Epoch(1),
        last_applied: Seq(seq),
        state: Blob(vec![seq as u8]),
    };
    let token = h.token();
    h.feed(Input::PeerRequest { site: n("HKG"), token, request: cross(9, 1, 40) });
    // Bubble 3 expects them from PAR; their state comes, newer.
    let member = |crossing| control::Member {
        player: PlayerId(7),
        home: n("HKG"),
        pos: Vec3::default(),
        crossing,
    };
    let members =
        |b, players| control::Request::Members { lease: lref(b), players, departed: vec![] };
    let (_, out) = h.order(members(3, vec![member(true)]));
    h.answer_servers(out, done);
    let token = h.token();
    let out = h.feed(Input::PeerRequest { site: n("PAR"), token, request: cross(2, 3, 90) });
    h.answer_servers(out, done);
    // Back into bubble 1, entered bubble first: its state is on its way from bubble 3.
    let (_, out) = h.order(members(1, vec![member(true)]));
    let joins: Vec<Seq> = to_servers(&out)
        .into_iter()
        .filter_map(|(_, r)| match r {
            server::Request::Join { player: PlayerId(7), last_applied, .. } => Some(*last_applied),
            _ => None,
        })
        .collect();
    assert!(joins.is_empty(), "joined from the old copy: {joins:?}");
}

/// Chaos seed 101501, servers of 3: the core ended a bubble as its server died, the player's
/// departure its last order. The server could not let them go (gone), and the bubble was no
/// longer here to be reported lost with it: the player's state vanished unsaid, and their new
/// bubble started them afresh. The core is told the bubble's loss, so it has the state the
/// player crossed in with sent on (see the core's `ended_bubble_lost`).
#[test]
fn a_departure_from_a_bubble_ended_as_its_server_died_tells_the_core_the_bubble_was_lost() {
    let mut h = running(10_000);
    let lref = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    let members = vec![member(7)];
    let (_, out) =
        h.order(control::Request::Members { lease: lref, players: members, departed: Vec::new() });
    h.answer_servers(out, done);
    let (_, leaving) = h.order(leaves_for_par(lref));
    assert!(to_servers(&leaving).iter().any(|(_, r)| matches!(r, server::Request::Leave { .. })));
    let (_, _) = h.order(control::Request::Revoke { leases: vec![lref] });
    assert!(h.m.bubbles.get(&BubbleId(1)).is_none(), "released");
    let out = h.answer_servers(leaving, |_| Err(Failure::Unreachable("the server is gone".into())));
    let lost: Vec<Vec<LeaseRef>> = out
        .iter()
        .filter_map(|e| match e {
            Effect::ToCore { request: control::Request::Lost { leases, .. }, .. } => {
                Some(leases.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(lost, [vec![lref]]);
}
