//! Site scoring (design.md §3) and the hysteresis state machine.
//!
//! `latency(p, S) = access_rtt_min(p) + backbone(gateway(p), S)` and
//! `cost(S) = Σ w(p) · latency(p, S)`, where `gateway(p)` is the site whose gateway the player
//! entered at: their home from the relay stage on (they dial the site they reach fastest), the
//! core site under the measure stage (design.md §2). Both only need, per gateway site, the sum
//! of weights and the
//! largest access RTT of the group's counted players: a [`Tally`]. Scoring a group is then
//! `O(sites²)` whatever its size, which is what makes a million players cheap.

use crate::config::{Sites, Thresholds};
use crate::ids::SiteId;
use crate::player::Player;
use crate::time::{Span, Time};

/// Costs closer than this are equal (sums of floats).
const EPS: f64 = 1e-6;

/// Per-gateway-site aggregates of a set of players. NPCs are never added.
#[derive(Clone, Debug, PartialEq)]
pub struct Tally {
    /// Σ w per gateway site.
    pub weight: Vec<f64>,
    /// Largest access RTT per gateway site; `-inf` when no counted player entered there.
    pub max_access_ms: Vec<f64>,
    /// Σ w over all counted players.
    pub sum_w: f64,
    /// Σ w · access over all counted players.
    pub sum_w_access: f64,
    /// Number of counted players.
    pub counted: u32,
}

impl Tally {
    pub fn new(n_sites: usize) -> Self {
        Tally {
            weight: vec![0.0; n_sites],
            max_access_ms: vec![f64::NEG_INFINITY; n_sites],
            sum_w: 0.0,
            sum_w_access: 0.0,
            counted: 0,
        }
    }

    /// Resets to empty, keeping the allocation.
    pub fn clear(&mut self) {
        self.weight.fill(0.0);
        self.max_access_ms.fill(f64::NEG_INFINITY);
        self.sum_w = 0.0;
        self.sum_w_access = 0.0;
        self.counted = 0;
    }

    /// Adds a player with weight `w`; a weight of 0 (NPC) adds nothing.
    pub fn add(&mut self, p: &Player, w: f64) {
        self.add_one(p.gateway, p.access_rtt_min_ms, w);
    }

    /// Adds a player who entered at `gateway`, of access RTT `access_ms`, with weight `w`.
    pub fn add_one(&mut self, gateway: SiteId, access_ms: f64, w: f64) {
        if w <= 0.0 {
            return;
        }
        let h = gateway.index();
        self.weight[h] += w;
        self.max_access_ms[h] = self.max_access_ms[h].max(access_ms);
        self.sum_w += w;
        self.sum_w_access += w * access_ms;
        self.counted += 1;
    }

    /// Adds another tally (a union of groups).
    pub fn merge(&mut self, o: &Tally) {
        for h in 0..self.weight.len() {
            self.weight[h] += o.weight[h];
            self.max_access_ms[h] = self.max_access_ms[h].max(o.max_access_ms[h]);
        }
        self.sum_w += o.sum_w;
        self.sum_w_access += o.sum_w_access;
        self.counted += o.counted;
    }

    /// `cost(S)` in weighted milliseconds.
    pub fn cost(&self, sites: &Sites, s: SiteId) -> f64 {
        let mut c = self.sum_w_access;
        for h in sites.ids() {
            let w = self.weight[h.index()];
            if w > 0.0 {
                c += w * sites.backbone_ms(h, s);
            }
        }
        c
    }

    /// The worst counted player's latency if simulated at `s` (0 when nobody is counted).
    pub fn worst_ms(&self, sites: &Sites, s: SiteId) -> f64 {
        let mut worst: f64 = 0.0;
        for h in sites.ids() {
            let a = self.max_access_ms[h.index()];
            if a.is_finite() {
                worst = worst.max(a + sites.backbone_ms(h, s));
            }
        }
        worst
    }

    /// The gateway sites the counted players entered at.
    pub fn gateways(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.weight.len()).filter(|&h| self.weight[h] > 0.0)
    }
}

/// The latency used for decisions for player `p` simulated at `s`.
pub fn latency_ms(sites: &Sites, p: &Player, s: SiteId) -> f64 {
    p.access_rtt_min_ms + sites.backbone_ms(p.gateway, s)
}

/// One candidate's figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SiteScore {
    pub site: SiteId,
    pub cost: f64,
    pub worst_ms: f64,
}

impl SiteScore {
    /// [`Tally::cost`] and [`Tally::worst_ms`] at `site`, in one pass over the gateway sites.
    pub fn of(t: &Tally, sites: &Sites, site: SiteId) -> Self {
        let backbone = sites.backbone_to(site);
        let (mut cost, mut worst) = (t.sum_w_access, 0.0f64);
        for ((&w, &access), &bb) in t.weight.iter().zip(&t.max_access_ms).zip(backbone) {
            // A gateway with weight has a finite largest access RTT, and the other way round.
            if w > 0.0 {
                cost += w * bb;
                worst = worst.max(access + bb);
            }
        }
        SiteScore { site, cost, worst_ms: worst }
    }
}

/// The best allowed site for a tally (design.md §3 rules 1 and 2).
///
/// `candidate(s)` says whether `s` can host the group now; the core site always can, so it is
/// always considered. `current` is where the group is, for the "stay" tie-break.
pub fn best_site(
    t: &Tally,
    sites: &Sites,
    cap_ms: f64,
    current: Option<SiteId>,
    mut candidate: impl FnMut(SiteId) -> bool,
) -> SiteScore {
    let core = sites.core();
    let mut best: Option<SiteScore> = None;
    let mut best_capped: Option<SiteScore> = None;
    for s in sites.ids() {
        if s != core && !candidate(s) {
            continue;
        }
        let sc = SiteScore::of(t, sites, s);
        let better = |b: &Option<SiteScore>| b.is_none_or(|b| prefer(&sc, &b, current, core));
        if sc.worst_ms <= cap_ms + EPS && better(&best_capped) {
            best_capped = Some(sc);
        }
        if better(&best) {
            best = Some(sc);
        }
    }
    // The core is always a candidate, so `best` is always set.
    best_capped.or(best).unwrap_or(SiteScore { site: core, cost: 0.0, worst_ms: 0.0 })
}

/// Whether `a` beats `b`: lower cost, then lower worst latency, then staying, then the core site,
/// then configuration order (so the result never depends on iteration order).
fn prefer(a: &SiteScore, b: &SiteScore, current: Option<SiteId>, core: SiteId) -> bool {
    if (a.cost - b.cost).abs() > EPS {
        return a.cost < b.cost;
    }
    if (a.worst_ms - b.worst_ms).abs() > EPS {
        return a.worst_ms < b.worst_ms;
    }
    let stay = |s: SiteId| Some(s) == current;
    if stay(a.site) != stay(b.site) {
        return stay(a.site);
    }
    if (a.site == core) != (b.site == core) {
        return a.site == core;
    }
    a.site < b.site
}

/// Why a bubble changed site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveReason {
    /// The gain per counted player reached the threshold, after dwell and hold.
    Gain,
    /// The current site breaks the fairness cap and the best one does not.
    Cap,
    /// The site lost its lease (link loss, no server): hold and dwell are ignored.
    Failover,
    /// A fixed delegation's bubble goes back to its configured site (after a failover).
    Delegation,
}

impl MoveReason {
    /// The name used in reports (as serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            MoveReason::Gain => "gain",
            MoveReason::Cap => "cap",
            MoveReason::Failover => "failover",
            MoveReason::Delegation => "delegation",
        }
    }
}

/// The hysteresis state of one bubble (design.md §3 rule 3).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Hysteresis {
    /// The site that has been best continuously, and since when.
    pub best_since: Option<(SiteId, Time)>,
    /// When the bubble last changed site.
    pub last_move: Option<Time>,
}

/// What [`Hysteresis::decide`] concluded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// The current site is best, or nothing justifies a move.
    Stay,
    /// A better site qualifies but dwell or hold is not over yet.
    Wait,
    Move(MoveReason),
}

/// Where a bubble's hysteresis stands against the best site, read without changing it: what an
/// operator is shown ([`crate::Mesh::explain`]), and what [`Hysteresis::decide`] acts on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Standing {
    pub verdict: Verdict,
    /// The best site's cost below the current one's, per unit of counted weight (ms; negative
    /// never: the best site is never worse).
    pub gain_ms: f64,
    /// The current site breaks the fairness cap and the best one does not.
    pub fixes_cap: bool,
    /// How long the best site has been best without interruption (zero when it is the current
    /// one, or became best just now).
    pub dwelt: Span,
    /// How long until the last move's hold is over (zero: not held).
    pub hold_left: Span,
}

impl Hysteresis {
    /// Decides whether a bubble on `current` moves to `best`, given both sites' scores.
    pub fn decide(
        &mut self,
        now: Time,
        current: &SiteScore,
        best: &SiteScore,
        sum_w: f64,
        th: &Thresholds,
    ) -> Verdict {
        if best.site == current.site {
            self.best_since = None;
            return Verdict::Stay;
        }
        if !matches!(self.best_since, Some((s, _)) if s == best.site) {
            self.best_since = Some((best.site, now));
        }
        self.standing(now, current, best, sum_w, th).verdict
    }

    /// What [`Hysteresis::decide`] would conclude at `now`, and why, without recording anything
    /// (a best site not yet recorded counts as best from `now`).
    pub fn standing(
        &self,
        now: Time,
        current: &SiteScore,
        best: &SiteScore,
        sum_w: f64,
        th: &Thresholds,
    ) -> Standing {
        let hold_left = self
            .last_move
            .map_or(Span::ZERO, |t| Span::from_ms(th.hold_ms.saturating_sub(now.since(t).as_ms())));
        let gain_ms = if sum_w > 0.0 { (current.cost - best.cost) / sum_w } else { 0.0 };
        let fixes_cap = current.worst_ms > th.cap_ms + EPS && best.worst_ms <= th.cap_ms + EPS;
        let mut standing =
            Standing { verdict: Verdict::Stay, gain_ms, fixes_cap, dwelt: Span::ZERO, hold_left };
        if best.site == current.site {
            return standing;
        }
        standing.dwelt = match self.best_since {
            Some((s, t)) if s == best.site => now.since(t),
            _ => Span::ZERO,
        };
        let reason = if gain_ms >= th.gain_ms - EPS {
            MoveReason::Gain
        } else if fixes_cap {
            MoveReason::Cap
        } else {
            return standing;
        };
        let dwelt = standing.dwelt >= Span::from_ms(th.dwell_ms);
        standing.verdict =
            if dwelt && hold_left == Span::ZERO { Verdict::Move(reason) } else { Verdict::Wait };
        standing
    }

    /// Records a move (of any reason, failover included) at `now`.
    pub fn moved(&mut self, now: Time) {
        self.last_move = Some(now);
        self.best_since = None;
    }
}
