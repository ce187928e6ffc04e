//! SMD's split and merge rule, for every kind of region (design.md §4, "Within a site"): a zone
//! of the core site and a part of a bubble are cut by the same function, counted by the same
//! load counter, and joined back by the same quiet counter. Only where a region is stored
//! differs (a zone in the world's tree of cuts, `zones.rs`; a bubble's parts in its list of
//! cuts, `bubble.rs`), never the rule.
//!
//! - **When.** A region holding more players than `players_per_server`, or whose server
//!   reports a tick rate below `tps_min`, for `split_after_samples` load samples is cut. A
//!   sample weighs the seconds since the previous one (a tick every 5 s weighs 5), as today's
//!   SMD weighs a slow reporter's samples. Nothing is cut or joined within `settle_ms` of the
//!   region's last change.
//! - **Where** ([`cut`]). On the axis where its players spread most: through the widest gap
//!   between consecutive players in the middle half of them if it is at least [`MIN_GAP_M`]
//!   wide, else at the median. A crowd too dense to have a gap (a market, a battle, an event) is
//!   still cut; a group cut this way stays one group for scoring (the cut is within a site,
//!   never a site border), and its players cross between the parts with [`EXIT_MARGIN_M`].
//! - **Not at all** ([`Uncut`]). Fewer than two players, every player on one point, a cut
//!   that would leave a part thinner than the exit margin, or a bubble already spread over
//!   [`MAX_PARTS`] servers: the region stays over capacity, is
//!   counted (`Mesh::regions_over_capacity`, the metric `horizon_core_regions_over_capacity`)
//!   and is tried again at the next sample, never in a loop.
//! - **Merge.** The two halves of the most recent cut whose players together stay within
//!   `merge_fill_ratio × players_per_server` for `merge_after_samples` samples are joined
//!   again: the most recent split is undone first.

use crate::config::Thresholds;
use crate::geom::{Aabb, Vec3};
use crate::time::{Span, Time};

/// A gap between two consecutive players narrower than this is no place for a cut (SMD's rule).
pub const MIN_GAP_M: f64 = 20.0;

/// How far past its part's edge a player walks before crossing into the next (SMD's
/// `out_of_zone`): one standing on a median cut does not cross back and forth with every step.
pub const EXIT_MARGIN_M: f64 = 0.4;

/// One load sample: a game server's `serverinfo` comes once a second.
pub const SAMPLE_MS: f64 = 1000.0;

/// The most servers one bubble is spread over: 64 × 75 = 4,800 players in one crowd. A part
/// over capacity beyond that is not cut ([`Uncut::TooManyParts`]).
pub const MAX_PARTS: usize = 64;

/// Why an overloaded region could not be cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Uncut {
    /// Fewer than two players: nothing to share.
    TooFew,
    /// Every player stands on one point: every cut leaves one side empty.
    Stacked,
    /// The cut would leave a part thinner than twice the exit margin.
    TooThin,
    /// The bubble is already spread over [`MAX_PARTS`] servers.
    TooManyParts,
}

/// Where SMD cuts a region of box `bounds` whose players stand at `positions`: `(axis, at)`,
/// players at `at` or beyond going to the high half. Both halves keep at least one player and
/// are at least [`EXIT_MARGIN_M`] thick.
pub fn cut(bounds: Aabb, positions: &[Vec3]) -> Result<(usize, f64), Uncut> {
    if positions.len() < 2 {
        return Err(Uncut::TooFew);
    }
    let spread = |axis: usize| {
        let (lo, hi) = positions.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.axis(axis)), hi.max(p.axis(axis)))
        });
        hi - lo
    };
    // Ties go to the lowest axis (x, then y, then z): the same players, the same cut.
    let axis = (0..3).fold(0, |best, a| if spread(a) > spread(best) { a } else { best });
    let mut v: Vec<f64> = positions.iter().map(|p| p.axis(axis)).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let (lo, hi) = (n / 4, (3 * n / 4).max(n / 4 + 1).min(n - 1));
    // Among gaps equally wide, the one nearest the median: the more even cut.
    let off_centre = |i: usize| (2 * i + 1).abs_diff(n);
    let widest = (lo..hi).max_by(|&i, &j| {
        let (wi, wj) = (v[i + 1] - v[i], v[j + 1] - v[j]);
        wi.total_cmp(&wj).then_with(|| off_centre(j).cmp(&off_centre(i)))
    });
    let at = match widest {
        Some(i) if v[i + 1] - v[i] >= MIN_GAP_M => (v[i] + v[i + 1]) / 2.0,
        _ => v[n / 2],
    };
    if !(v[0] < at && at <= v[n - 1]) {
        // The median is the lowest position: find the first position above it instead.
        return match v.iter().find(|&&x| x > v[0]) {
            Some(&next) => thick(bounds, axis, next),
            None => Err(Uncut::Stacked),
        };
    }
    thick(bounds, axis, at)
}

/// `(axis, at)` if both halves of `bounds` cut there are at least the exit margin thick.
fn thick(bounds: Aabb, axis: usize, at: f64) -> Result<(usize, f64), Uncut> {
    let ok =
        at - bounds.min.axis(axis) >= EXIT_MARGIN_M && bounds.max.axis(axis) - at >= EXIT_MARGIN_M;
    if ok { Ok((axis, at)) } else { Err(Uncut::TooThin) }
}

/// The weight of a load sample taken at `now`, the previous one at `before`: the seconds
/// between them (the tick's period for the first one).
pub fn sample_weight(before: Option<Time>, now: Time, th: &Thresholds) -> f64 {
    match before {
        Some(t) => now.since(t).as_ms() as f64 / SAMPLE_MS,
        None => th.period_ms as f64 / SAMPLE_MS,
    }
}

/// One region's load, as SMD counts it: what its server last reported, how many samples it has
/// been overloaded for, and when it last changed (the settle window runs from there). A zone
/// has one; a bubble one per part.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Load {
    /// Counted players it held at the last sample.
    pub players: u32,
    /// The tick rate its server last reported (`None` until then, and after a change).
    pub tps: Option<f64>,
    /// Samples it has been overloaded for, in a row.
    overloaded: f64,
    /// When it was last split or merged.
    changed_at: Option<Time>,
}

impl Load {
    /// A region just made by a split or a merge at `now`, holding `players`: nothing
    /// counted yet, settling.
    pub fn changed(now: Time, players: u32) -> Load {
        Load { players, changed_at: Some(now), ..Load::default() }
    }

    /// Takes a sample of `weight`: the region holds `players`. Returns whether a split is due
    /// (overloaded for `split_after_samples` samples, and settled).
    pub fn sample(&mut self, players: u32, weight: f64, now: Time, th: &Thresholds) -> bool {
        self.players = players;
        let slow = self.tps.is_some_and(|t| t < th.tps_min);
        self.overloaded =
            if players > th.players_per_server || slow { self.overloaded + weight } else { 0.0 };
        self.overloaded >= f64::from(th.split_after_samples) && self.settled(now, th)
    }

    /// Whether it is overloaded at its last sample.
    pub fn is_overloaded(&self) -> bool {
        self.overloaded > 0.0
    }

    /// Whether its settle window is over.
    pub fn settled(&self, now: Time, th: &Thresholds) -> bool {
        self.changed_at.is_none_or(|t| now.since(t) >= Span::from_ms(th.settle_ms))
    }

    /// Samples it has been overloaded for.
    pub fn overloaded_samples(&self) -> f64 {
        self.overloaded
    }
}

/// What SMD's rule is counting for one region (a zone, a bubble's part), for operators: its
/// load against a server's capacity and the split or merge it is counting towards (the
/// console's region panel, `/status`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Counting {
    /// Counted players at the last sample, and what one server takes.
    pub players: u32,
    pub capacity: u32,
    /// The tick rate its server last reported, and the rate below which it is overloaded.
    pub tps: Option<f64>,
    pub tps_min: f64,
    /// Overloaded samples so far, of the `split_after_samples` a split needs.
    pub overloaded_samples: f64,
    pub split_after_samples: u32,
    /// Seconds left of the settle window after its last change (0: settled).
    pub settle_left_s: f64,
    /// The most recent cut this region is a half of, when both halves still stand: the other
    /// half, and the quiet samples so far of the `merge_after_samples` a merge needs.
    pub merge: Option<MergeCounting>,
}

/// The merge a region counts towards: with `with` (a zone's id, or a bubble's part index).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MergeCounting {
    pub with: u64,
    pub quiet_samples: f64,
    pub merge_after_samples: u32,
}

impl Load {
    /// What it counts at `now`, with the merge it counts towards.
    pub fn counting(&self, merge: Option<MergeCounting>, now: Time, th: &Thresholds) -> Counting {
        let settle = Span::from_ms(th.settle_ms);
        let left = self.changed_at.map_or(0.0, |t| {
            let since = now.since(t);
            if since >= settle { 0.0 } else { (settle.as_ms() - since.as_ms()) as f64 / 1000.0 }
        });
        Counting {
            players: self.players,
            capacity: th.players_per_server,
            tps: self.tps,
            tps_min: th.tps_min,
            overloaded_samples: self.overloaded,
            split_after_samples: th.split_after_samples,
            settle_left_s: left,
            merge,
        }
    }
}

/// The samples the two halves of a cut have stayed quiet for together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Quiet(f64);

impl Quiet {
    /// Takes a sample of `weight`: the halves hold `players` together. Returns whether joining
    /// them is due (quiet for `merge_after_samples` samples; the caller checks both settled).
    pub fn sample(&mut self, players: u32, weight: f64, th: &Thresholds) -> bool {
        let fill = th.merge_fill_ratio * f64::from(th.players_per_server);
        self.0 = if f64::from(players) <= fill { self.0 + weight } else { 0.0 };
        self.0 >= f64::from(th.merge_after_samples)
    }

    /// Samples so far.
    pub fn samples(self) -> f64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field() -> Aabb {
        Aabb { min: Vec3::new(-1000.0, -1000.0, -10.0), max: Vec3::new(1000.0, 1000.0, 10.0) }
    }

    #[test]
    fn a_wide_gap_in_the_middle_half_is_where_the_cut_goes() {
        // 10 players at x 0..9, 10 at x 100..109: a 91 m gap between them.
        let ps: Vec<Vec3> = (0..20)
            .map(|i| Vec3::new(if i < 10 { i as f64 } else { 90.0 + i as f64 }, 0.0, 0.0))
            .collect();
        assert_eq!(cut(field(), &ps), Ok((0, 54.5)));
    }

    #[test]
    fn a_dense_crowd_is_cut_at_the_median() {
        // 160 players on a 16 × 10 grid 2 m apart: no gap of 20 m anywhere.
        let ps: Vec<Vec3> = (0..160)
            .map(|i| Vec3::new((i % 16) as f64 * 2.0, (i / 16) as f64 * 2.0, 0.0))
            .collect();
        let (axis, at) = cut(field(), &ps).unwrap();
        assert_eq!((axis, at), (0, 16.0), "x spreads most; the median column");
        let high = ps.iter().filter(|p| p.axis(axis) >= at).count();
        assert_eq!(high, 80, "an even cut");
    }

    #[test]
    fn of_two_gaps_as_wide_the_one_nearer_the_median_is_cut() {
        // Four groups of 30, 600 m apart: the gaps at 25 % and 50 % are as wide.
        let ps: Vec<Vec3> = (0..120)
            .map(|i| Vec3::new((i / 30) as f64 * 600.0 + (i % 6) as f64, 0.0, 0.0))
            .collect();
        let (_, at) = cut(field(), &ps).unwrap();
        assert_eq!(ps.iter().filter(|p| p.x >= at).count(), 60, "cut at {at}");
    }

    #[test]
    fn a_gap_narrower_than_20_m_does_not_count() {
        let ps: Vec<Vec3> = (0..8).map(|i| Vec3::new(i as f64 * 19.0, 0.0, 0.0)).collect();
        assert_eq!(cut(field(), &ps), Ok((0, 4.0 * 19.0)), "the median, not a gap");
    }

    #[test]
    fn players_stacked_on_one_point_or_too_few_are_not_cut() {
        let one = Vec3::new(5.0, 5.0, 0.0);
        assert_eq!(cut(field(), &[one; 100]), Err(Uncut::Stacked));
        assert_eq!(cut(field(), &[one]), Err(Uncut::TooFew));
        // Most on one point, a few beside: the cut keeps players on both sides.
        let mut ps = vec![one; 100];
        ps.push(Vec3::new(8.0, 5.0, 0.0));
        let (axis, at) = cut(field(), &ps).unwrap();
        assert_eq!((axis, at), (0, 8.0));
    }

    #[test]
    fn a_region_thinner_than_twice_the_margin_is_not_cut() {
        let thin = Aabb { min: Vec3::new(0.0, 0.0, 0.0), max: Vec3::new(0.6, 0.6, 0.6) };
        let ps = [Vec3::new(0.1, 0.3, 0.3), Vec3::new(0.5, 0.3, 0.3)];
        assert_eq!(cut(thin, &ps), Err(Uncut::TooThin));
    }

    #[test]
    fn samples_weigh_the_time_between_them_and_the_settle_window_holds_a_split() {
        let th = Thresholds::default();
        let mut load = Load::changed(Time::ZERO, 0);
        // 5 s ticks: 10 samples after two overloaded ticks, but settling until 15 s.
        assert!(!load.sample(80, 5.0, Time::from_secs(5), &th));
        assert!(!load.sample(80, 5.0, Time::from_secs(10), &th), "still settling");
        assert!(load.sample(80, 5.0, Time::from_secs(15), &th));
        assert!(!load.sample(75, 5.0, Time::from_secs(20), &th), "75 fits: the count restarts");
        assert_eq!(load.overloaded_samples(), 0.0);
        load.tps = Some(12.0);
        assert!(!load.sample(10, 5.0, Time::from_secs(25), &th));
        assert!(load.sample(10, 5.0, Time::from_secs(30), &th), "a slow server splits too");
    }

    #[test]
    fn two_quiet_halves_are_joined_after_the_merge_samples() {
        let th = Thresholds::default();
        let mut q = Quiet::default();
        for _ in 0..5 {
            assert!(!q.sample(60, 5.0, &th), "60 ≤ 0.8 × 75");
        }
        assert!(q.sample(60, 5.0, &th), "30 samples");
        assert!(!q.sample(61, 5.0, &th), "61 > 60: the count restarts");
        assert_eq!(q.samples(), 0.0);
    }
}
