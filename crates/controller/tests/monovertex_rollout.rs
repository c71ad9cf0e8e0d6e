//! MonoVertexRollout under `no-strategy` (CONTRIBUTING.md) and riders: templated spec, in-place
//! update, user pause with slow and fast resume, rider add/change/remove, deletion; riders never
//! take over or delete an object their child doesn't own.

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::DeleteParams;
use numaplane_api::MonoVertexRollout;
use numaplane_api::common::Phase;
use numaplane_api::numaflow::MonoVertex;
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{record, versions_where};
use support::{Harness, condition};

fn mv_spec(image: &str) -> Value {
    json!({
        "scale": {"min": 1, "max": 2},
        "source": {"udsource": {"container": {
            "image": image,
            "env": [{"name": "my-env", "value": "{{.monovertex-namespace}}-{{.monovertex-name}}"}]
        }}},
        "sink": {"blackhole": {}}
    })
}

fn mv_rollout(spec: Value, riders: Value, strategy: Value) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": "mvr"},
        "spec": {"monoVertex": {
            "metadata": {"labels": {"my-label": "{{.monovertex-name}}"}},
            "spec": spec
        }, "riders": riders, "strategy": strategy}
    })
}

fn deployed_healthy(mvr: Option<&MonoVertexRollout>) -> Option<()> {
    let st = mvr?.status.as_ref()?;
    (st.status.phase == Phase::Deployed
        && st.status.observed_generation == mvr?.metadata.generation.unwrap_or(-1)
        && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then_some(())
}

fn templated(spec: &Value, ns: &str, child: &str) -> Value {
    let mut want = spec.clone();
    want["source"]["udsource"]["container"]["env"][0]["value"] = format!("{ns}-{child}").into();
    want
}

fn cm_rider(value: &str) -> Value {
    json!([{ "definition": {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm"},
        "data": {"owner": "{{.monovertex-name}}", "value": value}
    }}])
}

fn phase(mv: &MonoVertex) -> &str {
    mv.status
        .as_ref()
        .and_then(|s| s["phase"].as_str())
        .unwrap_or_default()
}

#[tokio::test]
async fn monovertex_rollout_lifecycle_with_riders() {
    let h = Harness::start_real_with_config("mvr-life", support::TEST_CONFIG).await;
    let spec = mv_spec("quay.io/numaio/numaflow-go/source-simple-source:stable");
    let versions = record::<MonoVertexRollout>(&h, "mvr").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.apply::<MonoVertexRollout>(mv_rollout(spec.clone(), cm_rider("1"), json!({})))
        .await;
    h.until(
        "MonoVertexRollout deployed and healthy",
        "mvr",
        deployed_healthy,
    )
    .await;
    // A new rollout's status is written once, with its child's first reaction (a new MonoVertex
    // reads "Unknown" until Numaflow observes it; that is settling, not news).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        versions_where(&versions, |a, b| a.status != b.status),
        1,
        "status writes for a new MonoVertexRollout"
    );
    // One Event for the child's creation, as the recorder would have written it.
    let created: Vec<Event> = h
        .api::<Event>()
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("mvr"))
        .filter(|e| e.reason.as_deref() == Some("ReconciliationSuccessful"))
        .collect();
    assert_eq!(created.len(), 1, "creation Events: {created:?}");
    let ev = &created[0];
    assert_eq!(ev.type_.as_deref(), Some("Normal"));
    assert_eq!(
        ev.reporting_controller.as_deref(),
        Some("monovertex-rollout")
    );
    assert_eq!(ev.action.as_deref(), Some("ReconciliationSuccessful"));
    assert!(ev.event_time.is_some() && ev.reporting_instance.is_some());
    assert!(ev.name_any().starts_with("mvr."), "{}", ev.name_any());
    let mv: MonoVertex = h.api().get("mvr-0").await.expect("mvr-0");
    assert_eq!(mv.spec, templated(&spec, &h.ns, "mvr-0"));
    assert_eq!(mv.labels()["my-label"], "mvr-0");
    let mvr: MonoVertexRollout = h.api().get("mvr").await.expect("mvr");
    let st = mvr.status.expect("status");
    assert_eq!(
        st.promoted_pod_selector,
        "app.kubernetes.io/component=mono-vertex,numaflow.numaproj.io/mono-vertex-name=mvr-0"
    );
    assert_eq!(st.riders.len(), 1);
    assert_eq!(st.riders[0].name, "cm-mvr-0");
    assert_eq!(
        condition(&st.status.conditions, "MonoVertexPausingOrPaused").map(|c| c.1),
        Some("Unpaused".to_string())
    );

    // Rider: templated, hashed, owned (not controlled) by the child.
    let cm: ConfigMap = h.api().get("cm-mvr-0").await.expect("rider cm-mvr-0");
    assert_eq!(cm.data.as_ref().expect("data")["owner"], "mvr-0");
    assert!(cm.annotations().contains_key("numaplane.numaproj.io/hash"));
    let owner = &cm.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("MonoVertex", "mvr-0")
    );
    assert_eq!(owner.controller, None);
    let hash = cm.annotations()["numaplane.numaproj.io/hash"].clone();

    // A changed rider is updated in place; a changed image is applied in place.
    let spec2 = mv_spec("quay.io/numaio/numaflow-java/source-simple-source:stable");
    h.apply::<MonoVertexRollout>(mv_rollout(spec2.clone(), cm_rider("2"), json!({})))
        .await;
    h.until::<ConfigMap, _, _>("rider updated", "cm-mvr-0", |cm| {
        let cm = cm?;
        (cm.data.as_ref()?.get("value")? == "2"
            && cm.annotations().get("numaplane.numaproj.io/hash") != Some(&hash))
        .then_some(())
    })
    .await;
    h.until::<MonoVertex, _, _>("image updated in place", "mvr-0", |mv| {
        (mv?.spec == templated(&spec2, &h.ns, "mvr-0")).then_some(())
    })
    .await;
    h.until("deployed after update", "mvr", deployed_healthy)
        .await;

    // A rider deleted by someone is recreated on the next check of the rollout's riders
    // (forced here by a spec change); a removed rider is deleted.
    h.apply::<MonoVertexRollout>(mv_rollout(spec2.clone(), json!([]), json!({})))
        .await;
    h.until::<ConfigMap, _, _>("rider deleted", "cm-mvr-0", |cm| cm.is_none().then_some(()))
        .await;

    // Pause, scale by hand, slow resume: replicas dropped.
    pause_resume(&h, &spec2, false).await;
    // Fast resume keeps the replicas.
    pause_resume(&h, &spec2, true).await;

    h.api::<MonoVertexRollout>()
        .delete("mvr", &DeleteParams::default())
        .await
        .expect("delete");
    h.until::<MonoVertexRollout, _, _>("rollout gone", "mvr", |m| m.is_none().then_some(()))
        .await;
    h.until::<MonoVertex, _, _>("child gone", "mvr-0", |m| m.is_none().then_some(()))
        .await;
    h.assert_invariants().await;
}

fn cm_riders(names: &[&str]) -> Value {
    names
        .iter()
        .map(|n| {
            json!({"definition": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": n},
                "data": {"rider": n}
            }})
        })
        .collect()
}

#[tokio::test]
async fn riders_leave_objects_they_do_not_own_alone() {
    let h = Harness::start_real_with_config("mvr-own", support::TEST_CONFIG).await;
    let spec = mv_spec("quay.io/numaio/numaflow-go/source-simple-source:stable");
    // Someone's ConfigMap under the name rider `taken` would get.
    let theirs = h
        .apply::<ConfigMap>(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "taken-mvr-0"},
            "data": {"mine": "yes"}
        }))
        .await;
    h.apply::<MonoVertexRollout>(mv_rollout(
        spec.clone(),
        cm_riders(&["kept", "taken"]),
        json!({}),
    ))
    .await;
    let want = format!(
        "ConfigMap taken-mvr-0 exists in namespace {} and is not owned by MonoVertex mvr-0",
        h.ns
    );
    h.until::<MonoVertexRollout, _, _>("the rider refused, naming the object", "mvr", |m| {
        let st = &m?.status.as_ref()?.status;
        (st.phase == Phase::Failed && st.message.contains(&want)).then_some(())
    })
    .await;
    assert!(
        h.events_about("mvr")
            .await
            .iter()
            .any(|e| e.note.as_deref().is_some_and(|n| n.contains(&want))),
        "a Warning Event names it"
    );
    let untouched = |c: Option<&ConfigMap>| {
        c.is_some_and(|c| {
            c.resource_version() == theirs.resource_version()
                && c.data == theirs.data
                && c.owner_references().is_empty()
        })
    };
    h.stays::<ConfigMap, _>(
        "their object untouched",
        "taken-mvr-0",
        Duration::from_secs(2),
        untouched,
    )
    .await;

    // Without that rider the rollout proceeds; their object stays as it was.
    h.apply::<MonoVertexRollout>(mv_rollout(spec.clone(), cm_riders(&["kept"]), json!({})))
        .await;
    h.until("deployed with the other rider", "mvr", deployed_healthy)
        .await;
    let kept: ConfigMap = h.api().get("kept-mvr-0").await.expect("rider kept-mvr-0");
    assert_eq!(kept.owner_references()[0].name, "mvr-0");

    // A rider someone took over (its owner reference removed) is no longer the child's: removing
    // the rider from the spec does not delete it.
    h.merge::<ConfigMap>("kept-mvr-0", json!({"metadata": {"ownerReferences": null}}))
        .await;
    h.apply::<MonoVertexRollout>(mv_rollout(spec.clone(), json!([]), json!({})))
        .await;
    h.until::<MonoVertexRollout, _, _>("riders removed from status", "mvr", |m| {
        let m = m?;
        let st = m.status.as_ref()?;
        (st.status.observed_generation == m.metadata.generation?
            && st.status.phase == Phase::Deployed
            && st.riders.is_empty())
        .then_some(())
    })
    .await;
    h.stays::<ConfigMap, _>(
        "a rider no longer owned is not deleted",
        "kept-mvr-0",
        Duration::from_secs(3),
        |c| c.is_some_and(|c| c.owner_references().is_empty()),
    )
    .await;
    h.stays::<ConfigMap, _>(
        "their object still untouched",
        "taken-mvr-0",
        Duration::from_secs(1),
        untouched,
    )
    .await;
    h.assert_invariants().await;
}

/// A rider still owned by an earlier child of the same name (a rollout deleted and created
/// again while the garbage collector has not yet removed the old child's riders) is waited for,
/// as Pending, not reported Failed; once it is gone the new child's rider is created.
#[tokio::test]
async fn a_rider_of_an_earlier_child_is_awaited_not_failed() {
    let h = Harness::start_real_with_config("mvr-gc", support::TEST_CONFIG).await;
    let spec = mv_spec("quay.io/numaio/numaflow-go/source-simple-source:stable");
    let earlier_uid = "0e0e0e0e-0000-4000-8000-00000000dead";
    // The finalizer keeps it past the garbage collector's delete until the test lets it go.
    h.apply::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "late-mvr-0",
            "finalizers": ["test.numaplane.numaproj.io/hold"],
            "ownerReferences": [{
                "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "MonoVertex",
                "name": "mvr-0", "uid": earlier_uid
            }]
        },
        "data": {"rider": "earlier"}
    }))
    .await;
    h.apply::<MonoVertexRollout>(mv_rollout(spec, cm_riders(&["late"]), json!({})))
        .await;
    let want = format!(
        "ConfigMap late-mvr-0 in namespace {} belongs to an earlier MonoVertex mvr-0 (uid {earlier_uid}, deleted): waiting for the garbage collector",
        h.ns
    );
    h.until::<MonoVertexRollout, _, _>("pending on the earlier rider", "mvr", |m| {
        let st = &m?.status.as_ref()?.status;
        (st.phase == Phase::Pending && st.message.contains(&want)).then_some(())
    })
    .await;
    h.stays::<MonoVertexRollout, _>(
        "never Failed while it waits",
        "mvr",
        Duration::from_secs(3),
        |m| {
            m.is_some_and(|m| {
                m.status
                    .as_ref()
                    .is_some_and(|s| s.status.phase != Phase::Failed)
            })
        },
    )
    .await;
    // What the garbage collector does once nothing holds the object.
    h.merge::<ConfigMap>("late-mvr-0", json!({"metadata": {"finalizers": null}}))
        .await;
    let _ = h
        .api::<ConfigMap>()
        .delete("late-mvr-0", &DeleteParams::default())
        .await;
    h.until("deployed with its own rider", "mvr", deployed_healthy)
        .await;
    let mv: MonoVertex = h.api().get("mvr-0").await.expect("mvr-0");
    let rider: ConfigMap = h.api().get("late-mvr-0").await.expect("rider late-mvr-0");
    assert_eq!(
        rider.owner_references()[0].uid,
        mv.uid().unwrap_or_default()
    );
    assert_eq!(
        rider
            .data
            .unwrap_or_default()
            .get("rider")
            .map(String::as_str),
        Some("late")
    );
    h.assert_invariants().await;
}

async fn pause_resume(h: &Harness, spec: &Value, fast: bool) {
    let strategy = json!({"pauseResume": {"fastResume": fast}});
    let mut paused = spec.clone();
    paused["lifecycle"] = json!({"desiredPhase": "Paused"});
    h.apply::<MonoVertexRollout>(mv_rollout(paused, json!([]), strategy.clone()))
        .await;
    h.until::<MonoVertexRollout, _, _>("MonoVertexPausingOrPaused=True", "mvr", |m| {
        let st = m?.status.as_ref()?;
        let (s, reason, _) = condition(&st.status.conditions, "MonoVertexPausingOrPaused")?;
        (s == "True" && reason == "MonoVertexPaused").then_some(())
    })
    .await;
    h.stays::<MonoVertex, _>("stays paused", "mvr-0", Duration::from_secs(2), |m| {
        m.is_some_and(|m| phase(m) == "Paused")
    })
    .await;
    h.merge::<MonoVertex>("mvr-0", json!({"spec": {"replicas": 2}}))
        .await;
    // The hand-set replicas survive while paused (they are the autoscaler's to own).
    h.stays::<MonoVertex, _>(
        "replicas kept while paused",
        "mvr-0",
        Duration::from_secs(2),
        |m| m.is_some_and(|m| m.spec.get("replicas") == Some(&json!(2))),
    )
    .await;
    h.apply::<MonoVertexRollout>(mv_rollout(spec.clone(), json!([]), strategy))
        .await;
    h.until::<MonoVertex, _, _>("running again", "mvr-0", |m| {
        (phase(m?) == "Running").then_some(())
    })
    .await;
    h.until("healthy after resume", "mvr", deployed_healthy)
        .await;
    let mv: MonoVertex = h.api().get("mvr-0").await.expect("mvr-0");
    let replicas = mv.spec.get("replicas").cloned().unwrap_or(Value::Null);
    if fast {
        assert_eq!(replicas, json!(2), "fast resume keeps replicas");
    } else {
        assert_eq!(replicas, Value::Null, "slow resume drops replicas");
    }
}
