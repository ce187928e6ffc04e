//! The core's Prometheus metrics (`prometheus` crate, one registry per core, prefix
//! `horizon_`, `_total` counters, `_seconds` histograms) and how they are read. The machine
//! counts in [`CoreStats`] (plain atomics, no Prometheus type: `stats.rs`); a collector here
//! reads them at each scrape, so `/metrics` never asks the loop anything, as an agent's metrics
//! read its `AgentStats`. What only the shell measures (the tick's wall time) is a Prometheus
//! type here. Label values come from the configuration (site names) or from enums (outcomes,
//! reasons, states), never from a player, bubble or server id; every series a configured label
//! set names exists from the start, at zero. Every metric is listed in `docs/metrics.md`.

use std::collections::HashMap;
use std::sync::Arc;

use horizon_mesh::Sites;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};
use prometheus::{Histogram, HistogramOpts, IntCounter, Registry};

use crate::stats::{
    CARVE_CHANGES, CoreStats, FailoverReason, HandoverOutcome, PerSite, REFUSED_REASONS,
    RESTORE_COPIES, SERVER_STATES, Table, ZONE_CHANGES,
};

fn unreachable_metric<T>(e: prometheus::Error) -> T {
    unreachable!("metric definitions are constant and valid: {e}")
}

/// Tick durations: the brain's tick is budgeted well under its 5 s period; buckets go past it.
const TICK_BUCKETS: &[f64] = &[0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The families with one series per site: (name, help, label, kind, figure).
type SiteFigure = fn(&CoreStats) -> &PerSite;
const PER_SITE: &[(&str, &str, &str, MetricType, SiteFigure)] = &[
    ("horizon_players", "Connected players by home site.", "home_site", MetricType::GAUGE, |s| {
        &s.players
    }),
    (
        "horizon_core_players_simulated",
        "Players the core routes to a region running on the site (its bubbles, and on the core site its zones too), by the site that simulates them.",
        "site",
        MetricType::GAUGE,
        |s| &s.players_simulated,
    ),
    (
        "horizon_core_players_unsimulated",
        "Counted players (not NPCs) in no running region, by home site: in no bubble and not routed to their core-site zone (the zone not hosted yet, or being restored). 0 in steady state.",
        "home_site",
        MetricType::GAUGE,
        |s| &s.unsimulated,
    ),
    (
        "horizon_core_players_measured",
        "Players online whose gateway believed their probe table (stage 1), by the site of their lowest measured RTT.",
        "home",
        MetricType::GAUGE,
        |s| &s.players_measured,
    ),
    (
        "horizon_core_players_would_gain",
        "Of horizon_core_players_measured, those who would gain at least 25 ms if a relay site simulated them (stage 1's question), by the site of their lowest measured RTT.",
        "home",
        MetricType::GAUGE,
        |s| &s.players_would_gain,
    ),
    (
        "horizon_bubbles",
        "Bubbles by the site that simulates them.",
        "site",
        MetricType::GAUGE,
        |s| &s.bubbles,
    ),
    (
        "horizon_core_regions_over_capacity",
        "Regions (the core site's zones, bubbles' parts) holding more players than thresholds.players_per_server at the last tick, by the site simulating them. SMD's rule cuts each within split_after_samples samples and the settle window; one that stays is waiting for a server of its site, or cannot be cut (a crowd stacked on one point, a region thinner than twice the exit margin).",
        "site",
        MetricType::GAUGE,
        |s| &s.regions_over_capacity,
    ),
    (
        "horizon_agent_connected",
        "1 when the site's agent is connected to the core.",
        "site",
        MetricType::GAUGE,
        |s| &s.agent_connected,
    ),
    (
        "horizon_bubbles_created_total",
        "Bubbles created, by site.",
        "site",
        MetricType::COUNTER,
        |s| &s.bubbles_created,
    ),
    (
        "horizon_lease_renewals_total",
        "Batched lease renewals received, by site.",
        "site",
        MetricType::COUNTER,
        |s| &s.renewals,
    ),
    (
        "horizon_leases_refused_total",
        "Lease renewals refused (fenced or expired), by site.",
        "site",
        MetricType::COUNTER,
        |s| &s.leases_refused,
    ),
    (
        "horizon_agent_order_failures_total",
        "Orders to an agent that failed or could not be queued, by site.",
        "site",
        MetricType::COUNTER,
        |s| &s.order_failures,
    ),
    (
        "horizon_backups_total",
        "State copies accepted into the universe backup, by site.",
        "site",
        MetricType::COUNTER,
        |s| &s.backups,
    ),
    (
        "horizon_backups_refused_total",
        "State copies refused (not the current holder or epoch, or malformed), by site.",
        "site",
        MetricType::COUNTER,
        |s| &s.backups_refused,
    ),
    (
        "horizon_drains_total",
        "Ended bubbles restored from their copy for a moment so their players' states could leave (their holder was away), by the site that ran it.",
        "site",
        MetricType::COUNTER,
        |s| &s.drains,
    ),
    (
        "horizon_adoptions_total",
        "Copies kept for players sent to a bubble just restored from a copy that lacked them (they crossed in after it, or it held fewer of their inputs), by the site of the bubble.",
        "site",
        MetricType::COUNTER,
        |s| &s.adoptions,
    ),
];

/// How a family of [`LABELLED`] reads its series from the figures.
type Read = fn(&StatsCollector, MetricType) -> Vec<proto::Metric>;

/// The families with a fixed set of labels: (name, help, kind, label names, how it is read).
const LABELLED: &[(&str, &str, MetricType, &[&str], Read)] = &[
    (
        "horizon_core_zones",
        "Zones of the core site (each run on a core-site game server like any region).",
        MetricType::GAUGE,
        &[],
        |c, kind| vec![series(&[], kind, c.stats.zones.get() as f64)],
    ),
    (
        "horizon_core_delegations_waiting",
        "Under the fixed stage: delegations whose region is not on their site at the last tick (no server ready there yet, or failed over to the core site while the site is cut from it). 0 in steady state.",
        MetricType::GAUGE,
        &[],
        |c, kind| vec![series(&[], kind, c.stats.delegations_waiting.get() as f64)],
    ),
    (
        "horizon_store_failures_total",
        "Writes the durable store could not make.",
        MetricType::COUNTER,
        &[],
        |c, kind| vec![series(&[], kind, c.stats.store_failures.get() as f64)],
    ),
    (
        "horizon_servers",
        "Game servers by site and state, as agents report them.",
        MetricType::GAUGE,
        &["site", "state"],
        |c, kind| c.by_site(&c.stats.servers, "state", &SERVER_STATES, kind),
    ),
    (
        "horizon_core_zone_changes_total",
        "Zones of the core site split (overloaded) or merged back (quiet), by change.",
        MetricType::COUNTER,
        &["change"],
        StatsCollector::zone_changes,
    ),
    (
        "horizon_core_carves_total",
        "Bubbles carved out of the core site's zones for a group the scoring placed on another site, and dissolved back into them when its best site became the core site, by the bubble's site and change.",
        MetricType::COUNTER,
        &["site", "change"],
        |c, kind| c.by_site(&c.stats.carves, "change", &CARVE_CHANGES, kind),
    ),
    (
        "horizon_handovers_total",
        "Handovers ended, by source, target and outcome.",
        MetricType::COUNTER,
        &["from", "to", "outcome"],
        StatsCollector::handovers,
    ),
    (
        "horizon_handover_seconds",
        "From the decision to the commit of a handover, by source and target.",
        MetricType::HISTOGRAM,
        &["from", "to"],
        |c, _| c.handover_seconds(),
    ),
    (
        "horizon_failovers_total",
        "Bubbles restored from the universe backup after their holder was lost, by the site that took them and why.",
        MetricType::COUNTER,
        &["site", "reason"],
        |c, kind| {
            let reasons = FailoverReason::ALL.map(FailoverReason::as_str);
            c.by_site(&c.stats.failovers, "reason", &reasons, kind)
        },
    ),
    (
        "horizon_restores_total",
        "Bubbles restored from the universe backup (failovers and drains), by the site that took them and the copy: whole, parts (copied spread over servers) or none (no copy: restored empty, its players' states lost unless a crossing holds them).",
        MetricType::COUNTER,
        &["site", "copy"],
        |c, kind| c.by_site(&c.stats.restores, "copy", &RESTORE_COPIES, kind),
    ),
    (
        "horizon_core_refused_total",
        "Parts of agents' requests refused, by site and reason: player_id_not_its_own (a join of an id handed to another site), not_its_player (a move or leave of a player homed elsewhere), handover_not_its_own (a Failed for a handover the site takes no part in), positions_not_its_region (positions reported for a region the site does not hold), too_many_positions (more positions than a report may carry), probe_table (a probe table the core could not take).",
        MetricType::COUNTER,
        &["site", "reason"],
        |c, kind| c.by_site(&c.stats.refused, "reason", &REFUSED_REASONS, kind),
    ),
    (
        "horizon_backbone_rtt_seconds",
        "Round trip between two sites' agents, as the `from` agent measures it.",
        MetricType::GAUGE,
        &["from", "to"],
        StatsCollector::backbone_rtt,
    ),
    (
        "horizon_backbone_below_floor_total",
        "Backbone round trips measured below the pair's physical floor (great circle at fibre speed, `[sites.coordinates]`): a probe or clock bug; not used.",
        MetricType::COUNTER,
        &["from", "to"],
        StatsCollector::below_floor,
    ),
];

/// The core's registry: the machine's figures through [`StatsCollector`], the shell's own
/// measurements, and the transport's.
#[derive(Clone, Debug)]
pub(crate) struct Metrics {
    pub(crate) registry: Registry,
    ticks: IntCounter,
    tick_seconds: Histogram,
}

impl Metrics {
    pub(crate) fn new(
        sites: &Sites,
        stats: Arc<CoreStats>,
        transport: &horizon_transport::TransportStats,
    ) -> Self {
        let registry = horizon_admin::registry("core");
        horizon_admin::register(&registry, transport.collector());
        let names = sites.ids().map(|s| sites.name(s).to_string()).collect();
        horizon_admin::register(&registry, Box::new(StatsCollector::new(names, stats)));
        let ticks = IntCounter::new("horizon_core_ticks_total", "Scoring ticks run.")
            .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&registry, Box::new(ticks.clone()));
        let tick_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "horizon_core_tick_seconds",
                "Time of one tick of the brain (grouping, scoring, decisions).",
            )
            .buckets(TICK_BUCKETS.to_vec()),
        )
        .unwrap_or_else(unreachable_metric);
        horizon_admin::register(&registry, Box::new(tick_seconds.clone()));
        Metrics { registry, ticks, tick_seconds }
    }

    /// The shell ran a tick of the brain in `seconds` of wall time.
    pub(crate) fn record_tick(&self, seconds: f64) {
        self.ticks.inc();
        self.tick_seconds.observe(seconds);
    }
}

/// Reads [`CoreStats`] at each scrape into every family of the machine's figures.
struct StatsCollector {
    /// The configured sites' names, by index.
    names: Vec<String>,
    stats: Arc<CoreStats>,
    descs: Vec<Desc>,
}

impl StatsCollector {
    fn new(names: Vec<String>, stats: Arc<CoreStats>) -> Self {
        let desc = |name: &str, help: &str, labels: &[&str]| {
            let labels = labels.iter().map(|l| l.to_string()).collect();
            Desc::new(name.to_owned(), help.to_owned(), labels, HashMap::new())
                .unwrap_or_else(unreachable_metric)
        };
        let mut descs: Vec<Desc> =
            PER_SITE.iter().map(|(name, help, label, _, _)| desc(name, help, &[label])).collect();
        descs.extend(LABELLED.iter().map(|(name, help, _, labels, _)| desc(name, help, labels)));
        StatsCollector { names, stats, descs }
    }

    /// Ordered pairs of distinct sites: (index, from, to).
    fn pairs(&self) -> impl Iterator<Item = (usize, &str, &str)> {
        let n = self.names.len();
        (0..n).flat_map(move |f| (0..n).filter(move |&t| t != f).map(move |t| (f, t))).map(
            move |(f, t)| (self.stats.pair(f, t), self.names[f].as_str(), self.names[t].as_str()),
        )
    }

    fn sites(&self) -> impl Iterator<Item = (usize, &str)> {
        self.names.iter().enumerate().map(|(i, n)| (i, n.as_str()))
    }

    fn zone_changes(&self, kind: MetricType) -> Vec<proto::Metric> {
        let changes = &self.stats.zone_changes;
        let read = |(c, change)| series(&[("change", change)], kind, changes.get(0, c) as f64);
        ZONE_CHANGES.into_iter().enumerate().map(read).collect()
    }

    fn handovers(&self, kind: MetricType) -> Vec<proto::Metric> {
        self.pairs()
            .flat_map(|(p, from, to)| {
                HandoverOutcome::ALL.iter().enumerate().map(move |(c, outcome)| {
                    let labels = [("from", from), ("to", to), ("outcome", outcome.as_str())];
                    series(&labels, kind, self.stats.handovers.get(p, c) as f64)
                })
            })
            .collect()
    }

    fn handover_seconds(&self) -> Vec<proto::Metric> {
        let histogram = &self.stats.handover_seconds;
        self.pairs()
            .map(|(p, from, to)| {
                let (cumulative, count, sum) = histogram.read(p);
                let buckets = histogram
                    .bounds
                    .iter()
                    .zip(cumulative)
                    .map(|(&bound, n)| {
                        let mut b = proto::Bucket::default();
                        b.set_upper_bound(bound);
                        b.set_cumulative_count(n);
                        b
                    })
                    .collect();
                let mut h = proto::Histogram::default();
                h.set_sample_count(count);
                h.set_sample_sum(sum);
                h.set_bucket(buckets);
                let mut m = proto::Metric::from_label(label_pairs(&[("from", from), ("to", to)]));
                m.set_histogram(h);
                m
            })
            .collect()
    }

    /// Absent until first measured: a round trip of 0 would be a lie.
    fn backbone_rtt(&self, kind: MetricType) -> Vec<proto::Metric> {
        self.pairs()
            .filter_map(|(p, from, to)| {
                let rtt = self.stats.backbone_seconds(p)?;
                Some(series(&[("from", from), ("to", to)], kind, rtt))
            })
            .collect()
    }

    fn below_floor(&self, kind: MetricType) -> Vec<proto::Metric> {
        let floor = &self.stats.below_floor;
        self.pairs()
            .map(|(p, from, to)| {
                series(&[("from", from), ("to", to)], kind, floor.get(p, 0) as f64)
            })
            .collect()
    }

    /// A family of `table`'s cells, labelled `site` and `label` (one of `values`, column by
    /// column).
    fn by_site(
        &self,
        table: &Table,
        label: &str,
        values: &[&str],
        kind: MetricType,
    ) -> Vec<proto::Metric> {
        self.sites()
            .flat_map(|(i, site)| {
                values.iter().enumerate().map(move |(c, value)| {
                    series(&[("site", site), (label, value)], kind, table.get(i, c) as f64)
                })
            })
            .collect()
    }
}

/// One series: its labels (sorted by name, as Prometheus' own vectors write them) and value.
fn series(labels: &[(&str, &str)], kind: MetricType, value: f64) -> proto::Metric {
    let mut metric = proto::Metric::from_label(label_pairs(labels));
    match kind {
        MetricType::COUNTER => {
            let mut c = proto::Counter::default();
            c.set_value(value);
            metric.set_counter(c);
        }
        _ => {
            let mut g = proto::Gauge::default();
            g.set_value(value);
            metric.set_gauge(g);
        }
    }
    metric
}

fn label_pairs(labels: &[(&str, &str)]) -> Vec<LabelPair> {
    let mut pairs: Vec<LabelPair> = labels
        .iter()
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name((*name).to_owned());
            pair.set_value((*value).to_owned());
            pair
        })
        .collect();
    pairs.sort_by(|a, b| a.name().cmp(b.name()));
    pairs
}

fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<proto::Metric>) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(name.to_owned());
    family.set_help(help.to_owned());
    family.set_field_type(kind);
    family.set_metric(metrics);
    family
}

impl Collector for StatsCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let s = &*self.stats;
        let mut out = Vec::with_capacity(PER_SITE.len() + LABELLED.len());
        for (name, help, label, kind, figure) in PER_SITE {
            let metrics = self
                .sites()
                .map(|(i, site)| series(&[(label, site)], *kind, figure(s).get(i) as f64))
                .collect();
            out.push(family(name, help, *kind, metrics));
        }
        for (name, help, kind, _, read) in LABELLED {
            out.push(family(name, help, *kind, read(self, *kind)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_the_core_exports_is_documented() {
        let sites = crate::machine::tests::sites();
        let stats = Arc::new(CoreStats::new(sites.len()));
        let m = Metrics::new(&sites, stats.clone(), &Default::default());
        let (par, mtl) = (sites.core(), sites.id("MTL").expect("MTL"));
        stats.handover(par, mtl, HandoverOutcome::Committed, Some(0.2));
        stats.failover(mtl, FailoverReason::LeaseExpired);
        stats.backbone(par, mtl, 85.0);
        stats.servers(par, 2, 1);
        m.record_tick(0.01);
        let text = horizon_admin::render(&m.registry);
        for line in [
            "horizon_handover_seconds_bucket{from=\"PAR\",to=\"MTL\",le=\"0.1\"} 0",
            "horizon_handover_seconds_bucket{from=\"PAR\",to=\"MTL\",le=\"0.25\"} 1",
            "horizon_handover_seconds_bucket{from=\"PAR\",to=\"MTL\",le=\"+Inf\"} 1",
            "horizon_handover_seconds_sum{from=\"PAR\",to=\"MTL\"} 0.2",
            "horizon_handover_seconds_count{from=\"MTL\",to=\"PAR\"} 0",
            "horizon_handovers_total{from=\"PAR\",outcome=\"committed\",to=\"MTL\"} 1",
            "horizon_failovers_total{reason=\"lease_expired\",site=\"MTL\"} 1",
            "horizon_servers{site=\"PAR\",state=\"busy\"} 1",
            "horizon_backbone_rtt_seconds{from=\"PAR\",to=\"MTL\"} 0.085",
            "# TYPE horizon_handover_seconds histogram",
            "# TYPE horizon_core_ticks_total counter",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains("horizon_backbone_rtt_seconds{from=\"MTL\""), "not measured");
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
        let m = Metrics::new(&sites, Arc::new(CoreStats::new(sites.len())), &Default::default());
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
