//! Framing: every message travels in one frame.
//!
//! ```text
//! offset  size  field
//! 0       2     magic, the ASCII bytes "HZ"
//! 2       1     protocol version (negotiated by the hello; the hello frame carries the
//!               sender's highest version)
//! 3       1     channel (1 control, 2 transfer, 3 server, 4 gateway)
//! 4       4     payload length in bytes, big-endian, at most the frame kind's limit
//! 8       len   payload: one postcard-encoded message
//! ```
//!
//! Decoding never panics: any byte string gives either a message or a [`DecodeError`] whose
//! [`DecodeError::code`] is the error code to close the connection with.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ErrorCode;

/// The first two bytes of every frame.
pub const MAGIC: [u8; 2] = *b"HZ";
/// The version this build speaks best.
pub const PROTOCOL_VERSION: u8 = 1;
/// The oldest version this build still speaks.
pub const MIN_PROTOCOL_VERSION: u8 = 1;
/// Bytes before the payload.
pub const HEADER_BYTES: usize = 8;
/// Largest payload of a stream or request frame (1 MiB). Bigger state goes in chunks.
pub const MAX_FRAME_BYTES: usize = 1 << 20;
/// Largest hello payload: a peer that sends more before authenticating is cut off.
pub const MAX_HELLO_BYTES: usize = 4 << 10;
/// Largest datagram, header included: fits the smallest QUIC datagram size on any path.
pub const MAX_DATAGRAM_BYTES: usize = 1200;
/// Largest opaque chunk of a snapshot, delta or backup in one frame.
pub const MAX_CHUNK_BYTES: usize = 512 << 10;
/// Longest [`crate::Name`] (site, server, build).
pub const MAX_NAME_BYTES: usize = 64;

/// The four channels of design.md §7. Each is its own ALPN, so a connection carries one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ChannelId {
    /// core ↔ agent: registration, state sync, leases, scoring inputs, handover orchestration.
    Control,
    /// agent ↔ agent: state transfer for handovers and border crossings, forwarded inputs, probes.
    Transfer,
    /// agent ↔ game server: the QUIC agent protocol Godot servers speak.
    Server,
    /// player ↔ agent: inputs, state updates, own-position datagrams, pings.
    Gateway,
}

impl ChannelId {
    pub const ALL: [ChannelId; 4] =
        [ChannelId::Control, ChannelId::Transfer, ChannelId::Server, ChannelId::Gateway];

    /// The byte in the frame header.
    pub fn to_byte(self) -> u8 {
        match self {
            ChannelId::Control => 1,
            ChannelId::Transfer => 2,
            ChannelId::Server => 3,
            ChannelId::Gateway => 4,
        }
    }

    pub fn from_byte(byte: u8) -> Option<Self> {
        ChannelId::ALL.into_iter().find(|c| c.to_byte() == byte)
    }

    /// The TLS ALPN protocol id that selects this channel.
    pub fn alpn(self) -> &'static [u8] {
        match self {
            ChannelId::Control => b"horizon-control",
            ChannelId::Transfer => b"horizon-transfer",
            ChannelId::Server => b"horizon-server",
            ChannelId::Gateway => b"horizon-gateway",
        }
    }

    pub fn from_alpn(alpn: &[u8]) -> Option<Self> {
        ChannelId::ALL.into_iter().find(|c| c.alpn() == alpn)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ChannelId::Control => "control",
            ChannelId::Transfer => "transfer",
            ChannelId::Server => "server",
            ChannelId::Gateway => "gateway",
        }
    }
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub channel: ChannelId,
    /// Payload length in bytes.
    pub len: usize,
}

/// Why bytes were not a frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("bad magic {got:02x?}: not a Horizon frame")]
    BadMagic { got: [u8; 2] },
    #[error("frame of protocol version {got}, expected {expected}")]
    WrongVersion { got: u8, expected: u8 },
    #[error("unknown channel byte {got}")]
    UnknownChannel { got: u8 },
    #[error("frame for the {got} channel on the {expected} channel", got = got.as_str(), expected = expected.as_str())]
    WrongChannel { got: ChannelId, expected: ChannelId },
    #[error("frame payload of {len} bytes is over the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("truncated frame: {got} of {needed} bytes")]
    Truncated { got: usize, needed: usize },
    #[error("{extra} bytes after the frame")]
    Trailing { extra: usize },
    #[error("payload does not decode: {why}")]
    Payload { why: String },
}

impl DecodeError {
    /// The code to refuse the frame (or close the connection) with.
    pub fn code(&self) -> ErrorCode {
        match self {
            DecodeError::WrongVersion { .. } => ErrorCode::VersionMismatch,
            DecodeError::WrongChannel { .. } | DecodeError::UnknownChannel { .. } => {
                ErrorCode::WrongChannel
            }
            DecodeError::TooLarge { .. } => ErrorCode::TooLarge,
            DecodeError::BadMagic { .. }
            | DecodeError::Truncated { .. }
            | DecodeError::Trailing { .. }
            | DecodeError::Payload { .. } => ErrorCode::Malformed,
        }
    }
}

/// Why a message was not encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("message of {len} bytes is over the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("message does not encode: {why}")]
    Serialize { why: String },
}

impl EncodeError {
    pub fn code(&self) -> ErrorCode {
        match self {
            EncodeError::TooLarge { .. } => ErrorCode::TooLarge,
            EncodeError::Serialize { .. } => ErrorCode::Internal,
        }
    }
}

/// Reads a header and checks it against what the reader expects: the magic, the negotiated
/// `version`, the connection's `channel` and the frame kind's `max` payload length.
pub fn decode_header(
    bytes: &[u8],
    version: u8,
    channel: ChannelId,
    max: usize,
) -> Result<Header, DecodeError> {
    let header = decode_header_any_version(bytes, channel, max)?;
    if header.version != version {
        return Err(DecodeError::WrongVersion { got: header.version, expected: version });
    }
    Ok(header)
}

/// As [`decode_header`] without the version check: for the hello, whose header carries the
/// sender's highest version before anything is negotiated.
pub fn decode_header_any_version(
    bytes: &[u8],
    channel: ChannelId,
    max: usize,
) -> Result<Header, DecodeError> {
    let Some(head) = bytes.get(..HEADER_BYTES) else {
        return Err(DecodeError::Truncated { got: bytes.len(), needed: HEADER_BYTES });
    };
    let magic = [head[0], head[1]];
    if magic != MAGIC {
        return Err(DecodeError::BadMagic { got: magic });
    }
    let got = ChannelId::from_byte(head[3]).ok_or(DecodeError::UnknownChannel { got: head[3] })?;
    if got != channel {
        return Err(DecodeError::WrongChannel { got, expected: channel });
    }
    let len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
    if len > max {
        return Err(DecodeError::TooLarge { len, max });
    }
    Ok(Header { version: head[2], channel: got, len })
}

/// Decodes a payload that must be exactly one message.
pub fn decode_payload<M: DeserializeOwned>(payload: &[u8]) -> Result<M, DecodeError> {
    let (message, rest) = postcard::take_from_bytes::<M>(payload)
        .map_err(|e| DecodeError::Payload { why: e.to_string() })?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing { extra: rest.len() });
    }
    Ok(message)
}

/// Decodes one whole frame (header and payload, nothing after).
pub fn decode<M: DeserializeOwned>(
    bytes: &[u8],
    version: u8,
    channel: ChannelId,
    max: usize,
) -> Result<M, DecodeError> {
    decode_body(bytes, decode_header(bytes, version, channel, max)?)
}

/// As [`decode`] without the version check: the hello, before anything is negotiated.
pub fn decode_any_version<M: DeserializeOwned>(
    bytes: &[u8],
    channel: ChannelId,
    max: usize,
) -> Result<M, DecodeError> {
    decode_body(bytes, decode_header_any_version(bytes, channel, max)?)
}

/// The payload of a frame whose header was checked: exactly `header.len` bytes, one message.
fn decode_body<M: DeserializeOwned>(bytes: &[u8], header: Header) -> Result<M, DecodeError> {
    let body = &bytes[HEADER_BYTES..];
    if body.len() < header.len {
        return Err(DecodeError::Truncated { got: bytes.len(), needed: HEADER_BYTES + header.len });
    }
    if body.len() > header.len {
        return Err(DecodeError::Trailing { extra: body.len() - header.len });
    }
    decode_payload(body)
}

/// Appends one frame holding `message` to `out`. Refuses a payload over `max` (and leaves `out`
/// as it was).
pub fn encode<M: Serialize>(
    message: &M,
    version: u8,
    channel: ChannelId,
    max: usize,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.push(version);
    out.push(channel.to_byte());
    out.extend_from_slice(&[0; 4]);
    if let Err(e) = postcard::to_io(message, &mut *out) {
        out.truncate(start);
        return Err(EncodeError::Serialize { why: e.to_string() });
    }
    let len = out.len() - start - HEADER_BYTES;
    if len > max {
        out.truncate(start);
        return Err(EncodeError::TooLarge { len, max });
    }
    // `len <= max <= u32::MAX` (the limits are far below 4 GiB).
    out[start + 4..start + 8].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// [`encode`] into a new buffer.
pub fn to_frame<M: Serialize>(
    message: &M,
    version: u8,
    channel: ChannelId,
    max: usize,
) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode(message, version, channel, max, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_its_header_says_what_it_is() {
        let frame = to_frame(&(7u32, "hi"), 1, ChannelId::Server, MAX_FRAME_BYTES).unwrap();
        assert_eq!(&frame[..4], b"HZ\x01\x03");
        assert_eq!(u32::from_be_bytes(frame[4..8].try_into().unwrap()) as usize, frame.len() - 8);
        let back: (u32, String) = decode(&frame, 1, ChannelId::Server, MAX_FRAME_BYTES).unwrap();
        assert_eq!(back, (7, "hi".to_owned()));
    }

    #[test]
    fn every_kind_of_bad_frame_is_named() {
        let frame = to_frame(&5u8, 1, ChannelId::Control, 64).unwrap();
        let err = |bytes: &[u8]| decode::<u8>(bytes, 1, ChannelId::Control, 64).unwrap_err();
        assert!(matches!(err(&frame[..5]), DecodeError::Truncated { .. }));
        assert!(matches!(err(b"XZ\x01\x01\0\0\0\x01\x05"), DecodeError::BadMagic { .. }));
        assert!(matches!(err(b"HZ\x02\x01\0\0\0\x01\x05"), DecodeError::WrongVersion { .. }));
        assert!(matches!(err(b"HZ\x01\x04\0\0\0\x01\x05"), DecodeError::WrongChannel { .. }));
        assert!(matches!(err(b"HZ\x01\x09\0\0\0\x01\x05"), DecodeError::UnknownChannel { .. }));
        assert!(matches!(err(b"HZ\x01\x01\0\0\x10\0"), DecodeError::TooLarge { .. }));
        assert!(matches!(err(b"HZ\x01\x01\0\0\0\x02\x05\x05"), DecodeError::Trailing { .. }));
        assert!(matches!(err(b"HZ\x01\x01\0\0\0\x01\x05\x05"), DecodeError::Trailing { .. }));
        assert!(matches!(err(b"HZ\x01\x01\0\0\0\0"), DecodeError::Payload { .. }));
        assert_eq!(err(b"HZ\x01\x01\0\0\x10\0").code(), ErrorCode::TooLarge);
    }

    #[test]
    fn an_oversized_message_is_refused_and_leaves_the_buffer_alone() {
        let mut out = vec![1, 2, 3];
        let big = vec![0u8; 100];
        let err = encode(&big, 1, ChannelId::Control, 64, &mut out).unwrap_err();
        assert!(matches!(err, EncodeError::TooLarge { len: 101, max: 64 }));
        assert_eq!(out, [1, 2, 3]);
    }
}
