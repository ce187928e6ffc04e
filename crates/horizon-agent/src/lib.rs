//! # horizon-agent — one daemon per site
//!
//! The agent holds **one** QUIC connection to the core (control channel, mutual TLS), runs its
//! site's game servers through a [`ServerDriver`] (local processes here, Kubernetes pods behind
//! the same trait), and is the entry point of its site's players (the **gateway**).
//!
//! - **Core link**: registration (full state sync after every reconnection), a report of players,
//!   servers and backbone links every second, one batched lease renewal every few seconds, and
//!   the core's orders: create, resize, members, routes, handover steps, revoke.
//! - **Game servers** speak the agent protocol (`horizon-sdk`): the agent assigns regions with
//!   leases, forwards renewals, relays inputs in and updates out, and keeps a warm pool ready.
//! - **Gateway**: players connect once to their home agent and stay connected whichever site
//!   simulates them. Inputs `(player, seq)` go to the simulating site and are kept until an
//!   update acknowledges them (re-sent after a route change or a timeout: applied once by the
//!   server, never lost); updates come back. Access RTT is QUIC's, measured here, and the
//!   minimum of the session is what the core scores with.
//! - **Transfer**: one connection per pair of sites (the site whose name sorts first dials):
//!   handover state (snapshot, deltas, seal), border crossings, forwarded inputs and updates,
//!   and RTT probes.
//!
//! Failure paths beyond reconnection (a relay cut from the core, a crashed server's bubbles) are
//! not handled yet: the seams are `ServerGone` and the lease expiry in `agent.rs`.

mod agent;
mod config;
mod driver;
mod gateway;

pub use agent::{AgentError, AgentHandle, AgentStats, start};
pub use config::{AgentConfig, PLAYER_TOKEN_ENV, SERVER_TOKEN_ENV};
pub use driver::{DriverError, ProcessDriver, ProcessOptions, ServerDriver};
