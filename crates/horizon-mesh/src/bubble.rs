//! Bubbles: regions a site simulates, and how a bubble is cut across servers of its site.

use crate::geom::{Aabb, Vec3};
use crate::region::Region;
use crate::scoring::Hysteresis;
use crate::time::Time;

/// One axis-aligned cut of a bubble part; part indices follow the order cuts were made.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Cut {
    /// The part that was cut; its low half keeps this index, the high half is appended.
    pub part: u16,
    pub axis: u8,
    pub at: f64,
}

/// Load bookkeeping for the within-site split and merge of design.md §4.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LoadState {
    pub(crate) overloaded_since: Option<Time>,
    pub(crate) low_since: Option<Time>,
    pub(crate) last_change: Option<Time>,
    /// Latest tick rate reported per part (by the game servers); `None` until reported.
    pub(crate) tps: Vec<Option<f64>>,
}

/// A region of the universe delegated to a site, around one unit of players.
pub type Bubble = Region<BubbleState>;

/// What only a bubble has.
#[derive(Clone, Debug, PartialEq)]
pub struct BubbleState {
    pub hysteresis: Hysteresis,
    pub created_at: Time,
    /// Within-site cuts, most recent last; `cuts.len() + 1` servers simulate it.
    pub cuts: Vec<Cut>,
    /// Taken back after a core restart: kept while empty until then, so that its players'
    /// agents have time to re-register and say who plays in it.
    pub(crate) kept_empty_until: Option<Time>,
    pub(crate) load: LoadState,
}

impl Bubble {
    /// The seats it takes on its site's game servers: its players, and at least one (an empty
    /// bubble still runs somewhere).
    pub fn seats(&self) -> u32 {
        self.players.max(1)
    }

    /// Number of game servers of its site simulating it.
    pub fn servers(&self) -> u32 {
        self.kind.cuts.len() as u32 + 1
    }

    /// The tick rate last reported for each part (`None` until its server reported one since
    /// the last split or merge).
    pub fn part_tps(&self) -> &[Option<f64>] {
        &self.kind.load.tps
    }

    /// The boxes each server simulates, in part order.
    pub fn parts(&self) -> Vec<Aabb> {
        parts_of(self.bounds, &self.kind.cuts)
    }
}

/// Applies `cuts` in order to `bounds`.
pub fn parts_of(bounds: Aabb, cuts: &[Cut]) -> Vec<Aabb> {
    let mut parts = vec![bounds];
    for c in cuts {
        let (low, high) = parts[c.part as usize].cut(c.axis as usize, c.at);
        parts[c.part as usize] = low;
        parts.push(high);
    }
    parts
}

/// The index of the part holding `p` (the last part on shared faces; part 0 if outside all).
pub fn part_of(parts: &[Aabb], p: Vec3) -> usize {
    parts.iter().rposition(|b| b.contains(p)).unwrap_or(0)
}

/// Where to cut a population so no group is cut: the widest gap between groups' extents on any
/// axis; among gaps equally wide (within a metre), the one that splits the players most evenly.
/// `groups` gives each group's box and player count. Returns `(axis, at, gap width)`, or `None`
/// when every axis is covered end to end by overlapping groups (nothing can be cut without
/// cutting a group).
pub fn widest_gap(groups: &[(Aabb, u32)]) -> Option<(usize, f64, f64)> {
    const SAME_WIDTH_M: f64 = 1.0;
    let total: u32 = groups.iter().map(|g| g.1).sum();
    // (axis, at, width, imbalance)
    let mut best: Option<(usize, f64, f64, u32)> = None;
    let mut spans: Vec<(f64, f64, u32)> = Vec::with_capacity(groups.len());
    for axis in 0..3 {
        spans.clear();
        spans.extend(groups.iter().map(|(b, n)| (b.min.axis(axis), b.max.axis(axis), *n)));
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut reach = f64::NEG_INFINITY;
        let mut below = 0u32;
        for &(lo, hi, n) in &spans {
            if reach.is_finite() && lo > reach {
                let width = lo - reach;
                let imbalance = below.abs_diff(total - below);
                let better = best.is_none_or(|b| {
                    width > b.2 + SAME_WIDTH_M || (width > b.2 - SAME_WIDTH_M && imbalance < b.3)
                });
                if better {
                    best = Some((axis, (lo + reach) / 2.0, width, imbalance));
                }
            }
            reach = reach.max(hi);
            below += n;
        }
    }
    best.map(|(axis, at, width, _)| (axis, at, width))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(x0: f64, x1: f64) -> Aabb {
        Aabb { min: Vec3::new(x0, 0.0, 0.0), max: Vec3::new(x1, 10.0, 10.0) }
    }

    #[test]
    fn widest_gap_picks_the_largest_hole_and_never_cuts_a_group() {
        let groups = [
            (boxed(0.0, 10.0), 3),
            (boxed(5.0, 20.0), 3),
            (boxed(100.0, 110.0), 3),
            (boxed(30.0, 40.0), 3),
        ];
        let (axis, at, width) = widest_gap(&groups).unwrap();
        assert_eq!((axis, at, width), (0, 70.0, 60.0));
        for (g, _) in &groups {
            assert!(!(g.min.x < at && at < g.max.x), "the cut crosses a group");
        }
        assert_eq!(widest_gap(&[(boxed(0.0, 10.0), 1), (boxed(5.0, 20.0), 1)]), None);
    }

    #[test]
    fn equal_gaps_are_broken_towards_the_even_split() {
        let groups: Vec<(Aabb, u32)> =
            (0..4).map(|g| (boxed(g as f64 * 100.0, g as f64 * 100.0 + 10.0), 30)).collect();
        assert_eq!(widest_gap(&groups), Some((0, 155.0, 90.0)));
    }

    #[test]
    fn cuts_partition_the_bounds() {
        let b = Aabb { min: Vec3::ZERO, max: Vec3::new(100.0, 100.0, 100.0) };
        let cuts = [Cut { part: 0, axis: 0, at: 50.0 }, Cut { part: 1, axis: 1, at: 20.0 }];
        let parts = parts_of(b, &cuts);
        assert_eq!(parts.len(), 3);
        assert_eq!(part_of(&parts, Vec3::new(10.0, 90.0, 5.0)), 0);
        assert_eq!(part_of(&parts, Vec3::new(60.0, 10.0, 5.0)), 1);
        assert_eq!(part_of(&parts, Vec3::new(60.0, 30.0, 5.0)), 2);
    }
}
