//! Progressive upgrades of the Numaflow controller itself (docs/progressive-numaflow-controller.md)
//! on the real stack: the real Numaflow controllers 1.7.5 (promoted) and 1.8.1 (trial, instance
//! "1") side by side in one namespace, with an ISB service, two pipelines and a MonoVertex carried
//! onto the trial. Success moves everything onto 1.8.1 and removes the 1.7.5 instance; a trial
//! workload that never becomes healthy fails the upgrade and leaves everything on 1.7.5, with no
//! pipeline deleted undrained (the invariant checker).

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::ListParams;
use kube::{Resource, ResourceExt};
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::numaflow_controller_rollout::ControllerProgressiveStatus;
use numaplane_api::progressive::AssessmentResult;
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowController, NumaflowControllerRollout,
    PipelineRollout,
};
use serde_json::{Value, json};
use support::Harness;
use support::fixtures::image;
use support::scenario::*;

const CONFIG: &str = r#"
defaultUpgradeStrategy: "progressive"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,30,2,1"
    - kind: MonoVertex
      schedule: "0,30,2,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

const INSTANCE: &str = "numaflow.numaproj.io/instance";

fn pr(name: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": two_vertices(10)}}
    })
}

fn ncr(version: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "NumaflowControllerRollout",
        "metadata": {"name": "numaflow-controller"},
        "spec": {
            "controller": {"version": version},
            "strategy": {"progressive": {"assessmentSchedule": "0,240,0,2", "maxParallel": 2}}
        }
    })
}

fn progressive(r: Option<&NumaflowControllerRollout>) -> Option<&ControllerProgressiveStatus> {
    r?.status.as_ref()?.progressive_status.as_ref()
}

/// (name, instance) of every live child of kind `K` labelled promoted.
async fn promoted_children<K>(h: &Harness) -> Vec<(String, String)>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let mut out: Vec<(String, String)> = h
        .api::<K>()
        .list(&ListParams::default().labels("numaplane.numaproj.io/upgrade-state=promoted"))
        .await
        .expect("list")
        .items
        .into_iter()
        .filter(|c| c.meta().deletion_timestamp.is_none())
        .map(|c| {
            let instance = c.annotations().get(INSTANCE).cloned().unwrap_or_default();
            (c.name_any(), instance)
        })
        .collect();
    out.sort();
    out
}

/// The namespace with an ISB service, two pipelines and a MonoVertex on Numaflow 1.7.5.
async fn namespace_on_1_7_5(prefix: &str, mv_image: &str) -> Harness {
    let h = Harness::start_real_on(prefix, CONFIG, "1.7.5").await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr("pa")).await;
    h.apply::<PipelineRollout>(pr("pb")).await;
    h.apply::<MonoVertexRollout>(mvr(mv_image)).await;
    for name in ["pa", "pb"] {
        h.until("pipeline settled", name, settled::<PipelineRollout>)
            .await;
    }
    h.until("mvr deployed", "mvr", |r: Option<&MonoVertexRollout>| {
        deployed_idle(r).then_some(())
    })
    .await;
    h
}

#[tokio::test]
async fn a_controller_trial_promotes_every_workload_onto_the_new_version() {
    let mut h = namespace_on_1_7_5("nc-trial-ok", MV_IMAGE).await;
    h.apply::<NumaflowControllerRollout>(ncr("1.8.1")).await;

    // The trial controller runs beside the promoted one, on its own instance.
    h.until::<Deployment, _, _>("trial controller on v1.8.1", "numaflow-controller-1", |d| {
        let d = d?;
        (image(d) == "quay.io/numaproj/numaflow:v1.8.1"
            && d.status.as_ref()?.available_replicas == Some(1))
        .then_some(())
    })
    .await;
    let trial: NumaflowController = h.api().get("numaflow-controller-1").await.expect("trial");
    assert_eq!(trial.spec.instance_id.as_deref(), Some("1"));
    // Found as any trial child is: `kubectl get -l numaplane.numaproj.io/upgrade-state=trial`.
    let state = |nc: &NumaflowController| {
        nc.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("numaplane.numaproj.io/upgrade-state").cloned())
    };
    assert_eq!(state(&trial).as_deref(), Some("trial"));
    // A restart in the middle continues the same trial (its state is in status and labels).
    h.restart_operator().await;

    // Success: the trial becomes the promoted controller and the old one goes.
    let st = h
        .until("controller trial promoted", "numaflow-controller", |r| {
            let p = progressive(r)?;
            let promoted = p.promoted_controller_status.as_ref()?;
            (promoted.name == "numaflow-controller-1"
                && p.upgrading_controller_status.is_none()
                && settled::<NumaflowControllerRollout>(r).is_some())
            .then(|| p.clone())
        })
        .await;
    let promoted = st.promoted_controller_status.expect("promoted");
    assert_eq!(
        (promoted.instance_id.as_str(), promoted.version.as_str()),
        ("1", "1.8.1")
    );
    h.until::<NumaflowController, _, _>("old controller deleted", "numaflow-controller", |nc| {
        nc.is_none().then_some(())
    })
    .await;
    h.until::<NumaflowController, _, _>(
        "the promoted trial labelled promoted",
        "numaflow-controller-1",
        |nc| (state(nc?).as_deref() == Some("promoted")).then_some(()),
    )
    .await;
    h.until::<Deployment, _, _>("old Deployment gone", "numaflow-controller", |d| {
        d.is_none().then_some(())
    })
    .await;

    // Every workload runs on the new instance, under a new name (a trial child promoted).
    for name in ["pa", "pb"] {
        h.until("pipeline settled", name, settled::<PipelineRollout>)
            .await;
    }
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    let on_trial = |children: &[(String, String)]| {
        !children.is_empty() && children.iter().all(|(n, i)| i == "1" && !n.ends_with("-0"))
    };
    let pipelines = promoted_children::<Pipeline>(&h).await;
    assert!(on_trial(&pipelines), "{pipelines:?}");
    assert_eq!(pipelines.len(), 2);
    let mvs = promoted_children::<MonoVertex>(&h).await;
    assert!(on_trial(&mvs), "{mvs:?}");
    let isbs = promoted_children::<InterStepBufferService>(&h).await;
    assert!(on_trial(&isbs), "{isbs:?}");
    // The old children are drained and gone; no second trial controller was ever made.
    h.until::<Pipeline, _, _>("pa-0 deleted", "pa-0", |p| p.is_none().then_some(()))
        .await;
    let ncs: Vec<String> = h
        .api::<NumaflowController>()
        .list(&ListParams::default())
        .await
        .expect("list NumaflowControllers")
        .items
        .iter()
        .map(|nc| nc.name_any())
        .collect();
    assert_eq!(ncs, vec!["numaflow-controller-1".to_string()]);
    let ncr: NumaflowControllerRollout = h.api().get("numaflow-controller").await.expect("ncr");
    let history = &ncr.status.as_ref().expect("status").status.upgrade_history;
    let last = history.last().expect("the trial is in the upgrade history");
    assert_eq!(
        (
            last.child.as_str(),
            last.previous_child.as_str(),
            last.outcome
        ),
        (
            "numaflow-controller-1",
            "numaflow-controller",
            Some(numaplane_api::common::UpgradeOutcome::Promoted)
        ),
        "{history:?}"
    );
    h.assert_invariants().await;
}

#[tokio::test]
async fn a_failing_workload_fails_the_controller_trial_and_nothing_moves() {
    // A MonoVertex that never becomes healthy: its trial fails, and with it the controller's.
    let h = namespace_on_1_7_5("nc-trial-fail", MV_BAD).await;
    let pipelines_before = promoted_children::<Pipeline>(&h).await;
    h.apply::<NumaflowControllerRollout>(ncr("1.8.1")).await;

    let st = h
        .until("controller trial failed", "numaflow-controller", |r| {
            let u = progressive(r)?.upgrading_controller_status.clone()?;
            (u.assessment_result == Some(AssessmentResult::Failure)).then_some(u)
        })
        .await;
    assert!(
        st.failure_reasons
            .iter()
            .any(|r| r.contains("MonoVertexRollout mvr")),
        "{:?}",
        st.failure_reasons
    );
    // The trial workloads are removed (drained), then the trial controller.
    h.until::<NumaflowController, _, _>(
        "trial controller deleted",
        "numaflow-controller-1",
        |nc| nc.is_none().then_some(()),
    )
    .await;
    for name in ["pa", "pb"] {
        h.until(
            "pipeline back to idle",
            name,
            |r: Option<&PipelineRollout>| deployed_idle(r).then_some(()),
        )
        .await;
    }
    // The promoted controller and children never moved.
    let ncr: NumaflowControllerRollout = h.api().get("numaflow-controller").await.expect("ncr");
    let promoted_nc = progressive(Some(&ncr))
        .and_then(|p| p.promoted_controller_status.clone())
        .expect("promoted controller");
    assert_eq!(
        (promoted_nc.name.as_str(), promoted_nc.version.as_str()),
        ("numaflow-controller", "1.7.5")
    );
    let pipelines = promoted_children::<Pipeline>(&h).await;
    assert_eq!(
        pipelines.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        pipelines_before
            .iter()
            .map(|(n, _)| n.clone())
            .collect::<Vec<_>>()
    );
    assert!(pipelines.iter().all(|(_, i)| i.is_empty()), "{pipelines:?}");
    let history = &ncr.status.as_ref().expect("status").status.upgrade_history;
    assert_eq!(
        history.last().map(|r| (r.child.as_str(), r.outcome)),
        Some((
            "numaflow-controller-1",
            Some(numaplane_api::common::UpgradeOutcome::Failed)
        )),
        "{history:?}"
    );
    h.until::<Deployment, _, _>(
        "old controller still on 1.7.5",
        "numaflow-controller",
        |d| (image(d?) == "quay.io/numaproj/numaflow:v1.7.5").then_some(()),
    )
    .await;
    h.assert_invariants().await;
}
