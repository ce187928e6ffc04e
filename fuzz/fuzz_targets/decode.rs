//! Every decoder of every channel on arbitrary bytes: must return, never panic.
#![no_main]

use horizon_proto::ChannelId;
use horizon_proto::fixtures::{self, PARTS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    for channel in ChannelId::ALL {
        for part in PARTS {
            if let Ok(again) = fixtures::reencode(channel, part, bytes) {
                // What decodes must encode back to a frame that decodes to the same bytes.
                assert_eq!(fixtures::reencode(channel, part, &again).ok(), Some(again));
            }
        }
    }
});
