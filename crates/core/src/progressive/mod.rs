//! The progressive upgrade engine (docs/strategies.md, docs/compatibility.md): a trial
//! child is deployed beside the promoted one, the promoted child's pods are split between them,
//! the trial is judged, then promoted or rolled back.
//!
//! Pure: the controller observes the rollout, its children and the clock, calls [`step()`], and
//! performs the one [`Action`] it returns, persisting [`Plan::record`] first, or right after a
//! promotion's label flip (see [`mod@step`] for the contract).
//!
//! - [`scale`]: the pod split, the saved original scale, the trial's scale, scale-down and
//!   restore patches, and the scale-agnostic spec comparisons.
//! - [`health`]: one health sample of the trial.
//! - [`assessment`]: the basic assessment over the schedule, with exact wake-up deadlines.
//! - [`analysis`]: the AnalysisRun verdict.
//! - [`skip`]: promotion without assessment (`force_promote`, `no_data_ingestion`, …).
//! - [`record`]: the engine's durable state and its mapping onto each rollout's status.
//! - [`mod@step`]: the state machine of one pass.
//!
//! # Using it from a controller
//!
//! While `status.upgradeInProgress` is `Progressive`, on every reconcile:
//! 1. Read [`Record`] from the rollout status (`Record::from_*`), the newest `promoted` child
//!    (others labelled promoted go in `older_promoted`), the newest `trial` child (legacy
//!    `in-progress` too) and whether the recorded trial was flipped to promoted (`flipped`);
//!    compute `differs_from_promoted` / `differs_from_rollout` with
//!    [`scale::comparable_promoted_spec`] / [`scale::comparable_trial_spec`] plus the metadata
//!    subset and rider checks; sample the trial's health ([`health`]); look up the AnalysisRun
//!    [`analysis_run_name`].
//! 2. `step(..)`. If it says [`Action::ObservePromotedPods`], count the pods, read the HPA, and
//!    call it again with [`PromotedChild::pods`].
//! 3. Write `plan.record` into the status (`Record::write_*`) and persist it; **then** act;
//!    then persist `plan.after` if set. An action that [`Action::records_itself`] is taken
//!    first and `plan.record` (then `plan.after`) persisted after it. Set conditions/phase as
//!    each [`Action`] documents and put `plan.message` in the status message.
//! 4. [`Progress::Complete`] (only with [`Action::Done`]): clear `upgradeInProgress`, then
//!    direct-apply the rollout's definition (puts back the new promoted child's own scale and
//!    its HPA riders). [`Progress::Failed`]: keep `upgradeInProgress`, phase Pending.
//! 5. Requeue at `Action::Wait { until }`; after any other action run again as soon as the
//!    change is observed (watch event), or after a short backoff.
//!
//! Deliberate differences from the reference (each explained where it is implemented):
//! AnalysisRun `Error`/`Inconclusive`/timeout fail the trial ([`analysis`]); wake-ups at the
//! exact deadlines ([`assessment`]); discontinue restores the promoted child's saved scale
//! ([`Action::Discontinue`]); no redundant trial after a success ([`StepInput`]); a trial's name
//! is recorded before it is created ([`step()`]); a pipeline vertex that had no `scale` gets
//! none back on restore ([`scale`]).

pub mod analysis;
pub mod assessment;
pub mod health;
pub mod record;
pub mod scale;
pub mod skip;
pub mod step;
pub mod templates;
pub(crate) mod time;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use analysis::{ObservedRun, analysis_run_name};
pub use health::TrialHealth;
pub use record::Record;
pub use scale::{PromotedPods, TrialScaleRecord};
pub use step::{Action, Plan, Progress, PromotedChild, StepError, StepInput, TrialChild, step};
