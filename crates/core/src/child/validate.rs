//! Shape checks of the child-spec fields Numaplane reads, so a wrong shape becomes a status
//! message naming the field (`spec.pipeline.spec.vertices[2].scale.min: expected integer, got
//! string "3"`) instead of being silently misread. Everything else in the spec is the user's and
//! Numaflow's business; Numaflow validates it when the child is applied.

use super::{DESIRED_PHASE_PAUSED, DESIRED_PHASE_RUNNING};
use crate::json::describe;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// A child spec field has the wrong shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct SpecError {
    /// Full JSON path of the offending field, e.g. `spec.pipeline.spec.vertices[1].scale.min`.
    pub path: String,
    pub problem: String,
}

impl SpecError {
    fn new(path: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            problem: problem.into(),
        }
    }

    fn expected(path: impl Into<String>, what: &str, got: &Value) -> Self {
        Self::new(path, format!("expected {what}, got {}", describe(got)))
    }

    /// Stable short reason for conditions, events and metrics.
    pub fn reason(&self) -> &'static str {
        "InvalidSpec"
    }
}

type Result<T = ()> = std::result::Result<T, SpecError>;

/// Checks a Pipeline spec; `prefix` is where the spec sits (e.g. `spec.pipeline.spec`).
pub fn validate_pipeline_spec(spec: &Value, prefix: &str) -> Result {
    let obj = object(spec, prefix)?;
    if let Some(vertices) = present(obj, "vertices") {
        let path = format!("{prefix}.vertices");
        let list = vertices
            .as_array()
            .ok_or_else(|| SpecError::expected(&path, "array", vertices))?;
        let mut seen = BTreeSet::new();
        for (i, vertex) in list.iter().enumerate() {
            let vpath = format!("{path}[{i}]");
            let name = validate_vertex(vertex, &vpath)?;
            if !seen.insert(name) {
                return Err(SpecError::new(
                    format!("{vpath}.name"),
                    format!("duplicate vertex name {name:?}"),
                ));
            }
        }
    }
    if let Some(edges) = present(obj, "edges") {
        let path = format!("{prefix}.edges");
        let list = edges
            .as_array()
            .ok_or_else(|| SpecError::expected(&path, "array", edges))?;
        for (i, edge) in list.iter().enumerate() {
            let epath = format!("{path}[{i}]");
            let e = object(edge, &epath)?;
            for key in ["from", "to"] {
                required_string(e, key, &epath)?;
            }
        }
    }
    validate_lifecycle(obj, prefix)?;
    optional_string(obj, "interStepBufferServiceName", prefix)?;
    validate_applyable(spec, prefix)
}

/// Checks a MonoVertex spec; `prefix` is where the spec sits (e.g. `spec.monoVertex.spec`).
pub fn validate_monovertex_spec(spec: &Value, prefix: &str) -> Result {
    let obj = object(spec, prefix)?;
    validate_scale(obj, prefix)?;
    optional_count(obj, "replicas", prefix)?;
    for key in ["source", "sink"] {
        optional_object(obj, key, prefix)?;
    }
    validate_lifecycle(obj, prefix)?;
    validate_applyable(spec, prefix)
}

/// Checks an InterStepBufferService spec; `prefix` is where the spec sits
/// (e.g. `spec.interStepBufferService.spec`).
pub fn validate_isbsvc_spec(spec: &Value, prefix: &str) -> Result {
    let obj = object(spec, prefix)?;
    optional_object(obj, "redis", prefix)?;
    // The Numaflow controller (1.7 and 1.8) finalizes every InterStepBufferService it sees and
    // can uninstall only a JetStream one: an ISB service without `jetstream` could never be
    // deleted, and with it neither its rollout. So none is created or updated to.
    let path = format!("{prefix}.jetstream");
    let Some(js) = optional_object(obj, "jetstream", prefix)? else {
        return Err(SpecError::new(
            path,
            "is required: Numaflow installs only JetStream ISB services, and could not delete one without it",
        ));
    };
    optional_count(js, "replicas", &path)?;
    optional_string(js, "version", &path)?;
    validate_applyable(spec, prefix)
}

/// Returns the vertex name.
fn validate_vertex<'a>(vertex: &'a Value, path: &str) -> Result<&'a str> {
    let v = object(vertex, path)?;
    let name = required_string(v, "name", path)?;
    if name.is_empty() {
        return Err(SpecError::new(format!("{path}.name"), "must not be empty"));
    }
    validate_scale(v, path)?;
    for key in ["source", "sink", "udf"] {
        optional_object(v, key, path)?;
    }
    Ok(name)
}

fn validate_scale(parent: &Map<String, Value>, prefix: &str) -> Result {
    let Some(scale) = optional_object(parent, "scale", prefix)? else {
        return Ok(());
    };
    let path = format!("{prefix}.scale");
    optional_count(scale, "min", &path)?;
    optional_count(scale, "max", &path)?;
    if let Some(d) = present(scale, "disabled") {
        d.as_bool()
            .ok_or_else(|| SpecError::expected(format!("{path}.disabled"), "bool", d))?;
    }
    Ok(())
}

fn validate_lifecycle(parent: &Map<String, Value>, prefix: &str) -> Result {
    let Some(lifecycle) = optional_object(parent, "lifecycle", prefix)? else {
        return Ok(());
    };
    let path = format!("{prefix}.lifecycle");
    if let Some(phase) = present(lifecycle, "desiredPhase") {
        let p = format!("{path}.desiredPhase");
        match phase.as_str() {
            Some("" | DESIRED_PHASE_RUNNING | DESIRED_PHASE_PAUSED) => {}
            Some(other) => {
                return Err(SpecError::new(
                    p,
                    format!("{other:?} is not one of Running, Paused"),
                ));
            }
            None => return Err(SpecError::expected(p, "string", phase)),
        }
    }
    // Drain and recycle arithmetic reads these.
    optional_count(lifecycle, "pauseGracePeriodSeconds", &path)?;
    optional_count(lifecycle, "deletionGracePeriodSeconds", &path)
}

/// Checks that every key and string of `v` can travel in a server-side apply patch: the API
/// server reads those as YAML, which refuses control characters other than tab, line feed and
/// carriage return (the JSON the user stored carried them). Names the first offending field.
pub fn validate_applyable(v: &Value, path: &str) -> Result {
    if applyable(v) {
        return Ok(());
    }
    let refuse = |s: &str, at: &str| match s.chars().find(|c| !yaml_printable(*c)) {
        Some(c) => Err(SpecError::new(
            at,
            format!(
                "contains the character U+{:04X}, which server-side apply (read as YAML) refuses",
                c as u32
            ),
        )),
        None => Ok(()),
    };
    match v {
        Value::String(s) => refuse(s, path),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| validate_applyable(x, &format!("{path}[{i}]"))),
        Value::Object(m) => m.iter().try_for_each(|(k, x)| {
            // The path is written to status by server-side apply too: the key escaped.
            let at = format!("{path}.{}", applyable_text(k));
            refuse(k, &at)?;
            validate_applyable(x, &at)
        }),
        _ => Ok(()),
    }
}

/// `s` with every character server-side apply refuses written as `\u{FFFF}`: user content
/// quoted in a status message (a field path, a value) must not make the status unwritable.
pub fn applyable_text(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().all(yaml_printable) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(
        s.chars()
            .map(|c| {
                if yaml_printable(c) {
                    c.to_string()
                } else {
                    format!("\\u{{{:04X}}}", c as u32)
                }
            })
            .collect(),
    )
}

/// Escapes, with [`applyable_text`], every key and string of `v` that server-side apply would
/// refuse.
pub fn make_applyable(v: &mut Value) {
    if applyable(v) {
        return;
    }
    match v {
        Value::String(s) => *s = applyable_text(s).into_owned(),
        Value::Array(items) => items.iter_mut().for_each(make_applyable),
        Value::Object(m) => {
            *m = std::mem::take(m)
                .into_iter()
                .map(|(k, mut x)| {
                    make_applyable(&mut x);
                    (applyable_text(&k).into_owned(), x)
                })
                .collect();
        }
        _ => {}
    }
}

/// The fast check behind [`validate_applyable`], without building paths.
fn applyable(v: &Value) -> bool {
    match v {
        Value::String(s) => s.chars().all(yaml_printable),
        Value::Array(items) => items.iter().all(applyable),
        Value::Object(m) => m
            .iter()
            .all(|(k, x)| k.chars().all(yaml_printable) && applyable(x)),
        _ => true,
    }
}

/// YAML 1.2's printable characters.
fn yaml_printable(c: char) -> bool {
    matches!(c,
        '\t' | '\n' | '\r' | '\u{20}'..='\u{7E}' | '\u{85}' | '\u{A0}'..='\u{D7FF}'
        | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>> {
    if let Some(why) = numaplane_api::free_form::unreadable(v) {
        return Err(SpecError::new(path, format!("cannot be read: {why}")));
    }
    v.as_object()
        .ok_or_else(|| SpecError::expected(path, "object", v))
}

/// A field that is present and not `null` (JSON null means "unset" to Kubernetes).
fn present<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn optional_object<'a>(
    parent: &'a Map<String, Value>,
    key: &str,
    prefix: &str,
) -> Result<Option<&'a Map<String, Value>>> {
    present(parent, key)
        .map(|v| object(v, &format!("{prefix}.{key}")))
        .transpose()
}

fn optional_string(parent: &Map<String, Value>, key: &str, prefix: &str) -> Result {
    if let Some(v) = present(parent, key) {
        v.as_str()
            .ok_or_else(|| SpecError::expected(format!("{prefix}.{key}"), "string", v))?;
    }
    Ok(())
}

fn required_string<'a>(parent: &'a Map<String, Value>, key: &str, prefix: &str) -> Result<&'a str> {
    let path = format!("{prefix}.{key}");
    match parent.get(key) {
        None | Some(Value::Null) => Err(SpecError::new(path, "required string is missing")),
        Some(v) => v
            .as_str()
            .ok_or_else(|| SpecError::expected(path, "string", v)),
    }
}

/// An int32 ≥ 0 (Numaflow's replica counts and durations are int32).
fn optional_count(parent: &Map<String, Value>, key: &str, prefix: &str) -> Result {
    let Some(v) = present(parent, key) else {
        return Ok(());
    };
    let path = format!("{prefix}.{key}");
    let n = v
        .as_i64()
        .ok_or_else(|| SpecError::expected(&path, "integer", v))?;
    if !(0..=i64::from(i32::MAX)).contains(&n) {
        return Err(SpecError::new(
            path,
            format!("expected integer between 0 and {}, got {n}", i32::MAX),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const P: &str = "spec.pipeline.spec";

    fn err(spec: Value) -> String {
        validate_pipeline_spec(&spec, P).unwrap_err().to_string()
    }

    #[test]
    fn accepts_a_realistic_pipeline() {
        let spec = json!({
            "interStepBufferServiceName": "my-isbsvc",
            "lifecycle": {"desiredPhase": "Running", "pauseGracePeriodSeconds": 60},
            "vertices": [
                {"name": "in", "source": {"generator": {"rpu": 5}}, "scale": {"min": 1, "max": 1}},
                {"name": "cat", "udf": {"builtin": {"name": "cat"}}, "scale": {"min": 3, "max": 5, "disabled": false}},
                {"name": "out", "sink": {"log": {}}, "scale": null}
            ],
            "edges": [{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}],
            "watermark": {"maxDelay": "1"}
        });
        assert_eq!(validate_pipeline_spec(&spec, P), Ok(()));
        assert_eq!(validate_pipeline_spec(&json!({}), P), Ok(()));
    }

    #[test]
    fn a_spec_that_could_not_be_read_is_reported_at_its_path() {
        // As the API server may store it: nested deeper than serde_json reads.
        let deep = (0..200).fold(json!(0), |v, _| json!([v]));
        let text = json!({"pipeline": {"spec": {"edges": deep}}}).to_string();
        let read: numaplane_api::pipeline_rollout::PipelineRolloutSpec =
            serde_json::from_str(&text).expect("read, not refused");
        assert_eq!(
            err(read.pipeline.spec),
            "spec.pipeline.spec: cannot be read: nested deeper than 128 levels"
        );
        let unreadable = json!({numaplane_api::free_form::UNREADABLE: "x"});
        assert!(validate_monovertex_spec(&unreadable, "spec.monoVertex.spec").is_err());
        assert!(validate_isbsvc_spec(&unreadable, "spec.interStepBufferService.spec").is_err());
    }

    #[test]
    fn strings_server_side_apply_refuses_are_named() {
        let spec = json!({"vertices": [{"name": "in", "source": {"generator": {"note": "nul\u{0}byte"}}}]});
        assert_eq!(
            err(spec),
            "spec.pipeline.spec.vertices[0].source.generator.note: contains the character U+0000, which server-side apply (read as YAML) refuses"
        );
        let key = json!({"vertices": [], "x\u{7f}": 1});
        assert!(err(key).starts_with("spec.pipeline.spec.x"));
        let fine = json!({"vertices": [], "edges": [], "a": "tab\tline\nünïcödé 🚀 \u{202e}"});
        assert_eq!(validate_pipeline_spec(&fine, P), Ok(()));
    }

    #[test]
    fn names_the_path_and_the_problem() {
        assert_eq!(
            err(json!({"vertices": [{"name": "a"}, {"name": "b", "scale": {"min": "3"}}]})),
            r#"spec.pipeline.spec.vertices[1].scale.min: expected integer, got string "3""#
        );
        assert_eq!(
            err(json!({"vertices": [{"name": "a", "scale": {"max": -1}}]})),
            "spec.pipeline.spec.vertices[0].scale.max: expected integer between 0 and 2147483647, got -1"
        );
        assert_eq!(
            err(json!({"vertices": [{"name": "a", "scale": {"max": 2.5}}]})),
            "spec.pipeline.spec.vertices[0].scale.max: expected integer, got number 2.5"
        );
        assert_eq!(
            err(json!({"vertices": [{"name": "a", "scale": {"disabled": "yes"}}]})),
            r#"spec.pipeline.spec.vertices[0].scale.disabled: expected bool, got string "yes""#
        );
        assert_eq!(
            err(json!({"vertices": [{"name": "a", "scale": 3}]})),
            "spec.pipeline.spec.vertices[0].scale: expected object, got number 3"
        );
    }

    #[test]
    fn rejects_bad_vertices() {
        assert_eq!(
            err(json!([])),
            "spec.pipeline.spec: expected object, got array"
        );
        assert_eq!(
            err(json!({"vertices": {"name": "a"}})),
            "spec.pipeline.spec.vertices: expected array, got object"
        );
        assert_eq!(
            err(json!({"vertices": ["a"]})),
            r#"spec.pipeline.spec.vertices[0]: expected object, got string "a""#
        );
        assert_eq!(
            err(json!({"vertices": [{"scale": {}}]})),
            "spec.pipeline.spec.vertices[0].name: required string is missing"
        );
        assert_eq!(
            err(json!({"vertices": [{"name": 1}]})),
            "spec.pipeline.spec.vertices[0].name: expected string, got number 1"
        );
        assert_eq!(
            err(json!({"vertices": [{"name": ""}]})),
            "spec.pipeline.spec.vertices[0].name: must not be empty"
        );
        assert_eq!(
            err(json!({"vertices": [{"name": "a"}, {"name": "a"}]})),
            r#"spec.pipeline.spec.vertices[1].name: duplicate vertex name "a""#
        );
        assert_eq!(
            err(json!({"vertices": [{"name": "a", "source": "kafka"}]})),
            r#"spec.pipeline.spec.vertices[0].source: expected object, got string "kafka""#
        );
    }

    #[test]
    fn rejects_bad_edges_lifecycle_and_isbsvc_name() {
        assert_eq!(
            err(json!({"edges": [{"from": "a"}]})),
            "spec.pipeline.spec.edges[0].to: required string is missing"
        );
        assert_eq!(
            err(json!({"edges": [{"from": "a", "to": 2}]})),
            "spec.pipeline.spec.edges[0].to: expected string, got number 2"
        );
        assert_eq!(
            err(json!({"edges": "a->b"})),
            r#"spec.pipeline.spec.edges: expected array, got string "a->b""#
        );
        assert_eq!(
            err(json!({"lifecycle": {"desiredPhase": "Stopped"}})),
            r#"spec.pipeline.spec.lifecycle.desiredPhase: "Stopped" is not one of Running, Paused"#
        );
        assert_eq!(
            err(json!({"lifecycle": {"desiredPhase": true}})),
            "spec.pipeline.spec.lifecycle.desiredPhase: expected string, got bool true"
        );
        assert_eq!(
            err(json!({"lifecycle": {"pauseGracePeriodSeconds": "60"}})),
            r#"spec.pipeline.spec.lifecycle.pauseGracePeriodSeconds: expected integer, got string "60""#
        );
        assert_eq!(
            err(json!({"interStepBufferServiceName": ["x"]})),
            "spec.pipeline.spec.interStepBufferServiceName: expected string, got array"
        );
        assert_eq!(
            validate_pipeline_spec(&json!({"lifecycle": {"desiredPhase": ""}}), P),
            Ok(())
        );
    }

    #[test]
    fn monovertex_checks() {
        let m = "spec.monoVertex.spec";
        assert_eq!(
            validate_monovertex_spec(
                &json!({"scale": {"min": 2, "max": 3}, "replicas": 2,
                "source": {"udsource": {}}, "sink": {"log": {}}}),
                m
            ),
            Ok(())
        );
        let e = validate_monovertex_spec(&json!({"scale": {"min": "2"}}), m).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"spec.monoVertex.spec.scale.min: expected integer, got string "2""#
        );
        assert_eq!(e.path, "spec.monoVertex.spec.scale.min");
        assert_eq!(e.reason(), "InvalidSpec");
        assert_eq!(
            validate_monovertex_spec(&json!({"replicas": -2}), m)
                .unwrap_err()
                .path,
            "spec.monoVertex.spec.replicas"
        );
        assert_eq!(
            validate_monovertex_spec(&json!({"lifecycle": {"desiredPhase": "Pausing"}}), m)
                .unwrap_err()
                .path,
            "spec.monoVertex.spec.lifecycle.desiredPhase"
        );
        assert!(validate_monovertex_spec(&json!("x"), m).is_err());
    }

    #[test]
    fn refused_characters_are_escaped_for_status() {
        let spec = json!({"container": {"\u{ffff}k": "x"}, "note": "a\u{0}b"});
        let err = validate_applyable(&spec, "spec.monoVertex.spec").unwrap_err();
        assert_eq!(err.path, "spec.monoVertex.spec.container.\\u{FFFF}k");
        let mut status =
            json!({"message": err.to_string(), "list": ["ok", "c\u{1}"], "\u{fffe}": 1});
        make_applyable(&mut status);
        assert!(applyable(&status), "{status}");
        assert_eq!(
            status,
            json!({
                "message": "spec.monoVertex.spec.container.\\u{FFFF}k: contains the character U+FFFF, which server-side apply (read as YAML) refuses",
                "list": ["ok", "c\\u{0001}"],
                "\\u{FFFE}": 1
            })
        );
        assert!(matches!(
            applyable_text("plain ü"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn isbsvc_checks() {
        let p = "spec.interStepBufferService.spec";
        assert_eq!(
            validate_isbsvc_spec(
                &json!({"jetstream": {"version": "2.10.3", "replicas": 3,
                "persistence": {"volumeSize": "1Gi"}}}),
                p
            ),
            Ok(())
        );
        for no_jetstream in [json!({}), json!({"redis": {"native": {}}})] {
            assert_eq!(
                validate_isbsvc_spec(&no_jetstream, p)
                    .unwrap_err()
                    .to_string(),
                "spec.interStepBufferService.spec.jetstream: is required: Numaflow installs only JetStream ISB services, and could not delete one without it"
            );
        }
        assert_eq!(
            validate_isbsvc_spec(&json!({"jetstream": "2.10"}), p)
                .unwrap_err()
                .to_string(),
            r#"spec.interStepBufferService.spec.jetstream: expected object, got string "2.10""#
        );
        assert_eq!(
            validate_isbsvc_spec(&json!({"jetstream": {"replicas": "3"}}), p)
                .unwrap_err()
                .path,
            "spec.interStepBufferService.spec.jetstream.replicas"
        );
        assert_eq!(
            validate_isbsvc_spec(&json!(null), p)
                .unwrap_err()
                .to_string(),
            "spec.interStepBufferService.spec: expected object, got null"
        );
    }
}
