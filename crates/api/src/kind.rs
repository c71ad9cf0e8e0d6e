//! The four rollout kinds and every name that hangs off one: the rollout's and the child's
//! Kubernetes kinds, the controller, the Event source, the metric label, the USDE ConfigMap key.
//! Code matches on [`Kind`]; a kind is never recognised by comparing one of these strings, so a
//! new kind is a compile error wherever it must be handled.

use crate::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use crate::{
    ISBServiceRollout, MonoVertexRollout, NumaflowController, NumaflowControllerRollout,
    PipelineRollout,
};
use kube::core::ApiResource;

/// A Numaplane rollout kind (and, through it, its child's kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pipeline,
    MonoVertex,
    IsbService,
    NumaflowController,
}

/// An object Numaplane reconciles: a rollout of a kind, or a NumaflowController (the one object
/// that is both a rollout's child and reconciled by a controller of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Subject {
    Rollout(Kind),
    NumaflowController,
}

impl Subject {
    /// Every subject: the four rollout kinds, then the NumaflowController.
    pub const ALL: [Subject; 5] = [
        Subject::Rollout(Kind::Pipeline),
        Subject::Rollout(Kind::MonoVertex),
        Subject::Rollout(Kind::IsbService),
        Subject::Rollout(Kind::NumaflowController),
        Subject::NumaflowController,
    ];

    /// Its controller (metrics, logs), as the reference names it.
    pub fn controller(self) -> &'static str {
        match self {
            Subject::Rollout(k) => k.controller(),
            Subject::NumaflowController => "numaflowcontroller-controller",
        }
    }

    /// The reporting controller of Events about it, as the reference names it.
    pub fn event_source(self) -> &'static str {
        match self {
            Subject::Rollout(k) => k.event_source(),
            Subject::NumaflowController => "numaflow-controller",
        }
    }

    /// Its Kubernetes kind.
    pub fn kind(self) -> &'static str {
        match self {
            Subject::Rollout(k) => k.rollout_kind(),
            Subject::NumaflowController => "NumaflowController",
        }
    }
}

/// A type of object Numaplane reconciles, and which one it is.
pub trait Reconciled {
    const SUBJECT: Subject;
}

impl Reconciled for PipelineRollout {
    const SUBJECT: Subject = Subject::Rollout(Kind::Pipeline);
}
impl Reconciled for MonoVertexRollout {
    const SUBJECT: Subject = Subject::Rollout(Kind::MonoVertex);
}
impl Reconciled for ISBServiceRollout {
    const SUBJECT: Subject = Subject::Rollout(Kind::IsbService);
}
impl Reconciled for NumaflowControllerRollout {
    const SUBJECT: Subject = Subject::Rollout(Kind::NumaflowController);
}
impl Reconciled for NumaflowController {
    const SUBJECT: Subject = Subject::NumaflowController;
}

impl Kind {
    /// Every kind, in display order.
    pub const ALL: [Kind; 4] = [
        Kind::Pipeline,
        Kind::MonoVertex,
        Kind::IsbService,
        Kind::NumaflowController,
    ];

    /// The kinds whose child can be paused by the user.
    pub const PAUSABLE: [Kind; 2] = [Kind::Pipeline, Kind::MonoVertex];

    /// The kinds that upgrade progressively (a trial child beside the promoted one) and that a
    /// progressive Numaflow controller upgrade carries onto its trial instance; the
    /// NumaflowController itself is upgraded by a controller trial of its own.
    pub const PROGRESSIVE: [Kind; 3] = [Kind::Pipeline, Kind::MonoVertex, Kind::IsbService];

    /// The rollout's kind, e.g. `PipelineRollout`.
    pub fn rollout_kind(self) -> &'static str {
        match self {
            Kind::Pipeline => "PipelineRollout",
            Kind::MonoVertex => "MonoVertexRollout",
            Kind::IsbService => "ISBServiceRollout",
            Kind::NumaflowController => "NumaflowControllerRollout",
        }
    }

    /// The child's kind, e.g. `Pipeline`.
    pub fn child_kind(self) -> &'static str {
        match self {
            Kind::Pipeline => "Pipeline",
            Kind::MonoVertex => "MonoVertex",
            Kind::IsbService => "InterStepBufferService",
            Kind::NumaflowController => "NumaflowController",
        }
    }

    /// The rollout's controller (metrics, logs), as the reference names it.
    pub fn controller(self) -> &'static str {
        match self {
            Kind::Pipeline => "pipeline-rollout-controller",
            Kind::MonoVertex => "monovertex-rollout-controller",
            Kind::IsbService => "isbsvc-rollout-controller",
            Kind::NumaflowController => "numaflow-controller-rollout-controller",
        }
    }

    /// The reporting controller of Events about the rollout, as the reference names it.
    pub fn event_source(self) -> &'static str {
        match self {
            Kind::Pipeline => "pipeline-rollout",
            Kind::MonoVertex => "monovertex-rollout",
            Kind::IsbService => "isbsvc-rollout",
            Kind::NumaflowController => "numaflow-controller-rollout",
        }
    }

    /// The reason of the Normal Event after a pass that changed something (the reference spells
    /// it differently per kind).
    pub fn success_event(self) -> &'static str {
        use crate::keys::event_reason;
        match self {
            Kind::Pipeline => event_reason::RECONCILE_SUCCESS,
            Kind::MonoVertex | Kind::NumaflowController => event_reason::RECONCILIATION_SUCCESSFUL,
            Kind::IsbService => event_reason::RECONCILATION_SUCCESSFUL,
        }
    }

    /// The label naming the rollout in its health metric.
    pub fn metric_label(self) -> &'static str {
        match self {
            Kind::Pipeline => "pipeline",
            Kind::MonoVertex => "monovertex",
            Kind::IsbService => "isbservice",
            Kind::NumaflowController => "numaflowcontroller",
        }
    }

    /// The child kind's key in the USDE ConfigMap (`pipeline`, `interstepbufferservice`…).
    pub fn usde_key(self) -> &'static str {
        match self {
            Kind::Pipeline => "pipeline",
            Kind::MonoVertex => "monovertex",
            Kind::IsbService => "interstepbufferservice",
            Kind::NumaflowController => "numaflowcontroller",
        }
    }

    /// The field of the rollout's spec holding the child template (`spec.<field>`).
    pub fn template_field(self) -> &'static str {
        match self {
            Kind::Pipeline => "pipeline",
            Kind::MonoVertex => "monoVertex",
            Kind::IsbService => "interStepBufferService",
            Kind::NumaflowController => "controller",
        }
    }

    /// The path of the child spec in the rollout (`spec.pipeline.spec`), for messages; the
    /// NumaflowController's is the template itself.
    pub fn spec_path(self) -> &'static str {
        match self {
            Kind::Pipeline => "spec.pipeline.spec",
            Kind::MonoVertex => "spec.monoVertex.spec",
            Kind::IsbService => "spec.interStepBufferService.spec",
            Kind::NumaflowController => "spec.controller",
        }
    }

    /// The field of `status.progressiveStatus` describing the trial child, for the kinds that
    /// upgrade progressively.
    pub fn upgrading_status_field(self) -> Option<&'static str> {
        match self {
            Kind::Pipeline => Some("upgradingPipelineStatus"),
            Kind::MonoVertex => Some("upgradingMonoVertexStatus"),
            Kind::IsbService => Some("upgradingISBServiceStatus"),
            Kind::NumaflowController => None,
        }
    }

    /// The condition that reports the child's pause (or, for the kinds that pause others' pipelines,
    /// that pause).
    pub fn pause_condition(self) -> &'static str {
        use crate::keys::condition;
        match self {
            Kind::Pipeline => condition::PIPELINE_PAUSING_OR_PAUSED,
            Kind::MonoVertex => condition::MONO_VERTEX_PAUSING_OR_PAUSED,
            Kind::IsbService | Kind::NumaflowController => condition::PAUSING_PIPELINES,
        }
    }

    /// The kind whose rollout kind is `kind` (exactly, as an object's `kind` field carries it).
    pub fn from_rollout_kind(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.rollout_kind() == kind)
    }

    /// The kind whose child kind is `kind`, case-insensitively (the USDE ConfigMap's keys too).
    pub fn from_child_kind(kind: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.child_kind().eq_ignore_ascii_case(kind))
    }

    /// Parses a kind the way kubectl names resources: kind, plural, short name (the CRDs'),
    /// optionally with its group, any case.
    pub fn parse_resource(s: &str) -> Option<Kind> {
        let s = s.to_ascii_lowercase();
        let s = s.split('.').next().unwrap_or_default();
        match s {
            "pipelinerollout" | "pipelinerollouts" | "pr" => Some(Kind::Pipeline),
            "monovertexrollout" | "monovertexrollouts" | "mvr" => Some(Kind::MonoVertex),
            "isbservicerollout" | "isbservicerollouts" | "isbr" | "isbsvcrollout" => {
                Some(Kind::IsbService)
            }
            "numaflowcontrollerrollout" | "numaflowcontrollerrollouts" | "ncr" => {
                Some(Kind::NumaflowController)
            }
            _ => None,
        }
    }

    /// The rollout's resource, for dynamic clients.
    pub fn rollout_resource(self) -> ApiResource {
        match self {
            Kind::Pipeline => ApiResource::erase::<PipelineRollout>(&()),
            Kind::MonoVertex => ApiResource::erase::<MonoVertexRollout>(&()),
            Kind::IsbService => ApiResource::erase::<ISBServiceRollout>(&()),
            Kind::NumaflowController => ApiResource::erase::<NumaflowControllerRollout>(&()),
        }
    }

    /// The child's resource, for dynamic clients.
    pub fn child_resource(self) -> ApiResource {
        match self {
            Kind::Pipeline => ApiResource::erase::<Pipeline>(&()),
            Kind::MonoVertex => ApiResource::erase::<MonoVertex>(&()),
            Kind::IsbService => ApiResource::erase::<InterStepBufferService>(&()),
            Kind::NumaflowController => ApiResource::erase::<NumaflowController>(&()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn every_name_reads_back_to_its_kind() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_rollout_kind(k.rollout_kind()), Some(k));
            assert_eq!(Kind::from_child_kind(k.child_kind()), Some(k));
            assert_eq!(Kind::from_child_kind(k.usde_key()), Some(k));
            assert_eq!(Kind::parse_resource(k.rollout_kind()), Some(k));
            assert_eq!(k.rollout_resource().kind, k.rollout_kind());
            assert_eq!(k.child_resource().kind, k.child_kind());
            assert!(
                k.spec_path()
                    .starts_with(&format!("spec.{}", k.template_field()))
            );
        }
        assert_eq!(
            Kind::Pipeline.rollout_kind(),
            PipelineRollout::kind(&()).as_ref()
        );
        assert_eq!(Kind::from_rollout_kind("Pipeline"), None);
        assert_eq!(
            NumaflowController::SUBJECT.kind(),
            NumaflowController::kind(&()).as_ref()
        );
        assert_eq!(
            MonoVertexRollout::SUBJECT.kind(),
            MonoVertexRollout::kind(&()).as_ref()
        );
        assert_eq!(Kind::from_child_kind("pipelinerollout"), None);
    }

    #[test]
    fn kubectl_names() {
        for (s, k) in [
            ("pr", Kind::Pipeline),
            ("PipelineRollouts", Kind::Pipeline),
            ("pipelinerollout.numaplane.numaproj.io", Kind::Pipeline),
            ("mvr", Kind::MonoVertex),
            ("monovertexrollout", Kind::MonoVertex),
            ("isbr", Kind::IsbService),
            ("isbservicerollouts", Kind::IsbService),
            ("ncr", Kind::NumaflowController),
            ("numaflowcontrollerrollout", Kind::NumaflowController),
        ] {
            assert_eq!(Kind::parse_resource(s), Some(k), "{s}");
        }
        assert_eq!(Kind::parse_resource("pipeline"), None);
        assert_eq!(Kind::Pipeline.rollout_resource().plural, "pipelinerollouts");
    }
}
