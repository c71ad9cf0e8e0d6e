//! Writes of a NumaflowControllerRollout's NumaflowController children: the rollout's own and a
//! trial's (`trial.rs`) are applied and deleted the same way.

use super::nc_ctx::NcCtx;
use crate::error::{Error, KubeContext, is_conflict, is_not_found};
use crate::status;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::{NumaflowController, NumaflowControllerRollout, NumaflowControllerSpec};
use std::collections::BTreeMap;

/// Server-side applies NumaflowController `name` (the rollout's own name, or a trial's): the
/// controller spec, a controller owner reference, and the labels every child carries (its
/// rollout, its upgrade state `state`: `promoted` or `trial`); nothing else.
pub(super) async fn apply(
    r: &NumaflowControllerRollout,
    nctx: &NcCtx,
    name: &str,
    spec: &NumaflowControllerSpec,
    state: &str,
) -> Result<NumaflowController, Error> {
    let ctx = &nctx.ctx;
    ctx.ensure_leader()?;
    let ns = r.ns();
    let owner = r
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidSpec("NumaflowControllerRollout has no uid yet".into()))?;
    let body = serde_json::json!({
        "apiVersion": NumaflowController::api_version(&()),
        "kind": NumaflowController::kind(&()),
        "metadata": {
            "name": name,
            "namespace": ns,
            "ownerReferences": [owner],
            "labels": BTreeMap::from(numaplane_core::child::child_labels(&r.name_any(), state)),
        },
        "spec": spec,
    });
    let api: Api<NumaflowController> = Api::namespaced(ctx.client.clone(), ns);
    let written = api
        .patch(
            name,
            &PatchParams::apply(crate::children::FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .ctx(|| format!("applying NumaflowController {name}"))?;
    // Later passes may see the cache before it catches up with this write.
    status::remember(ctx, &written);
    Ok(written)
}

/// Whether `nc` carries the labels [`apply`] writes for rollout `r` in upgrade state `state`.
pub(super) fn labelled(
    nc: &NumaflowController,
    r: &NumaflowControllerRollout,
    state: &str,
) -> bool {
    numaplane_core::child::has_child_labels(nc.labels(), &r.name_any(), state)
}

/// Deletes NumaflowController `name` if rollout `r` owns it (by UID), with its UID as a
/// precondition; someone else's NumaflowController of that name is refused, not deleted.
pub(super) async fn delete(
    r: &NumaflowControllerRollout,
    nctx: &NcCtx,
    ns: &str,
    name: &str,
) -> Result<(), Error> {
    let ctx = &nctx.ctx;
    ctx.ensure_leader()?;
    let api = Api::<NumaflowController>::namespaced(ctx.client.clone(), ns);
    let cached = nctx
        .controllers
        .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns));
    // The cache may not have a NumaflowController created a moment ago: read it then.
    let nc = match cached {
        Some(nc) => Some((*nc).clone()),
        None => api
            .get_opt(name)
            .await
            .ctx(|| format!("reading NumaflowController {name}"))?,
    };
    let Some(nc) = nc else {
        return Ok(());
    };
    let rollout_uid = r.uid().unwrap_or_default();
    if !nc.owner_references().iter().any(|o| o.uid == rollout_uid) {
        return Err(Error::NotOwnedObject {
            kind: "NumaflowController".into(),
            name: name.to_string(),
            namespace: ns.to_string(),
            owner: format!("NumaflowControllerRollout {}", r.name_any()),
        });
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: nc.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        // Gone, or replaced since it was read: nothing of ours to delete.
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
        Err(e) => Err(e).ctx(|| format!("deleting NumaflowController {name}")),
    }
}
