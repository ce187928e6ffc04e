//! The core's Prometheus metrics: one explicit registry, prefix `horizon_`, `_total` counters,
//! `_seconds` histograms, and a `site` label whose values come from the configuration (never a
//! player, bubble or server id). Every metric is listed in `docs/running.md`.

use std::fmt::Write;

use horizon_mesh::Sites;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// A counter or gauge, per site or global.
#[derive(Debug)]
pub(crate) struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    per_site: bool,
    values: Vec<u64>,
}

impl Family {
    fn new(
        name: &'static str,
        help: &'static str,
        kind: Kind,
        per_site: bool,
        sites: usize,
    ) -> Self {
        Family { name, help, kind, per_site, values: vec![0; if per_site { sites } else { 1 }] }
    }

    pub(crate) fn inc(&mut self, site: usize) {
        self.add(site, 1);
    }

    pub(crate) fn add(&mut self, site: usize, n: u64) {
        if let Some(v) = self.values.get_mut(site) {
            *v += n;
        }
    }

    pub(crate) fn set(&mut self, site: usize, n: u64) {
        if let Some(v) = self.values.get_mut(site) {
            *v = n;
        }
    }

    pub(crate) fn get(&self, site: usize) -> u64 {
        self.values.get(site).copied().unwrap_or(0)
    }

    fn render(&self, sites: &Sites, out: &mut String) {
        let kind = match self.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
        if self.per_site {
            for s in sites.ids() {
                let _ = writeln!(
                    out,
                    "{}{{site=\"{}\"}} {}",
                    self.name,
                    sites.name(s),
                    self.get(s.index())
                );
            }
        } else {
            let _ = writeln!(out, "{} {}", self.name, self.get(0));
        }
    }
}

/// A histogram with fixed buckets (seconds).
#[derive(Debug)]
pub(crate) struct Histogram {
    name: &'static str,
    help: &'static str,
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(name: &'static str, help: &'static str, bounds: &'static [f64]) -> Self {
        Histogram { name, help, bounds, counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }

    pub(crate) fn observe(&mut self, v: f64) {
        for (b, c) in self.bounds.iter().zip(&mut self.counts) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} histogram", self.name);
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{}_bucket{{le=\"{b}\"}} {c}", self.name);
        }
        let _ = writeln!(out, "{}_bucket{{le=\"+Inf\"}} {}", self.name, self.count);
        let _ = writeln!(out, "{}_sum {}", self.name, self.sum);
        let _ = writeln!(out, "{}_count {}", self.name, self.count);
    }
}

/// Every metric of the core.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub ticks: Family,
    pub tick_seconds: Histogram,
    pub players: Family,
    pub bubbles: Family,
    pub servers_ready: Family,
    pub agent_connected: Family,
    pub bubbles_created: Family,
    pub handovers: Family,
    pub handovers_failed: Family,
    pub handover_seconds: Histogram,
    pub renewals: Family,
    pub leases_refused: Family,
    pub order_failures: Family,
    pub backups: Family,
    pub backups_refused: Family,
    pub store_failures: Family,
    pub failovers: Family,
    pub drains: Family,
}

const TICK_BUCKETS: &[f64] = &[0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0];
const HANDOVER_BUCKETS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0];

impl Metrics {
    pub(crate) fn new(sites: &Sites) -> Self {
        let n = sites.len();
        let c = |name, help, per_site| Family::new(name, help, Kind::Counter, per_site, n);
        let g = |name, help| Family::new(name, help, Kind::Gauge, true, n);
        Metrics {
            ticks: c("horizon_core_ticks_total", "Scoring ticks run.", false),
            tick_seconds: Histogram::new(
                "horizon_core_tick_seconds",
                "Time of one tick of the brain (grouping, scoring, decisions).",
                TICK_BUCKETS,
            ),
            players: g("horizon_players", "Connected players by home site."),
            bubbles: g("horizon_bubbles", "Bubbles simulated by site."),
            servers_ready: g(
                "horizon_servers_ready",
                "Ready game servers holding nothing, by site.",
            ),
            agent_connected: g(
                "horizon_agent_connected",
                "1 when the site's agent is connected to the core.",
            ),
            bubbles_created: c("horizon_bubbles_created_total", "Bubbles created, by site.", true),
            handovers: c("horizon_handovers_total", "Handovers committed.", false),
            handovers_failed: c(
                "horizon_handovers_failed_total",
                "Handovers that could not complete.",
                false,
            ),
            handover_seconds: Histogram::new(
                "horizon_handover_seconds",
                "From the decision to the commit of a handover.",
                HANDOVER_BUCKETS,
            ),
            renewals: c(
                "horizon_lease_renewals_total",
                "Batched lease renewals received, by site.",
                true,
            ),
            leases_refused: c(
                "horizon_leases_refused_total",
                "Lease renewals refused (fenced or expired), by site.",
                true,
            ),
            order_failures: c(
                "horizon_agent_order_failures_total",
                "Orders to an agent that failed or could not be queued, by site.",
                true,
            ),
            backups: c(
                "horizon_backups_total",
                "State copies accepted into the universe backup, by site.",
                true,
            ),
            backups_refused: c(
                "horizon_backups_refused_total",
                "State copies refused (not the current holder or epoch, or malformed), by site.",
                true,
            ),
            store_failures: c(
                "horizon_store_failures_total",
                "Writes the durable store could not make.",
                false,
            ),
            failovers: c(
                "horizon_failovers_total",
                "Bubbles restored from the universe backup after their holder was lost, by the site that took them.",
                true,
            ),
            drains: c(
                "horizon_drains_total",
                "Ended bubbles restored from their copy for a moment so their players' states could leave (their holder was away), by the site that ran it.",
                true,
            ),
        }
    }

    /// The exposition text served at `/metrics`.
    pub(crate) fn render(&self, sites: &Sites) -> String {
        let mut out = String::new();
        for f in [
            &self.ticks,
            &self.players,
            &self.bubbles,
            &self.servers_ready,
            &self.agent_connected,
            &self.bubbles_created,
            &self.handovers,
            &self.handovers_failed,
            &self.renewals,
            &self.leases_refused,
            &self.order_failures,
            &self.backups,
            &self.backups_refused,
            &self.store_failures,
            &self.failovers,
            &self.drains,
        ] {
            f.render(sites, &mut out);
        }
        self.tick_seconds.render(&mut out);
        self.handover_seconds.render(&mut out);
        out
    }
}
