//! Groups: the merge distance, borders between ships, NPCs, the preventive merge, a border
//! following a walker.

use super::*;

#[test]
fn players_farther_than_the_merge_distance_never_share_a_bubble() {
    let mut m = mesh(th());
    m.handle_join(join(1, PAR, 10.0, Role::Player, at(0.0))).unwrap();
    m.handle_join(join(2, MTL, 10.0, Role::Player, at(2_100.0))).unwrap();
    m.handle_join(join(3, PAR, 10.0, Role::Player, at(10_000.0))).unwrap();
    m.handle_join(join(4, MTL, 10.0, Role::Player, at(11_900.0))).unwrap();
    run(&mut m, 0, 0);
    let b = |id| m.bubble_of(PlayerId(id)).map(|b| b.id);
    assert_ne!(b(1), b(2));
    assert_eq!(b(3), b(4));
}

/// Two ships 25 km apart at 500 m/s: beyond each other's merge distance (2 km + 15 km), but
/// each claims 15.3 km around itself, so their claims overlap. They keep a bubble each, on their
/// own home sites, with a border between them; they are not joined into one box spanning both
/// (boxes joined that way grew into boxes overlapping more boxes, across whole star systems).
#[test]
fn ships_whose_margins_overlap_beyond_the_merge_distance_get_a_border_not_a_shared_bubble() {
    // The core at HKG: PAR holds bubbles like MTL (see `sites_cored_at`).
    let mut m = mesh_cored_at(th(), HKG);
    let mut a = join(1, PAR, 10.0, Role::Pilot, at(0.0));
    a.velocity = Vec3::new(0.0, 500.0, 0.0);
    let mut b = join(2, MTL, 10.0, Role::Pilot, at(25_000.0));
    b.velocity = Vec3::new(0.0, -500.0, 0.0);
    m.handle_join(a).unwrap();
    m.handle_join(b).unwrap();
    run(&mut m, 0, 0);
    let (ba, bb) = (m.bubble_of(PlayerId(1)).unwrap(), m.bubble_of(PlayerId(2)).unwrap());
    assert_ne!(ba.id, bb.id);
    assert_eq!((ba.site, bb.site), (site(PAR), site(MTL)));
    assert!(!ba.bounds.overlaps(&bb.bounds), "{:?} {:?}", ba.bounds, bb.bounds);
    // The border runs midway; elsewhere each keeps its full margin.
    assert_eq!((ba.bounds.max.x, bb.bounds.min.x), (12_500.0, 12_500.0));
    assert_eq!((ba.bounds.min.x, bb.bounds.max.x), (-15_300.0, 40_300.0));
}

#[test]
fn npcs_never_get_a_bubble_nor_a_site() {
    let mut m = mesh(th());
    for id in 1..=20 {
        m.handle_join(join(id, MTL, 10.0, Role::Npc, at(id as f64))).unwrap();
    }
    assert!(run(&mut m, 0, 30).is_empty());
    assert_eq!(m.site_of(PlayerId(1)), None);
}

#[test]
fn preventive_merge_happens_before_the_groups_meet() {
    // The core at HKG: PAR holds bubbles like MTL (see `sites_cored_at`).
    let mut m = mesh_cored_at(th(), HKG);
    let mut a = join(1, PAR, 10.0, Role::Player, at(0.0));
    a.velocity = Vec3::new(5.0, 0.0, 0.0);
    m.handle_join(a).unwrap();
    for id in 2..=3 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(5_000.0 + id as f64))).unwrap();
    }
    let mut merged_at = None;
    for t in (0..=1_000).step_by(5) {
        let now = Time::from_secs(t);
        let x = 5.0 * t as f64;
        m.handle_update(PlayerId(1), &PlayerUpdate { position: Some(at(x)), ..Default::default() })
            .unwrap();
        renew_all(&mut m, now, &[]);
        m.handle_timeout(now);
        while let Some(c) = poll(&mut m) {
            if let Command::Merge { from_site, into_site, .. } = c {
                assert_eq!((from_site, into_site), (site(PAR), site(MTL)));
                merged_at.get_or_insert(x);
            }
        }
    }
    let x = merged_at.expect("the groups merged");
    let gap = 5_000.0 - x;
    assert!(gap > 300.0 && gap <= 2_000.0 + 5.0 * 30.0, "merged {gap} m before meeting");
}

#[test]
fn the_border_moves_with_a_walker_and_always_contains_the_players() {
    let mut m = mesh(th());
    let mut p = join(1, MTL, 10.0, Role::Player, at(0.0));
    p.velocity = Vec3::new(1.5, 0.0, 0.0);
    m.handle_join(p).unwrap();
    let mut borders = 0;
    let mut bubble_ids = std::collections::BTreeSet::new();
    for t in (0..=1_200).step_by(5) {
        let now = Time::from_secs(t);
        let pos = at(1.5 * t as f64);
        m.handle_update(PlayerId(1), &PlayerUpdate { position: Some(pos), ..Default::default() })
            .unwrap();
        renew_all(&mut m, now, &[]);
        m.handle_timeout(now);
        while let Some(c) = poll(&mut m) {
            borders += matches!(c, Command::Border { .. }) as u32;
        }
        let b = m.bubble_of(PlayerId(1)).unwrap();
        assert!(b.bounds.contains(pos), "player outside their bubble at {t} s");
        bubble_ids.insert(b.id);
    }
    assert!(borders >= 2, "the border should have moved ({borders})");
    assert_eq!(bubble_ids.len(), 1, "the bubble's logical id never changes");
}
