//! What a deleted rollout waits for before its children go, as
//! [`numaplane_core::deletion`] decides: a PipelineRollout pauses and drains its pipelines (for
//! at most `pipeline.deletionDrainTimeoutSeconds` from its deletion, unless it allows data loss);
//! an ISBServiceRollout keeps its InterStepBufferService while pipelines use it. Each wait is
//! said in the rollout's status and an Event.

use super::kind::{Rollout, publish};
use crate::children::{self, ChildObject};
use crate::context::Ctx;
use crate::error::{Error, KubeContext};
use crate::status::{self, RolloutStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::keys::{annotations, condition};
use numaplane_api::numaflow::Pipeline;
use numaplane_core::conditions::set_condition;
use numaplane_core::deletion::{Guard, PipelineStep, isbsvc_users, pipeline_step};
use numaplane_core::health::HealthStatus;
use std::time::Duration;
use tracing::info;

/// Re-check period while the deletion waits (the children's own changes wake it sooner).
const RECHECK: Duration = Duration::from_secs(5);
/// Re-check period once this pass started deletions.
const DELETING_RECHECK: Duration = Duration::from_secs(2);

/// The condition reason while a deletion waits.
const DELETION_WAITING: &str = "DeletionWaiting";

/// `Some(action)` while the deletion of `obj` must wait (having done this pass's part), `None`
/// once the remaining `live` children may be deleted at once.
pub(super) async fn guard<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    live: &[R::Child],
) -> Result<Option<Action>, Error> {
    match R::ON_DELETION {
        Guard::None => Ok(None),
        Guard::DrainPipelines => drain_pipelines(obj, ctx, live).await,
        Guard::HoldWhileUsed => hold_while_used(obj, ctx, live).await,
    }
}

async fn drain_pipelines<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    live: &[R::Child],
) -> Result<Option<Action>, Error> {
    let pending: Vec<&R::Child> = live
        .iter()
        .filter(|c| c.meta().deletion_timestamp.is_none())
        .collect();
    if pending.is_empty() {
        return Ok(None);
    }
    let now = Timestamp::now();
    let deleted_at = obj.meta().deletion_timestamp.as_ref().map_or(now, |t| t.0);
    let timeout = ctx.settings.controller().deletion_drain_timeout;
    let deadline = numaplane_core::recycle::plus(deleted_at, timeout);
    let allow = obj
        .annotations()
        .get(annotations::ALLOW_DATA_LOSS)
        .is_some_and(|v| v == "true");
    let mut waiting = Vec::new();
    let mut until = deadline;
    for c in pending {
        let step = pipeline_step(&c.to_json(), allow, deadline, now);
        if let Some((why, u)) = drain_step::<R>(obj, ctx, c, step).await? {
            until = until.min(u.unwrap_or(deadline));
            waiting.push(why);
        }
    }
    if waiting.is_empty() {
        return Ok(Some(Action::requeue(DELETING_RECHECK)));
    }
    let msg = format!(
        "deleting: {} before deleting them (until {deadline} at most; annotate {}=\"true\" not to wait)",
        waiting.join("; "),
        annotations::ALLOW_DATA_LOSS
    );
    report_waiting(obj, ctx, &msg).await?;
    let left = Duration::try_from(until.duration_since(now)).unwrap_or_default();
    Ok(Some(Action::requeue(
        left.clamp(Duration::from_secs(1), RECHECK),
    )))
}

/// Carries out one pipeline's step; returns what the deletion still waits for, and until when.
async fn drain_step<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    c: &R::Child,
    step: PipelineStep,
) -> Result<Option<(String, Option<Timestamp>)>, Error> {
    let child = c.name_any();
    let regarding = c.object_ref(&());
    match step {
        PipelineStep::Delete(why) => {
            info!(%child, why, "deleting pipeline of deleted rollout");
            if children::delete_recording(ctx, c, None).await? {
                let note = format!(
                    "pipeline {child} of deleted {} {}: {why}; deleting",
                    R::kind(&()),
                    obj.name_any()
                );
                ctx.events
                    .publish(
                        R::KIND.event_source(),
                        &regarding,
                        EventType::Normal,
                        "Drained",
                        note,
                    )
                    .await;
            }
            Ok(None)
        }
        PipelineStep::DeleteUndrained(why) => {
            info!(%child, %why, "deleting undrained pipeline of deleted rollout");
            if children::delete_recording(ctx, c, Some(why.clone())).await? {
                let reason = numaplane_core::recycle::DrainResult::DrainIncomplete.as_str();
                let note = format!("pipeline {child}: {why}; deleting");
                ctx.events
                    .publish(
                        R::KIND.event_source(),
                        &regarding,
                        EventType::Warning,
                        reason,
                        note,
                    )
                    .await;
            }
            Ok(None)
        }
        PipelineStep::Pause => {
            info!(%child, "pausing pipeline of deleted rollout to drain it");
            ctx.ensure_leader()?;
            let patch = serde_json::json!({"spec": {"lifecycle": {"desiredPhase": "Paused"}}});
            children::patch::<R::Child, _>(
                ctx,
                c.ns(),
                &child,
                &children::patch_params(),
                &Patch::Merge(&patch),
            )
            .await
            .ctx(|| format!("pausing pipeline {child} to drain it"))?;
            Ok(Some((format!("pausing pipeline {child}"), None)))
        }
        PipelineStep::Wait { why, until } => Ok(Some((why, Some(until)))),
    }
}

async fn hold_while_used<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    live: &[R::Child],
) -> Result<Option<Action>, Error> {
    if live.is_empty() {
        return Ok(None);
    }
    let ns = obj.ns();
    // Every Pipeline of the namespace, Numaplane's or not, read live: a deletion is rare, and a
    // pipeline on the service must not lose its buffers whoever made it.
    let api: Api<Pipeline> = Api::namespaced(ctx.client.clone(), ns);
    let pipelines: Vec<serde_json::Value> = api
        .list(&ListParams::default())
        .await
        .ctx(|| format!("listing the pipelines of namespace {ns}"))?
        .items
        .iter()
        .map(|p| p.to_json())
        .collect();
    let names: Vec<String> = live.iter().map(|c| c.name_any()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let users = isbsvc_users(&pipelines, &names);
    if users.is_empty() {
        return Ok(None);
    }
    let msg = format!(
        "deleting: InterStepBufferService {} kept while pipelines {} use it; delete them first",
        names.join(", "),
        users.join(", ")
    );
    if report_waiting(obj, ctx, &msg).await? {
        publish(&ctx.events, obj, EventType::Warning, "DeletionBlocked", msg).await;
    }
    Ok(Some(Action::requeue(RECHECK)))
}

/// Says in the status what the deletion waits for; returns whether that changed.
async fn report_waiting<R: Rollout>(obj: &R, ctx: &Ctx, msg: &str) -> Result<bool, Error> {
    let before = obj.status_of().cloned().unwrap_or_default();
    let mut after = before.clone();
    let st = after.common_mut();
    st.message = msg.to_string();
    set_condition(
        &mut st.conditions,
        condition::CHILD_RESOURCE_DEPLOYED,
        HealthStatus::False,
        DELETION_WAITING,
        msg,
        obj.meta().generation.unwrap_or_default(),
        status::now(),
    );
    let changed = before != after;
    status::Ledger::new(before).write(obj, ctx, &after).await?;
    Ok(changed)
}
