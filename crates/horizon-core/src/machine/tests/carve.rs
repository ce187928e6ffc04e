//! A zone's holder hears the bubbles carved out of it (`carve.rs`).

use super::*;

/// Every `Carve` sent to `site` for `zone`, in order.
fn carves(h: &Harness, site: &str, zone: BubbleId) -> Vec<Vec<horizon_proto::Aabb>> {
    h.sent()
        .into_iter()
        .filter_map(|(s, _, r)| match r {
            control::Request::Carve { lease, holes } if s == site && lease.bubble == zone => {
                Some(holes)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_zones_server_is_told_the_bubbles_carved_out_of_it_as_they_come_and_go() {
    let mut h = Harness::new();
    // Two Montrealers joining together play in the world's zone, on PAR.
    h.report("MTL", vec![sample(1, 0.0), sample(2, 50.0)], Vec::new(), Vec::new());
    let (zone, _, epoch) = h.hosted(1);
    assert!(zone.is_zone());
    h.ack_all("PAR");
    assert!(carves(&h, "PAR", zone).is_empty(), "no bubble yet: nothing to tell");
    // The tick gives them a bubble on MTL, inside the zone's box: PAR hears its box.
    h.log.clear();
    h.run_until(5_000);
    let bubble = h.core.mesh.bubbles().next().map(|b| (b.id, b.bounds)).expect("a bubble");
    assert_eq!(carves(&h, "PAR", zone), [vec![bubble.1]]);
    let told = h.sent().into_iter().find_map(|(_, _, r)| match r {
        control::Request::Carve { lease, .. } => Some(lease),
        _ => None,
    });
    assert_eq!(told, Some(LeaseRef { bubble: zone, epoch: Epoch(epoch) }));
    // Told once: nothing more while it stays.
    h.ack_all("MTL");
    h.ack_all("PAR");
    h.log.clear();
    h.run_until(6_000);
    assert!(carves(&h, "PAR", zone).is_empty());
    // PAR's agent registers again, still holding the zone (its servers may be new): told
    // again.
    h.log.clear();
    let site = h.site("PAR");
    let conn = 900;
    h.core.handle(Input::AgentConnected { site, conn }, h.now);
    let held = [LeaseRef { bubble: zone, epoch: Epoch(epoch) }];
    let servers = vec![server("PAR-0", &[zone])];
    let token = 9_999;
    let request = register("PAR", servers, &held);
    h.core.handle(Input::AgentRequest { site, conn, token, request }, h.now);
    h.drain(|_| {});
    assert_eq!(carves(&h, "PAR", zone).last(), Some(&vec![bubble.1]));
    // The players leave: the bubble ends, and the zone is whole again.
    h.log.clear();
    h.report("MTL", Vec::new(), Vec::new(), vec![PlayerId(1), PlayerId(2)]);
    h.ack_all("MTL");
    h.ack_all("PAR");
    for t in [10_000, 20_000, 40_000] {
        h.renew_zones();
        h.run_until(t);
        h.ack_all("MTL");
        h.ack_all("PAR");
    }
    assert!(h.core.mesh.bubble_by_id(bubble.0).is_none(), "the bubble ended");
    assert_eq!(carves(&h, "PAR", zone).last(), Some(&vec![]));
}
