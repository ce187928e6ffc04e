//! Players' states crossing between bubbles, seen from the core: where a crossing is followed
//! and recovered from, and the copies kept for players (`keep.rs`) that a bubble adopts.

use super::*;

/// Two Montrealers and a Hongkonger at x = 0 (a bubble at MTL), a Parisian at 50 km (a bubble
/// at PAR), another Hongkonger at -50 km (a bubble at HKG). Returns those three bubbles.
fn three_bubbles(h: &mut Harness) -> (BubbleId, BubbleId, BubbleId) {
    h.join("MTL", 1, 0.0);
    h.join("MTL", 2, 1.0);
    h.join("HKG", 3, 2.0);
    h.join("PAR", 4, 50_000.0);
    h.join("HKG", 5, -50_000.0);
    for t in 1..=4 {
        h.run_until(t * 3_000);
        h.settle();
    }
    let (at_mtl, site, _) = h.hosted(3);
    assert_eq!(site, "MTL", "the Hongkonger plays with the Montrealers");
    let (at_par, site, _) = h.hosted(4);
    assert_eq!(site, "PAR");
    let (at_hkg, site, _) = h.hosted(5);
    assert_eq!(site, "HKG");
    (at_mtl, at_par, at_hkg)
}

/// Walks player 3 (of HKG) to `x` and lets the brain place them.
fn walk_hongkonger(h: &mut Harness, x: f64, until_ms: u64) {
    h.moved(3, x);
    let start = h.now.as_ms();
    for t in 1..=(until_ms / 1_000) {
        h.run_until(start + t * 1_000);
        h.settle();
    }
}

#[test]
fn a_player_leaving_a_bubble_it_crossed_into_is_followed_at_the_site_it_crossed_from() {
    let mut h = Harness::new();
    let (_, at_par, at_hkg) = three_bubbles(&mut h);
    walk_hongkonger(&mut h, 50_000.0, 15_000);
    assert_eq!(h.hosted(3).0, at_par, "crossed MTL → PAR");
    assert!(h.routes_to("MTL", 3).is_empty(), "a first crossing: nothing to follow at MTL");
    h.log.clear();
    // It leaves the Paris bubble before its state may ever have got there: MTL, where it
    // came from, is told where it plays now, besides its home.
    walk_hongkonger(&mut h, -50_000.0, 15_000);
    assert_eq!(h.hosted(3).0, at_hkg, "crossed PAR → HKG");
    assert_eq!(h.routes_to("MTL", 3), [("route", at_hkg)], "followed at MTL");
    assert!(h.routes_to("HKG", 3).contains(&("route", at_hkg)), "its home is told too");
    assert!(h.routes_to("PAR", 3).is_empty());
}

#[test]
fn a_bubble_restored_asks_every_site_its_players_crossed_from_for_what_they_kept() {
    let mut h = Harness::new();
    let (_, at_par, at_hkg) = three_bubbles(&mut h);
    walk_hongkonger(&mut h, 50_000.0, 15_000);
    assert_eq!(h.hosted(3).0, at_par);
    walk_hongkonger(&mut h, -50_000.0, 15_000);
    assert_eq!(h.hosted(3).0, at_hkg, "MTL → PAR → HKG");
    h.log.clear();
    // The HKG bubble's server is lost before any copy holds the Hongkonger: every site its
    // state came through (PAR, then MTL) is asked for what it kept.
    let (_, _, epoch) = h.hosted(3);
    h.lose("HKG", at_hkg, epoch, None);
    assert_eq!(h.routes_to("PAR", 3), [("recover", at_hkg)]);
    assert_eq!(h.routes_to("MTL", 3), [("recover", at_hkg)]);
}

/// Chaos `--standby --overlapping` seed 88, servers of 3: a player crossed into a Paris zone,
/// then left it for a bubble elsewhere; the zone's server died before any copy held them, so
/// their state died with it, and the zone, restored from its last copy, has none to hand on.
/// The site they crossed from into the zone (which keeps that crossing a while) is told where
/// they play now.
#[test]
fn a_region_restored_sends_what_was_kept_for_a_player_who_left_it_meanwhile_to_where_they_play() {
    let mut h = Harness::new();
    let (_, at_par, at_hkg) = three_bubbles(&mut h);
    walk_hongkonger(&mut h, 50_000.0, 15_000);
    assert_eq!(h.hosted(3).0, at_par, "crossed MTL → PAR");
    walk_hongkonger(&mut h, -50_000.0, 15_000);
    assert_eq!(h.hosted(3).0, at_hkg, "crossed PAR → HKG");
    h.log.clear();
    let epoch = h.core.registry[&at_par].epoch();
    h.lose("PAR", at_par, epoch, None);
    assert_eq!(h.routes_to("MTL", 3), [("recover", at_hkg)]);
}

/// Seed 7340086 of the chaos simulator: a player crossed from a Paris bubble into one at HKG,
/// then the Paris bubble was handed over to MTL, then the HKG bubble was lost before a copy
/// held the player. The crossing is kept at PAR, the site that sent it, not at the Paris
/// bubble's new holder: PAR is the one asked.
#[test]
fn a_restored_bubble_asks_the_site_a_crossing_came_from_even_after_its_bubble_moved_on() {
    let mut h = Harness::new();
    let (_, at_par, at_hkg) = three_bubbles(&mut h);
    walk_hongkonger(&mut h, 50_000.0, 15_000);
    walk_hongkonger(&mut h, -50_000.0, 15_000);
    assert_eq!(h.hosted(3).0, at_hkg, "MTL → PAR → HKG");
    // The bubble it crossed from runs on MTL now (handed over after the player left; here
    // it had ended, so it is put back as if it had moved instead).
    let mtl = h.site("MTL");
    let mut moved = h.core.registry[&h.hosted(4).0].clone();
    moved.moved_to(mtl, moved.epoch());
    let members: Vec<PlayerId> = moved.members().keys().copied().collect();
    for player in members {
        moved.left(player);
    }
    h.core.registry.insert(at_par, moved);
    h.log.clear();
    let (_, _, epoch) = h.hosted(3);
    h.lose("HKG", at_hkg, epoch, None);
    assert_eq!(h.routes_to("PAR", 3), [("recover", at_hkg)], "the site that kept the crossing");
}

/// The Hongkonger crosses from the Montreal bubble into the Paris one; the Paris bubble's
/// server dies before any copy of it holds them. The Paris bubble is restored from its last
/// copy (without them) and adopts them from the Montreal bubble's copy kept for them, which
/// later Montreal copies (without them) did not replace.
#[test]
fn a_bubble_restored_from_a_copy_without_a_member_adopts_it_from_the_copy_kept_for_it() {
    let mut h = Harness::new();
    let (at_mtl, at_par, _) = three_bubbles(&mut h);
    let (_, _, mtl_epoch) = h.hosted(1);
    let (_, _, par_epoch) = h.hosted(4);
    copy_of(&mut h, "PAR", at_par, par_epoch, 5, &[(4, 2)]);
    copy_of(&mut h, "MTL", at_mtl, mtl_epoch, 10, &[(1, 4), (2, 4), (3, 7)]);
    let kept = CopyAt { bubble: at_mtl, epoch: mtl_epoch, tick: 10 };
    assert!(h.log.iter().any(|e| matches!(e, Effect::PinBackup { at, .. } if *at == kept)));
    walk_hongkonger(&mut h, 50_000.0, 15_000);
    assert_eq!(h.hosted(3).0, at_par, "crossed MTL → PAR");
    h.log.clear();
    copy_of(&mut h, "MTL", at_mtl, mtl_epoch, 20, &[(1, 8), (2, 8)]);
    let released =
        |h: &Harness| h.log.iter().any(|e| matches!(e, Effect::UnpinBackup { at } if *at == kept));
    assert!(!released(&h), "still the Hongkonger's best copy");
    let copy = StoredCopy { epoch: par_epoch, tick: 5, bytes: vec![5; 8], parts: Vec::new() };
    h.lose("PAR", at_par, par_epoch, Some(copy));
    let reads: Vec<&Adoption> = h
        .log
        .iter()
        .filter_map(|e| match e {
            Effect::ReadPinned { adopt } => Some(adopt),
            _ => None,
        })
        .collect();
    assert_eq!(reads.len(), 1, "{reads:?}");
    let adopt = reads[0].clone();
    assert_eq!(
        (adopt.bubble, adopt.from, adopt.players.clone()),
        (at_par, kept, vec![PlayerId(3)])
    );
    h.log.clear();
    h.core.handle(Input::PinnedRead { adopt, copy: Some(vec![10; 8]) }, h.now);
    h.drain(|_| {});
    let orders: Vec<_> = h
        .sent()
        .into_iter()
        .filter_map(|(site, _, r)| match r {
            control::Request::Adopt { lease, players, copy } => {
                Some((site, lease.bubble, players, copy))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        orders,
        vec![("PAR".to_string(), at_par, vec![PlayerId(3)], horizon_proto::Blob(vec![10; 8]))]
    );
    assert_eq!(h.core.stats.adoptions.get(h.site("PAR").index()), 1);
    // A copy of the Paris bubble holding the Hongkonger releases the kept one.
    let (_, _, epoch) = h.hosted(3);
    copy_of(&mut h, "PAR", at_par, epoch, 30, &[(3, 9), (4, 5)]);
    assert!(released(&h));
}

/// Seed 9014480: a player's state went back (it never crossed into its bubble, which started
/// it afresh). The first copy that shows it with fewer inputs than the copy kept for it has it
/// adopt its state from that copy.
#[test]
fn a_member_a_copy_shows_behind_its_kept_copy_adopts_it() {
    let mut h = Harness::new();
    let (at_mtl, at_par, _) = three_bubbles(&mut h);
    let (_, _, mtl_epoch) = h.hosted(1);
    copy_of(&mut h, "MTL", at_mtl, mtl_epoch, 10, &[(1, 4), (2, 4), (3, 7)]);
    walk_hongkonger(&mut h, 50_000.0, 15_000);
    assert_eq!(h.hosted(3).0, at_par);
    h.log.clear();
    let (_, _, par_epoch) = h.hosted(4);
    copy_of(&mut h, "PAR", at_par, par_epoch, 50, &[(3, 0), (4, 2)]);
    let kept = CopyAt { bubble: at_mtl, epoch: mtl_epoch, tick: 10 };
    let adopt =
        Adoption { bubble: at_par, epoch: par_epoch, from: kept, players: vec![PlayerId(3)] };
    assert!(h.log.contains(&Effect::ReadPinned { adopt }), "{:?}", h.log);
    // A copy holding it as far as the kept one asks for nothing.
    h.log.clear();
    copy_of(&mut h, "PAR", at_par, par_epoch, 60, &[(3, 7), (4, 3)]);
    assert!(!h.log.iter().any(|e| matches!(e, Effect::ReadPinned { .. })));
}

#[test]
fn a_site_holding_both_bubbles_of_a_crossing_hears_of_the_one_entered_first() {
    let mut h = Harness::new();
    for (player, x) in [(1, 0.0), (2, 1.0)] {
        h.join("MTL", player, x);
    }
    h.run_until(3_000);
    h.settle();
    h.join("MTL", 3, 50_000.0);
    for t in 2..=4 {
        h.run_until(t * 3_000);
        h.settle();
    }
    let (left, site, _) = h.hosted(2);
    let (entered, other, _) = h.hosted(3);
    assert_eq!((site.as_str(), other.as_str()), ("MTL", "MTL"));
    assert!(left < entered, "the bubble left is the older: ids alone would order it first");
    h.log.clear();
    h.moved(2, 50_001.0);
    h.run_until(h.now.as_ms() + 6_000);
    assert_eq!(h.hosted(2).0, entered, "crossed");
    let members: Vec<(BubbleId, bool)> = h
        .sent()
        .into_iter()
        .filter_map(|(site, _, request)| match request {
            control::Request::Members { lease, players, departed } if site == "MTL" => {
                let has = players.iter().any(|m| m.player == PlayerId(2));
                let gone = departed.iter().any(|d| d.player == PlayerId(2));
                (has || gone).then_some((lease.bubble, gone))
            }
            _ => None,
        })
        .collect();
    assert_eq!(members, [(entered, false), (left, true)], "entered first, then left");
}
