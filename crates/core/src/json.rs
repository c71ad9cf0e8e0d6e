//! Small helpers for reading user JSON leniently and describing it in error messages.

use serde_json::Value;

/// `string "3"`, `number 3.5`, `bool true`, `null`, `object`, `array`: what an error message
/// says it found instead of the expected shape.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("bool {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "array".to_string(),
        Value::Object(_) => "object".to_string(),
    }
}

/// Follows object keys; `None` as soon as a step is missing or not an object.
pub(crate) fn get_path<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |cur, key| cur.as_object()?.get(*key))
}

/// A string at `path`, `None` when absent or not a string.
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get_path(v, path)?.as_str()
}

/// An integer at `path`, `None` when absent or not an integer that fits in i64.
pub(crate) fn i64_at(v: &Value, path: &[&str]) -> Option<i64> {
    get_path(v, path)?.as_i64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn describe_names_the_json_type_and_value() {
        assert_eq!(describe(&json!("3")), r#"string "3""#);
        assert_eq!(describe(&json!(3.5)), "number 3.5");
        assert_eq!(describe(&json!(true)), "bool true");
        assert_eq!(describe(&json!(null)), "null");
        assert_eq!(describe(&json!([])), "array");
        assert_eq!(describe(&json!({})), "object");
    }

    #[test]
    fn paths_stop_at_non_objects() {
        let v = json!({"a": {"b": 3, "s": "x"}, "l": [1]});
        assert_eq!(i64_at(&v, &["a", "b"]), Some(3));
        assert_eq!(str_at(&v, &["a", "s"]), Some("x"));
        assert_eq!(str_at(&v, &["a", "b"]), None);
        assert_eq!(get_path(&v, &["l", "0"]), None);
        assert_eq!(get_path(&v, &[]), Some(&v));
    }
}
