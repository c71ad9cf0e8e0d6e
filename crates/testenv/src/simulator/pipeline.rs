//! The Pipeline controller (B.3, B.7): validation, the ISB service check, Vertices and the
//! daemon, health conditions, and the lifecycle (pause/resume/delete, in `pipeline_lifecycle`).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::channel::mpsc::UnboundedReceiver;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
    runtime::{Controller, controller::Action, reflector::ObjectRef, watcher},
};
use serde_json::{Value, json};

use super::{
    Ctx, PipelineBehaviour, SimError,
    behaviour::fail_deadline,
    cache::{all, labelled},
    controller_config, drive, error_policy, in_turn, pipeline_children as children,
    pipeline_lifecycle as lifecycle,
    util::{
        A_INSTANCE, FIELD_MANAGER, L_COMPONENT, L_PIPELINE, at, condition, dyn_api, generation,
        i64_at, init_conditions, is_healthy, isbsvc_resource, k8s_time, now, pipeline_resource,
        set_condition, set_key, spec_of, status_of, str_at, vertex_resource, write_status,
    },
};

pub(crate) const FINALIZER: &str = "numaflow.numaproj.io/pipeline-controller";
pub(crate) const A_PAUSE_TS: &str = "numaflow.numaproj.io/pause-timestamp";
pub(crate) const A_RESUME_STRATEGY: &str = "numaflow.numaproj.io/resume-strategy";
const CONDITIONS: [&str; 5] = [
    "Configured",
    "DaemonServiceHealthy",
    "Deployed",
    "SideInputsManagersHealthy",
    "VerticesHealthy",
];

pub(crate) async fn run(ctx: Arc<Ctx>, trigger: UnboundedReceiver<()>) {
    let ar = pipeline_resource();
    let ctrl = Controller::new_with(ctx.dyn_scoped(&ar), watcher::Config::default(), ar.clone());
    let store = ctrl.store();
    let turn = in_turn(ctx.config.concurrency, store.clone(), ar.clone(), reconcile);
    let pod_ar = ar.clone();
    let isb_ar = ar.clone();
    let caches = &ctx.caches;
    let stream = ctrl
        .owns_stream_with(caches.vertices.subscribe(all), vertex_resource())
        .owns_stream(
            caches
                .deployments
                .subscribe(labelled(L_COMPONENT, "daemon")),
        )
        // Source pods going away drive the pause protocol.
        .watches_stream(
            caches.pods.subscribe(labelled(L_COMPONENT, "vertex")),
            move |pod: Pod| {
                let ns = pod.namespace()?;
                let pl = pod.labels().get(L_PIPELINE)?.clone();
                Some(ObjectRef::new_with(&pl, pod_ar.clone()).within(&ns))
            },
        )
        // A Pipeline follows the health of its ISB service.
        .watches_stream_with(
            caches.isbsvcs.subscribe(all),
            move |isb: DynamicObject| {
                let ns = isb.namespace().unwrap_or_default();
                let isb_name = isb.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|pl| pl.namespace().as_deref() == Some(ns.as_str()))
                    .filter(|pl| isbsvc_name(&spec_of(pl)) == isb_name)
                    .map(|pl| ObjectRef::new_with(&pl.name_any(), isb_ar.clone()).within(&ns))
                    .collect::<Vec<_>>()
            },
            isbsvc_resource(),
        )
        .reconcile_all_on(trigger)
        .with_config(controller_config(&ctx))
        .run(turn, error_policy, ctx);
    drive("pipeline", stream).await;
}

/// `spec.interStepBufferServiceName`, `default` when empty.
pub(crate) fn isbsvc_name(spec: &Value) -> String {
    match str_at(spec, &["interStepBufferServiceName"]) {
        Some(n) if !n.is_empty() => n.to_owned(),
        _ => "default".to_owned(),
    }
}

/// `spec.lifecycle.desiredPhase`: Paused, or Running (default).
pub(crate) fn desired_phase(spec: &Value) -> &'static str {
    match str_at(spec, &["lifecycle", "desiredPhase"]) {
        Some("Paused") => "Paused",
        _ => "Running",
    }
}

pub(crate) fn vertex_specs(spec: &Value) -> Vec<Value> {
    at(spec, &["vertices"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn vertex_name(v: &Value) -> &str {
    str_at(v, &["name"]).unwrap_or("")
}

/// Short names of the source vertices.
pub(crate) fn source_vertices(spec: &Value) -> Vec<String> {
    vertex_specs(spec)
        .iter()
        .filter(|v| v.get("source").is_some())
        .map(|v| vertex_name(v).to_owned())
        .collect()
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    let ns = obj.namespace().unwrap_or_default();
    let api = dyn_api(&ctx.client, &ns, &pipeline_resource());
    // The cached copy: every write to the Pipeline carries its resourceVersion, so a decision
    // taken on a stale copy fails with a conflict and is retried on the newer one.
    let mut pl = DynamicObject::clone(&obj);
    if pl.metadata.deletion_timestamp.is_some() {
        return lifecycle::delete(&ctx, &api, pl).await;
    }
    if !pl.finalizers().iter().any(|f| f == FINALIZER) {
        pl = add_finalizer(&api, &pl).await?;
    }
    let name = pl.name_any();
    let spec = spec_of(&pl);
    let mut st = status_of(&pl);
    init_conditions(&mut st, &CONDITIONS);
    set_key(&mut st, "observedGeneration", json!(generation(&pl)));
    set_counts(&spec, &mut st);

    let mut requeue: Option<Duration> = None;
    let (behaviour, set_at) = ctx.state.pipeline(&ns, &name);
    if let PipelineBehaviour::FailAfter(d) = behaviour {
        let deadline = fail_deadline(
            d,
            set_at,
            pl.metadata.creation_timestamp.as_ref().map(k8s_time),
        );
        if now() >= deadline {
            set_condition(
                &mut st,
                "Deployed",
                "False",
                "ReconcileFixedResourcesFailed",
                "simulated failure",
            );
            mark_failed(&mut st, "simulated failure");
            write_status(&api, &pl, st).await?;
            return Ok(Action::await_change());
        }
        requeue = (deadline - now()).to_std().ok();
    }

    if let Err(msg) = validate(&spec) {
        set_condition(&mut st, "Configured", "False", "InvalidSpec", &msg);
        mark_failed(&mut st, &msg);
        write_status(&api, &pl, st).await?;
        return Ok(Action::await_change());
    }
    set_condition(
        &mut st,
        "Configured",
        "True",
        "Successful",
        "Successfully configured",
    );

    if !isbsvc_usable(&ctx, &pl, &spec) {
        set_condition(
            &mut st,
            "Deployed",
            "False",
            "ReconcileFixedResourcesFailed",
            "isbsvc not healthy",
        );
        mark_failed(&mut st, "isbsvc not healthy");
        write_status(&api, &pl, st).await?;
        // The ISB service watch brings us back when it appears or recovers.
        return Ok(requeue.map_or_else(Action::await_change, Action::requeue));
    }

    let phase = str_at(&st, &["phase"]).unwrap_or("").to_owned();
    let desired = desired_phase(&spec);
    let lifecycle_change = desired == "Paused"
        || phase == "Pausing"
        || phase == "Paused"
        || pl.annotations().contains_key(A_PAUSE_TS);
    let vertices = children::sync_vertices(&ctx, &pl, &spec, lifecycle_change).await?;
    let daemon = children::sync_daemon(&ctx, &pl).await?;
    set_condition(
        &mut st,
        "Deployed",
        "True",
        "Successful",
        "Successfully deployed",
    );
    note_ingestion(&ctx, &pl, &spec, &vertices);

    if !lifecycle_change {
        set_key(&mut st, "phase", json!(desired));
    }
    health_conditions(&pl, &spec, &vertices, daemon.as_ref(), &mut st);
    if lifecycle_change {
        let annotated = pl.annotations().contains_key(A_PAUSE_TS);
        let next = if desired == "Paused" && phase != "Paused" {
            lifecycle::pause(&ctx, &api, &mut pl, &spec, &vertices, &mut st).await?
        } else if desired == "Running" && (phase != "Running" || annotated) {
            // Also finishes a resume interrupted after the phase was written.
            lifecycle::resume(&ctx, &api, &mut pl, &vertices, &mut st).await?;
            None
        } else {
            None
        };
        requeue = match (requeue, next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    write_status(&api, &pl, st).await?;
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

async fn add_finalizer(
    api: &Api<DynamicObject>,
    pl: &DynamicObject,
) -> Result<DynamicObject, SimError> {
    let mut finalizers = pl.finalizers().to_vec();
    finalizers.push(FINALIZER.to_owned());
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": pl.resource_version()}});
    Ok(api
        .patch(&pl.name_any(), &patch_params(), &Patch::Merge(patch))
        .await?)
}

pub(crate) fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

fn mark_failed(st: &mut Value, message: &str) {
    set_key(st, "phase", json!("Failed"));
    set_key(st, "message", json!(message));
}

/// Vertex counts in the status (printed by kubectl; Numaplane ignores them).
fn set_counts(spec: &Value, st: &mut Value) {
    let vs = vertex_specs(spec);
    let count = |f: &dyn Fn(&Value) -> bool| json!(vs.iter().filter(|v| f(v)).count());
    set_key(st, "vertexCount", count(&|_| true));
    set_key(st, "sourceCount", count(&|v| v.get("source").is_some()));
    set_key(st, "sinkCount", count(&|v| v.get("sink").is_some()));
    set_key(st, "udfCount", count(&|v| v.get("udf").is_some()));
    set_key(
        st,
        "mapUDFCount",
        count(&|v| v.get("udf").is_some_and(|u| u.get("groupBy").is_none())),
    );
    set_key(
        st,
        "reduceUDFCount",
        count(&|v| v.get("udf").is_some_and(|u| u.get("groupBy").is_some())),
    );
}

/// Numaflow's spec validation, reduced to what tests exercise.
pub(crate) fn validate(spec: &Value) -> Result<(), String> {
    let vs = vertex_specs(spec);
    if vs.is_empty() {
        return Err("invalid pipeline: no vertices found".into());
    }
    let mut names = BTreeMap::new();
    for v in &vs {
        let name = vertex_name(v);
        if name.is_empty() {
            return Err("invalid pipeline: vertex name is missing".into());
        }
        if names.insert(name.to_owned(), v).is_some() {
            return Err(format!("invalid pipeline: duplicate vertex name {name:?}"));
        }
    }
    if !vs.iter().any(|v| v.get("source").is_some()) {
        return Err("invalid pipeline: pipeline has no source, at least one vertex with 'source' defined is required".into());
    }
    if !vs.iter().any(|v| v.get("sink").is_some()) {
        return Err("invalid pipeline: pipeline has no sink, at least one vertex with 'sink' defined is required".into());
    }
    let edges = at(spec, &["edges"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for e in &edges {
        let from = str_at(e, &["from"]).unwrap_or("");
        let to = str_at(e, &["to"]).unwrap_or("");
        for end in [from, to] {
            if !names.contains_key(end) {
                return Err(format!("invalid pipeline: vertex does not exist: {end}"));
            }
        }
        if names.get(from).is_some_and(|v| v.get("sink").is_some()) {
            return Err(format!(
                "invalid pipeline: a sink vertex {from:?} cannot be the source of an edge"
            ));
        }
        if names.get(to).is_some_and(|v| v.get("source").is_some()) {
            return Err(format!(
                "invalid pipeline: a source vertex {to:?} cannot be the target of an edge"
            ));
        }
    }
    Ok(())
}

/// The ISB service exists, belongs to the same controller instance and is healthy.
fn isbsvc_usable(ctx: &Ctx, pl: &DynamicObject, spec: &Value) -> bool {
    let ns = pl.namespace().unwrap_or_default();
    let Some(isb) = ctx.caches.isbsvcs.get(&ns, &isbsvc_name(spec)) else {
        return false;
    };
    let isb: &DynamicObject = &isb;
    let instance = |o: &DynamicObject| o.annotations().get(A_INSTANCE).cloned().unwrap_or_default();
    instance(isb) == instance(pl) && is_healthy(&status_of(isb), &["Running"])
}

/// Data flowed once a source vertex had a ready pod; a pipeline that never ingested drains at once.
fn note_ingestion(
    ctx: &Ctx,
    pl: &DynamicObject,
    spec: &Value,
    vertices: &BTreeMap<String, DynamicObject>,
) {
    let sources = source_vertices(spec);
    let ingested = sources.iter().any(|s| {
        vertices
            .get(s)
            .and_then(|v| i64_at(&status_of(v), &["readyReplicas"]))
            .is_some_and(|r| r > 0)
    });
    if ingested {
        ctx.state.mark_ingested(&pl.uid().unwrap_or_default());
    }
}

/// DaemonServiceHealthy, SideInputsManagersHealthy and VerticesHealthy, plus the "Degraded" message.
fn health_conditions(
    pl: &DynamicObject,
    spec: &Value,
    vertices: &BTreeMap<String, DynamicObject>,
    daemon: Option<&Deployment>,
    st: &mut Value,
) {
    let (s, r, m) = daemon_health(pl, daemon);
    set_condition(st, "DaemonServiceHealthy", s, r, &m);
    let side_inputs = at(spec, &["sideInputs"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if side_inputs.is_empty() {
        set_condition(
            st,
            "SideInputsManagersHealthy",
            "True",
            "NoSideInputs",
            "No Side Inputs attached to the pipeline",
        );
    } else if side_inputs
        .iter()
        .flat_map(super::util::collect_images)
        .any(|(_, img)| super::util::is_bad_image(&img))
    {
        set_condition(
            st,
            "SideInputsManagersHealthy",
            "False",
            "Unavailable",
            "Side inputs manager is not healthy",
        );
    } else {
        set_condition(
            st,
            "SideInputsManagersHealthy",
            "True",
            "Successful",
            "All side inputs managers are healthy",
        );
    }
    let (s, r, m) = vertices_health(spec, vertices);
    set_condition(st, "VerticesHealthy", s, r, &m);

    let degraded = [
        "DaemonServiceHealthy",
        "SideInputsManagersHealthy",
        "VerticesHealthy",
    ]
    .iter()
    .filter_map(|t| condition(st, t))
    .find(|c| c["status"] == "False")
    .map(|c| format!("Degraded: {}", c["message"].as_str().unwrap_or("")));
    set_key(st, "message", json!(degraded.unwrap_or_default()));
}

/// DaemonServiceHealthy from the daemon Deployment as this reconcile read or created it.
fn daemon_health(
    pl: &DynamicObject,
    daemon: Option<&Deployment>,
) -> (&'static str, &'static str, String) {
    let Some(d) = daemon else {
        let name = children::daemon_name(&pl.name_any());
        return (
            "False",
            "GetDaemonServiceFailed",
            format!("Daemon deployment {name} not found"),
        );
    };
    deployment_health(d)
}

/// Health of a Deployment the way Numaflow reports its daemons.
pub(crate) fn deployment_health(d: &Deployment) -> (&'static str, &'static str, String) {
    let generation = d.metadata.generation.unwrap_or(0);
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(st) = &d.status else {
        return (
            "False",
            "Progressing",
            "Waiting for the daemon deployment to be observed".into(),
        );
    };
    let deadline_exceeded = st.conditions.iter().flatten().any(|c| {
        c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });
    if deadline_exceeded {
        return (
            "False",
            "ProgressDeadlineExceeded",
            format!("Deployment {} exceeded its progress deadline", d.name_any()),
        );
    }
    if st.observed_generation.unwrap_or(0) < generation
        || st.updated_replicas.unwrap_or(0) < want
        || st.available_replicas.unwrap_or(0) < want
    {
        return (
            "False",
            "Progressing",
            format!("Waiting for deployment {} rollout to finish", d.name_any()),
        );
    }
    ("True", "Successful", "Daemon service is healthy".into())
}

fn vertices_health(
    spec: &Value,
    vertices: &BTreeMap<String, DynamicObject>,
) -> (&'static str, &'static str, String) {
    let mut unhealthy = None;
    for v in vertex_specs(spec) {
        let short = vertex_name(&v);
        let Some(obj) = vertices.get(short) else {
            return (
                "False",
                "Progressing",
                format!("Vertex {short:?} is not created yet"),
            );
        };
        let st = status_of(obj);
        let observed = i64_at(&st, &["observedGeneration"]).unwrap_or(0);
        if observed == 0 || observed < generation(obj) {
            return (
                "False",
                "Progressing",
                format!("Vertex {:?} Waiting for reconciliation", obj.name_any()),
            );
        }
        if unhealthy.is_none() && !is_healthy(&st, &["Running", "Paused"]) {
            let why = st["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["status"] != "True"))
                .and_then(|c| c["message"].as_str())
                .or_else(|| st["message"].as_str())
                .unwrap_or("")
                .to_owned();
            unhealthy = Some(format!("Vertex {:?} is not healthy: {why}", obj.name_any()));
        }
    }
    match unhealthy {
        Some(m) => ("False", "Unavailable", m),
        None => ("True", "Successful", "All vertices are healthy".into()),
    }
}
