//! A player's home: the site whose gateway they entered at, unless the measure stage's believed
//! probe table found a site they reach faster. Every figure counts them under it; placement
//! keeps measuring every site from their gateway.

use super::*;
use horizon_proto::gateway::SiteProbe;

/// A Montrealer's table, as PAR's gateway believed it: 15 ms to MTL, `access` ms to PAR.
fn montreal_table(player: u64, access: f32) -> control::Request {
    let probe = |site: &str, ms: f64| SiteProbe {
        site: horizon_proto::Name::new(site).unwrap(),
        sent: 10,
        answered: 10,
        median_us: (ms * 1000.0) as u32,
    };
    let table = control::MeasuredPlayer {
        player: PlayerId(player),
        access_rtt_ms: access,
        probes: vec![probe("PAR", f64::from(access)), probe("MTL", 15.0), probe("HKG", 240.0)],
    };
    control::Request::Measured { players: vec![table] }
}

fn private(h: &Harness) -> crate::status::CoreStatus {
    h.core.status(h.now, horizon_admin::Page { after: None, limit: 100, private: true })
}

#[test]
fn a_believed_table_makes_the_nearest_site_the_home_of_every_figure_but_not_of_placement() {
    let mut h = Harness::new();
    // Entered at the core site's gateway (the measure stage), from Montreal: 100 ms away.
    let far = control::PlayerSample { access_rtt_ms: 100.0, ..sample(1, 0.0) };
    h.report("PAR", vec![far], Vec::new(), Vec::new());
    assert_eq!(h.request("PAR", montreal_table(1, 100.0)).unwrap(), control::Reply::Done);
    let p = h.core.mesh.player(horizon_mesh::PlayerId(1)).expect("joined");
    assert_eq!((p.gateway, p.home, p.home_measured), (h.site("PAR"), h.site("MTL"), true));
    for t in (5_000..=30_000).step_by(5_000) {
        h.settle();
        h.run_until(t);
    }
    let doc = private(&h);
    assert_eq!(doc.site("MTL").unwrap().players, 1, "counted under their home");
    assert_eq!(doc.site("PAR").unwrap().players, 0);
    assert_eq!(doc.groups[0].homes.get("MTL"), Some(&1));
    let listed = &doc.players[0];
    assert_eq!((listed.home.as_str(), listed.gateway.as_str()), ("MTL", "PAR"));
    assert!(listed.home_measured);
    assert_eq!(doc.measure.home_matches_lowest_rtt_share, 1.0);
    assert_eq!(doc.measure.entered_at_lowest_rtt_share, 0.0);
    // Placement measures from the gateway: at MTL they would pay PAR–MTL on top of their
    // 100 ms, so they stay in PAR's zone, and their routes still go to PAR's gateway.
    let (region, holder, _) = h.hosted(1);
    assert!(region.is_zone(), "in a zone, not carved out for MTL");
    assert_eq!(holder, "PAR");
    assert_eq!(h.core.registry[&region].members().get(&PlayerId(1)), Some(&h.site("PAR")));
    assert_eq!(h.core.mesh.latency_of(horizon_mesh::PlayerId(1)), Some(100.0));
}

#[test]
fn a_table_that_arrives_before_its_players_join_is_taken_in_at_the_join() {
    let mut h = Harness::new();
    h.request("PAR", montreal_table(1, 100.0)).unwrap();
    assert_eq!(private(&h).measure.players, 1, "kept for the join to come");
    h.join("PAR", 1, 0.0);
    let p = h.core.mesh.player(horizon_mesh::PlayerId(1)).expect("joined");
    assert_eq!(p.home, h.site("MTL"));
}

#[test]
fn without_a_believed_table_the_home_is_the_gateway() {
    let mut h = Harness::new();
    h.join("PAR", 1, 0.0);
    h.join("MTL", 2, 5_000.0);
    let p = |id| h.core.mesh.player(horizon_mesh::PlayerId(id)).expect("joined").clone();
    assert_eq!((p(1).home, p(1).home_measured), (h.site("PAR"), false));
    assert_eq!((p(2).home, p(2).gateway), (h.site("MTL"), h.site("MTL")));
    let doc = private(&h);
    assert_eq!((doc.site("PAR").unwrap().players, doc.site("MTL").unwrap().players), (1, 1));
}

#[test]
fn a_restarted_core_takes_the_home_again_from_the_resync_and_the_tables_sent_again() {
    // The agent's registration sends every player (`Players`), then every believed table
    // again: the home outlives a core restart (a restage), in either order.
    for table_first in [false, true] {
        let mut h = Harness::new();
        let placed = |id| control::PlacedPlayer { sample: sample(id, 0.0), bubble: None };
        let players = || control::Request::Players { players: vec![placed(1)] };
        if table_first {
            h.request("PAR", montreal_table(1, 100.0)).unwrap();
            h.request("PAR", players()).unwrap();
        } else {
            h.request("PAR", players()).unwrap();
            h.request("PAR", montreal_table(1, 100.0)).unwrap();
        }
        let p = h.core.mesh.player(horizon_mesh::PlayerId(1)).expect("resynced");
        assert_eq!(
            (p.gateway, p.home),
            (h.site("PAR"), h.site("MTL")),
            "table first: {table_first}"
        );
    }
}
