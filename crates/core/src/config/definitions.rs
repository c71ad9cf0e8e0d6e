//! Numaflow controller definitions ConfigMaps (docs/compatibility.md): every data value is YAML
//! `controllerDefinitions: [{version, fullSpec}]`.

use super::ConfigError;
use super::value::{get, invalid, join, list, load_yaml, object, required_str};
use std::collections::BTreeMap;

/// `(version, fullSpec)` pairs from every data value, in key order then list order. A version
/// listed twice appears twice; storing them in order lets the last one win, as in the reference.
pub fn parse_controller_definitions(
    data: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for (key, text) in data {
        let doc = load_yaml(text, key)?;
        let Some(root) = object(&doc, key)? else {
            continue;
        };
        let at = join(key, "controllerDefinitions");
        for (i, item) in list(get(root, "controllerDefinitions"), &at)?
            .iter()
            .enumerate()
        {
            let at = format!("{at}[{i}]");
            let m =
                object(item, &at)?.ok_or_else(|| invalid(&at, "expected a mapping, got null"))?;
            let version = required_str(m, "version", &join(&at, "version"))?;
            let full_spec = required_str(m, "fullSpec", &join(&at, "fullSpec"))?;
            out.push((version.to_string(), full_spec.to_string()));
        }
    }
    Ok(out)
}
