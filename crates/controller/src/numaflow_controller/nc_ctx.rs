//! The context both Numaflow controller reconcilers share, and how a pass's result becomes
//! the next wake-up.

use super::definitions::Definitions;
use super::owned::OwnedStores;
use super::owned::Seen;
use super::render::{ObjKey, RenderedObject};
use crate::context::Ctx;
use kube::discovery::ApiResource;
use kube::runtime::reflector::Store;
use numaplane_api::NumaflowController;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What both reconcilers share.
pub struct NcCtx {
    pub ctx: Arc<Ctx>,
    pub definitions: Arc<Definitions>,
    pub(super) owned: OwnedStores,
    pub(super) controllers: Store<NumaflowController>,
    /// What each NumaflowController (by UID) last applied.
    pub(super) applied: Mutex<HashMap<String, Applied>>,
    /// API resources of the `includedResources` rules, by (group, kind).
    pub(super) included: Mutex<HashMap<(String, String), Vec<ApiResource>>>,
    /// Version in each rollout's `numaflow_controller_rollouts_running` series.
    pub(super) running: Mutex<HashMap<(String, String), String>>,
}

impl NcCtx {
    pub(super) fn applied(&self, uid: &str) -> Option<Applied> {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .cloned()
    }

    pub(super) fn set_applied(&self, uid: &str, a: Applied) {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), a);
    }

    pub(super) fn forget(&self, uid: &str) {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.ctx.forget(uid);
    }
}

/// What a NumaflowController last applied successfully (memory only: after a restart the first
/// pass is a full one).
#[derive(Clone, Debug)]
pub struct Applied {
    /// Hash of everything the rendering and pruning depend on.
    pub input: u64,
    pub at: Instant,
    pub rendered: Arc<Vec<RenderedObject>>,
    /// Objects of watched kinds as our last apply returned them.
    pub seen: HashMap<ObjKey, Seen>,
}
