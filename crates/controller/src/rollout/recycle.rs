//! Carries out [`numaplane_core::recycle::step`] for a PipelineRollout's recyclable pipelines:
//! drain, force drain, scale to zero, expire or delete, with the reference's Events and the
//! `progressive_pipeline_drains` metric. Every step's state lives in the pipeline's annotations
//! and spec, so a restarted controller continues it.

use crate::children;
use crate::context::Ctx;
use crate::error::{Error, KubeContext, is_conflict, is_not_found};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use numaplane_api::Kind;
use numaplane_api::Namespaced;
use numaplane_api::PipelineRollout;
use numaplane_api::keys::{annotations, labels, upgrade_state};
use numaplane_api::numaflow::Pipeline;
use numaplane_core::recycle::{self, DrainResult, Promoted, RecycleConfig, RecycleInput, Step};
use numaplane_core::template::{self, TemplateVars};
use serde_json::{Value, json};
use tracing::{debug, info};

fn now_rfc3339() -> String {
    crate::status::now()
        .0
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The rollout's pipeline spec as it would be for child `name` on ISB service `isbsvc`.
fn rollout_spec_for(
    rollout: &PipelineRollout,
    name: &str,
    isbsvc: Option<&str>,
) -> Result<Value, Error> {
    let ns = rollout.ns();
    let mut spec = template::render_json(
        &rollout.spec.pipeline.spec,
        &TemplateVars::pipeline(name, ns),
    )?;
    if let (Some(isb), Some(m)) = (isbsvc, spec.as_object_mut()) {
        m.insert("interStepBufferServiceName".into(), isb.into());
    }
    Ok(spec)
}

async fn merge_patch(ctx: &Ctx, p: &Pipeline, patch: Value, what: &str) -> Result<Pipeline, Error> {
    ctx.ensure_leader()?;
    patch_pipeline(ctx, p, &Patch::Merge(&patch))
        .await
        .ctx(|| format!("{what} of pipeline {}", p.name_any()))
}

/// Patches the recycled pipeline `p` as Numaplane (`children::patch`).
async fn patch_pipeline<P: serde::Serialize + std::fmt::Debug>(
    ctx: &Ctx,
    p: &Pipeline,
    patch: &Patch<P>,
) -> kube::Result<Pipeline> {
    let ns = p.ns();
    children::patch(ctx, ns, &p.name_any(), &children::patch_params(), patch).await
}

/// JSON-patch ops setting `min=max=n` (not disabled) on the named vertices, each guarded by its
/// name at its index.
fn scale_ops(p: &Pipeline, want: &[(String, i64)]) -> Vec<Value> {
    let vertices = numaplane_core::child::vertex_names(&p.spec);
    let mut ops = Vec::new();
    for (name, n) in want {
        let Some(i) = vertices.iter().position(|v| v == name) else {
            continue;
        };
        ops.push(json!({"op": "test", "path": format!("/spec/vertices/{i}/name"), "value": name}));
        ops.push(
            json!({"op": "add", "path": format!("/spec/vertices/{i}/scale"),
            "value": {"min": n, "max": n, "disabled": false}}),
        );
    }
    ops
}

async fn json_patch(ctx: &Ctx, p: &Pipeline, ops: Vec<Value>) -> kube::Result<Pipeline> {
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).map_err(kube::Error::SerdeError)?;
    patch_pipeline(ctx, p, &Patch::<()>::Json(patch)).await
}

/// Sets `min=max=n` (not disabled) on the named vertices.
async fn scale(ctx: &Ctx, p: &Pipeline, want: &[(String, i64)]) -> Result<(), Error> {
    ctx.ensure_leader()?;
    json_patch(ctx, p, scale_ops(p, want))
        .await
        .ctx(|| format!("scaling pipeline {}", p.name_any()))?;
    Ok(())
}

/// Scales an expired pipeline to zero and labels it `recyclable-expired` in one write,
/// conditional on the version read: a pass working from a copy older than its own last write
/// (the watch has not delivered it yet) must not expire it, and report it, a second time.
/// Returns whether this pass did it.
async fn keep_expired(ctx: &Ctx, p: &Pipeline) -> Result<bool, Error> {
    ctx.ensure_leader()?;
    let mut ops = vec![json!({"op": "replace", "path": "/metadata/resourceVersion",
        "value": p.resource_version()})];
    ops.extend(scale_ops(p, &recycle::zero_scales(&p.spec)));
    ops.push(json!({"op": "add",
        "path": format!("/metadata/labels/{}", labels::UPGRADE_STATE.replace('/', "~1")),
        "value": upgrade_state::RECYCLABLE_EXPIRED}));
    match json_patch(ctx, p, ops).await {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(false),
        Err(e) => Err(e).ctx(|| format!("expiring pipeline {}", p.name_any())),
    }
}

/// The pipeline's Vertex objects, read live (only a force drain about to pause needs them).
async fn pipeline_vertices(ctx: &Ctx, p: &Pipeline) -> Result<Vec<Value>, Error> {
    use kube::api::ListParams;
    use numaplane_api::numaflow::Vertex;
    let api: Api<Vertex> = Api::namespaced(ctx.client.clone(), p.ns());
    let lp = ListParams::default().labels(&format!(
        "{}={}",
        labels::NUMAFLOW_PIPELINE_NAME,
        p.name_any()
    ));
    Ok(api
        .list(&lp)
        .await
        .ctx(|| format!("listing vertices of {}", p.name_any()))?
        .items
        .iter()
        .map(Vertex::to_json)
        .collect())
}

async fn report(ctx: &Ctx, rollout: &PipelineRollout, p: &Pipeline, result: DrainResult) {
    let ns = p.ns();
    ctx.metrics
        .pipeline_drain(ns, &rollout.name_any(), &p.name_any(), result);
    let note = match result {
        DrainResult::StandardDrain => "drained with its own spec; deleting".to_string(),
        DrainResult::ForceDrain => "drained with the promoted spec; deleting".to_string(),
        DrainResult::DrainNotRequired | DrainResult::DrainIncomplete => {
            undrained_reason(rollout, p, result)
        }
    };
    let t = if result.is_warning() {
        EventType::Warning
    } else {
        EventType::Normal
    };
    ctx.events
        .publish(
            Kind::Pipeline.event_source(),
            &p.object_ref(&()),
            t,
            result.as_str(),
            format!("pipeline {}: {note}", p.name_any()),
        )
        .await;
}

/// Why `p` may be deleted without a complete drain, from what is visible on it and `rollout`
/// (the same facts the recycle step read), for its `deletion-reason` annotation and the Event.
fn undrained_reason(rollout: &PipelineRollout, p: &Pipeline, result: DrainResult) -> String {
    let ann = |k: &str| p.annotations().get(k).map(String::as_str);
    let why = if result == DrainResult::DrainIncomplete {
        format!(
            "not drained within maxRecyclableDurationMinutes of {} {}",
            annotations::RECYCLABLE_START_TIME,
            ann(annotations::RECYCLABLE_START_TIME).unwrap_or("?")
        )
    } else if ann(annotations::MARKED_FOR_DELETION) == Some("true") {
        format!(
            "deleted without draining: annotated {}",
            annotations::MARKED_FOR_DELETION
        )
    } else if rollout
        .spec
        .strategy
        .as_ref()
        .and_then(|s| s.progressive.as_ref())
        .and_then(|p| p.force_promote)
        .unwrap_or(false)
    {
        "deleted without draining: the rollout sets spec.strategy.progressive.forcePromote".into()
    } else if ann(annotations::REQUIRES_DRAIN) != Some("true") {
        format!(
            "deleted without draining: it never could ingest data (no {} annotation)",
            annotations::REQUIRES_DRAIN
        )
    } else {
        format!(
            "deleted without draining for an ISB service recreate: PipelineRollout {} is annotated {}",
            rollout.name_any(),
            annotations::ALLOW_DATA_LOSS
        )
    };
    format!("{}: {why}", result.as_str())
}

/// Deletes recyclable pipeline `p` if it is unchanged since it was read, recording why first
/// when it goes without a complete drain ([`children::delete_recording`]).
async fn delete_recycled(
    ctx: &Ctx,
    rollout: &PipelineRollout,
    p: &Pipeline,
    result: DrainResult,
) -> Result<bool, Error> {
    let reason = (!result.complete()).then(|| undrained_reason(rollout, p, result));
    children::delete_recording(ctx, p, reason).await
}

/// One recycling step for recyclable pipeline `p` of `rollout`; returns when to look again if
/// nothing else wakes the rollout first. (Long: one arm per [`Step`] of the pure decision,
/// each a write or two, read best side by side.)
pub async fn recycle(
    rollout: &PipelineRollout,
    ctx: &Ctx,
    p: &Pipeline,
) -> Result<Option<Timestamp>, Error> {
    // Already on its way out: its outcome was reported by the pass that deleted it.
    if p.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let ns = rollout.ns();
    let name = rollout.name_any();
    let cfg = ctx.settings.controller();
    let isbsvc = super::lookup::current_isbsvc(
        &ctx.stores.isbsvcs,
        ns,
        &numaplane_core::child::isb_rollout_name(&rollout.spec.pipeline.spec),
    );
    let rollout_spec = rollout_spec_for(rollout, &p.name_any(), None)?;
    let promoted = super::lookup::find_promoted::<PipelineRollout>(ctx, ns, &name);
    let promoted_target = match &promoted {
        Some(pr) => Some(rollout_spec_for(
            rollout,
            &pr.name_any(),
            isbsvc.as_deref(),
        )?),
        None => None,
    };
    let candidate = promoted
        .as_ref()
        .zip(promoted_target.as_ref())
        .map(|(pr, target)| Promoted {
            name: pr.metadata.name.as_deref().unwrap_or_default(),
            spec: &pr.spec,
            matches_rollout: numaplane_core::recycle::same_definition(&pr.spec, target),
        });
    let strategy = rollout.spec.strategy.as_ref();
    let historical = rollout
        .status
        .as_ref()
        .and_then(|s| s.progressive_status.as_ref())
        .and_then(|s| s.historical_pod_count.clone())
        .unwrap_or_default();
    let whole = p.to_json();
    let mut vertices: Option<Vec<Value>> = None;
    let step = loop {
        let step = recycle::step(&RecycleInput {
            pipeline: &whole,
            allow_data_loss: rollout
                .annotations()
                .get(annotations::ALLOW_DATA_LOSS)
                .is_some_and(|v| v == "true"),
            rollout_spec: &rollout_spec,
            force_promote: strategy
                .and_then(|s| s.progressive.as_ref())
                .and_then(|p| p.force_promote)
                .unwrap_or(false),
            historical_pod_count: &historical,
            promoted: candidate,
            vertices: vertices.as_deref(),
            config: RecycleConfig {
                max_recyclable: cfg.max_recyclable_duration,
                force_drain_failure_wait: cfg.force_drain_failure_wait,
                keep_undrained: cfg.keep_undrained_pipelines,
                scale_factor: strategy
                    .and_then(|s| s.recycle_strategy.as_ref())
                    .and_then(|r| r.scale_factor)
                    .unwrap_or(cfg.recycle_scale_factor),
            },
            now: crate::status::now().0,
        });
        if step == Step::ObserveVertices && vertices.is_none() {
            vertices = Some(pipeline_vertices(ctx, p).await?);
            continue;
        }
        break step;
    };
    let child = p.name_any();
    match step {
        Step::Delete(result) => {
            info!(%child, result = result.as_str(), "deleting recyclable pipeline");
            if delete_recycled(ctx, rollout, p, result).await? {
                report(ctx, rollout, p, result).await;
            }
        }
        Step::KeepExpired => {
            info!(%child, "recyclable pipeline expired undrained; kept scaled to zero");
            if keep_expired(ctx, p).await? {
                report(ctx, rollout, p, DrainResult::DrainIncomplete).await;
            }
        }
        Step::ScaleToZero(why) => {
            info!(%child, %why, "scaling recyclable pipeline to zero");
            scale(ctx, p, &recycle::zero_scales(&p.spec)).await?;
        }
        Step::Scale(want) => {
            info!(%child, ?want, "scaling recyclable pipeline for draining");
            scale(ctx, p, &want).await?;
        }
        Step::Pause { grace_seconds } => {
            info!(%child, grace_seconds, "pausing recyclable pipeline to drain it");
            merge_patch(
                ctx,
                p,
                json!({"spec": {"lifecycle": {"desiredPhase": "Paused",
                    "pauseGracePeriodSeconds": grace_seconds}}}),
                "pausing",
            )
            .await?;
        }
        Step::StampStartTime => {
            info!(%child, "recyclable pipeline without a start time: expiry counts from now");
            merge_patch(
                ctx,
                p,
                json!({"metadata": {"annotations": {
                    annotations::RECYCLABLE_START_TIME: now_rfc3339()}}}),
                "recording when it became recyclable",
            )
            .await?;
        }
        Step::MarkFailureStart => {
            info!(%child, "recyclable pipeline failed while draining");
            merge_patch(
                ctx,
                p,
                json!({"metadata": {"annotations": {
                    annotations::DRAIN_FAILURE_START_TIME: now_rfc3339()}}}),
                "recording the drain failure",
            )
            .await?;
            return Ok(Some(recycle::plus(
                crate::status::now().0,
                cfg.force_drain_failure_wait,
            )));
        }
        Step::ForceDrain { promoted, spec } => {
            info!(%child, %promoted, "force-draining with the promoted spec");
            let started = recycle::appended(
                p.annotations()
                    .get(annotations::FORCE_DRAIN_SPECS_STARTED)
                    .map(String::as_str),
                &promoted,
                true,
            );
            merge_patch(
                ctx,
                p,
                json!({
                    "metadata": {"annotations": {
                        annotations::FORCE_DRAIN_SPECS_STARTED: started,
                        annotations::DRAIN_FAILURE_START_TIME: null,
                        annotations::FORCE_DRAIN_SPEC_TIME: now_rfc3339(),
                        // The pause of the drain before is over: a stale start would give
                        // the force drain's pause no grace period at all.
                        "numaflow.numaproj.io/pause-timestamp": null,
                    }},
                    "spec": spec,
                }),
                "applying the promoted spec",
            )
            .await?;
        }
        Step::ForceDrainDone {
            promoted,
            drained,
            dedup,
        } => {
            let completed = recycle::appended(
                p.annotations()
                    .get(annotations::FORCE_DRAIN_SPECS_COMPLETED)
                    .map(String::as_str),
                &promoted,
                dedup,
            );
            let recorded = merge_patch(
                ctx,
                p,
                json!({"metadata": {"annotations": {
                    annotations::FORCE_DRAIN_SPECS_COMPLETED: completed}}}),
                "recording the force drain",
            )
            .await?;
            if drained {
                info!(%child, %promoted, "force-drained; deleting");
                if delete_recycled(ctx, rollout, &recorded, DrainResult::ForceDrain).await? {
                    report(ctx, rollout, p, DrainResult::ForceDrain).await;
                }
            } else {
                info!(%child, %promoted, "force drain with this spec did not drain");
            }
        }
        Step::ObserveVertices => {}
        Step::Wait { why, until } => {
            debug!(%child, %why, ?until, "recyclable pipeline waiting");
            return Ok(until);
        }
    }
    Ok(None)
}
