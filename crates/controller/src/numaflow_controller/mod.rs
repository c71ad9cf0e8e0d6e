//! NumaflowControllerRollout and NumaflowController (numaflow-controller-and-riders.md §1–2):
//! installing and upgrading the Numaflow controller in a namespace from versioned definitions.
//!
//! - [`definitions`]: the `<namespace>/<version>` → manifest store, fed by ConfigMap watches.
//! - [`render`]: templating and object preparation (pure).
//! - [`health`]: Deployment health and the rollout's mirror of its NumaflowController (pure).
//! - `owned`: caches of the rendered objects; `apply`: apply, recreate, prune.
//! - `controller`: the NumaflowController reconciler; `rollout`: the NumaflowControllerRollout
//!   reconciler and the upgrade-strategy seam; `wiring`: watches and controllers.
//!
//! Both reconcilers follow the shape of the rollout loop: observe caches, decide, act with
//! server-side apply, write status once and only if it changed.

mod apply;
mod controller;
pub mod definitions;
pub mod health;
mod owned;
pub mod render;
pub mod rollout;
mod wiring;

pub use wiring::{Wiring, start};

use crate::context::Ctx;
use crate::error::Error;
use definitions::Definitions;
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use numaplane_api::NumaflowController;
use owned::OwnedStores;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::warn;

/// What both reconcilers share.
pub struct NcCtx {
    pub ctx: Arc<Ctx>,
    pub definitions: Arc<Definitions>,
    owned: OwnedStores,
    controllers: Store<NumaflowController>,
    /// What each NumaflowController (by UID) last applied.
    applied: Mutex<HashMap<String, apply::Applied>>,
    /// API resources of the `includedResources` rules, by (group, kind).
    included: Mutex<HashMap<(String, String), Vec<ApiResource>>>,
    /// Version in each rollout's `numaflow_controller_rollouts_running` series.
    running: Mutex<HashMap<(String, String), String>>,
}

impl NcCtx {
    fn applied(&self, uid: &str) -> Option<apply::Applied> {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .cloned()
    }

    fn set_applied(&self, uid: &str, a: apply::Applied) {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), a);
    }

    fn forget(&self, uid: &str) {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.ctx.forget(uid);
    }
}

/// Turns a pass's result into the next wake-up: failures are retried with per-object backoff,
/// at least a minute for problems only the user can fix (their edit wakes us anyway).
fn next_action(ctx: &Ctx, key: &str, res: Result<Action, Error>) -> Action {
    match res {
        Ok(action) => {
            ctx.clear_failures(key);
            action
        }
        Err(e) => {
            let delay = ctx.backoff(key);
            warn!(error = %e, reason = e.reason(), retry_in = ?delay, "reconcile failed");
            if e.is_transient() {
                Action::requeue(delay)
            } else {
                Action::requeue(delay.max(Duration::from_secs(60)))
            }
        }
    }
}
