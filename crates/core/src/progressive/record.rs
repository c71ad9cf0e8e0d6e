//! What the engine keeps in the rollout's status, in one kind-agnostic shape, and the mapping
//! to and from each rollout kind's `status.progressiveStatus` (+ `nameCount`).

use super::scale::TrialScaleRecord;
use numaplane_api::isbservice_rollout::{ISBServiceProgressiveStatus, ISBServiceRolloutStatus};
use numaplane_api::monovertex_rollout::{
    MonoVertexProgressiveStatus, MonoVertexRolloutStatus, UpgradingMonoVertexStatus,
};
use numaplane_api::pipeline_rollout::{
    PipelineProgressiveStatus, PipelineRolloutStatus, UpgradingPipelineStatus,
};
use numaplane_api::progressive::{
    AnalysisStatus, PromotedChildStatus, PromotedScalableChildStatus, UpgradingChildStatus,
};
use std::collections::BTreeMap;

/// The engine's durable state. Everything the engine decides from (besides the live objects) is
/// here, so a controller restarted at any point continues the same rollout.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record {
    /// `upgrading…Status` (common part).
    pub upgrading: Option<UpgradingChildStatus>,
    /// `upgrading…Status.analysis` (Pipeline, MonoVertex).
    pub analysis: Option<AnalysisStatus>,
    /// `promoted…Status` (ISB: only the name is kept).
    pub promoted: Option<PromotedScalableChildStatus>,
    /// `upgrading…Status.originalScale*` of the trial.
    pub trial_scale: TrialScaleRecord,
    /// `upgradingPipelineStatus.interStepBufferServiceName` (Pipeline).
    pub trial_isbsvc: String,
    /// `progressiveStatus.historicalPodCount` (Pipeline).
    pub historical_pod_count: Option<BTreeMap<String, i64>>,
    /// `status.nameCount`: the next child index.
    pub name_count: Option<i32>,
}

impl Record {
    pub fn from_monovertex(status: &MonoVertexRolloutStatus) -> Self {
        let p = status.progressive_status.clone().unwrap_or_default();
        let up = p.upgrading_mono_vertex_status;
        Record {
            trial_scale: up.as_ref().map_or(TrialScaleRecord::None, |u| {
                TrialScaleRecord::MonoVertex {
                    min_max: u.original_scale_min_max.clone(),
                    definition: u.original_scale_definition.clone(),
                }
            }),
            analysis: up.as_ref().and_then(|u| u.analysis.clone()),
            upgrading: up.map(|u| u.child),
            promoted: p.promoted_mono_vertex_status,
            trial_isbsvc: String::new(),
            historical_pod_count: None,
            name_count: status.name_count,
        }
    }

    pub fn write_monovertex(&self, status: &mut MonoVertexRolloutStatus) {
        let (min_max, definition) = match &self.trial_scale {
            TrialScaleRecord::MonoVertex {
                min_max,
                definition,
            } => (min_max.clone(), definition.clone()),
            _ => Default::default(),
        };
        status.name_count = self.name_count;
        status.progressive_status = Some(MonoVertexProgressiveStatus {
            upgrading_mono_vertex_status: self.upgrading.clone().map(|child| {
                UpgradingMonoVertexStatus {
                    child,
                    analysis: self.analysis.clone(),
                    original_scale_min_max: min_max,
                    original_scale_definition: definition,
                }
            }),
            promoted_mono_vertex_status: self.promoted.clone(),
        });
    }

    pub fn from_pipeline(status: &PipelineRolloutStatus) -> Self {
        let p = status.progressive_status.clone().unwrap_or_default();
        let up = p.upgrading_pipeline_status;
        Record {
            trial_scale: up.as_ref().map_or(TrialScaleRecord::None, |u| {
                TrialScaleRecord::Pipeline {
                    min_max: u.original_scale_min_max.clone(),
                    definitions: u.original_scale_definitions.clone(),
                }
            }),
            analysis: up.as_ref().and_then(|u| u.analysis.clone()),
            trial_isbsvc: up
                .as_ref()
                .map(|u| u.inter_step_buffer_service_name.clone())
                .unwrap_or_default(),
            upgrading: up.map(|u| u.child),
            promoted: p.promoted_pipeline_status,
            historical_pod_count: p.historical_pod_count,
            name_count: status.name_count,
        }
    }

    pub fn write_pipeline(&self, status: &mut PipelineRolloutStatus) {
        let (min_max, definitions) = match &self.trial_scale {
            TrialScaleRecord::Pipeline {
                min_max,
                definitions,
            } => (min_max.clone(), definitions.clone()),
            _ => Default::default(),
        };
        status.name_count = self.name_count;
        status.progressive_status = Some(PipelineProgressiveStatus {
            upgrading_pipeline_status: self.upgrading.clone().map(|child| {
                UpgradingPipelineStatus {
                    child,
                    analysis: self.analysis.clone(),
                    inter_step_buffer_service_name: self.trial_isbsvc.clone(),
                    original_scale_min_max: min_max,
                    original_scale_definitions: definitions,
                }
            }),
            promoted_pipeline_status: self.promoted.clone(),
            historical_pod_count: self.historical_pod_count.clone(),
        });
    }

    pub fn from_isbservice(status: &ISBServiceRolloutStatus) -> Self {
        let p = status.progressive_status.clone().unwrap_or_default();
        Record {
            upgrading: p.upgrading_isb_service_status,
            promoted: p
                .promoted_isb_service_status
                .map(|p| PromotedScalableChildStatus {
                    name: p.name,
                    ..Default::default()
                }),
            name_count: status.name_count,
            ..Default::default()
        }
    }

    pub fn write_isbservice(&self, status: &mut ISBServiceRolloutStatus) {
        status.name_count = self.name_count;
        status.progressive_status = Some(ISBServiceProgressiveStatus {
            upgrading_isb_service_status: self.upgrading.clone(),
            promoted_isb_service_status: self.promoted.as_ref().map(|p| PromotedChildStatus {
                name: p.name.clone(),
            }),
        });
    }

    /// The recorded trial status if it names `trial`.
    pub fn upgrading_for(&self, trial: &str) -> Option<&UpgradingChildStatus> {
        self.upgrading.as_ref().filter(|u| u.name == trial)
    }
}
