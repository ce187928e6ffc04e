//! NPCs are simulated too. They weigh nothing and are never grouped (they place no bubble and
//! load no zone), but a game server must still run each of them: the bubble whose box holds
//! them, else the zone around them. Finding that bubble for thousands of NPCs on every
//! reconcile is a lookup in the bubbles' boxes (`boxes.rs`), not a scan of every bubble.

use super::*;

impl Mesh {
    /// The region simulating the NPC at `place`: the bubble `current` while it is within
    /// [`EXIT_MARGIN_M`] of its box (so that one on a border does not cross with every
    /// step), else the bubble whose box holds it, else the zone around it.
    pub(super) fn npc_region(&self, place: usize, current: Option<BubbleId>) -> Option<BubbleId> {
        let item = &self.items[place];
        let near = |b: &&Bubble| b.holds(item.world, item.pos, EXIT_MARGIN_M);
        if let Some(b) = current.and_then(|c| self.bubble_by_id(c)).filter(near) {
            return Some(b.id);
        }
        if let Some(b) = self.bubble_at(item.world, item.pos) {
            return Some(b.id);
        }
        self.zone_around(place, current)
    }
}
