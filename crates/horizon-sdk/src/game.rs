//! What a game implements: a deterministic simulation of one region.

use horizon_proto::server::PlayerPosition;
use horizon_proto::{Aabb, BubbleId, LeaseRef, PlayerId, Region, Seq, Tick};

/// A game's simulation, as the SDK drives it. Every method must be deterministic: a target
/// server replays the source's joins, leaves, inputs and steps and must reach the same state.
pub trait Game: Send + Sync + 'static {
    /// The state of one region.
    type State: Send + 'static;

    /// A region nobody simulated before.
    fn empty(&self, bubble: BubbleId, region: &Region) -> Self::State;
    /// The full state, for snapshots (handover, universe backup).
    fn encode(&self, state: &Self::State) -> Vec<u8>;
    /// A state from [`Game::encode`]'s bytes; `Err` says what is wrong with them.
    fn decode(&self, bytes: &[u8]) -> Result<Self::State, String>;
    /// A player enters with `bytes` (their state from another region; empty when new).
    fn join(&self, state: &mut Self::State, player: PlayerId, bytes: &[u8]);
    /// A player leaves; returns their state for the region they go to.
    fn leave(&self, state: &mut Self::State, player: PlayerId) -> Vec<u8>;
    /// One input of a player, applied once, in `seq` order.
    fn input(&self, state: &mut Self::State, player: PlayerId, seq: Seq, bytes: &[u8]);
    /// Advance the simulation to `tick`.
    fn step(&self, state: &mut Self::State, tick: Tick);
    /// What the region's players see after a step.
    fn view(&self, state: &Self::State, tick: Tick) -> Vec<u8>;

    /// The region may be written from now on, under `lease`: it runs, and its lease is valid by
    /// this server's clock. Called again after [`Game::stopped`] when a late renewal brings the
    /// lease back, and with the newer lease after a regrant. A game stepped by the SDK needs
    /// nothing here; an engine running its own loop (today's servers, design.md §9) starts
    /// simulating the region here and nowhere else.
    fn started(&self, _state: &mut Self::State, _lease: LeaseRef) {}

    /// The region may no longer be written: its lease lapsed by this server's clock, it was
    /// sealed for a handover, regranted under a newer epoch (`started` follows), released, or
    /// the agent's connection was lost. Whatever the game shows players must stop changing;
    /// an engine running its own loop stops simulating the region. Replayed deltas on a
    /// standby come between a `stopped` (or nothing) and the next `started`.
    fn stopped(&self, _state: &mut Self::State) {}

    /// The bubbles carved out of this region (a zone), simulated elsewhere: their boxes. The
    /// game must not write inside them (design.md §4): what it runs there itself (props, its
    /// own NPCs) waits for the hole to close. Called whenever they change, and for a standby
    /// once it runs. The default does nothing: a game that writes only its players' entities
    /// needs nothing (the SDK joins and leaves players as they cross).
    fn carved(&self, _state: &mut Self::State, _holes: &[Aabb]) {}

    /// Where the game put each of the region's players: metres and metres per second, in the
    /// world's frame. The SDK reports them to the agent once a second, and placement (grouping,
    /// borders, which site simulates a group) uses these and never a client's claim. A player
    /// the game has not entered into the world yet is left out (until then Horizon keeps the
    /// place they joined at). The default reports nobody: such a game's players stay where they
    /// joined, as far as placement knows.
    fn positions(&self, _state: &Self::State) -> Vec<PlayerPosition> {
        Vec::new()
    }

    /// One player's own state right after an input of theirs was applied, sent to them at once
    /// ahead of the tick's batched [`Game::view`] (design.md §7, "own state first": the
    /// player sees the effect of their click without waiting for the end of the tick). Read
    /// only: it must not change the state. `None` (the default) sends nothing early. At most
    /// [`horizon_proto::MAX_OWN_BYTES`]; a larger one is not sent.
    fn own(&self, _state: &Self::State, _player: PlayerId) -> Option<Vec<u8>> {
        None
    }

    /// What an engine running its own loop reports of itself, for the load report; `None`
    /// (the default): the SDK counts its own ticks and holds no chunk loading.
    fn engine_load(&self) -> Option<EngineLoad> {
        None
    }
}

/// An engine's own account of its health (today's servers' `serverinfo`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineLoad {
    /// Simulation ticks in the last second.
    pub tps: f32,
    /// World chunks still loading: a server is ready only with none.
    pub chunks_loading: u32,
}

/// When a player sees the effect of their own input (design.md §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OwnState {
    /// As soon as it is applied: the game's [`Game::own`] state goes to the player at once,
    /// ahead of the tick's update. The default.
    #[default]
    Early,
    /// With everyone else's, in the tick's update only (nothing is sent early).
    Batched,
}

impl std::str::FromStr for OwnState {
    type Err = String;

    fn from_str(s: &str) -> Result<OwnState, String> {
        match s {
            "early" => Ok(OwnState::Early),
            "batched" => Ok(OwnState::Batched),
            other => Err(format!("{other:?} is neither \"early\" nor \"batched\"")),
        }
    }
}

impl std::fmt::Display for OwnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OwnState::Early => "early",
            OwnState::Batched => "batched",
        })
    }
}
