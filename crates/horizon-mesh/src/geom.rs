//! Positions and axis-aligned boxes: the shared vocabulary's (`horizon-types`).

pub use horizon_types::{Aabb, Vec3};
