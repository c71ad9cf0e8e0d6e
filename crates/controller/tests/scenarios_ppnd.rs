//! The functional scenarios (CONTRIBUTING.md) under `pause-and-drain`, two of them also
//! under `no-strategy`, on the real stack (the real Numaflow controller, KWOK pods, the daemon
//! stand-in): data-loss changes pause and drain pipelines before they are applied; everything
//! else is applied directly without a pause; a Failed pipeline is never paused; recreate fields
//! replace the ISB service and its pipelines; concurrent changes and rollbacks settle with
//! nothing left in progress.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use numaplane_api::common::{Phase, UpgradeStrategy};
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowControllerRollout, PipelineRollout,
};
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{image, nc_rollout, paused_drained_at, phase, record};
use support::scenario::*;
use support::{Harness, condition};

const PPND: &str = "defaultUpgradeStrategy: pause-and-drain\n";
/// Concurrent changes and rollbacks hold for every strategy: they run under `no-strategy` too.
const NO_STRATEGY: &str = "defaultUpgradeStrategy: no-strategy\n";

fn pr(spec: Value, metadata: Option<Value>, strategy: Option<Value>) -> Value {
    let mut pipeline = json!({"spec": spec});
    if let Some(m) = metadata {
        pipeline["metadata"] = m;
    }
    let mut r = json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {"pipeline": pipeline}
    });
    if let Some(s) = strategy {
        r["spec"]["strategy"] = s;
    }
    r
}

fn mvr(image: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": "mvr"},
        "spec": {"monoVertex": {
            "metadata": {"labels": {"my-label": "{{.monovertex-namespace}}-{{.monovertex-name}}"}},
            "spec": {
                "scale": {"min": 1, "max": 2},
                "source": {"udsource": {"container": {
                    "image": image,
                    "env": [{"name": "my-env",
                             "value": "{{.monovertex-namespace}}-{{.monovertex-name}}"}]
                }}},
                "sink": {"blackhole": {}}
            }
        }}
    })
}

fn desired_phase(p: &Pipeline) -> Option<&str> {
    p.spec
        .pointer("/lifecycle/desiredPhase")
        .and_then(Value::as_str)
}

/// Names of the live children of kind `K` not labelled recyclable.
async fn current<K>(h: &Harness) -> Vec<String>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    h.live_names::<K>(|s| s.is_none_or(|s| !s.starts_with("recyclable")))
        .await
}

/// The pipeline child the rollout currently has (its only non-recyclable one).
async fn pipeline_child(h: &Harness) -> String {
    let names = current::<Pipeline>(h).await;
    assert_eq!(names.len(), 1, "exactly one pipeline child: {names:?}");
    names[0].clone()
}

/// A pipeline that is never asked to pause, nor pauses, while `period` passes. (Not "stays
/// Running": the real controller marks a pipeline Failed for the one pass in which its own
/// Vertex update meets a stale resourceVersion, as it may right after a self-heal.)
async fn never_pauses(h: &Harness, what: &str, name: &str, period: Duration) {
    h.stays::<Pipeline, _>(what, name, period, |p| {
        p.is_some_and(|p| !matches!(phase(p), "Pausing" | "Paused") && desired_phase(p).is_none())
    })
    .await;
}

#[tokio::test]
async fn functional_pipeline() {
    let h = Harness::start_real("pipeline-ppnd", PPND).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr(two_vertices(30), None, None))
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;

    // Self-heal: a hand edit is reverted without pausing.
    h.merge::<Pipeline>("pr-0", json!({"spec": {"watermark": {"disabled": true}}}))
        .await;
    h.until::<Pipeline, _, _>("watermark edit reverted", "pr-0", |p| {
        p?.spec.get("watermark").is_none().then_some(())
    })
    .await;
    never_pauses(
        &h,
        "no pause for a self-heal",
        "pr-0",
        Duration::from_secs(2),
    )
    .await;
    h.until("settled after self-heal", "pr", settled::<PipelineRollout>)
        .await;

    // Metadata only: applied in place, no pause, no new child.
    let meta = json!({"labels": {"my-label": TAG}, "annotations": {"my-annotation": TAG}});
    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.apply::<PipelineRollout>(pr(two_vertices(30), Some(meta.clone()), None))
        .await;
    let want = format!("{}-pr-0", h.ns);
    h.until::<Pipeline, _, _>("templated metadata", "pr-0", |p| {
        let p = p?;
        (p.labels().get("my-label") == Some(&want)
            && p.annotations().get("my-annotation") == Some(&want))
        .then_some(())
    })
    .await;
    never_pauses(&h, "no pause for metadata", "pr-0", Duration::from_secs(1)).await;
    assert!(
        seen.lock()
            .expect("lock")
            .iter()
            .all(|p| desired_phase(p).is_none()),
        "never asked to pause for a metadata change"
    );

    // Topology change (data loss): paused and drained, updated in place while paused, resumed.
    let seen = record::<Pipeline>(&h, "pr-0").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.apply::<PipelineRollout>(pr(three_vertices(CAT, 30), Some(meta.clone()), None))
        .await;
    h.until::<Pipeline, _, _>("three vertices, running", "pr-0", |p| {
        let p = p?;
        (vertex_count(p) == 3 && phase(p) == "Running" && desired_phase(p).is_none()).then_some(())
    })
    .await;
    h.until("settled after topology", "pr", settled::<PipelineRollout>)
        .await;
    let drained = paused_drained_at(&seen).expect("paused and drained before the update");
    let first_update = seen
        .lock()
        .expect("lock")
        .iter()
        .find(|p| vertex_count(p) == 3)
        .cloned()
        .expect("update seen");
    assert_eq!(
        desired_phase(&first_update),
        Some("Paused"),
        "the topology was applied while paused"
    );
    assert!(drained < support::fixtures::rv(&first_update));
    let env = &first_update.spec["vertices"][1]["udf"]["container"]["env"][0]["value"];
    assert_eq!(env, &json!(want), "env templated with the promoted name");
    assert_eq!(pipeline_child(&h).await, "pr-0");

    // User pause: a direct change, no strategy in progress; then resume.
    let mut paused = three_vertices(CAT, 30);
    paused["lifecycle"]["desiredPhase"] = "Paused".into();
    h.apply::<PipelineRollout>(pr(paused, Some(meta.clone()), None))
        .await;
    h.until::<PipelineRollout, _, _>("paused by the user", "pr", |r| {
        let st = r?.status.as_ref()?;
        (condition(&st.status.conditions, "PipelinePausingOrPaused")?.0 == "True"
            && st.status.upgrade_in_progress == UpgradeStrategy::NoOp)
            .then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("pipeline paused, drained", "pr-0", |p| {
        let p = p?;
        (phase(p) == "Paused" && p.status.as_ref()?["drainedOnPause"] == json!(true)).then_some(())
    })
    .await;
    h.apply::<PipelineRollout>(pr(three_vertices(CAT, 30), Some(meta.clone()), None))
        .await;
    h.until::<Pipeline, _, _>("resumed", "pr-0", |p| {
        (phase(p?) == "Running").then_some(())
    })
    .await;
    h.until("settled after resume", "pr", settled::<PipelineRollout>)
        .await;

    // ISB version (data loss): the pipeline pauses first; names unchanged.
    let seen = record::<Pipeline>(&h, "pr-0").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.apply::<ISBServiceRollout>(isb("2.10.11", "10Mi", None))
        .await;
    h.until::<InterStepBufferService, _, _>("isb version updated", "isb-0", |i| {
        (js(i?, "/version") == json!("2.10.11")).then_some(())
    })
    .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    assert!(
        paused_drained_at(&seen).is_some(),
        "the pipeline paused and drained for the ISB version change"
    );
    assert_eq!(pipeline_child(&h).await, "pr-0");

    // ISB memory (no list): in place, no pause.
    h.apply::<ISBServiceRollout>(isb("2.10.11", "10Mi", Some("2Gi")))
        .await;
    h.until::<InterStepBufferService, _, _>("isb memory updated", "isb-0", |i| {
        (js(i?, "/containerTemplate/resources/limits/memory") == json!("2Gi")).then_some(())
    })
    .await;
    never_pauses(
        &h,
        "no pause for a memory change",
        "pr-0",
        Duration::from_secs(2),
    )
    .await;
    h.stays::<ISBServiceRollout, _>(
        "no strategy for a memory change",
        ISB,
        Duration::from_secs(1),
        not_in_progress,
    )
    .await;

    // ISB volume size (recreate): new ISB service and pipeline names.
    h.apply::<ISBServiceRollout>(isb("2.10.11", "20Mi", Some("2Gi")))
        .await;
    h.until::<Pipeline, _, _>("pipeline on the new isbsvc", "pr-1", |p| {
        let p = p?;
        (p.spec["interStepBufferServiceName"] == "isb-1" && phase(p) == "Running").then_some(())
    })
    .await;
    h.until("isb settled on isb-1", ISB, settled::<ISBServiceRollout>)
        .await;
    h.until("pr settled on pr-1", "pr", settled::<PipelineRollout>)
        .await;
    assert_eq!(current::<Pipeline>(&h).await, vec!["pr-1".to_string()]);
    assert_eq!(
        current::<InterStepBufferService>(&h).await,
        vec!["isb-1".to_string()]
    );
    h.assert_invariants().await;
}

#[tokio::test]
async fn functional_monovertex() {
    let h = Harness::start_real("mvtx-ppnd", PPND).await;
    h.apply::<MonoVertexRollout>(mvr(MV_IMAGE)).await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;
    // MonoVertex has no pause-and-drain: an image change is applied in place.
    h.apply::<MonoVertexRollout>(mvr(MV_JAVA)).await;
    h.until::<MonoVertex, _, _>("image updated in place", "mvr-0", |m| {
        (mv_image(m?) == MV_JAVA).then_some(())
    })
    .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;
    h.stays::<MonoVertexRollout, _>(
        "nothing in progress",
        "mvr",
        Duration::from_secs(2),
        not_in_progress,
    )
    .await;
    assert_eq!(current::<MonoVertex>(&h).await, vec!["mvr-0".to_string()]);
    let mv: MonoVertex = h.api().get("mvr-0").await.expect("mvr-0");
    let want = format!("{}-mvr-0", h.ns);
    assert_eq!(mv.labels().get("my-label"), Some(&want));
    assert_eq!(
        mv.spec["source"]["udsource"]["container"]["env"][0]["value"],
        json!(want)
    );
    h.assert_invariants().await;
}

#[tokio::test]
async fn functional_numaflow_controller() {
    let h = Harness::start_real_on("nc-ppnd", PPND, "1.7.5").await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr(two_vertices(30), None, None))
        .await;
    h.apply::<MonoVertexRollout>(mvr(MV_IMAGE)).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;
    h.until(
        "ncr settled",
        "numaflow-controller",
        settled::<NumaflowControllerRollout>,
    )
    .await;

    // 1.7.5 → 1.8.1: pipelines pause and drain, then resume.
    let seen = record::<Pipeline>(&h, "pr-0").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
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
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;
    assert!(paused_drained_at(&seen).is_some(), "paused for 1.8.1");

    // An unknown version: nothing changes, the rollout reports the failed child, no pause.
    h.apply::<NumaflowControllerRollout>(nc_rollout("99.99.99"))
        .await;
    h.until::<NumaflowControllerRollout, _, _>(
        "deployed, child failed",
        "numaflow-controller",
        |r| {
            let r = r?;
            let st = &r.status.as_ref()?.status;
            (st.phase == Phase::Deployed
                && st.observed_generation == r.metadata.generation?
                && condition(&st.conditions, "ChildResourcesHealthy")?.1 == "Failed")
                .then_some(())
        },
    )
    .await;
    h.stays::<Deployment, _>(
        "image stays v1.8.1",
        "numaflow-controller",
        Duration::from_secs(2),
        |d| d.is_some_and(|d| image(d) == "quay.io/numaproj/numaflow:v1.8.1"),
    )
    .await;
    never_pauses(
        &h,
        "no pause for an unknown version",
        "pr-0",
        Duration::from_secs(1),
    )
    .await;
    h.stays::<PipelineRollout, _>(
        "pipeline rollout not in progress",
        "pr",
        Duration::from_secs(1),
        not_in_progress,
    )
    .await;

    // Back to 1.8.1: a version change again, so a pause again.
    let seen = record::<Pipeline>(&h, "pr-0").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.apply::<NumaflowControllerRollout>(nc_rollout("1.8.1"))
        .await;
    h.until(
        "ncr settled again",
        "numaflow-controller",
        settled::<NumaflowControllerRollout>,
    )
    .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    assert!(
        paused_drained_at(&seen).is_some(),
        "paused again when the version changed back"
    );
    h.assert_invariants().await;
}

/// The pipeline, MonoVertex, ISB service and Numaflow controller all change at once.
async fn concurrent(
    prefix: &str,
    config: &str,
    isb_after: Value,
    check: fn(&InterStepBufferService) -> bool,
) {
    let h = Harness::start_real_on(prefix, config, "1.7.5").await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    let meta = json!({"labels": {"my-label": TAG}});
    h.apply::<PipelineRollout>(pr(two_vertices(30), Some(meta.clone()), None))
        .await;
    h.apply::<MonoVertexRollout>(mvr(MV_IMAGE)).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;

    let schedule = json!({"progressive": {"assessmentSchedule": "60,180,60,10"}});
    h.apply::<PipelineRollout>(pr(three_vertices(CAT, 30), Some(meta), Some(schedule)))
        .await;
    h.apply::<MonoVertexRollout>(mvr(MV_JAVA)).await;
    h.apply::<ISBServiceRollout>(isb_after).await;
    h.apply::<NumaflowControllerRollout>(nc_rollout("1.8.1"))
        .await;

    h.until::<Deployment, _, _>("controller on v1.8.1", "numaflow-controller", |d| {
        (image(d?) == "quay.io/numaproj/numaflow:v1.8.1").then_some(())
    })
    .await;
    for (what, name) in [("ncr", "numaflow-controller")] {
        h.until(what, name, settled::<NumaflowControllerRollout>)
            .await;
    }
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;
    let isbs = current::<InterStepBufferService>(&h).await;
    assert_eq!(isbs.len(), 1, "one ISB service: {isbs:?}");
    let isbsvc: InterStepBufferService = h.api().get(&isbs[0]).await.expect("isbsvc");
    assert!(check(&isbsvc), "isb spec: {}", isbsvc.spec);
    let p: Pipeline = h
        .api()
        .get(&pipeline_child(&h).await)
        .await
        .expect("pipeline");
    assert_eq!(vertex_count(&p), 3);
    assert_eq!(p.spec["interStepBufferServiceName"], json!(isbs[0]));
    let mv: MonoVertex = h.api().get("mvr-0").await.expect("mv");
    assert_eq!(mv_image(&mv), MV_JAVA);
    h.stays::<PipelineRollout, _>(
        "pr stays settled",
        "pr",
        Duration::from_secs(2),
        deployed_idle,
    )
    .await;
    h.stays::<ISBServiceRollout, _>(
        "isb stays settled",
        ISB,
        Duration::from_secs(1),
        deployed_idle,
    )
    .await;
    h.assert_invariants().await;
}

#[tokio::test]
async fn concurrent_changes_with_an_isb_version_change() {
    concurrent(
        "concurrent-version",
        PPND,
        isb("2.10.11", "10Mi", None),
        |i| js(i, "/version") == json!("2.10.11"),
    )
    .await;
}

#[tokio::test]
async fn concurrent_changes_with_an_isb_recreate() {
    concurrent(
        "concurrent-recreate",
        PPND,
        isb("2.10.17", "20Mi", Some("2Gi")),
        |i| {
            js(i, "/persistence/volumeSize") == json!("20Mi")
                && js(i, "/containerTemplate/resources/limits/memory") == json!("2Gi")
        },
    )
    .await;
}

#[tokio::test]
async fn concurrent_changes_with_a_direct_isb_change() {
    concurrent(
        "concurrent-direct",
        PPND,
        isb("2.10.17", "10Mi", Some("2Gi")),
        |i| js(i, "/containerTemplate/resources/limits/memory") == json!("2Gi"),
    )
    .await;
}

#[tokio::test]
async fn concurrent_changes_with_an_isb_recreate_no_strategy() {
    concurrent(
        "concurrent-none",
        NO_STRATEGY,
        isb("2.10.17", "20Mi", Some("2Gi")),
        |i| {
            js(i, "/persistence/volumeSize") == json!("20Mi")
                && js(i, "/containerTemplate/resources/limits/memory") == json!("2Gi")
        },
    )
    .await;
}

#[tokio::test]
async fn rollback_settles() {
    rollback("rollback-ppnd", PPND).await;
}

#[tokio::test]
async fn rollback_settles_no_strategy() {
    rollback("rollback-none", NO_STRATEGY).await;
}

/// Waits until the ISB rollout settles. A recreate waits for every pipeline on it to be paused
/// *and drained*; a pipeline that paused with a broken vertex cannot drain, so the recreate
/// holds, saying so, until the user allows data loss for it, as this does then.
async fn isb_settled_allowing_undrained(h: &Harness) {
    let held = h
        .until::<ISBServiceRollout, _, _>("isb settled or held for a drain", ISB, |r| {
            if settled(r).is_some() {
                return Some(false);
            }
            let msg = &r?.status.as_ref()?.status.message;
            msg.contains("to pause and drain before recreating")
                .then_some(true)
        })
        .await;
    if held {
        h.merge::<PipelineRollout>(
            "pr",
            json!({"metadata": {"annotations": {"numaplane.numaproj.io/allow-data-loss": "true"}}}),
        )
        .await;
    }
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
}

async fn rollback(prefix: &str, config: &str) {
    let h = Harness::start_real_on(prefix, config, "1.7.5").await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr(two_vertices(30), None, None))
        .await;
    h.apply::<MonoVertexRollout>(mvr(MV_IMAGE)).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;

    // 1. Update all four to something broken or risky, then revert all four.
    h.apply::<PipelineRollout>(pr(three_vertices(BAD_CAT, 30), None, None))
        .await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "20Mi", None))
        .await;
    h.apply::<MonoVertexRollout>(mvr(MV_BAD)).await;
    h.apply::<NumaflowControllerRollout>(nc_rollout("1.8.1"))
        .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    h.apply::<PipelineRollout>(pr(two_vertices(30), None, None))
        .await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<MonoVertexRollout>(mvr(MV_IMAGE)).await;
    h.apply::<NumaflowControllerRollout>(nc_rollout("1.7.5"))
        .await;
    h.until(
        "ncr settled",
        "numaflow-controller",
        settled::<NumaflowControllerRollout>,
    )
    .await;
    isb_settled_allowing_undrained(&h).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until("mvr settled", "mvr", settled::<MonoVertexRollout>)
        .await;
    h.stays::<PipelineRollout, _>(
        "pr stays settled",
        "pr",
        Duration::from_secs(2),
        deployed_idle,
    )
    .await;
    let d: Deployment = h
        .api()
        .get("numaflow-controller")
        .await
        .expect("deployment");
    assert_eq!(image(&d), "quay.io/numaproj/numaflow:v1.7.5");
    let isbs = current::<InterStepBufferService>(&h).await;
    assert_eq!(isbs.len(), 1, "{isbs:?}");
    let isbsvc: InterStepBufferService = h.api().get(&isbs[0]).await.expect("isb");
    assert_eq!(js(&isbsvc, "/persistence/volumeSize"), json!("10Mi"));
    let p: Pipeline = h
        .api()
        .get(&pipeline_child(&h).await)
        .await
        .expect("pipeline");
    assert_eq!(vertex_count(&p), 2);
    assert_eq!(p.spec["interStepBufferServiceName"], json!(isbs[0]));
    let mvs = current::<MonoVertex>(&h).await;
    assert_eq!(mvs.len(), 1, "{mvs:?}");
    let mv: MonoVertex = h.api().get(&mvs[0]).await.expect("mv");
    assert_eq!(mv_image(&mv), MV_IMAGE);

    // 2. Roll back only the pipeline; the ISB service keeps its new size.
    h.apply::<PipelineRollout>(pr(three_vertices(BAD_CAT, 30), None, None))
        .await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "20Mi", None))
        .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    h.apply::<PipelineRollout>(pr(two_vertices(30), None, None))
        .await;
    isb_settled_allowing_undrained(&h).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    let isbs = current::<InterStepBufferService>(&h).await;
    assert_eq!(isbs.len(), 1, "{isbs:?}");
    let isbsvc: InterStepBufferService = h.api().get(&isbs[0]).await.expect("isb");
    assert_eq!(js(&isbsvc, "/persistence/volumeSize"), json!("20Mi"));
    let p: Pipeline = h
        .api()
        .get(&pipeline_child(&h).await)
        .await
        .expect("pipeline");
    assert_eq!(vertex_count(&p), 2);
    assert_eq!(p.spec["interStepBufferServiceName"], json!(isbs[0]));
    h.assert_invariants().await;
}

/// Deployed, generation observed, nothing in progress (whatever the child's health).
fn deployed_observed<R: Rollout>(r: Option<&R>) -> Option<()> {
    let st = r?.common()?;
    (st.phase == Phase::Deployed
        && st.upgrade_in_progress == UpgradeStrategy::NoOp
        && st.observed_generation == r?.generation())
    .then_some(())
}

fn vertex_replicas(v: &numaplane_api::numaflow::Vertex) -> Option<i64> {
    v.spec.get("replicas").and_then(Value::as_i64)
}

/// A Failed pipeline is never paused, neither for its own update nor for an ISB
/// service or Numaflow controller change, and its update is applied directly; the resume after
/// a pause-and-drain restarts the vertices from `scale.min` unless `strategy.ppnd.fastResume`.
#[tokio::test]
async fn failed_pipelines_and_resume_speed() {
    use numaplane_api::numaflow::Vertex;
    let h = Harness::start_real_on("failed-ppnd", PPND, "1.7.5").await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;

    // A pipeline Numaflow fails: an edge between vertices that do not exist.
    let mut failing = two_vertices(30);
    failing["edges"]
        .as_array_mut()
        .expect("edges")
        .push(json!({"from": "not", "to": "valid"}));
    h.apply::<PipelineRollout>(pr(failing, None, None)).await;
    h.until::<Pipeline, _, _>("pipeline Failed", "pr-0", |p| {
        (phase(p?) == "Failed").then_some(())
    })
    .await;
    h.until::<PipelineRollout, _, _>("rollout deployed", "pr", deployed_observed)
        .await;

    // An ISB service data-loss change while it is Failed: updated in place, never paused.
    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.apply::<ISBServiceRollout>(isb("2.10.11", "10Mi", None))
        .await;
    h.until::<InterStepBufferService, _, _>("isb on 2.10.11", "isb-0", |i| {
        (i?.spec["jetstream"]["version"] == "2.10.11").then_some(())
    })
    .await;
    h.until::<ISBServiceRollout, _, _>("isb rollout done", ISB, deployed_observed)
        .await;
    // A Numaflow controller change while it is Failed: no pause either.
    h.apply::<NumaflowControllerRollout>(nc_rollout("1.8.1"))
        .await;
    h.until::<Deployment, _, _>("controller on v1.8.1", "numaflow-controller", |d| {
        (image(d?) == "quay.io/numaproj/numaflow:v1.8.1").then_some(())
    })
    .await;
    h.until::<NumaflowControllerRollout, _, _>(
        "ncr done",
        "numaflow-controller",
        deployed_observed,
    )
    .await;
    // Its own update: applied as it is, and it runs.
    h.apply::<PipelineRollout>(pr(three_vertices(CAT, 30), None, None))
        .await;
    h.until::<Pipeline, _, _>("fixed pipeline running", "pr-0", |p| {
        let p = p?;
        (vertex_count(p) == 3 && phase(p) == "Running").then_some(())
    })
    .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    assert!(
        seen.lock()
            .expect("lock")
            .iter()
            .all(|p| desired_phase(p).is_none() && !matches!(phase(p), "Pausing" | "Paused")),
        "a Failed pipeline is never asked to pause"
    );

    // Slow resume (the default) and fast resume after a pause-and-drain.
    let scalable = |spec: Value| {
        let mut s = spec;
        let last = s["vertices"].as_array().map_or(0, Vec::len) - 1;
        s["vertices"][last]["scale"] = json!({"min": 1, "max": 2});
        s
    };
    for (fast, before, after) in [
        (false, three_vertices(CAT, 30), two_vertices(30)),
        (true, two_vertices(30), three_vertices(CAT, 30)),
    ] {
        let strategy = json!({"ppnd": {"fastResume": fast}});
        h.apply::<PipelineRollout>(pr(scalable(before), None, Some(strategy.clone())))
            .await;
        h.until(
            "settled before the resume check",
            "pr",
            settled::<PipelineRollout>,
        )
        .await;
        h.merge::<Vertex>("pr-0-out", json!({"spec": {"replicas": 2}}))
            .await;
        let seen = record::<Pipeline>(&h, "pr-0").await;
        h.apply::<PipelineRollout>(pr(scalable(after), None, Some(strategy)))
            .await;
        h.until("settled after the update", "pr", settled::<PipelineRollout>)
            .await;
        assert!(
            paused_drained_at(&seen).is_some(),
            "paused and drained first"
        );
        let v: Vertex = h.api().get("pr-0-out").await.expect("vertex out");
        if fast {
            assert_eq!(
                vertex_replicas(&v),
                Some(2),
                "fast resume keeps the replicas"
            );
        } else {
            assert!(
                vertex_replicas(&v).is_none_or(|r| r < 2),
                "slow resume restarts from scale.min: {:?}",
                v.spec
            );
        }
    }
    h.assert_invariants().await;
}

/// An ISB service change and a Numaflow controller change wait for a pipeline
/// that cannot drain (stuck `Pausing`); allowing data loss on its PipelineRollout lets each
/// through, and the pipeline runs again without finishing its pause.
#[tokio::test]
async fn allowing_data_loss_lets_isb_and_controller_changes_through() {
    let h = Harness::start_real_on("allow-ppnd", PPND, "1.7.5").await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr(two_vertices(3600), None, None))
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    let allowed = |allow: bool| {
        let mut r = pr(two_vertices(3600), None, None);
        if allow {
            r["metadata"]["annotations"] = json!({"numaplane.numaproj.io/allow-data-loss": "true"});
        }
        r
    };
    for change in ["isb", "controller"] {
        h.daemon().set_pending(&h.ns, "pr-0", 100);
        if change == "isb" {
            h.apply::<ISBServiceRollout>(isb("2.10.11", "10Mi", None))
                .await;
        } else {
            h.apply::<NumaflowControllerRollout>(nc_rollout("1.8.1"))
                .await;
        }
        h.until::<Pipeline, _, _>("stuck pausing", "pr-0", |p| {
            (phase(p?) == "Pausing").then_some(())
        })
        .await;
        h.stays::<Pipeline, _>(
            "still pausing, the change waits",
            "pr-0",
            Duration::from_secs(3),
            |p| p.is_some_and(|p| phase(p) == "Pausing"),
        )
        .await;
        if change == "isb" {
            let i: InterStepBufferService = h.api().get("isb-0").await.expect("isb-0");
            assert_eq!(js(&i, "/version"), json!("2.10.17"), "the ISB change waits");
        } else {
            let d: Deployment = h
                .api()
                .get("numaflow-controller")
                .await
                .expect("deployment");
            assert_eq!(
                image(&d),
                "quay.io/numaproj/numaflow:v1.7.5",
                "the controller waits"
            );
        }
        h.apply::<PipelineRollout>(allowed(true)).await;
        if change == "isb" {
            h.until::<InterStepBufferService, _, _>("isb on 2.10.11", "isb-0", |i| {
                (js(i?, "/version") == json!("2.10.11")).then_some(())
            })
            .await;
            h.until("isb settled", ISB, settled::<ISBServiceRollout>)
                .await;
        } else {
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
        }
        h.until::<Pipeline, _, _>("running again", "pr-0", |p| {
            let p = p?;
            (phase(p) == "Running" && desired_phase(p).is_none()).then_some(())
        })
        .await;
        h.until::<PipelineRollout, _, _>("pr done", "pr", deployed_observed)
            .await;
        h.daemon().set_pending(&h.ns, "pr-0", 0);
        h.apply::<PipelineRollout>(allowed(false)).await;
    }
    h.assert_invariants().await;
}
