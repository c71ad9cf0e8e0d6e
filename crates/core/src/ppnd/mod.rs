//! Pause-and-drain for one pipeline (docs/strategies.md, docs/compatibility.md): what to do next to
//! carry a risky change to a running pipeline without losing data. Pure: the controller observes
//! the live pipeline, asks [`step`], and acts.
//!
//! The sequence is: ask the pipeline to pause → wait until it is Paused (Numaflow drains it
//! first) → apply the new spec, still paused → resume with the user's desired phase. A pipeline
//! that is Failed, or whose rollout allows data loss, is not waited on.

pub mod drain_retry;
pub mod isbservice;
pub mod pipeline;

use crate::usde::pipeline_needs_update_for_ppnd;
use serde_json::Value;
use std::collections::BTreeMap;

/// The next action of a pause-and-drain update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PpndStep {
    /// The pipeline has the desired spec and phase: nothing left to do.
    Done,
    /// Set `lifecycle.desiredPhase: Paused` on the live pipeline (nothing else changes yet).
    Pause,
    /// The pipeline was asked to pause and is not Paused yet (its phase is given).
    WaitPaused { phase: String },
    /// Apply the desired spec with `lifecycle.desiredPhase: Paused`.
    ApplyPaused,
    /// The pipeline won't pause (Failed, or the rollout allows data loss): apply the desired spec
    /// as it is, without a transient pause; `resuming` when the live pipeline was asked to pause
    /// and the desired one runs (the resume resets vertex replicas unless `ppnd.fastResume`).
    ApplyDirect { resuming: bool },
    /// The new spec is in place while paused: apply the desired phase (resume).
    Resume,
}

/// What [`step`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct PpndInput<'a> {
    pub desired_spec: &'a Value,
    pub live_spec: &'a Value,
    pub live_status: Option<&'a Value>,
    pub desired_annotations: &'a BTreeMap<String, String>,
    pub live_annotations: &'a BTreeMap<String, String>,
    /// The rollout is annotated `numaplane.numaproj.io/allow-data-loss: "true"`.
    pub allow_data_loss: bool,
}

fn desired_phase(spec: &Value) -> &str {
    spec.pointer("/lifecycle/desiredPhase")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .unwrap_or("Running")
}

/// Whether a rollout with this status asks the pipelines it concerns to pause (an
/// ISBServiceRollout for its pipelines, a NumaflowControllerRollout for its namespace's): its
/// request is durable in `status.upgradeInProgress`.
pub fn requests_pause(status: &numaplane_api::common::Status) -> bool {
    status.upgrade_in_progress == numaplane_api::common::UpgradeStrategy::PipelinePauseAndDrain
}

/// The desired pipeline while rollouts ask it to pause (`requests`, described for messages):
/// a new pipeline starts paused and a running one is paused, unless its rollout allows data
/// loss. `None` when nothing changes.
pub fn paused_on_request(
    spec: &Value,
    requests: &[String],
    allow_data_loss: bool,
) -> Option<Value> {
    (!requests.is_empty() && !allow_data_loss).then(|| paused(spec))
}

/// `spec` with `lifecycle.desiredPhase: Paused`.
pub fn paused(spec: &Value) -> Value {
    let mut spec = spec.clone();
    if let Some(map) = spec.as_object_mut() {
        let lifecycle = map
            .entry("lifecycle")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(l) = lifecycle.as_object_mut() {
            l.insert("desiredPhase".into(), Value::String("Paused".into()));
        }
    }
    spec
}

pub fn step(input: &PpndInput<'_>) -> PpndStep {
    let needs_update = pipeline_needs_update_for_ppnd(
        input.desired_spec,
        input.live_spec,
        input.desired_annotations,
        input.live_annotations,
    );
    if !needs_update {
        return if desired_phase(input.desired_spec) == desired_phase(input.live_spec) {
            PpndStep::Done
        } else {
            PpndStep::Resume
        };
    }
    let phase = input
        .live_status
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    // A Failed pipeline never pauses (Numaflow skips the pause path) and data loss may be
    // allowed: neither is waited on, nor paused on the way (docs/strategies.md, `wontPause`).
    if phase == "Failed" || input.allow_data_loss {
        PpndStep::ApplyDirect {
            resuming: desired_phase(input.live_spec) == "Paused"
                && desired_phase(input.desired_spec) == "Running",
        }
    } else if phase == "Paused" {
        PpndStep::ApplyPaused
    } else if desired_phase(input.live_spec) == "Paused" {
        PpndStep::WaitPaused {
            phase: phase.to_string(),
        }
    } else {
        PpndStep::Pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(desired: Value, live: Value, status: Value, allow: bool) -> PpndStep {
        let none = BTreeMap::new();
        step(&PpndInput {
            desired_spec: &desired,
            live_spec: &live,
            live_status: Some(&status),
            desired_annotations: &none,
            live_annotations: &none,
            allow_data_loss: allow,
        })
    }

    fn spec(image: &str) -> Value {
        json!({"vertices": [{"name": "cat", "udf": {"container": {"image": image}}}]})
    }

    #[test]
    fn a_running_pipeline_is_paused_first() {
        assert_eq!(
            run(spec("b"), spec("a"), json!({"phase": "Running"}), false),
            PpndStep::Pause
        );
    }

    #[test]
    fn it_waits_while_pausing() {
        assert_eq!(
            run(
                spec("b"),
                paused(&spec("a")),
                json!({"phase": "Pausing"}),
                false
            ),
            PpndStep::WaitPaused {
                phase: "Pausing".into()
            }
        );
    }

    #[test]
    fn a_paused_pipeline_gets_the_update_while_paused() {
        assert_eq!(
            run(
                spec("b"),
                paused(&spec("a")),
                json!({"phase": "Paused"}),
                false
            ),
            PpndStep::ApplyPaused
        );
    }

    #[test]
    fn failed_or_allowed_pipelines_get_the_update_directly() {
        for (status, allow) in [
            (json!({"phase": "Failed"}), false),
            (json!({"phase": "Pausing"}), true),
            (json!({"phase": "Paused"}), true),
        ] {
            assert_eq!(
                run(spec("b"), paused(&spec("a")), status.clone(), allow),
                PpndStep::ApplyDirect { resuming: true },
                "{status} allow={allow}"
            );
        }
        // Never asked to pause: applied as it is, nothing to resume.
        assert_eq!(
            run(spec("b"), spec("a"), json!({"phase": "Running"}), true),
            PpndStep::ApplyDirect { resuming: false }
        );
        // The user wants it paused: no resume either.
        assert_eq!(
            run(
                paused(&spec("b")),
                paused(&spec("a")),
                json!({"phase": "Failed"}),
                false
            ),
            PpndStep::ApplyDirect { resuming: false }
        );
    }

    #[test]
    fn after_the_update_it_resumes_then_is_done() {
        assert_eq!(
            run(
                spec("b"),
                paused(&spec("b")),
                json!({"phase": "Paused"}),
                false
            ),
            PpndStep::Resume
        );
        assert_eq!(
            run(spec("b"), spec("b"), json!({"phase": "Running"}), false),
            PpndStep::Done
        );
        // A user who wants it paused keeps it paused: done once the spec is in place.
        assert_eq!(
            run(
                paused(&spec("b")),
                paused(&spec("b")),
                json!({"phase": "Paused"}),
                false
            ),
            PpndStep::Done
        );
    }

    #[test]
    fn paused_sets_only_the_desired_phase() {
        let s = json!({"lifecycle": {"pauseGracePeriodSeconds": 60}, "x": 1});
        assert_eq!(
            paused(&s),
            json!({"lifecycle": {"pauseGracePeriodSeconds": 60, "desiredPhase": "Paused"}, "x": 1})
        );
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn phase() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just(""),
            Just("Running"),
            Just("Pausing"),
            Just("Paused"),
            Just("Failed"),
            Just("Deleting")
        ]
    }

    proptest! {
        /// A risky update never reaches a running pipeline: the new spec is only applied to a
        /// pipeline that is Paused or Failed, unless the rollout allows data loss.
        #[test]
        fn updates_only_reach_paused_pipelines(
            old in "[a-c]", new in "[a-c]", live_phase in phase(), asked_to_pause: bool,
            allow: bool,
        ) {
            let desired = json!({"vertices": [{"name": "v", "udf": {"container": {"image": new}}}]});
            let mut live = json!({"vertices": [{"name": "v", "udf": {"container": {"image": old}}}]});
            if asked_to_pause {
                live = paused(&live);
            }
            let none = BTreeMap::new();
            let s = step(&PpndInput {
                desired_spec: &desired,
                live_spec: &live,
                live_status: Some(&json!({"phase": live_phase})),
                desired_annotations: &none,
                live_annotations: &none,
                allow_data_loss: allow,
            });
            if s == PpndStep::ApplyPaused {
                prop_assert!(live_phase == "Paused" && !allow);
            }
            if matches!(s, PpndStep::ApplyDirect { .. }) {
                prop_assert!(old != new && (allow || live_phase == "Failed"));
            }
            if old == new {
                // Nothing to update: never a pause.
                prop_assert!(s == PpndStep::Done || s == PpndStep::Resume, "{s:?}");
            } else {
                prop_assert!(s != PpndStep::Done && s != PpndStep::Resume, "{s:?}");
            }
        }
    }
}
