//! # horizon-sim — scenarios over the real brain
//!
//! A scenario file (TOML) describes sites, thresholds, players and timed events; [`run`] feeds it
//! to [`horizon_mesh::Mesh`] in virtual time (a tick every `tick_s`, 5 s by default), carries out
//! its commands the way the daemons would (batched lease renewals per site, links up or down),
//! checks the invariants after every step and returns a [`Report`]: a readable timeline, every
//! change of site, and where each player ended with the latency used for decisions.

pub mod measure;
pub mod population;
pub mod runner;
pub mod scenario;
mod text;

pub use population::PopulationReport;
pub use runner::{FinalPlayer, MoveRecord, Report, RunError, RunOptions, run, run_with};
pub use scenario::{Problem, Scenario, ScenarioError};
pub use text::render_text;
