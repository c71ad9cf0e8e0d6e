//! Bringing the cluster to a rendered definition: server-side apply of each object (field
//! manager `numaplane`, forced, so hand edits of our fields are reverted), delete-and-recreate
//! of an object whose change the API server refuses as immutable, and pruning of objects this
//! NumaflowController applied before but no longer renders. Only objects this NumaflowController
//! owns (by UID) are ever updated or deleted: an object of the same name that it doesn't own is
//! left as it is and the pass refused; every delete carries the UID as a precondition.
//!
//! API calls are kept to what changed: a pass whose inputs (definition, spec, included kinds) are
//! those last applied only re-applies objects whose cached copy differs from what the last apply
//! returned, or that are gone. A full pass (new inputs, operator restart, or every
//! [`crate::context::RESYNC`]) checks every object against its cached copy, applies those that
//! do not hold the rendering (objects of kinds we don't watch always), and prunes.

use super::nc_ctx::{Applied, NcCtx};
use super::owned::{Cached, Seen, seen_after_apply};
use super::render::{ObjKey, RenderedObject};
use crate::children::FIELD_MANAGER;
use crate::error::{Error, KubeContext, is_not_found};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions,
    PropagationPolicy,
};
use kube::discovery::{ApiResource, Scope, verbs};
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::NumaflowController;
use numaplane_api::common::GroupVersionKind;
use numaplane_api::keys::labels;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use tracing::{debug, info, warn};

/// What a sync did.
#[derive(Debug, Default)]
pub struct Synced {
    pub applied: usize,
    pub recreated: usize,
    pub pruned: usize,
    pub seen: HashMap<ObjKey, Seen>,
    /// The health Deployment as this pass wrote it (fresher than the cache).
    pub deployment: Option<Deployment>,
}

impl Synced {
    pub fn changed(&self) -> bool {
        self.applied + self.recreated + self.pruned > 0
    }
}

/// Applies what needs applying and, on a full pass, prunes.
pub async fn sync(
    nctx: &NcCtx,
    nc: &NumaflowController,
    rendered: &[RenderedObject],
    previous: Option<&Applied>,
    full: bool,
    health_deployment: &str,
) -> Result<Synced, Error> {
    let ns = nc.ns();
    let mut out = Synced::default();
    for obj in rendered {
        let mut last = previous.and_then(|p| p.seen.get(&obj.key)).copied();
        let cached = nctx.owned.cached(&obj.key, ns);
        let needed = if full {
            // Nothing remembered (a restart) or a resync: the cached copy is enough when it
            // holds all this rendering sets, its stamp included (see `render::stamped`); it is
            // then what later passes compare with.
            let differs = nctx
                .owned
                .cached_value(&obj.key, ns)
                .map(|live| numaplane_core::json::first_difference(&as_stored(obj), &live));
            let held = matches!(differs, Some(None));
            if let Some(Some(path)) = &differs {
                debug!(kind = %obj.key.kind, name = %obj.key.name, %path, "cached copy differs from the rendering");
            }
            if let (true, Cached::Present(live)) = (held, &cached) {
                last = Some(*live);
            }
            !held
        } else {
            match cached {
                Cached::Unwatched => false,
                Cached::Missing => true,
                // A cache older than our apply proves nothing; a newer one with another
                // fingerprint was edited by someone else.
                Cached::Present(live) => last.is_none_or(|l| {
                    live.resource_version > l.resource_version && live.fingerprint != l.fingerprint
                }),
            }
        };
        if !needed {
            if let Some(l) = last {
                out.seen.insert(obj.key.clone(), l);
            }
            continue;
        }
        let (written, recreated) = apply_one(nctx, nc, ns, obj).await?;
        if recreated {
            out.recreated += 1;
        } else {
            out.applied += 1;
        }
        let json = serde_json::to_value(&written).unwrap_or_default();
        if let Some(seen) = seen_after_apply(&obj.key, &json) {
            out.seen.insert(obj.key.clone(), seen);
        }
        if obj.key.group == "apps"
            && obj.key.kind == "Deployment"
            && obj.key.name == health_deployment
        {
            out.deployment = serde_json::from_value(json).ok();
        }
    }
    if full {
        out.pruned = prune(nctx, nc, rendered).await?;
    }
    Ok(out)
}

/// The rendered object as the API server stores it, where that differs in form: a Secret's
/// `stringData` is kept base64-encoded in `data`.
fn as_stored(obj: &RenderedObject) -> std::borrow::Cow<'_, Value> {
    let string_data = match obj.body.get("stringData") {
        Some(Value::Object(m)) if obj.key.group.is_empty() && obj.key.kind == "Secret" => m,
        _ => return std::borrow::Cow::Borrowed(&obj.body),
    };
    let mut body = obj.body.clone();
    let mut data = body
        .get("data")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (k, v) in string_data {
        let bytes = ByteString(v.as_str().unwrap_or_default().as_bytes().to_vec());
        data.insert(k.clone(), serde_json::to_value(bytes).unwrap_or_default());
    }
    if let Some(m) = body.as_object_mut() {
        m.remove("stringData");
        m.insert("data".into(), Value::Object(data));
    }
    std::borrow::Cow::Owned(body)
}

fn gvk(obj: &RenderedObject) -> GroupVersionKind {
    GroupVersionKind {
        group: obj.key.group.clone(),
        version: obj.version().to_string(),
        kind: obj.key.kind.clone(),
    }
}

/// Whether the API server refused a change of an immutable field (a Deployment's selector, a
/// RoleBinding's roleRef, …).
fn is_immutable(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422
        && (s.message.contains("field is immutable") || s.message.contains("cannot change roleRef")))
}

/// Whether `owner_references` (JSON) hold a reference to `uid`.
fn refers_to(owner_references: Option<&Value>, uid: &str) -> bool {
    owner_references
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
        })
}

/// The refusal to touch `obj`'s live namesake, which `nc` doesn't own.
fn not_owned(nc: &NumaflowController, ns: &str, obj: &RenderedObject) -> Error {
    Error::NotOwnedObject {
        kind: obj.key.kind.clone(),
        name: obj.key.name.clone(),
        namespace: ns.to_string(),
        owner: format!("NumaflowController {}", nc.name_any()),
    }
}

/// The UID of the live object `obj` names if `nc` owns it (by UID), `None` if there is none;
/// refused if someone else's object has that name. The cached copy answers when it is ours
/// (a copy older than a replacement is caught by the UID the apply then carries); otherwise
/// the object is read.
async fn owned_uid(
    nctx: &NcCtx,
    nc: &NumaflowController,
    api: &Api<DynamicObject>,
    ns: &str,
    obj: &RenderedObject,
) -> Result<Option<String>, Error> {
    let nc_uid = nc.uid().unwrap_or_default();
    if let Some(cached) = nctx.owned.cached_value(&obj.key, ns)
        && refers_to(cached.pointer("/metadata/ownerReferences"), &nc_uid)
        && let Some(uid) = cached.pointer("/metadata/uid").and_then(Value::as_str)
    {
        return Ok(Some(uid.to_string()));
    }
    let (kind, name) = (&obj.key.kind, &obj.key.name);
    match api
        .get_metadata_opt(name)
        .await
        .ctx(|| format!("reading {kind} {name}"))?
    {
        None => Ok(None),
        Some(live) if live.owner_references().iter().any(|o| o.uid == nc_uid) => Ok(live.uid()),
        Some(_) => Err(not_owned(nc, ns, obj)),
    }
}

/// Server-side applies one object; returns it as written and whether it had to be recreated.
/// Only an object this NumaflowController owns is updated, and the apply carries its UID, so
/// an object replaced meanwhile by someone else's is refused by the API server instead.
async fn apply_one(
    nctx: &NcCtx,
    nc: &NumaflowController,
    ns: &str,
    obj: &RenderedObject,
) -> Result<(DynamicObject, bool), Error> {
    let ctx = &nctx.ctx;
    ctx.ensure_leader()?;
    let ar = crate::riders::resource(ctx, &gvk(obj)).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
    let (kind, name) = (&obj.key.kind, &obj.key.name);
    let mut body = obj.body.clone();
    let uid = owned_uid(nctx, nc, &api, ns, obj).await?;
    // Forced only over our own object (its uid in the body: replaced meanwhile, it is refused).
    // A create is not forced: an object someone else made under the name meanwhile conflicts
    // instead of being taken over.
    let pp = if uid.is_some() {
        PatchParams::apply(FIELD_MANAGER).force()
    } else {
        PatchParams::apply(FIELD_MANAGER)
    };
    if let Some(uid) = uid
        && let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("uid".into(), Value::String(uid));
    }
    debug!(%kind, %name, "applying");
    match api.patch(name, &pp, &Patch::Apply(&body)).await {
        Ok(written) => Ok((written, false)),
        Err(e) if is_immutable(&e) => {
            // Also what a UID that no longer matches gets: only our own object is deleted.
            let live = api
                .get_metadata_opt(name)
                .await
                .ctx(|| format!("reading {kind} {name}"))?;
            let nc_uid = nc.uid().unwrap_or_default();
            let uid = match live {
                None => None,
                Some(l) if l.owner_references().iter().any(|o| o.uid == nc_uid) => l.uid(),
                Some(_) => return Err(not_owned(nc, ns, obj)),
            };
            info!(%kind, %name, error = %e, "immutable field changed: deleting and recreating");
            if let Some(uid) = uid {
                delete(&api, name, uid)
                    .await
                    .ctx(|| format!("deleting {kind} {name}"))?;
            }
            let written = api
                .patch(
                    name,
                    &PatchParams::apply(FIELD_MANAGER),
                    &Patch::Apply(&obj.body),
                )
                .await
                .ctx(|| format!("recreating {kind} {name}"))?;
            Ok((written, true))
        }
        Err(e) => Err(e).ctx(|| format!("applying {kind} {name}")),
    }
}

/// Deletes the object `name` only if it is still the one with `uid` (ours).
async fn delete(api: &Api<DynamicObject>, name: &str, uid: String) -> Result<(), kube::Error> {
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes objects of the `includedResources` kinds in the namespace that carry this
/// NumaflowController's tracking label and an owner reference to it (by UID) but are no longer
/// rendered. Read live, since a stale cache must never delete. Returns how many were deleted.
async fn prune(
    nctx: &NcCtx,
    nc: &NumaflowController,
    rendered: &[RenderedObject],
) -> Result<usize, Error> {
    let ctx = &nctx.ctx;
    let (ns, name) = (nc.ns(), nc.name_any());
    let Some(uid) = nc.uid() else {
        return Ok(0);
    };
    let keep: BTreeSet<&ObjKey> = rendered.iter().map(|o| &o.key).collect();
    let lp = ListParams::default().labels(&format!("{}={name}", labels::TRACKING_ID));
    let mut pruned = 0;
    for ar in included_kinds(nctx).await? {
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        let live = api
            .list_metadata(&lp)
            .await
            .ctx(|| format!("listing {} of {name}", ar.plural))?;
        for item in live.items {
            let key = ObjKey {
                group: ar.group.clone(),
                kind: ar.kind.clone(),
                name: item.name_any(),
            };
            let ours = item.owner_references().iter().any(|o| o.uid == uid);
            let Some(item_uid) = item.uid() else {
                continue;
            };
            if !ours || keep.contains(&key) || item.meta().deletion_timestamp.is_some() {
                continue;
            }
            ctx.ensure_leader()?;
            info!(kind = %key.kind, name = %key.name, "pruning object no longer in the definition");
            delete(&api, &key.name, item_uid)
                .await
                .ctx(|| format!("pruning {} {}", key.kind, key.name))?;
            pruned += 1;
        }
    }
    Ok(pruned)
}

/// The namespaced, listable API resources `includedResources` names (discovered once per rule).
async fn included_kinds(nctx: &NcCtx) -> Result<Vec<ApiResource>, Error> {
    let rules = nctx.ctx.settings.controller().included_resources.clone();
    let mut out = Vec::new();
    for (group, kind) in rules.rules() {
        let cache_key = (group.clone(), kind.clone());
        let cached = nctx
            .included
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&cache_key)
            .cloned();
        let resources = match cached {
            Some(r) => r,
            None => {
                let found = discover(nctx, group, kind).await?;
                // Nothing found is not remembered: the kind may be installed later.
                if !found.is_empty() {
                    nctx.included
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(cache_key, found.clone());
                }
                found
            }
        };
        out.extend(resources);
    }
    Ok(out)
}

async fn discover(nctx: &NcCtx, group: &str, kind: &str) -> Result<Vec<ApiResource>, Error> {
    let api_group = match kube::discovery::group(&nctx.ctx.client, group).await {
        Ok(g) => g,
        Err(e) if is_not_found(&e) => {
            warn!(%group, "includedResources names an API group the cluster doesn't serve");
            return Ok(Vec::new());
        }
        Err(e) => return Err(e).ctx(|| format!("discovering API group {group:?}")),
    };
    let found: Vec<ApiResource> = api_group
        .recommended_resources()
        .into_iter()
        .filter(|(ar, caps)| {
            (kind.is_empty() || ar.kind == *kind)
                && caps.scope == Scope::Namespaced
                && caps.supports_operation(verbs::LIST)
                && caps.supports_operation(verbs::DELETE)
        })
        .map(|(ar, _)| ar)
        .collect();
    if found.is_empty() {
        warn!(%group, %kind, "includedResources names no namespaced kind the cluster serves: nothing of it is pruned");
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered(kind: &str, body: Value) -> RenderedObject {
        RenderedObject {
            api_version: "v1".into(),
            key: ObjKey {
                group: String::new(),
                kind: kind.into(),
                name: "s".into(),
            },
            body,
        }
    }

    #[test]
    fn a_secrets_string_data_is_compared_as_stored() {
        let secret = rendered(
            "Secret",
            json!({"data": {"a": "eA=="}, "stringData": {"b": "<ID>"}}),
        );
        assert_eq!(
            *as_stored(&secret),
            json!({"data": {"a": "eA==", "b": "PElEPg=="}})
        );
        let cm = rendered("ConfigMap", json!({"stringData": {"b": "x"}}));
        assert_eq!(*as_stored(&cm), cm.body, "only Secrets");
    }
}
