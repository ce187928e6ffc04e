//! A region moving to another game server of the site that holds it, with its whole state
//! (design.md §4, "Within a site"): the site asks, the core fences the old server off with a
//! newer epoch. The new epoch goes out as a `Regrant` on the site's ordered lane, so every
//! member change sent after it names the epoch the new server runs under.

use horizon_proto::{ErrorCode, Fault, LeaseRef, control};

use super::registry::Phase;
use super::*;

impl CoreMachine {
    /// `site` moves the region it holds under `lease` to another of its servers.
    pub(crate) fn rehome(
        &mut self,
        site: SiteId,
        lease: LeaseRef,
        now: Time,
    ) -> Result<control::Reply, Fault> {
        let bubble = lease.bubble;
        let Some(reg) = self.registry.get(&bubble) else {
            let why = format!("{} is not a region this core runs", bubble.label());
            return Err(Fault::new(ErrorCode::UnknownBubble, why));
        };
        if reg.site() != site || reg.epoch() != lease.epoch.0 {
            let why = format!(
                "{} is held by {} under epoch {}",
                bubble.label(),
                self.cfg.sites.name(reg.site()),
                reg.epoch()
            );
            return Err(Fault::new(ErrorCode::StaleEpoch, why));
        }
        if reg.phase() != Phase::Running || reg.ending_since().is_some() || !reg.parts().is_empty()
        {
            let why = format!("{} is changing already: it moves later", bubble.label());
            return Err(Fault::new(ErrorCode::Conflict, why));
        }
        let epoch = self
            .mesh
            .handle_rehome(bubble, horizon_mesh::Epoch(lease.epoch.0), now)
            .map_err(|e| Fault::new(ErrorCode::Conflict, e.to_string()))?;
        if let Some(reg) = self.registry.get_mut(&bubble) {
            // A renewal of the old epoch may still cross the `Regrant` (see `renew`).
            reg.regranted(epoch.0);
        }
        self.persist_lease(bubble);
        let new = self.lease(bubble, epoch.0, now);
        self.order(site, control::Request::Regrant { old: lease, lease: new });
        tracing::info!(site = %self.cfg.sites.name(site), bubble = bubble.0, epoch = epoch.0, "region moves to another server of its site");
        Ok(control::Reply::Done)
    }
}
