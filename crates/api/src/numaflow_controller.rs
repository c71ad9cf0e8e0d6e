//! NumaflowController: renders and applies one version of the Numaflow controller's manifests.

use crate::common::Status;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the CRDs accept as `instanceID`: empty (no instance) or a DNS label (at most 63
/// characters, `maxLength` in the schema). The ID becomes part of object names and labels.
pub const INSTANCE_ID_PATTERN: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$";

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
    /// Empty, or a DNS label (lower-case letters, digits and '-', at most 63 characters).
    #[serde(
        default,
        rename = "instanceID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 63), regex(pattern = INSTANCE_ID_PATTERN))]
    pub instance_id: Option<String>,
}

/// Observed state of a NumaflowController.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NumaflowControllerStatus {
    #[serde(flatten)]
    pub status: Status,
}
