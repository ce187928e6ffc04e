//! The brain's commands carried out: a bubble created, moved (a handover, or a failover),
//! merged or deleted (ended once its members have left it), resized, spread over servers; and
//! each decision kept for `/status`.

use horizon_mesh::{Command, CreateReason, DeleteReason, MoveReason, Time};
use horizon_proto::control;
use horizon_proto::{BubbleId, Epoch, LeaseRef, Region, WorldId};

use super::CoreMachine;
use crate::machine::registry::{Hosted, Phase};
use crate::store::Record;

impl CoreMachine {
    /// Carries out every command the brain has queued.
    pub(crate) fn carry_out_commands(&mut self, now: Time) {
        let mut revokes = Vec::new();
        while let Some(command) = self.mesh.poll_command() {
            self.decide(&command, now);
            let told = self.told(&command);
            match command {
                Command::Create { bubble, site, world, bounds, epoch, reason, .. } => {
                    self.host(bubble, site, world, bounds, epoch.0, now);
                    self.stats.bubbles_created.inc(site.index());
                    if reason == CreateReason::Carve {
                        self.stats.carved(site.index(), true);
                    }
                }
                Command::Move { bubble, from, to, epoch, reason, .. } => {
                    if reason == MoveReason::Failover {
                        self.fail_over(bubble, from, to, epoch.0, now);
                    } else {
                        self.start_handover(bubble, from, to, epoch.0, reason.as_str(), now);
                    }
                }
                Command::Merge { from, .. } => revokes.push(from),
                Command::Delete { bubble, site, reason, .. } => {
                    if reason == DeleteReason::Dissolve {
                        self.stats.carved(site.index(), false);
                    }
                    revokes.push(bubble);
                }
                Command::Border { bubble, bounds, .. } => self.resize(bubble, bounds),
                Command::Enter { .. } => {}
                Command::Servers { bubble, parts, reason, .. } => {
                    // Carried out by `reconcile_parts`, with each member's part.
                    tracing::info!(bubble = bubble.0, parts = parts.len(), reason = ?reason, "bubble spread over servers");
                }
                // Zones run on the core site's servers as any region does; their players come
                // and go by `reconcile` (crossings between two servers of the core site).
                Command::ZoneCreate { zone, site, world, bounds, epoch, .. } => {
                    self.host(zone, site, world, bounds, epoch.0, now);
                }
                Command::ZoneSplit {
                    zone,
                    new_zone,
                    site,
                    world,
                    bounds,
                    new_bounds,
                    new_epoch,
                    ..
                } => {
                    self.resize(zone, bounds);
                    self.host(new_zone, site, world, new_bounds, new_epoch.0, now);
                    self.stats.zone_changed(true);
                }
                Command::ZoneMerge { into, from, bounds, .. } => {
                    self.resize(into, bounds);
                    revokes.push(from);
                    self.stats.zone_changed(false);
                }
                Command::Stalled { bubble, site, .. } => {
                    tracing::error!(bubble = bubble.0, site = %self.cfg.sites.name(site), "bubble stalled: its lease expired");
                }
            }
            if let Some((kind, region, text)) = told {
                self.note(now, kind, Some(region), text);
            }
        }
        // Members, routes and parts follow the brain after every run, commands or not
        // (players leave and move between parts without one).
        self.reconcile();
        for bubble in revokes {
            if let Some(r) = self.registry.get_mut(&bubble) {
                r.ending(now);
            }
        }
        // A merged or deleted bubble ends once its members have left it with their state (a
        // move waiting for a handover or a restore elsewhere waits with it), or after a lease.
        // One taken back after a restart has no members until its players' agents say where
        // they play: it waits for them (or the lease), or their state would be dropped with it.
        let ttl = self.cfg.thresholds.lease_ttl_ms;
        let all_resynced = self.all_resynced();
        let ended: Vec<BubbleId> = self
            .registry
            .iter()
            .filter(|(_, r)| {
                let Some(since) = r.ending_since() else { return false };
                let known = all_resynced || r.members_unknown_until().is_none_or(|t| now >= t);
                let left = known && r.members().is_empty();
                left || now.as_ms().saturating_sub(since.as_ms()) >= ttl
            })
            .map(|(b, _)| *b)
            .collect();
        for bubble in ended {
            self.forget_restore(bubble);
            if let Some(reg) = self.registry.remove(&bubble) {
                self.persist(Record::Gone { bubble: bubble.0 });
                let lease = LeaseRef { bubble, epoch: Epoch(reg.epoch()) };
                let revoke = control::Request::Revoke { leases: vec![lease] };
                let heard =
                    self.agents.registered(reg.site()) && self.order(reg.site(), revoke).is_some();
                // A holder that did not hear never lets its players go: see `drain.rs`.
                self.bubble_ended(bubble, &reg, heard);
            }
        }
    }

    /// A new region (a bubble or a zone) granted `epoch` on `site`: recorded, persisted, and
    /// ordered to the site's agent.
    fn host(
        &mut self,
        bubble: BubbleId,
        site: horizon_mesh::SiteId,
        world: WorldId,
        bounds: horizon_proto::Aabb,
        epoch: u64,
        now: Time,
    ) {
        self.registry.insert(bubble, Hosted::new(site, epoch, world.0, bounds, now));
        self.persist_lease(bubble);
        let region = Region { world, bounds: Some(bounds) };
        let lease = self.lease(bubble, epoch, now);
        if let Some(order) = self.order(site, control::Request::Create { bubble, region, lease })
            && let Some(reg) = self.registry.get_mut(&bubble)
        {
            reg.creating();
            self.track(Some(order), super::Awaiting::Create(bubble));
        }
    }

    /// A region's `Create` was answered (or failed: it is not waited for any longer): the
    /// players crossing into it go now.
    pub(crate) fn created(&mut self, bubble: BubbleId) {
        if let Some(reg) = self.registry.get_mut(&bubble)
            && reg.phase() == Phase::Creating
        {
            reg.running();
            self.reconcile();
        }
    }

    /// A region's box changed: its holder is told once it runs there (a region in a handover
    /// or a restore gets its box with it).
    fn resize(&mut self, bubble: BubbleId, bounds: horizon_proto::Aabb) {
        let Some(reg) = self.registry.get_mut(&bubble) else { return };
        reg.resized(bounds);
        let (site, epoch, world, settled) = (reg.site(), reg.epoch(), reg.world(), reg.settled());
        if settled {
            let region = Region { world: WorldId(world), bounds: Some(bounds) };
            let lease = LeaseRef { bubble, epoch: Epoch(epoch) };
            self.order(site, control::Request::Resize { lease, region });
        }
    }

    fn decide(&mut self, command: &Command, now: Time) {
        let mut v = serde_json::to_value(command).unwrap_or_default();
        if let Some(obj) = v.as_object_mut() {
            obj.insert("t_ms".into(), now.as_ms().into());
            // A merge's `from` is a region, not a site.
            let merge =
                matches!(obj.get("command").and_then(|c| c.as_str()), Some("merge" | "zone_merge"));
            for key in ["site", "from", "to", "from_site", "into_site", "previous_site"] {
                if merge && key == "from" {
                    continue;
                }
                if let Some(id) = obj.get(key).and_then(|x| x.as_u64()) {
                    let name = self
                        .cfg
                        .sites
                        .ids()
                        .find(|s| s.index() as u64 == id)
                        .map(|s| self.cfg.sites.name(s).to_string());
                    if let Some(name) = name {
                        obj.insert(key.into(), name.into());
                    }
                }
            }
            if let Some(players) = obj.remove("players") {
                obj.insert("players".into(), players.as_array().map_or(0, Vec::len).into());
            }
        }
        self.decisions.push(v);
    }
}
