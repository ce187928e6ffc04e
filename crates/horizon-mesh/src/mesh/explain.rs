//! Why a bubble is where it is: the figures the tick weighs for it, read on demand for an
//! operator (the core's `/status`, the console, `horizon sim run --explain`).

use super::{Mesh, Placement};
use crate::config::{Sites, Thresholds};
use crate::ids::{BubbleId, PlayerId, SiteId};
use crate::scoring::{SiteScore, Standing, Tally, Verdict, best_site};
use crate::time::Time;

/// One site as a candidate for a bubble.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub site: SiteId,
    /// `cost(S)` divided by the counted weight: the weighted mean latency there (ms; 0 when
    /// nobody is counted).
    pub cost_per_player_ms: f64,
    /// The worst counted player's latency there (ms).
    pub worst_ms: f64,
    /// That worst latency is over the fairness cap.
    pub breaks_cap: bool,
    /// The site could take the bubble now (up, with seats free); the current site and the
    /// core site always can.
    pub can_host: bool,
}

/// How a bubble's site is chosen, under the mesh's placement and the bubble's state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PlacementRule {
    /// Scored every tick, moved under hysteresis (SMD-G).
    Scored,
    /// A fixed stage's delegation: kept on the configured site whatever the scores.
    Delegated { site: SiteId },
    /// A baseline policy that never re-places a running bubble.
    Never(Placement),
    /// Its lease ran out: it fails over at the next tick, ignoring hold and dwell.
    FailingOver,
}

/// Why a bubble is where it is (see [`Mesh::explain`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    pub bubble: BubbleId,
    pub site: SiteId,
    /// Counted players in it now, and their weight.
    pub counted: u32,
    pub weight: f64,
    /// Every configured site, in configuration order.
    pub candidates: Vec<Candidate>,
    /// The site the scoring rules pick (lowest cost within the cap, staying on a tie).
    pub best: SiteId,
    pub standing: Standing,
    pub rule: PlacementRule,
}

/// SMD-G: a group playing in the core site's zones whose best site is another, by the gain a
/// move needs, counting the dwell before a bubble is carved out of the zones for it there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Carving {
    /// The group's smallest player id: its name while it counts.
    pub first: PlayerId,
    /// Its counted players at the last tick.
    pub players: u32,
    /// Its best site, where it will be carved out to.
    pub site: SiteId,
    /// Its gain there over the core site, per counted player (ms).
    pub gain_ms: f64,
    /// The core site breaks the fairness cap for it, and `site` does not.
    pub fixes_cap: bool,
    /// Since when `site` has been best.
    pub since: Time,
}

impl Carving {
    /// The count in one sentence, as the console and `sim run --explain` print it.
    pub fn words(&self, sites: &Sites, th: &Thresholds, now: Time) -> String {
        let (site, core) = (sites.name(self.site), sites.name(sites.core()));
        let players = if self.players == 1 { "player" } else { "players" };
        let dwell = crate::time::Span::from_ms(th.dwell_ms);
        format!(
            "The group of player {} ({} {players}) plays better on {site} than in {core}'s zones by \
             {:.1} ms per player{}: a bubble is carved out for it on {site} once {site} has been \
             best for {:.0} s (dwell {:.0} s so far).",
            self.first.0,
            self.players,
            self.gain_ms,
            if self.fixes_cap { ", and fixes the fairness cap" } else { "" },
            dwell.as_secs_f64(),
            now.since(self.since).as_secs_f64().min(dwell.as_secs_f64()),
        )
    }
}

impl Mesh {
    /// The groups in the core site's zones counting towards a carve, by their smallest player
    /// id (as of the last tick).
    pub fn carvings(&self) -> Vec<Carving> {
        let mut v: Vec<Carving> = self.carving.values().map(|(c, _)| *c).collect();
        v.sort_unstable_by_key(|c| c.first);
        v
    }

    /// Why `bubble` is where it is at `now`: each site's cost per counted player and worst
    /// latency for the players in it now, the best site, and where hysteresis stands (gain,
    /// dwell, hold). A tick scores the bubble's whole unit (players about to enter count
    /// there), so the figures can differ from the next tick's by the players crossing in.
    ///
    /// One pass over the players: for every bubble at once, use [`Mesh::explain_all`].
    pub fn explain(&self, bubble: BubbleId, now: Time) -> Option<Explanation> {
        let slot = self.regions.slot(bubble).filter(|&s| self.regions.bubble(s).is_some())?;
        self.explain_slot(slot, self.tally_of_slot(slot), now)
    }

    /// [`Mesh::explain`] for every bubble, in slot order, with one pass over the players (a
    /// status page asks every 2 s, whatever the population).
    pub fn explain_all(&self, now: Time) -> Vec<Explanation> {
        let mut tallies: Vec<Option<Tally>> = (0..self.regions.slots() as u32)
            .map(|s| self.regions.bubble(s).map(|_| Tally::new(self.sites.len())))
            .collect();
        for (&slot, m) in self.player_bubble.iter().zip(&self.members) {
            if let Some(Some(t)) = tallies.get_mut(slot as usize) {
                t.add_one(m.gateway, m.access_ms, m.weight);
            }
        }
        tallies
            .into_iter()
            .enumerate()
            .filter_map(|(slot, t)| self.explain_slot(slot as u32, t?, now))
            .collect()
    }

    fn explain_slot(&self, slot: u32, tally: Tally, now: Time) -> Option<Explanation> {
        let b = self.regions.bubble(slot)?;
        let (bubble, site, seats) = (b.id, b.site, b.seats());
        let hosts = |s: SiteId| s == site || s == self.sites.core() || self.can_host(s, seats);
        let candidates = self
            .sites
            .ids()
            .map(|s| {
                let score = SiteScore::of(&tally, &self.sites, s);
                Candidate {
                    site: s,
                    cost_per_player_ms: match tally.sum_w > 0.0 {
                        true => score.cost / tally.sum_w,
                        false => 0.0,
                    },
                    worst_ms: score.worst_ms,
                    breaks_cap: score.worst_ms > self.th.cap_ms + 1e-6,
                    can_host: hosts(s),
                }
            })
            .collect();
        let current = SiteScore::of(&tally, &self.sites, site);
        let best = best_site(&tally, &self.sites, self.th.cap_ms, Some(site), hosts);
        let standing = b.kind.hysteresis.standing(now, &current, &best, tally.sum_w, &self.th);
        let delegation = self.delegation_of_slot(slot).map(|d| self.delegations[d].site);
        let rule = match (b.stalled_since, self.placement, delegation) {
            (Some(_), _, _) => PlacementRule::FailingOver,
            (None, Placement::Fixed, Some(site)) => PlacementRule::Delegated { site },
            (None, Placement::Smdg, _) => PlacementRule::Scored,
            (None, placement, _) => PlacementRule::Never(placement),
        };
        Some(Explanation {
            bubble,
            site,
            counted: tally.counted,
            weight: tally.sum_w,
            candidates,
            best: best.site,
            standing,
            rule,
        })
    }
}

impl Explanation {
    /// The explanation in one or two plain sentences, as the console and `sim run --explain`
    /// print it.
    pub fn words(&self, sites: &Sites, th: &Thresholds) -> String {
        let name = |s: SiteId| sites.name(s).to_string();
        let (here, best) = (name(self.site), name(self.best));
        let secs = |s: crate::time::Span| format!("{:.0} s", s.as_secs_f64());
        let st = &self.standing;
        match self.rule {
            PlacementRule::FailingOver => {
                return format!(
                    "Its lease on {here} ran out: it fails over to {best} at the next tick."
                );
            }
            PlacementRule::Delegated { site } if site == self.site => {
                return format!(
                    "Delegated to {here} by configuration (the fixed stage): it stays there."
                );
            }
            PlacementRule::Delegated { site } => {
                return format!(
                    "Delegated to {} by configuration; it runs on {here} until {} can host it again.",
                    name(site),
                    name(site)
                );
            }
            PlacementRule::Never(p) => {
                return format!(
                    "Placed on {here} by the {} policy, which never moves a running bubble.",
                    p.as_str()
                );
            }
            PlacementRule::Scored => {}
        }
        if self.counted == 0 {
            return format!("Nobody counted is in it: it stays on {here}.");
        }
        if self.best == self.site {
            let players = if self.counted == 1 { "player" } else { "players" };
            return format!(
                "{here} is the best site for its {} counted {players}: it stays.",
                self.counted
            );
        }
        let why = format!(
            "{best} is better than {here} by {:.1} ms per player{}",
            st.gain_ms,
            if st.fixes_cap { ", and fixes the fairness cap" } else { "" }
        );
        // SMD-G keeps no bubble on the core site: a bubble whose best site it is dissolves
        // into its zones instead of moving there.
        let moves = match self.best == sites.core() {
            true => format!("it dissolves into {best}'s zones"),
            false => "it moves".to_owned(),
        };
        match st.verdict {
            Verdict::Stay => format!(
                "{why}: below the {:.0} ms a move needs, so it stays on {here}.",
                th.gain_ms
            ),
            Verdict::Wait if st.hold_left > crate::time::Span::ZERO => format!(
                "{why}; it moved recently and is held for {} more (dwell {} of {}).",
                secs(st.hold_left),
                secs(st.dwelt),
                secs(crate::time::Span::from_ms(th.dwell_ms))
            ),
            Verdict::Wait => format!(
                "{why}; {moves} once {best} has been best for {} (dwell {} so far).",
                secs(crate::time::Span::from_ms(th.dwell_ms)),
                secs(st.dwelt)
            ),
            Verdict::Move(_) if self.best == sites.core() => {
                format!("{why}: {moves} at the next tick.")
            }
            Verdict::Move(reason) => {
                format!("{why}: it moves to {best} at the next tick ({}).", reason.as_str())
            }
        }
    }
}
