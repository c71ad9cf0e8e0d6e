//! Pause, resume and deletion of a Pipeline (B.7), with the simulator's drainability model.

use std::{collections::BTreeMap, time::Duration};

use chrono::{DateTime, Utc};
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, Patch},
    runtime::controller::Action,
};
use serde_json::{Value, json};

use super::{
    Ctx, PipelineBehaviour, SimError,
    pipeline::{
        A_PAUSE_TS, A_RESUME_STRATEGY, FINALIZER, patch_params, source_vertices, vertex_specs,
    },
    pods,
    util::{
        L_COMPONENT, L_PIPELINE, L_VERTEX, collect_images, condition, dyn_api, i64_at,
        is_bad_image, k8s_time, labels, now, parse_time, rfc3339, set_key, spec_of, status_of,
        str_at, vertex_resource, write_status,
    },
};

/// Numaflow requeues every 10 s while a lifecycle change is pending; watch events usually come first.
const REQUEUE: Duration = Duration::from_secs(10);
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// One step of the pause protocol; returns when to look again (None: done).
pub(crate) async fn pause(
    ctx: &Ctx,
    api: &Api<DynamicObject>,
    pl: &mut DynamicObject,
    spec: &Value,
    vertices: &BTreeMap<String, DynamicObject>,
    st: &mut Value,
) -> Result<Option<Duration>, SimError> {
    set_key(st, "phase", json!("Pausing"));
    set_key(st, "message", json!("Pausing in progress"));
    let sources = source_vertices(spec);
    let source_objs: Vec<&DynamicObject> = sources.iter().filter_map(|s| vertices.get(s)).collect();
    set_vertex_phase(ctx, &source_objs, "Paused", false).await?;

    let Some(pause_ts) = pl.annotations().get(A_PAUSE_TS).cloned() else {
        let patch = json!({"metadata": {
            "annotations": {A_PAUSE_TS: rfc3339(now())},
            "resourceVersion": pl.resource_version(),
        }});
        *pl = api
            .patch(&pl.name_any(), &patch_params(), &Patch::Merge(patch))
            .await?;
        return Ok(Some(REQUEUE));
    };
    if source_pods_exist(ctx, pl, &sources) {
        // Pod deletions wake us up; the requeue is Numaflow's own safety net.
        return Ok(Some(REQUEUE));
    }
    let t = now();
    let grace =
        i64_at(spec, &["lifecycle", "pauseGracePeriodSeconds"]).unwrap_or(DEFAULT_GRACE_SECONDS);
    let started = parse_time(&pause_ts).unwrap_or(t);
    let deadline = started + chrono::Duration::seconds(grace.max(0));
    let drained_at = drained_at(ctx, pl, spec, vertices, &pause_ts, t);
    let drained = drained_at.is_some_and(|d| d <= t);
    if drained || t > deadline {
        if source_pods_exist_live(ctx, pl, &sources).await? {
            // One the cache has not shown yet: its events bring us back.
            return Ok(Some(REQUEUE));
        }
        let all: Vec<&DynamicObject> = vertices.values().collect();
        set_vertex_phase(ctx, &all, "Paused", false).await?;
        set_key(st, "drainedOnPause", json!(drained));
        set_key(st, "phase", json!("Paused"));
        set_key(st, "message", json!("Pipeline paused"));
        return Ok(None);
    }
    // "now > deadline" is strict: wake just after it.
    let next = drained_at.map_or(deadline + chrono::Duration::milliseconds(100), |d| {
        d.min(deadline + chrono::Duration::milliseconds(100))
    });
    Ok(Some(
        (next - t).to_std().unwrap_or(Duration::ZERO).min(REQUEUE),
    ))
}

/// When the pipeline counts as drained in this pause (None: not while things stay as they are).
fn drained_at(
    ctx: &Ctx,
    pl: &DynamicObject,
    spec: &Value,
    vertices: &BTreeMap<String, DynamicObject>,
    pause_ts: &str,
    t: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let uid = pl.uid().unwrap_or_default();
    let (behaviour, _) = ctx
        .state
        .pipeline(&pl.namespace().unwrap_or_default(), &pl.name_any());
    let blocked = behaviour == PipelineBehaviour::NeverDrain
        || vertex_specs(spec)
            .iter()
            .flat_map(collect_images)
            .any(|(_, img)| is_bad_image(&img))
        || vertices.values().any(|v| {
            condition(&status_of(v), "PodsHealthy").is_some_and(|c| c["status"] == "False")
        });
    if blocked {
        ctx.state.reset_drain_clock(&uid, pause_ts);
        return None;
    }
    let clock = ctx.state.drain_clock(&uid, pause_ts, t);
    let delay = match behaviour {
        PipelineBehaviour::SlowDrain(d) => d,
        _ if !ctx.state.ingested(&uid) => Duration::ZERO,
        _ => ctx.config.drain_delay,
    };
    Some(clock + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::zero()))
}

fn source_pod_selectors(pl: &DynamicObject, sources: &[String]) -> Vec<BTreeMap<String, String>> {
    let pl_name = pl.name_any();
    sources
        .iter()
        .map(|s| {
            labels(&[
                (L_COMPONENT, "vertex"),
                (L_PIPELINE, &pl_name),
                (L_VERTEX, s),
            ])
        })
        .collect()
}

/// Whether the cache holds a running source pod; its deletion triggers the next reconcile.
fn source_pods_exist(ctx: &Ctx, pl: &DynamicObject, sources: &[String]) -> bool {
    let ns = pl.namespace().unwrap_or_default();
    source_pod_selectors(pl, sources)
        .iter()
        .any(|sel| pods::any_cached(ctx, &ns, sel))
}

/// The same, read live: Paused and the finalizer's removal are final, so they wait until no
/// source pod exists, including one created after the cache was last updated.
async fn source_pods_exist_live(
    ctx: &Ctx,
    pl: &DynamicObject,
    sources: &[String],
) -> Result<bool, SimError> {
    let ns = pl.namespace().unwrap_or_default();
    for sel in source_pod_selectors(pl, sources) {
        if pods::any_live(&ctx.client, &ns, &sel).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Resume: drop the pause-timestamp, run every vertex, forget the drain result.
pub(crate) async fn resume(
    ctx: &Ctx,
    api: &Api<DynamicObject>,
    pl: &mut DynamicObject,
    vertices: &BTreeMap<String, DynamicObject>,
    st: &mut Value,
) -> Result<(), SimError> {
    if pl.annotations().contains_key(A_PAUSE_TS) {
        let patch = json!({"metadata": {
            "annotations": {A_PAUSE_TS: null},
            "resourceVersion": pl.resource_version(),
        }});
        *pl = api
            .patch(&pl.name_any(), &patch_params(), &Patch::Merge(patch))
            .await?;
    }
    let slow = pl.annotations().get(A_RESUME_STRATEGY).map(String::as_str) == Some("slow");
    let all: Vec<&DynamicObject> = vertices.values().collect();
    set_vertex_phase(ctx, &all, "Running", slow).await?;
    set_key(st, "drainedOnPause", json!(false));
    set_key(st, "phase", json!("Running"));
    Ok(())
}

/// Sets `spec.lifecycle.desiredPhase` of the given vertices (and nulls `replicas` for a slow resume).
async fn set_vertex_phase(
    ctx: &Ctx,
    vertices: &[&DynamicObject],
    phase: &str,
    null_replicas: bool,
) -> Result<(), SimError> {
    for v in vertices {
        let spec = spec_of(v);
        if str_at(&spec, &["lifecycle", "desiredPhase"]).unwrap_or("Running") == phase {
            continue;
        }
        let mut spec = json!({"lifecycle": {"desiredPhase": phase}});
        if null_replicas {
            spec["replicas"] = Value::Null;
        }
        let api = dyn_api(
            &ctx.client,
            &v.namespace().unwrap_or_default(),
            &vertex_resource(),
        );
        match api
            .patch(
                &v.name_any(),
                &patch_params(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Deletion: phase Deleting, sources paused, a short drain wait (no longer than the deletion
/// grace period), then the finalizer goes.
pub(crate) async fn delete(
    ctx: &Ctx,
    api: &Api<DynamicObject>,
    pl: DynamicObject,
) -> Result<Action, SimError> {
    let uid = pl.uid().unwrap_or_default();
    if !pl.finalizers().iter().any(|f| f == FINALIZER) {
        ctx.state.forget(&uid);
        return Ok(Action::await_change());
    }
    let mut st = status_of(&pl);
    set_key(&mut st, "phase", json!("Deleting"));
    set_key(&mut st, "message", json!("Deleting"));
    let pl = write_status(api, &pl, st).await?;

    let ns = pl.namespace().unwrap_or_default();
    let spec = spec_of(&pl);
    let sources = source_vertices(&spec);
    let source_objs: Vec<_> = sources
        .iter()
        .filter_map(|s| {
            ctx.caches
                .vertices
                .get(&ns, &format!("{}-{s}", pl.name_any()))
        })
        .collect();
    let refs: Vec<&DynamicObject> = source_objs.iter().map(|v| v.as_ref()).collect();
    set_vertex_phase(ctx, &refs, "Paused", false).await?;
    let deleted_at: DateTime<Utc> = pl
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(k8s_time)
        .unwrap_or_else(now);
    // The drain wait is bounded by the deletion grace period: sources that never stop (their
    // vertex failed, e.g. on a deleted ISB service) don't keep the pipeline forever.
    let grace = i64_at(&spec, &["lifecycle", "deletionGracePeriodSeconds"])
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    let give_up_at = deleted_at + chrono::Duration::seconds(grace.max(0));
    let waiting = || {
        Action::requeue(
            (give_up_at - now())
                .to_std()
                .unwrap_or(Duration::ZERO)
                .min(REQUEUE),
        )
    };
    if now() < give_up_at && source_pods_exist(ctx, &pl, &sources) {
        return Ok(waiting());
    }
    let ready_at = deleted_at
        + chrono::Duration::from_std(ctx.config.deletion_delay).unwrap_or(chrono::Duration::zero());
    if now() < ready_at {
        return Ok(Action::requeue(
            (ready_at - now()).to_std().unwrap_or(Duration::ZERO),
        ));
    }
    if now() < give_up_at && source_pods_exist_live(ctx, &pl, &sources).await? {
        return Ok(waiting());
    }
    let rest: Vec<String> = pl
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": pl.resource_version()}});
    match api
        .patch(&pl.name_any(), &patch_params(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.state.forget(&uid);
    Ok(Action::await_change())
}
