//! Progressive-upgrade status: the trial ("upgrading") child and the promoted child.

use crate::common::RiderStatus;
use crate::schema::optional_preserve_unknown_object;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Outcome of an assessment.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AssessmentResult {
    Success,
    Failure,
    #[default]
    Unknown,
}

/// Why a trial child was promoted without a full assessment.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ForcedSuccessReason {
    /// The trial carried the `force-promote` label.
    ForcePromote,
    /// `strategy.progressive.forcePromote` was set.
    RolloutConfiguration,
    /// The rollout uses something progressive can't assess (an HPA rider on a pipeline).
    ProgressiveUnsupported,
    /// The desired child can't ingest data (paused, or every source scaled to 0).
    NoDataIngestion,
}

/// Status of the trial child, common to all three data-plane kinds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradingChildStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessment_result: Option<AssessmentResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_assessment_start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_assessment_end_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_assessment_result: Option<AssessmentResult>,
    /// Start of the current window of continuous health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial_window_start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced_success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced_success_reason: Option<ForcedSuccessReason>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub discontinued: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_reasons: Vec<String>,
    /// Raw copy of the child's `.status` at the last failed check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_preserve_unknown_object")]
    pub child_status: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub initialization_complete: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub riders: Vec<RiderStatus>,
    /// The trial passed its assessment and runs on a trial Numaflow controller: it is promoted
    /// only when that controller's trial succeeds (Numaplane only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_controller_trial: bool,
}

/// Argo Rollouts AnalysisRun phase.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AnalysisPhase {
    #[default]
    #[serde(rename = "")]
    Unset,
    Pending,
    Running,
    Successful,
    Failed,
    Error,
    Inconclusive,
}

/// The AnalysisRun judging a trial child.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub analysis_run_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    pub phase: AnalysisPhase,
}

/// Min/max/disabled of one vertex's `scale`, as saved before a trial is rescaled.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ScaleDefinition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VertexScaleDefinition {
    pub vertex_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_definition: Option<ScaleDefinition>,
}

/// Scale of one promoted vertex (or the promoted MonoVertex) saved before it is scaled down.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleValues {
    /// JSON of `{"disabled":..,"max":..,"min":..}` (keys sorted, missing as null) or `"null"`.
    pub original_scale_min_max: String,
    /// The HPA owned by the promoted MonoVertex, deleted while the trial runs.
    #[serde(
        rename = "originalHPADefinition",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "optional_preserve_unknown_object")]
    pub original_hpa_definition: Option<serde_json::Value>,
    /// Pods left on the promoted child while the trial runs.
    pub scale_to: i64,
    /// Pods the promoted child ran before the upgrade.
    pub initial: i64,
}

/// Status of the promoted child of a PipelineRollout or MonoVertexRollout during an upgrade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromotedScalableChildStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_values: Option<BTreeMap<String, ScaleValues>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scale_values_restored_to_original: bool,
}

/// Status of the promoted InterStepBufferService during an upgrade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PromotedChildStatus {
    pub name: String,
}
