//! After a core restart: the regions its store held — zones and bubbles — are taken back under
//! their ids and epochs, and their players rejoin where they played (design.md §6).

use super::*;
use crate::zones::new_zone;

/// A region taken back after a core restart ([`Mesh::handle_restore`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RestoredRegion {
    pub id: BubbleId,
    pub kind: RegionKind,
    pub site: SiteId,
    pub world: WorldId,
    pub bounds: Aabb,
    pub epoch: Epoch,
}

impl Mesh {
    /// After a core restart: a region the store says was granted (its holder may still run
    /// it, design.md §6), taken back under its id and epoch, its lease running from `now`; ids
    /// of its kind up to its own are never handed out again. A zone must be the core site's,
    /// and comes back as a zone of its own ([`Mesh::regroup_restored_zones`] joins them under
    /// their cuts again); a bubble is kept while empty for one lease (its players' agents
    /// re-register meanwhile). Call before players join ([`Mesh::handle_join_in`]): a world
    /// with zones taken back opens no other.
    pub fn handle_restore(
        &mut self,
        restored: RestoredRegion,
        now: Time,
    ) -> Result<(), InputError> {
        let RestoredRegion { id, kind, site, world, bounds, epoch } = restored;
        let here = match kind {
            RegionKind::Zone => site == self.sites.core(),
            RegionKind::Bubble => site.index() < self.sites.len(),
        };
        if !here {
            return Err(InputError::UnknownSite(site.index()));
        }
        self.leases.restore(id, site, epoch, now)?;
        if kind == RegionKind::Zone {
            self.next_zone = self.next_zone.max(id.0 + 1);
            let zone = new_zone(id, site, world, bounds, epoch, None);
            let slot = self.regions.insert(Entry::Zone(zone));
            self.zones.add_root(slot, world, bounds);
            return Ok(());
        }
        self.next_bubble = self.next_bubble.max(id.0 + 1);
        let bubble = Bubble {
            id,
            site,
            world,
            bounds,
            epoch,
            players: 0,
            stalled_since: None,
            kind: BubbleState {
                // As if it had just moved: no move before the hold time has passed again.
                hysteresis: Hysteresis { best_since: None, last_move: Some(now) },
                created_at: now,
                cuts: Vec::new(),
                kept_empty_until: Some(now + Span::from_ms(self.th.lease_ttl_ms)),
                load: LoadState::default(),
            },
        };
        self.place_bubble(bubble);
        Ok(())
    }

    /// A player who was simulated in `bubble` before the core restarted rejoins: as
    /// [`Mesh::handle_join`], placed in that bubble (if it exists, in the player's world) so
    /// the next tick keeps them there instead of creating a new one.
    pub fn handle_join_in(&mut self, join: PlayerJoin, bubble: BubbleId) -> Result<(), InputError> {
        let world = join.world;
        self.handle_join(join)?;
        if let Some(slot) = self.regions.slot(bubble)
            && self.regions.bubble(slot).is_some_and(|b| b.world == world)
            && let Some(place) = self.place_of.last().copied()
        {
            self.player_bubble[place as usize] = slot;
        }
        Ok(())
    }
}
