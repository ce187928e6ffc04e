//! Bubbles: regions a site simulates, and how a bubble is cut across servers of its site.

use crate::geom::{Aabb, Vec3};
use crate::ids::{BubbleId, Epoch, SiteId, WorldId};
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

/// Load bookkeeping for the within-site split and merge of SPEC section 4.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LoadState {
    pub(crate) overloaded_since: Option<Time>,
    pub(crate) low_since: Option<Time>,
    pub(crate) last_change: Option<Time>,
    /// Latest tick rate reported per part (by the game servers); `None` until reported.
    pub(crate) tps: Vec<Option<f64>>,
}

/// A region of the universe delegated to a site. Its id never changes while it lives.
#[derive(Clone, Debug, PartialEq)]
pub struct Bubble {
    pub id: BubbleId,
    pub site: SiteId,
    pub world: WorldId,
    pub bounds: Aabb,
    /// The epoch of its current lease.
    pub epoch: Epoch,
    pub hysteresis: Hysteresis,
    pub created_at: Time,
    /// Within-site cuts, most recent last; `cuts.len() + 1` servers simulate it.
    pub cuts: Vec<Cut>,
    /// Counted players inside, as of the last tick.
    pub players: u32,
    /// Set when its lease expired (the site stopped renewing): it waits for a failover.
    pub stalled_since: Option<Time>,
    pub(crate) load: LoadState,
}

impl Bubble {
    /// Number of game servers of its site simulating it.
    pub fn servers(&self) -> u32 {
        self.cuts.len() as u32 + 1
    }

    /// The boxes each server simulates, in part order.
    pub fn parts(&self) -> Vec<Aabb> {
        parts_of(self.bounds, &self.cuts)
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
/// axis. `groups` gives each group's box. Returns `(axis, at, gap width)`, or `None` when every
/// axis is covered end to end by overlapping groups (nothing can be cut without cutting a group).
pub fn widest_gap(groups: &[Aabb]) -> Option<(usize, f64, f64)> {
    let mut best: Option<(usize, f64, f64)> = None;
    let mut spans: Vec<(f64, f64)> = Vec::with_capacity(groups.len());
    for axis in 0..3 {
        spans.clear();
        spans.extend(groups.iter().map(|g| (g.min.axis(axis), g.max.axis(axis))));
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut reach = f64::NEG_INFINITY;
        for &(lo, hi) in &spans {
            if reach.is_finite() && lo > reach {
                let width = lo - reach;
                if best.is_none_or(|b| width > b.2) {
                    best = Some((axis, (lo + reach) / 2.0, width));
                }
            }
            reach = reach.max(hi);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(x0: f64, x1: f64) -> Aabb {
        Aabb {
            min: Vec3::new(x0, 0.0, 0.0),
            max: Vec3::new(x1, 10.0, 10.0),
        }
    }

    #[test]
    fn widest_gap_picks_the_largest_hole_and_never_cuts_a_group() {
        let groups = [
            boxed(0.0, 10.0),
            boxed(5.0, 20.0),
            boxed(100.0, 110.0),
            boxed(30.0, 40.0),
        ];
        let (axis, at, width) = widest_gap(&groups).unwrap();
        assert_eq!((axis, at, width), (0, 70.0, 60.0));
        for g in &groups {
            assert!(!(g.min.x < at && at < g.max.x), "the cut crosses a group");
        }
        assert_eq!(widest_gap(&[boxed(0.0, 10.0), boxed(5.0, 20.0)]), None);
    }

    #[test]
    fn cuts_partition_the_bounds() {
        let b = Aabb {
            min: Vec3::ZERO,
            max: Vec3::new(100.0, 100.0, 100.0),
        };
        let cuts = [
            Cut {
                part: 0,
                axis: 0,
                at: 50.0,
            },
            Cut {
                part: 1,
                axis: 1,
                at: 20.0,
            },
        ];
        let parts = parts_of(b, &cuts);
        assert_eq!(parts.len(), 3);
        assert_eq!(part_of(&parts, Vec3::new(10.0, 90.0, 5.0)), 0);
        assert_eq!(part_of(&parts, Vec3::new(60.0, 10.0, 5.0)), 1);
        assert_eq!(part_of(&parts, Vec3::new(60.0, 30.0, 5.0)), 2);
    }
}
