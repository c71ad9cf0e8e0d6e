//! Comparing two child specs along one USDE field path, and listing where two specs differ.
//!
//! Semantics (docs/compatibility.md, docs/strategies.md), with the fixes noted on [`field_changed`]:
//! - a dotted path is followed through objects, and *through arrays*: each element is projected
//!   on the rest of the path and array lengths count, so adding a vertex changes every path under
//!   `spec.vertices`;
//! - numbers compare by value whatever their JSON type (`1 == 1.0`);
//! - a key whose value is `null` is the same as an absent key (`{}` is still different): manifests
//!   generated from Go structs and several GitOps tools send `"groupBy": null`, JSON merge patches
//!   drop such keys, and Numaflow (Go's `encoding/json`) reads both the same way. The reference told
//!   them apart and so saw changes that were not there.

use crate::config::SpecField;
use serde_json::{Map, Value};

/// What a path selects in one spec.
#[derive(Debug)]
enum Projection<'a> {
    /// The path leads nowhere (a key is absent, or an intermediate value is `null`).
    Missing,
    Value(&'a Value),
    /// An array met on the way: one projection per element.
    Each(Vec<Projection<'a>>),
}

impl Projection<'_> {
    /// Whether the selected value is an object; through arrays, whether any element's is.
    fn is_map(&self) -> bool {
        match self {
            Projection::Missing => false,
            Projection::Value(v) => v.is_object(),
            Projection::Each(items) => items.iter().any(Projection::is_map),
        }
    }

    fn same_as(&self, other: &Projection<'_>) -> bool {
        match (self, other) {
            (Projection::Missing, Projection::Missing) => true,
            (Projection::Value(a), Projection::Value(b)) => json_eq(a, b),
            (Projection::Each(a), Projection::Each(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_as(y))
            }
            _ => false,
        }
    }
}

/// The path's segments below `spec`, or `None` when it does not start with `spec` and so can never
/// select anything in a child spec.
pub(crate) fn spec_segments(path: &str) -> Option<Vec<&str>> {
    let mut segs = path.split('.');
    (segs.next() == Some("spec")).then(|| segs.collect())
}

/// Whether `field` differs between two child specs (the values of their `spec`).
///
/// `includeSubfields: true` compares the whole selected subtree. Otherwise a selected object only
/// counts by presence (changed iff an object is selected on exactly one side) and anything else is
/// compared as a leaf. A path absent on both sides is unchanged.
///
/// Deliberate differences from the reference:
/// - **Case-insensitive fallback per segment**: when the exact key is absent, a key equal to the
///   segment ignoring ASCII case is followed (if exactly one exists). This makes the shipped
///   `...container.envfrom` paths match the real `envFrom` field; the reference compared them
///   literally, so envFrom changes of udf/udsource/transformer/udsink/sideInputs containers were
///   never data-loss or progressive changes.
/// - A field absent on both sides is unchanged even when *which ancestors exist* differs (the
///   reference counted e.g. `udf: {}` → `udf: {container: {}}` as an image change). Such edits
///   are still spec differences and so at least a DirectApply.
/// - A scalar met before the path ends is compared as the selected value (the reference failed
///   the reconcile with "invalid type encountered").
/// - A path not starting with `spec.` never matches (the reference looked it up in the whole
///   object, e.g. `metadata.*`, which the spec decision never sees).
pub fn field_changed(field: &SpecField, desired_spec: &Value, live_spec: &Value) -> bool {
    let Some(segs) = spec_segments(&field.path) else {
        return false;
    };
    let desired = project(desired_spec, &segs);
    let live = project(live_spec, &segs);
    if field.include_subfields {
        return !desired.same_as(&live);
    }
    let (d_map, l_map) = (desired.is_map(), live.is_map());
    if d_map || l_map {
        d_map != l_map
    } else {
        !desired.same_as(&live)
    }
}

fn project<'a>(value: &'a Value, segs: &[&str]) -> Projection<'a> {
    if value.is_null() {
        return Projection::Missing;
    }
    let Some((first, rest)) = segs.split_first() else {
        return Projection::Value(value);
    };
    match value {
        Value::Object(map) => lookup(map, first).map_or(Projection::Missing, |v| project(v, rest)),
        Value::Array(items) => Projection::Each(items.iter().map(|v| project(v, segs)).collect()),
        Value::Null => Projection::Missing,
        scalar => Projection::Value(scalar),
    }
}

/// The exact key, else the single key equal to it ignoring ASCII case.
fn lookup<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if let Some(v) = map.get(key) {
        return Some(v);
    }
    let mut folded = map.iter().filter(|(k, _)| k.eq_ignore_ascii_case(key));
    match (folded.next(), folded.next()) {
        (Some((_, v)), None) => Some(v),
        _ => None,
    }
}

/// Deep equality where numbers compare by value (`1 == 1.0`, like the reference's
/// `CompareStructNumTypeAgnostic`) and a key whose value is `null` counts as absent. Integers
/// compare exactly; other numbers as `f64`. Array elements keep their places, `null` ones too.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (as_int(x), as_int(y)) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            let present = |m: &Map<String, Value>| m.values().filter(|v| !v.is_null()).count();
            present(x) == present(y)
                && x.iter()
                    .filter(|(_, v)| !v.is_null())
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Removes every object key whose value is `null`, at any depth (array elements stay where they
/// are). The spec a child is written with, so what is applied and what is compared agree.
pub fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

fn as_int(n: &serde_json::Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// The paths (`spec.a.b`, `spec.list[2].x`) where two specs differ, stopping at the first level
/// that differs: an added/removed key, an array whose length changed, or a differing leaf.
pub fn diff_paths(desired_spec: &Value, live_spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_into(desired_spec, live_spec, "spec", &mut out);
    out
}

fn diff_into(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k)));
            for k in keys {
                let here = format!("{at}.{k}");
                let (p, q) = (x.get(k), y.get(k));
                match (p.filter(|v| !v.is_null()), q.filter(|v| !v.is_null())) {
                    (Some(p), Some(q)) => diff_into(p, q, &here, out),
                    (None, None) => {}
                    _ => out.push(here),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff_into(p, q, &format!("{at}[{i}]"), out);
            }
        }
        _ if json_eq(a, b) => {}
        _ => out.push(at.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(path: &str, include_subfields: bool) -> SpecField {
        SpecField {
            path: path.to_string(),
            include_subfields,
        }
    }

    fn changed(path: &str, subfields: bool, a: Value, b: Value) -> bool {
        field_changed(&field(path, subfields), &a, &b)
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(json_eq(&json!(1), &json!(1.0)));
        assert!(json_eq(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(!json_eq(&json!(1), &json!(1.5)));
        assert!(!json_eq(&json!(1), &json!("1")));
        assert!(json_eq(&json!(u64::MAX), &json!(u64::MAX)));
        assert!(!json_eq(&json!(-1), &json!(u64::MAX)));
    }

    #[test]
    fn null_is_absent_but_empty_is_not() {
        assert!(json_eq(&json!({"a": null}), &json!({})));
        assert!(json_eq(
            &json!({"a": null, "b": 1}),
            &json!({"b": 1.0, "c": null})
        ));
        assert!(json_eq(
            &json!({"v": [{"name": "in", "groupBy": null}]}),
            &json!({"v": [{"name": "in"}]})
        ));
        assert!(!json_eq(&json!({"a": null}), &json!({"a": {}})));
        assert!(!json_eq(&json!({"a": []}), &json!({"a": null})));
        assert!(!json_eq(&json!({"a": null}), &json!({"a": 0})));
        // Array elements keep their places.
        assert!(!json_eq(&json!([null]), &json!([])));
    }

    #[test]
    fn strip_nulls_removes_null_keys_at_every_depth() {
        let mut v = json!({"a": null, "v": [{"x": null, "y": {"z": null}}, null], "k": 1});
        strip_nulls(&mut v);
        assert_eq!(v, json!({"v": [{"y": {}}, null], "k": 1}));
    }

    #[test]
    fn null_leaves_are_absent_for_field_paths_and_diffs() {
        let with_nulls = json!({"vertices": [{"name": "in", "udf": null, "scale": {"min": null}}],
                                "watermark": null});
        let without = json!({"vertices": [{"name": "in", "scale": {}}]});
        for path in [
            "spec.watermark",
            "spec.vertices.udf",
            "spec.vertices.scale.min",
        ] {
            assert!(
                !changed(path, false, with_nulls.clone(), without.clone()),
                "{path}"
            );
            assert!(
                !changed(path, true, with_nulls.clone(), without.clone()),
                "{path}"
            );
        }
        assert!(changed(
            "spec.watermark",
            true,
            with_nulls.clone(),
            json!({"watermark": {"disabled": true}})
        ));
        assert!(diff_paths(&with_nulls, &without).is_empty());
        assert_eq!(
            diff_paths(
                &with_nulls,
                &json!({"vertices": [{"name": "in", "scale": {}}], "watermark": {}})
            ),
            vec!["spec.watermark"]
        );
    }

    #[test]
    fn leaf_paths_compare_values() {
        let a = json!({"version": "1.0"});
        assert!(changed(
            "spec.version",
            false,
            a.clone(),
            json!({"version": "1.1"})
        ));
        assert!(!changed("spec.version", false, a.clone(), a.clone()));
        assert!(changed("spec.version", false, a, json!({})));
        assert!(!changed(
            "spec.version",
            false,
            json!({}),
            json!({"other": 1})
        ));
        assert!(!changed(
            "spec.n",
            false,
            json!({"n": 1}),
            json!({"n": 1.0})
        ));
    }

    #[test]
    fn maps_without_subfields_count_by_presence() {
        let a = json!({"jetstream": {"version": "1"}});
        let b = json!({"jetstream": {"version": "2"}});
        assert!(!changed("spec.jetstream", false, a.clone(), b.clone()));
        assert!(changed("spec.jetstream", true, a.clone(), b));
        assert!(changed(
            "spec.jetstream",
            false,
            a.clone(),
            json!({"redis": {}})
        ));
        // A map on one side and a scalar on the other: presence of a map differs.
        assert!(changed(
            "spec.jetstream",
            false,
            a,
            json!({"jetstream": "x"})
        ));
    }

    #[test]
    fn arrays_are_traversed_and_lengths_count() {
        let one = json!({"vertices": [{"udf": {"container": {"image": "a"}}}]});
        let other_image = json!({"vertices": [{"udf": {"container": {"image": "b"}}}]});
        let two = json!({"vertices": [
            {"udf": {"container": {"image": "a"}}},
            {"name": "out"}
        ]});
        let path = "spec.vertices.udf.container.image";
        assert!(changed(path, false, one.clone(), other_image));
        assert!(changed(path, false, one.clone(), two.clone()));
        assert!(!changed(path, false, two.clone(), two.clone()));
        // Presence-only map paths: "some element has it" on both sides is unchanged.
        assert!(!changed("spec.vertices.udf", false, one.clone(), two));
        assert!(changed(
            "spec.vertices.udf",
            false,
            one,
            json!({"vertices": [{"source": {}}]})
        ));
    }

    #[test]
    fn absent_on_both_sides_is_unchanged_whatever_the_ancestors() {
        let a = json!({"vertices": [{"udf": {}}]});
        let b = json!({"vertices": [{"udf": {"container": {"args": ["x"]}}}]});
        assert!(!changed(
            "spec.vertices.udf.container.image",
            false,
            a.clone(),
            b.clone()
        ));
        assert!(changed("spec.vertices.udf.container.args", false, a, b));
    }

    #[test]
    fn segments_fall_back_to_case_insensitive_keys() {
        let a = json!({"c": {"envFrom": [{"secretRef": {"name": "a"}}]}});
        let b = json!({"c": {"envFrom": [{"secretRef": {"name": "b"}}]}});
        assert!(changed("spec.c.envfrom", true, a.clone(), b.clone()));
        assert!(changed("spec.c.envFrom", true, a.clone(), b));
        // The exact key wins over a case-folded one.
        let both = json!({"c": {"envfrom": 1, "envFrom": 2}});
        let both2 = json!({"c": {"envfrom": 1, "envFrom": 3}});
        assert!(!changed(
            "spec.c.envfrom",
            false,
            both.clone(),
            both2.clone()
        ));
        assert!(changed("spec.c.envFrom", false, both, both2));
        // Two case-folded candidates and no exact key: ambiguous, so nothing is selected.
        let amb = json!({"c": {"EnvFrom": 1, "ENVFROM": 2}});
        assert!(!changed("spec.c.envfrom", false, amb, json!({})));
    }

    #[test]
    fn paths_outside_spec_never_match() {
        assert!(!changed(
            "metadata.name",
            true,
            json!({"name": 1}),
            json!({"name": 2})
        ));
        assert!(!changed("version", true, json!({"version": 1}), json!({})));
    }

    #[test]
    fn scalars_on_the_way_are_compared() {
        assert!(changed(
            "spec.a.b",
            false,
            json!({"a": "x"}),
            json!({"a": "y"})
        ));
        assert!(!changed("spec.a.b", false, json!({"a": null}), json!({})));
    }

    #[test]
    fn diff_paths_name_the_first_differing_level() {
        let a = json!({"vertices": [{"name": "in", "scale": {"min": 1}}], "x": 1, "gone": true});
        let b = json!({"vertices": [{"name": "in", "scale": {"min": 2}}], "x": 1.0, "new": {}});
        assert_eq!(
            diff_paths(&a, &b),
            vec!["spec.gone", "spec.vertices[0].scale.min", "spec.new"]
        );
        let c = json!({"vertices": [{"name": "in"}, {"name": "out"}]});
        assert_eq!(
            diff_paths(&a, &c),
            vec!["spec.gone", "spec.vertices", "spec.x"]
        );
        assert!(diff_paths(&a, &a).is_empty());
        assert_eq!(diff_paths(&json!(null), &json!({})), vec!["spec"]);
    }
}
