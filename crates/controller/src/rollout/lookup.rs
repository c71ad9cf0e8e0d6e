//! Children of a rollout found in the watch caches.

use super::kind::Rollout;
use crate::child_cache::ChildCache;
use crate::context::Ctx;
use kube::{Resource, ResourceExt};
use numaplane_api::keys::{labels, upgrade_state};
use numaplane_api::numaflow::InterStepBufferService;

/// The cached children of `rollout` in `ns`.
pub(crate) fn cached_children<R: Rollout>(
    ctx: &Ctx,
    ns: &str,
    rollout: &str,
) -> impl Iterator<Item = std::sync::Arc<R::Child>> {
    R::children(&ctx.stores)
        .children_of(ns, rollout)
        .into_iter()
}

/// The newest child labelled `upgrade-state=promoted`.
pub(crate) fn find_promoted<R: Rollout>(ctx: &Ctx, ns: &str, rollout: &str) -> Option<R::Child> {
    cached_children::<R>(ctx, ns, rollout)
        .filter(|c| is_promoted(c.meta()) && c.meta().deletion_timestamp.is_none())
        .max_by(|a, b| {
            a.meta()
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .cmp(&b.meta().creation_timestamp.as_ref().map(|t| t.0))
        })
        .map(|c| (*c).clone())
}

pub(crate) fn is_promoted(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(labels::UPGRADE_STATE))
        .map(String::as_str)
        == Some(upgrade_state::PROMOTED)
}

/// The ISB service child a pipeline of `isb_rollout` should use: the newest trial, else the
/// newest promoted one.
pub(crate) fn current_isbsvc(
    cache: &ChildCache<InterStepBufferService>,
    ns: &str,
    isb_rollout: &str,
) -> Option<String> {
    let all = cache.children_of(ns, isb_rollout);
    let newest = |state: &str| {
        all.iter()
            .filter(|c| {
                c.labels().get(labels::UPGRADE_STATE).map(String::as_str) == Some(state)
                    && c.meta().deletion_timestamp.is_none()
            })
            .max_by_key(|c| c.meta().creation_timestamp.as_ref().map(|t| t.0))
            .map(|c| c.name_any())
    };
    newest(upgrade_state::TRIAL)
        .or_else(|| newest(upgrade_state::IN_PROGRESS))
        .or_else(|| newest(upgrade_state::PROMOTED))
}
