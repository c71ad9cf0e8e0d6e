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

/// Whether `whole` already holds everything `part` sets: every key of an object with a value
/// it contains, arrays of the same length element by element, scalars equal. A `null`, `{}` or
/// `[]` in `part` is also held by an absent key (the API server drops them). Used to skip a
/// server-side apply that would change nothing; a false "no" only costs an apply.
pub fn contained_in(part: &Value, whole: &Value) -> bool {
    first_difference(part, whole).is_none()
}

/// The path (`spec.template.spec.containers[0].image`) of the first field of `part` that
/// `whole` does not hold, as [`contained_in`] judges it. Resource quantities (under `limits`,
/// `requests`, `sizeLimit`) are compared as amounts: the API server rewrites `1024Mi` as `1Gi`.
pub fn first_difference(part: &Value, whole: &Value) -> Option<String> {
    difference(part, whole, false)
}

fn difference(part: &Value, whole: &Value, quantities: bool) -> Option<String> {
    match (part, whole) {
        (Value::Object(p), Value::Object(w)) => p.iter().find_map(|(k, pv)| match w.get(k) {
            Some(wv) => {
                let q = quantities || matches!(k.as_str(), "limits" | "requests" | "sizeLimit");
                difference(pv, wv, q).map(|rest| join(k, &rest))
            }
            None => (!is_empty(pv)).then(|| k.clone()),
        }),
        (Value::Array(p), Value::Array(w)) if p.len() == w.len() => {
            p.iter().zip(w).enumerate().find_map(|(i, (pv, wv))| {
                difference(pv, wv, quantities).map(|rest| join(&format!("[{i}]"), &rest))
            })
        }
        (p, w) if p == w || (is_empty(p) && is_empty(w)) => None,
        (Value::String(a), Value::String(b)) if quantities && same_amount(a, b) => None,
        _ => Some(String::new()),
    }
}

/// Two Kubernetes quantities (`1024Mi`, `1Gi`, `0.5`, `500m`, `1e3`) of the same amount.
fn same_amount(a: &str, b: &str) -> bool {
    match (amount(a), amount(b)) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
        _ => false,
    }
}

fn amount(q: &str) -> Option<f64> {
    let at = q
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(at);
    let number: f64 = number.parse().ok()?;
    let binary = |p: i32| 1024f64.powi(p);
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        e => 10f64.powi(e.strip_prefix(['e', 'E'])?.parse().ok()?),
    };
    Some(number * scale)
}

fn join(key: &str, rest: &str) -> String {
    if rest.is_empty() || rest.starts_with('[') {
        format!("{key}{rest}")
    } else {
        format!("{key}.{rest}")
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().all(is_empty),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
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

    #[test]
    fn containment_ignores_what_the_server_adds_and_nothing_else() {
        let rendered = json!({"metadata": {"name": "a", "labels": {"x": "1"}, "annotations": {}},
            "spec": {"containers": [{"name": "c", "image": "i:1", "env": null}]}});
        let live = json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}, "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "i:1", "imagePullPolicy": "Always"}],
                     "restartPolicy": "Always"}});
        assert!(contained_in(&rendered, &live));
        let mut edited = live.clone();
        edited["spec"]["containers"][0]["image"] = json!("i:0");
        assert!(
            !contained_in(&rendered, &edited),
            "a value we set was changed"
        );
        let mut dropped = live.clone();
        dropped["metadata"]["labels"] = json!({"y": "2"});
        assert!(
            !contained_in(&rendered, &dropped),
            "a key we set was removed"
        );
        let mut longer = live.clone();
        longer["spec"]["containers"] = json!([live["spec"]["containers"][0], {"name": "d"}]);
        assert!(!contained_in(&rendered, &longer), "a list grew");
        assert!(
            !contained_in(&json!({"n": 1}), &json!({"n": 1.0})),
            "1 and 1.0 differ"
        );
        assert!(!contained_in(&json!({"n": "1"}), &json!({"n": 1})));
        assert_eq!(
            first_difference(&rendered, &edited).as_deref(),
            Some("spec.containers[0].image")
        );
        assert_eq!(
            first_difference(&rendered, &dropped).as_deref(),
            Some("metadata.labels.x")
        );
        assert_eq!(
            first_difference(&rendered, &longer).as_deref(),
            Some("spec.containers")
        );
    }

    #[test]
    fn quantities_compare_as_amounts_where_kubernetes_keeps_them() {
        let limits = |m: &str| json!({"resources": {"limits": {"memory": m, "cpu": "0.5"}}});
        let live = json!({"resources": {"limits": {"memory": "1Gi", "cpu": "500m"}}});
        assert!(contained_in(&limits("1024Mi"), &live));
        assert!(contained_in(&limits("1073741824"), &live));
        assert!(!contained_in(&limits("1000Mi"), &live));
        assert!(!contained_in(&limits("1G"), &live), "1G is not 1Gi");
        assert!(contained_in(
            &json!({"sizeLimit": "1e3"}),
            &json!({"sizeLimit": "1k"})
        ));
        // Elsewhere a string is a string.
        assert!(!contained_in(
            &json!({"data": {"a": "1k"}}),
            &json!({"data": {"a": "1000"}})
        ));
        let odd = json!({"resources": {"limits": {"memory": "lots!", "cpu": "500m"}}});
        assert!(!contained_in(&limits("lots"), &odd));
    }
}
