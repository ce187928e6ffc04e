//! Routes between sites over the backbone: which site a message for another site goes to
//! first. The direct link when it is up and not much slower than going round; else the
//! shortest path over measured round trips through live links (a cut between two sites heals
//! through a third). The agents route their transfer traffic with it; the core shows the same
//! table on `/status`.

use std::collections::BTreeMap;

use petgraph::graph::{NodeIndex, UnGraph};

/// A direct link is kept while it is at most this much slower than the best path round it,
/// as a ratio and in milliseconds (`direct ≤ path × ratio + ms`): a relay costs a hop of
/// processing and queueing that a round trip does not show, and routes must not flap on
/// noise.
pub const KEEP_DIRECT_RATIO: f64 = 1.2;
/// See [`KEEP_DIRECT_RATIO`].
pub const KEEP_DIRECT_MS: f64 = 10.0;

/// One backbone link as seen now: its smoothed round trip, or `None` when it is down.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkView {
    pub a: String,
    pub b: String,
    pub rtt_ms: Option<f64>,
}

/// Where a message from `from` to `to` goes first.
#[derive(Clone, Debug, PartialEq)]
pub struct Hop {
    /// The site it is handed to: `to` itself over the direct link, else the relay.
    pub via: String,
    /// The whole path's round trip, milliseconds.
    pub rtt_ms: f64,
}

impl Hop {
    /// Whether this hop goes through a third site.
    pub fn relayed(&self, to: &str) -> bool {
        self.via != to
    }
}

/// For every site reachable from `from` over live links: its first hop. Sites with no live
/// path are left out. A link listed twice keeps its last view; links naming `from` to itself
/// are ignored.
pub fn next_hops(from: &str, links: &[LinkView]) -> BTreeMap<String, Hop> {
    let mut graph: UnGraph<String, f64> = UnGraph::new_undirected();
    let mut nodes: BTreeMap<String, NodeIndex> = BTreeMap::new();
    let mut node = |graph: &mut UnGraph<String, f64>, name: &str| -> NodeIndex {
        *nodes.entry(name.to_owned()).or_insert_with(|| graph.add_node(name.to_owned()))
    };
    let start = node(&mut graph, from);
    let mut direct: BTreeMap<&str, f64> = BTreeMap::new();
    let mut live: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for l in links {
        if l.a == l.b {
            continue;
        }
        let key =
            if l.a < l.b { (l.a.as_str(), l.b.as_str()) } else { (l.b.as_str(), l.a.as_str()) };
        match l.rtt_ms.filter(|r| r.is_finite() && *r >= 0.0) {
            Some(rtt) => live.insert(key, rtt),
            None => live.remove(&key),
        };
    }
    for (&(a, b), &rtt) in &live {
        let (na, nb) = (node(&mut graph, a), node(&mut graph, b));
        graph.add_edge(na, nb, rtt);
        if a == from {
            direct.insert(b, rtt);
        } else if b == from {
            direct.insert(a, rtt);
        }
    }
    let mut hops = BTreeMap::new();
    for target in graph.node_indices().filter(|&n| n != start) {
        let found = petgraph::algo::astar(&graph, start, |n| n == target, |e| *e.weight(), |_| 0.0);
        let Some((rtt_ms, path)) = found else { continue };
        let to = graph[target].as_str();
        let hop = match direct.get(to) {
            Some(&d) if d <= rtt_ms * KEEP_DIRECT_RATIO + KEEP_DIRECT_MS => {
                Hop { via: to.to_owned(), rtt_ms: d }
            }
            _ => Hop { via: graph[path[1]].clone(), rtt_ms },
        };
        hops.insert(to.to_owned(), hop);
    }
    hops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(a: &str, b: &str, rtt_ms: Option<f64>) -> LinkView {
        LinkView { a: a.into(), b: b.into(), rtt_ms }
    }

    fn triangle(par_mtl: Option<f64>) -> Vec<LinkView> {
        vec![
            link("PAR", "MTL", par_mtl),
            link("MTL", "HKG", Some(190.0)),
            link("HKG", "PAR", Some(160.0)),
        ]
    }

    #[test]
    fn live_direct_links_are_used_as_they_are() {
        let hops = next_hops("PAR", &triangle(Some(85.0)));
        assert_eq!(hops["MTL"], Hop { via: "MTL".into(), rtt_ms: 85.0 });
        assert_eq!(hops["HKG"], Hop { via: "HKG".into(), rtt_ms: 160.0 });
        assert!(!hops["MTL"].relayed("MTL"));
    }

    #[test]
    fn a_cut_link_is_routed_round_through_the_third_site() {
        let hops = next_hops("PAR", &triangle(None));
        assert_eq!(hops["MTL"], Hop { via: "HKG".into(), rtt_ms: 350.0 });
        assert!(hops["MTL"].relayed("MTL"));
        let back = next_hops("MTL", &triangle(None));
        assert_eq!(back["PAR"].via, "HKG");
    }

    #[test]
    fn a_direct_link_is_kept_unless_going_round_is_faster_by_the_margin() {
        // Round: 350 ms. Kept up to 350 × 1.2 + 10 = 430 ms.
        assert_eq!(next_hops("PAR", &triangle(Some(430.0)))["MTL"].via, "MTL");
        let slow = next_hops("PAR", &triangle(Some(431.0)));
        assert_eq!(slow["MTL"], Hop { via: "HKG".into(), rtt_ms: 350.0 });
    }

    #[test]
    fn a_site_with_no_live_path_has_no_route() {
        let links = vec![link("PAR", "MTL", None), link("MTL", "HKG", Some(190.0))];
        let hops = next_hops("PAR", &links);
        assert!(hops.is_empty(), "{hops:?}");
        // The last view of a link wins; a link to itself is no link.
        let links = vec![
            link("PAR", "MTL", Some(85.0)),
            link("MTL", "PAR", None),
            link("PAR", "PAR", Some(0.0)),
        ];
        assert!(next_hops("PAR", &links).is_empty());
    }

    #[test]
    fn the_shortest_path_may_take_two_relays() {
        let links = vec![
            link("A", "B", Some(10.0)),
            link("B", "C", Some(10.0)),
            link("C", "D", Some(10.0)),
            link("A", "D", None),
            link("A", "C", Some(100.0)),
        ];
        let hops = next_hops("A", &links);
        assert_eq!(hops["D"], Hop { via: "B".into(), rtt_ms: 30.0 });
        // A–C is up but slower than going round by more than the margin.
        assert_eq!(hops["C"], Hop { via: "B".into(), rtt_ms: 20.0 });
    }
}
