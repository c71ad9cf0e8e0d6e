//! The progressive upgrade engine (progressive.md, pipeline-rollout.md §6, api.md §13): a trial
//! child is deployed beside the promoted one, the promoted child's pods are split between them,
//! the trial is judged, then promoted or rolled back.
//!
//! Pure: the controller observes the rollout, its children and the clock, calls [`step`], and
//! performs the one [`Action`] it returns, persisting [`Plan::record`] first (see [`step`]'s
//! module for the contract).
//!
//! - [`scale`]: the pod split, the saved original scale, the trial's scale, scale-down and
//!   restore patches, and the scale-agnostic spec comparisons.
//! - [`health`]: one health sample of the trial.
//! - [`assessment`]: the basic assessment over the schedule, with exact wake-up deadlines.
//! - [`analysis`]: the AnalysisRun verdict.
//! - [`skip`]: promotion without assessment (`force_promote`, `no_data_ingestion`, …).
//! - [`record`]: the engine's durable state and its mapping onto each rollout's status.
//! - [`step`]: the state machine of one pass.

pub mod analysis;
pub mod assessment;
pub mod health;
pub mod record;
pub mod scale;
pub mod skip;
pub mod step;
mod time;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use analysis::{ObservedRun, analysis_run_name};
pub use health::TrialHealth;
pub use record::Record;
pub use scale::{PromotedPods, TrialScaleRecord};
pub use step::{Action, Plan, Progress, PromotedChild, StepError, StepInput, TrialChild, step};

/// The child kinds that can be upgraded progressively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pipeline,
    MonoVertex,
    InterStepBufferService,
}

impl Kind {
    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Pipeline => "Pipeline",
            Kind::MonoVertex => "MonoVertex",
            Kind::InterStepBufferService => "InterStepBufferService",
        }
    }
}
