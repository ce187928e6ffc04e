//! The agent's Prometheus metrics (`prometheus` crate, one registry per agent, `horizon_agent_`
//! prefix, label `site` from the configuration) and its admin API's view of it: `/readyz` is
//! "registered with the core and at least one game server ready", `/status` the
//! [`AgentStatus`] document. The machine counts in [`AgentStats`] (atomics, no locks on its
//! loop); a scrape brings them into the registry. Every metric is listed in `docs/metrics.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use horizon_admin::{BoxFuture, Page, Source};
use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntGauge, Opts, Registry};
use serde::{Deserialize, Serialize};

use crate::AgentStats;

type Field = fn(&AgentStats) -> &AtomicU64;

/// Counters: (name, help, field).
const COUNTERS: &[(&str, &str, Field)] = &[
    ("horizon_agent_inputs_total", "Player inputs received by the gateway.", |s| {
        &s.inputs_received
    }),
    (
        "horizon_agent_inputs_resent_total",
        "Inputs sent again (a timeout, a route change, a new holder).",
        |s| &s.inputs_resent,
    ),
    (
        "horizon_agent_inputs_refused_total",
        "Inputs refused (out of window, over the player's limit of inputs or bytes, too large).",
        |s| &s.inputs_refused,
    ),
    (
        "horizon_agent_inputs_too_large_total",
        "Inputs over 16 KiB: refused and their player's connection closed with too_large.",
        |s| &s.inputs_too_large,
    ),
    (
        "horizon_agent_leases_lapsed_total",
        "Regions stopped at this site because their lease ran out (the core unreachable for a whole lease, or a renewal refused): their players waited for a failover. Stays 0 through a core restart or a standby's takeover.",
        |s| &s.leases_lapsed,
    ),
    (
        "horizon_agent_servers_stopped_idle_total",
        "Game servers stopped after holding nothing for 30 s while the warm pool was full (servers follow the load).",
        |s| &s.servers_stopped_idle,
    ),
    (
        "horizon_agent_regions_moved_total",
        "Regions moved whole from a game server over servers.players_per_server for 10 s to another server of this site (SMD's rule: heaviest first, to the lighter side).",
        |s| &s.regions_moved,
    ),
    (
        "horizon_agent_region_moves_given_up_total",
        "Moves of a region to another game server given up before its old server froze (the new server refused, a copy failed, or 4 s passed): the region stays on its server, under the core's newer epoch.",
        |s| &s.region_moves_given_up,
    ),
    (
        "horizon_agent_region_moves_lost_total",
        "Moves of a region to another game server that failed after its old server froze (the new server died, or did not run within 4 s): the region was reported lost and fails over from its copy.",
        |s| &s.region_moves_lost,
    ),
    (
        "horizon_agent_beacon_pongs_total",
        "Probe beacon pings answered (listen.beacon): clients measuring their round trip to this site.",
        |s| &s.beacon_pongs,
    ),
    (
        "horizon_agent_beacon_malformed_total",
        "Datagrams on the probe beacon port that were no beacon ping (wrong length, magic, version or kind): not answered.",
        |s| &s.beacon_malformed,
    ),
    (
        "horizon_agent_beacon_limited_total",
        "Probe beacon pings over their source's rate (20 a second after a burst of 10): not answered.",
        |s| &s.beacon_limited,
    ),
    (
        "horizon_agent_probe_tables_accepted_total",
        "Joins whose probe table (the client's RTT to every site's beacon) agrees with the RTT this gateway measures and with the backbone: kept for stage 1's figures.",
        |s| &s.probe_tables_accepted,
    ),
    (
        "horizon_agent_probe_tables_contradicted_total",
        "Joins whose probe table contradicts this gateway's own RTT measure or the backbone (a client misreporting its round trips): the table is dropped, the player still plays.",
        |s| &s.probe_tables_contradicted,
    ),
    (
        "horizon_agent_joins_not_nearest_total",
        "Joins with a believed probe table naming another site nearer than this one (expected under the measure stage, where everyone enters at the core site).",
        |s| &s.joins_not_nearest,
    ),
    (
        "horizon_agent_positions_refused_total",
        "Positions a game server reported for a region it does not run here under that lease: refused.",
        |s| &s.positions_refused,
    ),
    (
        "horizon_agent_orders_refused_total",
        "Orders of the core's ordered lane refused: one that came twice, or more than 64 ahead of the next to serve (a correct core sends neither).",
        |s| &s.orders_refused,
    ),
    (
        "horizon_agent_orders_overtaken_total",
        "Orders of the core's ordered lane still unanswered after 5 s (a server slow to load): the next ones were served without waiting for them.",
        |s| &s.orders_overtaken,
    ),
    (
        "horizon_agent_stale_updates_refused_total",
        "Updates from a game server for a bubble it does not hold here, or under another epoch than the bubble's lease here: refused, nobody sees them.",
        |s| &s.stale_updates_refused,
    ),
    (
        "horizon_agent_stream_items_dropped_total",
        "Items dropped at a full outbound stream queue (2048 items or 64 MiB): to a game server, a player, a peer or the core's backup.",
        |s| &s.stream_items_dropped,
    ),
    (
        "horizon_agent_inputs_uncovered_dropped_total",
        "Applied inputs forgotten before a stored copy covered them (a player's kept inputs at their limit).",
        |s| &s.inputs_uncovered_dropped,
    ),
    (
        "horizon_agent_writes_after_lease_total",
        "Updates a game server wrote after its lease had ended by this agent's clock (I5 seen from the agent; 0 when servers stop on time).",
        |s| &s.writes_after_lease,
    ),
    (
        "horizon_agent_resumes_total",
        "Players who reconnected and resumed as themselves (the same client, or a resumption credential after their gateway restarted).",
        |s| &s.resumes,
    ),
    ("horizon_agent_updates_total", "World updates delivered to this site's players.", |s| {
        &s.updates_delivered
    }),
    (
        "horizon_agent_own_states_total",
        "Players' own states delivered to this site's players the moment their input was applied, ahead of the tick's update.",
        |s| &s.own_delivered,
    ),
    (
        "horizon_agent_own_states_refused_total",
        "Own states a game server sent for a bubble it does not hold here under its lease, or over 16 KiB: refused, nobody sees them.",
        |s| &s.own_refused,
    ),
    (
        "horizon_agent_crossings_total",
        "Players' states sent across a border to another bubble.",
        |s| &s.crossings,
    ),
    (
        "horizon_agent_crossings_lost_total",
        "Crossings to another site given up: not taken within their deadline.",
        |s| &s.crossings_lost,
    ),
    ("horizon_agent_handovers_in_total", "Handovers this site took as the target.", |s| {
        &s.handovers_in
    }),
    (
        "horizon_agent_relayed_sent_total",
        "Transfer items and requests sent to another site through a third (the direct link down or much slower).",
        |s| &s.relayed_sent,
    ),
    (
        "horizon_agent_relayed_through_total",
        "Transfer items and requests passed on between two other sites.",
        |s| &s.relayed_through,
    ),
    (
        "horizon_agent_relayed_dropped_total",
        "Relayed transfer items and requests dropped: no route on, or past the hop limit.",
        |s| &s.relayed_dropped,
    ),
    (
        "horizon_agent_route_changes_total",
        "Changes of the first hop towards another site (a link down, up, or much slower).",
        |s| &s.route_changes,
    ),
];

/// What a drain counts by: its outcome.
const DRAINS_HELP: &str = "Game servers that stopped after draining (SIGTERM: a pod deleted, a node drained, a scale-in), by outcome: moved (every region went to another server of the site with its whole state first), failed_over (the server went before some could move: they fail over from their copies).";

/// Counters of one name told apart by one more constant label: (name, help, (label, value),
/// field).
const LABELLED_COUNTERS: &[(&str, &str, (&str, &str), Field)] = &[
    ("horizon_agent_drains_total", DRAINS_HELP, ("outcome", "moved"), |s| &s.drains_moved),
    ("horizon_agent_drains_total", DRAINS_HELP, ("outcome", "failed_over"), |s| {
        &s.drains_failed_over
    }),
    ("horizon_agent_resumes_refused_total", RESUMES_REFUSED_HELP, ("reason", "invalid"), |s| {
        &s.resumes_refused_invalid
    }),
    ("horizon_agent_resumes_refused_total", RESUMES_REFUSED_HELP, ("reason", "other_site"), |s| {
        &s.resumes_refused_other_site
    }),
    (
        "horizon_agent_resumes_refused_total",
        RESUMES_REFUSED_HELP,
        ("reason", "other_account"),
        |s| &s.resumes_refused_other_account,
    ),
    ("horizon_agent_resumes_refused_total", RESUMES_REFUSED_HELP, ("reason", "unknown"), |s| {
        &s.resumes_refused_unknown
    }),
];

/// What a refused resumption counts by: why.
const RESUMES_REFUSED_HELP: &str = "Resumption credentials refused, by reason: invalid (forged, expired, malformed, or signed by a key this site lacks), other_site (another site's session), other_account (the connection's account is not the credential's), unknown (the player left or its session ended).";

/// Gauges: (name, help, field).
const GAUGES: &[(&str, &str, Field)] = &[
    ("horizon_agent_players", "Players connected to this site's gateway (homed here).", |s| {
        &s.players
    }),
    ("horizon_agent_bubbles", "Bubbles this site simulates or stands by for.", |s| &s.bubbles),
    ("horizon_agent_servers", "Game servers connected to this agent.", |s| &s.servers),
    (
        "horizon_agent_servers_ready",
        "Game servers that said they are ready (holding a bubble or not).",
        |s| &s.servers_ready,
    ),
    (
        "horizon_agent_servers_warm_pool",
        "Game servers kept ready beyond the load (servers.warm_pool): idle ones beyond it are stopped after 30 s.",
        |s| &s.servers_warm_pool,
    ),
    (
        "horizon_agent_servers_max",
        "The most game servers this site runs at once (servers.max): no server is started beyond it.",
        |s| &s.servers_max,
    ),
    ("horizon_agent_registered", "1 while the agent is registered with the core.", |s| {
        &s.registered
    }),
    (
        "horizon_agent_routes_relayed",
        "Sites this agent reaches through a third site now (its direct link down or much slower).",
        |s| &s.routes_relayed,
    ),
    (
        "horizon_agent_inputs_unacked",
        "Inputs the gateway keeps until a stored copy covers them, every player together.",
        |s| &s.inputs_unacked,
    ),
];

/// Freeze buckets (seconds): a handover's freeze is tens to hundreds of ms; a failover's gap
/// is a lease (30 s) and more.
const FREEZE_BUCKETS: &[f64] =
    &[0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 15.0, 30.0, 60.0];

/// Input delay and click-to-screen buckets (seconds): a frame (16–33 ms) to a failover.
const INPUT_BUCKETS: &[f64] =
    &[0.005, 0.01, 0.02, 0.033, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0];

/// The agent's registry over its [`AgentStats`], and the histograms the shell observes.
#[derive(Clone, Debug)]
pub(crate) struct AgentMetrics {
    pub(crate) registry: Registry,
    stats: Arc<AgentStats>,
    counters: Vec<(IntCounter, Field)>,
    gauges: Vec<(IntGauge, Field)>,
    freeze: HistogramVec,
    freeze_excess: HistogramVec,
    crossing_freeze: HistogramVec,
    crossing_freeze_excess: HistogramVec,
    input_delay: Histogram,
    click_to_screen: Histogram,
    /// The sites this agent knows of (its own, the core's, the peers the core named): every
    /// ordered pair of them has its freeze series from the start ([`AgentMetrics::know_site`]).
    known_sites: Arc<std::sync::Mutex<Vec<String>>>,
}

fn valid<T>(r: prometheus::Result<T>) -> T {
    r.unwrap_or_else(|e| unreachable!("metric definitions are constant and valid: {e}"))
}

impl AgentMetrics {
    /// The agent's metrics; `core_site` is known from the start, like this `site`.
    pub(crate) fn new(
        site: &str,
        core_site: &str,
        stats: Arc<AgentStats>,
        transport: &horizon_transport::TransportStats,
    ) -> Self {
        let registry = horizon_admin::registry("agent");
        horizon_admin::register(&registry, transport.collector());
        let opts = |name: &str, help: &str| Opts::new(name, help).const_label("site", site);
        let labelled = LABELLED_COUNTERS.iter().map(|&(name, help, (label, value), field)| {
            (opts(name, help).const_label(label, value), field)
        });
        let counters = COUNTERS
            .iter()
            .map(|&(name, help, field)| (opts(name, help), field))
            .chain(labelled)
            .map(|(opts, field)| {
                let c = valid(IntCounter::with_opts(opts));
                horizon_admin::register(&registry, Box::new(c.clone()));
                (c, field)
            })
            .collect();
        let gauges = GAUGES
            .iter()
            .map(|&(name, help, field)| {
                let g = valid(IntGauge::with_opts(opts(name, help)));
                horizon_admin::register(&registry, Box::new(g.clone()));
                (g, field)
            })
            .collect();
        let histogram = |name: &str, help: &str| {
            let opts = HistogramOpts::new(name, help)
                .const_label("site", site)
                .buckets(FREEZE_BUCKETS.to_vec());
            let h = valid(HistogramVec::new(opts, &["from", "to"]));
            horizon_admin::register(&registry, Box::new(h.clone()));
            h
        };
        let freeze = histogram(
            "horizon_agent_freeze_seconds",
            "The gap in a player's updates when their bubble moved to a new holder (a handover's freeze, or a failover's outage), as their home gateway saw it, by the sites before and after.",
        );
        let freeze_excess = histogram(
            "horizon_agent_freeze_excess_seconds",
            "That gap beyond its physical floor d(S,T) + d(T,h) - d(S,h) + tick (one-way delays from the measured backbone: this agent's probes, the core's link table for a pair it is not on).",
        );
        let crossing_freeze = histogram(
            "horizon_agent_crossing_freeze_seconds",
            "The gap in a player's updates when they changed bubble (a border crossing, a merge), between the last update of the old bubble and the first of the new one, by the sites of the two.",
        );
        let crossing_freeze_excess = histogram(
            "horizon_agent_crossing_freeze_excess_seconds",
            "That gap beyond its physical floor (the same formula; one tick when both bubbles run on one site), where it is known.",
        );
        // This gateway's players are homed here: `home_site` is this site.
        let served = |name: &str, help: &str| {
            let opts = HistogramOpts::new(name, help)
                .const_label("site", site)
                .const_label("home_site", site)
                .buckets(INPUT_BUCKETS.to_vec());
            let h = valid(Histogram::with_opts(opts));
            horizon_admin::register(&registry, Box::new(h.clone()));
            h
        };
        let input_delay = served(
            "horizon_agent_input_delay_seconds",
            "From a player's input reaching their home gateway to the world update acknowledging it leaving for the player (the mesh's part: relay, server tick, way back), by home site.",
        );
        let click_to_screen = served(
            "horizon_agent_click_to_screen_seconds",
            "The input delay plus the player's access round trip (its smallest measured): a player's click to their screen, estimated at their home gateway, by home site.",
        );
        let metrics = AgentMetrics {
            registry,
            stats,
            counters,
            gauges,
            freeze,
            freeze_excess,
            crossing_freeze,
            crossing_freeze_excess,
            input_delay,
            click_to_screen,
            known_sites: Arc::default(),
        };
        metrics.know_site(site);
        metrics.know_site(core_site);
        metrics
    }

    /// A site this agent learned of (a peer the core named): its freeze series with every
    /// known site, both ways and with itself, exist from now on, at zero (a dashboard shows 0
    /// freezes, not "No data").
    pub(crate) fn know_site(&self, site: &str) {
        let Ok(mut known) = self.known_sites.lock() else { return };
        if known.iter().any(|k| k == site) {
            return;
        }
        known.push(site.to_owned());
        let histograms = [
            &self.freeze,
            &self.freeze_excess,
            &self.crossing_freeze,
            &self.crossing_freeze_excess,
        ];
        for other in known.iter() {
            for h in histograms {
                h.with_label_values(&[site, other]);
                h.with_label_values(&[other, site]);
            }
        }
    }

    /// A change of bubble seen at the gateway (see `Effect::Crossed`): observed, and kept for
    /// the demo.
    pub(crate) fn crossed(&self, sample: crate::FreezeSample) {
        let labels = [sample.from.as_str(), sample.to.as_str()];
        self.crossing_freeze.with_label_values(&labels).observe(sample.gap.as_secs_f64());
        if let Some(floor) = sample.floor {
            let excess = sample.gap.saturating_sub(floor).as_secs_f64();
            self.crossing_freeze_excess.with_label_values(&labels).observe(excess);
        }
        if let Ok(mut log) = self.stats.crossing_freezes.lock() {
            if log.len() >= crate::MAX_FREEZES {
                log.remove(0);
            }
            log.push(sample);
        }
    }

    /// Inputs acknowledged by an update delivered (see `Effect::InputsServed`).
    pub(crate) fn inputs_served(&self, delays: &[Duration], access_rtt: Duration) {
        for delay in delays {
            self.input_delay.observe(delay.as_secs_f64());
            self.click_to_screen.observe((*delay + access_rtt).as_secs_f64());
        }
    }

    /// A move seen at the gateway (see `Effect::Freeze`): observed, and kept for the demo.
    pub(crate) fn freeze(&self, sample: crate::FreezeSample) {
        let labels = [sample.from.as_str(), sample.to.as_str()];
        self.freeze.with_label_values(&labels).observe(sample.gap.as_secs_f64());
        if let Some(floor) = sample.floor {
            let excess = sample.gap.saturating_sub(floor).as_secs_f64();
            self.freeze_excess.with_label_values(&labels).observe(excess);
        }
        if let Ok(mut log) = self.stats.freezes.lock() {
            if log.len() >= crate::MAX_FREEZES {
                log.remove(0);
            }
            log.push(sample);
        }
    }

    /// Brings the stats into the registry (counters only ever go up).
    pub(crate) fn refresh(&self) {
        for (c, field) in &self.counters {
            let now = field(&self.stats).load(Ordering::Relaxed);
            c.inc_by(now.saturating_sub(c.get()));
        }
        for (g, field) in &self.gauges {
            g.set(i64::try_from(field(&self.stats).load(Ordering::Relaxed)).unwrap_or(i64::MAX));
        }
    }
}

/// An agent's `/status` document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    pub site: String,
    pub registered: bool,
    pub players: u64,
    pub bubbles: u64,
    pub servers: u64,
    pub servers_ready: u64,
    pub inputs_unacked: u64,
    pub crossings: u64,
    pub crossings_lost: u64,
}

impl AgentStatus {
    pub(crate) fn of(site: &str, s: &AgentStats) -> Self {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        AgentStatus {
            site: site.to_owned(),
            registered: get(&s.registered) == 1,
            players: get(&s.players),
            bubbles: get(&s.bubbles),
            servers: get(&s.servers),
            servers_ready: get(&s.servers_ready),
            inputs_unacked: get(&s.inputs_unacked),
            crossings: get(&s.crossings),
            crossings_lost: get(&s.crossings_lost),
        }
    }

    /// Ready to serve: registered with the core, with a game server ready.
    pub fn ready(&self) -> Result<(), String> {
        match (self.registered, self.servers_ready) {
            (false, _) => Err("not registered with the core".into()),
            (true, 0) => Err("no game server ready".into()),
            _ => Ok(()),
        }
    }
}

/// The agent as its admin API sees it: everything from the stats, nothing asks its loop.
#[derive(Debug)]
pub(crate) struct AgentSource {
    pub(crate) site: String,
    pub(crate) metrics: AgentMetrics,
    /// The shell's loop, for the actions (a drain).
    pub(crate) events: tokio::sync::mpsc::Sender<crate::events::Event>,
}

impl Source for AgentSource {
    fn ready(&self) -> BoxFuture<Result<(), String>> {
        let status = AgentStatus::of(&self.site, &self.metrics.stats);
        Box::pin(async move { status.ready() })
    }

    fn status(&self, _page: Page) -> BoxFuture<Result<serde_json::Value, String>> {
        let status = AgentStatus::of(&self.site, &self.metrics.stats);
        Box::pin(async move { serde_json::to_value(status).map_err(|e| e.to_string()) })
    }

    fn refresh(&self) {
        self.metrics.refresh();
    }

    fn drain(&self, server: String) -> BoxFuture<Result<String, horizon_admin::Refused>> {
        let events = self.events.clone();
        Box::pin(async move {
            let gone = || horizon_admin::Refused::Unavailable("the agent is stopping".into());
            let (reply, answer) = tokio::sync::oneshot::channel();
            events
                .send(crate::events::Event::DrainAsked(server, reply))
                .await
                .map_err(|_| gone())?;
            answer.await.map_err(|_| gone())?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_shows_the_stats_with_the_site_label() {
        let stats = Arc::new(AgentStats::default());
        stats.inputs_received.store(41, Ordering::Relaxed);
        stats.players.store(3, Ordering::Relaxed);
        let m = AgentMetrics::new("MTL", "PAR", stats.clone(), &Default::default());
        m.refresh();
        stats.inputs_received.fetch_add(1, Ordering::Relaxed);
        m.refresh();
        let text = horizon_admin::render(&m.registry);
        assert!(text.contains("horizon_agent_inputs_total{site=\"MTL\"} 42"), "{text}");
        assert!(text.contains("horizon_agent_players{site=\"MTL\"} 3"), "{text}");
        assert!(text.contains("horizon_build_info{daemon=\"agent\""), "{text}");
    }

    #[test]
    fn every_metric_an_agent_exports_is_documented() {
        let m =
            AgentMetrics::new("MTL", "PAR", Arc::new(AgentStats::default()), &Default::default());
        m.inputs_served(&[Duration::from_millis(40)], Duration::from_millis(10));
        m.crossed(crate::FreezeSample {
            from: "MTL".into(),
            to: "PAR".into(),
            gap: Duration::from_millis(90),
            floor: None,
        });
        m.freeze(crate::FreezeSample {
            from: "PAR".into(),
            to: "MTL".into(),
            gap: Duration::from_millis(120),
            floor: Some(Duration::from_millis(100)),
        });
        let text = horizon_admin::render(&m.registry);
        let docs = include_str!("../../../docs/metrics.md");
        let names = horizon_admin::metric_names(&m.registry);
        assert!(names.contains("horizon_agent_click_to_screen_seconds"), "{names:?}");
        assert!(names.contains("horizon_transport_replays_total"), "{names:?}");
        for name in names {
            assert!(docs.contains(&format!("`{name}`")), "{name} is not in docs/metrics.md");
        }
        let line =
            text.lines().find(|l| l.starts_with("horizon_agent_click_to_screen_seconds_sum"));
        assert!(
            line.is_some_and(|l| l.contains("home_site=\"MTL\"") && l.ends_with(" 0.05")),
            "{line:?}"
        );
    }

    #[test]
    fn ready_means_registered_with_a_ready_server() {
        let stats = AgentStats::default();
        assert!(AgentStatus::of("MTL", &stats).ready().unwrap_err().contains("not registered"));
        stats.registered.store(1, Ordering::Relaxed);
        assert!(AgentStatus::of("MTL", &stats).ready().unwrap_err().contains("no game server"));
        stats.servers_ready.store(1, Ordering::Relaxed);
        assert_eq!(AgentStatus::of("MTL", &stats).ready(), Ok(()));
    }

    #[test]
    fn freeze_series_exist_for_every_known_pair_before_their_first_event() {
        let m =
            AgentMetrics::new("MTL", "PAR", Arc::new(AgentStats::default()), &Default::default());
        let series = |m: &AgentMetrics| {
            let families = m.registry.gather();
            let f = families.iter().find(|f| f.name() == "horizon_agent_freeze_seconds");
            f.map_or(0, |f| f.get_metric().len())
        };
        assert_eq!(series(&m), 4, "MTL-MTL, MTL-PAR, PAR-MTL, PAR-PAR");
        m.know_site("HKG");
        m.know_site("HKG");
        assert_eq!(series(&m), 9, "every ordered pair of three sites, each once");
    }
}
