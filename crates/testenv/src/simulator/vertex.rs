//! The Vertex controller (B.4): ISB service check, pods at the desired replica count, status.

use std::sync::Arc;

use kube::{
    ResourceExt,
    api::DynamicObject,
    runtime::{Controller, controller::Action, reflector::ObjectRef},
};
use serde_json::{Value, json};

use super::{
    Ctx, SimError,
    cache::{all, labelled},
    controller_config, drive, error_policy, in_turn,
    pipeline::isbsvc_name,
    pods::{self, MetaKey, Naming, PodCounts, PodSet},
    util::{
        A_HASH, L_COMPONENT, L_MANAGED_BY, L_NAME, L_PART_OF, L_PIPELINE, L_VERTEX, NUMAFLOW_IMAGE,
        collect_images, container_names, desired_replicas, dyn_api, dyn_owner_ref, generation,
        init_conditions, is_healthy, isbsvc_resource, labels, remove_key, selector_string,
        set_condition, set_key, spec_of, stable_hash, status_of, str_at, vertex_resource,
        write_status,
    },
};

pub(crate) async fn run(ctx: Arc<Ctx>) {
    let ar = vertex_resource();
    let caches = &ctx.caches;
    let store = caches.vertices.store();
    let turn = in_turn(ctx.config.concurrency, store.clone(), ar.clone(), reconcile);
    let ctrl =
        Controller::for_stream_with(caches.vertices.subscribe(all), store.clone(), ar.clone());
    let stream = ctrl
        .owns_stream(caches.pods.subscribe(labelled(L_COMPONENT, "vertex")))
        // Vertices go Failed and back with their ISB service.
        .watches_stream_with(
            caches.isbsvcs.subscribe(all),
            move |isb: DynamicObject| {
                let ns = isb.namespace().unwrap_or_default();
                let isb_name = isb.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|v| v.namespace().as_deref() == Some(ns.as_str()))
                    .filter(|v| isbsvc_name(&spec_of(v)) == isb_name)
                    .map(|v| ObjectRef::new_with(&v.name_any(), ar.clone()).within(&ns))
                    .collect::<Vec<_>>()
            },
            isbsvc_resource(),
        )
        .with_config(controller_config(&ctx))
        .run(turn, error_policy, ctx);
    drive("vertex", stream).await;
}

/// The pod spec Numaflow would build: its own `numa` container plus every user container.
pub(crate) fn pod_spec(spec: &Value) -> Value {
    let found = collect_images(spec);
    let mut hints = vec!["numa".to_owned()];
    hints.extend(found.iter().map(|(h, _)| h.clone()));
    let names = container_names(&hints);
    let mut images = vec![NUMAFLOW_IMAGE.to_owned()];
    images.extend(found.into_iter().map(|(_, i)| i));
    let containers: Vec<Value> = names
        .into_iter()
        .zip(images)
        .map(|(name, image)| json!({"name": name, "image": image}))
        .collect();
    json!({"containers": containers})
}

/// Writes the replica counts and PodsHealthy the way both Vertex and MonoVertex report them.
pub(crate) fn set_replica_status(
    st: &mut Value,
    desired: i64,
    counts: &PodCounts,
    hash: &str,
    selector: &str,
) {
    set_key(st, "replicas", json!(counts.total));
    set_key(st, "desiredReplicas", json!(desired));
    set_key(st, "readyReplicas", json!(counts.ready.min(desired)));
    set_key(st, "updatedReplicas", json!(counts.updated));
    set_key(
        st,
        "updatedReadyReplicas",
        json!(counts.updated_ready.min(desired)),
    );
    set_key(st, "currentHash", json!(hash));
    set_key(st, "updateHash", json!(hash));
    set_key(st, "selector", json!(selector));
    match &counts.unhealthy {
        Some((reason, message)) => set_condition(st, "PodsHealthy", "False", reason, message),
        None => set_condition(st, "PodsHealthy", "True", "Running", "All pods are healthy"),
    }
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    let ns = obj.namespace().unwrap_or_default();
    let api = dyn_api(&ctx.client, &ns, &vertex_resource());
    // The cached copy: the status write carries its resourceVersion.
    let v = DynamicObject::clone(&obj);
    if v.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = v.name_any();
    let spec = spec_of(&v);
    let mut st = status_of(&v);
    init_conditions(&mut st, &["Deployed", "PodsHealthy"]);
    set_key(&mut st, "observedGeneration", json!(generation(&v)));

    let failure = match ctx.caches.isbsvcs.get(&ns, &isbsvc_name(&spec)) {
        None => Some(("ISBSvcNotFound", "ISB Service not found.")),
        Some(isb) if !is_healthy(&status_of(&isb), &["Running"]) => {
            Some(("ISBSvcNotHealthy", "ISB Service not healthy."))
        }
        Some(_) => None,
    };
    if let Some((reason, message)) = failure {
        set_key(&mut st, "phase", json!("Failed"));
        set_key(&mut st, "reason", json!(reason));
        set_key(&mut st, "message", json!(message));
        write_status(&api, &v, st).await?;
        return Ok(Action::await_change());
    }

    let paused = str_at(&spec, &["lifecycle", "desiredPhase"]) == Some("Paused");
    let desired = desired_replicas(&spec, paused);
    let pl_name = str_at(&spec, &["pipelineName"])
        .map(str::to_owned)
        .or_else(|| v.labels().get(L_PIPELINE).cloned())
        .unwrap_or_default();
    let short = str_at(&spec, &["name"])
        .map(str::to_owned)
        .or_else(|| v.labels().get(L_VERTEX).cloned())
        .unwrap_or_default();
    let selector = labels(&[
        (L_COMPONENT, "vertex"),
        (L_NAME, &name),
        (L_PART_OF, "numaflow"),
        (L_PIPELINE, &pl_name),
        (L_VERTEX, &short),
    ]);
    let mut pod_labels = selector.clone();
    pod_labels.insert(L_MANAGED_BY.into(), "vertex-controller".into());
    let pod_spec = pod_spec(&spec);
    let hash = stable_hash(&pod_spec);
    let set = PodSet {
        namespace: ns.clone(),
        selector: selector.clone(),
        labels: pod_labels,
        annotations: Default::default(),
        naming: Naming::Generate(format!("{name}-")),
        owner: dyn_owner_ref(&v, "Vertex"),
        spec: pod_spec,
        hash: hash.clone(),
        hash_key: MetaKey::Annotation(A_HASH),
    };
    let counts = pods::reconcile(&ctx, &set, desired).await?;

    set_key(
        &mut st,
        "phase",
        json!(if paused { "Paused" } else { "Running" }),
    );
    remove_key(&mut st, "reason");
    remove_key(&mut st, "message");
    set_condition(
        &mut st,
        "Deployed",
        "True",
        "Successful",
        "Successfully deployed",
    );
    set_replica_status(
        &mut st,
        desired,
        &counts,
        &hash,
        &selector_string(&selector),
    );
    write_status(&api, &v, st).await?;
    Ok(Action::await_change())
}
