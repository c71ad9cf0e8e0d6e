//! PipelineRollout: owns numaflow Pipelines.

use crate::common::{ChildMetadata, PauseStatus, RiderStatus, Status};
use crate::progressive::{
    AnalysisStatus, PromotedScalableChildStatus, UpgradingChildStatus, VertexScaleDefinition,
};
use crate::schema::preserve_unknown_object;
use crate::strategy::{Analysis, PauseResumeStrategy, PipelineRider, ProgressiveStrategy};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Desired Pipeline, how to upgrade it, and the riders deployed with it.
// kube-derive repeats `printcolumn(type_ = ..)` per column, which clippy misreads.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "numaplane.numaproj.io",
    version = "v1alpha1",
    kind = "PipelineRollout",
    namespaced,
    status = "PipelineRolloutStatus",
    doc = "PipelineRollout deploys and upgrades a numaflow Pipeline.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Upgrade In Progress",
        type_ = "string",
        json_path = ".status.upgradeInProgress"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PipelineRolloutSpec {
    pub pipeline: PipelineTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<PipelineStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub riders: Option<Vec<PipelineRider>>,
}

/// The Pipeline to deploy. `spec.interStepBufferServiceName` names an ISBServiceRollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PipelineTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ChildMetadata>,
    #[schemars(schema_with = "preserve_unknown_object")]
    #[serde(deserialize_with = "crate::free_form::value")]
    pub spec: serde_json::Value,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressive: Option<ProgressiveStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<Analysis>,
    /// Resume after a user un-pauses the pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_resume: Option<PauseResumeStrategy>,
    /// Resume after a pause Numaplane made for pause-and-drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppnd: Option<PauseResumeStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recycle_strategy: Option<RecycleStrategy>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecycleStrategy {
    /// Percent of the historical pod count used while draining a replaced pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::optional_int32")]
    pub scale_factor: Option<i32>,
}

/// Observed state of a PipelineRollout and of the upgrade it is carrying out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineRolloutStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_status: Option<PauseStatus>,
    /// Index of the next child (`<rollout>-<index>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::optional_int32")]
    pub name_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub riders: Vec<RiderStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressive_status: Option<PipelineProgressiveStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineProgressiveStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrading_pipeline_status: Option<UpgradingPipelineStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_pipeline_status: Option<PromotedScalableChildStatus>,
    /// Pods per vertex of the last promoted pipeline before it was scaled down (drain sizing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub historical_pod_count: Option<BTreeMap<String, i64>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradingPipelineStatus {
    #[serde(flatten)]
    pub child: UpgradingChildStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisStatus>,
    /// The InterStepBufferService child the trial pipeline uses.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub inter_step_buffer_service_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub original_scale_min_max: Vec<VertexScaleDefinition>,
    /// Full `scale` JSON of each vertex in vertex order, `"null"` where absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub original_scale_definitions: Vec<String>,
}
