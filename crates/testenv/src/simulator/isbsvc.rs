//! The InterStepBufferService controller (B.6): a JetStream StatefulSet `isbsvc-<name>-js`,
//! phases Pending → Running (Failed for an unknown version), conditions from the StatefulSet.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, Patch},
    runtime::{Controller, controller::Action},
};
use serde_json::{Value, json};

use super::{
    Ctx, SimError,
    cache::all,
    controller_config, drive, error_policy, in_turn,
    pipeline::patch_params,
    util::{
        A_HASH, L_COMPONENT, L_ISBSVC, L_MANAGED_BY, L_PART_OF, at, dyn_api, dyn_owner_ref,
        generation, i64_at, init_conditions, isbsvc_resource, labels, post_params, set_condition,
        set_key, stable_hash, status_of, str_at, write_status,
    },
};

/// Numaflow adds it only when JetStream persistence is configured.
const FINALIZER: &str = "isbsvc-controller";
const CONDITIONS: [&str; 3] = ["ChildrenResourcesHealthy", "Configured", "Deployed"];

/// JetStream versions of the Numaflow controller config (v1.5.2 to v1.8.1) and their NATS image.
const JETSTREAM_VERSIONS: [&str; 15] = [
    "latest",
    "2.8.1",
    "2.8.1-alpine",
    "2.8.3",
    "2.8.3-alpine",
    "2.9.0",
    "2.9.0-alpine",
    "2.9.6",
    "2.9.8",
    "2.9.15",
    "2.10.3",
    "2.10.11",
    "2.10.17",
    "2.10.29",
    "2.12.7",
];

pub(crate) async fn run(ctx: Arc<Ctx>) {
    let caches = &ctx.caches;
    let turn = in_turn(
        ctx.config.concurrency,
        caches.isbsvcs.store(),
        isbsvc_resource(),
        reconcile,
    );
    let stream = Controller::for_stream_with(
        caches.isbsvcs.subscribe(all),
        caches.isbsvcs.store(),
        isbsvc_resource(),
    )
    .owns_stream(caches.statefulsets.subscribe(all))
    .with_config(controller_config(&ctx))
    .run(turn, error_policy, ctx);
    drive("isbsvc", stream).await;
}

pub(crate) fn statefulset_name(isb: &str) -> String {
    format!("isbsvc-{isb}-js")
}

/// JetStream replicas: default 3, and fewer than 3 is raised to 3.
fn jetstream_replicas(spec: &Value) -> i64 {
    i64_at(spec, &["jetstream", "replicas"]).unwrap_or(3).max(3)
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    let ns = obj.namespace().unwrap_or_default();
    let api = dyn_api(&ctx.client, &ns, &isbsvc_resource());
    // The cached copy: every write to it carries its resourceVersion.
    let mut isb = DynamicObject::clone(&obj);
    let name = isb.name_any();
    let has_finalizer = isb.finalizers().iter().any(|f| f == FINALIZER);
    if isb.metadata.deletion_timestamp.is_some() {
        if has_finalizer {
            set_finalizers(
                &api,
                &isb,
                isb.finalizers()
                    .iter()
                    .filter(|f| *f != FINALIZER)
                    .cloned()
                    .collect(),
            )
            .await?;
        }
        return Ok(Action::await_change());
    }
    let spec = isb.data.get("spec").cloned().unwrap_or_else(|| json!({}));
    if at(&spec, &["jetstream", "persistence"]).is_some() && !has_finalizer {
        let mut f = isb.finalizers().to_vec();
        f.push(FINALIZER.to_owned());
        isb = set_finalizers(&api, &isb, f).await?;
    }
    let mut st = status_of(&isb);
    init_conditions(&mut st, &CONDITIONS);
    set_key(&mut st, "observedGeneration", json!(generation(&isb)));
    if str_at(&st, &["phase"]).unwrap_or("").is_empty() {
        // Numaflow starts every ISB service in Pending before installing anything.
        set_key(&mut st, "phase", json!("Pending"));
        write_status(&api, &isb, st).await?;
        return Ok(Action::await_change());
    }

    let Some(js) = spec.get("jetstream") else {
        let msg = if spec.get("redis").is_some() {
            "invalid ISB Service spec: redis is not supported"
        } else {
            "invalid ISB Service spec: jetstream is required"
        };
        set_condition(&mut st, "Configured", "False", "InvalidSpec", msg);
        set_key(&mut st, "phase", json!("Failed"));
        set_key(&mut st, "message", json!(msg));
        write_status(&api, &isb, st).await?;
        return Ok(Action::await_change());
    };
    set_condition(
        &mut st,
        "Configured",
        "True",
        "Successful",
        "Successfully configured",
    );
    let version = str_at(js, &["version"]).unwrap_or("");
    if !JETSTREAM_VERSIONS.contains(&version) {
        let msg = format!("failed to get jetstream version {version:?}: unsupported version");
        set_condition(
            &mut st,
            "Deployed",
            "False",
            "JetStreamStatefulSetFailed",
            &msg,
        );
        set_key(&mut st, "phase", json!("Failed"));
        set_key(&mut st, "message", json!(msg));
        write_status(&api, &isb, st).await?;
        return Ok(Action::await_change());
    }

    let sts = ensure_statefulset(&ctx, &isb, &spec, version).await?;
    set_condition(
        &mut st,
        "Deployed",
        "True",
        "Successful",
        "Successfully deployed",
    );
    set_key(&mut st, "phase", json!("Running"));
    set_key(&mut st, "message", json!(""));
    let (s, r, m) = statefulset_health(&sts);
    set_condition(&mut st, "ChildrenResourcesHealthy", s, r, &m);
    set_key(&mut st, "type", json!("jetstream"));
    set_key(
        &mut st,
        "config",
        json!({"jetstream": {
            "url": format!("nats://isbsvc-{name}-js-svc.{ns}.svc:4222"),
            "auth": {"basic": {
                "user": {"name": format!("isbsvc-{name}-js-client-auth"), "key": "client-auth-user"},
                "password": {"name": format!("isbsvc-{name}-js-client-auth"), "key": "client-auth-password"},
            }},
            "streamConfig": "",
        }}),
    );
    write_status(&api, &isb, st).await?;
    Ok(Action::await_change())
}

async fn set_finalizers(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    f: Vec<String>,
) -> Result<DynamicObject, SimError> {
    let patch = json!({"metadata": {"finalizers": f, "resourceVersion": obj.resource_version()}});
    Ok(api
        .patch(&obj.name_any(), &patch_params(), &Patch::Merge(patch))
        .await?)
}

/// Creates or updates the StatefulSet; the workloads controller runs its pods and status.
async fn ensure_statefulset(
    ctx: &Ctx,
    isb: &DynamicObject,
    spec: &Value,
    version: &str,
) -> Result<StatefulSet, SimError> {
    let ns = isb.namespace().unwrap_or_default();
    let name = isb.name_any();
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &ns);
    let sts_name = statefulset_name(&name);
    let selector = labels(&[
        (L_COMPONENT, "isbsvc"),
        (L_ISBSVC, &name),
        (L_MANAGED_BY, "isbsvc-controller"),
        (L_PART_OF, "numaflow"),
    ]);
    let image = match at(spec, &["jetstream", "containerTemplate", "image"]).and_then(Value::as_str)
    {
        Some(i) => i.to_owned(),
        None => format!("nats:{version}"),
    };
    let sts_spec = json!({
        "replicas": jetstream_replicas(spec),
        "serviceName": format!("isbsvc-{name}-js-svc"),
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": selector},
        "template": {
            "metadata": {"labels": selector},
            "spec": {"containers": [
                {"name": "main", "image": image},
                {"name": "reloader", "image": "natsio/nats-server-config-reloader:0.14.0"},
                {"name": "metrics", "image": "natsio/prometheus-nats-exporter:0.15.0"},
            ]},
        },
    });
    let hash = stable_hash(&sts_spec);
    // From the cache: a stale copy makes the replace fail with a conflict, a StatefulSet missing
    // only from the cache makes the create fail with AlreadyExists; both are retried.
    match ctx.caches.statefulsets.get(&ns, &sts_name) {
        Some(existing) if existing.annotations().get(A_HASH) == Some(&hash) => {
            Ok(StatefulSet::clone(&existing))
        }
        Some(existing) => {
            let mut updated = StatefulSet::clone(&existing);
            updated.spec = serde_json::from_value(sts_spec).map_err(anyhow::Error::from)?;
            updated.annotations_mut().insert(A_HASH.into(), hash);
            Ok(api.replace(&sts_name, &post_params(), &updated).await?)
        }
        None => {
            let sts = json!({
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {
                    "name": sts_name,
                    "namespace": ns,
                    "labels": selector,
                    "annotations": {A_HASH: hash},
                    "ownerReferences": [dyn_owner_ref(isb, "InterStepBufferService")],
                },
                "spec": sts_spec,
            });
            let sts: StatefulSet = serde_json::from_value(sts).map_err(anyhow::Error::from)?;
            Ok(api.create(&post_params(), &sts).await?)
        }
    }
}

/// ChildrenResourcesHealthy from the StatefulSet: Progressing, Unavailable or Healthy.
fn statefulset_health(sts: &StatefulSet) -> (&'static str, &'static str, String) {
    let want = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(st) = &sts.status else {
        return (
            "False",
            "Progressing",
            "Waiting for the statefulset to be observed".into(),
        );
    };
    if st.observed_generation.unwrap_or(0) < sts.metadata.generation.unwrap_or(0)
        || st.updated_replicas.unwrap_or(0) < want
    {
        return (
            "False",
            "Progressing",
            format!(
                "Waiting for statefulset rolling update to complete: {}/{} updated",
                st.updated_replicas.unwrap_or(0),
                want
            ),
        );
    }
    if st.ready_replicas.unwrap_or(0) < want {
        return (
            "False",
            "Unavailable",
            format!(
                "Waiting for pods to be ready: {}/{}",
                st.ready_replicas.unwrap_or(0),
                want
            ),
        );
    }
    ("True", "Healthy", "partitioned roll out complete".into())
}
