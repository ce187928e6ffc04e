//! Behaviour of the brain, one rule of design.md at a time: each file one job; this one the
//! shared helpers, ids and epochs across generations, worlds, bad inputs and timeouts.

#![allow(clippy::unwrap_used)] // Tests fail loudly on purpose.

#[path = "../common/mod.rs"]
mod common;
mod delegations;
mod failover;
mod groups;
mod joins;
mod load;
mod policies;
mod scoring;

use common::*;
use horizon_mesh::{
    Bubble, Command, CreateReason, Generation, InputError, LoadReason, Mesh, MeshConfig,
    MoveReason, Placement, PlacementRule, PlayerId, PlayerUpdate, RegionKind, RestoredRegion, Role,
    Span, Thresholds, Time, Vec3, Verdict, WorldId,
};

fn th() -> Thresholds {
    Thresholds::default()
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
        let restored = RestoredRegion {
            id: b.id,
            kind: RegionKind::Bubble,
            site: b.site,
            world: b.world,
            bounds: b.bounds,
            epoch: b.epoch,
        };
        m2.handle_restore(restored, Time::from_secs(100)).unwrap();
    }
    let again = RestoredRegion {
        id: before[0].id,
        kind: RegionKind::Bubble,
        site: before[0].site,
        world: before[0].world,
        bounds: before[0].bounds,
        epoch: before[0].epoch,
    };
    assert!(m2.handle_restore(again, Time::from_secs(100)).is_err(), "restored once");
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
