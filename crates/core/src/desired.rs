//! The child a rollout asks for, complete: its template rendered for the child's name, the
//! labels Numaplane writes on every child, and what the child takes from outside the rollout
//! (the ISB service a pipeline runs on, a requested pause, the Numaflow controller instance it is
//! placed on, what it keeps of the live child). The controller applies it and
//! `kubectl numaplane plan` compares it, so a plan is the controller's own view.

use crate::child::{keep_live_replicas, point_pipeline_at_isbsvc, render_child};
use crate::template::{TemplateError, TemplateVars};
use numaplane_api::Kind;
use numaplane_api::common::ChildMetadata;
use numaplane_api::keys::annotations::{NUMAFLOW_INSTANCE, REQUIRES_DRAIN};
use serde_json::Value;
use std::collections::BTreeMap;

pub use crate::child::RenderedChild;

/// What a child of each kind takes from outside its rollout.
#[derive(Debug, Clone, Copy)]
pub enum KindInputs<'a> {
    /// A pipeline runs on the current child of its ISBServiceRollout, and stays paused while its
    /// pipelines are asked to pause (an ISB service or Numaflow controller upgrade under
    /// pause-and-drain), unless its rollout allows data loss.
    Pipeline {
        isb_rollout: &'a str,
        isb_child: &'a str,
        pause_requests: &'a [String],
        allow_data_loss: bool,
    },
    /// A MonoVertex keeps its live autoscaled replicas, except on a slow resume.
    MonoVertex {
        fast_resume: bool,
    },
    IsbService,
}

impl KindInputs<'_> {
    pub fn kind(&self) -> Kind {
        match self {
            KindInputs::Pipeline { .. } => Kind::Pipeline,
            KindInputs::MonoVertex { .. } => Kind::MonoVertex,
            KindInputs::IsbService => Kind::IsbService,
        }
    }
}

/// The live child the desired one is compared with, and what it keeps from it.
#[derive(Debug, Clone, Copy)]
pub struct LiveChild<'a> {
    pub annotations: &'a BTreeMap<String, String>,
    pub spec: &'a Value,
    /// `status.phase` ("" when the child has no status yet).
    pub phase: &'a str,
}

/// Everything a desired child is made of.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The rollout's name (the children's parent label).
    pub rollout: &'a str,
    pub namespace: &'a str,
    /// The child's name (the template's `{{.pipeline-name}}` and alike).
    pub child: &'a str,
    /// `upgrade-state`: promoted, or trial for a progressive upgrade's trial child.
    pub upgrade_state: &'a str,
    /// The rollout's child template: `spec.<field>.metadata` and `spec.<field>.spec`.
    pub metadata: Option<&'a ChildMetadata>,
    pub template: &'a Value,
    pub kind: KindInputs<'a>,
    /// The Numaflow controller instance the namespace's controller upgrade places the child on
    /// (`Some("")`: the promoted controller, which has none); `None` leaves it unset.
    pub instance: Option<&'a str>,
    /// The live child under the same name, when the desired one is compared with it.
    pub live: Option<LiveChild<'a>>,
}

/// The child as the rollout wants it. Errors name the template's field.
pub fn desired(inputs: &Inputs<'_>) -> Result<RenderedChild, TemplateError> {
    let kind = inputs.kind.kind();
    let vars = TemplateVars::for_child(kind, inputs.child, inputs.namespace);
    let mut child = render_child(
        inputs.rollout,
        &format!("spec.{}", kind.template_field()),
        inputs.metadata,
        inputs.template,
        &vars,
    )?;
    child.labels.extend(crate::child::child_labels(
        inputs.rollout,
        inputs.upgrade_state,
    ));
    match inputs.kind {
        KindInputs::Pipeline {
            isb_rollout,
            isb_child,
            pause_requests,
            allow_data_loss,
        } => {
            point_pipeline_at_isbsvc(&mut child.labels, &mut child.spec, isb_rollout, isb_child);
            if let Some(paused) =
                crate::ppnd::paused_on_request(&child.spec, pause_requests, allow_data_loss)
            {
                child.spec = paused;
            }
            // A pipeline that can take in data must drain before it is deleted, and keeps
            // needing it once it could, also while paused (only our own children are marked,
            // unlike the reference's whole namespace).
            let marked = inputs.live.is_some_and(|l| {
                l.annotations.get(REQUIRES_DRAIN).map(String::as_str) == Some("true")
            });
            if marked || crate::recycle::can_ingest(&child.spec) {
                child
                    .annotations
                    .insert(REQUIRES_DRAIN.into(), "true".into());
            }
        }
        KindInputs::MonoVertex { fast_resume } => {
            if let Some(live) = inputs.live {
                keep_live_replicas(&mut child.spec, live.spec, live.phase, fast_resume);
            }
        }
        KindInputs::IsbService => {}
    }
    // An empty instance is written as "" rather than left out: a trial carrying another
    // instance must differ from it.
    if let Some(instance) = inputs.instance {
        child
            .annotations
            .insert(NUMAFLOW_INSTANCE.into(), instance.into());
    }
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaplane_api::keys::{labels, upgrade_state};
    use serde_json::json;

    fn pipeline_inputs<'a>(
        template: &'a Value,
        requests: &'a [String],
        live: Option<LiveChild<'a>>,
    ) -> Inputs<'a> {
        Inputs {
            rollout: "p",
            namespace: "ns",
            child: "p-2",
            upgrade_state: upgrade_state::PROMOTED,
            metadata: None,
            template,
            kind: KindInputs::Pipeline {
                isb_rollout: "default",
                isb_child: "default-1",
                pause_requests: requests,
                allow_data_loss: false,
            },
            instance: None,
            live,
        }
    }

    #[test]
    fn a_pipeline_runs_on_its_isb_service_child_and_is_marked_to_drain() {
        let template = json!({"vertices": [{"name": "in", "source": {"generator": {}}},
                                           {"name": "out", "sink": {"log": {}}}],
                              "edges": [{"from": "in", "to": "out"}]});
        let c = desired(&pipeline_inputs(&template, &[], None)).expect("desired");
        assert_eq!(c.spec["interStepBufferServiceName"], "default-1");
        assert_eq!(c.labels[labels::ISBSVC_CHILD_NAME], "default-1");
        assert_eq!(c.labels[labels::PARENT_ROLLOUT_NAME], "p");
        assert_eq!(c.labels[labels::UPGRADE_STATE], upgrade_state::PROMOTED);
        assert_eq!(c.annotations[REQUIRES_DRAIN], "true");
        assert!(!c.annotations.contains_key(NUMAFLOW_INSTANCE));

        // Paused on request: it cannot take in data, yet keeps the mark the live child has.
        let requests = ["ISBServiceRollout default".to_string()];
        let paused = desired(&pipeline_inputs(&template, &requests, None)).expect("desired");
        assert_eq!(paused.spec["lifecycle"]["desiredPhase"], "Paused");
        assert!(!paused.annotations.contains_key(REQUIRES_DRAIN));
        let marked = [(REQUIRES_DRAIN.to_string(), "true".to_string())].into();
        let live = LiveChild {
            annotations: &marked,
            spec: &template,
            phase: "Paused",
        };
        let kept = desired(&pipeline_inputs(&template, &requests, Some(live))).expect("desired");
        assert_eq!(kept.annotations[REQUIRES_DRAIN], "true");
    }

    #[test]
    fn a_placed_trial_carries_its_instance_and_state() {
        let template = json!({"replicas": null, "source": {}, "sink": {}});
        let live_spec = json!({"replicas": 3});
        let none = BTreeMap::new();
        let mut inputs = Inputs {
            rollout: "m",
            namespace: "ns",
            child: "m-1",
            upgrade_state: upgrade_state::TRIAL,
            metadata: None,
            template: &template,
            kind: KindInputs::MonoVertex { fast_resume: false },
            instance: Some("1"),
            live: None,
        };
        let trial = desired(&inputs).expect("desired");
        assert_eq!(trial.labels[labels::UPGRADE_STATE], upgrade_state::TRIAL);
        assert_eq!(trial.annotations[NUMAFLOW_INSTANCE], "1");
        assert_eq!(trial.spec.get("replicas"), None);
        inputs.live = Some(LiveChild {
            annotations: &none,
            spec: &live_spec,
            phase: "Running",
        });
        inputs.instance = Some("");
        let promoted = desired(&inputs).expect("desired");
        assert_eq!(promoted.spec["replicas"], 3);
        assert_eq!(promoted.annotations[NUMAFLOW_INSTANCE], "");
    }

    #[test]
    fn template_errors_name_the_kind_field() {
        let template = json!({"jetstream": {"version": "{{.isbsvc-name"}});
        let err = desired(&Inputs {
            rollout: "i",
            namespace: "ns",
            child: "i-0",
            upgrade_state: upgrade_state::PROMOTED,
            metadata: None,
            template: &template,
            kind: KindInputs::IsbService,
            instance: None,
            live: None,
        })
        .expect_err("open tag");
        assert!(
            err.to_string()
                .starts_with("spec.interStepBufferService.spec.jetstream.version"),
            "{err}"
        );
    }
}
