//! Proximity grouping: connected components of "closer than the larger of our two radii".
//!
//! Two items of the same world are linked when `distance <= max(r_i, r_j)`; a group is a connected
//! component of that graph. Radii are speed-scaled (`base + speed × lead`), so a fast ship reaches
//! far while walkers reach a little more than `base`. The work is linear in the number of items:
//!
//! - items go into a hash grid of cells `2 × base` wide, each cut into 4 × 4 × 4 sub-cells
//!   `base / 2` wide. Items sharing a sub-cell are within `0.87 × base` of each other: linked
//!   without measuring. Each cell's items are sorted by sub-cell into *runs*;
//! - runs of a cell and of its 13 forward neighbours (each cell pair once) are compared when their
//!   sub-cells are within reach; a run is one component, so the first link found ends the search;
//! - items reaching farther than a cell (fast ships) are rare; each cell holding one searches a
//!   coarser grid whose cell is at least its reach (4× per level), in the 27 coarse cells around.
//!
//! A union-find with path halving and union by rank joins linked items.

use rustc_hash::FxHashMap;

use crate::geom::{Aabb, Vec3};
use crate::ids::WorldId;

/// One thing to group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Item {
    pub world: WorldId,
    pub pos: Vec3,
    /// Link radius in metres, at least the `base` passed to [`Grouper::group`].
    pub radius: f64,
}

/// Groups as compressed rows: group `g` holds `members(g)`. From [`Grouper::group`], members are
/// ascending item indices and groups are ordered by their smallest member.
#[derive(Clone, Debug, Default)]
pub struct Groups {
    group_of: Vec<u32>,
    offsets: Vec<u32>,
    members: Vec<u32>,
}

impl Groups {
    /// Number of groups.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The item indices of group `g`, ascending.
    pub fn members(&self, g: usize) -> &[u32] {
        &self.members[self.offsets[g] as usize..self.offsets[g + 1] as usize]
    }

    /// The group of item `i`.
    pub fn group_of(&self, i: usize) -> usize {
        self.group_of[i] as usize
    }
}

/// The coarsest grid level; reaches above `cell × 4^MAX_LEVEL` are clamped to it.
const MAX_LEVEL: u32 = 12;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct CellKey {
    world: u32,
    x: i32,
    y: i32,
    z: i32,
}

impl CellKey {
    fn of(world: WorldId, p: Vec3, cell: f64) -> Self {
        // `as` saturates: positions beyond ±2^31 cells share the edge cells, which stays correct
        // (only slower).
        CellKey {
            world: world.0,
            x: (p.x / cell).floor() as i32,
            y: (p.y / cell).floor() as i32,
            z: (p.z / cell).floor() as i32,
        }
    }

    fn offset(self, dx: i32, dy: i32, dz: i32) -> Self {
        CellKey {
            world: self.world,
            x: self.x.saturating_add(dx),
            y: self.y.saturating_add(dy),
            z: self.z.saturating_add(dz),
        }
    }

    fn coarse(self, scale: i32) -> Self {
        CellKey {
            world: self.world,
            x: self.x.div_euclid(scale),
            y: self.y.div_euclid(scale),
            z: self.z.div_euclid(scale),
        }
    }
}

/// Items bucketed by key, as compressed rows (a counting sort).
#[derive(Debug, Default)]
struct Buckets {
    index: FxHashMap<CellKey, u32>,
    keys: Vec<CellKey>,
    start: Vec<u32>,
    order: Vec<u32>,
    bucket_of: Vec<u32>,
}

impl Buckets {
    fn build(&mut self, keys: impl ExactSizeIterator<Item = CellKey>) {
        self.index.clear();
        self.keys.clear();
        self.bucket_of.clear();
        self.start.clear();
        let n = keys.len();
        let mut last: Option<(CellKey, u32)> = None;
        for key in keys {
            // Neighbours in the input often share a cell: skip the hash for a repeated key.
            let b = match last {
                Some((k, b)) if k == key => b,
                _ => {
                    let next = self.keys.len() as u32;
                    let b = *self.index.entry(key).or_insert(next);
                    if b == next {
                        self.keys.push(key);
                        self.start.push(0);
                    }
                    last = Some((key, b));
                    b
                }
            };
            self.start[b as usize] += 1;
            self.bucket_of.push(b);
        }
        // Exclusive prefix sums, then place items.
        let mut acc = 0u32;
        for s in self.start.iter_mut() {
            let c = *s;
            *s = acc;
            acc += c;
        }
        self.start.push(acc);
        self.order.clear();
        self.order.resize(n, 0);
        let mut fill: Vec<u32> = self.start[..self.keys.len()].to_vec();
        for (i, &b) in self.bucket_of.iter().enumerate() {
            self.order[fill[b as usize] as usize] = i as u32;
            fill[b as usize] += 1;
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn bucket(&self, b: usize) -> &[u32] {
        &self.order[self.start[b] as usize..self.start[b + 1] as usize]
    }

    fn get(&self, key: &CellKey) -> Option<usize> {
        self.index.get(key).map(|&b| b as usize)
    }
}

/// Reusable grouping state: keep one and call [`Grouper::group`] every tick to avoid allocations.
#[derive(Debug, Default)]
pub struct Grouper {
    parent: Vec<u32>,
    rank: Vec<u8>,
    cells: Buckets,
    coarse: Buckets,
    /// Runs of items sharing a sub-cell, cell after cell.
    runs: Vec<Run>,
    /// Per cell: its first run (and, at `c + 1`, the end of its runs).
    cell_runs: Vec<u32>,
}

/// Items of one cell sharing one sub-cell: `cells.order[start..end]`.
#[derive(Clone, Copy, Debug)]
struct Run {
    sub: u8,
    start: u32,
    end: u32,
    /// The largest radius among them.
    reach: f64,
}

/// Sub-cells per cell along each axis.
const SUBS: usize = 4;

impl Grouper {
    pub fn new() -> Self {
        Self::default()
    }

    /// Groups `items`; `base` is the smallest radius.
    ///
    /// # Panics
    /// If `base` is not a finite number > 0 (configuration validation guarantees it).
    pub fn group(&mut self, items: &[Item], base: f64) -> Groups {
        assert!(base > 0.0 && base.is_finite(), "grouping base radius must be > 0");
        let n = items.len();
        let cell = 2.0 * base;
        self.parent.clear();
        self.parent.extend(0..n as u32);
        self.rank.clear();
        self.rank.resize(n, 0);

        self.cells.build(items.iter().map(|it| CellKey::of(it.world, it.pos, cell)));
        let mut cells = std::mem::take(&mut self.cells);
        self.build_runs(items, cell, &mut cells);

        for c in 0..cells.len() {
            let (r0, r1) = (self.cell_runs[c] as usize, self.cell_runs[c + 1] as usize);
            // A sub-cell's diagonal is 0.87 × base: its items are all linked.
            for r in r0..r1 {
                let run = self.runs[r];
                let first = cells.order[run.start as usize];
                for k in run.start + 1..run.end {
                    let (a, b) = (self.find(first), self.find(cells.order[k as usize]));
                    if a != b {
                        self.union(a, b);
                    }
                }
            }
            let key = cells.keys[c];
            for a in r0..r1 {
                for b in a + 1..r1 {
                    self.link_runs(items, &cells, (key, a), (key, b), cell);
                }
            }
            for &(dx, dy, dz) in &FORWARD {
                if let Some(d) = cells.get(&key.offset(dx, dy, dz)) {
                    let other = cells.keys[d];
                    for a in r0..r1 {
                        for b in self.cell_runs[d] as usize..self.cell_runs[d + 1] as usize {
                            self.link_runs(items, &cells, (key, a), (other, b), cell);
                        }
                    }
                }
            }
        }

        self.link_fast(items, cell, &cells);
        self.cells = cells;
        self.collect(n)
    }

    /// Sorts each cell's items by sub-cell and records the runs.
    fn build_runs(&mut self, items: &[Item], cell: f64, cells: &mut Buckets) {
        let sub = cell / SUBS as f64;
        let sub_of = |i: u32, key: CellKey| -> u8 {
            let p = items[i as usize].pos;
            let lo = Vec3::new(key.x as f64, key.y as f64, key.z as f64) * cell;
            let axis = |v: f64| ((v / sub) as usize).min(SUBS - 1);
            let (x, y, z) = (axis(p.x - lo.x), axis(p.y - lo.y), axis(p.z - lo.z));
            (x + SUBS * y + SUBS * SUBS * z) as u8
        };
        self.runs.clear();
        self.cell_runs.clear();
        let mut keyed: Vec<(u8, u32)> = Vec::new();
        for c in 0..cells.len() {
            self.cell_runs.push(self.runs.len() as u32);
            let (start, end) = (cells.start[c] as usize, cells.start[c + 1] as usize);
            let key = cells.keys[c];
            keyed.clear();
            keyed.extend(cells.order[start..end].iter().map(|&i| (sub_of(i, key), i)));
            if keyed.len() > 1 {
                keyed.sort_unstable();
            }
            for (k, &(_, i)) in keyed.iter().enumerate() {
                cells.order[start + k] = i;
            }
            let mut first = start;
            for run in keyed.chunk_by(|a, b| a.0 == b.0) {
                let reach = run.iter().map(|&(_, i)| items[i as usize].radius).fold(0.0, f64::max);
                self.runs.push(Run {
                    sub: run[0].0,
                    start: first as u32,
                    end: (first + run.len()) as u32,
                    reach,
                });
                first += run.len();
            }
        }
        self.cell_runs.push(self.runs.len() as u32);
    }

    /// Links two runs if any pair of their items is within reach. Each run is already one
    /// component, so the first link joins them all and the search stops.
    fn link_runs(
        &mut self,
        items: &[Item],
        cells: &Buckets,
        (ka, a): (CellKey, usize),
        (kb, b): (CellKey, usize),
        cell: f64,
    ) {
        let (ra, rb) = (self.runs[a], self.runs[b]);
        let reach = ra.reach.max(rb.reach);
        if sub_box(ka, ra.sub, cell).dist_sq_box(&sub_box(kb, rb.sub, cell)) > reach * reach {
            return;
        }
        let (ca, cb) =
            (self.find(cells.order[ra.start as usize]), self.find(cells.order[rb.start as usize]));
        if ca == cb {
            return;
        }
        for &i in &cells.order[ra.start as usize..ra.end as usize] {
            for &j in &cells.order[rb.start as usize..rb.end as usize] {
                let (x, y) = (&items[i as usize], &items[j as usize]);
                let r = x.radius.max(y.radius);
                if x.pos.dist_sq(y.pos) <= r * r {
                    self.union(ca, cb);
                    return;
                }
            }
        }
    }

    /// Pairs farther apart than a cell but within a fast item's radius. Work is per cell holding
    /// fast items (a group moving together shares one search), on a coarse grid whose cell is at
    /// least the largest radius there, looking at the 27 coarse cells around.
    fn link_fast(&mut self, items: &[Item], cell: f64, cells: &Buckets) {
        let max_radius = cell * 4f64.powi(MAX_LEVEL as i32);
        let level_of = |r: f64| -> u32 {
            let mut k = 1;
            while k < MAX_LEVEL && r > cell * 4f64.powi(k as i32) {
                k += 1;
            }
            k
        };
        // (level, cell, largest radius) of every cell holding a fast item.
        let mut hot: Vec<(u32, u32, f64)> = (0..cells.len())
            .filter_map(|c| {
                let runs = &self.runs[self.cell_runs[c] as usize..self.cell_runs[c + 1] as usize];
                let r = runs.iter().map(|r| r.reach).fold(0.0, f64::max);
                (r > cell).then(|| {
                    let r = r.min(max_radius);
                    (level_of(r), c as u32, r)
                })
            })
            .collect();
        if hot.is_empty() {
            return;
        }
        hot.sort_by_key(|h| (h.0, h.1));
        let cell_box = |c: usize| {
            let k = cells.keys[c];
            let lo = Vec3::new(k.x as f64, k.y as f64, k.z as f64) * cell;
            Aabb { min: lo, max: lo + Vec3::new(cell, cell, cell) }
        };
        let mut coarse = std::mem::take(&mut self.coarse);
        let mut built = None;
        for &(level, c, reach) in &hot {
            let scale = 4i32.pow(level);
            if built != Some(level) {
                coarse.build(cells.keys.iter().map(|k| k.coarse(scale)));
                built = Some(level);
            }
            let here = cell_box(c as usize);
            let home = cells.keys[c as usize].coarse(scale);
            for dx in -1..=1 {
                for dy in -1..=1 {
                    for dz in -1..=1 {
                        let Some(cb) = coarse.get(&home.offset(dx, dy, dz)) else {
                            continue;
                        };
                        for &d in coarse.bucket(cb) {
                            if here.dist_sq_box(&cell_box(d as usize)) > reach * reach {
                                continue;
                            }
                            for &i in cells.bucket(c as usize) {
                                if items[i as usize].radius <= cell {
                                    continue;
                                }
                                for &j in cells.bucket(d as usize) {
                                    if i != j {
                                        self.link(items, i, j);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        self.coarse = coarse;
    }

    #[inline]
    fn link(&mut self, items: &[Item], i: u32, j: u32) {
        let (ri, rj) = (self.find(i), self.find(j));
        if ri == rj {
            return;
        }
        let (a, b) = (&items[i as usize], &items[j as usize]);
        let r = a.radius.max(b.radius);
        if a.pos.dist_sq(b.pos) <= r * r {
            self.union(ri, rj);
        }
    }

    #[inline]
    fn find(&mut self, mut x: u32) -> u32 {
        while self.parent[x as usize] != x {
            let grand = self.parent[self.parent[x as usize] as usize];
            self.parent[x as usize] = grand;
            x = grand;
        }
        x
    }

    fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.rank[a as usize], self.rank[b as usize]);
        if ra < rb {
            self.parent[a as usize] = b;
        } else {
            self.parent[b as usize] = a;
            if ra == rb {
                self.rank[a as usize] += 1;
            }
        }
    }

    fn collect(&mut self, n: usize) -> Groups {
        let roots: Vec<u32> = (0..n as u32).map(|i| self.find(i)).collect();
        Groups::from_labels(&roots, n)
    }
}

impl Groups {
    /// Joins groups: group `g` joins group `root[g]`, where every root is its own root and is the
    /// smallest group it gathers. Joined groups are ordered by root; members keep the order of
    /// the groups they came from. Linear and sequential: no pass over labels per item.
    pub fn join(&self, root: &[u32]) -> Groups {
        const NONE: u32 = u32::MAX;
        let n = self.len();
        let mut joined_of = vec![NONE; n];
        let mut sizes: Vec<u32> = Vec::new();
        for (g, &r) in root.iter().enumerate().take(n) {
            let r = r as usize;
            if joined_of[r] == NONE {
                joined_of[r] = sizes.len() as u32;
                sizes.push(0);
            }
            sizes[joined_of[r] as usize] += self.members(g).len() as u32;
        }
        let mut offsets = Vec::with_capacity(sizes.len() + 1);
        offsets.push(0);
        let mut acc = 0;
        for c in &sizes {
            acc += c;
            offsets.push(acc);
        }
        let mut fill = offsets[..sizes.len()].to_vec();
        let mut members = vec![0; self.members.len()];
        let mut group_of = vec![0; self.group_of.len()];
        for g in 0..n {
            let u = joined_of[root[g] as usize];
            let from = self.members(g);
            let at = fill[u as usize] as usize;
            members[at..at + from.len()].copy_from_slice(from);
            for &i in from {
                group_of[i as usize] = u;
            }
            fill[u as usize] += from.len() as u32;
        }
        Groups { group_of, offsets, members }
    }

    /// Groups items by label (`labels[i] < bound`): one group per distinct label, ordered by
    /// smallest member, members ascending.
    pub fn from_labels(labels: &[u32], bound: usize) -> Groups {
        const NONE: u32 = u32::MAX;
        let mut group_of_label = vec![NONE; bound];
        let mut group_of = Vec::with_capacity(labels.len());
        let mut counts: Vec<u32> = Vec::new();
        for &l in labels {
            let g = &mut group_of_label[l as usize];
            if *g == NONE {
                *g = counts.len() as u32;
                counts.push(0);
            }
            counts[*g as usize] += 1;
            group_of.push(*g);
        }
        let mut offsets = Vec::with_capacity(counts.len() + 1);
        let mut acc = 0;
        offsets.push(0);
        for c in &counts {
            acc += c;
            offsets.push(acc);
        }
        let mut fill = offsets[..counts.len()].to_vec();
        let mut members = vec![0; labels.len()];
        for (i, &g) in group_of.iter().enumerate() {
            members[fill[g as usize] as usize] = i as u32;
            fill[g as usize] += 1;
        }
        Groups { group_of, offsets, members }
    }
}

/// Sub-cell `sub` of cell `key`.
fn sub_box(key: CellKey, sub: u8, cell: f64) -> Aabb {
    let size = cell / SUBS as f64;
    let s = sub as usize;
    let (x, y, z) = (s % SUBS, (s / SUBS) % SUBS, s / (SUBS * SUBS));
    let min = Vec3::new(key.x as f64, key.y as f64, key.z as f64) * cell
        + Vec3::new(x as f64, y as f64, z as f64) * size;
    Aabb { min, max: min + Vec3::new(size, size, size) }
}

/// The 13 neighbour offsets that are lexicographically after (0, 0, 0): each cell pair once.
const FORWARD: [(i32, i32, i32); 13] = [
    (1, -1, -1),
    (1, -1, 0),
    (1, -1, 1),
    (1, 0, -1),
    (1, 0, 0),
    (1, 0, 1),
    (1, 1, -1),
    (1, 1, 0),
    (1, 1, 1),
    (0, 1, -1),
    (0, 1, 0),
    (0, 1, 1),
    (0, 0, 1),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn item(x: f64, r: f64) -> Item {
        Item { world: WorldId(0), pos: Vec3::new(x, 0.0, 0.0), radius: r }
    }

    /// Reference: O(n²) components.
    fn brute(items: &[Item]) -> Vec<usize> {
        let n = items.len();
        let mut label: Vec<usize> = (0..n).collect();
        loop {
            let mut changed = false;
            for i in 0..n {
                for j in 0..n {
                    let (a, b) = (&items[i], &items[j]);
                    let r = a.radius.max(b.radius);
                    if a.world == b.world && a.pos.dist_sq(b.pos) <= r * r && label[j] > label[i] {
                        label[j] = label[i];
                        changed = true;
                    }
                }
            }
            if !changed {
                return label;
            }
        }
    }

    fn same_partition(groups: &Groups, reference: &[usize]) -> bool {
        let n = reference.len();
        (0..n).all(|i| {
            (0..n).all(|j| {
                (groups.group_of(i) == groups.group_of(j)) == (reference[i] == reference[j])
            })
        })
    }

    #[test]
    fn chain_links_and_gap_separates() {
        let items = [item(0.0, 300.0), item(250.0, 300.0), item(520.0, 300.0), item(900.0, 300.0)];
        let g = Grouper::new().group(&items, 300.0);
        assert_eq!(g.len(), 2);
        assert_eq!(g.members(0), &[0, 1, 2]);
        assert_eq!(g.members(1), &[3]);
    }

    #[test]
    fn worlds_never_mix() {
        let mut items = [item(0.0, 300.0), item(0.0, 300.0)];
        items[1].world = WorldId(1);
        assert_eq!(Grouper::new().group(&items, 300.0).len(), 2);
    }

    #[test]
    fn fast_ship_reaches_far() {
        // A ship at 1 km/s with a 30 s lead reaches 30.3 km.
        let items = [item(0.0, 30_300.0), item(25_000.0, 300.0), item(40_000.0, 300.0)];
        let g = Grouper::new().group(&items, 300.0);
        assert_eq!(g.len(), 2);
        assert_eq!(g.members(0), &[0, 1]);
    }

    proptest::proptest! {
        #[test]
        fn matches_brute_force(
            pts in proptest::collection::vec(
                (0u32..2, -3000.0f64..3000.0, -3000.0f64..3000.0, -50.0f64..50.0, 0.0f64..4000.0, proptest::bool::weighted(0.1)),
                0..120),
        ) {
            let items: Vec<Item> = pts.iter().map(|&(w, x, y, z, extra, fast)| Item {
                world: WorldId(w),
                pos: Vec3::new(x, y, z),
                radius: 300.0 + if fast { extra } else { 0.0 },
            }).collect();
            let groups = Grouper::new().group(&items, 300.0);
            proptest::prop_assert!(same_partition(&groups, &brute(&items)));
        }

        /// Dense crowds: many items per cell and per octant.
        #[test]
        fn matches_brute_force_in_crowds(
            pts in proptest::collection::vec((-500.0f64..500.0, -500.0f64..500.0, -5.0f64..5.0), 0..150),
            base in 20.0f64..300.0,
        ) {
            let items: Vec<Item> = pts.iter().map(|&(x, y, z)| Item {
                world: WorldId(0),
                pos: Vec3::new(x, y, z),
                radius: base,
            }).collect();
            let groups = Grouper::new().group(&items, base);
            proptest::prop_assert!(same_partition(&groups, &brute(&items)));
        }

        /// Items at the same position are always one group.
        #[test]
        fn identical_positions_are_one_group(
            x in -1e7f64..1e7, y in -1e7f64..1e7, n in 2usize..40, base in 1.0f64..5_000.0,
        ) {
            let items = vec![Item { world: WorldId(3), pos: Vec3::new(x, y, 0.0), radius: base }; n];
            proptest::prop_assert_eq!(Grouper::new().group(&items, base).len(), 1);
        }
    }
}
