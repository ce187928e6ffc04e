//! A region moved off an overfull server with its whole state (`rehome.rs`): the core's newer
//! epoch first, then the old server's snapshot, deltas and seal to a server standing by.

use super::*;
use horizon_proto::Message;
use horizon_proto::{Delta, Seal, Snapshot};

const OLD: &str = "mtl-gs-0";

/// Registered, two ready servers, region 1 running on the first under epoch 1; the move
/// asked for and the core's `Regrant` (epoch 2) served. Returns the `Regrant`'s token and the
/// effects of serving it.
fn granted() -> (Harness, Token, Vec<Effect>) {
    let mut h = Harness::new(1);
    h.register();
    h.effects();
    h.server_ready(OLD);
    h.server_ready("mtl-gs-1");
    let create = control::Request::Create {
        bubble: BubbleId(1),
        region: region(),
        lease: lease(1, 1, 10_000),
    };
    let (_, out) = h.order(create);
    h.answer_servers(out, done);
    h.m.rehome(BubbleId(1), &n(OLD), h.now);
    let out = h.effects();
    let asked = out.into_iter().find_map(|e| match e {
        Effect::ToCore { pending, request: control::Request::Rehome { lease } } => {
            Some((pending, lease))
        }
        _ => None,
    });
    let (pending, asked) = asked.expect("the core is asked first");
    assert_eq!(asked, LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) });
    let result = Ok(control::Reply::Done);
    assert!(h.feed(Input::CoreReplied { pending, result }).is_empty());
    let old = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    let (token, out) = h.order(control::Request::Regrant { old, lease: lease(1, 2, 10_000) });
    (h, token, out)
}

fn snapshot(epoch: u64) -> StateItem {
    StateItem::Snapshot(Snapshot {
        bubble: BubbleId(1),
        epoch: Epoch(epoch),
        tick: Tick(40),
        index: 0,
        total: 1,
        bytes: Blob(vec![7; 16]),
    })
}

fn streamed(out: &[Effect]) -> Vec<(String, &'static str)> {
    out.iter()
        .filter_map(|e| match e {
            Effect::ServerStream { server, item } => Some((server.to_string(), item.kind())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_region_moved_off_its_server_takes_its_whole_state_there_under_the_cores_newer_epoch() {
    let (mut h, token, out) = granted();
    // A server stands by under the new epoch, for a snapshot.
    let sent = to_servers(&out);
    let [(ref to, server::Request::Assign { lease, from_snapshot: true, .. })] = sent[..] else {
        panic!("{out:?}")
    };
    assert_eq!((to.as_str(), lease.epoch), ("mtl-gs-1", Epoch(2)));
    assert!(answers(&out).is_empty(), "the Regrant is answered once the region runs there");
    // Then the old server sends its snapshot and deltas, and freezes.
    let (seen, out) = h.answer_servers_seen(out, done);
    let old_lease = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    assert_eq!(
        seen[1..],
        [
            (OLD.to_owned(), server::Request::Copy { lease: old_lease, deltas: true }),
            (OLD.to_owned(), server::Request::Freeze { lease: old_lease }),
        ]
    );
    assert!(answers(&out).is_empty());
    // What the old server writes of the region goes to the new one, in order: nothing to the
    // core's backup.
    let mut out = h.feed(Input::ServerItem { server: n(OLD), item: snapshot(1) });
    let delta =
        Delta { bubble: BubbleId(1), epoch: Epoch(1), tick: Tick(41), bytes: Blob::default() };
    out.extend(h.feed(Input::ServerItem { server: n(OLD), item: StateItem::Delta(delta) }));
    let seal = Seal {
        bubble: BubbleId(1),
        epoch: Epoch(1),
        tick: Tick(41),
        final_delta: Blob::default(),
        last_applied: vec![(PlayerId(5), Seq(9))],
    };
    out.extend(h.feed(Input::ServerItem { server: n(OLD), item: StateItem::Seal(seal) }));
    let to = "mtl-gs-1".to_owned();
    assert_eq!(
        streamed(&out),
        [(to.clone(), "snapshot"), (to.clone(), "delta"), (to.clone(), "seal")]
    );
    assert!(!out.iter().any(|e| matches!(e, Effect::Backup(_))), "{out:?}");
    // The new server's first update under the new epoch: the region lives there. The Regrant
    // is answered and the old server released.
    let out = h.feed(Input::ServerItem { server: n("mtl-gs-1"), item: update(1, 2, 42, &[]) });
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    let released: Vec<_> = to_servers(&out)
        .into_iter()
        .filter(|(_, r)| matches!(r, server::Request::Release { .. }))
        .collect();
    assert_eq!(released, [(OLD.to_owned(), &server::Request::Release { lease: old_lease })]);
    assert_eq!(h.m.stats.regions_moved.load(Ordering::Relaxed), 1);
    // The old server's writes are refused from now on; the renewals name the new epoch.
    h.feed(Input::ServerItem { server: n(OLD), item: update(1, 1, 43, &[]) });
    assert_eq!(h.m.stats.stale_updates_refused.load(Ordering::Relaxed), 1);
    let renewed = h.advance(Duration::from_secs(3)).into_iter().find_map(|e| match e {
        Effect::ToCore { request: control::Request::Renew { leases }, .. } => Some(leases),
        _ => None,
    });
    assert_eq!(renewed, Some(vec![LeaseRef { bubble: BubbleId(1), epoch: Epoch(2) }]));
}

#[test]
fn member_changes_wait_for_the_region_on_its_new_server() {
    let (mut h, _, out) = granted();
    let out = h.answer_servers(out, done);
    // The core's member list comes while the state is moving: it waits...
    let member = member(5);
    let lease = LeaseRef { bubble: BubbleId(1), epoch: Epoch(2) };
    let members = control::Request::Members { lease, players: vec![member], departed: Vec::new() };
    let (_, waiting) = h.order(members);
    assert!(to_servers(&waiting).is_empty(), "{waiting:?}");
    drop(out);
    // ... and the player joins the new server once the region runs there.
    let out = h.feed(Input::ServerItem { server: n("mtl-gs-1"), item: update(1, 2, 42, &[]) });
    let joins: Vec<_> = to_servers(&out)
        .into_iter()
        .filter(|(_, r)| matches!(r, server::Request::Join { .. }))
        .map(|(s, _)| s)
        .collect();
    assert_eq!(joins, ["mtl-gs-1"]);
}

#[test]
fn a_move_given_up_before_the_freeze_leaves_the_region_on_its_server_under_the_new_epoch() {
    let (mut h, token, out) = granted();
    // The standing-by server refuses: the region stays, regranted in place.
    let refuse = |r: &server::Request| match r {
        server::Request::Assign { .. } => Err(Failure::Refused(Fault::new(ErrorCode::Busy, "no"))),
        _ => Ok(server::Reply::Done),
    };
    let (seen, out) = h.answer_servers_seen(out, refuse);
    let old = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    assert!(
        seen.iter()
            .any(|(s, r)| s == OLD
                && *r == server::Request::Regrant { old, lease: lease(1, 2, 10_000) }),
        "{seen:?}"
    );
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    assert!(!seen.iter().any(|(_, r)| matches!(r, server::Request::Freeze { .. })));
    assert_eq!(h.m.stats.region_moves_given_up.load(Ordering::Relaxed), 1);
    assert_eq!(h.m.stats.region_moves_lost.load(Ordering::Relaxed), 0);
}

#[test]
fn a_move_whose_new_server_dies_after_the_freeze_is_lost_here_and_said_so_at_once() {
    let (mut h, token, out) = granted();
    let out = h.answer_servers(out, |r| match r {
        server::Request::Freeze { .. } => Ok(server::Reply::Frozen { tick: Tick(41) }),
        _ => Ok(server::Reply::Done),
    });
    assert!(answers(&out).is_empty());
    let out = h.feed(Input::ServerEnded { server: "mtl-gs-1".into(), why: "killed".into() });
    assert_eq!(answers(&out).len(), 1);
    assert_eq!(answers(&out)[0].0, token);
    assert!(answers(&out)[0].1.is_err());
    let lost = out.iter().find_map(|e| match e {
        Effect::ToCore { request: control::Request::Lost { leases, .. }, .. } => Some(leases),
        _ => None,
    });
    assert_eq!(lost, Some(&vec![LeaseRef { bubble: BubbleId(1), epoch: Epoch(2) }]));
    assert_eq!(h.m.stats.region_moves_lost.load(Ordering::Relaxed), 1);
    // Nothing of it runs here any more: the old, sealed server is released.
    assert!(
        to_servers(&out)
            .iter()
            .any(|(s, r)| s == OLD && matches!(r, server::Request::Release { .. }))
    );
}

#[test]
fn a_move_not_running_in_time_is_given_up() {
    let (mut h, token, out) = granted();
    // The standing-by server never answers; the old one runs on.
    let standing: Vec<Effect> = out;
    drop(standing);
    let out = h.advance(REHOME_WAIT);
    let regranted = to_servers(&out)
        .into_iter()
        .any(|(s, r)| s == OLD && matches!(r, server::Request::Regrant { .. }));
    assert!(regranted, "{out:?}");
    let (_, out) = h.answer_servers_seen(out, done);
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
}

/// Past the move's deadline and one housekeeping period.
const REHOME_WAIT: Duration = Duration::from_millis(4_400);

#[test]
fn an_overfull_server_asks_the_core_to_move_its_lighter_region_with_its_state() {
    let mut h = overfull_server();
    let asked = |out: &[Effect]| -> Vec<LeaseRef> {
        out.iter()
            .filter_map(|e| match e {
                Effect::ToCore { request: control::Request::Rehome { lease }, .. } => Some(*lease),
                _ => None,
            })
            .collect()
    };
    assert!(asked(&h.advance(Duration::from_secs(9))).is_empty(), "over for less than 10 s");
    let out = h.advance(Duration::from_secs(2));
    assert_eq!(asked(&out), [LeaseRef { bubble: BubbleId(2), epoch: Epoch(1) }]);
    // Nothing moves before the core's newer epoch: no server is taken, no player leaves.
    let moving = |r: &server::Request| {
        use server::Request as S;
        matches!(r, S::Assign { .. } | S::Continue { .. } | S::Leave { .. } | S::Freeze { .. })
    };
    assert!(!to_servers(&out).iter().any(|(_, r)| moving(r)), "{out:?}");
    // Asked once: not again while the core's `Regrant` may be on its way...
    assert!(asked(&h.advance(Duration::from_secs(25))).is_empty());
    // ... but a `Regrant` that never comes (a core restarted meanwhile) blocks nothing: past
    // 30 s, the server, still overfull, asks again.
    assert_eq!(asked(&h.advance(Duration::from_secs(10))).len(), 1);
}

/// Chaos `--overlapping` seed 220, servers of 3: a player's state crossed into a zone as it
/// moved off its overfull server, and joined the old server after its snapshot: it was lost
/// there, and the player saw no update again.
#[test]
fn a_state_that_comes_while_the_region_moves_joins_it_on_its_new_server() {
    let (mut h, _, out) = granted();
    let _ = h.answer_servers(out, done);
    h.feed(Input::PeerUp { site: n("HKG"), conn: 98 });
    h.m.transit.await_state(PlayerId(5), BubbleId(1), h.now);
    let token = h.token();
    let request = crossing(5, 1, 40);
    let came = h.feed(Input::PeerRequest { site: n("HKG"), token, request });
    assert!(
        !to_servers(&came).iter().any(|(_, r)| matches!(r, server::Request::Join { .. })),
        "not joined on the server the region leaves: {came:?}"
    );
    let out = h.feed(Input::ServerItem { server: n("mtl-gs-1"), item: update(1, 2, 42, &[]) });
    let joins: Vec<(String, LeaseRef, u64)> = to_servers(&out)
        .into_iter()
        .filter_map(|(s, r)| match r {
            server::Request::Join { lease, player, last_applied, .. } if player.0 == 5 => {
                Some((s, *lease, last_applied.0))
            }
            _ => None,
        })
        .collect();
    let lease = LeaseRef { bubble: BubbleId(1), epoch: Epoch(2) };
    assert_eq!(joins, [("mtl-gs-1".to_owned(), lease, 40)]);
}
