//! What a game implements: a deterministic simulation of one region.

use horizon_proto::{BubbleId, PlayerId, Region, Seq, Tick};

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
}
