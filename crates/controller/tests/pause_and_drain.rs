//! Pause-and-drain for PipelineRollouts (CONTRIBUTING.md), on the real stack (the real Numaflow
//! controller pauses; the daemon stand-in answers whether the pipeline drained): a data-loss
//! change pauses the pipeline, waits until it has drained, applies the change while paused and
//! resumes; a change outside the data-loss lists is applied directly; a pipeline that cannot
//! drain waits until the rollout allows data loss.

mod support;

use kube::ResourceExt;
use numaplane_api::common::{Phase, UpgradeStrategy};
use numaplane_api::numaflow::Pipeline;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{paused_drained_at, record, rv};
use support::{Harness, condition};

const PPND: &str = "defaultUpgradeStrategy: pause-and-drain\n";

fn rollout(image: &str, scale_max: i64) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {"pipeline": {"spec": {
            "lifecycle": {"pauseGracePeriodSeconds": 30},
            "vertices": [
                {"name": "in", "scale": {"min": 1, "max": 1}, "source": {"generator": {"rpu": 5}}},
                {"name": "cat", "scale": {"min": 1, "max": scale_max},
                 "udf": {"container": {"image": image}}},
                {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
            ],
            "edges": [{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}]
        }}}
    })
}

fn image(p: &Pipeline) -> &str {
    p.spec["vertices"][1]["udf"]["container"]["image"]
        .as_str()
        .unwrap_or_default()
}

fn phase(p: &Pipeline) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s["phase"].as_str())
        .unwrap_or_default()
}

fn settled(pr: Option<&PipelineRollout>) -> Option<()> {
    let st = pr?.status.as_ref()?;
    (st.status.phase == Phase::Deployed
        && st.status.upgrade_in_progress == UpgradeStrategy::NoOp
        && st.status.observed_generation == pr?.metadata.generation.unwrap_or(-1)
        && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then_some(())
}

async fn setup(h: &Harness) {
    h.apply::<ISBServiceRollout>(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "ISBServiceRollout",
        "metadata": {"name": "default"},
        "spec": {"interStepBufferService": {"spec": {"jetstream": {"version": "2.10.17"}}}}
    }))
    .await;
    h.apply::<PipelineRollout>(rollout("quay.io/numaio/numaflow-go/map-cat:stable", 1))
        .await;
    h.until("deployed", "pr", settled).await;
}

#[tokio::test]
async fn data_loss_change_pauses_drains_updates_and_resumes() {
    let h = Harness::start_real("ppnd", PPND).await;
    setup(&h).await;

    // Not a data-loss field: applied directly, never paused.
    h.apply::<PipelineRollout>(rollout("quay.io/numaio/numaflow-go/map-cat:stable", 2))
        .await;
    h.until::<Pipeline, _, _>("scale applied directly", "pr-0", |p| {
        (p?.spec["vertices"][1]["scale"]["max"] == 2).then_some(())
    })
    .await;
    h.stays::<Pipeline, _>(
        "not paused for a scale change",
        "pr-0",
        Duration::from_secs(2),
        // (not "stays Running": Numaflow marks a pipeline Failed for the one pass in which its
        // own Vertex update meets a stale resourceVersion)
        |p| {
            p.is_some_and(|p| {
                !matches!(phase(p), "Pausing" | "Paused")
                    && p.spec.pointer("/lifecycle/desiredPhase").is_none()
            })
        },
    )
    .await;

    // A new udf image is a data-loss change: pause, drain, update while paused, resume. The
    // real controller pauses in about a second, quicker than a poll: every version is recorded.
    let rollouts = record::<PipelineRollout>(&h, "pr").await;
    let pipelines = record::<Pipeline>(&h, "pr-0").await;
    h.apply::<PipelineRollout>(rollout("quay.io/numaio/numaflow-go/map-cat:v2", 2))
        .await;
    h.until::<Pipeline, _, _>("updated and running again", "pr-0", |p| {
        let p = p?;
        (image(p) == "quay.io/numaio/numaflow-go/map-cat:v2" && phase(p) == "Running").then_some(())
    })
    .await;
    h.until("rollout settled", "pr", settled).await;
    assert!(
        rollouts.lock().expect("lock").iter().any(|pr| {
            pr.status.as_ref().is_some_and(|st| {
                st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain
                    && st.status.phase == Phase::Pending
            })
        }),
        "the rollout reported the pause-and-drain in progress"
    );
    let drained_at = paused_drained_at(&pipelines).expect("paused and drained");
    let updated_at = pipelines
        .lock()
        .expect("lock")
        .iter()
        .find(|p| image(p) == "quay.io/numaio/numaflow-go/map-cat:v2")
        .map(rv)
        .expect("updated");
    assert!(drained_at < updated_at, "drained before the update");
    let pr: PipelineRollout = h.api().get("pr").await.expect("pr");
    let ps = pr
        .status
        .clone()
        .and_then(|s| s.pause_status)
        .expect("pauseStatus");
    assert!(ps.last_pause_begin_time.is_some() || ps.last_pause_phase_change_time.is_some());
    assert!(ps.last_pause_end_time.is_some(), "{ps:?}");
    let child: Pipeline = h.api().get("pr-0").await.expect("child");
    assert!(
        child.spec.pointer("/lifecycle/desiredPhase").is_none(),
        "the user's spec again: {}",
        child.spec
    );
    // The history tells the three apart: created, the scale applied in place, the image paused
    // and drained; each with the field that started it.
    use numaplane_api::common::UpgradeOutcome::{AppliedDirectly, Created, PausedAndDrained};
    let history = &pr.status.as_ref().expect("status").status.upgrade_history;
    let pr0 = || "pr-0".to_string();
    assert_eq!(
        support::scenario::history_outcomes(&pr.status.as_ref().expect("status").status),
        vec![
            (pr0(), UpgradeStrategy::DirectApply, Some(Created)),
            (pr0(), UpgradeStrategy::DirectApply, Some(AppliedDirectly)),
            (
                pr0(),
                UpgradeStrategy::PipelinePauseAndDrain,
                Some(PausedAndDrained)
            ),
        ]
    );
    assert_eq!(
        history[1].changed_fields,
        vec!["spec.pipeline.spec.vertices[1].scale.max"]
    );
    assert_eq!(
        history[2].changed_fields,
        vec!["spec.pipeline.spec.vertices[1].udf.container.image"]
    );
    let (start, end) = (&history[2].start_time, history[2].end_time.as_ref());
    assert!(end.is_some_and(|e| e.0 >= start.0), "{:?}", history[2]);
    assert!(history[2].generation > history[1].generation);
    h.assert_invariants().await;
}

#[tokio::test]
async fn a_pipeline_that_cannot_drain_waits_until_data_loss_is_allowed() {
    let h = Harness::start_real("ppnd-slow", PPND).await;
    setup(&h).await;
    h.daemon()
        .drain_after(&h.ns, "pr-0", Duration::from_secs(600));
    h.apply::<PipelineRollout>(rollout("quay.io/numaio/numaflow-go/map-cat:v3", 1))
        .await;
    let msg = h
        .until::<PipelineRollout, _, _>("waiting for the pause, saying so", "pr", |pr| {
            let st = pr?.status.as_ref()?;
            (st.status
                .message
                .contains("waiting for pipeline pr-0 to drain and pause (phase Pausing)"))
            .then(|| st.status.message.clone())
        })
        .await;
    assert!(msg.contains("allow-data-loss"), "{msg}");
    h.stays::<Pipeline, _>(
        "old spec kept while pausing",
        "pr-0",
        Duration::from_secs(3),
        |p| {
            p.is_some_and(|p| {
                image(p) == "quay.io/numaio/numaflow-go/map-cat:stable" && phase(p) == "Pausing"
            })
        },
    )
    .await;

    // Allowing data loss lets the update through without waiting for the drain.
    let mut allowed = rollout("quay.io/numaio/numaflow-go/map-cat:v3", 1);
    allowed["metadata"]["annotations"] = json!({"numaplane.numaproj.io/allow-data-loss": "true"});
    h.apply::<PipelineRollout>(allowed).await;
    h.until::<Pipeline, _, _>("updated once data loss is allowed", "pr-0", |p| {
        (image(p?) == "quay.io/numaio/numaflow-go/map-cat:v3").then_some(())
    })
    .await;
    h.until("rollout settled", "pr", settled).await;
    let child: Pipeline = h.api().get("pr-0").await.expect("child");
    assert_eq!(child.name_any(), "pr-0", "updated in place");
    h.assert_invariants().await;
}

/// Data loss allowed: a data-loss change is applied as it is, never through a transient
/// `desiredPhase: Paused` (the reference's `wontPause`; issue "drop-in fidelity" item 3).
#[tokio::test]
async fn allowed_data_loss_updates_without_any_pause() {
    let h = Harness::start_real("ppnd-allowed", PPND).await;
    let mut allowed = rollout("quay.io/numaio/numaflow-go/map-cat:stable", 1);
    allowed["metadata"]["annotations"] = json!({"numaplane.numaproj.io/allow-data-loss": "true"});
    h.apply::<ISBServiceRollout>(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "ISBServiceRollout",
        "metadata": {"name": "default"},
        "spec": {"interStepBufferService": {"spec": {"jetstream": {"version": "2.10.17"}}}}
    }))
    .await;
    h.apply::<PipelineRollout>(allowed.clone()).await;
    h.until("deployed", "pr", settled).await;

    let pipelines = record::<Pipeline>(&h, "pr-0").await;
    let mut changed = rollout("quay.io/numaio/numaflow-go/map-cat:v2", 1);
    changed["metadata"] = allowed["metadata"].clone();
    h.apply::<PipelineRollout>(changed).await;
    h.until::<Pipeline, _, _>("updated", "pr-0", |p| {
        (image(p?) == "quay.io/numaio/numaflow-go/map-cat:v2").then_some(())
    })
    .await;
    h.until("rollout settled", "pr", settled).await;
    let seen = pipelines.lock().expect("lock").clone();
    assert!(
        seen.iter().all(|p| {
            p.spec.pointer("/lifecycle/desiredPhase").is_none()
                && !matches!(phase(p), "Pausing" | "Paused")
        }),
        "never asked to pause: {:?}",
        seen.iter()
            .map(|p| (p.spec.pointer("/lifecycle").cloned(), phase(p).to_string()))
            .collect::<Vec<_>>()
    );
    h.assert_invariants().await;
}
