//! Sweep and prune over boxes: which boxes of the same world overlap, found by sorting them
//! along x and sweeping them (each tick: the units' claims, then the regions' boxes).

use super::*;

/// Finds the overlapping pairs among boxes of the same world: boxes are sorted by (world,
/// min x, tie-break) packed in one integer, then swept along x. Each entry holds its whole box,
/// so the sweep reads one dense array in order. Keeps its buffers from tick to tick, and its
/// sorted boxes until the next `clear`, to find what overlaps one more box
/// ([`Sweep::overlapping_with`]).
#[derive(Debug, Default)]
pub(super) struct Sweep {
    /// The boxes pushed since the last `clear`; sorted by the last sweep.
    entries: Vec<Entry>,
    pairs: Vec<(u32, u32)>,
    /// The widest box along x.
    widest: f64,
    /// Which ids [`Sweep::push_guessed`] pushed.
    seen: Vec<bool>,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// (world, min x, tie-break): [`sort_key`].
    key: u128,
    bx: Aabb,
    id: u32,
}

/// f64 → u64 preserving order (no NaN here: positions are checked at the door).
fn ordered(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 { !b } else { b | 1 << 63 }
}

/// (world, min x as [`ordered`], tie-break) in one integer, ordered as that tuple.
fn sort_key(world: WorldId, min_x: f64, tie: u32) -> u128 {
    u128::from(world.0) << 96 | u128::from(ordered(min_x)) << 32 | u128::from(tie)
}

/// Sorts `v` by key by insertion, giving up (and returning false) after `budget` steps.
fn insertion_sort(v: &mut [Entry], budget: usize) -> bool {
    let mut steps = 0;
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && v[j - 1].key > v[j].key {
            v.swap(j - 1, j);
            j -= 1;
            steps += 1;
            if steps > budget {
                return false;
            }
        }
    }
    true
}

/// The world and the min x of a [`sort_key`].
fn unkey(key: u128) -> (u32, u64) {
    ((key >> 96) as u32, (key >> 32) as u64)
}

impl Sweep {
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.widest = 0.0;
    }

    /// Pushes a box; boxes with the same world and min x sort in push order.
    pub(super) fn push(&mut self, world: WorldId, bx: Aabb, id: u32) {
        let tie = self.entries.len() as u32;
        self.push_tied(world, bx, id, tie);
    }

    fn push_tied(&mut self, world: WorldId, bx: Aabb, id: u32, tie: u32) {
        self.widest = self.widest.max(bx.max.x - bx.min.x);
        self.entries.push(Entry { key: sort_key(world, bx.min.x, tie), bx, id });
    }

    /// Pushes `n` boxes with ids `0..n` (`of(id)` gives one's world and box): first those
    /// `guess` lists (ids out of range or repeated are passed over), then the others in id
    /// order. Boxes with the same world and min x sort by id, so where sorting starts from
    /// changes nothing but its time.
    pub(super) fn push_guessed(
        &mut self,
        n: usize,
        guess: &[u32],
        of: impl Fn(usize) -> (WorldId, Aabb),
    ) {
        let mut seen = std::mem::take(&mut self.seen);
        seen.clear();
        seen.resize(n, false);
        let listed = guess.iter().copied().filter(|&id| (id as usize) < n);
        for id in listed.chain(0..n as u32) {
            if !std::mem::replace(&mut seen[id as usize], true) {
                let (world, bx) = of(id as usize);
                self.push_tied(world, bx, id, id);
            }
        }
        self.seen = seen;
    }

    /// The ids of every overlapping pair pushed since the last `clear`.
    pub(super) fn overlapping(&mut self) -> &[(u32, u32)] {
        self.sweep(false)
    }

    /// [`Sweep::overlapping`], for boxes pushed in nearly sorted order (by world, then min x):
    /// they are sorted by insertion, unless that takes too many steps. The result is the same.
    pub(super) fn overlapping_nearly_sorted(&mut self) -> &[(u32, u32)] {
        self.sweep(true)
    }

    fn sweep(&mut self, nearly_sorted: bool) -> &[(u32, u32)] {
        // Keys end with a tie-break: whatever order the boxes were pushed in, they end sorted
        // the same.
        let budget = 4 * self.entries.len();
        if !(nearly_sorted && insertion_sort(&mut self.entries, budget)) {
            self.entries.sort_unstable_by_key(|e| e.key);
        }
        self.pairs.clear();
        for (k, a) in self.entries.iter().enumerate() {
            let world = unkey(a.key).0;
            for b in &self.entries[k + 1..] {
                if unkey(b.key).0 != world || b.bx.min.x >= a.bx.max.x {
                    break;
                }
                if a.bx.overlaps(&b.bx) {
                    self.pairs.push((a.id, b.id));
                }
            }
        }
        &self.pairs
    }

    /// The ids of the boxes in the order the last sweep sorted them.
    pub(super) fn sorted_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.iter().map(|e| e.id)
    }

    /// The ids of the boxes sorted by the last [`Sweep::overlapping`] that overlap `bx`, in
    /// sorted order. Reads only the boxes whose x range can reach it.
    pub(super) fn overlapping_with(
        &self,
        world: WorldId,
        bx: Aabb,
    ) -> impl Iterator<Item = u32> + '_ {
        // A box starting further left than its widest width ends before `bx` starts. Twice
        // that, so rounding cannot drop one.
        let from = sort_key(world, bx.min.x - 2.0 * self.widest, 0);
        let start = self.entries.partition_point(|e| e.key < from);
        let hi = ordered(bx.max.x);
        self.entries[start..]
            .iter()
            .take_while(move |e| unkey(e.key) < (world.0, hi))
            .filter(move |e| e.bx.overlaps(&bx))
            .map(|e| e.id)
    }
}
