//! A large event cut between groups across servers, and the cut undone when load stays low.

use super::*;

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
