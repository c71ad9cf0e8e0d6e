//! Spec comparison: two JSON documents (separated by a NUL byte) compare without a panic; a
//! document equals itself and shows no difference from itself; nulls stripped twice are the
//! same as stripped once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaplane_core::usde::{diff_paths, json_eq, strip_nulls};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |b| *b == 0);
    let (Some(a), b) = (parts.next(), parts.next()) else {
        return;
    };
    let Ok(a) = serde_json::from_slice::<Value>(a) else {
        return;
    };
    let b = b
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .unwrap_or(Value::Null);
    assert!(json_eq(&a, &a));
    assert!(diff_paths(&a, &a).is_empty());
    let _ = diff_paths(&a, &b);
    let _ = json_eq(&a, &b);
    let mut once = a.clone();
    strip_nulls(&mut once);
    let mut twice = once.clone();
    strip_nulls(&mut twice);
    assert_eq!(once, twice);
});
