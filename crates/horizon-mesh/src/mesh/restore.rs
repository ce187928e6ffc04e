//! After a core restart: the bubbles its store held are taken back under their ids and epochs,
//! and their players rejoin where they played (design.md §6).

use super::*;

/// A bubble taken back after a core restart ([`Mesh::handle_restore_bubble`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RestoredBubble {
    pub id: BubbleId,
    pub site: SiteId,
    pub world: WorldId,
    pub bounds: Aabb,
    pub epoch: Epoch,
}

impl Mesh {
    /// After a core restart: a bubble the store says was granted (its holder may still run it,
    /// design.md §6). It keeps its id and epoch, its lease runs from `now`, it is kept while
    /// empty for one lease (its players' agents re-register meanwhile), and bubble ids up to
    /// its own are never handed out again. Call before its players rejoin
    /// ([`Mesh::handle_join_in`]).
    pub fn handle_restore_bubble(
        &mut self,
        restored: RestoredBubble,
        now: Time,
    ) -> Result<(), InputError> {
        let RestoredBubble { id, site, world, bounds, epoch } = restored;
        if site.index() >= self.sites.len() {
            return Err(InputError::UnknownSite(site.index()));
        }
        self.leases.restore(id, site, epoch, now)?;
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
        if let Some(&slot) = self.bubble_index.get(&bubble)
            && self.bubble(slot).world == world
            && let Some(place) = self.place_of.last().copied()
        {
            self.player_bubble[place as usize] = slot;
        }
        Ok(())
    }
}
