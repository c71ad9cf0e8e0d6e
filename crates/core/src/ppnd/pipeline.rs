//! What a PipelineRollout pass does with its pipeline's update (docs/compatibility.md): kept paused while
//! another rollout asks for it, applied directly when pause-and-drain has no part in it, else the
//! next [`step`](super::step) of pause-and-drain.

use super::{PpndInput, PpndStep, paused, step};
use crate::config::{UsdeKindConfig, UserStrategy};
use crate::usde;
use numaplane_api::common::UpgradeStrategy;
use serde_json::Value;
use std::collections::BTreeMap;

/// What the pass looks at.
#[derive(Debug, Clone, Copy)]
pub struct PipelineInput<'a> {
    /// The pipeline as the rollout asks for it (paused already when a pause is requested).
    pub desired_spec: &'a Value,
    /// The rollout's own `spec.pipeline.spec`, for the desired phase the user chose.
    pub user_spec: &'a Value,
    pub live_spec: &'a Value,
    pub live_status: Option<&'a Value>,
    pub desired_labels: &'a BTreeMap<String, String>,
    pub live_labels: &'a BTreeMap<String, String>,
    pub desired_annotations: &'a BTreeMap<String, String>,
    pub live_annotations: &'a BTreeMap<String, String>,
    pub allow_data_loss: bool,
    /// Its ISBServiceRollout or the namespace's NumaflowControllerRollout asks for a pause.
    pub pause_requested: bool,
    /// `status.upgradeInProgress` is `PipelinePauseAndDrain`.
    pub in_progress: bool,
    pub user_strategy: UserStrategy,
    /// The USDE field lists for pipelines.
    pub usde: Option<&'a UsdeKindConfig>,
}

/// The pass's action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipelineAction {
    /// Keep the pipeline paused for another rollout's request: apply its live spec paused
    /// (`pause_live`, until it is Paused), else the desired spec (paused by the request). Marked
    /// pause-and-drain in progress, so it is resumed once the request ends.
    KeepPaused { pause_live: bool },
    /// Pause-and-drain has no part in it: applied directly.
    Apply,
    /// A step of pause-and-drain. `starts`: it begins with this pass; `fields`: the changed
    /// paths that call for it.
    Step {
        step: PpndStep,
        starts: bool,
        fields: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelinePlan {
    /// The desired spec to use instead, without the pause a request forced on it: a Failed
    /// pipeline won't pause, so it is not kept paused for the request.
    pub unforced: Option<Value>,
    pub action: PipelineAction,
}

fn phase(status: Option<&Value>) -> &str {
    status
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `desired` with the user's own `lifecycle.desiredPhase` (from `user`) instead of a forced one.
pub fn unforced(desired: &Value, user: &Value) -> Value {
    let mut s = desired.clone();
    match user.pointer("/lifecycle/desiredPhase") {
        Some(p) => {
            if let Some(l) = s.get_mut("lifecycle").and_then(Value::as_object_mut) {
                l.insert("desiredPhase".into(), p.clone());
            }
        }
        None => {
            let emptied = match s.get_mut("lifecycle").and_then(Value::as_object_mut) {
                Some(l) => {
                    l.remove("desiredPhase");
                    l.is_empty()
                }
                None => false,
            };
            if emptied
                && user.get("lifecycle").is_none()
                && let Some(m) = s.as_object_mut()
            {
                m.remove("lifecycle");
            }
        }
    }
    s
}

/// Plans the pass for a pipeline whose rollout changed or whose pause-and-drain is in progress.
pub fn plan(i: &PipelineInput<'_>) -> PipelinePlan {
    let live_phase = phase(i.live_status);
    let mut unforced_spec = None;
    if i.pause_requested && !i.allow_data_loss {
        if live_phase != "Failed" {
            return PipelinePlan {
                unforced: None,
                action: PipelineAction::KeepPaused {
                    pause_live: live_phase != "Paused",
                },
            };
        }
        unforced_spec = Some(unforced(i.desired_spec, i.user_spec));
    }
    let desired_spec = unforced_spec.as_ref().unwrap_or(i.desired_spec);
    let apply = |unforced| PipelinePlan {
        unforced,
        action: PipelineAction::Apply,
    };
    // Without a USDE config nothing says a change is safe: the decision below carries it by
    // pause-and-drain whatever the user strategy (fail closed).
    if !i.in_progress && i.user_strategy != UserStrategy::PauseAndDrain && i.usde.is_some() {
        return apply(unforced_spec);
    }
    let decision = usde::decide(&usde::DecisionInput {
        user_strategy: i.user_strategy,
        config: i.usde,
        desired_spec,
        live_spec: i.live_spec,
        desired_labels: i.desired_labels,
        live_labels: i.live_labels,
        desired_annotations: i.desired_annotations,
        live_annotations: i.live_annotations,
        riders: &[],
    });
    if !i.in_progress && decision.strategy != UpgradeStrategy::PipelinePauseAndDrain {
        return apply(unforced_spec);
    }
    let step = step(&PpndInput {
        desired_spec,
        live_spec: i.live_spec,
        live_status: i.live_status,
        desired_annotations: i.desired_annotations,
        live_annotations: i.live_annotations,
        allow_data_loss: i.allow_data_loss,
    });
    PipelinePlan {
        unforced: unforced_spec,
        action: PipelineAction::Step {
            step,
            starts: !i.in_progress,
            fields: decision.reasons.into_iter().map(|r| r.path).collect(),
        },
    }
}

/// The spec a [`PipelineAction::KeepPaused`] applies.
pub fn kept_paused(pause_live: bool, live_spec: &Value, desired_spec: &Value) -> Value {
    if pause_live {
        paused(live_spec)
    } else {
        desired_spec.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SpecField;
    use proptest::prelude::*;
    use serde_json::json;

    fn spec(image: &str) -> Value {
        json!({"vertices": [{"name": "cat", "udf": {"container": {"image": image}}}]})
    }

    fn usde() -> UsdeKindConfig {
        UsdeKindConfig {
            data_loss: vec![SpecField {
                path: "spec.vertices".into(),
                include_subfields: true,
            }],
            ..Default::default()
        }
    }

    struct Case {
        desired: Value,
        user: Value,
        live: Value,
        status: Value,
        allow: bool,
        requested: bool,
        in_progress: bool,
        user_strategy: UserStrategy,
        /// No USDE config loaded.
        unconfigured: bool,
    }

    impl Case {
        fn new(desired: Value, live: Value, phase: &str) -> Case {
            Case {
                user: desired.clone(),
                desired,
                live,
                status: json!({"phase": phase}),
                allow: false,
                requested: false,
                in_progress: false,
                user_strategy: UserStrategy::PauseAndDrain,
                unconfigured: false,
            }
        }

        fn plan(&self) -> PipelinePlan {
            let (none, cfg) = (BTreeMap::new(), usde());
            plan(&PipelineInput {
                desired_spec: &self.desired,
                user_spec: &self.user,
                live_spec: &self.live,
                live_status: Some(&self.status),
                desired_labels: &none,
                live_labels: &none,
                desired_annotations: &none,
                live_annotations: &none,
                allow_data_loss: self.allow,
                pause_requested: self.requested,
                in_progress: self.in_progress,
                user_strategy: self.user_strategy,
                usde: (!self.unconfigured).then_some(&cfg),
            })
        }
    }

    #[test]
    fn a_data_loss_change_under_pause_and_drain_starts_with_a_pause() {
        let p = Case::new(spec("b"), spec("a"), "Running").plan();
        assert_eq!(
            p.action,
            PipelineAction::Step {
                step: PpndStep::Pause,
                starts: true,
                fields: vec!["spec.vertices".into()],
            }
        );
        let mut other = Case::new(spec("b"), spec("a"), "Running");
        other.user_strategy = UserStrategy::NoStrategy;
        assert_eq!(other.plan().action, PipelineAction::Apply);
        // Already under way: the next step even without a strategy chosen any more.
        other.in_progress = true;
        other.live = paused(&spec("a"));
        other.status = json!({"phase": "Paused"});
        assert!(matches!(
            other.plan().action,
            PipelineAction::Step {
                step: PpndStep::ApplyPaused,
                starts: false,
                ..
            }
        ));
    }

    #[test]
    fn without_a_usde_config_any_change_pauses_first_whatever_the_strategy() {
        for user_strategy in [UserStrategy::NoStrategy, UserStrategy::PauseAndDrain] {
            let mut c = Case::new(spec("b"), spec("a"), "Running");
            c.user_strategy = user_strategy;
            c.unconfigured = true;
            match c.plan().action {
                PipelineAction::Step {
                    step: PpndStep::Pause,
                    starts: true,
                    fields,
                } => assert!(
                    fields.iter().all(|f| f.contains(crate::usde::UNCONFIGURED)),
                    "{fields:?}"
                ),
                other => panic!("{user_strategy:?}: {other:?}"),
            }
            // Nothing changed: nothing to do.
            let mut same = Case::new(spec("a"), spec("a"), "Running");
            same.user_strategy = user_strategy;
            same.unconfigured = true;
            assert_eq!(same.plan().action, PipelineAction::Apply);
        }
    }

    #[test]
    fn a_requested_pause_keeps_the_pipeline_paused_unless_it_failed() {
        let mut c = Case::new(paused(&spec("a")), spec("a"), "Running");
        c.user = spec("a");
        c.requested = true;
        assert_eq!(
            c.plan().action,
            PipelineAction::KeepPaused { pause_live: true }
        );
        c.status = json!({"phase": "Paused"});
        assert_eq!(
            c.plan().action,
            PipelineAction::KeepPaused { pause_live: false }
        );
        // Failed: the request's pause is dropped from the desired spec.
        c.status = json!({"phase": "Failed"});
        let p = c.plan();
        assert_eq!(p.unforced, Some(spec("a")));
        // Allowed to lose data: not kept paused either.
        c.status = json!({"phase": "Running"});
        c.allow = true;
        assert!(!matches!(
            c.plan().action,
            PipelineAction::KeepPaused { .. }
        ));
    }

    #[test]
    fn unforcing_keeps_the_users_own_phase_and_lifecycle() {
        let user = json!({"lifecycle": {"desiredPhase": "Paused", "pauseGracePeriodSeconds": 5}});
        let forced = json!({"lifecycle": {"desiredPhase": "Paused", "pauseGracePeriodSeconds": 5}});
        assert_eq!(unforced(&forced, &user), forced);
        let user = json!({"lifecycle": {"pauseGracePeriodSeconds": 5}});
        assert_eq!(
            unforced(&forced, &user),
            json!({"lifecycle": {"pauseGracePeriodSeconds": 5}})
        );
        assert_eq!(
            unforced(&paused(&json!({"x": 1})), &json!({"x": 1})),
            json!({"x": 1})
        );
    }

    fn phase() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just("Running"),
            Just("Pausing"),
            Just("Paused"),
            Just("Failed")
        ]
    }

    proptest! {
        /// While a pause is requested and data loss is not allowed, a pipeline that can pause
        /// never runs a new spec: it is kept paused; and a change that needs a pause never
        /// reaches a running pipeline directly.
        #[test]
        fn a_running_pipeline_never_gets_a_risky_change_unpaused(
            old in "[a-b]", new in "[a-b]", live_phase in phase(), requested: bool,
            allow: bool, in_progress: bool, asked_to_pause: bool,
        ) {
            let live = if asked_to_pause { paused(&spec(&old)) } else { spec(&old) };
            let desired = if requested { paused(&spec(&new)) } else { spec(&new) };
            let mut c = Case::new(desired, live, live_phase);
            c.user = spec(&new);
            c.requested = requested;
            c.allow = allow;
            c.in_progress = in_progress;
            let p = c.plan();
            if requested && !allow && live_phase != "Failed" {
                prop_assert!(matches!(p.action, PipelineAction::KeepPaused { .. }), "{:?}", p);
            }
            let risky = old != new && !allow && live_phase != "Failed";
            if risky && !requested {
                prop_assert!(p.action != PipelineAction::Apply, "{:?}", p);
                if let PipelineAction::Step { step, .. } = &p.action {
                    prop_assert!(
                        !matches!(step, PpndStep::ApplyDirect { .. }),
                        "{:?}", p
                    );
                    if *step == PpndStep::ApplyPaused {
                        prop_assert_eq!(live_phase, "Paused");
                    }
                }
            }
        }
    }
}
