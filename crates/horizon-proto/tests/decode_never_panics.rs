//! Bytes from the network never cause a panic: random bytes, and valid frames with random
//! mutations, through every decoder of every channel. `fuzz/` runs the same for longer.
#![allow(clippy::unwrap_used)]

use horizon_proto::fixtures::{self, PARTS};
use horizon_proto::{ChannelId, HEADER_BYTES};
use proptest::prelude::*;

fn every_decoder(bytes: &[u8]) {
    for channel in ChannelId::ALL {
        for part in PARTS {
            // Any result is fine; returning at all is the property.
            let _ = fixtures::reencode(channel, part, bytes);
        }
    }
}

proptest! {
    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        every_decoder(&bytes);
    }

    #[test]
    fn random_payloads_behind_a_valid_header(
        channel in 1u8..=4,
        payload in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut frame = b"HZ\x01".to_vec();
        frame.push(channel);
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(&payload);
        every_decoder(&frame);
    }

    #[test]
    fn mutated_fixtures(pick in any::<prop::sample::Index>(), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in any::<prop::sample::Index>()) {
        let all = fixtures::all();
        let mut frame = all[pick.index(all.len())].frame.clone();
        for (at, byte) in flips {
            let i = HEADER_BYTES.min(frame.len() - 1) + at.index(frame.len() - HEADER_BYTES.min(frame.len() - 1));
            frame[i] ^= byte;
        }
        every_decoder(&frame);
        frame.truncate(cut.index(frame.len() + 1));
        every_decoder(&frame);
    }
}
