//! Proximity grouping: connected components of "closer than the larger of our two radii".
//!
//! Two items of the same world are linked when `distance <= max(r_i, r_j)`; a group is a connected
//! component of that graph. Radii are speed-scaled (`base + speed × lead`), so a fast ship reaches
//! far while walkers reach a little more than `base`. The work is linear in the number of items,
//! with no hash lookup once the grid is built:
//!
//! - items go into sub-cells `base / 2` wide, so items sharing one are within `0.87 × base` of
//!   each other: a sub-cell's items (a *run*) are linked without measuring. Cells are 4 × 4 × 4
//!   sub-cells (`2 × base` wide), so an item at rest reaches no farther than the next cell;
//! - a [`Grouper`] remembers the sub-cell of each item index from its last call: between two
//!   ticks most items stay in theirs and are placed without hashing, and only new sub-cells are
//!   sorted into the occupied ones; told which items changed ([`Grouper::regroup_into`]), it
//!   looks at those alone;
//! - occupied sub-cells are sorted by (world, cell, sub-cell): a cell is a range of runs. The 13
//!   forward neighbours of every cell (each cell pair once) are the next cell along z and four
//!   columns of three cells along z, each a range of the sorted cells that a cursor finds,
//!   moving only forward — adding an offset keeps the order;
//! - runs of a cell and of its neighbours are compared when their sub-cells are within reach; a
//!   run is one component, so the first link found ends the search;
//! - items reaching farther than a cell (fast ships) are rare; each cell holding one looks at the
//!   cells within its reach, found by binary search in the sorted cells (a slab of columns).
//!
//! A union-find over runs (with path halving and union by rank) joins linked runs; each item
//! then takes its run's component.
//!
//! Coordinates divided by `base / 2` must fit in ±2^30 (`|p| < 2^29 × base`, checked where
//! positions come in: [`Grouper::max_coordinate`]).

use std::sync::OnceLock;

use rustc_hash::FxHashMap;

use crate::geom::{Aabb, Vec3};
use crate::ids::WorldId;

mod cells;
use cells::*;

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
    /// How many items were grouped (those left out included).
    items: usize,
    offsets: Vec<u32>,
    members: Vec<u32>,
    /// Per item, its group: found on first use (the tick never asks).
    group_of: OnceLock<Vec<u32>>,
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

    /// The group of item `i` (`u32::MAX` for an item left out of grouping). The first call
    /// goes over every member.
    pub fn group_of(&self, i: usize) -> usize {
        let group_of = self.group_of.get_or_init(|| {
            let mut group_of = vec![u32::MAX; self.items];
            for g in 0..self.len() {
                for &m in self.members(g) {
                    group_of[m as usize] = g as u32;
                }
            }
            group_of
        });
        group_of[i] as usize
    }
}

/// Reusable grouping state: keep one and group with it every tick. Besides sparing allocations,
/// it remembers the sub-cells of the last call: an item whose sub-cell did not change (most of
/// them, between two ticks) is placed without hashing, and the sorted sub-cells only take in the
/// new ones. These are hints, checked on use: the result is the same whatever was grouped
/// before. [`Grouper::regroup_into`] goes further and looks only at the items the caller says
/// changed.
#[derive(Debug, Default)]
pub struct Grouper {
    parent: Vec<u32>,
    rank: Vec<u8>,
    /// Every sub-cell known (occupied now or lately) → its id.
    index: FxHashMap<Key, u32>,
    /// Per sub-cell id: what it is and holds (one cache line each).
    subs: Vec<SubCell>,
    /// Occupied sub-cell ids, sorted by key.
    sorted: Vec<u32>,
    /// Sub-cells created since ids were last given in key order ([`Grouper::sort_ids`]).
    created: usize,
    /// Per item index: its sub-cell id (`NONE` if skipped), which the next call takes as a
    /// hint, that sub-cell's world and low corner (in sub-cell units), and the item's radius
    /// in that call.
    hint: Vec<u32>,
    corner: Vec<(u32, [i32; 3])>,
    radius: Vec<f64>,
    /// Per sub-cell id: where its items go next in `order`; then its group.
    fill: Vec<u32>,
    /// Per component (a run): its smallest item, then its group number; then where the
    /// group's members go next.
    labels: Vec<u32>,
    /// A bit per item: the smallest item of a component; and that component.
    marks: Vec<u64>,
    root_at: Vec<u32>,
    /// Sub-cells occupied in this call and not in `sorted` yet.
    added: Vec<u32>,
    /// Sub-cells that lost their farthest-reaching item in this call (their reach is found
    /// again).
    dirty: Vec<u32>,
    /// The sub-cell width of the last call.
    sub: Option<f64>,
    /// Items by run, run after run.
    order: Vec<u32>,
    /// Runs in sorted order, and the cells they form.
    runs: Vec<Run>,
    cells: Vec<Cell>,
}

impl Grouper {
    pub fn new() -> Self {
        Self::default()
    }

    /// The largest coordinate (metres, any axis) [`Grouper::group`] handles exactly for `base`.
    pub fn max_coordinate(base: f64) -> f64 {
        base * f64::from(1u32 << 29)
    }

    /// Groups `items`; `base` is the smallest radius.
    ///
    /// # Panics
    /// If `base` is not a finite number > 0 (configuration validation guarantees it).
    pub fn group(&mut self, items: &[Item], base: f64) -> Groups {
        let mut groups = Groups::default();
        self.group_into(items, &[], base, &mut groups);
        groups
    }

    /// [`Grouper::group`] into `out`, reusing its buffers, leaving out every item `i` with
    /// `skip[i]` (in no group; `skip` is as long as `items`, or empty to keep them all).
    pub fn group_into(&mut self, items: &[Item], skip: &[bool], base: f64, out: &mut Groups) {
        self.grid_and_group(items, skip, None, base, out);
    }

    /// [`Grouper::group_into`] after a previous call with the same `base`, when only the items
    /// at the indices in `changed` may differ from that call (moved, changed radius, world or
    /// skip flag, or new): the grid is updated for those alone. Items past the new length are
    /// gone; indices past it in `changed` are ignored, and repeats are harmless. The groups are
    /// exactly those of [`Grouper::group_into`] (it is what runs when there is no such call).
    pub fn regroup_into(
        &mut self,
        items: &[Item],
        skip: &[bool],
        changed: &[u32],
        base: f64,
        out: &mut Groups,
    ) {
        self.grid_and_group(items, skip, Some(changed), base, out);
    }

    /// The items were renumbered between calls: the item now at index `new` is the one that
    /// was at `old_of_new[new]`, and `old_of_new` is a permutation of the last call's items.
    /// What the grouper remembers of each item follows it, so the next
    /// [`Grouper::regroup_into`] need only list the items that changed otherwise.
    ///
    /// # Panics
    /// If `old_of_new` is not as long as the last call's items (a caller's bug).
    pub fn renumber(&mut self, old_of_new: &[u32]) {
        assert_eq!(old_of_new.len(), self.hint.len(), "a permutation of the last call's items");
        self.hint = old_of_new.iter().map(|&old| self.hint[old as usize]).collect();
        self.corner = old_of_new.iter().map(|&old| self.corner[old as usize]).collect();
        self.radius = old_of_new.iter().map(|&old| self.radius[old as usize]).collect();
    }

    fn grid_and_group(
        &mut self,
        items: &[Item],
        skip: &[bool],
        changed: Option<&[u32]>,
        base: f64,
        out: &mut Groups,
    ) {
        assert!(base > 0.0 && base.is_finite(), "grouping base radius must be > 0");
        assert!(skip.is_empty() || skip.len() == items.len(), "one skip flag per item");
        let sub = base / 2.0;
        self.build_grid(items, skip, changed, sub);

        // A sub-cell's diagonal is 0.87 × base: its items are all linked, and the union-find
        // works on runs.
        let nruns = self.runs.len();
        self.parent.clear();
        self.parent.extend(0..nruns as u32);
        self.rank.clear();
        self.rank.resize(nruns, 0);

        // Runs of a cell, then of the cell and each forward neighbour. The forward neighbours
        // are the next cell along z and four columns of three cells along z, (x, y + 1),
        // (x + 1, y - 1), (x + 1, y) and (x + 1, y + 1): each column is one range of the sorted
        // cells, found by a cursor that only moves forward.
        const COLUMNS: [(i32, i32); 4] = [(0, 1), (1, -1), (1, 0), (1, 1)];
        let mut cursor = [0usize; COLUMNS.len()];
        for c in 0..self.cells.len() {
            let cell = self.cells[c];
            for a in cell.start..cell.end {
                for b in a + 1..cell.end {
                    self.link_runs(items, a, b, sub);
                }
            }
            if let Some(&d) = self.cells.get(c + 1).filter(|d| d.key == cell.key.offset(0, 0, 1)) {
                self.link_cells(items, &cell, &d, sub);
            }
            for (k, &(dx, dy)) in COLUMNS.iter().enumerate() {
                let (first, last) = (cell.key.offset(dx, dy, -1), cell.key.offset(dx, dy, 1));
                let at = &mut cursor[k];
                while *at < self.cells.len() && self.cells[*at].key < first {
                    *at += 1;
                }
                let from = *at;
                for d in from..self.cells.len() {
                    let d = self.cells[d];
                    if d.key > last {
                        break;
                    }
                    self.link_cells(items, &cell, &d, sub);
                }
            }
        }
        self.link_fast(items, sub);

        self.number_groups(out);
    }

    /// Each item takes its run's component. Components are numbered by their smallest item,
    /// found per run (a run's first item is its smallest: items are laid out in order) and read
    /// back in item order from a bitset; then one pass over the items lays out the members.
    fn number_groups(&mut self, out: &mut Groups) {
        let (n, nruns) = (self.hint.len(), self.runs.len());
        // Per sub-cell id: its component; per component (a run): its smallest item.
        let mut group_of_id = std::mem::take(&mut self.fill);
        let mut number = std::mem::take(&mut self.labels);
        number.clear();
        number.resize(nruns, NONE);
        for pos in 0..nruns {
            let root = self.find(pos as u32);
            group_of_id[self.sorted[pos] as usize] = root;
            let first = self.order[self.runs[pos].start as usize];
            number[root as usize] = number[root as usize].min(first);
        }
        self.marks.clear();
        self.marks.resize(n.div_ceil(64), 0);
        self.root_at.resize(n, 0);
        for (root, &first) in number.iter().enumerate() {
            if first != NONE {
                self.marks[first as usize / 64] |= 1 << (first % 64);
                self.root_at[first as usize] = root as u32;
            }
        }
        // `number` now takes each component's group number, in order of smallest item.
        let mut groups = 0u32;
        for (w, &word) in self.marks.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let first = w * 64 + bits.trailing_zeros() as usize;
                number[self.root_at[first] as usize] = groups;
                groups += 1;
                bits &= bits - 1;
            }
        }
        out.offsets.clear();
        out.offsets.resize(groups as usize + 1, 0);
        for (pos, &id) in self.sorted.iter().enumerate() {
            let group = number[group_of_id[id as usize] as usize];
            group_of_id[id as usize] = group;
            let run = &self.runs[pos];
            out.offsets[group as usize + 1] += run.end - run.start;
        }
        for g in 1..out.offsets.len() {
            out.offsets[g] += out.offsets[g - 1];
        }
        let fill = &mut number;
        fill.clear();
        fill.extend_from_slice(&out.offsets[..groups as usize]);
        out.items = n;
        out.group_of = OnceLock::new();
        out.members.clear();
        out.members.resize(out.offsets[groups as usize] as usize, 0);
        for (i, &id) in self.hint.iter().enumerate() {
            if id != NONE {
                let group = group_of_id[id as usize] as usize;
                out.members[fill[group] as usize] = i as u32;
                fill[group] += 1;
            }
        }
        self.fill = group_of_id;
        self.labels = number;
    }

    /// Puts items in runs (sorted by world, cell and sub-cell) and runs in cells: every item,
    /// or (`changed`) only the items that changed since the last call.
    fn build_grid(&mut self, items: &[Item], skip: &[bool], changed: Option<&[u32]>, sub: f64) {
        // Forget sub-cells left empty once they outnumber the occupied ones.
        let forget = self.subs.len() > 2 * self.sorted.len() + 4096;
        let changed = changed.filter(|_| self.sub == Some(sub) && !forget);
        if forget {
            self.created = 0;
            self.index.clear();
            self.subs.clear();
            self.sorted.clear();
            self.hint.clear();
            self.corner.clear();
            self.radius.clear();
        }
        self.sub = Some(sub);
        self.added.clear();
        self.dirty.clear();
        let per_m = 1.0 / sub;
        match changed {
            None => {
                for sc in &mut self.subs {
                    (sc.count, sc.reach) = (0, 0.0);
                }
                self.hint.resize(items.len(), NONE);
                self.corner.resize(items.len(), (0, [0; 3]));
                self.radius.clear();
                self.radius.extend(items.iter().map(|it| it.radius));
                let mut last = None;
                for i in 0..items.len() {
                    let r = self.place(items, skip, i, per_m, &mut last);
                    self.hint[i] = r;
                    if r != NONE {
                        let sc = &mut self.subs[r as usize];
                        sc.count += 1;
                        sc.reach = sc.reach.max(items[i].radius);
                    }
                }
            }
            Some(changed) => {
                // Items gone from the end leave their sub-cells.
                for i in items.len()..self.hint.len() {
                    let r = self.hint[i];
                    if r != NONE {
                        self.leave(r, self.radius[i]);
                    }
                }
                self.hint.resize(items.len(), NONE);
                self.corner.resize(items.len(), (0, [0; 3]));
                self.radius.resize(items.len(), 0.0);
                let mut last = None;
                for &i in changed.iter().filter(|&&i| (i as usize) < items.len()) {
                    let i = i as usize;
                    let (old, new) = (self.hint[i], self.place(items, skip, i, per_m, &mut last));
                    let (was, radius) = (self.radius[i], items[i].radius);
                    if old != new {
                        if old != NONE {
                            self.leave(old, was);
                        }
                        if new != NONE {
                            self.enter(new, radius);
                        }
                    } else if new != NONE && radius != was {
                        // Same sub-cell, another radius: a larger one extends the reach, a
                        // smaller one may shrink it.
                        let sc = &mut self.subs[new as usize];
                        if radius > was {
                            sc.reach = sc.reach.max(radius);
                        } else if was >= sc.reach {
                            self.mark_dirty(new);
                        }
                    }
                    self.hint[i] = new;
                    self.radius[i] = radius;
                }
            }
        }

        // Sorted sub-cells: drop the emptied ones, merge in the new ones.
        let subs = &mut self.subs;
        self.sorted.retain(|&r| {
            let sc = &mut subs[r as usize];
            sc.listed = sc.count > 0;
            sc.listed
        });
        let subs = &self.subs;
        let key = |r: u32| subs[r as usize].key;
        self.added.sort_unstable_by_key(|&r| key(r));
        if !self.added.is_empty() {
            let old = std::mem::take(&mut self.sorted);
            let (mut i, mut j) = (0, 0);
            self.sorted.reserve(old.len() + self.added.len());
            while i < old.len() || j < self.added.len() {
                let take_old =
                    j == self.added.len() || (i < old.len() && key(old[i]) < key(self.added[j]));
                if take_old {
                    self.sorted.push(old[i]);
                    i += 1;
                } else {
                    self.sorted.push(self.added[j]);
                    j += 1;
                }
            }
        }

        if self.created * SORT_IDS_WHEN > self.sorted.len() {
            self.sort_ids();
        }

        // Lay the items out run after run (addressed by sub-cell id: a small array, where
        // the runs in sorted order would be a cache miss per item).
        let subs = &self.subs;
        self.fill.resize(subs.len(), 0);
        let mut at = 0u32;
        for &r in &self.sorted {
            self.fill[r as usize] = at;
            at += subs[r as usize].count;
        }
        self.order.clear();
        self.order.resize(at as usize, 0);
        for (i, &r) in self.hint.iter().enumerate() {
            if r == NONE {
                continue;
            }
            let at = &mut self.fill[r as usize];
            self.order[*at as usize] = i as u32;
            *at += 1;
        }
        // `fill` now holds where each run ends. The reach of a sub-cell that lost its
        // farthest-reaching item is the largest radius among its items now.
        for &r in &self.dirty {
            let sc = &mut self.subs[r as usize];
            sc.dirty = false;
            if sc.count == 0 {
                continue; // emptied: not a run
            }
            let end = self.fill[r as usize] as usize;
            let members = &self.order[end - sc.count as usize..end];
            sc.reach = members.iter().map(|&i| items[i as usize].radius).fold(0.0, f64::max);
        }
        self.runs.clear();
        for &r in &self.sorted {
            let sc = &self.subs[r as usize];
            let end = self.fill[r as usize];
            self.runs.push(Run { key: sc.key, start: end - sc.count, end, reach: sc.reach });
        }

        self.cells.clear();
        for (r, run) in self.runs.iter().enumerate() {
            let key = run.key.cell();
            match self.cells.last_mut() {
                Some(c) if c.key == key => {
                    c.end += 1;
                    c.reach = c.reach.max(run.reach);
                }
                _ => self.cells.push(Cell {
                    key,
                    start: r as u32,
                    end: r as u32 + 1,
                    reach: run.reach,
                }),
            }
        }
    }

    /// The sub-cell id of item `i` (`NONE` if skipped), found from its hint when it stayed,
    /// from `last` when it shares the previous item's, else by hashing (a new sub-cell is
    /// created and queued to be sorted in).
    fn place(
        &mut self,
        items: &[Item],
        skip: &[bool],
        i: usize,
        per_m: f64,
        last: &mut Option<(Key, u32)>,
    ) -> u32 {
        if skip.get(i) == Some(&true) {
            return NONE;
        }
        let it = &items[i];
        // Still in the sub-cell of the last call? Compared in sub-cell units, as `Key::of`
        // floors them.
        // (Read next to the item, not from the sub-cell: that would be a cache miss.)
        let v = [it.pos.x * per_m, it.pos.y * per_m, it.pos.z * per_m];
        let (h, (world, c)) = (self.hint[i], self.corner[i]);
        let inside = |k: usize| f64::from(c[k]) <= v[k] && v[k] < f64::from(c[k]) + 1.0;
        if h != NONE && world == it.world.0 && (0..3).all(inside) {
            return h;
        }
        let key = Key::of(it.world, it.pos, per_m);
        // Sub-cell coordinates are within ±2^29 (`Key::of` clamps them).
        self.corner[i] = (it.world.0, key.sub_xyz().map(|c| c as i32));
        if let Some((k, r)) = *last
            && k == key
        {
            // Neighbours in the input often share a sub-cell.
            return r;
        }
        let next = self.subs.len() as u32;
        let r = *self.index.entry(key).or_insert(next);
        if r == next {
            self.created += 1;
            self.subs.push(SubCell { key, count: 0, reach: 0.0, listed: false, dirty: false });
        }
        let sc = &mut self.subs[r as usize];
        if !sc.listed {
            sc.listed = true;
            self.added.push(r);
        }
        *last = Some((key, r));
        r
    }

    /// An item of radius `radius` enters sub-cell `r`.
    fn enter(&mut self, r: u32, radius: f64) {
        let sc = &mut self.subs[r as usize];
        // An emptied sub-cell's reach was its last item's.
        sc.reach = if sc.count == 0 { radius } else { sc.reach.max(radius) };
        sc.count += 1;
    }

    /// An item of radius `radius` leaves sub-cell `r`: if it reached farthest there, the reach
    /// is found again.
    fn leave(&mut self, r: u32, radius: f64) {
        let sc = &mut self.subs[r as usize];
        sc.count -= 1;
        if radius >= sc.reach {
            self.mark_dirty(r);
        }
    }

    /// Gives the occupied sub-cells ids in key order, so that the passes over sorted sub-cells
    /// read them in memory order, and forgets the empty ones. Between placing the items and
    /// laying them out.
    fn sort_ids(&mut self) {
        let mut new_of_old = vec![NONE; self.subs.len()];
        for (at, &id) in self.sorted.iter().enumerate() {
            new_of_old[id as usize] = at as u32;
        }
        self.subs = self.sorted.iter().map(|&id| self.subs[id as usize]).collect();
        for (at, id) in self.sorted.iter_mut().enumerate() {
            *id = at as u32;
        }
        self.index.retain(|_, id| {
            *id = new_of_old[*id as usize];
            *id != NONE
        });
        // Every item placed is in an occupied sub-cell.
        for h in self.hint.iter_mut().filter(|h| **h != NONE) {
            *h = new_of_old[*h as usize];
        }
        self.dirty.retain_mut(|r| {
            *r = new_of_old[*r as usize];
            *r != NONE
        });
        self.created = 0;
    }

    /// Queues sub-cell `r` to have its reach found again (once).
    fn mark_dirty(&mut self, r: u32) {
        let sc = &mut self.subs[r as usize];
        if !sc.dirty {
            sc.dirty = true;
            self.dirty.push(r);
        }
    }

    /// Links every pair of runs of cells `a` and `b`.
    fn link_cells(&mut self, items: &[Item], a: &Cell, b: &Cell, sub: f64) {
        for ra in a.start..a.end {
            for rb in b.start..b.end {
                self.link_runs(items, ra, rb, sub);
            }
        }
    }

    /// Links runs `a` and `b` if any pair of their items is within reach. Each run is already
    /// one component, so the first link joins them all and the search stops.
    fn link_runs(&mut self, items: &[Item], a: u32, b: u32, sub: f64) {
        let (ra, rb) = (self.runs[a as usize], self.runs[b as usize]);
        if !ra.key.sub_within(rb.key, ra.reach.max(rb.reach), sub) {
            return;
        }
        let (ca, cb) = (self.find(a), self.find(b));
        if ca == cb {
            return;
        }
        for &i in &self.order[ra.start as usize..ra.end as usize] {
            for &j in &self.order[rb.start as usize..rb.end as usize] {
                let (x, y) = (&items[i as usize], &items[j as usize]);
                let r = x.radius.max(y.radius);
                if x.pos.dist_sq(y.pos) <= r * r {
                    self.union(ca, cb);
                    return;
                }
            }
        }
    }

    /// Pairs farther apart than the next cell but within a fast item's radius. Each cell holding
    /// a run that reaches past the next cell looks at the cells within that reach (its
    /// neighbours are linked already): the slab of cells `x ± k` of its world is one range of the
    /// sorted cells, read whole when short, else column by column.
    fn link_fast(&mut self, items: &[Item], sub: f64) {
        let size = sub * SUBS as f64;
        let mut near: Vec<u32> = Vec::new();
        for c in 0..self.cells.len() {
            let cell = self.cells[c];
            if cell.reach <= size {
                continue;
            }
            // Cells more than `k` apart along an axis are farther apart than the reach.
            let k = ((cell.reach / size).floor() + 1.0).min(f64::from(1u32 << 30)) as i64;
            let key = cell.key;
            let (world, [x, y, z]) = (key.world(), key.cell_xyz());
            let span = |v: i64| v - k..=v + k;
            let (xs, ys, zs) = (span(x), span(y), span(z));
            let at = |x: i64, y: i64, z: i64, sub: u8| Key::pack(world, [x, y, z], sub);
            let (first, last) = (
                at(*xs.start(), -CELL_BIAS, -CELL_BIAS, 0),
                at(*xs.end(), CELL_BIAS, CELL_BIAS, u8::MAX >> 2),
            );
            let slab = partition_near(&self.cells, c, |d| d.key < first)
                ..partition_near(&self.cells, c, |d| d.key <= last);
            near.clear();
            let mut take = |d: usize, o: Key| {
                let [ox, oy, oz] = o.cell_xyz();
                let neighbour = (ox - x).abs() <= 1 && (oy - y).abs() <= 1 && (oz - z).abs() <= 1;
                if !neighbour && ys.contains(&oy) && zs.contains(&oz) {
                    near.push(d as u32);
                }
            };
            // A binary search costs about as much as reading 20 cells of the slab.
            let columns = (xs.end() - xs.start() + 1) as usize;
            if slab.len() <= columns.saturating_mul(20) {
                for d in slab {
                    take(d, self.cells[d].key);
                }
            } else {
                for x in xs.clone() {
                    let (lo, hi) = (
                        at(x, *ys.start(), -CELL_BIAS, 0),
                        at(x, *ys.end(), CELL_BIAS, u8::MAX >> 2),
                    );
                    let from = partition_near(&self.cells, c, |d| d.key < lo);
                    for d in from..self.cells.len() {
                        let o = self.cells[d].key;
                        if o > hi {
                            break;
                        }
                        take(d, o);
                    }
                }
            }
            let here = key.cell_bounds(sub);
            for &d in &near {
                let other = self.cells[d as usize];
                if !within(here, other.key.cell_bounds(sub), cell.reach, sub) {
                    continue;
                }
                for a in cell.start..cell.end {
                    if self.runs[a as usize].reach <= size {
                        continue;
                    }
                    for b in other.start..other.end {
                        self.link_runs(items, a, b, sub);
                    }
                }
            }
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
}

/// `cells.partition_point(below)`, searched outwards from `near` (galloping): the cells within
/// a fast ship's reach sit around its own in the sorted cells.
fn partition_near(cells: &[Cell], near: usize, below: impl Fn(&Cell) -> bool) -> usize {
    let (mut lo, mut hi) = (0, cells.len());
    let mut step = 1;
    if cells.get(near).is_some_and(&below) {
        // The answer is after `near`.
        lo = near + 1;
        while lo + step <= cells.len() {
            if !below(&cells[lo + step - 1]) {
                hi = lo + step - 1;
                break;
            }
            lo += step;
            step *= 2;
        }
    } else {
        // The answer is at or before `near`.
        hi = near.min(cells.len());
        while step <= hi {
            if below(&cells[hi - step]) {
                lo = hi - step + 1;
                break;
            }
            hi -= step;
            step *= 2;
        }
    }
    lo + cells[lo..hi].partition_point(below)
}

/// Whether boxes `a` and `b` may hold points within `reach` of each other. Allows for the
/// rounding of `position / sub` (which may put a point a hair outside its sub-cell's box).
fn within(a: Aabb, b: Aabb, reach: f64, sub: f64) -> bool {
    let r = reach + sub * 1e-6;
    a.dist_sq_box(&b) <= r * r
}

impl Groups {
    /// Joins groups: group `g` joins group `root[g]`, where every root is its own root and is the
    /// smallest group it gathers. Joined groups are ordered by root; members keep the order of
    /// the groups they came from. Linear and sequential: no pass over labels per item. Also
    /// returns, per group, the joined group it is in.
    pub fn join(&self, root: &[u32]) -> (Groups, Vec<u32>) {
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
        let mut joined = Vec::with_capacity(n);
        for g in 0..n {
            let u = joined_of[root[g] as usize];
            joined.push(u);
            let from = self.members(g);
            let at = fill[u as usize] as usize;
            members[at..at + from.len()].copy_from_slice(from);
            fill[u as usize] += from.len() as u32;
        }
        // Items in no group stay in none.
        (Groups { items: self.items, offsets, members, group_of: OnceLock::new() }, joined)
    }
}

#[cfg(test)]
mod tests;
