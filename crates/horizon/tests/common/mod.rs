//! Helpers the mesh tests share.

use std::time::Duration;

use horizon_core::CoreStatus;
use horizon_proto::Role;
use horizon_testkit::Sandbox;
use horizon_testkit::bots::{Away, BotSpec, Motion};

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
