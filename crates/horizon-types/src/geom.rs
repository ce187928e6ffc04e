//! Positions and axis-aligned boxes, in metres in a world's local frame.

use std::ops::{Add, Mul, Sub};

/// A vector in metres (or metres per second for velocities).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Vec3 {
    pub x: f64,
    pub y: f64,
    pub z: f64,
}

impl Vec3 {
    pub const ZERO: Vec3 = Vec3 { x: 0.0, y: 0.0, z: 0.0 };

    pub const fn new(x: f64, y: f64, z: f64) -> Self {
        Vec3 { x, y, z }
    }

    /// Component `axis` (0 = x, 1 = y, 2 = z).
    pub fn axis(self, axis: usize) -> f64 {
        match axis {
            0 => self.x,
            1 => self.y,
            _ => self.z,
        }
    }

    /// Component `axis` (0 = x, 1 = y, 2 = z) replaced by `v`.
    pub fn with_axis(self, axis: usize, v: f64) -> Vec3 {
        match axis {
            0 => Vec3 { x: v, ..self },
            1 => Vec3 { y: v, ..self },
            _ => Vec3 { z: v, ..self },
        }
    }

    pub fn norm(self) -> f64 {
        self.norm_sq().sqrt()
    }

    pub fn norm_sq(self) -> f64 {
        self.x * self.x + self.y * self.y + self.z * self.z
    }

    pub fn dist_sq(self, other: Vec3) -> f64 {
        (self - other).norm_sq()
    }

    pub fn is_finite(self) -> bool {
        self.x.is_finite() && self.y.is_finite() && self.z.is_finite()
    }

    pub fn min(self, o: Vec3) -> Vec3 {
        Vec3::new(self.x.min(o.x), self.y.min(o.y), self.z.min(o.z))
    }

    pub fn max(self, o: Vec3) -> Vec3 {
        Vec3::new(self.x.max(o.x), self.y.max(o.y), self.z.max(o.z))
    }
}

impl Add for Vec3 {
    type Output = Vec3;
    fn add(self, o: Vec3) -> Vec3 {
        Vec3::new(self.x + o.x, self.y + o.y, self.z + o.z)
    }
}

impl Sub for Vec3 {
    type Output = Vec3;
    fn sub(self, o: Vec3) -> Vec3 {
        Vec3::new(self.x - o.x, self.y - o.y, self.z - o.z)
    }
}

impl Mul<f64> for Vec3 {
    type Output = Vec3;
    fn mul(self, k: f64) -> Vec3 {
        Vec3::new(self.x * k, self.y * k, self.z * k)
    }
}

/// An axis-aligned box; `min <= max` on every axis.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Aabb {
    pub min: Vec3,
    pub max: Vec3,
}

impl Aabb {
    /// The box of one point.
    pub fn point(p: Vec3) -> Self {
        Aabb { min: p, max: p }
    }

    /// The smallest box holding `self` and `p`.
    pub fn include(self, p: Vec3) -> Self {
        Aabb { min: self.min.min(p), max: self.max.max(p) }
    }

    /// The smallest box holding both.
    pub fn hull(self, o: Aabb) -> Self {
        Aabb { min: self.min.min(o.min), max: self.max.max(o.max) }
    }

    /// The box grown by `m` metres on every side.
    pub fn expand(self, m: f64) -> Self {
        let d = Vec3::new(m, m, m);
        Aabb { min: self.min - d, max: self.max + d }
    }

    /// Whether the two boxes share interior volume (touching faces do not overlap).
    pub fn overlaps(&self, o: &Aabb) -> bool {
        self.min.x < o.max.x
            && o.min.x < self.max.x
            && self.min.y < o.max.y
            && o.min.y < self.max.y
            && self.min.z < o.max.z
            && o.min.z < self.max.z
    }

    pub fn contains(&self, p: Vec3) -> bool {
        (self.min.x..=self.max.x).contains(&p.x)
            && (self.min.y..=self.max.y).contains(&p.y)
            && (self.min.z..=self.max.z).contains(&p.z)
    }

    /// Distance from `p` (inside the box) to the nearest face; negative when outside.
    pub fn inner_distance(&self, p: Vec3) -> f64 {
        let dx = (p.x - self.min.x).min(self.max.x - p.x);
        let dy = (p.y - self.min.y).min(self.max.y - p.y);
        let dz = (p.z - self.min.z).min(self.max.z - p.z);
        dx.min(dy).min(dz)
    }

    /// Squared distance from `p` to the box (0 inside).
    pub fn dist_sq(&self, p: Vec3) -> f64 {
        let c = p.max(self.min).min(self.max);
        c.dist_sq(p)
    }

    /// Squared distance between the two boxes (0 when they touch or overlap).
    pub fn dist_sq_box(&self, o: &Aabb) -> f64 {
        let gap = |lo1: f64, hi1: f64, lo2: f64, hi2: f64| (lo2 - hi1).max(lo1 - hi2).max(0.0);
        let (dx, dy, dz) = (
            gap(self.min.x, self.max.x, o.min.x, o.max.x),
            gap(self.min.y, self.max.y, o.min.y, o.max.y),
            gap(self.min.z, self.max.z, o.min.z, o.max.z),
        );
        dx * dx + dy * dy + dz * dz
    }

    /// The two halves of a cut at `at` across `axis`.
    pub fn cut(&self, axis: usize, at: f64) -> (Aabb, Aabb) {
        let at = at.clamp(self.min.axis(axis), self.max.axis(axis));
        let mut low = *self;
        let mut high = *self;
        match axis {
            0 => (low.max.x, high.min.x) = (at, at),
            1 => (low.max.y, high.min.y) = (at, at),
            _ => (low.max.z, high.min.z) = (at, at),
        }
        (low, high)
    }
}
