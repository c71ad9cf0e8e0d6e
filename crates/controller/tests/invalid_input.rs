//! Bad input is reported in status (naming the field) and as an Event, never crashes the
//! operator, never touches objects that aren't ours, and doesn't stop other rollouts.

mod support;

use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{ListParams, PostParams};
use numaplane_api::common::Phase;
use numaplane_api::numaflow::Pipeline;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use serde_json::{Value, json};
use support::{Harness, condition, eventually};

fn pr(name: &str, spec: Value, riders: Value) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": spec}, "riders": riders}
    })
}

fn good_spec() -> Value {
    json!({
        "interStepBufferServiceName": "isb",
        "vertices": [
            {"name": "in", "scale": {"min": 1, "max": 1}, "source": {"generator": {"rpu": 1}}},
            {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
        ],
        "edges": [{"from": "in", "to": "out"}]
    })
}

fn failed_with(msg: &'static str) -> impl FnMut(Option<&PipelineRollout>) -> Option<String> {
    move |pr| {
        let st = pr?.status.as_ref()?;
        (st.status.phase == Phase::Failed && st.status.message.contains(msg))
            .then(|| st.status.message.clone())
    }
}

#[tokio::test]
async fn invalid_input_is_reported_and_isolated() {
    let h = Harness::start_real_with_config("invalid", support::TEST_CONFIG).await;
    h.apply::<ISBServiceRollout>(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "ISBServiceRollout",
        "metadata": {"name": "isb"},
        "spec": {"interStepBufferService": {"spec": {"jetstream": {"version": "2.10.17"}}}}
    }))
    .await;

    // A wrong type in scale: Failed, naming the field; no child is created.
    let mut bad_scale = good_spec();
    bad_scale["vertices"][0]["scale"]["min"] = "3x".into();
    h.apply::<PipelineRollout>(pr("bad-scale", bad_scale, json!([])))
        .await;
    let msg = h
        .until(
            "bad scale reported",
            "bad-scale",
            failed_with("spec.pipeline.spec.vertices[0].scale.min"),
        )
        .await;
    assert!(msg.contains("invalid Numaflow Pipeline spec"), "{msg}");

    // A spec that is not an object.
    h.apply::<PipelineRollout>(pr("not-object", json!({"vertices": "in"}), json!([])))
        .await;
    h.until(
        "non-array vertices reported",
        "not-object",
        failed_with("spec.pipeline.spec.vertices"),
    )
    .await;

    // A rider kind the configuration doesn't permit.
    let secret_rider = json!([{"definition": {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "b"}
    }}]);
    h.apply::<PipelineRollout>(pr("bad-rider", good_spec(), secret_rider))
        .await;
    h.until(
        "unpermitted rider reported",
        "bad-rider",
        failed_with("unpermitted"),
    )
    .await;

    // A child name taken by someone else's Pipeline: never taken over; the next name is used.
    let foreign = json!({
        "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "Pipeline",
        "metadata": {"name": "taken-0", "namespace": h.ns},
        "spec": {"vertices": []}
    });
    let foreign: Pipeline = serde_json::from_value(foreign).expect("pipeline");
    h.api::<Pipeline>()
        .create(&PostParams::default(), &foreign)
        .await
        .expect("create foreign pipeline");
    h.apply::<PipelineRollout>(pr("taken", good_spec(), json!([])))
        .await;
    h.until::<Pipeline, _, _>("rollout moves on to the next name", "taken-1", |p| {
        p.map(|_| ())
    })
    .await;
    let untouched: Pipeline = h.api().get("taken-0").await.expect("foreign pipeline");
    assert!(untouched.labels().is_empty(), "{:?}", untouched.labels());
    assert!(untouched.owner_references().is_empty());
    assert_eq!(untouched.spec, json!({"vertices": []}));

    // Meanwhile a valid rollout next to the broken ones deploys normally.
    h.apply::<PipelineRollout>(pr("good", good_spec(), json!([])))
        .await;
    h.until::<PipelineRollout, _, _>("good rollout deployed", "good", |pr| {
        let st = pr?.status.as_ref()?;
        (st.status.phase == Phase::Deployed
            && condition(&st.status.conditions, "ChildResourceDeployed")?.0 == "True")
            .then_some(())
    })
    .await;

    // Failures are Warning Events naming the problem, aggregated rather than repeated.
    let events: kube::Api<Event> = kube::Api::namespaced(h.client.clone(), &h.ns);
    let ev = eventually("a ReconcileFailed event for bad-scale", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("ReconcileFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad-scale")
            })
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert!(
        ev.note.as_deref().unwrap_or_default().contains("scale.min"),
        "{:?}",
        ev.note
    );
    assert_eq!(ev.reporting_controller.as_deref(), Some("pipeline-rollout"));
    let bad_scale_events = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad-scale"))
        .count();
    assert_eq!(
        bad_scale_events, 1,
        "one aggregated Event series, not a storm"
    );
}
