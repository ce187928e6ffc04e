//! The loopback link between the sidecar and its Godot process: length-prefixed frames over
//! one TCP connection, little-endian throughout (what GDScript's `StreamPeer` reads and writes
//! by default).
//!
//! Sidecar → Godot: `u32 length | u8 op | u32 handle | fields`, where `handle` names one
//! region's state in the Godot process (for `Hello` it carries the link protocol version).
//! Godot → sidecar, only for the ops that return something: `u32 length | u8 op | u8 status |
//! u32 n | n bytes`. Ops without a result are written to a buffer and sent with the next op
//! that has one, so a tick of a region costs one round trip (`step` is sent with `view`).
//!
//! | op | fields | reply |
//! |---|---|---|
//! | `Hello` 0 | u32 tick_ms, bytes server name, bytes site | the engine's version string |
//! | `Empty` 1 | u64 bubble, u32 world, u8 has bounds, 6 × f64 (min x y z, max x y z) | — |
//! | `Encode` 2 | — | the state's bytes |
//! | `Decode` 3 | bytes | `Ok`, or `Refused` with what is wrong with them |
//! | `Join` 4 | u64 player, bytes | — |
//! | `Leave` 5 | u64 player | the player's bytes |
//! | `Input` 6 | u64 player, u64 seq, bytes | — |
//! | `Step` 7 | u64 tick | — |
//! | `View` 8 | u64 tick | the view's bytes |
//! | `Drop` 9 | — | — |
//! | `Ping` 10 | — | nothing (`Ok`) |
//!
//! `bytes` is `u32 n | n bytes`. A reply's status is `Ok` 0, `Refused` 1 (a `Decode` that
//! failed: the game said no) or `Broken` 2 (the script broke a rule of the API, the bytes say
//! which; Godot exits after sending it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The link protocol this sidecar speaks (the addon refuses any other).
pub const PROTOCOL: u32 = 1;

/// The longest reply accepted: a region's whole state, with room. A longer length is a broken
/// Godot side, not a big game.
pub const MAX_REPLY_BYTES: usize = 64 << 20;

/// Commands waiting for the next call are sent once they reach this many bytes.
const SEND_AT_BYTES: usize = 256 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Hello = 0,
    Empty = 1,
    Encode = 2,
    Decode = 3,
    Join = 4,
    Leave = 5,
    Input = 6,
    Step = 7,
    View = 8,
    Drop = 9,
    Ping = 10,
}

/// A reply's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Refused,
    Broken,
}

/// Why the link cannot go on. Each ends the game server (see [`crate::Broken`]).
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("the Godot process did not answer {op:?} within {}", fmt_ms(*.within))]
    Timeout { op: Op, within: Duration },
    #[error("the link to the Godot process ended: {0}")]
    Ended(String),
    #[error("the Godot side broke the link protocol: {0}")]
    Protocol(String),
    #[error("the game script broke the API: {0}")]
    Script(String),
}

fn fmt_ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// One frame being written.
#[derive(Debug)]
pub struct Frame {
    bytes: Vec<u8>,
}

impl Frame {
    pub fn new(op: Op, handle: u32) -> Frame {
        let mut bytes = Vec::with_capacity(32);
        bytes.extend_from_slice(&[0; 4]);
        bytes.push(op as u8);
        bytes.extend_from_slice(&handle.to_le_bytes());
        Frame { bytes }
    }

    pub fn u8(mut self, v: u8) -> Frame {
        self.bytes.push(v);
        self
    }

    pub fn u32(mut self, v: u32) -> Frame {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(mut self, v: u64) -> Frame {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn f64(mut self, v: f64) -> Frame {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// `u32 n | n bytes`. A game's bytes are far below 4 GiB (the agent protocol's frames are
    /// at most 1 MiB); a longer slice is cut, and the Godot side refuses it as malformed.
    pub fn bytes(self, v: &[u8]) -> Frame {
        let n = u32::try_from(v.len()).unwrap_or(u32::MAX);
        let mut f = self.u32(n);
        f.bytes.extend_from_slice(&v[..n as usize]);
        f
    }

    fn finish(mut self) -> Vec<u8> {
        let n = u32::try_from(self.bytes.len() - 4).unwrap_or(u32::MAX);
        self.bytes[..4].copy_from_slice(&n.to_le_bytes());
        self.bytes
    }
}

/// The sidecar's end of the link. Not thread-safe by itself: [`crate::GodotGame`] holds it
/// under a mutex.
#[derive(Debug)]
pub struct Link {
    stream: TcpStream,
    pending: Vec<u8>,
    reply_within: Duration,
    /// Set by the first error: later calls fail at once instead of waiting out a timeout each.
    dead: Option<String>,
    last_call: Instant,
}

impl Link {
    /// A link over an accepted connection; every reply must come within `reply_within`.
    pub fn new(stream: TcpStream, reply_within: Duration) -> std::io::Result<Link> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(reply_within))?;
        Ok(Link {
            stream,
            pending: Vec::new(),
            reply_within,
            dead: None,
            last_call: Instant::now(),
        })
    }

    /// How long since the last call was answered (the watchdog pings an idle link).
    pub fn idle_for(&self) -> Duration {
        self.last_call.elapsed()
    }

    /// Ends the link: the Godot process sees it close and quits.
    pub fn close(&mut self) {
        self.dead.get_or_insert_with(|| "closed".to_owned());
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    /// Queues a frame that has no reply; it goes with the next call (or once enough wait).
    pub fn send(&mut self, frame: Frame) -> Result<(), LinkError> {
        self.pending.extend_from_slice(&frame.finish());
        if self.pending.len() >= SEND_AT_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends everything queued.
    pub fn flush(&mut self) -> Result<(), LinkError> {
        if let Some(why) = &self.dead {
            self.pending.clear();
            return Err(LinkError::Ended(why.clone()));
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let result = self.stream.write_all(&self.pending);
        self.pending.clear();
        result.map_err(|e| self.died(LinkError::Ended(e.to_string())))
    }

    fn died(&mut self, e: LinkError) -> LinkError {
        self.dead.get_or_insert_with(|| e.to_string());
        e
    }

    /// Sends `frame` after what is queued and waits for its reply.
    pub fn call(&mut self, op: Op, frame: Frame) -> Result<(Status, Vec<u8>), LinkError> {
        let result = self.exchange(op, frame);
        self.last_call = Instant::now();
        result.map_err(|e| self.died(e))
    }

    fn exchange(&mut self, op: Op, frame: Frame) -> Result<(Status, Vec<u8>), LinkError> {
        self.pending.extend_from_slice(&frame.finish());
        self.flush()?;
        let mut head = [0u8; 4];
        self.read(&mut head, op)?;
        let length = u32::from_le_bytes(head) as usize;
        if !(6..=MAX_REPLY_BYTES).contains(&length) {
            return Err(LinkError::Protocol(format!("a reply of {length} bytes")));
        }
        let mut body = vec![0u8; length];
        self.read(&mut body, op)?;
        let status = match body[1] {
            0 => Status::Ok,
            1 => Status::Refused,
            2 => Status::Broken,
            s => return Err(LinkError::Protocol(format!("reply status {s}"))),
        };
        let n = u32::from_le_bytes([body[2], body[3], body[4], body[5]]) as usize;
        if n != length - 6 {
            return Err(LinkError::Protocol(format!("{n} bytes announced, {} sent", length - 6)));
        }
        let replied = body[0];
        body.drain(..6);
        if status == Status::Broken {
            return Err(LinkError::Script(String::from_utf8_lossy(&body).into_owned()));
        }
        if replied != op as u8 {
            return Err(LinkError::Protocol(format!("a reply to op {replied} for {op:?}")));
        }
        Ok((status, body))
    }

    fn read(&mut self, buf: &mut [u8], op: Op) -> Result<(), LinkError> {
        self.stream.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                LinkError::Timeout { op, within: self.reply_within }
            }
            _ => LinkError::Ended(e.to_string()),
        })
    }
}
