//! Population-scale what-if runs: a day of players from several continents, placed by SMD-G and
//! by the policies a studio would otherwise use, on the same population and seed.
//!
//! - [`config`]: the population file (who plays when, from where, how they move).
//! - [`model`]: the seeded population, stepped tick by tick; it never reads a policy's state.
//! - `policy`: the policies compared (the brain's placements, and `nearest`).
//! - `run`: one generator thread feeding every policy's worker through bounded queues; each
//!   worker runs the real [`horizon_mesh::Mesh`] (or, for `nearest`, no brain at all) and samples
//!   every player every tick.
//! - [`report`]: percentiles, handovers, flapping, bubbles over the day; markdown and SVG.

pub mod config;
pub mod model;
mod policy;
pub mod report;
mod run;
pub(crate) mod servers;

pub use config::PopulationConfig;
pub use policy::Policy;
pub use report::PopulationReport;
pub use run::{Progress, run_population};
