//! The messages of today's servers (design.md §9): JSON text frames
//! `{"namespace": ..., "event": ..., "data": ...}`. What the adapter sends is built here, and
//! what it reads is parsed here: a studio whose servers name a field differently changes this
//! file alone.
//!
//! Player ids travel as decimal strings: JSON numbers are doubles in Godot, exact only up to
//! 2^53, and ids are 64-bit.

use horizon_proto::{Aabb, PlayerId, Region, Vec3};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// One frame, either way.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Envelope {
    pub(crate) namespace: String,
    #[serde(default)]
    pub(crate) event: String,
    #[serde(default)]
    pub(crate) data: Value,
}

fn frame(namespace: &str, event: &str, data: Value) -> String {
    json!({ "namespace": namespace, "event": event, "data": data }).to_string()
}

/// A zone as `server/zone` lists it. Its id names the bubble *and* the epoch it is written
/// under (`"7.12"`): today's servers echo it in their reports, which is how a report made
/// under an older assignment is told apart and refused.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Zone {
    pub(crate) id: String,
    pub(crate) region: Region,
    /// The bubbles carved out of it, simulated elsewhere: the server must not write there.
    pub(crate) holes: Vec<Aabb>,
}

/// `server/prewarm`: load the world.
pub(crate) fn prewarm() -> String {
    frame("server", "prewarm", json!({}))
}

/// `server/zone`: the whole set of zones to simulate; an empty list releases the server.
pub(crate) fn zones<'a>(zones: impl Iterator<Item = &'a Zone>) -> String {
    let list: Vec<Value> = zones
        .map(|z| {
            let holes: Vec<Value> = z.holes.iter().map(|&h| bounds(h)).collect();
            json!({
                "id": z.id,
                "world": z.region.world.0,
                "bounds": z.region.bounds.map(bounds),
                "holes": holes,
            })
        })
        .collect();
    frame("server", "zone", Value::Array(list))
}

fn bounds(b: Aabb) -> Value {
    json!({ "min": vec3(b.min), "max": vec3(b.max) })
}

fn vec3(v: Vec3) -> Value {
    json!([v.x, v.y, v.z])
}

/// `player/move`: the player's own move (`fields`, from their input) in `zone`, with `id` and
/// `zone` set by the adapter, whatever the player wrote.
pub(crate) fn player_move(zone: &str, player: PlayerId, mut fields: Map<String, Value>) -> String {
    fields.insert("id".to_owned(), Value::String(player.0.to_string()));
    fields.insert("zone".to_owned(), Value::String(zone.to_owned()));
    frame("player", "move", Value::Object(fields))
}

/// `player/leave`: the player leaves the zone.
pub(crate) fn player_leave(zone: &str, player: PlayerId) -> String {
    frame("player", "leave", json!({ "id": player.0.to_string(), "zone": zone }))
}

/// What today's server says.
#[derive(Debug, PartialEq)]
pub(crate) enum Said {
    /// `players/position`: where the players of one zone are.
    Positions { zone: String, players: Vec<Reported> },
    /// `serverinfo`: the server's health, once a second.
    Info { tps: f32, chunks_loading: u32, players: u32 },
    /// Anything else (logged, not acted on).
    Other(String),
}

/// One player of a `players/position` report.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Reported {
    pub(crate) id: PlayerId,
    pub(crate) position: [f64; 3],
    pub(crate) out_of_zone: bool,
}

/// Parses one text frame; `Err` says what is wrong with it.
pub(crate) fn parse(text: &str) -> Result<Said, String> {
    let envelope: Envelope = serde_json::from_str(text)
        .map_err(|e| format!("not a {{namespace, event, data}} frame: {e}"))?;
    match (envelope.namespace.as_str(), envelope.event.as_str()) {
        ("players", "position") => {
            #[derive(Deserialize)]
            struct Positions {
                zone: String,
                players: Vec<Player>,
            }
            #[derive(Deserialize)]
            struct Player {
                id: String,
                position: [f64; 3],
                #[serde(default)]
                out_of_zone: bool,
            }
            let p: Positions = serde_json::from_value(envelope.data)
                .map_err(|e| format!("players/position: {e}"))?;
            let players = p
                .players
                .into_iter()
                .map(|x| {
                    let id =
                        x.id.parse()
                            .map_err(|_| format!("players/position: player id {:?}", x.id))?;
                    Ok(Reported {
                        id: PlayerId(id),
                        position: x.position,
                        out_of_zone: x.out_of_zone,
                    })
                })
                .collect::<Result<_, String>>()?;
            Ok(Said::Positions { zone: p.zone, players })
        }
        ("serverinfo", _) => {
            #[derive(Deserialize)]
            struct Info {
                tps: f32,
                #[serde(default)]
                chunks_loading: u32,
                #[serde(default)]
                players_number: u32,
            }
            let i: Info =
                serde_json::from_value(envelope.data).map_err(|e| format!("serverinfo: {e}"))?;
            Ok(Said::Info {
                tps: i.tps,
                chunks_loading: i.chunks_loading,
                players: i.players_number,
            })
        }
        (namespace, event) => Ok(Said::Other(format!("{namespace}/{event}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horizon_proto::WorldId;

    #[test]
    fn zones_name_bubble_and_epoch_and_an_empty_list_releases() {
        let region = Region {
            world: WorldId(2),
            bounds: Some(Aabb {
                min: Vec3 { x: 0.0, y: -1.0, z: 0.0 },
                max: Vec3 { x: 10.0, y: 1.0, z: 5.0 },
            }),
        };
        let hole =
            Aabb { min: Vec3 { x: 1.0, y: 0.0, z: 0.0 }, max: Vec3 { x: 2.0, y: 1.0, z: 1.0 } };
        let zone = Zone { id: "7.12".to_owned(), region, holes: vec![hole] };
        let v: Value = serde_json::from_str(&zones([zone].iter())).unwrap();
        assert_eq!(
            v["data"][0]["holes"],
            json!([{ "min": [1.0, 0.0, 0.0], "max": [2.0, 1.0, 1.0] }])
        );
        assert_eq!(v["namespace"], "server");
        assert_eq!(v["event"], "zone");
        assert_eq!(v["data"][0]["id"], "7.12");
        assert_eq!(v["data"][0]["world"], 2);
        assert_eq!(v["data"][0]["bounds"]["max"], json!([10.0, 1.0, 5.0]));
        let none: Value = serde_json::from_str(&zones([].iter())).unwrap();
        assert_eq!(none["data"], json!([]));
    }

    #[test]
    fn a_move_carries_the_adapter_s_id_and_zone_whatever_the_player_wrote() {
        let fields = json!({ "velocity": [1, 0, 0], "id": "1", "zone": "other" });
        let Value::Object(fields) = fields else { unreachable!() };
        let v: Value =
            serde_json::from_str(&player_move("7.12", PlayerId(u64::MAX), fields)).unwrap();
        assert_eq!(v["data"]["id"], u64::MAX.to_string(), "exact, as a string");
        assert_eq!(v["data"]["zone"], "7.12");
        assert_eq!(v["data"]["velocity"], json!([1, 0, 0]));
    }

    #[test]
    fn reports_parse_and_bad_ones_say_why() {
        let text = r#"{"namespace":"players","event":"position","data":{"zone":"7.12",
            "players":[{"id":"18446744073709551615","position":[1.5,0,2],"out_of_zone":true}]}}"#;
        assert_eq!(
            parse(text).unwrap(),
            Said::Positions {
                zone: "7.12".to_owned(),
                players: vec![Reported {
                    id: PlayerId(u64::MAX),
                    position: [1.5, 0.0, 2.0],
                    out_of_zone: true
                }],
            }
        );
        let info = r#"{"namespace":"serverinfo","event":"report","data":{"tps":60,"chunks_loading":2,"players_number":3}}"#;
        assert_eq!(parse(info).unwrap(), Said::Info { tps: 60.0, chunks_loading: 2, players: 3 });
        assert!(parse("[1]").unwrap_err().contains("not a {namespace"));
        let bad = r#"{"namespace":"players","event":"position","data":{"zone":"1.1","players":[{"id":"x","position":[0,0,0]}]}}"#;
        assert!(parse(bad).unwrap_err().contains("player id"));
        let other = r#"{"namespace":"server","event":"add_prop","data":{}}"#;
        assert_eq!(parse(other).unwrap(), Said::Other("server/add_prop".to_owned()));
    }
}
