//! Explicit `null`s in a rollout's child spec (as manifests generated from Go structs and several
//! GitOps tools send them) are the same as absent keys, end to end through the controller: they
//! never start a trial, never re-start one after a failure, never hide a revert, never pause a
//! pipeline and never make a child be rewritten.

mod support;

use kube::ResourceExt;
use numaplane_api::numaflow::Pipeline;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{isb_rollout, record, versions_where};
use support::scenario::settled;
use support::{Harness, condition};

const PROGRESSIVE: &str = r#"
defaultUpgradeStrategy: "progressive"
permittedRiders: "group=,kind=ConfigMap"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,6,2,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

const CAT: &str = "quay.io/numaio/numaflow-go/map-cat:stable";
const BADCAT: &str = "quay.io/numaio/numaflow-go/map-cat:badpath1";

/// A PipelineRollout whose spec is full of nulls where Go-generated manifests have them, with a
/// progressive ConfigMap rider that has nulls too.
fn pr_with_nulls(cat: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {
            "pipeline": {"spec": {
                "interStepBufferServiceName": "default",
                "lifecycle": {"pauseGracePeriodSeconds": 10, "deleteGracePeriodSeconds": null},
                "limits": null,
                "watermark": null,
                "sideInputs": null,
                "templates": null,
                "vertices": [
                    {"name": "in", "scale": {"min": 2, "max": 3, "lookbackSeconds": null},
                     "source": {"generator": {"rpu": 5}, "transformer": null},
                     "groupBy": null, "sidecars": null},
                    {"name": "cat", "scale": {"min": 4, "max": 5, "disabled": null},
                     "udf": {"container": {"image": cat, "env": null}, "groupBy": null},
                     "partitions": null},
                    {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}, "fallback": null}}
                ],
                "edges": [
                    {"from": "in", "to": "cat", "conditions": null},
                    {"from": "cat", "to": "out", "conditions": null, "onFull": null}
                ]
            }},
            "riders": [{
                "progressive": true,
                "definition": {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "settings", "labels": null},
                    "data": {"mode": "fast", "unused": null}
                }
            }]
        }
    })
}

fn upgrade_state(p: &Pipeline) -> Option<&str> {
    p.labels()
        .get("numaplane.numaproj.io/upgrade-state")
        .map(String::as_str)
}

fn cat_scale(p: &Pipeline) -> &Value {
    &p.spec["vertices"][1]["scale"]
}

#[tokio::test]
async fn nulls_start_no_trial_after_a_failure_and_a_revert_discontinues() {
    let h = Harness::start_real("null-prog", PROGRESSIVE).await;
    h.apply::<ISBServiceRollout>(isb_rollout("default", json!({"version": "2.10.17"})))
        .await;
    h.apply::<PipelineRollout>(pr_with_nulls(CAT)).await;
    h.until::<PipelineRollout, _, _>("pr deployed on pr-0", "pr", settled)
        .await;
    let promoted_seen = record::<Pipeline>(&h, "pr-0").await;

    // Re-applying the same rollout changes nothing: no trial for nulls alone.
    let mut touched = pr_with_nulls(CAT);
    touched["spec"]["pipeline"]["spec"]["vertices"][2]["limits"] = Value::Null;
    h.apply::<PipelineRollout>(touched).await;
    h.until::<PipelineRollout, _, _>("touched rollout observed", "pr", settled)
        .await;
    h.stays::<Pipeline, _>("no trial for nulls", "pr-1", Duration::from_secs(4), |p| {
        p.is_none()
    })
    .await;

    // A bad image: the trial pr-1 fails and the promoted pipeline gets its scale back.
    h.apply::<PipelineRollout>(pr_with_nulls(BADCAT)).await;
    h.until::<PipelineRollout, _, _>("trial failed", "pr", |r| {
        let st = r?.status.as_ref()?;
        let (s, reason, _) = condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")?;
        (s == "False" && reason == "Failed").then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("promoted scale restored", "pr-0", |p| {
        (cat_scale(p?) == &json!({"min": 4, "max": 5})).then_some(())
    })
    .await;

    // No user change: no second trial, and the promoted pipeline keeps its whole scale.
    h.stays::<Pipeline, _>(
        "no new trial after the failure",
        "pr-2",
        Duration::from_secs(8),
        |p| p.is_none(),
    )
    .await;
    let pr0: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    assert_eq!(upgrade_state(&pr0), Some("promoted"));
    assert_eq!(cat_scale(&pr0), &json!({"min": 4, "max": 5}));

    // Reverting to the promoted spec discontinues the failed trial instead of starting another.
    h.apply::<PipelineRollout>(pr_with_nulls(CAT)).await;
    h.until::<PipelineRollout, _, _>("settled back on pr-0", "pr", settled)
        .await;
    h.until::<Pipeline, _, _>("failed trial recycled", "pr-1", |p| {
        p.is_none_or(|p| upgrade_state(p) == Some("recyclable"))
            .then_some(())
    })
    .await;
    h.stays::<Pipeline, _>(
        "no trial for the revert",
        "pr-2",
        Duration::from_secs(4),
        |p| p.is_none(),
    )
    .await;
    let pr0: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    assert_eq!(upgrade_state(&pr0), Some("promoted"));
    assert_eq!(
        cat_scale(&pr0),
        &json!({"min": 4, "max": 5}),
        "the promoted pipeline keeps its capacity after the upgrade"
    );
    // While the trial ran the promoted pipeline was halved once, never twice (4/5 → 2 → 4/5).
    let halvings = versions_where(&promoted_seen, |a, b| {
        cat_scale(a)["max"] != json!(2) && cat_scale(b)["max"] == json!(2)
    });
    assert_eq!(halvings, 1, "the promoted pipeline was scaled down once");
    let r: PipelineRollout = h.api().get("pr").await.expect("pr");
    let original = r
        .status
        .as_ref()
        .and_then(|s| s.progressive_status.as_ref())
        .and_then(|p| p.promoted_pipeline_status.as_ref())
        .and_then(|p| p.scale_values.as_ref())
        .and_then(|v| v.get("cat"))
        .map(|v| v.original_scale_min_max.clone());
    assert!(
        original
            .as_deref()
            .is_none_or(|o| o == r#"{"disabled":null,"max":5,"min":4}"#),
        "the saved original scale is the rollout's, not a halved one: {original:?}"
    );
    h.assert_invariants().await;
}

const PPND: &str = "defaultUpgradeStrategy: pause-and-drain\n";

/// The same pipeline without nulls: what a hand-written manifest has.
fn without_nulls(mut v: Value) -> Value {
    numaplane_core::usde::strip_nulls(&mut v);
    v
}

#[tokio::test]
async fn nulls_on_data_loss_fields_neither_pause_nor_rewrite_the_pipeline() {
    let h = Harness::start_real("null-ppnd", PPND).await;
    h.apply::<ISBServiceRollout>(isb_rollout("default", json!({"version": "2.10.17"})))
        .await;
    let mut plain = without_nulls(pr_with_nulls(CAT));
    plain["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("riders");
    h.apply::<PipelineRollout>(plain.clone()).await;
    h.until::<PipelineRollout, _, _>("deployed", "pr", settled)
        .await;
    let seen = record::<Pipeline>(&h, "pr-0").await;
    let before: Pipeline = h.api().get("pr-0").await.expect("pr-0");

    // The same manifest regenerated by a GitOps tool: `edges[].conditions: null` is on a data-loss
    // path and `udf.container.env: null` too; neither may pause the pipeline or rewrite it.
    let mut regenerated = pr_with_nulls(CAT);
    regenerated["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("riders");
    let r = h.apply::<PipelineRollout>(regenerated).await;
    assert!(
        r.metadata.generation > Some(1),
        "the nulls reached the rollout"
    );
    h.until::<PipelineRollout, _, _>("observed", "pr", settled)
        .await;
    h.stays::<Pipeline, _>("untouched", "pr-0", Duration::from_secs(4), |p| {
        p.is_some_and(|p| p.metadata.generation == before.metadata.generation)
    })
    .await;
    let paused = seen
        .lock()
        .expect("lock")
        .iter()
        .any(|p| p.spec.pointer("/lifecycle/desiredPhase") == Some(&json!("Paused")));
    assert!(!paused, "the pipeline was never asked to pause");
    h.assert_invariants().await;
}
