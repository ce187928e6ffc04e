//! The reconciliation that brings the agents in line with the brain after every change:
//! member lists, departures, routes, parts. Where each region really runs is the registry's
//! (`registry.rs`); where each player's membership was last sent (`placed`) and who crossed
//! each region's border (`trails`) are kept here.

use std::collections::{BTreeMap, BTreeSet};

use horizon_mesh::SiteId;
use horizon_mesh::bubble::part_around;
use horizon_proto::{Aabb, BubbleId, PlayerId, Vec3};
use horizon_proto::{Failure, control};

use super::CoreMachine;
use super::registry::{Hosted, Phase, Registry};

/// Departures remembered per bubble, and bubbles remembered (see `remembered_departures`).
const MAX_DEPARTED: usize = 1024;
const MAX_REMEMBERED_BUBBLES: usize = 4096;

/// Players who left a bubble, and the site that held it then.
#[derive(Clone, Debug)]
pub(crate) struct Departed {
    pub(crate) site: SiteId,
    pub(crate) players: BTreeSet<PlayerId>,
}

/// Who crossed a region's border, remembered after the region ends (its last holder, or a
/// copy of it, may still hold their states). At most [`MAX_REMEMBERED_BUBBLES`] regions, the
/// oldest forgotten first, and [`MAX_DEPARTED`] players each way.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trail {
    /// Who left it (see [`CoreMachine::remembered_departures`]).
    pub(crate) departed: Option<Departed>,
    /// Who crossed into it, from which region and the site that held that one when they left
    /// (see [`CoreMachine::redirect_arrivals`]).
    pub(crate) arrived: BTreeMap<PlayerId, Arrival>,
    /// Taken back from the store by a restarted core: who crossed into it before is not known
    /// (trails are not stored), so a player placed in it with no arrival here may have.
    pub(crate) arrivals_unknown: bool,
    /// Taken back, then run anew by this core from a copy or a snapshot (restored, handed
    /// over): players the agents' resyncs place in it afterwards may be missing from it too.
    pub(crate) rebuilt: bool,
}

/// The trail of `bubble`, made when missing: the oldest region's is forgotten first when
/// [`MAX_REMEMBERED_BUBBLES`] are kept.
fn trail_of(trails: &mut BTreeMap<BubbleId, Trail>, bubble: BubbleId) -> &mut Trail {
    if !trails.contains_key(&bubble)
        && trails.len() >= MAX_REMEMBERED_BUBBLES
        && let Some(&oldest) = trails.keys().next()
    {
        trails.remove(&oldest);
    }
    trails.entry(bubble).or_default()
}

/// Where a player's state came from into a bubble: the bubble it left, and the site that held
/// that bubble then. The site is kept, not looked up later: the bubble it left may have moved
/// since (a handover), while the crossing stays at the site that sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Arrival {
    pub(crate) from: BubbleId,
    pub(crate) site: SiteId,
}

/// How far back the sites a player's state came through are told where it plays now.
const MAX_CROSSING_HOPS: usize = 4;

impl CoreMachine {
    /// The bubble `player`'s membership was last sent to, if any.
    pub(crate) fn placed_in(&self, player: PlayerId) -> Option<BubbleId> {
        self.placed.get(&player).copied()
    }

    /// `player` plays in `bubble`, as its holder knows (an agent's resync said so).
    pub(crate) fn place(&mut self, player: PlayerId, bubble: BubbleId) {
        self.placed.insert(player, bubble);
    }

    /// The last departures remembered from `bubble` left it while `site` held it.
    pub(crate) fn departures_remembered_for(&self, bubble: BubbleId, site: SiteId) -> bool {
        self.trails.get(&bubble).and_then(|t| t.departed.as_ref()).is_some_and(|d| d.site == site)
    }

    /// The players who crossed into `bubble` and are still placed there, each with the bubble
    /// they came from.
    pub(crate) fn arrivals_still_in(&self, bubble: BubbleId) -> Vec<(PlayerId, BubbleId)> {
        let Some(trail) = self.trails.get(&bubble) else { return Vec::new() };
        trail
            .arrived
            .iter()
            .filter(|(p, _)| self.placed.get(p) == Some(&bubble))
            .map(|(&p, a)| (p, a.from))
            .collect()
    }

    /// Brings every bubble's member list and every player's route in line with the brain.
    /// Players whose old or new bubble is in a handover or a restore wait for it to finish.
    pub(crate) fn reconcile(&mut self) {
        let mut touched: BTreeSet<BubbleId> = BTreeSet::new();
        let mut departures: BTreeMap<BubbleId, Vec<(PlayerId, BubbleId)>> = BTreeMap::new();
        let mut crossing: BTreeSet<PlayerId> = BTreeSet::new();
        let mut routes: Vec<PlayerId> = Vec::new();
        let mut unfinished: Vec<(PlayerId, BubbleId, BubbleId)> = Vec::new();
        let mut present: BTreeSet<PlayerId> = BTreeSet::new();
        let unsettled = |r: &Registry, b: Option<BubbleId>| {
            b.and_then(|b| r.get(&b)).is_some_and(|r| !r.settled())
        };
        for p in self.mesh.players() {
            let player = PlayerId(p.id.0);
            present.insert(player);
            let have = self.placed.get(&player).copied();
            let want = self.mesh.region_of(p.id, have).filter(|b| self.registry.contains(b));
            let creating = have.is_some()
                && want
                    .and_then(|w| self.registry.get(&w))
                    .is_some_and(|r| r.phase() == Phase::Creating);
            if want == have
                || creating
                || unsettled(&self.registry, want)
                || unsettled(&self.registry, have)
            {
                continue;
            }
            let left =
                have.and_then(|h| self.registry.get_mut(&h).map(|r| (h, r))).map(|(h, r)| {
                    r.left(player);
                    (h, r.site())
                });
            if let Some((h, site)) = left {
                touched.insert(h);
                if let Some(w) = want {
                    unfinished.push((player, h, w));
                    departures.entry(h).or_default().push((player, w));
                    remember_departure(&mut self.trails, h, site, player);
                    let arrived = &mut trail_of(&mut self.trails, w).arrived;
                    if arrived.len() < MAX_DEPARTED || arrived.contains_key(&player) {
                        arrived.insert(player, Arrival { from: h, site });
                    }
                }
            }
            match want {
                Some(w) => {
                    if let Some(r) = self.registry.get_mut(&w) {
                        r.joined(player, p.gateway);
                    }
                    if let Some(d) = self.trails.get_mut(&w).and_then(|t| t.departed.as_mut()) {
                        d.players.remove(&player);
                    }
                    touched.insert(w);
                    if have.is_some_and(|h| self.registry.contains(&h)) {
                        crossing.insert(player);
                    }
                    self.placed.insert(player, w);
                    routes.push(player);
                }
                None => {
                    self.placed.remove(&player);
                }
            }
        }
        let gone: Vec<PlayerId> =
            self.placed.keys().filter(|p| !present.contains(p)).copied().collect();
        for player in gone {
            if let Some(b) = self.placed.remove(&player)
                && let Some(r) = self.registry.get_mut(&b)
            {
                r.left(player);
                touched.insert(b);
            }
            for t in self.trails.values_mut() {
                if let Some(d) = &mut t.departed {
                    d.players.remove(&player);
                }
                t.arrived.remove(&player);
            }
            if let Some(super::keep::Pin::Release(at)) = self.keep.forget(player) {
                self.effects.push_back(super::Effect::UnpinBackup { at });
            }
        }
        // The bubbles players enter hear of them before the bubbles they leave. A site serves
        // its orders one at a time, in order: on a site holding both, the player's state then
        // crosses to a bubble that expects them and they play on within a tick or two, instead
        // of waiting, unseen, for the next order.
        let (leaving, entering): (Vec<BubbleId>, Vec<BubbleId>) =
            touched.into_iter().partition(|b| departures.contains_key(b));
        for bubble in entering.into_iter().chain(leaving) {
            let Some(reg) = self.registry.get(&bubble) else { continue };
            let players = self.member_list(reg, &crossing);
            let departed = departures
                .remove(&bubble)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(player, to)| {
                    let r = self.registry.get(&to)?;
                    Some(control::Departure {
                        player,
                        to: r.lease_ref(to),
                        site: self.site_name(r.site()),
                    })
                })
                .collect();
            let (lease, site) = (reg.lease_ref(bubble), reg.site());
            self.order(site, control::Request::Members { lease, players, departed });
        }
        self.send_routes(routes);
        for (player, left, to) in unfinished {
            self.follow_unfinished_crossing(player, left, to);
        }
        self.reconcile_parts();
        self.carve_zones();
    }

    /// `player` left `left` for `to`, maybe before its state ever reached `left` (its holder
    /// cut from the core, or gone): the sites its state came from on the way into `left` are
    /// told where it plays now (a `Route`), so a crossing still on its way from one of them
    /// follows it instead of waiting for a bubble that will never take it. A site with no
    /// such crossing ignores the route.
    fn follow_unfinished_crossing(&mut self, player: PlayerId, left: BubbleId, to: BubbleId) {
        let Some(reg) = self.registry.get(&to) else { return };
        let route = control::PlayerRoute { player, bubble: to, site: self.site_name(reg.site()) };
        for site in self.sources_of(player, left) {
            self.order(site, control::Request::Route { routes: vec![route.clone()] });
        }
    }

    /// Tells each holder how the brain spreads its bubbles over servers (design.md §4, within
    /// a site) and which part holds each member, whenever that changed. Bubbles in a handover
    /// or a restore wait for it.
    fn reconcile_parts(&mut self) {
        let mut orders = Vec::new();
        for (&bubble, reg) in self.registry.iter_mut() {
            if !reg.settled() {
                continue;
            }
            let Some(b) = self.mesh.bubble_by_id(bubble) else {
                continue;
            };
            if b.servers() <= 1 && reg.parts().is_empty() {
                continue;
            }
            let parts = b.parts();
            // A member stays in its part until the exit margin past its edge (SMD's rule: one
            // standing on a median cut does not cross with every step), while that part's box
            // stands.
            let part_of: BTreeMap<PlayerId, u32> = reg
                .members()
                .keys()
                .filter_map(|&p| {
                    let at = self.mesh.player(p)?.position;
                    let current = reg.part_of().get(&p).map(|&c| c as usize);
                    let current = current.filter(|&c| reg.parts().get(c) == parts.get(c));
                    Some((p, part_around(&parts, &b.kind.cuts, at, current) as u32))
                })
                .collect();
            let boxes: Vec<Aabb> = parts.clone();
            if boxes == reg.parts() && &part_of == reg.part_of() {
                continue;
            }
            let players = part_of
                .iter()
                .map(|(&player, &part)| control::PartMember { player, part })
                .collect();
            let lease = reg.lease_ref(bubble);
            orders.push((
                reg.site(),
                (bubble, lease.epoch.0),
                control::Request::Parts { lease, parts: boxes.clone(), players },
            ));
            reg.spread(boxes, part_of);
        }
        for (site, (bubble, epoch), order) in orders {
            let order = self.order(site, order);
            self.track(order, super::Awaiting::Parts(bubble, epoch));
        }
    }

    /// The holder could not spread `bubble` as told (no server free in time, say): the spread
    /// is forgotten, so the next tick's reconciliation sends it again (at most one `Parts` a
    /// tick), instead of the core believing servers hold parts that no server holds.
    pub(super) fn parts_failed(&mut self, bubble: BubbleId, epoch: u64, why: &Failure) {
        let Some(reg) = self.registry.get_mut(&bubble).filter(|r| r.epoch() == epoch) else {
            return;
        };
        tracing::warn!(bubble = bubble.0, %why, "spread over servers not made: sent again at the next tick");
        reg.spread(Vec::new(), BTreeMap::new());
    }

    pub(crate) fn member_list(
        &self,
        reg: &Hosted,
        crossing: &BTreeSet<PlayerId>,
    ) -> Vec<control::Member> {
        reg.members()
            .iter()
            .map(|(&player, &home)| control::Member {
                player,
                home: self.site_name(home),
                pos: self.mesh.player(player).map_or(Vec3::default(), |p| p.position),
                crossing: crossing.contains(&player),
            })
            .collect()
    }

    /// Sends `bubble`'s holder its whole member list (nobody marked as crossing) with every
    /// departure remembered: those who left while the holder could not hear, or after the copy
    /// it was restored from, whose state still crosses on.
    pub(crate) fn send_full_members(&mut self, bubble: BubbleId) {
        let Some(reg) = self.registry.get(&bubble) else { return };
        let players = self.member_list(reg, &BTreeSet::new());
        let (lease, holder) = (reg.lease_ref(bubble), reg.site());
        let departed = self.remembered_departures(bubble);
        self.order(holder, control::Request::Members { lease, players, departed });
    }

    /// The players who left `bubble` (and are in the game), each to where it plays now. Told
    /// again to a holder at its registration and to a bubble restored from a copy: a holder
    /// that missed the order (cut from the core), or a copy made before they left, still holds
    /// their state, which crosses on (the target keeps the state with more applied inputs).
    pub(crate) fn remembered_departures(&self, bubble: BubbleId) -> Vec<control::Departure> {
        let Some(d) = self.trails.get(&bubble).and_then(|t| t.departed.as_ref()) else {
            return Vec::new();
        };
        d.players
            .iter()
            .filter_map(|&player| {
                let to = *self.placed.get(&player).filter(|b| **b != bubble)?;
                let r = self.registry.get(&to)?;
                Some(control::Departure {
                    player,
                    to: r.lease_ref(to),
                    site: self.site_name(r.site()),
                })
            })
            .collect()
    }

    /// `bubble` was taken back from the store at this core's start: who crossed into it under
    /// an earlier core is not known (see [`Trail::arrivals_unknown`]).
    pub(crate) fn arrivals_unknown(&mut self, bubble: BubbleId) {
        trail_of(&mut self.trails, bubble).arrivals_unknown = true;
    }

    /// A bubble restored from a copy may lack players that crossed into it after the copy: the
    /// sites their states came through on the way in (up to [`MAX_CROSSING_HOPS`] back: the
    /// last one may have died with its copy-less bubbles) are told where it runs now
    /// (`Recover`), so a crossing still on its way from one of them, or one delivered and kept
    /// there, comes to it. So too for those who crossed in and left it since (their departure
    /// remembered): if the server that died still held their only state (they left while its
    /// holder was away, or as it died), what was kept goes to where they play now; the server
    /// there keeps, of two states of a player, the one that applied more inputs. In a bubble
    /// taken back at this core's start, a player placed there with no arrival known may have
    /// crossed in under the earlier core: every site is asked (one that kept nothing for them
    /// does nothing).
    pub(crate) fn redirect_arrivals(&mut self, bubble: BubbleId) {
        self.redirect_unknown_arrivals(bubble);
        let Some(trail) = self.trails.get(&bubble) else { return };
        let left_meanwhile =
            |p: &PlayerId| trail.departed.as_ref().is_some_and(|d| d.players.contains(p));
        let mut routes: Vec<(PlayerId, control::PlayerRoute)> = Vec::new();
        for player in trail.arrived.keys().copied() {
            let Some(&now_in) = self.placed.get(&player) else { continue };
            if now_in != bubble && !left_meanwhile(&player) {
                continue;
            }
            let Some(site) = self.registry.get(&now_in).map(|r| r.site()) else { continue };
            let route = control::PlayerRoute { player, bubble: now_in, site: self.site_name(site) };
            routes.push((player, route));
        }
        let mut per_site: BTreeMap<SiteId, Vec<control::PlayerRoute>> = BTreeMap::new();
        for (player, route) in routes {
            for site in self.sources_of(player, bubble) {
                per_site.entry(site).or_default().push(route.clone());
            }
        }
        for (site, routes) in per_site {
            self.order(site, control::Request::Recover { routes });
        }
    }

    /// See [`CoreMachine::redirect_arrivals`]: the players of a bubble taken back at this
    /// core's start whose way in is not known, from every site.
    fn redirect_unknown_arrivals(&mut self, bubble: BubbleId) {
        let Some(trail) = self.trails.get_mut(&bubble).filter(|t| t.arrivals_unknown) else {
            return;
        };
        trail.rebuilt = true;
        let players: Vec<PlayerId> = self
            .placed
            .iter()
            .filter(|&(p, &b)| b == bubble && !trail.arrived.contains_key(p))
            .map(|(&p, _)| p)
            .collect();
        self.recover_from_every_site(bubble, players);
    }

    /// `players` were just placed in `bubble` by their home agent's resync. If this core took
    /// the bubble back at its start and has run it anew from a copy since, that copy may lack
    /// them (they crossed in under the earlier core, after it was made): every site is asked
    /// for what it kept of them, as at the restore (see [`CoreMachine::redirect_arrivals`]).
    pub(crate) fn placed_by_resync(&mut self, bubble: BubbleId, players: &[PlayerId]) {
        let Some(trail) = self.trails.get(&bubble).filter(|t| t.arrivals_unknown && t.rebuilt)
        else {
            return;
        };
        let players = players.iter().filter(|p| !trail.arrived.contains_key(p)).copied().collect();
        self.recover_from_every_site(bubble, players);
    }

    /// Every site with an agent is told that `players` play in `bubble` (`Recover`): one that
    /// kept a crossing of theirs sends it there; the others have nothing to do.
    fn recover_from_every_site(&mut self, bubble: BubbleId, players: Vec<PlayerId>) {
        let Some(site) = self.registry.get(&bubble).map(|r| r.site()) else { return };
        if players.is_empty() {
            return;
        }
        let site = self.site_name(site);
        let routes: Vec<control::PlayerRoute> = players
            .into_iter()
            .map(|player| control::PlayerRoute { player, bubble, site: site.clone() })
            .collect();
        let sites: Vec<SiteId> =
            self.cfg.sites.ids().filter(|&s| self.agents.get(s).is_some()).collect();
        for s in sites {
            self.order(s, control::Request::Recover { routes: routes.clone() });
        }
    }

    /// The sites `player`'s state came through on its way into `bubble`, the last first (at
    /// most [`MAX_CROSSING_HOPS`]).
    fn sources_of(&self, player: PlayerId, bubble: BubbleId) -> Vec<SiteId> {
        let (mut at, mut sites) = (bubble, Vec::new());
        for _ in 0..MAX_CROSSING_HOPS {
            let arrival = self.trails.get(&at).and_then(|t| t.arrived.get(&player));
            let Some(&Arrival { from, site }) = arrival else {
                break;
            };
            if !sites.contains(&site) {
                sites.push(site);
            }
            if from == bubble {
                break;
            }
            at = from;
        }
        sites
    }

    /// The players who entered at `site`'s gateway, as this core knows them, for an agent
    /// that starts afresh to keep until their clients resume them: where each is simulated,
    /// and how far a stored copy holds their inputs.
    pub(super) fn homed(&self, site: SiteId) -> Vec<control::HomedPlayer> {
        let players = self.mesh.players().iter().filter(|p| p.gateway == site);
        let mut homed: Vec<control::HomedPlayer> = players
            .take(control::MAX_HOMED)
            .map(|p| {
                let route = self.placed.get(&p.id).and_then(|b| {
                    let r = self.registry.get(b)?;
                    Some((*b, self.site_name(r.site())))
                });
                control::HomedPlayer {
                    sample: control::PlayerSample {
                        player: p.id,
                        access_rtt_ms: p.access_rtt_min_ms as f32,
                        role: p.role,
                        world: p.world,
                        pos: p.position,
                        vel: p.velocity,
                    },
                    route,
                    covered: self.keep.covered_seq(p.id),
                }
            })
            .collect();
        homed.sort_by_key(|h| h.sample.player);
        homed
    }

    /// Tells the agents whose gateways serve players where their players are simulated now.
    pub(crate) fn send_routes(&mut self, players: Vec<PlayerId>) {
        let mut per_gateway: BTreeMap<SiteId, Vec<control::PlayerRoute>> = BTreeMap::new();
        for player in players {
            let Some(&bubble) = self.placed.get(&player) else { continue };
            let Some(reg) = self.registry.get(&bubble) else { continue };
            let Some(&gateway) = reg.members().get(&player) else { continue };
            per_gateway.entry(gateway).or_default().push(control::PlayerRoute {
                player,
                bubble,
                site: self.site_name(reg.site()),
            });
        }
        for (gateway, routes) in per_gateway {
            self.order(gateway, control::Request::Route { routes });
        }
    }

    /// After an agent (re-)registered: the member lists of the bubbles it runs (with the
    /// departures it may have missed) and the routes of its players. A bubble with no member
    /// known and no departure is left alone: after a core restart its members are not known
    /// until the agents' `Players` (and the agent does not trust a list dropping players
    /// without a departure for a while after it registered).
    pub(crate) fn resync(&mut self, site: SiteId) {
        // Its zones' servers may be new: their holes are told again.
        for (_, reg) in self.registry.iter_mut().filter(|(_, r)| r.site() == site) {
            reg.forget_holes();
        }
        let bubbles: Vec<BubbleId> = self
            .registry
            .iter()
            .filter(|(b, r)| {
                r.site() == site
                    && r.settled()
                    && (!r.members().is_empty()
                        || self.trails.get(b).is_some_and(|t| t.departed.is_some()))
            })
            .map(|(&b, _)| b)
            .collect();
        for bubble in bubbles {
            self.send_full_members(bubble);
        }
        let homed: Vec<PlayerId> = self
            .placed
            .iter()
            .filter(|(p, b)| {
                self.registry.get(b).is_some_and(|r| r.members().get(p) == Some(&site))
            })
            .map(|(&p, _)| p)
            .collect();
        self.send_routes(homed);
        self.carve_zones();
    }
}

/// A player as the brain takes them in, from the sample of the agent whose gateway they
/// entered at.
pub(crate) fn player_join(gateway: SiteId, j: &control::PlayerSample) -> horizon_mesh::PlayerJoin {
    horizon_mesh::PlayerJoin {
        id: j.player,
        gateway,
        access_rtt_ms: f64::from(j.access_rtt_ms),
        role: j.role,
        world: j.world,
        position: j.pos,
        velocity: j.vel,
    }
}

/// Remembers that `player` left `bubble` (held at `site`), for a holder that may not have
/// heard: see [`CoreMachine::remembered_departures`]. Bounded per bubble and in bubbles.
fn remember_departure(
    trails: &mut BTreeMap<BubbleId, Trail>,
    bubble: BubbleId,
    site: SiteId,
    player: PlayerId,
) {
    let trail = trail_of(trails, bubble);
    let d = trail.departed.get_or_insert_with(|| Departed { site, players: BTreeSet::new() });
    d.site = site;
    if d.players.len() < MAX_DEPARTED {
        d.players.insert(player);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every region anyone crossed into used to keep an entry for good (the arrivals' map had
    /// no bound in regions): a core running for weeks grew without end.
    #[test]
    fn trails_keep_the_newest_regions_and_forget_the_oldest_first() {
        let site = crate::machine::tests::sites().id("PAR").expect("PAR");
        let mut trails = BTreeMap::new();
        let extra = 10;
        for b in 0..(MAX_REMEMBERED_BUBBLES as u64 + extra) {
            let arrival = Arrival { from: BubbleId(0), site };
            trail_of(&mut trails, BubbleId(b)).arrived.insert(PlayerId(1), arrival);
            remember_departure(&mut trails, BubbleId(b), site, PlayerId(2));
        }
        assert_eq!(trails.len(), MAX_REMEMBERED_BUBBLES);
        assert!(!trails.contains_key(&BubbleId(extra - 1)));
        let newest = &trails[&BubbleId(MAX_REMEMBERED_BUBBLES as u64 + extra - 1)];
        assert_eq!(newest.arrived.len(), 1);
        assert!(newest.departed.as_ref().is_some_and(|d| d.players.contains(&PlayerId(2))));
    }
}
