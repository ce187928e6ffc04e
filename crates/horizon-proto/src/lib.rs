//! Horizon's wire protocol, without sockets.
//!
//! Four channels (design.md §7), each selected by its TLS ALPN and named in every frame
//! header: [`control`] (core ↔ agent), [`transfer`] (agent ↔ agent), [`server`] (agent ↔ game
//! server, the QUIC agent protocol) and [`gateway`] (player ↔ agent). A channel is a
//! [`Channel`]: requests on their own bidirectional streams answered by one reply, items on
//! long-lived streams, and unreliable datagrams.
//!
//! Every message travels in one [`frame`]: magic `HZ`, version, channel, length, then the
//! message in postcard. The hello negotiates the version; every size has a limit; decoding any
//! bytes never panics. `docs/protocol.md` describes the bytes for implementers in other
//! languages, and `tests/golden.txt` freezes them.

pub mod beacon;
mod channel;
pub mod control;
mod error;
pub mod fixtures;
pub mod frame;
pub mod gateway;
pub mod server;
mod state;
pub mod transfer;
mod types;

pub use channel::{Channel, Hello, Message, Never, ReplyFrame, RequestFrame, Weigh, Welcome};
pub use error::{ErrorCode, Failure, Fault};
pub use frame::{
    ChannelId, DecodeError, EncodeError, HEADER_BYTES, MAGIC, MAX_CHUNK_BYTES, MAX_DATAGRAM_BYTES,
    MAX_FRAME_BYTES, MAX_HELLO_BYTES, MAX_NAME_BYTES, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
pub use state::{
    Adopt, Delta, Input, Inputs, MAX_OWN_BYTES, Own, Relayed, Seal, Snapshot, StateItem, Update,
};
pub use types::{
    Aabb, Blob, BubbleId, Epoch, HandoverId, Lease, LeaseRef, Name, NameTooLong, PlayerId, Region,
    RequestId, Role, Seq, Tick, Vec3, WorldId,
};

/// The version both sides speak best, or `None` when their ranges do not meet.
pub fn negotiate(ours: (u8, u8), theirs: (u8, u8)) -> Option<u8> {
    let low = ours.0.max(theirs.0);
    let high = ours.1.min(theirs.1);
    (low <= high).then_some(high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_picks_the_highest_common_version() {
        assert_eq!(negotiate((1, 3), (2, 5)), Some(3));
        assert_eq!(negotiate((1, 1), (1, 1)), Some(1));
        assert_eq!(negotiate((1, 2), (3, 4)), None);
    }
}
