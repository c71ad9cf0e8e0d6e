//! Status and metadata types shared by every kind.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Labels and annotations copied (after templating) onto a child.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ChildMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// `status.phase` of every Numaplane kind.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Not reconciled yet.
    #[default]
    #[serde(rename = "")]
    Unset,
    /// A change is being deployed.
    Pending,
    /// The child matches the desired state.
    Deployed,
    /// The last reconcile failed; `message` says why.
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Unset => "",
            Phase::Pending => "Pending",
            Phase::Deployed => "Deployed",
            Phase::Failed => "Failed",
        }
    }
}

/// The strategy a rollout is carrying out (`status.upgradeInProgress`). Only `""`,
/// `PipelinePauseAndDrain` and `Progressive` are ever persisted; the other values exist in the
/// reference's type and are accepted when read.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpgradeStrategy {
    #[default]
    #[serde(rename = "")]
    NoOp,
    DirectApply,
    PipelinePauseAndDrain,
    Progressive,
    Error,
}

/// Status fields common to every kind (inlined into each kind's status).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Sorted by type. `lastTransitionTime` only moves when status or reason change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default)]
    pub phase: Phase,
    /// Set whenever the phase becomes Failed. Omitted while unset (the reference writes `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_time: Option<Time>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "is_noop")]
    pub upgrade_in_progress: UpgradeStrategy,
    /// The last upgrade attempts, oldest first (Numaplane only; bounded by the controller
    /// config's `upgradeHistoryLimit`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upgrade_history: Vec<UpgradeRecord>,
}

/// How an upgrade attempt ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UpgradeOutcome {
    /// The child was created (first deployment, or a recreate).
    Created,
    /// The change was applied to the child in place.
    AppliedDirectly,
    /// The pipelines were paused and drained, the change applied, and they resumed.
    PausedAndDrained,
    /// The trial passed its assessment and was promoted.
    Promoted,
    /// The trial was promoted without a (full) assessment: force-promote, or nothing to assess.
    ForcePromoted,
    /// The trial failed its assessment, or was aborted; the promoted child kept running.
    Failed,
    /// The rollout went back to the promoted child's spec while the trial ran.
    RolledBack,
    /// The trial was dropped for another reason (its promoted child vanished, the strategy
    /// changed).
    Discontinued,
    /// The rollout changed again while the trial ran: a new trial took its place.
    Replaced,
}

/// One upgrade attempt in `status.upgradeHistory`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeRecord {
    /// The child the attempt created or changed (the trial, under progressive).
    pub child: String,
    /// The promoted child it started from, when it made a new one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub previous_child: String,
    /// `DirectApply`, `PipelinePauseAndDrain` or `Progressive`.
    pub strategy: UpgradeStrategy,
    /// The rollout's `metadata.generation` that started it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: i64,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// Absent while the attempt is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<UpgradeOutcome>,
    /// Why it failed or how it was promoted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// The child spec fields that differed, as paths into the rollout (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_fields: Vec<String>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

fn is_noop(v: &UpgradeStrategy) -> bool {
    *v == UpgradeStrategy::NoOp
}

/// Times of the last pause of a pipeline (`pauseStatus`) or of the last pause request made by an
/// ISBServiceRollout or NumaflowControllerRollout (`pauseRequestStatus`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pause_begin_time: Option<Time>,
    /// Pausing → Paused (the reference's Go name is LastPauseTransitionTime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pause_phase_change_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pause_end_time: Option<Time>,
}

/// Group, version and kind of a rider object.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// A rider object deployed beside a child, in the same namespace.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct RiderStatus {
    pub group_version_kind: GroupVersionKind,
    pub name: String,
}
