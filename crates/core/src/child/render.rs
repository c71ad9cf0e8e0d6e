//! The rendering part of the desired child ([`crate::desired`]): the rollout's child template
//! rendered for one child name, the labels Numaplane adds, and the pieces a kind adds to it.

use crate::template::{self, TemplateError, TemplateVars};
use numaplane_api::common::ChildMetadata;
use numaplane_api::keys::{labels, upgrade_state};
use serde_json::Value;
use std::collections::BTreeMap;

/// A rendered child: what is compared with, and applied to, the live child.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedChild {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub spec: Value,
}

/// Renders the rollout's child template (`<field>.metadata` and `<field>.spec`, `field` being
/// e.g. `spec.pipeline`) with `vars`, and labels the child with its rollout and
/// `upgrade-state: promoted`. Errors name the field.
pub fn render_child(
    rollout: &str,
    field: &str,
    metadata: Option<&ChildMetadata>,
    spec: &Value,
    vars: &TemplateVars,
) -> Result<RenderedChild, TemplateError> {
    let mut spec =
        template::render_json(spec, vars).map_err(|e| e.under(&format!("{field}.spec")))?;
    // `"groupBy": null` means "not set" to Numaflow; written without it, the child compares
    // equal to the rollout however a merge patch of ours later rewrites the key.
    crate::usde::strip_nulls(&mut spec);
    let render_map = |m: Option<&BTreeMap<String, String>>, what: &str| {
        m.into_iter()
            .flatten()
            .map(|(k, v)| {
                let at = format!("{field}.metadata.{what}[{k:?}]");
                Ok((
                    template::render_str(k, vars).map_err(|e| e.under(&at))?,
                    template::render_str(v, vars).map_err(|e| e.under(&at))?,
                ))
            })
            .collect::<Result<BTreeMap<_, _>, TemplateError>>()
    };
    let mut labels_out = render_map(metadata.and_then(|m| m.labels.as_ref()), "labels")?;
    let annotations = render_map(metadata.and_then(|m| m.annotations.as_ref()), "annotations")?;
    labels_out.extend(super::child_labels(rollout, upgrade_state::PROMOTED));
    Ok(RenderedChild {
        labels: labels_out,
        annotations,
        spec,
    })
}

/// Name of the ISBServiceRollout a pipeline spec refers to (absent or empty means `default`).
pub fn isb_rollout_name(spec: &Value) -> String {
    super::SpecView(spec).isbsvc_or_default().to_string()
}

/// [`isb_rollout_name`] of a PipelineRollout's `spec.pipeline.spec`, read from the rollout
/// spec's JSON text without building the rest of it; `None` when the text is not a rollout spec.
pub fn isb_rollout_name_in(rollout_spec: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct RolloutSpec {
        pipeline: Template,
    }
    #[derive(serde::Deserialize)]
    struct Template {
        #[serde(default)]
        spec: Option<PipelineSpec>,
    }
    #[derive(serde::Deserialize)]
    struct PipelineSpec {
        #[serde(default, rename = "interStepBufferServiceName")]
        isbsvc: Option<Value>,
    }
    let parsed: RolloutSpec = serde_json::from_str(rollout_spec).ok()?;
    let mut spec = serde_json::Map::new();
    if let Some(isb) = parsed.pipeline.spec.and_then(|s| s.isbsvc) {
        spec.insert("interStepBufferServiceName".into(), isb);
    }
    Some(isb_rollout_name(&Value::Object(spec)))
}

/// Vertex names of a pipeline spec, in order (empty for other kinds).
pub fn vertex_names(spec: &Value) -> Vec<String> {
    spec.get("vertices")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A Pipeline runs on the ISB service child of its ISBServiceRollout: labels name both, and the
/// spec names the child instead of the rollout.
pub fn point_pipeline_at_isbsvc(
    labels_out: &mut BTreeMap<String, String>,
    spec: &mut Value,
    isb_rollout: &str,
    isb_child: &str,
) {
    labels_out.insert(labels::ISBSVC_NAME.into(), isb_rollout.to_string());
    labels_out.insert(labels::ISBSVC_CHILD_NAME.into(), isb_child.to_string());
    if let Some(spec) = spec.as_object_mut() {
        spec.insert(
            "interStepBufferServiceName".into(),
            Value::String(isb_child.to_string()),
        );
    }
}

/// A MonoVertex keeps the live (autoscaled) `spec.replicas` the rollout doesn't set, except on
/// a slow resume (desired Running while the live one is Paused, without `fastResume`), which
/// restarts it at `scale.min`.
pub fn keep_live_replicas(
    desired_spec: &mut Value,
    live_spec: &Value,
    live_phase: &str,
    fast_resume: bool,
) {
    let Some(replicas) = live_spec.get("replicas").filter(|r| !r.is_null()) else {
        return;
    };
    let resuming = desired_spec
        .pointer("/lifecycle/desiredPhase")
        .and_then(Value::as_str)
        .is_none_or(|p| p.is_empty() || p == "Running")
        && live_phase == "Paused";
    if resuming && !fast_resume {
        return;
    }
    if let Some(spec) = desired_spec.as_object_mut() {
        spec.entry("replicas").or_insert_with(|| replicas.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_and_labels() {
        let meta = ChildMetadata {
            labels: Some([("app".to_string(), "{{.pipeline-name}}".to_string())].into()),
            annotations: None,
        };
        let vars = TemplateVars::pipeline("p-3", "ns");
        let mut c = render_child(
            "p",
            "spec.pipeline",
            Some(&meta),
            &json!({"x": "{{.pipeline-namespace}}", "interStepBufferServiceName": "isb"}),
            &vars,
        )
        .expect("render");
        assert_eq!(c.labels["app"], "p-3");
        assert_eq!(c.labels[labels::PARENT_ROLLOUT_NAME], "p");
        assert_eq!(c.labels[labels::UPGRADE_STATE], "promoted");
        assert_eq!(c.spec["x"], "ns");
        assert_eq!(isb_rollout_name(&c.spec), "isb");
        assert_eq!(isb_rollout_name(&json!({})), "default");
        for (text, want) in [
            (
                r#"{"pipeline":{"spec":{"vertices":[{"x":{}}],"interStepBufferServiceName":"isb"}}}"#,
                Some("isb"),
            ),
            (
                r#"{"pipeline":{"spec":{"interStepBufferServiceName":""}}}"#,
                Some("default"),
            ),
            (
                r#"{"pipeline":{"spec":{"interStepBufferServiceName":7}}}"#,
                Some("default"),
            ),
            (r#"{"pipeline":{"spec":{}},"strategy":{}}"#, Some("default")),
            (r#"{"pipeline":{}}"#, Some("default")),
            (r#"{"riders":[]}"#, None),
        ] {
            assert_eq!(isb_rollout_name_in(text).as_deref(), want, "{text}");
        }
        point_pipeline_at_isbsvc(&mut c.labels, &mut c.spec, "isb", "isb-1");
        assert_eq!(c.spec["interStepBufferServiceName"], "isb-1");
        assert_eq!(c.labels[labels::ISBSVC_CHILD_NAME], "isb-1");
    }

    #[test]
    fn template_errors_name_the_field() {
        let meta = ChildMetadata {
            labels: Some([("app".to_string(), "{{.pipeline-name".to_string())].into()),
            annotations: None,
        };
        let vars = TemplateVars::pipeline("p-3", "ns");
        let err = render_child("p", "spec.pipeline", Some(&meta), &json!({}), &vars)
            .expect_err("open tag");
        assert!(
            err.to_string()
                .starts_with(r#"spec.pipeline.metadata.labels["app"]: "{{" is not closed"#),
            "{err}"
        );
        let spec = json!({"vertices": [{"name": "a"}, {"name": "b", "udf": {"container":
            {"image": "{{.pipeline-name"}}}]});
        let err = render_child("p", "spec.pipeline", None, &spec, &vars).expect_err("open tag");
        assert!(
            err.to_string().starts_with(
                r#"spec.pipeline.spec.vertices[1].udf.container.image: "{{" is not closed"#
            ),
            "{err}"
        );
    }

    #[test]
    fn nulls_are_left_out_of_the_child() {
        let spec = json!({"vertices": [{"name": "in", "groupBy": null, "scale": {"min": null}}],
                          "watermark": null});
        let c = render_child(
            "p",
            "spec.pipeline",
            None,
            &spec,
            &TemplateVars::pipeline("p-0", "ns"),
        )
        .expect("render");
        assert_eq!(c.spec, json!({"vertices": [{"name": "in", "scale": {}}]}));
    }

    #[test]
    fn replicas() {
        let live = json!({"replicas": 4});
        let mut running = json!({});
        keep_live_replicas(&mut running, &live, "Running", false);
        assert_eq!(running["replicas"], 4);
        let mut slow = json!({"lifecycle": {"desiredPhase": "Running"}});
        keep_live_replicas(&mut slow, &live, "Paused", false);
        assert_eq!(slow.get("replicas"), None);
        let mut fast = json!({});
        keep_live_replicas(&mut fast, &live, "Paused", true);
        assert_eq!(fast["replicas"], 4);
    }
}
