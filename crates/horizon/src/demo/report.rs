//! What `horizon demo` reports: the line every 5 s, the servers it took, and the final JSON
//! document (figures of the players, freezes per pair of sites).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use horizon_core::CoreStatus;
use horizon_testkit::bots::BotReport;
use horizon_testkit::stats;

/// The game servers holding at least one region, per site, as the core's status shows them
/// every 5 s: the most seen, and the players and servers of the busiest moment.
#[derive(Debug, Default)]
pub(super) struct Cost {
    pub(super) max_by_site: BTreeMap<String, u64>,
    /// The most game servers running at one sample (hosting, idle or starting), per site.
    pub(super) running_max_by_site: BTreeMap<String, u64>,
    /// The most ready servers holding nothing at one sample, per site.
    pub(super) idle_max_by_site: BTreeMap<String, u64>,
    pub(super) peak_players: u64,
    pub(super) peak_servers: u64,
    /// The most players in no bubble at one sample.
    pub(super) unsimulated_max: u64,
    /// The most zones at one sample.
    pub(super) zones_max: u64,
    /// The most bubbles at one sample, on any site.
    pub(super) bubbles_max: u64,
}

impl Cost {
    pub(super) fn sample(&mut self, status: &CoreStatus) {
        let mut total = 0;
        for s in &status.sites {
            let n = hosting(s) as u64;
            let max = self.max_by_site.entry(s.site.clone()).or_default();
            *max = (*max).max(n);
            total += n;
            let servers = s.servers.iter().flatten();
            let running = self.running_max_by_site.entry(s.site.clone()).or_default();
            *running = (*running).max(servers.clone().count() as u64);
            let idle = servers.filter(|x| x.ready && x.bubbles.is_empty()).count() as u64;
            let most = self.idle_max_by_site.entry(s.site.clone()).or_default();
            *most = (*most).max(idle);
        }
        self.peak_players = self.peak_players.max(status.players_total as u64);
        let unsimulated = status.players.iter().filter(|p| p.bubble.is_none()).count();
        self.unsimulated_max = self.unsimulated_max.max(unsimulated as u64);
        self.peak_servers = self.peak_servers.max(total);
        self.zones_max = self.zones_max.max(status.zones.len() as u64);
        self.bubbles_max = self.bubbles_max.max(status.bubbles.len() as u64);
    }
}

/// A site's game servers holding at least one region.
pub(super) fn hosting(site: &horizon_core::status::SiteStatus) -> usize {
    site.servers.iter().flatten().filter(|x| !x.bubbles.is_empty()).count()
}

pub(super) fn by_site(
    status: &CoreStatus,
    count: fn(&horizon_core::status::SiteStatus) -> usize,
) -> BTreeMap<String, u64> {
    status.sites.iter().map(|s| (s.site.clone(), count(s) as u64)).collect()
}

pub(super) fn summary_line(
    t: u64,
    status: &CoreStatus,
    reports: &[Arc<Mutex<BotReport>>],
    seen: &mut [usize],
) -> String {
    let mut window: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (r, seen) in reports.iter().zip(seen.iter_mut()) {
        let Ok(r) = r.lock() else { continue };
        window.entry(r.site.clone()).or_default().extend(&r.click_ms[*seen..]);
        *seen = r.click_ms.len();
    }
    let players = by_site(status, |s| s.players);
    let bubbles = by_site(status, |s| s.bubbles);
    let servers = by_site(status, hosting);
    let fmt = |m: &BTreeMap<String, u64>| {
        m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(" ")
    };
    let clicks = window
        .into_iter()
        .map(|(site, mut v)| {
            v.sort_by(f64::total_cmp);
            let q = |p: f64| stats::quantile(&v, p).map_or("-".into(), |x| format!("{x:.0}"));
            format!("{site} {}/{}", q(0.5), q(0.95))
        })
        .collect::<Vec<_>>()
        .join(" ");
    let in_zones: usize = status.zones.iter().map(|z| z.members).sum();
    format!(
        "t={t:>3}s  players {}  |  bubbles {} + zones {} ({in_zones} players) on servers {}  |  handovers {}  |  click-to-screen p50/p95 ms (last 5 s): {clicks}",
        fmt(&players),
        fmt(&bubbles),
        status.zones.len(),
        fmt(&servers),
        status.handovers.committed,
    )
}

/// `{p50, p99, max, samples}` of some milliseconds, rounded to 0.1 ms.
fn summary(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(f64::total_cmp);
    let r = |x: Option<f64>| x.map(|x| (x * 10.0).round() / 10.0);
    serde_json::json!({
        "p50": r(stats::quantile(&v, 0.5)),
        "p99": r(stats::quantile(&v, 0.99)),
        "max": r(v.last().copied()),
        "samples": v.len(),
    })
}

/// [`summary`] of each pair's milliseconds.
fn by_pair(m: BTreeMap<String, Vec<f64>>) -> serde_json::Value {
    m.into_iter().map(|(pair, v)| (pair, summary(v))).collect::<serde_json::Map<_, _>>().into()
}

/// The freezes players saw when their bubble moved, as their gateways measured them:
/// `freeze_ms` per "FROM-TO" pair {p50, p99, max, samples}, and the excess beyond the physical
/// floor {p50, p99, max, samples}, over the moves whose floor is known: over all of them, and
/// per pair.
pub(super) fn freeze_report(
    samples: &[horizon_agent::FreezeSample],
) -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    let stats::FreezesByPair { gaps_ms: per, excess_ms: excess_per } =
        stats::freezes_by_pair(samples);
    let all: Vec<f64> = excess_per.values().flatten().copied().collect();
    (by_pair(per), summary(all), by_pair(excess_per))
}

/// Each move's freeze above its floor in physics: SPEC §5's `d(S,T) + d(T,h) − d(S,h) + tick`
/// with each one-way delay the great circle between the two sites at fibre speed (their
/// `[sites.coordinates]`), not the backbone's measured one. What no engineering removes is
/// below it; above it, the backbone's detours and everything Horizon adds. Overall and by pair
/// (`FROM-TO`); moves between unplaced sites are left out.
pub(super) fn physics_report(
    samples: &[(String, horizon_agent::FreezeSample)],
    sites: &horizon_mesh::Sites,
    tick_ms: f64,
) -> (serde_json::Value, serde_json::Value) {
    let floor = |a: &str, b: &str| -> Option<f64> {
        if a == b {
            return Some(0.0);
        }
        sites.floor_ms(sites.id(a)?, sites.id(b)?)
    };
    let mut pairs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (home, f) in samples {
        let (s, t) = (f.from.as_str(), f.to.as_str());
        let (Some(st), Some(th), Some(sh)) = (floor(s, t), floor(t, home), floor(s, home)) else {
            continue;
        };
        let physics = ((st + th - sh) / 2.0).max(0.0) + tick_ms;
        let gap = f.gap.as_secs_f64() * 1000.0;
        pairs.entry(format!("{s}-{t}")).or_default().push((gap - physics).max(0.0));
    }
    let all = summary(pairs.values().flatten().copied().collect());
    (all, by_pair(pairs))
}

/// The final document. Inputs: `inputs_applied` is what the game counted on each player's
/// entity (its `inputs` counter in the last update the player saw); `inputs_in_flight` are
/// inputs sent but not yet acknowledged when the players stopped; `inputs_unacked_in_ended_sessions`
/// those of sessions a restarted agent ended (never acknowledged, their player gone with the
/// session); so `inputs_applied + inputs_in_flight + inputs_unacked_in_ended_sessions =
/// inputs_sent` when nothing is lost. Each sums every session of each player.
pub(super) fn final_document(status: &CoreStatus, finals: &[BotReport]) -> serde_json::Value {
    let sum = |f: fn(&BotReport) -> u64| finals.iter().map(f).sum::<u64>();
    let sent = sum(BotReport::total_sent);
    let acked = sum(BotReport::total_acked);
    let ended = sum(BotReport::unacked_in_ended_sessions);
    serde_json::json!({
        "players": finals.iter().filter(|r| r.joined).count(),
        "bubbles_by_site": by_site(status, |s| s.bubbles),
        "handovers": status.handovers.committed,
        "handovers_failed": status.handovers.failed,
        "inputs_sent": sent,
        "inputs_applied": sum(BotReport::total_applied),
        "inputs_acked": acked,
        "inputs_in_flight": sent - (acked + ended).min(sent),
        "inputs_in_flight_max_per_player": finals.iter().map(|r| r.inputs_sent - r.acked.min(r.inputs_sent)).max().unwrap_or(0),
        "inputs_unacked_in_ended_sessions": ended,
        "sessions_ended": sum(|r| r.sessions_ended),
        "inputs_applied_twice": sum(|r| r.applied_twice),
        "state_chain_checked": sum(|r| r.chain_checked),
        "state_chain_breaks": sum(|r| r.chain_breaks),
        "longest_update_gap_ms": finals.iter().map(|r| r.max_gap_ms).fold(0.0, f64::max),
        "click_to_screen_ms": stats::percentiles(finals, |r| &r.click_ms),
        "click_to_update_ms": stats::percentiles(finals, |r| &r.update_click_ms),
        "own_states_received": sum(|r| r.own_states),
        "input_delivery_ms": stats::percentiles(finals, |r| &r.delivery_ms),
        "errors": finals.iter().filter_map(|r| r.error.as_ref().map(|e| format!("{}: {e}", r.name))).collect::<Vec<_>>(),
        "settings": {"tick_s": 5, "dwell_s": 10, "hold_s": 20, "note": "demo settings shorten dwell and hold (defaults: 30 s, 180 s)"},
    })
}

/// The end of a run without `--json`: the report's main figures in a few lines of words (the
/// whole document is `--json`'s).
pub(super) fn readable(doc: &serde_json::Value) -> Vec<String> {
    let n = |key: &str| doc[key].as_u64().unwrap_or(0);
    let by_site = |key: &str, fmt: &dyn Fn(&serde_json::Value) -> String| {
        let Some(m) = doc[key].as_object() else { return "-".to_owned() };
        m.iter().map(|(site, v)| format!("{site} {}", fmt(v))).collect::<Vec<_>>().join(", ")
    };
    let ms = |v: &serde_json::Value| v.as_f64().map_or("-".to_owned(), |x| format!("{x:.0}"));
    let quantiles = |v: &serde_json::Value| format!("{}/{}", ms(&v["p50"]), ms(&v["p95"]));
    let freezes = |key: &str| {
        let Some(m) = doc[key].as_object() else { return "none".to_owned() };
        if m.is_empty() {
            return "none".to_owned();
        }
        let pair = |(p, v): (&String, &serde_json::Value)| {
            format!("{p} {} (freeze p99 {} ms)", v["samples"], ms(&v["p99"]))
        };
        m.iter().map(pair).collect::<Vec<_>>().join(", ")
    };
    let lost = n("inputs_sent")
        .saturating_sub(n("inputs_applied") + n("inputs_in_flight"))
        .saturating_sub(n("inputs_unacked_in_ended_sessions"));
    let join = &doc["join_to_first_update_ms"];
    let zones = &doc["zones"];
    let mut lines = vec![
        format!(
            "final: {} players; inputs {} sent, {} applied, {} in flight, {lost} lost, {} applied twice",
            n("players"),
            n("inputs_sent"),
            n("inputs_applied"),
            n("inputs_in_flight"),
            n("inputs_applied_twice"),
        ),
        format!(
            "click-to-screen p50/p95 ms by home: {}",
            by_site("click_to_screen_ms", &quantiles)
        ),
        format!(
            "handovers {} ({} failed); players frozen by a handover, by pair: {}; by a crossing: {}",
            n("handovers"),
            n("handovers_failed"),
            freezes("freeze_ms"),
            freezes("crossing_freeze_ms"),
        ),
        format!(
            "servers at most: {}; {} players per server at peak; bubbles at most {}; zones {} ({} splits, {} merges)",
            by_site("max_servers_by_site", &|v| v.to_string()),
            ms(&doc["players_per_server_at_peak"]),
            n("bubbles_max"),
            zones["count"],
            zones["splits"],
            zones["merges"],
        ),
        format!(
            "joins: first update after p50 {} ms, p99 {} ms; players in no running region at most {}",
            ms(&join["p50"]),
            ms(&join["p99"]),
            n("players_unsimulated_max"),
        ),
    ];
    if let Some(faults) = doc["faults"].as_array() {
        for f in faults {
            lines.push(format!(
                "fault {} at {} s: {} players affected, resumed after at most {} s, {} never resumed",
                f["kind"].as_str().unwrap_or("?"),
                ms(&f["at_s"]),
                f["players_affected"],
                f["resumed_after_s"]["max"].as_f64().map_or("-".to_owned(), |x| format!("{x:.1}")),
                f["never_resumed"],
            ));
            if let Some(takeover) = f["takeover_s"].as_f64() {
                let elected = f["elected_s"].as_f64().unwrap_or(f64::NAN);
                lines.push(format!(
                    "  the standby took over: elected after {elected:.1} s, first grant after {takeover:.1} s, generation {} → {}, {} relay regions stopped",
                    f["generation"]["before"],
                    f["generation"]["after"],
                    f["relay_bubbles_stopped"],
                ));
            }
        }
    }
    lines.push("(the whole report: --json)".to_owned());
    lines
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_end_of_a_run_reads_as_words_not_json() {
        let doc = serde_json::json!({
            "players": 60, "inputs_sent": 100, "inputs_applied": 90, "inputs_in_flight": 8,
            "inputs_unacked_in_ended_sessions": 0, "inputs_applied_twice": 0,
            "click_to_screen_ms": {"MTL": {"p50": 12.6, "p95": 13.9}},
            "handovers": 2, "handovers_failed": 0,
            "freeze_ms": {"PAR-MTL": {"p99": 21.9, "samples": 2}}, "crossing_freeze_ms": {},
            "max_servers_by_site": {"MTL": 1}, "players_per_server_at_peak": 30.0,
            "bubbles_max": 1, "zones": {"count": 1, "splits": 0, "merges": 0},
            "join_to_first_update_ms": {"p50": 177.0, "p99": 346.0},
            "players_unsimulated_max": 0,
            "faults": [{"kind": "partition", "at_s": 45.0, "players_affected": 5,
                        "resumed_after_s": {"max": 31.14}, "never_resumed": 0},
                       {"kind": "kill_core", "at_s": 55.0, "players_affected": 58,
                        "resumed_after_s": {"max": 0.0}, "never_resumed": 0,
                        "takeover_s": 4.42, "elected_s": 2.27, "relay_bubbles_stopped": 0,
                        "generation": {"before": 2, "after": 3}}],
        });
        let lines = super::readable(&doc);
        assert_eq!(
            lines[0],
            "final: 60 players; inputs 100 sent, 90 applied, 8 in flight, 2 lost, 0 applied twice"
        );
        assert_eq!(lines[1], "click-to-screen p50/p95 ms by home: MTL 13/14");
        assert!(lines[2].contains("PAR-MTL 2 (freeze p99 22 ms)"), "{}", lines[2]);
        assert!(lines[2].ends_with("by a crossing: none"), "{}", lines[2]);
        assert!(lines[5].starts_with(
            "fault partition at 45 s: 5 players affected, resumed after at most 31.1 s"
        ));
        assert_eq!(
            lines[7],
            "  the standby took over: elected after 2.3 s, first grant after 4.4 s, generation 2 → 3, 0 relay regions stopped"
        );
        assert!(lines.iter().all(|l| !l.contains('{')), "{lines:#?}");
    }
}

#[cfg(test)]
mod physics {
    use std::time::Duration;

    use horizon_agent::FreezeSample;
    use horizon_mesh::{Place, SiteName, Sites};

    /// PAR and MTL, placed: their great circle is 5,520 km, a floor of 55.2 ms there and back.
    fn sites() -> Sites {
        let (par, mtl) = (SiteName::new("PAR").unwrap(), SiteName::new("MTL").unwrap());
        let places = [
            (par.clone(), Place { lat: 48.86, lon: 2.35 }),
            (mtl.clone(), Place { lat: 45.50, lon: -73.57 }),
        ];
        let pairs = [(par.clone(), mtl.clone(), 85.0)];
        Sites::placed(vec![par.clone(), mtl], &par, &pairs, &places).unwrap()
    }

    fn moved(home: &str, gap_ms: u64) -> (String, FreezeSample) {
        let sample = FreezeSample {
            from: "PAR".into(),
            to: "MTL".into(),
            gap: Duration::from_millis(gap_ms),
            floor: None,
        };
        (home.to_owned(), sample)
    }

    /// SPEC §5's example, with physics' delays: a Montrealer in a bubble moving PAR → MTL cannot
    /// freeze less than a tick; a Parisian, less than the great circle there and back and a tick.
    #[test]
    fn a_freeze_is_measured_above_the_great_circles_floor_for_its_home() {
        let (all, by_pair) =
            super::physics_report(&[moved("MTL", 60), moved("PAR", 150)], &sites(), 33.0);
        let floor = sites().floor_ms(sites().id("PAR").unwrap(), sites().id("MTL").unwrap());
        let floor = floor.unwrap();
        assert!((floor - 55.2).abs() < 0.5, "{floor}");
        let above_parisian = 150.0 - (floor + 33.0);
        assert_eq!(all["samples"], 2);
        assert_eq!(all["max"], (above_parisian * 10.0).round() / 10.0);
        assert_eq!(by_pair["PAR-MTL"]["samples"], 2);
        let (montrealer, _) = super::physics_report(&[moved("MTL", 60)], &sites(), 33.0);
        assert_eq!(montrealer["max"], 27.0, "the Montrealer: 60 ms less one tick");
    }
}
