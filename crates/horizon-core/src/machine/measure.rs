//! Stage 1, "measure" (design.md §8): who would gain from a relay site, from real
//! connections. Each home gateway sends the probe tables it believed (`control::Measured`: a
//! client's round trip to every site's beacon, the gateway's own site replaced by the RTT the
//! gateway measures itself); the core keeps one per player online and counts, per nearest site,
//! the players who would gain at least [`WOULD_GAIN_MS`] if a relay site simulated them.
//!
//! A believed table also says the player's home: the site they reach fastest, whichever gateway
//! they entered by (`horizon_mesh::Mesh::handle_measured_home`), counted under it by every
//! figure for the rest of the session, in this stage and the later ones.
//!
//! Read by the metrics (`horizon_core_players_measured`, `horizon_core_players_would_gain`),
//! `/status` (`measure`) and `/measure.csv` (the CSV `horizon sim measure` reads). Never by
//! placement: the brain measures every site from the player's gateway, with the RTTs the
//! infrastructure measures (design.md §2), so no claim of a client about another site moves
//! anyone.

use std::collections::BTreeMap;

use horizon_mesh::{SiteId, Sites, Span, Time};
use horizon_proto::{PlayerId, control};

/// A player gains from a relay site with at least this much less latency (the article's
/// question: "how many players would gain 25 ms or more?").
pub(crate) const WOULD_GAIN_MS: f64 = 25.0;

/// Tables kept, at most: one per player online; beyond, new ones are not kept (counted).
pub(crate) const MAX_TABLES: usize = 1 << 20;

/// A table whose player the brain does not know is kept this long (its join may still be on
/// its way), then forgotten.
const UNKNOWN_KEPT: Span = Span::from_ms(30_000);

/// One player's table, as the core keeps it.
#[derive(Clone, Debug)]
struct Table {
    /// The site whose gateway the player entered at.
    gateway: SiteId,
    /// Round trips in milliseconds to each answered site (the gateway's own measured by the
    /// gateway), by site id.
    rtt_ms: Vec<(SiteId, f64)>,
    received: Time,
}

impl Table {
    fn nearest(&self) -> SiteId {
        self.rtt_ms.iter().min_by(|a, b| a.1.total_cmp(&b.1)).map_or(self.gateway, |&(s, _)| s)
    }

    /// Latency saved if the best relay site (not the core) simulated the player, entering at
    /// it, against everything at the core entered at the gateway. `None`: no relay site
    /// answered.
    fn gain_ms(&self, sites: &Sites) -> Option<f64> {
        let core = sites.core();
        let access = self.rtt_ms.iter().find(|(s, _)| *s == self.gateway)?.1;
        let at_core = access + sites.backbone_ms(self.gateway, core);
        let best_relay = self
            .rtt_ms
            .iter()
            .filter(|(s, _)| *s != core)
            .map(|&(_, ms)| ms)
            .min_by(f64::total_cmp)?;
        Some(at_core - best_relay)
    }
}

/// The tables of the players online, the tables refused since start, and when the figures are
/// next counted into the metrics.
#[derive(Debug, Default)]
pub(crate) struct Measurements {
    tables: BTreeMap<PlayerId, Table>,
    refused: u64,
    next_count: Time,
}

/// Stage 1's figures for the players of one nearest site (`/status`'s `measure.by_home`).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HomeMeasure {
    /// Players online whose lowest measured RTT is to this site.
    pub players: u64,
    /// Of them, those who would gain at least 25 ms from a relay site.
    pub would_gain: u64,
    /// Of them, those who entered at this site's gateway.
    pub entered_here: u64,
}

/// `/status`'s `measure` section.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MeasureStatus {
    /// Players online with a believed probe table.
    pub players: u64,
    pub would_gain_ms: f64,
    /// By the site with the player's lowest measured RTT (their home by measure).
    pub by_home: BTreeMap<String, HomeMeasure>,
    /// Share of `players` who would gain at least `would_gain_ms`.
    pub would_gain_share: f64,
    /// Share of `players` whose home, as every figure counts it, is their lowest-RTT site
    /// (1 once the brain took every table in).
    pub home_matches_lowest_rtt_share: f64,
    /// Share of `players` who entered at their lowest-RTT site's gateway (under the measure
    /// stage, where everyone enters at the core site: the core site's players).
    pub entered_at_lowest_rtt_share: f64,
    /// Tables refused since start: from a site not handed that player id, or over the limit.
    pub refused: u64,
}

impl Measurements {
    /// A gateway's tables. `owns(player)`: the site was handed that player id. Sites the core
    /// does not know are left out of a table; a table with nothing left is not kept.
    pub(crate) fn record(
        &mut self,
        sites: &Sites,
        gateway: SiteId,
        players: &[control::MeasuredPlayer],
        owns: impl Fn(PlayerId) -> bool,
        now: Time,
    ) -> u64 {
        let mut refused = 0;
        for m in players {
            let fits = self.tables.len() < MAX_TABLES || self.tables.contains_key(&m.player);
            if !owns(m.player) || !fits {
                refused += 1;
                continue;
            }
            let access = f64::from(m.access_rtt_ms);
            let mut rtt_ms: Vec<(SiteId, f64)> = m
                .probes
                .iter()
                .filter(|p| p.answered > 0)
                .filter_map(|p| Some((sites.id(p.site.as_str())?, f64::from(p.median_us) / 1000.0)))
                .filter(|&(s, _)| s != gateway)
                .collect();
            if !access.is_finite() || access < 0.0 {
                refused += 1;
                continue;
            }
            rtt_ms.push((gateway, access));
            self.tables.insert(m.player, Table { gateway, rtt_ms, received: now });
        }
        self.refused += refused;
        refused
    }

    /// Whether the figures are due to be counted at `now` (then next after `every`).
    pub(crate) fn count_due(&mut self, now: Time, every: horizon_mesh::Span) -> bool {
        if now < self.next_count {
            return false;
        }
        self.next_count = now + every;
        true
    }

    /// The site of `player`'s lowest RTT in their table, if one is kept.
    pub(crate) fn nearest(&self, player: PlayerId) -> Option<SiteId> {
        self.tables.get(&player).map(Table::nearest)
    }

    pub(crate) fn forget(&mut self, player: PlayerId) {
        self.tables.remove(&player);
    }

    /// Forgets the tables of players the brain does not know, once they are old enough for
    /// their join to have come.
    pub(crate) fn sweep(&mut self, known: impl Fn(PlayerId) -> bool, now: Time) {
        self.tables.retain(|&p, t| known(p) || now.since(t.received) < UNKNOWN_KEPT);
    }

    /// The figures, `home_of` saying the home every other figure counts a player under.
    pub(crate) fn status(
        &self,
        sites: &Sites,
        home_of: impl Fn(PlayerId) -> Option<SiteId>,
    ) -> MeasureStatus {
        let mut by_home: BTreeMap<String, HomeMeasure> = BTreeMap::new();
        let (mut gaining, mut entered, mut matching) = (0u64, 0u64, 0u64);
        for (&player, t) in &self.tables {
            let nearest = t.nearest();
            let home = by_home.entry(sites.name(nearest).to_string()).or_default();
            home.players += 1;
            if t.gain_ms(sites).is_some_and(|g| g >= WOULD_GAIN_MS) {
                home.would_gain += 1;
                gaining += 1;
            }
            if nearest == t.gateway {
                home.entered_here += 1;
                entered += 1;
            }
            matching += u64::from(home_of(player) == Some(nearest));
        }
        let players = self.tables.len() as u64;
        let share = |n: u64| if players == 0 { 0.0 } else { n as f64 / players as f64 };
        MeasureStatus {
            players,
            would_gain_ms: WOULD_GAIN_MS,
            by_home,
            would_gain_share: share(gaining),
            home_matches_lowest_rtt_share: share(matching),
            entered_at_lowest_rtt_share: share(entered),
            refused: self.refused,
        }
    }

    /// The tables as `horizon sim measure` reads them: `player,site,rtt_ms`, one line per
    /// answered site, players in id order.
    pub(crate) fn csv(&self, sites: &Sites) -> String {
        use std::fmt::Write;
        let mut out = String::from("player,site,rtt_ms\n");
        for (p, t) in &self.tables {
            for &(s, ms) in &t.rtt_ms {
                let _ = writeln!(out, "{},{},{:.3}", p.0, sites.name(s), ms);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horizon_mesh::SiteName;
    use horizon_proto::Name;
    use horizon_proto::gateway::SiteProbe;

    fn sites() -> Sites {
        let n = |s: &str| SiteName::new(s).expect("valid");
        let pairs =
            [(n("PAR"), n("MTL"), 85.0), (n("PAR"), n("HKG"), 185.0), (n("MTL"), n("HKG"), 225.0)];
        Sites::new(vec![n("PAR"), n("MTL"), n("HKG")], &n("PAR"), &pairs).expect("valid")
    }

    fn measured(
        player: u64,
        access: f32,
        probes: &[(&str, Option<f64>)],
    ) -> control::MeasuredPlayer {
        control::MeasuredPlayer {
            player: PlayerId(player),
            access_rtt_ms: access,
            probes: probes
                .iter()
                .map(|&(s, ms)| SiteProbe {
                    site: Name::new(s).expect("short"),
                    sent: 10,
                    answered: if ms.is_some() { 10 } else { 0 },
                    median_us: ms.map_or(0, |ms| (ms * 1000.0) as u32),
                })
                .collect(),
        }
    }

    #[test]
    fn players_are_counted_under_their_nearest_site_and_gain_from_the_best_relay() {
        let sites = sites();
        let par = sites.id("PAR").expect("site");
        let mut m = Measurements::default();
        let now = Time::ZERO;
        let players = [
            // A Parisian: nothing to gain.
            measured(1, 12.0, &[("PAR", Some(11.0)), ("MTL", Some(95.0)), ("HKG", Some(190.0))]),
            // A Montrealer entering at Paris (the measure stage): 100 ms at the core, 15 at MTL.
            measured(2, 100.0, &[("PAR", Some(99.0)), ("MTL", Some(15.0)), ("HKG", None)]),
            // A Hong Konger who claims 5 ms to Paris: the gateway's own 190 ms stands.
            measured(3, 190.0, &[("PAR", Some(5.0)), ("HKG", Some(9.0))]),
        ];
        assert_eq!(m.record(&sites, par, &players, |_| true, now), 0);
        let status = m.status(&sites, |_| None);
        assert_eq!(status.players, 3);
        assert_eq!(
            status.by_home["PAR"],
            HomeMeasure { players: 1, would_gain: 0, entered_here: 1 }
        );
        assert_eq!(
            status.by_home["MTL"],
            HomeMeasure { players: 1, would_gain: 1, entered_here: 0 }
        );
        assert_eq!(
            status.by_home["HKG"],
            HomeMeasure { players: 1, would_gain: 1, entered_here: 0 }
        );
        assert!((status.entered_at_lowest_rtt_share - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(status.home_matches_lowest_rtt_share, 0.0, "no home taken in");
        assert!((status.would_gain_share - 2.0 / 3.0).abs() < 1e-9);
        let csv = m.csv(&sites);
        assert!(csv.starts_with("player,site,rtt_ms\n"));
        assert!(csv.contains("3,PAR,190.000\n"), "the gateway's own measure, not the claim: {csv}");
        assert!(!csv.contains("2,HKG"), "an unanswered site has no line: {csv}");
    }

    #[test]
    fn a_player_entering_at_a_relay_counts_the_backbone_to_the_core() {
        // Relay stage: a Montrealer at MTL's gateway plays at PAR through the backbone.
        let sites = sites();
        let mtl = sites.id("MTL").expect("site");
        let mut m = Measurements::default();
        let players = [measured(7, 15.0, &[("PAR", Some(99.0)), ("MTL", Some(14.0))])];
        m.record(&sites, mtl, &players, |_| true, Time::ZERO);
        let status = m.status(&sites, |_| None);
        assert_eq!(
            status.by_home["MTL"],
            HomeMeasure { players: 1, would_gain: 1, entered_here: 1 }
        );
    }

    #[test]
    fn tables_of_ids_not_handed_to_the_site_are_refused_and_unknown_players_are_forgotten() {
        let sites = sites();
        let par = sites.id("PAR").expect("site");
        let mut m = Measurements::default();
        let players = [measured(1, 12.0, &[("PAR", Some(11.0))]), measured(2, 12.0, &[])];
        assert_eq!(m.record(&sites, par, &players, |p| p.0 == 2, Time::ZERO), 1);
        assert_eq!(
            (m.status(&sites, |_| None).players, m.status(&sites, |_| None).refused),
            (1, 1)
        );
        m.sweep(|_| false, Time::ZERO + Span::from_ms(29_000));
        assert_eq!(m.status(&sites, |_| None).players, 1, "its join may still come");
        m.sweep(|_| false, Time::ZERO + Span::from_ms(31_000));
        assert_eq!(m.status(&sites, |_| None).players, 0);
        m.record(&sites, par, &players[1..], |_| true, Time::ZERO);
        m.forget(PlayerId(2));
        assert_eq!(m.status(&sites, |_| None).players, 0);
    }
}
