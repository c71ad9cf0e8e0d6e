//! Bringing a child's riders to the desired set: read the ones listed in status, then create,
//! update or delete by server-side apply. Riders are owned (non-controller reference) by their
//! child, so they disappear with it.

use crate::children::{ChildObject, FIELD_MANAGER, plain_owner_ref};
use crate::context::Ctx;
use crate::error::{Error, KubeContext, is_not_found};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::discovery::{ApiResource, pinned_kind};
use numaplane_api::common::{GroupVersionKind, RiderStatus};
use numaplane_api::keys::annotations;
use numaplane_core::riders::{DesiredRider, ExistingRider, diff_riders};
use tracing::info;

/// The API resource of a kind (discovered once, then cached); also used for the objects a
/// NumaflowController renders.
pub(crate) async fn resource(ctx: &Ctx, gvk: &GroupVersionKind) -> Result<ApiResource, Error> {
    let key = format!("{}/{}/{}", gvk.group, gvk.version, gvk.kind);
    if let Some(ar) = ctx
        .rider_resources
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return Ok(ar.clone());
    }
    let kgvk = kube::core::GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
    let (ar, _) = pinned_kind(&ctx.client, &kgvk)
        .await
        .ctx(|| format!("resolving kind {key}"))?;
    ctx.rider_resources
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, ar.clone());
    Ok(ar)
}

/// Reads the riders named in status (missing ones are simply not existing).
pub async fn existing(
    ctx: &Ctx,
    ns: &str,
    listed: &[RiderStatus],
) -> Result<Vec<ExistingRider>, Error> {
    let mut out = Vec::new();
    for r in listed {
        let ar = resource(ctx, &r.group_version_kind).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        match api
            .get_opt(&r.name)
            .await
            .ctx(|| format!("reading rider {}", r.name))?
        {
            Some(obj) => out.push(ExistingRider {
                gvk: r.group_version_kind.clone(),
                name: r.name.clone(),
                hash: obj
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(annotations::HASH))
                    .cloned(),
            }),
            None => {
                info!(rider = %r.name, "rider listed in status is missing; it will be recreated")
            }
        }
    }
    Ok(out)
}

/// Applies the difference between desired riders and those recorded in `listed`. Returns
/// whether anything was written.
pub async fn sync<K: ChildObject>(
    ctx: &Ctx,
    ns: &str,
    child: &K,
    listed: &[RiderStatus],
    desired: &[DesiredRider],
) -> Result<bool, Error> {
    if listed.is_empty() && desired.is_empty() {
        return Ok(false);
    }
    let have = existing(ctx, ns, listed).await?;
    let diff = diff_riders(desired, &have);
    if diff.is_empty() {
        return Ok(false);
    }
    ctx.ensure_leader()?;
    let owner = plain_owner_ref(child);
    for r in diff.add.iter().chain(diff.modify.iter()) {
        let ar = resource(ctx, &r.gvk).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        let mut body = r.object.clone();
        if let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.insert(
                "ownerReferences".into(),
                serde_json::json!(owner.iter().collect::<Vec<_>>()),
            );
        }
        info!(rider = %r.name, kind = %r.gvk.kind, "applying rider");
        api.patch(
            &r.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .ctx(|| format!("spec.riders: applying rider {} {}", r.gvk.kind, r.name))?;
    }
    for r in &diff.delete {
        let ar = resource(ctx, &r.gvk).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        info!(rider = %r.name, kind = %r.gvk.kind, "deleting rider");
        match api.delete(&r.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e).ctx(|| format!("deleting rider {}", r.name)),
        }
    }
    Ok(true)
}
