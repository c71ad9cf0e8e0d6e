//! The labels Numaplane writes on every child of every kind (Pipeline, MonoVertex,
//! InterStepBufferService and NumaflowController alike): its rollout, its upgrade state and, once
//! recyclable, why. `kubectl get -l` and GitOps health checks find children by them.

use numaplane_api::keys::labels;
use std::collections::BTreeMap;

/// The labels of a child of rollout `rollout` in upgrade state `state` (`promoted`, `trial`).
pub fn child_labels(rollout: &str, state: &str) -> [(String, String); 2] {
    [
        (labels::PARENT_ROLLOUT_NAME.into(), rollout.into()),
        (labels::UPGRADE_STATE.into(), state.into()),
    ]
}

/// The labels a child moved to upgrade state `state` for `reason` takes (marked recyclable, or
/// a trial promoted).
pub fn state_labels(state: &str, reason: &str) -> [(String, String); 2] {
    [
        (labels::UPGRADE_STATE.into(), state.into()),
        (labels::UPGRADE_STATE_REASON.into(), reason.into()),
    ]
}

/// Whether `have` carries [`child_labels`] of `rollout` in `state`.
pub fn has_child_labels(have: &BTreeMap<String, String>, rollout: &str, state: &str) -> bool {
    child_labels(rollout, state)
        .iter()
        .all(|(k, v)| have.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaplane_api::keys::upgrade_state;

    #[test]
    fn a_child_carries_its_rollout_and_state_and_recycling_changes_the_state_with_a_reason() {
        let mut have: BTreeMap<String, String> = child_labels("pr", "trial").into_iter().collect();
        assert!(has_child_labels(&have, "pr", "trial"));
        assert!(!has_child_labels(&have, "pr", "promoted"));
        assert!(!has_child_labels(&have, "other", "trial"));
        have.extend(state_labels(
            upgrade_state::RECYCLABLE,
            "progressive-failure",
        ));
        assert_eq!(have[labels::UPGRADE_STATE], "recyclable");
        assert_eq!(have[labels::UPGRADE_STATE_REASON], "progressive-failure");
        assert_eq!(have[labels::PARENT_ROLLOUT_NAME], "pr");
    }
}
