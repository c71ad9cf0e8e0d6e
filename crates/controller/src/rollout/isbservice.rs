//! ISBServiceRollout: one PodDisruptionBudget per InterStepBufferService, and health that
//! includes the JetStream StatefulSet's rollout.

use super::kind::{Carry, Resolution, Rollout};
use crate::child_cache::ChildCache;
use crate::children::{DesiredChild, FIELD_MANAGER};
use crate::context::{Ctx, Stores};
use crate::error::{Error, KubeContext};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::common::ChildMetadata;
use numaplane_api::common::UpgradeStrategy;
use numaplane_api::keys::{event_reason, labels, upgrade_state_reason};
use numaplane_api::numaflow::{InterStepBufferService, Pipeline};
use numaplane_api::{ISBServiceRollout, ISBServiceRolloutStatus, Kind};
use numaplane_core::config::UserStrategy;
use numaplane_core::desired::KindInputs;
use numaplane_core::health::{self, Health};
use numaplane_core::riders::RiderSpec;
use serde_json::Value;
use tracing::info;

/// The PDB Numaplane keeps for an InterStepBufferService: same name, `maxUnavailable: 1`,
/// selecting its pods, owned by it. Labelled with the rollout so our cache sees it.
pub fn desired_pdb(isbsvc: &InterStepBufferService, rollout: &str) -> Option<Value> {
    let owner = isbsvc.controller_owner_ref(&())?;
    let name = isbsvc.name_any();
    Some(serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": name,
            "namespace": isbsvc.namespace(),
            "labels": {labels::PARENT_ROLLOUT_NAME: rollout},
            "ownerReferences": [owner],
        },
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": {
                labels::APP_COMPONENT: "isbsvc",
                labels::NUMAFLOW_ISBSVC_NAME: name,
            }},
        },
    }))
}

fn pdb_current(pdb: &PodDisruptionBudget, isbsvc: &str) -> bool {
    let Some(spec) = &pdb.spec else { return false };
    let max_one = matches!(
        spec.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    let selects = spec
        .selector
        .as_ref()
        .and_then(|s| s.match_labels.as_ref())
        .is_some_and(|m| {
            m.get(labels::APP_COMPONENT).map(String::as_str) == Some("isbsvc")
                && m.get(labels::NUMAFLOW_ISBSVC_NAME).map(String::as_str) == Some(isbsvc)
        });
    max_one && selects && spec.min_available.is_none()
}

/// The JetStream StatefulSet Numaflow runs an InterStepBufferService in, as JSON.
fn statefulset_of(ctx: &Ctx, child: &InterStepBufferService) -> Option<Value> {
    let ns = child.ns();
    let sts_name = format!("isbsvc-{}-js", child.name_any());
    ctx.stores
        .statefulsets
        .get(&ObjectRef::new(&sts_name).within(ns))
        .and_then(|s| serde_json::to_value(&*s).ok())
}

/// The USDE decision for carrying `live` to `desired` under `user`.
fn decide(
    ctx: &Ctx,
    user: UserStrategy,
    live: &InterStepBufferService,
    desired: &DesiredChild,
) -> numaplane_core::usde::Decision {
    let usde = ctx.settings.usde();
    numaplane_core::usde::decide(&numaplane_core::usde::DecisionInput {
        user_strategy: user,
        config: usde.as_ref().map(|u| u.for_kind(Kind::IsbService)),
        desired_spec: &desired.spec,
        live_spec: &live.spec,
        desired_labels: &desired.labels,
        live_labels: live.labels(),
        desired_annotations: &desired.annotations,
        live_annotations: live.annotations(),
        riders: &[],
    })
}

/// Starts a delete-and-recreate (docs/compatibility.md, docs/strategies.md): the InterStepBufferService
/// is marked `recyclable` (`delete-recreate`); the PipelineRollouts on it retire their pipelines,
/// it is deleted once none is left, and the next pass creates a new one under a new name.
async fn recreate(
    rollout: &ISBServiceRollout,
    ctx: &Ctx,
    live: &InterStepBufferService,
    fields: &[String],
) -> Result<Carry<InterStepBufferService>, Error> {
    let child =
        crate::children::mark_recyclable(ctx, live, upgrade_state_reason::DELETE_RECREATE).await?;
    let name = live.name_any();
    info!(child = %name, ?fields, "recreating InterStepBufferService");
    ctx.events
        .publish(
            Kind::IsbService.event_source(),
            &rollout.object_ref(&()),
            EventType::Normal,
            event_reason::DELETING,
            format!(
                "recreating InterStepBufferService {name} for a change of {}: its pipelines are deleted first",
                fields.join(", ")
            ),
        )
        .await;
    Ok(Carry::Prepared {
        child,
        pending: Some(format!(
            "recreate: InterStepBufferService {name} is deleted once its pipelines are, then replaced"
        )),
    })
}

/// Carries a change of the InterStepBufferService as [`numaplane_core::ppnd::isbservice::plan`]
/// decides: directly, or by pause-and-drain (ask the pipelines on it to pause, wait until they
/// have paused, or for a recreate paused and drained, update or recreate it, wait until Numaflow
/// rolled it out, release). The
/// pipelines' pause states are read live, only when the plan asks. (Long: one arm per action,
/// each a write or an Event.)
async fn carry(
    rollout: &ISBServiceRollout,
    ctx: &Ctx,
    st: &mut ISBServiceRolloutStatus,
    live: &InterStepBufferService,
    desired: DesiredChild,
) -> Result<Carry<InterStepBufferService>, Error> {
    use crate::pause_requests::{Need, PauseCheck, check_pipelines};
    use numaplane_core::ppnd::isbservice::{IsbAction, IsbInput};
    let ns = desired.namespace.clone();
    let name = rollout.name_any();
    let needs_apply = crate::children::needs_apply(live, &desired);
    let decision = if needs_apply {
        decide(ctx, ctx.settings.user_strategy(&ns), live, &desired)
    } else {
        numaplane_core::usde::Decision::no_op()
    };
    let in_progress = st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain;
    // Read only where the plan looks at it: a pause-and-drain whose update is applied.
    let reconciled = if in_progress && !needs_apply {
        health::isbsvc_reconciled(&live.to_json(), statefulset_of(ctx, live).as_ref())
    } else {
        Ok(())
    };
    // A recreate deletes the buffers: each pipeline must have drained, not only paused.
    let need = if decision.recreate {
        Need::Drained
    } else {
        Need::Paused
    };
    let mut check: Option<PauseCheck> = None;
    let action = loop {
        let action = numaplane_core::ppnd::isbservice::plan(&IsbInput {
            needs_apply,
            in_progress,
            decision: &decision,
            not_paused: check.as_ref().map(|c| c.waiting.as_slice()),
            reconciled: reconciled.as_ref().map(|_| ()).map_err(String::as_str),
        });
        if action == IsbAction::ObservePipelines && check.is_none() {
            let on = crate::pause_requests::OnIsb {
                rollout: &name,
                child: &live.name_any(),
            };
            check = Some(check_pipelines(ctx, &ns, Some(on), need).await?);
            continue;
        }
        break action;
    };
    // Tells the pipelines' rollouts to drain again a pipeline that paused without draining.
    st.pause_needs_drain = need == Need::Drained
        && (in_progress || matches!(action, IsbAction::RequestPause { .. }))
        && action != IsbAction::Release;
    let paused = match need {
        Need::Paused => "pause",
        Need::Drained => "pause and drain",
    };
    let pending = |m: String| -> Result<Carry<InterStepBufferService>, Error> {
        Ok(Carry::Prepared {
            child: live.clone(),
            pending: Some(m),
        })
    };
    let regarding = rollout.object_ref(&());
    match action {
        IsbAction::Apply => Ok(Carry::Apply(Box::new(desired))),
        IsbAction::RequestPause { fields, recreate } => {
            info!(child = %desired.name, ?fields, recreate,
                "pause-and-drain: requesting a pause of the pipelines before the update");
            st.status.upgrade_in_progress = UpgradeStrategy::PipelinePauseAndDrain;
            pending(format!(
                "pause-and-drain: requesting a pause of the pipelines using ISBServiceRollout {name} before applying a change of {}",
                fields.join(", ")
            ))
        }
        IsbAction::ObservePipelines => pending(format!(
            "pause-and-drain: reading the pause state of the pipelines using ISBServiceRollout {name}"
        )),
        IsbAction::WaitPipelines(waiting) => pending(format!(
            "pause-and-drain: waiting for pipelines {} to {paused} before {} InterStepBufferService {}; annotate their PipelineRollouts {}=\"true\" not to wait for them",
            waiting.join(", "),
            if need == Need::Drained {
                "recreating"
            } else {
                "updating"
            },
            desired.name,
            numaplane_api::keys::annotations::ALLOW_DATA_LOSS
        )),
        IsbAction::UpdatePaused | IsbAction::RecreatePaused { .. } => {
            ctx.events
                .publish(
                    Kind::IsbService.event_source(),
                    &regarding,
                    EventType::Normal,
                    event_reason::PIPELINES_PAUSED,
                    format!(
                        "pipelines using ISBServiceRollout {name}: {}; {} InterStepBufferService {}",
                        check.as_ref().map(|c| c.describe(need)).unwrap_or_default(),
                        if need == Need::Drained { "recreating" } else { "updating" },
                        desired.name
                    ),
                )
                .await;
            if let IsbAction::RecreatePaused { fields } = action {
                return recreate(rollout, ctx, live, &fields).await;
            }
            let child = crate::children::apply(ctx, live, &desired).await?;
            info!(child = %desired.name, "pause-and-drain: pipelines paused, InterStepBufferService updated");
            Ok(Carry::Prepared {
                child,
                pending: Some(format!(
                    "pause-and-drain: InterStepBufferService {} updated; waiting for it to be reconciled before resuming the pipelines",
                    desired.name
                )),
            })
        }
        IsbAction::WaitReconciled(why) => pending(format!(
            "pause-and-drain: waiting for InterStepBufferService {} to be reconciled before resuming the pipelines: {why}",
            desired.name
        )),
        IsbAction::Release => {
            info!(child = %desired.name, "pause-and-drain: InterStepBufferService reconciled, pause released");
            st.status.upgrade_in_progress = UpgradeStrategy::NoOp;
            Ok(Carry::Apply(Box::new(desired)))
        }
    }
}

impl Rollout for ISBServiceRollout {
    type Child = InterStepBufferService;
    type Status = ISBServiceRolloutStatus;
    type Resolved = ();

    const ON_DELETION: numaplane_core::deletion::Guard =
        numaplane_core::deletion::Guard::HoldWhileUsed;

    fn child_template(&self) -> (Option<&ChildMetadata>, &Value) {
        (
            self.spec.inter_step_buffer_service.metadata.as_ref(),
            &self.spec.inter_step_buffer_service.spec,
        )
    }

    fn rider_specs(&self) -> Vec<RiderSpec> {
        super::kind::rider_specs(&self.spec.riders)
    }

    fn progressive_strategy(&self) -> Option<super::kind::ProgressiveOf<'_>> {
        let s = self.spec.strategy.as_ref();
        Some((
            Kind::IsbService,
            s.and_then(|s| s.progressive.as_ref()),
            None,
        ))
    }

    fn read_record(st: &ISBServiceRolloutStatus) -> numaplane_core::progressive::Record {
        numaplane_core::progressive::Record::from_isbservice(st)
    }

    fn write_record(rec: &numaplane_core::progressive::Record, st: &mut ISBServiceRolloutStatus) {
        rec.write_isbservice(st)
    }

    fn status_of(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }

    fn children(stores: &Stores) -> &ChildCache<InterStepBufferService> {
        &stores.isbsvcs
    }

    fn validate(spec: &Value) -> Result<(), Error> {
        numaplane_core::child::validate_isbsvc_spec(spec, Self::KIND.spec_path())
            .map_err(|e| Error::InvalidSpec(format!("invalid Numaflow ISBService spec: {e}")))
    }

    async fn resolve(&self, _ctx: &Ctx) -> Result<Resolution<()>, Error> {
        Ok(Resolution::Ready(()))
    }

    async fn ensure_companions(
        &self,
        ctx: &Ctx,
        child: &InterStepBufferService,
    ) -> Result<(), Error> {
        let ns = child.ns();
        let name = child.name_any();
        let cached = ctx.stores.pdbs.get(&ObjectRef::new(&name).within(ns));
        if cached.is_some_and(|p| pdb_current(&p, &name)) {
            return Ok(());
        }
        let Some(body) = desired_pdb(child, &self.name_any()) else {
            return Ok(()); // child not created yet (no uid): next pass
        };
        ctx.ensure_leader()?;
        info!(pdb = %name, "applying PodDisruptionBudget");
        let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), ns);
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .ctx(|| format!("applying PodDisruptionBudget {name}"))?;
        Ok(())
    }

    async fn carry_update(
        &self,
        ctx: &Ctx,
        st: &mut ISBServiceRolloutStatus,
        live: &InterStepBufferService,
        desired: DesiredChild,
    ) -> Result<Carry<InterStepBufferService>, Error> {
        carry(self, ctx, st, live, desired).await
    }

    async fn recyclable_in_use(
        ctx: &Ctx,
        child: &InterStepBufferService,
    ) -> Result<Option<String>, Error> {
        // Live, not cached: a pipeline the cache hasn't seen yet must not lose its ISB service.
        // Numaplane's pipelines on it, and those no rollout manages (its buffers go with it).
        let ns = child.ns();
        let name = child.name_any();
        let selector = format!(
            "{}={name},{}",
            labels::ISBSVC_CHILD_NAME,
            labels::PARENT_ROLLOUT_NAME
        );
        let api: Api<Pipeline> = Api::namespaced(ctx.client.clone(), ns);
        let mut using: Vec<String> = api
            .list(&ListParams::default().labels(&selector))
            .await
            .ctx(|| format!("listing pipelines on InterStepBufferService {name}"))?
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        using.extend(
            crate::pause_requests::unmanaged_on(ctx, ns, &name)
                .await?
                .iter()
                .map(|p| p.name_any()),
        );
        Ok((!using.is_empty()).then(|| format!("used by pipelines {}", using.join(", "))))
    }

    fn kind_inputs<'a>(&'a self, _: &'a ()) -> KindInputs<'a> {
        KindInputs::IsbService
    }

    fn health(ctx: &Ctx, child: &InterStepBufferService) -> Health {
        let sts = statefulset_of(ctx, child);
        health::isbsvc_health(&child.to_json(), sts.as_ref())
    }

    fn still_coming_up(_ctx: &Ctx, child: &InterStepBufferService) -> bool {
        isbsvc_coming_up(&child.to_json())
    }

    fn observe_metrics(&self, ctx: &Ctx, st: &ISBServiceRolloutStatus, now: &Time) {
        let requesting = st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain;
        let secs = crate::pause_requests::request_seconds(
            st.pause_request_status.as_ref(),
            requesting,
            now,
        );
        ctx.metrics.pause_seconds(
            crate::metrics::PauseGauge::IsbService,
            self.ns(),
            &self.name_any(),
            secs,
        );
    }

    fn observe_child(
        st: &mut ISBServiceRolloutStatus,
        _child: &InterStepBufferService,
        generation: i64,
        now: &Time,
    ) {
        crate::pause_requests::report(
            &mut st.status,
            &mut st.pause_request_status,
            generation,
            now,
        );
    }
}

/// Numaflow starts every ISB service in Pending, then runs it with its StatefulSet's pods
/// unavailable until they are ready; in between, its first pass may not see the StatefulSet it
/// just created ([`health::numaflow_catching_up`]).
fn isbsvc_coming_up(child: &Value) -> bool {
    let Some(st) = child.get("status") else {
        return false;
    };
    let unavailable = st
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some("ChildrenResourcesHealthy")
                && c.get("reason").and_then(Value::as_str) == Some("Unavailable")
        });
    match st.get("phase").and_then(Value::as_str) {
        Some("Pending") => true,
        Some("Failed") => false,
        _ => unavailable || health::numaflow_catching_up(child),
    }
}

#[cfg(test)]
mod tests {
    use super::isbsvc_coming_up;
    use serde_json::json;

    fn status(phase: &str, reason: &str, message: &str) -> serde_json::Value {
        json!({"status": {"phase": phase, "conditions": [
            {"type": "Configured", "status": "True", "reason": "Successful"},
            {"type": "ChildrenResourcesHealthy", "status": "False", "reason": reason,
             "message": message}
        ]}})
    }

    #[test]
    fn a_new_service_is_coming_up_until_its_pods_are_ready() {
        assert!(isbsvc_coming_up(&json!({"status": {"phase": "Pending"}})));
        let not_cached_yet = "StatefulSet not found, might be still under creation";
        assert!(isbsvc_coming_up(&status(
            "Running",
            "GetStatefulSetFailed",
            not_cached_yet
        )));
        assert!(isbsvc_coming_up(&status(
            "Running",
            "Unavailable",
            "Waiting for 3 pods to be ready..."
        )));
    }

    #[test]
    fn failures_are_not_coming_up() {
        assert!(!isbsvc_coming_up(&json!({"metadata": {"name": "new"}})));
        assert!(!isbsvc_coming_up(&status(
            "Failed",
            "Unavailable",
            "no pods"
        )));
        assert!(!isbsvc_coming_up(&status(
            "Running",
            "GetStatefulSetFailed",
            "forbidden: cannot get statefulsets"
        )));
        assert!(!isbsvc_coming_up(&json!({"status": {"phase": "Running"}})));
    }
}
