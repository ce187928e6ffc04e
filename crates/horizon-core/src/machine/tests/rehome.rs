//! A site moving a region to another of its servers with its state (`rehome.rs`): the core
//! fences the old server off with a newer epoch, sent in the lane's order.

use super::*;

fn rehome(h: &mut Harness, site: &str, bubble: BubbleId, epoch: u64) -> Result<(), ErrorCode> {
    let lease = LeaseRef { bubble, epoch: Epoch(epoch) };
    h.request(site, control::Request::Rehome { lease }).map(|_| ()).map_err(|f| f.code)
}

#[test]
fn a_region_moving_to_another_server_of_its_site_is_regranted_there_under_a_newer_epoch() {
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    h.log.clear();
    assert_eq!(rehome(&mut h, "MTL", bubble, epoch), Ok(()));
    // The holder is told the newer epoch by a `Regrant`, on its ordered lane.
    let regrant = h.sent().into_iter().find_map(|(s, _, r)| match r {
        control::Request::Regrant { old, lease } if s == "MTL" => Some((old, lease)),
        _ => None,
    });
    let (old, lease) = regrant.expect("a Regrant to MTL");
    assert_eq!(old, LeaseRef { bubble, epoch: Epoch(epoch) });
    assert!(lease.epoch.0 > epoch && lease.bubble == bubble);
    // The registry, the brain and the store hold it under the new epoch, at the same site.
    assert_eq!(h.hosted(1), (bubble, "MTL".to_owned(), lease.epoch.0));
    assert_eq!(h.core.mesh.bubble_by_id(bubble).map(|b| b.epoch.0), Some(lease.epoch.0));
    assert_eq!(h.stored.leases[&bubble.0].epoch, lease.epoch.0);
    // A renewal of the old epoch crossing the Regrant is neither granted nor refused; the new
    // one is granted.
    let renew = |h: &mut Harness, e: u64| match h.request(
        "MTL",
        control::Request::Renew { leases: vec![LeaseRef { bubble, epoch: Epoch(e) }] },
    ) {
        Ok(control::Reply::Renewed { granted, refused, .. }) => (granted.len(), refused.len()),
        other => panic!("{other:?}"),
    };
    assert_eq!(renew(&mut h, epoch), (0, 0));
    assert_eq!(renew(&mut h, lease.epoch.0), (1, 0));
    // The old epoch is fenced off for good: asking with it again is refused.
    assert_eq!(rehome(&mut h, "MTL", bubble, epoch), Err(ErrorCode::StaleEpoch));
}

#[test]
fn only_the_holder_moves_a_region_and_not_while_it_changes() {
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    assert_eq!(rehome(&mut h, "PAR", bubble, epoch), Err(ErrorCode::StaleEpoch));
    assert_eq!(rehome(&mut h, "MTL", BubbleId(77), 1), Err(ErrorCode::UnknownBubble));
    let mut h = Harness::cored_at("HKG");
    let (bubble, source) = handover_at_its_freeze(&mut h);
    h.log.clear();
    assert_eq!(rehome(&mut h, "MTL", bubble, source), Err(ErrorCode::Conflict));
    assert!(h.sent().iter().all(|(_, _, r)| !matches!(r, control::Request::Regrant { .. })));
}

#[test]
fn a_zone_moves_to_another_server_of_the_core_site_as_a_bubble_does() {
    let mut h = Harness::new();
    // Two joining together play in their zone until the tick.
    h.report("MTL", vec![sample(1, 0.0), sample(2, 50.0)], Vec::new(), Vec::new());
    let (zone, site, epoch) = h.hosted(1);
    assert!(zone.is_zone() && site == "PAR");
    h.ack_all("PAR");
    h.log.clear();
    assert_eq!(rehome(&mut h, "PAR", zone, epoch), Ok(()));
    let newer = h.core.mesh.zone_by_id(zone).map(|z| z.epoch.0);
    assert!(newer.is_some_and(|e| e > epoch), "{newer:?}");
    assert_eq!(h.hosted(1).2, newer.unwrap());
}
