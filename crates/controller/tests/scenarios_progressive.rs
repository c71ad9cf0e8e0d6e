//! The functional scenarios of scenarios.md (A.1, A.3, A.4, A.6) under `progressive`, on the real
//! stack (the real Numaflow controller, KWOK pods, the daemon stand-in): progressive changes
//! replace children under new names (the old ones drained and deleted), everything else is
//! applied in place, and concurrent changes and rollbacks settle with one child of each kind and
//! nothing in progress.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::ListParams;
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowControllerRollout, PipelineRollout,
};
use serde_json::{Value, json};
use std::time::Duration;
use support::Harness;
use support::fixtures::{image, nc_rollout, phase};
use support::scenario::*;

const CONFIG: &str = r#"
defaultUpgradeStrategy: "progressive"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,20,2,1"
    - kind: MonoVertex
      schedule: "0,20,2,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

fn pr(spec: Value, metadata: Option<Value>) -> Value {
    let mut pipeline = json!({"spec": spec});
    if let Some(m) = metadata {
        pipeline["metadata"] = m;
    }
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {"pipeline": pipeline}
    })
}

fn mvr(image: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": "mvr"},
        "spec": {"monoVertex": {"spec": {
            "scale": {"min": 1, "max": 2},
            "source": {"udsource": {"container": {"image": image}}},
            "sink": {"blackhole": {}}
        }}}
    })
}

/// Names of the live children of kind `K` labelled promoted.
async fn promoted<K>(h: &Harness) -> Vec<String>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let mut names: Vec<String> = h
        .api::<K>()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .filter(|c| {
            c.meta().deletion_timestamp.is_none()
                && c.labels().get("numaplane.numaproj.io/upgrade-state")
                    == Some(&"promoted".to_string())
        })
        .map(|c| c.name_any())
        .collect();
    names.sort();
    names
}

/// Waits until exactly `want` is the promoted child of kind `K` and nothing else of that kind
/// is left (recyclable ones drained and deleted).
async fn only<K>(h: &Harness, what: &str, want: &str)
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    only_within::<K>(h, what, want, Duration::from_secs(120)).await;
}

async fn only_within<K>(h: &Harness, what: &str, want: &str, bound: Duration)
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let items = h
            .api::<K>()
            .list(&ListParams::default())
            .await
            .expect("list")
            .items;
        let all: Vec<String> = items.iter().map(|c| c.name_any()).collect();
        if all == vec![want.to_string()] && promoted::<K>(h).await == all {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            let left: Vec<String> = items
                .iter()
                .map(|c| {
                    let mut v = serde_json::to_value(c).unwrap_or_default();
                    if let Some(m) = v["metadata"].as_object_mut() {
                        m.remove("managedFields");
                    }
                    format!(
                        "{}: metadata {} spec {} status {}",
                        c.name_any(),
                        v["metadata"],
                        v["spec"],
                        v["status"]
                    )
                })
                .collect();
            panic!(
                "{what}: expected only {want}, have {all:?}:\n{}",
                left.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn a1_functional_pipeline() {
    let h = Harness::start_real("a1-prog", CONFIG).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr(two_vertices(10), None)).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;

    // Self-heal and metadata: in place, no new child.
    h.merge::<Pipeline>("pr-0", json!({"spec": {"watermark": {"disabled": true}}}))
        .await;
    h.until::<Pipeline, _, _>("edit reverted", "pr-0", |p| {
        p?.spec.get("watermark").is_none().then_some(())
    })
    .await;
    let meta = json!({"labels": {"my-label": TAG}});
    h.apply::<PipelineRollout>(pr(two_vertices(10), Some(meta.clone())))
        .await;
    let want = format!("{}-pr-0", h.ns);
    h.until::<Pipeline, _, _>("metadata in place", "pr-0", |p| {
        (p?.labels().get("my-label") == Some(&want)).then_some(())
    })
    .await;
    assert_eq!(promoted::<Pipeline>(&h).await, vec!["pr-0".to_string()]);

    // Topology change: a progressive upgrade to pr-1; pr-0 drains and goes.
    h.apply::<PipelineRollout>(pr(three_vertices(CAT, 10), Some(meta.clone())))
        .await;
    only::<Pipeline>(&h, "topology upgrade", "pr-1").await;
    h.until("settled on pr-1", "pr", settled::<PipelineRollout>)
        .await;
    let p1: Pipeline = h.api().get("pr-1").await.expect("pr-1");
    let want = format!("{}-pr-1", h.ns);
    assert_eq!(
        p1.spec["vertices"][1]["udf"]["container"]["env"][0]["value"],
        json!(want)
    );
    assert_eq!(p1.labels().get("my-label"), Some(&want));

    // User pause and resume: in place.
    let mut paused = three_vertices(CAT, 10);
    paused["lifecycle"]["desiredPhase"] = "Paused".into();
    h.apply::<PipelineRollout>(pr(paused, Some(meta.clone())))
        .await;
    h.until::<Pipeline, _, _>("paused in place", "pr-1", |p| {
        (phase(p?) == "Paused").then_some(())
    })
    .await;
    h.apply::<PipelineRollout>(pr(three_vertices(CAT, 10), Some(meta.clone())))
        .await;
    h.until::<Pipeline, _, _>("running again", "pr-1", |p| {
        (phase(p?) == "Running").then_some(())
    })
    .await;
    assert_eq!(promoted::<Pipeline>(&h).await, vec!["pr-1".to_string()]);

    // ISB version: new ISB service and pipeline.
    h.apply::<ISBServiceRollout>(isb("2.10.11", "10Mi", None))
        .await;
    only::<InterStepBufferService>(&h, "isb version upgrade", "isb-1").await;
    only::<Pipeline>(&h, "pipeline follows the isb service", "pr-2").await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;

    // ISB memory: in place.
    h.apply::<ISBServiceRollout>(isb("2.10.11", "10Mi", Some("2Gi")))
        .await;
    h.until::<InterStepBufferService, _, _>("memory in place", "isb-1", |i| {
        (js(i?, "/containerTemplate/resources/limits/memory") == json!("2Gi")).then_some(())
    })
    .await;
    h.stays::<ISBServiceRollout, _>(
        "no upgrade for memory",
        ISB,
        Duration::from_secs(2),
        deployed_idle,
    )
    .await;

    // ISB volume size: new ISB service and pipeline again.
    h.apply::<ISBServiceRollout>(isb("2.10.11", "20Mi", Some("2Gi")))
        .await;
    only::<InterStepBufferService>(&h, "isb volume upgrade", "isb-2").await;
    only::<Pipeline>(&h, "pipeline follows again", "pr-3").await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    let p: Pipeline = h.api().get("pr-3").await.expect("pr-3");
    assert_eq!(p.spec["interStepBufferServiceName"], "isb-2");
}

#[tokio::test]
async fn a3_numaflow_controller_changes_apply_directly() {
    let h = Harness::start_real_on("a3-prog", CONFIG, "1.7.5").await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr(two_vertices(10), None)).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    let before: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    h.apply::<NumaflowControllerRollout>(nc_rollout("1.8.1"))
        .await;
    h.until::<Deployment, _, _>("controller on v1.8.1", "numaflow-controller", |d| {
        (image(d?) == "quay.io/numaproj/numaflow:v1.8.1").then_some(())
    })
    .await;
    h.until(
        "ncr settled",
        "numaflow-controller",
        settled::<NumaflowControllerRollout>,
    )
    .await;
    // Untouched: same spec, never paused. (Not "stays Running": the real controller marks a
    // pipeline Failed for the one pass in which its own Vertex update meets a stale
    // resourceVersion, as a controller that has just taken over may.)
    h.stays::<Pipeline, _>("pipeline untouched", "pr-0", Duration::from_secs(2), |p| {
        p.is_some_and(|p| {
            p.metadata.generation == before.metadata.generation
                && !matches!(phase(p), "Pausing" | "Paused")
        })
    })
    .await;
    assert_eq!(promoted::<Pipeline>(&h).await, vec!["pr-0".to_string()]);
}

#[tokio::test]
async fn a4_concurrent_changes_settle() {
    let h = Harness::start_real_on("a4-prog", CONFIG, "1.7.5").await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr(two_vertices(10), None)).await;
    h.apply::<MonoVertexRollout>(mvr(MV_IMAGE)).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;

    h.apply::<PipelineRollout>(pr(three_vertices(CAT, 10), None))
        .await;
    h.apply::<MonoVertexRollout>(mvr(MV_JAVA)).await;
    h.apply::<ISBServiceRollout>(isb("2.10.11", "10Mi", None))
        .await;
    h.apply::<NumaflowControllerRollout>(nc_rollout("1.8.1"))
        .await;

    h.until(
        "ncr settled",
        "numaflow-controller",
        settled::<NumaflowControllerRollout>,
    )
    .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;
    let isbs = promoted::<InterStepBufferService>(&h).await;
    assert_eq!(isbs.len(), 1, "{isbs:?}");
    let isbsvc: InterStepBufferService = h.api().get(&isbs[0]).await.expect("isb");
    assert_eq!(js(&isbsvc, "/version"), json!("2.10.11"));
    let pls = promoted::<Pipeline>(&h).await;
    assert_eq!(pls.len(), 1, "{pls:?}");
    let p: Pipeline = h.api().get(&pls[0]).await.expect("pipeline");
    assert_eq!(vertex_count(&p), 3);
    assert_eq!(p.spec["interStepBufferServiceName"], json!(isbs[0]));
    let mvs = promoted::<MonoVertex>(&h).await;
    assert_eq!(mvs.len(), 1, "{mvs:?}");
    let mv: MonoVertex = h.api().get(&mvs[0]).await.expect("mv");
    assert_eq!(mv_image(&mv), MV_JAVA);
    h.stays::<PipelineRollout, _>("pr stays idle", "pr", Duration::from_secs(2), deployed_idle)
        .await;
}

#[tokio::test]
async fn a6_rollback_discontinues_failed_upgrades() {
    let h = Harness::start_real("a6-prog", CONFIG).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr(two_vertices(10), None)).await;
    h.apply::<MonoVertexRollout>(mvr(MV_IMAGE)).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;

    // Broken specs start progressive upgrades; reverting them discontinues the upgrades and
    // keeps the original children.
    h.apply::<PipelineRollout>(pr(three_vertices(BAD_CAT, 10), None))
        .await;
    h.apply::<MonoVertexRollout>(mvr(MV_BAD)).await;
    h.until::<Pipeline, _, _>("pipeline trial", "pr-1", |p| p.map(|_| ()))
        .await;
    h.until::<MonoVertex, _, _>("monovertex trial", "mvr-1", |m| m.map(|_| ()))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.apply::<PipelineRollout>(pr(two_vertices(10), None)).await;
    h.apply::<MonoVertexRollout>(mvr(MV_IMAGE)).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;
    // The discontinued trials never ran: each is paused, cannot drain (its pods never became
    // ready), is force-drained with the promoted spec and deleted through Numaflow's own
    // deletion: under a minute alone, more than 120 s once beside the whole suite.
    let recycling = Duration::from_secs(240);
    only_within::<Pipeline>(&h, "original pipeline kept", "pr-0", recycling).await;
    only_within::<MonoVertex>(&h, "original monovertex kept", "mvr-0", recycling).await;
    let p: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    assert_eq!(vertex_count(&p), 2);
    assert_eq!(
        p.spec["vertices"][0]["scale"],
        json!({"min": 1, "max": 2}),
        "the promoted pipeline is back at its own scale"
    );
    let mv: MonoVertex = h.api().get("mvr-0").await.expect("mvr-0");
    assert_eq!(mv_image(&mv), MV_IMAGE);
    assert_eq!(mv.spec["scale"], json!({"min": 1, "max": 2}));
    h.stays::<MonoVertexRollout, _>(
        "mvr stays idle",
        "mvr",
        Duration::from_secs(2),
        deployed_idle,
    )
    .await;
}

/// The cat image of a three-vertex pipeline.
fn cat_image(p: &Pipeline) -> &str {
    p.spec["vertices"][1]["udf"]["container"]["image"]
        .as_str()
        .unwrap_or_default()
}

/// A.14 steps 1–2, driven through the controller: two failing upgrades back to back, then the
/// original spec again. The trial replaced while still under assessment drains with its own spec
/// first, cannot (its cat never runs), and is force-drained with the promoted spec; the failed
/// trial is discontinued and goes straight to force drain. Each shows at some moment the
/// promoted spec's cat image while paused and drained, then is deleted with a Normal Event.
#[tokio::test]
async fn a14_failed_trials_back_to_back_are_force_drained() {
    use support::fixtures::record;
    let h = Harness::start_real("a14-prog", CONFIG).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    let with_cat = |image: &str| pr(three_vertices(image, 10), None);
    h.apply::<PipelineRollout>(with_cat(CAT)).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    let seen1 = record::<Pipeline>(&h, "pr-1").await;
    let seen2 = record::<Pipeline>(&h, "pr-2").await;

    h.apply::<PipelineRollout>(with_cat("quay.io/numaio/numaflow-go/map-cat:badpath1"))
        .await;
    h.until::<Pipeline, _, _>("pr-1 trial", "pr-1", |p| p.map(|_| ()))
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    h.apply::<PipelineRollout>(with_cat("quay.io/numaio/numaflow-go/map-cat:badpath2"))
        .await;
    h.until::<PipelineRollout, _, _>("pr-2 failed", "pr", |r| {
        let up = r?
            .status
            .as_ref()?
            .progressive_status
            .as_ref()?
            .upgrading_pipeline_status
            .clone()?;
        (up.child.name == "pr-2"
            && up.child.assessment_result
                == Some(numaplane_api::progressive::AssessmentResult::Failure))
        .then_some(())
    })
    .await;

    // The original spec again.
    h.apply::<PipelineRollout>(with_cat(CAT)).await;
    h.until("pr settled on pr-0", "pr", settled::<PipelineRollout>)
        .await;
    only_within::<Pipeline>(&h, "only pr-0 left", "pr-0", Duration::from_secs(240)).await;
    for (name, seen) in [("pr-1", &seen1), ("pr-2", &seen2)] {
        let versions = seen.lock().expect("lock").clone();
        assert!(
            versions.iter().any(|p| cat_image(p) == CAT
                && p.spec.pointer("/lifecycle/desiredPhase") == Some(&json!("Paused"))
                && phase(p) == "Paused"
                && p.status.as_ref().map(|s| &s["drainedOnPause"]) == Some(&json!(true))),
            "{name} paused and drained with the promoted spec"
        );
    }
    let reasons = |name: &'static str| {
        let h = &h;
        async move {
            kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(h.client.clone(), &h.ns)
                .list(&ListParams::default())
                .await
                .expect("events")
                .items
                .into_iter()
                .filter(|e| {
                    e.type_.as_deref() == Some("Normal")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.reason.as_deref() == Some("ForceDrain")
                })
                .count()
        }
    };
    assert!(reasons("pr-1").await > 0, "a ForceDrain Event on pr-1");
    assert!(reasons("pr-2").await > 0, "a ForceDrain Event on pr-2");
}
