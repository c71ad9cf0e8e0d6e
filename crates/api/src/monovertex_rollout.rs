//! MonoVertexRollout: owns numaflow MonoVertices.

use crate::common::{ChildMetadata, RiderStatus, Status};
use crate::progressive::{AnalysisStatus, PromotedScalableChildStatus, UpgradingChildStatus};
use crate::schema::preserve_unknown_object;
use crate::strategy::{Analysis, PauseResumeStrategy, ProgressiveStrategy, Rider};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired MonoVertex, how to upgrade it, and the riders deployed with it.
// kube-derive repeats `printcolumn(type_ = ..)` per column, which clippy misreads.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "numaplane.numaproj.io",
    version = "v1alpha1",
    kind = "MonoVertexRollout",
    namespaced,
    status = "MonoVertexRolloutStatus",
    doc = "MonoVertexRollout deploys and upgrades a numaflow MonoVertex.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase")
)]
#[serde(rename_all = "camelCase")]
pub struct MonoVertexRolloutSpec {
    pub mono_vertex: MonoVertexTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MonoVertexStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub riders: Option<Vec<Rider>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MonoVertexTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ChildMetadata>,
    #[schemars(schema_with = "preserve_unknown_object")]
    #[serde(deserialize_with = "crate::free_form::value")]
    pub spec: serde_json::Value,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MonoVertexStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressive: Option<ProgressiveStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<Analysis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_resume: Option<PauseResumeStrategy>,
}

/// Observed state of a MonoVertexRollout and of the upgrade it is carrying out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MonoVertexRolloutStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::optional_int32")]
    pub name_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub riders: Vec<RiderStatus>,
    /// Selects the promoted MonoVertex's pods (kept current for VPA targeting).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub promoted_pod_selector: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressive_status: Option<MonoVertexProgressiveStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MonoVertexProgressiveStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrading_mono_vertex_status: Option<UpgradingMonoVertexStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_mono_vertex_status: Option<PromotedScalableChildStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradingMonoVertexStatus {
    #[serde(flatten)]
    pub child: UpgradingChildStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisStatus>,
    /// JSON of the trial's `{"disabled":..,"max":..,"min":..}`.
    #[serde(default)]
    pub original_scale_min_max: String,
    /// Full `scale` JSON of the trial, or `"null"`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub original_scale_definition: String,
}
