//! # horizon-core — the control plane, as a library
//!
//! The core runs at the core site. It keeps one connection per agent (control channel, mutual
//! TLS), feeds the agents' reports into the brain ([`horizon_mesh::Mesh`]) every tick, and
//! carries out the brain's commands through the agents: bubble creation, member lists and
//! player routes, moving borders, handovers (prepare → freeze → seal → start → commit) and
//! revocations. It answers the agents' batched lease renewals, persists what changes ownership
//! in its [`store`] before using it (generation first, so epochs never go backwards across
//! restarts), keeps the universe backup (copies accepted only under the current epoch), and
//! serves the admin API: `/livez`, `/readyz`, `/metrics`, `/status` and the console.
//!
//! Its logic is the sans-IO [`machine::CoreMachine`] (inputs and the time in, effects out; the
//! unit tests drive it directly); `core.rs` is the tokio shell that carries the effects out.
//! When a holder is lost the core restores its bubbles from the universe backup; restarted, it
//! takes back what its store held.
//!
//! `horizon core --config FILE` runs it; the demo and the sandbox tests run the same code
//! in process.

mod admin;
mod config;
mod core;
pub mod machine;
mod metrics;
mod stats;
pub mod status;
pub mod store;
mod writer;

/// Every key of the core's configuration file (docs/configuration.md is printed from it).
pub use crate::config::keys::{ARRAYS as CONFIG_ARRAYS, KEYS as CONFIG_KEYS};
pub use crate::config::{CoreConfig, EtcdOptions, EtcdTls, Stage, StoreKind};
pub use crate::core::{CoreError, CoreHandle, load_tls, start};
pub use crate::status::CoreStatus;
