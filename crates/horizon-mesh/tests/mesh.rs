//! Behaviour of the brain, one rule of design.md at a time.

#![allow(clippy::unwrap_used)] // Tests fail loudly on purpose.

mod common;

use common::*;
use horizon_mesh::{
    Bubble, Command, CreateReason, Generation, InputError, LoadReason, Mesh, MeshConfig,
    MoveReason, Placement, PlacementRule, PlayerId, PlayerUpdate, RestoredBubble, Role, Span,
    Thresholds, Time, Vec3, Verdict, WorldId,
};

fn th() -> Thresholds {
    Thresholds::default()
}

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
fn the_majority_wins_after_the_dwell_time_and_not_before() {
    let mut m = mesh(th());
    m.handle_join(join(1, PAR, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 0);
    for id in 2..=4 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64 * 10.0))).unwrap();
    }
    let cmds = run(&mut m, 5, 60);
    let mv = moves(&cmds);
    assert_eq!(mv, vec![(Time::from_secs(35), site(PAR), site(MTL))]);
    assert_eq!(m.latency_of(PlayerId(1)), Some(95.0), "the price of the minority");
}

#[test]
fn the_explanation_names_the_best_site_and_counts_dwell_then_hold_as_the_tick_does() {
    let mut m = mesh(th());
    m.handle_join(join(1, PAR, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 0);
    for id in 2..=4 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64 * 10.0))).unwrap();
    }
    assert!(moves(&run(&mut m, 5, 20)).is_empty());
    let bubble = m.bubble_of(PlayerId(1)).unwrap().id;
    let e = m.explain(bubble, Time::from_secs(20)).unwrap();
    assert_eq!((e.site, e.best, e.counted), (site(PAR), site(MTL), 4));
    assert_eq!(e.rule, PlacementRule::Scored);
    // PAR: (10 + 3 × (10 + 85)) / 4; MTL: (10 + 85 + 3 × 10) / 4 (the test sites' backbone).
    let cost = |s| e.candidates.iter().find(|c| c.site == s).unwrap().cost_per_player_ms;
    assert_eq!((cost(site(PAR)), cost(site(MTL))), (73.75, 31.25));
    assert_eq!(e.standing.gain_ms, 42.5);
    assert_eq!(e.standing.verdict, Verdict::Wait);
    assert_eq!(e.standing.dwelt, Span::from_secs(15), "best since the tick at 5 s");
    let words = e.words(m.sites(), m.thresholds());
    assert!(words.contains("MTL is better than PAR by 42.5 ms per player"), "{words}");
    assert!(words.contains("dwell 15 s so far"), "{words}");
    // Reading it changes nothing: the move comes at 35 s, as without it.
    assert_eq!(moves(&run(&mut m, 25, 40)), vec![(Time::from_secs(35), site(PAR), site(MTL))]);
    let e = m.explain(bubble, Time::from_secs(40)).unwrap();
    assert_eq!((e.site, e.best, e.standing.verdict), (site(MTL), site(MTL), Verdict::Stay));
    assert_eq!(e.standing.hold_left, Span::from_secs(175));
    assert!(e.words(m.sites(), m.thresholds()).contains("MTL is the best site"));
    assert!(m.explain(horizon_mesh::BubbleId(u64::MAX), Time::from_secs(40)).is_none());
    // For every bubble at once (one pass over the players), the same figures.
    for id in 10..20 {
        m.handle_join(join(id, HKG, 10.0, Role::Player, at(id as f64 * 10_000.0))).unwrap();
    }
    run(&mut m, 45, 45);
    let t = Time::from_secs(47);
    let one_by_one: Vec<_> = m.bubbles().map(|b| m.explain(b.id, t).unwrap()).collect();
    assert!(one_by_one.len() > 5);
    assert_eq!(m.explain_all(t), one_by_one);
}

#[test]
fn hold_blocks_a_second_move_for_three_minutes() {
    let mut m = mesh(th());
    m.handle_join(join(1, PAR, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 0);
    for id in 2..=4 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64))).unwrap();
    }
    let first = moves(&run(&mut m, 5, 35));
    assert_eq!(first.len(), 1);
    // The Montrealers leave and Parisians arrive: Paris is now far better.
    for id in 2..=4 {
        m.handle_leave(PlayerId(id)).unwrap();
    }
    for id in 10..14 {
        m.handle_join(join(id, PAR, 10.0, Role::Player, at(id as f64))).unwrap();
    }
    let second = moves(&run(&mut m, 40, 300));
    assert_eq!(second, vec![(Time::from_secs(35 + 180), site(MTL), site(PAR))]);
}

#[test]
fn a_cap_violation_moves_the_bubble_even_without_cost_gain() {
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    m.handle_join(join(2, MTL, 10.0, Role::Player, at(5.0))).unwrap();
    run(&mut m, 0, 0);
    // A Parisian with a slow access: 100 + 85 = 185 ms in Montreal breaks the 180 ms cap.
    m.handle_join(join(3, PAR, 100.0, Role::Player, at(10.0))).unwrap();
    let cmds = run(&mut m, 5, 60);
    let reasons: Vec<_> = cmds
        .iter()
        .filter_map(|(t, c)| match c {
            Command::Move { to, reason, .. } => Some((*t, *to, *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, vec![(Time::from_secs(35), site(PAR), MoveReason::Cap)]);
}

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
    let mut m = mesh(th());
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
    let mut m = mesh(th());
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

/// Four groups of 30, 600 m apart: one bubble, 120 players, so two servers are needed.
fn event(m: &mut Mesh) {
    let mut id = 1;
    for g in 0..4 {
        for k in 0..30 {
            let pos = Vec3::new(g as f64 * 600.0 + (k % 6) as f64 * 5.0, (k / 6) as f64 * 5.0, 0.0);
            m.handle_join(join(id, [PAR, MTL, HKG][(id % 3) as usize], 10.0, Role::Player, pos))
                .unwrap();
            id += 1;
        }
    }
}

#[test]
fn a_large_event_stays_on_one_site_and_is_cut_between_groups_across_servers() {
    let mut m = mesh(th());
    event(&mut m);
    let cmds = run(&mut m, 0, 60);
    assert_eq!(m.bubbles().count(), 1);
    let b = m.bubbles().next().unwrap();
    assert_eq!(b.site, site(PAR), "PAR is best for players from everywhere");
    assert_eq!(b.servers(), 2);
    let first_split = cmds
        .iter()
        .find(|(_, c)| matches!(c, Command::Servers { reason: LoadReason::Overload, .. }))
        .map(|(t, _)| *t);
    assert_eq!(first_split, Some(Time::from_secs(10)), "overload must be sustained 10 s");
    // No group is cut: the four groups each sit in one part.
    let parts = b.parts();
    for g in 0..4 {
        let ids: Vec<u64> = (g * 30 + 1..=g * 30 + 30).collect();
        let part_of = |id: u64| {
            let p = m.player(PlayerId(id)).unwrap().position;
            horizon_mesh::bubble::part_of(&parts, p)
        };
        assert!(ids.iter().all(|&id| part_of(id) == part_of(ids[0])), "group {g} was cut");
    }
}

#[test]
fn the_latest_split_is_undone_when_load_stays_low() {
    let mut m = mesh(th());
    event(&mut m);
    run(&mut m, 0, 30);
    assert_eq!(m.bubbles().next().unwrap().servers(), 2);
    for id in 31..=120 {
        m.handle_leave(PlayerId(id)).unwrap();
    }
    // The groups left are now far apart (beyond the merge distance) or gone: one bubble remains.
    let cmds = run(&mut m, 35, 200);
    let undone: Vec<_> = cmds
        .iter()
        .filter(|(_, c)| matches!(c, Command::Servers { reason: LoadReason::Underload, .. }))
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(undone, vec![Time::from_secs(65)], "30 s of low load, then one merge");
    assert_eq!(m.bubbles().next().unwrap().servers(), 1);
}

#[test]
fn a_silent_relay_fails_over_to_the_core_only_after_lease_and_margin() {
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 60);
    let old = m.bubble_of(PlayerId(1)).unwrap().epoch;
    m.handle_site_link(site(MTL), false);
    let seen = run_silent(&mut m, 61, 100, site(MTL));
    let stalled = seen.iter().find(|(_, c)| matches!(c, Command::Stalled { .. })).map(|x| x.0);
    assert_eq!(stalled, Some(90), "lease runs 30 s from the last renewal at 60 s");
    let failover = seen
        .iter()
        .find_map(|(t, c)| match c {
            Command::Move { to, reason: MoveReason::Failover, epoch, .. } => {
                Some((*t, *to, *epoch))
            }
            _ => None,
        })
        .expect("a failover");
    assert!(failover.0 >= 92, "re-granted at {} s, before lease + margin", failover.0);
    assert_eq!(failover.1, site(PAR));
    assert!(failover.2 > old);
    assert!(!m.leases().is_current(m.bubble_of(PlayerId(1)).unwrap().id, old));
}

#[test]
fn a_lost_bubble_fails_over_at_once_ignoring_hold() {
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 0);
    let b = m.bubble_of(PlayerId(1)).unwrap().clone();
    m.handle_bubble_lost(b.id, b.epoch, false, Time::from_secs(1)).unwrap();
    let cmd = poll(&mut m).unwrap();
    assert!(
        matches!(cmd, Command::Move { reason: MoveReason::Failover, to, .. } if to == site(PAR))
    );
    let stale = m.handle_bubble_lost(b.id, b.epoch, false, Time::from_secs(2));
    assert!(stale.is_err(), "stale epoch");
}

#[test]
fn a_lost_bubble_restarts_on_its_own_site_when_it_has_a_spare_server_else_elsewhere() {
    // One ready server seats 60 players, but a failover on the same site must not count on the
    // seats of the server it lost: a second server is needed.
    for (ready, expect) in [(2, MTL), (1, PAR)] {
        let mut m = mesh(th());
        m.handle_site_capacity(site(MTL), Some(ready));
        m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
        run(&mut m, 0, 0);
        let b = m.bubble_of(PlayerId(1)).unwrap().clone();
        assert_eq!(b.site, site(MTL));
        m.handle_bubble_lost(b.id, b.epoch, true, Time::from_secs(1)).unwrap();
        let cmd = poll(&mut m).unwrap();
        let Command::Move { reason: MoveReason::Failover, to, epoch, .. } = cmd else {
            panic!("{cmd:?}")
        };
        assert_eq!(to, site(expect), "{ready} ready server(s) at MTL");
        assert!(epoch > b.epoch, "the lost holder is fenced off");
    }
}

#[test]
fn an_aborted_move_returns_the_bubble_to_its_source_under_a_newer_epoch_and_waits_out_hold() {
    let mut m = mesh(th());
    m.handle_join(join(1, PAR, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 0);
    for id in 2..=4 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64 * 10.0))).unwrap();
    }
    let cmds = run(&mut m, 5, 35);
    let (bubble, aborted) = cmds
        .iter()
        .find_map(|(_, c)| match c {
            Command::Move { bubble, to, epoch, .. } if *to == site(MTL) => Some((*bubble, *epoch)),
            _ => None,
        })
        .expect("the majority's move");
    let t = Time::from_secs(37);
    let back = m.handle_move_aborted(bubble, aborted, site(PAR), t).unwrap();
    assert!(back > aborted, "a new epoch fences off the abandoned one");
    assert_eq!(m.site_of(PlayerId(2)), Some(site(PAR)));
    assert!(m.leases().is_current(bubble, back));
    assert!(!m.leases().is_current(bubble, aborted));
    assert!(m.handle_renewal(site(PAR), &[(bubble, back)], t)[0].is_ok());
    assert!(m.handle_renewal(site(MTL), &[(bubble, aborted)], t)[0].is_err());
    assert!(
        m.handle_move_aborted(bubble, aborted, site(PAR), t).is_err(),
        "the same abort twice is refused: its epoch is no longer current"
    );
    // Hold counts from the attempt: no new move before 35 + 180 s, then the move again.
    let cmds = run(&mut m, 40, 260);
    let mv = moves(&cmds);
    assert_eq!(mv.len(), 1, "{mv:?}");
    assert!(mv[0].0 >= Time::from_secs(35 + 180), "moved again at {:?}", mv[0].0);
    assert_eq!((mv[0].1, mv[0].2), (site(PAR), site(MTL)));
}

#[test]
fn groups_read_back_by_proximity_without_npcs() {
    let mut m = mesh(th());
    m.handle_join(join(1, PAR, 10.0, Role::Player, at(0.0))).unwrap();
    m.handle_join(join(2, MTL, 10.0, Role::Player, at(50.0))).unwrap();
    m.handle_join(join(3, HKG, 10.0, Role::Player, at(50_000.0))).unwrap();
    m.handle_join(join(4, HKG, 10.0, Role::Npc, at(10.0))).unwrap();
    let mut groups = m.groups();
    for g in &mut groups {
        g.sort();
    }
    groups.sort();
    assert_eq!(groups, vec![vec![PlayerId(1), PlayerId(2)], vec![PlayerId(3)]]);
}

#[test]
fn epochs_of_a_new_generation_exceed_every_older_one() {
    let mut m1 = mesh(th());
    m1.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m1, 0, 0);
    let old = m1.bubble_of(PlayerId(1)).unwrap().epoch;
    let cfg = MeshConfig {
        sites: sites(),
        thresholds: th(),
        generation: Generation(2),
        placement: Default::default(),
        zones: Vec::new(),
    };
    let mut m2 = Mesh::new(cfg, Time::ZERO).unwrap();
    m2.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m2, 0, 0);
    assert!(m2.bubble_of(PlayerId(1)).unwrap().epoch > old);
}

#[test]
fn travelling_to_another_world_creates_a_bubble_there() {
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 0);
    let update = PlayerUpdate { world: Some(WorldId(7)), ..Default::default() };
    m.handle_update(PlayerId(1), &update).unwrap();
    let cmds = run(&mut m, 5, 5);
    assert!(
        cmds.iter().any(|(_, c)| matches!(c, Command::Create { reason: CreateReason::Travel, .. }))
    );
    assert!(cmds.iter().any(|(_, c)| matches!(c, Command::Delete { .. })));
    assert_eq!(m.bubble_of(PlayerId(1)).unwrap().world, WorldId(7));
}

#[test]
fn bad_inputs_are_refused_with_a_clear_error() {
    let mut m = mesh(th());
    let mut bad = join(1, MTL, 10.0, Role::Player, at(0.0));
    bad.position.y = f64::NAN;
    assert!(matches!(m.handle_join(bad), Err(InputError::BadNumber { field: "position", .. })));
    // 300 m × 2^29 ≈ 1.6e11 m: beyond, the grouping grid cannot tell cells apart.
    let far = join(1, MTL, 10.0, Role::Player, at(2e11));
    assert!(matches!(m.handle_join(far), Err(InputError::PositionOutOfRange { .. })));
    assert!(matches!(
        m.handle_join(join(1, MTL, -1.0, Role::Player, at(0.0))),
        Err(InputError::BadNumber { field: "access_rtt_ms", .. })
    ));
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    assert_eq!(
        m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))),
        Err(InputError::DuplicatePlayer(PlayerId(1)))
    );
    assert_eq!(m.handle_leave(PlayerId(9)), Err(InputError::UnknownPlayer(PlayerId(9))));
    let inf =
        PlayerUpdate { velocity: Some(Vec3::new(f64::INFINITY, 0.0, 0.0)), ..Default::default() };
    assert!(m.handle_update(PlayerId(1), &inf).is_err());
    let mut bad_th = th();
    bad_th.cap_ms = -5.0;
    let cfg = MeshConfig {
        sites: sites(),
        thresholds: bad_th,
        generation: Generation(1),
        placement: Default::default(),
        zones: Vec::new(),
    };
    assert!(Mesh::new(cfg, Time::ZERO).is_err());
}

#[test]
fn poll_timeout_names_the_next_tick_or_lease_event() {
    let mut m = mesh(th());
    assert_eq!(m.poll_timeout(), Time::ZERO);
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    m.handle_timeout(Time::ZERO);
    assert_eq!(m.poll_timeout(), Time::from_secs(5));
    assert_eq!(Time::from_secs(5).since(Time::ZERO), Span::from_secs(5));
}

// ---- the baselines simulations compare SMD-G with --------------------------------------------

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
    let (m, cmds) = three_mtl_join_one_par(Placement::Smdg);
    assert_eq!(moves(&cmds).len(), 1);
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

#[test]
fn after_a_core_restart_restored_bubbles_keep_their_ids_epochs_and_players_and_ids_are_never_reused()
 {
    let mut m1 = mesh(th());
    m1.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    m1.handle_join(join(2, HKG, 10.0, Role::Player, at(900_000.0))).unwrap();
    run(&mut m1, 0, 0);
    let before: Vec<Bubble> = m1.bubbles().cloned().collect();
    assert_eq!(before.len(), 2);
    // The core restarts as generation 2 with what its store kept.
    let cfg = MeshConfig {
        sites: sites(),
        thresholds: th(),
        generation: Generation(2),
        placement: Default::default(),
        zones: Vec::new(),
    };
    let mut m2 = Mesh::new(cfg, Time::from_secs(100)).unwrap();
    for b in &before {
        let restored = RestoredBubble {
            id: b.id,
            site: b.site,
            world: b.world,
            bounds: b.bounds,
            epoch: b.epoch,
        };
        m2.handle_restore_bubble(restored, Time::from_secs(100)).unwrap();
    }
    let again = RestoredBubble {
        id: before[0].id,
        site: before[0].site,
        world: before[0].world,
        bounds: before[0].bounds,
        epoch: before[0].epoch,
    };
    assert!(m2.handle_restore_bubble(again, Time::from_secs(100)).is_err(), "restored once");
    // Their players rejoin where they were; a newcomer far away gets a new bubble.
    for (player, home, x) in [(1, MTL, 0.0), (2, HKG, 900_000.0)] {
        let b = m1.bubble_of(PlayerId(player)).unwrap().id;
        m2.handle_join_in(join(player, home, 10.0, Role::Player, at(x)), b).unwrap();
    }
    m2.handle_join(join(3, MTL, 10.0, Role::Player, at(-500_000.0))).unwrap();
    let commands = run(&mut m2, 100, 110);
    for player in [1, 2] {
        let (was, now) = (m1.bubble_of(PlayerId(player)).unwrap(), m2.bubble_of(PlayerId(player)));
        let now = now.expect("still in a bubble");
        assert_eq!((now.id, now.site, now.epoch), (was.id, was.site, was.epoch), "player {player}");
    }
    assert!(
        !commands.iter().any(|(_, c)| matches!(c, Command::Move { .. } | Command::Delete { .. })),
        "nothing moved or ended: {commands:?}"
    );
    let fresh = m2.bubble_of(PlayerId(3)).unwrap();
    assert!(before.iter().all(|b| fresh.id.0 > b.id.0), "bubble ids never reused");
    assert!(before.iter().all(|b| fresh.epoch > b.epoch), "epochs never go backwards");
    // The restored leases are renewable by their holders.
    let renew =
        m2.handle_renewal(before[0].site, &[(before[0].id, before[0].epoch)], Time::from_secs(111));
    assert!(renew[0].is_ok(), "{renew:?}");
}

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
