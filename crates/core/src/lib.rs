//! numaplane-core: Numaplane's pure decisions. Nothing here does I/O or reads the clock: callers
//! pass in the objects they observed and the current time, and get back values to act on.
//!
//! - [`template`]: `{{.tag}}` substitution in child specs, metadata and riders.
//! - [`naming`]: child names `<rollout>-<index>` and the `nameCount` counter.
//! - [`child`]: lenient views over Numaflow children and shape checks of their specs.
//! - [`deletion`]: what a rollout's deletion waits for (draining pipelines, ISB service users).
//! - [`health`]: `ChildResourcesHealthy` and pause conditions read from a child's status.
//! - [`history`]: the upgrade attempts kept in a rollout's status.
//! - [`conditions`]: maintaining a rollout's status conditions.
//! - [`riders`]: rendering, permitting and diffing riders.
//! - [`config`]: the controller config file and the ConfigMap-borne configs.
//! - [`pass`]: one pass of a rollout: which children to retire or recycle, what happens to
//!   the promoted child.
//! - [`usde`]: the upgrade strategy decision (no-op, direct apply, pause-and-drain, progressive).
//! - [`progressive`]: the progressive upgrade engine (scale split, assessment, state machine).
//! - [`controller_trial`]: a progressive upgrade of the Numaflow controller itself.
//!
//! Every error type has `reason()`: a short stable string for conditions, events and metrics.

pub mod child;
pub mod conditions;
pub mod config;
pub mod controller_health;
pub mod controller_rollout;
pub mod controller_trial;
pub mod controller_update;
pub mod deletion;
pub mod desired;
pub mod health;
pub mod history;
pub mod json;
pub mod naming;
pub mod pass;
pub mod ppnd;
pub mod progressive;
pub mod recycle;
pub mod riders;
pub mod template;
pub mod usde;
