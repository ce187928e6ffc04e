//! The reference game server: a small deterministic simulation on the SDK, so that state
//! transfer is real and checkable. `horizon gameserver` runs it.
//!
//! Each player is an entity with a position and a velocity in integer millimetres. An input
//! is a new velocity ([`encode_input`]) or a place to stand at, velocity zero
//! ([`encode_move_to`]: how a player enters the world where they asked to, and how a test
//! player travels far at once); a step moves every entity. A player has entered the world once
//! an input of theirs was applied: only those are in [`Game::positions`], the places
//! placement uses. Two counters make "applied once" observable from outside: `inputs` (how
//! many inputs this entity ever had applied, carried across regions and handovers) and
//! `last_seq`. Since inputs are applied once and in order from seq 1, `inputs == last_seq`
//! always; a double application shows as `inputs > last_seq` in every later view. The
//! region's `chain` hashes every step onto the previous one, so a view's `prev_chain` proves
//! the state it came from: a handover that lost or replayed anything breaks the chain players
//! see.

use std::collections::BTreeMap;

use horizon_proto::server::PlayerPosition;
use horizon_proto::{BubbleId, PlayerId, Region, Seq, Tick, Vec3};
use serde::{Deserialize, Serialize};

use crate::game::Game;

/// One player's entity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entity {
    /// Millimetres in the world's local frame.
    pub pos: [i64; 3],
    /// Millimetres per second.
    pub vel: [i32; 3],
    /// Inputs ever applied to this entity.
    pub inputs: u64,
    /// The seq of the last of them.
    pub last_seq: u64,
}

/// A region's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Which simulation this is: fixed when the region starts empty, carried by snapshots (a
    /// handover target continues it). Two servers sharing a spread bubble have different ones.
    origin: u64,
    spawn: [i64; 3],
    tick_ms: u32,
    prev_chain: u64,
    chain: u64,
    entities: BTreeMap<PlayerId, Entity>,
}

/// What players receive after each step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    pub tick: Tick,
    /// The server's wall clock when the step ended, microseconds since the Unix epoch. Not part
    /// of the state (a replay would differ): it lets a player on the same clock measure how
    /// long its input took to be applied.
    pub wall_us: u64,
    /// The simulation this view comes from (see `State::origin`): views of one origin chain.
    pub origin: u64,
    /// The chain before this step: equals the previous view's `chain`.
    pub prev_chain: u64,
    pub chain: u64,
    pub entities: Vec<(PlayerId, Entity)>,
}

impl View {
    pub fn decode(bytes: &[u8]) -> Option<View> {
        postcard::from_bytes(bytes).ok()
    }

    pub fn entity(&self, player: PlayerId) -> Option<&Entity> {
        self.entities.iter().find(|(p, _)| *p == player).map(|(_, e)| e)
    }
}

/// What a player receives of their own entity the moment an input of theirs is applied, ahead
/// of the tick's [`View`] ([`Game::own`]; the tick it follows is in the message around it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnView {
    /// The server's wall clock when the input was applied, microseconds since the Unix epoch.
    pub wall_us: u64,
    pub entity: Entity,
}

impl OwnView {
    pub fn decode(bytes: &[u8]) -> Option<OwnView> {
        postcard::from_bytes(bytes).ok()
    }
}

fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// An input's bytes: the new velocity, millimetres per second.
pub fn encode_input(vel_mm_s: [i32; 3]) -> Vec<u8> {
    vel_mm_s.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// An input's bytes: stand at `pos_mm` (millimetres), velocity zero.
pub fn encode_move_to(pos_mm: [i64; 3]) -> Vec<u8> {
    pos_mm.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// What an input asks for; anything else is applied as nothing (it still counts).
enum Command {
    Velocity([i32; 3]),
    MoveTo([i64; 3]),
}

fn decode_input(bytes: &[u8]) -> Option<Command> {
    match bytes.len() {
        12 => {
            let v = |i: usize| i32::from_le_bytes(bytes[i..i + 4].try_into().unwrap_or([0; 4]));
            Some(Command::Velocity([v(0), v(4), v(8)]))
        }
        24 => {
            let v = |i: usize| i64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or([0; 8]));
            Some(Command::MoveTo([v(0), v(8), v(16)]))
        }
        _ => None,
    }
}

/// FNV-1a, 64 bits: tiny, stable across builds and platforms.
fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed ^ 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The reference game at a fixed tick length.
#[derive(Clone, Copy, Debug)]
pub struct Reference {
    pub tick_ms: u32,
}

impl Game for Reference {
    type State = State;

    fn empty(&self, bubble: BubbleId, region: &Region) -> State {
        let spawn = region.bounds.map_or([0; 3], |b| {
            let mid = |lo: f64, hi: f64| ((lo + hi) * 500.0) as i64;
            [mid(b.min.x, b.max.x), mid(b.min.y, b.max.y), mid(b.min.z, b.max.z)]
        });
        let origin = spawn.iter().fold(bubble.0, |h, v| fnv(h, &v.to_le_bytes()));
        State {
            origin,
            spawn,
            tick_ms: self.tick_ms,
            prev_chain: 0,
            chain: bubble.0,
            entities: BTreeMap::new(),
        }
    }

    fn encode(&self, state: &State) -> Vec<u8> {
        postcard::to_stdvec(state).unwrap_or_default()
    }

    fn decode(&self, bytes: &[u8]) -> Result<State, String> {
        postcard::from_bytes(bytes).map_err(|e| e.to_string())
    }

    fn join(&self, state: &mut State, player: PlayerId, bytes: &[u8]) {
        let entity =
            postcard::from_bytes(bytes).unwrap_or(Entity { pos: state.spawn, ..Entity::default() });
        state.entities.insert(player, entity);
    }

    fn leave(&self, state: &mut State, player: PlayerId) -> Vec<u8> {
        state
            .entities
            .remove(&player)
            .and_then(|e| postcard::to_stdvec(&e).ok())
            .unwrap_or_default()
    }

    fn input(&self, state: &mut State, player: PlayerId, seq: Seq, bytes: &[u8]) {
        let Some(entity) = state.entities.get_mut(&player) else { return };
        match decode_input(bytes) {
            Some(Command::Velocity(vel)) => entity.vel = vel,
            Some(Command::MoveTo(pos)) => (entity.pos, entity.vel) = (pos, [0; 3]),
            None => {}
        }
        entity.inputs += 1;
        entity.last_seq = seq.0;
    }

    fn step(&self, state: &mut State, tick: Tick) {
        let dt = i64::from(state.tick_ms);
        for e in state.entities.values_mut() {
            for (p, v) in e.pos.iter_mut().zip(e.vel) {
                *p += i64::from(v) * dt / 1000;
            }
        }
        let bytes = postcard::to_stdvec(&state.entities).unwrap_or_default();
        state.prev_chain = state.chain;
        state.chain = fnv(state.chain ^ tick.0, &bytes);
    }

    fn positions(&self, state: &State) -> Vec<PlayerPosition> {
        let m =
            |v: [i64; 3]| Vec3 { x: v[0] as f64 / 1e3, y: v[1] as f64 / 1e3, z: v[2] as f64 / 1e3 };
        let entered = state.entities.iter().filter(|(_, e)| e.inputs > 0);
        entered
            .map(|(&player, e)| PlayerPosition {
                player,
                pos: m(e.pos),
                vel: m(e.vel.map(i64::from)),
            })
            .collect()
    }

    fn own(&self, state: &State, player: PlayerId) -> Option<Vec<u8>> {
        let entity = *state.entities.get(&player)?;
        postcard::to_stdvec(&OwnView { wall_us: wall_us(), entity }).ok()
    }

    fn view(&self, state: &State, tick: Tick) -> Vec<u8> {
        let view = View {
            tick,
            wall_us: wall_us(),
            origin: state.origin,
            prev_chain: state.prev_chain,
            chain: state.chain,
            entities: state.entities.iter().map(|(&p, &e)| (p, e)).collect(),
        };
        postcard::to_stdvec(&view).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use horizon_proto::{Aabb, WorldId};

    use super::*;

    #[test]
    fn a_player_enters_the_world_where_their_first_input_puts_them_and_only_then_has_a_position() {
        let game = Reference { tick_ms: 100 };
        let bounds =
            Aabb { min: Vec3 { x: 0.0, y: 0.0, z: 0.0 }, max: Vec3 { x: 100.0, y: 0.0, z: 0.0 } };
        let mut state =
            game.empty(BubbleId(1), &Region { world: WorldId(0), bounds: Some(bounds) });
        game.join(&mut state, PlayerId(7), &[]);
        assert!(game.positions(&state).is_empty(), "spawned at the region's middle, not entered");

        game.input(&mut state, PlayerId(7), Seq(1), &encode_move_to([20_000, 5_000, 0]));
        game.input(&mut state, PlayerId(7), Seq(2), &encode_input([1_000, 0, 0]));
        game.step(&mut state, Tick(1));
        let at = game.positions(&state);
        assert_eq!(at.len(), 1);
        assert_eq!(at[0].player, PlayerId(7));
        assert_eq!(at[0].pos, Vec3 { x: 20.1, y: 5.0, z: 0.0 }, "moved 1 m/s for one 100 ms tick");
        assert_eq!(at[0].vel, Vec3 { x: 1.0, y: 0.0, z: 0.0 });
        let e = state.entities[&PlayerId(7)];
        assert_eq!((e.inputs, e.last_seq), (2, 2), "a move is an input like any other");
    }
}
