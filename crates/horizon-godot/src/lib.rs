//! # horizon-godot — Godot game servers in a Horizon mesh
//!
//! A Godot game server is two processes: this **sidecar**, which links horizon-sdk and speaks
//! the QUIC agent protocol with the site's agent, and the **Godot process** it starts, whose
//! GDScript holds the game. They talk over a loopback TCP link ([`link`]): the SDK's
//! [`Game`](horizon_sdk::Game) calls (`empty`, `encode`, `decode`, `join`, `leave`, `input`,
//! `step`, `view`) become frames to the `Horizon` autoload of `godot/reference/addons/horizon`,
//! which calls the same methods on the game's script. Everything the protocol demands —
//! leases by the server's own clock, each input once and in order, snapshots, deltas, seals,
//! load reports — stays in the SDK, tested once for every game; the script only plays.
//!
//! Why a sidecar, not a native library inside Godot (both were shown to work with Godot 3.2.3
//! on these machines; docs/godot.md says it in full): a script error, a hang or a crash of
//! either process ends the pair as one game server (the agent's crash path restarts the
//! region elsewhere), no engine version is baked into a binary (one sidecar for Godot 3 and 4,
//! a GDScript addon for Godot 3, a GDExtension for Godot 4), and it builds without libclang or
//! engine bindings. The price is one loopback round trip per tick and region (`step` is sent
//! with `view`), ~0.2 ms: `cargo bench -p horizon-godot --bench link` (docs/performance.md).
//!
//! [`host`] starts and watches the Godot process; [`GodotGame`] is the `Game` over the link.
//! [`today`] is the adapter for today's servers (design.md §9), which speak WebSocket JSON
//! and know no lease: `horizon godot-adapter`.

mod game;
pub mod host;
pub mod link;
pub mod reference;
pub mod today;

pub use game::{Broken, GodotGame};
pub use host::{GodotOptions, HostError, Hosted};
