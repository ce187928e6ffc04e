//! What each fault did: the summary line's words while it runs, and its entry in the final
//! document.

use std::collections::BTreeMap;

use horizon_testkit::bots::BotReport;

use super::FaultKind;
use super::carry::{OBSERVE_AFTER_S, Observed, Running};

/// A few words for the 5 s summary line: the faults in force and the players waiting.
/// (Reads the live reports under their locks: called every 5 s, it copies nothing.)
pub(crate) fn describe(
    running: &[Running],
    bots: &[std::sync::Arc<std::sync::Mutex<BotReport>>],
    now: f64,
) -> String {
    let mut parts = Vec::new();
    for r in running.iter().filter(|r| now < r.started_at + r.fault.for_s.max(5.0)) {
        let since = now - r.started_at;
        let what = match &r.fault.kind {
            FaultKind::Partition { site } => format!("{site} cut from core {since:.0} s"),
            FaultKind::Loss { site, rate } => format!("{site}–core loss {rate} {since:.0} s"),
            FaultKind::CutTransfer { a, b } => format!("{a}–{b} transfer cut {since:.0} s"),
            FaultKind::RestartCore => format!("core restarted {since:.0} s ago"),
            FaultKind::RestartAgent { site } => format!("{site} agent restarted {since:.0} s ago"),
            FaultKind::KillServer { site } => format!("{site} server killed {since:.0} s ago"),
            FaultKind::DrainServer { site } => {
                format!("{site} server told to stop {since:.0} s ago")
            }
            FaultKind::KillCore => format!("leader killed {since:.0} s ago"),
            FaultKind::PartitionCoreStore => format!("leader cut from etcd {since:.0} s"),
        };
        let waiting = r
            .affected
            .iter()
            .filter(|(i, seen, _)| {
                bots.get(*i)
                    .and_then(|b| b.lock().ok())
                    .is_some_and(|b| b.reconnecting_seen > *seen && now - b.last_update_at > 1.0)
            })
            .count();
        parts.push(if waiting > 0 {
            format!("{what}; {waiting} players reconnecting")
        } else {
            what
        });
    }
    parts.join(" · ")
}

/// A silence this long or longer stopped a player (a shorter one is a move or a crossing):
/// when it began and ended say when the fault stopped them and when they played again.
const STOPPED_MS: f64 = 500.0;

/// The `faults[]` entry of the final document for one fault.
pub(crate) fn report(r: &Running, bots: &[BotReport], run_end: f64) -> serde_json::Value {
    let empty = Observed::default();
    let Observed {
        placed,
        sessions: sessions_then,
        generation: generation_after,
        bubbles: bubbles_after,
        relayed,
        lapsed,
        moves,
    } = r.observed.as_ref().unwrap_or(&empty);
    let mut resumed = Vec::new();
    let mut stopped = Vec::new();
    let mut resumed_on: BTreeMap<String, u64> = BTreeMap::new();
    // Every affected player is in exactly one of: resumed (on a site, or not placed when the
    // mesh was looked at), never resumed, session ended, left the game.
    let mut unplaced = 0;
    let mut never = 0;
    let mut told = 0;
    let mut twice = 0;
    let mut new_sessions = 0;
    let mut left_game = 0;
    // The longest silence of a player who played on through it, and those whose view went
    // back to a copy's tick (their region restored, not moved with its state).
    let mut longest_gap: Option<f64> = None;
    let mut restored_players = 0;
    // A silence this fault caused begins before it is over (and a little after, for a kill).
    let window_end = r.started_at + r.fault.for_s + OBSERVE_AFTER_S;
    for &(i, _, sessions) in &r.affected {
        let Some(b) = bots.get(i) else { continue };
        if b.left_early {
            // Left during the drill (the demo's leavers): nothing to resume.
            left_game += 1;
            continue;
        }
        // Ended by this fault: by the time the mesh was looked at after it.
        let session_ended = sessions_then.get(&i).copied().unwrap_or(b.sessions_ended) > sessions;
        let in_window = |t: &f64| *t >= r.started_at - 0.5 && *t <= window_end;
        told += u64::from(b.reconnecting_at.iter().any(in_window));
        twice += b.applied_twice;
        if b.last_update_at < run_end - 3.0 || b.last_update_at < r.started_at {
            never += 1;
            continue;
        }
        new_sessions += u64::from(session_ended);
        let restores_then = moves.restores_seen.get(&i).copied().unwrap_or(b.restores_seen);
        let restores_before = r.moves.restores_seen.get(&i).copied().unwrap_or(restores_then);
        restored_players += u64::from(restores_then > restores_before);
        let in_fault = |(began, len): &&(f64, f64)| {
            began + len / 1000.0 > r.started_at - 0.5 && *began < window_end
        };
        if !session_ended {
            for (_, len) in b.gaps.iter().filter(in_fault) {
                longest_gap = Some(longest_gap.map_or(*len, |l: f64| l.max(*len)));
            }
        }
        // The silence the fault stopped them for: the first long gap ending after it began.
        let gap = b.gaps.iter().filter(|(_, len)| *len > STOPPED_MS).find(in_fault);
        match gap {
            Some((began, len)) => {
                resumed.push((began + len / 1000.0 - r.started_at).max(0.0));
                stopped.push((began - r.started_at).max(0.0));
            }
            None => resumed.push(0.0),
        }
        match placed.get(&i) {
            // It played on, as a new player: counted as such, not as resumed.
            _ if session_ended => {}
            Some(site) => *resumed_on.entry(site.clone()).or_default() += 1,
            None => unplaced += 1,
        }
    }
    resumed.sort_by(f64::total_cmp);
    let p50 = resumed.get(resumed.len() / 2).copied();
    let max = resumed.last().copied();
    let mut doc = serde_json::json!({
        "kind": r.fault.kind.name(),
        "at_s": r.fault.at_s,
        "for_s": r.fault.for_s,
        "players_affected": r.affected.len(),
        "stopped_after_fault_s": stopped.iter().copied().fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))),
        "reconnecting_shown": told,
        "resumed_after_s": { "p50": p50, "max": max },
        "resumed_on": resumed_on,
        "resumed_unplaced": unplaced,
        "never_resumed": never,
        "sessions_ended": new_sessions,
        "left_game": left_game,
        "inputs_applied_twice": twice,
        "problem": r.problem,
    });
    if let FaultKind::KillServer { .. } | FaultKind::DrainServer { .. } = r.fault.kind {
        // A killed server's regions are restored from their copies; a drained one's move
        // with their whole state, none restored (docs/running.md, "Drills").
        let round = |ms: f64| (ms * 10.0).round() / 10.0;
        doc["restores"] = moves.core_restores.saturating_sub(r.moves.core_restores).into();
        doc["players_restored"] = restored_players.into();
        doc["longest_gap_ms"] = longest_gap.map(round).into();
        doc["drains"] = serde_json::json!({
            "moved": moves.drains_moved.saturating_sub(r.moves.drains_moved),
            "failed_over": moves.drains_failed_over.saturating_sub(r.moves.drains_failed_over),
        });
    }
    if let FaultKind::CutTransfer { .. } = r.fault.kind {
        // Routed round through the third site (docs/running.md, "Routing round a cut").
        doc["relayed"] = serde_json::json!({ "sent_round": relayed.0, "passed_on": relayed.1 });
    }
    if let Some(t) = &r.takeover {
        let round = |s: f64| (s * 100.0).round() / 100.0;
        doc["takeover_s"] = t.first_grant_s.map(round).into();
        doc["elected_s"] = round(t.elected_s).into();
        doc["fenced_s"] = t.fenced_s.map(round).into();
        // The leader stopped granting before the standby could begin (I7 on real processes).
        doc["fenced_before_elected"] = t.fenced_s.map(|f| f < t.elected_s).into();
    }
    if r.fault.kind.is_takeover() {
        doc["relay_bubbles_stopped"] = lapsed.0.into();
        doc["core_site_regions_stopped"] = lapsed.1.into();
    }
    if r.fault.kind == FaultKind::RestartCore || r.fault.kind.is_takeover() {
        doc["generation"] =
            serde_json::json!({ "before": r.generation, "after": generation_after });
        let kept = r.bubbles.iter().filter(|b| bubbles_after.contains(b)).count();
        doc["bubbles_kept"] = serde_json::json!({ "before": r.bubbles.len(), "kept": kept });
    }
    let sites = r.fault.kind.sites();
    match sites.len() {
        1 => doc["site"] = sites[0].clone().into(),
        2 => doc["sites"] = serde_json::json!(sites),
        _ => {}
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Fault;
    use crate::faults::carry::Moves;

    /// `fault`, begun at `started_at` with `players` affected (bots 0..), `moves` counted then,
    /// looked at as `observed`.
    fn running(
        fault: Fault,
        started_at: f64,
        players: usize,
        observed: Observed,
        moves: Moves,
    ) -> Running {
        Running {
            fault,
            started_at,
            affected: (0..players).map(|i| (i, 0, 0)).collect(),
            problem: None,
            generation: None,
            bubbles: Vec::new(),
            observed: Some(observed),
            relayed: (0, 0),
            lapsed: (0, 0),
            moves,
            takeover: None,
        }
    }

    /// Six players touched by a partition: one resumed on PAR, one resumed but in no bubble
    /// when the mesh was looked at, one never heard of again, one whose session it ended and
    /// who played on as a new player, one who left the game, one resumed on MTL whose session
    /// a later fault ended. Each is counted once.
    #[test]
    fn every_affected_player_is_counted_once() {
        let started_at = 1_000.0;
        let fault =
            Fault { kind: FaultKind::Partition { site: "MTL".into() }, at_s: 40.0, for_s: 45.0 };
        let played = BotReport { joined: true, last_update_at: 1_200.0, ..Default::default() };
        let bots = vec![
            played.clone(),
            played.clone(),
            BotReport { last_update_at: 1_010.0, ..played.clone() },
            BotReport { sessions_ended: 1, ..played.clone() },
            BotReport { left_early: true, last_update_at: 1_010.0, ..played.clone() },
            // Its session ended later, by another fault (an agent restarted): resumed here.
            BotReport { sessions_ended: 1, ..played.clone() },
        ];
        let observed = Observed {
            placed: [(0, "PAR".to_string()), (3, "PAR".to_string()), (5, "MTL".to_string())].into(),
            sessions: [(0, 0), (1, 0), (2, 0), (3, 1), (4, 0), (5, 0)].into(),
            ..Default::default()
        };
        let r = running(fault, started_at, bots.len(), observed, Moves::default());
        let doc = report(&r, &bots, 1_201.0);
        assert_eq!(doc["players_affected"], 6);
        assert_eq!(doc["resumed_on"], serde_json::json!({ "PAR": 1, "MTL": 1 }));
        assert_eq!(doc["resumed_unplaced"], 1);
        assert_eq!(doc["never_resumed"], 1);
        assert_eq!(doc["sessions_ended"], 1);
        assert_eq!(doc["left_game"], 1);
    }

    /// A server told to stop: three players, one who saw a 150 ms move, one whose view went
    /// back to a copy (restored), one untouched; the core restored one region meanwhile and
    /// the agents counted one drain that failed over. A silence under 500 ms is a move, not a
    /// stop: nobody "resumed" late.
    #[test]
    fn a_drain_reports_its_restores_moves_and_longest_silence() {
        let started_at = 1_000.0;
        let fault =
            Fault { kind: FaultKind::DrainServer { site: "MTL".into() }, at_s: 30.0, for_s: 0.0 };
        let played = BotReport { joined: true, last_update_at: 1_200.0, ..Default::default() };
        let bots = vec![
            BotReport { gaps: vec![(1_000.2, 150.0)], ..played.clone() },
            BotReport { restores_seen: 1, gaps: vec![(1_000.1, 420.0)], ..played.clone() },
            played.clone(),
        ];
        let moves = |restores: u64, seen: &[u64], failed_over: u64| Moves {
            core_restores: restores,
            restores_seen: seen.iter().copied().enumerate().collect(),
            drains_moved: 0,
            drains_failed_over: failed_over,
        };
        let observed = Observed { moves: moves(3, &[0, 1, 0], 1), ..Default::default() };
        let r = running(fault, started_at, bots.len(), observed, moves(2, &[0, 0, 0], 0));
        let doc = report(&r, &bots, 1_201.0);
        assert_eq!(doc["restores"], 1);
        assert_eq!(doc["players_restored"], 1);
        assert_eq!(doc["drains"], serde_json::json!({"moved": 0, "failed_over": 1}));
        assert_eq!(doc["longest_gap_ms"], 420.0);
        assert_eq!(doc["resumed_after_s"]["max"], 0.0, "moves, not stops");
    }
}
