//! The API server's own capacity on this machine, measured in the same run before the
//! scenarios (issue "Scale", item 1): with no operator and no Numaflow stand-in running, a plain
//! client writes what a cold start of N rollouts writes, at the operator's concurrency: the user's
//! rollouts (as the scenario applies them), then per rollout what the operator writes for a new
//! one (its finalizer, its child of the same size, one Event, one status apply). A scenario's
//! wall time divided by this one says how close it is to what the API server can do at all.
//!
//! What the floor leaves out: the operator's reads (one live get and one list per new rollout)
//! and everything the Numaflow stand-in writes (child statuses, vertices, pods), which the cold
//! start's wall time includes. So the same writes are then made again in another namespace with
//! the stand-in reacting to them as in the cold start ([`measure_with_numaflow`]): the least time
//! a cold start can take on this machine with the stand-in, the operator's reads and waits aside.

use crate::workload;
use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::{ISBServiceRollout, MonoVertexRollout, PipelineRollout};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Instant;

const MANAGER: &str = "bench-floor";

/// What the floor measured.
#[derive(Debug, Clone, Serialize)]
pub struct Floor {
    pub n: usize,
    /// Rollouts written (N PipelineRollouts, N/10 MonoVertexRollouts, one ISBServiceRollout).
    pub rollouts: usize,
    pub concurrency: usize,
    /// All of it: the rollouts applied, then the operator's writes for each.
    pub wall_seconds: f64,
    /// Only the operator's share (finalizer, child, Event, status).
    pub operator_writes_seconds: f64,
    pub writes: usize,
    /// The same writes with the Numaflow stand-in reacting (its own namespace, its own stand-in
    /// with the cold start's settings): seconds until every child runs. `None` on the real stack.
    pub with_numaflow_seconds: Option<f64>,
}

/// One rollout of the workload: its kind's APIs and its manifest.
struct Item {
    rollout: ApiResource,
    child: ApiResource,
    /// `spec.<field>.spec` holds the child's spec.
    field: &'static str,
    manifest: Value,
}

fn items(n: usize) -> Vec<Item> {
    let pr = ApiResource::erase::<PipelineRollout>(&());
    let mvr = ApiResource::erase::<MonoVertexRollout>(&());
    let isbr = ApiResource::erase::<ISBServiceRollout>(&());
    let mut out = vec![Item {
        rollout: isbr,
        child: ApiResource::erase::<InterStepBufferService>(&()),
        field: "interStepBufferService",
        manifest: workload::isbsvc_rollout(),
    }];
    out.extend(workload::pipeline_names(n).iter().map(|p| Item {
        rollout: pr.clone(),
        child: ApiResource::erase::<Pipeline>(&()),
        field: "pipeline",
        manifest: workload::pipeline_rollout(p, 5),
    }));
    out.extend(workload::monovertex_names(n).iter().map(|m| Item {
        rollout: mvr.clone(),
        child: ApiResource::erase::<MonoVertex>(&()),
        field: "monoVertex",
        manifest: workload::monovertex_rollout(m),
    }));
    out
}

/// Measures the floor for `n` in a namespace of its own (`ns`), `concurrency` requests at once.
pub async fn measure(client: &Client, ns: &str, n: usize, concurrency: usize) -> Result<Floor> {
    let items = items(n);
    let rollouts = items.len();
    let started = Instant::now();
    let operator_started = write_all(client, ns, items, concurrency).await?;
    Ok(Floor {
        n,
        rollouts,
        concurrency,
        wall_seconds: crate::measure::round3(started.elapsed().as_secs_f64()),
        operator_writes_seconds: crate::measure::round3(operator_started.elapsed().as_secs_f64()),
        writes: rollouts * 5,
        with_numaflow_seconds: None,
    })
}

/// The floor's writes for `n` in `ns`, where a Numaflow stand-in already runs: seconds from the
/// first write until every child (Pipeline, MonoVertex, ISB service) reports phase `Running`.
pub async fn measure_with_numaflow(
    client: &Client,
    ns: &str,
    n: usize,
    concurrency: usize,
) -> Result<f64> {
    let mut items = items(n);
    // The operator points each pipeline at its ISB service's child; so must the floor, or the
    // stand-in would wait for an ISB service that never comes.
    let isb_child = format!("{}-0", workload::ISB_NAME);
    for item in items.iter_mut().filter(|i| i.field == "pipeline") {
        item.manifest["spec"]["pipeline"]["spec"]["interStepBufferServiceName"] = json!(isb_child);
    }
    let expected = items.len();
    let running = tokio::spawn(until_running(client.clone(), ns.to_string(), expected));
    let started = Instant::now();
    write_all(client, ns, items, concurrency).await?;
    tokio::time::timeout(std::time::Duration::from_secs(1800), running)
        .await
        .context("children still not running after 30 minutes")???;
    Ok(crate::measure::round3(started.elapsed().as_secs_f64()))
}

/// Returns once `expected` children in `ns` report phase `Running` at the same time.
async fn until_running(client: Client, ns: String, expected: usize) -> Result<()> {
    let kinds = [
        ApiResource::erase::<Pipeline>(&()),
        ApiResource::erase::<MonoVertex>(&()),
        ApiResource::erase::<InterStepBufferService>(&()),
    ];
    let streams = kinds.map(|ar| {
        let kind = ar.kind.clone();
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar);
        watcher(api, watcher::Config::default())
            .applied_objects()
            .map_ok(move |o| (kind.clone(), o))
            .boxed()
    });
    let mut events = stream::select_all(streams);
    let mut running = HashSet::new();
    while let Some((kind, obj)) = events.try_next().await? {
        let key = (kind, obj.name_any());
        if obj.data.pointer("/status/phase").and_then(Value::as_str) == Some("Running") {
            running.insert(key);
        } else {
            running.remove(&key);
        }
        if running.len() >= expected {
            return Ok(());
        }
    }
    anyhow::bail!("the watch of the floor's children ended")
}

/// Applies the rollouts as the user does, then makes the operator's writes for each; returns
/// when the operator's part began.
async fn write_all(
    client: &Client,
    ns: &str,
    items: Vec<Item>,
    concurrency: usize,
) -> Result<Instant> {
    // The user's side, as the cold start does it.
    let applied: Vec<(Item, DynamicObject)> = stream::iter(items)
        .map(|item| async move {
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &item.rollout);
            let name = item.manifest["metadata"]["name"]
                .as_str()
                .context("manifest without a name")?
                .to_string();
            let obj = api
                .patch(
                    &name,
                    &PatchParams::apply("bench-user").force(),
                    &Patch::Apply(&item.manifest),
                )
                .await
                .with_context(|| format!("applying {name}"))?;
            Ok::<_, anyhow::Error>((item, obj))
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    let operator_started = Instant::now();
    // The operator's side: four writes per rollout, one rollout per worker at a time.
    stream::iter(applied)
        .map(|(item, rollout)| operator_writes(client, ns, item, rollout))
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(operator_started)
}

/// What the operator writes for a new rollout, in its order: the finalizer, the child, an Event,
/// the status.
async fn operator_writes(
    client: &Client,
    ns: &str,
    item: Item,
    rollout: DynamicObject,
) -> Result<()> {
    let name = rollout.name_any();
    let rollouts = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &item.rollout);
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    rollouts
        .patch(
            &name,
            &params,
            &Patch::Merge(json!({"metadata": {"finalizers": [numaplane_api::keys::FINALIZER]}})),
        )
        .await
        .with_context(|| format!("finalizer of {name}"))?;
    let child_name = format!("{name}-0");
    let child = json!({
        "apiVersion": format!("{}/{}", item.child.group, item.child.version),
        "kind": item.child.kind,
        "metadata": {
            "name": child_name,
            "labels": {
                numaplane_api::keys::labels::PARENT_ROLLOUT_NAME: name,
                numaplane_api::keys::labels::UPGRADE_STATE: "promoted",
                numaplane_api::keys::labels::PART_OF: numaplane_api::keys::labels::PART_OF_NUMAPLANE,
            },
            "ownerReferences": [{
                "apiVersion": format!("{}/{}", item.rollout.group, item.rollout.version),
                "kind": item.rollout.kind, "name": name,
                "uid": rollout.metadata.uid.clone().unwrap_or_default(),
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": rollout.data.pointer(&format!("/spec/{}/spec", item.field)).cloned().unwrap_or_default()
    });
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &item.child)
        .patch(
            &child_name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&child),
        )
        .await
        .with_context(|| format!("child {child_name}"))?;
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}.floor"), "namespace": ns},
        "eventTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "reportingController": "numaplane-bench", "reportingInstance": "floor",
        "action": "ReconciliationSuccessful", "reason": "ReconciliationSuccessful",
        "type": "Normal", "note": format!("created {} {child_name}", item.child.kind),
        "regarding": {"apiVersion": format!("{}/{}", item.rollout.group, item.rollout.version),
                      "kind": item.rollout.kind, "name": name, "namespace": ns,
                      "uid": rollout.metadata.uid.clone().unwrap_or_default()}
    }))?;
    Api::<Event>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &event)
        .await
        .with_context(|| format!("Event about {name}"))?;
    let condition = |t: &str| {
        json!({"type": t, "status": "True", "reason": "Successful", "message": "Successful",
               "observedGeneration": rollout.metadata.generation.unwrap_or(1),
               "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()})
    };
    let status = json!({
        "apiVersion": format!("{}/{}", item.rollout.group, item.rollout.version),
        "kind": item.rollout.kind,
        "metadata": {"name": name},
        "status": {
            "phase": "Deployed", "message": "Deployed",
            "observedGeneration": rollout.metadata.generation.unwrap_or(1),
            "conditions": [condition("ChildResourceDeployed"), condition("ChildResourcesHealthy")]
        }
    });
    rollouts
        .patch_status(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&status),
        )
        .await
        .with_context(|| format!("status of {name}"))?;
    Ok(())
}
