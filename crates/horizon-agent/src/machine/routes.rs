//! Routes to the other sites' agents: the first hop of every transfer item and request. The
//! direct link while it answers probes and is not much slower than going round; else through a
//! third site, the shortest path over the backbone's live links (`horizon_mesh::routes`).
//! This agent judges its own links by its own probes (one silent for [`LINK_SILENT_AFTER`] is
//! down); the other sites' links by the core's last `Links`.
//!
//! Relayed traffic keeps its origin in an envelope (`StateItem::Relay`,
//! `transfer::Request::Relay`), so the receiver handles it as if it came straight from the
//! origin. When a route changes, what may have been lost on the old one is sent again on the
//! new one: the inputs of the players simulated there (the server applies each once) and the
//! crossings towards it (the target takes each once).

use horizon_mesh::routes::{LinkView, next_hops};
use horizon_proto::Relayed;
use horizon_proto::transfer::MAX_HOPS;

use super::*;

impl AgentMachine {
    /// The core's view of the backbone (`control::Request::Links`).
    pub(super) fn adopt_links(&mut self, links: Vec<control::LinkState>, now: Instant) {
        self.core_links = links
            .into_iter()
            .map(|l| LinkView {
                a: l.a.as_str().to_owned(),
                b: l.b.as_str().to_owned(),
                rtt_ms: l.rtt_ms.map(f64::from),
            })
            .collect();
        self.reroute(now);
    }

    /// Recomputes the first hop towards every site; a change sends again what the old route
    /// may have lost.
    pub(super) fn reroute(&mut self, now: Instant) {
        let me = self.cfg.site.as_str();
        let mut links: Vec<LinkView> =
            self.core_links.iter().filter(|l| l.a != me && l.b != me).cloned().collect();
        for (site, peer_rtt_ms) in self.peer_links() {
            // A link not measured yet is taken at the core's figure (or as the fastest).
            let known = || {
                self.core_links
                    .iter()
                    .find(|l| {
                        (l.a == me && l.b == site.as_str()) || (l.b == me && l.a == site.as_str())
                    })
                    .and_then(|l| l.rtt_ms)
            };
            let rtt = peer_rtt_ms.map(f64::from).or_else(known).unwrap_or(0.0);
            let live = self.link_live(&site, now);
            links.push(LinkView {
                a: me.to_owned(),
                b: site.as_str().to_owned(),
                rtt_ms: live.then_some(rtt),
            });
        }
        let hops = next_hops(me, &links);
        let mut routes = BTreeMap::new();
        for (to, hop) in hops {
            if let (Ok(to), Ok(via)) = (Name::new(to), Name::new(hop.via)) {
                routes.insert(to, via);
            }
        }
        if routes == self.routes {
            return;
        }
        // A site reached for the first time, directly, is no change of route.
        let mut changed = Vec::new();
        for site in self.routes.keys().chain(routes.keys()) {
            let (old, new) = (self.routes.get(site), routes.get(site));
            let first = old.is_none() && new == Some(site);
            if old != new && !first && !changed.contains(site) {
                changed.push(site.clone());
            }
        }
        for site in &changed {
            match routes.get(site) {
                Some(via) if via == site => {
                    tracing::info!(site = %self.cfg.site, to = %site, "route: direct again")
                }
                Some(via) => {
                    tracing::warn!(site = %self.cfg.site, to = %site, %via, "route: through a third site")
                }
                None => {
                    tracing::warn!(site = %self.cfg.site, to = %site, "route: none, every path is down")
                }
            }
        }
        self.stats.route_changes.fetch_add(changed.len() as u64, Ordering::Relaxed);
        let relayed = routes.iter().filter(|(to, via)| to != via).count();
        self.stats.routes_relayed.store(relayed as u64, Ordering::Relaxed);
        self.routes = routes;
        changed.retain(|s| self.routes.contains_key(s));
        for site in &changed {
            self.send_again_towards(site, now);
        }
    }

    /// After a route change towards `site`: its players' inputs and the crossings to it go
    /// again, over the new route.
    fn send_again_towards(&mut self, site: &Name, now: Instant) {
        self.resend_towards(site, now);
        for player in self.transit.again_towards(site, now) {
            self.send_crossing(player, now);
        }
    }

    /// The round trip between sites `a` and `b` as the core last said (`Links`), if measured.
    pub(super) fn backbone_rtt_ms(&self, a: &str, b: &str) -> Option<f64> {
        self.core_links
            .iter()
            .find(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a))
            .and_then(|l| l.rtt_ms)
    }

    /// The third site a transfer to `site` goes round through now, if it does not go direct.
    pub(super) fn relay_towards(&self, site: &Name) -> Option<Name> {
        self.routes.get(site).filter(|via| *via != site).cloned()
    }

    /// Whether anything sent to `site` has a way there now.
    pub(super) fn reaches(&self, site: &Name) -> bool {
        self.routes.contains_key(site) || self.linked(site)
    }

    /// The first hop towards `site`: the route, or the direct link while no route is known
    /// (it may come back before the probes say so).
    fn first_hop(&self, site: &Name) -> Option<Name> {
        match self.routes.get(site) {
            Some(via) => Some(via.clone()),
            None => self.linked(site).then(|| site.clone()),
        }
    }

    /// An item of the transfer stream to `site`, over its route.
    pub(super) fn stream_to(&mut self, site: &Name, item: StateItem) {
        let Some(via) = self.first_hop(site) else { return };
        let item = if &via == site {
            item
        } else {
            self.stats.relayed_sent.fetch_add(1, Ordering::Relaxed);
            let from = self.cfg.site.clone();
            StateItem::Relay(Box::new(Relayed { from, to: site.clone(), hops: 1, item }))
        };
        self.effects.push_back(Effect::PeerStream { site: via, item });
    }

    /// A transfer request to `site`, over its route; the answer comes back as
    /// [`Input::PeerReplied`] from the first hop.
    pub(super) fn ask_peer(&mut self, site: &Name, pending: Pending, request: transfer::Request) {
        let Some(via) = self.first_hop(site) else { return };
        let request = if &via == site {
            request
        } else {
            self.stats.relayed_sent.fetch_add(1, Ordering::Relaxed);
            let (from, to) = (self.cfg.site.clone(), site.clone());
            transfer::Request::Relay { from, to, hops: 1, request: Box::new(request) }
        };
        self.effects.push_back(Effect::ToPeer { site: via, pending, request });
    }

    /// A relayed item from `site`: handled here if it is for this site, else passed on.
    pub(super) fn relayed_item(&mut self, site: &Name, relayed: Relayed, now: Instant) {
        let Relayed { from, to, hops, item } = relayed;
        if matches!(item, StateItem::Relay(_)) {
            tracing::warn!(peer = %site, "a relayed item inside a relayed item: dropped");
            self.stats.relayed_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if to == self.cfg.site {
            return self.peer_item(&from, item, now);
        }
        let via = self.routes.get(&to).cloned();
        match via.filter(|v| hops < MAX_HOPS && *v != from && v != site) {
            Some(via) => {
                self.stats.relayed_through.fetch_add(1, Ordering::Relaxed);
                let item = StateItem::Relay(Box::new(Relayed { from, to, hops: hops + 1, item }));
                self.effects.push_back(Effect::PeerStream { site: via, item });
            }
            None => {
                tracing::debug!(site = %self.cfg.site, %from, %to, hops, "a relayed item with no way on: dropped");
                self.stats.relayed_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A relayed request from `site`: answered here if it is for this site, else passed on
    /// (its answer goes back as the next hop's).
    pub(super) fn relayed_request(
        &mut self,
        site: &Name,
        token: Token,
        relay: transfer::Request,
        now: Instant,
    ) {
        let transfer::Request::Relay { from, to, hops, request } = relay else {
            let result = self.peer_request(&relay, now);
            return self.effects.push_back(Effect::AnswerPeer { token, result });
        };
        let refuse = |why: &str| Err(Fault::new(ErrorCode::NotReady, why));
        if matches!(*request, transfer::Request::Relay { .. }) {
            self.stats.relayed_dropped.fetch_add(1, Ordering::Relaxed);
            let result =
                Err(Fault::new(ErrorCode::Malformed, "a relayed request inside a relayed request"));
            return self.effects.push_back(Effect::AnswerPeer { token, result });
        }
        if to == self.cfg.site {
            let result = self.peer_request(&request, now);
            return self.effects.push_back(Effect::AnswerPeer { token, result });
        }
        let via = self.routes.get(&to).cloned();
        match via.filter(|v| hops < MAX_HOPS && *v != from && v != site) {
            Some(via) => {
                self.stats.relayed_through.fetch_add(1, Ordering::Relaxed);
                let request = transfer::Request::Relay { from, to, hops: hops + 1, request };
                let pending = Pending(Then::Relayed { token });
                self.effects.push_back(Effect::ToPeer { site: via, pending, request });
            }
            None => {
                self.stats.relayed_dropped.fetch_add(1, Ordering::Relaxed);
                let why = format!("{} has no way on to {to}", self.cfg.site);
                self.effects.push_back(Effect::AnswerPeer { token, result: refuse(&why) });
            }
        }
    }

    /// The next hop answered a request this agent passed on: the answer goes back.
    pub(super) fn relayed_answer(
        &mut self,
        token: Token,
        result: Result<transfer::Reply, Failure>,
    ) {
        let result = result.map_err(|f| match f {
            Failure::Refused(fault) => fault,
            other => Fault::new(other.code(), other.to_string()),
        });
        self.effects.push_back(Effect::AnswerPeer { token, result });
    }
}
