//! The weighted majority, dwell, hold and the fairness cap (between PAR and MTL, the core at
//! HKG: see `sites_cored_at`); carving a bubble out of the core site's zones and dissolving it.

use super::*;
use horizon_mesh::DeleteReason;

#[test]
fn the_majority_wins_after_the_dwell_time_and_not_before() {
    let mut m = mesh_cored_at(th(), HKG);
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
    let mut m = mesh_cored_at(th(), HKG);
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
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64 * 10_000.0))).unwrap();
    }
    run(&mut m, 45, 45);
    let t = Time::from_secs(47);
    let one_by_one: Vec<_> = m.bubbles().map(|b| m.explain(b.id, t).unwrap()).collect();
    assert!(one_by_one.len() > 5);
    assert_eq!(m.explain_all(t), one_by_one);
}

#[test]
fn hold_blocks_a_second_move_for_three_minutes() {
    let mut m = mesh_cored_at(th(), HKG);
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
    let mut m = mesh_cored_at(th(), HKG);
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

/// The `Delete`s of `cmds` with their time and reason.
fn deletes(cmds: &[(Time, Command)]) -> Vec<(Time, DeleteReason)> {
    cmds.iter()
        .filter_map(|(t, c)| match c {
            Command::Delete { reason, .. } => Some((*t, *reason)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_core_site_group_plays_in_a_zone_is_carved_out_for_another_site_and_dissolves_on_return() {
    // The core at PAR, as deployed.
    let mut m = mesh(th());
    m.handle_join(join(1, PAR, 10.0, Role::Player, at(0.0))).unwrap();
    let cmds = run(&mut m, 0, 20);
    assert!(cmds.is_empty(), "a Parisian alone plays in a zone: {cmds:?}");
    assert!(m.bubble_of(PlayerId(1)).is_none());
    assert!(m.zone_of(PlayerId(1)).is_some());
    // Three Montrealers join them: the group's best site is MTL from the tick at 25 s, and its
    // bubble is carved out of the zone for MTL once MTL has been best for the dwell time, as a
    // bubble on PAR would move.
    for id in 2..=4 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64 * 10.0))).unwrap();
    }
    let mut cmds = run(&mut m, 25, 30);
    // Counting, as the console and `sim run --explain` tell it.
    let counting = m.carvings();
    assert_eq!(counting.len(), 1);
    let c = counting[0];
    assert_eq!((c.first, c.players, c.site, c.gain_ms), (PlayerId(1), 4, site(MTL), 42.5));
    let words = c.words(m.sites(), m.thresholds(), Time::from_secs(30));
    assert!(words.contains("plays better on MTL than in PAR's zones by 42.5 ms"), "{words}");
    assert!(words.contains("dwell 5 s so far"), "{words}");
    cmds.extend(run(&mut m, 35, 60));
    assert!(m.carvings().is_empty(), "carved: no longer counting");
    let created: Vec<_> = cmds
        .iter()
        .filter_map(|(t, c)| match c {
            Command::Create { site, previous_site, players, reason, .. } => {
                Some((*t, *site, *previous_site, players.clone(), *reason))
            }
            _ => None,
        })
        .collect();
    let all: Vec<PlayerId> = (1..=4).map(PlayerId).collect();
    let carved = (Time::from_secs(55), site(MTL), Some(site(PAR)), all, CreateReason::Carve);
    assert_eq!(created, vec![carved]);
    assert!(moves(&cmds).is_empty());
    assert_eq!(m.latency_of(PlayerId(1)), Some(95.0), "the price of the minority");
    // The Montrealers leave and Parisians come: PAR is now best. The carve counts as a move,
    // so the group waits out hold (180 s from 55 s), then the bubble dissolves into the zone:
    // no handover to a bubble on PAR.
    for id in 2..=4 {
        m.handle_leave(PlayerId(id)).unwrap();
    }
    for id in 10..14 {
        m.handle_join(join(id, PAR, 10.0, Role::Player, at(id as f64))).unwrap();
    }
    let cmds = run(&mut m, 65, 100);
    let bubble = m.bubbles().next().unwrap().id;
    let words = m.explain(bubble, Time::from_secs(100)).unwrap().words(m.sites(), m.thresholds());
    assert!(words.contains("PAR is better than MTL by"), "{words}");
    assert!(words.contains("it moved recently and is held"), "{words}");
    let cmds: Vec<_> = cmds.into_iter().chain(run(&mut m, 105, 400)).collect();
    assert_eq!(deletes(&cmds), vec![(Time::from_secs(55 + 180), DeleteReason::Dissolve)]);
    assert!(moves(&cmds).is_empty(), "{:?}", moves(&cmds));
    assert!(!cmds.iter().any(|(_, c)| matches!(c, Command::Create { .. })), "not carved again");
    assert!(m.bubbles().next().is_none(), "no bubble on the core site");
    for id in [1, 10, 11, 12, 13] {
        assert!(m.zone_of(PlayerId(id)).is_some(), "player {id} plays in a zone");
        assert_eq!(m.site_of(PlayerId(id)), Some(site(PAR)));
    }
    // A group that just connected together is placed at once (no state to hand over yet).
    for id in 20..=22 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(1e6 + id as f64))).unwrap();
    }
    m.handle_join(join(23, PAR, 10.0, Role::Player, at(1e6))).unwrap();
    let cmds = run(&mut m, 405, 405);
    let joined = |c: &Command| matches!(c, Command::Create { site: s, reason: CreateReason::Join, .. } if *s == site(MTL));
    assert!(cmds.iter().any(|(_, c)| joined(c)), "{cmds:?}");
}
