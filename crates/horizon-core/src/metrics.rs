//! The core's Prometheus metrics, on the `prometheus` crate: one registry per core, prefix
//! `horizon_`, `_total` counters, `_seconds` histograms. Label values come from the
//! configuration (site names) or from enums (outcomes, reasons, states), never from a player,
//! bubble or server id. Every metric is listed in `docs/metrics.md`.
//!
//! The machine updates them as it goes (counters) and at every step of its loop (gauges), so
//! `/metrics` renders the registry without asking the loop anything.

use horizon_mesh::{SiteId, Sites};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// A counter or gauge family with one child per site (label `label`), reached by site index.
#[derive(Clone, Debug)]
pub(crate) struct PerSite<M> {
    children: Vec<M>,
}

fn unreachable_metric<T>(e: prometheus::Error) -> T {
    unreachable!("metric definitions are constant and valid: {e}")
}

impl PerSite<prometheus::IntCounter> {
    fn counter(reg: &Registry, sites: &Sites, name: &str, help: &str, label: &str) -> Self {
        let vec =
            IntCounterVec::new(Opts::new(name, help), &[label]).unwrap_or_else(unreachable_metric);
        horizon_admin::register(reg, Box::new(vec.clone()));
        let children =
            sites.ids().map(|s| vec.with_label_values(&[sites.name(s).as_str()])).collect();
        PerSite { children }
    }

    pub(crate) fn inc(&self, site: usize) {
        self.add(site, 1);
    }

    pub(crate) fn add(&self, site: usize, n: u64) {
        if let Some(c) = self.children.get(site) {
            c.inc_by(n);
        }
    }

    pub(crate) fn get(&self, site: usize) -> u64 {
        self.children.get(site).map_or(0, |c| c.get())
    }
}

impl PerSite<prometheus::IntGauge> {
    fn gauge(reg: &Registry, sites: &Sites, name: &str, help: &str, label: &str) -> Self {
        let vec =
            IntGaugeVec::new(Opts::new(name, help), &[label]).unwrap_or_else(unreachable_metric);
        horizon_admin::register(reg, Box::new(vec.clone()));
        let children =
            sites.ids().map(|s| vec.with_label_values(&[sites.name(s).as_str()])).collect();
        PerSite { children }
    }

    pub(crate) fn set(&self, site: usize, n: u64) {
        if let Some(g) = self.children.get(site) {
            g.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

/// How a handover ended (label `outcome` of `horizon_handovers_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandoverOutcome {
    Committed,
    /// Abandoned before the freeze: the source went on.
    Abandoned,
    /// Given up after the freeze: the target's lease runs out and the bubble fails over.
    GivenUp,
}

impl HandoverOutcome {
    const ALL: [HandoverOutcome; 3] =
        [HandoverOutcome::Committed, HandoverOutcome::Abandoned, HandoverOutcome::GivenUp];

    fn as_str(self) -> &'static str {
        match self {
            HandoverOutcome::Committed => "committed",
            HandoverOutcome::Abandoned => "abandoned",
            HandoverOutcome::GivenUp => "given_up",
        }
    }
}

/// The kinds of copy a bubble is restored from (label `copy` of `horizon_restores_total`).
pub(crate) const RESTORE_COPIES: [&str; 3] = ["whole", "parts", "none"];

/// Why a part of an agent's request is refused (label `reason` of
/// `horizon_core_refused_total`).
pub(crate) const REFUSED_REASONS: [&str; 6] = [
    "player_id_not_its_own",
    "not_its_player",
    "handover_not_its_own",
    "positions_not_its_region",
    "too_many_positions",
    "probe_table",
];

/// A game server's state as agents report it (label `state` of `horizon_servers`).
const SERVER_STATES: [&str; 2] = ["ready", "busy"];

/// Why a bubble failed over (label `reason` of `horizon_failovers_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FailoverReason {
    /// Its holder stopped renewing (cut from the core, dead, or a handover given up).
    LeaseExpired,
    /// Its holder reported its game server gone.
    ServerLost,
    /// Its holder registered without it (the agent restarted).
    NotHeld,
    /// A restore elsewhere did not happen.
    RestoreFailed,
}

impl FailoverReason {
    const ALL: [FailoverReason; 4] = [
        FailoverReason::LeaseExpired,
        FailoverReason::ServerLost,
        FailoverReason::NotHeld,
        FailoverReason::RestoreFailed,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FailoverReason::LeaseExpired => "lease_expired",
            FailoverReason::ServerLost => "server_lost",
            FailoverReason::NotHeld => "not_held_at_registration",
            FailoverReason::RestoreFailed => "restore_failed",
        }
    }
}

/// Every metric of the core.
#[derive(Clone, Debug)]
pub(crate) struct Metrics {
    pub(crate) registry: Registry,
    site_names: Vec<String>,
    pub ticks: prometheus::IntCounter,
    pub tick_seconds: prometheus::Histogram,
    pub players: PerSite<prometheus::IntGauge>,
    pub players_simulated: PerSite<prometheus::IntGauge>,
    pub unsimulated: PerSite<prometheus::IntGauge>,
    pub players_measured: PerSite<prometheus::IntGauge>,
    pub players_would_gain: PerSite<prometheus::IntGauge>,
    pub bubbles: PerSite<prometheus::IntGauge>,
    servers: IntGaugeVec,
    pub agent_connected: PerSite<prometheus::IntGauge>,
    pub bubbles_created: PerSite<prometheus::IntCounter>,
    pub zones: prometheus::IntGauge,
    pub delegations_waiting: prometheus::IntGauge,
    zone_changes: IntCounterVec,
    handovers: IntCounterVec,
    handover_seconds: HistogramVec,
    pub renewals: PerSite<prometheus::IntCounter>,
    pub leases_refused: PerSite<prometheus::IntCounter>,
    pub order_failures: PerSite<prometheus::IntCounter>,
    pub backups: PerSite<prometheus::IntCounter>,
    pub backups_refused: PerSite<prometheus::IntCounter>,
    pub store_failures: prometheus::IntCounter,
    failovers: IntCounterVec,
    restores: IntCounterVec,
    refused: IntCounterVec,
    pub drains: PerSite<prometheus::IntCounter>,
    pub adoptions: PerSite<prometheus::IntCounter>,
    backbone_rtt: prometheus::GaugeVec,
    below_floor: IntCounterVec,
}

/// Tick durations: the brain's tick is budgeted well under its 5 s period; buckets go past it.
const TICK_BUCKETS: &[f64] = &[0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0];
const HANDOVER_BUCKETS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0];

impl Metrics {
    pub(crate) fn new(sites: &Sites) -> Self {
        let reg = horizon_admin::registry("core");
        for collector in horizon_transport::metrics::collectors() {
            horizon_admin::register(&reg, collector);
        }
        let c = |name: &str, help: &str| PerSite::counter(&reg, sites, name, help, "site");
        let g =
            |name: &str, help: &str, label: &str| PerSite::gauge(&reg, sites, name, help, label);
        let plain = |name: &str, help: &str| {
            let c = prometheus::IntCounter::new(name, help).unwrap_or_else(unreachable_metric);
            horizon_admin::register(&reg, Box::new(c.clone()));
            c
        };
        let tick_seconds = prometheus::Histogram::with_opts(
            HistogramOpts::new(
                "horizon_core_tick_seconds",
                "Time of one tick of the brain (grouping, scoring, decisions).",
            )
            .buckets(TICK_BUCKETS.to_vec()),
        )
        .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&reg, Box::new(tick_seconds.clone()));
        let servers = IntGaugeVec::new(
            Opts::new("horizon_servers", "Game servers by site and state, as agents report them."),
            &["site", "state"],
        )
        .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&reg, Box::new(servers.clone()));
        let handovers = IntCounterVec::new(
            Opts::new("horizon_handovers_total", "Handovers ended, by source, target and outcome."),
            &["from", "to", "outcome"],
        )
        .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&reg, Box::new(handovers.clone()));
        let handover_seconds = HistogramVec::new(
            HistogramOpts::new(
                "horizon_handover_seconds",
                "From the decision to the commit of a handover, by source and target.",
            )
            .buckets(HANDOVER_BUCKETS.to_vec()),
            &["from", "to"],
        )
        .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&reg, Box::new(handover_seconds.clone()));
        let failovers = IntCounterVec::new(
            Opts::new(
                "horizon_failovers_total",
                "Bubbles restored from the universe backup after their holder was lost, by the site that took them and why.",
            ),
            &["site", "reason"],
        )
        .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&reg, Box::new(failovers.clone()));
        let restores = IntCounterVec::new(
            Opts::new(
                "horizon_restores_total",
                "Bubbles restored from the universe backup (failovers and drains), by the site that took them and the copy: whole, parts (copied spread over servers) or none (no copy: restored empty, its players' states lost unless a crossing holds them).",
            ),
            &["site", "copy"],
        )
        .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&reg, Box::new(restores.clone()));
        let refused = IntCounterVec::new(
            Opts::new(
                "horizon_core_refused_total",
                "Parts of agents' requests refused, by site and reason: player_id_not_its_own (a join of an id handed to another site), not_its_player (a move or leave of a player homed elsewhere), handover_not_its_own (a Failed for a handover the site takes no part in), positions_not_its_region (positions reported for a region the site does not hold), too_many_positions (more positions than a report may carry), probe_table (a probe table the core could not take).",
            ),
            &["site", "reason"],
        )
        .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&reg, Box::new(refused.clone()));
        let zone_changes = IntCounterVec::new(
            Opts::new(
                "horizon_core_zone_changes_total",
                "Zones of the core site split (overloaded) or merged back (quiet), by change.",
            ),
            &["change"],
        )
        .unwrap_or_else(unreachable_metric);
        for change in ["split", "merge"] {
            zone_changes.with_label_values(&[change]);
        }
        horizon_admin::register(&reg, Box::new(zone_changes.clone()));
        let backbone_rtt = prometheus::GaugeVec::new(
            Opts::new(
                "horizon_backbone_rtt_seconds",
                "Round trip between two sites' agents, as the `from` agent measures it.",
            ),
            &["from", "to"],
        )
        .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&reg, Box::new(backbone_rtt.clone()));
        let below_floor = IntCounterVec::new(
            Opts::new(
                "horizon_backbone_below_floor_total",
                "Backbone round trips measured below the pair's physical floor (great circle at fibre speed, `[sites.coordinates]`): a probe or clock bug; not used.",
            ),
            &["from", "to"],
        )
        .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&reg, Box::new(below_floor.clone()));
        // Every series whose labels the configuration already names exists from the start, at
        // zero (a dashboard shows 0, not "No data", until the first event): per site, per
        // ordered pair of sites, per reason and outcome. Backbone round trips appear when
        // first measured: a round trip of 0 would be a lie.
        let names: Vec<&str> = sites.ids().map(|s| sites.name(s).as_str()).collect();
        for &site in &names {
            for state in SERVER_STATES {
                servers.with_label_values(&[site, state]);
            }
            for reason in FailoverReason::ALL {
                failovers.with_label_values(&[site, reason.as_str()]);
            }
            for copy in RESTORE_COPIES {
                restores.with_label_values(&[site, copy]);
            }
            for reason in REFUSED_REASONS {
                refused.with_label_values(&[site, reason]);
            }
            for &to in names.iter().filter(|&&to| to != site) {
                below_floor.with_label_values(&[site, to]);
                handover_seconds.with_label_values(&[site, to]);
                for outcome in HandoverOutcome::ALL {
                    handovers.with_label_values(&[site, to, outcome.as_str()]);
                }
            }
        }
        Metrics {
            site_names: sites.ids().map(|s| sites.name(s).to_string()).collect(),
            ticks: plain("horizon_core_ticks_total", "Scoring ticks run."),
            tick_seconds,
            players: g("horizon_players", "Connected players by home site.", "home_site"),
            players_simulated: g(
                "horizon_core_players_simulated",
                "Players the core routes to a region running on the site (its bubbles, and on the core site its zones too), by the site that simulates them.",
                "site",
            ),
            unsimulated: g(
                "horizon_core_players_unsimulated",
                "Counted players (not NPCs) in no running region, by home site: in no bubble and not routed to their core-site zone (the zone not hosted yet, or being restored). 0 in steady state.",
                "home_site",
            ),
            players_measured: g(
                "horizon_core_players_measured",
                "Players online whose gateway believed their probe table (stage 1), by the site of their lowest measured RTT.",
                "home",
            ),
            players_would_gain: g(
                "horizon_core_players_would_gain",
                "Of horizon_core_players_measured, those who would gain at least 25 ms if a relay site simulated them (stage 1's question), by the site of their lowest measured RTT.",
                "home",
            ),
            bubbles: g("horizon_bubbles", "Bubbles by the site that simulates them.", "site"),
            servers,
            agent_connected: g(
                "horizon_agent_connected",
                "1 when the site's agent is connected to the core.",
                "site",
            ),
            bubbles_created: c("horizon_bubbles_created_total", "Bubbles created, by site."),
            delegations_waiting: {
                let g = prometheus::IntGauge::new(
                    "horizon_core_delegations_waiting",
                    "Under the fixed stage: delegations whose region is not on their site at the last tick (no server ready there yet, or failed over to the core site while the site is cut from it). 0 in steady state.",
                )
                .unwrap_or_else(unreachable_metric);
                horizon_admin::register(&reg, Box::new(g.clone()));
                g
            },
            zones: {
                let z = prometheus::IntGauge::new(
                    "horizon_core_zones",
                    "Zones of the core site (each run on a core-site game server like any region).",
                )
                .unwrap_or_else(unreachable_metric);
                horizon_admin::register(&reg, Box::new(z.clone()));
                z
            },
            zone_changes,
            handovers,
            handover_seconds,
            renewals: c(
                "horizon_lease_renewals_total",
                "Batched lease renewals received, by site.",
            ),
            leases_refused: c(
                "horizon_leases_refused_total",
                "Lease renewals refused (fenced or expired), by site.",
            ),
            order_failures: c(
                "horizon_agent_order_failures_total",
                "Orders to an agent that failed or could not be queued, by site.",
            ),
            backups: c(
                "horizon_backups_total",
                "State copies accepted into the universe backup, by site.",
            ),
            backups_refused: c(
                "horizon_backups_refused_total",
                "State copies refused (not the current holder or epoch, or malformed), by site.",
            ),
            store_failures: plain(
                "horizon_store_failures_total",
                "Writes the durable store could not make.",
            ),
            failovers,
            restores,
            refused,
            drains: c(
                "horizon_drains_total",
                "Ended bubbles restored from their copy for a moment so their players' states could leave (their holder was away), by the site that ran it.",
            ),
            adoptions: c(
                "horizon_adoptions_total",
                "Copies kept for players sent to a bubble just restored from a copy that lacked them (they crossed in after it, or it held fewer of their inputs), by the site of the bubble.",
            ),
            backbone_rtt,
            below_floor,
            registry: reg,
        }
    }

    /// Zone splits and merges so far.
    pub(crate) fn zone_changes(&self) -> (u64, u64) {
        let get = |c: &str| self.zone_changes.with_label_values(&[c]).get();
        (get("split"), get("merge"))
    }

    /// A zone was split (`true`) or two were merged back.
    pub(crate) fn zone_changed(&self, split: bool) {
        self.zone_changes.with_label_values(&[if split { "split" } else { "merge" }]).inc();
    }

    fn name(&self, site: SiteId) -> &str {
        self.site_names.get(site.index()).map_or("?", String::as_str)
    }

    /// A handover from `from` to `to` ended; `seconds` from its decision, if committed.
    pub(crate) fn handover(
        &self,
        from: SiteId,
        to: SiteId,
        outcome: HandoverOutcome,
        seconds: Option<f64>,
    ) {
        let (f, t) = (self.name(from), self.name(to));
        self.handovers.with_label_values(&[f, t, outcome.as_str()]).inc();
        if let Some(s) = seconds {
            self.handover_seconds.with_label_values(&[f, t]).observe(s);
        }
    }

    /// Handovers that ended with `outcome`, every pair together.
    pub(crate) fn handovers_ended(&self, outcome: HandoverOutcome) -> u64 {
        let mut n = 0;
        for f in &self.site_names {
            for t in &self.site_names {
                n += self.handovers.with_label_values(&[f, t, outcome.as_str()]).get();
            }
        }
        n
    }

    /// A part of `site`'s request refused: it does not own what it names (`reports.rs`).
    pub(crate) fn refused(&self, site: SiteId, reason: &'static str) {
        debug_assert!(REFUSED_REASONS.contains(&reason), "an unlisted reason: {reason}");
        self.refused.with_label_values(&[self.name(site), reason]).inc();
    }

    #[cfg(test)]
    pub(crate) fn refused_count(&self, site: SiteId, reason: &str) -> u64 {
        self.refused.with_label_values(&[self.name(site), reason]).get()
    }

    pub(crate) fn failover(&self, to: SiteId, reason: FailoverReason) {
        self.failovers.with_label_values(&[self.name(to), reason.as_str()]).inc();
    }

    /// A restore sent to `site` from a copy of kind `copy` (see [`RESTORE_COPIES`]).
    pub(crate) fn restore(&self, site: SiteId, copy: &str) {
        self.restores.with_label_values(&[self.name(site), copy]).inc();
    }

    /// Restores so far, by the kind of copy, every site together.
    pub(crate) fn restores_by_copy(&self) -> std::collections::BTreeMap<String, u64> {
        let sites = 0..self.site_names.len();
        RESTORE_COPIES
            .iter()
            .map(|&copy| {
                let n = sites
                    .clone()
                    .map(|i| self.restores.with_label_values(&[&self.site_names[i], copy]).get())
                    .sum();
                (copy.to_owned(), n)
            })
            .collect()
    }

    /// Failovers to `site`, every reason together.
    pub(crate) fn failovers_to(&self, site: SiteId) -> u64 {
        FailoverReason::ALL
            .iter()
            .map(|r| self.failovers.with_label_values(&[self.name(site), r.as_str()]).get())
            .sum()
    }

    pub(crate) fn servers(&self, site: SiteId, ready: u64, busy: u64) {
        let name = self.name(site).to_owned();
        for (state, n) in SERVER_STATES.into_iter().zip([ready, busy]) {
            self.servers.with_label_values(&[&name, state]).set(i64::try_from(n).unwrap_or(0));
        }
    }

    pub(crate) fn backbone(&self, from: SiteId, to: SiteId, rtt_ms: f64) {
        let (f, t) = (self.name(from).to_owned(), self.name(to).to_owned());
        self.backbone_rtt.with_label_values(&[&f, &t]).set(rtt_ms / 1000.0);
    }

    /// A backbone round trip measured below the pair's physical floor (not used).
    pub(crate) fn below_floor(&self, from: SiteId, to: SiteId) {
        let (f, t) = (self.name(from).to_owned(), self.name(to).to_owned());
        self.below_floor.with_label_values(&[&f, &t]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_the_core_exports_is_documented() {
        let sites = crate::machine::tests::sites();
        let m = Metrics::new(&sites);
        let (par, mtl) = (sites.core(), sites.id("MTL").expect("MTL"));
        m.handover(par, mtl, HandoverOutcome::Committed, Some(0.2));
        m.failover(mtl, FailoverReason::LeaseExpired);
        m.backbone(par, mtl, 85.0);
        m.servers(par, 2, 1);
        let docs = include_str!("../../../docs/metrics.md");
        let names = horizon_admin::metric_names(&m.registry);
        assert!(names.len() >= 21, "{names:?}");
        for name in names {
            assert!(docs.contains(&format!("`{name}`")), "{name} is not in docs/metrics.md");
        }
    }
}

#[cfg(test)]
mod series_tests {
    use super::*;

    /// A new dashboard shows zeros, not "No data": every labelled series the configuration
    /// names exists before its first event.
    #[test]
    fn labelled_series_exist_at_zero_before_their_first_event() {
        let sites = crate::machine::tests::sites();
        let m = Metrics::new(&sites);
        let families = m.registry.gather();
        let series = |name: &str| {
            families.iter().find(|f| f.name() == name).map_or(0, |f| f.get_metric().len())
        };
        let n = sites.len();
        assert_eq!(series("horizon_handovers_total"), n * (n - 1) * 3, "pairs × outcomes");
        assert_eq!(series("horizon_handover_seconds"), n * (n - 1), "ordered pairs");
        assert_eq!(series("horizon_failovers_total"), n * 4, "sites × reasons");
        assert_eq!(series("horizon_restores_total"), n * RESTORE_COPIES.len());
        assert_eq!(series("horizon_core_refused_total"), n * REFUSED_REASONS.len());
        assert_eq!(series("horizon_servers"), n * 2, "sites × states");
        assert_eq!(series("horizon_core_zone_changes_total"), 2);
        assert_eq!(series("horizon_backbone_rtt_seconds"), 0, "absent until measured");
    }
}
