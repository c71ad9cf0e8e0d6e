//! The MonoVertex controller (B.5): phase straight from desiredPhase (pause without drain), pods
//! at the desired replica count, a one-pod daemon Deployment `<name>-mv-daemon`.

use std::sync::Arc;

use futures::channel::mpsc::UnboundedReceiver;
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api, ResourceExt,
    api::DynamicObject,
    runtime::{Controller, controller::Action, watcher},
};
use serde_json::json;

use super::{
    Ctx, MonoVertexBehaviour, SimError,
    behaviour::fail_deadline,
    cache::labelled,
    controller_config, drive, error_policy, in_turn,
    pipeline::deployment_health,
    pods::{self, MetaKey, Naming, PodSet},
    util::{
        A_HASH, L_COMPONENT, L_MANAGED_BY, L_MONO_VERTEX, L_NAME, L_PART_OF, NUMAFLOW_IMAGE,
        desired_replicas, dyn_api, dyn_owner_ref, generation, init_conditions, k8s_time, labels,
        monovertex_resource, now, post_params, remove_key, selector_string, set_condition, set_key,
        spec_of, stable_hash, status_of, str_at, write_status,
    },
    vertex::{pod_spec, set_replica_status},
};

pub(crate) async fn run(ctx: Arc<Ctx>, trigger: UnboundedReceiver<()>) {
    let ar = monovertex_resource();
    let caches = &ctx.caches;
    let ctrl = Controller::new_with(ctx.dyn_scoped(&ar), watcher::Config::default(), ar.clone());
    let turn = in_turn(ctx.config.concurrency, ctrl.store(), ar, reconcile);
    let stream = ctrl
        .owns_stream(caches.pods.subscribe(labelled(L_COMPONENT, "mono-vertex")))
        .owns_stream(
            caches
                .deployments
                .subscribe(labelled(L_COMPONENT, "mono-vertex-daemon")),
        )
        .reconcile_all_on(trigger)
        .with_config(controller_config(&ctx))
        .run(turn, error_policy, ctx);
    drive("monovertex", stream).await;
}

pub(crate) fn daemon_name(mv: &str) -> String {
    format!("{mv}-mv-daemon")
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    let ns = obj.namespace().unwrap_or_default();
    let api = dyn_api(&ctx.client, &ns, &monovertex_resource());
    // The cached copy: the status write carries its resourceVersion.
    let mv = DynamicObject::clone(&obj);
    if mv.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = mv.name_any();
    let spec = spec_of(&mv);
    let mut st = status_of(&mv);
    init_conditions(&mut st, &["DaemonHealthy", "Deployed", "PodsHealthy"]);
    set_key(&mut st, "observedGeneration", json!(generation(&mv)));

    let mut requeue = None;
    let (behaviour, set_at) = ctx.state.monovertex(&ns, &name);
    if let MonoVertexBehaviour::FailAfter(d) = behaviour {
        let deadline = fail_deadline(
            d,
            set_at,
            mv.metadata.creation_timestamp.as_ref().map(k8s_time),
        );
        if now() >= deadline {
            set_key(&mut st, "phase", json!("Failed"));
            set_key(&mut st, "message", json!("simulated failure"));
            set_condition(
                &mut st,
                "Deployed",
                "False",
                "ReconcileFailed",
                "simulated failure",
            );
            write_status(&api, &mv, st).await?;
            return Ok(Action::await_change());
        }
        requeue = (deadline - now()).to_std().ok();
    }

    ensure_daemon(&ctx, &mv).await?;
    let paused = str_at(&spec, &["lifecycle", "desiredPhase"]) == Some("Paused");
    let desired = desired_replicas(&spec, paused);
    let selector = labels(&[
        (L_COMPONENT, "mono-vertex"),
        (L_NAME, &name),
        (L_PART_OF, "numaflow"),
        (L_MONO_VERTEX, &name),
    ]);
    let mut pod_labels = selector.clone();
    pod_labels.insert(L_MANAGED_BY.into(), "mono-vertex-controller".into());
    let pod_spec = pod_spec(&spec);
    let hash = stable_hash(&pod_spec);
    let set = PodSet {
        namespace: ns.clone(),
        selector: selector.clone(),
        labels: pod_labels,
        annotations: Default::default(),
        naming: Naming::Generate(format!("{name}-mv-")),
        owner: dyn_owner_ref(&mv, "MonoVertex"),
        spec: pod_spec,
        hash: hash.clone(),
        hash_key: MetaKey::Annotation(A_HASH),
    };
    let counts = pods::reconcile(&ctx, &set, desired).await?;

    // Pause is immediate: the phase follows desiredPhase on every reconcile.
    set_key(
        &mut st,
        "phase",
        json!(if paused { "Paused" } else { "Running" }),
    );
    remove_key(&mut st, "message");
    remove_key(&mut st, "reason");
    set_condition(
        &mut st,
        "Deployed",
        "True",
        "Successful",
        "Successfully deployed",
    );
    let (s, r, m) = match ctx.caches.deployments.get(&ns, &daemon_name(&name)) {
        Some(d) => deployment_health(&d),
        None => (
            "False",
            "Progressing",
            "Waiting for the daemon deployment".into(),
        ),
    };
    set_condition(&mut st, "DaemonHealthy", s, r, &m);
    set_replica_status(
        &mut st,
        desired,
        &counts,
        &hash,
        &selector_string(&selector),
    );
    write_status(&api, &mv, st).await?;
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

async fn ensure_daemon(ctx: &Ctx, mv: &DynamicObject) -> Result<(), SimError> {
    let ns = mv.namespace().unwrap_or_default();
    let name = mv.name_any();
    // A daemon missing only from the cache makes the create below fail with AlreadyExists.
    if ctx
        .caches
        .deployments
        .get(&ns, &daemon_name(&name))
        .is_some()
    {
        return Ok(());
    }
    // No app.kubernetes.io/name here: Numaplane counts MonoVertex pods by that label.
    let pod_labels = labels(&[
        (L_COMPONENT, "mono-vertex-daemon"),
        (L_MANAGED_BY, "mono-vertex-controller"),
        (L_PART_OF, "numaflow"),
        (L_MONO_VERTEX, &name),
    ]);
    let d = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": daemon_name(&name),
            "namespace": ns,
            "labels": pod_labels,
            "ownerReferences": [dyn_owner_ref(mv, "MonoVertex")],
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"containers": [{"name": "main", "image": NUMAFLOW_IMAGE, "args": ["mvtx-daemon-server"]}]},
            },
        },
    });
    let d: Deployment = serde_json::from_value(d).map_err(anyhow::Error::from)?;
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    match api.create(&post_params(), &d).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
