//! The operator's configuration parsers (controller config, namespace config, USDE ConfigMap,
//! Numaflow controller definitions): any text is parsed or refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaplane_core::config::{
    parse_controller_config, parse_controller_definitions, parse_namespace_config,
    parse_usde_configmap,
};
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_controller_config(text);
    // The same text as ConfigMap data: split at the first line into a key and a value.
    let (key, value) = text.split_once('\n').unwrap_or(("data", text));
    let map: BTreeMap<String, String> = [(key.to_string(), value.to_string())].into();
    let _ = parse_namespace_config(&map);
    let _ = parse_usde_configmap(&map);
    let _ = parse_controller_definitions(&map);
});
