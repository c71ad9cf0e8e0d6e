//! Bringing a child's riders to the desired set: read the ones listed in status, then create,
//! update or delete by server-side apply. Riders are owned (non-controller reference) by their
//! child, so they disappear with it; an object of a rider's name the child doesn't own is never
//! overwritten or deleted.

use crate::children::{ChildObject, FIELD_MANAGER, plain_owner_ref};
use crate::context::Ctx;
use crate::error::{Error, KubeContext, is_conflict, is_not_found};
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, DynamicObject, PartialObjectMeta, Patch, PatchParams, Preconditions,
};
use kube::discovery::{ApiResource, pinned_kind};
use numaplane_api::common::{GroupVersionKind, RiderStatus};
use numaplane_api::keys::annotations;
use numaplane_core::riders::{DesiredRider, ExistingRider, diff_riders};
use tracing::{info, warn};

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

/// A rider named in status as read from the cluster (`None`: missing).
type Listed = (
    GroupVersionKind,
    String,
    Option<PartialObjectMeta<DynamicObject>>,
);

fn owned_by(meta: &PartialObjectMeta<DynamicObject>, child_uid: &str) -> bool {
    meta.owner_references().iter().any(|o| o.uid == child_uid)
}

/// The uid of an earlier child of this kind and name that `meta` still names as its owner: that
/// child is gone (its name was free for the current one), so the garbage collector deletes the
/// object soon.
fn earlier_owner(
    meta: &PartialObjectMeta<DynamicObject>,
    kind: &str,
    name: &str,
    child_uid: &str,
) -> Option<String> {
    meta.owner_references()
        .iter()
        .find(|o| o.kind == kind && o.name == name && o.uid != child_uid)
        .map(|o| o.uid.clone())
}

async fn read_listed(ctx: &Ctx, ns: &str, listed: &[RiderStatus]) -> Result<Vec<Listed>, Error> {
    let mut out = Vec::new();
    for r in listed {
        let ar = resource(ctx, &r.group_version_kind).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        let live = api
            .get_metadata_opt(&r.name)
            .await
            .ctx(|| format!("reading rider {}", r.name))?;
        out.push((r.group_version_kind.clone(), r.name.clone(), live));
    }
    Ok(out)
}

/// The listed riders that exist and that the child (`child_uid`) owns: a missing one is simply
/// not existing (it is recreated), one of that name the child doesn't own is not ours to
/// change or delete.
fn owned_riders(read: &[Listed], child_uid: &str) -> Vec<ExistingRider> {
    let mut out = Vec::new();
    for (gvk, name, live) in read {
        match live {
            Some(meta) if owned_by(meta, child_uid) => out.push(ExistingRider {
                gvk: gvk.clone(),
                name: name.clone(),
                hash: meta
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(annotations::HASH))
                    .cloned(),
            }),
            Some(_) => {
                warn!(rider = %name, kind = %gvk.kind, "an object named like a rider in status is not owned by the child: left alone")
            }
            None => {
                info!(rider = %name, "rider listed in status is missing; it will be recreated")
            }
        }
    }
    out
}

/// Reads the riders named in status that exist and are owned by the child `child_uid`.
pub async fn existing(
    ctx: &Ctx,
    ns: &str,
    child_uid: &str,
    listed: &[RiderStatus],
) -> Result<Vec<ExistingRider>, Error> {
    Ok(owned_riders(
        &read_listed(ctx, ns, listed).await?,
        child_uid,
    ))
}

/// Applies the difference between desired riders and those recorded in `listed`. Returns
/// whether anything was written. A rider is only created where no object of its name exists,
/// or updated where the child owns the object (checked for every rider before any is written,
/// and carried as the object's UID in the apply); deletions carry the UID as a precondition.
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
    let child_uid = child.uid().unwrap_or_default();
    let read = read_listed(ctx, ns, listed).await?;
    let have = owned_riders(&read, &child_uid);
    let diff = diff_riders(desired, &have);
    if diff.is_empty() {
        return Ok(false);
    }
    ctx.ensure_leader()?;
    let mut writes = Vec::new();
    for r in diff.add.iter().chain(diff.modify.iter()) {
        let ar = resource(ctx, &r.gvk).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        let recorded = read
            .iter()
            .find(|(gvk, name, _)| *gvk == r.gvk && *name == r.name)
            .and_then(|(_, _, live)| live.clone());
        let live = match recorded {
            Some(meta) => Some(meta),
            None => api
                .get_metadata_opt(&r.name)
                .await
                .ctx(|| format!("reading rider {}", r.name))?,
        };
        let uid = match live {
            None => None,
            Some(meta) if owned_by(&meta, &child_uid) => meta.uid(),
            Some(meta)
                if let Some(earlier_uid) =
                    earlier_owner(&meta, &K::kind(&()), &child.name_any(), &child_uid) =>
            {
                return Err(Error::AwaitingCollection {
                    kind: r.gvk.kind.clone(),
                    name: r.name.clone(),
                    namespace: ns.to_string(),
                    owner: format!("{} {}", K::kind(&()), child.name_any()),
                    earlier_uid,
                });
            }
            Some(_) => {
                return Err(Error::NotOwnedObject {
                    kind: r.gvk.kind.clone(),
                    name: r.name.clone(),
                    namespace: ns.to_string(),
                    owner: format!("{} {}", K::kind(&()), child.name_any()),
                });
            }
        };
        writes.push((r, api, uid));
    }
    let owner = plain_owner_ref(child);
    for (r, api, uid) in writes {
        // Forced only over our own rider (its uid in the body); a create is not forced, so an
        // object someone else made under the name meanwhile conflicts instead of being taken.
        let pp = if uid.is_some() {
            PatchParams::apply(FIELD_MANAGER).force()
        } else {
            PatchParams::apply(FIELD_MANAGER)
        };
        let mut body = r.object.clone();
        if let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.insert(
                "ownerReferences".into(),
                serde_json::json!(owner.iter().collect::<Vec<_>>()),
            );
            if let Some(uid) = uid {
                meta.insert("uid".into(), serde_json::Value::String(uid));
            }
        }
        info!(rider = %r.name, kind = %r.gvk.kind, "applying rider");
        api.patch(&r.name, &pp, &Patch::Apply(body))
            .await
            .ctx(|| format!("spec.riders: applying rider {} {}", r.gvk.kind, r.name))?;
    }
    for r in &diff.delete {
        let Some(uid) = read
            .iter()
            .find(|(gvk, name, _)| *gvk == r.gvk && *name == r.name)
            .and_then(|(_, _, live)| live.as_ref()?.uid())
        else {
            continue;
        };
        let ar = resource(ctx, &r.gvk).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        info!(rider = %r.name, kind = %r.gvk.kind, "deleting rider");
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&r.name, &dp).await {
            Ok(_) => {}
            // Gone, or replaced by another object since it was read: nothing of ours to delete.
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(e) => return Err(e).ctx(|| format!("deleting rider {}", r.name)),
        }
    }
    Ok(true)
}
