//! The core's ordered lane: numbered orders served one at a time, in their order.

use super::*;

const LANE: u64 = 77;

fn in_order(seq: u64, order: control::Request) -> control::Request {
    in_lane(LANE, seq, order)
}

fn in_lane(lane: u64, seq: u64, order: control::Request) -> control::Request {
    control::Request::InOrder { lane, seq, order: Box::new(order) }
}

fn members(b: u64) -> control::Request {
    let lease = LeaseRef { bubble: BubbleId(b), epoch: Epoch(1) };
    control::Request::Members { lease, players: Vec::new(), departed: Vec::new() }
}

fn ready_harness() -> Harness {
    let mut h = Harness::new(1);
    h.effects();
    h.server_ready("mtl-gs-0");
    h
}

#[test]
fn orders_that_overtake_each_other_on_the_way_are_served_in_their_order_each_after_the_last_answer()
{
    let mut h = ready_harness();
    // The bubble's members come first (separate streams): they wait for their turn.
    let (second, out) = h.order(in_order(1, members(1)));
    assert!(answers(&out).is_empty() && to_servers(&out).is_empty(), "{out:?}");
    // The creation is served; its members wait while its server loads the region...
    let (first, out) = h.order(in_order(0, create(1)));
    assert!(matches!(to_servers(&out)[..], [(_, server::Request::Assign { .. })]), "{out:?}");
    assert!(answers(&out).is_empty());
    // ... and go once it is answered: the bubble exists by then (served at once, the members
    // would be refused for a bubble unknown here).
    let out = h.answer_servers(out, done);
    assert_eq!(
        answers(&out),
        [(first, Ok(control::Reply::Done)), (second, Ok(control::Reply::Done))]
    );
}

#[test]
fn an_order_unanswered_for_5_s_lets_the_next_ones_go_and_is_counted() {
    let mut h = ready_harness();
    let (_, out) = h.order(in_order(0, create(1)));
    assert_eq!(to_servers(&out).len(), 1, "the server is asked, and never answers");
    let (next, out) = h.order(in_order(1, create(2)));
    assert!(answers(&out).is_empty() && to_servers(&out).is_empty());
    assert!(answers(&h.advance(Duration::from_secs(4))).is_empty());
    // The second creation is served now, beside the first (a server has seats for both).
    let out = h.advance(Duration::from_millis(1200));
    assert!(matches!(to_servers(&out)[..], [(_, server::Request::Assign { .. })]), "{out:?}");
    assert_eq!(h.m.stats.orders_overtaken.load(Ordering::Relaxed), 1);
    let out = h.answer_servers(out, done);
    assert_eq!(answers(&out), [(next, Ok(control::Reply::Done))]);
}

#[test]
fn an_order_twice_or_too_far_ahead_is_refused_and_a_new_lane_starts_its_own_count() {
    let mut h = ready_harness();
    let (t0, out) = h.order(in_order(0, members(9)));
    assert_eq!(answers(&out), [(t0, Err(ErrorCode::UnknownBubble))]);
    let (again, out) = h.order(in_order(0, members(9)));
    assert_eq!(answers(&out), [(again, Err(ErrorCode::Conflict))]);
    let (far, out) = h.order(in_order(control::MAX_IN_ORDER + 1, members(9)));
    assert_eq!(answers(&out), [(far, Err(ErrorCode::Busy))]);
    assert_eq!(h.m.stats.orders_refused.load(Ordering::Relaxed), 2);
    // Order 2 waits for 1, which never comes: the core reconnected, its new lane counts from 0.
    let (stranded, out) = h.order(in_order(2, members(9)));
    assert!(answers(&out).is_empty());
    let (fresh, out) = h.order(in_lane(LANE + 1, 0, members(9)));
    assert_eq!(
        answers(&out),
        [(stranded, Err(ErrorCode::NotReady)), (fresh, Err(ErrorCode::UnknownBubble))]
    );
    // A lost core connection drops what waits too.
    let (waiting, _) = h.order(in_lane(LANE + 1, 2, members(9)));
    let out = h.feed(Input::CoreDown { error: "gone".into() });
    assert_eq!(answers(&out), [(waiting, Err(ErrorCode::NotReady))]);
}

#[test]
fn orders_kept_behind_one_being_served_are_bounded() {
    let mut h = ready_harness();
    // The first one's server never answers: the ones after it wait, in their turn.
    h.order(in_order(0, create(1)));
    for seq in 1..=control::MAX_IN_ORDER {
        let (_, out) = h.order(in_order(seq, members(1)));
        assert!(answers(&out).is_empty(), "order {seq}: {out:?}");
    }
    let (over, out) = h.order(in_order(control::MAX_IN_ORDER + 1, members(1)));
    assert_eq!(answers(&out), [(over, Err(ErrorCode::Busy))]);
}

#[test]
fn an_in_order_inside_an_in_order_is_refused_in_its_turn() {
    let mut h = ready_harness();
    let (token, out) = h.order(in_order(0, in_order(1, members(1))));
    assert_eq!(answers(&out), [(token, Err(ErrorCode::Malformed))]);
    // The lane goes on.
    let (next, out) = h.order(in_order(1, create(1)));
    let out = h.answer_servers(out, done);
    assert_eq!(answers(&out), [(next, Ok(control::Reply::Done))]);
}
