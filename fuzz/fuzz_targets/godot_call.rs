//! A call of the Godot link (what the adapter sends the Godot process) from arbitrary bytes:
//! decoded or refused, never a panic.
#![no_main]

use horizon_godot::link::Call;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = Call::decode(bytes);
});
