//! Writing children (Pipelines, MonoVertices, InterStepBufferServices): server-side apply with
//! field manager `numaplane`, so labels and annotations removed from a rollout disappear from
//! its child, plus a wholesale `spec` replace when someone else added fields to it.

use crate::context::Ctx;
use crate::error::{Error, KubeContext, is_conflict, is_not_found};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::keys::labels;
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_core::usde::json_eq;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

/// Field manager of everything Numaplane writes to children and riders.
pub const FIELD_MANAGER: &str = "numaplane";

/// A Numaflow object whose spec and status are raw JSON.
pub trait ChildObject:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + numaplane_api::compact::RawObject
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    fn spec(&self) -> &Value;
    fn status(&self) -> Option<&Value>;
    fn to_json(&self) -> Value;
    /// The operator's cache of this kind of child.
    fn cache(stores: &crate::context::Stores) -> &crate::child_cache::ChildCache<Self>;
}

/// Patches child `ns/name`, and keeps what the API server answered so that a pass reads it
/// before the watch brings it (`child_cache.rs`). Every patch of a child goes through here.
pub async fn patch<K: ChildObject, P: Serialize + Debug>(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    params: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<K> {
    let written: K = api::<K>(ctx, ns).patch(name, params, patch).await?;
    K::cache(&ctx.stores).remember(&written);
    Ok(written)
}

/// Numaplane's field manager for patches other than applies.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

macro_rules! child_object {
    ($t:ty, $cache:ident) => {
        impl ChildObject for $t {
            fn spec(&self) -> &Value {
                &self.spec
            }
            fn status(&self) -> Option<&Value> {
                self.status.as_ref()
            }
            fn to_json(&self) -> Value {
                <$t>::to_json(self)
            }
            fn cache(stores: &crate::context::Stores) -> &crate::child_cache::ChildCache<Self> {
                &stores.$cache
            }
        }
    };
}
child_object!(Pipeline, pipelines);
child_object!(MonoVertex, monovertices);
child_object!(InterStepBufferService, isbsvcs);

/// The child as its rollout wants it.
#[derive(Clone, Debug)]
pub struct DesiredChild {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub owner: OwnerReference,
    pub spec: Value,
}

impl DesiredChild {
    fn body<K: ChildObject>(&self) -> Value {
        serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": self.labels,
                "annotations": self.annotations,
                "ownerReferences": [self.owner],
            },
            "spec": self.spec,
        })
    }
}

impl numaplane_core::pass::Desired for DesiredChild {
    /// The parts of it a pass compares with the live child.
    fn view(&self) -> numaplane_core::pass::DesiredView<'_> {
        numaplane_core::pass::DesiredView {
            labels: &self.labels,
            annotations: &self.annotations,
            spec: &self.spec,
        }
    }
}

/// A child as a pass sees it; `rollout_uid` is the uid of the rollout it may belong to.
pub fn view<'a, K: ChildObject>(
    child: &'a K,
    rollout_uid: &str,
) -> numaplane_core::pass::ChildView<'a> {
    let meta = child.meta();
    numaplane_core::pass::ChildView {
        handle: (),
        name: meta.name.as_deref().unwrap_or_default(),
        labels: child.labels(),
        annotations: child.annotations(),
        spec: child.spec(),
        deleting: meta.deletion_timestamp.is_some(),
        created: meta.creation_timestamp.as_ref().map(|t| t.0),
        controlled: child
            .owner_references()
            .iter()
            .any(|o| o.uid == rollout_uid && o.controller == Some(true)),
    }
}

/// [`view`] of a shared child, handing the child back when a plan acts on it.
pub fn handled<'a, K: ChildObject>(
    child: &'a Arc<K>,
    rollout_uid: &str,
) -> numaplane_core::pass::ChildView<'a, Arc<K>> {
    view(&**child, rollout_uid).with(Arc::clone(child))
}

/// Whether the live child differs from what the rollout wants
/// ([`numaplane_core::pass::differs`]).
pub fn needs_apply<K: ChildObject>(live: &K, desired: &DesiredChild) -> bool {
    use numaplane_core::pass::Desired;
    numaplane_core::pass::differs(&view(live, &desired.owner.uid), &desired.view())
}

fn api<K: ChildObject>(ctx: &Ctx, ns: &str) -> Api<K> {
    Api::namespaced(ctx.client.clone(), ns)
}

/// Creates a child by server-side apply (so later applies own, and can remove, every field),
/// refusing to take over an object of that name that isn't ours.
pub async fn create<K: ChildObject>(ctx: &Ctx, desired: &DesiredChild) -> Result<K, Error> {
    ctx.ensure_leader()?;
    let api = api::<K>(ctx, &desired.namespace);
    if let Some(existing) = api
        .get_opt(&desired.name)
        .await
        .ctx(|| format!("checking name {}", desired.name))?
        && !existing
            .owner_references()
            .iter()
            .any(|o| o.uid == desired.owner.uid)
    {
        return Err(Error::NotOwned {
            kind: kind_str::<K>(),
            name: desired.name.clone(),
            namespace: desired.namespace.clone(),
            owner_kind: owner_kind_str(&desired.owner.kind),
        });
    }
    api.patch(
        &desired.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(desired.body::<K>()),
    )
    .await
    .ctx(|| format!("creating {} {}", K::kind(&()), desired.name))
}

/// Brings the live child to the desired state and returns it as written.
pub async fn apply<K: ChildObject>(
    ctx: &Ctx,
    live: &K,
    desired: &DesiredChild,
) -> Result<K, Error> {
    ctx.ensure_leader()?;
    let applied: K = patch(
        ctx,
        &desired.namespace,
        &desired.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(desired.body::<K>()),
    )
    .await
    .ctx(|| format!("applying {} {}", K::kind(&()), desired.name))?;
    if json_eq(applied.spec(), &desired.spec) {
        return Ok(applied);
    }
    // Fields another manager added stay after an apply: replace the spec wholesale, guarded
    // by the resourceVersion we just saw.
    let rv = applied.resource_version().unwrap_or_default();
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "replace", "path": "/spec", "value": desired.spec},
    ]))
    .map_err(|e| Error::InvalidSpec(format!("spec patch: {e}")))?;
    tracing::info!(child = %live.name_any(), "removing spec fields not in the rollout");
    self::patch(
        ctx,
        &desired.namespace,
        &desired.name,
        &patch_params(),
        &Patch::<()>::Json(patch),
    )
    .await
    .ctx(|| format!("replacing spec of {} {}", K::kind(&()), desired.name))
}

/// The kind of a statically typed resource, for error messages.
pub fn kind_str<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()) {
        std::borrow::Cow::Borrowed(s) => s,
        std::borrow::Cow::Owned(_) => "object",
    }
}

fn owner_kind_str(kind: &str) -> &'static str {
    numaplane_api::Kind::from_rollout_kind(kind)
        .map_or("rollout", numaplane_api::Kind::rollout_kind)
}

/// Children of a rollout read from the API server (not the cache), for decisions where a stale
/// cache would be unsafe (creating, deleting).
pub async fn list_live<K: ChildObject>(
    ctx: &Ctx,
    ns: &str,
    rollout: &str,
) -> Result<Vec<K>, Error> {
    // A name that is no valid label value (object names may be 253 characters, label values
    // 63) can label no child: none exists, and the selector would be refused, which would
    // leave such a rollout undeletable.
    if !valid_label_value(rollout) {
        return Ok(Vec::new());
    }
    let lp = ListParams::default().labels(&format!("{}={rollout}", labels::PARENT_ROLLOUT_NAME));
    Ok(api::<K>(ctx, ns)
        .list(&lp)
        .await
        .ctx(|| format!("listing {} of {rollout}", K::plural(&())))?
        .items)
}

/// Kubernetes' rule for label values: at most 63 characters of `[A-Za-z0-9._-]`, starting and
/// ending with an alphanumeric (or empty).
pub(crate) fn valid_label_value(v: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    v.is_empty()
        || (v.len() <= 63
            && alnum(v.chars().next())
            && alnum(v.chars().last())
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
}

/// Deletes a child by name, guarded by its UID; a child already gone is fine.
pub async fn delete<K: ChildObject>(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    uid: Option<String>,
) -> Result<(), Error> {
    ctx.ensure_leader()?;
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api::<K>(ctx, ns).delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e).ctx(|| format!("deleting {} {name}", K::kind(&()))),
    }
}

/// Deletes `name` only if it is still exactly the version the caller decided on (uid and
/// resourceVersion). Returns whether this call started the deletion: `false` when the object is
/// gone or changed since (another pass already deleted it, or it must be looked at again), so
/// outcome Events and metrics are reported once per object.
pub async fn delete_unchanged<K: ChildObject>(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    uid: Option<String>,
    resource_version: Option<String>,
) -> Result<bool, Error> {
    ctx.ensure_leader()?;
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid,
            resource_version,
        }),
        ..Default::default()
    };
    match api::<K>(ctx, ns).delete(name, &dp).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(false),
        Err(e) => Err(e).ctx(|| format!("deleting {} {name}", K::kind(&()))),
    }
}

/// Deletes `child` if it is unchanged since it was read. A deletion that may drop data
/// (`reason` given) first records why on the object (annotation `deletion-reason`) in a write
/// conditional on the version read, then deletes the version it wrote: the reason is on the
/// object before its data goes, not only in a best-effort Event after. A stale reason of an
/// earlier attempt is removed the same way. Returns whether this call started the deletion.
pub async fn delete_recording<K: ChildObject>(
    ctx: &Ctx,
    child: &K,
    reason: Option<String>,
) -> Result<bool, Error> {
    use numaplane_api::keys::annotations::DELETION_REASON;
    let ns = child.ns();
    let name = child.name_any();
    let mut rv = child.resource_version();
    if reason.as_ref() != child.annotations().get(DELETION_REASON) {
        ctx.ensure_leader()?;
        let path = format!(
            "/metadata/annotations/{}",
            DELETION_REASON.replace('/', "~1")
        );
        let mut ops = vec![serde_json::json!({"op": "replace",
            "path": "/metadata/resourceVersion", "value": child.resource_version()})];
        ops.push(match &reason {
            Some(r) if child.meta().annotations.is_some() => {
                serde_json::json!({"op": "add", "path": path, "value": r})
            }
            Some(r) => serde_json::json!({"op": "add", "path": "/metadata/annotations",
                "value": {DELETION_REASON: r}}),
            None => serde_json::json!({"op": "remove", "path": path}),
        });
        let ops: json_patch::Patch = serde_json::from_value(Value::Array(ops))
            .map_err(|e| Error::InvalidSpec(format!("deletion-reason patch: {e}")))?;
        match patch::<K, ()>(ctx, ns, &name, &patch_params(), &Patch::Json(ops)).await {
            Ok(written) => rv = written.resource_version(),
            Err(e) if is_not_found(&e) || is_conflict(&e) => return Ok(false),
            Err(e) => {
                return Err(e).ctx(|| format!("recording why {} {name} is deleted", K::kind(&())));
            }
        }
    }
    delete_unchanged::<K>(ctx, ns, &name, child.uid(), rv).await
}

/// Metadata of an owner reference to `child` (used by riders: not a controller reference).
pub fn plain_owner_ref<K: ChildObject>(child: &K) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: child.name_any(),
        uid: child.uid()?,
        controller: None,
        block_owner_deletion: None,
    })
}

/// Labels a child `upgrade-state=recyclable` with `reason`, stamping when it became so
/// (`recyclable-start-time`, read by expiry). A merge patch, so the rest of the child stays as
/// it is; the recycling rules decide when it goes.
pub async fn mark_recyclable<K: ChildObject>(
    ctx: &Ctx,
    child: &K,
    reason: &str,
) -> Result<K, Error> {
    ctx.ensure_leader()?;
    let ns = child.ns();
    let name = child.name_any();
    let mut patch = serde_json::json!({
        "metadata": {
            "labels": BTreeMap::from(numaplane_core::child::state_labels(
                numaplane_api::keys::upgrade_state::RECYCLABLE,
                reason,
            )),
        }
    });
    // Set once: expiry counts from the first time it became recyclable.
    let started = numaplane_api::keys::annotations::RECYCLABLE_START_TIME;
    if !child.annotations().contains_key(started) {
        patch["metadata"]["annotations"] = serde_json::json!({
            started: crate::status::now().0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        });
    }
    tracing::info!(child = %name, reason, "marking child recyclable");
    self::patch(ctx, ns, &name, &patch_params(), &Patch::Merge(&patch))
        .await
        .ctx(|| format!("marking {} {name} recyclable", K::kind(&())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn label_values() {
        assert!(super::valid_label_value("my-pipeline"));
        assert!(super::valid_label_value(&"a".repeat(63)));
        assert!(!super::valid_label_value(&"a".repeat(64)));
        assert!(!super::valid_label_value("a.b-"));
        assert!(!super::valid_label_value("a/b"));
    }
}
