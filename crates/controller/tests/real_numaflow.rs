//! Numaplane against the real Numaflow controller (the one rendered by a
//! NumaflowControllerRollout, run by the test environment as its Deployment's container), with
//! KWOK pods, kube-scheduler and kube-controller-manager's workload controllers, and the daemon
//! stand-in answering drain questions. Nothing here is our own simulator.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use numaplane_api::common::{Phase, UpgradeStrategy};
use numaplane_api::numaflow::Pipeline;
use numaplane_api::{ISBServiceRollout, NumaflowControllerRollout, PipelineRollout};
use serde_json::{Value, json};
use support::fixtures::{isb_rollout, nc_rollout, record};
use support::scenario::settled;
use support::{Harness, condition};

const PPND: &str = "defaultUpgradeStrategy: pause-and-drain\n";

const CAT: &str = "quay.io/numaio/numaflow-go/map-cat:stable";
const CAT2: &str = "quay.io/numaio/numaflow-go/map-cat:v1";

fn pr(cat: &str, edges: Value) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {"pipeline": {"spec": {
            "interStepBufferServiceName": "default",
            "lifecycle": {"pauseGracePeriodSeconds": 60},
            "vertices": [
                {"name": "in", "scale": {"min": 1, "max": 1}, "source": {"generator": {"rpu": 5}}},
                {"name": "cat", "scale": {"min": 1, "max": 1},
                 "udf": {"container": {"image": cat}}},
                {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
            ],
            "edges": edges
        }}}
    })
}

fn edges() -> Value {
    json!([{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}])
}

/// Applies the ISB service `default` and waits until the real controller has brought it up.
async fn install(h: &Harness) {
    h.apply::<ISBServiceRollout>(isb_rollout("default", json!({"version": "2.10.17"})))
        .await;
    h.until::<ISBServiceRollout, _, _>("isb service healthy", "default", |r| {
        let st = r?.status.as_ref()?;
        (st.status.phase == Phase::Deployed
            && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
            .then_some(())
    })
    .await;
}

fn phase(p: &Pipeline) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s["phase"].as_str())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_pipeline_runs_under_the_real_numaflow_controller() {
    let h = Harness::start_real("real-run", PPND).await;
    install(&h).await;
    h.apply::<PipelineRollout>(pr(CAT, edges())).await;
    h.until::<PipelineRollout, _, _>("deployed and healthy", "pr", settled)
        .await;
    // The real controller made the vertices and their pods (KWOK's), and reported Running.
    let pl: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    assert_eq!(phase(&pl), "Running", "{:?}", pl.status);
    // Its vertex controllers make the pods on their own time: Running may come first (seen
    // under load: only `cat`'s pod listed at that moment).
    let pods = h.api::<Pod>();
    support::eventually("a pod for every vertex", || async {
        let listed = pods
            .list(&ListParams::default().labels("numaflow.numaproj.io/pipeline-name=pr-0"))
            .await
            .ok()?;
        let vertices: Vec<String> = listed
            .items
            .iter()
            .filter_map(|p| p.labels().get("numaflow.numaproj.io/vertex-name").cloned())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        (vertices == ["cat", "in", "out"]).then_some(())
    })
    .await;
    h.assert_invariants().await;
}

#[tokio::test]
async fn a_bad_edge_is_reported_in_numaflow_s_words() {
    let h = Harness::start_real("real-edge", PPND).await;
    install(&h).await;
    let bad = json!([{"from": "in", "to": "cat"}, {"from": "cat", "to": "nowhere"}]);
    h.apply::<PipelineRollout>(pr(CAT, bad)).await;
    // The real controller rejects the spec and says why in the pipeline's status.message.
    let why = h
        .until::<Pipeline, _, _>("pipeline rejected", "pr-0", |p| {
            let p = p?;
            let m = p.status.as_ref()?["message"].as_str()?;
            (phase(p) == "Failed" && !m.is_empty()).then(|| m.to_string())
        })
        .await;
    // The rollout carries those words, not only "Pipeline Phase=Failed".
    h.until::<PipelineRollout, _, _>("failure reported with the cause", "pr", |r| {
        let st = r?.status.as_ref()?;
        let (s, reason, m) = condition(&st.status.conditions, "ChildResourcesHealthy")?;
        (s == "False" && reason == "PipelineFailed" && m == format!("Pipeline Phase=Failed: {why}"))
            .then_some(())
    })
    .await;
    h.assert_invariants().await;
}

#[tokio::test]
async fn pause_and_drain_against_the_real_controller() {
    let h = Harness::start_real("real-ppnd", PPND).await;
    install(&h).await;
    h.apply::<PipelineRollout>(pr(CAT, edges())).await;
    h.until::<PipelineRollout, _, _>("deployed", "pr", settled)
        .await;
    let seen = record::<Pipeline>(&h, "pr-0").await;

    // A data-loss change (the UDF image): paused, drained (the daemon stand-in says so when the
    // real controller asks), updated while paused, resumed.
    h.apply::<PipelineRollout>(pr(CAT2, edges())).await;
    h.until::<PipelineRollout, _, _>("updated and resumed", "pr", settled)
        .await;
    let pl: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    assert_eq!(
        pl.spec["vertices"][1]["udf"]["container"]["image"],
        json!(CAT2)
    );
    assert_eq!(phase(&pl), "Running");
    let versions = seen.lock().expect("lock").clone();
    let drained_at = versions.iter().position(|p| {
        phase(p) == "Paused"
            && p.status.as_ref().map(|s| &s["drainedOnPause"]) == Some(&json!(true))
    });
    let updated_at = versions
        .iter()
        .position(|p| p.spec["vertices"][1]["udf"]["container"]["image"] == json!(CAT2));
    let (Some(d), Some(u)) = (drained_at, updated_at) else {
        panic!("never seen paused and drained before the update: {drained_at:?} {updated_at:?}");
    };
    assert!(d < u, "the update came after the drain ({d} < {u})");
    assert!(
        h.daemon().calls(&h.ns, "pr-0") > 0,
        "the real controller asked the daemon whether pr-0 drained"
    );
    h.assert_invariants().await;
}

#[tokio::test]
async fn pause_and_drain_across_a_real_controller_upgrade_from_1_7_5_to_1_8_1() {
    let h = Harness::start_real_on("real-ncup", PPND, "1.7.5").await;
    install(&h).await;
    h.apply::<PipelineRollout>(pr(CAT, edges())).await;
    h.until::<PipelineRollout, _, _>("deployed under 1.7.5", "pr", settled)
        .await;
    let real = h.env.real().expect("real stack");
    let before = real.numaflow_controllers(&h.ns);
    assert_eq!(
        before
            .iter()
            .map(|s| s.binary_version.as_str())
            .collect::<Vec<_>>(),
        vec!["1.7.5"],
        "{before:?}"
    );
    let seen = record::<Pipeline>(&h, "pr-0").await;
    let deployments = record::<Deployment>(&h, "numaflow-controller").await;

    h.apply::<NumaflowControllerRollout>(nc_rollout("1.8.1"))
        .await;
    h.until::<NumaflowControllerRollout, _, _>("controller upgraded", "numaflow-controller", |r| {
        let r = r?;
        let st = r.status.as_ref()?;
        (st.status.phase == Phase::Deployed
            && st.status.observed_generation == r.metadata.generation?
            && st.status.upgrade_in_progress == UpgradeStrategy::NoOp)
            .then_some(())
    })
    .await;
    h.until::<PipelineRollout, _, _>("pipeline resumed under 1.8.1", "pr", settled)
        .await;
    h.until::<Pipeline, _, _>("running again", "pr-0", |p| {
        (phase(p?) == "Running").then_some(())
    })
    .await;

    // The old controller went away and the 1.8.1 binary took over.
    let after = real.numaflow_controllers(&h.ns);
    assert_eq!(
        after
            .iter()
            .map(|s| s.binary_version.as_str())
            .collect::<Vec<_>>(),
        vec!["1.7.5", "1.8.1"],
        "{after:?}"
    );
    assert_ne!(after[0].pid, after[1].pid);
    // The pipeline was paused and drained (by the 1.7.5 controller) before the Deployment
    // changed version, and ran again afterwards.
    let image_of = |d: &Deployment| support::fixtures::image(d);
    let changed_at = deployments
        .lock()
        .expect("lock")
        .iter()
        .find(|d| image_of(d).ends_with(":v1.8.1"))
        .map(support::fixtures::rv)
        .expect("the Deployment moved to 1.8.1");
    let drained_at = support::fixtures::paused_drained_at(&seen).expect("paused and drained");
    assert!(
        drained_at < changed_at,
        "drained (rv {drained_at}) before the controller changed (rv {changed_at})"
    );
    h.assert_invariants().await;
}

/// The stack frees a deleted claim once no pod uses it, as a cluster does (the API server puts
/// `kubernetes.io/pvc-protection` on every claim; kube-controller-manager removes it): an ISB
/// service recreated under its name gets its StatefulSet's claims again. Without that
/// controller a recreated ISB service waited for its pods forever.
#[tokio::test]
async fn a_deleted_claim_goes_once_no_pod_uses_it() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let env = numaplane_testenv::TestEnv::shared_real().await;
    let ns = env.create_namespace("pvc").await;
    let pvcs: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(env.client(), &ns);
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "js-vol"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .expect("claim");
    let made = pvcs
        .create(&Default::default(), &claim)
        .await
        .expect("create the claim");
    assert!(
        made.finalizers()
            .iter()
            .any(|f| f == "kubernetes.io/pvc-protection"),
        "the API server protects claims: {:?}",
        made.finalizers()
    );
    pvcs.delete("js-vol", &Default::default())
        .await
        .expect("delete the claim");
    support::eventually("the deleted claim gone", || async {
        pvcs.get_opt("js-vol")
            .await
            .ok()
            .and_then(|c| c.is_none().then_some(()))
    })
    .await;
}
