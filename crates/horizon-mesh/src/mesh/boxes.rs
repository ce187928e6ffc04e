//! Every bubble's box, indexed by world and by where it starts on the x axis: the bubble
//! holding a position (an NPC's, `npcs.rs`) and the bubbles carved out of a zone are found
//! among the few that start within the widest box's width, not by a scan of every bubble.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// Every bubble's box, by world and by where it starts on the x axis, so that the bubbles that
/// may hold a position are the few starting at most the widest box's width before it. Kept by
/// bubble id (slots are renumbered) as bubbles are placed, resized and removed.
#[derive(Debug, Default)]
pub(super) struct BubbleBoxes {
    by_x: BTreeSet<(WorldId, i64, BubbleId)>,
    /// How many boxes have each width along x (metres, as the bits of a non-negative `f64`,
    /// which order as the numbers do): the widest is the last. One huge box widens the search
    /// only while it lives.
    widths: BTreeMap<u64, u32>,
    /// Boxes indexed or removed so far: a change of any bubble's box moves it.
    changes: u64,
}

fn key(b: &Bubble) -> (WorldId, i64, BubbleId) {
    (b.world, b.bounds.min.x.floor() as i64, b.id)
}

/// A box's width along x, as ordered bits (never negative: boxes are not empty).
fn width(b: &Bubble) -> u64 {
    (b.bounds.max.x - b.bounds.min.x).max(0.0).to_bits()
}

impl BubbleBoxes {
    pub(super) fn insert(&mut self, b: &Bubble) {
        if self.by_x.insert(key(b)) {
            *self.widths.entry(width(b)).or_default() += 1;
            self.changes += 1;
        }
    }

    pub(super) fn remove(&mut self, b: &Bubble) {
        if !self.by_x.remove(&key(b)) {
            return;
        }
        self.changes += 1;
        if let Some(n) = self.widths.get_mut(&width(b)) {
            *n -= 1;
            if *n == 0 {
                self.widths.remove(&width(b));
            }
        }
    }

    fn widest_m(&self) -> f64 {
        self.widths.last_key_value().map_or(0.0, |(&bits, _)| f64::from_bits(bits))
    }

    /// The ids of the bubbles of `world` whose box may meet x in `[lo, hi]` (check each box).
    fn starting_near(&self, world: WorldId, lo: f64, hi: f64) -> impl Iterator<Item = BubbleId> {
        let from = (lo - self.widest_m()).floor() as i64 - 1;
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

    /// How many times a bubble's box was placed, changed or removed: while it stays the same,
    /// so does every answer of [`Mesh::bubbles_meeting`].
    pub fn bubble_boxes_changes(&self) -> u64 {
        self.boxes.changes
    }

    /// The bubbles of `world` whose box meets `bounds`: carved out of a zone of that box.
    pub fn bubbles_meeting(&self, world: WorldId, bounds: Aabb) -> impl Iterator<Item = &Bubble> {
        self.boxes
            .starting_near(world, bounds.min.x, bounds.max.x)
            .filter_map(|id| self.bubble_by_id(id))
            .filter(move |b| b.world == world && b.bounds.overlaps(&bounds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bubble::BubbleState;
    use crate::region::Region;

    fn bubble(id: u64, x0: f64, x1: f64) -> Bubble {
        Region {
            id: BubbleId(id),
            site: SiteId(0),
            world: WorldId(0),
            bounds: Aabb { min: Vec3::new(x0, -1.0, -1.0), max: Vec3::new(x1, 1.0, 1.0) },
            epoch: Epoch(1),
            stalled_since: None,
            players: 1,
            kind: BubbleState {
                hysteresis: Hysteresis::default(),
                created_at: Time::ZERO,
                cuts: Vec::new(),
                kept_empty_until: None,
                load: LoadState::default(),
            },
        }
    }

    #[test]
    fn the_search_widens_for_a_huge_box_only_while_it_lives() {
        let mut boxes = BubbleBoxes::default();
        let (small, huge) = (bubble(1, 0.0, 10.0), bubble(2, 100.0, 1e9));
        boxes.insert(&small);
        boxes.insert(&huge);
        boxes.insert(&huge);
        assert_eq!(boxes.widest_m(), 1e9 - 100.0);
        boxes.remove(&huge);
        assert_eq!(boxes.widest_m(), 10.0, "gone: the search narrows again");
        boxes.remove(&small);
        assert_eq!((boxes.widest_m(), boxes.by_x.len()), (0.0, 0));
        // Two boxes in, two out: four changes (the second insert of one box changed nothing).
        assert_eq!(boxes.changes, 4);
    }
}
