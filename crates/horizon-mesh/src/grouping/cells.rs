//! The grid the grouper sorts items into: sub-cells `base / 2` wide, packed into one ordered
//! [`Key`] with their world and cell, and the runs and cells built from them each call.

use crate::geom::{Aabb, Vec3};
use crate::ids::WorldId;

/// Sub-cells per cell along each axis (a power of two: a cell coordinate is a shift away).
pub(super) const SUBS: i32 = 4;

/// Sub-cells get ids in key order again once more than one in this many was created since.
pub(super) const SORT_IDS_WHEN: usize = 4;
pub(super) const SUB_SHIFT: u32 = 2;

/// A sub-cell: its world, the integer coordinates of its cell and its place in the cell, packed
/// in one integer ordered as (world, cell x, y, z, sub-cell), so a cell's sub-cells sort
/// together and comparing or hashing a key is one wide operation. From the top: world (32
/// bits), cell x, y and z (30 bits each, offset by 2^29), sub-cell `x + 4y + 16z` (6 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Key(pub(super) u128);

pub(super) const CELL_BITS: u32 = 30;
/// Cell coordinates are kept within ±`CELL_BIAS`.
pub(super) const CELL_BIAS: i64 = 1 << (CELL_BITS - 1);
/// Sub-cell coordinates are clamped to ±`SUB_LIMIT` (a cell is 4 sub-cells: cells stay far
/// within their 30 bits, so a neighbour's offset never carries into the next field).
pub(super) const SUB_LIMIT: i32 = 1 << 30;
pub(super) const SUB_MASK: u128 = (1 << 6) - 1;

impl Key {
    pub(super) fn pack(world: u32, [x, y, z]: [i64; 3], sub: u8) -> Key {
        let field = |v: i64| (v.clamp(-CELL_BIAS, CELL_BIAS - 1) + CELL_BIAS) as u128;
        Key(u128::from(world) << 96
            | field(x) << 66
            | field(y) << 36
            | field(z) << 6
            | u128::from(sub))
    }

    /// The sub-cell of `p`, for sub-cells `1 / per_m` metres wide.
    pub(super) fn of(world: WorldId, p: Vec3, per_m: f64) -> Self {
        // `floor` without a call into libm (the baseline x86-64 target has no rounding
        // instruction): truncate, then step down for negative non-integers.
        let at = |v: f64| {
            let v = v * per_m;
            let t = v as i32;
            (t - i32::from((t as f64) > v)).clamp(-SUB_LIMIT, SUB_LIMIT - 1)
        };
        let (x, y, z) = (at(p.x), at(p.y), at(p.z));
        let low = |v: i32| (v & (SUBS - 1)) as u8;
        let cell = |v: i32| i64::from(v >> SUB_SHIFT);
        let sub = low(x) + SUBS as u8 * low(y) + (SUBS * SUBS) as u8 * low(z);
        Key::pack(world.0, [cell(x), cell(y), cell(z)], sub)
    }

    pub(super) fn world(self) -> u32 {
        (self.0 >> 96) as u32
    }

    /// The cell's integer coordinates.
    pub(super) fn cell_xyz(self) -> [i64; 3] {
        let field = |shift: u32| ((self.0 >> shift) & ((1 << CELL_BITS) - 1)) as i64 - CELL_BIAS;
        [field(66), field(36), field(6)]
    }

    /// The cell holding this sub-cell.
    pub(super) fn cell(self) -> Key {
        Key(self.0 & !SUB_MASK)
    }

    /// The cell `(dx, dy, dz)` cells away.
    pub(super) fn offset(self, dx: i32, dy: i32, dz: i32) -> Key {
        let shift = |d: i32, by: u32| i128::from(d) << by;
        Key(self.cell().0.wrapping_add_signed(shift(dx, 66) + shift(dy, 36) + shift(dz, 6)))
    }

    /// The cell's box, for sub-cells `size` metres wide.
    pub(super) fn cell_bounds(self, size: f64) -> Aabb {
        let cell = size * SUBS as f64;
        let [x, y, z] = self.cell_xyz();
        let min = Vec3::new(x as f64, y as f64, z as f64) * cell;
        Aabb { min, max: min + Vec3::new(cell, cell, cell) }
    }

    /// The sub-cell's integer coordinates.
    pub(super) fn sub_xyz(self) -> [i64; 3] {
        let [x, y, z] = self.cell_xyz();
        let s = (self.0 & SUB_MASK) as i64;
        let n = i64::from(SUBS);
        [x * n + (s & 3), y * n + ((s >> 2) & 3), z * n + (s >> 4)]
    }

    /// Whether sub-cells `self` and `o` (`size` metres wide) may hold points within `reach`:
    /// the gap between them, counted in whole sub-cells along each axis.
    pub(super) fn sub_within(self, o: Key, reach: f64, size: f64) -> bool {
        let (a, b) = (self.sub_xyz(), o.sub_xyz());
        let gap = |k: usize| ((a[k] - b[k]).abs() - 1).max(0);
        let (dx, dy, dz) = (gap(0), gap(1), gap(2));
        let cells = (dx * dx + dy * dy + dz * dz) as f64;
        let r = reach + size * 1e-6;
        cells * size * size <= r * r
    }
}

/// A sub-cell the grouper knows.
#[derive(Clone, Copy, Debug)]
pub(super) struct SubCell {
    pub(super) key: Key,
    /// Its items in this call, and their largest radius.
    pub(super) count: u32,
    pub(super) reach: f64,
    /// In `Grouper::sorted`; in `Grouper::dirty`.
    pub(super) listed: bool,
    pub(super) dirty: bool,
}

/// Items sharing a sub-cell: `order[start..end]`, and the largest radius among them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Run {
    pub(super) key: Key,
    pub(super) start: u32,
    pub(super) end: u32,
    pub(super) reach: f64,
}

/// A cell: its key and its runs `runs[start..end]`, the largest reach among them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cell {
    pub(super) key: Key,
    pub(super) start: u32,
    pub(super) end: u32,
    pub(super) reach: f64,
}

pub(super) const NONE: u32 = u32::MAX;
