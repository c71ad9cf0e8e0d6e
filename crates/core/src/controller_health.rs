//! Health of a NumaflowController (from the Numaflow controller Deployment) and how a
//! NumaflowControllerRollout reports its NumaflowController (docs/compatibility.md). Pure.

use crate::conditions::get_condition;
use crate::health::{Health, HealthStatus};
use k8s_openapi::api::apps::v1::Deployment;
use numaplane_api::NumaflowController;
use numaplane_api::common::Phase;
use numaplane_api::keys::{condition, message, reason};

const WAITING: &str = "Waiting for Deployment to finish";

fn unhealthy(reason: &'static str, message: String) -> Health {
    Health {
        status: HealthStatus::False,
        reason,
        message,
    }
}

/// `ChildResourcesHealthy` of a NumaflowController from its controller Deployment, checked in
/// the reference's order (Argo CD's Deployment health).
pub fn deployment_health(d: Option<&Deployment>) -> Health {
    let Some(d) = d else {
        return unhealthy(
            reason::PROGRESSING,
            "Numaflow Controller Deployment not found".into(),
        );
    };
    let generation = d.metadata.generation.unwrap_or_default();
    let st = d.status.clone().unwrap_or_default();
    if generation > st.observed_generation.unwrap_or_default() {
        return unhealthy(
            reason::PROGRESSING,
            format!("{WAITING}: observed deployment generation less than desired generation"),
        );
    }
    let deadline_exceeded = st.conditions.iter().flatten().any(|c| {
        c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });
    if deadline_exceeded {
        return unhealthy(
            reason::DEGRADED,
            format!(
                "Deployment {:?} exceeded its progress deadline",
                d.metadata.name.clone().unwrap_or_default()
            ),
        );
    }
    let updated = st.updated_replicas.unwrap_or_default();
    let replicas = st.replicas.unwrap_or_default();
    let available = st.available_replicas.unwrap_or_default();
    if let Some(want) = d.spec.as_ref().and_then(|s| s.replicas)
        && updated < want
    {
        return unhealthy(
            reason::PROGRESSING,
            format!("{WAITING}: {updated} out of {want} new replicas have been updated..."),
        );
    }
    if replicas > updated {
        return unhealthy(
            reason::PROGRESSING,
            format!(
                "{WAITING}: {} old replicas are pending termination...",
                replicas - updated
            ),
        );
    }
    if available < updated {
        return unhealthy(
            reason::PROGRESSING,
            format!("{WAITING}: {available} of {updated} updated replicas are available..."),
        );
    }
    Health {
        status: HealthStatus::True,
        reason: reason::SUCCESSFUL,
        message: message::SUCCESSFUL.into(),
    }
}

/// A condition copied from another object (its reason is not one of ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub status: HealthStatus,
    pub reason: String,
    pub message: String,
}

impl Reported {
    pub fn new(status: HealthStatus, reason: &str, message: &str) -> Self {
        Self {
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// A NumaflowControllerRollout's `ChildResourcesHealthy`, from its NumaflowController.
pub fn mirror_controller(nc: &NumaflowController) -> Reported {
    let generation = nc.metadata.generation.unwrap_or_default();
    let st = nc.status.clone().unwrap_or_default().status;
    if generation > st.observed_generation {
        return Reported::new(
            HealthStatus::False,
            reason::PROGRESSING,
            &format!(
                "observedGeneration {} < generation {generation}",
                st.observed_generation
            ),
        );
    }
    match st.phase {
        Phase::Deployed | Phase::Pending => {
            match get_condition(&st.conditions, condition::CHILD_RESOURCES_HEALTHY) {
                Some(c) if c.status == HealthStatus::True.as_str() => {
                    Reported::new(HealthStatus::True, reason::SUCCESSFUL, message::SUCCESSFUL)
                }
                Some(c) => Reported::new(HealthStatus::False, &c.reason, &c.message),
                None => Reported::new(HealthStatus::False, reason::UNHEALTHY, reason::UNHEALTHY),
            }
        }
        // The reference's message is "Failed"; the NumaflowController's own message says why
        // (e.g. which version has no definition), which is what a user needs.
        Phase::Failed | Phase::Unset => {
            let msg = if st.message.is_empty() {
                reason::FAILED
            } else {
                st.message.as_str()
            };
            Reported::new(HealthStatus::False, reason::FAILED, msg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(spec_replicas: i64, generation: i64, status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "numaflow-controller", "generation": generation},
            "spec": {"replicas": spec_replicas, "selector": {}, "template": {}},
            "status": status,
        }))
        .unwrap()
    }

    fn check(h: Health, status: HealthStatus, reason: &str, message: &str) {
        assert_eq!(
            (h.status, h.reason, h.message.as_str()),
            (status, reason, message)
        );
    }

    #[test]
    fn deployment_rows_in_order() {
        check(
            deployment_health(None),
            HealthStatus::False,
            "Progressing",
            "Numaflow Controller Deployment not found",
        );
        check(
            deployment_health(Some(&deployment(1, 2, json!({"observedGeneration": 1})))),
            HealthStatus::False,
            "Progressing",
            "Waiting for Deployment to finish: observed deployment generation less than desired generation",
        );
        // Deadline exceeded wins over lagging replicas.
        check(
            deployment_health(Some(&deployment(
                1,
                1,
                json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 0,
                       "conditions": [{"type": "Progressing", "status": "False",
                                       "reason": "ProgressDeadlineExceeded"}]}),
            ))),
            HealthStatus::False,
            "Degraded",
            "Deployment \"numaflow-controller\" exceeded its progress deadline",
        );
        check(
            deployment_health(Some(&deployment(
                2,
                1,
                json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1}),
            ))),
            HealthStatus::False,
            "Progressing",
            "Waiting for Deployment to finish: 1 out of 2 new replicas have been updated...",
        );
        check(
            deployment_health(Some(&deployment(
                1,
                1,
                json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1}),
            ))),
            HealthStatus::False,
            "Progressing",
            "Waiting for Deployment to finish: 1 old replicas are pending termination...",
        );
        check(
            deployment_health(Some(&deployment(
                1,
                1,
                json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                       "availableReplicas": 0}),
            ))),
            HealthStatus::False,
            "Progressing",
            "Waiting for Deployment to finish: 0 of 1 updated replicas are available...",
        );
        check(
            deployment_health(Some(&deployment(
                1,
                1,
                json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                       "availableReplicas": 1,
                       "conditions": [{"type": "Progressing", "status": "True",
                                       "reason": "NewReplicaSetAvailable"}]}),
            ))),
            HealthStatus::True,
            "Successful",
            "Successful",
        );
    }

    fn nc(generation: i64, status: serde_json::Value) -> NumaflowController {
        serde_json::from_value(json!({
            "apiVersion": "numaplane.numaproj.io/v1alpha1",
            "kind": "NumaflowController",
            "metadata": {"name": "numaflow-controller", "generation": generation},
            "spec": {"version": "1.8.1"},
            "status": status,
        }))
        .unwrap()
    }

    fn healthy_cond(status: &str, reason: &str, message: &str) -> serde_json::Value {
        json!([{"type": "ChildResourcesHealthy", "status": status, "reason": reason,
                "message": message, "lastTransitionTime": "2025-01-01T00:00:00Z"}])
    }

    #[test]
    fn mirror_rows() {
        let r = mirror_controller(&nc(
            3,
            json!({"observedGeneration": 2, "phase": "Deployed"}),
        ));
        assert_eq!(
            r,
            Reported::new(
                HealthStatus::False,
                "Progressing",
                "observedGeneration 2 < generation 3"
            )
        );
        let r = mirror_controller(&nc(
            1,
            json!({"observedGeneration": 1, "phase": "Deployed",
                   "conditions": healthy_cond("True", "Successful", "Successful")}),
        ));
        assert_eq!(r.status, HealthStatus::True);
        let r = mirror_controller(&nc(
            1,
            json!({"observedGeneration": 1, "phase": "Pending",
                   "conditions": healthy_cond("False", "Degraded", "too slow")}),
        ));
        assert_eq!(
            r,
            Reported::new(HealthStatus::False, "Degraded", "too slow")
        );
        let r = mirror_controller(&nc(
            1,
            json!({"observedGeneration": 1, "phase": "Deployed"}),
        ));
        assert_eq!(
            r,
            Reported::new(HealthStatus::False, "Unhealthy", "Unhealthy")
        );
        let r = mirror_controller(&nc(
            1,
            json!({"observedGeneration": 1, "phase": "Failed", "message": "no definition"}),
        ));
        assert_eq!(
            r,
            Reported::new(HealthStatus::False, "Failed", "no definition")
        );
        let r = mirror_controller(&nc(0, json!({})));
        assert_eq!(r, Reported::new(HealthStatus::False, "Failed", "Failed"));
    }
}
