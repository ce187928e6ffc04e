//! The placement policies compared: all-core SMD, creator, one-shot, SMD-G.

use super::*;

/// 1 PAR player, then 3 MTL players joining them: SMD-G moves the bubble to MTL after the dwell.
fn three_mtl_join_one_par(placement: Placement) -> (Mesh, Vec<(Time, Command)>) {
    let mut m = mesh_placing(th(), placement);
    m.handle_join(join(1, PAR, 10.0, Role::Player, at(0.0))).unwrap();
    let mut cmds = run(&mut m, 0, 0);
    for id in 2..=4 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64 * 10.0))).unwrap();
    }
    cmds.extend(run(&mut m, 5, 600));
    (m, cmds)
}

fn created_on(cmds: &[(Time, Command)]) -> Vec<usize> {
    cmds.iter()
        .filter_map(|(_, c)| match c {
            Command::Create { site: s, .. } => Some(s.index()),
            _ => None,
        })
        .collect()
}

#[test]
fn all_core_is_smd_everyone_plays_in_the_core_sites_zones_and_no_bubble_is_carved() {
    let (m, cmds) = three_mtl_join_one_par(Placement::AllCore);
    assert!(moves(&cmds).is_empty());
    assert!(created_on(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(m.site_of(PlayerId(2)), Some(site(PAR)));
    let zone = m.zone_of(PlayerId(2)).unwrap();
    assert_eq!((zone.players, zone.id.0 >= horizon_mesh::ZONE_IDS_FROM), (4, true));
    let mut m = mesh_placing(th(), Placement::AllCore);
    m.handle_join(join(1, HKG, 10.0, Role::Player, at(0.0))).unwrap();
    m.place_arrival(PlayerId(1), Time::ZERO);
    let cmds = run(&mut m, 0, 300);
    assert!(created_on(&cmds).is_empty());
    assert!(m.zone_of(PlayerId(1)).is_some());
    assert_eq!(m.latency_of(PlayerId(1)), Some(195.0), "over the cap, and it stays");
}

#[test]
fn creator_keeps_the_first_players_home_whoever_joins() {
    let (m, cmds) = three_mtl_join_one_par(Placement::Creator);
    assert_eq!(created_on(&cmds), vec![PAR]);
    assert!(moves(&cmds).is_empty());
    assert_eq!(m.latency_of(PlayerId(2)), Some(95.0), "the majority pays");
    // Arriving together, the lowest id (the first to arrive) decides, not the majority.
    let mut m = mesh_placing(th(), Placement::Creator);
    m.handle_join(join(1, HKG, 10.0, Role::Player, at(0.0))).unwrap();
    for id in 2..=4 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64))).unwrap();
    }
    assert_eq!(created_on(&run(&mut m, 0, 0)), vec![HKG]);
}

#[test]
fn one_shot_scores_once_at_creation_and_never_again() {
    // Arriving together: scored like SMD-G (the majority's site)...
    let mut m = mesh_placing(th(), Placement::OneShot);
    m.handle_join(join(1, HKG, 10.0, Role::Player, at(0.0))).unwrap();
    for id in 2..=4 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64))).unwrap();
    }
    assert_eq!(created_on(&run(&mut m, 0, 0)), vec![MTL]);
    // ... but a group that changes afterwards is never re-placed.
    let (m, cmds) = three_mtl_join_one_par(Placement::OneShot);
    assert!(moves(&cmds).is_empty());
    assert_eq!(m.site_of(PlayerId(2)), Some(site(PAR)));
    // SMD-G re-places it: the Parisian played in a zone of the core site; the group's bubble is
    // carved out of it for MTL as soon as the Montrealers join.
    let (m, cmds) = three_mtl_join_one_par(Placement::Smdg);
    assert!(moves(&cmds).is_empty());
    let carved = |c: &Command| {
        matches!(c, Command::Create { reason: CreateReason::Carve, site: s, previous_site: Some(p), .. }
            if *s == site(MTL) && *p == site(PAR))
    };
    assert_eq!(cmds.iter().filter(|(_, c)| carved(c)).count(), 1, "{cmds:?}");
    assert_eq!(m.site_of(PlayerId(2)), Some(site(MTL)));
}

#[test]
fn creator_merges_into_the_oldest_bubble_where_smdg_scores_the_union() {
    // Two MTL walking to one PAR player who arrived first: the merge keeps PAR for `creator`,
    // MTL (the union's best of the two sites) for SMD-G and one-shot.
    for (placement, expected) in
        [(Placement::Creator, PAR), (Placement::Smdg, MTL), (Placement::OneShot, MTL)]
    {
        let mut m = mesh_placing(th(), placement);
        m.handle_join(join(1, PAR, 10.0, Role::Player, at(0.0))).unwrap();
        run(&mut m, 0, 0);
        for id in 2..=3 {
            m.handle_join(join(id, MTL, 10.0, Role::Player, at(4_000.0 + id as f64))).unwrap();
        }
        run(&mut m, 5, 5);
        for t in (10..=600).step_by(5) {
            let x = (4_000.0 - 10.0 * t as f64).max(50.0);
            for id in 2..=3 {
                let u = PlayerUpdate { position: Some(at(x + id as f64)), ..Default::default() };
                m.handle_update(PlayerId(id), &u).unwrap();
            }
            run(&mut m, t, t);
        }
        assert_eq!(m.site_of(PlayerId(1)), Some(site(expected)), "{placement:?}");
        assert_eq!(m.site_of(PlayerId(2)), Some(site(expected)), "{placement:?}");
    }
}
