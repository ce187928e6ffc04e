//! # horizon-agent — one daemon per site
//!
//! Its logic is a sans-IO state machine ([`machine::AgentMachine`]: events in with the time,
//! effects out, no awaits), run by a thin tokio shell ([`start`]) that owns the connections and
//! the [`ServerDriver`]; `horizon sim chaos` runs the same machine in virtual time.
//!
//! The agent holds **one** QUIC connection to the core (control channel, mutual TLS), runs its
//! site's game servers through a [`ServerDriver`] (local processes here, Kubernetes pods behind
//! the same trait), and is the entry point of its site's players (the **gateway**).
//!
//! - **Core link**: registration (full state sync after every reconnection), a report of players,
//!   servers and backbone links every second, one batched lease renewal every few seconds, and
//!   the core's orders: create, resize, members, routes, handover steps, restore, revoke. After
//!   each registration it sends every player it serves (`Players`), and it gets player ids from
//!   the core in blocks.
//! - **Game servers** speak the agent protocol (`horizon-sdk`): the agent assigns regions with
//!   leases, forwards renewals, relays inputs in and updates out, and keeps a warm pool ready.
//! - **Gateway**: players connect once to their home agent and stay connected whichever site
//!   simulates them. Inputs `(player, seq)` go to the simulating site and are kept until a
//!   stored copy of the universe backup covers them (re-sent after a timeout, a route change or
//!   a new holder: applied once by the server, never lost, even across a restore); updates come
//!   back. A player's session logic is sans-IO (`gateway.rs`). A dropped connection resumes as
//!   the same player when its client comes back within 30 s. Access RTT is QUIC's, measured
//!   here, and the minimum of the session is what the core scores with.
//! - **Beacon** (`listen.beacon`, optional): answers clients' UDP probes so they measure their
//!   round trip to this site before joining ([`beacon`]).
//! - **Transfer**: one connection per pair of sites (the site whose name sorts first dials):
//!   handover state (snapshot, deltas, seal), border crossings, forwarded inputs and updates,
//!   and RTT probes.
//!
//! - **Failures**: leases are counted by this agent's clock from the send of the granting
//!   renewal; at expiry its players are told `Reconnecting`. A game server's exit is seen within
//!   a housekeeping period and reported (`Lost`); the core restores the bubble (`Restore`) here
//!   or elsewhere. Updates under a newer epoch move a player's route, so a home site cut from
//!   the core follows its players' bubble to its new holder.

mod agent;
pub mod beacon;
mod config;
mod credentials;
mod driver;
mod events;
mod gateway;
pub mod machine;
mod metrics;
mod plumbing;
mod stats;

pub use agent::{AgentHandle, start};
/// Every key of an agent's configuration file (docs/configuration.md is printed from it).
pub use config::keys::{ARRAYS as CONFIG_ARRAYS, KEYS as CONFIG_KEYS};
pub use config::{AgentConfig, DriverChoice, KubernetesConfig, SERVER_TOKEN_ENV};
pub use credentials::load_files;
pub use driver::{DriverError, ProcessDriver, ProcessOptions, ServerDriver};
pub use events::AgentError;
pub use metrics::AgentStatus;
pub use stats::{AgentStats, FreezeSample, MAX_FREEZES};
