//! NumaflowControllerRollout: installs the Numaflow controller in a namespace through a
//! NumaflowController of the same name.

use crate::common::{PauseStatus, Status};
use crate::progressive::AssessmentResult;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
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
    /// How a version change is carried under the `progressive` strategy (ignored otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ControllerStrategy>,
}

/// A NumaflowControllerRollout's own strategy settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressive: Option<ControllerProgressive>,
}

/// Settings of a progressive Numaflow controller upgrade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerProgressive {
    /// `delay,end,period,interval` in seconds for the controller trial: its Deployment is
    /// judged after `delay`, every workload trial must have succeeded by `end`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessment_schedule: Option<String>,
    /// How many workload rollouts run their trial on the trial controller at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_parallel: Option<i32>,
}

/// Which Numaflow controller to run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerDefinition {
    /// Must match a version in a `numaflow-controller-definitions` ConfigMap exactly, e.g. "1.5.2".
    pub version: String,
    /// Empty, or a DNS label (lower-case letters, digits and '-', at most 63 characters).
    #[serde(
        default,
        rename = "instanceID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 63), regex(pattern = crate::numaflow_controller::INSTANCE_ID_PATTERN))]
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
    /// The controller instances of a progressive upgrade: the promoted one and the trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressive_status: Option<ControllerProgressiveStatus>,
}

/// The controller instances of a progressive Numaflow controller upgrade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerProgressiveStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_controller_status: Option<ControllerInstance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrading_controller_status: Option<UpgradingControllerStatus>,
    /// The index of the next trial controller (`<rollout>-<nameCount>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_count: Option<i32>,
}

/// One NumaflowController child and the Numaflow instance it serves.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerInstance {
    /// The NumaflowController's name.
    pub name: String,
    /// The value of `numaflow.numaproj.io/instance` it reconciles ("" for none).
    #[serde(default, rename = "instanceID")]
    pub instance_id: String,
    pub version: String,
}

/// The trial controller and the workloads it is judged by.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradingControllerStatus {
    #[serde(flatten)]
    pub controller: ControllerInstance,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessment_result: Option<AssessmentResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessment_start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessment_end_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_reasons: Vec<String>,
    /// The rollouts of the namespace carried onto the trial controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadTrial>,
}

/// Where one rollout of the namespace stands in a controller trial.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadTrial {
    /// `PipelineRollout`, `MonoVertexRollout` or `ISBServiceRollout`.
    pub kind: String,
    pub rollout: String,
    pub state: WorkloadTrialState,
    /// Its trial child on the trial controller, once it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<String>,
}

/// The state of one rollout in a controller trial.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum WorkloadTrialState {
    /// Not yet admitted (parallelism bound).
    #[default]
    Waiting,
    /// Renders its child on the trial instance; its trial is being assessed.
    Admitted,
    /// Its trial succeeded and is held until the controller's verdict.
    Succeeded,
    Failed,
}
