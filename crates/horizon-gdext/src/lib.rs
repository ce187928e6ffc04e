//! # horizon-gdext — Godot 4 game servers in a Horizon mesh
//!
//! The Godot 4 side of `horizon godot-server`'s loopback link, as a GDExtension: the `Horizon`
//! node (make it an autoload) does for Godot 4 what `godot/reference/addons/horizon/horizon.gd`
//! does for Godot 3 — it dials the sidecar (`-- --horizon-link=PORT`, the key in
//! `HORIZON_LINK_KEY`), answers its hello, and calls the game's methods (`empty`, `encode`,
//! `decode`, `join`, `leave`, `input`, `step`, `view`: horizon-sdk's `Game`) for each frame,
//! with the same signals. The link's frames are read by [`horizon_godot::link::Call`], the
//! code the sidecar's own tests check. docs/godot.md says how to use it; no Godot 4 engine runs
//! on these machines, so it is built (and its entry symbol checked) but never loaded here.

mod node;

pub use node::Horizon;

// The entry point Godot looks up (`gdext_rust_init`, named in horizon.gdextension): the one
// place unsafe code is allowed.
#[allow(unsafe_code)]
mod entry {
    use godot::prelude::*;

    struct HorizonExtension;

    #[gdextension]
    unsafe impl ExtensionLibrary for HorizonExtension {}
}
