//! When a trial is promoted without assessment (docs/strategies.md). The rules
//! read the **rollout's** desired child spec (not the trial's live one), as the reference does.

use crate::child::SpecView;
use numaplane_api::Kind;
use numaplane_api::progressive::ForcedSuccessReason;
use serde_json::Value;

/// What the skip rules look at.
#[derive(Debug, Clone, Copy)]
pub struct SkipInput<'a> {
    pub kind: Kind,
    /// The rollout's child spec (`spec.pipeline.spec`, `spec.monoVertex.spec`, …).
    pub desired_spec: &'a Value,
    /// `spec.strategy.progressive.forcePromote`.
    pub force_promote: bool,
    /// The rollout has an `autoscaling/…/HorizontalPodAutoscaler` rider (Pipeline only).
    pub has_hpa_rider: bool,
    /// The trial child carries the `numaplane.numaproj.io/force-promote` label (any value).
    pub force_promote_label: bool,
}

/// The desired child can't ingest data: not desired Running, or (MonoVertex) `scale.max: 0`,
/// or (Pipeline) every source has an explicit `scale.max: 0`.
pub fn cannot_ingest(kind: Kind, desired_spec: &Value) -> bool {
    let spec = SpecView(desired_spec);
    let phase = spec.desired_phase();
    let not_running = !phase.is_empty() && phase != "Running";
    match kind {
        Kind::IsbService | Kind::NumaflowController => false,
        Kind::MonoVertex => not_running || spec.scale().max == Some(0),
        Kind::Pipeline => {
            let sources: Vec<_> = spec
                .vertices()
                .into_iter()
                .filter(|v| v.is_source)
                .collect();
            not_running || (!sources.is_empty() && sources.iter().all(|v| v.scale.max == Some(0)))
        }
    }
}

/// Why the trial is promoted without assessment, if it is. The label wins over the rollout-side
/// rules; the rest are in the reference's per-kind order.
pub fn skip_reason(input: &SkipInput<'_>) -> Option<ForcedSuccessReason> {
    use ForcedSuccessReason::*;
    if input.force_promote_label {
        return Some(ForcePromote);
    }
    let ingest = || cannot_ingest(input.kind, input.desired_spec);
    match input.kind {
        Kind::MonoVertex => {
            if ingest() {
                Some(NoDataIngestion)
            } else if input.force_promote {
                Some(RolloutConfiguration)
            } else {
                None
            }
        }
        Kind::Pipeline => {
            if input.force_promote {
                Some(RolloutConfiguration)
            } else if input.has_hpa_rider {
                Some(ProgressiveUnsupported)
            } else if ingest() {
                Some(NoDataIngestion)
            } else {
                None
            }
        }
        Kind::IsbService | Kind::NumaflowController => {
            input.force_promote.then_some(RolloutConfiguration)
        }
    }
}
