//! What every region obeys whatever its kind (design.md §6): its lease renewed, expired and
//! stalled, its server's tick rate, its loss and failover, a rehome within its site, a move
//! given up. Each finds the region in the one table (`crate::regions`) and differs by kind only
//! where the rule does (a zone fails over to the core site, a bubble to its best site).

use super::*;

impl Mesh {
    /// A batched lease renewal from one site's agent, sent at `sent_at` by its clock and received
    /// at `now`. Returns the outcome for each bubble in order.
    pub fn handle_renewal(
        &mut self,
        site: SiteId,
        bubbles: &[(BubbleId, Epoch)],
        now: Time,
    ) -> Vec<Result<Time, LeaseError<SiteId>>> {
        self.now_hint = self.now_hint.max(now);
        bubbles.iter().map(|&(b, e)| self.leases.renew(b, site, e, now)).collect()
    }

    /// A game server reported its tick rate for part `part` of a bubble.
    pub fn handle_server_load(
        &mut self,
        bubble: BubbleId,
        part: usize,
        tps: f64,
    ) -> Result<(), InputError> {
        if !tps.is_finite() || tps < 0.0 {
            return Err(InputError::BadNumber { field: "tps", value: tps, extra: " and >= 0" });
        }
        let slot = self.regions.slot(bubble).ok_or(InputError::UnknownBubble(bubble))?;
        let b = match self.regions.get_mut(slot) {
            // A zone runs on one server: its rate is part 0's.
            Some(Entry::Zone(z)) => {
                z.kind.load.tps = Some(tps);
                return Ok(());
            }
            Some(Entry::Bubble(b)) => b,
            None => return Err(InputError::UnknownBubble(bubble)),
        };
        let n = b.servers() as usize;
        b.kind.load.parts.resize(n, crate::split::Load::default());
        if let Some(load) = b.kind.load.parts.get_mut(part) {
            load.tps = Some(tps);
        }
        Ok(())
    }

    /// The holder of region `bubble` under `epoch` cannot simulate it any more — its server
    /// crashed, or a restore on its site failed. Failover at once, ignoring hold and dwell: a
    /// zone to the core site (another of its servers); a bubble with `same_site` to the same
    /// site when it has a spare server (design.md §6: "restart on another server of the same
    /// site"), else to the best other site. The new epoch fences the lost holder off; a
    /// [`Command::Move`] with reason `Failover` says where.
    pub fn handle_region_lost(
        &mut self,
        bubble: BubbleId,
        epoch: Epoch,
        same_site: bool,
        now: Time,
    ) -> Result<(), InputError> {
        let slot = self.regions.slot(bubble).ok_or(InputError::UnknownBubble(bubble))?;
        if let Some(leaf) = self.zones.leaf(slot) {
            return self.zone_lost(leaf, epoch, now);
        }
        let (site, seats) = {
            let b = self.bubble(slot);
            (b.site, b.seats())
        };
        let tally = self.tally_of_slot(slot);
        // The lost seats still count as taken at `site`, and the seats of the lost server still
        // count as offered until the agent's next report: the site needs room for the bubble
        // without that server.
        let spare = seats.saturating_add(self.th.seats_per_server());
        let target = if same_site && self.can_host(site, spare) {
            site
        } else {
            self.failover_target(&tally, site, seats)
        };
        let lease = self.leases.transfer(bubble, epoch, target, now)?;
        let players = self.slot_players(slot);
        self.relocate(slot, target, lease.epoch, MoveReason::Failover, now, players);
        Ok(())
    }

    /// The site holding region `id` (a bubble or a zone) under `epoch` moves it, with its
    /// whole state, to another of its game servers: the region stays where it is, under a new
    /// epoch that fences the old server off. Refused for a region not held under `epoch`, or
    /// stalled (its lease ran out: a failover comes instead). Returns the new epoch.
    pub fn handle_rehome(
        &mut self,
        id: BubbleId,
        epoch: Epoch,
        now: Time,
    ) -> Result<Epoch, InputError> {
        let slot = self.regions.slot(id).ok_or(InputError::UnknownBubble(id))?;
        let region = self.regions.get(slot).ok_or(InputError::UnknownBubble(id))?;
        if region.stalled_since().is_some() {
            return Err(InputError::Lease(LeaseError::NoLease));
        }
        let lease = self.leases.transfer(id, epoch, region.site(), now)?;
        if let Some(r) = self.regions.get_mut(slot) {
            r.granted(lease.epoch);
        }
        Ok(lease.epoch)
    }

    /// An epoch for a bubble the brain has ended, to restore it briefly from its copy (see
    /// [`LeaseTable::mint`]); epochs stay strictly increasing per bubble. Refused for a bubble
    /// still leased (the brain runs it).
    pub fn mint_epoch(&mut self, bubble: BubbleId) -> Result<Epoch, InputError> {
        Ok(self.leases.mint(bubble)?)
    }

    /// A handover of `bubble` to its current site under `epoch` was abandoned before the source
    /// froze (design.md §5: "the source simply continues"). The bubble goes back to `source`
    /// under a new epoch, so the abandoned one is fenced off for good. The hold time counts from
    /// the attempt: the move is tried again, if still best, once hold and dwell have passed.
    /// Returns the source's new epoch.
    pub fn handle_move_aborted(
        &mut self,
        bubble: BubbleId,
        epoch: Epoch,
        source: SiteId,
        now: Time,
    ) -> Result<Epoch, InputError> {
        if source.index() >= self.sites.len() {
            return Err(InputError::UnknownSite(source.index()));
        }
        let slot = self.regions.slot(bubble).ok_or(InputError::UnknownBubble(bubble))?;
        if self.regions.bubble(slot).is_none() {
            return Err(InputError::UnknownBubble(bubble));
        }
        let lease = self.leases.transfer(bubble, epoch, source, now)?;
        let b = self.bubble_mut(slot);
        let (from, seats) = (b.site, b.seats());
        b.site = source;
        b.epoch = lease.epoch;
        b.kind.hysteresis.best_since = None;
        self.used[from.index()] = self.used[from.index()].saturating_sub(seats);
        self.used[source.index()] += seats;
        Ok(lease.epoch)
    }

    /// Marks the regions whose leases expired stalled, whatever their kind: each waits to be
    /// granted again (a bubble's failover, a zone on another server of the core site). Returns
    /// how many leases just became re-grantable.
    pub(super) fn expire_leases(&mut self, now: Time) -> usize {
        let (expired, regrantable) = self.leases.expire(now);
        for (id, lease) in expired {
            let Some(region) = self.regions.slot(id).and_then(|s| self.regions.get_mut(s)) else {
                continue;
            };
            region.stall(lease.expires_at);
            let cmd = Command::Stalled { bubble: id, site: region.site(), since: lease.expires_at };
            self.commands.push_back(cmd);
        }
        regrantable
    }
}
