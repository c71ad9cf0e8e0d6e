//! NumaflowControllerRollout: installs the Numaflow controller in a namespace through a
//! NumaflowController of the same name.

use crate::common::{PauseStatus, Status};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The Numaflow controller version to run in this namespace.
// kube-derive repeats `printcolumn(type_ = ..)` per column, which clippy misreads.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "numaplane.numaproj.io",
    version = "v1alpha1",
    kind = "NumaflowControllerRollout",
    namespaced,
    status = "NumaflowControllerRolloutStatus",
    doc = "NumaflowControllerRollout installs and upgrades the Numaflow controller in its namespace.",
    validation = kube::core::Rule::new("self.metadata.name.matches('^numaflow-controller.*')")
        .message("The metadata name must start with 'numaflow-controller'"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.controller.version")
)]
#[serde(rename_all = "camelCase")]
pub struct NumaflowControllerRolloutSpec {
    pub controller: ControllerDefinition,
}

/// Which Numaflow controller to run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerDefinition {
    /// Must match a version in a `numaflow-controller-definitions` ConfigMap exactly, e.g. "1.5.2".
    pub version: String,
    #[serde(
        default,
        rename = "instanceID",
        skip_serializing_if = "Option::is_none"
    )]
    pub instance_id: Option<String>,
}

/// Observed state of a NumaflowControllerRollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NumaflowControllerRolloutStatus {
    #[serde(flatten)]
    pub status: Status,
    /// When this rollout last asked the namespace's pipelines to pause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_request_status: Option<PauseStatus>,
}
