//! Pods without a kubelet: the simulator creates plain core/v1 Pods and writes their status
//! itself (Running/Ready, or Pending with ImagePullBackOff for an unpullable image).

use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::OwnerReference};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use super::{
    Ctx, SimError,
    util::{A_REPLICA, FIELD_MANAGER, is_bad_image, now, post_params, rfc3339, selector_string},
};

/// Where a pod records a piece of bookkeeping (its template hash or its replica index).
#[derive(Clone, Copy, Debug)]
pub(crate) enum MetaKey {
    Label(&'static str),
    Annotation(&'static str),
}

/// How the pods of a set are named.
#[derive(Clone, Debug)]
pub(crate) enum Naming {
    /// `generateName = "<prefix><index>-"` (Numaflow vertex pods), index in an annotation.
    Generate(String),
    /// `<prefix><index>` (StatefulSet pods), with the StatefulSet's per-pod labels.
    Fixed(String),
    /// `generateName = prefix` (ReplicaSet-style pods), index in an annotation.
    Random(String),
}

/// A group of identical pods the simulator keeps at a count.
#[derive(Clone, Debug)]
pub(crate) struct PodSet {
    pub namespace: String,
    /// Labels that identify the set (every pod matching them belongs to it).
    pub selector: BTreeMap<String, String>,
    /// Full pod labels (a superset of `selector`).
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub naming: Naming,
    pub owner: OwnerReference,
    /// The PodSpec as JSON.
    pub spec: Value,
    /// Template hash: pods with another hash are replaced.
    pub hash: String,
    pub hash_key: MetaKey,
}

/// What the pods of a set look like after reconciling.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PodCounts {
    pub total: i64,
    pub updated: i64,
    pub ready: i64,
    pub updated_ready: i64,
    /// `(reason, message)` of the first unhealthy pod, e.g. `PodImagePullBackOff`.
    pub unhealthy: Option<(String, String)>,
}

fn pod_api(client: &Client, ns: &str) -> Api<Pod> {
    Api::namespaced(client.clone(), ns)
}

fn read_key(pod: &Pod, key: MetaKey) -> Option<String> {
    match key {
        MetaKey::Label(k) => pod.labels().get(k).cloned(),
        MetaKey::Annotation(k) => pod.annotations().get(k).cloned(),
    }
}

fn index_of(pod: &Pod, set: &PodSet) -> Option<i64> {
    match &set.naming {
        Naming::Fixed(prefix) => pod.name_any().strip_prefix(prefix.as_str())?.parse().ok(),
        Naming::Generate(_) | Naming::Random(_) => pod.annotations().get(A_REPLICA)?.parse().ok(),
    }
}

/// The pods of a set to keep, by index, and the rest.
struct Plan {
    kept: BTreeMap<i64, Pod>,
    surplus: Vec<Pod>,
}

impl Plan {
    fn new(set: &PodSet, desired: i64, pods: impl IntoIterator<Item = Pod>) -> Plan {
        let mut plan = Plan {
            kept: BTreeMap::new(),
            surplus: Vec::new(),
        };
        for pod in pods {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let idx = index_of(&pod, set)
                .filter(|i| *i >= 0 && *i < desired && !plan.kept.contains_key(i));
            let current = read_key(&pod, set.hash_key).as_deref() == Some(set.hash.as_str());
            match idx {
                Some(i) if current => {
                    plan.kept.insert(i, pod);
                }
                _ => plan.surplus.push(pod),
            }
        }
        plan
    }
}

/// Keeps exactly `desired` up-to-date pods (indices `0..desired`) and settles their status.
pub(crate) async fn reconcile(
    ctx: &Ctx,
    set: &PodSet,
    desired: i64,
) -> Result<PodCounts, SimError> {
    let api = pod_api(&ctx.client, &set.namespace);
    let (ns, selector) = (&set.namespace, &set.selector);
    // The cache plus our own writes it has yet to show; read live only when one stays unseen.
    let pods = match ctx
        .pod_writes
        .overlay(ns, selector, ctx.caches.pods.list(ns, selector))
    {
        Some(pods) => pods,
        None => {
            let lp = ListParams::default().labels(&selector_string(selector));
            let live = api.list(&lp).await?.items;
            ctx.pod_writes.forget(ns, selector);
            live
        }
    };
    let plan = Plan::new(set, desired, pods);
    for pod in &plan.surplus {
        delete_pod(&api, &pod.name_any()).await?;
        ctx.pod_writes.deleted(ns, selector, &pod.name_any());
    }
    let mut kept = plan.kept;
    for i in 0..desired {
        if kept.contains_key(&i) {
            continue;
        }
        let pod: Pod = serde_json::from_value(build(set, i)).map_err(anyhow::Error::from)?;
        let created = api.create(&post_params(), &pod).await?;
        ctx.pod_writes.wrote(ns, selector, &created);
        kept.insert(i, created);
    }
    let mut counts = PodCounts::default();
    for pod in kept.values_mut() {
        let before = pod.resource_version();
        if !settle(&api, pod).await? {
            // Gone meanwhile (perhaps before the cache ever showed our write): replaced next pass.
            ctx.pod_writes.deleted(ns, selector, &pod.name_any());
            continue;
        }
        if pod.resource_version() != before {
            ctx.pod_writes.wrote(ns, selector, pod);
        }
        counts.total += 1;
        counts.updated += 1;
        if is_ready(pod) {
            counts.ready += 1;
            counts.updated_ready += 1;
        } else if counts.unhealthy.is_none() {
            counts.unhealthy = unhealthy_reason(pod);
        }
    }
    Ok(counts)
}

/// Deletes every pod matching `selector` (e.g. the pods of a Vertex that is gone). Read live: it
/// is rare, and must not miss a pod created just before.
pub(crate) async fn delete_all(
    client: &Client,
    ns: &str,
    selector: &BTreeMap<String, String>,
) -> Result<(), SimError> {
    let api = pod_api(client, ns);
    let lp = ListParams::default().labels(&selector_string(selector));
    for pod in api.list(&lp).await?.items {
        delete_pod(&api, &pod.name_any()).await?;
    }
    Ok(())
}

/// Whether the cache holds a non-terminating pod matching `selector`.
pub(crate) fn any_cached(ctx: &Ctx, ns: &str, selector: &BTreeMap<String, String>) -> bool {
    ctx.caches
        .pods
        .list(ns, selector)
        .iter()
        .any(|p| p.metadata.deletion_timestamp.is_none())
}

/// Whether a non-terminating pod matching `selector` exists, read live.
pub(crate) async fn any_live(
    client: &Client,
    ns: &str,
    selector: &BTreeMap<String, String>,
) -> Result<bool, SimError> {
    let api = pod_api(client, ns);
    let lp = ListParams::default().labels(&selector_string(selector));
    Ok(api
        .list(&lp)
        .await?
        .items
        .iter()
        .any(|p| p.metadata.deletion_timestamp.is_none()))
}

async fn delete_pod(api: &Api<Pod>, name: &str) -> Result<(), SimError> {
    // No kubelet acknowledges a graceful deletion: delete at once.
    match api
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn build(set: &PodSet, index: i64) -> Value {
    let mut labels = set.labels.clone();
    let mut annotations = set.annotations.clone();
    match set.hash_key {
        MetaKey::Label(k) => labels.insert(k.into(), set.hash.clone()),
        MetaKey::Annotation(k) => annotations.insert(k.into(), set.hash.clone()),
    };
    let mut meta = json!({
        "namespace": set.namespace,
        "ownerReferences": [set.owner],
    });
    match &set.naming {
        Naming::Generate(prefix) => {
            meta["generateName"] = json!(format!("{prefix}{index}-"));
            annotations.insert(A_REPLICA.into(), index.to_string());
        }
        Naming::Random(prefix) => {
            meta["generateName"] = json!(prefix);
            annotations.insert(A_REPLICA.into(), index.to_string());
        }
        Naming::Fixed(prefix) => {
            let name = format!("{prefix}{index}");
            labels.insert("statefulset.kubernetes.io/pod-name".into(), name.clone());
            labels.insert("apps.kubernetes.io/pod-index".into(), index.to_string());
            meta["name"] = json!(name);
        }
    }
    meta["labels"] = json!(labels);
    meta["annotations"] = json!(annotations);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": set.spec})
}

fn images(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

fn wants_ready(pod: &Pod) -> bool {
    !images(pod).iter().any(|(_, img)| is_bad_image(img))
}

pub(crate) fn is_ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn unhealthy_reason(pod: &Pod) -> Option<(String, String)> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|cs| {
        let waiting = cs.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.clone()?;
        Some((
            format!("Pod{reason}"),
            format!(
                "Pod {} is unhealthy: container {} is waiting with reason {reason}",
                pod.name_any(),
                cs.name
            ),
        ))
    })
}

/// Whether the pod's status already is what the simulated kubelet would report.
fn settled(pod: &Pod) -> bool {
    let want_ready = wants_ready(pod);
    let want_phase = if want_ready { "Running" } else { "Pending" };
    let Some(status) = &pod.status else {
        return false;
    };
    let n_containers = images(pod).len();
    status.phase.as_deref() == Some(want_phase)
        && is_ready(pod) == want_ready
        && status.container_statuses.as_ref().map(Vec::len) == Some(n_containers)
}

/// Writes the status a kubelet would: Running and Ready, or Pending in ImagePullBackOff.
/// False when the pod is gone (a cached pod may have been deleted meanwhile).
async fn settle(api: &Api<Pod>, pod: &mut Pod) -> Result<bool, SimError> {
    if settled(pod) {
        return Ok(true);
    }
    let ready = wants_ready(pod);
    let t = rfc3339(now());
    let start = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|st| json!(st))
        .unwrap_or_else(|| json!(t));
    let container_statuses: Vec<Value> = images(pod)
        .into_iter()
        .map(|(name, image)| {
            if is_bad_image(&image) {
                json!({
                    "name": name, "image": image, "imageID": "", "ready": false,
                    "restartCount": 0, "started": false,
                    "state": {"waiting": {
                        "reason": "ImagePullBackOff",
                        "message": format!("Back-off pulling image \"{image}\""),
                    }},
                })
            } else {
                json!({
                    "name": name, "image": image, "imageID": format!("{image}@sha256:0"),
                    "ready": true, "restartCount": 0, "started": true,
                    "state": {"running": {"startedAt": t}},
                })
            }
        })
        .collect();
    let ready_str = if ready { "True" } else { "False" };
    let not_ready_reason = if ready {
        Value::Null
    } else {
        json!("ContainersNotReady")
    };
    let status = json!({
        "phase": if ready { "Running" } else { "Pending" },
        "startTime": start,
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": t},
            {"type": "Initialized", "status": "True", "lastTransitionTime": t},
            {"type": "Ready", "status": ready_str, "reason": not_ready_reason, "lastTransitionTime": t},
            {"type": "ContainersReady", "status": ready_str, "reason": not_ready_reason, "lastTransitionTime": t},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
        ],
        "containerStatuses": container_statuses,
    });
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let patch = Patch::Merge(json!({"status": status}));
    match api.patch_status(&pod.name_any(), &pp, &patch).await {
        Ok(patched) => *pod = patched,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    Ok(true)
}
