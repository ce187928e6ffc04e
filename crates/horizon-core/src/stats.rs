//! What the core counts as it runs: plain atomics the machine updates as it goes (counters)
//! and after every step of its loop (gauges), with no lock and no Prometheus type. The
//! metrics (`metrics.rs`) read them at each scrape, as an agent's read its `AgentStats`: one
//! shape for every daemon. Every series a label set from the configuration names (a site, an
//! ordered pair of sites, a reason, an outcome) has its cell from the start.

use std::sync::atomic::{AtomicU64, Ordering};

use horizon_mesh::SiteId;

/// One counter or gauge.
#[derive(Debug, Default)]
pub(crate) struct Cell(AtomicU64);

impl Cell {
    pub(crate) fn inc(&self) {
        self.add(1);
    }

    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A row of cells per site (or per ordered pair of sites), `width` cells each: a family with
/// labels, every label set known from the start.
#[derive(Debug)]
pub(crate) struct Table {
    width: usize,
    cells: Vec<Cell>,
}

impl Table {
    fn new(rows: usize, width: usize) -> Self {
        Table { width, cells: (0..rows * width).map(|_| Cell::default()).collect() }
    }

    /// The cell at (`row`, `col`); `None` outside the table (a site not configured).
    fn cell(&self, row: usize, col: usize) -> Option<&Cell> {
        (col < self.width).then(|| self.cells.get(row * self.width + col)).flatten()
    }

    pub(crate) fn get(&self, row: usize, col: usize) -> u64 {
        self.cell(row, col).map_or(0, Cell::get)
    }

    pub(crate) fn inc(&self, row: usize, col: usize) {
        self.add(row, col, 1);
    }

    pub(crate) fn add(&self, row: usize, col: usize, n: u64) {
        if let Some(c) = self.cell(row, col) {
            c.add(n);
        }
    }

    pub(crate) fn set(&self, row: usize, col: usize, n: u64) {
        if let Some(c) = self.cell(row, col) {
            c.set(n);
        }
    }

    /// Row `row`, summed over its columns.
    fn row_sum(&self, row: usize) -> u64 {
        (0..self.width).map(|c| self.get(row, c)).sum()
    }

    /// Column `col`, summed over every row.
    fn col_sum(&self, col: usize) -> u64 {
        (0..self.cells.len() / self.width.max(1)).map(|r| self.get(r, col)).sum()
    }
}

/// One cell per site: `inc`, `add`, `set` and `get` by the site's index (a site not
/// configured counts nowhere).
#[derive(Debug)]
pub(crate) struct PerSite(Table);

impl PerSite {
    fn new(sites: usize) -> Self {
        PerSite(Table::new(sites, 1))
    }

    pub(crate) fn inc(&self, site: usize) {
        self.0.inc(site, 0);
    }

    pub(crate) fn add(&self, site: usize, n: u64) {
        self.0.add(site, 0, n);
    }

    pub(crate) fn set(&self, site: usize, n: u64) {
        self.0.set(site, 0, n);
    }

    pub(crate) fn get(&self, site: usize) -> u64 {
        self.0.get(site, 0)
    }
}

/// A histogram per ordered pair of sites: counts per bucket (each bucket counts the
/// observations up to its bound and above the previous one; the last, above every bound),
/// and the sum in microseconds.
#[derive(Debug)]
pub(crate) struct PairHistogram {
    pub(crate) bounds: &'static [f64],
    buckets: Table,
    sum_us: Table,
}

impl PairHistogram {
    fn new(pairs: usize, bounds: &'static [f64]) -> Self {
        PairHistogram {
            bounds,
            buckets: Table::new(pairs, bounds.len() + 1),
            sum_us: Table::new(pairs, 1),
        }
    }

    fn observe(&self, pair: usize, seconds: f64) {
        let bucket = self.bounds.iter().position(|&b| seconds <= b).unwrap_or(self.bounds.len());
        self.buckets.inc(pair, bucket);
        self.sum_us.add(pair, 0, (seconds.max(0.0) * 1e6).round() as u64);
    }

    /// Pair `pair`'s cumulative counts per bound, its count and its sum in seconds.
    pub(crate) fn read(&self, pair: usize) -> (Vec<u64>, u64, f64) {
        let mut total = 0;
        let cumulative = (0..self.bounds.len())
            .map(|b| {
                total += self.buckets.get(pair, b);
                total
            })
            .collect();
        let count = total + self.buckets.get(pair, self.bounds.len());
        (cumulative, count, self.sum_us.get(pair, 0) as f64 / 1e6)
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
    pub(crate) const ALL: [HandoverOutcome; 3] =
        [HandoverOutcome::Committed, HandoverOutcome::Abandoned, HandoverOutcome::GivenUp];

    fn index(self) -> usize {
        Self::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }

    pub(crate) fn as_str(self) -> &'static str {
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
pub(crate) const SERVER_STATES: [&str; 2] = ["ready", "busy"];

/// Zone changes (label `change` of `horizon_core_zone_changes_total`).
pub(crate) const ZONE_CHANGES: [&str; 2] = ["split", "merge"];

/// Bubbles carved out of the core site's zones, and dissolved back into them (SMD-G).
pub(crate) const CARVE_CHANGES: [&str; 2] = ["carve", "dissolve"];

/// Handover durations, seconds: from a tenth of a second to half a minute.
pub(crate) const HANDOVER_BUCKETS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0];

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
    pub(crate) const ALL: [FailoverReason; 4] = [
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

    fn index(self) -> usize {
        Self::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// A backbone round trip not measured yet (its series is absent: 0 would be a lie).
const UNMEASURED: u64 = u64::MAX;

/// Every figure of the core. Gauges are set after every step of the loop
/// (`CoreMachine::refresh_gauges`); counters only go up.
#[derive(Debug)]
pub(crate) struct CoreStats {
    sites: usize,
    pub(crate) players: PerSite,
    pub(crate) players_simulated: PerSite,
    pub(crate) unsimulated: PerSite,
    pub(crate) players_measured: PerSite,
    pub(crate) players_would_gain: PerSite,
    pub(crate) bubbles: PerSite,
    pub(crate) regions_over_capacity: PerSite,
    pub(crate) agent_connected: PerSite,
    pub(crate) bubbles_created: PerSite,
    pub(crate) renewals: PerSite,
    pub(crate) leases_refused: PerSite,
    pub(crate) order_failures: PerSite,
    pub(crate) backups: PerSite,
    pub(crate) backups_refused: PerSite,
    pub(crate) drains: PerSite,
    pub(crate) adoptions: PerSite,
    pub(crate) zones: Cell,
    pub(crate) delegations_waiting: Cell,
    pub(crate) store_failures: Cell,
    /// site × [`SERVER_STATES`].
    pub(crate) servers: Table,
    /// [`ZONE_CHANGES`].
    pub(crate) zone_changes: Table,
    /// site × [`CARVE_CHANGES`].
    pub(crate) carves: Table,
    /// pair × [`HandoverOutcome::ALL`].
    pub(crate) handovers: Table,
    pub(crate) handover_seconds: PairHistogram,
    /// site × [`FailoverReason::ALL`].
    pub(crate) failovers: Table,
    /// site × [`RESTORE_COPIES`].
    pub(crate) restores: Table,
    /// site × [`REFUSED_REASONS`].
    pub(crate) refused: Table,
    /// pair: the round trip's `f64` bits in seconds, or [`UNMEASURED`].
    backbone: Vec<AtomicU64>,
    /// pair.
    pub(crate) below_floor: Table,
}

impl CoreStats {
    pub(crate) fn new(sites: usize) -> Self {
        let pairs = sites * sites;
        CoreStats {
            sites,
            players: PerSite::new(sites),
            players_simulated: PerSite::new(sites),
            unsimulated: PerSite::new(sites),
            players_measured: PerSite::new(sites),
            players_would_gain: PerSite::new(sites),
            bubbles: PerSite::new(sites),
            regions_over_capacity: PerSite::new(sites),
            agent_connected: PerSite::new(sites),
            bubbles_created: PerSite::new(sites),
            renewals: PerSite::new(sites),
            leases_refused: PerSite::new(sites),
            order_failures: PerSite::new(sites),
            backups: PerSite::new(sites),
            backups_refused: PerSite::new(sites),
            drains: PerSite::new(sites),
            adoptions: PerSite::new(sites),
            zones: Cell::default(),
            delegations_waiting: Cell::default(),
            store_failures: Cell::default(),
            servers: Table::new(sites, SERVER_STATES.len()),
            zone_changes: Table::new(1, ZONE_CHANGES.len()),
            carves: Table::new(sites, CARVE_CHANGES.len()),
            handovers: Table::new(pairs, HandoverOutcome::ALL.len()),
            handover_seconds: PairHistogram::new(pairs, HANDOVER_BUCKETS),
            failovers: Table::new(sites, FailoverReason::ALL.len()),
            restores: Table::new(sites, RESTORE_COPIES.len()),
            refused: Table::new(sites, REFUSED_REASONS.len()),
            backbone: (0..pairs).map(|_| AtomicU64::new(UNMEASURED)).collect(),
            below_floor: Table::new(pairs, 1),
        }
    }

    /// The index of the ordered pair `(from, to)`.
    pub(crate) fn pair(&self, from: usize, to: usize) -> usize {
        from * self.sites + to
    }

    /// Zone splits and merges so far.
    pub(crate) fn zone_changes(&self) -> (u64, u64) {
        (self.zone_changes.get(0, 0), self.zone_changes.get(0, 1))
    }

    /// A zone was split (`true`) or two were merged back.
    pub(crate) fn zone_changed(&self, split: bool) {
        self.zone_changes.inc(0, usize::from(!split));
    }

    /// Bubbles carved out of the zones and dissolved back into them so far, every site.
    pub(crate) fn carves(&self) -> (u64, u64) {
        let total = |c| (0..self.sites).map(|s| self.carves.get(s, c)).sum();
        (total(0), total(1))
    }

    /// A bubble on `site` was carved out of the zones (`true`) or dissolved into them.
    pub(crate) fn carved(&self, site: usize, carved: bool) {
        self.carves.inc(site, usize::from(!carved));
    }

    /// A handover from `from` to `to` ended; `seconds` from its decision, if committed.
    pub(crate) fn handover(
        &self,
        from: SiteId,
        to: SiteId,
        outcome: HandoverOutcome,
        seconds: Option<f64>,
    ) {
        let pair = self.pair(from.index(), to.index());
        let col = outcome.index();
        self.handovers.inc(pair, col);
        if let Some(s) = seconds {
            self.handover_seconds.observe(pair, s);
        }
    }

    /// Handovers that ended with `outcome`, every pair together.
    pub(crate) fn handovers_ended(&self, outcome: HandoverOutcome) -> u64 {
        let col = outcome.index();
        self.handovers.col_sum(col)
    }

    /// A part of `site`'s request refused: it does not own what it names (`reports.rs`).
    pub(crate) fn refused(&self, site: SiteId, reason: &'static str) {
        debug_assert!(REFUSED_REASONS.contains(&reason), "an unlisted reason: {reason}");
        if let Some(col) = REFUSED_REASONS.iter().position(|r| *r == reason) {
            self.refused.inc(site.index(), col);
        }
    }

    #[cfg(test)]
    pub(crate) fn refused_count(&self, site: SiteId, reason: &str) -> u64 {
        let col = REFUSED_REASONS.iter().position(|r| *r == reason).unwrap_or(usize::MAX);
        self.refused.get(site.index(), col)
    }

    pub(crate) fn failover(&self, to: SiteId, reason: FailoverReason) {
        self.failovers.inc(to.index(), reason.index());
    }

    /// A restore sent to `site` from a copy of kind `copy` (see [`RESTORE_COPIES`]).
    pub(crate) fn restore(&self, site: SiteId, copy: &str) {
        if let Some(col) = RESTORE_COPIES.iter().position(|c| *c == copy) {
            self.restores.inc(site.index(), col);
        }
    }

    /// Restores so far, by the kind of copy, every site together.
    pub(crate) fn restores_by_copy(&self) -> std::collections::BTreeMap<String, u64> {
        RESTORE_COPIES
            .iter()
            .enumerate()
            .map(|(col, &copy)| (copy.to_owned(), self.restores.col_sum(col)))
            .collect()
    }

    /// Failovers to `site`, every reason together.
    pub(crate) fn failovers_to(&self, site: SiteId) -> u64 {
        self.failovers.row_sum(site.index())
    }

    pub(crate) fn servers(&self, site: SiteId, ready: u64, busy: u64) {
        self.servers.set(site.index(), 0, ready);
        self.servers.set(site.index(), 1, busy);
    }

    pub(crate) fn backbone(&self, from: SiteId, to: SiteId, rtt_ms: f64) {
        if let Some(cell) = self.backbone.get(self.pair(from.index(), to.index())) {
            cell.store((rtt_ms / 1000.0).to_bits(), Ordering::Relaxed);
        }
    }

    /// The round trip last measured over the ordered pair `pair` ([`CoreStats::pair`]), in
    /// seconds.
    pub(crate) fn backbone_seconds(&self, pair: usize) -> Option<f64> {
        let bits = self.backbone.get(pair)?.load(Ordering::Relaxed);
        (bits != UNMEASURED).then(|| f64::from_bits(bits))
    }

    /// A backbone round trip measured below the pair's physical floor (not used).
    pub(crate) fn below_floor(&self, from: SiteId, to: SiteId) {
        self.below_floor.inc(self.pair(from.index(), to.index()), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_histogram_counts_each_observation_in_the_first_bucket_that_holds_it() {
        let h = PairHistogram::new(4, &[0.5, 1.0]);
        for s in [0.2, 0.5, 0.7, 3.0] {
            h.observe(1, s);
        }
        let (cumulative, count, sum) = h.read(1);
        assert_eq!(cumulative, [2, 3], "≤ 0.5: two; ≤ 1: three");
        assert_eq!(count, 4, "the last is above every bound");
        assert!((sum - 4.4).abs() < 1e-9, "{sum}");
        assert_eq!(h.read(0), (vec![0, 0], 0, 0.0), "other pairs untouched");
    }

    #[test]
    fn figures_are_kept_per_site_and_per_pair_and_summed_across() {
        let sites = crate::machine::tests::sites();
        let (par, mtl) = (sites.core(), sites.id("MTL").expect("MTL"));
        let s = CoreStats::new(sites.len());
        s.handover(par, mtl, HandoverOutcome::Committed, Some(0.3));
        s.handover(mtl, par, HandoverOutcome::Committed, None);
        s.handover(mtl, par, HandoverOutcome::GivenUp, None);
        assert_eq!(s.handovers_ended(HandoverOutcome::Committed), 2);
        assert_eq!(s.handover_seconds.read(s.pair(par.index(), mtl.index())).1, 1);
        s.failover(mtl, FailoverReason::ServerLost);
        s.failover(mtl, FailoverReason::NotHeld);
        assert_eq!((s.failovers_to(mtl), s.failovers_to(par)), (2, 0));
        s.restore(par, "parts");
        s.restore(mtl, "parts");
        assert_eq!(s.restores_by_copy()["parts"], 2);
        s.refused(mtl, "probe_table");
        assert_eq!(s.refused_count(mtl, "probe_table"), 1);
        let pm = s.pair(par.index(), mtl.index());
        assert_eq!(s.backbone_seconds(pm), None, "not measured yet");
        s.backbone(par, mtl, 85.0);
        assert_eq!(s.backbone_seconds(pm), Some(0.085));
        s.zone_changed(true);
        s.zone_changed(false);
        s.zone_changed(false);
        assert_eq!(s.zone_changes(), (1, 2));
        s.players.set(1000, 4);
        assert_eq!(s.players.get(1000), 0, "a site not configured counts nowhere");
    }
}
