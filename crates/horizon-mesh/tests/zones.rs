//! The core site's zones, split and merged as today's SMD does (design.md §4, "Within a site").

#![allow(clippy::unwrap_used)] // Tests fail loudly on purpose.

mod common;

use common::*;
use horizon_mesh::{
    Aabb, BubbleId, Command, ConfigError, Epoch, Generation, Mesh, MeshConfig, MoveReason,
    Placement, PlayerId, Role, Thresholds, Time, Vec3, WorldId, ZoneReason, ZoneSpec,
};

/// SMD (no bubbles): every player plays in a zone.
fn smd() -> Mesh {
    mesh_placing(Thresholds::default(), Placement::AllCore)
}

/// Joins players `ids` at x = `x(id)`, all of PAR.
fn crowd(m: &mut Mesh, ids: std::ops::RangeInclusive<u64>, x: impl Fn(u64) -> f64) {
    for id in ids {
        m.handle_join(join(id, PAR, 10.0, Role::Player, at(x(id)))).unwrap();
    }
}

/// Every command from `from_s` to `to_s` (zones opening included), one tick every 5 s, every
/// lease renewed first.
fn ticks(m: &mut Mesh, from_s: u64, to_s: u64) -> Vec<(Time, Command)> {
    let mut out = Vec::new();
    for t in (from_s..=to_s).step_by(5) {
        let now = Time::from_secs(t);
        renew_all(m, now, &[]);
        m.handle_timeout(now);
        out.extend(std::iter::from_fn(|| m.poll_command()).map(|c| (now, c)));
    }
    out
}

/// The same core restarted (generation 2), under SMD, before anything is taken back.
fn restarted_smd() -> Mesh {
    let config = MeshConfig {
        sites: sites(),
        thresholds: Thresholds::default(),
        generation: Generation(2),
        placement: Placement::AllCore,
        zones: Vec::new(),
    };
    Mesh::new(config, Time::ZERO).unwrap()
}

/// A bubble as a restarted core takes it back from its store.
fn restored(b: &horizon_mesh::Bubble) -> horizon_mesh::RestoredRegion {
    horizon_mesh::RestoredRegion {
        id: b.id,
        kind: horizon_mesh::RegionKind::Bubble,
        site: b.site,
        world: b.world,
        bounds: b.bounds,
        epoch: b.epoch,
    }
}

/// A zone as a core's store keeps it: id, world, box, epoch.
type KeptZone = (BubbleId, WorldId, Aabb, Epoch);

/// Takes back `kept` zones on the core site, as a restarted core does from its store.
fn take_back_zones(m: &mut Mesh, kept: &[KeptZone]) {
    for &(id, world, bounds, epoch) in kept {
        let z = horizon_mesh::RestoredRegion {
            id,
            kind: horizon_mesh::RegionKind::Zone,
            site: site(PAR),
            world,
            bounds,
            epoch,
        };
        m.handle_restore(z, Time::ZERO).unwrap();
    }
}

/// SMD with three Parisians in the world's one zone: the mesh, the zone and its epoch.
fn three_players_in_their_zone() -> (Mesh, BubbleId, Epoch) {
    let mut m = smd();
    crowd(&mut m, 1..=3, |id| id as f64 * 10.0);
    let cmds = ticks(&mut m, 0, 0);
    let Some(Command::ZoneCreate { zone, epoch, .. }) =
        cmds.iter().map(|(_, c)| c.clone()).find(|c| matches!(c, Command::ZoneCreate { .. }))
    else {
        panic!("{cmds:?}")
    };
    (m, zone, epoch)
}

fn splits(cmds: &[(Time, Command)]) -> Vec<(Time, &Command)> {
    cmds.iter()
        .filter(|(_, c)| matches!(c, Command::ZoneSplit { .. }))
        .map(|(t, c)| (*t, c))
        .collect()
}

#[test]
fn a_worlds_first_player_opens_one_zone_over_the_whole_world_on_the_core_site() {
    let mut m = smd();
    assert_eq!(m.zones().count(), 0);
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    let Some(Command::ZoneCreate { zone, site: s, world, bounds, epoch, reason }) =
        m.poll_command()
    else {
        panic!("a zone for world 0")
    };
    assert_eq!((s, world, reason), (site(PAR), WorldId(0), ZoneReason::World));
    assert!(m.leases().is_current(zone, epoch), "leased to the core site like any region");
    let limit = Thresholds::default().position_limit_m();
    assert_eq!(bounds, Aabb::point(Vec3::ZERO).expand(limit));
    // The second player of the world opens nothing.
    m.handle_join(join(2, HKG, 10.0, Role::Player, at(5e6))).unwrap();
    assert!(m.poll_command().is_none());
    ticks(&mut m, 0, 0);
    assert_eq!(m.zone_of(PlayerId(2)).unwrap().id, zone);
    assert_eq!(m.zone_by_id(zone).unwrap().players, 2);
}

#[test]
fn an_overloaded_zone_is_cut_through_the_widest_gap_after_ten_samples_and_not_before() {
    let mut m = smd();
    // 50 players on [0, 490] m and 50 on [1500, 1990] m: 100 > 75.
    crowd(&mut m, 1..=100, |id| {
        if id <= 50 { (id - 1) as f64 * 10.0 } else { 1500.0 + (id - 51) as f64 * 10.0 }
    });
    let cmds = ticks(&mut m, 0, 0);
    assert!(splits(&cmds).is_empty(), "one tick weighs 5 samples of 10");
    let cmds = ticks(&mut m, 5, 5);
    let [(t, Command::ZoneSplit { zone, new_zone, bounds, new_bounds, players, reason, .. })] =
        splits(&cmds)[..]
    else {
        panic!("one split at 10 samples: {cmds:?}")
    };
    assert_eq!((t, *reason), (Time::from_secs(5), ZoneReason::Overload));
    assert_eq!((bounds.max.x, new_bounds.min.x), (995.0, 995.0), "midway through the gap");
    assert_eq!(players, &(51..=100).map(PlayerId).collect::<Vec<_>>());
    assert_eq!(m.zone_of(PlayerId(1)).unwrap().id, *zone);
    assert_eq!(m.zone_of(PlayerId(100)).unwrap().id, *new_zone);
    // Each half holds 50, under the capacity: nothing more happens.
    let cmds = ticks(&mut m, 10, 60);
    assert!(splits(&cmds).is_empty());
    let held: Vec<u32> = m.zones().map(|z| z.players).collect();
    assert_eq!(held, [50, 50]);
}

#[test]
fn overload_must_be_sustained_and_a_crowd_with_no_gap_is_cut_at_its_median() {
    let mut m = smd();
    crowd(&mut m, 1..=80, |id| id as f64 * 10.0);
    ticks(&mut m, 0, 0);
    // Six leave before the second sample: 74 is within capacity, the count starts over.
    for id in 75..=80 {
        m.handle_leave(PlayerId(id)).unwrap();
    }
    assert!(splits(&ticks(&mut m, 5, 5)).is_empty());
    crowd(&mut m, 75..=80, |id| id as f64 * 10.0);
    assert!(splits(&ticks(&mut m, 10, 10)).is_empty(), "5 samples since it went over");
    let cmds = ticks(&mut m, 15, 15);
    let [(_, Command::ZoneSplit { bounds, players, .. })] = splits(&cmds)[..] else {
        panic!("{cmds:?}")
    };
    // Evenly spaced 10 m apart: no gap of 20 m, so the median (the 41st player, at 410 m).
    assert_eq!(bounds.max.x, 410.0);
    assert_eq!(players.len(), 40);
}

#[test]
fn halves_that_stay_quiet_merge_back_after_thirty_samples_and_the_settle_window() {
    let mut m = smd();
    crowd(&mut m, 1..=100, |id| if id <= 50 { id as f64 } else { 5_000.0 + id as f64 });
    let cmds = ticks(&mut m, 0, 5);
    let [(_, Command::ZoneSplit { zone, new_zone, .. })] = splits(&cmds)[..] else { panic!() };
    let (zone, new_zone) = (*zone, *new_zone);
    // The crowd thins out to 30 + 30 = 60, within 0.8 × 75.
    for id in (31..=50).chain(81..=100) {
        m.handle_leave(PlayerId(id)).unwrap();
    }
    let cmds = ticks(&mut m, 10, 30);
    assert!(!cmds.iter().any(|(_, c)| matches!(c, Command::ZoneMerge { .. })), "{cmds:?}");
    let cmds = ticks(&mut m, 35, 35);
    let Some((t, Command::ZoneMerge { into, from, players, reason, bounds, .. })) =
        cmds.iter().find(|(_, c)| matches!(c, Command::ZoneMerge { .. }))
    else {
        panic!("a merge after six quiet ticks of 5 samples: {cmds:?}")
    };
    assert_eq!(
        (*t, *into, *from, *reason),
        (Time::from_secs(35), zone, new_zone, ZoneReason::Underload)
    );
    assert_eq!(players, &(51..=80).map(PlayerId).collect::<Vec<_>>());
    assert_eq!(bounds.max.x, Thresholds::default().position_limit_m());
    assert_eq!(m.zones().map(|z| (z.id, z.players)).collect::<Vec<_>>(), [(zone, 60)]);
}

#[test]
fn a_crowd_on_one_spot_cannot_be_cut_and_is_left_whole() {
    let mut m = smd();
    crowd(&mut m, 1..=90, |_| 100.0);
    let cmds = ticks(&mut m, 0, 60);
    assert!(splits(&cmds).is_empty());
    assert_eq!(m.zones().count(), 1);
}

#[test]
fn under_smdg_a_paris_crowd_plays_in_zones_split_at_the_median_and_merged_back_when_it_leaves() {
    // SMD-G, the default stage: 160 Parisians 3 m apart on a grid (48 m × 30 m, no gap).
    let mut m = mesh(Thresholds::default());
    for k in 0..160u64 {
        let pos = Vec3::new((k % 16) as f64 * 3.0, (k / 16) as f64 * 3.0, 0.0);
        m.handle_join(join(k + 1, PAR, 10.0, Role::Player, pos)).unwrap();
    }
    let cmds = ticks(&mut m, 0, 30);
    assert!(m.bubbles().next().is_none(), "no bubble on the core site");
    assert!(!cmds.iter().any(|(_, c)| matches!(c, Command::Create { .. })), "{cmds:?}");
    // As SMD cuts it: 160 → 80 + 80, each half again: four zones of 40 by 5 s (10 samples).
    let at_5: Vec<_> = splits(&cmds).iter().map(|(t, _)| t.as_ms() / 1000).collect();
    assert_eq!(at_5, vec![5, 5, 5], "{cmds:?}");
    let mut seats: Vec<u32> = m.zones().map(|z| z.players).collect();
    seats.sort_unstable();
    assert_eq!(seats, vec![40, 40, 40, 40]);
    assert!(m.regions_over_capacity().iter().all(|&n| n == 0));
    // The crowd leaves but ten: the cuts are undone, most recent first, back to one zone.
    for id in 11..=160 {
        m.handle_leave(PlayerId(id)).unwrap();
    }
    let cmds = ticks(&mut m, 35, 300);
    let merges = cmds.iter().filter(|(_, c)| matches!(c, Command::ZoneMerge { .. })).count();
    assert_eq!((merges, m.zones().count()), (3, 1));
    assert!(m.bubbles().next().is_none());
}

#[test]
fn under_smdg_zones_hold_only_the_players_no_bubble_holds() {
    let mut m = mesh(Thresholds::default());
    m.handle_site_capacity(site(HKG), Some(0));
    m.handle_join(join(1, HKG, 10.0, Role::Player, at(0.0))).unwrap();
    m.handle_join(join(2, MTL, 10.0, Role::Player, at(1e6))).unwrap();
    run(&mut m, 0, 5);
    assert!(m.bubble_of(PlayerId(1)).is_none());
    assert_eq!(m.zone_of(PlayerId(1)).map(|z| z.players), Some(1), "waiting for a HKG server");
    assert!(m.bubble_of(PlayerId(2)).is_some());
    assert!(m.zone_of(PlayerId(2)).is_none());
}

#[test]
fn configured_zones_open_at_start_and_bad_boxes_are_refused_by_index() {
    let b =
        |x0: f64, x1: f64| Aabb { min: Vec3::new(x0, -1e3, -1e3), max: Vec3::new(x1, 1e3, 1e3) };
    let config = |zones: Vec<ZoneSpec>| MeshConfig {
        sites: sites(),
        thresholds: Thresholds::default(),
        generation: Generation(1),
        placement: Placement::AllCore,
        zones,
    };
    let w = WorldId(0);
    let mut m = Mesh::new(
        config(vec![
            ZoneSpec { world: w, bounds: b(0.0, 1e3) },
            ZoneSpec { world: w, bounds: b(1e3, 2e3) },
        ]),
        Time::ZERO,
    )
    .unwrap();
    let opened: Vec<ZoneReason> = std::iter::from_fn(|| m.poll_command())
        .map(|c| match c {
            Command::ZoneCreate { reason, .. } => reason,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(opened, [ZoneReason::Configured; 2]);
    // A world with configured zones opens no other; a player outside them plays in the nearest.
    m.handle_join(join(1, PAR, 10.0, Role::Player, at(5e3))).unwrap();
    assert!(m.poll_command().is_none());
    ticks(&mut m, 0, 0);
    assert_eq!(m.zone_of(PlayerId(1)).unwrap().bounds, b(1e3, 2e3));
    let err = Mesh::new(
        config(vec![
            ZoneSpec { world: w, bounds: b(0.0, 1e3) },
            ZoneSpec { world: w, bounds: b(500.0, 2e3) },
        ]),
        Time::ZERO,
    )
    .unwrap_err();
    assert!(matches!(&err[..], [ConfigError::BadZone { index: 1, .. }]), "{err:?}");
}

#[test]
fn a_zone_whose_lease_runs_out_is_granted_again_on_the_core_site_and_restored_there() {
    let (mut m, zone, epoch) = three_players_in_their_zone();
    // The core site stops renewing (its agent cut off, or the zone's server lost).
    let mut out = Vec::new();
    for t in 5..=40 {
        let now = Time::from_secs(t);
        m.handle_timeout(now);
        out.extend(std::iter::from_fn(|| m.poll_command()).map(|c| (now, c)));
    }
    let stalled = out.iter().find(|(_, c)| matches!(c, Command::Stalled { .. })).unwrap();
    assert_eq!(stalled.0, Time::from_secs(30), "a lease of 30 s from the grant");
    let Some((t, Command::Move { bubble, from, to, epoch: new, players, reason })) =
        out.iter().find(|(_, c)| matches!(c, Command::Move { .. }))
    else {
        panic!("{out:?}")
    };
    assert_eq!(*t, Time::from_secs(32), "at once when the drift margin ends");
    assert_eq!((*bubble, *from, *to, *reason), (zone, site(PAR), site(PAR), MoveReason::Failover));
    assert!(*new > epoch && m.leases().is_current(zone, *new));
    assert_eq!(players, &[PlayerId(1), PlayerId(2), PlayerId(3)]);
    assert_eq!(m.zone_by_id(zone).unwrap().stalled_since, None);
    assert_eq!(m.leases_held(site(PAR)), [(zone, *new)]);
}

#[test]
fn after_a_restart_zones_are_taken_back_with_their_ids_and_epochs_and_none_is_opened_again() {
    let mut before = smd();
    crowd(&mut before, 1..=100, |id| if id <= 50 { id as f64 } else { 5_000.0 + id as f64 });
    ticks(&mut before, 0, 5);
    let kept: Vec<KeptZone> = before.zones().map(|z| (z.id, z.world, z.bounds, z.epoch)).collect();
    assert_eq!(kept.len(), 2);
    let mut after = restarted_smd();
    take_back_zones(&mut after, &kept);
    // A zone restored elsewhere than the core site is refused.
    let (id, world, bounds, epoch) = kept[0];
    let elsewhere = horizon_mesh::RestoredRegion {
        id,
        kind: horizon_mesh::RegionKind::Zone,
        site: site(MTL),
        world,
        bounds,
        epoch,
    };
    assert!(after.handle_restore(elsewhere, Time::ZERO).is_err());
    // A player an agent says played in a zone rejoins in it (zones and bubbles share one
    // table and one id space: the id names a zone, not a bubble to be put in).
    let j = join(1, PAR, 10.0, Role::Player, at(1.0));
    after.handle_join_in(j, kept[0].0).unwrap();
    assert!(after.bubble_of(PlayerId(1)).is_none());
    crowd(&mut after, 2..=100, |id| if id <= 50 { id as f64 } else { 5_000.0 + id as f64 });
    let cmds = ticks(&mut after, 0, 0);
    assert!(!cmds.iter().any(|(_, c)| matches!(c, Command::ZoneCreate { .. })), "{cmds:?}");
    let zones: Vec<_> = after.zones().map(|z| (z.id, z.epoch, z.players)).collect();
    assert_eq!(zones, [(kept[0].0, kept[0].3, 50), (kept[1].0, kept[1].3, 50)]);
    // New zone ids follow the restored ones.
    crowd(&mut after, 101..=101, |_| 0.0);
    let mut other = join(102, PAR, 10.0, Role::Player, at(0.0));
    other.world = WorldId(7);
    after.handle_join(other).unwrap();
    let Some(Command::ZoneCreate { zone, .. }) = after.poll_command() else { panic!() };
    assert!(zone > kept[1].0);
}

#[test]
fn a_zone_whose_server_ticks_too_slowly_is_split_though_it_holds_few_players() {
    let mut m = smd();
    crowd(&mut m, 1..=10, |id| id as f64 * 100.0);
    let cmds = ticks(&mut m, 0, 0);
    let zone = m.zones().next().unwrap().id;
    assert!(splits(&cmds).is_empty());
    // Its server reports 12 ticks per second, under tps_min (20).
    m.handle_server_load(zone, 0, 12.0).unwrap();
    assert!(splits(&ticks(&mut m, 5, 5)).is_empty(), "5 samples");
    let cmds = ticks(&mut m, 10, 10);
    assert_eq!(splits(&cmds).len(), 1, "{cmds:?}");
    // Each half's server has not reported yet: no more splits on the old rate.
    assert!(splits(&ticks(&mut m, 15, 60)).is_empty());
}

#[test]
fn a_core_restarted_into_the_relay_stage_ends_the_bubbles_it_takes_back_and_zones_take_their_players()
 {
    // A dynamic core put two Montrealers in a bubble on MTL.
    let mut before = mesh_placing(Thresholds::default(), Placement::Smdg);
    for id in [1, 2] {
        before.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64))).unwrap();
    }
    ticks(&mut before, 0, 5);
    let b = before.bubble_of(PlayerId(1)).unwrap().clone();
    assert_eq!(b.site, site(MTL));
    // The core restarts with `[placement] stage = "relay"`: it takes the bubble back, and the
    // agents report its players in it.
    let mut after = restarted_smd();
    after.handle_restore(restored(&b), Time::ZERO).unwrap();
    for id in [1, 2] {
        after.handle_join_in(join(id, MTL, 10.0, Role::Player, at(id as f64)), b.id).unwrap();
    }
    let cmds = ticks(&mut after, 0, 0);
    let deleted: Vec<_> = cmds
        .iter()
        .filter_map(|(_, c)| match c {
            Command::Delete { bubble, reason, .. } => Some((*bubble, *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, [(b.id, horizon_mesh::DeleteReason::Stage)]);
    assert!(after.bubbles().next().is_none(), "no bubble under SMD");
    for id in [1, 2] {
        assert!(after.bubble_of(PlayerId(id)).is_none());
        assert!(after.zone_of(PlayerId(id)).is_some(), "in a zone of the core site");
    }
    // ... and none is carved out again, whoever comes.
    after.handle_join(join(3, HKG, 10.0, Role::Player, at(5e4))).unwrap();
    let later = ticks(&mut after, 5, 60);
    assert!(!later.iter().any(|(_, c)| matches!(c, Command::Create { .. })), "{later:?}");
    assert!(after.bubbles().next().is_none());
}

#[test]
fn a_player_crosses_into_the_next_zone_only_once_past_the_edge_by_smds_margin() {
    let b =
        |x0: f64, x1: f64| Aabb { min: Vec3::new(x0, -1e3, -1e3), max: Vec3::new(x1, 1e3, 1e3) };
    let config = MeshConfig {
        sites: sites(),
        thresholds: Thresholds::default(),
        generation: Generation(1),
        placement: Placement::AllCore,
        zones: vec![
            ZoneSpec { world: WorldId(0), bounds: b(0.0, 1e3) },
            ZoneSpec { world: WorldId(0), bounds: b(1e3, 2e3) },
        ],
    };
    let mut m = Mesh::new(config, Time::ZERO).unwrap();
    let ids: Vec<_> = std::iter::from_fn(|| m.poll_command())
        .filter_map(|c| match c {
            Command::ZoneCreate { zone, .. } => Some(zone),
            _ => None,
        })
        .collect();
    let (low, high) = (ids[0], ids[1]);
    let inside = horizon_mesh::EXIT_MARGIN_M / 2.0;
    let past = horizon_mesh::EXIT_MARGIN_M * 2.0;
    m.handle_join(join(1, PAR, 10.0, Role::Player, at(1e3 + inside))).unwrap();
    m.handle_join(join(2, PAR, 10.0, Role::Player, at(1e3 + past))).unwrap();
    ticks(&mut m, 0, 0);
    // Newcomers (in no zone yet) go to the zone whose box holds them.
    assert_eq!(m.region_of(PlayerId(1), None), Some(high));
    // One who was in the low zone stays there until the margin is behind them...
    assert_eq!(m.region_of(PlayerId(1), Some(low)), Some(low));
    // ... and crosses beyond it.
    assert_eq!(m.region_of(PlayerId(2), Some(low)), Some(high));
    // A zone that no longer exists keeps nobody.
    assert_eq!(m.region_of(PlayerId(1), Some(horizon_mesh::BubbleId(7))), Some(high));
}

#[test]
fn zones_taken_back_after_a_restart_are_joined_under_their_cuts_again_and_merge_once_quiet() {
    // Three crowds 5 km apart cut the world's zone twice.
    let x = |id: u64| (id - 1) / 50 * 5_000 + id % 50;
    let mut before = smd();
    crowd(&mut before, 1..=150, |id| x(id) as f64);
    ticks(&mut before, 0, 60);
    let kept: Vec<KeptZone> = before.zones().map(|z| (z.id, z.world, z.bounds, z.epoch)).collect();
    assert_eq!(kept.len(), 3, "{kept:?}");
    // The core restarts: every zone comes back on its own, then the cuts between them.
    let mut after = restarted_smd();
    take_back_zones(&mut after, &kept);
    assert_eq!(after.regroup_restored_zones(&[]), 1, "one tree over the whole world");
    assert_eq!(after.regroup_restored_zones(&[]), 0, "done once");
    let ids: Vec<_> = after.zones().map(|z| z.id).collect();
    assert_eq!(ids.len(), 3, "the same zones, ids kept");
    // Ten players are left, one crowd each side of the world: every cut goes quiet.
    crowd(&mut after, 1..=10, |id| if id <= 5 { id as f64 } else { 10_000.0 + id as f64 });
    let cmds = ticks(&mut after, 0, 120);
    let merges: Vec<_> = cmds
        .iter()
        .filter_map(|(t, c)| match c {
            Command::ZoneMerge { into, from, .. } => Some((*t, *into, *from)),
            _ => None,
        })
        .collect();
    assert_eq!(merges.len(), 2, "{merges:?}");
    assert!(merges[0].0 < merges[1].0, "the deeper cut first, the settle window between");
    let whole = Aabb::point(Vec3::ZERO).expand(Thresholds::default().position_limit_m());
    let left: Vec<_> = after.zones().map(|z| (z.id, z.bounds, z.players)).collect();
    assert_eq!(left, [(ids[0].min(ids[1]).min(ids[2]), whole, 10)]);
}

#[test]
fn zones_that_do_not_tile_a_box_are_left_as_they_were() {
    // Two zones with a hole between them (a configured layout changed since): no tree.
    let b =
        |x0: f64, x1: f64| Aabb { min: Vec3::new(x0, -1e3, -1e3), max: Vec3::new(x1, 1e3, 1e3) };
    let mut m = restarted_smd();
    let zone = |id: u64, bounds: Aabb| horizon_mesh::RestoredRegion {
        id: horizon_mesh::BubbleId(horizon_mesh::ZONE_IDS_FROM + id),
        kind: horizon_mesh::RegionKind::Zone,
        site: site(PAR),
        world: WorldId(0),
        bounds,
        epoch: horizon_mesh::Epoch(1 << 32),
    };
    m.handle_restore(zone(0, b(0.0, 1e3)), Time::ZERO).unwrap();
    m.handle_restore(zone(1, b(2e3, 3e3)), Time::ZERO).unwrap();
    let spec = |x0, x1| ZoneSpec { world: WorldId(0), bounds: b(x0, x1) };
    assert_eq!(m.regroup_restored_zones(&[spec(0.0, 3e3)]), 0);
    // Inside a configured box they tile, they are joined.
    m.handle_restore(zone(2, b(1e3, 2e3)), Time::ZERO).unwrap();
    assert_eq!(m.regroup_restored_zones(&[spec(0.0, 3e3)]), 1);
    assert_eq!(m.zones().count(), 3);
}

#[test]
fn a_zone_lost_between_ticks_is_restored_with_the_players_it_holds_then() {
    let (mut m, zone, epoch) = three_players_in_their_zone();
    // Players 1 and 2 leave after the tick counted the zone: the last places are gone.
    m.handle_leave(PlayerId(1)).unwrap();
    m.handle_leave(PlayerId(2)).unwrap();
    m.handle_region_lost(zone, epoch, true, Time::from_secs(2)).unwrap();
    let Some(Command::Move { players, .. }) = m.poll_command() else { panic!("a failover") };
    assert_eq!(players, [PlayerId(3)]);
}

#[test]
fn a_zone_its_holder_lost_is_granted_again_at_once_not_at_its_leases_end() {
    let (mut m, zone, epoch) = three_players_in_their_zone();
    // Its server crashed at 2 s (or its agent registered without it).
    m.handle_region_lost(zone, epoch, true, Time::from_secs(2)).unwrap();
    let Some(Command::Move { bubble, from, to, epoch: new, players, reason }) = m.poll_command()
    else {
        panic!("a failover at once")
    };
    assert_eq!((bubble, from, to, reason), (zone, site(PAR), site(PAR), MoveReason::Failover));
    assert!(new > epoch && m.leases().is_current(zone, new));
    assert_eq!(players, [PlayerId(1), PlayerId(2), PlayerId(3)]);
    assert_eq!(m.zone_by_id(zone).unwrap().epoch, new);
    // A stale epoch is refused: only the holder's current one fails it over.
    assert!(m.handle_region_lost(zone, epoch, true, Time::from_secs(3)).is_err());
}

#[test]
fn a_core_restarted_into_the_fixed_stage_sends_a_delegated_bubble_to_its_site_and_ends_the_others()
{
    // A dynamic core put two Montrealers in a bubble on MTL at x = 0, and two Hong Kongers in
    // one on HKG at x = 50 km.
    let mut before = mesh_placing(Thresholds::default(), Placement::Smdg);
    for id in [1, 2] {
        before.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64))).unwrap();
    }
    for id in [3, 4] {
        before.handle_join(join(id, HKG, 10.0, Role::Player, at(5e4 + id as f64))).unwrap();
    }
    ticks(&mut before, 0, 5);
    let (near, far) = (
        before.bubble_of(PlayerId(1)).unwrap().clone(),
        before.bubble_of(PlayerId(3)).unwrap().clone(),
    );
    assert_eq!((near.site, far.site), (site(MTL), site(HKG)));
    // The core restarts under `fixed`, the box around x = 0 delegated to HKG: it takes both
    // bubbles back, and the agents report their players in them.
    let config = MeshConfig {
        sites: sites(),
        thresholds: Thresholds::default(),
        generation: Generation(2),
        placement: Placement::Fixed,
        zones: Vec::new(),
    };
    let mut after = Mesh::new(config, Time::ZERO).unwrap();
    let bounds = Aabb { min: Vec3::new(-1e3, -1e3, -1e3), max: Vec3::new(1e3, 1e3, 1e3) };
    let delegation =
        horizon_mesh::Delegation { world: WorldId(0), bounds: Some(bounds), site: site(HKG) };
    after.set_delegations(vec![delegation]).unwrap();
    for b in [&near, &far] {
        after.handle_restore(restored(b), Time::ZERO).unwrap();
    }
    // A tick before the agents report their players: the bubble taken back lies inside the
    // delegation's box, so no region is created over it.
    let early = ticks(&mut after, 0, 0);
    assert!(!early.iter().any(|(_, c)| matches!(c, Command::Create { .. })), "{early:?}");
    assert_eq!(after.last_stats().delegations_waiting, 1);
    for (b, players, home) in [(&near, [1, 2], MTL), (&far, [3, 4], HKG)] {
        for id in players {
            let x = if id < 3 { id as f64 } else { 5e4 + id as f64 };
            after.handle_join_in(join(id, home, 10.0, Role::Player, at(x)), b.id).unwrap();
        }
    }
    let cmds = ticks(&mut after, 1, 60);
    // The delegated one goes to HKG by a handover at the next tick; the other ends once a
    // restored bubble is no longer kept for members still coming, its players in a zone.
    let moved = cmds.iter().find_map(|(_, c)| match c {
        Command::Move { bubble, to, reason: horizon_mesh::MoveReason::Delegation, .. } => {
            Some((*bubble, *to))
        }
        _ => None,
    });
    assert_eq!(moved, Some((near.id, site(HKG))), "{cmds:?}");
    assert!(
        cmds.iter().any(|(_, c)| matches!(c, Command::Delete { bubble, .. } if *bubble == far.id)),
        "{cmds:?}"
    );
    for id in [3, 4] {
        assert!(after.bubble_of(PlayerId(id)).is_none());
        assert!(after.zone_of(PlayerId(id)).is_some(), "in a zone of the core site");
    }
    assert_eq!(after.bubble_of(PlayerId(1)).map(|b| b.site), Some(site(HKG)));
    // The bubble taken back became the delegation's region: its box, and no second region
    // was created over it.
    assert_eq!(after.bubble_of(PlayerId(1)).map(|b| (b.id, b.bounds)), Some((near.id, bounds)));
    assert!(
        !cmds.iter().any(|(_, c)| matches!(c, Command::Create { .. })),
        "no region created over the one taken back: {cmds:?}"
    );
}

#[test]
fn an_npc_is_simulated_by_the_bubble_holding_it_else_by_its_zone_and_loads_neither() {
    let mut m = mesh(Thresholds::default());
    // A player of MTL alone: a bubble around them on MTL.
    m.handle_join(join(1, MTL, 10.0, Role::Player, at(0.0))).unwrap();
    m.place_arrival(PlayerId(1), Time::ZERO);
    let bubble = m.bubble_of(PlayerId(1)).unwrap().clone();
    while m.poll_command().is_some() {}
    // One NPC inside its box, one far from it, and one that walks from one to the other.
    m.handle_join(join(2, MTL, 10.0, Role::Npc, at(1.0))).unwrap();
    m.handle_join(join(3, MTL, 10.0, Role::Npc, at(50_000.0))).unwrap();
    m.handle_join(join(4, MTL, 10.0, Role::Npc, at(2.0))).unwrap();
    let cmds = ticks(&mut m, 0, 0);
    let zone = m.zones().next().unwrap().id;
    assert_eq!(m.region_of(PlayerId(2), None), Some(bubble.id));
    assert_eq!(m.region_of(PlayerId(3), None), Some(zone));
    assert_eq!(m.region_of(PlayerId(4), None), Some(bubble.id));
    // They weigh nothing: the bubble counts its one player, the zone nobody, no site is theirs.
    assert_eq!(m.bubble_of(PlayerId(1)).unwrap().players, 1);
    assert_eq!(m.zones().next().unwrap().players, 0);
    assert_eq!(m.site_of(PlayerId(2)), None);
    assert!(!cmds.iter().any(|(_, c)| matches!(c, Command::Create { .. })), "{cmds:?}");
    // Just past the bubble's edge, one that was in it stays (SMD's margin); beyond, the zone.
    let edge = m.bubble_of(PlayerId(1)).unwrap().bounds.max.x;
    let walk = |m: &mut Mesh, x: f64| {
        let update = horizon_mesh::PlayerUpdate { position: Some(at(x)), ..Default::default() };
        m.handle_update(PlayerId(4), &update).unwrap();
    };
    walk(&mut m, edge + horizon_mesh::EXIT_MARGIN_M / 2.0);
    assert_eq!(m.region_of(PlayerId(4), Some(bubble.id)), Some(bubble.id));
    assert_eq!(m.region_of(PlayerId(4), None), Some(zone), "a newcomer there is the zone's");
    walk(&mut m, edge + horizon_mesh::EXIT_MARGIN_M * 2.0);
    assert_eq!(m.region_of(PlayerId(4), Some(bubble.id)), Some(zone));
    // A bubble that ends gives its NPCs back to the zone around them.
    m.handle_leave(PlayerId(1)).unwrap();
    ticks(&mut m, 5, 5);
    assert!(m.bubble_by_id(bubble.id).is_none());
    assert_eq!(m.region_of(PlayerId(2), Some(bubble.id)), Some(zone));
}

#[test]
fn the_bubble_at_a_position_is_found_among_many_as_they_come_move_and_go() {
    let mut m = mesh(Thresholds::default());
    // Forty lone players 20 km apart along x, each in a bubble of their own.
    for id in 1..=40 {
        m.handle_join(join(id, MTL, 10.0, Role::Player, at(id as f64 * 20_000.0))).unwrap();
        m.place_arrival(PlayerId(id), Time::ZERO);
    }
    ticks(&mut m, 0, 10);
    let check = |m: &Mesh| {
        for b in m.bubbles() {
            let inside = Vec3::new(
                (b.bounds.min.x + b.bounds.max.x) / 2.0,
                (b.bounds.min.y + b.bounds.max.y) / 2.0,
                (b.bounds.min.z + b.bounds.max.z) / 2.0,
            );
            assert_eq!(m.bubble_at(b.world, inside).map(|f| f.id), Some(b.id));
            assert_eq!(m.bubble_at(WorldId(1), inside).map(|f| f.id), None, "another world");
        }
        let brute = |p: Vec3| m.bubbles().find(|b| b.bounds.contains(p)).map(|b| b.id);
        for x in (0..900).map(|i| i as f64 * 1_000.0) {
            assert_eq!(m.bubble_at(WorldId(0), at(x)).map(|b| b.id), brute(at(x)), "at {x}");
        }
    };
    check(&m);
    // Half of them walk 3 km (borders move), a quarter leave (bubbles end).
    for id in (1..=40).step_by(2) {
        let update = horizon_mesh::PlayerUpdate {
            position: Some(at(id as f64 * 20_000.0 + 3_000.0)),
            ..Default::default()
        };
        m.handle_update(PlayerId(id), &update).unwrap();
    }
    for id in (1..=40).step_by(4) {
        m.handle_leave(PlayerId(id)).unwrap();
    }
    ticks(&mut m, 15, 20);
    assert!(m.bubbles().count() < 40);
    check(&m);
}
