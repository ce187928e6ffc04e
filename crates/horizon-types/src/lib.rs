//! # horizon-types — the words the brain and the wire share
//!
//! Ids, fencing tokens, roles, positions, boxes and regions, and the `host:port` a link dials,
//! defined once: `horizon-mesh` (the
//! brain) and `horizon-proto` (the wire) both re-export them, so nothing converts between two
//! copies of the same idea. A leaf crate: it depends on serde alone.
//!
//! On the wire these encode exactly as before they moved here (postcard writes a newtype as
//! its inner value and a struct as its fields in order; `horizon-proto`'s golden bytes check
//! it). The serde attributes that only self-describing formats read (a role's lowercase
//! name) are for the JSON of reports and status pages.

mod geom;
mod ids;
mod role;
mod target;

pub use geom::{Aabb, Vec3};
pub use ids::{BubbleId, Epoch, Generation, PlayerId, WorldId, ZONE_IDS_FROM};
pub use role::Role;
pub use target::{BadTarget, Target};

/// A region of the universe: a box of a world, or the whole world (`bounds: None`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Region {
    pub world: WorldId,
    pub bounds: Option<Aabb>,
}
