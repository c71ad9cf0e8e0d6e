//! NumaflowController: renders and applies one version of the Numaflow controller's manifests.

use crate::common::Status;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The Numaflow controller version to render and apply.
// kube-derive repeats `printcolumn(type_ = ..)` per column, which clippy misreads.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "numaplane.numaproj.io",
    version = "v1alpha1",
    kind = "NumaflowController",
    namespaced,
    status = "NumaflowControllerStatus",
    doc = "NumaflowController runs one version of the Numaflow controller in its namespace.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version")
)]
#[serde(rename_all = "camelCase")]
pub struct NumaflowControllerSpec {
    pub version: String,
    #[serde(
        default,
        rename = "instanceID",
        skip_serializing_if = "Option::is_none"
    )]
    pub instance_id: Option<String>,
}

/// Observed state of a NumaflowController.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NumaflowControllerStatus {
    #[serde(flatten)]
    pub status: Status,
}
