//! What the deletion of a rollout does to the children that may hold data, before its finalizer
//! comes off. Fail closed where the reference deleted everything at once:
//! - a PipelineRollout pauses and drains each of its pipelines that ever could ingest data
//!   before deleting it, for at most a configured time from the rollout's deletion, unless the
//!   rollout allows data loss;
//! - an ISBServiceRollout keeps its InterStepBufferService while any pipeline still uses it
//!   (like PersistentVolumeClaim protection).

use crate::child::ChildView;
use k8s_openapi::jiff::Timestamp;
use numaplane_api::keys::annotations;
use serde_json::Value;

/// What a rollout's deletion must wait for before its children go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// Nothing: the children are deleted at once.
    None,
    /// Each child pipeline is paused and drained first ([`pipeline_step`]).
    DrainPipelines,
    /// The children stay while pipelines use them ([`isbsvc_users`]).
    HoldWhileUsed,
}

/// What to do with one pipeline of a deleted PipelineRollout this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipelineStep {
    /// Nothing held in it (drained, or it never could ingest): delete it.
    Delete(&'static str),
    /// Delete it without a complete drain, for this reason (recorded on it first).
    DeleteUndrained(String),
    /// Ask it to pause (`desiredPhase: Paused`), which drains it.
    Pause,
    /// Wait for the drain, at most until `until`.
    Wait { why: String, until: Timestamp },
}

/// The next step for `pipeline` (whole object) of a PipelineRollout deleted with data loss
/// allowed or not, whose drain may last until `deadline`.
pub fn pipeline_step(
    pipeline: &Value,
    allow_data_loss: bool,
    deadline: Timestamp,
    now: Timestamp,
) -> PipelineStep {
    let p = ChildView(pipeline);
    if p.annotation(annotations::REQUIRES_DRAIN) != Some("true") {
        return PipelineStep::Delete("it never could ingest data");
    }
    let spec = p.spec();
    if spec.wants_paused() && p.phase() == "Paused" && p.drained_on_pause() {
        return PipelineStep::Delete("paused and drained");
    }
    if allow_data_loss {
        return PipelineStep::DeleteUndrained(format!(
            "DrainIncomplete: its PipelineRollout was deleted with {}=\"true\"",
            annotations::ALLOW_DATA_LOSS
        ));
    }
    if now >= deadline {
        return PipelineStep::DeleteUndrained(format!(
            "DrainIncomplete: its PipelineRollout was deleted and it did not drain by {deadline} \
             (phase {:?})",
            p.phase()
        ));
    }
    if !spec.wants_paused() {
        return PipelineStep::Pause;
    }
    let phase = if p.phase().is_empty() {
        "Unknown"
    } else {
        p.phase()
    };
    PipelineStep::Wait {
        why: format!("draining pipeline {} (phase {phase})", p.name()),
        until: deadline,
    }
}

/// The pipelines (whole objects) among `pipelines` that use one of the InterStepBufferServices
/// named `isbsvcs` (`spec.interStepBufferServiceName`, `default` when unset), by name.
pub fn isbsvc_users(pipelines: &[Value], isbsvcs: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = pipelines
        .iter()
        .filter(|p| isbsvcs.contains(&ChildView(p).spec().isbsvc_or_default()))
        .map(|p| ChildView(p).name().to_string())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("time")
    }

    fn pipeline(requires: bool, desired: &str, phase: &str, drained: bool) -> Value {
        let mut ann = json!({});
        if requires {
            ann[annotations::REQUIRES_DRAIN] = "true".into();
        }
        json!({
            "metadata": {"name": "p-0", "annotations": ann},
            "spec": {"lifecycle": {"desiredPhase": desired}, "vertices": []},
            "status": {"phase": phase, "drainedOnPause": drained},
        })
    }

    #[test]
    fn a_pipeline_is_paused_and_drained_before_it_goes() {
        let (deadline, now) = (at(300), at(0));
        let step = |p: &Value, allow| pipeline_step(p, allow, deadline, now);
        assert_eq!(
            step(&pipeline(true, "Running", "Running", false), false),
            PipelineStep::Pause
        );
        assert!(matches!(
            step(&pipeline(true, "Paused", "Pausing", false), false),
            PipelineStep::Wait { until, .. } if until == deadline
        ));
        // Paused without draining (the grace period ran out) still holds data: it waits.
        assert!(matches!(
            step(&pipeline(true, "Paused", "Paused", false), false),
            PipelineStep::Wait { .. }
        ));
        assert!(matches!(
            step(&pipeline(true, "Paused", "Failed", false), false),
            PipelineStep::Wait { .. }
        ));
        assert!(matches!(
            step(&pipeline(true, "Paused", "Paused", true), false),
            PipelineStep::Delete(_)
        ));
        // Drained once, then asked to run again: not drained any more.
        assert_eq!(
            step(&pipeline(true, "Running", "Paused", true), false),
            PipelineStep::Pause
        );
        assert!(matches!(
            step(&pipeline(false, "Running", "Running", false), false),
            PipelineStep::Delete(_)
        ));
    }

    #[test]
    fn undrained_deletion_needs_the_allowance_or_the_deadline_and_says_which() {
        let p = pipeline(true, "Running", "Running", false);
        match pipeline_step(&p, true, at(300), at(0)) {
            PipelineStep::DeleteUndrained(why) => assert!(why.contains("allow-data-loss"), "{why}"),
            other => panic!("{other:?}"),
        }
        match pipeline_step(&p, false, at(300), at(300)) {
            PipelineStep::DeleteUndrained(why) => {
                assert!(why.starts_with("DrainIncomplete") && why.contains("did not drain"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            pipeline_step(&p, false, at(300), at(299)),
            PipelineStep::Pause
        );
    }

    #[test]
    fn users_of_an_isb_service_by_name_with_the_default() {
        let ps = [
            json!({"metadata": {"name": "b"}, "spec": {"interStepBufferServiceName": "isb-1"}}),
            json!({"metadata": {"name": "a"}, "spec": {}}),
            json!({"metadata": {"name": "c"}, "spec": {"interStepBufferServiceName": "other"}}),
        ];
        assert_eq!(isbsvc_users(&ps, &["isb-1", "default"]), vec!["a", "b"]);
        assert_eq!(isbsvc_users(&ps, &["isb-0"]), Vec::<String>::new());
    }
}
