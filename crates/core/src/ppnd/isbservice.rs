//! What an ISBServiceRollout pass does with its InterStepBufferService's update (docs/compatibility.md,
//! docs/strategies.md). A change of a `recreate` field deletes and recreates it
//! under any strategy. Under `pause-and-drain` a change of a data-loss or recreate field, and
//! under any strategy a change of a recreate field, first asks the pipelines on it to pause,
//! waits until each is Paused or won't pause (for a recreate: Paused and drained), updates (or
//! recreates) the service, waits until Numaflow has rolled it out, then releases the request.

use crate::usde::Decision;
use numaplane_api::common::UpgradeStrategy;

/// What the pass looks at.
#[derive(Debug, Clone, Copy)]
pub struct IsbInput<'a> {
    /// The live service differs from the one the rollout asks for.
    pub needs_apply: bool,
    /// `status.upgradeInProgress` is `PipelinePauseAndDrain`.
    pub in_progress: bool,
    /// The USDE decision for the change (read only when there is one).
    pub decision: &'a Decision,
    /// The pipelines on the service that are neither Paused nor unable to pause; `None` when
    /// not observed yet (they are read live, only when the plan asks).
    pub not_paused: Option<&'a [String]>,
    /// Whether Numaflow has rolled the live service out, or why not; read only while
    /// pause-and-drain runs and nothing is left to apply.
    pub reconciled: Result<(), &'a str>,
}

/// The pass's action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsbAction {
    /// Apply the service as the rollout asks (nothing to carry, or a direct update).
    Apply,
    /// Start pause-and-drain: ask the pipelines on it to pause first.
    RequestPause { fields: Vec<String>, recreate: bool },
    /// Read which pipelines have not paused yet, then plan again.
    ObservePipelines,
    /// Wait for these pipelines to pause.
    WaitPipelines(Vec<String>),
    /// The pipelines are paused: update it.
    UpdatePaused,
    /// The pipelines are paused: delete and recreate it.
    RecreatePaused { fields: Vec<String> },
    /// Updated: wait until Numaflow has rolled it out (why not yet).
    WaitReconciled(String),
    /// Rolled out: release the pause request and apply.
    Release,
}

fn fields(d: &Decision) -> Vec<String> {
    d.reasons.iter().map(|r| r.path.clone()).collect()
}

pub fn plan(i: &IsbInput<'_>) -> IsbAction {
    if !i.in_progress {
        if !i.needs_apply {
            return IsbAction::Apply;
        }
        // Fail closed: a recreate deletes the buffers, so whatever the strategy it waits until
        // every pipeline on the service is paused and drained (the reference recreated at
        // once under no-strategy, deleting its pipelines undrained).
        return match i.decision.strategy {
            UpgradeStrategy::PipelinePauseAndDrain => IsbAction::RequestPause {
                fields: fields(i.decision),
                recreate: i.decision.recreate,
            },
            _ if i.decision.recreate => IsbAction::RequestPause {
                fields: fields(i.decision),
                recreate: true,
            },
            _ => IsbAction::Apply,
        };
    }
    if i.needs_apply {
        return match i.not_paused {
            None => IsbAction::ObservePipelines,
            Some(w) if !w.is_empty() => IsbAction::WaitPipelines(w.to_vec()),
            Some(_) if i.decision.recreate => IsbAction::RecreatePaused {
                fields: fields(i.decision),
            },
            Some(_) => IsbAction::UpdatePaused,
        };
    }
    match i.reconciled {
        Err(why) => IsbAction::WaitReconciled(why.to_string()),
        Ok(()) => IsbAction::Release,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usde::{ChangeClass, FieldChange};

    fn decision(strategy: UpgradeStrategy, recreate: bool) -> Decision {
        Decision {
            strategy,
            recreate,
            reasons: vec![FieldChange {
                path: "spec.jetstream.version".into(),
                class: ChangeClass::DataLoss,
            }],
        }
    }

    fn run(
        d: &Decision,
        needs_apply: bool,
        in_progress: bool,
        not_paused: Option<&[String]>,
        reconciled: Result<(), &str>,
    ) -> IsbAction {
        plan(&IsbInput {
            needs_apply,
            in_progress,
            decision: d,
            not_paused,
            reconciled,
        })
    }

    #[test]
    fn the_strategy_in_order() {
        use UpgradeStrategy::*;
        let field = vec!["spec.jetstream.version".to_string()];
        let ppnd = decision(PipelinePauseAndDrain, false);
        assert_eq!(run(&ppnd, false, false, None, Ok(())), IsbAction::Apply);
        assert_eq!(
            run(&ppnd, true, false, None, Ok(())),
            IsbAction::RequestPause {
                fields: field.clone(),
                recreate: false
            }
        );
        assert_eq!(
            run(&ppnd, true, true, None, Ok(())),
            IsbAction::ObservePipelines
        );
        let waiting = vec!["p-0".to_string()];
        assert_eq!(
            run(&ppnd, true, true, Some(&waiting), Ok(())),
            IsbAction::WaitPipelines(waiting.clone())
        );
        assert_eq!(
            run(&ppnd, true, true, Some(&[]), Ok(())),
            IsbAction::UpdatePaused
        );
        assert_eq!(
            run(&ppnd, false, true, None, Err("pods rolling")),
            IsbAction::WaitReconciled("pods rolling".into())
        );
        assert_eq!(run(&ppnd, false, true, None, Ok(())), IsbAction::Release);
        let recreate = decision(PipelinePauseAndDrain, true);
        assert_eq!(
            run(&recreate, true, true, Some(&[]), Ok(())),
            IsbAction::RecreatePaused {
                fields: field.clone()
            }
        );
        // A recreate pauses first whatever the strategy (the reference recreated at once).
        let direct = decision(DirectApply, true);
        assert_eq!(
            run(&direct, true, false, None, Ok(())),
            IsbAction::RequestPause {
                fields: field.clone(),
                recreate: true
            }
        );
        assert_eq!(
            run(&direct, true, true, Some(&[]), Ok(())),
            IsbAction::RecreatePaused { fields: field }
        );
        assert_eq!(
            run(&decision(DirectApply, false), true, false, None, Ok(())),
            IsbAction::Apply
        );
    }
}
