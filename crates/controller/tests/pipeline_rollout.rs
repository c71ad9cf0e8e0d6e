//! PipelineRollout and ISBServiceRollout under `no-strategy` on the real stack (CONTRIBUTING.md):
//! create, child spec deep-equal to the user's, templated metadata, self-heal, in-place
//! updates, user pause with slow and fast resume, deletion.

mod support;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams};
use numaplane_api::common::Phase;
use numaplane_api::numaflow::{InterStepBufferService, Pipeline, Vertex};
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{record, versions_where};
use support::{Harness, condition, eventually};

fn isbsvc_rollout(name: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "ISBServiceRollout",
        "metadata": {"name": name},
        "spec": {"interStepBufferService": {"spec": {
            "jetstream": {"version": "2.10.17", "persistence": {"volumeSize": "10Mi"}}
        }}}
    })
}

/// An ISB service whose pods never become ready: Numaflow's spec names no image for them, so the
/// test stack's KWOK fails their image pull by label.
fn stuck_isbsvc_rollout(name: &str) -> Value {
    let mut r = isbsvc_rollout(name);
    r["spec"]["interStepBufferService"]["spec"]["jetstream"]["metadata"] =
        json!({"labels": {"testenv.numaplane.io/image-pull": "fail"}});
    r
}

fn pipeline_spec(isb: &str) -> Value {
    json!({
        "interStepBufferServiceName": isb,
        "lifecycle": {"pauseGracePeriodSeconds": 10},
        "vertices": [
            {"name": "in", "scale": {"min": 1, "max": 2},
             "source": {"generator": {"rpu": 5, "duration": "1s"}}},
            {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
        ],
        "edges": [{"from": "in", "to": "out"}]
    })
}

fn pipeline_rollout(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": spec}}
    })
}

fn deployed_and_healthy(pr: Option<&PipelineRollout>) -> Option<()> {
    let st = pr?.status.as_ref()?;
    (st.status.phase == Phase::Deployed
        && st.status.observed_generation == pr?.metadata.generation.unwrap_or(-1)
        && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then_some(())
}

fn phase_of(p: &Pipeline) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s["phase"].as_str())
        .unwrap_or_default()
}

/// The child spec is exactly the user's, with the ISBServiceRollout name resolved.
fn expected_child_spec(user: &Value, isb_child: &str) -> Value {
    let mut want = user.clone();
    want["interStepBufferServiceName"] = isb_child.into();
    want
}

#[tokio::test]
async fn pipeline_rollout_lifecycle_under_no_strategy() {
    let h = Harness::start_real_with_config("pr-life", support::TEST_CONFIG).await;
    let spec = pipeline_spec("isb");

    // Created before its ISB service: waits with a clear message, no failure.
    h.apply::<PipelineRollout>(pipeline_rollout("pr", spec.clone()))
        .await;
    h.until::<PipelineRollout, _, _>("PipelineRollout reports what it waits for", "pr", |pr| {
        let st = pr?.status.as_ref()?;
        (st.status.phase == Phase::Failed
            && st
                .status
                .message
                .contains("unable to find ISBServiceRollout isb"))
        .then_some(())
    })
    .await;
    let isb_versions = record::<ISBServiceRollout>(&h, "isb").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.apply::<ISBServiceRollout>(isbsvc_rollout("isb")).await;

    // ISB service child, its PDB, health.
    h.until::<ISBServiceRollout, _, _>("ISBServiceRollout deployed and healthy", "isb", |r| {
        let st = r?.status.as_ref()?;
        (st.status.phase == Phase::Deployed
            && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
            .then_some(())
    })
    .await;
    // Pending, then pods starting: coming up, not news; the status is written once it runs.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        versions_where(&isb_versions, |a, b| a.status != b.status),
        1,
        "status writes for a new ISBServiceRollout"
    );
    let isb: InterStepBufferService = h.api().get("isb-0").await.expect("isbsvc isb-0");
    assert_eq!(
        isb.labels()["numaplane.numaproj.io/upgrade-state"],
        "promoted"
    );
    assert_eq!(
        isb.labels()["numaplane.numaproj.io/parent-rollout-name"],
        "isb"
    );
    let pdb: PodDisruptionBudget = h.api().get("isb-0").await.expect("PDB isb-0");
    let pdb_spec = pdb.spec.clone().expect("pdb spec");
    assert_eq!(
        pdb_spec.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    let sel = pdb_spec
        .selector
        .and_then(|s| s.match_labels)
        .expect("selector");
    assert_eq!(sel["app.kubernetes.io/component"], "isbsvc");
    assert_eq!(sel["numaflow.numaproj.io/isbsvc-name"], "isb-0");
    assert_eq!(pdb.owner_references()[0].name, "isb-0");

    // The pipeline child: deep-equal spec, labels, owner.
    h.until(
        "PipelineRollout deployed and healthy",
        "pr",
        deployed_and_healthy,
    )
    .await;
    let pr: PipelineRollout = h.api().get("pr").await.expect("pr");
    assert_eq!(pr.status.as_ref().and_then(|s| s.name_count), Some(1));
    assert!(
        pr.finalizers()
            .contains(&"numaplane.numaproj.io/numaplane-controller".to_string())
    );
    let child: Pipeline = h.api().get("pr-0").await.expect("pipeline pr-0");
    assert_eq!(child.spec, expected_child_spec(&spec, "isb-0"));
    let l = child.labels();
    assert_eq!(l["numaplane.numaproj.io/parent-rollout-name"], "pr");
    assert_eq!(l["numaplane.numaproj.io/upgrade-state"], "promoted");
    assert_eq!(l["numaplane.numaproj.io/isbsvc-name"], "isb");
    assert_eq!(l["numaplane.numaproj.io/isbsvc-child-name"], "isb-0");
    let owner = &child.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("PipelineRollout", Some(true))
    );
    assert_eq!(Some(&owner.uid), pr.uid().as_ref());
    assert_eq!(phase_of(&child), "Running");

    // Quiet when nothing changes: no status (or other) writes to the rollout.
    let rv = pr.resource_version();
    h.stays::<PipelineRollout, _>("no writes while idle", "pr", Duration::from_secs(3), |p| {
        p.is_some_and(|p| p.resource_version() == rv)
    })
    .await;

    // A direct-apply update costs two writes: the child once, the rollout's status once (held
    // back while the child catches up, then written with its reaction).
    let rollouts = record::<PipelineRollout>(&h, "pr").await;
    let pipelines = record::<Pipeline>(&h, "pr-0").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut faster = spec.clone();
    faster["vertices"][0]["source"]["generator"]["rpu"] = json!(7);
    h.apply::<PipelineRollout>(pipeline_rollout("pr", faster.clone()))
        .await;
    h.until("deployed after a direct apply", "pr", deployed_and_healthy)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let status_writes = versions_where(&rollouts, |a, b| a.status != b.status);
    assert_eq!(status_writes, 1, "status writes for one update");
    let child_writes = versions_where(&pipelines, |a, b| a.spec != b.spec);
    assert_eq!(child_writes, 1, "child spec writes for one update");
    h.apply::<PipelineRollout>(pipeline_rollout("pr", spec.clone()))
        .await;
    h.until("deployed after the revert", "pr", deployed_and_healthy)
        .await;

    // Self-heal: a field added on the child by someone else is removed.
    h.merge::<Pipeline>("pr-0", json!({"spec": {"watermark": {"disabled": true}}}))
        .await;
    h.until::<Pipeline, _, _>("edited child restored", "pr-0", |p| {
        (p?.spec == expected_child_spec(&spec, "isb-0")).then_some(())
    })
    .await;

    // Templated metadata, applied in place.
    let tag = "{{.pipeline-namespace}}-{{.pipeline-name}}";
    let mut with_meta = pipeline_rollout("pr", spec.clone());
    with_meta["spec"]["pipeline"]["metadata"] =
        json!({"labels": {"my-label": tag}, "annotations": {"my-annotation": tag, "keep": "x"}});
    h.apply::<PipelineRollout>(with_meta).await;
    let want = format!("{}-pr-0", h.ns);
    h.until::<Pipeline, _, _>("templated metadata on the child", "pr-0", |p| {
        let p = p?;
        (p.labels().get("my-label") == Some(&want)
            && p.annotations().get("my-annotation") == Some(&want))
        .then_some(())
    })
    .await;

    // Metadata removed from the rollout is removed from the child.
    let mut fewer_meta = pipeline_rollout("pr", spec.clone());
    fewer_meta["spec"]["pipeline"]["metadata"] = json!({"annotations": {"keep": "x"}});
    h.apply::<PipelineRollout>(fewer_meta.clone()).await;
    h.until::<Pipeline, _, _>("removed label and annotation gone", "pr-0", |p| {
        let p = p?;
        (!p.labels().contains_key("my-label")
            && !p.annotations().contains_key("my-annotation")
            && p.annotations().get("keep").map(String::as_str) == Some("x"))
        .then_some(())
    })
    .await;

    // A topology change is applied in place under no-strategy, templating the new env.
    let mut bigger = spec.clone();
    bigger["vertices"] = json!([
        {"name": "in", "scale": {"min": 1, "max": 2},
         "source": {"generator": {"rpu": 5, "duration": "1s"}}},
        {"name": "cat", "scale": {"min": 1, "max": 1},
         "udf": {"container": {"image": "quay.io/numaio/numaflow-go/map-cat:stable",
                 "env": [{"name": "my-env", "value": tag}]}}},
        {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
    ]);
    bigger["edges"] = json!([{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}]);
    let mut pr_bigger = fewer_meta.clone();
    pr_bigger["spec"]["pipeline"]["spec"] = bigger.clone();
    h.apply::<PipelineRollout>(pr_bigger).await;
    let mut want_spec = expected_child_spec(&bigger, "isb-0");
    want_spec["vertices"][1]["udf"]["container"]["env"][0]["value"] = want.clone().into();
    h.until::<Pipeline, _, _>("topology updated in place", "pr-0", |p| {
        (p?.spec == want_spec).then_some(())
    })
    .await;
    h.until("deployed after topology change", "pr", deployed_and_healthy)
        .await;
    let children = h
        .api::<Pipeline>()
        .list(&ListParams::default().labels("numaplane.numaproj.io/parent-rollout-name=pr"))
        .await
        .expect("list");
    assert_eq!(children.items.len(), 1, "still exactly one child");

    // User pause, then slow resume: vertex replicas are cleared.
    pause_resume(&h, &pr_spec_of(&h).await, false).await;
    // Fast resume keeps them.
    let mut fast = h.api::<PipelineRollout>().get("pr").await.expect("pr");
    fast.metadata.managed_fields = None;
    let mut fast_json = serde_json::to_value(&fast).expect("json");
    fast_json["spec"]["strategy"] = json!({"pauseResume": {"fastResume": true}});
    let fast_json = strip_server_fields(fast_json);
    h.apply::<PipelineRollout>(fast_json).await;
    pause_resume(&h, &pr_spec_of(&h).await, true).await;

    // A deleted child is recreated under the next name.
    h.history.deleted_by_test("Pipeline", "pr-0");
    h.api::<Pipeline>()
        .delete("pr-0", &DeleteParams::default())
        .await
        .expect("delete child");
    h.until::<Pipeline, _, _>("replacement child", "pr-1", |p| p.map(|_| ()))
        .await;
    h.until("deployed again", "pr", deployed_and_healthy).await;

    // Deleting the rollouts removes every child, then the rollouts.
    h.api::<PipelineRollout>()
        .delete("pr", &DeleteParams::default())
        .await
        .expect("delete pr");
    h.until::<PipelineRollout, _, _>("PipelineRollout gone", "pr", |pr| {
        pr.is_none().then_some(())
    })
    .await;
    let left = h
        .api::<Pipeline>()
        .list(&ListParams::default().labels("numaplane.numaproj.io/parent-rollout-name=pr"))
        .await
        .expect("list");
    assert!(
        left.items.is_empty(),
        "pipelines left: {:?}",
        left.items.len()
    );
    h.api::<ISBServiceRollout>()
        .delete("isb", &DeleteParams::default())
        .await
        .expect("delete isb");
    h.until::<InterStepBufferService, _, _>("isbsvc gone", "isb-0", |i| i.is_none().then_some(()))
        .await;
    h.assert_invariants().await;
}

/// A pipeline created while its ISB service is still coming up is marked Failed by Numaflow
/// until the service runs; that failure is about to clear, so the new rollout's status is still
/// written once, with the pipeline running.
#[tokio::test]
async fn a_pipeline_waiting_for_its_isb_service_writes_its_status_once() {
    let h = Harness::start_real_with_config("pr-isb-wait", support::TEST_CONFIG).await;
    // Its pods never get ready (their image cannot be pulled): the service stays unavailable.
    let stuck = stuck_isbsvc_rollout("isb");
    h.apply::<ISBServiceRollout>(stuck).await;
    h.until::<InterStepBufferService, _, _>("isbsvc running, pods not ready", "isb-0", |i| {
        let st = i?.status.as_ref()?;
        (st["phase"] == "Running").then_some(())
    })
    .await;

    let versions = record::<PipelineRollout>(&h, "pr").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.apply::<PipelineRollout>(pipeline_rollout("pr", pipeline_spec("isb")))
        .await;
    h.until::<Pipeline, _, _>("pipeline failed on its isbsvc", "pr-0", |p| {
        (phase_of(p?) == "Failed").then_some(())
    })
    .await;
    h.apply::<ISBServiceRollout>(isbsvc_rollout("isb")).await;
    h.until(
        "PipelineRollout deployed and healthy",
        "pr",
        deployed_and_healthy,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = versions.lock().expect("versions").clone();
    let reported_failure = seen.iter().any(|pr| {
        pr.status.as_ref().is_some_and(|s| {
            s.status.phase == Phase::Failed
                || condition(&s.status.conditions, "ChildResourcesHealthy")
                    .is_some_and(|c| c.1 == "PipelineFailed")
        })
    });
    assert!(!reported_failure, "the passing failure was never reported");
    assert_eq!(
        versions_where(&versions, |a, b| a.status != b.status),
        1,
        "status writes for a new PipelineRollout"
    );
    h.assert_invariants().await;
}

/// A pipeline whose ISB service never comes up is not held back for ever: once the status hold
/// runs out, the rollout reports the failed pipeline.
#[tokio::test]
async fn a_pipeline_whose_isb_service_never_comes_up_is_reported_when_the_hold_ends() {
    let h = Harness::start_real_with_config("pr-isb-never", support::TEST_CONFIG).await;
    let stuck = stuck_isbsvc_rollout("isb");
    h.apply::<ISBServiceRollout>(stuck).await;
    h.apply::<PipelineRollout>(pipeline_rollout("pr", pipeline_spec("isb")))
        .await;
    h.until::<Pipeline, _, _>("pipeline failed on its isbsvc", "pr-0", |p| {
        (phase_of(p?) == "Failed").then_some(())
    })
    .await;
    h.until(
        "the failed pipeline reported",
        "pr",
        |pr: Option<&PipelineRollout>| {
            let pr = pr?;
            let st = pr.status.as_ref()?;
            let (s, reason, _) = condition(&st.status.conditions, "ChildResourcesHealthy")?;
            (s == "False"
                && reason == "PipelineFailed"
                && st.status.observed_generation == pr.metadata.generation.unwrap_or_default())
            .then_some(())
        },
    )
    .await;
    h.assert_invariants().await;
}

/// Everything deleted at once (ISB service rollout first, as `kubectl delete -f` of a directory
/// may): the pipeline still drains and goes, then its ISB service and the rollouts.
#[tokio::test]
async fn rollouts_deleted_together_leave_nothing_behind() {
    let h = Harness::start_real_with_config("pr-del-all", support::TEST_CONFIG).await;
    h.apply::<ISBServiceRollout>(isbsvc_rollout("isb")).await;
    h.apply::<PipelineRollout>(pipeline_rollout("pr", pipeline_spec("isb")))
        .await;
    h.until(
        "PipelineRollout deployed and healthy",
        "pr",
        deployed_and_healthy,
    )
    .await;
    h.api::<ISBServiceRollout>()
        .delete("isb", &DeleteParams::default())
        .await
        .expect("delete isb");
    h.api::<PipelineRollout>()
        .delete("pr", &DeleteParams::default())
        .await
        .expect("delete pr");
    h.until::<Pipeline, _, _>("pipeline gone", "pr-0", |p| p.is_none().then_some(()))
        .await;
    h.until::<InterStepBufferService, _, _>("isbsvc gone", "isb-0", |i| i.is_none().then_some(()))
        .await;
    h.until::<PipelineRollout, _, _>("PipelineRollout gone", "pr", |pr| {
        pr.is_none().then_some(())
    })
    .await;
    h.until::<ISBServiceRollout, _, _>("ISBServiceRollout gone", "isb", |r| {
        r.is_none().then_some(())
    })
    .await;
    h.assert_invariants().await;
}

/// Two children labelled promoted (a copy made by hand, as a crash between two writes or an
/// edit would leave them): the older one is purged, drained like any replaced pipeline, and
/// deleted; the rollout goes on with the newest.
#[tokio::test]
async fn a_duplicate_promoted_child_is_purged() {
    let h = Harness::start_real_with_config("pr-dup", support::TEST_CONFIG).await;
    h.apply::<ISBServiceRollout>(isbsvc_rollout("isb")).await;
    h.apply::<PipelineRollout>(pipeline_rollout("pr", pipeline_spec("isb")))
        .await;
    h.until(
        "PipelineRollout deployed and healthy",
        "pr",
        deployed_and_healthy,
    )
    .await;
    let original: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    let copy: Pipeline = serde_json::from_value(json!({
        "apiVersion": "numaflow.numaproj.io/v1alpha1",
        "kind": "Pipeline",
        "metadata": {
            "name": "pr-1",
            "labels": original.labels(),
            "annotations": original.annotations(),
            "ownerReferences": original.owner_references(),
        },
        "spec": original.spec,
    }))
    .expect("copy");
    h.api::<Pipeline>()
        .create(&Default::default(), &copy)
        .await
        .expect("create the duplicate");
    h.history.made_by_test("Pipeline", "pr-1").await;
    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.until::<Pipeline, _, _>("older duplicate drained and deleted", "pr-0", |p| {
        p.is_none().then_some(())
    })
    .await;
    let versions = seen.lock().expect("lock").clone();
    assert!(
        versions.iter().any(|p| {
            p.labels()
                .get("numaplane.numaproj.io/upgrade-state-reason")
                .map(String::as_str)
                == Some("purge")
        }),
        "marked recyclable with reason purge"
    );
    assert!(
        support::fixtures::paused_drained_at(&seen).is_some(),
        "drained before its deletion"
    );
    h.until("deployed on the newest", "pr", deployed_and_healthy)
        .await;
    let p: Pipeline = h.api().get("pr-1").await.expect("pr-1");
    assert_eq!(
        p.labels()
            .get("numaplane.numaproj.io/upgrade-state")
            .map(String::as_str),
        Some("promoted")
    );
    h.assert_invariants().await;
}

async fn pr_spec_of(h: &Harness) -> Value {
    let pr = h.api::<PipelineRollout>().get("pr").await.expect("pr");
    strip_server_fields(serde_json::to_value(&pr).expect("json"))
}

/// A manifest the test user can re-apply: only what a user writes.
fn strip_server_fields(mut v: Value) -> Value {
    let meta = json!({"name": v["metadata"]["name"]});
    v["metadata"] = meta;
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
    v
}

/// Pauses the pipeline through the rollout, scales a vertex by hand (as an autoscaler would),
/// resumes, and checks whether the replicas survived.
async fn pause_resume(h: &Harness, manifest: &Value, fast: bool) {
    let child = current_child(h).await;
    let mut paused = manifest.clone();
    paused["spec"]["pipeline"]["spec"]["lifecycle"]["desiredPhase"] = "Paused".into();
    h.apply::<PipelineRollout>(paused).await;
    h.until::<PipelineRollout, _, _>("PipelinePausingOrPaused=True", "pr", |pr| {
        let st = pr?.status.as_ref()?;
        let (s, reason, _) = condition(&st.status.conditions, "PipelinePausingOrPaused")?;
        (s == "True" && reason == "PipelinePaused" && st.status.phase == Phase::Deployed)
            .then_some(())
    })
    .await;
    let p: Pipeline = h.api().get(&child).await.expect("child");
    assert_eq!(phase_of(&p), "Paused");
    assert_eq!(
        p.status.as_ref().map(|s| &s["drainedOnPause"]),
        Some(&json!(true))
    );
    let pr: PipelineRollout = h.api().get("pr").await.expect("pr");
    let ps = pr
        .status
        .as_ref()
        .and_then(|s| s.pause_status.clone())
        .expect("pauseStatus");
    assert!(ps.last_pause_phase_change_time.is_some(), "{ps:?}");
    h.stays::<Pipeline, _>("stays paused", &child, Duration::from_secs(3), |p| {
        p.is_some_and(|p| phase_of(p) == "Paused")
    })
    .await;

    let vertex = format!("{child}-in");
    h.merge::<Vertex>(&vertex, json!({"spec": {"replicas": 2}}))
        .await;
    let mut running = manifest.clone();
    running["spec"]["pipeline"]["spec"]["lifecycle"]["desiredPhase"] = "Running".into();
    h.apply::<PipelineRollout>(running).await;
    h.until::<Pipeline, _, _>("running again", &child, |p| {
        (phase_of(p?) == "Running").then_some(())
    })
    .await;
    h.until("healthy after resume", "pr", deployed_and_healthy)
        .await;
    let v: Vertex = h.api().get(&vertex).await.expect("vertex");
    let replicas = v.spec.get("replicas").cloned().unwrap_or(Value::Null);
    if fast {
        assert_eq!(replicas, json!(2), "fast resume keeps replicas");
    } else {
        assert_eq!(replicas, Value::Null, "slow resume clears replicas");
    }
    let pr: PipelineRollout = h.api().get("pr").await.expect("pr");
    let ps = pr.status.and_then(|s| s.pause_status).expect("pauseStatus");
    assert!(
        ps.last_pause_end_time.is_some(),
        "pause end recorded: {ps:?}"
    );
}

async fn current_child(h: &Harness) -> String {
    eventually("a promoted child", || async {
        h.api::<Pipeline>()
            .list(&ListParams::default().labels(
                "numaplane.numaproj.io/parent-rollout-name=pr,numaplane.numaproj.io/upgrade-state=promoted",
            ))
            .await
            .ok()?
            .items
            .first()
            .map(|p| p.name_any())
    })
    .await
}
