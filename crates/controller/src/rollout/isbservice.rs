//! ISBServiceRollout: one PodDisruptionBudget per InterStepBufferService, and health that
//! includes the JetStream StatefulSet's rollout.

use super::Rollout;
use crate::children::FIELD_MANAGER;
use crate::context::{Ctx, Stores};
use crate::error::{Error, KubeContext};
use crate::events::source;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use numaplane_api::common::ChildMetadata;
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

    fn health(ctx: &Ctx, child: &InterStepBufferService) -> Health {
        let ns = child.namespace();
        let sts_name = format!("isbsvc-{}-js", child.name_any());
        let sts: Option<std::sync::Arc<StatefulSet>> = ctx
            .stores
            .statefulsets
            .state()
            .into_iter()
            .find(|s| s.namespace() == ns && s.name_any() == sts_name);
        let sts_json = sts.and_then(|s| serde_json::to_value(&*s).ok());
        health::isbsvc_health(&child.to_json(), sts_json.as_ref())
    }
}
