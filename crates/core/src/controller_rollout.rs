//! One pass of a NumaflowControllerRollout that no controller trial carries, decided
//! (docs/architecture.md): from how its NumaflowController was found, what to write, whether a
//! pause-and-drain starts, goes on or ends, and what the rollout waits for. The controller
//! observes (the cache, a live read before a create, the namespace's pipelines while a pause
//! waits), calls [`plan`], carries the step out and reports; `controller_trial` decides the
//! passes a trial carries.

use crate::config::{UsdeKindConfig, UserStrategy};
use crate::controller_update::{UpdateDecision, decide_update};
use numaplane_api::common::Phase;
use numaplane_api::keys::{annotations, reason};
use numaplane_api::{NumaflowController, NumaflowControllerSpec};

/// How the rollout's NumaflowController was found; `controller` is handed back by the steps
/// that keep it as it is.
#[derive(Debug, Clone)]
pub enum Found<'a, H> {
    /// In the cache and being deleted: its deletion wakes the rollout, then it is created again.
    Deleting,
    /// In the cache, owned by the rollout.
    Cached {
        controller: H,
        spec: &'a NumaflowControllerSpec,
        /// It carries the labels every child carries ([`crate::child::has_child_labels`]).
        labelled: bool,
        /// [`reconciled`] of it.
        reconciled: Result<(), String>,
    },
    /// Not in the cache: what the live read before a create found (one created a moment ago,
    /// owned by the rollout) or nothing.
    Live(Option<(H, &'a NumaflowControllerSpec)>),
}

/// Everything the pass decides on.
#[derive(Debug, Clone)]
pub struct Input<'a, H> {
    /// The rollout's name, which its NumaflowController shares.
    pub name: &'a str,
    pub namespace: &'a str,
    /// The controller spec the rollout asks for.
    pub desired: &'a NumaflowControllerSpec,
    pub found: Found<'a, H>,
    /// `status.upgradeInProgress` is pause-and-drain.
    pub pausing: bool,
    /// While a pause-and-drain waits to update the controller: the namespace's pipelines not
    /// paused yet (read live; `None` when not looked at).
    pub not_paused: Option<&'a [String]>,
    pub user_strategy: UserStrategy,
    /// The USDE field lists for NumaflowControllers; `None` when no USDE config is loaded.
    pub usde: Option<&'a UsdeKindConfig>,
}

/// Why the NumaflowController is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Create,
    Update,
    /// One written before children carried labels gets them, nothing else.
    Relabel,
}

impl Write {
    /// The duration phase the reference reports for this write, if any.
    pub fn phase(self) -> Option<&'static str> {
        match self {
            Write::Create => Some("create"),
            Write::Update => Some("update"),
            Write::Relabel => None,
        }
    }
}

/// What one pass does; `H` is the NumaflowController as found, where it is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<H> {
    /// Its deletion is under way: the rollout waits, nothing is mirrored.
    AwaitDeletion(String),
    /// Nothing to write; the rollout waits when `pending` says for what, else it is deployed.
    Keep {
        controller: H,
        pending: Option<String>,
    },
    /// Write it at the rollout's spec.
    Write(Write),
    /// A pause-and-drain starts: every pipeline of the namespace is asked to pause first.
    StartPause { controller: H, pending: String },
    /// The pipelines paused (or may lose data): update it, then wait for it to be reconciled.
    UpdatePaused { pending: String },
    /// Reconciled after the paused update: the pause is released.
    ReleasePause(H),
}

/// Plans one pass.
pub fn plan<H>(input: Input<'_, H>) -> Step<H> {
    let Input {
        name,
        namespace,
        desired,
        found,
        pausing,
        not_paused,
        user_strategy,
        usde,
    } = input;
    let keep = |controller| Step::Keep {
        controller,
        pending: None,
    };
    match found {
        Found::Deleting => Step::AwaitDeletion(format!(
            "waiting for NumaflowController {name} to finish deleting"
        )),
        Found::Live(None) => Step::Write(Write::Create),
        // Created a moment ago, not in the cache yet: adopted, not written again.
        Found::Live(Some((controller, spec))) if spec == desired => keep(controller),
        Found::Live(Some(_)) => Step::Write(Write::Update),
        Found::Cached {
            controller,
            spec,
            reconciled,
            ..
        } if pausing => pause_step(
            (name, namespace),
            desired,
            not_paused,
            controller,
            spec,
            reconciled,
        ),
        Found::Cached {
            controller,
            spec,
            labelled,
            ..
        } if spec == desired => {
            if labelled {
                keep(controller)
            } else {
                Step::Write(Write::Relabel)
            }
        }
        Found::Cached {
            controller, spec, ..
        } => match decide_update(user_strategy, usde, spec, desired) {
            UpdateDecision::ApplyNow => Step::Write(Write::Update),
            UpdateDecision::PauseFirst => Step::StartPause {
                controller,
                pending: format!(
                    "pause-and-drain: requesting a pause of the pipelines of namespace {} before updating the Numaflow controller from {} to {}",
                    namespace, spec.version, desired.version
                ),
            },
        },
    }
}

/// One step of a pause-and-drain in progress: wait until the namespace's pipelines are paused
/// (or may lose data), update, wait until the controller is reconciled, release the pause.
fn pause_step<H>(
    (name, namespace): (&str, &str),
    desired: &NumaflowControllerSpec,
    not_paused: Option<&[String]>,
    controller: H,
    spec: &NumaflowControllerSpec,
    reconciled: Result<(), String>,
) -> Step<H> {
    if spec != desired {
        return match not_paused {
            // Fail closed: a controller that did not look keeps the pipelines waiting.
            None => Step::Keep {
                controller,
                pending: Some(format!(
                    "pause-and-drain: the pipelines of namespace {namespace} are not known to be paused yet"
                )),
            },
            Some([]) => Step::UpdatePaused {
                pending: format!(
                    "pause-and-drain: NumaflowController {name} updated to {}; waiting for it to be reconciled before resuming the pipelines",
                    desired.version
                ),
            },
            Some(waiting) => Step::Keep {
                controller,
                pending: Some(format!(
                    "pause-and-drain: waiting for pipelines {} to pause before updating the Numaflow controller to {}; annotate their PipelineRollouts {}=\"true\" not to wait for them",
                    waiting.join(", "),
                    desired.version,
                    annotations::ALLOW_DATA_LOSS
                )),
            },
        };
    }
    match reconciled {
        Err(why) => Step::Keep {
            controller,
            pending: Some(format!(
                "pause-and-drain: waiting for NumaflowController {name} to be reconciled before resuming the pipelines: {why}"
            )),
        },
        Ok(()) => Step::ReleasePause(controller),
    }
}

/// Whether the NumaflowController has rolled out its spec: generation observed, not Pending,
/// its Deployment not progressing. A Failed one counts (as in the reference), so a failed
/// upgrade does not keep the pipelines paused forever.
pub fn reconciled(nc: &NumaflowController) -> Result<(), String> {
    let generation = nc.metadata.generation.unwrap_or_default();
    let st = nc.status.clone().unwrap_or_default().status;
    if st.observed_generation < generation {
        return Err(format!(
            "observedGeneration {} < generation {generation}",
            st.observed_generation
        ));
    }
    if st.phase == Phase::Pending || st.phase == Phase::Unset {
        return Err(format!("phase {}", st.phase.as_str()));
    }
    let reported = crate::controller_health::mirror_controller(nc);
    if reported.reason == reason::PROGRESSING {
        return Err(reported.message);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SpecField;

    fn spec(version: &str) -> NumaflowControllerSpec {
        NumaflowControllerSpec {
            version: version.into(),
            instance_id: None,
        }
    }

    fn shipped() -> UsdeKindConfig {
        UsdeKindConfig {
            data_loss: vec![SpecField {
                path: "spec.version".into(),
                include_subfields: false,
            }],
            ..Default::default()
        }
    }

    fn input<'a>(
        desired: &'a NumaflowControllerSpec,
        found: Found<'a, ()>,
        usde: &'a UsdeKindConfig,
    ) -> Input<'a, ()> {
        Input {
            name: "numaflow-controller",
            namespace: "ns",
            desired,
            found,
            pausing: false,
            not_paused: None,
            user_strategy: UserStrategy::PauseAndDrain,
            usde: Some(usde),
        }
    }

    fn cached(spec: &NumaflowControllerSpec, labelled: bool) -> Found<'_, ()> {
        Found::Cached {
            controller: (),
            spec,
            labelled,
            reconciled: Ok(()),
        }
    }

    const KEEP: Step<()> = Step::Keep {
        controller: (),
        pending: None,
    };

    /// The message of a step that leaves the rollout waiting.
    fn pending(step: Step<()>) -> String {
        match step {
            Step::Keep {
                pending: Some(m), ..
            }
            | Step::StartPause { pending: m, .. }
            | Step::UpdatePaused { pending: m }
            | Step::AwaitDeletion(m) => m,
            other => panic!("expected a waiting step, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_controller_is_created_and_one_created_a_moment_ago_adopted() {
        let (want, old, usde) = (spec("1.8.1"), spec("1.7.5"), shipped());
        let step = |found| plan(input(&want, found, &usde));
        assert_eq!(step(Found::Live(None)), Step::Write(Write::Create));
        assert_eq!(step(Found::Live(Some(((), &want)))), KEEP);
        assert_eq!(
            step(Found::Live(Some(((), &old)))),
            Step::Write(Write::Update)
        );
        assert!(pending(step(Found::Deleting)).contains("finish deleting"));
    }

    #[test]
    fn an_unchanged_controller_is_only_relabelled_when_its_labels_are_missing() {
        let (want, usde) = (spec("1.8.1"), shipped());
        assert_eq!(plan(input(&want, cached(&want, true), &usde)), KEEP);
        assert_eq!(
            plan(input(&want, cached(&want, false), &usde)),
            Step::Write(Write::Relabel)
        );
        assert_eq!(Write::Relabel.phase(), None);
        assert_eq!(Write::Create.phase(), Some("create"));
    }

    #[test]
    fn a_data_loss_change_pauses_first_under_pause_and_drain_else_applies() {
        let (want, old, usde) = (spec("1.8.1"), spec("1.7.5"), shipped());
        let mut i = input(&want, cached(&old, true), &usde);
        let m = pending(plan(i.clone()));
        assert!(
            m.contains("requesting a pause") && m.contains("from 1.7.5 to 1.8.1"),
            "{m}"
        );
        i.user_strategy = UserStrategy::NoStrategy;
        assert_eq!(plan(i.clone()), Step::Write(Write::Update));
        // Fail closed: without a USDE config the pipelines pause first.
        i.usde = None;
        assert!(matches!(plan(i), Step::StartPause { .. }));
    }

    #[test]
    fn a_pause_waits_for_the_pipelines_then_updates_then_waits_for_reconciliation() {
        let (want, old, usde) = (spec("1.8.1"), spec("1.7.5"), shipped());
        let waiting = ["p1".to_string()];
        let mut i = input(&want, cached(&old, true), &usde);
        i.pausing = true;
        i.not_paused = Some(&waiting);
        assert!(pending(plan(i.clone())).contains("pipelines p1 to pause"));
        i.not_paused = None;
        assert!(
            pending(plan(i.clone())).contains("not known"),
            "pipelines not looked at: no update"
        );
        i.not_paused = Some(&[]);
        assert!(
            matches!(plan(i.clone()), Step::UpdatePaused { pending } if pending.contains("updated to 1.8.1"))
        );
        i.found = Found::Cached {
            controller: (),
            spec: &want,
            labelled: true,
            reconciled: Err("phase Pending".into()),
        };
        assert!(pending(plan(i.clone())).contains("phase Pending"));
        i.found = cached(&want, true);
        assert_eq!(plan(i), Step::ReleasePause(()));
    }
}
