//! The status fixtures of the Argo CD health checks and actions (`config/argocd/testdata`),
//! taken from real objects: the controller and the real Numaflow controller bring rollouts into each
//! state (deployed, pausing, paused, pause-and-drain in progress, failed), and each object is
//! dumped with its run-specific parts (namespace, uids, times) normalised.
//!
//! The committed fixtures must match what this run produces; `UPDATE_ARGOCD_FIXTURES=1`
//! rewrites them. The Lua tests in `crates/cli/tests/argocd.rs` read them.

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use numaplane_api::common::{Phase, UpgradeStrategy};
use numaplane_api::numaflow::Pipeline;
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowController, NumaflowControllerRollout,
    PipelineRollout,
};
use serde::Serialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use support::{Harness, TEST_CONFIG, condition};

/// Namespace every fixture is written with.
const NAMESPACE: &str = "demo";
/// Every timestamp is written as this.
const TIME: &str = "2026-01-01T00:00:00Z";

fn config() -> String {
    format!(
        "{}includedResources: \"group=apps,kind=Deployment;group=,kind=ConfigMap;group=,kind=ServiceAccount;group=,kind=Secret;group=,kind=Service;group=rbac.authorization.k8s.io,kind=RoleBinding;group=rbac.authorization.k8s.io,kind=Role\"\n",
        TEST_CONFIG.replace(
            "defaultUpgradeStrategy: \"no-strategy\"",
            "defaultUpgradeStrategy: \"pause-and-drain\""
        )
    )
}

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/argocd/testdata")
}

fn is_time(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Replaces the run's namespace and every timestamp, recursively.
fn scrub(v: &mut Value, ns: &str) {
    match v {
        Value::String(s) if is_time(s) => *s = TIME.to_string(),
        Value::String(s) => *s = s.replace(ns, NAMESPACE),
        Value::Array(a) => a.iter_mut().for_each(|x| scrub(x, ns)),
        Value::Object(m) => m.values_mut().for_each(|x| scrub(x, ns)),
        _ => {}
    }
}

/// The object as a user sees it, without what differs from run to run.
fn normalise<K: Serialize>(obj: &K, ns: &str) -> Value {
    let mut v = serde_json::to_value(obj).expect("json");
    if let Some(meta) = v["metadata"].as_object_mut() {
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "ownerReferences",
        ] {
            meta.remove(key);
        }
    }
    scrub(&mut v, ns);
    v
}

/// Collects the fixtures of one run, then writes or checks them.
struct Fixtures {
    ns: String,
    files: Vec<(String, String)>,
}

impl Fixtures {
    fn add<K: Serialize>(&mut self, name: &str, obj: &K) {
        let text = serde_json::to_string_pretty(&normalise(obj, &self.ns)).expect("json") + "\n";
        self.files.push((format!("{name}.json"), text));
    }

    fn finish(self) {
        let dir = testdata();
        if std::env::var_os("UPDATE_ARGOCD_FIXTURES").is_some() {
            std::fs::create_dir_all(&dir).expect("mkdir testdata");
            for (name, text) in &self.files {
                std::fs::write(dir.join(name), text).expect("write fixture");
            }
            return;
        }
        let mut drifted = Vec::new();
        for (name, text) in &self.files {
            let committed = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            if &committed != text {
                drifted.push(format!("--- {name} (this run):\n{text}"));
            }
        }
        assert!(
            drifted.is_empty(),
            "config/argocd/testdata differs from the objects of this run; rerun with \
             UPDATE_ARGOCD_FIXTURES=1 if the change is intended:\n{}",
            drifted.join("\n")
        );
    }
}

fn pipeline_rollout(name: &str, image: &str, desired_phase: &str, isbsvc: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": {
            "interStepBufferServiceName": isbsvc,
            "lifecycle": {"desiredPhase": desired_phase, "pauseGracePeriodSeconds": 600},
            "vertices": [
                {"name": "in", "scale": {"min": 1, "max": 1}, "source": {"generator": {"rpu": 5}}},
                {"name": "cat", "scale": {"min": 1, "max": 1}, "udf": {"container": {"image": image}}},
                {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
            ],
            "edges": [{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}]
        }}}
    })
}

fn monovertex_rollout(desired_phase: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": "my-monovertex"},
        "spec": {"monoVertex": {"spec": {
            "lifecycle": {"desiredPhase": desired_phase},
            "scale": {"min": 1, "max": 1},
            "source": {"udsource": {"container": {"image": "quay.io/numaio/numaflow-go/source-simple-source:stable"}}},
            "sink": {"blackhole": {}}
        }}}
    })
}

const CAT: &str = "quay.io/numaio/numaflow-go/map-cat:stable";

/// Deployed, generation observed, child healthy, nothing in progress.
fn settled(status: Option<&numaplane_api::common::Status>, generation: Option<i64>) -> bool {
    status.is_some_and(|st| {
        st.phase == Phase::Deployed
            && st.upgrade_in_progress == UpgradeStrategy::NoOp
            && Some(st.observed_generation) == generation
            && condition(&st.conditions, "ChildResourcesHealthy").is_some_and(|c| c.0 == "True")
    })
}

fn pr_settled(pr: Option<&PipelineRollout>) -> Option<PipelineRollout> {
    let pr = pr?;
    settled(pr.status.as_ref().map(|s| &s.status), pr.meta().generation).then(|| pr.clone())
}

/// The rollout once its pause condition has `reason` for its current generation, and the
/// health of the child has caught up with the pause (Unknown while pausing or paused; a status
/// written between the two is a transient the fixtures must not capture).
fn pr_pause_reason(
    pr: Option<&PipelineRollout>,
    reason: &str,
    in_progress: UpgradeStrategy,
) -> Option<PipelineRollout> {
    let pr = pr?;
    let st = &pr.status.as_ref()?.status;
    (Some(st.observed_generation) == pr.meta().generation
        && st.upgrade_in_progress == in_progress
        && condition(&st.conditions, "PipelinePausingOrPaused")?.1 == reason
        && condition(&st.conditions, "ChildResourcesHealthy")?.1 == "PipelineUnknown")
        .then(|| pr.clone())
}

#[tokio::test]
async fn argocd_fixtures_from_real_objects() {
    let h = Harness::start_real("argocd", &config()).await;
    let mut fx = Fixtures {
        ns: h.ns.clone(),
        files: Vec::new(),
    };

    h.apply::<ISBServiceRollout>(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "ISBServiceRollout",
        "metadata": {"name": "default"},
        "spec": {"interStepBufferService": {"spec": {"jetstream": {"version": "2.10.17"}}}}
    }))
    .await;
    let isbr = h
        .until::<ISBServiceRollout, _, _>("ISB service deployed", "default", |r| {
            let r = r?;
            settled(r.status.as_ref().map(|s| &s.status), r.meta().generation).then(|| r.clone())
        })
        .await;
    fx.add("isbservicerollout-deployed", &isbr);

    // Deployed, then paused by the user.
    h.apply::<PipelineRollout>(pipeline_rollout("my-pipeline", CAT, "Running", "default"))
        .await;
    let pr = h
        .until("pipeline deployed", "my-pipeline", pr_settled)
        .await;
    fx.add("pipelinerollout-deployed", &pr);
    let child: Pipeline = h.api().get("my-pipeline-0").await.expect("child");
    fx.add("pipeline-promoted", &child);
    h.apply::<PipelineRollout>(pipeline_rollout("my-pipeline", CAT, "Paused", "default"))
        .await;
    let pr = h
        .until("pipeline paused", "my-pipeline", |pr| {
            pr_pause_reason(pr, "PipelinePaused", UpgradeStrategy::NoOp)
        })
        .await;
    fx.add("pipelinerollout-paused", &pr);

    // Pausing by the user: a pipeline that cannot drain stays Pausing for its grace period.
    h.daemon().set_pending(&h.ns, "slow-pipeline-0", 100);
    h.apply::<PipelineRollout>(pipeline_rollout("slow-pipeline", CAT, "Running", "default"))
        .await;
    h.until("slow pipeline deployed", "slow-pipeline", pr_settled)
        .await;
    h.apply::<PipelineRollout>(pipeline_rollout("slow-pipeline", CAT, "Paused", "default"))
        .await;
    let pr = h
        .until("pipeline pausing", "slow-pipeline", |pr| {
            pr_pause_reason(pr, "PipelinePausing", UpgradeStrategy::NoOp)
        })
        .await;
    fx.add("pipelinerollout-pausing", &pr);

    // Pause-and-drain in progress: a data-loss change waits for a pipeline that cannot drain.
    h.daemon().set_pending(&h.ns, "ppnd-pipeline-0", 100);
    h.apply::<PipelineRollout>(pipeline_rollout("ppnd-pipeline", CAT, "Running", "default"))
        .await;
    h.until("ppnd pipeline deployed", "ppnd-pipeline", pr_settled)
        .await;
    h.apply::<PipelineRollout>(pipeline_rollout(
        "ppnd-pipeline",
        "quay.io/numaio/numaflow-go/map-cat:v2",
        "Running",
        "default",
    ))
    .await;
    let pr = h
        .until("pause-and-drain waiting", "ppnd-pipeline", |pr| {
            let pr = pr_pause_reason(
                pr,
                "PipelinePausing",
                UpgradeStrategy::PipelinePauseAndDrain,
            )?;
            let message = &pr.status.as_ref()?.status.message;
            message.contains("waiting for pipeline").then_some(pr)
        })
        .await;
    fx.add("pipelinerollout-pause-and-drain", &pr);

    // Failed: the ISBServiceRollout it names does not exist.
    h.apply::<PipelineRollout>(pipeline_rollout(
        "broken-pipeline",
        CAT,
        "Running",
        "missing",
    ))
    .await;
    let pr = h
        .until::<PipelineRollout, _, _>("pipeline failed", "broken-pipeline", |pr| {
            let pr = pr?;
            (pr.status.as_ref()?.status.phase == Phase::Failed).then(|| pr.clone())
        })
        .await;
    fx.add("pipelinerollout-failed", &pr);

    // MonoVertexRollout deployed, then paused.
    h.apply::<MonoVertexRollout>(monovertex_rollout("Running"))
        .await;
    let mvr = h
        .until::<MonoVertexRollout, _, _>("monovertex deployed", "my-monovertex", |r| {
            let r = r?;
            settled(r.status.as_ref().map(|s| &s.status), r.meta().generation).then(|| r.clone())
        })
        .await;
    fx.add("monovertexrollout-deployed", &mvr);
    h.apply::<MonoVertexRollout>(monovertex_rollout("Paused"))
        .await;
    let mvr = h
        .until::<MonoVertexRollout, _, _>("monovertex paused", "my-monovertex", |r| {
            let r = r?;
            let st = &r.status.as_ref()?.status;
            (Some(st.observed_generation) == r.meta().generation
                && condition(&st.conditions, "MonoVertexPausingOrPaused")?.0 == "True"
                && condition(&st.conditions, "ChildResourcesHealthy")?.1 == "MonoVertexUnknown")
                .then(|| r.clone())
        })
        .await;
    fx.add("monovertexrollout-paused", &mvr);

    // The Numaflow controller, installed from the fixture definitions.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../config/numaflow-controller-definitions/controller_def_1.8.1.yaml");
    let cm: ConfigMap =
        serde_saphyr::from_str(&std::fs::read_to_string(&path).expect("definitions"))
            .expect("parse definitions");
    let mut cm = serde_json::to_value(cm).expect("json");
    if let Some(meta) = cm["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    h.apply::<ConfigMap>(cm).await;
    h.apply::<NumaflowControllerRollout>(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "NumaflowControllerRollout",
        "metadata": {"name": "numaflow-controller"},
        "spec": {"controller": {"version": "1.8.1"}}
    }))
    .await;
    let ncr = h
        .until::<NumaflowControllerRollout, _, _>(
            "numaflow controller deployed",
            "numaflow-controller",
            |r| {
                let r = r?;
                let st = &r.status.as_ref()?.status;
                (st.phase == Phase::Deployed
                    && Some(st.observed_generation) == r.meta().generation
                    && condition(&st.conditions, "ChildResourcesHealthy")?.0 == "True")
                    .then(|| r.clone())
            },
        )
        .await;
    fx.add("numaflowcontrollerrollout-deployed", &ncr);
    let nc: NumaflowController = h.api().get("numaflow-controller").await.expect("nc");
    fx.add("numaflowcontroller-deployed", &nc);

    fx.finish();
    h.assert_invariants().await;
}
