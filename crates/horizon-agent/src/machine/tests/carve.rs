//! The bubbles carved out of a zone, passed on to the zone's server (`carve.rs`).

use super::*;

#[test]
fn the_holes_of_a_zone_go_to_its_server_and_only_under_its_epoch() {
    let mut h = Harness::new(1);
    h.register();
    h.effects();
    h.server_ready("mtl-gs-0");
    let zone = BubbleId(horizon_mesh::ZONE_IDS_FROM);
    let create = control::Request::Create {
        bubble: zone,
        region: region(),
        lease: Lease { bubble: zone, epoch: Epoch(1), ttl_ms: 10_000 },
    };
    let (_, out) = h.order(create);
    h.answer_servers(out, done);
    let hole = Aabb { min: Vec3 { x: 0.0, y: 0.0, z: 0.0 }, max: Vec3 { x: 5.0, y: 5.0, z: 5.0 } };
    let carve = |epoch: u64, holes: Vec<Aabb>| control::Request::Carve {
        lease: LeaseRef { bubble: zone, epoch: Epoch(epoch) },
        holes,
    };
    let (token, out) = h.order(carve(1, vec![hole]));
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    let lease = LeaseRef { bubble: zone, epoch: Epoch(1) };
    assert_eq!(
        to_servers(&out),
        [("mtl-gs-0".to_owned(), &server::Request::Carve { lease, holes: vec![hole] })]
    );
    // Another epoch, another region, too many holes: refused, nothing sent.
    for (order, code) in [
        (carve(2, vec![hole]), ErrorCode::StaleEpoch),
        (
            control::Request::Carve {
                lease: LeaseRef { bubble: BubbleId(9), epoch: Epoch(1) },
                holes: vec![],
            },
            ErrorCode::UnknownBubble,
        ),
        (carve(1, vec![hole; server::MAX_HOLES + 1]), ErrorCode::TooLarge),
    ] {
        let (token, out) = h.order(order);
        assert_eq!(answers(&out), [(token, Err(code))]);
        assert!(to_servers(&out).is_empty(), "{out:?}");
    }
}
