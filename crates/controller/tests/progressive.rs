//! Progressive upgrades on the real stack (the real Numaflow controller, KWOK pods;
//! CONTRIBUTING.md): a trial child beside the promoted one with the pods split between
//! them, promotion on success, rollback to the saved scale on failure, force promote by label.

mod support;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use numaplane_api::MonoVertexRollout;
use numaplane_api::common::{Phase, UpgradeStrategy};
use numaplane_api::monovertex_rollout::UpgradingMonoVertexStatus;
use numaplane_api::numaflow::MonoVertex;
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{record, versions_where};
use support::{Harness, condition, eventually, samples};

const CONFIG: &str = r#"
defaultUpgradeStrategy: "progressive"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,30,3,1"
    - kind: MonoVertex
      schedule: "0,30,3,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

const GO: &str = "quay.io/numaio/numaflow-go/source-simple-source:stable";
const JAVA: &str = "quay.io/numaio/numaflow-java/source-simple-source:stable";
const BAD: &str = "quay.io/numaio/numaflow-java/source-simple-source:invalid";

fn mvr(image: &str, schedule: Option<&str>) -> Value {
    let mut r = support::scenario::mvr_scaled(image, 4, 5);
    if let Some(s) = schedule {
        r["spec"]["strategy"] = json!({"progressive": {"assessmentSchedule": s}});
    }
    r
}

fn settled(r: Option<&MonoVertexRollout>) -> Option<MonoVertexRollout> {
    let r = r?;
    let st = r.status.as_ref()?;
    (st.status.phase == Phase::Deployed
        && st.status.upgrade_in_progress == UpgradeStrategy::NoOp
        && st.status.observed_generation == r.metadata.generation?
        && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then(|| r.clone())
}

/// The rollout's recorded upgrading MonoVertex.
fn upgrading(r: &MonoVertexRollout) -> Option<&UpgradingMonoVertexStatus> {
    r.status
        .as_ref()?
        .progressive_status
        .as_ref()?
        .upgrading_mono_vertex_status
        .as_ref()
}

/// `mvr` deployed with GO, then given JAVA under `schedule`: returns once trial mvr-1 is
/// initialised.
async fn trial_initialised(h: &Harness, schedule: &str) {
    h.apply::<MonoVertexRollout>(mvr(GO, None)).await;
    h.until("deployed", "mvr", settled).await;
    h.apply::<MonoVertexRollout>(mvr(JAVA, Some(schedule)))
        .await;
    h.until::<MonoVertexRollout, _, _>("trial initialised", "mvr", |r| {
        let up = upgrading(r?)?;
        (up.child.name == "mvr-1" && up.child.initialization_complete).then_some(())
    })
    .await;
}

fn image(mv: &MonoVertex) -> &str {
    mv.spec
        .pointer("/source/udsource/container/image")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn state(mv: &MonoVertex) -> Option<&str> {
    mv.labels()
        .get("numaplane.numaproj.io/upgrade-state")
        .map(String::as_str)
}

async fn pods(h: &Harness, mv: &str) -> usize {
    h.api::<Pod>()
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/name={mv},numaflow.numaproj.io/mono-vertex-name={mv}"
        )))
        .await
        .expect("pods")
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count()
}

#[tokio::test]
async fn monovertex_success_then_failure_and_force_promote() {
    let h = Harness::start_real("prog-mv", CONFIG).await;
    h.apply::<MonoVertexRollout>(mvr(GO, None)).await;
    h.until("deployed", "mvr", settled).await;
    h.until::<MonoVertex, _, _>("4 pods", "mvr-0", |m| {
        (m?.status.as_ref()?["replicas"] == json!(4)).then_some(())
    })
    .await;
    let promoted_seen = record::<MonoVertex>(&h, "mvr-0").await;
    let trial_seen = record::<MonoVertex>(&h, "mvr-1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Success: a trial mvr-1 beside mvr-0, pods split 2/2, then promoted.
    h.apply::<MonoVertexRollout>(mvr(JAVA, None)).await;
    let st = h
        .until::<MonoVertexRollout, _, _>("trial recorded", "mvr", |r| {
            let p = r?.status.as_ref()?.progressive_status.as_ref()?;
            let sv = p
                .promoted_mono_vertex_status
                .as_ref()?
                .scale_values
                .as_ref()?;
            p.upgrading_mono_vertex_status.as_ref()?;
            Some((sv.clone(), p.clone()))
        })
        .await;
    let values = &st.0["mvr-0"];
    assert_eq!(
        values.original_scale_min_max,
        r#"{"disabled":null,"max":5,"min":4}"#
    );
    assert_eq!(values.scale_to, 2);
    assert_eq!(
        st.1.upgrading_mono_vertex_status
            .as_ref()
            .map(|u| u.child.name.as_str()),
        Some("mvr-1")
    );
    let promoted = h.until("deployed on mvr-1", "mvr", settled).await;
    let last = upgrading(&promoted).expect("upgrading status");
    assert_eq!(last.child.name, "mvr-1");
    // The verdict at the end of the healthy period was a due step, taken in the due steps'
    // lane (the worker's own wake comes 100 ms later).
    let lane_passes: f64 = samples(
        &h.metrics.encode(),
        "numaplane_due_step_delay_seconds_count",
    )
    .iter()
    .filter(|(l, _)| {
        l.contains(r#"controller="monovertex-rollout-controller""#) && l.contains(r#"path="lane""#)
    })
    .map(|(_, v)| v)
    .sum();
    assert!(lane_passes >= 1.0, "no pass of the due steps' lane");
    assert_eq!(
        last.child.assessment_result,
        Some(numaplane_api::progressive::AssessmentResult::Success)
    );
    let mv1: MonoVertex = h.api().get("mvr-1").await.expect("mvr-1");
    assert_eq!(state(&mv1), Some("promoted"));
    assert_eq!(image(&mv1), JAVA);
    assert_eq!(
        mv1.spec["scale"],
        json!({"min": 4, "max": 5}),
        "scale restored"
    );
    h.until::<MonoVertex, _, _>("old promoted deleted", "mvr-0", |m| {
        m.is_none().then_some(())
    })
    .await;
    let scaled_down = promoted_seen
        .lock()
        .expect("lock")
        .iter()
        .any(|m| m.spec["scale"]["min"] == json!(2) && m.spec["scale"]["max"] == json!(2));
    assert!(
        scaled_down,
        "promoted scaled to scaleTo=2 while the trial ran"
    );
    let trial_split = trial_seen.lock().expect("lock").iter().any(|m| {
        state(m) == Some("trial")
            && m.spec["scale"]["min"] == json!(2)
            && m.spec["scale"]["max"] == json!(2)
    });
    assert!(
        trial_split,
        "trial ran initial - scaleTo = 2 pods: {:?}",
        trial_seen
            .lock()
            .expect("lock")
            .iter()
            .map(|m| (state(m).map(str::to_string), m.spec["scale"].clone()))
            .collect::<Vec<_>>()
    );
    let cond = condition(
        &promoted.status.as_ref().expect("status").status.conditions,
        "ProgressiveUpgradeSucceeded",
    )
    .expect("condition");
    assert_eq!(cond.0, "True");

    // Failure: a bad image; the trial never becomes healthy before `end`.
    let failed_seen = record::<MonoVertex>(&h, "mvr-2").await;
    h.apply::<MonoVertexRollout>(mvr(BAD, Some("0,6,2,1")))
        .await;
    let failed = h
        .until::<MonoVertexRollout, _, _>("failed assessment", "mvr", |r| {
            let r = r?;
            let st = r.status.as_ref()?;
            let (s, reason, _) = condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")?;
            (s == "False" && reason == "Failed").then(|| r.clone())
        })
        .await;
    let st = failed.status.as_ref().expect("status");
    assert_eq!(st.status.upgrade_in_progress, UpgradeStrategy::Progressive);
    let up = st
        .progressive_status
        .as_ref()
        .and_then(|p| p.upgrading_mono_vertex_status.as_ref())
        .expect("upgrading");
    assert_eq!(up.child.name, "mvr-2");
    assert!(
        !up.child.failure_reasons.is_empty(),
        "failure reasons recorded"
    );
    // The promoted child is back at its saved scale, the trial at zero.
    h.until::<MonoVertex, _, _>("promoted restored", "mvr-1", |m| {
        (m?.spec["scale"] == json!({"min": 4, "max": 5})).then_some(())
    })
    .await;
    h.until::<MonoVertex, _, _>("trial at zero", "mvr-2", |m| {
        let m = m?;
        (m.spec["scale"]["max"] == json!(0)).then_some(())
    })
    .await;
    assert!(failed_seen.lock().expect("lock").iter().any(|m| {
        m.labels()
            .get("numaplane.numaproj.io/progressive-result-state")
            == Some(&"failed".to_string())
            || state(m) == Some("trial")
    }));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        pods(&h, "mvr-1").await,
        4,
        "promoted runs its original pods again"
    );

    // Force promote by label: the failed trial becomes the promoted child.
    h.api::<MonoVertex>()
        .patch(
            "mvr-2",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"numaplane.numaproj.io/force-promote": "true"}}}),
            ),
        )
        .await
        .expect("label");
    h.until::<MonoVertex, _, _>("force promoted", "mvr-2", |m| {
        let m = m?;
        (state(m) == Some("promoted")
            && m.labels()
                .get("numaplane.numaproj.io/progressive-result-state")
                == Some(&"force-promoted".to_string()))
        .then_some(())
    })
    .await;
    h.until::<MonoVertex, _, _>("previous deleted", "mvr-1", |m| m.is_none().then_some(()))
        .await;
    let done = h
        .until::<MonoVertexRollout, _, _>("nothing in progress", "mvr", |r| {
            let st = r?.status.as_ref()?;
            (st.status.upgrade_in_progress == UpgradeStrategy::NoOp).then(|| st.status.clone())
        })
        .await;
    // The history: created, a promoted trial, a failed one force-promoted after all.
    use numaplane_api::common::UpgradeOutcome::{Created, ForcePromoted, Promoted};
    assert_eq!(
        support::scenario::history_outcomes(&done),
        vec![
            ("mvr-0".into(), UpgradeStrategy::DirectApply, Some(Created)),
            ("mvr-1".into(), UpgradeStrategy::Progressive, Some(Promoted)),
            (
                "mvr-2".into(),
                UpgradeStrategy::Progressive,
                Some(ForcePromoted)
            ),
        ]
    );
    let (first, second) = (&done.upgrade_history[1], &done.upgrade_history[2]);
    assert_eq!(first.previous_child, "mvr-0");
    assert_eq!(
        first.changed_fields,
        vec!["spec.monoVertex.spec.source.udsource.container.image"]
    );
    assert_eq!(second.previous_child, "mvr-1");
    assert_eq!(second.reasons.len(), up.child.failure_reasons.len() + 1);
    assert_eq!(
        second.reasons.last().map(String::as_str),
        Some("promoted without assessment: force-promote label on the trial")
    );
    h.assert_invariants().await;
}

/// A trial judged from its own status is woken by its changes and its deadlines, not sampled
/// every `interval` (at N=10,000, a pass per trial per second kept every worker busy and
/// starved some rollouts for minutes).
#[tokio::test]
async fn a_monovertex_trial_is_judged_on_its_changes_not_every_interval() {
    let h = Harness::start_real("prog-quiet", CONFIG).await;
    h.apply::<MonoVertexRollout>(mvr(GO, None)).await;
    h.until("deployed", "mvr", settled).await;
    // A bad trial, sampled every second by its schedule, failing only after a minute.
    h.apply::<MonoVertexRollout>(mvr(BAD, Some("0,60,2,1")))
        .await;
    h.until::<MonoVertexRollout, _, _>("trial judged unhealthy", "mvr", |r| {
        let up = upgrading(r?)?;
        (up.child.name == "mvr-1" && !up.child.failure_reasons.is_empty()).then_some(())
    })
    .await;
    let passes = || -> f64 {
        samples(
            &h.metrics.encode(),
            "numaplane_reconcile_duration_seconds_count",
        )
        .iter()
        .filter(|(l, _)| l.contains(r#"controller="monovertex-rollout-controller""#))
        .map(|(_, v)| v)
        .sum()
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = passes();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let during = passes() - before;
    // Ten samples if it were sampled every second; a few passes for the child's own changes.
    assert!(
        during <= 4.0,
        "{during} passes in 10 s of a trial that did not change"
    );
    let r: MonoVertexRollout = h.api().get("mvr").await.expect("mvr");
    let up = upgrading(&r).expect("upgrading");
    assert_eq!(
        (up.child.name.as_str(), up.child.assessment_result),
        (
            "mvr-1",
            Some(numaplane_api::progressive::AssessmentResult::Unknown)
        ),
        "still being assessed"
    );
    h.assert_invariants().await;
}

// ---- Pipelines ----

const CAT: &str = "quay.io/numaio/numaflow-go/map-cat:stable";
const CAT2: &str = "quay.io/numaio/numaflow-go/map-cat:v1";
const BADCAT: &str = "quay.io/numaio/numaflow-go/map-cat:badpath1";

fn pr(cat: &str, strategy: Value) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {
            "pipeline": {"spec": {
                "interStepBufferServiceName": "default",
                "lifecycle": {"pauseGracePeriodSeconds": 10},
                "vertices": [
                    {"name": "in", "scale": {"min": 2, "max": 3},
                     "source": {"generator": {"rpu": 5}}},
                    {"name": "cat", "scale": {"min": 4, "max": 5},
                     "udf": {"container": {"image": cat}}},
                    {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
                ],
                "edges": [{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}]
            }},
            "strategy": strategy
        }
    })
}

fn pr_settled(
    r: Option<&numaplane_api::PipelineRollout>,
) -> Option<numaplane_api::PipelineRollout> {
    let r = r?;
    let st = r.status.as_ref()?;
    (st.status.phase == Phase::Deployed
        && st.status.upgrade_in_progress == UpgradeStrategy::NoOp
        && st.status.observed_generation == r.metadata.generation?
        && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then(|| r.clone())
}

fn cat_image(p: &numaplane_api::numaflow::Pipeline) -> &str {
    p.spec["vertices"][1]["udf"]["container"]["image"]
        .as_str()
        .unwrap_or_default()
}

fn pl_state(p: &numaplane_api::numaflow::Pipeline) -> Option<&str> {
    p.labels()
        .get("numaplane.numaproj.io/upgrade-state")
        .map(String::as_str)
}

/// Applies the ISBServiceRollout `default` with JetStream `version`.
async fn apply_isb(h: &Harness, version: &str) {
    h.apply::<numaplane_api::ISBServiceRollout>(support::fixtures::isb_rollout(
        "default",
        json!({ "version": version }),
    ))
    .await;
}

async fn pipeline_setup(prefix: &str) -> Harness {
    let h = Harness::start_real(prefix, CONFIG).await;
    apply_isb(&h, "2.10.17").await;
    h.apply::<numaplane_api::PipelineRollout>(pr(CAT, json!({})))
        .await;
    h.until("pr deployed", "pr", pr_settled).await;
    h
}

#[tokio::test]
async fn pipeline_success_drains_the_old_promoted() {
    use numaplane_api::numaflow::Pipeline;
    let h = pipeline_setup("prog-pl").await;
    let old_seen = record::<Pipeline>(&h, "pr-0").await;
    let trial_seen = record::<Pipeline>(&h, "pr-1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.apply::<numaplane_api::PipelineRollout>(pr(CAT2, json!({})))
        .await;
    let r = h
        .until::<numaplane_api::PipelineRollout, _, _>("promoted pr-1", "pr", |r| {
            let r = pr_settled(r)?;
            let up = support::scenario::upgrading_pipeline(&r)?;
            (up.child.name == "pr-1"
                && up.child.assessment_result
                    == Some(numaplane_api::progressive::AssessmentResult::Success))
            .then_some(r)
        })
        .await;
    let p = r
        .status
        .as_ref()
        .and_then(|s| s.progressive_status.as_ref())
        .expect("progressive status");
    let hist = p
        .historical_pod_count
        .clone()
        .expect("historical pod count");
    assert_eq!(hist.get("cat"), Some(&4), "{hist:?}");
    let values = p
        .promoted_pipeline_status
        .as_ref()
        .and_then(|s| s.scale_values.clone());
    // Trial ran initial - scaleTo per vertex (cat: 4 - 2 = 2), the promoted child scaleTo.
    let trial_versions = trial_seen.lock().expect("lock").clone();
    assert!(
        trial_versions.iter().any(|t| pl_state(t) == Some("trial")
            && t.spec["vertices"][1]["scale"]["min"] == json!(2)
            && t.spec["vertices"][1]["scale"]["max"] == json!(2)),
        "trial split: {:?}",
        trial_versions
            .iter()
            .map(|t| t.spec["vertices"][1]["scale"].clone())
            .collect::<Vec<_>>()
    );
    let old_versions = old_seen.lock().expect("lock").clone();
    assert!(
        old_versions
            .iter()
            .any(|o| o.spec["vertices"][1]["scale"]["max"] == json!(2)),
        "promoted scaled to scaleTo while the trial ran (scale values {values:?})"
    );
    // The old promoted pipeline drained with its own spec, then was deleted.
    h.until::<Pipeline, _, _>("pr-0 deleted", "pr-0", |p| p.is_none().then_some(()))
        .await;
    assert!(
        old_versions
            .iter()
            .any(|o| pl_state(o) == Some("recyclable")
                && o.labels().get("numaplane.numaproj.io/upgrade-state-reason")
                    == Some(&"progressive-success".to_string())),
        "the old promoted pipeline became recyclable (progressive-success)"
    );
    let reasons = support::fixtures::event_reasons(&h, "Pipeline").await;
    assert!(
        reasons.contains(&"StandardDrain".to_string())
            || reasons.contains(&"DrainNotRequired".to_string()),
        "{reasons:?}"
    );
    let p1: Pipeline = h.api().get("pr-1").await.expect("pr-1");
    assert_eq!(pl_state(&p1), Some("promoted"));
    assert_eq!(cat_image(&p1), CAT2);
    assert_eq!(
        p1.spec["vertices"][1]["scale"],
        json!({"min": 4, "max": 5}),
        "the rollout's scale is back on the promoted pipeline"
    );
    // The trial's health samples read its Vertices from the operator's Vertex cache: it holds
    // every Vertex the real Numaflow controller made for pr-1, with the replica counts it wrote.
    let op = h.operator.as_ref().expect("operator running");
    for v in ["in", "cat", "out"] {
        let name = format!("pr-1-{v}");
        let cached = op
            .ctx
            .stores
            .vertices
            .get(&h.ns, &name)
            .unwrap_or_else(|| panic!("{name} not in the Vertex cache"));
        assert_eq!(cached.pipeline, "pr-1", "{name}");
        let live: numaplane_api::numaflow::Vertex = h.api().get(&name).await.expect("vertex");
        let count = |k: &str| live.status.as_ref().and_then(|s| s.get(k)?.as_i64());
        assert!(
            count("desiredReplicas").is_some(),
            "{name}: {:?}",
            live.status
        );
        eventually(&format!("{name} cached as it is"), || async {
            let c = op.ctx.stores.vertices.get(&h.ns, &name)?;
            let live: numaplane_api::numaflow::Vertex = h.api().get(&name).await.ok()?;
            let count = |k: &str| live.status.as_ref().and_then(|s| s.get(k)?.as_i64());
            (c.ready == count("readyReplicas") && c.desired == count("desiredReplicas"))
                .then_some(())
        })
        .await;
    }
    h.assert_invariants().await;
}

#[tokio::test]
async fn pipeline_failure_then_fix_force_drains_the_failed_trial() {
    use numaplane_api::numaflow::Pipeline;
    let h = pipeline_setup("prog-plfail").await;
    let failed_seen = record::<Pipeline>(&h, "pr-1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fast = json!({"progressive": {"assessmentSchedule": "0,6,2,1"}});
    h.apply::<numaplane_api::PipelineRollout>(pr(BADCAT, fast.clone()))
        .await;
    h.until::<numaplane_api::PipelineRollout, _, _>("failed", "pr", |r| {
        let st = r?.status.as_ref()?;
        let (s, reason, _) = condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")?;
        (s == "False" && reason == "Failed").then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("promoted restored", "pr-0", |p| {
        (p?.spec["vertices"][1]["scale"] == json!({"min": 4, "max": 5})).then_some(())
    })
    .await;
    // A fixed spec: the failed trial is replaced and a new trial succeeds; the failed one is
    // force-drained with the new promoted spec and deleted.
    h.apply::<numaplane_api::PipelineRollout>(pr(CAT2, fast))
        .await;
    h.until::<Pipeline, _, _>("pr-2 promoted", "pr-2", |p| {
        (pl_state(p?) == Some("promoted")).then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("failed trial deleted", "pr-1", |p| {
        p.is_none().then_some(())
    })
    .await;
    let versions = failed_seen.lock().expect("lock").clone();
    assert!(
        versions.iter().any(|p| pl_state(p) == Some("recyclable")
            && p.labels().get("numaplane.numaproj.io/upgrade-state-reason")
                == Some(&"progressive-replaced-failed".to_string())),
        "the failed trial was replaced"
    );
    assert!(
        versions.iter().any(|p| cat_image(p) == CAT2
            && p.spec.pointer("/lifecycle/desiredPhase") == Some(&json!("Paused"))),
        "force-drained with the promoted spec"
    );
    let reasons = support::fixtures::event_reasons(&h, "Pipeline").await;
    assert!(reasons.contains(&"ForceDrain".to_string()), "{reasons:?}");
    h.until("settled on pr-2", "pr", pr_settled).await;
    h.assert_invariants().await;
}

/// `kubectl numaplane abort` (label `numaplane.numaproj.io/abort` on the trial): a healthy trial
/// under a long assessment fails at once, is scaled to zero while the promoted pipeline gets its
/// scale back, and the rollout stays on the promoted child; the next spec change replaces the
/// aborted trial, which is drained before it is deleted.
/// A trial Numaflow refuses (an edge to a vertex the spec lacks: phase Failed, no Vertex
/// objects) is unhealthy by its own status, so its health samples read no vertices: with its
/// Vertex objects missing from the cache, every one-second sample used to LIST them live.
#[tokio::test]
async fn a_trial_failed_by_its_own_status_is_sampled_without_listing_vertices() {
    use numaplane_api::numaflow::Pipeline;
    let h = pipeline_setup("prog-novtx").await;
    let vertex_lists = || -> f64 {
        samples(&h.metrics.encode(), "numaplane_kube_requests_total")
            .iter()
            .filter(|(l, _)| l.contains(r#"verb="LIST""#) && l.contains(r#"resource="vertices""#))
            .map(|(_, v)| v)
            .sum()
    };
    let before = vertex_lists();
    let mut refused = pr(
        CAT2,
        json!({"progressive": {"assessmentSchedule": "0,10,2,1"}}),
    );
    refused["spec"]["pipeline"]["spec"]["edges"][1]["to"] = json!("nowhere");
    h.apply::<numaplane_api::PipelineRollout>(refused).await;
    let reasons = h
        .until::<numaplane_api::PipelineRollout, _, _>("failed", "pr", |r| {
            let st = r?.status.as_ref()?;
            let (s, reason, _) = condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")?;
            (s == "False" && reason == "Failed").then_some(())?;
            let up = st
                .progressive_status
                .as_ref()?
                .upgrading_pipeline_status
                .as_ref()?;
            Some(up.child.failure_reasons.clone())
        })
        .await;
    assert!(
        reasons.iter().any(|r| r.contains("Failed")),
        "failed by its own status: {reasons:?}"
    );
    let trial: Pipeline = h.api().get("pr-1").await.expect("pr-1");
    assert_eq!(
        trial.status.as_ref().and_then(|s| s.get("phase")),
        Some(&json!("Failed")),
        "Numaflow refused the trial"
    );
    // At most the samples before Numaflow wrote the trial's status (about ten samples in all).
    let lists = vertex_lists() - before;
    assert!(
        lists <= 2.0,
        "{lists} vertex LISTs while the trial was sampled"
    );
    h.assert_invariants().await;
}

#[tokio::test]
async fn pipeline_abort_fails_the_trial_now_and_a_new_spec_recycles_it() {
    use numaplane_api::numaflow::Pipeline;
    use numaplane_api::progressive::AssessmentResult;
    let h = pipeline_setup("prog-abort").await;
    let aborted_seen = record::<Pipeline>(&h, "pr-1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // An assessment that would run for ten minutes.
    let long = json!({"progressive": {"assessmentSchedule": "0,600,2,1"}});
    h.apply::<numaplane_api::PipelineRollout>(pr(CAT2, long))
        .await;
    h.until::<Pipeline, _, _>("trial pr-1 running", "pr-1", |p| {
        let p = p?;
        (pl_state(p) == Some("trial") && p.status.as_ref()?["phase"] == "Running").then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("promoted scaled down", "pr-0", |p| {
        (p?.spec["vertices"][1]["scale"]["max"] == json!(2)).then_some(())
    })
    .await;
    let pipelines = h.api::<Pipeline>();
    pipelines
        .patch(
            "pr-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "numaplane.numaproj.io/abort": "true"}}})),
        )
        .await
        .expect("label the trial");
    let r = h
        .until::<numaplane_api::PipelineRollout, _, _>("aborted", "pr", |r| {
            let r = r?;
            let st = r.status.as_ref()?;
            let (s, reason, _) = condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")?;
            (s == "False" && reason == "Failed").then(|| r.clone())
        })
        .await;
    let up = support::scenario::upgrading_pipeline(&r).expect("upgrading status");
    assert_eq!(up.child.name, "pr-1");
    assert_eq!(up.child.assessment_result, Some(AssessmentResult::Failure));
    assert_eq!(
        up.child.failure_reasons,
        vec![numaplane_core::progressive::step::ABORTED.to_string()]
    );
    // Well before its assessment could have ended: the abort decided, not the schedule.
    let started = up.child.basic_assessment_start_time.as_ref().map(|t| t.0);
    let now = k8s_openapi::jiff::Timestamp::now();
    assert!(
        started.is_none_or(|s| now.duration_since(s).as_secs() < 300),
        "{started:?}"
    );
    // A Warning Event says so, once.
    eventually("a ProgressiveUpgradeFailed Event", || async {
        let failed: Vec<_> = h
            .events_about("pr")
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("ProgressiveUpgradeFailed"))
            .collect();
        let aborted = failed.iter().any(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("trial pr-1 failed (aborted by the user"))
        });
        (aborted && failed.len() == 1).then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("promoted restored", "pr-0", |p| {
        (p?.spec["vertices"][1]["scale"] == json!({"min": 4, "max": 5})).then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("aborted trial scaled to zero", "pr-1", |p| {
        let v = &p?.spec["vertices"][1]["scale"];
        (v["min"] == json!(0) && v["max"] == json!(0)).then_some(())
    })
    .await;
    // It stays so: the rollout keeps its promoted child while the spec is unchanged.
    h.stays::<Pipeline, _>("pr-0 stays promoted", "pr-0", Duration::from_secs(5), |p| {
        p.is_some_and(|p| pl_state(p) == Some("promoted"))
    })
    .await;

    // A new spec replaces the aborted trial; it is drained (force-drained with the new promoted
    // spec if it cannot drain itself) and deleted, and the new trial is promoted.
    let mut fixed = pr(
        CAT2,
        json!({"progressive": {"assessmentSchedule": "0,6,2,1"}}),
    );
    fixed["spec"]["pipeline"]["spec"]["vertices"][0]["source"]["generator"]["rpu"] = json!(6);
    h.apply::<numaplane_api::PipelineRollout>(fixed).await;
    h.until::<Pipeline, _, _>("pr-2 promoted", "pr-2", |p| {
        (pl_state(p?) == Some("promoted")).then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("aborted trial deleted", "pr-1", |p| {
        p.is_none().then_some(())
    })
    .await;
    let versions = aborted_seen.lock().expect("lock").clone();
    assert!(
        versions.iter().any(|p| pl_state(p) == Some("recyclable")
            && p.labels().get("numaplane.numaproj.io/upgrade-state-reason")
                == Some(&"progressive-replaced-failed".to_string())),
        "the aborted trial was replaced as a failed one"
    );
    assert!(
        versions
            .iter()
            .any(|p| p.spec.pointer("/lifecycle/desiredPhase") == Some(&json!("Paused"))),
        "the aborted trial was paused (drained) before its deletion"
    );
    let settled = h.until("settled on pr-2", "pr", pr_settled).await;
    // The history: the aborted trial failed with the abort as its reason, the next one promoted.
    use numaplane_api::common::UpgradeOutcome::{Created, Failed, Promoted};
    let st = &settled.status.as_ref().expect("status").status;
    assert_eq!(
        support::scenario::history_outcomes(st),
        vec![
            ("pr-0".into(), UpgradeStrategy::DirectApply, Some(Created)),
            ("pr-1".into(), UpgradeStrategy::Progressive, Some(Failed)),
            ("pr-2".into(), UpgradeStrategy::Progressive, Some(Promoted)),
        ]
    );
    let aborted = &st.upgrade_history[1];
    assert_eq!(
        aborted.reasons,
        vec![numaplane_core::progressive::step::ABORTED.to_string()]
    );
    assert_eq!(
        aborted.changed_fields,
        vec!["spec.pipeline.spec.vertices[1].udf.container.image"]
    );
    assert!(
        st.upgrade_history[2]
            .changed_fields
            .contains(&"spec.pipeline.spec.vertices[0].source.generator.rpu".to_string()),
        "{:?}",
        st.upgrade_history[2]
    );
    h.assert_invariants().await;
}

/// `kubectl numaplane retry` (label `numaplane.numaproj.io/retry` on a failed trial): the
/// aborted trial is replaced, without a spec edit, by a new trial of the same spec, and the
/// replaced one is drained and deleted like any failed trial.
#[tokio::test]
async fn a_retried_trial_is_replaced_by_a_new_trial_of_the_same_spec() {
    use numaplane_api::numaflow::Pipeline;
    let h = pipeline_setup("prog-retry").await;
    // An image that never pulls: unhealthy, but undecided until the assessment's end.
    let long = json!({"progressive": {"assessmentSchedule": "0,600,2,1"}});
    h.apply::<numaplane_api::PipelineRollout>(pr(BADCAT, long))
        .await;
    h.until::<Pipeline, _, _>("trial pr-1 created", "pr-1", |p| {
        (pl_state(p?) == Some("trial")).then_some(())
    })
    .await;
    let label = |key: &str| Patch::Merge(json!({"metadata": {"labels": {key: "true"}}}));
    let pipelines = h.api::<Pipeline>();
    // Not failed yet: a retry label changes nothing.
    pipelines
        .patch(
            "pr-1",
            &PatchParams::default(),
            &label("numaplane.numaproj.io/retry"),
        )
        .await
        .expect("label the trial");
    h.stays::<Pipeline, _>(
        "a trial not yet failed is not retried",
        "pr-1",
        Duration::from_secs(4),
        |p| p.is_some_and(|p| pl_state(p) == Some("trial")),
    )
    .await;
    pipelines
        .patch(
            "pr-1",
            &PatchParams::default(),
            &label("numaplane.numaproj.io/abort"),
        )
        .await
        .expect("abort the trial");
    // Failed, and labelled retry already: replaced by pr-2 with the same spec.
    h.until::<Pipeline, _, _>("a new trial pr-2", "pr-2", |p| {
        (pl_state(p?) == Some("trial")).then_some(())
    })
    .await;
    let second = pipelines.get("pr-2").await.expect("pr-2");
    assert_eq!(
        second.spec["vertices"][1]["udf"]["container"]["image"],
        json!(BADCAT),
        "the same spec is tried again"
    );
    // Replaced as a failed trial: recyclable, drained (or force-drained once a new promoted
    // spec exists) before it goes.
    h.until::<Pipeline, _, _>("the failed trial recyclable", "pr-1", |p| {
        let p = p?;
        (pl_state(p) == Some("recyclable")
            && p.labels().get("numaplane.numaproj.io/upgrade-state-reason")
                == Some(&"progressive-replaced-failed".to_string()))
        .then_some(())
    })
    .await;
    h.until::<numaplane_api::PipelineRollout, _, _>("assessing pr-2", "pr", |r| {
        let up = support::scenario::upgrading_pipeline(r?)?;
        (up.child.name == "pr-2").then_some(())
    })
    .await;
    h.assert_invariants().await;
}

#[tokio::test]
async fn monovertex_restart_mid_trial_continues_the_same_upgrade() {
    let mut h = Harness::start_real("prog-restart", CONFIG).await;
    trial_initialised(&h, "0,60,6,1").await;
    // Down mid-assessment, then a fresh controller with nothing in memory.
    h.stop_operator().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    h.restart_operator().await;
    let r = h.until("promoted after the restart", "mvr", settled).await;
    let mv1: MonoVertex = h.api().get("mvr-1").await.expect("mvr-1");
    assert_eq!(state(&mv1), Some("promoted"));
    assert_eq!(mv1.spec["scale"], json!({"min": 4, "max": 5}));
    let all = h
        .api::<MonoVertex>()
        .list(&ListParams::default())
        .await
        .expect("list");
    assert!(
        all.items.iter().all(|m| m.name_any() != "mvr-2"),
        "no second trial after the restart"
    );
    assert_eq!(r.status.as_ref().and_then(|s| s.name_count), Some(2));
    h.assert_invariants().await;
}

/// A promotion's label flip goes out before its record (it is its own record): a controller
/// stopped right after the flip must read it back, retire the old child and record the success,
/// not leave two children promoted.
#[tokio::test]
async fn monovertex_promotion_flipped_before_its_record_is_finished_after_a_restart() {
    let mut h = Harness::start_real("prog-flipped", CONFIG).await;
    // An assessment far longer than the test: only the flip can end it.
    trial_initialised(&h, "0,600,300,1").await;
    h.stop_operator().await;
    // What the promotion's first write does, and nothing after it.
    h.api::<MonoVertex>()
        .patch(
            "mvr-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "numaplane.numaproj.io/upgrade-state": "promoted",
                "numaplane.numaproj.io/upgrade-state-reason": "progressive-success",
                "numaplane.numaproj.io/progressive-result-state": "succeeded",
            }}})),
        )
        .await
        .expect("flip mvr-1");
    h.restart_operator().await;
    let r = h.until("promotion finished", "mvr", settled).await;
    let up = upgrading(&r).expect("upgrading status");
    assert_eq!(up.child.name, "mvr-1");
    assert_eq!(
        up.child.assessment_result,
        Some(numaplane_api::progressive::AssessmentResult::Success)
    );
    h.until::<MonoVertex, _, _>("old child retired", "mvr-0", |m| {
        m.is_none_or(|m| state(m) != Some("promoted")).then_some(())
    })
    .await;
    let mv1: MonoVertex = h.api().get("mvr-1").await.expect("mvr-1");
    assert_eq!(state(&mv1), Some("promoted"));
    assert_eq!(mv1.spec["scale"], json!({"min": 4, "max": 5}));
    h.assert_invariants().await;
}

/// A step's record is written before the step acts, and shows what the pass reports about it:
/// the change seen, the step under way, the child's health. A user reading the rollout never
/// sees a new record beside the last step's message, and the report after acting has nothing
/// left to write (one status write per step, not two).
#[tokio::test]
async fn a_step_record_shows_the_step_it_records() {
    let h = Harness::start_real("prog-shown", CONFIG).await;
    h.apply::<MonoVertexRollout>(mvr(GO, None)).await;
    h.until("deployed", "mvr", settled).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let patches = |t: &str, resource: &str, code: &str| -> f64 {
        samples(t, "numaplane_kube_requests_total")
            .iter()
            .filter(|(l, _)| {
                l.contains(r#"verb="PATCH""#)
                    && l.contains(&format!(r#"resource="{resource}""#))
                    && l.contains(&format!(r#"code="{code}""#))
            })
            .map(|(_, v)| v)
            .sum()
    };
    let status_patches = |t: &str| patches(t, "monovertexrollouts/status", "200");
    let child_patches = |t: &str| patches(t, "monovertices", "200");
    let patched_before = status_patches(&h.metrics.encode());
    let child_patched_before = child_patches(&h.metrics.encode());
    let versions = record::<MonoVertexRollout>(&h, "mvr").await;
    h.apply::<MonoVertexRollout>(mvr(JAVA, None)).await;
    h.until("deployed on mvr-1", "mvr", |r| {
        settled(r).filter(|r| upgrading(r).is_some_and(|u| u.child.name == "mvr-1"))
    })
    .await;
    // Every status write changed the status: none repeated what the record before it wrote.
    let counts = || {
        let patched = status_patches(&h.metrics.encode()) - patched_before;
        let changed = versions_where(&versions, |a, b| a.status != b.status) as f64;
        (patched, changed)
    };
    for _ in 0..50 {
        let (patched, changed) = counts();
        if patched == changed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (patched, changed) = counts();
    assert_eq!(patched, changed, "status writes, status changes seen");
    // The MonoVertices: the trial created (201), then four changes: the promoted one scaled
    // down, the trial labelled promoted, the old one labelled recyclable, the new one's scale
    // restored. The pass the trial's record wakes, before the watch shows the trial, reads it
    // live rather than apply it again.
    assert_eq!(
        child_patches(&h.metrics.encode()) - child_patched_before,
        4.0,
        "MonoVertex patches"
    );
    let seen = versions.lock().expect("lock").clone();
    let generation = seen.last().and_then(|r| r.metadata.generation);
    let status = |r: &MonoVertexRollout| r.status.clone().expect("status");
    // The first step records the promoted child's scale.
    let saved = seen
        .iter()
        .find(|r| {
            r.status
                .as_ref()
                .and_then(|s| s.progressive_status.as_ref())
                .and_then(|p| p.promoted_mono_vertex_status.as_ref())
                .is_some_and(|p| p.scale_values.is_some())
        })
        .map(status)
        .expect("the promoted child's scale recorded");
    assert_eq!(Some(saved.status.observed_generation), generation);
    assert_eq!(saved.status.phase, Phase::Pending);
    assert!(
        saved.status.message.contains("saving the scale of mvr-0"),
        "{:?}",
        saved.status.message
    );
    // The next records the trial's name before it is created.
    let named = seen
        .iter()
        .find(|r| upgrading(r).is_some_and(|u| u.child.name == "mvr-1"))
        .map(status)
        .expect("trial mvr-1 recorded");
    assert_eq!(named.status.phase, Phase::Pending);
    assert!(
        named.status.message.contains("creating trial mvr-1"),
        "{:?}",
        named.status.message
    );
    h.assert_invariants().await;
}

#[tokio::test]
async fn monovertex_discontinue_then_force_promote_by_strategy() {
    let h = Harness::start_real("prog-disc", CONFIG).await;
    h.apply::<MonoVertexRollout>(mvr(GO, None)).await;
    h.until("deployed", "mvr", settled).await;
    // A bad trial that keeps being assessed, then the spec goes back: discontinued.
    h.apply::<MonoVertexRollout>(mvr(BAD, Some("0,120,2,1")))
        .await;
    h.until::<MonoVertex, _, _>("trial", "mvr-1", |m| {
        (state(m?) == Some("trial")).then_some(())
    })
    .await;
    h.until::<MonoVertex, _, _>("promoted scaled down", "mvr-0", |m| {
        (m?.spec["scale"]["max"] == json!(2)).then_some(())
    })
    .await;
    h.apply::<MonoVertexRollout>(mvr(GO, Some("0,120,2,1")))
        .await;
    h.until::<MonoVertex, _, _>("trial gone", "mvr-1", |m| m.is_none().then_some(()))
        .await;
    h.until::<MonoVertex, _, _>("promoted back at its scale", "mvr-0", |m| {
        (m?.spec["scale"] == json!({"min": 4, "max": 5})).then_some(())
    })
    .await;
    let r = h.until("settled", "mvr", settled).await;
    let (s, reason, _) = condition(
        &r.status.as_ref().expect("status").status.conditions,
        "ProgressiveUpgradeSucceeded",
    )
    .expect("condition");
    assert_eq!((s.as_str(), reason.as_str()), ("True", "Discontinued"));

    // strategy.progressive.forcePromote: the trial is promoted without assessment.
    let mut forced = mvr(BAD, None);
    forced["spec"]["strategy"] = json!({"progressive": {"forcePromote": true}});
    h.apply::<MonoVertexRollout>(forced).await;
    h.until::<MonoVertex, _, _>("force promoted by strategy", "mvr-2", |m| {
        (state(m?) == Some("promoted")).then_some(())
    })
    .await;
    h.until::<MonoVertex, _, _>("previous deleted", "mvr-0", |m| m.is_none().then_some(()))
        .await;
    let r = h
        .until::<MonoVertexRollout, _, _>("nothing in progress", "mvr", |r| {
            let r = r?;
            (r.status.as_ref()?.status.upgrade_in_progress == UpgradeStrategy::NoOp)
                .then(|| r.clone())
        })
        .await;
    let up = upgrading(&r).expect("upgrading");
    assert!(up.child.forced_success, "{up:?}");
    h.assert_invariants().await;
}

#[tokio::test]
async fn isb_service_upgrade_carries_its_pipelines_along() {
    use numaplane_api::ISBServiceRollout;
    use numaplane_api::numaflow::{InterStepBufferService, Pipeline};
    let h = pipeline_setup("prog-isb").await;
    // A version change is a progressive change: a trial ISB service, and the pipeline follows
    // onto it with a trial of its own.
    apply_isb(&h, "2.10.11").await;
    h.until::<InterStepBufferService, _, _>("trial isbsvc", "default-1", |i| {
        (i?.spec["jetstream"]["version"] == json!("2.10.11")).then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("pipeline on the new isbsvc promoted", "pr-1", |p| {
        let p = p?;
        (pl_state(p) == Some("promoted") && p.spec["interStepBufferServiceName"] == "default-1")
            .then_some(())
    })
    .await;
    let r = h
        .until::<ISBServiceRollout, _, _>("isb promoted", "default", |r| {
            let r = r?;
            let st = r.status.as_ref()?;
            let up = st
                .progressive_status
                .as_ref()?
                .upgrading_isb_service_status
                .as_ref()?;
            (st.status.upgrade_in_progress == UpgradeStrategy::NoOp
                && up.name == "default-1"
                && up.assessment_result
                    == Some(numaplane_api::progressive::AssessmentResult::Success))
            .then(|| r.clone())
        })
        .await;
    assert!(r.status.is_some());
    let isb: InterStepBufferService = h.api().get("default-1").await.expect("default-1");
    assert_eq!(
        isb.labels()
            .get("numaplane.numaproj.io/upgrade-state")
            .map(String::as_str),
        Some("promoted")
    );
    // The old pipeline drains and goes, then the old ISB service nobody uses any more.
    h.until::<Pipeline, _, _>("old pipeline deleted", "pr-0", |p| {
        p.is_none().then_some(())
    })
    .await;
    h.until::<InterStepBufferService, _, _>("old isbsvc deleted", "default-0", |i| {
        i.is_none().then_some(())
    })
    .await;
    h.until("pr settled", "pr", pr_settled).await;
    h.assert_invariants().await;
}

/// Progressive ISB service failure (docs/strategies.md): the trial ISB service is judged by the
/// pipelines moved onto it; when they fail the ISB upgrade fails with them and both promoted
/// children keep running; reverting the spec discontinues it and the trials go.
#[tokio::test]
async fn isb_service_upgrade_fails_with_its_pipelines_and_is_discontinued_on_revert() {
    use numaplane_api::ISBServiceRollout;
    use numaplane_api::numaflow::{InterStepBufferService, Pipeline};
    use numaplane_api::progressive::AssessmentResult;
    let h = pipeline_setup("prog-isb-fail").await;
    // A version Numaflow doesn't know: the trial ISB service fails, and so do pipelines on it.
    apply_isb(&h, "0.0.0").await;
    h.until::<Pipeline, _, _>("a trial pipeline on the trial isbsvc", "pr-1", |p| {
        let p = p?;
        (pl_state(p) == Some("trial") && p.spec["interStepBufferServiceName"] == "default-1")
            .then_some(())
    })
    .await;
    let up = h
        .until::<ISBServiceRollout, _, _>("isb upgrade failed", "default", |r| {
            let up = r?
                .status
                .as_ref()?
                .progressive_status
                .as_ref()?
                .upgrading_isb_service_status
                .clone()?;
            (up.name == "default-1" && up.assessment_result == Some(AssessmentResult::Failure))
                .then_some(up)
        })
        .await;
    assert_eq!(up.failure_reasons, ["Pipeline pr-1 failed"]);
    // Nothing running was touched: the promoted ISB service and pipeline stay promoted.
    let isb0: InterStepBufferService = h.api().get("default-0").await.expect("default-0");
    assert_eq!(
        isb0.labels()
            .get("numaplane.numaproj.io/upgrade-state")
            .map(String::as_str),
        Some("promoted")
    );
    let pr0: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    assert_eq!(pl_state(&pr0), Some("promoted"));
    assert_eq!(pr0.spec["interStepBufferServiceName"], "default-0");
    assert_eq!(
        pr0.status.as_ref().map(|s| &s["phase"]),
        Some(&json!("Running"))
    );

    // Revert: the upgrade is discontinued and both trials become recyclable. The failed pipeline
    // cannot pause (Numaflow never pauses a Failed pipeline), so, as in the reference, it waits
    // for maxRecyclableDurationMinutes and keeps its ISB service alive meanwhile.
    apply_isb(&h, "2.10.17").await;
    let recyclable = |labels: &std::collections::BTreeMap<String, String>| {
        labels
            .get("numaplane.numaproj.io/upgrade-state")
            .is_some_and(|s| s == "recyclable")
            && labels
                .get("numaplane.numaproj.io/upgrade-state-reason")
                .is_some_and(|s| s == "discontinue-progressive")
    };
    h.until::<Pipeline, _, _>("trial pipeline recyclable", "pr-1", |p| {
        recyclable(p?.labels()).then_some(())
    })
    .await;
    h.until::<InterStepBufferService, _, _>("trial isbsvc recyclable", "default-1", |i| {
        recyclable(i?.labels()).then_some(())
    })
    .await;
    h.until("pr settled", "pr", pr_settled).await;
    let pr0: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    assert_eq!(pl_state(&pr0), Some("promoted"));
    h.until::<ISBServiceRollout, _, _>("isb rollout settled", "default", |r| {
        let r = r?;
        let st = r.status.as_ref()?;
        (st.status.upgrade_in_progress == UpgradeStrategy::NoOp
            && st.status.phase == Phase::Deployed
            && st.status.observed_generation == r.metadata.generation?)
            .then_some(())
    })
    .await;
    h.assert_invariants().await;
}

const CONFIG_WITH_HPA: &str = r#"
defaultUpgradeStrategy: "progressive"
permittedRiders: "group=autoscaling,kind=HorizontalPodAutoscaler;group=,kind=ConfigMap"
progressive:
  defaultAssessmentSchedule:
    - kind: MonoVertex
      schedule: "0,30,3,1"
"#;

fn with_riders(mut r: Value) -> Value {
    r["spec"]["riders"] = json!([
        {"definition": {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "hpa"},
            "spec": {
                "minReplicas": 4, "maxReplicas": 5,
                "scaleTargetRef": {"apiVersion": "numaflow.numaproj.io/v1alpha1",
                                   "kind": "MonoVertex", "name": "{{.monovertex-name}}"}
            }
        }},
        {"definition": {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
            "data": {"owner": "{{.monovertex-name}}"}
        }}
    ]);
    r
}

/// The promoted MonoVertex's HPA is removed while a trial runs (and saved), the
/// trial gets its riders but no HPA, the HPA comes back on failure, and follows the new
/// promoted child on success.
#[tokio::test]
async fn monovertex_hpa_rider_handling() {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    use k8s_openapi::api::core::v1::ConfigMap;
    let h = Harness::start_real("prog-hpa", CONFIG_WITH_HPA).await;
    h.apply::<MonoVertexRollout>(with_riders(mvr(GO, None)))
        .await;
    h.until("deployed", "mvr", settled).await;
    h.until::<HorizontalPodAutoscaler, _, _>("hpa of mvr-0", "hpa-mvr-0", |x| x.map(|_| ()))
        .await;

    // Failure: the HPA is removed during the trial, saved, and re-created on failure.
    h.apply::<MonoVertexRollout>(with_riders(mvr(BAD, Some("0,6,2,1"))))
        .await;
    h.until::<HorizontalPodAutoscaler, _, _>("promoted HPA removed", "hpa-mvr-0", |x| {
        x.is_none().then_some(())
    })
    .await;
    let saved = h
        .until::<MonoVertexRollout, _, _>("HPA saved", "mvr", |r| {
            let sv = r?
                .status
                .as_ref()?
                .progressive_status
                .as_ref()?
                .promoted_mono_vertex_status
                .as_ref()?
                .scale_values
                .as_ref()?
                .get("mvr-0")?
                .clone();
            sv.original_hpa_definition.is_some().then_some(sv)
        })
        .await;
    assert_eq!(saved.scale_to, 2);
    h.until::<ConfigMap, _, _>("trial's own riders", "cm-mvr-1", |c| c.map(|_| ()))
        .await;
    assert!(
        h.api::<HorizontalPodAutoscaler>()
            .get_opt("hpa-mvr-1")
            .await
            .expect("get")
            .is_none(),
        "no HPA rider on a trial"
    );
    h.until::<HorizontalPodAutoscaler, _, _>("HPA back after the failure", "hpa-mvr-0", |x| {
        x.map(|_| ())
    })
    .await;

    // Success: the HPA follows the new promoted child.
    h.apply::<MonoVertexRollout>(with_riders(mvr(JAVA, Some("0,30,2,1"))))
        .await;
    h.until::<HorizontalPodAutoscaler, _, _>("hpa of the new promoted", "hpa-mvr-2", |x| {
        x.map(|_| ())
    })
    .await;
    h.until("deployed on mvr-2", "mvr", settled).await;
    h.until::<HorizontalPodAutoscaler, _, _>("old HPA gone with its child", "hpa-mvr-0", |x| {
        x.is_none().then_some(())
    })
    .await;
    h.assert_invariants().await;
}

/// A rider edit while a trial is judged replaces the trial, as a spec edit does (the trial's
/// riders are recorded in `upgradingMonoVertexStatus.riders`), instead of landing unassessed on
/// whichever child is promoted next.
#[tokio::test]
async fn a_rider_edit_during_a_trial_replaces_the_trial() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let h = Harness::start_real("prog-rider-edit", CONFIG_WITH_HPA).await;
    let with_cm = |r: Value, owner: &str| {
        let mut r = r;
        r["spec"]["riders"] = json!([{"definition": {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
            "data": {"owner": "{{.monovertex-name}}", "edit": owner}
        }}]);
        r
    };
    h.apply::<MonoVertexRollout>(with_cm(mvr(GO, None), "first"))
        .await;
    h.until("deployed", "mvr", settled).await;
    // A trial that stays under assessment (never healthy, a minute to fail).
    h.apply::<MonoVertexRollout>(with_cm(mvr(BAD, Some("0,60,2,1")), "first"))
        .await;
    h.until::<MonoVertexRollout, _, _>("trial riders recorded", "mvr", |r| {
        let up = upgrading(r?)?;
        (up.child.name == "mvr-1" && up.child.riders.iter().any(|x| x.name == "cm-mvr-1"))
            .then_some(())
    })
    .await;
    h.until::<ConfigMap, _, _>("trial's rider", "cm-mvr-1", |c| c.map(|_| ()))
        .await;

    // Only the rider changes: the trial is replaced by one with the new rider.
    let seen = record::<MonoVertex>(&h, "mvr-1").await;
    h.apply::<MonoVertexRollout>(with_cm(mvr(BAD, Some("0,60,2,1")), "second"))
        .await;
    let cm = h
        .until::<ConfigMap, _, _>("the new trial's rider", "cm-mvr-2", |c| c.cloned())
        .await;
    assert_eq!(
        cm.data
            .as_ref()
            .and_then(|d| d.get("edit"))
            .map(String::as_str),
        Some("second")
    );
    eventually("the old trial marked replaced", || async {
        seen.lock()
            .expect("lock")
            .iter()
            .any(|m| {
                m.labels()
                    .get("numaplane.numaproj.io/upgrade-state-reason")
                    .map(String::as_str)
                    == Some("progressive-replaced")
            })
            .then_some(())
    })
    .await;
    // The promoted child keeps its rider as it was until a trial with the edit is promoted.
    let promoted: ConfigMap = h.api().get("cm-mvr-0").await.expect("cm-mvr-0");
    assert_eq!(
        promoted
            .data
            .as_ref()
            .and_then(|d| d.get("edit"))
            .map(String::as_str),
        Some("first")
    );
    h.assert_invariants().await;
}

/// A MonoVertex that can't take in data (scale 0) is promoted without
/// assessment, `no_data_ingestion`.
#[tokio::test]
async fn monovertex_without_data_ingestion_skips_assessment() {
    let h = Harness::start_real("prog-skip", CONFIG).await;
    h.apply::<MonoVertexRollout>(mvr(GO, None)).await;
    h.until("deployed", "mvr", settled).await;
    let mut zero = mvr(BAD, Some("0,120,60,1"));
    zero["spec"]["monoVertex"]["spec"]["scale"] = json!({"min": 0, "max": 0});
    h.apply::<MonoVertexRollout>(zero).await;
    let up = h
        .until::<MonoVertexRollout, _, _>("forced success", "mvr", |r| {
            let up = upgrading(r?)?;
            (up.child.name == "mvr-1" && up.child.forced_success).then(|| up.clone())
        })
        .await;
    assert_eq!(
        up.child.forced_success_reason,
        Some(numaplane_api::progressive::ForcedSuccessReason::NoDataIngestion)
    );
    h.until::<MonoVertex, _, _>("promoted without assessment", "mvr-1", |m| {
        (state(m?) == Some("promoted")).then_some(())
    })
    .await;
    h.assert_invariants().await;
}

/// For pipelines: a trial whose source can't take in data (scale 0), or that is
/// paused, is promoted without assessment, `no_data_ingestion`; its image could never pass one.
#[tokio::test]
async fn pipeline_without_data_ingestion_skips_assessment() {
    use numaplane_api::numaflow::Pipeline;
    let h = pipeline_setup("prog-pl-skip").await;
    let strategy = json!({"progressive": {"assessmentSchedule": "0,120,60,1"}});
    let forced = |name: &'static str| {
        move |r: Option<&numaplane_api::PipelineRollout>| {
            let up = support::scenario::upgrading_pipeline(r?)?.clone();
            (up.child.name == name && up.child.forced_success).then_some(up)
        }
    };
    let mut zero = pr(BADCAT, strategy.clone());
    zero["spec"]["pipeline"]["spec"]["vertices"][0]["scale"] = json!({"min": 0, "max": 0});
    let mut paused = pr(&BADCAT.replace("badpath1", "badpath2"), strategy);
    paused["spec"]["pipeline"]["spec"]["lifecycle"]["desiredPhase"] = json!("Paused");
    for (manifest, trial) in [(zero, "pr-1"), (paused, "pr-2")] {
        h.apply::<numaplane_api::PipelineRollout>(manifest).await;
        let up = h
            .until(&format!("{trial} forced success"), "pr", forced(trial))
            .await;
        assert_eq!(
            up.child.forced_success_reason,
            Some(numaplane_api::progressive::ForcedSuccessReason::NoDataIngestion)
        );
        h.until::<Pipeline, _, _>(
            &format!("{trial} promoted without assessment"),
            trial,
            |p| (pl_state(p?) == Some("promoted")).then_some(()),
        )
        .await;
    }
    h.assert_invariants().await;
}

const CONFIG_WITH_CM_RIDERS: &str = r#"
defaultUpgradeStrategy: "progressive"
permittedRiders: "group=,kind=ConfigMap"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,30,3,1"
"#;

/// Per-vertex riders, with ConfigMaps standing in for the VPAs: per-vertex riders follow the
/// vertices of each new promoted pipeline, a progressive rider added later is applied in place,
/// and the old child's riders go with it.
#[tokio::test]
async fn pipeline_per_vertex_riders_follow_each_promoted_pipeline() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use numaplane_api::numaflow::Pipeline;
    let h = Harness::start_real("prog-pl-riders", CONFIG_WITH_CM_RIDERS).await;
    apply_isb(&h, "2.10.17").await;
    let per_vertex = json!({"perVertex": true, "definition": {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vcm"},
        "data": {"vertex": "{{.pipeline-name}}-{{.vertex-name}}"}
    }});
    let progressive = json!({"progressive": true, "definition": {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pcm"},
        "data": {"pipeline-name": "{{.pipeline-name}}"}
    }});
    let with = |mut r: Value, riders: Value| {
        r["spec"]["riders"] = riders;
        r
    };
    let cm = |name: String| {
        let h = &h;
        async move { h.api::<ConfigMap>().get_opt(&name).await.expect("get") }
    };
    h.apply::<numaplane_api::PipelineRollout>(with(pr(CAT, json!({})), json!([per_vertex])))
        .await;
    h.until("pr deployed", "pr", pr_settled).await;
    for v in ["in", "cat", "out"] {
        let c = cm(format!("vcm-pr-0-{v}")).await.expect("per-vertex rider");
        assert_eq!(c.data.expect("data")["vertex"], format!("pr-0-{v}"));
    }

    // A progressive rider added to a running pipeline is applied in place: no new child.
    h.apply::<numaplane_api::PipelineRollout>(with(
        pr(CAT, json!({})),
        json!([per_vertex, progressive]),
    ))
    .await;
    let c = eventually("pcm-pr-0", || cm("pcm-pr-0".into())).await;
    assert_eq!(c.data.expect("data")["pipeline-name"], "pr-0");
    h.until("pr settled", "pr", pr_settled).await;
    assert!(
        h.api::<Pipeline>()
            .get_opt("pr-1")
            .await
            .expect("get")
            .is_none(),
        "adding a rider made no new child"
    );

    // Drop the `cat` vertex: a progressive upgrade to pr-1, whose riders follow its vertices;
    // the pr-0 riders go with pr-0.
    let mut two = with(pr(CAT, json!({})), json!([per_vertex, progressive]));
    let spec = &mut two["spec"]["pipeline"]["spec"];
    spec["vertices"] = json!([spec["vertices"][0], spec["vertices"][2]]);
    spec["edges"] = json!([{"from": "in", "to": "out"}]);
    h.apply::<numaplane_api::PipelineRollout>(two.clone()).await;
    h.until::<Pipeline, _, _>("pr-1 promoted", "pr-1", |p| {
        (pl_state(p?) == Some("promoted")).then_some(())
    })
    .await;
    for v in ["in", "out"] {
        eventually(&format!("vcm-pr-1-{v}"), || cm(format!("vcm-pr-1-{v}"))).await;
    }
    let c = eventually("pcm-pr-1", || cm("pcm-pr-1".into())).await;
    assert_eq!(c.data.expect("data")["pipeline-name"], "pr-1");
    assert!(
        cm("vcm-pr-1-cat".into()).await.is_none(),
        "no rider for a vertex pr-1 lacks"
    );
    h.until::<Pipeline, _, _>("pr-0 deleted", "pr-0", |p| p.is_none().then_some(()))
        .await;
    for name in ["vcm-pr-0-in", "vcm-pr-0-cat", "vcm-pr-0-out", "pcm-pr-0"] {
        eventually(&format!("{name} gone"), || async {
            cm(name.to_string()).await.is_none().then_some(())
        })
        .await;
    }

    // No riders any more: pr-1's are deleted.
    h.apply::<numaplane_api::PipelineRollout>(with(two, json!([])))
        .await;
    for name in ["vcm-pr-1-in", "vcm-pr-1-out", "pcm-pr-1"] {
        eventually(&format!("{name} gone"), || async {
            cm(name.to_string()).await.is_none().then_some(())
        })
        .await;
    }
    h.until("pr settled without riders", "pr", pr_settled).await;
    h.assert_invariants().await;
}

/// A change of a `progressive: true` rider is a progressive upgrade; the new
/// child gets its riders, the old child's go with it.
#[tokio::test]
async fn progressive_rider_change_upgrades_progressively() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let h = Harness::start_real("prog-rider", CONFIG_WITH_HPA).await;
    let with_cm = |value: &str| {
        let mut r = mvr(GO, None);
        r["spec"]["riders"] = json!([{"progressive": true, "definition": {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
            "data": {"owner": "{{.monovertex-name}}", "value": value}
        }}]);
        r
    };
    h.apply::<MonoVertexRollout>(with_cm("a")).await;
    h.until("deployed", "mvr", settled).await;
    h.until::<ConfigMap, _, _>("rider of mvr-0", "cm-mvr-0", |c| c.map(|_| ()))
        .await;
    h.apply::<MonoVertexRollout>(with_cm("b")).await;
    h.until::<MonoVertex, _, _>("trial for the rider change", "mvr-1", |m| m.map(|_| ()))
        .await;
    let cm = h
        .until::<ConfigMap, _, _>("new child's rider", "cm-mvr-1", |c| c.cloned())
        .await;
    assert_eq!(
        cm.data
            .as_ref()
            .and_then(|d| d.get("owner"))
            .map(String::as_str),
        Some("mvr-1")
    );
    assert_eq!(
        cm.data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(String::as_str),
        Some("b")
    );
    h.until("deployed on mvr-1", "mvr", settled).await;
    h.until::<MonoVertex, _, _>("old child deleted", "mvr-0", |m| m.is_none().then_some(()))
        .await;
    h.until::<ConfigMap, _, _>("old rider gone with it", "cm-mvr-0", |c| {
        c.is_none().then_some(())
    })
    .await;
    h.assert_invariants().await;
}

/// A promoted child deleted during an upgrade is recreated from the rollout; the trial is
/// discontinued.
#[tokio::test]
async fn vanished_promoted_child_is_recreated() {
    let h = Harness::start_real("prog-vanish", CONFIG).await;
    h.apply::<MonoVertexRollout>(mvr(GO, None)).await;
    h.until("deployed", "mvr", settled).await;
    h.apply::<MonoVertexRollout>(mvr(JAVA, Some("0,120,60,1")))
        .await;
    h.until::<MonoVertex, _, _>("trial", "mvr-1", |m| {
        (state(m?) == Some("trial")).then_some(())
    })
    .await;
    h.history.deleted_by_test("MonoVertex", "mvr-0");
    h.api::<MonoVertex>()
        .delete("mvr-0", &Default::default())
        .await
        .expect("delete promoted");
    h.until::<MonoVertex, _, _>("recreated promoted", "mvr-2", |m| {
        let m = m?;
        (state(m) == Some("promoted") && image(m) == JAVA).then_some(())
    })
    .await;
    h.until::<MonoVertex, _, _>("trial dropped", "mvr-1", |m| m.is_none().then_some(()))
        .await;
    h.until("settled on mvr-2", "mvr", settled).await;
    h.assert_invariants().await;
}

/// A trial the operator's cache does not show (its watch stalled: a relist under way, a slow
/// API server) is neither created again nor taken for gone: one trial at a time, whatever the
/// watch says. With the MonoVertex watch held at the proxy once the upgrade began, every pass
/// after the trial's initialization used to start another trial beside it.
#[tokio::test]
async fn a_trial_the_cache_does_not_show_is_not_started_again() {
    let mut h = Harness::start_real("prog-stale", CONFIG).await;
    h.through_proxy().await;
    h.apply::<MonoVertexRollout>(mvr(GO, None)).await;
    h.until("deployed", "mvr", settled).await;
    let proxy = h.proxy.as_ref().expect("the proxy");
    proxy.freeze("monovertices");
    h.apply::<MonoVertexRollout>(mvr(JAVA, Some("0,600,300,1")))
        .await;
    h.until::<MonoVertexRollout, _, _>("trial mvr-1 initialised", "mvr", |r| {
        let up = upgrading(r?)?;
        (up.child.name == "mvr-1" && up.child.initialization_complete).then_some(())
    })
    .await;
    // Passes go on meanwhile (the trial's health is sampled live, statuses are written): none
    // may start a second trial.
    let mvs = h.api::<MonoVertex>();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let names: Vec<String> = mvs
            .list(&ListParams::default())
            .await
            .expect("list MonoVertices")
            .items
            .iter()
            .map(|m| m.name_any())
            .collect();
        assert!(
            names.iter().all(|n| n == "mvr-0" || n == "mvr-1"),
            "one trial at a time while the watch is held: {names:?}"
        );
    }
    let proxy = h.proxy.as_ref().expect("the proxy");
    proxy.thaw("monovertices");
    h.apply::<MonoVertexRollout>(mvr(JAVA, Some("0,60,3,1")))
        .await;
    h.until("settled on the new image", "mvr", settled).await;
    h.assert_invariants().await;
}
