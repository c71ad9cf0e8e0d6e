//! Writes of a NumaflowControllerRollout's NumaflowController children: the rollout's own and a
//! trial's (`trial.rs`) are applied and deleted the same way.

use super::nc_ctx::NcCtx;
use crate::error::{Error, KubeContext, is_not_found};
use crate::status;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Resource, ResourceExt};
use numaplane_api::{NumaflowController, NumaflowControllerRollout, NumaflowControllerSpec};

/// Server-side applies NumaflowController `name` (the rollout's own name, or a trial's): the
/// controller spec, a controller owner reference; nothing else.
pub(super) async fn apply(
    r: &NumaflowControllerRollout,
    nctx: &NcCtx,
    name: &str,
    spec: &NumaflowControllerSpec,
) -> Result<NumaflowController, Error> {
    let ctx = &nctx.ctx;
    ctx.ensure_leader()?;
    let ns = r.namespace().unwrap_or_default();
    let owner = r
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidSpec("NumaflowControllerRollout has no uid yet".into()))?;
    let body = serde_json::json!({
        "apiVersion": NumaflowController::api_version(&()),
        "kind": NumaflowController::kind(&()),
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [owner]},
        "spec": spec,
    });
    let api: Api<NumaflowController> = Api::namespaced(ctx.client.clone(), &ns);
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

/// Deletes NumaflowController `name` (the cached object's UID as a precondition).
pub(super) async fn delete(nctx: &NcCtx, ns: &str, name: &str) -> Result<(), Error> {
    let ctx = &nctx.ctx;
    ctx.ensure_leader()?;
    let uid = nctx
        .controllers
        .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns))
        .and_then(|nc| nc.uid());
    let dp = DeleteParams {
        preconditions: uid.map(|u| Preconditions {
            uid: Some(u),
            resource_version: None,
        }),
        ..Default::default()
    };
    match Api::<NumaflowController>::namespaced(ctx.client.clone(), ns)
        .delete(name, &dp)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e).ctx(|| format!("deleting NumaflowController {name}")),
    }
}
