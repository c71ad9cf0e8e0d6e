//! A progressive upgrade of the Numaflow controller (docs/progressive-numaflow-controller.md).
//!
//! [`plan`]: from a NumaflowControllerRollout's recorded `status.progressiveStatus` and what is
//! observed now (its NumaflowController children, the namespace's workload rollouts, the
//! instances Numaflow objects carry), the status to record and the children to create or delete.
//! [`target`]: the workloads' side, which instance a rollout renders its child on and whether
//! its successful trial waits for the controller's verdict.
//!
//! Durability contract, as for the workload engine: [`Plan::status`] is recorded **before**
//! [`Plan::actions`] are taken. A trial's name and instance are recorded before it is created
//! (a lost create is redone under the same name); a verdict is recorded before any workload acts
//! on it (they read it from the recorded status).

use crate::config::AssessmentSchedule;
use crate::naming::rollout_name_of_child;
use crate::progressive::time::{secs, secs_of, time_at};
use k8s_openapi::jiff::Timestamp;
use numaplane_api::Kind;
use numaplane_api::numaflow_controller_rollout::{
    ControllerInstance, ControllerProgressiveStatus, UpgradingControllerStatus, WorkloadTrial,
    WorkloadTrialState,
};
use numaplane_api::progressive::AssessmentResult;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[cfg(test)]
mod tests;

/// The schedule of a controller trial when the rollout sets none: judged at once, an hour for
/// every workload trial (they run `maxParallel` at a time, each on its own schedule).
pub const DEFAULT_SCHEDULE: AssessmentSchedule = AssessmentSchedule {
    delay: Duration::from_secs(0),
    end: Duration::from_secs(3600),
    period: Duration::from_secs(0),
    interval: Duration::from_secs(10),
};

/// Workload trials at a time when the rollout sets no `maxParallel`.
pub const DEFAULT_MAX_PARALLEL: usize = 5;

/// A workload group's place in admission: an ISB service's group (its pipelines move with it)
/// before lone pipelines, then MonoVertices.
fn admission_rank(kind: Kind) -> u8 {
    match kind {
        Kind::IsbService => 0,
        Kind::Pipeline => 1,
        Kind::MonoVertex => 2,
        Kind::NumaflowController => 3,
    }
}

/// A group of workloads admitted together, in admission order: its rank and its lead rollout.
type Group = (u8, String);

/// One workload rollout of the namespace, as observed.
#[derive(Debug, Clone)]
pub struct Workload<'a> {
    pub kind: Kind,
    pub rollout: &'a str,
    /// A PipelineRollout's ISBServiceRollout (`interStepBufferServiceName`).
    pub isb_rollout: Option<&'a str>,
    /// Its trial child on the trial instance and the result its rollout recorded for it.
    pub trial: Option<(&'a str, AssessmentResult)>,
    /// The instance its promoted child carries (`None`: it has no promoted child).
    pub promoted_instance: Option<&'a str>,
}

/// A NumaflowController child of the rollout, as observed.
#[derive(Debug, Clone)]
pub struct ControllerChild<'a> {
    pub name: &'a str,
    pub instance_id: &'a str,
    pub version: &'a str,
    pub deleting: bool,
    /// Its Deployment is available (`Err`: why not).
    pub available: Result<(), String>,
}

/// Everything one pass looks at.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    pub now: Timestamp,
    /// The rollout's name; the first child is named like it, trials `<rollout>-<n>`.
    pub rollout: &'a str,
    /// `spec.controller.instanceID` ("" when unset).
    pub base_instance: &'a str,
    /// `spec.controller.version`.
    pub desired_version: &'a str,
    pub schedule: AssessmentSchedule,
    pub max_parallel: usize,
    /// A version change starts a trial (the rollout opts in under `progressive`); otherwise it
    /// is applied to the promoted controller in place.
    pub trials: bool,
    pub recorded: Option<&'a ControllerProgressiveStatus>,
    pub children: &'a [ControllerChild<'a>],
    pub workloads: &'a [Workload<'a>],
    /// The instances some ISB service, Pipeline or MonoVertex of the namespace carries ("" for
    /// none).
    pub instances_in_use: &'a BTreeSet<String>,
}

/// A write to the rollout's NumaflowController children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create (or, lost, create again) the trial controller.
    Create(ControllerInstance),
    /// Apply a new version to the promoted controller in place (no trial wanted).
    Update(ControllerInstance),
    /// Delete a controller no Numaflow object uses any more.
    Delete(String),
}

/// What one pass does.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The status to record before acting (equal to the recorded one when nothing changed).
    pub status: ControllerProgressiveStatus,
    pub actions: Vec<Action>,
    /// What the upgrade waits for, for `status.message` (`None`: nothing in progress).
    pub waiting_for: Option<String>,
    /// When to look again without a change (`None`: only on a change).
    pub recheck: Option<Duration>,
    /// A verdict reached in this pass, for its Event.
    pub verdict: Option<AssessmentResult>,
}

/// The trial instance ID for index `n`: `<base>-<n>`, or `<n>` without a base.
pub fn trial_instance_id(base: &str, n: u32) -> String {
    if base.trim().is_empty() {
        n.to_string()
    } else {
        format!("{}-{n}", base.trim())
    }
}

/// The promoted controller: as recorded, else the first child (named like the rollout).
fn promoted(input: &Input<'_>) -> Option<ControllerInstance> {
    if let Some(p) = input
        .recorded
        .and_then(|r| r.promoted_controller_status.clone())
    {
        return Some(p);
    }
    input
        .children
        .iter()
        .find(|c| c.name == input.rollout)
        .map(|c| ControllerInstance {
            name: c.name.to_string(),
            instance_id: c.instance_id.to_string(),
            version: c.version.to_string(),
        })
}

/// The next free trial index: above every child's and every recorded one's.
fn next_index(input: &Input<'_>) -> u32 {
    let recorded = input.recorded.into_iter().flat_map(|r| {
        let p = r.promoted_controller_status.iter().map(|p| p.name.as_str());
        let u = r
            .upgrading_controller_status
            .iter()
            .map(|u| u.controller.name.as_str());
        p.chain(u)
    });
    input
        .children
        .iter()
        .map(|c| c.name)
        .chain(recorded)
        .filter(|n| rollout_name_of_child(n) == Some(input.rollout))
        .filter_map(|n| n.rsplit_once('-')?.1.parse::<u32>().ok())
        .max()
        .map_or(1, |m| m + 1)
        .max(
            input
                .recorded
                .and_then(|r| r.name_count)
                .and_then(|c| u32::try_from(c).ok())
                .unwrap_or(1),
        )
}

/// Returns `None` when the rollout has no controller yet (the plain create path runs).
pub fn plan(input: &Input<'_>) -> Option<Plan> {
    let promoted = promoted(input)?;
    let recorded = input.recorded.cloned().unwrap_or_default();
    let mut status = ControllerProgressiveStatus {
        promoted_controller_status: Some(promoted.clone()),
        upgrading_controller_status: recorded.upgrading_controller_status.clone(),
        name_count: recorded.name_count,
    };
    let mut plan = Plan {
        status: status.clone(),
        actions: Vec::new(),
        waiting_for: None,
        recheck: None,
        verdict: None,
    };
    match status.upgrading_controller_status.take() {
        None if promoted.version == input.desired_version => {}
        None if !input.trials => {
            let updated = ControllerInstance {
                version: input.desired_version.to_string(),
                ..promoted
            };
            plan.status.promoted_controller_status = Some(updated.clone());
            plan.actions.push(Action::Update(updated));
        }
        None => start(input, &promoted, &mut plan),
        Some(mut u) => {
            match u.assessment_result.unwrap_or_default() {
                AssessmentResult::Unknown => assess(input, &mut u, &mut plan),
                AssessmentResult::Success => {
                    if promote(input, &u, &mut plan) {
                        plan.status.promoted_controller_status = Some(u.controller.clone());
                        plan.status.upgrading_controller_status = None;
                        plan.waiting_for = None;
                        retire(input, &mut plan);
                        return Some(plan);
                    }
                }
                AssessmentResult::Failure => {
                    if u.controller.version != input.desired_version {
                        // A new version after a failed trial: the next pass starts its trial;
                        // the failed one is retired below.
                        plan.status.upgrading_controller_status = None;
                        plan.recheck = Some(Duration::from_secs(1));
                        retire(input, &mut plan);
                        return Some(plan);
                    }
                    plan.waiting_for = Some(format!(
                        "the trial of Numaflow controller {} failed ({}); its workloads return to {}; change spec.controller.version to try again",
                        u.controller.version,
                        u.failure_reasons.join("; "),
                        promoted.name
                    ));
                }
            }
            plan.status.upgrading_controller_status = Some(u);
        }
    }
    retire(input, &mut plan);
    Some(plan)
}

/// Records the trial and creates it.
fn start(input: &Input<'_>, promoted: &ControllerInstance, plan: &mut Plan) {
    let n = next_index(input);
    let trial = ControllerInstance {
        name: format!("{}-{n}", input.rollout),
        instance_id: trial_instance_id(input.base_instance, n),
        version: input.desired_version.to_string(),
    };
    let workloads = merge_workloads(&[], input.workloads);
    plan.status.name_count = i32::try_from(n).ok().map(|n| n.saturating_add(1));
    plan.status.upgrading_controller_status = Some(UpgradingControllerStatus {
        controller: trial.clone(),
        assessment_result: Some(AssessmentResult::Unknown),
        assessment_start_time: Some(time_at(input.now.as_second())),
        assessment_end_time: None,
        failure_reasons: Vec::new(),
        workloads,
    });
    plan.waiting_for = Some(format!(
        "starting trial Numaflow controller {} ({} -> {}, instance {:?})",
        trial.name, promoted.version, trial.version, trial.instance_id
    ));
    plan.recheck = Some(Duration::from_secs(1));
    plan.actions.push(Action::Create(trial));
}

/// The recorded workload list brought up to date with the rollouts that exist now: new ones
/// wait, vanished ones are dropped, known ones keep their state.
fn merge_workloads(recorded: &[WorkloadTrial], now: &[Workload<'_>]) -> Vec<WorkloadTrial> {
    let known: BTreeMap<(&str, &str), &WorkloadTrial> = recorded
        .iter()
        .map(|w| ((w.kind.as_str(), w.rollout.as_str()), w))
        .collect();
    let mut out: Vec<WorkloadTrial> = now
        .iter()
        .map(|w| {
            known
                .get(&(w.kind.rollout_kind(), w.rollout))
                .map(|k| (*k).clone())
                .unwrap_or_else(|| WorkloadTrial {
                    kind: w.kind.rollout_kind().to_string(),
                    rollout: w.rollout.to_string(),
                    state: WorkloadTrialState::Waiting,
                    child: None,
                })
        })
        .collect();
    out.sort_by(|a, b| {
        let key = |w: &WorkloadTrial| {
            (
                Kind::from_rollout_kind(&w.kind).map(admission_rank),
                w.rollout.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    out
}

/// The group a workload moves with: a pipeline moves with its ISB service (they must share an
/// instance), everything else alone.
fn group_of(w: &Workload<'_>, isb_rollouts: &BTreeSet<&str>) -> Group {
    match (w.kind, w.isb_rollout) {
        (Kind::Pipeline, Some(isb)) if isb_rollouts.contains(isb) => {
            (admission_rank(Kind::IsbService), isb.to_string())
        }
        (kind, _) => (admission_rank(kind), w.rollout.to_string()),
    }
}

/// One pass of a trial still undecided: refresh the workloads, admit the next groups, judge.
fn assess(input: &Input<'_>, u: &mut UpgradingControllerStatus, plan: &mut Plan) {
    let interval = input.schedule.requeue_interval();
    plan.recheck = Some(interval);
    if u.controller.version != input.desired_version {
        fail(
            u,
            plan,
            input,
            vec![format!(
                "discontinued: spec.controller.version changed to {}",
                input.desired_version
            )],
        );
        return;
    }
    let trial = input
        .children
        .iter()
        .find(|c| c.name == u.controller.name && !c.deleting);
    if trial.is_none() {
        plan.actions.push(Action::Create(u.controller.clone()));
    }
    u.workloads = merge_workloads(&u.workloads, input.workloads);
    let observed: BTreeMap<(&str, &str), &Workload<'_>> = input
        .workloads
        .iter()
        .map(|w| ((w.kind.rollout_kind(), w.rollout), w))
        .collect();
    for entry in &mut u.workloads {
        let Some(w) = observed.get(&(entry.kind.as_str(), entry.rollout.as_str())) else {
            continue;
        };
        if entry.state != WorkloadTrialState::Admitted {
            continue;
        }
        if let Some((child, result)) = w.trial {
            entry.child = Some(child.to_string());
            entry.state = match result {
                AssessmentResult::Success => WorkloadTrialState::Succeeded,
                AssessmentResult::Failure => WorkloadTrialState::Failed,
                AssessmentResult::Unknown => WorkloadTrialState::Admitted,
            };
        }
    }
    admit(input, u);

    let failed: Vec<String> = u
        .workloads
        .iter()
        .filter(|w| w.state == WorkloadTrialState::Failed)
        .map(|w| {
            format!(
                "{} {}: trial {} failed",
                w.kind,
                w.rollout,
                w.child.as_deref().unwrap_or("?")
            )
        })
        .collect();
    if !failed.is_empty() {
        fail(u, plan, input, failed);
        return;
    }
    let start = u
        .assessment_start_time
        .as_ref()
        .map_or(input.now.as_second(), secs_of);
    let now = input.now.as_second();
    let judged_from = start.saturating_add(secs(input.schedule.delay));
    let end = start.saturating_add(secs(input.schedule.end));
    let available = trial.map_or(Err("not created yet".to_string()), |c| c.available.clone());
    let pending: Vec<String> = u
        .workloads
        .iter()
        .filter(|w| w.state != WorkloadTrialState::Succeeded)
        .map(|w| format!("{} {}", w.kind, w.rollout))
        .collect();
    if now >= judged_from && available.is_ok() && pending.is_empty() {
        u.assessment_result = Some(AssessmentResult::Success);
        u.assessment_end_time = Some(time_at(now));
        plan.verdict = Some(AssessmentResult::Success);
        plan.waiting_for = Some(format!(
            "trial Numaflow controller {} succeeded; promoting its workloads",
            u.controller.name
        ));
        plan.recheck = Some(Duration::from_secs(1));
        return;
    }
    if now >= end {
        let mut reasons = Vec::new();
        if let Err(why) = &available {
            reasons.push(format!("controller {}: {why}", u.controller.name));
        }
        if !pending.is_empty() {
            reasons.push(format!(
                "not succeeded within {}s: {}",
                input.schedule.end.as_secs(),
                pending.join(", ")
            ));
        }
        fail(u, plan, input, reasons);
        return;
    }
    let mut waits = Vec::new();
    if let Err(why) = &available {
        waits.push(format!("controller {}: {why}", u.controller.name));
    }
    if !pending.is_empty() {
        waits.push(format!("trials of {}", pending.join(", ")));
    }
    plan.waiting_for = Some(format!(
        "trial Numaflow controller {} ({}): waiting for {} until {}",
        u.controller.name,
        u.controller.version,
        waits.join("; "),
        time_at(end).0
    ));
    let to_end = Duration::from_secs(u64::try_from(end.saturating_sub(now)).unwrap_or(0));
    plan.recheck = Some(interval.min(to_end.max(Duration::from_secs(1))));
}

/// Admits waiting groups while fewer than `max_parallel` groups are being assessed.
fn admit(input: &Input<'_>, u: &mut UpgradingControllerStatus) {
    let isb_rollouts: BTreeSet<&str> = input
        .workloads
        .iter()
        .filter(|w| w.kind == Kind::IsbService)
        .map(|w| w.rollout)
        .collect();
    let groups: BTreeMap<(&str, &str), Group> = input
        .workloads
        .iter()
        .map(|w| {
            (
                (w.kind.rollout_kind(), w.rollout),
                group_of(w, &isb_rollouts),
            )
        })
        .collect();
    let group = |e: &WorkloadTrial| groups.get(&(e.kind.as_str(), e.rollout.as_str())).cloned();
    let active: BTreeSet<Group> = u
        .workloads
        .iter()
        .filter(|e| e.state == WorkloadTrialState::Admitted)
        .filter_map(group)
        .collect();
    let waiting: BTreeSet<Group> = u
        .workloads
        .iter()
        .filter(|e| e.state == WorkloadTrialState::Waiting)
        .filter_map(group)
        .collect();
    let free = input.max_parallel.max(1).saturating_sub(active.len());
    let admitted: BTreeSet<Group> = waiting.into_iter().take(free).collect();
    for e in &mut u.workloads {
        if e.state == WorkloadTrialState::Waiting && group(e).is_some_and(|g| admitted.contains(&g))
        {
            e.state = WorkloadTrialState::Admitted;
        }
    }
}

fn fail(
    u: &mut UpgradingControllerStatus,
    plan: &mut Plan,
    input: &Input<'_>,
    reasons: Vec<String>,
) {
    u.assessment_result = Some(AssessmentResult::Failure);
    u.assessment_end_time = Some(time_at(input.now.as_second()));
    plan.waiting_for = Some(format!(
        "the trial of Numaflow controller {} failed ({}); its workloads return to the promoted controller",
        u.controller.version,
        reasons.join("; ")
    ));
    u.failure_reasons = reasons;
    plan.verdict = Some(AssessmentResult::Failure);
    plan.recheck = Some(Duration::from_secs(1));
}

/// After a successful verdict: whether every carried workload's promoted child is on the trial
/// instance (their rollouts promoted their held trials).
fn promote(input: &Input<'_>, u: &UpgradingControllerStatus, plan: &mut Plan) -> bool {
    let carried: BTreeSet<(&str, &str)> = u
        .workloads
        .iter()
        .map(|w| (w.kind.as_str(), w.rollout.as_str()))
        .collect();
    let behind: Vec<String> = input
        .workloads
        .iter()
        .filter(|w| carried.contains(&(w.kind.rollout_kind(), w.rollout)))
        .filter(|w| w.promoted_instance != Some(u.controller.instance_id.as_str()))
        .map(|w| format!("{} {}", w.kind.rollout_kind(), w.rollout))
        .collect();
    if behind.is_empty() {
        return true;
    }
    plan.waiting_for = Some(format!(
        "trial Numaflow controller {} succeeded; waiting for {} to promote their trials onto it",
        u.controller.name,
        behind.join(", ")
    ));
    plan.recheck = Some(input.schedule.requeue_interval());
    false
}

/// Deletes the rollout's controllers that are neither promoted nor an undecided or successful
/// trial, once no Numaflow object carries their instance (recycled pipelines drain on them).
fn retire(input: &Input<'_>, plan: &mut Plan) {
    let status = &plan.status;
    let keep: BTreeSet<&str> = status
        .promoted_controller_status
        .iter()
        .map(|p| p.name.as_str())
        .chain(
            status
                .upgrading_controller_status
                .iter()
                .filter(|u| u.assessment_result != Some(AssessmentResult::Failure))
                .map(|u| u.controller.name.as_str()),
        )
        .collect();
    let promoted_instance = status
        .promoted_controller_status
        .as_ref()
        .map(|p| p.instance_id.as_str());
    let mut held = Vec::new();
    let mut deletes = Vec::new();
    for c in input.children {
        if keep.contains(c.name) || c.deleting {
            continue;
        }
        // Never delete the controller of the promoted instance, whatever its child is named.
        if Some(c.instance_id) == promoted_instance {
            continue;
        }
        if input.instances_in_use.contains(c.instance_id) {
            held.push(c.name.to_string());
        } else {
            deletes.push(Action::Delete(c.name.to_string()));
        }
    }
    plan.actions.extend(deletes);
    if !held.is_empty() {
        let also = format!(
            "retired Numaflow controllers {} are kept until no pipeline, MonoVertex or ISB service uses their instance",
            held.join(", ")
        );
        plan.waiting_for = Some(match plan.waiting_for.take() {
            Some(w) => format!("{w}; {also}"),
            None => also,
        });
        plan.recheck = Some(
            plan.recheck
                .unwrap_or(Duration::from_secs(30))
                .min(Duration::from_secs(30)),
        );
    }
}

/// Where a workload rollout renders its child while its namespace's controller is upgraded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The `numaflow.numaproj.io/instance` its child must carry (`Some("")`: none); `None` when
    /// the namespace's controller was never upgraded progressively (the user's own annotations
    /// stand).
    pub instance: Option<String>,
    /// Its trial must not be promoted yet: the controller trial is undecided.
    pub hold: bool,
}

/// The workload side of [`plan`], read from the namespace's NumaflowControllerRollout status.
pub fn target(status: Option<&ControllerProgressiveStatus>, kind: Kind, rollout: &str) -> Target {
    let Some(status) = status else {
        return Target {
            instance: None,
            hold: false,
        };
    };
    let promoted = status
        .promoted_controller_status
        .as_ref()
        .map(|p| p.instance_id.clone());
    let carried = status.upgrading_controller_status.as_ref().and_then(|u| {
        let entry = u
            .workloads
            .iter()
            .find(|w| w.kind == kind.rollout_kind() && w.rollout == rollout)?;
        (entry.state != WorkloadTrialState::Waiting).then_some(u)
    });
    match carried.map(|u| (u, u.assessment_result.unwrap_or_default())) {
        Some((u, AssessmentResult::Unknown)) => Target {
            instance: Some(u.controller.instance_id.clone()),
            hold: true,
        },
        Some((u, AssessmentResult::Success)) => Target {
            instance: Some(u.controller.instance_id.clone()),
            hold: false,
        },
        Some((_, AssessmentResult::Failure)) | None => Target {
            instance: promoted,
            hold: false,
        },
    }
}
