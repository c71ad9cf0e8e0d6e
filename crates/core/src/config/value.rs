//! Reading configuration YAML the way the reference's viper/mapstructure and `encoding/json`
//! read it: keys matched case-insensitively, scalars weakly typed (`"1200"` and `1200` are the
//! same number, `"true"` is a bool), `null` the same as absent.

use super::ConfigError;
use crate::json::describe;
use serde_json::{Map, Value};

/// Parses YAML text into JSON values. An empty document is `Null`.
pub(crate) fn load_yaml(text: &str, what: &str) -> Result<Value, ConfigError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| ConfigError::Yaml {
        what: what.to_string(),
        message: e.to_string(),
    })
}

pub(crate) fn invalid(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        problem: problem.into(),
    }
}

fn expected(key: &str, what: &str, got: &Value) -> ConfigError {
    invalid(key, format!("expected {what}, got {}", describe(got)))
}

/// `a.b` or just `b` at top level.
pub(crate) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// A mapping (or `None` for null/absent documents).
pub(crate) fn object<'a>(
    v: &'a Value,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::Object(m) => Ok(Some(m)),
        other => Err(expected(key, "a mapping", other)),
    }
}

/// Case-insensitive key lookup; `null` reads as absent.
pub(crate) fn get<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.get(key)
        .or_else(|| {
            m.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v)
        })
        .filter(|v| !v.is_null())
}

pub(crate) fn weak_string(v: &Value, key: &str) -> Result<String, ConfigError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(expected(key, "string", other)),
    }
}

pub(crate) fn weak_i64(v: &Value, key: &str) -> Result<i64, ConfigError> {
    let n = match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        }),
        // mapstructure reads "" as 0.
        Value::String(s) if s.trim().is_empty() => Some(0),
        Value::String(s) => s.trim().parse().ok(),
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    };
    n.ok_or_else(|| expected(key, "integer", v))
}

/// An integer in `min..=max`.
pub(crate) fn weak_int_in(v: &Value, key: &str, min: i64, max: i64) -> Result<i64, ConfigError> {
    let n = weak_i64(v, key)?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(invalid(key, format!("{n} is out of range {min}..={max}")))
    }
}

pub(crate) fn weak_bool(v: &Value, key: &str) -> Result<bool, ConfigError> {
    let b = match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => n.as_f64().map(|f| f != 0.0),
        // Go's strconv.ParseBool spellings; mapstructure reads "" as false.
        Value::String(s) => match s.trim() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
            "" | "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
            _ => None,
        },
        _ => None,
    };
    b.ok_or_else(|| expected(key, "bool", v))
}

/// A non-empty string (not weakly typed: a YAML number as a version would lose digits).
pub(crate) fn required_str<'a>(
    m: &'a Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<&'a str, ConfigError> {
    match get(m, field) {
        None => Err(invalid(key, "required string is missing")),
        Some(Value::String(s)) if s.is_empty() => Err(invalid(key, "must not be empty")),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(expected(key, "string (quote it)", other)),
    }
}

/// A YAML sequence (absent → empty).
pub(crate) fn list<'a>(v: Option<&'a Value>, key: &str) -> Result<&'a [Value], ConfigError> {
    match v {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(expected(key, "a list", other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_loads_into_json_values() {
        let v = load_yaml("a: 1\nb: \"1\"\nc: [x, true]\nd:\ne: 1.5 # comment\n", "f").unwrap();
        assert_eq!(
            v,
            json!({"a": 1, "b": "1", "c": ["x", true], "d": null, "e": 1.5})
        );
        assert_eq!(load_yaml("  \n", "f").unwrap(), Value::Null);
        let e = load_yaml("a: [1", "config.yaml").unwrap_err();
        assert!(
            e.to_string().starts_with("config.yaml: invalid YAML"),
            "{e}"
        );
    }

    #[test]
    fn double_quoted_line_continuations_join_without_spaces() {
        // The shipped includedResources value is split across lines this way.
        let v = load_yaml("k: \"a;\\\n    b;\\\n  c\"\n", "f").unwrap();
        assert_eq!(v, json!({"k": "a;b;c"}));
    }

    #[test]
    fn keys_are_case_insensitive_and_null_is_absent() {
        let m = json!({"LogLevel": "x", "exact": 1, "EXACT": 2, "n": null});
        let m = m.as_object().unwrap();
        assert_eq!(get(m, "logLevel"), Some(&json!("x")));
        assert_eq!(get(m, "exact"), Some(&json!(1)));
        assert_eq!(get(m, "n"), None);
        assert_eq!(get(m, "missing"), None);
    }

    #[test]
    fn weak_typing() {
        assert_eq!(weak_i64(&json!(1200), "k").unwrap(), 1200);
        assert_eq!(weak_i64(&json!("1200"), "k").unwrap(), 1200);
        assert_eq!(weak_i64(&json!(" 12 "), "k").unwrap(), 12);
        assert_eq!(weak_i64(&json!(3.0), "k").unwrap(), 3);
        assert_eq!(weak_i64(&json!(""), "k").unwrap(), 0);
        assert_eq!(
            weak_i64(&json!("12m"), "p.k").unwrap_err().to_string(),
            r#"p.k: expected integer, got string "12m""#
        );
        assert!(weak_i64(&json!(3.5), "k").is_err());
        assert!(weak_i64(&json!([1]), "k").is_err());
        assert_eq!(
            weak_int_in(&json!(0), "k", 1, 100).unwrap_err().to_string(),
            "k: 0 is out of range 1..=100"
        );
        assert!(weak_bool(&json!("true"), "k").unwrap());
        assert!(weak_bool(&json!(1), "k").unwrap());
        assert!(!weak_bool(&json!("False"), "k").unwrap());
        assert!(!weak_bool(&json!(""), "k").unwrap());
        assert!(weak_bool(&json!("yes"), "k").is_err());
        assert_eq!(weak_string(&json!(5), "k").unwrap(), "5");
        assert_eq!(weak_string(&json!(true), "k").unwrap(), "true");
        assert!(weak_string(&json!({}), "k").is_err());
    }

    #[test]
    fn required_strings_and_lists() {
        let m = json!({"v": "1.8.1", "n": 1.8, "e": ""});
        let m = m.as_object().unwrap();
        assert_eq!(required_str(m, "v", "x.v").unwrap(), "1.8.1");
        assert_eq!(
            required_str(m, "n", "x.n").unwrap_err().to_string(),
            "x.n: expected string (quote it), got number 1.8"
        );
        assert_eq!(
            required_str(m, "e", "x.e").unwrap_err().to_string(),
            "x.e: must not be empty"
        );
        assert_eq!(
            required_str(m, "z", "x.z").unwrap_err().to_string(),
            "x.z: required string is missing"
        );
        assert!(list(None, "l").unwrap().is_empty());
        assert_eq!(list(Some(&json!([1])), "l").unwrap().len(), 1);
        assert!(list(Some(&json!("a")), "l").is_err());
        assert_eq!(join("", "a"), "a");
        assert_eq!(join("p", "a"), "p.a");
    }
}
