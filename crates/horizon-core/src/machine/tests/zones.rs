//! Zones: a world's first player, players joining together, NPCs, configured layouts.

use super::*;

#[test]
fn a_player_alone_at_their_spawn_gets_a_bubble_when_the_join_is_reported_not_at_the_tick() {
    let mut h = Harness::new();
    // No tick runs here: only the report.
    h.join("MTL", 1, 0.0);
    let (bubble, site, _) = h.hosted(1);
    assert_eq!(site, "MTL");
    let created = h.sent().into_iter().any(|(s, _, r)| {
        s == "MTL" && matches!(r, control::Request::Create { bubble: b, .. } if b == bubble)
    });
    assert!(created, "{:?}", h.sent());
}

#[test]
fn the_status_and_metrics_show_the_zone_a_worlds_first_player_opens() {
    let mut h = Harness::new();
    let public = horizon_admin::Page { after: None, limit: 100, private: false };
    assert!(h.core.status(h.now, public).zones.is_empty());
    montrealer_in_a_bubble(&mut h);
    let doc = h.core.status(h.now, public);
    let [zone] = &doc.zones[..] else { panic!("one zone: {:?}", doc.zones) };
    assert!(zone.zone >= horizon_mesh::ZONE_IDS_FROM);
    assert_eq!(zone.players, 0, "the Montrealer plays in a bubble");
    assert!(
        doc.recent_decisions.iter().any(|d| d["command"] == "zone_create" && d["site"] == "PAR"),
        "{:?}",
        doc.recent_decisions
    );
    let text = metrics_text(&mut h.core);
    for line in [
        "horizon_core_zones 1",
        "horizon_core_zone_changes_total{change=\"split\"} 0",
        "horizon_core_zone_changes_total{change=\"merge\"} 0",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

/// The site and id of the first bubble (not zone) the core created since the log was cleared.
fn created_bubble(h: &Harness) -> (String, BubbleId) {
    h.sent()
        .into_iter()
        .find_map(|(s, _, r)| match r {
            control::Request::Create { bubble, .. } if !bubble.is_zone() => Some((s, bubble)),
            _ => None,
        })
        .expect("a bubble for the group")
}

/// The players `site` was told left `region`, in every `Members` since the log was cleared.
fn departed_from(h: &Harness, site: &str, region: BubbleId) -> Vec<u64> {
    h.sent()
        .into_iter()
        .filter_map(|(s, _, r)| match r {
            control::Request::Members { lease, departed, .. }
                if s == site && lease.bubble == region =>
            {
                Some(departed.into_iter().map(|d| d.player.0).collect::<Vec<_>>())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn players_joining_together_play_in_their_zone_at_once_then_cross_into_their_bubble_at_the_tick() {
    let mut h = Harness::new();
    // Two Montrealers spawn 50 m apart in one report: grouping decides at the tick.
    h.report("MTL", vec![sample(1, 0.0), sample(2, 50.0)], Vec::new(), Vec::new());
    let (zone, site, _) = h.hosted(1);
    assert_eq!((zone.is_zone(), site.as_str()), (true, "PAR"));
    assert_eq!(h.hosted(2).0, zone, "both in the world's zone, on the core site");
    let created = h.sent().into_iter().any(|(s, _, r)| {
        s == "PAR" && matches!(r, control::Request::Create { bubble, .. } if bubble == zone)
    });
    assert!(created, "the zone runs on a core-site server: {:?}", h.sent());
    assert_eq!(h.routes_to("MTL", 1), [("route", zone)], "its home gateway routes it there");
    let public = horizon_admin::Page { after: None, limit: 10, private: false };
    assert_eq!(h.core.status(h.now, public).zones[0].members, 2);
    h.core.refresh_gauges();
    assert!(
        metrics_text(&mut h.core).contains("horizon_core_players_unsimulated{home_site=\"MTL\"} 0")
    );
    // The tick gives the group a bubble; the zone simulates them until it runs...
    h.log.clear();
    h.run_until(5_000);
    let (site, bubble) = created_bubble(&h);
    assert_eq!(h.hosted(1).0, zone, "in the zone while their bubble starts");
    assert!(h.sent().iter().all(|(_, _, r)| !matches!(r, control::Request::Members { .. })));
    // ... then both leave the zone with their state.
    h.ack_all(&site);
    assert_eq!(h.hosted(1).0, bubble);
    let departed = departed_from(&h, "PAR", zone);
    assert_eq!(departed, [1, 2], "the zone's server hands both states on");
}

#[test]
fn an_npc_is_simulated_by_its_zone_then_by_the_bubble_that_takes_its_space_and_counts_for_neither()
{
    let mut h = Harness::new();
    let npc = control::PlayerSample { role: Role::Npc, ..sample(3, 20.0) };
    h.report("MTL", vec![sample(1, 0.0), sample(2, 50.0), npc], Vec::new(), Vec::new());
    let (zone, site, _) = h.hosted(3);
    assert_eq!((zone.is_zone(), site.as_str()), (true, "PAR"), "in the zone, as the players");
    assert_eq!(h.routes_to("MTL", 3), [("route", zone)], "its gateway routes it there");
    h.core.refresh_gauges();
    assert!(
        metrics_text(&mut h.core).contains("horizon_core_players_unsimulated{home_site=\"MTL\"} 0")
    );
    // The players' bubble takes the space the NPC stands in: the NPC crosses with them.
    h.log.clear();
    h.run_until(5_000);
    let (site, bubble) = created_bubble(&h);
    h.ack_all(&site);
    assert_eq!(h.hosted(3).0, bubble);
    let departed = departed_from(&h, "PAR", zone);
    assert_eq!(departed, [1, 2, 3], "the zone's server hands the NPC's state on too");
    // It weighs nothing: the bubble is placed and counted for its two players alone.
    assert_eq!(h.core.mesh.bubble_by_id(bubble).map(|b| b.players), Some(2));
}

#[test]
fn configured_zones_open_at_the_first_start_and_a_restart_takes_back_the_stored_layout_instead() {
    let b = |x0: f64, x1: f64| horizon_proto::Aabb {
        min: Vec3 { x: x0, y: -1e3, z: -1e3 },
        max: Vec3 { x: x1, y: 1e3, z: 1e3 },
    };
    let zones = vec![
        horizon_mesh::ZoneSpec { world: WorldId(1), bounds: b(0.0, 1e3) },
        horizon_mesh::ZoneSpec { world: WorldId(1), bounds: b(1e3, 2e3) },
    ];
    let cfg = MachineConfig {
        sites: sites(),
        thresholds: Thresholds::default(),
        zones,
        stage: crate::Stage::Dynamic,
        delegations: Vec::new(),
    };
    let store = StoreState { next_player: 1_000, ..StoreState::default() };
    let mut core = CoreMachine::new(cfg.clone(), 1, &store, Time::ZERO).unwrap();
    core.carry_out_commands(Time::ZERO);
    let mut state = StoreState { next_player: 1_000, ..StoreState::default() };
    while let Some(e) = core.poll_effect() {
        if let Effect::Persist(Record::Lease { bubble, epoch, site, region }) = e {
            let lease = crate::store::StoredLease { epoch, site, region };
            state.leases.insert(bubble, lease);
        }
    }
    assert_eq!(state.leases.len(), 2, "both zones leased and persisted");
    // Restarted with the same configuration: the stored zones, not two more.
    let again = CoreMachine::new(cfg, 2, &state, Time::ZERO).unwrap();
    let ids: Vec<u64> = again.mesh.zones().map(|z| z.id.0).collect();
    assert_eq!(ids, state.leases.keys().copied().collect::<Vec<_>>());
}

#[test]
fn a_parisian_plays_in_the_zone_and_the_status_tells_the_carve_its_group_counts_towards() {
    let mut h = Harness::new();
    let public = horizon_admin::Page { after: None, limit: 100, private: false };
    h.join("PAR", 1, 0.0);
    h.run_until(6_000);
    let (region, site, _) = h.hosted(1);
    assert_eq!(site, "PAR");
    assert!(region.is_zone(), "a Parisian plays in the zone, no bubble on the core site");
    // Three Montrealers join them: the group counts the dwell before it is carved out.
    for p in 2..5 {
        h.join("MTL", p, 1.0 + p as f64);
    }
    h.run_until(11_000);
    let doc = h.core.status(h.now, public);
    let zone = doc.zones.iter().find(|z| z.zone == region.0).expect("the zone");
    let [c] = &zone.carving[..] else { panic!("one group counting: {:?}", zone.carving) };
    assert_eq!((c.first, c.players, c.site.as_str()), (1, 4, "MTL"));
    assert!(c.words.contains("a bubble is carved out for it on MTL"), "{}", c.words);
    // After the dwell (30 s), carved out: its players cross into the new bubble on MTL.
    for t in 12..=46 {
        h.run_until(t * 1_000);
        h.settle();
    }
    let (bubble, site, _) = h.hosted(1);
    assert_eq!(site, "MTL");
    assert!(!bubble.is_zone());
    let text = metrics_text(&mut h.core);
    let line = "horizon_core_carves_total{change=\"carve\",site=\"MTL\"} 1";
    assert!(text.contains(line), "{line} in\n{text}");
    assert!(h.core.status(h.now, public).zones.iter().all(|z| z.carving.is_empty()));
}
