//! Bubbles cut across servers of their site by SMD's rule (`horizon_mesh::split`, the zones'
//! rule): a large event between its groups, a dense crowd at its median, a crowd on one point
//! not at all; and the latest cut undone when load stays low. The core is at HKG here, so that
//! PAR and MTL hold bubbles (the core site's crowds are cut as zones: `tests/zones.rs`).

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
    let mut m = mesh_cored_at(th(), HKG);
    event(&mut m);
    let cmds = run(&mut m, 0, 60);
    assert_eq!(m.bubbles().count(), 1);
    let b = m.bubbles().next().unwrap();
    assert_eq!(b.site, site(PAR), "PAR is best for players from everywhere");
    assert_eq!(b.servers(), 2, "{:?} {:?}", b.kind.cuts, b.part_players());
    assert_eq!(b.part_players(), vec![60, 60], "the even cut between the middle groups");
    let first_split = cmds
        .iter()
        .find(|(_, c)| matches!(c, Command::Servers { reason: LoadReason::Overload, .. }))
        .map(|(t, _)| *t);
    // 10 load samples: two ticks of 5 s each (the first sample weighs the period), as a zone.
    assert_eq!(first_split, Some(Time::from_secs(5)), "overload sustained 10 samples");
    // No group is cut: the four groups each sit in one part.
    for g in 0..4 {
        let ids: Vec<u64> = (g * 30 + 1..=g * 30 + 30).collect();
        let part_of = |id: u64| {
            let p = m.player(PlayerId(id)).unwrap().position;
            horizon_mesh::bubble::part_of(&b.kind.cuts, p)
        };
        assert!(ids.iter().all(|&id| part_of(id) == part_of(ids[0])), "group {g} was cut");
    }
}

#[test]
fn the_latest_split_is_undone_when_load_stays_low() {
    let mut m = mesh_cored_at(th(), HKG);
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
    // Quiet from the tick at 35 s: 30 samples at 60 s (the settle window long over).
    assert_eq!(undone, vec![Time::from_secs(60)], "30 samples of low load, then one merge");
    assert_eq!(m.bubbles().next().unwrap().servers(), 1);
}

/// `n` players of `home` on a grid 3 m apart around `x0` (a crowd within `√n × 3` m).
fn crowd(m: &mut Mesh, first_id: u64, n: u64, home: usize, x0: f64) {
    for k in 0..n {
        let pos = Vec3::new(x0 + (k % 16) as f64 * 3.0, (k / 16) as f64 * 3.0, 0.0);
        m.handle_join(join(first_id + k, home, 10.0, Role::Player, pos)).unwrap();
    }
}

fn servers_over_time(cmds: &[(Time, Command)]) -> Vec<(u64, usize)> {
    cmds.iter()
        .filter_map(|(t, c)| match c {
            Command::Servers { parts, .. } => Some((t.as_ms() / 1000, parts.len())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_dense_crowd_with_no_gap_is_cut_at_the_median_until_every_part_fits() {
    for home in [PAR, MTL] {
        let mut m = mesh_cored_at(th(), HKG);
        // 160 players 3 m apart, one group: no gap of 20 m anywhere.
        crowd(&mut m, 1, 160, home, 0.0);
        let cmds = run(&mut m, 0, 60);
        assert_eq!(m.bubbles().count(), 1, "one group, one bubble");
        let b = m.bubbles().next().unwrap();
        assert_eq!(b.site, site(home));
        let over = servers_over_time(&cmds);
        // 10 samples at 5 s: 160 → 80 + 80, each half still over 75 cut again at once: 4 parts.
        assert_eq!(over, vec![(5, 4)], "home {home}");
        assert!(b.part_players().iter().all(|&n| n <= 75), "{:?}", b.part_players());
        assert_eq!(b.part_players().iter().sum::<u32>(), 160);
        assert!(m.regions_over_capacity().iter().all(|&n| n == 0));
        // The crowd leaves: the cuts are undone, most recent first, back onto one server.
        for id in 11..=160 {
            m.handle_leave(PlayerId(id)).unwrap();
        }
        let cmds = run(&mut m, 65, 300);
        let back: Vec<usize> = servers_over_time(&cmds).iter().map(|s| s.1).collect();
        assert_eq!(back, vec![3, 2, 1], "home {home}");
    }
}

#[test]
fn a_crowd_stacked_on_one_point_is_not_cut_but_counted_over_capacity() {
    let mut m = mesh_cored_at(th(), HKG);
    for id in 1..=100 {
        m.handle_join(join(id, PAR, 10.0, Role::Player, at(0.0))).unwrap();
    }
    let cmds = run(&mut m, 0, 60);
    assert!(servers_over_time(&cmds).is_empty(), "no cut leaves both sides a player");
    assert_eq!(m.regions_over_capacity()[site(PAR).index()], 1);
    assert!(m.last_stats().uncut > 0, "counted at every sample, never a loop");
    // Two of them step aside: now it can be cut.
    for id in [1, 2] {
        let u = horizon_mesh::PlayerUpdate { position: Some(at(5.0)), ..Default::default() };
        m.handle_update(PlayerId(id), &u).unwrap();
    }
    let cmds = run(&mut m, 65, 70);
    assert_eq!(servers_over_time(&cmds), vec![(65, 2)]);
}

#[test]
fn a_bubble_is_spread_over_64_servers_at_most() {
    // Servers of one player each: 100 players would need 100.
    let mut m = mesh_cored_at(Thresholds { players_per_server: 1, ..th() }, HKG);
    crowd(&mut m, 1, 100, PAR, 0.0);
    run(&mut m, 0, 300);
    let b = m.bubbles().next().unwrap();
    assert_eq!(b.servers() as usize, horizon_mesh::split::MAX_PARTS);
    assert!(m.last_stats().uncut > 0, "counted, not cut");
    assert!(m.regions_over_capacity()[site(PAR).index()] > 0);
}

#[test]
fn an_overfull_bubble_is_cut_onto_the_idle_servers_of_its_site_though_its_seats_are_taken() {
    // MTL runs three servers of 4 players (3 seats each at the default fill ratio): 9 seats.
    // One Montrealer gets a bubble; eleven more join them: 12 players on one server, every
    // seat counted taken, two servers idle.
    let th = Thresholds { players_per_server: 4, ..th() };
    let mut m = mesh(th);
    m.handle_site_capacity(site(MTL), Some(3));
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    run(&mut m, 0, 0);
    for g in 0..4u64 {
        for k in 0..3u64 {
            if g + k > 0 {
                let pos = Vec3::new(g as f64 * 600.0 + k as f64 * 3.0, 0.0, 0.0);
                m.handle_join(join(1 + g * 3 + k, MTL, 10.0, Role::Player, pos)).unwrap();
            }
        }
    }
    let cmds = run(&mut m, 5, 60);
    let b = m.bubbles().next().unwrap();
    assert_eq!((b.site, b.players), (site(MTL), 12));
    // A server each for three parts: the site's three ready servers, no more.
    assert_eq!(b.servers(), 3, "{:?}", servers_over_time(&cmds));
    assert!(m.last_stats().uncut == 0);
}
