//! Typed, lenient, read-only views over Numaflow children (Pipeline, MonoVertex,
//! InterStepBufferService) and their specs, kept as the user's JSON (docs/architecture.md).
//!
//! Views never fail: a missing or wrongly shaped field reads as absent. Use the `validate_*`
//! functions to report wrong shapes in user input.

mod labels;
mod render;
mod validate;

pub use labels::{child_labels, has_child_labels, state_labels};

pub use render::{RenderedChild, isb_rollout_name, isb_rollout_name_in, vertex_names};
pub(crate) use render::{keep_live_replicas, point_pipeline_at_isbsvc, render_child};

pub use validate::{
    SpecError, applyable_text, make_applyable, validate_applyable, validate_isbsvc_spec,
    validate_monovertex_spec, validate_pipeline_spec,
};

use crate::json::{get_path, i64_at, str_at};
use numaplane_api::progressive::ScaleDefinition;
use serde_json::Value;

/// The Numaflow controller instance a child's annotations put it on: `numaflow.numaproj.io/instance`,
/// "" when absent (Numaflow treats both alike).
pub fn numaflow_instance(annotations: &std::collections::BTreeMap<String, String>) -> &str {
    annotations
        .get(numaplane_api::keys::annotations::NUMAFLOW_INSTANCE)
        .map_or("", String::as_str)
}

/// `spec.lifecycle.desiredPhase` values.
pub const DESIRED_PHASE_RUNNING: &str = "Running";
pub const DESIRED_PHASE_PAUSED: &str = "Paused";

/// A condition from a child's `status.conditions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildCondition<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

impl<'a> ChildCondition<'a> {
    fn from_value(v: &'a Value) -> Option<Self> {
        let field = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
        v.is_object().then(|| ChildCondition {
            type_: field("type"),
            status: field("status"),
            reason: field("reason"),
            message: field("message"),
        })
    }
}

/// One vertex of a pipeline spec.
#[derive(Debug, Clone, PartialEq)]
pub struct VertexView<'a> {
    pub name: &'a str,
    /// The vertex has a `source`.
    pub is_source: bool,
    /// `scale.min/max/disabled`; unset fields are `None`/false (Numaflow defaults min 0, max 50).
    pub scale: ScaleDefinition,
    /// The raw `scale` object, if any.
    pub raw_scale: Option<&'a Value>,
}

/// Reads the `scale` object of a vertex or MonoVertex spec.
pub fn read_scale(scale: Option<&Value>) -> ScaleDefinition {
    let Some(scale) = scale.filter(|s| s.is_object()) else {
        return ScaleDefinition::default();
    };
    ScaleDefinition {
        min: i64_at(scale, &["min"]),
        max: i64_at(scale, &["max"]),
        disabled: scale
            .get("disabled")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    }
}

/// A view over a child spec (Pipeline, MonoVertex or InterStepBufferService `spec`), whether it
/// comes from a live child or from a rollout's `spec.<child>.spec`.
#[derive(Debug, Clone, Copy)]
pub struct SpecView<'a>(pub &'a Value);

impl<'a> SpecView<'a> {
    /// `lifecycle.desiredPhase`; `""` when unset (Numaflow then runs the child).
    pub fn desired_phase(&self) -> &'a str {
        str_at(self.0, &["lifecycle", "desiredPhase"]).unwrap_or("")
    }

    /// Whether the spec asks for the child to be paused.
    pub fn wants_paused(&self) -> bool {
        self.desired_phase() == DESIRED_PHASE_PAUSED
    }

    /// Pipeline vertices that are objects with a string `name`, in spec order.
    pub fn vertices(&self) -> Vec<VertexView<'a>> {
        let Some(list) = self.0.get("vertices").and_then(Value::as_array) else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|v| {
                let name = v.get("name")?.as_str()?;
                let raw_scale = v.get("scale").filter(|s| s.is_object());
                Some(VertexView {
                    name,
                    is_source: v.get("source").is_some_and(|s| !s.is_null()),
                    scale: read_scale(raw_scale),
                    raw_scale,
                })
            })
            .collect()
    }

    /// Pipeline vertex names, in spec order.
    pub fn vertex_names(&self) -> Vec<String> {
        self.vertices().iter().map(|v| v.name.to_string()).collect()
    }

    /// MonoVertex `scale`.
    pub fn scale(&self) -> ScaleDefinition {
        read_scale(self.0.get("scale"))
    }

    /// MonoVertex `replicas`.
    pub fn replicas(&self) -> Option<i64> {
        i64_at(self.0, &["replicas"])
    }

    /// Pipeline `interStepBufferServiceName`; `None` when unset or empty.
    pub fn isbsvc_name(&self) -> Option<&'a str> {
        str_at(self.0, &["interStepBufferServiceName"]).filter(|s| !s.is_empty())
    }

    /// The InterStepBufferService (and ISBServiceRollout) a pipeline runs on: its
    /// `interStepBufferServiceName`, `default` when unset or empty, as Numaflow reads it.
    pub fn isbsvc_or_default(&self) -> &'a str {
        self.isbsvc_name().unwrap_or("default")
    }
}

/// A view over a whole child object (`metadata`, `spec`, `status`).
#[derive(Debug, Clone, Copy)]
pub struct ChildView<'a>(pub &'a Value);

impl<'a> ChildView<'a> {
    pub fn name(&self) -> &'a str {
        str_at(self.0, &["metadata", "name"]).unwrap_or("")
    }

    pub fn namespace(&self) -> &'a str {
        str_at(self.0, &["metadata", "namespace"]).unwrap_or("")
    }

    /// A label value.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        str_at(self.0, &["metadata", "labels", key])
    }

    /// An annotation value.
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        str_at(self.0, &["metadata", "annotations", key])
    }

    /// `metadata.generation` (0 when unset).
    pub fn generation(&self) -> i64 {
        i64_at(self.0, &["metadata", "generation"]).unwrap_or(0)
    }

    /// The child's spec (`Null` when absent).
    pub fn spec(&self) -> SpecView<'a> {
        static NULL: Value = Value::Null;
        SpecView(self.0.get("spec").unwrap_or(&NULL))
    }

    /// The raw `status`, if any.
    pub fn status(&self) -> Option<&'a Value> {
        self.0.get("status").filter(|s| !s.is_null())
    }

    /// `status.phase`; `""` when unset (Numaflow's "Unknown").
    pub fn phase(&self) -> &'a str {
        str_at(self.0, &["status", "phase"]).unwrap_or("")
    }

    /// `status.message`: Numaflow's own words on what is wrong ("" when unset).
    pub fn message(&self) -> &'a str {
        str_at(self.0, &["status", "message"]).unwrap_or("")
    }

    /// `status.observedGeneration` (0 when unset).
    pub fn observed_generation(&self) -> i64 {
        i64_at(self.0, &["status", "observedGeneration"]).unwrap_or(0)
    }

    /// Whether the controller has not yet seen the latest spec.
    pub fn generation_pending(&self) -> bool {
        self.observed_generation() < self.generation()
    }

    /// `status.drainedOnPause` (Pipeline): buffers were empty when it paused.
    pub fn drained_on_pause(&self) -> bool {
        get_path(self.0, &["status", "drainedOnPause"])
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// `status.conditions`, in list order.
    pub fn conditions(&self) -> Vec<ChildCondition<'a>> {
        get_path(self.0, &["status", "conditions"])
            .and_then(Value::as_array)
            .map(|l| l.iter().filter_map(ChildCondition::from_value).collect())
            .unwrap_or_default()
    }

    /// The first condition of the given type.
    pub fn condition(&self, type_: &str) -> Option<ChildCondition<'a>> {
        self.conditions().into_iter().find(|c| c.type_ == type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pipeline() -> Value {
        json!({
            "metadata": {"name": "p-1", "namespace": "ns", "generation": 4,
                         "labels": {"l": "v"}, "annotations": {"a": "w"}},
            "spec": {
                "interStepBufferServiceName": "isb-0",
                "lifecycle": {"desiredPhase": "Paused"},
                "vertices": [
                    {"name": "in", "source": {"generator": {}}, "scale": {"min": 1, "max": 2}},
                    {"name": "cat", "udf": {}, "scale": {"disabled": true}},
                    {"name": "out", "sink": {}},
                    {"noname": true},
                    "junk"
                ]
            },
            "status": {
                "phase": "Paused",
                "observedGeneration": 3,
                "drainedOnPause": true,
                "conditions": [
                    {"type": "VerticesHealthy", "status": "False", "reason": "Progressing", "message": "m"},
                    {"type": "DaemonServiceHealthy", "status": "True"},
                    7
                ]
            }
        })
    }

    #[test]
    fn reads_metadata_and_status() {
        let p = pipeline();
        let c = ChildView(&p);
        assert_eq!(c.name(), "p-1");
        assert_eq!(c.namespace(), "ns");
        assert_eq!(c.label("l"), Some("v"));
        assert_eq!(c.annotation("a"), Some("w"));
        assert_eq!(c.annotation("l"), None);
        assert_eq!(c.generation(), 4);
        assert_eq!(c.phase(), "Paused");
        assert_eq!(c.observed_generation(), 3);
        assert!(c.generation_pending());
        assert!(c.drained_on_pause());
        assert_eq!(c.conditions().len(), 2);
        let vh = c.condition("VerticesHealthy").unwrap();
        assert_eq!(
            (vh.status, vh.reason, vh.message),
            ("False", "Progressing", "m")
        );
        assert_eq!(c.condition("DaemonServiceHealthy").unwrap().reason, "");
        assert!(c.condition("Nope").is_none());
    }

    #[test]
    fn reads_pipeline_spec() {
        let p = pipeline();
        let spec = ChildView(&p).spec();
        assert_eq!(spec.desired_phase(), "Paused");
        assert!(spec.wants_paused());
        assert_eq!(spec.isbsvc_name(), Some("isb-0"));
        let vs = spec.vertices();
        assert_eq!(spec.vertex_names(), vec!["in", "cat", "out"]);
        assert!(vs[0].is_source && !vs[1].is_source && !vs[2].is_source);
        assert_eq!(
            vs[0].scale,
            ScaleDefinition {
                min: Some(1),
                max: Some(2),
                disabled: false
            }
        );
        assert_eq!(
            vs[1].scale,
            ScaleDefinition {
                min: None,
                max: None,
                disabled: true
            }
        );
        assert_eq!(vs[2].scale, ScaleDefinition::default());
        assert!(vs[2].raw_scale.is_none());
    }

    #[test]
    fn missing_or_wrongly_shaped_fields_read_as_absent() {
        let v = json!({"metadata": 3, "spec": {"vertices": {"a": 1}, "lifecycle": "x",
                       "scale": {"min": "1", "max": 2.5}}, "status": {"conditions": "x",
                       "phase": 5, "drainedOnPause": "true"}});
        let c = ChildView(&v);
        assert_eq!(c.name(), "");
        assert_eq!(c.generation(), 0);
        assert_eq!(c.phase(), "");
        assert!(c.conditions().is_empty());
        assert!(!c.drained_on_pause());
        assert!(!c.generation_pending());
        assert!(c.spec().vertices().is_empty());
        assert_eq!(c.spec().desired_phase(), "");
        assert_eq!(c.spec().scale(), ScaleDefinition::default());
        let empty = json!(null);
        assert!(ChildView(&empty).status().is_none());
        assert_eq!(ChildView(&empty).spec().isbsvc_name(), None);
    }

    #[test]
    fn reads_monovertex_spec() {
        let mv = json!({"spec": {"replicas": 3, "scale": {"min": 0, "max": 5, "disabled": false}}});
        let s = ChildView(&mv).spec();
        assert_eq!(s.replicas(), Some(3));
        assert_eq!(
            s.scale(),
            ScaleDefinition {
                min: Some(0),
                max: Some(5),
                disabled: false
            }
        );
        assert!(!s.wants_paused());
    }
}
