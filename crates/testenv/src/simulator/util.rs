//! Small helpers shared by the simulated controllers: API resources, lenient JSON access,
//! conditions, hashing, time and the "unpullable image" model.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, PostParams},
    core::ApiResource,
};
use serde_json::{Map, Value, json};

use super::SimError;

pub(crate) const GROUP: &str = "numaflow.numaproj.io";
pub(crate) const API_VERSION: &str = "numaflow.numaproj.io/v1alpha1";
/// Field manager for every write of the simulator.
pub(crate) const FIELD_MANAGER: &str = "numaflow-simulator";
/// Image of the Numaflow containers the controller injects into every pod it creates.
pub(crate) const NUMAFLOW_IMAGE: &str = "quay.io/numaproj/numaflow:v1.5.2";

pub(crate) const L_PART_OF: &str = "app.kubernetes.io/part-of";
pub(crate) const L_COMPONENT: &str = "app.kubernetes.io/component";
pub(crate) const L_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub(crate) const L_NAME: &str = "app.kubernetes.io/name";
pub(crate) const L_PIPELINE: &str = "numaflow.numaproj.io/pipeline-name";
pub(crate) const L_VERTEX: &str = "numaflow.numaproj.io/vertex-name";
pub(crate) const L_MONO_VERTEX: &str = "numaflow.numaproj.io/mono-vertex-name";
pub(crate) const L_ISBSVC: &str = "numaflow.numaproj.io/isbsvc-name";
pub(crate) const A_HASH: &str = "numaflow.numaproj.io/hash";
pub(crate) const A_REPLICA: &str = "numaflow.numaproj.io/replica";
pub(crate) const A_INSTANCE: &str = "numaflow.numaproj.io/instance";

fn numaflow_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: "v1alpha1".into(),
        api_version: API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub(crate) fn pipeline_resource() -> ApiResource {
    numaflow_resource("Pipeline", "pipelines")
}
pub(crate) fn vertex_resource() -> ApiResource {
    numaflow_resource("Vertex", "vertices")
}
pub(crate) fn monovertex_resource() -> ApiResource {
    numaflow_resource("MonoVertex", "monovertices")
}
pub(crate) fn isbsvc_resource() -> ApiResource {
    numaflow_resource("InterStepBufferService", "interstepbufferservices")
}

pub(crate) fn dyn_api(client: &Client, ns: &str, ar: &ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, ar)
}

pub(crate) fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    }
}

/// The value at `path` (object keys only), if every step exists.
pub(crate) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, key| cur.get(*key))
}
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}
pub(crate) fn i64_at(v: &Value, path: &[&str]) -> Option<i64> {
    at(v, path).and_then(Value::as_i64)
}
pub(crate) fn bool_at(v: &Value, path: &[&str]) -> bool {
    at(v, path).and_then(Value::as_bool).unwrap_or(false)
}

/// `spec` of a dynamic object (an empty object when absent).
pub(crate) fn spec_of(obj: &DynamicObject) -> Value {
    obj.data.get("spec").cloned().unwrap_or_else(|| json!({}))
}

/// `status` of a dynamic object as a mutable JSON object (an empty object when absent).
pub(crate) fn status_of(obj: &DynamicObject) -> Value {
    match obj.data.get("status") {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => json!({}),
    }
}

pub(crate) fn generation(obj: &DynamicObject) -> i64 {
    obj.metadata.generation.unwrap_or(0)
}

/// Replaces the status subresource when it changed; the resourceVersion of `obj` makes a stale
/// write fail with 409 so that the next event retries on fresh data.
pub(crate) async fn write_status(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    status: Value,
) -> Result<DynamicObject, SimError> {
    if obj.data.get("status") == Some(&status) {
        return Ok(obj.clone());
    }
    let mut updated = obj.clone();
    updated.data["status"] = status;
    Ok(api
        .replace_status(&obj.name_any(), &post_params(), &updated)
        .await?)
}

pub(crate) fn now() -> DateTime<Utc> {
    Utc::now()
}
pub(crate) fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}
/// A Kubernetes timestamp as a chrono time.
pub(crate) fn k8s_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> DateTime<Utc> {
    let nanos = u32::try_from(t.0.subsec_nanosecond()).unwrap_or(0);
    DateTime::<Utc>::from_timestamp(t.0.as_second(), nanos).unwrap_or_else(now)
}

pub(crate) fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Sets a Numaflow-style condition (type, status, reason, message, lastTransitionTime), keeping the
/// transition time while the status is unchanged, and keeps the list sorted by type.
pub(crate) fn set_condition(
    status: &mut Value,
    ty: &str,
    cond_status: &str,
    reason: &str,
    message: &str,
) {
    let conds = conditions_mut(status);
    let previous = conds
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        .cloned();
    let transition = match &previous {
        Some(p) if p.get("status").and_then(Value::as_str) == Some(cond_status) => p
            .get("lastTransitionTime")
            .cloned()
            .unwrap_or_else(|| json!(rfc3339(now()))),
        _ => json!(rfc3339(now())),
    };
    conds.retain(|c| c.get("type").and_then(Value::as_str) != Some(ty));
    conds.push(json!({
        "type": ty,
        "status": cond_status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    }));
    conds.sort_by(|a, b| {
        let key = |c: &Value| {
            c.get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        key(a).cmp(&key(b))
    });
}

/// Adds the missing conditions as Unknown, as Numaflow does when it first sees an object.
pub(crate) fn init_conditions(status: &mut Value, types: &[&str]) {
    for ty in types {
        let present = conditions_mut(status)
            .iter()
            .any(|c| c.get("type").and_then(Value::as_str) == Some(ty));
        if !present {
            set_condition(status, ty, "Unknown", "", "");
        }
    }
}

fn conditions_mut(status: &mut Value) -> &mut Vec<Value> {
    if !status.is_object() {
        *status = json!({});
    }
    let obj = status
        .as_object_mut()
        .expect("status was just made an object");
    let conds = obj.entry("conditions").or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    conds
        .as_array_mut()
        .expect("conditions was just made an array")
}

/// The condition of type `ty` in a status.
pub(crate) fn condition<'a>(status: &'a Value, ty: &str) -> Option<&'a Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
}

/// Numaflow's notion of a healthy child: an accepted phase and every condition True.
pub fn is_healthy(status: &Value, phases: &[&str]) -> bool {
    let phase_ok = phases.contains(&str_at(status, &["phase"]).unwrap_or(""));
    let conds_ok = status
        .get("conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            !cs.is_empty()
                && cs
                    .iter()
                    .all(|c| c.get("status").and_then(Value::as_str) == Some("True"))
        });
    phase_ok && conds_ok
}

/// Whether the simulated registry cannot serve this image (the e2e suites' bad-image markers).
pub(crate) fn is_bad_image(image: &str) -> bool {
    ["fakepath", "does-not-exist", "badcat", "badpath"]
        .iter()
        .any(|m| image.contains(m))
        || image.ends_with(":invalid")
}

/// Every `image` string in a spec, with a container name derived from where it was found
/// (`udf.container.image` → `udf`, `sink.udsink.container.image` → `udsink`).
pub(crate) fn collect_images(spec: &Value) -> Vec<(String, String)> {
    fn walk(v: &Value, hint: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    if k == "image" {
                        if let Some(img) = child.as_str() {
                            out.push((hint.to_owned(), img.to_owned()));
                        }
                        continue;
                    }
                    // `container` and array wrappers name nothing: keep the enclosing key.
                    let next = if k == "container" || k == "containerTemplate" {
                        hint
                    } else {
                        k.as_str()
                    };
                    walk(child, next, out);
                }
            }
            Value::Array(items) => {
                for item in items {
                    let named = item.get("name").and_then(Value::as_str).unwrap_or(hint);
                    walk(item, named, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(spec, "main", &mut out);
    out
}

/// Turns arbitrary hints into unique DNS-label container names.
pub(crate) fn container_names(hints: &[String]) -> Vec<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    hints
        .iter()
        .map(|h| {
            let mut base: String = h
                .to_ascii_lowercase()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            base = base.trim_matches('-').chars().take(50).collect();
            if base.is_empty() {
                base = "container".into();
            }
            let n = seen.entry(base.clone()).or_insert(0);
            *n += 1;
            if *n == 1 { base } else { format!("{base}-{n}") }
        })
        .collect()
}

/// A hash stable across processes (FNV-1a over canonical JSON, keys sorted).
pub(crate) fn stable_hash(v: &Value) -> String {
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let sorted: BTreeMap<&String, &Value> = map.iter().collect();
                out.push('{');
                for (k, child) in sorted {
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    canonical(child, out);
                    out.push(',');
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for item in items {
                    canonical(item, out);
                    out.push(',');
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut s = String::new();
    canonical(v, &mut s);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A controller ownerReference to `owner`.
pub(crate) fn owner_ref(
    api_version: &str,
    kind: &str,
    owner_name: &str,
    owner_uid: &str,
) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: owner_name.into(),
        uid: owner_uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

pub(crate) fn dyn_owner_ref(obj: &DynamicObject, kind: &str) -> OwnerReference {
    owner_ref(
        API_VERSION,
        kind,
        &obj.name_any(),
        &obj.uid().unwrap_or_default(),
    )
}

/// A label selector string (`k=v,...`) for the given labels.
pub(crate) fn selector_string(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Desired replicas of a Vertex or MonoVertex: 0 when Paused, else `replicas` (nil ⇒ 1) clamped
/// to [min (nil ⇒ 0), max (nil ⇒ 50)] unless scaling is disabled.
pub(crate) fn desired_replicas(spec: &Value, paused: bool) -> i64 {
    if paused {
        return 0;
    }
    let replicas = i64_at(spec, &["replicas"]).unwrap_or(1);
    clamp_to_scale(spec, replicas)
}

/// Clamps `replicas` to the spec's scale range unless scaling is disabled.
pub(crate) fn clamp_to_scale(spec: &Value, replicas: i64) -> i64 {
    if bool_at(spec, &["scale", "disabled"]) {
        return replicas.max(0);
    }
    let (min, max) = scale_range(spec);
    replicas.max(min).min(max.max(min))
}

/// `[min, max]` of a vertex spec with Numaflow's defaults.
pub(crate) fn scale_range(spec: &Value) -> (i64, i64) {
    let min = i64_at(spec, &["scale", "min"]).unwrap_or(0).max(0);
    let max = i64_at(spec, &["scale", "max"]).unwrap_or(50);
    (min, max)
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Removes a key from a JSON object (no-op otherwise).
pub(crate) fn remove_key(v: &mut Value, key: &str) {
    if let Some(obj) = v.as_object_mut() {
        obj.remove(key);
    }
}

/// `v[key] = value` on a JSON object, turning `v` into an object if needed.
pub(crate) fn set_key(v: &mut Value, key: &str, value: Value) {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    if let Some(obj) = v.as_object_mut() {
        obj.insert(key.to_owned(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_images() {
        assert!(is_bad_image("quay.io/numaio/numaflow-go/map-badcat:stable"));
        assert!(is_bad_image("badpath1"));
        assert!(is_bad_image("foo/does-not-exist:1"));
        assert!(is_bad_image("foo:invalid"));
        assert!(is_bad_image("x/fakepath/y"));
        assert!(!is_bad_image("quay.io/numaio/numaflow-go/map-cat:stable"));
    }

    #[test]
    fn replicas_rules() {
        assert_eq!(desired_replicas(&json!({}), false), 1);
        assert_eq!(desired_replicas(&json!({}), true), 0);
        assert_eq!(
            desired_replicas(&json!({"scale": {"min": 4, "max": 5}}), false),
            4
        );
        assert_eq!(
            desired_replicas(&json!({"replicas": 9, "scale": {"max": 5}}), false),
            5
        );
        assert_eq!(desired_replicas(&json!({"replicas": 0}), false), 0);
        assert_eq!(desired_replicas(&json!({"replicas": 90}), false), 50);
        assert_eq!(
            desired_replicas(&json!({"replicas": 90, "scale": {"disabled": true}}), false),
            90
        );
    }

    #[test]
    fn images_are_found_with_names() {
        let spec = json!({
            "udf": {"container": {"image": "a"}},
            "sink": {"udsink": {"container": {"image": "b"}}},
            "sidecars": [{"name": "side", "image": "c"}],
        });
        let mut found = collect_images(&spec);
        found.sort();
        assert_eq!(
            found,
            vec![
                ("side".to_owned(), "c".to_owned()),
                ("udf".to_owned(), "a".to_owned()),
                ("udsink".to_owned(), "b".to_owned())
            ]
        );
        assert_eq!(
            container_names(&["udf".into(), "udf".into(), "A_b".into()]),
            vec!["udf", "udf-2", "a-b"]
        );
    }

    #[test]
    fn hash_ignores_key_order() {
        let a: Value = serde_json::from_str(r#"{"a":1,"b":{"c":2,"d":3}}"#).expect("json");
        let b: Value = serde_json::from_str(r#"{"b":{"d":3,"c":2},"a":1}"#).expect("json");
        assert_eq!(stable_hash(&a), stable_hash(&b));
        assert_ne!(stable_hash(&a), stable_hash(&json!({"a": 2})));
    }

    #[test]
    fn conditions_sorted_and_transition_kept() {
        let mut st = json!({});
        init_conditions(&mut st, &["VerticesHealthy", "Configured"]);
        set_condition(&mut st, "Configured", "True", "Successful", "ok");
        let t = condition(&st, "Configured")
            .and_then(|c| c.get("lastTransitionTime"))
            .cloned();
        set_condition(&mut st, "Configured", "True", "Successful", "ok again");
        assert_eq!(
            condition(&st, "Configured")
                .and_then(|c| c.get("lastTransitionTime"))
                .cloned(),
            t
        );
        let types: Vec<_> = st["conditions"]
            .as_array()
            .expect("array")
            .iter()
            .map(|c| c["type"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(types, vec!["Configured", "VerticesHealthy"]);
        assert!(!is_healthy(&st, &["Running"]));
    }
}
