//! Fixed delegations: a region on its site whatever the homes, failing over and coming back.

use super::*;

/// Fixed delegations (stage 3): a box of world 0 delegated to MTL, everything else in zones.
fn delegated_to_mtl() -> Mesh {
    let mut m = mesh_placing(th(), Placement::Fixed);
    let bounds = horizon_mesh::Aabb {
        min: Vec3::new(-1_000.0, -1e3, -1e3),
        max: Vec3::new(1_000.0, 1e3, 1e3),
    };
    let delegation =
        horizon_mesh::Delegation { world: WorldId(0), bounds: Some(bounds), site: site(MTL) };
    m.set_delegations(vec![delegation]).unwrap();
    m
}

#[test]
fn a_fixed_delegation_is_one_region_on_its_site_whatever_its_players_homes() {
    let mut m = delegated_to_mtl();
    let region = horizon_mesh::Aabb {
        min: Vec3::new(-1_000.0, -1e3, -1e3),
        max: Vec3::new(1_000.0, 1e3, 1e3),
    };
    // Created at start, with nobody in it yet: the delegation's box, on its site.
    let cmds = run(&mut m, 0, 0);
    let created: Vec<_> = cmds
        .iter()
        .filter_map(|(_, c)| match c {
            Command::Create {
                site: s, bounds, players, reason: CreateReason::Delegation, ..
            } => Some((*s, *bounds, players.len())),
            _ => None,
        })
        .collect();
    assert_eq!(created, [(site(MTL), region, 0)], "{cmds:?}");
    // Parisians in two groups far apart inside the delegated box (scoring would pick PAR),
    // and one far outside it.
    for id in 1..=3 {
        m.handle_join(join(id, PAR, 10.0, Role::Player, at(id as f64 * 10.0))).unwrap();
    }
    m.handle_join(join(4, HKG, 10.0, Role::Player, at(900.0))).unwrap();
    m.handle_join(join(9, PAR, 10.0, Role::Player, at(50_000.0))).unwrap();
    run(&mut m, 1, 60);
    let b = m.bubble_of(PlayerId(1)).expect("the delegation's players are in its region").clone();
    assert_eq!((b.site, b.bounds), (site(MTL), region), "its site, not the scoring's; its box");
    for id in [3, 4] {
        assert_eq!(
            m.bubble_of(PlayerId(id)).map(|x| x.id),
            Some(b.id),
            "one region, not a group's"
        );
    }
    assert!(m.bubble_of(PlayerId(9)).is_none(), "outside any delegation: the zone");
    assert_eq!(m.bubbles().count(), 1);
    // The group walks out of the box: they cross into the zone around them; the region stays,
    // with its box, on its site, whoever is in it.
    for id in 1..=4 {
        let update =
            PlayerUpdate { position: Some(at(20_000.0 + id as f64)), ..PlayerUpdate::default() };
        m.handle_update(PlayerId(id), &update).unwrap();
    }
    let cmds = run(&mut m, 65, 200);
    assert!(!cmds.iter().any(|(_, c)| matches!(c, Command::Delete { .. })), "{cmds:?}");
    assert!((1..=4).all(|id| m.bubble_of(PlayerId(id)).is_none()), "they play in the zone");
    let kept: Vec<_> = m.bubbles().map(|x| (x.id, x.site, x.bounds)).collect();
    assert_eq!(kept, [(b.id, site(MTL), region)]);
    // Back in the box, they cross into it again: no second region.
    let update = PlayerUpdate { position: Some(at(5.0)), ..PlayerUpdate::default() };
    m.handle_update(PlayerId(1), &update).unwrap();
    run(&mut m, 201, 210);
    assert_eq!(m.bubble_of(PlayerId(1)).map(|x| x.id), Some(b.id));
    assert_eq!(m.bubbles().count(), 1);
}

#[test]
fn a_player_spawning_in_a_running_delegation_enters_its_region_at_once() {
    let mut m = delegated_to_mtl();
    run(&mut m, 0, 0);
    let region = m.bubbles().next().expect("the delegation's region").id;
    m.handle_join(join(1, HKG, 10.0, Role::Player, at(0.0))).unwrap();
    m.place_arrival(PlayerId(1), Time::from_secs(1));
    let enter = std::iter::from_fn(|| m.poll_command()).find_map(|c| match c {
        Command::Enter { bubble, site: s, from_site: None, players } => Some((bubble, s, players)),
        _ => None,
    });
    assert_eq!(enter, Some((region, site(MTL), vec![PlayerId(1)])));
}

#[test]
fn a_delegations_bubble_fails_over_to_the_core_and_goes_back_to_its_site_when_it_can_host() {
    let mut m = delegated_to_mtl();
    m.handle_join(join(1, HKG, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 60);
    assert_eq!(m.bubble_of(PlayerId(1)).unwrap().site, site(MTL));
    // MTL cut from the core: its lease runs out, the bubble fails over to the core site (not
    // HKG, the player's home and the scoring's choice).
    m.handle_site_link(site(MTL), false);
    let seen = run_silent(&mut m, 61, 100, site(MTL));
    let failover = seen.iter().find_map(|(_, c)| match c {
        Command::Move { to, reason: MoveReason::Failover, .. } => Some(*to),
        _ => None,
    });
    assert_eq!(failover, Some(site(PAR)), "{seen:?}");
    assert_eq!(m.bubble_of(PlayerId(1)).unwrap().site, site(PAR));
    // MTL back: the bubble goes home at the next tick, by a handover.
    m.handle_site_link(site(MTL), true);
    let cmds = run(&mut m, 105, 110);
    let back = cmds.iter().find_map(|(_, c)| match c {
        Command::Move { to, reason: MoveReason::Delegation, .. } => Some(*to),
        _ => None,
    });
    assert_eq!(back, Some(site(MTL)), "{cmds:?}");
    assert_eq!(m.bubble_of(PlayerId(1)).unwrap().site, site(MTL));
}

#[test]
fn a_delegation_waits_for_a_server_on_its_site_and_its_empty_region_fails_over_and_comes_back() {
    let mut m = delegated_to_mtl();
    // No server ready on MTL: nothing is created, the delegation is counted waiting and the
    // player inside its box plays in the zone around them.
    m.handle_site_capacity(site(MTL), Some(0));
    m.handle_join(join(1, HKG, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 10);
    assert_eq!(m.bubbles().count(), 0);
    assert_eq!(m.last_stats().delegations_waiting, 1);
    assert!(m.zone_of(PlayerId(1)).is_some(), "in the zone meanwhile");
    // A server: the region opens on MTL and the player crosses into it.
    m.handle_site_capacity(site(MTL), Some(1));
    run(&mut m, 11, 30);
    assert_eq!(m.bubble_of(PlayerId(1)).map(|b| b.site), Some(site(MTL)));
    assert_eq!(m.last_stats().delegations_waiting, 0);
    // The player leaves the game: the region stays, empty, and still fails over to the core
    // site when MTL is cut from it, and comes back when MTL is back.
    m.handle_leave(PlayerId(1)).unwrap();
    run(&mut m, 31, 60);
    let region = m.bubbles().next().expect("an empty region stays").id;
    m.handle_site_link(site(MTL), false);
    let seen = run_silent(&mut m, 61, 100, site(MTL));
    assert!(
        seen.iter().any(|(_, c)| matches!(c,
            Command::Move { bubble, to, reason: MoveReason::Failover, .. } if *bubble == region && *to == site(PAR))),
        "{seen:?}"
    );
    assert_eq!(m.last_stats().delegations_waiting, 1, "not on its site");
    m.handle_site_link(site(MTL), true);
    let cmds = run(&mut m, 105, 110);
    assert!(
        cmds.iter().any(|(_, c)| matches!(c,
            Command::Move { bubble, to, reason: MoveReason::Delegation, .. } if *bubble == region && *to == site(MTL))),
        "{cmds:?}"
    );
    assert_eq!(m.bubbles().map(|b| (b.id, b.site)).collect::<Vec<_>>(), [(region, site(MTL))]);
}

#[test]
fn a_delegation_is_checked_against_the_sites() {
    let mut m = mesh_placing(th(), Placement::Fixed);
    let d = horizon_mesh::Delegation { world: WorldId(0), bounds: None, site: site(PAR) };
    let errors = m.set_delegations(vec![d]).unwrap_err();
    assert!(errors[0].to_string().contains("core site"), "{errors:?}");
}
