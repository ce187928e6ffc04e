//! Placement trusts only the game servers: where a client says it stands moves nothing; where
//! the server simulating a player puts them does.

use proptest::prelude::*;

use super::*;

/// Two Parisians in a Paris bubble at 50 km, three Montrealers in a Montreal one at 0.
fn two_groups(h: &mut Harness) -> (BubbleId, BubbleId) {
    for (player, x) in [(10, 50_000.0), (11, 50_001.0)] {
        h.join("PAR", player, x);
    }
    for (player, x) in [(1, 0.0), (2, 1.0), (3, 2.0)] {
        h.join("MTL", player, x);
    }
    for t in 1..=4 {
        h.run_until(t * 3_000);
        h.settle();
    }
    let (paris, site, _) = h.hosted(10);
    assert_eq!(site, "PAR");
    let (montreal, site, _) = h.hosted(1);
    assert_eq!(site, "MTL");
    assert_ne!(paris, montreal);
    (paris, montreal)
}

/// The brain runs `secs` more seconds with healthy agents.
fn run_for(h: &mut Harness, secs: u64) {
    let start = h.now.as_ms();
    for t in 1..=secs {
        h.run_until(start + t * 1_000);
        h.settle();
    }
}

fn members(h: &Harness, region: BubbleId) -> Vec<u64> {
    h.core.registry[&region].members().keys().map(|p| p.0).collect()
}

#[test]
fn where_the_server_puts_the_montrealers_next_to_the_parisians_they_play_together() {
    // The positive case of the property below: the same move, said by the server simulating
    // the Montrealers, is what placement follows.
    let mut h = Harness::new();
    let (paris, montreal) = two_groups(&mut h);
    let montreal_epoch = h.hosted(1).2;
    let next_to_paris = [(1, 50_002.0), (2, 50_003.0), (3, 50_004.0)];
    h.request("MTL", positions(montreal, montreal_epoch, &next_to_paris)).unwrap();
    run_for(&mut h, 30);
    let (together, _, _) = h.hosted(1);
    assert_eq!(h.hosted(10).0, together, "one region for the five of them");
    assert!(together == paris || together == montreal || !h.core.registry.contains(&paris));
    assert_eq!(members(&h, together), vec![1, 2, 3, 10, 11]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Montrealers claiming, again and again, to stand anywhere near the Parisians (in their
    /// home agent's samples, which carry what clients say) pull nobody anywhere: both bubbles
    /// keep their site and their members.
    #[test]
    fn what_clients_claim_moves_no_bubble(
        claims in proptest::collection::vec((-5.0f64..5.0, -5.0f64..5.0), 3),
        rounds in 1usize..6,
    ) {
        let mut h = Harness::new();
        let (paris, montreal) = two_groups(&mut h);
        for _ in 0..rounds {
            let samples = claims
                .iter()
                .enumerate()
                .map(|(i, &(dx, dy))| {
                    let mut s = sample(1 + i as u64, 50_000.0 + dx);
                    s.pos.y = dy;
                    s.vel = Vec3 { x: dx, y: dy, z: 0.0 };
                    s
                })
                .collect();
            h.report("MTL", Vec::new(), samples, Vec::new());
            run_for(&mut h, 6);
        }
        prop_assert!(h.core.registry.contains(&paris), "the Paris bubble ended");
        prop_assert_eq!(h.hosted(10).0, paris);
        prop_assert_eq!(h.hosted(10).1, "PAR");
        prop_assert_eq!(h.hosted(1).0, montreal);
        prop_assert_eq!(h.hosted(1).1, "MTL");
        prop_assert_eq!(members(&h, paris), vec![10, 11]);
        prop_assert_eq!(members(&h, montreal), vec![1, 2, 3]);
    }
}
