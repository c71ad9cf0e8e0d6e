//! What kube-controller-manager's workload controllers and the kubelet would do for the
//! Deployments and StatefulSets of Numaflow: pods from the template and the workload status.
//! Handled: Deployments named `numaflow-controller[-<id>]` or whose pod template is
//! `app.kubernetes.io/part-of=numaflow` (daemons, the Numaflow server), and StatefulSets labelled
//! `app.kubernetes.io/component=isbsvc`. Pods are owned directly by the workload (no ReplicaSet).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{Controller, controller::Action},
};
use serde_json::{Value, json};

use super::{
    Ctx, SimError,
    cache::{all, labelled},
    controller_config, drive, error_policy, in_turn,
    pods::{self, MetaKey, Naming, PodCounts, PodSet},
    util::{L_COMPONENT, L_PART_OF, now, owner_ref, parse_time, post_params, rfc3339, stable_hash},
};

const DEFAULT_PROGRESS_DEADLINE_SECONDS: i64 = 600;

pub(crate) async fn run_deployments(ctx: Arc<Ctx>) {
    let caches = &ctx.caches;
    let turn = in_turn(
        ctx.config.concurrency,
        caches.deployments.store(),
        (),
        reconcile_deployment,
    );
    let stream = Controller::for_stream(
        caches.deployments.subscribe(all),
        caches.deployments.store(),
    )
    .owns_stream(caches.pods.subscribe(all))
    .with_config(controller_config(&ctx))
    .run(turn, error_policy, ctx);
    drive("deployment", stream).await;
}

pub(crate) async fn run_statefulsets(ctx: Arc<Ctx>) {
    let caches = &ctx.caches;
    let turn = in_turn(
        ctx.config.concurrency,
        caches.statefulsets.store(),
        (),
        reconcile_statefulset,
    );
    let stream = Controller::for_stream(
        caches.statefulsets.subscribe(all),
        caches.statefulsets.store(),
    )
    .owns_stream(caches.pods.subscribe(labelled(L_COMPONENT, "isbsvc")))
    .with_config(controller_config(&ctx))
    .run(turn, error_policy, ctx);
    drive("statefulset", stream).await;
}

/// Whether the simulator plays the Deployment controller for this Deployment.
pub(crate) fn handles_deployment(d: &Deployment) -> bool {
    let name = d.name_any();
    let numaflow_template = d
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.as_ref())
        .and_then(|l| l.get(L_PART_OF))
        .is_some_and(|v| v == "numaflow");
    name == "numaflow-controller" || name.starts_with("numaflow-controller-") || numaflow_template
}

fn template_parts(template: &Value) -> (BTreeMap<String, String>, Value) {
    let labels = template
        .pointer("/metadata/labels")
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default();
    let spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    (labels, spec)
}

fn match_labels(selector: Option<&Value>) -> BTreeMap<String, String> {
    selector
        .and_then(|s| s.get("matchLabels"))
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default()
}

async fn reconcile_deployment(obj: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    if !handles_deployment(&obj) || obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    // The cached copy: the status write carries its resourceVersion.
    let d = Deployment::clone(&obj);
    let spec = serde_json::to_value(&d.spec).map_err(anyhow::Error::from)?;
    let desired = spec.get("replicas").and_then(Value::as_i64).unwrap_or(1);
    let template = spec.get("template").cloned().unwrap_or_else(|| json!({}));
    let hash: String = stable_hash(&template).chars().take(10).collect();
    let (mut labels, pod_spec) = template_parts(&template);
    labels.insert("pod-template-hash".into(), hash.clone());
    let mut selector = match_labels(spec.get("selector"));
    if selector.is_empty() {
        selector = labels.clone();
        selector.remove("pod-template-hash");
    }
    let set = PodSet {
        namespace: ns,
        selector,
        labels,
        annotations: BTreeMap::new(),
        naming: Naming::Random(format!("{}-{hash}-", d.name_any())),
        owner: owner_ref(
            "apps/v1",
            "Deployment",
            &d.name_any(),
            &d.uid().unwrap_or_default(),
        ),
        spec: pod_spec,
        hash: hash.clone(),
        hash_key: MetaKey::Label("pod-template-hash"),
    };
    let paused = spec.get("paused").and_then(Value::as_bool).unwrap_or(false);
    let counts = if paused {
        PodCounts::default()
    } else {
        pods::reconcile(&ctx, &set, desired).await?
    };
    let rs_name = format!("{}-{hash}", d.name_any());
    let deadline_s = spec
        .get("progressDeadlineSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    let (status, requeue) = deployment_status(&d, desired, &counts, &rs_name, deadline_s);
    write_workload_status(&api, &d, status).await?;
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// The status a Deployment controller writes; with the time to look again for the progress deadline.
fn deployment_status(
    d: &Deployment,
    desired: i64,
    c: &PodCounts,
    rs_name: &str,
    deadline_s: i64,
) -> (Value, Option<Duration>) {
    let t = now();
    let old = serde_json::to_value(&d.status).unwrap_or(Value::Null);
    let old_cond = |ty: &str| {
        old.get("conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
            .cloned()
    };
    let cond = |ty: &str, status: &str, reason: &str, message: String| {
        let prev = old_cond(ty);
        let same = prev
            .as_ref()
            .is_some_and(|p| p["status"] == status && p["reason"] == reason);
        let transition = prev
            .as_ref()
            .filter(|p| p["status"] == status)
            .and_then(|p| p.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(rfc3339(t)));
        let update = prev
            .as_ref()
            .filter(|_| same)
            .and_then(|p| p.get("lastUpdateTime").cloned())
            .unwrap_or_else(|| json!(rfc3339(t)));
        json!({"type": ty, "status": status, "reason": reason, "message": message,
               "lastUpdateTime": update, "lastTransitionTime": transition})
    };
    let available = c.ready;
    let complete = c.updated_ready >= desired && c.total == c.updated;
    let available_cond = if available >= desired {
        cond(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
        )
    } else {
        cond(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
        )
    };
    let mut requeue = None;
    let progressing = if complete {
        cond(
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
        )
    } else {
        let updating = cond(
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{rs_name}\" is progressing."),
        );
        let prev_reason = old_cond("Progressing").map(|p| p["reason"].clone());
        let since = updating["lastUpdateTime"]
            .as_str()
            .and_then(parse_time)
            .unwrap_or(t);
        let deadline = since + chrono::Duration::seconds(deadline_s);
        if prev_reason.as_ref().and_then(Value::as_str) == Some("ProgressDeadlineExceeded")
            || t >= deadline
        {
            cond(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                format!("ReplicaSet \"{rs_name}\" has timed out progressing."),
            )
        } else {
            requeue = (deadline - t).to_std().ok();
            updating
        }
    };
    let mut status = json!({
        "observedGeneration": d.metadata.generation.unwrap_or(0),
        "replicas": c.total,
        "updatedReplicas": c.updated,
        "readyReplicas": c.ready,
        "availableReplicas": available,
        "conditions": [available_cond, progressing],
    });
    if desired > available {
        status["unavailableReplicas"] = json!(desired - available);
    }
    (status, requeue)
}

async fn reconcile_statefulset(obj: Arc<StatefulSet>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &ns);
    // The cached copy: the status write carries its resourceVersion.
    let sts = StatefulSet::clone(&obj);
    let spec = serde_json::to_value(&sts.spec).map_err(anyhow::Error::from)?;
    let desired = spec.get("replicas").and_then(Value::as_i64).unwrap_or(1);
    let template = spec.get("template").cloned().unwrap_or_else(|| json!({}));
    let revision = format!(
        "{}-{}",
        sts.name_any(),
        stable_hash(&template).chars().take(10).collect::<String>()
    );
    let (labels, pod_spec) = template_parts(&template);
    let mut selector = match_labels(spec.get("selector"));
    if selector.is_empty() {
        selector = labels.clone();
    }
    let set = PodSet {
        namespace: ns,
        selector,
        labels,
        annotations: BTreeMap::new(),
        naming: Naming::Fixed(format!("{}-", sts.name_any())),
        owner: owner_ref(
            "apps/v1",
            "StatefulSet",
            &sts.name_any(),
            &sts.uid().unwrap_or_default(),
        ),
        spec: pod_spec,
        hash: revision.clone(),
        hash_key: MetaKey::Label("controller-revision-hash"),
    };
    let c = pods::reconcile(&ctx, &set, desired).await?;
    let status = json!({
        "observedGeneration": sts.metadata.generation.unwrap_or(0),
        "replicas": c.total,
        "readyReplicas": c.ready,
        "availableReplicas": c.ready,
        "currentReplicas": c.updated,
        "updatedReplicas": c.updated,
        "currentRevision": revision,
        "updateRevision": revision,
    });
    write_workload_status(&api, &sts, status).await?;
    Ok(Action::await_change())
}

/// Replaces the status of a typed workload when it changed (resourceVersion-guarded).
async fn write_workload_status<K>(api: &Api<K>, obj: &K, status: Value) -> Result<(), SimError>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    // The apiserver drops zero counters (`omitempty`): compare like with like.
    let mut status = status;
    if let Some(m) = status.as_object_mut() {
        m.retain(|_, v| v.as_i64() != Some(0));
    }
    let mut v = serde_json::to_value(obj).map_err(anyhow::Error::from)?;
    if v.get("status") == Some(&status) {
        return Ok(());
    }
    v["status"] = status;
    let updated: K = serde_json::from_value(v).map_err(anyhow::Error::from)?;
    api.replace_status(&obj.name_any(), &post_params(), &updated)
        .await?;
    Ok(())
}
