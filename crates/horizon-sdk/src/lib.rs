//! # horizon-sdk — the game server's side of the QUIC agent protocol
//!
//! A game server links this crate, implements [`Game`] for its simulation, and calls
//! [`run`]. The SDK speaks the protocol of `docs/protocol.md` (server channel) with the site's
//! agent: register with a token, announce readiness, report load every second, and hold
//! regions under **leases**:
//!
//! - a region is simulated only while its lease is valid by the server's own monotonic clock
//!   (counted from the agent's renewal send time); without one, inputs wait and nothing moves;
//! - every input carries `(player, seq)` and is applied once, in order: an old `seq` is
//!   dropped, a gap waits for the missing input (the gateway re-sends what is not acknowledged);
//! - the state leaves the server as a snapshot plus one delta per tick (handover prepare,
//!   backups) and, at a freeze, a seal with every player's last applied input. A target
//!   server applies them and starts at the sealed tick + 1 under the next epoch.
//!
//! A game stepped only through [`Game`]'s methods needs nothing else; one that also acts on its
//! own (an engine with its own loop, today's servers) acts only between [`Game::started`] and
//! [`Game::stopped`], which the SDK calls when a region may be written and when no longer.
//!
//! A game that implements [`Game::own`] has each player's own new state sent to them the moment
//! an input of theirs is applied, ahead of the tick's batched update ([`OwnState::Early`], the
//! default): the player sees their click without waiting for the end of the tick.
//!
//! Deltas are the SDK's own event log of a tick (joins, leaves, inputs, the step), replayed on
//! the target through the same [`Game`] methods: any deterministic game gets state transfer
//! without writing a diff. [`reference`] is the reference game server (`horizon gameserver`).
//!
//! One piece is for game clients instead: [`probe`] measures the round trip to every site's
//! probe beacon, so a client joins the site nearest to it.

mod client;
mod game;
pub mod probe;
pub mod reference;
mod region;
mod server;

pub use client::{ServerOptions, run};
pub use game::{EngineLoad, Game, OwnState};
pub use region::{Phase, RegionError};
pub use server::Counters;
pub use server::ServerMachine;
