//! Adding and removing Numaplane's finalizer with JSON patches that `test` the current list, so
//! a concurrent edit of the finalizers is never clobbered. Generic over any namespaced kind.

use crate::context::Ctx;
use crate::error::{Error, KubeContext, is_not_found};
use kube::api::{Api, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::Reconciled;
use numaplane_api::keys::FINALIZER;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

pub fn has<K: Resource>(obj: &K) -> bool {
    obj.finalizers().iter().any(|f| f == FINALIZER)
}

fn api<K>(ctx: &Ctx, obj: &K) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    Api::namespaced(ctx.client.clone(), obj.ns())
}

fn json_patch(v: serde_json::Value) -> Result<json_patch::Patch, Error> {
    serde_json::from_value(v).map_err(|e| Error::InvalidSpec(format!("finalizer patch: {e}")))
}

/// Adds the finalizer and returns the object as written.
pub async fn add<K>(ctx: &Ctx, obj: &K) -> Result<K, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Reconciled,
{
    ctx.ensure_leader()?;
    let patch = if obj.finalizers().is_empty() {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}
        ])
    } else {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": obj.finalizers()},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}
        ])
    };
    let added = api(ctx, obj)
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(json_patch(patch)?),
        )
        .await;
    if let Err(e) = &added
        && !is_not_found(e)
    {
        refused(ctx, obj, "adding", e).await;
    }
    added.ctx(|| "adding finalizer".into())
}

/// The reference's `UpdateFailed` Warning for a refused finalizer patch.
async fn refused<K: Resource<DynamicType = ()> + Reconciled>(
    ctx: &Ctx,
    obj: &K,
    doing: &str,
    e: &kube::Error,
) {
    ctx.events
        .write_refused(
            obj,
            numaplane_api::keys::event_reason::UPDATE_FAILED,
            format!("failed {doing} finalizer {FINALIZER}: {e}"),
        )
        .await;
}

pub async fn remove<K>(ctx: &Ctx, obj: &K) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Reconciled,
{
    let Some(idx) = obj.finalizers().iter().position(|f| f == FINALIZER) else {
        return Ok(());
    };
    ctx.ensure_leader()?;
    let patch = json_patch(serde_json::json!([
        {"op": "test", "path": format!("/metadata/finalizers/{idx}"), "value": FINALIZER},
        {"op": "remove", "path": format!("/metadata/finalizers/{idx}")}
    ]))?;
    match api(ctx, obj)
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => {
            refused(ctx, obj, "removing", &e).await;
            Err(e).ctx(|| "removing finalizer".into())
        }
    }
}
