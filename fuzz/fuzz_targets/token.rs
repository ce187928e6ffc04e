//! A player's or game server's token, and a key file, from arbitrary bytes: refused or
//! accepted, never a panic; a token accepted is one the ring signed.
#![no_main]

use std::time::SystemTime;

use horizon_transport::Keyring;
use horizon_transport::credential::Kind;
use libfuzzer_sys::fuzz_target;

const KEYS: &str = "k1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n";

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    let _ = Keyring::parse(text);
    let keys = Keyring::parse(KEYS).expect("the fixed ring");
    for kind in [Kind::Player, Kind::Server] {
        if let Ok(subject) = keys.verify(text, kind, SystemTime::UNIX_EPOCH) {
            // Only what the ring would sign itself verifies.
            let (_, rest) = text.split_once(&format!(".{}.{subject}.", kind.as_str())).expect("its shape");
            let secs: u64 = rest.split('.').next().and_then(|s| s.parse().ok()).expect("its expiry");
            let again = keys
                .mint(kind, &subject, SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))
                .expect("a valid subject");
            assert_eq!(again, text);
        }
    }
});
