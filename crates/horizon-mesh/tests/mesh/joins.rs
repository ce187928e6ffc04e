//! Where a player plays from the moment they connect: a bubble, a bubble already there, or a
//! core zone while they wait.

use super::*;

#[test]
fn a_lone_player_gets_a_bubble_on_their_home_site_without_handover() {
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    let cmds = run(&mut m, 0, 60);
    assert!(matches!(
        &cmds[0].1,
        Command::Create { site: s, previous_site: None, reason: CreateReason::Join, .. } if *s == site(MTL)
    ));
    assert!(moves(&cmds).is_empty());
    assert_eq!(m.site_of(PlayerId(1)), Some(site(MTL)));
    assert_eq!(m.latency_of(PlayerId(1)), Some(10.0));
}

#[test]
fn a_player_alone_at_their_spawn_gets_a_bubble_at_connection_not_at_the_next_tick() {
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    m.place_arrival(PlayerId(1), Time::from_ms(1_200));
    let Some(Command::Create {
        site: s,
        previous_site: None,
        reason: CreateReason::Join,
        players,
        epoch,
        ..
    }) = poll(&mut m)
    else {
        panic!("a bubble at once")
    };
    assert_eq!((s, players), (site(MTL), vec![PlayerId(1)]));
    assert!(m.leases().is_current(m.bubble_of(PlayerId(1)).unwrap().id, epoch));
    // The next ticks keep it: nothing more to create, nobody enters.
    let cmds = run(&mut m, 5, 60);
    assert!(
        cmds.iter().all(|(_, c)| !matches!(c, Command::Create { .. } | Command::Enter { .. })),
        "{cmds:?}"
    );
    assert_eq!(m.bubbles().count(), 1);
}

#[test]
fn a_player_who_spawns_inside_a_bubble_plays_in_it_at_once_and_stays_in_it() {
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    m.place_arrival(PlayerId(1), Time::ZERO);
    let Some(Command::Create { bubble, .. }) = poll(&mut m) else { panic!("a bubble") };
    // A Parisian spawns 20 m away, inside that bubble's box.
    m.handle_join(join(2, PAR, 10.0, Role::Player, at(20.0))).unwrap();
    m.place_arrival(PlayerId(2), Time::from_ms(700));
    assert_eq!(
        poll(&mut m),
        Some(Command::Enter {
            bubble,
            site: site(MTL),
            from_site: None,
            players: vec![PlayerId(2)]
        })
    );
    assert_eq!(m.bubble_of(PlayerId(2)).map(|b| b.id), Some(bubble));
    let cmds = run(&mut m, 5, 5);
    assert!(
        cmds.iter().all(|(_, c)| !matches!(c, Command::Create { .. } | Command::Enter { .. })),
        "{cmds:?}"
    );
    assert_eq!(m.bubble_of(PlayerId(2)).map(|b| b.id), Some(bubble));
}

#[test]
fn at_connection_a_player_near_another_outside_any_bubble_or_without_a_seat_waits_for_the_tick() {
    // Friends arriving together (one report) see each other: the tick places them together.
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    m.handle_join(join(2, PAR, 10.0, Role::Player, at(50.0))).unwrap();
    m.place_arrival(PlayerId(1), Time::ZERO);
    m.place_arrival(PlayerId(2), Time::ZERO);
    assert!(poll(&mut m).is_none());
    // Near another player (1 km, within the merge distance): grouping decides at the tick.
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    m.place_arrival(PlayerId(1), Time::ZERO);
    assert!(poll(&mut m).is_some());
    m.handle_join(join(2, PAR, 10.0, Role::Player, at(1_000.0))).unwrap();
    m.place_arrival(PlayerId(2), Time::ZERO);
    assert!(poll(&mut m).is_none(), "near player 1");
    assert!(m.bubble_of(PlayerId(2)).is_none());
    // An NPC nearby does not count: it is never grouped.
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Npc, at(0.0))).unwrap();
    m.place_arrival(PlayerId(1), Time::ZERO);
    m.handle_join(join(2, MTL, 10.0, Role::Player, at(100.0))).unwrap();
    m.place_arrival(PlayerId(2), Time::ZERO);
    assert!(matches!(poll(&mut m), Some(Command::Create { .. })));
    // No seat at home: the tick decides (it waits in a core zone).
    let mut m = mesh(th());
    m.handle_site_capacity(site(HKG), Some(0));
    m.handle_join(join(1, HKG, 10.0, Role::Player, at(0.0))).unwrap();
    m.place_arrival(PlayerId(1), Time::ZERO);
    assert!(poll(&mut m).is_none());
}

#[test]
fn without_a_ready_server_the_player_waits_in_a_core_zone_then_gets_a_bubble_at_once() {
    let mut m = mesh(th());
    m.handle_site_capacity(site(HKG), Some(0));
    m.handle_join(join(1, HKG, 10.0, Role::Player, at(0.0))).unwrap();
    let cmds = run(&mut m, 0, 30);
    assert!(cmds.is_empty(), "{cmds:?}");
    assert_eq!(m.site_of(PlayerId(1)), Some(site(PAR)));
    assert!(m.bubble_of(PlayerId(1)).is_none());
    // An NPC in no bubble is not counted as unsimulated.
    m.handle_join(join(2, HKG, 10.0, Role::Npc, at(50_000.0))).unwrap();
    let waiting: Vec<PlayerId> = m.unsimulated().map(|p| p.id).collect();
    assert_eq!(waiting, [PlayerId(1)]);
    m.handle_site_capacity(site(HKG), Some(1));
    let cmds = run(&mut m, 35, 35);
    assert_eq!(m.unsimulated().count(), 0);
    assert!(matches!(
        &cmds[0].1,
        Command::Create { site: s, previous_site: Some(p), reason: CreateReason::ServerReady, .. }
            if *s == site(HKG) && *p == site(PAR)
    ));
}

#[test]
fn bubbles_share_a_server_up_to_its_seats_then_players_wait_in_a_core_zone() {
    // Two seats per server (players_per_server 2, filled whole): one MTL server seats two
    // lone Montrealers' bubbles (design.md §8: a server holds several regions), not three.
    let mut m = mesh(Thresholds { players_per_server: 2, pack_fill_ratio: 1.0, ..th() });
    m.handle_site_capacity(site(MTL), Some(1));
    for id in 1..=3 {
        // 10 km apart: three groups, three bubbles.
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64 * 10_000.0))).unwrap();
    }
    run(&mut m, 0, 0);
    let on_mtl = (1..=3).filter(|&id| m.site_of(PlayerId(id)) == Some(site(MTL))).count();
    assert_eq!(on_mtl, 2, "one server, two seats");
    assert_eq!(m.bubbles().count(), 2);
    assert!((1..=3).any(|id| m.bubble_of(PlayerId(id)).is_none()), "the third waits at the core");
    // A second server seats the third at the next tick.
    m.handle_site_capacity(site(MTL), Some(2));
    run(&mut m, 5, 5);
    assert!((1..=3).all(|id| m.site_of(PlayerId(id)) == Some(site(MTL))));
}

#[test]
fn a_measured_home_is_counted_as_the_home_while_every_site_is_still_measured_from_the_gateway() {
    // A Montrealer who entered at PAR's gateway (the measure stage), 95 ms away from it.
    let mut m = mesh(th());
    m.handle_join(join(1, PAR, 95.0, Role::Player, at(0.0))).unwrap();
    m.handle_join(join(2, MTL, 10.0, Role::Player, at(50_000.0))).unwrap();
    assert_eq!(m.player(PlayerId(1)).map(|p| (p.home, p.home_measured)), Some((site(PAR), false)));
    m.handle_measured_home(PlayerId(1), site(MTL)).unwrap();
    let p = m.player(PlayerId(1)).unwrap();
    assert_eq!((p.gateway, p.home, p.home_measured), (site(PAR), site(MTL), true));
    // Placed from where they entered: simulated at MTL they would pay PAR–MTL on top of
    // their 95 ms, so they play in PAR's zone; the Montrealer who entered at MTL gets a bubble there.
    run(&mut m, 0, 60);
    assert_eq!(m.bubble_of(PlayerId(1)), None, "a player who entered at PAR stays in its zone");
    assert_eq!(m.site_of(PlayerId(1)), Some(site(PAR)));
    assert_eq!(m.latency_of(PlayerId(1)), Some(95.0));
    assert_eq!(m.site_of(PlayerId(2)), Some(site(MTL)));
}

#[test]
fn a_home_is_measured_once_a_session_and_only_for_a_known_player_and_site() {
    let mut m = mesh(th());
    m.handle_join(join(1, PAR, 95.0, Role::Player, at(0.0))).unwrap();
    m.handle_measured_home(PlayerId(1), site(MTL)).unwrap();
    // The same table again (sent anew to a core) changes nothing; another home is refused.
    m.handle_measured_home(PlayerId(1), site(MTL)).unwrap();
    assert_eq!(
        m.handle_measured_home(PlayerId(1), site(HKG)),
        Err(InputError::HomeFixed { player: PlayerId(1), home: MTL })
    );
    assert_eq!(m.player(PlayerId(1)).map(|p| p.home), Some(site(MTL)));
    assert_eq!(
        m.handle_measured_home(PlayerId(9), site(MTL)),
        Err(InputError::UnknownPlayer(PlayerId(9)))
    );
    // A fourth site, of another configuration.
    let n = |s: &str| horizon_mesh::SiteName::new(s).unwrap();
    let four = [n("PAR"), n("MTL"), n("HKG"), n("SYD")];
    let pairs: Vec<_> = (0..4)
        .flat_map(|a| (a + 1..4).map(move |b| (a, b)))
        .map(|(a, b)| (four[a].clone(), four[b].clone(), 100.0))
        .collect();
    let elsewhere =
        horizon_mesh::Sites::new(four.to_vec(), &four[0], &pairs).unwrap().ids().nth(3).unwrap();
    assert_eq!(m.handle_measured_home(PlayerId(1), elsewhere), Err(InputError::UnknownSite(3)));
}
