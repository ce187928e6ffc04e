//! Every bubble's box, indexed by world and by where it starts on the x axis: the bubble
//! holding a position (an NPC's, `npcs.rs`) and the bubbles carved out of a zone are found
//! among the few that start within the widest box's width, not by a scan of every bubble.

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

    /// The ids of the bubbles of `world` whose box may meet x in `[lo, hi]` (check each box).
    fn starting_near(&self, world: WorldId, lo: f64, hi: f64) -> impl Iterator<Item = BubbleId> {
        let from = (lo - self.widest_m).floor() as i64 - 1;
        let to = hi.floor() as i64;
        let range = (world, from, BubbleId(0))..=(world, to, BubbleId(u64::MAX));
        self.by_x.range(range).map(|&(_, _, id)| id)
    }
}

impl Mesh {
    /// The bubble whose box holds `pos` in `world`, if any (boxes never overlap).
    pub fn bubble_at(&self, world: WorldId, pos: Vec3) -> Option<&Bubble> {
        self.boxes
            .starting_near(world, pos.x, pos.x)
            .filter_map(|id| self.bubble_by_id(id))
            .find(|b| b.holds(world, pos, 0.0))
    }

    /// The bubbles of `world` whose box meets `bounds`: carved out of a zone of that box.
    pub fn bubbles_meeting(&self, world: WorldId, bounds: Aabb) -> impl Iterator<Item = &Bubble> {
        self.boxes
            .starting_near(world, bounds.min.x, bounds.max.x)
            .filter_map(|id| self.bubble_by_id(id))
            .filter(move |b| b.world == world && b.bounds.overlaps(&bounds))
    }
}
