//! NPCs are simulated too. They weigh nothing and are never grouped (they place no bubble and
//! load no zone), but a game server must still run each of them: the bubble whose box holds
//! them, else the zone around them. Finding that bubble for thousands of NPCs on every
//! reconcile is a lookup in [`BubbleBoxes`], not a scan of every bubble.

use std::collections::BTreeSet;

use super::*;

/// Every bubble's box, by world and by where it starts on the x axis, so that the bubbles that
/// may hold a position are the few starting at most [`BubbleBoxes::widest_m`] before it. Kept
/// by bubble id (slots are renumbered) as bubbles are placed, resized and removed.
#[derive(Debug, Default)]
pub(super) struct BubbleBoxes {
    by_x: BTreeSet<(WorldId, i64, BubbleId)>,
    /// The widest box ever indexed, in metres along x (it only grows: a bound, not a count).
    widest_m: f64,
}

fn key(b: &Bubble) -> (WorldId, i64, BubbleId) {
    (b.world, b.bounds.min.x.floor() as i64, b.id)
}

impl BubbleBoxes {
    pub(super) fn insert(&mut self, b: &Bubble) {
        self.widest_m = self.widest_m.max(b.bounds.max.x - b.bounds.min.x);
        self.by_x.insert(key(b));
    }

    pub(super) fn remove(&mut self, b: &Bubble) {
        self.by_x.remove(&key(b));
    }

    /// The ids of the bubbles of `world` whose box may hold `pos` (check each box).
    fn near(&self, world: WorldId, pos: Vec3) -> impl Iterator<Item = BubbleId> + '_ {
        let from = (pos.x - self.widest_m).floor() as i64 - 1;
        let to = pos.x.floor() as i64;
        let range = (world, from, BubbleId(0))..=(world, to, BubbleId(u64::MAX));
        self.by_x.range(range).map(|&(_, _, id)| id)
    }
}

impl Mesh {
    /// The bubble whose box holds `pos` in `world`, if any (boxes never overlap).
    pub fn bubble_at(&self, world: WorldId, pos: Vec3) -> Option<&Bubble> {
        self.boxes
            .near(world, pos)
            .filter_map(|id| self.bubble_by_id(id))
            .find(|b| b.holds(world, pos, 0.0))
    }

    /// The region simulating the NPC at `place`: the bubble `current` while it is within
    /// [`ZONE_EXIT_MARGIN_M`] of its box (so that one on a border does not cross with every
    /// step), else the bubble whose box holds it, else the zone around it.
    pub(super) fn npc_region(&self, place: usize, current: Option<BubbleId>) -> Option<BubbleId> {
        let item = &self.items[place];
        let near = |b: &&Bubble| b.holds(item.world, item.pos, ZONE_EXIT_MARGIN_M);
        if let Some(b) = current.and_then(|c| self.bubble_by_id(c)).filter(near) {
            return Some(b.id);
        }
        if let Some(b) = self.bubble_at(item.world, item.pos) {
            return Some(b.id);
        }
        self.zone_around(place, current)
    }
}
