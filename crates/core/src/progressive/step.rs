//! One pass of a progressive upgrade (docs/strategies.md): from the
//! recorded state and what is observed now, the single next action.
//!
//! Durability contract: [`Plan::record`] is persisted **before** the action is taken, and
//! [`Plan::after`] (when set) right after it succeeded. Every action is idempotent given the
//! record, so a controller stopped anywhere re-runs `step` and continues the same rollout:
//! a trial's name is recorded before it is created (a lost create is redone under the same
//! name, never a second trial); a failure is recorded before labels flip; the saved scale is
//! dropped only after it was restored.
//!
//! One exception ([`Action::records_itself`]): a promotion's label flip is its own record. The
//! trial labelled `promoted` with a promotion result is read back as the recorded success
//! ([`StepInput::flipped`]), so the flip goes out first and [`Plan::record`] with it right
//! after: one write fewer between a verdict falling due and the promotion.

use super::analysis::{AnalysisVerdict, ObservedRun, analysis_run_name, judge};
use super::assessment::{BasicVerdict, basic};
use super::health::TrialHealth;
use super::record::Record;
use super::scale::{
    PromotedPods, ScaleError, promoted_restore_patch, promoted_scale_down_patch,
    promoted_scale_values, trial_scale_record, trial_zero_patch,
};
use super::skip::{SkipInput, skip_reason};
use super::time::{Secs, timestamp_at};
use crate::child::SpecView;
use crate::config::AssessmentSchedule;
use crate::naming::allocate_free;
use k8s_openapi::jiff::Timestamp;
use numaplane_api::Kind;
use numaplane_api::keys::{
    progressive_result_state as label_value, upgrade_state_reason as upgrade_reason,
};
use numaplane_api::progressive::{
    AssessmentResult, PromotedScalableChildStatus, ScaleValues, UpgradingChildStatus,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// The promoted child as observed.
#[derive(Debug, Clone, Copy)]
pub struct PromotedChild<'a> {
    pub name: &'a str,
    pub spec: &'a Value,
    /// Its pods and HPA; only needed when the step asks with [`Action::ObservePromotedPods`].
    pub pods: Option<&'a PromotedPods>,
}

/// The trial child (newest live child labelled `trial`, or legacy `in-progress`) as observed.
#[derive(Debug, Clone)]
pub struct TrialChild<'a> {
    pub name: &'a str,
    pub spec: &'a Value,
    /// Label `numaplane.numaproj.io/force-promote` is present (any value).
    pub force_promote_label: bool,
    /// Label `numaplane.numaproj.io/abort` is present (any value): the user ended the upgrade.
    pub abort_label: bool,
    /// Label `numaplane.numaproj.io/retry` is present (any value): a failed trial is replaced
    /// by a new trial of the same spec (`kubectl numaplane retry`).
    pub retry_label: bool,
    /// Label `numaplane.numaproj.io/progressive-result-state`.
    pub result_label: Option<&'a str>,
    /// The rollout's definition, templated with the trial's name, differs from the trial
    /// (compare [`super::scale::comparable_trial_spec`], required metadata, riders without HPA).
    pub differs_from_rollout: bool,
    /// One health sample ([`super::health`]).
    pub health: TrialHealth,
    /// Everything `health` was judged from is watched (the child's own status): a change
    /// wakes the rollout, so the assessment waits for its deadlines, not for timed samples.
    pub health_watched: bool,
    /// The AnalysisRun `<kind>-<trial>`, if it exists.
    pub analysis_run: Option<ObservedRun>,
}

/// Everything one pass looks at.
#[derive(Debug, Clone)]
pub struct StepInput<'a> {
    pub kind: Kind,
    pub now: Timestamp,
    /// The rollout's name (children are `<rollout>-<index>`).
    pub rollout_name: &'a str,
    pub schedule: AssessmentSchedule,
    pub analysis_run_timeout: Duration,
    /// `strategy.analysis.templates` is non-empty (and, for Pipeline, analysis runs are not
    /// disabled by `featureFlagDisableAnalysisRunsForPipeline`).
    pub analysis_enabled: bool,
    /// `strategy.progressive.forcePromote`.
    pub force_promote: bool,
    /// The rollout has an HPA rider (Pipeline: assessment unsupported).
    pub has_hpa_rider: bool,
    /// The rollout's child spec (untemplated is fine: only scale, lifecycle and the ISB service
    /// name are read).
    pub desired_spec: &'a Value,
    /// The rollout's definition, templated with the promoted child's name, differs from the
    /// promoted child (compare [`super::scale::comparable_promoted_spec`], required metadata and
    /// riders). The scale fields the engine changes are ignored, so a just-promoted child that
    /// still has its trial scale is not "different" (docs/compatibility.md: no redundant trial).
    pub differs_from_promoted: bool,
    /// The newest live child labelled `promoted`.
    pub promoted: Option<PromotedChild<'a>>,
    /// Names of any other live children labelled `promoted` (a promotion cut short).
    pub older_promoted: &'a [String],
    /// Names of every live child of the rollout, in any state: a trial's name is never one.
    pub taken: &'a [String],
    /// The recorded trial (`record.upgrading`) is live, labelled `promoted`, with
    /// `progressive-result-state` `succeeded` or `force-promoted`: a [`Action::Promote`] flipped
    /// it, whatever the record says (its record is written after the flip).
    pub flipped: bool,
    pub trial: Option<TrialChild<'a>>,
    /// The recorded state, read from the rollout's status.
    pub record: &'a Record,
    /// The trial runs on a trial Numaflow controller whose own trial is undecided: a trial that
    /// passes is held (`awaitingControllerTrial`), not promoted.
    pub hold: bool,
}

/// The one next thing to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Count the promoted child's pods (per vertex, or of the MonoVertex) and read its HPA,
    /// then run `step` again with [`PromotedChild::pods`].
    ObservePromotedPods,
    /// Only persist the record (the saved original scale), then run `step` again.
    Persist,
    /// Create the trial `name`: the rollout's definition templated with `name`, labelled
    /// `upgrade-state=trial`, its spec passed through [`super::scale::trial_spec`] with
    /// `promoted_scale_values`. AlreadyExists means done.
    CreateTrial {
        name: String,
        promoted_scale_values: BTreeMap<String, ScaleValues>,
    },
    /// After the trial was created: create its riders (never HPAs); MonoVertex: delete the HPAs
    /// owned by the promoted child; apply `promoted_patch` (merge patch) to the promoted child;
    /// InterStepBufferService: create the trial's PDB. Then persist [`Plan::after`].
    InitializeTrial {
        trial: String,
        promoted: String,
        promoted_patch: Option<Value>,
        delete_promoted_hpa: bool,
    },
    /// Create AnalysisRun `name` for the trial (owned by it); AlreadyExists means done.
    CreateAnalysisRun { name: String, trial: String },
    /// Nothing to do until `until` (or until a watched object changes); `None`: only a user
    /// change (spec edit, force-promote label) moves on.
    Wait { until: Option<Timestamp> },
    /// Label `trial` `progressive-result-state=<result_label>`, `upgrade-state=promoted`,
    /// `upgrade-state-reason=progressive-success`; **then** mark each of `previous` recyclable
    /// (reason `progressive-success`). Condition ProgressiveUpgradeSucceeded=True (`Succeeded`,
    /// `New Child Object <ns>/<trial> Running`), phase Deployed.
    Promote {
        trial: String,
        previous: Vec<String>,
        result_label: &'static str,
    },
    /// Label the trial `progressive-result-state=failed` if `label_failed`; merge-patch the
    /// promoted child with `promoted_patch` and re-create `recreate_hpa` (AlreadyExists is
    /// fine); merge-patch the trial with `trial_patch`; then persist [`Plan::after`]. Condition
    /// ProgressiveUpgradeSucceeded=False (`Failed`, `New Child Object <ns>/<trial> Failed`).
    Fail {
        trial: String,
        promoted: String,
        label_failed: bool,
        promoted_patch: Option<Value>,
        recreate_hpa: Option<Value>,
        trial_patch: Option<Value>,
    },
    /// The rollout changed while `trial` was judged: mark it recyclable with `reason`
    /// (`progressive-replaced`, or `progressive-replaced-failed`); the next pass starts a new
    /// trial.
    ReplaceTrial { trial: String, reason: &'static str },
    /// The rollout is back to the promoted child: mark `trial` recyclable
    /// (`discontinue-progressive`); merge-patch the promoted child with `promoted_patch` and
    /// re-create `recreate_hpa` (its saved scale, see below); then persist [`Plan::after`].
    /// Condition ProgressiveUpgradeSucceeded=True (`Discontinued`), phase Deployed.
    ///
    /// Unlike the reference (docs/compatibility.md), the promoted child gets its saved scale back here,
    /// not from a later direct apply: otherwise a spec edit arriving first would count the
    /// halved child's pods and save its halved scale as the "original".
    Discontinue {
        trial: String,
        promoted_patch: Option<Value>,
        recreate_hpa: Option<Value>,
    },
    /// Merge-patch the promoted child back to its saved scale and re-create `recreate_hpa`,
    /// then persist [`Plan::after`] (a discontinue cut short by a restart).
    RestorePromoted {
        promoted: String,
        promoted_patch: Option<Value>,
        recreate_hpa: Option<Value>,
    },
    /// There is no promoted child: create one the usual way (new name). Any trial was recorded
    /// as discontinued and is dropped on the next pass.
    RecreatePromoted,
    /// Nothing is in progress: clear `upgradeInProgress`; phase Deployed.
    Done,
}

impl Action {
    /// The action leaves its own durable trace, read back by [`step`] ([`StepInput::flipped`]):
    /// it may be taken before [`Plan::record`] is persisted, which is then persisted after it.
    /// Only [`Action::Promote`]: only a promotion labels a trial `promoted` with a result.
    pub fn records_itself(&self) -> bool {
        matches!(self, Action::Promote { .. })
    }

    /// The action's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Action::ObservePromotedPods => "ObservePromotedPods",
            Action::Persist => "Persist",
            Action::CreateTrial { .. } => "CreateTrial",
            Action::InitializeTrial { .. } => "InitializeTrial",
            Action::CreateAnalysisRun { .. } => "CreateAnalysisRun",
            Action::Wait { .. } => "Wait",
            Action::Promote { .. } => "Promote",
            Action::Fail { .. } => "Fail",
            Action::ReplaceTrial { .. } => "ReplaceTrial",
            Action::Discontinue { .. } => "Discontinue",
            Action::RestorePromoted { .. } => "RestorePromoted",
            Action::RecreatePromoted => "RecreatePromoted",
            Action::Done => "Done",
        }
    }
}

/// Where the upgrade stands after this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    InProgress,
    /// The trial failed; stays in progress until the user changes the spec or force-promotes.
    Failed,
    /// Complete, not failed.
    Complete,
}

/// The outcome of [`step`].
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Persist this before acting (right after, for an action that
    /// [`Action::records_itself`]).
    pub record: Record,
    pub action: Action,
    /// Persist this after the action succeeded.
    pub after: Option<Record>,
    pub progress: Progress,
    /// What the upgrade is doing or waiting for, and until when, for status messages.
    pub message: String,
    /// A `Wait` whose `until` is when a verdict falls due (the end of the healthy period, of
    /// the assessment window, of the AnalysisRun's time), not only the next sample: that pass
    /// should not queue behind routine ones.
    pub deadline: bool,
}

/// Why no plan could be made: the recorded or desired scale can't be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Scale(#[from] ScaleError),
    #[error("no free child name for {0}: every index from 0 to 999 is taken by a live child")]
    NoFreeName(String),
}

impl StepError {
    pub fn reason(&self) -> &'static str {
        match self {
            StepError::Scale(e) => e.reason(),
            StepError::NoFreeName(_) => "NoFreeName",
        }
    }
}

fn plan(record: Record, action: Action, message: String) -> Plan {
    let progress = match action {
        Action::Done => Progress::Complete,
        _ => Progress::InProgress,
    };
    Plan {
        record,
        action,
        after: None,
        progress,
        message,
        deadline: false,
    }
}

fn fresh_upgrading(name: &str) -> UpgradingChildStatus {
    UpgradingChildStatus {
        name: name.to_string(),
        assessment_result: Some(AssessmentResult::Unknown),
        ..Default::default()
    }
}

fn is_unknown(u: &UpgradingChildStatus) -> bool {
    matches!(u.assessment_result, None | Some(AssessmentResult::Unknown))
}

fn promoted_values(rec: &Record) -> BTreeMap<String, ScaleValues> {
    rec.promoted
        .as_ref()
        .and_then(|p| p.scale_values.clone())
        .unwrap_or_default()
}

/// Decides the next action of a progressive upgrade. Pure; see the module docs for the contract.
pub fn step(input: &StepInput<'_>) -> Result<Plan, StepError> {
    let mut rec = input.record.clone();
    let now: Secs = input.now.as_second();

    // A promotion flipped before its record was written (or whose record was lost): the labels
    // are the verdict.
    if input.flipped
        && let Some(u) = rec.upgrading.as_mut()
    {
        u.assessment_result = Some(AssessmentResult::Success);
    }

    // A success recorded for the live trial, or for the new promoted child while an older one is
    // still labelled promoted, is finished before anything else: the decision was made, only
    // the labels are behind (crash or stale cache between the record and the flip).
    let success_for = |name: &str| {
        rec.upgrading_for(name)
            .is_some_and(|u| u.assessment_result == Some(AssessmentResult::Success))
    };
    if let Some(t) = &input.trial
        && success_for(t.name)
    {
        let previous = input
            .promoted
            .iter()
            .map(|p| p.name.to_string())
            .chain(input.older_promoted.iter().cloned())
            .collect();
        return Ok(promote(rec, input, t.name, previous));
    }
    // The promoted trial can be older than the newest promoted child: one recreated while the
    // trial was judged (the old one vanished). A promotion cut short there leaves both labelled
    // promoted; the recorded success says which one stays.
    if let Some(u) = &rec.upgrading
        && u.assessment_result == Some(AssessmentResult::Success)
        && input.older_promoted.contains(&u.name)
    {
        let winner = u.name.clone();
        let previous = input
            .promoted
            .iter()
            .map(|p| p.name.to_string())
            .chain(input.older_promoted.iter().cloned())
            .filter(|n| *n != winner)
            .collect();
        return Ok(promote(rec, input, &winner, previous));
    }

    let Some(promoted) = input.promoted else {
        if let Some(t) = &input.trial {
            let u = rec.upgrading.get_or_insert_with(|| fresh_upgrading(t.name));
            if u.name != t.name {
                *u = fresh_upgrading(t.name);
            }
            u.discontinued = true;
        }
        return Ok(plan(
            rec,
            Action::RecreatePromoted,
            "the promoted child is missing: recreating it; any trial is discontinued".into(),
        ));
    };

    let Some(trial) = &input.trial else {
        return no_trial(rec, input, promoted);
    };

    // Recover from a lost or stale upgrading status.
    if rec.upgrading_for(trial.name).is_none() {
        rec.upgrading = Some(fresh_upgrading(trial.name));
        rec.analysis = None;
        rec.trial_scale = trial_scale_record(input.kind, input.desired_spec)?;
    }
    if rec
        .promoted
        .as_ref()
        .is_none_or(|p| p.name != promoted.name)
    {
        rec.promoted = Some(PromotedScalableChildStatus {
            name: promoted.name.to_string(),
            ..Default::default()
        });
    }
    let u = rec.upgrading_for(trial.name).cloned().unwrap_or_default();

    if u.discontinued {
        return discontinue(rec, input.kind, Some(promoted), trial.name);
    }

    if !u.initialization_complete && is_unknown(&u) {
        let values = promoted_values(&rec);
        let promoted_patch = if values.is_empty() {
            None
        } else {
            promoted_scale_down_patch(input.kind, promoted.spec, &values)
        };
        let mut after = rec.clone();
        if let Some(a) = after.upgrading.as_mut() {
            a.initialization_complete = true;
        }
        let mut p = plan(
            rec,
            Action::InitializeTrial {
                trial: trial.name.to_string(),
                promoted: promoted.name.to_string(),
                promoted_patch,
                delete_promoted_hpa: input.kind == Kind::MonoVertex,
            },
            format!(
                "trial {} created: creating its riders and scaling {} down",
                trial.name, promoted.name
            ),
        );
        p.after = Some(after);
        return Ok(p);
    }

    // The rollout changed while the trial is judged.
    if trial.differs_from_rollout {
        if input.differs_from_promoted {
            let reason = if u.assessment_result == Some(AssessmentResult::Failure) {
                upgrade_reason::PROGRESSIVE_REPLACED_FAILED
            } else {
                upgrade_reason::PROGRESSIVE_REPLACED
            };
            return Ok(plan(
                rec,
                Action::ReplaceTrial {
                    trial: trial.name.to_string(),
                    reason,
                },
                format!(
                    "the rollout changed during the assessment: replacing trial {}",
                    trial.name
                ),
            ));
        }
        if let Some(u) = rec.upgrading.as_mut() {
            u.discontinued = true;
        }
        return discontinue(rec, input.kind, Some(promoted), trial.name);
    }

    assess(rec, input, promoted, trial, now)
}

/// No trial child: finish, resume a recorded creation, or start an upgrade.
fn no_trial(
    mut rec: Record,
    input: &StepInput<'_>,
    promoted: PromotedChild<'_>,
) -> Result<Plan, StepError> {
    let done_here = rec
        .upgrading_for(promoted.name)
        .is_some_and(|u| u.assessment_result == Some(AssessmentResult::Success));
    if done_here && !input.older_promoted.is_empty() {
        // The new child is promoted; older ones still carry the label.
        return Ok(plan(
            rec,
            Action::Promote {
                trial: promoted.name.to_string(),
                previous: input.older_promoted.to_vec(),
                result_label: label_value::SUCCEEDED,
            },
            format!(
                "{} promoted: retiring the previous promoted child",
                promoted.name
            ),
        ));
    }
    if !input.differs_from_promoted {
        // A discontinue cut short left the promoted child halved: restore it first.
        let r = restore(&rec, input.kind, Some(promoted))?;
        if let Some(after) = r.after {
            if has_saved_scale_of(&rec, input.kind, promoted) {
                rec = after;
            } else {
                let mut p = plan(
                    rec,
                    Action::RestorePromoted {
                        promoted: promoted.name.to_string(),
                        promoted_patch: r.patch,
                        recreate_hpa: r.hpa,
                    },
                    format!("restoring the scale of {}", promoted.name),
                );
                p.after = Some(after);
                return Ok(p);
            }
        }
        // Complete: the promoted status is cleared (ISB: kept naming the previous child, as
        // the reference does).
        if input.kind != Kind::IsbService {
            rec.promoted = None;
        }
        return Ok(plan(
            rec,
            Action::Done,
            format!("{} is promoted and matches the rollout", promoted.name),
        ));
    }

    // A trial recorded but not (visibly) created yet: create it under the recorded name.
    if let Some(u) = &rec.upgrading
        && u.name != promoted.name
        && !u.initialization_complete
        && !u.discontinued
        && is_unknown(u)
    {
        let name = u.name.clone();
        let values = promoted_values(&rec);
        return Ok(plan(
            rec,
            Action::CreateTrial {
                name: name.clone(),
                promoted_scale_values: values,
            },
            format!("creating trial {name}"),
        ));
    }

    if rec
        .promoted
        .as_ref()
        .is_none_or(|p| p.name != promoted.name)
    {
        rec.promoted = Some(PromotedScalableChildStatus {
            name: promoted.name.to_string(),
            ..Default::default()
        });
    }
    let needs_scale = input.kind != Kind::IsbService
        && rec
            .promoted
            .as_ref()
            .is_some_and(|p| p.scale_values.is_none());
    if needs_scale {
        let Some(pods) = promoted.pods else {
            return Ok(plan(
                rec,
                Action::ObservePromotedPods,
                format!("counting the pods of {} before the upgrade", promoted.name),
            ));
        };
        let mut values = promoted_scale_values(input.kind, promoted.name, promoted.spec, pods)?;
        if rec
            .upgrading_for(promoted.name)
            .is_some_and(|u| u.assessment_result == Some(AssessmentResult::Success))
        {
            own_scale_as_original(&mut values, &rec.trial_scale, input.kind, promoted.spec)?;
        }
        if input.kind == Kind::Pipeline {
            rec.historical_pod_count =
                Some(values.iter().map(|(k, v)| (k.clone(), v.initial)).collect());
        }
        if let Some(p) = rec.promoted.as_mut() {
            p.scale_values = Some(values);
            p.scale_values_restored_to_original = false;
        }
        return Ok(plan(
            rec,
            Action::Persist,
            format!("saving the scale of {} before the upgrade", promoted.name),
        ));
    }

    // Start: allocate and record the trial's name (and its original scale) before creating it.
    let (name, next) = allocate_free(input.rollout_name, rec.name_count, |n| {
        input.taken.iter().any(|t| t == n)
    })
    .ok_or_else(|| StepError::NoFreeName(input.rollout_name.to_string()))?;
    rec.name_count = Some(next);
    rec.upgrading = Some(fresh_upgrading(&name));
    rec.analysis = None;
    rec.trial_scale = trial_scale_record(input.kind, input.desired_spec)?;
    if input.kind == Kind::Pipeline {
        rec.trial_isbsvc = SpecView(input.desired_spec).isbsvc_or_default().to_string();
    }
    let values = promoted_values(&rec);
    Ok(plan(
        rec,
        Action::CreateTrial {
            name: name.clone(),
            promoted_scale_values: values,
        },
        format!("creating trial {name}"),
    ))
}

fn discontinue(
    rec: Record,
    kind: Kind,
    promoted: Option<PromotedChild<'_>>,
    trial: &str,
) -> Result<Plan, StepError> {
    let r = restore(&rec, kind, promoted)?;
    let mut p = plan(
        rec,
        Action::Discontinue {
            trial: trial.to_string(),
            promoted_patch: r.patch,
            recreate_hpa: r.hpa,
        },
        format!("the rollout matches the promoted child again: discontinuing trial {trial}"),
    );
    p.after = r.after;
    Ok(p)
}

/// Putting the promoted child back to its saved scale, if it has one not yet restored.
struct Restore {
    patch: Option<Value>,
    hpa: Option<Value>,
    /// The record once restored: saved values dropped, `scaleValuesRestoredToOriginal`.
    after: Option<Record>,
}

fn restore(
    rec: &Record,
    kind: Kind,
    promoted: Option<PromotedChild<'_>>,
) -> Result<Restore, StepError> {
    let none = Restore {
        patch: None,
        hpa: None,
        after: None,
    };
    let Some(promoted) = promoted else {
        return Ok(none);
    };
    let values = rec
        .promoted
        .as_ref()
        .filter(|p| p.name == promoted.name && !p.scale_values_restored_to_original)
        .and_then(|p| p.scale_values.clone())
        .unwrap_or_default();
    if values.is_empty() {
        return Ok(none);
    }
    let mut after = rec.clone();
    if let Some(p) = after.promoted.as_mut() {
        p.scale_values = None;
        p.scale_values_restored_to_original = true;
    }
    Ok(Restore {
        patch: promoted_restore_patch(kind, promoted.spec, &values)?,
        hpa: values
            .values()
            .next()
            .and_then(|v| v.original_hpa_definition.clone())
            .filter(|_| kind == Kind::MonoVertex),
        after: Some(after),
    })
}

/// Records the success (and a forced one's reason) and promotes `trial`.
fn promote(mut rec: Record, input: &StepInput<'_>, trial: &str, previous: Vec<String>) -> Plan {
    let forced = rec.upgrading_for(trial).is_some_and(|u| u.forced_success);
    if let Some(u) = rec.upgrading.as_mut() {
        u.assessment_result = Some(AssessmentResult::Success);
    }
    let result_label = if forced {
        label_value::FORCE_PROMOTED
    } else {
        label_value::SUCCEEDED
    };
    // Once the labels flipped, the old promoted child is retired and its saved scale no longer
    // matters. Not before: if the new child vanished before the old one was retired, the old
    // one is promoted again and must still be restorable.
    let mut after = rec.clone();
    if input.kind != Kind::IsbService {
        after.promoted = None;
    }
    let mut p = plan(
        rec,
        Action::Promote {
            trial: trial.to_string(),
            previous,
            result_label,
        },
        format!("promoting trial {trial}"),
    );
    p.after = Some(after);
    p
}

/// A trial that passed: promoted, or held while its Numaflow controller's trial is undecided
/// (the NumaflowControllerRollout reads `awaitingControllerTrial` as its success).
fn promote_or_hold(
    mut rec: Record,
    input: &StepInput<'_>,
    trial: &str,
    previous: Vec<String>,
    now: Secs,
) -> Plan {
    let held = input.hold && rec.upgrading.is_some();
    if let Some(u) = rec.upgrading.as_mut() {
        u.awaiting_controller_trial = held;
    }
    if !held {
        return promote(rec, input, trial, previous);
    }
    let interval = super::time::secs(input.schedule.requeue_interval());
    wait(
        rec,
        now.saturating_add(interval),
        format!("trial {trial} passed; its promotion waits for the Numaflow controller trial"),
    )
}

/// Skip rules, the sticky failure, the basic assessment and the analysis.
fn assess(
    mut rec: Record,
    input: &StepInput<'_>,
    promoted: PromotedChild<'_>,
    trial: &TrialChild<'_>,
    now: Secs,
) -> Result<Plan, StepError> {
    let previous = vec![promoted.name.to_string()];
    // A retry of a failed (or aborted) trial: replaced by a new one of the same spec, as a spec
    // change would replace it. Force-promote wins; a trial not failed ignores the label.
    let failed = rec
        .upgrading
        .as_ref()
        .is_some_and(|u| u.assessment_result == Some(AssessmentResult::Failure));
    if trial.retry_label && failed && !trial.force_promote_label {
        return Ok(plan(
            rec,
            Action::ReplaceTrial {
                trial: trial.name.to_string(),
                reason: upgrade_reason::PROGRESSIVE_REPLACED_FAILED,
            },
            format!("retry asked: replacing failed trial {}", trial.name),
        ));
    }
    // An abort fails the trial as an assessment would (and stays failed, like any failure);
    // only the force-promote label overrides it.
    if trial.abort_label && !trial.force_promote_label {
        if let Some(u) = rec.upgrading.as_mut()
            && u.assessment_result != Some(AssessmentResult::Failure)
        {
            u.assessment_result = Some(AssessmentResult::Failure);
            u.failure_reasons = vec![ABORTED.to_string()];
        }
        return fail(rec, input, promoted, trial);
    }
    let skip = skip_reason(&SkipInput {
        kind: input.kind,
        desired_spec: input.desired_spec,
        force_promote: input.force_promote,
        has_hpa_rider: input.has_hpa_rider,
        force_promote_label: trial.force_promote_label,
    });
    // Forcing also rescues a failed trial, as in the reference.
    if let Some(reason) = skip {
        if let Some(u) = rec.upgrading.as_mut() {
            u.forced_success = true;
            u.forced_success_reason = Some(reason);
        }
        return Ok(promote_or_hold(rec, input, trial.name, previous, now));
    }

    let Some(u) = rec.upgrading.as_mut() else {
        return Ok(plan(rec, Action::Wait { until: None }, String::new()));
    };
    // Failure is sticky: only a spec change or force-promote moves on.
    if u.assessment_result == Some(AssessmentResult::Failure) {
        return fail(rec, input, promoted, trial);
    }

    let verdict = basic(
        u,
        input.kind,
        &input.schedule,
        &trial.health,
        trial.health_watched,
        now,
    );
    let verdict = match verdict {
        BasicVerdict::Failure => {
            u.assessment_result = Some(AssessmentResult::Failure);
            return fail(rec, input, promoted, trial);
        }
        BasicVerdict::Wait {
            wake_at,
            waiting_for,
            deadline,
        } => {
            u.assessment_result = Some(AssessmentResult::Unknown);
            let mut p = wait(rec, wake_at, waiting_for);
            p.deadline = deadline;
            return Ok(p);
        }
        BasicVerdict::Success => {
            if input.analysis_enabled && input.kind != Kind::IsbService {
                judge(
                    &mut rec.analysis,
                    analysis_run_name(input.kind, trial.name),
                    trial.analysis_run.as_ref(),
                    input.analysis_run_timeout,
                    now,
                )
            } else {
                AnalysisVerdict::Success
            }
        }
    };
    let interval = super::time::secs(input.schedule.requeue_interval());
    match verdict {
        AnalysisVerdict::Success => Ok(promote_or_hold(rec, input, trial.name, previous, now)),
        AnalysisVerdict::Failure(reason) => {
            if let Some(u) = rec.upgrading.as_mut() {
                u.assessment_result = Some(AssessmentResult::Failure);
                u.failure_reasons = vec![reason];
            }
            fail(rec, input, promoted, trial)
        }
        AnalysisVerdict::Create(name) => {
            if let Some(u) = rec.upgrading.as_mut() {
                u.assessment_result = Some(AssessmentResult::Unknown);
            }
            Ok(plan(
                rec,
                Action::CreateAnalysisRun {
                    name: name.clone(),
                    trial: trial.name.to_string(),
                },
                format!(
                    "trial {} is healthy: starting AnalysisRun {name}",
                    trial.name
                ),
            ))
        }
        AnalysisVerdict::Running { timeout_at } => {
            let phase = rec
                .analysis
                .as_ref()
                .map(|a| format!("{:?}", a.phase))
                .unwrap_or_default();
            let name = analysis_run_name(input.kind, trial.name);
            if let Some(u) = rec.upgrading.as_mut() {
                u.assessment_result = Some(AssessmentResult::Unknown);
            }
            // A finished run wakes the rollout through the run watch; this is a safety net.
            let next_sample = now.saturating_add(interval.max(ANALYSIS_RECHECK));
            let mut p = wait(
                rec,
                next_sample.min(timeout_at),
                format!(
                    "trial {}: waiting for AnalysisRun {name} ({phase}) until {}",
                    trial.name,
                    timestamp_at(timeout_at)
                ),
            );
            p.deadline = timeout_at <= next_sample;
            Ok(p)
        }
    }
}

/// How often a running AnalysisRun is looked at without an event: its finish wakes the
/// rollout (the controller's run watch), so this only covers a watch that is down. Sampling
/// every `interval` was a pass per second per trial at scale.
const ANALYSIS_RECHECK: Secs = 20;

/// The failure reason of an aborted trial.
pub const ABORTED: &str = "aborted by the user: label numaplane.numaproj.io/abort on the trial";

fn wait(rec: Record, wake_at: Secs, waiting_for: String) -> Plan {
    plan(
        rec,
        Action::Wait {
            until: Some(timestamp_at(wake_at)),
        },
        waiting_for,
    )
}

/// The failure handling, re-run on every pass while the failure stands; each part is skipped
/// once done, so a stable failed state is a plain wait.
fn fail(
    rec: Record,
    input: &StepInput<'_>,
    promoted: PromotedChild<'_>,
    trial: &TrialChild<'_>,
) -> Result<Plan, StepError> {
    let r = restore(&rec, input.kind, Some(promoted))?;
    let (promoted_patch, recreate_hpa) = (r.patch, r.hpa);
    let trial_patch = trial_zero_patch(input.kind, trial.spec);
    let label_failed = trial.result_label != Some(label_value::FAILED);
    let reasons = rec
        .upgrading
        .as_ref()
        .map(|u| u.failure_reasons.join("; "))
        .unwrap_or_default();
    let why = if reasons.is_empty() {
        String::new()
    } else {
        format!(" ({reasons})")
    };
    let message = format!(
        "trial {} failed{why}; waiting for a spec change or the force-promote label",
        trial.name
    );
    let after = r.after;
    let action = if label_failed || promoted_patch.is_some() || trial_patch.is_some() {
        Action::Fail {
            trial: trial.name.to_string(),
            promoted: promoted.name.to_string(),
            label_failed,
            promoted_patch,
            recreate_hpa,
            trial_patch,
        }
    } else {
        Action::Wait { until: None }
    };
    let mut p = plan(rec, action, message);
    p.after = after;
    p.progress = Progress::Failed;
    Ok(p)
}

fn has_saved_scale_of(rec: &Record, kind: Kind, promoted: PromotedChild<'_>) -> bool {
    let values = rec
        .promoted
        .as_ref()
        .and_then(|p| p.scale_values.clone())
        .unwrap_or_default();
    super::scale::has_saved_scale(kind, promoted.spec, &values)
}

/// A child promoted from trial keeps its fixed trial scale until the controller applies the
/// rollout's scale. If the next upgrade starts before that, the scale to save (and restore on
/// failure) is the one it was created with, recorded when it was a trial, not its fixed one.
fn own_scale_as_original(
    values: &mut BTreeMap<String, ScaleValues>,
    saved: &super::scale::TrialScaleRecord,
    kind: Kind,
    promoted_spec: &Value,
) -> Result<(), StepError> {
    use super::scale::{TrialScaleRecord, scale_min_max_json};
    let parse = |def: &str| serde_json::from_str::<Value>(def).ok();
    match (kind, saved) {
        (Kind::MonoVertex, TrialScaleRecord::MonoVertex { definition, .. }) => {
            if let (Some(def), Some(sv)) = (parse(definition), values.values_mut().next()) {
                sv.original_scale_min_max =
                    scale_min_max_json(Some(&def), "originalScaleDefinition")?;
            }
        }
        (Kind::Pipeline, TrialScaleRecord::Pipeline { definitions, .. }) => {
            let names = SpecView(promoted_spec).vertex_names();
            for (name, def) in names.iter().zip(definitions) {
                if let (Some(def), Some(sv)) = (parse(def), values.get_mut(name)) {
                    sv.original_scale_min_max =
                        scale_min_max_json(Some(&def), "originalScaleDefinitions")?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}
