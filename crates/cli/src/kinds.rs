//! The four rollout kinds the plugin knows, their aliases and their children.

use kube::core::ApiResource;
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowController, NumaflowControllerRollout,
    PipelineRollout,
};

/// A Numaplane rollout kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RolloutKind {
    Pipeline,
    MonoVertex,
    IsbService,
    NumaflowController,
}

impl RolloutKind {
    /// Every kind, in display order.
    pub const ALL: [RolloutKind; 4] = [
        RolloutKind::Pipeline,
        RolloutKind::MonoVertex,
        RolloutKind::IsbService,
        RolloutKind::NumaflowController,
    ];

    /// The kinds whose child can be paused by the user.
    pub const PAUSABLE: [RolloutKind; 2] = [RolloutKind::Pipeline, RolloutKind::MonoVertex];

    /// The kinds that upgrade progressively (a trial child that can be force-promoted); the
    /// NumaflowController is always updated in place.
    pub const PROGRESSIVE: [RolloutKind; 3] = [
        RolloutKind::Pipeline,
        RolloutKind::MonoVertex,
        RolloutKind::IsbService,
    ];

    /// Parses a kind the way kubectl names resources: kind, plural, short name, any case.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.to_ascii_lowercase();
        let s = s.split('.').next().unwrap_or_default();
        match s {
            "pipelinerollout" | "pipelinerollouts" | "pr" => Some(Self::Pipeline),
            "monovertexrollout" | "monovertexrollouts" | "mvr" => Some(Self::MonoVertex),
            "isbservicerollout" | "isbservicerollouts" | "isbr" | "isbsvcrollout" => {
                Some(Self::IsbService)
            }
            "numaflowcontrollerrollout" | "numaflowcontrollerrollouts" | "ncr" => {
                Some(Self::NumaflowController)
            }
            _ => None,
        }
    }

    /// The rollout's kind name, e.g. `PipelineRollout`.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Pipeline => "PipelineRollout",
            Self::MonoVertex => "MonoVertexRollout",
            Self::IsbService => "ISBServiceRollout",
            Self::NumaflowController => "NumaflowControllerRollout",
        }
    }

    /// The child's kind name, e.g. `Pipeline`.
    pub fn child_kind(self) -> &'static str {
        match self {
            Self::Pipeline => "Pipeline",
            Self::MonoVertex => "MonoVertex",
            Self::IsbService => "InterStepBufferService",
            Self::NumaflowController => "NumaflowController",
        }
    }

    /// The field of the rollout's spec holding the child template (`spec.<field>`).
    pub fn template_field(self) -> &'static str {
        match self {
            Self::Pipeline => "pipeline",
            Self::MonoVertex => "monoVertex",
            Self::IsbService => "interStepBufferService",
            Self::NumaflowController => "controller",
        }
    }

    /// The field of `status.progressiveStatus` describing the trial child, for the kinds that
    /// upgrade progressively.
    pub fn upgrading_status_field(self) -> Option<&'static str> {
        match self {
            Self::Pipeline => Some("upgradingPipelineStatus"),
            Self::MonoVertex => Some("upgradingMonoVertexStatus"),
            Self::IsbService => Some("upgradingISBServiceStatus"),
            Self::NumaflowController => None,
        }
    }

    /// The condition that reports the child's pause, if the kind has one.
    pub fn pause_condition(self) -> Option<&'static str> {
        use numaplane_api::keys::condition;
        match self {
            Self::Pipeline => Some(condition::PIPELINE_PAUSING_OR_PAUSED),
            Self::MonoVertex => Some(condition::MONO_VERTEX_PAUSING_OR_PAUSED),
            Self::IsbService | Self::NumaflowController => Some(condition::PAUSING_PIPELINES),
        }
    }

    pub fn rollout_resource(self) -> ApiResource {
        match self {
            Self::Pipeline => ApiResource::erase::<PipelineRollout>(&()),
            Self::MonoVertex => ApiResource::erase::<MonoVertexRollout>(&()),
            Self::IsbService => ApiResource::erase::<ISBServiceRollout>(&()),
            Self::NumaflowController => ApiResource::erase::<NumaflowControllerRollout>(&()),
        }
    }

    pub fn child_resource(self) -> ApiResource {
        match self {
            Self::Pipeline => ApiResource::erase::<Pipeline>(&()),
            Self::MonoVertex => ApiResource::erase::<MonoVertex>(&()),
            Self::IsbService => ApiResource::erase::<InterStepBufferService>(&()),
            Self::NumaflowController => ApiResource::erase::<NumaflowController>(&()),
        }
    }
}

/// clap value parser for a kind argument.
pub fn parse_kind(s: &str) -> Result<RolloutKind, String> {
    RolloutKind::parse(s).ok_or_else(|| {
        format!(
            "unknown kind {s:?}: use pipelinerollout (pr), monovertexrollout (mvr), \
             isbservicerollout (isbr) or numaflowcontrollerrollout (ncr)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases() {
        for (s, k) in [
            ("pr", RolloutKind::Pipeline),
            ("PipelineRollouts", RolloutKind::Pipeline),
            (
                "pipelinerollout.numaplane.numaproj.io",
                RolloutKind::Pipeline,
            ),
            ("mvr", RolloutKind::MonoVertex),
            ("monovertexrollout", RolloutKind::MonoVertex),
            ("isbr", RolloutKind::IsbService),
            ("isbservicerollouts", RolloutKind::IsbService),
            ("ncr", RolloutKind::NumaflowController),
            ("numaflowcontrollerrollout", RolloutKind::NumaflowController),
        ] {
            assert_eq!(RolloutKind::parse(s), Some(k), "{s}");
        }
        assert!(parse_kind("pipeline").is_err());
        assert_eq!(
            RolloutKind::Pipeline.rollout_resource().plural,
            "pipelinerollouts"
        );
    }
}
