//! ISBServiceRollout: one PodDisruptionBudget per InterStepBufferService, and health that
//! includes the JetStream StatefulSet's rollout.

use super::{Carry, Rollout};
use crate::children::{DesiredChild, FIELD_MANAGER};
use crate::context::{Ctx, Stores};
use crate::error::{Error, KubeContext};
use crate::events::source;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use numaplane_api::common::ChildMetadata;
use numaplane_api::common::UpgradeStrategy;
use numaplane_api::keys::{event_reason, labels};
use numaplane_api::numaflow::InterStepBufferService;
use numaplane_api::{ISBServiceRollout, ISBServiceRolloutStatus};
use numaplane_core::health::{self, Health};
use numaplane_core::riders::RiderSpec;
use numaplane_core::template::TemplateVars;
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
    let ns = child.namespace();
    let sts_name = format!("isbsvc-{}-js", child.name_any());
    ctx.stores
        .statefulsets
        .state()
        .into_iter()
        .find(|s| s.namespace() == ns && s.name_any() == sts_name)
        .and_then(|s| serde_json::to_value(&*s).ok())
}

/// Carries a change under the `pause-and-drain` strategy (api.md §14, progressive.md §8.4): a
/// change of a data-loss or recreate field of the `interstepbufferservice` USDE lists first
/// requests a pause of the pipelines on this ISB service (`status.upgradeInProgress`, read by
/// the PipelineRollouts), waits until each is Paused or won't pause, updates the
/// InterStepBufferService in place (also for recreate fields, for now), waits until Numaflow has
/// rolled it out, then releases the request.
async fn pause_and_update(
    rollout: &ISBServiceRollout,
    ctx: &Ctx,
    st: &mut ISBServiceRolloutStatus,
    live: &InterStepBufferService,
    desired: DesiredChild,
) -> Result<Carry<InterStepBufferService>, Error> {
    let ns = desired.namespace.clone();
    let name = rollout.name_any();
    let in_progress = st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain;
    let user = ctx.settings.user_strategy(&ns);
    if !in_progress {
        if user != numaplane_core::config::UserStrategy::PauseAndDrain {
            return Ok(Carry::Apply(Box::new(desired)));
        }
        let usde = ctx.settings.usde();
        let decision = numaplane_core::usde::decide(&numaplane_core::usde::DecisionInput {
            user_strategy: user,
            config: usde
                .as_ref()
                .and_then(|u| u.for_kind("interstepbufferservice")),
            desired_spec: &desired.spec,
            live_spec: &live.spec,
            desired_labels: &desired.labels,
            live_labels: live.labels(),
            desired_annotations: &desired.annotations,
            live_annotations: live.annotations(),
            riders: &[],
        });
        if decision.strategy != UpgradeStrategy::PipelinePauseAndDrain {
            return Ok(Carry::Apply(Box::new(desired)));
        }
        let fields: Vec<&str> = decision.reasons.iter().map(|r| r.path.as_str()).collect();
        info!(child = %desired.name, ?fields, recreate = decision.recreate,
            "pause-and-drain: requesting a pause of the pipelines before the update");
        st.status.upgrade_in_progress = UpgradeStrategy::PipelinePauseAndDrain;
        return Ok(Carry::Prepared {
            child: live.clone(),
            pending: Some(format!(
                "pause-and-drain: requesting a pause of the pipelines using ISBServiceRollout {name} before applying a change of {}",
                fields.join(", ")
            )),
        });
    }
    if crate::children::needs_apply(live, &desired) {
        let waiting = crate::pause_requests::pipelines_not_paused(ctx, &ns, Some(&name)).await?;
        if !waiting.is_empty() {
            return Ok(Carry::Prepared {
                child: live.clone(),
                pending: Some(format!(
                    "pause-and-drain: waiting for pipelines {} to pause before updating InterStepBufferService {}; annotate their PipelineRollouts {}=\"true\" not to wait for them",
                    waiting.join(", "),
                    desired.name,
                    numaplane_api::keys::annotations::ALLOW_DATA_LOSS
                )),
            });
        }
        let child = crate::children::apply(ctx, live, &desired).await?;
        info!(child = %desired.name, "pause-and-drain: pipelines paused, InterStepBufferService updated");
        ctx.events
            .publish(
                source::ISBSVC_ROLLOUT,
                &super::object_ref(rollout),
                EventType::Normal,
                event_reason::PIPELINES_PAUSED,
                format!(
                    "pipelines using ISBServiceRollout {name} paused; updating InterStepBufferService {}",
                    desired.name
                ),
            )
            .await;
        return Ok(Carry::Prepared {
            child,
            pending: Some(format!(
                "pause-and-drain: InterStepBufferService {} updated; waiting for it to be reconciled before resuming the pipelines",
                desired.name
            )),
        });
    }
    let sts = statefulset_of(ctx, live);
    if let Err(why) = health::isbsvc_reconciled(&live.to_json(), sts.as_ref()) {
        return Ok(Carry::Prepared {
            child: live.clone(),
            pending: Some(format!(
                "pause-and-drain: waiting for InterStepBufferService {} to be reconciled before resuming the pipelines: {why}",
                desired.name
            )),
        });
    }
    info!(child = %desired.name, "pause-and-drain: InterStepBufferService reconciled, pause released");
    st.status.upgrade_in_progress = UpgradeStrategy::NoOp;
    Ok(Carry::Apply(Box::new(desired)))
}

impl Rollout for ISBServiceRollout {
    type Child = InterStepBufferService;
    type Status = ISBServiceRolloutStatus;
    type Resolved = ();

    const CONTROLLER: &'static str = "isbsvc-rollout-controller";
    const EVENT_SOURCE: &'static str = source::ISBSVC_ROLLOUT;
    const SUCCESS_EVENT: &'static str = event_reason::RECONCILATION_SUCCESSFUL;
    const METRIC_LABEL: &'static str = "isbservice";
    const SPEC_PATH: &'static str = "spec.interStepBufferService.spec";

    fn child_template(&self) -> (Option<&ChildMetadata>, &Value) {
        (
            self.spec.inter_step_buffer_service.metadata.as_ref(),
            &self.spec.inter_step_buffer_service.spec,
        )
    }

    fn rider_specs(&self) -> Vec<RiderSpec> {
        self.spec
            .riders
            .iter()
            .flatten()
            .map(RiderSpec::from)
            .collect()
    }

    fn template_vars(child: &str, namespace: &str) -> TemplateVars {
        TemplateVars::isbsvc(child, namespace)
    }

    fn status_of(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }

    fn children(stores: &Stores) -> &Store<InterStepBufferService> {
        &stores.isbsvcs
    }

    fn validate(spec: &Value) -> Result<(), Error> {
        numaplane_core::child::validate_isbsvc_spec(spec, Self::SPEC_PATH)
            .map_err(|e| Error::InvalidSpec(format!("invalid Numaflow ISBService spec: {e}")))
    }

    async fn resolve(&self, _ctx: &Ctx) -> Result<Result<(), String>, Error> {
        Ok(Ok(()))
    }

    async fn ensure_companions(
        &self,
        ctx: &Ctx,
        child: &InterStepBufferService,
    ) -> Result<(), Error> {
        let ns = child.namespace().unwrap_or_default();
        let name = child.name_any();
        let cached = ctx
            .stores
            .pdbs
            .state()
            .into_iter()
            .find(|p| p.namespace().as_deref() == Some(&ns) && p.name_any() == name);
        if cached.is_some_and(|p| pdb_current(&p, &name)) {
            return Ok(());
        }
        let Some(body) = desired_pdb(child, &self.name_any()) else {
            return Ok(()); // child not created yet (no uid): next pass
        };
        ctx.ensure_leader()?;
        info!(pdb = %name, "applying PodDisruptionBudget");
        let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ns);
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
        pause_and_update(self, ctx, st, live, desired).await
    }

    fn health(ctx: &Ctx, child: &InterStepBufferService) -> Health {
        let sts = statefulset_of(ctx, child);
        health::isbsvc_health(&child.to_json(), sts.as_ref())
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
