//! [`TodayGame`]: horizon-sdk's [`Game`] for one of today's servers. The server simulates on
//! its own; this side keeps a mirror of each zone (its region, and per player the last
//! position the server reported and the last move they sent), which is what a snapshot, a
//! handover or a backup carries. The SDK still decides when a region may be written (a valid
//! lease, by this process's clock): only then is the zone on the server's list and are
//! players' moves forwarded.

use std::collections::BTreeMap;

use horizon_proto::server::PlayerPosition;
use horizon_proto::{Aabb, BubbleId, LeaseRef, PlayerId, Region, Seq, Tick, Vec3};
use horizon_sdk::{EngineLoad, Game};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::link::TodayLink;
use super::message::{self, Reported, Zone};

/// The largest move a player may send (a JSON object): beyond it, the move is dropped.
pub const MAX_MOVE_BYTES: usize = 4096;

/// The game of one of today's servers, as horizon-sdk drives it.
#[derive(Debug)]
pub struct TodayGame {
    link: TodayLink,
    moves_refused: std::sync::atomic::AtomicU64,
}

/// What a snapshot of a zone holds.
#[derive(Debug, Serialize, Deserialize)]
struct Mirror {
    region: Region,
    players: BTreeMap<PlayerId, Carried>,
}

/// A player as a zone carries them to the next: where the server last saw them and their last
/// move (a JSON object's text; empty before their first).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Carried {
    position: [f64; 3],
    last_move: String,
}

/// One region: the mirror, the zone id while written, and the server's newest report.
#[derive(Debug)]
pub struct ZoneState {
    mirror: Mirror,
    zone: Option<String>,
    /// The bubbles carved out of it (`Game::carved`), sent with the zone.
    holes: Vec<Aabb>,
    seen: Vec<Reported>,
    link: TodayLink,
}

impl Drop for ZoneState {
    fn drop(&mut self) {
        // The SDK says `stopped` before it drops a written region; this is the backstop.
        if let Some(id) = self.zone.take() {
            self.link.stop_zone(&id);
        }
    }
}

impl TodayGame {
    pub fn new(link: TodayLink) -> TodayGame {
        TodayGame { link, moves_refused: Default::default() }
    }

    /// Moves dropped: not a JSON object, or over [`MAX_MOVE_BYTES`].
    pub fn moves_refused(&self) -> u64 {
        self.moves_refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn state(&self, mirror: Mirror) -> ZoneState {
        ZoneState {
            mirror,
            zone: None,
            holes: Vec::new(),
            seen: Vec::new(),
            link: self.link.clone(),
        }
    }

    /// Places a player in the zone: where they were, moving as they last asked.
    fn place(&self, zone: &str, player: PlayerId, carried: &Carried) {
        let mut fields = move_fields(&carried.last_move).unwrap_or_default();
        let [x, y, z] = carried.position;
        fields.insert("position".to_owned(), serde_json::json!([x, y, z]));
        self.link.send(message::player_move(zone, player, fields));
    }
}

/// A move's fields, if it is a JSON object.
fn move_fields(text: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(text) {
        Ok(Value::Object(fields)) => Some(fields),
        _ => None,
    }
}

impl Game for TodayGame {
    type State = ZoneState;

    fn empty(&self, _bubble: BubbleId, region: &Region) -> ZoneState {
        self.state(Mirror { region: *region, players: BTreeMap::new() })
    }

    fn encode(&self, state: &ZoneState) -> Vec<u8> {
        postcard::to_stdvec(&state.mirror).unwrap_or_default()
    }

    fn decode(&self, bytes: &[u8]) -> Result<ZoneState, String> {
        let mirror = postcard::from_bytes(bytes).map_err(|e| format!("a zone's mirror: {e}"))?;
        Ok(self.state(mirror))
    }

    fn join(&self, state: &mut ZoneState, player: PlayerId, bytes: &[u8]) {
        let carried = if bytes.is_empty() {
            Carried::default()
        } else {
            postcard::from_bytes(bytes).unwrap_or_else(|e| {
                tracing::warn!(player = player.0, error = %e, "a player's carried state unreadable: placed afresh");
                Carried::default()
            })
        };
        if let Some(zone) = &state.zone {
            self.place(zone, player, &carried);
        }
        state.mirror.players.insert(player, carried);
    }

    fn leave(&self, state: &mut ZoneState, player: PlayerId) -> Vec<u8> {
        let Some(carried) = state.mirror.players.remove(&player) else { return Vec::new() };
        if let Some(zone) = &state.zone {
            self.link.send(message::player_leave(zone, player));
        }
        state.seen.retain(|r| r.id != player);
        postcard::to_stdvec(&carried).unwrap_or_default()
    }

    fn input(&self, state: &mut ZoneState, player: PlayerId, _seq: Seq, bytes: &[u8]) {
        let fields = (bytes.len() <= MAX_MOVE_BYTES)
            .then(|| std::str::from_utf8(bytes).ok().and_then(move_fields))
            .flatten();
        let (Some(fields), Some(carried)) = (fields, state.mirror.players.get_mut(&player)) else {
            self.moves_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        };
        carried.last_move = Value::Object(fields.clone()).to_string();
        if let Some(zone) = &state.zone {
            self.link.send(message::player_move(zone, player, fields));
        }
    }

    /// The server steps itself: a tick takes in what it reported since the last one.
    fn step(&self, state: &mut ZoneState, _tick: Tick) {
        let Some(report) = state.zone.as_deref().and_then(|zone| self.link.take_report(zone))
        else {
            return;
        };
        for r in &report {
            if let Some(carried) = state.mirror.players.get_mut(&r.id) {
                carried.position = r.position;
            }
        }
        state.seen = report;
    }

    /// Where today's server last said the zone's players are (its `players/position` report;
    /// it reports no velocity). A player it did not list yet is left out.
    fn positions(&self, state: &ZoneState) -> Vec<PlayerPosition> {
        let members = state.seen.iter().filter(|r| state.mirror.players.contains_key(&r.id));
        members
            .map(|r| {
                let [x, y, z] = r.position;
                PlayerPosition { player: r.id, pos: Vec3 { x, y, z }, vel: Vec3::default() }
            })
            .filter(|p| p.pos.is_finite())
            .collect()
    }

    /// What the players of a zone see: the server's newest report, as JSON
    /// `{zone, tick, players: [{id, position, out_of_zone}]}` (ids as decimal strings).
    fn view(&self, state: &ZoneState, tick: Tick) -> Vec<u8> {
        let players: Vec<Value> = state
            .seen
            .iter()
            .map(|r| {
                serde_json::json!({
                    "id": r.id.0.to_string(), "position": r.position, "out_of_zone": r.out_of_zone
                })
            })
            .collect();
        let view = serde_json::json!({ "zone": state.zone, "tick": tick.0, "players": players });
        view.to_string().into_bytes()
    }

    fn started(&self, state: &mut ZoneState, lease: LeaseRef) {
        let id = format!("{}.{}", lease.bubble.0, lease.epoch.0);
        let holes = state.holes.clone();
        self.link.start_zone(Zone { id: id.clone(), region: state.mirror.region, holes });
        for (&player, carried) in &state.mirror.players {
            self.place(&id, player, carried);
        }
        tracing::info!(
            zone = id,
            players = state.mirror.players.len(),
            "zone written on today's server"
        );
        state.zone = Some(id);
    }

    fn carved(&self, state: &mut ZoneState, holes: &[Aabb]) {
        state.holes = holes.to_vec();
        if let Some(id) = &state.zone {
            self.link.carve_zone(id, holes);
        }
    }

    fn stopped(&self, state: &mut ZoneState) {
        if let Some(id) = state.zone.take() {
            self.link.stop_zone(&id);
            tracing::info!(zone = id, "zone released on today's server");
        }
        state.seen.clear();
    }

    fn engine_load(&self) -> Option<EngineLoad> {
        self.link.engine_load()
    }
}
