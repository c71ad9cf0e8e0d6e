//! The label, annotation, finalizer, condition and reason vocabulary shared with the reference
//! implementation. These strings are the compatibility contract: never change one.

/// Finalizer put on all five kinds.
pub const FINALIZER: &str = "numaplane.numaproj.io/numaplane-controller";

/// Labels Numaplane writes or reads.
pub mod labels {
    /// Which state a child is in; values in [`super::upgrade_state`].
    pub const UPGRADE_STATE: &str = "numaplane.numaproj.io/upgrade-state";
    /// Why a child got its upgrade state; values in [`super::upgrade_state_reason`].
    pub const UPGRADE_STATE_REASON: &str = "numaplane.numaproj.io/upgrade-state-reason";
    /// Outcome of a trial child; values in [`super::progressive_result_state`].
    pub const PROGRESSIVE_RESULT_STATE: &str = "numaplane.numaproj.io/progressive-result-state";
    /// Presence on a trial child promotes it now.
    pub const FORCE_PROMOTE: &str = "numaplane.numaproj.io/force-promote";
    /// Presence on a trial child fails it now (`kubectl numaplane abort`; ours, not the
    /// reference's). The force-promote label wins over it.
    pub const ABORT: &str = "numaplane.numaproj.io/abort";
    /// Presence on a failed trial child replaces it by a new trial of the same spec
    /// (`kubectl numaplane retry`; ours).
    pub const RETRY: &str = "numaplane.numaproj.io/retry";
    /// Name of the owning rollout; every child lookup selects on it.
    pub const PARENT_ROLLOUT_NAME: &str = "numaplane.numaproj.io/parent-rollout-name";
    /// ISBServiceRollout a Pipeline uses.
    pub const ISBSVC_NAME: &str = "numaplane.numaproj.io/isbsvc-name";
    /// InterStepBufferService child a Pipeline uses.
    pub const ISBSVC_CHILD_NAME: &str = "numaplane.numaproj.io/isbsvc-child-name";
    /// On objects rendered for a NumaflowController: its name.
    pub const TRACKING_ID: &str = "numaplane.numaproj.io/tracking-id";
    /// On ConfigMaps Numaplane reads; values in [`super::config_kind`].
    pub const CONFIG: &str = "numaplane.numaproj.io/config";
    /// On AnalysisRuns Numaplane creates (value [`PART_OF_NUMAPLANE`]).
    pub const PART_OF: &str = "app.kubernetes.io/part-of";
    pub const PART_OF_NUMAPLANE: &str = "numaplane";

    /// Labels Numaflow sets on Vertex objects and pods.
    pub const NUMAFLOW_PIPELINE_NAME: &str = "numaflow.numaproj.io/pipeline-name";
    pub const NUMAFLOW_VERTEX_NAME: &str = "numaflow.numaproj.io/vertex-name";
    pub const NUMAFLOW_MONO_VERTEX_NAME: &str = "numaflow.numaproj.io/mono-vertex-name";
    pub const NUMAFLOW_ISBSVC_NAME: &str = "numaflow.numaproj.io/isbsvc-name";
    pub const APP_NAME: &str = "app.kubernetes.io/name";
    pub const APP_COMPONENT: &str = "app.kubernetes.io/component";
}

/// Annotations Numaplane writes or reads.
pub mod annotations {
    /// On a PipelineRollout: `"true"` lets pause-and-drain proceed without waiting for Paused.
    pub const ALLOW_DATA_LOSS: &str = "numaplane.numaproj.io/allow-data-loss";
    /// On riders: sha256 of the templated definition.
    pub const HASH: &str = "numaplane.numaproj.io/hash";
    /// On Pipelines that could ingest data: they must drain before deletion.
    pub const REQUIRES_DRAIN: &str = "numaplane.numaproj.io/requires-drain";
    /// RFC3339 time a child was first marked recyclable.
    pub const RECYCLABLE_START_TIME: &str = "numaplane.numaproj.io/recyclable-start-time";
    /// Comma-terminated promoted-pipeline names whose spec was force-applied for draining.
    pub const FORCE_DRAIN_SPECS_STARTED: &str = "numaplane.numaproj.io/force-drain-specs-started";
    /// Comma-terminated promoted-pipeline names whose force-drain attempt finished.
    pub const FORCE_DRAIN_SPECS_COMPLETED: &str =
        "numaplane.numaproj.io/force-drain-specs-completed";
    /// RFC3339 time the promoted spec was last force-applied to a recyclable Pipeline (ours:
    /// bounds the wait for it to run healthy before the pause).
    pub const FORCE_DRAIN_SPEC_TIME: &str = "numaplane.numaproj.io/force-drain-spec-time";
    /// RFC3339 time a draining pipeline was first seen Failed.
    pub const DRAIN_FAILURE_START_TIME: &str = "numaplane.numaproj.io/drain-failure-start-time";
    /// On a Pipeline paused for an ISB service recreate (ours): how many times it was resumed
    /// to drain again after pausing without draining (crates/core/src/ppnd/drain_retry.rs).
    pub const DRAIN_ATTEMPTS: &str = "numaplane.numaproj.io/drain-attempts";
    /// `"true"` on a recyclable Pipeline: delete without draining.
    pub const MARKED_FOR_DELETION: &str = "numaplane.numaproj.io/marked-for-deletion";
    /// On a Pipeline Numaplane deletes without a complete drain (ours): the outcome and what
    /// allowed it (`DrainIncomplete: ...`), written in a write conditional on the version read,
    /// right before the delete conditional on the version it wrote.
    pub const DELETION_REASON: &str = "numaplane.numaproj.io/deletion-reason";
    /// Numaflow controller instance selector; a change is data-loss-risky.
    pub const NUMAFLOW_INSTANCE: &str = "numaflow.numaproj.io/instance";
    /// Written by Numaflow when a pause starts.
    pub const NUMAFLOW_PAUSE_TIMESTAMP: &str = "numaflow.numaproj.io/pause-timestamp";
    /// Read by Numaflow on resume (`slow` | `fast`).
    pub const NUMAFLOW_RESUME_STRATEGY: &str = "numaflow.numaproj.io/resume-strategy";
}

/// Values of [`labels::UPGRADE_STATE`].
pub mod upgrade_state {
    pub const PROMOTED: &str = "promoted";
    pub const TRIAL: &str = "trial";
    pub const RECYCLABLE: &str = "recyclable";
    pub const RECYCLABLE_EXPIRED: &str = "recyclable-expired";
    /// Legacy value, read as [`TRIAL`].
    pub const IN_PROGRESS: &str = "in-progress";
}

/// Values of [`labels::UPGRADE_STATE_REASON`].
pub mod upgrade_state_reason {
    pub const PROGRESSIVE_SUCCESS: &str = "progressive-success";
    pub const PROGRESSIVE_REPLACED: &str = "progressive-replaced";
    pub const PROGRESSIVE_REPLACED_FAILED: &str = "progressive-replaced-failed";
    pub const DELETE_RECREATE: &str = "delete-recreate";
    pub const DISCONTINUE_PROGRESSIVE: &str = "discontinue-progressive";
    pub const PURGE: &str = "purge";
}

/// Values of [`labels::PROGRESSIVE_RESULT_STATE`].
pub mod progressive_result_state {
    pub const SUCCEEDED: &str = "succeeded";
    pub const FAILED: &str = "failed";
    pub const FORCE_PROMOTED: &str = "force-promoted";
}

/// Values of [`labels::CONFIG`].
pub mod config_kind {
    pub const NUMAFLOW_CONTROLLER_DEFINITIONS: &str = "numaflow-controller-definitions";
    pub const USDE_CONFIG: &str = "usde-config";
    pub const NAMESPACE_LEVEL_CONFIG: &str = "namespace-level-config";
}

/// Condition types.
pub mod condition {
    pub const CHILD_RESOURCE_DEPLOYED: &str = "ChildResourceDeployed";
    pub const CHILD_RESOURCES_HEALTHY: &str = "ChildResourcesHealthy";
    pub const PROGRESSIVE_UPGRADE_SUCCEEDED: &str = "ProgressiveUpgradeSucceeded";
    pub const PAUSING_PIPELINES: &str = "PausingPipelines";
    pub const PIPELINE_PAUSING_OR_PAUSED: &str = "PipelinePausingOrPaused";
    pub const MONO_VERTEX_PAUSING_OR_PAUSED: &str = "MonoVertexPausingOrPaused";
    /// Ours: `False` (reason `NoUSDEConfig`) while no upgrade-strategy ConfigMap is loaded and
    /// every change is carried the most careful way; absent once one is.
    pub const UPGRADE_STRATEGY_CONFIGURED: &str = "UpgradeStrategyConfigured";
}

/// Condition reasons (and the fixed messages that go with them).
pub mod reason {
    pub const SUCCESSFUL: &str = "Successful";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
    pub const PROGRESSING: &str = "Progressing";
    pub const UNHEALTHY: &str = "Unhealthy";
    pub const DEGRADED: &str = "Degraded";
    pub const PAUSE: &str = "Pause";
    pub const NO_PAUSE: &str = "NoPause";
    pub const PIPELINE_PAUSING: &str = "PipelinePausing";
    pub const PIPELINE_PAUSED: &str = "PipelinePaused";
    pub const MONO_VERTEX_PAUSED: &str = "MonoVertexPaused";
    pub const UNPAUSED: &str = "Unpaused";
    pub const NO_USDE_CONFIG: &str = "NoUSDEConfig";
    pub const PIPELINE_FAILED: &str = "PipelineFailed";
    pub const PIPELINE_UNKNOWN: &str = "PipelineUnknown";
    pub const PIPELINE_DELETING: &str = "PipelineDeleting";
    pub const MONO_VERTEX_FAILED: &str = "MonoVertexFailed";
    pub const MONO_VERTEX_UNKNOWN: &str = "MonoVertexUnknown";
    /// The reference's misspelling, used when the MonoVertex phase is Unknown.
    pub const MONO_VERTEX_UNKOWN: &str = "MonoVertexUnkown";
    pub const ISBSVC_FAILED: &str = "ISBSvcFailed";
    pub const ISBSVC_PENDING: &str = "ISBSvcPending";
    pub const ISBSVC_UNKNOWN: &str = "ISBSvcUnknown";
    pub const DISCONTINUED: &str = "Discontinued";
}

/// Values of `upgradingChildStatus.forcedSuccessReason` are [`crate::progressive::ForcedSuccessReason`].
/// Names of the rollout phases' messages.
pub mod message {
    pub const PROGRESSING: &str = "Progressing";
    pub const DEPLOYED: &str = "Deployed";
    pub const SUCCESSFUL: &str = "Successful";
    pub const PAUSE_NEEDED: &str = "pause needed for update";
    pub const NO_PAUSE_NEEDED: &str = "no need for pause";
    pub const PIPELINE_PAUSING: &str = "Pipeline pausing";
    pub const PIPELINE_PAUSED: &str = "Pipeline paused";
    pub const PIPELINE_UNPAUSED: &str = "Pipeline unpaused";
    pub const MONO_VERTEX_PAUSED: &str = "MonoVertex paused";
    pub const MONO_VERTEX_UNPAUSED: &str = "MonoVertex unpaused";
}

/// Kubernetes Event reasons (docs/compatibility.md), spelled as the reference spells them.
pub mod event_reason {
    pub const RECONCILE_SUCCESS: &str = "ReconcileSuccess";
    pub const RECONCILIATION_SUCCESSFUL: &str = "ReconciliationSuccessful";
    /// Misspelt in the reference (ISBServiceRollout, NumaflowControllerRollout); kept for dashboards.
    pub const RECONCILATION_SUCCESSFUL: &str = "ReconcilationSuccessful";
    pub const RECONCILE_FAILED: &str = "ReconcileFailed";
    pub const UPDATE_FAILED: &str = "UpdateFailed";
    pub const UPDATE_STATUS_FAILED: &str = "UpdateStatusFailed";
    pub const STATUS_UPDATE_FAILED: &str = "StatusUpdateFailed";
    pub const PROCESS_PIPELINE_STATUS_FAILED: &str = "ProcessPipelineStatusFailed";
    pub const GET_NUMAFLOW_CONTROLLER_ROLLOUT_FAILED: &str = "GetNumaflowControllerRolloutFailed";
    pub const GET_NUMAFLOW_CONTROLLER_FAILED: &str = "GetNumaflowControllerFailed";
    pub const GET_DEPLOYMENT_FAILED: &str = "GetDeploymentFailed";
    pub const PROCESS_STATUS_FAILED: &str = "ProcessStatusFailed";
    pub const DELETING: &str = "Deleting";
    pub const PIPELINES_PAUSED: &str = "PipelinesPaused";
    pub const PIPELINE_UPDATE: &str = "PipelineUpdate";
    pub const PIPELINE_PAUSE: &str = "PipelinePause";
    pub const PIPELINE_RESUME: &str = "PipelineResume";
    /// A pipeline that paused without draining is resumed to drain again (ours).
    pub const PIPELINE_DRAIN_AGAIN: &str = "PipelineDrainAgain";
    pub const STANDARD_DRAIN: &str = "StandardDrain";
    pub const FORCE_DRAIN: &str = "ForceDrain";
    pub const DRAIN_NOT_REQUIRED: &str = "DrainNotRequired";
    pub const DRAIN_INCOMPLETE: &str = "DrainIncomplete";
    /// Ours: a rider's definition named another namespace; riders live in the rollout's.
    pub const RIDER_NAMESPACE_IGNORED: &str = "RiderNamespaceIgnored";
    /// Ours: a deleted rollout waits for a child that its own controller does not finish
    /// deleting (another controller's finalizer stays).
    pub const CHILD_DELETION_BLOCKED: &str = "ChildDeletionBlocked";
    /// Ours: a progressive trial failed its assessment or was aborted (Warning, once per trial).
    pub const PROGRESSIVE_UPGRADE_FAILED: &str = "ProgressiveUpgradeFailed";
}
