//! Helpers the mesh tests share.

use std::time::Duration;

use horizon_core::CoreStatus;
use horizon_proto::Role;
use horizon_testkit::Sandbox;
use horizon_testkit::bots::{Away, BotReport, BotSpec, Motion};

/// A player of `site` at `x` m, wandering, an input every 50 ms, joining after `join_after_ms`.
pub(crate) fn bot(
    name: &str,
    site: &str,
    sandbox: &Sandbox,
    x: f64,
    join_after_ms: u64,
) -> BotSpec {
    BotSpec {
        name: name.to_owned(),
        site: site.to_owned(),
        gateway: sandbox.gateways[site],
        role: Role::Player,
        world: 1,
        start: [x, 0.0, 0.0],
        motion: Motion::Wander { radius_m: 20.0, speed_mps: 1.5 },
        join_after: Duration::from_millis(join_after_ms),
        input_every: Duration::from_millis(50),
        afk: Away::Never,
        leave_after: None,
        reconnect_after: None,
        claim: None,
        enters_at: None,
        measure: None,
    }
}

/// Waits (polling the core's status) until `f` holds, at most `secs` seconds.
pub(crate) async fn wait_for<T>(
    sandbox: &Sandbox,
    secs: u64,
    mut f: impl FnMut(&CoreStatus) -> Option<T>,
) -> Option<T> {
    for _ in 0..secs * 5 {
        if let Some(status) = sandbox.core.status().await
            && let Some(t) = f(&status)
        {
            return Some(t);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// The bubble simulating `player` and the server holding it, from the core's status.
#[allow(dead_code)] // (not every test crate that shares this module reads it)
pub(crate) fn holder_of(status: &CoreStatus, player: u64) -> Option<(u64, String, String)> {
    let bubble = status.players.iter().find(|p| p.player == player)?.bubble?;
    for site in &status.sites {
        for server in site.servers.iter().flatten() {
            if server.bubbles.contains(&bubble) {
                return Some((bubble, site.site.clone(), server.server.clone()));
            }
        }
    }
    None
}

/// What a player must see across a failover: every acknowledged input applied once and
/// nothing lost (the gateway re-sends what the restored copy lacks), the chain unbroken
/// (going back to the copy is a restore, not a break), and a freeze shorter than `max_gap_ms`.
#[allow(dead_code)] // (not every test crate that shares this module reads it)
pub(crate) fn played_through_a_failover(r: &BotReport, max_gap_ms: f64) {
    assert_eq!(r.error, None, "{}", r.name);
    assert_eq!(r.applied, r.acked, "{}: every acknowledged input applied, once: {r:?}", r.name);
    assert_eq!(r.applied_twice, 0, "{}", r.name);
    assert_eq!(r.chain_breaks, 0, "{}", r.name);
    assert!(r.inputs_sent - r.acked < 20, "{}: nothing lost: {r:?}", r.name);
    assert!(r.max_gap_ms < max_gap_ms, "{}: longest update gap {:.0} ms", r.name, r.max_gap_ms);
}
