//! Where the namespace's Numaflow controller upgrade places a rollout's child: the instance it
//! renders the child on and whether a passed trial is held, read from the namespace's
//! NumaflowControllerRollout status in the cache (docs/progressive-numaflow-controller.md).

use super::kind::Rollout;
use crate::context::Ctx;
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::keys::annotations::NUMAFLOW_INSTANCE;
use numaplane_core::controller_trial::{Target, target};

/// What the child needs from outside the rollout: the kind's own part ([`Rollout::Resolved`])
/// and its placement.
pub(crate) struct Resolved<T> {
    pub kind: T,
    pub placement: Target,
}

/// The placement of `obj`'s child now.
pub(super) fn placement<R: Rollout>(ctx: &Ctx, obj: &R) -> Target {
    let ns = obj.ns();
    let ncr = ctx.stores.nc_rollouts.state().into_iter().find(|r| {
        r.metadata.namespace.as_deref() == Some(ns) && r.meta().deletion_timestamp.is_none()
    });
    let status = ncr
        .as_ref()
        .and_then(|r| r.status.as_ref())
        .and_then(|s| s.progressive_status.as_ref());
    target(status, R::KIND, &obj.name_any())
}

/// The instance an object carries ("" for none).
pub(crate) fn instance_of<K: Resource>(obj: &K) -> &str {
    obj.meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(NUMAFLOW_INSTANCE))
        .map_or("", String::as_str)
}
