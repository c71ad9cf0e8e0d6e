//! Recycling replaced pipelines (CONTRIBUTING.md; docs/strategies.md) on the real
//! stack (the real Numaflow controller pauses; the daemon stand-in says whether they drained): a replaced pipeline drains with its own spec and is
//! deleted; failed ones are force-drained with the promoted spec, each in turn; one that never
//! took in data is deleted without a drain; expiry deletes, or keeps with
//! `keepUndrainedPipelines`; each outcome is an Event and a `progressive_pipeline_drains` count.
//! The recyclable pipelines are set up directly (labels and annotations as the progressive
//! strategy writes them), so these tests exercise recycling alone.

mod support;

use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use numaplane_api::numaflow::Pipeline;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{event_reasons, phase, record};
use support::{Harness, TEST_CONFIG, samples};

const GOOD: &str = "quay.io/numaio/numaflow-go/map-cat:stable";
const BAD: &str = "quay.io/numaio/numaflow-go/map-cat:badpath1";

fn spec(image: &str) -> Value {
    json!({
        "interStepBufferServiceName": "default",
        "lifecycle": {"pauseGracePeriodSeconds": 20},
        "vertices": [
            {"name": "in", "scale": {"min": 1, "max": 2}, "source": {"generator": {"rpu": 5}}},
            {"name": "cat", "scale": {"min": 2, "max": 3},
             "udf": {"container": {"image": image}}},
            {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
        ],
        "edges": [{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}]
    })
}

fn settled(pr: Option<&PipelineRollout>) -> Option<()> {
    let st = pr?.status.as_ref()?;
    (st.status.phase == numaplane_api::common::Phase::Deployed
        && st.status.observed_generation == pr?.metadata.generation?)
        .then_some(())
}

async fn setup(h: &Harness) {
    h.apply::<ISBServiceRollout>(support::fixtures::isb_rollout(
        "default",
        json!({"version": "2.10.17"}),
    ))
    .await;
    h.apply::<PipelineRollout>(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {"pipeline": {"spec": spec(GOOD)}}
    }))
    .await;
    h.until("pr deployed", "pr", settled).await;
    h.until::<Pipeline, _, _>("pr-0 running", "pr-0", |p| {
        (phase(p?) == "Running").then_some(())
    })
    .await;
}

fn rfc3339_ago(secs: u64) -> String {
    let t = std::time::SystemTime::now() - Duration::from_secs(secs);
    let t: k8s_openapi::jiff::Timestamp = t.try_into().expect("time");
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A pipeline of rollout `pr` as the progressive strategy leaves a replaced one: labelled
/// recyclable with `reason`, annotated since when (and whether it ever took in data).
async fn recyclable(
    h: &Harness,
    name: &str,
    image: &str,
    reason: &str,
    requires_drain: bool,
    age_secs: u64,
) {
    let pr: PipelineRollout = h.api().get("pr").await.expect("pr");
    let mut annotations = json!({
        "numaplane.numaproj.io/recyclable-start-time": rfc3339_ago(age_secs),
    });
    if requires_drain {
        annotations["numaplane.numaproj.io/requires-drain"] = "true".into();
    }
    let mut s = spec(image);
    s["interStepBufferServiceName"] = "default-0".into();
    let p: Pipeline = serde_json::from_value(json!({
        "apiVersion": "numaflow.numaproj.io/v1alpha1",
        "kind": "Pipeline",
        "metadata": {
            "name": name,
            "labels": {
                "numaplane.numaproj.io/parent-rollout-name": "pr",
                "numaplane.numaproj.io/upgrade-state": "recyclable",
                "numaplane.numaproj.io/upgrade-state-reason": reason,
                "numaplane.numaproj.io/isbsvc-name": "default",
                "numaplane.numaproj.io/isbsvc-child-name": "default-0",
            },
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "PipelineRollout",
                "name": "pr", "uid": pr.uid().expect("uid"), "controller": true
            }],
        },
        "spec": s,
    }))
    .expect("pipeline");
    h.api::<Pipeline>()
        .create(&PostParams::default(), &p)
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
}

fn image(p: &Pipeline) -> &str {
    p.spec["vertices"][1]["udf"]["container"]["image"]
        .as_str()
        .unwrap_or_default()
}

fn desired_paused(p: &Pipeline) -> bool {
    p.spec.pointer("/lifecycle/desiredPhase") == Some(&json!("Paused"))
}

async fn gone(h: &Harness, name: &str) {
    h.until::<Pipeline, _, _>(&format!("{name} deleted"), name, |p| {
        p.is_none().then_some(())
    })
    .await;
}

fn drains(h: &Harness, result: &str, pipeline: &str) -> f64 {
    samples(&h.metrics.encode(), "progressive_pipeline_drains")
        .into_iter()
        .filter(|(l, _)| {
            l.contains(&format!("drainResult=\"{result}\""))
                && l.contains(&format!("pipeline=\"{pipeline}\""))
        })
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test]
async fn replaced_pipeline_drains_with_its_own_spec_then_is_deleted() {
    let h = Harness::start_real("recycle-drain", TEST_CONFIG).await;
    setup(&h).await;
    let seen = record::<Pipeline>(&h, "pr-0").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The old promoted child after a successful upgrade: the rollout creates a new one.
    h.api::<Pipeline>()
        .patch(
            "pr-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "numaplane.numaproj.io/upgrade-state": "recyclable",
                "numaplane.numaproj.io/upgrade-state-reason": "progressive-success",
            }, "annotations": {"numaplane.numaproj.io/recyclable-start-time": rfc3339_ago(0)}}})),
        )
        .await
        .expect("mark recyclable");
    gone(&h, "pr-0").await;
    h.until::<Pipeline, _, _>("replacement running", "pr-1", |p| {
        (phase(p?) == "Running").then_some(())
    })
    .await;
    let versions = seen.lock().expect("lock").clone();
    assert!(
        versions.iter().any(
            |p| p.annotations().get("numaplane.numaproj.io/requires-drain")
                == Some(&"true".to_string())
        ),
        "our running pipeline was marked requires-drain"
    );
    let scaled = versions
        .iter()
        .find(|p| p.spec["vertices"][0]["scale"] == json!({"min": 0, "max": 0, "disabled": false}))
        .expect("source scaled to zero before the pause");
    // No progressive history: non-sources take the rollout's scale.min.
    assert_eq!(
        scaled.spec["vertices"][1]["scale"],
        json!({"min": 2, "max": 2, "disabled": false})
    );
    let drained = versions
        .iter()
        .find(|p| {
            desired_paused(p)
                && phase(p) == "Paused"
                && p.status.as_ref().map(|s| &s["drainedOnPause"]) == Some(&json!(true))
        })
        .expect("paused and drained before deletion");
    // The grace period stretched by 100/50.
    assert_eq!(
        drained.spec["lifecycle"]["pauseGracePeriodSeconds"],
        json!(40)
    );
    assert!(
        event_reasons(&h, "Pipeline")
            .await
            .contains(&"StandardDrain".into())
    );
    assert_eq!(drains(&h, "StandardDrain", "pr-0"), 1.0);
    h.assert_invariants().await;
}

#[tokio::test]
async fn failed_pipelines_are_force_drained_with_the_promoted_spec() {
    let h = Harness::start_real("recycle-force", TEST_CONFIG).await;
    setup(&h).await;
    let seen1 = record::<Pipeline>(&h, "pr-5").await;
    let seen2 = record::<Pipeline>(&h, "pr-6").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Two failed trials in a row.
    recyclable(&h, "pr-5", BAD, "progressive-replaced-failed", true, 0).await;
    recyclable(&h, "pr-6", BAD, "progressive-replaced-failed", true, 0).await;
    gone(&h, "pr-5").await;
    gone(&h, "pr-6").await;
    for (name, seen) in [("pr-5", &seen1), ("pr-6", &seen2)] {
        let versions = seen.lock().expect("lock").clone();
        let forced = versions
            .iter()
            .find(|p| image(p) == GOOD)
            .unwrap_or_else(|| panic!("{name} overlaid with the promoted spec"));
        assert_eq!(
            forced.annotations()["numaplane.numaproj.io/force-drain-specs-started"],
            "pr-0,"
        );
        assert_eq!(forced.spec["vertices"][0]["scale"]["max"], json!(0));
        assert_eq!(forced.spec["interStepBufferServiceName"], "default-0");
        assert!(
            versions.iter().any(|p| image(p) == GOOD
                && desired_paused(p)
                && phase(p) == "Paused"
                && p.status.as_ref().map(|s| &s["drainedOnPause"]) == Some(&json!(true))),
            "{name} drained with the promoted spec"
        );
        assert_eq!(drains(&h, "ForceDrain", name), 1.0);
    }
    assert!(
        event_reasons(&h, "Pipeline")
            .await
            .contains(&"ForceDrain".into())
    );
    // The promoted pipeline was never touched.
    let promoted: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    assert!(!desired_paused(&promoted));
    h.assert_invariants().await;
}

#[tokio::test]
async fn never_ingested_pipeline_is_deleted_without_draining() {
    let h = Harness::start_real("recycle-nodrain", TEST_CONFIG).await;
    setup(&h).await;
    let seen = record::<Pipeline>(&h, "pr-7").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    recyclable(&h, "pr-7", GOOD, "progressive-success", false, 0).await;
    gone(&h, "pr-7").await;
    assert!(
        seen.lock()
            .expect("lock")
            .iter()
            .all(|p| !desired_paused(p)),
        "never paused"
    );
    assert_eq!(drains(&h, "DrainNotRequired", "pr-7"), 1.0);
    assert!(
        event_reasons(&h, "Pipeline")
            .await
            .contains(&"DrainNotRequired".into())
    );
    h.assert_invariants().await;
}

#[tokio::test]
async fn expiry_deletes_an_undrainable_pipeline_when_it_is_due() {
    let h = Harness::start_real("recycle-expire", TEST_CONFIG).await;
    setup(&h).await;
    // Never drains; its grace period outlasts the test; it expires ~6 s after creation
    // (maxRecyclableDurationMinutes 60): only an exact wake-up deletes it in time.
    h.daemon().set_pending(&h.ns, "pr-8", 100);
    recyclable(&h, "pr-8", GOOD, "progressive-success", true, 3600 - 6).await;
    h.until::<Pipeline, _, _>("pausing", "pr-8", |p| (desired_paused(p?)).then_some(()))
        .await;
    let started = std::time::Instant::now();
    gone(&h, "pr-8").await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "deleted at expiry, not at a resync"
    );
    assert_eq!(drains(&h, "DrainIncomplete", "pr-8"), 1.0);
    assert!(
        event_reasons(&h, "Pipeline")
            .await
            .contains(&"DrainIncomplete".into())
    );
    h.assert_invariants().await;
}

#[tokio::test]
async fn expiry_keeps_undrained_pipelines_when_configured() {
    let config = format!("{TEST_CONFIG}pipeline:\n  keepUndrainedPipelines: true\n");
    let h = Harness::start_real("recycle-keep", &config).await;
    setup(&h).await;
    recyclable(&h, "pr-9", GOOD, "progressive-success", true, 2 * 3600).await;
    let kept = h
        .until::<Pipeline, _, _>("kept as recyclable-expired at zero", "pr-9", |p| {
            let p = p?;
            let expired = p.labels().get("numaplane.numaproj.io/upgrade-state")
                == Some(&"recyclable-expired".to_string());
            let zero = p.spec["vertices"]
                .as_array()?
                .iter()
                .all(|v| v["scale"]["min"] == json!(0) && v["scale"]["max"] == json!(0));
            (expired && zero).then(|| p.clone())
        })
        .await;
    assert_eq!(
        kept.labels()["numaplane.numaproj.io/upgrade-state-reason"],
        "progressive-success"
    );
    h.stays::<Pipeline, _>("not deleted", "pr-9", Duration::from_secs(2), |p| {
        p.is_some()
    })
    .await;
    assert_eq!(drains(&h, "DrainIncomplete", "pr-9"), 1.0);
    h.assert_invariants().await;
}
