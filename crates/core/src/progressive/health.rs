//! How healthy the trial child is right now (docs/strategies.md): one sample, which
//! [`super::assessment`] turns into a verdict over time.

use crate::child::ChildView;
use crate::json::i64_at;
use numaplane_api::pipeline_rollout::UpgradingPipelineStatus;
use numaplane_api::progressive::AssessmentResult;
use serde_json::Value;

/// One sample of the trial's health.
#[derive(Debug, Clone, PartialEq)]
pub enum TrialHealth {
    /// Running (or paused as desired), all conditions True, replicas ready.
    Healthy,
    /// A failure signal. During the basic assessment this is transient: it restarts the
    /// continuous-health window and is recorded, but only `end` running out fails the trial.
    Unhealthy {
        reasons: Vec<String>,
        /// The child's whole `.status`, recorded as `childStatus`.
        child_status: Option<Value>,
    },
    /// No failure signal, but not healthy yet (e.g. phase Pending).
    Pending,
}

/// `readyReplicas >= desiredReplicas`, a missing field counting as 0.
fn replicas_ready(status: Option<&Value>) -> Result<(), String> {
    let get = |k: &str| status.and_then(|s| i64_at(s, &[k])).unwrap_or(0);
    let (ready, desired) = (get("readyReplicas"), get("desiredReplicas"));
    if ready >= desired {
        Ok(())
    } else {
        Err(format!(
            "readyReplicas={ready} is less than desiredReplicas={desired}"
        ))
    }
}

/// Health of a trial Pipeline (with its Vertex objects, read live) or MonoVertex (`vertices`
/// empty: the MonoVertex's own replicas are checked).
pub fn pipeline_type_health(child: &Value, is_monovertex: bool, vertices: &[Value]) -> TrialHealth {
    let c = ChildView(child);
    let mut reasons = Vec::new();
    let phase = c.phase();
    if phase == "Failed" {
        reasons.push("child phase is in Failed state".to_string());
    }
    for cond in c.conditions() {
        if cond.status != "True" {
            reasons.push(format!(
                "condition {} is False for Reason \"{}\": {}",
                cond.type_, cond.reason, cond.message
            ));
        }
    }
    if is_monovertex {
        if let Err(e) = replicas_ready(c.status()) {
            reasons.push(e);
        }
    } else {
        for v in vertices {
            if let Err(e) = replicas_ready(v.get("status")) {
                reasons.push(format!("vertex {}: {e}", ChildView(v).name()));
            }
        }
    }
    if !reasons.is_empty() {
        return TrialHealth::Unhealthy {
            reasons,
            child_status: c.status().cloned(),
        };
    }
    let healthy = if c.spec().wants_paused() {
        phase == "Paused" || phase == "Pausing"
    } else {
        phase == "Running"
    };
    if healthy {
        TrialHealth::Healthy
    } else {
        TrialHealth::Pending
    }
}

/// Whether a sample of the trial Pipeline needs every one of its Vertex objects: only when its
/// own status would pass it healthy (a vertex not yet seen must not let it pass). Otherwise
/// the vertices at hand only tell unhealthy from not running yet, and add reasons. A pipeline
/// coming up spends most of its samples there, Numaflow not having made its vertices yet.
pub fn needs_every_vertex(pipeline: &Value) -> bool {
    pipeline_type_health(pipeline, false, &[]) == TrialHealth::Healthy
}

/// Health of a trial InterStepBufferService, judged only from the PipelineRollouts that use its
/// rollout: pending until each has a trial pipeline on `trial_isbsvc`; unhealthy (final)
/// when one failed; healthy when all succeeded or there are none. `held_passes`: the ISB
/// service's own trial is held for a Numaflow controller trial, so a pipeline trial that passed
/// and is held counts as succeeded; once released, the ISB service waits until its pipelines are
/// promoted (promoting it first would retire their promoted pipelines under them).
pub fn isbsvc_health(
    trial_isbsvc: &str,
    pipelines: &[Option<&UpgradingPipelineStatus>],
    isbsvc_status: Option<&Value>,
    held_passes: bool,
) -> TrialHealth {
    let mut failed = Vec::new();
    let mut all_done = true;
    for p in pipelines {
        let Some(p) = p.filter(|p| p.inter_step_buffer_service_name == trial_isbsvc) else {
            return TrialHealth::Pending;
        };
        match p.child.assessment_result {
            Some(AssessmentResult::Failure) => {
                failed.push(format!("Pipeline {} failed", p.child.name));
            }
            Some(AssessmentResult::Success) => {}
            // Held for a Numaflow controller trial: it passed.
            _ if held_passes && p.child.awaiting_controller_trial => {}
            _ => all_done = false,
        }
    }
    if !failed.is_empty() {
        TrialHealth::Unhealthy {
            reasons: failed,
            child_status: isbsvc_status.cloned(),
        }
    } else if all_done {
        TrialHealth::Healthy
    } else {
        TrialHealth::Pending
    }
}
