//! The objects a Pipeline owns: its Vertices `<pipeline>-<vertex>` (B.2, B.4, B.7 step 4) and the
//! daemon Deployment `<pipeline>-daemon`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams},
};
use serde_json::{Value, json};

use super::{
    Ctx, SimError,
    pipeline::{desired_phase, vertex_specs},
    pods,
    util::{
        A_HASH, L_COMPONENT, L_MANAGED_BY, L_PART_OF, L_PIPELINE, L_VERTEX, NUMAFLOW_IMAGE, at,
        bool_at, clamp_to_scale, dyn_api, dyn_owner_ref, i64_at, labels, post_params, remove_key,
        scale_range, selector_string, set_key, stable_hash, str_at, vertex_resource,
    },
};

pub(crate) fn daemon_name(pipeline: &str) -> String {
    format!("{pipeline}-daemon")
}

/// The Vertex spec Numaflow derives from a pipeline vertex, without `replicas` and `lifecycle`
/// (which the hash excludes).
fn build_spec(pl_name: &str, pl_spec: &Value, v: &Value) -> Value {
    let mut s = v.clone();
    remove_key(&mut s, "replicas");
    remove_key(&mut s, "lifecycle");
    let name = str_at(v, &["name"]).unwrap_or("");
    set_key(&mut s, "pipelineName", json!(pl_name));
    if let Some(isb) = str_at(pl_spec, &["interStepBufferServiceName"]).filter(|n| !n.is_empty()) {
        set_key(&mut s, "interStepBufferServiceName", json!(isb));
    }
    let edges = at(pl_spec, &["edges"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let from: Vec<Value> = edges
        .iter()
        .filter(|e| str_at(e, &["to"]) == Some(name))
        .cloned()
        .collect();
    let to: Vec<Value> = edges
        .iter()
        .filter(|e| str_at(e, &["from"]) == Some(name))
        .cloned()
        .collect();
    if !from.is_empty() {
        set_key(&mut s, "fromEdges", json!(from));
    }
    if !to.is_empty() {
        set_key(&mut s, "toEdges", json!(to));
    }
    if let Some(w) = at(pl_spec, &["watermark"]) {
        set_key(&mut s, "watermark", w.clone());
    }
    if let (Some(l), None) = (at(pl_spec, &["limits"]), s.get("limits")) {
        set_key(&mut s, "limits", l.clone());
    }
    s
}

fn vertex_selector(pl_name: &str) -> BTreeMap<String, String> {
    labels(&[(L_PIPELINE, pl_name)])
}

/// Creates, updates and deletes Vertices to match the pipeline; returns them by short name.
pub(crate) async fn sync_vertices(
    ctx: &Ctx,
    pl: &DynamicObject,
    pl_spec: &Value,
    lifecycle_change: bool,
) -> Result<BTreeMap<String, DynamicObject>, SimError> {
    let ns = pl.namespace().unwrap_or_default();
    let pl_name = pl.name_any();
    let pl_uid = pl.uid().unwrap_or_default();
    let api = dyn_api(&ctx.client, &ns, &vertex_resource());
    // Read live while pausing or paused: the pause decision (drainedOnPause) is taken on these
    // Vertices' status, and with a lagging cache the recycling force-drain test failed in 2 of
    // 5 runs. Otherwise the cache will do (a label-selected list costs the API server a scan of
    // every Vertex in the namespace); a Vertex missing from it fails to be created again.
    let selector = vertex_selector(&pl_name);
    let listed = if lifecycle_change {
        let lp = ListParams::default().labels(&selector_string(&selector));
        api.list(&lp).await?.items
    } else {
        let cached = ctx.caches.vertices.list(&ns, &selector);
        cached.iter().map(|v| DynamicObject::clone(v)).collect()
    };
    let mut existing: BTreeMap<String, DynamicObject> = BTreeMap::new();
    for v in listed {
        let ours = v.owner_references().iter().any(|o| o.uid == pl_uid);
        if ours {
            existing.insert(v.name_any(), v);
        } else {
            // Left over from an earlier pipeline of the same name, awaiting garbage collection.
            delete_vertex(ctx, &api, &ns, &pl_name, &v).await?;
        }
    }
    let mut out = BTreeMap::new();
    for v in vertex_specs(pl_spec) {
        let short = str_at(&v, &["name"]).unwrap_or("").to_owned();
        let full = format!("{pl_name}-{short}");
        let built = build_spec(&pl_name, pl_spec, &v);
        let hash = stable_hash(&built);
        let obj = match existing.remove(&full) {
            None => {
                let replicas = if lifecycle_change {
                    0
                } else {
                    clamp_to_scale(&built, 1)
                };
                let mut spec = built;
                set_key(&mut spec, "replicas", json!(replicas));
                set_key(
                    &mut spec,
                    "lifecycle",
                    json!({"desiredPhase": desired_phase(pl_spec)}),
                );
                let obj = json!({
                    "apiVersion": vertex_resource().api_version,
                    "kind": "Vertex",
                    "metadata": {
                        "name": full,
                        "namespace": ns,
                        "labels": labels(&[
                            (L_COMPONENT, "vertex"),
                            (L_MANAGED_BY, "pipeline-controller"),
                            (L_PART_OF, "numaflow"),
                            (L_PIPELINE, &pl_name),
                            (L_VERTEX, &short),
                        ]),
                        "annotations": {A_HASH: hash},
                        "ownerReferences": [dyn_owner_ref(pl, "Pipeline")],
                    },
                    "spec": spec,
                });
                let obj: DynamicObject =
                    serde_json::from_value(obj).map_err(anyhow::Error::from)?;
                match api.create(&post_params(), &obj).await {
                    Ok(created) => created,
                    // Created moments ago and not yet in the cache: take it as it is now.
                    Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(&full).await? {
                        Some(live) if live.owner_references().iter().any(|o| o.uid == pl_uid) => {
                            live
                        }
                        // Left over from an earlier pipeline of the same name: clear it, retry.
                        Some(foreign) => {
                            delete_vertex(ctx, &api, &ns, &pl_name, &foreign).await?;
                            return Err(kube::Error::Api(e).into());
                        }
                        None => return Err(kube::Error::Api(e).into()),
                    },
                    Err(e) => return Err(e.into()),
                }
            }
            Some(old) if old.annotations().get(A_HASH) != Some(&hash) => {
                let old_spec = old.data.get("spec").cloned().unwrap_or_else(|| json!({}));
                let mut spec = built;
                // Old replicas survive if still in range; null (slow resume) stays null.
                if let Some(r) = i64_at(&old_spec, &["replicas"]) {
                    let (min, max) = scale_range(&spec);
                    let keep = bool_at(&spec, &["scale", "disabled"]) || (min..=max).contains(&r);
                    let r = if keep { r } else { clamp_to_scale(&spec, r) };
                    set_key(&mut spec, "replicas", json!(r));
                }
                if let Some(lc) = old_spec.get("lifecycle") {
                    set_key(&mut spec, "lifecycle", lc.clone());
                }
                let mut updated = old.clone();
                updated.data["spec"] = spec;
                updated.annotations_mut().insert(A_HASH.into(), hash);
                api.replace(&full, &post_params(), &updated).await?
            }
            Some(old) => old,
        };
        out.insert(short, obj);
    }
    for stale in existing.values() {
        delete_vertex(ctx, &api, &ns, &pl_name, stale).await?;
    }
    Ok(out)
}

async fn delete_vertex(
    ctx: &Ctx,
    api: &Api<DynamicObject>,
    ns: &str,
    pl_name: &str,
    v: &DynamicObject,
) -> Result<(), SimError> {
    match api.delete(&v.name_any(), &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    // Pods would go with the Vertex through garbage collection; do not rely on it.
    let short = v.labels().get(L_VERTEX).cloned().unwrap_or_default();
    pods::delete_all(
        &ctx.client,
        ns,
        &labels(&[
            (L_COMPONENT, "vertex"),
            (L_PIPELINE, pl_name),
            (L_VERTEX, &short),
        ]),
    )
    .await
}

/// Creates the daemon Deployment (one pod) when missing; it stays while the pipeline is paused.
/// Returns it as read or created (`None` if it vanished meanwhile), for the health check.
pub(crate) async fn sync_daemon(
    ctx: &Ctx,
    pl: &DynamicObject,
) -> Result<Option<Deployment>, SimError> {
    let ns = pl.namespace().unwrap_or_default();
    let pl_name = pl.name_any();
    let name = daemon_name(&pl_name);
    // A daemon missing only from the cache makes the create below fail with AlreadyExists.
    if let Some(existing) = ctx.caches.deployments.get(&ns, &name) {
        return Ok(Some(Deployment::clone(&existing)));
    }
    let pod_labels = labels(&[
        (L_COMPONENT, "daemon"),
        (L_MANAGED_BY, "pipeline-controller"),
        (L_PART_OF, "numaflow"),
        (L_PIPELINE, &pl_name),
    ]);
    let d = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": pod_labels,
            "ownerReferences": [dyn_owner_ref(pl, "Pipeline")],
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"containers": [{"name": "main", "image": NUMAFLOW_IMAGE, "args": ["daemon-server"]}]},
            },
        },
    });
    let d: Deployment = serde_json::from_value(d).map_err(anyhow::Error::from)?;
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    match api.create(&post_params(), &d).await {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(api.get_opt(&name).await?),
        Err(e) => Err(e.into()),
    }
}
