//! What a site may say: only about its own players, ids handed to it, handovers it is part
//! of; and what the status shows a reader without the token.

use super::*;

#[test]
fn requests_from_a_replaced_connection_are_refused() {
    let mut h = Harness::new();
    let mtl = h.site("MTL");
    let old = h.conn("MTL");
    h.core.handle(Input::AgentConnected { site: mtl, conn: old + 1000 }, h.now);
    let renew = control::Request::Renew { leases: Vec::new() };
    h.core.handle(Input::AgentRequest { site: mtl, conn: old, token: 7, request: renew }, h.now);
    let mut reply = None;
    h.drain(|e| {
        if let Effect::Reply { token: 7, reply: r } = e {
            reply = Some(r.clone());
        }
    });
    assert!(reply.unwrap().is_err());
}

fn refused(h: &Harness, site: &str, reason: &str) -> u64 {
    h.core.stats.refused_count(h.site(site), reason)
}

#[test]
fn a_site_speaks_only_for_its_own_players() {
    let mut h = Harness::new();
    montrealer_in_a_bubble(&mut h);
    // PAR claims MTL's player is on the other side of the world and has them leave; the rest
    // of its report goes on.
    h.report("PAR", Vec::new(), vec![sample(1, 9e6)], vec![PlayerId(1)]);
    let p = h.core.mesh.player(horizon_mesh::PlayerId(1)).expect("still there");
    assert_eq!(p.position.x, 0.0, "not moved by another site");
    assert_eq!(refused(&h, "PAR", "not_its_player"), 2);
    // Its home's samples give its RTT and role, never a place: what a client claims is never read.
    h.report("MTL", Vec::new(), vec![sample(1, 9e6)], Vec::new());
    assert_eq!(h.core.mesh.player(horizon_mesh::PlayerId(1)).unwrap().position.x, 0.0);
    // Positions come from the site holding the player's region, under its epoch in force.
    let (region, holder, epoch) = h.hosted(1);
    let other = if holder == "PAR" { "HKG" } else { "PAR" };
    h.request(other, positions(region, epoch, &[(1, 7.0)])).unwrap();
    h.request(&holder, positions(region, epoch + 1, &[(1, 7.0)])).unwrap();
    assert_eq!(h.core.mesh.player(horizon_mesh::PlayerId(1)).unwrap().position.x, 0.0);
    assert_eq!(refused(&h, other, "positions_not_its_region"), 1);
    assert_eq!(refused(&h, &holder, "positions_not_its_region"), 1, "another epoch");
    h.moved(1, 5.0);
    let p = h.core.mesh.player(horizon_mesh::PlayerId(1)).expect("still there");
    assert_eq!(p.position.x, 5.0);
    assert_eq!(refused(&h, "MTL", "not_its_player"), 0);
}

#[test]
fn a_site_joins_only_player_ids_handed_to_it() {
    let mut h = Harness::new();
    let control::Reply::PlayerIds { first, .. } =
        h.request("MTL", control::Request::PlayerIds { count: 10 }).unwrap()
    else {
        panic!("a block of ids");
    };
    assert!(first >= 1_000, "never one handed out before");
    // PAR claims an id of MTL's block (and one never handed out): refused.
    h.join("PAR", first, 0.0);
    h.join("PAR", first + 1_000_000, 0.0);
    assert!(h.core.mesh.player(horizon_mesh::PlayerId(first)).is_none());
    assert!(h.core.mesh.player(horizon_mesh::PlayerId(first + 1_000_000)).is_none());
    assert_eq!(refused(&h, "PAR", "player_id_not_its_own"), 2);
    // MTL joins it.
    h.join("MTL", first, 0.0);
    let p = h.core.mesh.player(horizon_mesh::PlayerId(first)).expect("joined");
    assert_eq!(p.home, h.site("MTL"));
}

#[test]
fn a_site_cannot_fail_a_handover_it_takes_no_part_in() {
    let mut h = Harness::new();
    let (bubble, epoch) = montrealer_in_a_bubble(&mut h);
    let id = HandoverId(77);
    let ho = handover::Handover {
        id,
        bubble,
        from: h.site("MTL"),
        to: h.site("PAR"),
        epoch: epoch + 1,
        started: h.now,
        phase: HandoverPhase::PreparingTarget,
        given_up: false,
    };
    h.core.handovers.insert(id, ho);
    let failed = || control::Request::Failed { handover: id, reason: "no".into() };
    let err = h.request("HKG", failed()).expect_err("HKG is neither source nor target");
    assert_eq!(err.code, ErrorCode::Unauthorized, "{err:?}");
    assert!(h.core.handovers.contains_key(&id), "the handover goes on");
    assert_eq!(refused(&h, "HKG", "handover_not_its_own"), 1);
    // Its target may give it up.
    assert_eq!(h.request("PAR", failed()).unwrap(), control::Reply::Done);
    assert!(!h.core.handovers.contains_key(&id));
}

#[test]
fn a_sites_pool_bounds_are_on_the_status_and_impossible_ones_are_refused() {
    let mut h = Harness::new();
    let page = horizon_admin::Page { after: None, limit: 10, private: false };
    assert_eq!(h.core.status(h.now, page).site("MTL").unwrap().pool, None, "not said yet");
    h.request("MTL", control::Request::Pool { warm: 2, max: 64 }).unwrap();
    let said = h.core.status(h.now, page).site("MTL").unwrap().pool;
    assert_eq!(said, Some(crate::status::PoolBounds { warm: 2, max: 64 }));
    for (warm, max) in [(3, 2), (0, 0)] {
        let refused = h.request("MTL", control::Request::Pool { warm, max }).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Malformed);
    }
    assert_eq!(h.core.status(h.now, page).site("MTL").unwrap().pool, said, "kept");
}

#[test]
fn the_status_names_no_player_to_an_unauthenticated_reader() {
    let mut h = Harness::new();
    montrealer_in_a_bubble(&mut h);
    let private = horizon_admin::Page { after: None, limit: 100, private: true };
    let doc = h.core.status(h.now, private);
    assert_eq!(doc.players.len(), 1);
    assert_eq!(doc.groups[0].players, [1]);
    let public = horizon_admin::Page { private: false, ..private };
    let doc = h.core.status(h.now, public);
    assert!(doc.players.is_empty() && doc.groups[0].players.is_empty(), "no id, no position");
    assert_eq!(doc.players_total, 1, "but how many");
    assert_eq!(doc.groups[0].homes.get("MTL"), Some(&1));
}
