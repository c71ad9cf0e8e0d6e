//! The rider hash stored in annotation `numaplane.numaproj.io/hash`.
//!
//! It is the hex SHA-256 of the object encoded exactly as the reference encodes it (Go's
//! `encoding/json` of an `unstructured.Unstructured` value): `{"Object":<object>}` with map keys
//! sorted, no whitespace, Go's string escaping (`<`, `>`, `&`, U+2028, U+2029 as `\u....`) and
//! Go's float formatting. Matching it means riders created by the reference are not all seen as
//! modified after switching to Numaplane-rs (which would roll out every progressive rider).
//! Keys are sorted here rather than relying on `serde_json::Map` ordering, so enabling
//! serde_json's `preserve_order` anywhere in the build cannot change hashes.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// Hex SHA-256 of the reference encoding of `object`.
pub fn rider_hash(object: &Value) -> String {
    let mut text = String::from("{\"Object\":");
    encode(object, &mut text);
    text.push('}');
    Sha256::digest(text.as_bytes())
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Go `encoding/json` text of a value, keys sorted.
pub(crate) fn encode(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => {
                let _ = write!(out, "{i}");
            }
            (None, Some(u), _) => {
                let _ = write!(out, "{u}");
            }
            (None, None, Some(f)) => encode_float(f, out),
            (None, None, None) => out.push_str(&n.to_string()),
        },
        Value::String(s) => encode_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                encode(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                encode_str(k, out);
                out.push(':');
                encode(v, out);
            }
            out.push('}');
        }
    }
}

/// Go's float64 encoding: shortest round-trip digits, plain notation for 1e-6 ≤ |f| < 1e21,
/// otherwise exponent notation with an explicit sign (`1e+21`, `1e-7`).
fn encode_float(f: f64, out: &mut String) {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => {
                let _ = write!(out, "{mantissa}e+{exp}");
            }
            _ => out.push_str(&s),
        }
    } else {
        let _ = write!(out, "{f}");
    }
}

fn encode_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn enc(v: &Value) -> String {
        let mut s = String::new();
        encode(v, &mut s);
        s
    }

    #[test]
    fn sorts_keys_and_has_no_whitespace() {
        let v = json!({"b": 1, "a": {"z": [true, null], "c": "x"}});
        assert_eq!(enc(&v), r#"{"a":{"c":"x","z":[true,null]},"b":1}"#);
    }

    #[test]
    fn escapes_like_go() {
        assert_eq!(
            enc(&json!("a<b>&\"\\\n\r\t\u{8}\u{c}\u{1}\u{2028}é")),
            r#""a\u003cb\u003e\u0026\"\\\n\r\t\b\f\u0001\u2028é""#
        );
    }

    #[test]
    fn formats_numbers_like_go() {
        assert_eq!(enc(&json!(1)), "1");
        assert_eq!(enc(&json!(-7)), "-7");
        assert_eq!(enc(&json!(u64::MAX)), "18446744073709551615");
        assert_eq!(enc(&json!(1.5)), "1.5");
        assert_eq!(enc(&json!(1.0)), "1");
        assert_eq!(enc(&json!(100000.0)), "100000");
        assert_eq!(enc(&json!(0.000001)), "0.000001");
        assert_eq!(enc(&json!(0.0000001)), "1e-7");
        assert_eq!(enc(&json!(1e21)), "1e+21");
        assert_eq!(enc(&json!(-1.5e300)), "-1.5e+300");
        assert_eq!(enc(&json!(0.0)), "0");
    }

    /// Vectors produced by Go 1.26 `json.Marshal(struct{ Object map[string]interface{} })` over
    /// `json.Unmarshal` of the same text, i.e. the reference's hash input.
    #[test]
    fn hash_matches_go_vectors() {
        assert_eq!(
            rider_hash(&json!({"a": 1})),
            "292da0043efe9ecd6bfce89a82655494c37cebcd46edd2b06c67a4c61bb7e0eb"
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm-my-pipeline-0", "namespace": "ns"}, "data": {"k": "<v>"}});
        assert_eq!(
            rider_hash(&cm),
            "4aec2ecc71ff464386edb76773a2587c9dc28455a00f292daf37b5bd72386b86"
        );
        let odd: Value = serde_json::from_str(
            r#"{"f":[1.0,1.5,0.0000001,1e21,100000.0,-1.5e300,"a\b\f\u0001\u2028&é"]}"#,
        )
        .unwrap();
        assert_eq!(
            enc(&odd),
            r#"{"f":[1,1.5,1e-7,1e+21,100000,-1.5e+300,"a\b\f\u0001\u2028\u0026é"]}"#
        );
        assert_eq!(
            rider_hash(&odd),
            "895549ae14c0c681c1828aa34769719baef40dc5d3aea3b6d41366082a029f24"
        );
        assert_ne!(rider_hash(&json!({"a": 2})), rider_hash(&json!({"a": 1})));
    }

    proptest! {
        #[test]
        fn encoding_is_valid_json_for_the_same_value(
            keys in proptest::collection::vec("[a-z<>&\"\\\\ \u{1}-\u{1f}é]{0,6}", 0..6),
            n in any::<i64>(),
            s in "\\PC*",
        ) {
            let mut obj = serde_json::Map::new();
            for k in &keys {
                obj.insert(k.clone(), json!([n, s.clone(), {"x": null}]));
            }
            let v = Value::Object(obj);
            let text = enc(&v);
            let back: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(back, v);
        }

        #[test]
        fn floats_round_trip(f in proptest::num::f64::NORMAL | proptest::num::f64::ZERO) {
            let text = enc(&json!(f));
            let back: f64 = text.parse().unwrap();
            prop_assert_eq!(back, f);
        }
    }
}
