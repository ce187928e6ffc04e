//! Probe beacons: how a client measures its round trip to every site before it joins one
//! (docs/protocol.md, "Beacons"). Plain UDP, outside the QUIC channels, so that a measure costs
//! no handshake and no state on either side.
//!
//! A client sends a [`Ping`] to a site's beacon port; the agent answers a [`Pong`] echoing the
//! ping's nonce and the client's own timestamp, with the agent's receive and send times, so the
//! client subtracts the time the agent held the packet (as Quilkin's QCMP does):
//! `rtt = (received − client_ns) − (tx_ns − rx_ns)`. Both timestamps of a side are on that
//! side's own clock: no clock is compared across machines.
//!
//! The bytes, little-endian, 40 either way (a ping is as long as its pong, so a beacon never
//! amplifies a spoofed request):
//!
//! | offset | size | ping | pong |
//! |---:|---:|---|---|
//! | 0 | 4 | magic `HZBC` | magic `HZBC` |
//! | 4 | 1 | version (1) | version (1) |
//! | 5 | 1 | kind: 1 | kind: 2 |
//! | 6 | 2 | zero | zero |
//! | 8 | 8 | nonce | the ping's nonce |
//! | 16 | 8 | client_ns | the ping's client_ns |
//! | 24 | 8 | zero | rx_ns: when the agent received the ping |
//! | 32 | 8 | zero | tx_ns: when the agent sent the pong |
//!
//! Encoding and decoding allocate nothing; decoding any bytes never panics.

/// The first bytes of every beacon packet.
pub const BEACON_MAGIC: [u8; 4] = *b"HZBC";
/// The beacon format's version.
pub const BEACON_VERSION: u8 = 1;
/// Every beacon packet's length.
pub const BEACON_BYTES: usize = 40;

const KIND_PING: u8 = 1;
const KIND_PONG: u8 = 2;

/// A client's probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ping {
    /// Chosen by the client to match the pong to its ping.
    pub nonce: u64,
    /// The client's clock when it sent the ping (any origin: only the client reads it back).
    pub client_ns: u64,
}

/// An agent's answer to a [`Ping`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pong {
    pub nonce: u64,
    pub client_ns: u64,
    /// The agent's clock when the ping arrived, and when the pong left (any origin).
    pub rx_ns: u64,
    pub tx_ns: u64,
}

/// Why bytes are not a beacon packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BeaconError {
    #[error("a beacon packet is {BEACON_BYTES} bytes, not {0}")]
    Length(usize),
    #[error("not a beacon packet (magic)")]
    Magic,
    #[error("beacon version {0}, this side speaks {BEACON_VERSION}")]
    Version(u8),
    #[error("beacon packet of kind {0}, not the one expected")]
    Kind(u8),
}

fn header(kind: u8) -> [u8; BEACON_BYTES] {
    let mut b = [0u8; BEACON_BYTES];
    b[..4].copy_from_slice(&BEACON_MAGIC);
    b[4] = BEACON_VERSION;
    b[5] = kind;
    b
}

fn put(b: &mut [u8; BEACON_BYTES], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// Checks the length, magic, version and kind of a packet.
fn check(b: &[u8], kind: u8) -> Result<(), BeaconError> {
    if b.len() != BEACON_BYTES {
        return Err(BeaconError::Length(b.len()));
    }
    if b[..4] != BEACON_MAGIC {
        return Err(BeaconError::Magic);
    }
    if b[4] != BEACON_VERSION {
        return Err(BeaconError::Version(b[4]));
    }
    if b[5] != kind {
        return Err(BeaconError::Kind(b[5]));
    }
    Ok(())
}

impl Ping {
    pub fn encode(&self) -> [u8; BEACON_BYTES] {
        let mut b = header(KIND_PING);
        put(&mut b, 8, self.nonce);
        put(&mut b, 16, self.client_ns);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Ping, BeaconError> {
        check(b, KIND_PING)?;
        Ok(Ping { nonce: get(b, 8), client_ns: get(b, 16) })
    }

    /// The pong answering this ping, received at `rx_ns` and sent at `tx_ns`.
    pub fn answer(&self, rx_ns: u64, tx_ns: u64) -> Pong {
        Pong { nonce: self.nonce, client_ns: self.client_ns, rx_ns, tx_ns }
    }
}

impl Pong {
    pub fn encode(&self) -> [u8; BEACON_BYTES] {
        let mut b = header(KIND_PONG);
        put(&mut b, 8, self.nonce);
        put(&mut b, 16, self.client_ns);
        put(&mut b, 24, self.rx_ns);
        put(&mut b, 32, self.tx_ns);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Pong, BeaconError> {
        check(b, KIND_PONG)?;
        Ok(Pong { nonce: get(b, 8), client_ns: get(b, 16), rx_ns: get(b, 24), tx_ns: get(b, 32) })
    }

    /// The round trip in nanoseconds, the agent's hold time taken out, for a pong the client
    /// received at `received_ns` (its own clock, as `client_ns`). `None` when the timestamps
    /// make no sense (a pong from before its ping, or held longer than the round trip).
    pub fn rtt_ns(&self, received_ns: u64) -> Option<u64> {
        let total = received_ns.checked_sub(self.client_ns)?;
        let held = self.tx_ns.checked_sub(self.rx_ns)?;
        total.checked_sub(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_and_its_pong_round_trip_and_the_pong_takes_the_agents_hold_time_out() {
        let ping = Ping { nonce: 0x0102_0304_0506_0708, client_ns: 1_000_000 };
        let bytes = ping.encode();
        assert_eq!(bytes.len(), BEACON_BYTES);
        assert_eq!(Ping::decode(&bytes), Ok(ping));
        let pong = ping.answer(50_000, 250_000);
        assert_eq!(Pong::decode(&pong.encode()), Ok(pong));
        // 30 ms after the ping left, 0.2 ms of it spent inside the agent.
        assert_eq!(pong.rtt_ns(31_000_000), Some(29_800_000));
        assert_eq!(pong.rtt_ns(999_999), None, "received before it was sent");
    }

    #[test]
    fn the_bytes_are_those_the_protocol_documents() {
        let ping = Ping { nonce: 1, client_ns: 2 }.encode();
        assert_eq!(&ping[..8], b"HZBC\x01\x01\x00\x00");
        assert_eq!(ping[8], 1);
        assert_eq!(ping[16], 2);
        assert!(ping[24..].iter().all(|&b| b == 0));
        let pong = Ping { nonce: 1, client_ns: 2 }.answer(3, 4).encode();
        assert_eq!(&pong[..8], b"HZBC\x01\x02\x00\x00");
        assert_eq!((pong[24], pong[32]), (3, 4));
    }

    #[test]
    fn anything_else_is_refused_with_the_reason_never_a_panic() {
        let ping = Ping { nonce: 7, client_ns: 8 }.encode();
        assert_eq!(Ping::decode(&ping[..39]), Err(BeaconError::Length(39)));
        assert_eq!(Ping::decode(&[]), Err(BeaconError::Length(0)));
        let mut bad = ping;
        bad[0] = b'X';
        assert_eq!(Ping::decode(&bad), Err(BeaconError::Magic));
        let mut bad = ping;
        bad[4] = 9;
        assert_eq!(Ping::decode(&bad), Err(BeaconError::Version(9)));
        assert_eq!(Pong::decode(&ping), Err(BeaconError::Kind(1)), "a ping is not a pong");
        for n in 0..=64 {
            let _ = Ping::decode(&vec![0xAB; n]);
            let _ = Pong::decode(&vec![0xAB; n]);
        }
    }
}
