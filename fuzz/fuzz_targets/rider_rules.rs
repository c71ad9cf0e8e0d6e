//! `permittedRiders` rules: any text parses or is refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaplane_core::riders::parse_rules;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_rules(text);
    }
});
