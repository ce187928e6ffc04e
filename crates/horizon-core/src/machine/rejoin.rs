//! A core's sites coming back: what a restarted core takes back from its store (design.md
//! §6), and an agent's registration, which keeps, stops or hands over what it holds.

use horizon_mesh::{SiteId, Time};
use horizon_proto::control;
use horizon_proto::{BubbleId, Epoch, LeaseRef};

use super::CoreMachine;
use super::registry::Hosted;
use crate::stats::FailoverReason;
use crate::store::{Record, StoreState};

impl CoreMachine {
    /// This core's generation: the high half of every epoch it grants.
    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    /// Leases granted (kept at registrations and renewed) since this core began to lead.
    pub(crate) fn leases_granted(&self) -> u64 {
        self.leases_granted
    }

    /// `n` more leases were granted.
    pub(crate) fn granted(&mut self, n: usize) {
        self.leases_granted += n as u64;
    }

    /// After a restart: every bubble the store says was granted is taken back, under its id
    /// and epoch, on the site that held it (design.md §6: a relay within its lease keeps
    /// playing). Its holder re-registers holding it and its players' agents say who plays in
    /// it; a holder that does not come back lets the lease run out and the bubble fails over
    /// from its copy. A lease recorded without its region (an older build) cannot be taken
    /// back: the bubble is ended.
    pub(super) fn take_back(&mut self, store: &StoreState, now: Time) {
        for (&id, stored) in &store.leases {
            let bubble = BubbleId(id);
            // A handover's freeze was sent and its outcome not stored: its target is taken as
            // the holder, and its source kept as the fallback until it registers.
            let pending = store.handovers.get(&id).filter(|h| h.epoch > stored.epoch);
            let target = pending.and_then(|h| self.cfg.sites.id(&h.site));
            let fallback = match (target, self.cfg.sites.id(&stored.site)) {
                (Some(_), Some(source)) => Some((source, stored.epoch)),
                _ => None,
            };
            let lease = match (pending, fallback) {
                (Some(h), Some(_)) => {
                    &crate::store::StoredLease { region: stored.region, ..h.clone() }
                }
                _ => stored,
            };
            let site = self.cfg.sites.id(&lease.site);
            let (Some(site), Some(region)) = (site, lease.region) else {
                tracing::warn!(bubble = id, site = %lease.site, "stored lease cannot be taken back: ended");
                self.persist(Record::Gone { bubble: id });
                continue;
            };
            let v = |p: [f64; 3]| horizon_proto::Vec3 { x: p[0], y: p[1], z: p[2] };
            let bounds = horizon_proto::Aabb { min: v(region.min), max: v(region.max) };
            // Zones come back as zones (the layout persists), bubbles as bubbles.
            let kind = match bubble.is_zone() {
                true => horizon_mesh::RegionKind::Zone,
                false => horizon_mesh::RegionKind::Bubble,
            };
            let restored = horizon_mesh::RestoredRegion {
                id: horizon_mesh::BubbleId(id),
                kind,
                site,
                world: horizon_mesh::WorldId(region.world),
                bounds,
                epoch: horizon_mesh::Epoch(lease.epoch),
            };
            match self.mesh.handle_restore(restored, now) {
                Ok(()) => {
                    let ttl = horizon_mesh::Span::from_ms(self.cfg.thresholds.lease_ttl_ms);
                    let hosted = Hosted::new(site, lease.epoch, region.world, bounds, now)
                        .taken_back(fallback, now + ttl);
                    if let Some((source, epoch)) = fallback {
                        tracing::warn!(bubble = id, source = %self.cfg.sites.name(source), source_epoch = epoch, target = %lease.site, epoch = lease.epoch, "taken back in the middle of a handover's freeze: the target holds it unless its source never froze");
                    }
                    self.registry.insert(bubble, hosted);
                    self.arrivals_unknown(bubble);
                    // Active again for a full lease from now (its holder may still run it).
                    self.leased_until(bubble, now);
                }
                Err(e) => {
                    tracing::warn!(bubble = id, error = %e, "stored lease not taken back: ended");
                    self.persist(Record::Gone { bubble: id });
                }
            }
        }
        if !self.registry.is_empty() {
            tracing::info!(
                bubbles = self.registry.len(),
                generation = self.generation,
                "bubbles taken back from the store"
            );
        }
        // The store keeps each zone's box: the cuts between them are rebuilt, so that zones
        // split before the restart merge again after it.
        let trees = self.mesh.regroup_restored_zones(&self.cfg.zones);
        if trees > 0 {
            tracing::info!(trees, zones = self.mesh.zones().count(), "zone layout taken back");
        }
    }

    pub(super) fn register(
        &mut self,
        site: SiteId,
        transfer_addr: String,
        servers: Vec<control::ServerLoad>,
        held: &[control::Held],
        now: Time,
    ) -> control::Reply {
        self.mesh.handle_site_link(site, true);
        let text = format!(
            "{}'s agent registered with {} game server{} and {} lease{} held.",
            self.cfg.sites.name(site),
            servers.len(),
            if servers.len() == 1 { "" } else { "s" },
            held.len(),
            if held.len() == 1 { "" } else { "s" }
        );
        self.note(now, crate::status::EventKind::Site, None, text);
        let mut keep = Vec::new();
        let mut stop = Vec::new();
        let mut hand_over = Vec::new();
        // A handover's source that never froze before the core restarted: it holds the
        // bubble still, and the target never ran it. The bubble goes back to it (kept, then
        // re-granted under a new epoch that fences the target's off).
        let mut taken_back = Vec::new();
        for h in held {
            if let Some(r) = self.registry.get_mut(&h.lease.bubble)
                && r.fallback() == Some((site, h.lease.epoch.0))
            {
                taken_back.push((h.lease.bubble, r.epoch()));
                r.held_at(site, h.lease.epoch.0);
            }
        }
        let regranted_now: Vec<BubbleId> = taken_back.iter().map(|(b, _)| *b).collect();
        // The other end of such a handover registered: a target holding it is its holder; a
        // source without it never writes it again (a target registered without it too: the
        // bubble fails over now).
        let mut failed_over = Vec::new();
        let mut confirmed = Vec::new();
        for (&bubble, r) in self.registry.iter_mut() {
            let Some((source, _)) = r.fallback() else { continue };
            let holds =
                held.iter().any(|h| h.lease.bubble == bubble && h.lease.epoch.0 == r.epoch());
            if r.site() == site && holds {
                r.fallback_settled();
                confirmed.push(bubble);
            } else if source == site {
                r.fallback_settled();
                if self.agents.registered(r.site()) {
                    failed_over.push((r.site(), LeaseRef { bubble, epoch: Epoch(r.epoch()) }));
                } else {
                    // The target alone may run it: the lease says so from now on.
                    confirmed.push(bubble);
                }
            }
        }
        for h in held {
            let current = self.registry.get(&h.lease.bubble).is_some_and(|r| {
                r.site() == site && r.epoch() == h.lease.epoch.0 && !r.restoring()
            });
            if current {
                keep.push(self.lease(h.lease.bubble, h.lease.epoch.0, now));
            } else if self.departures_remembered_for(h.lease.bubble, site) {
                // Players left it while this site was away: their state crosses on first.
                hand_over.push(h.lease);
            } else {
                stop.push(h.lease);
            }
        }
        // Held here under an epoch the core has moved on from, by a `Regrant` lost with the
        // old connection (a region moving to another server of the site, `rehome.rs`): its
        // server may still run it. Revoked on the ordered lane, it fails over once the agent
        // answered, its servers having let it go (`handed_on`), not now: a restore elsewhere
        // meanwhile would be a second writer (I2, chaos seed 1411 with `--drains`).
        let superseded: Vec<LeaseRef> = stop
            .iter()
            .filter(|l| {
                self.registry.get(&l.bubble).is_some_and(|r| {
                    r.site() == site
                        && r.settled()
                        && r.fallback().is_none()
                        && r.epoch() != l.epoch.0
                        && !regranted_now.contains(&l.bubble)
                })
            })
            .copied()
            .collect();
        stop.retain(|l| !superseded.contains(l));
        let mut handing_on = Vec::new();
        for lease in superseded {
            let revoke = self.order(site, control::Request::Revoke { leases: vec![lease] });
            if let Some(r) = self.registry.get(&lease.bubble) {
                self.track(revoke, super::Awaiting::HandedOn(lease.bubble, r.epoch()));
                handing_on.push(lease.bubble);
            }
        }
        // Such a bubble may be this site's still, under an epoch a `Regrant` lost with the old
        // connection replaced: it runs there, within its lease, until the `Revoke`. It fails
        // over once that is done (`handed_on`), not now (seed 201719: two writers).
        for lease in hand_over {
            let departed = self.remembered_departures(lease.bubble);
            self.order(site, control::Request::Members { lease, players: Vec::new(), departed });
            let revoke = self.order(site, control::Request::Revoke { leases: vec![lease] });
            if let Some(r) = self.registry.get(&lease.bubble).filter(|r| r.site() == site) {
                self.track(revoke, super::Awaiting::HandedOn(lease.bubble, r.epoch()));
                handing_on.push(lease.bubble);
            }
        }
        let others: Vec<SiteId> =
            self.agents.sites().filter(|&s| s != site && self.agents.registered(s)).collect();
        let peers: Vec<control::Peer> = others
            .iter()
            .map(|&s| control::Peer {
                site: self.site_name(s),
                transfer_addr: self
                    .agents
                    .get(s)
                    .map(|a| a.transfer_addr.clone())
                    .unwrap_or_default(),
            })
            .collect();
        let me = control::Peer { site: self.site_name(site), transfer_addr: transfer_addr.clone() };
        for other in others {
            self.order(other, control::Request::Peers { peers: vec![me.clone()] });
        }
        self.agents.register(site, transfer_addr, servers);
        self.send_links(site);
        self.update_capacity(site);
        for bubble in confirmed {
            self.persist_lease(bubble);
        }
        for (bubble, epoch) in taken_back {
            self.abandon_move(bubble, site, epoch, now);
        }
        for (holder, lease) in failed_over {
            self.lost(holder, &[lease], FailoverReason::NotHeld, now);
        }
        // What this site ran and no longer holds (its agent restarted, or a server died while
        // it was away) fails over now, not at its lease's end. Held under the epoch a `Regrant`
        // replaces counts only when that regrant goes out now, on this connection: one sent on
        // the connection that died is lost: the older epoch is revoked above (`superseded`),
        // and the bubble fails over once that is done.
        let missing: Vec<LeaseRef> = self
            .registry
            .iter()
            .filter(|(b, r)| {
                r.site() == site
                    && r.settled()
                    && r.fallback().is_none()
                    && !handing_on.contains(b)
                    && !held.iter().any(|h| {
                        let e = h.lease.epoch.0;
                        h.lease.bubble == **b
                            && (e == r.epoch()
                                || (r.regrant() == Some((e, r.epoch()))
                                    && regranted_now.contains(b)))
                    })
            })
            .map(|(b, r)| LeaseRef { bubble: *b, epoch: Epoch(r.epoch()) })
            .collect();
        if !missing.is_empty() {
            self.lost(site, &missing, FailoverReason::NotHeld, now);
        }
        self.drain_registered(site, held, now);
        self.send_unsent_restores(site);
        // A reconnected agent lost the orders sent while it was away: tell it again who is in
        // its bubbles and where its players are simulated.
        self.resync(site);
        tracing::info!(site = %self.cfg.sites.name(site), kept = keep.len(), stopped = stop.len(), "agent registered");
        self.granted(keep.len());
        control::Reply::Registered {
            generation: self.generation,
            tick_ms: self.cfg.thresholds.period_ms as u32,
            keep,
            stop,
            peers,
            homed: self.homed(site),
        }
    }

    /// A returning holder was told to stop `bubble`, run under an epoch that a lost `Regrant`
    /// replaced (now `epoch`), once it handed the departed players' states on (`register`). Done:
    /// it runs nowhere, and fails over now. Not answered: its holder may still run it, and it
    /// fails over at its lease's end.
    pub(super) fn handed_on(
        &mut self,
        bubble: BubbleId,
        epoch: u64,
        result: Result<control::Reply, horizon_proto::Failure>,
        now: Time,
    ) {
        let Some(r) = self.registry.get(&bubble) else { return };
        if result.is_err() || r.epoch() != epoch || !r.settled() || r.fallback().is_some() {
            return;
        }
        let lease = LeaseRef { bubble, epoch: Epoch(epoch) };
        self.lost(r.site(), &[lease], FailoverReason::NotHeld, now);
    }

    pub(super) fn update_capacity(&mut self, site: SiteId) {
        let Some(agent) = self.agents.get(site) else { return };
        let ready = agent.servers.iter().filter(|s| s.ready || !s.bubbles.is_empty()).count();
        self.mesh.handle_site_capacity(site, Some(ready as u32));
    }
}
