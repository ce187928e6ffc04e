//! A bubble spread over servers of its site (design.md §4): the `Parts` order, and what the
//! core does when its holder could not make the spread.

use super::*;

/// Five Montrealers 3 m apart, for servers of 4 players: their bubble on MTL is cut at the
/// median once its load has been counted. Returns the bubble and its epoch.
fn crowded_bubble(h: &mut Harness) -> (BubbleId, u64) {
    let crowd: Vec<(u64, f64)> = (1..=5).map(|p| (p, p as f64 * 3.0)).collect();
    for &(p, x) in &crowd {
        h.join("MTL", p, x);
    }
    h.run_until(6_000);
    let (bubble, site, epoch) = h.hosted(1);
    assert_eq!(site, "MTL");
    h.ack_all("MTL");
    h.request("MTL", positions(bubble, epoch, &crowd)).unwrap();
    (bubble, epoch)
}

fn parts_orders(h: &Harness) -> Vec<(OrderId, usize)> {
    h.sent()
        .into_iter()
        .filter_map(|(site, order, r)| match r {
            control::Request::Parts { parts, .. } if site == "MTL" => Some((order, parts.len())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_spread_its_holder_could_not_make_is_sent_again_at_the_next_tick() {
    // Split after 20 samples (four ticks), so that the bubble's `Create` is answered first.
    let th = Thresholds { players_per_server: 4, split_after_samples: 20, ..Thresholds::default() };
    let mut h = Harness::with(th);
    let (bubble, epoch) = crowded_bubble(&mut h);
    let renew = |h: &mut Harness| {
        let leases = vec![LeaseRef { bubble, epoch: Epoch(epoch) }];
        h.request("MTL", control::Request::Renew { leases }).unwrap();
    };
    let mut first = None;
    for t in (7..40).map(|s| s * 1_000) {
        renew(&mut h);
        h.run_until(t);
        if let Some(&o) = parts_orders(&h).first() {
            first = Some(o);
            break;
        }
    }
    let (order, parts) = first.expect("the crowded bubble spread over servers");
    assert_eq!(parts, 2, "five players for servers of four: two parts");
    // The agent found no server in time.
    let result = Err(Failure::TimedOut { ms: 4_000 });
    h.core.handle(Input::OrderDone { order, result }, h.now);
    h.drain(|_| {});
    assert!(h.core.registry[&bubble].parts().is_empty(), "no part is believed held");
    h.log.clear();
    let next = h.now.as_ms() + 5_000;
    renew(&mut h);
    h.run_until(next);
    let again = parts_orders(&h);
    assert_eq!(again.len(), 1, "sent again at the next tick: {again:?}");
    assert_eq!(again[0].1, 2);
    // Made this time: not sent again.
    h.ack_all("MTL");
    h.log.clear();
    let next = h.now.as_ms() + 5_000;
    renew(&mut h);
    h.run_until(next);
    assert!(parts_orders(&h).is_empty(), "{:?}", h.sent());
    assert_eq!(h.core.registry[&bubble].parts().len(), 2);
}

#[test]
fn a_crowd_on_one_point_is_counted_over_capacity_by_site() {
    let mut h = Harness::with(Thresholds { players_per_server: 4, ..Thresholds::default() });
    let crowd: Vec<(u64, f64)> = (1..=5).map(|p| (p, 0.0)).collect();
    for &(p, x) in &crowd {
        h.join("MTL", p, x);
    }
    h.run_until(6_000);
    let (bubble, _, epoch) = h.hosted(1);
    h.ack_all("MTL");
    h.request("MTL", positions(bubble, epoch, &crowd)).unwrap();
    let leases = vec![LeaseRef { bubble, epoch: Epoch(epoch) }];
    h.request("MTL", control::Request::Renew { leases }).unwrap();
    h.run_until(16_000);
    // Five players for servers of four, all on one point: no cut leaves a player on each side.
    assert!(parts_orders(&h).is_empty(), "{:?}", h.sent());
    let text = metrics_text(&mut h.core);
    assert!(text.contains("horizon_core_regions_over_capacity{site=\"MTL\"} 1"), "{text}");
    assert!(text.contains("horizon_core_regions_over_capacity{site=\"PAR\"} 0"), "{text}");
}
