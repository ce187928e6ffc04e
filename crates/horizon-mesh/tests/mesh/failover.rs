//! Failovers: a silent relay, a lost bubble, an aborted move.

use super::*;

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
    // SMD-G keeps no bubble on the core site: once hold is over (180 s from the failover), with
    // MTL still cut off, the bubble dissolves into the zone around its player...
    let seen = run_silent(&mut m, 101, 300, site(MTL));
    let ended: Vec<_> = seen
        .iter()
        .filter_map(|(t, c)| match c {
            Command::Delete { reason, .. } => Some((*t, *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(ended, vec![(failover.0 + 180, horizon_mesh::DeleteReason::Dissolve)]);
    assert!(m.bubble_of(PlayerId(1)).is_none() && m.zone_of(PlayerId(1)).is_some());
    // ... and the player gets a bubble on MTL again once it is back.
    m.handle_site_link(site(MTL), true);
    let back = run(&mut m, 305, 310);
    assert!(back.iter().any(|(_, c)| matches!(c, Command::Create { site: s, previous_site: Some(p), reason: CreateReason::ServerReady, .. } if *s == site(MTL) && *p == site(PAR))), "{back:?}");
}

#[test]
fn a_lost_bubble_fails_over_at_once_ignoring_hold() {
    let mut m = mesh(th());
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 0);
    let b = m.bubble_of(PlayerId(1)).unwrap().clone();
    m.handle_region_lost(b.id, b.epoch, false, Time::from_secs(1)).unwrap();
    let cmd = poll(&mut m).unwrap();
    assert!(
        matches!(cmd, Command::Move { reason: MoveReason::Failover, to, .. } if to == site(PAR))
    );
    let stale = m.handle_region_lost(b.id, b.epoch, false, Time::from_secs(2));
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
        m.handle_region_lost(b.id, b.epoch, true, Time::from_secs(1)).unwrap();
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
    // The core at HKG: PAR holds bubbles like MTL (see `sites_cored_at`).
    let mut m = mesh_cored_at(th(), HKG);
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
