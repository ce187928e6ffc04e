//! # horizon-mesh — the brain of Horizon
//!
//! Everything SMD-G *decides*, with no I/O: no sockets, no tasks, no clock reads. Time and inputs
//! are arguments; decisions come out as [`Command`]s that the core daemon, the simulator and the
//! tests all carry out the same way.
//!
//! - [`config`]: sites, backbone RTTs and thresholds, valid by construction.
//! - [`grouping`]: proximity groups with speed-scaled radii (hash grid + union-find).
//! - [`scoring`]: `cost(S) = Σ w · latency`, the fairness cap, tie-breaks and hysteresis.
//! - [`mesh`]: bubbles — creation, moving borders, preventive merge, splits — and placement.
//! - [`split`]: SMD's split and merge rule, one for every region (zones and bubbles' parts).
//! - [`regions`]: the one table of every region, zones and bubbles, under one id space.
//! - [`zones`]: the core site's zones, split and merged as today's SMD does.
//! - [`packing`]: which game server of a site takes a new region (several per server).
//! - [`routes`]: first hops over the backbone's live links (a cut heals through a third site).
//! - [`lease`]: epochs, grants, batched renewals, expiry and the fencing checks sinks call.
//!
//! The API is poll-style: `handle_*(…)` in, [`Mesh::poll_command`] out, and
//! [`Mesh::poll_timeout`] says when to call [`Mesh::handle_timeout`] again.

pub mod bubble;
pub mod config;
pub mod delegation;
pub mod file;
pub mod geom;
pub mod grouping;
pub mod ids;
pub mod lease;
pub mod mesh;
pub mod packing;
pub mod player;
pub mod region;
pub mod regions;
pub mod rng;
pub mod routes;
pub mod scoring;
pub mod split;
pub mod time;
pub mod zones;

pub use bubble::{Bubble, BubbleState, Cut};
pub use config::{ConfigError, FIBRE_KM_PER_MS, Place, Sites, Thresholds, Weights};
pub use delegation::{Delegation, validate_delegations};
pub use geom::{Aabb, Vec3};
pub use ids::{BubbleId, Epoch, Generation, PlayerId, SiteId, SiteName, WorldId};
pub use lease::{EpochFence, Lease, LeaseError, LeaseTable};
pub use mesh::{
    BorderReason, Candidate, Carving, Command, CreateReason, DeleteReason, EXIT_MARGIN_M,
    Explanation, InputError, LoadReason, MIN_GAP_M, Mesh, MeshConfig, Placement, PlacementRule,
    RestoredRegion, TickStats, ZONE_IDS_FROM, ZoneReason,
};
pub use player::{Player, PlayerJoin, PlayerUpdate, Role};
pub use regions::{Entry, RegionKind, Regions};
pub use scoring::{Hysteresis, MoveReason, SiteScore, Standing, Tally, Verdict};
pub use time::{Span, Time};
pub use zones::{Zone, ZoneSpec, ZoneState};
