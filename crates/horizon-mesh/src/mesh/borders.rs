//! Moving borders (design.md §4): a bubble's box follows its players a margin at a time, and
//! no two regions ever overlap.

use super::*;

impl Mesh {
    /// Moving border: a bubble keeps its box while every member stays farther than half its
    /// margin from the edge; otherwise the box is reset to the one its players claim (their box
    /// grown by the margin), so the border moves with them, a margin at a time. Claims of
    /// different bubbles (and of players waiting in zones) never overlap, so resetting any stale
    /// box that overlaps another region ends with no overlap at all.
    pub(super) fn settle_bounds(&mut self, sc: &mut Scratch, stats: &mut TickStats) {
        for c in 0..sc.units.len() {
            let slot = sc.cluster_bubble[c];
            let e = &sc.extents[c];
            if slot == NONE {
                continue; // waiting in a zone
            }
            let bounds = self.bubble(slot).bounds;
            // A member within half its margin of the edge is in the alert box, outside `bounds`.
            let near_edge = bounds != e.claim
                && !(bounds.contains(e.alert.min) && bounds.contains(e.alert.max));
            if near_edge {
                self.set_bounds(slot, e.claim, BorderReason::NearEdge, stats);
            }
        }
        // One sweep of every region (players waiting in zones have their claims); then, round
        // after round, only what the boxes reset in the round before overlap: a box that kept
        // its place overlaps nothing new. Claims never overlap, so a box found overlapping is
        // stale and is reset, once: at most as many rounds as bubbles.
        // Regions are pushed in the order the units' claims were sorted in (a bubble's box is
        // near its claim), so sorting them takes little.
        sc.claims_order.clear();
        sc.claims_order.extend(sc.sweep.sorted_ids());
        sc.sweep.clear();
        for &u in &sc.claims_order {
            let (slot, e) = (sc.cluster_bubble[u as usize], &sc.extents[u as usize]);
            match slot {
                NONE => sc.sweep.push(e.world, e.claim, NONE),
                _ => sc.sweep.push(e.world, self.bubble(slot).bounds, slot),
            }
        }
        let mut stale: Vec<u32> =
            sc.sweep.overlapping_nearly_sorted().iter().flat_map(|&(a, b)| [a, b]).collect();
        // The next tick's guess at the order of its claims.
        sc.slots_order.clear();
        sc.slots_order.extend(sc.sweep.sorted_ids().filter(|&slot| slot != NONE));
        let mut reset: Vec<u32> = Vec::new();
        let mut was_reset = vec![false; self.regions.slots()];
        while !stale.is_empty() {
            reset.clear();
            for &slot in &stale {
                if slot == NONE {
                    continue;
                }
                // Invariant: every live bubble holds one unit, so it has a claim.
                let claimed = sc.extents[sc.slot_unit[slot as usize] as usize].claim;
                if self.bubble(slot).bounds != claimed {
                    self.set_bounds(slot, claimed, BorderReason::Overlap, stats);
                    reset.push(slot);
                    was_reset[slot as usize] = true;
                }
            }
            // What a reset box overlaps now: boxes still as the sweep holds them (those reset
            // in this loop are claims, like it, so they cannot overlap it).
            stale.clear();
            for &slot in &reset {
                let b = self.bubble(slot);
                for other in sc.sweep.overlapping_with(b.world, b.bounds) {
                    if other != NONE && !was_reset[other as usize] {
                        stale.push(other);
                    }
                }
            }
        }
    }

    /// Gives a bubble a new box, indexed again.
    pub(super) fn rebound(&mut self, slot: u32, bounds: Aabb) {
        let b = self.regions.bubble_mut(slot).expect("a live slot");
        self.boxes.remove(b);
        b.bounds = bounds;
        self.boxes.insert(b);
    }

    pub(super) fn set_bounds(
        &mut self,
        slot: u32,
        bounds: Aabb,
        reason: BorderReason,
        stats: &mut TickStats,
    ) {
        self.rebound(slot, bounds);
        let b = self.bubble(slot);
        let cmd = Command::Border { bubble: b.id, bounds, reason };
        self.commands.push_back(cmd);
        stats.borders += 1;
    }
}
