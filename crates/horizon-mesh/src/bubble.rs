//! Bubbles: regions a site simulates, and how a bubble is cut across servers of its site (by
//! SMD's rule, `crate::split`, as zones are).

use crate::geom::{Aabb, Vec3};
use crate::region::Region;
use crate::scoring::Hysteresis;
use crate::split::{EXIT_MARGIN_M, Load, Quiet};
use crate::time::Time;

/// One axis-aligned cut of a bubble part; part indices follow the order cuts were made.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Cut {
    /// The part that was cut; its low half keeps this index, the high half is appended.
    pub part: u16,
    pub axis: u8,
    pub at: f64,
}

/// A bubble's load, counted by SMD's rule (`crate::split`) part by part, as zones are.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LoadState {
    /// One per part, in part order (filled up to the bubble's parts at its next sample).
    pub(crate) parts: Vec<Load>,
    /// The samples the two halves of the most recent cut have stayed quiet for together.
    pub(crate) quiet: Quiet,
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
    pub fn part_tps(&self) -> Vec<Option<f64>> {
        (0..self.servers() as usize).map(|i| self.part_load(i).and_then(|l| l.tps)).collect()
    }

    /// Counted players in each part at the last sample.
    pub fn part_players(&self) -> Vec<u32> {
        (0..self.servers() as usize).map(|i| self.part_load(i).map_or(0, |l| l.players)).collect()
    }

    /// Part `part`'s load (`None` before its first sample).
    pub fn part_load(&self, part: usize) -> Option<&Load> {
        self.kind.load.parts.get(part)
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

/// The index of the part holding `p` after `cuts`: the cuts replayed in order, as a zone's
/// tree is walked, a point at a cut's `at` or beyond going to its high half (the part the cut
/// appended). Exact on faces, where a median cut puts players; a point outside the box lands
/// in the part nearest it along the cuts.
pub fn part_of(cuts: &[Cut], p: Vec3) -> usize {
    let mut part = 0;
    for (i, c) in cuts.iter().enumerate() {
        if c.part as usize == part && p.axis(c.axis as usize) >= c.at {
            part = i + 1;
        }
    }
    part
}

/// The part of a player at `p` who was in part `current` of a bubble cut by `cuts` into
/// `parts` (its [`Bubble::parts`]): `current` while `p` is within [`EXIT_MARGIN_M`] of its box
/// (SMD's `out_of_zone`: one standing on a median cut does not cross with every step), else
/// the part holding `p` ([`part_of`]).
pub fn part_around(parts: &[Aabb], cuts: &[Cut], p: Vec3, current: Option<usize>) -> usize {
    match current {
        Some(c) if parts.get(c).is_some_and(|b| b.expand(EXIT_MARGIN_M).contains(p)) => c,
        _ => part_of(cuts, p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_partition_the_bounds() {
        let b = Aabb { min: Vec3::ZERO, max: Vec3::new(100.0, 100.0, 100.0) };
        let cuts = [Cut { part: 0, axis: 0, at: 50.0 }, Cut { part: 1, axis: 1, at: 20.0 }];
        let parts = parts_of(b, &cuts);
        assert_eq!(parts.len(), 3);
        assert_eq!(part_of(&cuts, Vec3::new(10.0, 90.0, 5.0)), 0);
        assert_eq!(part_of(&cuts, Vec3::new(60.0, 10.0, 5.0)), 1);
        assert_eq!(part_of(&cuts, Vec3::new(60.0, 30.0, 5.0)), 2);
        for (i, p) in parts.iter().enumerate() {
            assert!(
                p.contains((p.min + p.max) * 0.5) && part_of(&cuts, (p.min + p.max) * 0.5) == i
            );
        }
    }

    #[test]
    fn a_player_on_a_cut_keeps_its_part_until_the_exit_margin() {
        let bounds = Aabb { min: Vec3::ZERO, max: Vec3::new(100.0, 100.0, 100.0) };
        let cuts = [Cut { part: 0, axis: 0, at: 50.0 }];
        let parts = parts_of(bounds, &cuts);
        let around = |p, current| part_around(&parts, &cuts, p, current);
        let just_below = Vec3::new(50.0 - EXIT_MARGIN_M / 2.0, 5.0, 5.0);
        assert_eq!(around(just_below, Some(1)), 1, "within the margin of part 1");
        assert_eq!(around(just_below, None), 0);
        let beyond = Vec3::new(50.0 - EXIT_MARGIN_M * 2.0, 5.0, 5.0);
        assert_eq!(around(beyond, Some(1)), 0, "past the margin: crossed");
        assert_eq!(around(beyond, Some(7)), 0, "a part that is gone");
    }

    #[test]
    fn a_point_on_a_cut_belongs_to_its_high_half_however_the_low_half_was_cut_since() {
        let b = Aabb { min: Vec3::ZERO, max: Vec3::new(100.0, 100.0, 100.0) };
        // x = 50 cut first (high half: part 1), then the low half cut again on y.
        let cuts = [Cut { part: 0, axis: 0, at: 50.0 }, Cut { part: 0, axis: 1, at: 20.0 }];
        let parts = parts_of(b, &cuts);
        let on_face = Vec3::new(50.0, 30.0, 5.0);
        assert!(parts[2].contains(on_face) && parts[1].contains(on_face), "on both faces");
        assert_eq!(part_of(&cuts, on_face), 1, "the high half of the cut it lies on");
        assert_eq!(part_of(&cuts, Vec3::new(10.0, 30.0, 5.0)), 2);
        assert_eq!(part_of(&cuts, Vec3::new(10.0, 10.0, 5.0)), 0);
    }
}
