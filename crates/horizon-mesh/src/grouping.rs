//! Proximity grouping: connected components of "closer than the larger of our two radii".
//!
//! Two items of the same world are linked when `distance <= max(r_i, r_j)`; a group is a connected
//! component of that graph. Radii are speed-scaled (`base + speed × lead`), so a fast ship reaches
//! far while walkers reach `base`. The work is linear-ish in the number of items:
//!
//! - every item goes into a hash grid of cell size `base`; pairs closer than `base` are found in the
//!   item's cell and its 13 forward neighbours (each cell pair is visited once);
//! - items with a larger radius ("fast") are rare; each searches a coarser grid whose cell is at least
//!   its radius (cells grow by 4× per level), looking at the 27 coarse cells around it;
//! - a union-find with path halving and union by rank joins linked items; a pair already in one
//!   component is never measured again.

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

/// Groups as compressed rows: group `g` holds `members(g)`, ascending item indices.
/// Groups are ordered by their smallest member.
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

/// Octant `o` (bit 0: upper x half, bit 1: y, bit 2: z) of cell `key`.
fn octant_box(key: CellKey, o: usize, base: f64) -> Aabb {
    let half = base / 2.0;
    let min = Vec3::new(key.x as f64, key.y as f64, key.z as f64) * base
        + Vec3::new((o & 1) as f64, ((o >> 1) & 1) as f64, ((o >> 2) & 1) as f64) * half;
    Aabb {
        min,
        max: min + Vec3::new(half, half, half),
    }
}

/// The coarsest grid level; radii above `base × 4^MAX_LEVEL` are clamped to it.
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
        for key in keys {
            let next = self.keys.len() as u32;
            let b = *self.index.entry(key).or_insert(next);
            if b == next {
                self.keys.push(key);
                self.start.push(0);
            }
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
    /// Per cell: where each of its 8 octants starts in `cells.order` (and where the last ends).
    octants: Vec<[u32; 9]>,
}

impl Grouper {
    pub fn new() -> Self {
        Self::default()
    }

    /// Groups `items`; `base` is the smallest radius (the grid cell size).
    pub fn group(&mut self, items: &[Item], base: f64) -> Groups {
        assert!(
            base > 0.0 && base.is_finite(),
            "grouping base radius must be > 0"
        );
        let n = items.len();
        self.parent.clear();
        self.parent.extend(0..n as u32);
        self.rank.clear();
        self.rank.resize(n, 0);

        self.cells
            .build(items.iter().map(|it| CellKey::of(it.world, it.pos, base)));
        let mut cells = std::mem::take(&mut self.cells);
        self.sort_octants(items, base, &mut cells);

        for c in 0..cells.len() {
            // Everyone in one octant is within its diagonal (0.87 × base) of each other: linked.
            for o in 0..8 {
                let members = self.octant(&cells, c, o);
                if let Some((&first, rest)) = members.split_first() {
                    for &j in rest {
                        let (a, b) = (self.find(first), self.find(j));
                        if a != b {
                            self.union(a, b);
                        }
                    }
                }
            }
            for o1 in 0..8 {
                for o2 in o1 + 1..8 {
                    self.link_octants(items, base, &cells, (c, o1), (c, o2));
                }
            }
            let key = cells.keys[c];
            for &(dx, dy, dz) in &FORWARD {
                if let Some(d) = cells.get(&key.offset(dx, dy, dz)) {
                    for o1 in 0..8 {
                        for o2 in 0..8 {
                            self.link_octants(items, base, &cells, (c, o1), (d, o2));
                        }
                    }
                }
            }
        }

        self.link_fast(items, base, &cells);
        self.cells = cells;
        self.collect(n)
    }

    /// Orders each cell's items by octant (half-cell) and records where each octant starts.
    fn sort_octants(&mut self, items: &[Item], base: f64, cells: &mut Buckets) {
        let half = base / 2.0;
        let octant_of = |i: u32, key: CellKey| -> usize {
            let p = items[i as usize].pos;
            let lo = Vec3::new(key.x as f64, key.y as f64, key.z as f64) * base;
            ((p.x - lo.x >= half) as usize)
                | ((p.y - lo.y >= half) as usize) << 1
                | ((p.z - lo.z >= half) as usize) << 2
        };
        self.octants.clear();
        let mut scratch: Vec<u32> = Vec::new();
        for c in 0..cells.len() {
            let (start, end) = (cells.start[c] as usize, cells.start[c + 1] as usize);
            let key = cells.keys[c];
            let mut offsets = [start as u32; 9];
            if end - start == 1 {
                let o = octant_of(cells.order[start], key);
                offsets[o + 1..].fill(end as u32);
            } else {
                let mut counts = [0u32; 8];
                for &i in &cells.order[start..end] {
                    counts[octant_of(i, key)] += 1;
                }
                for o in 0..8 {
                    offsets[o + 1] = offsets[o] + counts[o];
                }
                let mut fill = offsets;
                scratch.clear();
                scratch.extend_from_slice(&cells.order[start..end]);
                for &i in &scratch {
                    let o = octant_of(i, key);
                    cells.order[fill[o] as usize] = i;
                    fill[o] += 1;
                }
            }
            self.octants.push(offsets);
        }
    }

    fn octant<'c>(&self, cells: &'c Buckets, c: usize, o: usize) -> &'c [u32] {
        let off = &self.octants[c];
        &cells.order[off[o] as usize..off[o + 1] as usize]
    }

    /// Links two octants if any pair of their items is close enough. Each octant is already one
    /// component, so the first link joins them all and the search stops.
    fn link_octants(
        &mut self,
        items: &[Item],
        base: f64,
        cells: &Buckets,
        (c1, o1): (usize, usize),
        (c2, o2): (usize, usize),
    ) {
        let (a, b) = (self.octant(cells, c1, o1), self.octant(cells, c2, o2));
        if a.is_empty() || b.is_empty() {
            return;
        }
        if octant_box(cells.keys[c1], o1, base).dist_sq_box(&octant_box(cells.keys[c2], o2, base))
            > base * base
        {
            return;
        }
        let (ra, rb) = (self.find(a[0]), self.find(b[0]));
        if ra == rb {
            return;
        }
        for &i in a {
            for &j in b {
                let (x, y) = (&items[i as usize], &items[j as usize]);
                if x.pos.dist_sq(y.pos) <= base * base {
                    self.union(ra, rb);
                    return;
                }
            }
        }
    }

    /// Pairs farther apart than `base` but within a fast item's radius. Work is per cell holding
    /// fast items (a moving group shares one search), on a coarse grid whose cell is at least the
    /// largest radius there, looking at the 27 coarse cells around.
    fn link_fast(&mut self, items: &[Item], base: f64, cells: &Buckets) {
        let max_radius = base * 4f64.powi(MAX_LEVEL as i32);
        let level_of = |r: f64| -> u32 {
            let mut k = 1;
            while k < MAX_LEVEL && r > base * 4f64.powi(k as i32) {
                k += 1;
            }
            k
        };
        // (level, cell, largest radius) of every cell holding a fast item.
        let mut hot: Vec<(u32, u32, f64)> = (0..cells.len())
            .filter_map(|c| {
                let r = cells
                    .bucket(c)
                    .iter()
                    .map(|&i| items[i as usize].radius)
                    .fold(0.0, f64::max);
                (r > base * (1.0 + 1e-12)).then(|| {
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
            let lo = Vec3::new(k.x as f64, k.y as f64, k.z as f64) * base;
            Aabb {
                min: lo,
                max: lo + Vec3::new(base, base, base),
            }
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
                                if items[i as usize].radius <= base {
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
        Groups {
            group_of,
            offsets,
            members,
        }
    }
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
        Item {
            world: WorldId(0),
            pos: Vec3::new(x, 0.0, 0.0),
            radius: r,
        }
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
        let items = [
            item(0.0, 300.0),
            item(250.0, 300.0),
            item(520.0, 300.0),
            item(900.0, 300.0),
        ];
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
        let items = [
            item(0.0, 30_300.0),
            item(25_000.0, 300.0),
            item(40_000.0, 300.0),
        ];
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
