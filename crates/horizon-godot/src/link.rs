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
//! | `Lease` 11 | u64 bubble, u64 epoch | — (the region may be written from now on) |
//! | `Lapse` 12 | — | — (the region may no longer be written) |
//! | `Positions` 13 | — | u32 n, then n × (u64 player, 6 × f64: position m, velocity m/s) |
//! | `Own` 14 | u64 player | the player's own state's bytes, sent to them ahead of the tick's view (empty: none) |
//!
//! `bytes` is `u32 n | n bytes`. A reply's status is `Ok` 0, `Refused` 1 (a `Decode` that
//! failed: the game said no) or `Broken` 2 (the script broke a rule of the API, the bytes say
//! which; Godot exits after sending it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The link protocol this sidecar speaks (the addon refuses any other).
pub const PROTOCOL: u32 = 4;

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
    Lease = 11,
    Lapse = 12,
    Positions = 13,
    Own = 14,
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

/// A sidecar's frame, as the engine side reads it (what the Godot 3 addon does in GDScript and
/// the Godot 4 extension in Rust).
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    Hello { protocol: u32, tick_ms: u32, server_name: String, site: String },
    Empty { handle: u32, bubble: u64, world: u32, bounds: Option<[f64; 6]> },
    Encode { handle: u32 },
    Decode { handle: u32, bytes: Vec<u8> },
    Join { handle: u32, player: u64, bytes: Vec<u8> },
    Leave { handle: u32, player: u64 },
    Input { handle: u32, player: u64, seq: u64, bytes: Vec<u8> },
    Step { handle: u32, tick: u64 },
    View { handle: u32, tick: u64 },
    Drop { handle: u32 },
    Ping,
    Lease { handle: u32, bubble: u64, epoch: u64 },
    Lapse { handle: u32 },
    Positions { handle: u32 },
    Own { handle: u32, player: u64 },
}

impl Call {
    /// The op, for the reply.
    pub fn op(&self) -> Op {
        match self {
            Call::Hello { .. } => Op::Hello,
            Call::Empty { .. } => Op::Empty,
            Call::Encode { .. } => Op::Encode,
            Call::Decode { .. } => Op::Decode,
            Call::Join { .. } => Op::Join,
            Call::Leave { .. } => Op::Leave,
            Call::Input { .. } => Op::Input,
            Call::Step { .. } => Op::Step,
            Call::View { .. } => Op::View,
            Call::Drop { .. } => Op::Drop,
            Call::Ping => Op::Ping,
            Call::Lease { .. } => Op::Lease,
            Call::Lapse { .. } => Op::Lapse,
            Call::Positions { .. } => Op::Positions,
            Call::Own { .. } => Op::Own,
        }
    }

    /// One frame's body (after its length): `op | handle | fields`.
    pub fn decode(body: &[u8]) -> Result<Call, String> {
        let mut r = Reader { bytes: body, at: 0 };
        let (op, handle) = (r.u8()?, r.u32()?);
        let call = match op {
            0 => Call::Hello {
                protocol: handle,
                tick_ms: r.u32()?,
                server_name: r.string()?,
                site: r.string()?,
            },
            1 => {
                let (bubble, world) = (r.u64()?, r.u32()?);
                let bounds = match r.u8()? {
                    0 => None,
                    _ => Some([r.f64()?, r.f64()?, r.f64()?, r.f64()?, r.f64()?, r.f64()?]),
                };
                Call::Empty { handle, bubble, world, bounds }
            }
            2 => Call::Encode { handle },
            3 => Call::Decode { handle, bytes: r.bytes()? },
            4 => Call::Join { handle, player: r.u64()?, bytes: r.bytes()? },
            5 => Call::Leave { handle, player: r.u64()? },
            6 => Call::Input { handle, player: r.u64()?, seq: r.u64()?, bytes: r.bytes()? },
            7 => Call::Step { handle, tick: r.u64()? },
            8 => Call::View { handle, tick: r.u64()? },
            9 => Call::Drop { handle },
            10 => Call::Ping,
            11 => Call::Lease { handle, bubble: r.u64()?, epoch: r.u64()? },
            12 => Call::Lapse { handle },
            13 => Call::Positions { handle },
            14 => Call::Own { handle, player: r.u64()? },
            op => return Err(format!("unknown link op {op}")),
        };
        if r.at != body.len() {
            return Err(format!("{} bytes after a {:?} frame", body.len() - r.at, call.op()));
        }
        Ok(call)
    }
}

/// A reply frame, length first: `u32 length | u8 op | u8 status | u32 n | n bytes`.
pub fn reply(op: Op, status: Status, bytes: &[u8]) -> Vec<u8> {
    let n = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(10 + n as usize);
    out.extend_from_slice(&(6 + n).to_le_bytes());
    out.push(op as u8);
    out.push(match status {
        Status::Ok => 0,
        Status::Refused => 1,
        Status::Broken => 2,
    });
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&bytes[..n as usize]);
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("a frame cut short at byte {}", self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    fn f64(&mut self) -> Result<f64, String> {
        Ok(f64::from_bits(self.u64()?))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }

    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(frame: Frame) -> Vec<u8> {
        frame.finish()[4..].to_vec()
    }

    #[test]
    fn every_frame_the_sidecar_writes_reads_back_as_its_call() {
        let cases = [
            (
                Frame::new(Op::Hello, PROTOCOL).u32(33).bytes(b"mtl-gs-1").bytes(b"MTL"),
                Call::Hello {
                    protocol: PROTOCOL,
                    tick_ms: 33,
                    server_name: "mtl-gs-1".into(),
                    site: "MTL".into(),
                },
            ),
            (
                [1.0, 2.0, 3.0, 4.0, 5.0, 6.5]
                    .into_iter()
                    .fold(Frame::new(Op::Empty, 7).u64(u64::MAX).u32(2).u8(1), Frame::f64),
                Call::Empty {
                    handle: 7,
                    bubble: u64::MAX,
                    world: 2,
                    bounds: Some([1.0, 2.0, 3.0, 4.0, 5.0, 6.5]),
                },
            ),
            (
                Frame::new(Op::Empty, 8).u64(1).u32(0).u8(0),
                Call::Empty { handle: 8, bubble: 1, world: 0, bounds: None },
            ),
            (
                Frame::new(Op::Decode, 3).bytes(&[9, 9]),
                Call::Decode { handle: 3, bytes: vec![9, 9] },
            ),
            (
                Frame::new(Op::Input, 3).u64(5).u64(6).bytes(b"jump"),
                Call::Input { handle: 3, player: 5, seq: 6, bytes: b"jump".to_vec() },
            ),
            (Frame::new(Op::View, 3).u64(40), Call::View { handle: 3, tick: 40 }),
            (Frame::new(Op::Ping, 0), Call::Ping),
            (
                Frame::new(Op::Lease, 3).u64(7).u64(1 << 32 | 5),
                Call::Lease { handle: 3, bubble: 7, epoch: 1 << 32 | 5 },
            ),
            (Frame::new(Op::Lapse, 3), Call::Lapse { handle: 3 }),
            (Frame::new(Op::Positions, 3), Call::Positions { handle: 3 }),
            (Frame::new(Op::Own, 3).u64(5), Call::Own { handle: 3, player: 5 }),
        ];
        for (frame, call) in cases {
            assert_eq!(Call::decode(&body(frame)), Ok(call));
        }
    }

    #[test]
    fn a_frame_cut_short_or_too_long_or_unknown_is_refused() {
        let whole = body(Frame::new(Op::Leave, 1).u64(5));
        assert!(Call::decode(&whole[..whole.len() - 1]).unwrap_err().contains("cut short"));
        let mut long = whole.clone();
        long.push(0);
        assert!(Call::decode(&long).unwrap_err().contains("1 bytes after"));
        assert!(Call::decode(&[42, 0, 0, 0, 0]).unwrap_err().contains("unknown link op 42"));
        // A declared length beyond the frame never allocates it.
        let lying = body(Frame::new(Op::Decode, 1).u32(u32::MAX));
        assert!(Call::decode(&lying).unwrap_err().contains("cut short"));
    }

    #[test]
    fn a_reply_is_what_the_link_reads() {
        assert_eq!(reply(Op::View, Status::Ok, &[1, 2]), [8, 0, 0, 0, 8, 0, 2, 0, 0, 0, 1, 2]);
    }
}
