//! numaplane: the controller. Watches rollouts and their children, decides with
//! `numaplane-core`, applies with server-side apply and reports in status.

pub mod admin;
pub mod api_metrics;
pub mod child_cache;
pub mod children;
pub mod cli;
pub mod config_watch;
pub mod context;
pub mod due_steps;
pub mod error;
pub mod events;
pub mod finalizer;
pub mod lease_fence;
pub mod lease_release;
pub mod logging;
pub mod metrics;
pub mod numaflow_controller;
pub mod pause_requests;
pub mod reconcile;
pub mod riders;
pub mod rollout;
pub mod run_watch;
pub mod runtime;
pub mod settings;
pub mod status;
pub mod status_hold;
pub mod vertex_cache;
pub mod watches;

pub use runtime::{Operator, OperatorOptions};
