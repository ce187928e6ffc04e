//! The `Horizon` node: the link to the sidecar, read in `process` (blocking between calls, as
//! the Godot 3 addon: an idle server sleeps in the socket), each call run on the game's script.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;

use godot::classes::{INode, Node};
use godot::prelude::*;
use horizon_godot::link::{self, Call, Op, PROTOCOL, Status};

/// Exit codes, as the Godot 3 addon's (docs/godot.md).
const EXIT_LINK_ENDED: i32 = 0;
const EXIT_BAD_USE: i32 = 64;
const EXIT_NO_LINK: i32 = 69;
const EXIT_GAME_BROKEN: i32 = 70;

const GAME_METHODS: [&str; 8] =
    ["empty", "encode", "decode", "join", "leave", "input", "step", "view"];

/// A Godot game server's link to its sidecar. Call `serve(game)` once from the main scene.
#[derive(GodotClass)]
#[class(base = Node, init)]
pub struct Horizon {
    base: Base<Node>,
    #[var]
    server_name: GString,
    #[var]
    site: GString,
    #[var]
    tick_ms: i64,
    game: Option<Gd<Object>>,
    stream: Option<TcpStream>,
    states: HashMap<u32, Variant>,
}

impl std::fmt::Debug for Horizon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Horizon").field("states", &self.states.len()).finish()
    }
}

#[godot_api]
impl Horizon {
    #[signal]
    fn linked(server_name: GString, site: GString);
    #[signal]
    fn region_started(state: Variant);
    #[signal]
    fn region_dropped(state: Variant);
    #[signal]
    fn player_joined(state: Variant, player: i64);
    #[signal]
    fn player_left(state: Variant, player: i64);
    #[signal]
    fn stepped(state: Variant, tick: i64);
    #[signal]
    fn lease_granted(state: Variant, bubble: i64, epoch: i64);
    #[signal]
    fn lease_lost(state: Variant);

    /// Serves `game` (an object with the eight methods) over the link named on the command line.
    #[func]
    fn serve(&mut self, game: Gd<Object>) {
        if let Some(missing) = GAME_METHODS.iter().find(|m| !game.has_method(**m)) {
            return self.fail(EXIT_BAD_USE, &format!("the game has no method {missing}"));
        }
        let port = std::env::args()
            .find_map(|a| a.strip_prefix("--horizon-link=").and_then(|p| p.parse::<u16>().ok()));
        let Some(port) = port.filter(|p| *p > 0) else {
            return self
                .fail(EXIT_BAD_USE, "no --horizon-link=PORT: start me with horizon godot-server");
        };
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                self.stream = Some(stream);
                self.game = Some(game);
            }
            Err(e) => {
                self.fail(EXIT_NO_LINK, &format!("cannot dial the sidecar on port {port}: {e}"))
            }
        }
    }
}

#[godot_api]
impl INode for Horizon {
    fn process(&mut self, _delta: f64) {
        if self.game.is_none() {
            return;
        }
        // Wait for the sidecar's next frame, then take every frame already there.
        loop {
            let body = match self.read_frame() {
                Ok(body) => body,
                Err(why) => return self.quit(EXIT_LINK_ENDED, &why),
            };
            let call = match Call::decode(&body) {
                Ok(call) => call,
                Err(why) => return self.fail(EXIT_GAME_BROKEN, &why),
            };
            if let Err(why) = self.handle(call) {
                return self.fail(EXIT_GAME_BROKEN, &why);
            }
            if !self.more_waiting() {
                return;
            }
        }
    }
}

impl Horizon {
    fn read_frame(&mut self) -> Result<Vec<u8>, String> {
        let stream = self.stream.as_mut().ok_or("no link")?;
        let mut head = [0u8; 4];
        stream.read_exact(&mut head).map_err(|e| format!("the link to the sidecar ended: {e}"))?;
        let length = u32::from_le_bytes(head) as usize;
        if !(5..=link::MAX_REPLY_BYTES).contains(&length) {
            return Err(format!("a link frame of {length} bytes"));
        }
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).map_err(|e| format!("the link to the sidecar ended: {e}"))?;
        Ok(body)
    }

    fn more_waiting(&self) -> bool {
        let Some(stream) = &self.stream else { return false };
        let mut probe = [0u8; 1];
        let _ = stream.set_nonblocking(true);
        let waiting = stream.peek(&mut probe).is_ok_and(|n| n > 0);
        let _ = stream.set_nonblocking(false);
        waiting
    }

    fn reply(&mut self, op: Op, status: Status, bytes: &[u8]) -> Result<(), String> {
        let stream = self.stream.as_mut().ok_or("no link")?;
        stream.write_all(&link::reply(op, status, bytes)).map_err(|e| e.to_string())
    }

    fn call_game(&mut self, method: &str, args: &[Variant]) -> Variant {
        match self.game.as_mut() {
            Some(game) => game.call(method, args),
            None => Variant::nil(),
        }
    }

    /// Calls a method the game may leave out (`lease_granted`, `lease_lost`).
    fn call_optional(&mut self, method: &str, args: &[Variant]) {
        if self.game.as_ref().is_some_and(|g| g.has_method(method)) {
            self.call_game(method, args);
        }
    }

    fn state(&self, handle: u32) -> Result<Variant, String> {
        self.states
            .get(&handle)
            .cloned()
            .ok_or_else(|| format!("the sidecar named state {handle}, which does not exist"))
    }

    /// `positions()`'s `[[player, x, y, z, vx, vy, vz], ...]` as the link's reply: `u32 n`, then
    /// n × (u64 player, 6 × f64), little-endian.
    fn positions_of(v: &Variant) -> Result<Vec<u8>, String> {
        const BAD: &str = "positions() gave an entry that is not [player, x, y, z, vx, vy, vz]";
        let list =
            v.try_to::<VarArray>().map_err(|_| "positions() returned no Array".to_owned())?;
        let mut out = (list.len() as u32).to_le_bytes().to_vec();
        for entry in list.iter_shared() {
            let e = entry.try_to::<VarArray>().map_err(|_| BAD.to_owned())?;
            if e.len() != 7 {
                return Err(BAD.into());
            }
            let player = e.get(0).and_then(|p| p.try_to::<i64>().ok()).ok_or(BAD)?;
            out.extend_from_slice(&player.to_le_bytes());
            for i in 1..7 {
                let x = e.get(i).and_then(|x| x.try_to::<f64>().ok()).ok_or(BAD)?;
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        Ok(out)
    }

    fn bytes_of(v: &Variant, method: &str) -> Result<Vec<u8>, String> {
        v.try_to::<PackedByteArray>()
            .map(|b| b.to_vec())
            .map_err(|_| format!("{method}() returned no PackedByteArray"))
    }

    fn is_state(v: &Variant) -> bool {
        matches!(v.get_type(), VariantType::DICTIONARY | VariantType::OBJECT)
    }

    fn handle(&mut self, call: Call) -> Result<(), String> {
        let op = call.op();
        match call {
            Call::Hello { protocol, tick_ms, server_name, site } => {
                if protocol != PROTOCOL {
                    return Err(format!(
                        "link protocol {protocol}, this extension speaks {PROTOCOL}"
                    ));
                }
                self.tick_ms = i64::from(tick_ms);
                self.server_name = GString::from(server_name.as_str());
                self.site = GString::from(site.as_str());
                let key = std::env::var(horizon_godot::host::LINK_KEY_ENV).unwrap_or_default();
                let engine = godot::classes::Engine::singleton().get_version_info();
                let engine = engine.get("string").map(|v| v.to_string()).unwrap_or_default();
                self.reply(op, Status::Ok, format!("{key}\n{engine}").as_bytes())?;
                let (name, site) = (self.server_name.to_variant(), self.site.to_variant());
                self.base_mut().emit_signal("linked", &[name, site]);
            }
            Call::Empty { handle, bubble, world, bounds } => {
                let bounds = match bounds {
                    Some(b) => b.iter().map(|v| v.to_variant()).collect::<VarArray>().to_variant(),
                    None => Variant::nil(),
                };
                let args = [(bubble as i64).to_variant(), i64::from(world).to_variant(), bounds];
                let state = self.call_game("empty", &args);
                if !Self::is_state(&state) {
                    return Err("empty() returned no Dictionary or Object".into());
                }
                self.states.insert(handle, state.clone());
                self.base_mut().emit_signal("region_started", &[state]);
            }
            Call::Encode { handle } => {
                let state = self.state(handle)?;
                let bytes = Self::bytes_of(&self.call_game("encode", &[state]), "encode")?;
                self.reply(op, Status::Ok, &bytes)?;
            }
            Call::Decode { handle, bytes } => {
                let state = self
                    .call_game("decode", &[PackedByteArray::from(bytes.as_slice()).to_variant()]);
                if state.get_type() == VariantType::STRING {
                    self.reply(op, Status::Refused, state.to_string().as_bytes())?;
                } else if Self::is_state(&state) {
                    self.states.insert(handle, state.clone());
                    self.reply(op, Status::Ok, &[])?;
                    self.base_mut().emit_signal("region_started", &[state]);
                } else {
                    return Err("decode() returned no state and no String".into());
                }
            }
            Call::Join { handle, player, bytes } => {
                let state = self.state(handle)?;
                let player = (player as i64).to_variant();
                let bytes = PackedByteArray::from(bytes.as_slice()).to_variant();
                self.call_game("join", &[state.clone(), player.clone(), bytes]);
                self.base_mut().emit_signal("player_joined", &[state, player]);
            }
            Call::Leave { handle, player } => {
                let state = self.state(handle)?;
                let player = (player as i64).to_variant();
                let out = self.call_game("leave", &[state.clone(), player.clone()]);
                let bytes = Self::bytes_of(&out, "leave")?;
                self.reply(op, Status::Ok, &bytes)?;
                self.base_mut().emit_signal("player_left", &[state, player]);
            }
            Call::Input { handle, player, seq, bytes } => {
                let state = self.state(handle)?;
                let args = [
                    state,
                    (player as i64).to_variant(),
                    (seq as i64).to_variant(),
                    PackedByteArray::from(bytes.as_slice()).to_variant(),
                ];
                self.call_game("input", &args);
            }
            Call::Step { handle, tick } => {
                let state = self.state(handle)?;
                let tick = (tick as i64).to_variant();
                self.call_game("step", &[state.clone(), tick.clone()]);
                self.base_mut().emit_signal("stepped", &[state, tick]);
            }
            Call::View { handle, tick } => {
                let state = self.state(handle)?;
                let out = self.call_game("view", &[state, (tick as i64).to_variant()]);
                let bytes = Self::bytes_of(&out, "view")?;
                self.reply(op, Status::Ok, &bytes)?;
            }
            Call::Drop { handle } => {
                if let Some(state) = self.states.remove(&handle) {
                    self.base_mut().emit_signal("region_dropped", &[state]);
                }
            }
            Call::Ping => self.reply(op, Status::Ok, &[])?,
            Call::Lease { handle, bubble, epoch } => {
                let state = self.state(handle)?;
                // Ids travel as i64 bit patterns: GDScript has no u64.
                let args = [state, (bubble as i64).to_variant(), (epoch as i64).to_variant()];
                self.call_optional("lease_granted", &args);
                self.base_mut().emit_signal("lease_granted", &args);
            }
            Call::Lapse { handle } => {
                let state = self.state(handle)?;
                self.call_optional("lease_lost", std::slice::from_ref(&state));
                self.base_mut().emit_signal("lease_lost", &[state]);
            }
            Call::Positions { handle } => {
                let state = self.state(handle)?;
                let has = self.game.as_ref().is_some_and(|g| g.has_method("positions"));
                let list = if has {
                    self.call_game("positions", &[state])
                } else {
                    VarArray::new().to_variant()
                };
                let bytes = Self::positions_of(&list)?;
                self.reply(op, Status::Ok, &bytes)?;
            }
            Call::Own { handle, player } => {
                let state = self.state(handle)?;
                let has = self.game.as_ref().is_some_and(|g| g.has_method("own"));
                let bytes = if has {
                    let out = self.call_game("own", &[state, (player as i64).to_variant()]);
                    Self::bytes_of(&out, "own")?
                } else {
                    Vec::new()
                };
                self.reply(op, Status::Ok, &bytes)?;
            }
        }
        Ok(())
    }

    /// The game or the link is unusable: say why, tell the sidecar, and exit with `code`.
    fn fail(&mut self, code: i32, why: &str) {
        godot_error!("horizon: {why}");
        let _ = self.reply(Op::Ping, Status::Broken, why.as_bytes());
        self.quit(code, why);
    }

    fn quit(&mut self, code: i32, why: &str) {
        godot_print!("horizon: exiting ({code}): {why}");
        self.game = None;
        self.stream = None;
        if self.base().is_inside_tree() {
            self.base().get_tree().quit_ex().exit_code(code).done();
        }
    }
}
