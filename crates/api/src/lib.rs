//! numaplane-api: the five custom resources of `numaplane.numaproj.io/v1alpha1`, the status types
//! they share, the label/annotation/condition vocabulary, and CRD generation.
//!
//! Child specs (Pipeline, MonoVertex, InterStepBufferService) and rider definitions are carried as
//! free-form JSON (`serde_json::Value`) so that no user field is dropped or defaulted on the way to
//! the child object.

pub mod common;
pub mod compact;
pub mod crds;
pub mod free_form;
pub mod isbservice_rollout;
pub mod keys;
pub mod kind;
pub mod label_index;
pub mod manifests;
pub mod monovertex_rollout;
pub mod namespaced;
pub mod narrow;
pub mod numaflow;
pub mod numaflow_controller;
pub mod numaflow_controller_rollout;
pub mod pipeline_rollout;
pub mod progressive;
pub mod schema;
pub mod strategy;

pub use common::{ChildMetadata, Phase, RiderStatus, Status, UpgradeStrategy};
pub use isbservice_rollout::{ISBServiceRollout, ISBServiceRolloutSpec, ISBServiceRolloutStatus};
pub use kind::{Kind, Reconciled, Subject};
pub use monovertex_rollout::{MonoVertexRollout, MonoVertexRolloutSpec, MonoVertexRolloutStatus};
pub use namespaced::Namespaced;
pub use numaflow_controller::{
    NumaflowController, NumaflowControllerSpec, NumaflowControllerStatus,
};
pub use numaflow_controller_rollout::{
    NumaflowControllerRollout, NumaflowControllerRolloutSpec, NumaflowControllerRolloutStatus,
};
pub use pipeline_rollout::{PipelineRollout, PipelineRolloutSpec, PipelineRolloutStatus};

/// API group of every Numaplane kind.
pub const GROUP: &str = "numaplane.numaproj.io";
/// The single served and stored version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in manifests.
pub const API_VERSION: &str = "numaplane.numaproj.io/v1alpha1";
