//! ISBServiceRollout: owns numaflow InterStepBufferServices (and a PodDisruptionBudget each).

use crate::common::{ChildMetadata, PauseStatus, RiderStatus, Status};
use crate::progressive::{PromotedChildStatus, UpgradingChildStatus};
use crate::schema::preserve_unknown_object;
use crate::strategy::{ProgressiveStrategy, Rider};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired InterStepBufferService, how to upgrade it, and the riders deployed with it.
// kube-derive repeats `printcolumn(type_ = ..)` per column, which clippy misreads.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "numaplane.numaproj.io",
    version = "v1alpha1",
    kind = "ISBServiceRollout",
    namespaced,
    status = "ISBServiceRolloutStatus",
    doc = "ISBServiceRollout deploys and upgrades a numaflow InterStepBufferService.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase")
)]
#[serde(rename_all = "camelCase")]
pub struct ISBServiceRolloutSpec {
    pub inter_step_buffer_service: ISBServiceTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ISBServiceStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub riders: Option<Vec<Rider>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ISBServiceTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ChildMetadata>,
    #[schemars(schema_with = "preserve_unknown_object")]
    #[serde(deserialize_with = "crate::free_form::value")]
    pub spec: serde_json::Value,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ISBServiceStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressive: Option<ProgressiveStrategy>,
}

/// Observed state of an ISBServiceRollout and of the upgrade it is carrying out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ISBServiceRolloutStatus {
    #[serde(flatten)]
    pub status: Status,
    /// When this rollout last asked the pipelines using it to pause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_request_status: Option<PauseStatus>,
    /// The pause this rollout requests must end drained (ours): the update recreates the
    /// InterStepBufferService, deleting its buffers. A pipeline that paused without draining is
    /// then resumed to drain again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause_needs_drain: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::optional_int32")]
    pub name_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub riders: Vec<RiderStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressive_status: Option<ISBServiceProgressiveStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ISBServiceProgressiveStatus {
    #[serde(
        rename = "upgradingISBServiceStatus",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub upgrading_isb_service_status: Option<UpgradingChildStatus>,
    #[serde(
        rename = "promotedISBServiceStatus",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub promoted_isb_service_status: Option<PromotedChildStatus>,
}
