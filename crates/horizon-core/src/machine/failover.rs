//! Failover (design.md §6): a bubble whose holder is gone — its lease ran out (a relay cut
//! from the core, a handover given up after its freeze) or its game server crashed — is
//! restored on its new site from the latest copy in the universe backup. Not a handover: the
//! old holder is not asked for anything, and is fenced off by the new epoch.
//!
//! ```text
//!  brain: Move { reason: Failover } ──► registry: new site + epoch, restoring
//!     ──► ReadBackup ──► BackupRead ──► Restore (ordered) to the new site's agent
//!     ──► Done: settled; full member list and every member's route sent again
//!     ──► error: the brain fails it over again (another server or site)
//! ```
//!
//! Gateways keep each player's inputs until a stored copy covers them ([`Covered`]), and
//! re-send them on the new route: the restored server applies each seq after the copy once.
//!
//! [`Covered`]: horizon_proto::control::Request::Covered

use horizon_mesh::{SiteId, Time};
use horizon_proto::control;
use horizon_proto::{Blob, BubbleId, Failure, LeaseRef, PlayerId, Region, WorldId};

use super::{Adoption, Awaiting, CopyAt, CoreMachine, Effect, StoredCopy};
use crate::stats::FailoverReason;

impl CoreMachine {
    /// The brain failed `bubble` over from `from` to `to` under `epoch`.
    pub(crate) fn fail_over(
        &mut self,
        bubble: BubbleId,
        from: SiteId,
        to: SiteId,
        epoch: u64,
        _now: Time,
    ) {
        let Some(reg) = self.registry.get_mut(&bubble) else { return };
        let old_epoch = reg.epoch();
        reg.restoring_at(to, epoch);
        self.forget_handover(bubble);
        let reason = self.loss.remove(&bubble).unwrap_or(FailoverReason::LeaseExpired);
        self.stats.failover(to, reason);
        self.persist_lease(bubble);
        // The old holder, if it can hear us, stops at once (it stopped by its own clock
        // anyway, or its server is gone).
        let old = LeaseRef { bubble, epoch: horizon_proto::Epoch(old_epoch) };
        if from != to {
            self.order(from, control::Request::Revoke { leases: vec![old] });
        }
        tracing::warn!(bubble = bubble.0, from = %self.cfg.sites.name(from), to = %self.cfg.sites.name(to), epoch, "failover: restoring from the universe backup");
        self.effects.push_back(Effect::ReadBackup { bubble });
    }

    /// The latest copy of a bubble being restored: send it to the new holder.
    pub(crate) fn backup_read(&mut self, bubble: BubbleId, copy: Option<StoredCopy>, now: Time) {
        if self.draining(bubble) {
            return self.drain_read(bubble, copy, now);
        }
        let Some(reg) = self.registry.get(&bubble).filter(|r| r.restoring()) else { return };
        let (site, epoch) = (reg.site(), reg.epoch());
        let region = Region { world: WorldId(reg.world()), bounds: Some(reg.bounds()) };
        // A copy from a newer epoch than the one being granted cannot exist (fencing); an
        // older one is what we restore from.
        let copy = copy.filter(|c| c.epoch < epoch).unwrap_or_else(|| {
            tracing::warn!(bubble = bubble.0, "no copy in the backup: restored empty");
            StoredCopy { epoch: 0, tick: 0, bytes: Vec::new(), parts: Vec::new() }
        });
        self.stats.restore(site, copy.kind());
        let text = match copy.kind() {
            "none" => format!(
                "{} restored on {} with no copy in the backup: it starts empty.",
                bubble.label(),
                self.cfg.sites.name(site)
            ),
            kind => format!(
                "{} restored on {} from its {} copy (tick {}).",
                bubble.label(),
                self.cfg.sites.name(site),
                if kind == "whole" { "whole" } else { "parts'" },
                copy.tick
            ),
        };
        self.note(now, crate::status::EventKind::Restore, Some(bubble), text);
        let from = (!copy.bytes.is_empty() && copy.parts.is_empty()).then_some(CopyAt {
            bubble,
            epoch: copy.epoch,
            tick: copy.tick,
        });
        self.restored_from.insert(bubble, (epoch, from));
        let restore = copy.restore(self.lease(bubble, epoch, now), region);
        let order = self.order(site, restore);
        if self.track(order, Awaiting::Restore(bubble, epoch)) {
            self.restores_unsent.remove(&bubble);
        } else if self.restores_unsent.insert(bubble) {
            // The new site's agent is gone too: the brain picks another.
            self.restore_failed(bubble, epoch, "the new site's agent is not connected", now);
        } else {
            // It picked a site without its agent again: no other site can host the bubble
            // (the core site always may). Picking again would pick it again, at once, for
            // ever: the bubble waits for that agent (its registration restores it) or for its
            // lease's end (the brain fails it over then).
            tracing::warn!(bubble = bubble.0, site = %self.cfg.sites.name(site), epoch, "restore waits for its site's agent: no other site can host it");
        }
    }

    /// `site`'s agent registered: the restores that waited for it go out now.
    pub(crate) fn send_unsent_restores(&mut self, site: SiteId) {
        let waiting: Vec<BubbleId> = self
            .restores_unsent
            .iter()
            .filter(|b| self.registry.get(b).is_some_and(|r| r.restoring() && r.site() == site))
            .copied()
            .collect();
        for bubble in waiting {
            self.effects.push_back(Effect::ReadBackup { bubble });
        }
    }

    /// The new holder answered the restore.
    pub(crate) fn restored(
        &mut self,
        bubble: BubbleId,
        epoch: u64,
        result: Result<control::Reply, Failure>,
        now: Time,
    ) {
        if self.registry.get(&bubble).is_none_or(|r| !r.restoring() || r.epoch() != epoch) {
            return;
        }
        match result {
            Ok(control::Reply::Done) => {
                let Some(reg) = self.registry.get_mut(&bubble) else { return };
                reg.running();
                let site = reg.site();
                let players: Vec<PlayerId> = reg.members().keys().copied().collect();
                tracing::info!(bubble = bubble.0, site = %self.cfg.sites.name(site), epoch, players = players.len(), "bubble restored");
                // The copy may hold players who left since it was made: their state crosses on.
                self.send_full_members(bubble);
                self.redirect_arrivals(bubble);
                self.drain_arrivals(bubble, now);
                self.adopt_kept_copies(bubble, epoch);
                self.send_routes(players);
                self.reconcile();
            }
            Ok(other) => self.restore_failed(bubble, epoch, &format!("replied {other:?}"), now),
            Err(why) if why.may_have_acted() => {
                // The site may run it under this epoch's lease: it is its holder until it
                // registers without it, or the lease runs out (then it fails over).
                tracing::warn!(bubble = bubble.0, epoch, %why, "restore unanswered: its site holds it until it says otherwise or its lease runs out");
                if let Some(reg) = self.registry.get_mut(&bubble) {
                    reg.running();
                }
            }
            Err(why) => self.restore_failed(bubble, epoch, &why.to_string(), now),
        }
    }

    /// Why `bubble`, being failed over, was lost (its lease expired, unless said otherwise).
    pub(crate) fn loss_reason(&self, bubble: BubbleId) -> FailoverReason {
        self.loss.get(&bubble).copied().unwrap_or(FailoverReason::LeaseExpired)
    }

    /// `bubble` ended: which copy it was restored from no longer matters.
    pub(crate) fn forget_restore(&mut self, bubble: BubbleId) {
        self.restored_from.remove(&bubble);
        self.restores_unsent.remove(&bubble);
    }

    /// Members of a bubble just restored whose best stored copy is not the one it was
    /// restored from (they crossed in after it, or it holds fewer of their inputs): that copy
    /// is read, and adopted by the holder (`keep.rs`).
    fn adopt_kept_copies(&mut self, bubble: BubbleId, epoch: u64) {
        let Some((at_epoch, from)) = self.restored_from.remove(&bubble) else { return };
        let Some(reg) =
            self.registry.get(&bubble).filter(|r| r.epoch() == epoch && at_epoch == epoch)
        else {
            return;
        };
        for (copy, players) in self.keep.wanted(from, reg.members().keys().copied()) {
            tracing::info!(
                bubble = bubble.0,
                from_bubble = copy.bubble.0,
                players = players.len(),
                "members adopted from the copy kept for them"
            );
            let adopt = Adoption { bubble, epoch, from: copy, players };
            self.effects.push_back(Effect::ReadPinned { adopt });
        }
    }

    /// A kept copy was read: the restored bubble's holder adopts the players from it.
    pub(crate) fn pinned_read(&mut self, adopt: Adoption, copy: Option<Vec<u8>>) {
        let Some(copy) = copy else {
            tracing::warn!(
                bubble = adopt.bubble.0,
                from_bubble = adopt.from.bubble.0,
                "the copy kept for players is gone from the store"
            );
            return;
        };
        let Some(reg) = self.registry.get(&adopt.bubble) else { return };
        if reg.epoch() != adopt.epoch || !reg.settled() {
            return;
        }
        // Only those still members (the brain may have moved some on meanwhile).
        let players: Vec<PlayerId> =
            adopt.players.into_iter().filter(|p| reg.members().contains_key(p)).collect();
        if players.is_empty() {
            return;
        }
        self.stats.adoptions.inc(reg.site().index());
        let lease = reg.lease_ref(adopt.bubble);
        let site = reg.site();
        self.order(site, control::Request::Adopt { lease, players, copy: Blob(copy) });
    }

    /// A restore that did not happen: fail over again, to wherever the brain says now.
    fn restore_failed(&mut self, bubble: BubbleId, epoch: u64, why: &str, now: Time) {
        tracing::error!(bubble = bubble.0, epoch, %why, "restore failed: failing over again");
        self.restored_from.remove(&bubble);
        self.loss.insert(bubble, FailoverReason::RestoreFailed);
        let lost = self.mesh.handle_region_lost(bubble, horizon_mesh::Epoch(epoch), false, now);
        if let Err(e) = lost {
            tracing::warn!(bubble = bubble.0, error = %e, "restore failed and the brain has moved on");
        }
        self.carry_out_commands(now);
    }

    /// An agent says it can no longer simulate these bubbles (their game server is gone).
    pub(crate) fn lost(
        &mut self,
        site: SiteId,
        leases: &[LeaseRef],
        reason: FailoverReason,
        now: Time,
    ) {
        for l in leases {
            let current = self
                .registry
                .get(&l.bubble)
                .is_some_and(|r| r.site() == site && r.epoch() == l.epoch.0 && r.settled());
            if !current {
                self.ended_bubble_lost(site, l.bubble, now);
                continue;
            }
            tracing::warn!(bubble = l.bubble.0, site = %self.cfg.sites.name(site), reason = reason.as_str(), "bubble lost by its holder");
            self.loss.insert(l.bubble, reason);
            let lost = self.mesh.handle_region_lost(l.bubble, l.epoch, true, now);
            if let Err(e) = lost {
                tracing::warn!(bubble = l.bubble.0, error = %e, "lost bubble not failed over");
            }
        }
        self.carry_out_commands(now);
    }
}
