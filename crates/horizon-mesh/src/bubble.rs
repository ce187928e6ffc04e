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

/// The index of the part holding `p` (the last part on shared faces; part 0 if outside all).
pub fn part_of(parts: &[Aabb], p: Vec3) -> usize {
    parts.iter().rposition(|b| b.contains(p)).unwrap_or(0)
}

/// The part of a player at `p` who was in part `current`: `current` while `p` is within
/// [`EXIT_MARGIN_M`] of its box (SMD's `out_of_zone`: one standing on a median cut does not
/// cross with every step), else [`part_of`].
pub fn part_around(parts: &[Aabb], p: Vec3, current: Option<usize>) -> usize {
    match current {
        Some(c) if parts.get(c).is_some_and(|b| b.expand(EXIT_MARGIN_M).contains(p)) => c,
        _ => part_of(parts, p),
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
        assert_eq!(part_of(&parts, Vec3::new(10.0, 90.0, 5.0)), 0);
        assert_eq!(part_of(&parts, Vec3::new(60.0, 10.0, 5.0)), 1);
        assert_eq!(part_of(&parts, Vec3::new(60.0, 30.0, 5.0)), 2);
    }

    #[test]
    fn a_player_on_a_cut_keeps_its_part_until_the_exit_margin() {
        let b = Aabb { min: Vec3::ZERO, max: Vec3::new(100.0, 100.0, 100.0) };
        let parts = parts_of(b, &[Cut { part: 0, axis: 0, at: 50.0 }]);
        let just_past = Vec3::new(50.0 + EXIT_MARGIN_M / 2.0, 5.0, 5.0);
        assert_eq!(part_around(&parts, just_past, Some(0)), 0, "within the margin");
        assert_eq!(part_around(&parts, just_past, None), 1);
        let beyond = Vec3::new(50.0 + EXIT_MARGIN_M * 2.0, 5.0, 5.0);
        assert_eq!(part_around(&parts, beyond, Some(0)), 1, "past the margin: crossed");
        assert_eq!(part_around(&parts, beyond, Some(7)), 1, "a part that is gone");
    }
}
