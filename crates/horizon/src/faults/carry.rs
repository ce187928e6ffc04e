//! Faults carried out on the running sandbox, and what is watched of them: the players they
//! touch, the core's generation and bubbles, relayed traffic, a standby's takeover.

use std::collections::BTreeMap;

use horizon_core::CoreStatus;
use horizon_testkit::Sandbox;
use horizon_testkit::bots::BotReport;

use super::{Fault, FaultKind};

/// A fault being carried out, and what is needed to report it.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) fault: Fault,
    /// When it started, in seconds since the Unix epoch (the bots' clock).
    pub(super) started_at: f64,
    /// Index of each affected bot, with its `reconnecting_seen` and `sessions_ended` at the
    /// start.
    pub(super) affected: Vec<(usize, u64, u64)>,
    /// What could not be done (e.g. no server to kill).
    pub(crate) problem: Option<String>,
    /// The core's generation and bubble ids when it began.
    pub(super) generation: Option<u64>,
    pub(super) bubbles: Vec<u64>,
    /// Looked at [`OBSERVE_AFTER_S`] after the fault ended.
    pub(super) observed: Option<Observed>,
    /// Every agent's transfer items and requests sent round a cut, and passed on for others,
    /// when it began (`agent_stats`'s `relayed_sent`, `relayed_through`).
    pub(super) relayed: (u64, u64),
    /// Regions stopped at their lease's end so far: at relay sites, at the core site.
    pub(super) lapsed: (u64, u64),
    /// A leader's fault: how its standby took over ([`take_over`]).
    pub(crate) takeover: Option<Takeover>,
    /// What moved regions when it began: see [`Moves`].
    pub(super) moves: Moves,
}

/// How regions moved, counted so far: restored from a copy (the core's restores, the
/// affected players' views that went back to a copy's tick) or drained with their state
/// (every agent's drains, by outcome).
#[derive(Debug, Default)]
pub(super) struct Moves {
    pub(super) core_restores: u64,
    /// By bot index, for the affected players.
    pub(super) restores_seen: BTreeMap<usize, u64>,
    pub(super) drains_moved: u64,
    pub(super) drains_failed_over: u64,
}

impl Moves {
    fn now(
        status: &CoreStatus,
        bots: &[BotReport],
        affected: &[(usize, u64, u64)],
        sandbox: &Sandbox,
    ) -> Moves {
        use std::sync::atomic::Ordering::Relaxed;
        let seen = affected.iter().filter_map(|&(i, ..)| Some((i, bots.get(i)?.restores_seen)));
        Moves {
            core_restores: status.restores.values().sum(),
            restores_seen: seen.collect(),
            drains_moved: sandbox.every_agent_stats().map(|s| s.drains_moved.load(Relaxed)).sum(),
            drains_failed_over: sandbox
                .every_agent_stats()
                .map(|s| s.drains_failed_over.load(Relaxed))
                .sum(),
        }
    }
}

/// How a standby took over from a leader that died or was cut from etcd, in seconds from the
/// fault.
#[derive(Debug, Default)]
pub(crate) struct Takeover {
    /// The cut leader fenced itself (stopped granting and renewing): `None` for a kill.
    pub(super) fenced_s: Option<f64>,
    /// The standby was elected (wrote the next generation).
    pub(super) elected_s: f64,
    /// The new leader's first lease kept or renewed.
    pub(super) first_grant_s: Option<f64>,
}

/// The mesh after a fault.
#[derive(Debug, Default)]
pub(super) struct Observed {
    /// Where each affected player (by bot index: a player who joins again later, after an
    /// agent restart, has a new id) was simulated.
    pub(super) placed: BTreeMap<usize, String>,
    /// Each affected bot's `sessions_ended` then: a session a later fault ended (a restarted
    /// agent) is not this one's doing.
    pub(super) sessions: BTreeMap<usize, u64>,
    pub(super) generation: Option<u64>,
    pub(super) bubbles: Vec<u64>,
    /// What was relayed since the fault began: (sent round, passed on).
    pub(super) relayed: (u64, u64),
    /// Regions stopped at their lease's end since the fault began: (relay sites, core site).
    pub(super) lapsed: (u64, u64),
    /// What moved regions, counted then.
    pub(super) moves: Moves,
}

/// Every agent's relayed traffic so far: (sent round, passed on).
fn relayed(sandbox: &Sandbox) -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    sandbox.every_agent_stats().fold((0, 0), |(sent, through), s| {
        (sent + s.relayed_sent.load(Relaxed), through + s.relayed_through.load(Relaxed))
    })
}

/// Regions stopped at their lease's end so far, every agent that ran: (relay sites, core site).
fn lapsed(sandbox: &Sandbox) -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    let core = sandbox.core_site();
    let of = |core_site: bool| -> u64 {
        sandbox
            .every_agent_site_stats()
            .filter(|(site, _)| (*site == core) == core_site)
            .map(|(_, s)| s.leases_lapsed.load(Relaxed))
            .sum()
    };
    (of(false), of(true))
}

/// A leader's fault, carried out: kills the leader (`kill_core`; `partition_core_store` cut it
/// from etcd at [`start`] and it fences itself), waits for its standby to lead, then for the
/// new leader's first lease kept or renewed. Each at most 30 s.
pub(crate) async fn take_over(r: &mut Running, sandbox: &mut Sandbox) -> Result<(), String> {
    const WITHIN: std::time::Duration = std::time::Duration::from_secs(30);
    let began = r.started_at;
    let mut takeover = Takeover::default();
    if r.fault.kind == FaultKind::KillCore {
        sandbox.kill_leader().await;
    } else {
        let fenced = tokio::time::timeout(WITHIN, sandbox.core.fenced()).await;
        let why = fenced.map_err(|_| "the leader cut from etcd never fenced itself".to_owned())?;
        takeover.fenced_s = Some(now_s() - began);
        tracing::info!(%why, "drill: the leader fenced itself");
    }
    sandbox.standby_leads(WITHIN).await.map_err(|e| e.to_string())?;
    takeover.elected_s = now_s() - began;
    let deadline = tokio::time::Instant::now() + WITHIN;
    while tokio::time::Instant::now() < deadline {
        if sandbox.core.status().await.is_some_and(|s| s.leases_granted > 0) {
            takeover.first_grant_s = Some(now_s() - began);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    r.takeover = Some(takeover);
    Ok(())
}

/// A fault's outcome is looked at this long after it ended (or began, for a kill).
/// (Past a tick of the core, so that a restarted one has placed everyone again.)
pub(crate) const OBSERVE_AFTER_S: f64 = 8.0;

pub(crate) fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The player (bot index) → bubble and bubble → site maps of a status document.
fn placement(status: &CoreStatus) -> (BTreeMap<u64, u64>, BTreeMap<u64, String>) {
    let of = status.players.iter().filter_map(|p| Some((p.player, p.bubble?))).collect();
    let site = status.bubbles.iter().map(|b| (b.bubble, b.site.clone())).collect();
    (of, site)
}

/// Starts `fault` (everything but a core restart, which the caller carries out): decides who
/// it affects from the core's status, then breaks the link or kills the server.
pub(crate) fn start(
    fault: &Fault,
    sandbox: &Sandbox,
    status: &CoreStatus,
    bots: &[BotReport],
) -> Running {
    let (bubble_of, site_of) = placement(status);
    let player_site = |r: &BotReport| {
        r.player.and_then(|p| bubble_of.get(&p)).and_then(|b| site_of.get(b)).cloned()
    };
    let mut problem = None;
    let mut affected_bubbles: Option<Vec<u64>> = None;
    let pick = |pred: &dyn Fn(&BotReport) -> bool| -> Vec<(usize, u64, u64)> {
        bots.iter()
            .enumerate()
            .filter(|(_, r)| r.joined && !r.left_early && pred(r))
            .map(|(i, r)| (i, r.reconnecting_seen, r.sessions_ended))
            .collect()
    };
    let affected = match &fault.kind {
        FaultKind::Partition { site } => {
            sandbox.partition_core(site, true);
            pick(&|r| player_site(r).as_deref() == Some(site))
        }
        FaultKind::Loss { site, rate } => {
            sandbox.core_link_loss(site, *rate);
            pick(&|r| player_site(r).as_deref() == Some(site))
        }
        FaultKind::CutTransfer { a, b } => {
            sandbox.partition_transfer(a, b, true);
            pick(&|r| {
                let at = player_site(r);
                let pair = [a.as_str(), b.as_str()];
                pair.contains(&r.site.as_str())
                    && at.as_deref().is_some_and(|s| pair.contains(&s) && s != r.site)
            })
        }
        FaultKind::RestartCore | FaultKind::KillCore => pick(&|_| true),
        FaultKind::PartitionCoreStore => {
            sandbox.cut_leader_from_store(true);
            pick(&|_| true)
        }
        // Its players (their gateway dies) and those it simulates (its servers die).
        FaultKind::RestartAgent { site } => {
            pick(&|r| r.site == *site || player_site(r).as_deref() == Some(site))
        }
        FaultKind::KillServer { site } | FaultKind::DrainServer { site } => {
            let servers = status.site(site).and_then(|s| s.servers.clone()).unwrap_or_default();
            let busiest =
                servers.iter().filter(|s| !s.bubbles.is_empty()).max_by_key(|s| s.players);
            let drain = matches!(fault.kind, FaultKind::DrainServer { .. });
            match busiest.map(|s| (s.server.as_str(), s.bubbles.clone())) {
                Some((name, bubbles)) => {
                    let done = if drain {
                        sandbox.stop_server(site, name)
                    } else {
                        sandbox.kill_server(site, name)
                    };
                    if !done {
                        problem = Some(format!("server {name} not found to signal"));
                    }
                    affected_bubbles = Some(bubbles);
                }
                None => problem = Some(format!("no game server at {site} holds a region")),
            }
            let bubbles = affected_bubbles.clone().unwrap_or_default();
            pick(&|r| r.player.and_then(|p| bubble_of.get(&p)).is_some_and(|b| bubbles.contains(b)))
        }
    };
    let generation = Some(u64::from(status.generation));
    let bubbles = bubble_ids(status);
    let moves = Moves::now(status, bots, &affected, sandbox);
    Running {
        moves,
        fault: fault.clone(),
        started_at: now_s(),
        affected,
        problem,
        generation,
        bubbles,
        observed: None,
        relayed: relayed(sandbox),
        lapsed: lapsed(sandbox),
        takeover: None,
    }
}

fn bubble_ids(status: &CoreStatus) -> Vec<u64> {
    status.bubbles.iter().map(|b| b.bubble).collect()
}

/// Looks at where the fault left its players ([`OBSERVE_AFTER_S`] after it ended).
pub(crate) fn observe(r: &mut Running, status: &CoreStatus, bots: &[BotReport], sandbox: &Sandbox) {
    let (bubble_of, site_of) = placement(status);
    let mut at = BTreeMap::new();
    let mut sessions = BTreeMap::new();
    for &(i, ..) in &r.affected {
        let Some(bot) = bots.get(i) else { continue };
        sessions.insert(i, bot.sessions_ended);
        let Some(p) = bot.player else { continue };
        if let Some(site) = bubble_of.get(&p).and_then(|b| site_of.get(b)) {
            at.insert(i, site.clone());
        }
    }
    let generation = Some(u64::from(status.generation));
    let (sent, through) = relayed(sandbox);
    let relayed = (sent - r.relayed.0, through - r.relayed.1);
    let (relay, core) = lapsed(sandbox);
    let lapsed = (relay - r.lapsed.0, core - r.lapsed.1);
    let bubbles = bubble_ids(status);
    let moves = Moves::now(status, bots, &r.affected, sandbox);
    r.observed =
        Some(Observed { placed: at, sessions, generation, bubbles, relayed, lapsed, moves });
}

/// Ends a lasting fault: the link heals.
pub(crate) fn end(fault: &Fault, sandbox: &Sandbox) {
    match &fault.kind {
        FaultKind::Partition { site } => {
            sandbox.partition_core(site, false);
        }
        FaultKind::Loss { site, .. } => {
            sandbox.core_link_loss(site, 0.0);
        }
        FaultKind::CutTransfer { a, b } => {
            sandbox.partition_transfer(a, b, false);
        }
        // Healed by the caller, which starts the fenced leader again as a standby.
        FaultKind::PartitionCoreStore => {}
        FaultKind::RestartCore
        | FaultKind::RestartAgent { .. }
        | FaultKind::KillServer { .. }
        | FaultKind::DrainServer { .. }
        | FaultKind::KillCore => {}
    }
}
