//! Strategy and rider specs shared by the rollout kinds.

use crate::schema::preserve_unknown_object;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Per-rollout progressive settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressiveStrategy {
    /// `delay,end,period,interval` in seconds; overrides the configured default for this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessment_schedule: Option<String>,
    /// Promote the trial child without assessment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_promote: Option<bool>,
}

/// Argo Rollouts analysis run after the basic health assessment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Analysis {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<Argument>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub templates: Option<Vec<AnalysisTemplateRef>>,
}

/// An Argo Rollouts analysis argument.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Argument {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ValueFrom>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValueFrom {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<FieldRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldRef {
    pub field_path: String,
}

/// Reference to an AnalysisTemplate (namespaced) or ClusterAnalysisTemplate (`clusterScope`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisTemplateRef {
    #[serde(default)]
    pub template_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_scope: Option<bool>,
}

/// What happens when a user un-pauses a child (`pauseResume`) or Numaplane resumes a pipeline it
/// paused (`ppnd`): `fastResume: false` clears `replicas` so vertices restart at `scale.min`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseResumeStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_resume: Option<bool>,
}

/// A rider: an extra object deployed with each child. The definition is kept as written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Rider {
    #[schemars(schema_with = "preserve_unknown_object")]
    #[serde(deserialize_with = "crate::free_form::value")]
    pub definition: serde_json::Value,
    /// A change to this rider triggers a progressive upgrade under the progressive strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressive: Option<bool>,
}

/// A PipelineRollout rider, optionally deployed once per vertex.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineRider {
    #[schemars(schema_with = "preserve_unknown_object")]
    #[serde(deserialize_with = "crate::free_form::value")]
    pub definition: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_vertex: Option<bool>,
}
