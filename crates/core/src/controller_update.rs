//! How a change of a NumaflowControllerRollout's controller spec reaches its NumaflowController
//! when no controller trial carries it (`controller_trial` decides those).

use crate::config::{UsdeKindConfig, UserStrategy};
use numaplane_api::NumaflowControllerSpec;
use numaplane_api::common::UpgradeStrategy;

/// How a change of the rollout's controller spec reaches its NumaflowController.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateDecision {
    /// Update the NumaflowController now.
    ApplyNow,
    /// Ask every pipeline of the namespace to pause first (pause-and-drain).
    PauseFirst,
}

/// The upgrade-strategy decision. A change of a `numaflowcontroller` USDE field (shipped:
/// `dataLoss: [spec.version]`) under `pause-and-drain` first asks every pipeline of the
/// namespace to pause and updates the NumaflowController once they are paused or cannot pause
/// (persisted in `status.upgradeInProgress`). Under `no-strategy`, and under `progressive` (as in
/// the reference, unless the rollout opts into a controller trial: `trial.rs`), every change
/// applies directly.
pub fn decide_update(
    strategy: UserStrategy,
    config: Option<&UsdeKindConfig>,
    live: &NumaflowControllerSpec,
    desired: &NumaflowControllerSpec,
) -> UpdateDecision {
    let (Ok(live), Ok(desired)) = (serde_json::to_value(live), serde_json::to_value(desired))
    else {
        return UpdateDecision::ApplyNow;
    };
    let none = Default::default();
    let decision = crate::usde::decide(&crate::usde::DecisionInput {
        user_strategy: strategy,
        config,
        desired_spec: &desired,
        live_spec: &live,
        desired_labels: &none,
        live_labels: &none,
        desired_annotations: &none,
        live_annotations: &none,
        riders: &[],
    });
    let decision =
        crate::usde::effective_for_kind(numaplane_api::Kind::NumaflowController, decision);
    if decision.strategy == UpgradeStrategy::PipelinePauseAndDrain {
        UpdateDecision::PauseFirst
    } else {
        UpdateDecision::ApplyNow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_change_pauses_first_under_pause_and_drain_or_without_a_usde_config() {
        let live = NumaflowControllerSpec {
            version: "1.7.5".into(),
            instance_id: None,
        };
        let desired = NumaflowControllerSpec {
            version: "1.8.1".into(),
            instance_id: None,
        };
        let cfg = crate::config::UsdeKindConfig {
            data_loss: vec![crate::config::SpecField {
                path: "spec.version".into(),
                include_subfields: false,
            }],
            ..Default::default()
        };
        for s in [UserStrategy::NoStrategy, UserStrategy::Progressive] {
            assert_eq!(
                decide_update(s, Some(&cfg), &live, &desired),
                UpdateDecision::ApplyNow
            );
        }
        assert_eq!(
            decide_update(UserStrategy::PauseAndDrain, Some(&cfg), &live, &desired),
            UpdateDecision::PauseFirst
        );
        // No USDE config loaded: fail closed, the pipelines pause first under every strategy
        // that has no progressive controller upgrade of its own.
        for s in [UserStrategy::PauseAndDrain, UserStrategy::NoStrategy] {
            assert_eq!(
                decide_update(s, None, &live, &desired),
                UpdateDecision::PauseFirst
            );
        }
        let instance = NumaflowControllerSpec {
            instance_id: Some("a".into()),
            ..live.clone()
        };
        assert_eq!(
            decide_update(UserStrategy::PauseAndDrain, Some(&cfg), &live, &instance),
            UpdateDecision::ApplyNow
        );
    }
}
