//! [`GodotGame`]: horizon-sdk's [`Game`] over the link, each region's state held by the Godot
//! process and named by a handle.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use horizon_proto::server::{MAX_POSITIONS, PlayerPosition};
use horizon_proto::{BubbleId, LeaseRef, PlayerId, Region, Seq, Tick, Vec3};
use horizon_sdk::Game;

use crate::link::{Frame, Link, LinkError, Op, Status};

/// What to do when the link breaks in the middle of a [`Game`] call, which cannot fail: the
/// sidecar ([`crate::host`]) kills the Godot process and exits, so the agent sees a game
/// server end and restarts its regions from their copies. After it returns, the call gives an
/// empty result and every later call fails at once.
#[derive(Clone)]
pub struct Broken(Arc<dyn Fn(&LinkError) + Send + Sync>);

impl Broken {
    pub fn new(f: impl Fn(&LinkError) + Send + Sync + 'static) -> Broken {
        Broken(Arc::new(f))
    }

    pub(crate) fn report(&self, e: &LinkError) {
        (self.0)(e);
    }
}

impl std::fmt::Debug for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Broken")
    }
}

/// The game of a Godot process, as horizon-sdk drives it.
#[derive(Debug)]
pub struct GodotGame {
    link: Arc<Mutex<Link>>,
    next_handle: AtomicU32,
    broken: Broken,
}

/// One region's state: a handle into the Godot process's table, freed there when dropped.
#[derive(Debug)]
pub struct GodotState {
    handle: u32,
    link: Arc<Mutex<Link>>,
}

impl Drop for GodotState {
    fn drop(&mut self) {
        // A link already broken has been reported; nothing is left to free.
        let _ = lock(&self.link).send(Frame::new(Op::Drop, self.handle));
    }
}

fn lock(link: &Mutex<Link>) -> MutexGuard<'_, Link> {
    // A panic while holding the link leaves it as usable as it was: no invariant spans calls.
    link.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl GodotGame {
    pub fn new(link: Arc<Mutex<Link>>, broken: Broken) -> GodotGame {
        GodotGame { link, next_handle: AtomicU32::new(1), broken }
    }

    fn state(&self) -> GodotState {
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        GodotState { handle, link: self.link.clone() }
    }

    fn send(&self, frame: Frame) {
        let result = lock(&self.link).send(frame);
        if let Err(e) = result {
            self.broken.report(&e);
        }
    }

    /// A call whose reply is bytes; empty after a break.
    fn bytes(&self, op: Op, frame: Frame) -> Vec<u8> {
        let result = lock(&self.link).call(op, frame);
        match result {
            Ok((Status::Ok, bytes)) => bytes,
            Ok((status, _)) => {
                self.broken.report(&LinkError::Protocol(format!("{op:?} answered {status:?}")));
                Vec::new()
            }
            Err(e) => {
                self.broken.report(&e);
                Vec::new()
            }
        }
    }
}

impl Game for GodotGame {
    type State = GodotState;

    fn empty(&self, bubble: BubbleId, region: &Region) -> GodotState {
        let state = self.state();
        let mut frame = Frame::new(Op::Empty, state.handle).u64(bubble.0).u32(region.world.0);
        frame = match region.bounds {
            Some(b) => [b.min.x, b.min.y, b.min.z, b.max.x, b.max.y, b.max.z]
                .into_iter()
                .fold(frame.u8(1), Frame::f64),
            None => frame.u8(0),
        };
        self.send(frame);
        state
    }

    fn encode(&self, state: &GodotState) -> Vec<u8> {
        self.bytes(Op::Encode, Frame::new(Op::Encode, state.handle))
    }

    fn decode(&self, bytes: &[u8]) -> Result<GodotState, String> {
        let state = self.state();
        let result =
            lock(&self.link).call(Op::Decode, Frame::new(Op::Decode, state.handle).bytes(bytes));
        match result {
            Ok((Status::Ok, _)) => Ok(state),
            // The Godot side keeps nothing under a handle it refused (its `Drop` is a no-op).
            Ok((_, why)) => Err(String::from_utf8_lossy(&why).into_owned()),
            Err(e) => {
                self.broken.report(&e);
                Err(e.to_string())
            }
        }
    }

    fn join(&self, state: &mut GodotState, player: PlayerId, bytes: &[u8]) {
        self.send(Frame::new(Op::Join, state.handle).u64(player.0).bytes(bytes));
    }

    fn leave(&self, state: &mut GodotState, player: PlayerId) -> Vec<u8> {
        self.bytes(Op::Leave, Frame::new(Op::Leave, state.handle).u64(player.0))
    }

    fn input(&self, state: &mut GodotState, player: PlayerId, seq: Seq, bytes: &[u8]) {
        self.send(Frame::new(Op::Input, state.handle).u64(player.0).u64(seq.0).bytes(bytes));
    }

    fn step(&self, state: &mut GodotState, tick: Tick) {
        self.send(Frame::new(Op::Step, state.handle).u64(tick.0));
    }

    fn view(&self, state: &GodotState, tick: Tick) -> Vec<u8> {
        self.bytes(Op::View, Frame::new(Op::View, state.handle).u64(tick.0))
    }

    fn started(&self, state: &mut GodotState, lease: LeaseRef) {
        self.send(Frame::new(Op::Lease, state.handle).u64(lease.bubble.0).u64(lease.epoch.0));
    }

    fn stopped(&self, state: &mut GodotState) {
        self.send(Frame::new(Op::Lapse, state.handle));
    }

    fn own(&self, state: &GodotState, player: PlayerId) -> Option<Vec<u8>> {
        let bytes = self.bytes(Op::Own, Frame::new(Op::Own, state.handle).u64(player.0));
        (!bytes.is_empty()).then_some(bytes)
    }

    fn positions(&self, state: &GodotState) -> Vec<PlayerPosition> {
        let bytes = self.bytes(Op::Positions, Frame::new(Op::Positions, state.handle));
        match decode_positions(&bytes) {
            Ok(positions) => positions,
            Err(why) => {
                self.broken.report(&LinkError::Protocol(why));
                Vec::new()
            }
        }
    }
}

/// A `Positions` reply: `u32 n`, then n × (u64 player, 6 × f64), little-endian. Entries that are
/// not finite are left out (placement refuses them anyway). Empty bytes: a broken link's.
fn decode_positions(bytes: &[u8]) -> Result<Vec<PlayerPosition>, String> {
    const ENTRY: usize = 8 + 6 * 8;
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let n = bytes.get(..4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])) as usize;
    if bytes.len() < 4 || bytes.len() != 4 + n.saturating_mul(ENTRY) {
        return Err(format!(
            "a positions reply of {} bytes does not hold {n} entries",
            bytes.len()
        ));
    }
    let f = |b: &[u8], i: usize| {
        f64::from_le_bytes(b[8 + 8 * i..16 + 8 * i].try_into().unwrap_or([0; 8]))
    };
    let entries = bytes[4..].chunks_exact(ENTRY).map(|b| {
        let player = PlayerId(u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])));
        let pos = Vec3 { x: f(b, 0), y: f(b, 1), z: f(b, 2) };
        let vel = Vec3 { x: f(b, 3), y: f(b, 4), z: f(b, 5) };
        PlayerPosition { player, pos, vel }
    });
    Ok(entries.filter(|p| p.pos.is_finite() && p.vel.is_finite()).take(MAX_POSITIONS).collect())
}
