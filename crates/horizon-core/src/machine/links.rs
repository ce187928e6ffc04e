//! The backbone between agents as their reports show it: each agent says, every report, the
//! round trip of each of its transfer links, or that one is down (silent, or not connected).
//! A link is down when either end says so. Every agent is told the whole table
//! (`control::Request::Links`) at registration and whenever a link goes down, comes up or its
//! round trip moves by more than a tenth: it routes its transfer traffic round a cut through a
//! third site. `/status` shows the table and the routes it gives from every site.

use std::collections::BTreeMap;

use horizon_mesh::SiteId;
use horizon_mesh::routes::{LinkView, next_hops};
use horizon_proto::control::{self, LinkState};

use super::CoreMachine;
use crate::status::{LinkStatus, RouteStatus};

/// What each end last said of each link: `(from, to)` → its round trip, `None` when down.
/// (Generic over the site's key for the tests; the core keys by [`SiteId`].)
#[derive(Debug)]
pub(crate) struct Backbone<S = SiteId> {
    said: BTreeMap<(S, S), Option<f32>>,
    /// The table as last sent to the agents.
    sent: Vec<(S, S, Option<f32>)>,
}

impl<S> Default for Backbone<S> {
    fn default() -> Self {
        Backbone { said: BTreeMap::new(), sent: Vec::new() }
    }
}

impl<S: Ord + Copy> Backbone<S> {
    /// What `from` says now: each site it lists, and every other of `others` as down.
    pub(crate) fn said(&mut self, from: S, samples: &[(S, Option<f32>)], others: &[S]) {
        for &to in others.iter().filter(|&&to| to != from) {
            self.said.insert((from, to), None);
        }
        for &(to, rtt) in samples.iter().filter(|(to, _)| *to != from) {
            self.said.insert((from, to), rtt.filter(|r| r.is_finite() && *r >= 0.0));
        }
    }

    /// Every pair either end spoke of: down when either says so, else the larger round trip.
    pub(crate) fn table(&self) -> Vec<(S, S, Option<f32>)> {
        let mut pairs: BTreeMap<(S, S), Option<f32>> = BTreeMap::new();
        for (&(from, to), &rtt) in &self.said {
            let key = (from.min(to), from.max(to));
            let merged = match pairs.get(&key) {
                None => rtt,
                Some(other) => match (*other, rtt) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                },
            };
            pairs.insert(key, merged);
        }
        pairs.into_iter().map(|((a, b), rtt)| (a, b, rtt)).collect()
    }

    /// The table if it changed enough to tell the agents (a link down or up, or a round trip
    /// moved by more than a tenth), remembered as sent.
    pub(crate) fn changed_since_sent(&mut self) -> Option<Vec<(S, S, Option<f32>)>> {
        let now = self.table();
        let same = now.len() == self.sent.len()
            && now.iter().zip(&self.sent).all(|(n, s)| {
                (n.0, n.1) == (s.0, s.1)
                    && match (n.2, s.2) {
                        (None, None) => true,
                        (Some(a), Some(b)) => (a - b).abs() <= 0.1 * b.max(1.0),
                        _ => false,
                    }
            });
        if same {
            return None;
        }
        self.sent = now.clone();
        Some(now)
    }
}

impl CoreMachine {
    fn link_states(&self, table: &[(SiteId, SiteId, Option<f32>)]) -> Vec<LinkState> {
        table
            .iter()
            .map(|&(a, b, rtt_ms)| LinkState { a: self.site_name(a), b: self.site_name(b), rtt_ms })
            .collect()
    }

    /// A report's backbone samples from `site`: the table, sent on to every agent if it
    /// changed.
    pub(super) fn backbone_said(&mut self, site: SiteId, samples: &[control::BackboneSample]) {
        let samples: Vec<(SiteId, Option<f32>)> = samples
            .iter()
            .filter_map(|b| Some((self.cfg.sites.id(b.site.as_str())?, b.rtt_ms)))
            .collect();
        // A site it does not list, registered or not, is down from its end (a dead agent's
        // own last word does not keep its links up).
        let every: Vec<SiteId> = self.cfg.sites.ids().collect();
        self.links.said(site, &samples, &every);
        if let Some(table) = self.links.changed_since_sent() {
            let links = self.link_states(&table);
            let registered: Vec<SiteId> =
                self.agents.sites().filter(|&s| self.agents.registered(s)).collect();
            for to in registered {
                self.order(to, control::Request::Links { links: links.clone() });
            }
        }
    }

    /// The table as it stands, to an agent that just registered.
    pub(super) fn send_links(&mut self, site: SiteId) {
        let links = self.link_states(&self.links.table());
        if !links.is_empty() {
            self.order(site, control::Request::Links { links });
        }
    }

    /// For `/status`: every link, and every route that goes through a third site.
    pub(super) fn links_status(&self) -> (Vec<LinkStatus>, Vec<RouteStatus>) {
        let table = self.links.table();
        let links: Vec<LinkStatus> = table
            .iter()
            .map(|&(a, b, rtt_ms)| LinkStatus {
                a: self.site_name(a).as_str().to_owned(),
                b: self.site_name(b).as_str().to_owned(),
                rtt_ms,
            })
            .collect();
        let views: Vec<LinkView> = links
            .iter()
            .map(|l| LinkView { a: l.a.clone(), b: l.b.clone(), rtt_ms: l.rtt_ms.map(f64::from) })
            .collect();
        let mut routes = Vec::new();
        let mut sites: Vec<&str> =
            links.iter().flat_map(|l| [l.a.as_str(), l.b.as_str()]).collect();
        sites.sort_unstable();
        sites.dedup();
        for from in sites {
            for (to, hop) in next_hops(from, &views) {
                if hop.relayed(&to) {
                    routes.push(RouteStatus { from: from.to_owned(), to, via: hop.via });
                }
            }
        }
        (links, routes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAR: u16 = 0;
    const MTL: u16 = 1;
    const HKG: u16 = 2;

    #[test]
    fn a_link_is_down_when_either_end_says_so_else_at_the_larger_round_trip() {
        let mut b = Backbone::default();
        b.said(PAR, &[(MTL, Some(85.0)), (HKG, Some(160.0))], &[PAR, MTL, HKG]);
        b.said(MTL, &[(PAR, Some(90.0))], &[PAR, MTL, HKG]);
        // MTL did not list HKG: down from its end.
        assert_eq!(
            b.table(),
            vec![(PAR, MTL, Some(90.0)), (PAR, HKG, Some(160.0)), (MTL, HKG, None)]
        );
        b.said(PAR, &[(MTL, None), (HKG, Some(160.0))], &[PAR, MTL, HKG]);
        assert_eq!(b.table()[0], (PAR, MTL, None));
    }

    #[test]
    fn the_agents_are_told_only_of_changes_that_matter() {
        let mut b = Backbone::default();
        b.said(PAR, &[(MTL, Some(85.0))], &[PAR, MTL]);
        assert_eq!(b.changed_since_sent(), Some(vec![(PAR, MTL, Some(85.0))]));
        b.said(PAR, &[(MTL, Some(92.0))], &[PAR, MTL]);
        assert_eq!(b.changed_since_sent(), None, "within a tenth");
        b.said(PAR, &[(MTL, Some(95.0))], &[PAR, MTL]);
        assert!(b.changed_since_sent().is_some(), "beyond a tenth of what was sent");
        b.said(PAR, &[(MTL, None)], &[PAR, MTL]);
        assert_eq!(b.changed_since_sent(), Some(vec![(PAR, MTL, None)]));
        assert_eq!(b.changed_since_sent(), None);
    }
}
