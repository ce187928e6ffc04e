//! # Today's servers: an adapter with the fencing they lack
//!
//! Today's game servers (design.md §9) are Godot processes that listen for one orchestrator
//! on WebSocket (port 8980) and speak JSON `{namespace, event, data}`: `server/zone` assigns
//! zones, `player/move` moves players, and they report `players/position` and a once-a-second
//! `serverinfo`. They simulate on their own and have no lease and no epoch: whoever dials them
//! is believed. `horizon godot-adapter` lets such a server, unmodified, take part in a mesh: it
//! is a horizon-sdk game server to the agent (leases by its own clock, each input once and in
//! order, snapshots, deltas, seals) and the orchestrator to today's server, and adds the fence:
//!
//! - a zone is on the server's list only while its region may be written (a valid lease, by
//!   this process's clock: [`Game::started`](horizon_sdk::Game::started) /
//!   [`stopped`](horizon_sdk::Game::stopped)); when the lease lapses, at a handover's seal or
//!   a release, the zone is released and no move is forwarded;
//! - a zone's id names the bubble and the epoch (`"7.12"`); the agent's orders of an older
//!   epoch are refused by the SDK, and the server's reports of any zone not written now (an
//!   older epoch's, a released one's) are refused and counted ([`link::LinkCounts`]);
//! - each player input is a JSON object forwarded once, in order, as `player/move` with the
//!   player's id and zone set by the adapter, whatever the player wrote.
//!
//! A handover carries what today's servers expose: each player's last reported position and
//! last move (the mirror of [`game`]). Anything else a zone holds in the server (props, NPCs)
//! is not carried: today's servers have no state transfer to read it from.
//!
//! [`message`] builds and parses the frames (the one file to change if a studio's servers name
//! a field differently), [`link`] runs the WebSocket, [`game`] is the `Game`, [`host`] starts
//! or dials the server. `tests/fixtures/today-standin` is a stand-in for today's server, in GDScript,
//! which the tests run under `godot3-server`.

pub mod game;
pub mod host;
pub mod link;
mod message;

pub use game::TodayGame;
pub use host::{TodayHosted, TodayOptions, TodayServer};
pub use link::{LinkCounts, ServerInfo, TodayLink};
