//! PipelineRollout: resolves the InterStepBufferService its pipeline uses, labels the child with
//! it, and resumes vertices slowly after a user pause unless `fastResume` is set.

use super::kind::{Carry, Resolution, Rollout};
use crate::child_cache::ChildCache;
use crate::children::{ChildObject, DesiredChild};
use crate::context::{Ctx, Stores};
use crate::error::{Error, KubeContext, is_not_found};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::common::ChildMetadata;
use numaplane_api::keys::{annotations, condition, event_reason, labels, upgrade_state};
use numaplane_api::numaflow::{Pipeline, Vertex};
use numaplane_api::{Kind, PipelineRollout, PipelineRolloutStatus};
use numaplane_core::desired::KindInputs;
use numaplane_core::health::{self, Health, HealthStatus};
use numaplane_core::riders::RiderSpec;
use serde_json::Value;
use tracing::info;

/// The ISB service a pipeline runs on.
pub struct IsbTarget {
    /// The ISBServiceRollout named in the pipeline spec.
    pub rollout: String,
    /// Its current InterStepBufferService child.
    pub child: String,
    /// The rollouts requesting a pause of this pipeline (its ISBServiceRollout, the
    /// NumaflowControllerRollout of the namespace), empty when none.
    pub pause_requests: Vec<String>,
}

fn allows_data_loss(rollout: &PipelineRollout) -> bool {
    rollout
        .annotations()
        .get(numaplane_api::keys::annotations::ALLOW_DATA_LOSS)
        .is_some_and(|v| v == "true")
}

/// While its ISBServiceRollout needs the pipeline drained (a recreate), a pipeline that paused
/// without draining is resumed to drain again, a bounded number of times
/// ([`numaplane_core::ppnd::drain_retry`]). Writes the attempt count on `target` and, when this
/// pass starts or keeps such a resume, makes `target` the running live spec and says why.
fn drain_again(
    ctx: &Ctx,
    rollout: &PipelineRollout,
    live: &Pipeline,
    target: &mut DesiredChild,
) -> Option<String> {
    use numaplane_core::ppnd::drain_retry::{DRAIN_ATTEMPTS, DrainRetry, Paused, decide};
    let ns = live.ns();
    let isb = numaplane_core::child::isb_rollout_name(&rollout.spec.pipeline.spec);
    let since = crate::pause_requests::drain_requested_since(&ctx.stores, ns, &isb)?;
    // Counted per request: a count of an earlier request does not carry over.
    let attempts = live
        .annotations()
        .get(annotations::DRAIN_ATTEMPTS)
        .and_then(|v| v.split_once(" since "))
        .filter(|(_, at)| *at == since)
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(0);
    let status = live.status.as_ref();
    let step = decide(&Paused {
        live_wants_paused: numaplane_core::child::SpecView(&live.spec).wants_paused(),
        phase: live_phase(status),
        drained_on_pause: status
            .and_then(|s| s.get("drainedOnPause"))
            .and_then(Value::as_bool),
        attempts,
        user_wants_paused: numaplane_core::child::SpecView(&rollout.spec.pipeline.spec)
            .wants_paused(),
    });
    let (DrainRetry::Pause { attempts: n } | DrainRetry::Resume { attempts: n }) = step;
    if n > 0 {
        target.annotations.insert(
            annotations::DRAIN_ATTEMPTS.into(),
            format!("{n} since {since}"),
        );
    }
    let DrainRetry::Resume { attempts } = step else {
        return None;
    };
    target.spec = numaplane_core::ppnd::pipeline::unforced(&live.spec, &rollout.spec.pipeline.spec);
    Some(format!(
        "pipeline {} paused without draining; resumed to drain again (attempt {attempts} of {DRAIN_ATTEMPTS}): ISBServiceRollout {isb} recreates its InterStepBufferService, which deletes the buffers",
        target.name
    ))
}

/// Keeps the pipeline paused while an ISBServiceRollout or NumaflowControllerRollout requests it
/// (docs/compatibility.md): the live spec with `desiredPhase: Paused`, or, once Paused, the desired spec
/// still paused. Marked `PipelinePauseAndDrain` in `status.upgradeInProgress`, so the pipeline
/// is resumed (`strategy.ppnd.fastResume`) by [`pause_and_drain`] once the request ends.
async fn paused_on_request(
    ctx: &Ctx,
    rollout: &PipelineRollout,
    st: &mut PipelineRolloutStatus,
    live: &Pipeline,
    desired: DesiredChild,
    pause_live: bool,
    by: &[String],
) -> Result<Carry<Pipeline>, Error> {
    use numaplane_api::common::UpgradeStrategy;
    st.status.upgrade_in_progress = UpgradeStrategy::PipelinePauseAndDrain;
    let mut target = DesiredChild {
        spec: numaplane_core::ppnd::pipeline::kept_paused(pause_live, &live.spec, &desired.spec),
        ..desired
    };
    let by = by.join(", ");
    if let Some(drain) = drain_again(ctx, rollout, live, &mut target) {
        // Said when the resume is written, not on each pass until Numaflow reports it Running.
        let child = if crate::children::needs_apply(live, &target) {
            let child = crate::children::apply(ctx, live, &target).await?;
            ctx.events
                .publish(
                    Kind::Pipeline.event_source(),
                    &live.object_ref(&()),
                    EventType::Normal,
                    event_reason::PIPELINE_DRAIN_AGAIN,
                    drain.clone(),
                )
                .await;
            info!(child = %target.name, %drain, "resuming pipeline to drain it again");
            child
        } else {
            live.clone()
        };
        return Ok(Carry::Prepared {
            child,
            pending: Some(format!("pause-and-drain: {drain}")),
        });
    }
    let child = if crate::children::needs_apply(live, &target) {
        let pausing = desired_phase(&live.spec) != "Paused";
        let child = crate::children::apply(ctx, live, &target).await?;
        if pausing {
            info!(child = %target.name, %by, "pausing pipeline on request");
            ctx.events
                .publish(
                    Kind::Pipeline.event_source(),
                    &live.object_ref(&()),
                    EventType::Normal,
                    event_reason::PIPELINE_PAUSE,
                    format!("pausing pipeline {}: pause requested by {by}", target.name),
                )
                .await;
        }
        child
    } else {
        live.clone()
    };
    Ok(Carry::Prepared {
        child,
        pending: Some(format!(
            "pause-and-drain: pipeline {} kept paused: pause requested by {by}",
            target.name
        )),
    })
}

/// The last step of a pause-and-drain: the desired spec applied as it is (after the slow
/// resume's replica reset when `resuming` without `ppnd.fastResume`), nothing left in progress,
/// and the step's Event.
#[allow(clippy::too_many_arguments)]
async fn finish(
    ctx: &Ctx,
    rollout: &PipelineRollout,
    st: &mut PipelineRolloutStatus,
    live: &Pipeline,
    desired: &DesiredChild,
    resuming: bool,
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
    reason: &str,
    note: String,
) -> Result<Carry<Pipeline>, Error> {
    use numaplane_api::common::UpgradeStrategy;
    if resuming && !ppnd_fast_resume(rollout) {
        clear_vertex_replicas(ctx, desired).await?;
    }
    let child = crate::children::apply(ctx, live, desired).await?;
    st.status.upgrade_in_progress = UpgradeStrategy::NoOp;
    ctx.events
        .publish(
            Kind::Pipeline.event_source(),
            regarding,
            EventType::Normal,
            reason,
            note,
        )
        .await;
    Ok(Carry::Prepared {
        child,
        pending: None,
    })
}

/// `strategy.ppnd.fastResume`: resume after a pause-and-drain keeping vertex replicas.
fn ppnd_fast_resume(rollout: &PipelineRollout) -> bool {
    rollout
        .spec
        .strategy
        .as_ref()
        .and_then(|s| s.ppnd.as_ref())
        .and_then(|p| p.fast_resume)
        .unwrap_or(false)
}

/// Slow resume: vertices restart from `scale.min` and scale up gradually.
async fn clear_vertex_replicas(ctx: &Ctx, desired: &DesiredChild) -> Result<(), Error> {
    ctx.ensure_leader()?;
    let api: Api<Vertex> = Api::namespaced(ctx.client.clone(), &desired.namespace);
    for v in numaplane_core::child::vertex_names(&desired.spec) {
        let name = format!("{}-{v}", desired.name);
        let patch = serde_json::json!({"spec": {"replicas": null}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e).ctx(|| format!("clearing replicas of Vertex {name}")),
        }
    }
    info!(child = %desired.name, "slow resume: vertex replicas cleared");
    Ok(())
}

/// Carries a change under the `pause-and-drain` strategy (docs/compatibility.md): a change of a data-loss
/// field pauses the pipeline, waits until it has drained and paused, applies the change while
/// paused, then resumes. The strategy in progress is kept in `status.upgradeInProgress`, so a
/// restarted controller carries on where it stopped. Whether the pipeline is kept paused for
/// another rollout, updated directly or taken a step further is decided by
/// [`numaplane_core::ppnd::pipeline::plan`] from the live pipeline; this carries it out. (Long:
/// one arm per step of that decision, each a write or two, read best side by side.)
async fn pause_and_drain(
    rollout: &PipelineRollout,
    ctx: &Ctx,
    st: &mut PipelineRolloutStatus,
    live: &Pipeline,
    desired: DesiredChild,
) -> Result<Carry<Pipeline>, Error> {
    use numaplane_api::common::UpgradeStrategy;
    use numaplane_core::ppnd::PpndStep;
    use numaplane_core::ppnd::pipeline::{PipelineAction, PipelineInput};
    let ns = desired.namespace.clone();
    let allow_data_loss = allows_data_loss(rollout);
    let mut desired = desired;
    let requests = crate::pause_requests::requests_for_pipeline(
        &ctx.stores,
        &ns,
        &numaplane_core::child::isb_rollout_name(&rollout.spec.pipeline.spec),
    );
    let usde = ctx.settings.usde();
    let plan = numaplane_core::ppnd::pipeline::plan(&PipelineInput {
        desired_spec: &desired.spec,
        user_spec: &rollout.spec.pipeline.spec,
        live_spec: &live.spec,
        live_status: live.status.as_ref(),
        desired_labels: &desired.labels,
        live_labels: live.labels(),
        desired_annotations: &desired.annotations,
        live_annotations: live.annotations(),
        allow_data_loss,
        pause_requested: !requests.is_empty(),
        in_progress: st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain,
        user_strategy: ctx.settings.user_strategy(&ns),
        usde: usde.as_ref().map(|u| u.for_kind(Kind::Pipeline)),
    });
    if let Some(spec) = plan.unforced {
        desired.spec = spec;
    }
    let (step, fields) = match plan.action {
        PipelineAction::KeepPaused { pause_live } => {
            return paused_on_request(ctx, rollout, st, live, desired, pause_live, &requests).await;
        }
        PipelineAction::Apply => return Ok(Carry::Apply(Box::new(desired))),
        PipelineAction::Step {
            step,
            starts,
            fields,
        } => {
            if starts {
                info!(child = %desired.name, ?fields, "pause-and-drain: change needs the pipeline paused");
                st.status.upgrade_in_progress = UpgradeStrategy::PipelinePauseAndDrain;
            }
            (step, fields)
        }
    };
    let child_ref = live.object_ref(&());
    match step {
        PpndStep::Done => {
            st.status.upgrade_in_progress = UpgradeStrategy::NoOp;
            Ok(Carry::Apply(Box::new(desired)))
        }
        PpndStep::ApplyDirect { resuming } => {
            let why = if allow_data_loss {
                "data loss is allowed"
            } else {
                "it is Failed and won't pause"
            };
            let note = format!("pipeline {} updated without a pause: {why}", desired.name);
            let regarding = rollout.object_ref(&());
            let carry = finish(
                ctx,
                rollout,
                st,
                live,
                &desired,
                resuming,
                &regarding,
                event_reason::PIPELINE_UPDATE,
                note,
            )
            .await?;
            info!(child = %desired.name, why, "pause-and-drain: updated directly");
            Ok(carry)
        }
        PpndStep::Resume => {
            let note = format!("pipeline {} resumed after its update", desired.name);
            let carry = finish(
                ctx,
                rollout,
                st,
                live,
                &desired,
                true,
                &child_ref,
                event_reason::PIPELINE_RESUME,
                note,
            )
            .await?;
            info!(child = %desired.name, "pause-and-drain: updated and resumed");
            Ok(carry)
        }
        PpndStep::ApplyPaused => {
            let paused = DesiredChild {
                spec: numaplane_core::ppnd::paused(&desired.spec),
                ..desired.clone()
            };
            let child = crate::children::apply(ctx, live, &paused).await?;
            ctx.events
                .publish(
                    Kind::Pipeline.event_source(),
                    &rollout.object_ref(&()),
                    EventType::Normal,
                    event_reason::PIPELINE_UPDATE,
                    format!("pipeline {} updated while paused", desired.name),
                )
                .await;
            Ok(Carry::Prepared {
                child,
                pending: Some(format!(
                    "pause-and-drain: pipeline {} updated while paused; resuming",
                    desired.name
                )),
            })
        }
        PpndStep::Pause => {
            let pausing = DesiredChild {
                spec: numaplane_core::ppnd::paused(&live.spec),
                ..desired.clone()
            };
            let child = crate::children::apply(ctx, live, &pausing).await?;
            ctx.events
                .publish(
                    Kind::Pipeline.event_source(),
                    &child_ref,
                    EventType::Normal,
                    event_reason::PIPELINE_PAUSE,
                    format!(
                        "pausing pipeline {} to apply {}",
                        desired.name,
                        fields.join(", ")
                    ),
                )
                .await;
            Ok(Carry::Prepared {
                child,
                pending: Some(format!(
                    "pause-and-drain: pausing pipeline {} before applying a change of {}",
                    desired.name,
                    fields.join(", ")
                )),
            })
        }
        PpndStep::WaitPaused { phase } => Ok(Carry::Prepared {
            child: live.clone(),
            pending: Some(format!(
                "pause-and-drain: waiting for pipeline {} to drain and pause (phase {phase}) before \
                 applying a change of {}; annotate the rollout {}=\"true\" to apply it without \
                 waiting",
                desired.name,
                fields.join(", "),
                numaplane_api::keys::annotations::ALLOW_DATA_LOSS
            )),
        }),
    }
}

/// The InterStepBufferService a pipeline names, if any (Numaflow takes `default` otherwise).
fn isbsvc_of(p: &Pipeline) -> Option<&str> {
    p.spec
        .get("interStepBufferServiceName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

fn desired_phase(spec: &Value) -> &str {
    spec.pointer("/lifecycle/desiredPhase")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("Running")
}

fn live_phase(status: Option<&Value>) -> &str {
    status
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl Rollout for PipelineRollout {
    type Child = Pipeline;
    type Status = PipelineRolloutStatus;
    type Resolved = IsbTarget;

    const ON_DELETION: numaplane_core::deletion::Guard =
        numaplane_core::deletion::Guard::DrainPipelines;

    fn child_template(&self) -> (Option<&ChildMetadata>, &Value) {
        (
            self.spec.pipeline.metadata.as_ref(),
            &self.spec.pipeline.spec,
        )
    }

    fn rider_specs(&self) -> Vec<RiderSpec> {
        super::kind::rider_specs(&self.spec.riders)
    }

    fn progressive_strategy(&self) -> Option<super::kind::ProgressiveOf<'_>> {
        let s = self.spec.strategy.as_ref();
        Some((
            Kind::Pipeline,
            s.and_then(|s| s.progressive.as_ref()),
            s.and_then(|s| s.analysis.as_ref()),
        ))
    }

    fn read_record(st: &PipelineRolloutStatus) -> numaplane_core::progressive::Record {
        numaplane_core::progressive::Record::from_pipeline(st)
    }

    fn write_record(rec: &numaplane_core::progressive::Record, st: &mut PipelineRolloutStatus) {
        rec.write_pipeline(st)
    }

    fn status_of(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }

    fn children(stores: &Stores) -> &ChildCache<Pipeline> {
        &stores.pipelines
    }

    fn validate(spec: &Value) -> Result<(), Error> {
        numaplane_core::child::validate_pipeline_spec(spec, Self::KIND.spec_path())
            .map_err(|e| Error::InvalidSpec(format!("invalid Numaflow Pipeline spec: {e}")))
    }

    async fn resolve(&self, ctx: &Ctx) -> Result<Resolution<IsbTarget>, Error> {
        let ns = self.ns();
        let rollout = numaplane_core::child::isb_rollout_name(&self.spec.pipeline.spec);
        let exists = ctx
            .stores
            .isb_rollouts
            .get(&ObjectRef::new(&rollout).within(ns))
            .is_some();
        if !exists {
            return Err(Error::MissingIsbServiceRollout(rollout));
        }
        let pause_requests =
            crate::pause_requests::requests_for_pipeline(&ctx.stores, ns, &rollout);
        Ok(
            match super::lookup::current_isbsvc(&ctx.stores.isbsvcs, ns, &rollout) {
                Some(child) => Resolution::Ready(IsbTarget {
                    rollout,
                    child,
                    pause_requests,
                }),
                None => Resolution::Waiting(format!(
                    "waiting for ISBServiceRollout {rollout} to create its InterStepBufferService"
                )),
            },
        )
    }

    /// Pipelines on an ISB service that became recyclable follow it, with its reason, and are
    /// drained before they go like any recyclable pipeline (docs/compatibility.md).
    fn retiring(
        &self,
        ctx: &Ctx,
        children: &[std::sync::Arc<Pipeline>],
    ) -> Vec<numaplane_core::pass::Retirement<std::sync::Arc<Pipeline>>> {
        let ns = self.ns();
        let mut retiring = Vec::new();
        for p in children {
            if p.labels().get(labels::UPGRADE_STATE).map(String::as_str)
                == Some(upgrade_state::RECYCLABLE)
                || p.meta().deletion_timestamp.is_some()
            {
                continue;
            }
            let on = isbsvc_of(p).unwrap_or_default();
            let retired = ctx.stores.isbsvcs.named(ns, on).filter(|i| {
                i.labels().get(labels::UPGRADE_STATE).map(String::as_str)
                    == Some(upgrade_state::RECYCLABLE)
            });
            if let Some(isb) = retired {
                let reason = isb
                    .labels()
                    .get(labels::UPGRADE_STATE_REASON)
                    .cloned()
                    .unwrap_or_default();
                info!(child = %p.name_any(), isbsvc = %on, %reason, "pipeline follows its recyclable InterStepBufferService");
                retiring.push(numaplane_core::pass::Retirement {
                    child: std::sync::Arc::clone(p),
                    why: format!("{} (InterStepBufferService {on} is {reason})", p.name_any()),
                    reason,
                });
            }
        }
        retiring
    }

    fn placement_waits(&self, ctx: &Ctx, isb: &IsbTarget, instance: &str) -> Option<String> {
        let ns = self.ns();
        let on = ctx
            .stores
            .isbsvcs
            .named(ns, &isb.child)
            .map(|i| super::placement::instance_of(&*i).to_string());
        (on.as_deref() != Some(instance)).then(|| {
            format!(
                "waiting for ISBServiceRollout {} to run an InterStepBufferService on Numaflow controller instance {instance:?} (InterStepBufferService {} is on {:?})",
                isb.rollout,
                isb.child,
                on.unwrap_or_default()
            )
        })
    }

    fn kind_inputs<'a>(&'a self, isb: &'a IsbTarget) -> KindInputs<'a> {
        KindInputs::Pipeline {
            isb_rollout: &isb.rollout,
            isb_child: &isb.child,
            pause_requests: &isb.pause_requests,
            allow_data_loss: allows_data_loss(self),
        }
    }

    async fn recycle(
        &self,
        ctx: &Ctx,
        child: &Pipeline,
    ) -> Result<Option<k8s_openapi::jiff::Timestamp>, Error> {
        super::recycle::recycle(self, ctx, child).await
    }

    async fn before_update(
        &self,
        ctx: &Ctx,
        live: &Pipeline,
        desired: &DesiredChild,
    ) -> Result<(), Error> {
        let fast = self
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.pause_resume.as_ref())
            .and_then(|p| p.fast_resume)
            .unwrap_or(false);
        let resuming = desired_phase(&desired.spec) == "Running"
            && matches!(live_phase(live.status()), "Pausing" | "Paused");
        if fast || !resuming {
            return Ok(());
        }
        clear_vertex_replicas(ctx, desired).await
    }

    async fn carry_update(
        &self,
        ctx: &Ctx,
        st: &mut PipelineRolloutStatus,
        live: &Pipeline,
        desired: DesiredChild,
    ) -> Result<Carry<Pipeline>, Error> {
        pause_and_drain(self, ctx, st, live, desired).await
    }

    fn health(_ctx: &Ctx, child: &Pipeline) -> Health {
        health::pipeline_health(&child.to_json())
    }

    fn still_coming_up(ctx: &Ctx, child: &Pipeline) -> bool {
        if health::numaflow_catching_up(&child.to_json()) {
            return true;
        }
        // Numaflow fails a pipeline whose ISB service is not healthy yet, with this message,
        // until its next pass after the service runs.
        let status = child.status();
        let at = |k: &str| status.and_then(|s| s.get(k)).and_then(Value::as_str);
        if at("phase") != Some("Failed") || at("message") != Some("isbsvc not healthy") {
            return false;
        }
        let isb = isbsvc_of(child).unwrap_or("default");
        let ns = child.ns();
        // Coming up (or just up, the pipeline not yet told), not broken: a pipeline on an ISB
        // service Numaflow itself marked Failed is reported at once. The status hold bounds
        // the wait either way.
        ctx.stores.isbsvcs.named(ns, isb).is_some_and(|svc| {
            svc.status
                .as_ref()
                .and_then(|s| s.get("phase"))
                .and_then(Value::as_str)
                != Some("Failed")
        })
    }

    fn observe_metrics(&self, ctx: &Ctx, st: &PipelineRolloutStatus, now: &Time) {
        use crate::metrics::PauseGauge;
        let system = st.status.upgrade_in_progress
            == numaplane_api::common::UpgradeStrategy::PipelinePauseAndDrain;
        let (pausing, paused) =
            crate::pause_requests::pipeline_pause_seconds(st.pause_status.as_ref(), system, now);
        let (ns, name) = (self.ns(), self.name_any());
        ctx.metrics
            .pause_seconds(PauseGauge::PipelineSystemPausing, ns, &name, pausing);
        ctx.metrics
            .pause_seconds(PauseGauge::PipelineSystemPaused, ns, &name, paused);
    }

    fn observe_child(
        st: &mut PipelineRolloutStatus,
        child: &Pipeline,
        generation: i64,
        now: &Time,
    ) {
        let (status, reason, message) = health::pipeline_pausing_or_paused(&child.to_json());
        numaplane_core::conditions::set_condition(
            &mut st.status.conditions,
            condition::PIPELINE_PAUSING_OR_PAUSED,
            if status {
                HealthStatus::True
            } else {
                HealthStatus::False
            },
            reason,
            message,
            generation,
            now.clone(),
        );
        let phase = live_phase(child.status());
        let ps = st.pause_status.get_or_insert_with(Default::default);
        let after = |a: &Option<Time>, b: &Option<Time>| match (a, b) {
            (Some(a), Some(b)) => a.0 > b.0,
            (Some(_), None) => true,
            _ => false,
        };
        match phase {
            "Pausing" | "Paused" => {
                // The real controller pauses an idle pipeline in well under a second, so the
                // Pausing phase may never be observed: the first sight of either begins a pause
                // (the reference waits for Pausing and then never records the pause's end).
                if ps.last_pause_begin_time.is_none()
                    || !after(&ps.last_pause_begin_time, &ps.last_pause_end_time)
                {
                    ps.last_pause_begin_time = Some(now.clone());
                }
                // Within the same second as the begin is still this pause's change.
                if phase == "Paused"
                    && (ps.last_pause_phase_change_time.is_none()
                        || after(&ps.last_pause_begin_time, &ps.last_pause_phase_change_time))
                {
                    ps.last_pause_phase_change_time = Some(now.clone());
                }
            }
            _ => {
                if ps.last_pause_begin_time.is_some()
                    && !after(&ps.last_pause_end_time, &ps.last_pause_begin_time)
                {
                    ps.last_pause_end_time = Some(now.clone());
                }
            }
        }
        if *ps == Default::default() {
            st.pause_status = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).expect("valid time"))
    }

    fn observe(st: &mut PipelineRolloutStatus, phase: &str, secs: i64) {
        let child: Pipeline = serde_json::from_value(serde_json::json!({
            "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "Pipeline",
            "metadata": {"name": "p"}, "spec": {}, "status": {"phase": phase}
        }))
        .expect("pipeline");
        <PipelineRollout as Rollout>::observe_child(st, &child, 1, &at(secs));
    }

    #[test]
    fn a_pause_seen_only_as_paused_still_has_a_begin_and_an_end() {
        let mut st = PipelineRolloutStatus::default();
        observe(&mut st, "Running", 10);
        assert!(st.pause_status.is_none());
        observe(&mut st, "Paused", 20);
        observe(&mut st, "Paused", 21);
        let ps = st.pause_status.clone().expect("pause status");
        assert_eq!(ps.last_pause_begin_time, Some(at(20)));
        assert_eq!(ps.last_pause_phase_change_time, Some(at(20)));
        observe(&mut st, "Running", 30);
        observe(&mut st, "Running", 31);
        let ps = st.pause_status.clone().expect("pause status");
        assert_eq!(ps.last_pause_end_time, Some(at(30)));
        // The next pause, this time through Pausing.
        observe(&mut st, "Pausing", 40);
        observe(&mut st, "Paused", 45);
        let ps = st.pause_status.expect("pause status");
        assert_eq!(ps.last_pause_begin_time, Some(at(40)));
        assert_eq!(ps.last_pause_phase_change_time, Some(at(45)));
        assert_eq!(ps.last_pause_end_time, Some(at(30)));
    }
}
