//! The functional scenarios of CONTRIBUTING.md under `progressive`, on the real
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

/// Names of the live children of kind `K` labelled promoted.
async fn promoted<K>(h: &Harness) -> Vec<String>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    h.live_names::<K>(|s| s == Some("promoted")).await
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
async fn functional_pipeline() {
    let h = Harness::start_real("pipeline-prog", CONFIG).await;
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
    h.assert_invariants().await;
}

#[tokio::test]
async fn numaflow_controller_changes_apply_directly() {
    let h = Harness::start_real_on("nc-prog", CONFIG, "1.7.5").await;
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
    h.assert_invariants().await;
}

#[tokio::test]
async fn concurrent_changes_settle() {
    let h = Harness::start_real_on("concurrent-prog", CONFIG, "1.7.5").await;
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
    h.assert_invariants().await;
}

#[tokio::test]
async fn rollback_discontinues_failed_upgrades() {
    let h = Harness::start_real("rollback-prog", CONFIG).await;
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
    h.assert_invariants().await;
}

/// The cat image of a three-vertex pipeline.
fn cat_image(p: &Pipeline) -> &str {
    p.spec["vertices"][1]["udf"]["container"]["image"]
        .as_str()
        .unwrap_or_default()
}

const BADPATH1: &str = "quay.io/numaio/numaflow-go/map-cat:badpath1";
const BADPATH2: &str = "quay.io/numaio/numaflow-go/map-cat:badpath2";
const BADPATH3: &str = "quay.io/numaio/numaflow-go/map-cat:badpath3";

/// The scenario's `updateFailedPipelinesBackToBack`: the cat image set to `badpath1` (trial
/// `first` appears), a few seconds later to `badpath2` (trial `second` replaces it); returns
/// once `second` has failed its assessment.
async fn failed_back_to_back(h: &Harness, first: &str, second: &str) {
    h.apply::<PipelineRollout>(with_cat(BADPATH1)).await;
    h.until::<Pipeline, _, _>("first failing trial", first, |p| p.map(|_| ()))
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    h.apply::<PipelineRollout>(with_cat(BADPATH2)).await;
    h.until::<PipelineRollout, _, _>("second failing trial failed", "pr", |r| {
        let up = upgrading_pipeline(r?)?;
        (up.child.name == second
            && up.child.assessment_result
                == Some(numaplane_api::progressive::AssessmentResult::Failure))
        .then_some(())
    })
    .await;
}

/// The failing-cat set-up: an ISB service and a three-vertex pipeline with a working cat, settled.
async fn failing_cat_start(prefix: &str) -> Harness {
    let h = Harness::start_real(prefix, CONFIG).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(with_cat(CAT)).await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h
}

/// The failing-cat pipeline rollout with this cat image.
fn with_cat(image: &str) -> Value {
    pr(three_vertices(image, 10), None)
}

/// Force-promotes pipeline `name` by label, as a user would.
async fn force_promote(h: &Harness, name: &str) {
    h.merge::<Pipeline>(
        name,
        json!({"metadata": {"labels": {"numaplane.numaproj.io/force-promote": "true"}}}),
    )
    .await;
}

/// How many Events of `type_` and `reason` regard `name`.
async fn events(h: &Harness, name: &str, type_: &str, reason: &str) -> usize {
    h.events_about(name)
        .await
        .iter()
        .filter(|e| e.type_.as_deref() == Some(type_) && e.reason.as_deref() == Some(reason))
        .count()
}

fn desired_paused(p: &Pipeline) -> bool {
    p.spec.pointer("/lifecycle/desiredPhase") == Some(&json!("Paused"))
}

/// `status.drainedOnPause` (Numaflow omits it when false).
fn drained_on_pause(p: &Pipeline) -> Option<bool> {
    p.status.as_ref()?.get("drainedOnPause")?.as_bool()
}

fn pause_timestamp(p: &Pipeline) -> Option<String> {
    p.annotations()
        .get("numaflow.numaproj.io/pause-timestamp")
        .cloned()
}

/// Waits until one of the recorded versions of `name` satisfies `check`; returns what it gave.
async fn seen<T>(
    what: &str,
    versions: &std::sync::Arc<std::sync::Mutex<Vec<Pipeline>>>,
    check: impl Fn(&Pipeline) -> Option<T>,
) -> T {
    let bound = Duration::from_secs(180);
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if let Some(t) = versions.lock().expect("lock").iter().find_map(&check) {
            return t;
        }
        if tokio::time::Instant::now() >= deadline {
            let last = versions.lock().expect("lock").last().map(|p| {
                format!(
                    "spec {} status {:?} annotations {:?}",
                    p.spec,
                    p.status,
                    p.annotations()
                )
            });
            panic!("{what}: not seen within {bound:?}; last version: {last:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Driven through the controller: two failing upgrades back to back, then the
/// original spec again. The trial replaced while still under assessment drains with its own spec
/// first, cannot (its cat never runs), and is force-drained with the promoted spec; the failed
/// trial is discontinued and goes straight to force drain. Each shows at some moment the
/// promoted spec's cat image while paused and drained, then is deleted with a Normal Event.
#[tokio::test]
async fn failed_trials_back_to_back_are_force_drained() {
    use support::fixtures::record;
    let h = failing_cat_start("back-to-back").await;
    let seen1 = record::<Pipeline>(&h, "pr-1").await;
    let seen2 = record::<Pipeline>(&h, "pr-2").await;
    failed_back_to_back(&h, "pr-1", "pr-2").await;

    // The original spec again.
    h.apply::<PipelineRollout>(with_cat(CAT)).await;
    h.until("pr settled on pr-0", "pr", settled::<PipelineRollout>)
        .await;
    only_within::<Pipeline>(&h, "only pr-0 left", "pr-0", Duration::from_secs(240)).await;
    for (name, seen) in [("pr-1", &seen1), ("pr-2", &seen2)] {
        let versions = seen.lock().expect("lock").clone();
        assert!(
            versions.iter().any(|p| cat_image(p) == CAT
                && desired_paused(p)
                && phase(p) == "Paused"
                && drained_on_pause(p) == Some(true)),
            "{name} paused and drained with the promoted spec"
        );
    }
    assert!(
        events(&h, "pr-1", "Normal", "ForceDrain").await > 0,
        "a ForceDrain Event on pr-1"
    );
    assert!(
        events(&h, "pr-2", "Normal", "ForceDrain").await > 0,
        "a ForceDrain Event on pr-2"
    );
    h.assert_invariants().await;
}

/// Driven through the controller (children `pr-1`…`pr-6`). Force-promoting a failed trial makes an unhealthy spec the promoted one: the
/// undrainable pipelines are force-drained with it, cannot drain, end Paused undrained and
/// scaled to zero; each new promoted spec restarts the attempt (a new pause); a healthy spec
/// finally drains them all. Then `maxRecyclableDurationMinutes`, reloaded live, deletes a
/// pipeline that could never drain.
#[tokio::test]
async fn unhealthy_promoted_specs_then_a_healthy_one_then_expiry() {
    use support::fixtures::record;
    let h = failing_cat_start("unhealthy-promoted").await;
    let mut rec = std::collections::BTreeMap::new();
    for i in 0..=6 {
        let name = format!("pr-{i}");
        rec.insert(i, record::<Pipeline>(&h, &name).await);
    }
    let pausing = |p: &Pipeline, image: &str| {
        cat_image(p) == image && desired_paused(p) && matches!(phase(p), "Pausing" | "Paused")
    };

    // Step 3: pr-1 and pr-2 fail back to back; pr-2 is force-promoted.
    failed_back_to_back(&h, "pr-1", "pr-2").await;
    force_promote(&h, "pr-2").await;
    seen("pr-0 drains with its own spec", &rec[&0], |p| {
        pausing(p, CAT).then_some(())
    })
    .await;
    let first_pause = seen("pr-1 force-drained with pr-2's spec", &rec[&1], |p| {
        pausing(p, BADPATH2).then(|| pause_timestamp(p)).flatten()
    })
    .await;

    // A new unhealthy spec, force-promoted: the attempt restarts with it.
    h.apply::<PipelineRollout>(with_cat(BADPATH3)).await;
    h.until::<Pipeline, _, _>("pr-3 trial", "pr-3", |p| p.map(|_| ()))
        .await;
    force_promote(&h, "pr-3").await;
    for i in [1, 2] {
        let ts = seen(
            &format!("pr-{i} force-drained with pr-3's spec"),
            &rec[&i],
            |p| pausing(p, BADPATH3).then(|| pause_timestamp(p)).flatten(),
        )
        .await;
        if i == 1 {
            assert_ne!(
                ts, first_pause,
                "pr-1's pause restarted with the new promoted spec"
            );
        }
        seen(&format!("pr-{i} Paused undrained"), &rec[&i], |p| {
            (cat_image(p) == BADPATH3 && phase(p) == "Paused" && drained_on_pause(p) != Some(true))
                .then_some(())
        })
        .await;
        h.until::<Pipeline, _, _>("every vertex at zero", &format!("pr-{i}"), |p| {
            let vs = p?.spec["vertices"].as_array()?.clone();
            vs.iter()
                .all(|v| v["scale"]["min"] == json!(0) && v["scale"]["max"] == json!(0))
                .then_some(())
        })
        .await;
    }
    h.until::<Pipeline, _, _>("pr-0 deleted", "pr-0", |p| p.is_none().then_some(()))
        .await;
    assert!(
        events(&h, "pr-0", "Normal", "StandardDrain").await > 0,
        "pr-0 drained with its own spec"
    );

    // Step 4: a healthy spec (a blackhole sink) is promoted; everything else drains with it.
    let mut healthy = three_vertices(CAT, 10);
    healthy["vertices"][2]["sink"] = json!({"blackhole": {}});
    h.apply::<PipelineRollout>(pr(healthy, None)).await;
    only_within::<Pipeline>(&h, "only pr-4 left", "pr-4", Duration::from_secs(300)).await;
    for i in [1, 2, 3] {
        let versions = rec[&i].lock().expect("lock").clone();
        assert!(
            versions.iter().any(|p| cat_image(p) == CAT
                && desired_paused(p)
                && phase(p) == "Paused"
                && drained_on_pause(p) == Some(true)),
            "pr-{i} paused and drained with pr-4's spec"
        );
        assert!(
            events(&h, &format!("pr-{i}"), "Normal", "ForceDrain").await > 0,
            "a ForceDrain Event on pr-{i}"
        );
    }

    // Step 5: maxRecyclableDurationMinutes 2, reloaded live; pr-5 can never drain (its own
    // spec and the force-promoted one both have a broken cat) and is deleted when it expires.
    let config = format!("{CONFIG}pipeline:\n  maxRecyclableDurationMinutes: 2\n");
    std::fs::write(&h.config_file, config).expect("write config");
    tokio::time::sleep(Duration::from_secs(5)).await;
    failed_back_to_back(&h, "pr-5", "pr-6").await;
    force_promote(&h, "pr-6").await;
    h.until::<Pipeline, _, _>("pr-4 deleted", "pr-4", |p| p.is_none().then_some(()))
        .await;
    let replaced_at = std::time::Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(200);
    while h
        .api::<Pipeline>()
        .get_opt("pr-5")
        .await
        .expect("get")
        .is_some()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pr-5 still there {:?} after pr-6 was force-promoted",
            replaced_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let versions = rec[&5].lock().expect("lock").clone();
    assert!(
        !versions.iter().any(|p| drained_on_pause(p) == Some(true)),
        "pr-5 never drained"
    );
    assert!(
        events(&h, "pr-5", "Warning", "DrainIncomplete").await > 0,
        "pr-5 deleted undrained, as a Warning DrainIncomplete"
    );
    h.assert_invariants().await;
}
