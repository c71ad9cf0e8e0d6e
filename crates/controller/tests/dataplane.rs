//! Numaflow's real data plane on the real node, every message counted through an upgrade
//! (docs/dataplane.md): real vertex pods running `numaflow-rs`, the real pipeline daemon, a real
//! JetStream ISB service, the counting source and sink. One test runs the scenarios two at a
//! time: `make test` the slice (a pause-and-drain of a pipeline and a progressive upgrade),
//! `make dataplane` all of them (`DATAPLANE_SCENARIOS=all`), writing their figures to
//! `DATAPLANE_RESULTS` (bench/dataplane-results.json).

mod support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;

use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::progressive::AssessmentResult;
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowControllerRollout, PipelineRollout,
};
use numaplane_testenv::realstack::metrics;
use serde_json::{Value, json};
use support::Harness;
use support::analysis::{
    MONOVERTEX_TEMPLATE, PIPELINE_TEMPLATE, SHIPPED_TEMPLATES, apply_sample_template, run_phase,
};
use support::dataplane::{
    CountDir, SCENARIO_NAMESPACES, Tally, counting_monovertex, counting_pipeline,
    monovertex_with_failing_sink, with_crashing_map, with_failing_sink, with_map_renamed,
    with_slow_map,
};
use support::fixtures::{nc_rollout, paused_drained_at, phase, record};
use support::scenario::{ISB, isb, js, settled, upgrading_pipeline};

/// Real pods pull images, NATS forms a cluster, the daemon starts: minutes, not seconds.
const START: Duration = Duration::from_secs(300);
const UPGRADE: Duration = Duration::from_secs(300);
/// Messages delivered before an upgrade starts and after it ends: the pipeline really flows.
const FLOWING: usize = 60;

fn pr(spec: Value) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {"pipeline": {"spec": spec}}
    })
}

fn sink_generation(p: &Pipeline) -> Option<&str> {
    p.spec
        .pointer("/vertices/2/containerTemplate/env/0/value")
        .and_then(Value::as_str)
}

/// A data-loss change (the sink vertex's `containerTemplate.env`) under pause-and-drain: the
/// pipeline is paused, drained by Numaflow itself, updated and resumed; no message is lost.
async fn ppnd_pipeline() -> Tally {
    let h = Harness::start_dataplane("dp-ppnd", "defaultUpgradeStrategy: pause-and-drain\n").await;
    let count = CountDir::new();
    flowing_pipeline(&h, &count).await;
    assert_real_metric_names(
        &h,
        "numaflow.numaproj.io/pipeline-name=pr-0,numaflow.numaproj.io/vertex-name=out",
        &metrics::VERTEX_FAMILIES,
        &metrics::VERTEX_LABELS,
    )
    .await;

    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.apply::<PipelineRollout>(pr(counting_pipeline(count.path(), ISB, 2)))
        .await;
    h.until_within::<Pipeline, _, _>(UPGRADE, "updated and running", "pr-0", |p| {
        let p = p?;
        (sink_generation(p) == Some("2") && phase(p) == "Running").then_some(())
    })
    .await;
    drained_then_flowing(
        &h,
        &count,
        &seen,
        "Numaflow reported the pipeline paused and drained before the update",
    )
    .await
}

/// A trial has two minutes to run healthy for five seconds: real pods on one node shared by two
/// scenarios (and, in `make test`, by another suite) take tens of seconds to start; a tighter end
/// fails a good trial on a busy machine, which is not what these scenarios measure.
const PROGRESSIVE: &str = r#"
defaultUpgradeStrategy: "progressive"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,120,5,1"
    - kind: MonoVertex
      schedule: "0,120,5,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

/// Waits until `child` is the only pipeline left (promoted, the others drained and deleted);
/// a trial that fails on the way stops the wait at once with the rollout's reasons, since it
/// can no longer happen.
async fn only_pipeline_left(h: &Harness, child: &str, what: &str) {
    support::eventually_within(UPGRADE, what, || async {
        if pipelines(h).await == [child] {
            return Some(());
        }
        let rollout = h.api::<PipelineRollout>().get_opt("pr").await.ok()??;
        let trial = upgrading_pipeline(&rollout)?;
        if trial.child.name == child
            && trial.child.assessment_result == Some(AssessmentResult::Failure)
        {
            panic!(
                "waiting for {what}: the trial {child} failed: {:?}",
                trial.child.failure_reasons
            );
        }
        None
    })
    .await
}

/// The live pipelines and MonoVertices of the namespace, whatever their state.
async fn pipelines(h: &Harness) -> Vec<String> {
    h.live_names::<Pipeline>(|_| true).await
}

async fn monovertices(h: &Harness) -> Vec<String> {
    h.live_names::<MonoVertex>(|_| true).await
}

/// A progressive upgrade of a pipeline that succeeds: the trial runs beside the promoted
/// pipeline, is promoted, and the replaced pipeline is drained before it is deleted (recycling);
/// no message is lost.
async fn progressive_pipeline() -> Tally {
    let h = Harness::start_dataplane("dp-prog", PROGRESSIVE).await;
    let count = CountDir::new();
    flowing_pipeline(&h, &count).await;

    h.apply::<PipelineRollout>(pr(counting_pipeline(count.path(), ISB, 2)))
        .await;
    only_pipeline_left(&h, "pr-1", "pr-1 promoted, pr-0 drained and deleted").await;
    h.until_within(
        UPGRADE,
        "pr settled on pr-1",
        "pr",
        settled::<PipelineRollout>,
    )
    .await;
    count
        .flowing(FLOWING, UPGRADE, "messages after the upgrade")
        .await;

    finish(&h, &count, false).await
}

/// A pipeline on a running ISB service, both Deployed, messages flowing.
async fn flowing_pipeline(h: &Harness, count: &CountDir) {
    h.apply::<ISBServiceRollout>(isb("2.10.3", "1Gi", None))
        .await;
    h.apply::<PipelineRollout>(pr(counting_pipeline(count.path(), ISB, 1)))
        .await;
    h.until_within(START, "pr deployed", "pr", settled::<PipelineRollout>)
        .await;
    count
        .flowing(FLOWING, START, "messages through the first pipeline")
        .await;
}

/// The end of an upgrade of pipeline `pr` whose history `seen` recorded: the rollout settles,
/// the pipeline had been paused and drained (`why` says by whom and before what), messages flow
/// again, then [`finish`].
async fn drained_then_flowing(
    h: &Harness,
    count: &CountDir,
    seen: &std::sync::Mutex<Vec<Pipeline>>,
    why: &str,
) -> Tally {
    h.until_within(UPGRADE, "pr settled", "pr", settled::<PipelineRollout>)
        .await;
    assert!(paused_drained_at(seen).is_some(), "{why}");
    count
        .flowing(FLOWING, UPGRADE, "messages after the upgrade")
        .await;
    finish(h, count, false).await
}

/// The end of every scenario: the sources stop, everything produced is delivered (or the
/// rest counted lost), the invariant checker judges the namespace's history.
async fn finish(h: &Harness, count: &CountDir, may_lose: bool) -> Tally {
    let tally = count.finish(Duration::from_secs(60)).await;
    assert!(tally.produced > 2 * FLOWING, "{tally:?}");
    if !may_lose {
        assert_eq!(tally.lost, 0, "no message lost: {tally:?}");
    }
    h.assert_invariants().await;
    // Its pods and claims go, so the host-path provisioner removes its volumes while the shared
    // environment lives on.
    let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(h.client.clone())
        .delete(&h.ns, &Default::default())
        .await;
    tally
}

/// An ISB service upgrade (a JetStream version, a data-loss change) under pause-and-drain: the
/// pipelines on it are paused and drained, the StatefulSet rolls, they resume.
async fn ppnd_isbsvc() -> Tally {
    let h = Harness::start_dataplane("dp-isb", "defaultUpgradeStrategy: pause-and-drain\n").await;
    let count = CountDir::new();
    flowing_pipeline(&h, &count).await;
    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "1Gi", None))
        .await;
    h.until_within::<InterStepBufferService, _, _>(UPGRADE, "ISB on 2.10.17", "isb-0", |i| {
        (js(i?, "/version") == json!("2.10.17")).then_some(())
    })
    .await;
    h.until_within(UPGRADE, "isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    drained_then_flowing(
        &h,
        &count,
        &seen,
        "the pipeline was paused and drained before its ISB service changed",
    )
    .await
}

/// A progressive upgrade whose trial cannot run (its map exits): the trial fails and the
/// promoted pipeline runs on; then a fixed spec: a new trial is promoted, and the failed trial,
/// whose source wrote messages its map never took, is force-drained (given the promoted spec
/// so that it can drain) before it is deleted; no message is lost.
async fn progressive_failure_then_force_drain() -> Tally {
    let h = Harness::start_dataplane("dp-fail", PROGRESSIVE).await;
    let count = CountDir::new();
    flowing_pipeline(&h, &count).await;
    let crashing = with_crashing_map(counting_pipeline(count.path(), ISB, 2));
    h.apply::<PipelineRollout>(pr(crashing)).await;
    h.until_within::<PipelineRollout, _, _>(UPGRADE, "the trial failed", "pr", |r| {
        let up = upgrading_pipeline(r?)?;
        (up.child.name == "pr-1" && up.child.assessment_result == Some(AssessmentResult::Failure))
            .then_some(())
    })
    .await;
    count
        .flowing(FLOWING, UPGRADE, "the promoted pipeline runs on")
        .await;
    h.apply::<PipelineRollout>(pr(counting_pipeline(count.path(), ISB, 3)))
        .await;
    only_pipeline_left(
        &h,
        "pr-2",
        "pr-2 promoted, pr-0 and pr-1 drained and deleted",
    )
    .await;
    h.until_within(
        UPGRADE,
        "pr settled on pr-2",
        "pr",
        settled::<PipelineRollout>,
    )
    .await;
    count
        .flowing(FLOWING, UPGRADE, "messages after the fix")
        .await;
    finish(&h, &count, false).await
}

/// A slow map keeps a backlog in its buffer; the map vertex is renamed (a topology change,
/// data loss) under pause-and-drain. `allow_loss`: let it through with
/// `numaplane.numaproj.io/allow-data-loss: "true"`, applied without waiting for the drain, so
/// the old buffer's backlog is left behind (the contrast); without it, the pipeline drains
/// first and nothing is lost.
async fn topology_change_with_backlog(prefix: &str, allow_loss: bool) -> Tally {
    let h = Harness::start_dataplane(prefix, "defaultUpgradeStrategy: pause-and-drain\n").await;
    let count = CountDir::new();
    let slow = |spec| with_slow_map(spec, 100);
    h.apply::<ISBServiceRollout>(isb("2.10.3", "1Gi", None))
        .await;
    h.apply::<PipelineRollout>(pr(slow(counting_pipeline(count.path(), ISB, 1))))
        .await;
    h.until_within(START, "pr deployed", "pr", settled::<PipelineRollout>)
        .await;
    count
        .flowing(FLOWING, START, "messages through the slow map")
        .await;
    let mut change = pr(with_map_renamed(
        slow(counting_pipeline(count.path(), ISB, 1)),
        "cat2",
    ));
    if allow_loss {
        change["metadata"]["annotations"] =
            json!({"numaplane.numaproj.io/allow-data-loss": "true"});
    }
    h.apply::<PipelineRollout>(change).await;
    h.until_within::<Pipeline, _, _>(UPGRADE, "renamed and running", "pr-0", |p| {
        let p = p?;
        (p.spec.pointer("/vertices/1/name") == Some(&json!("cat2")) && phase(p) == "Running")
            .then_some(())
    })
    .await;
    h.until_within(UPGRADE, "pr settled", "pr", settled::<PipelineRollout>)
        .await;
    count
        .flowing(FLOWING, UPGRADE, "messages after the change")
        .await;
    let tally = finish(&h, &count, allow_loss).await;
    if allow_loss {
        assert!(
            tally.lost > 0,
            "the backlog left in the old buffer is lost, as allowed: {tally:?}"
        );
    }
    tally
}

/// A progressive upgrade reverted while its trial is assessed: the trial is discontinued and
/// drained before it is deleted, the promoted pipeline gets its scale back; no message is lost.
async fn progressive_rollback() -> Tally {
    let h = Harness::start_dataplane("dp-back", PROGRESSIVE).await;
    let count = CountDir::new();
    flowing_pipeline(&h, &count).await;
    h.apply::<PipelineRollout>(pr(counting_pipeline(count.path(), ISB, 2)))
        .await;
    h.until_within::<Pipeline, _, _>(UPGRADE, "the trial exists", "pr-1", |p| p.map(|_| ()))
        .await;
    h.apply::<PipelineRollout>(pr(counting_pipeline(count.path(), ISB, 1)))
        .await;
    support::eventually_within(
        UPGRADE,
        "back on pr-0, pr-1 drained and deleted",
        || async { (pipelines(&h).await == ["pr-0"]).then_some(()) },
    )
    .await;
    h.until_within(
        UPGRADE,
        "pr settled on pr-0",
        "pr",
        settled::<PipelineRollout>,
    )
    .await;
    count
        .flowing(FLOWING, UPGRADE, "messages after the rollback")
        .await;
    finish(&h, &count, false).await
}

/// The metrics of the first running pod matching `selector`, as Prometheus would scrape them
/// (Numaflow serves them over TLS on 2469; the API server's proxy reaches the pod).
async fn pod_metrics(h: &Harness, selector: &str) -> String {
    support::eventually_within(UPGRADE, &format!("metrics of a pod {selector}"), || async {
        let pods = h
            .api::<k8s_openapi::api::core::v1::Pod>()
            .list(&kube::api::ListParams::default().labels(selector))
            .await
            .ok()?;
        let pod = pods.items.iter().find(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.metadata.deletion_timestamp.is_none()
        })?;
        let name = pod.metadata.name.as_deref()?;
        let uri = format!(
            "/api/v1/namespaces/{}/pods/https:{name}:2469/proxy/metrics",
            h.ns
        );
        let req = http::Request::get(uri).body(Vec::new()).ok()?;
        h.client.request_text(req).await.ok()
    })
    .await
}

/// Whether `text` (Prometheus' exposition format) has a sample of `metric`.
fn exports(text: &str, metric: &str) -> bool {
    text.lines()
        .any(|l| !l.starts_with('#') && l.split(['{', ' ']).next() == Some(metric))
}

/// The label names of `metric`'s samples in `text`, over all its series.
fn label_names(text: &str, metric: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.split(['{', ' ']).next() == Some(metric))
        .filter_map(|l| {
            l.split_once('{')?
                .1
                .split_once('}')
                .map(|(ls, _)| ls.to_string())
        })
        .flat_map(|ls| {
            ls.split(',')
                .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_string()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What the real pods export, checked where the shipped AnalysisTemplates look
/// (docs/dataplane.md): the names carry no `numaflow_` prefix, and the metrics stand-in that
/// serves KWOK's pods exports the same families with labels the real series carry.
async fn assert_real_metric_names(
    h: &Harness,
    selector: &str,
    families: &[&str],
    standin_labels: &[&str],
) {
    let text = pod_metrics(h, selector).await;
    for family in families {
        assert!(
            exports(&text, family),
            "{selector} exports {family}:\n{text}"
        );
        let prefixed = format!("numaflow_{family}");
        assert!(
            !exports(&text, &prefixed),
            "{selector} exports no {prefixed} (the reference samples' name)"
        );
        let real = label_names(&text, family);
        for label in standin_labels {
            assert!(
                real.contains(*label),
                "{family} of {selector} carries {label}, as the metrics stand-in's does: {real:?}"
            );
        }
    }
}

/// The images of pipeline `pipeline`'s vertex pods, each once.
async fn vertex_images(h: &Harness, pipeline: &str) -> Vec<String> {
    let pods: Vec<k8s_openapi::api::core::v1::Pod> = h
        .api::<k8s_openapi::api::core::v1::Pod>()
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("numaflow.numaproj.io/pipeline-name={pipeline}")),
        )
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut images: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("numaflow.numaproj.io/vertex-name"))
        })
        .filter_map(|p| p.spec.as_ref()?.containers.first()?.image.clone())
        .collect();
    images.sort();
    images.dedup();
    images
}

/// A namespace on Numaflow 1.7.5 (controller and data plane) with [`flowing_pipeline`], and the
/// history of its pipeline `pr-0` from now on.
async fn flowing_on_1_7_5(
    prefix: &str,
    config: &str,
) -> (
    Harness,
    CountDir,
    std::sync::Arc<std::sync::Mutex<Vec<Pipeline>>>,
) {
    if let Err(e) = numaplane_testenv::binaries::DataPlaneImages::require(
        numaplane_testenv::binaries::NUMAFLOW_PREVIOUS_ARCHIVE,
    ) {
        panic!("{e:#}");
    }
    let h = Harness::start_dataplane_on(prefix, config, "1.7.5").await;
    let count = CountDir::new();
    flowing_pipeline(&h, &count).await;
    assert_eq!(
        vertex_images(&h, "pr-0").await,
        ["quay.io/numaproj/numaflow:v1.7.5"],
        "the vertices run Numaflow 1.7.5's data plane"
    );
    let seen = record::<Pipeline>(&h, "pr-0").await;
    (h, count, seen)
}

/// A Numaflow controller upgrade (1.7.5 to 1.8.1, a data-loss change) under pause-and-drain:
/// the pipelines are paused and drained, the controller is upgraded, they resume and their
/// vertex pods run the new data plane; no message is lost.
async fn ppnd_numaflow_controller() -> Tally {
    let (h, count, seen) =
        flowing_on_1_7_5("dp-nc", "defaultUpgradeStrategy: pause-and-drain\n").await;
    h.apply::<NumaflowControllerRollout>(nc_rollout("1.8.1"))
        .await;
    h.until_within(
        UPGRADE,
        "ncr settled on 1.8.1",
        "numaflow-controller",
        settled::<NumaflowControllerRollout>,
    )
    .await;
    support::eventually_within(UPGRADE, "the vertices on 1.8.1's data plane", || async {
        (vertex_images(&h, "pr-0").await == ["quay.io/numaproj/numaflow:v1.8.1"]).then_some(())
    })
    .await;
    drained_then_flowing(
        &h,
        &count,
        &seen,
        "the pipeline was paused and drained before the controller changed",
    )
    .await
}

/// A progressive Numaflow controller upgrade (1.7.5 to 1.8.1,
/// docs/progressive-numaflow-controller.md): a trial controller on an instance of its own, the
/// ISB service and the pipeline carried onto it as trials and promoted together; the replaced
/// pipeline is drained by the old controller before it goes; no message is lost.
async fn progressive_numaflow_controller() -> Tally {
    // The pipeline's trial waits for the ISB service's trial (three NATS servers starting on the
    // real node), which takes longer than PROGRESSIVE's 30 s end: Numaflow marks a pipeline on
    // an ISB service that is not healthy yet Failed, a transient failure until the end passes.
    let config = PROGRESSIVE.replace("\"0,120,5,1\"", "\"0,300,5,1\"");
    assert_ne!(
        config, PROGRESSIVE,
        "PROGRESSIVE's pipeline schedule widened"
    );
    let (h, count, seen) = flowing_on_1_7_5("dp-ncp", &config).await;
    let mut ncr = nc_rollout("1.8.1");
    ncr["spec"]["strategy"] = json!({"progressive": {"assessmentSchedule": "0,600,0,2"}});
    h.apply::<NumaflowControllerRollout>(ncr).await;
    support::eventually_within(UPGRADE, "pr-1 promoted on 1.8.1, pr-0 deleted", || async {
        (pipelines(&h).await == ["pr-1"]
            && vertex_images(&h, "pr-1").await == ["quay.io/numaproj/numaflow:v1.8.1"])
        .then_some(())
    })
    .await;
    h.until_within(
        UPGRADE,
        "ncr settled on 1.8.1",
        "numaflow-controller",
        settled::<NumaflowControllerRollout>,
    )
    .await;
    drained_then_flowing(
        &h,
        &count,
        &seen,
        "the replaced pipeline was drained by its own controller before it went",
    )
    .await
}

fn mvr(spec: Value) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": "mvr"},
        "spec": {"monoVertex": {"spec": spec}}
    })
}

/// A progressive upgrade of a MonoVertex (`numaflow-rs processor`): the trial runs beside the
/// promoted one, is promoted, the old one goes; no message is lost.
async fn progressive_monovertex() -> Tally {
    let h = Harness::start_dataplane("dp-mvtx", PROGRESSIVE).await;
    let count = CountDir::new();
    h.apply::<MonoVertexRollout>(mvr(counting_monovertex(count.path(), 1)))
        .await;
    h.until_within(START, "mvr deployed", "mvr", settled::<MonoVertexRollout>)
        .await;
    count
        .flowing(FLOWING, START, "messages through the first MonoVertex")
        .await;
    assert_real_metric_names(
        &h,
        "numaflow.numaproj.io/mono-vertex-name=mvr-0",
        &metrics::MONOVERTEX_FAMILIES,
        &metrics::MONOVERTEX_LABELS,
    )
    .await;
    h.apply::<MonoVertexRollout>(mvr(counting_monovertex(count.path(), 2)))
        .await;
    support::eventually_within(UPGRADE, "mvr-1 promoted, mvr-0 deleted", || async {
        (monovertices(&h).await == ["mvr-1"]).then_some(())
    })
    .await;
    h.until_within(
        UPGRADE,
        "mvr settled on mvr-1",
        "mvr",
        settled::<MonoVertexRollout>,
    )
    .await;
    count
        .flowing(FLOWING, UPGRADE, "messages after the upgrade")
        .await;
    finish(&h, &count, false).await
}

/// A rollout judged by the shipped template `template`, measured every 2 s: 5 successes in a
/// row pass, a third failure fails.
fn analysed(mut rollout: Value, template: &str) -> Value {
    rollout["spec"]["strategy"] = json!({"analysis": {
        "templates": [{"templateName": template, "clusterScope": false}],
        "args": [
            {"name": "interval", "value": "2s"},
            {"name": "success-limit", "value": "5"},
            {"name": "failure-limit", "value": "2"}
        ]
    }});
    rollout
}

/// The phase Argo Rollouts gave the AnalysisRun `name`, once it has one that has ended.
async fn run_ended(h: &Harness, name: &str) -> String {
    support::eventually_within(UPGRADE, &format!("AnalysisRun {name} ended"), || async {
        let run: numaplane_api::numaflow::AnalysisRun = h.api().get_opt(name).await.ok()??;
        let phase = run_phase(&run);
        matches!(
            phase.as_str(),
            "Successful" | "Failed" | "Error" | "Inconclusive"
        )
        .then_some(phase)
    })
    .await
}

/// The shipped template on Numaflow's own metrics, scraped by Prometheus from the real pods: a
/// healthy trial is promoted on its AnalysisRun's success; a trial whose sink fails every
/// message fails its analysis and is rolled back while the promoted pipeline runs on; the fix
/// is promoted and the failed trial force-drained; no message is lost.
async fn progressive_analysis_pipeline() -> Tally {
    let h = Harness::start_dataplane("dp-ana", PROGRESSIVE).await;
    apply_sample_template(&h, SHIPPED_TEMPLATES).await;
    let count = CountDir::new();
    let judged = |g| {
        analysed(
            pr(counting_pipeline(count.path(), ISB, g)),
            PIPELINE_TEMPLATE,
        )
    };
    h.apply::<ISBServiceRollout>(isb("2.10.3", "1Gi", None))
        .await;
    h.apply::<PipelineRollout>(judged(1)).await;
    h.until_within(START, "pr deployed", "pr", settled::<PipelineRollout>)
        .await;
    count
        .flowing(FLOWING, START, "messages through the first pipeline")
        .await;

    h.apply::<PipelineRollout>(judged(2)).await;
    assert_eq!(run_ended(&h, "pipeline-pr-1").await, "Successful");
    only_pipeline_left(&h, "pr-1", "pr-1 promoted, pr-0 recycled").await;

    let mut failing = judged(3);
    failing["spec"]["pipeline"]["spec"] =
        with_failing_sink(failing["spec"]["pipeline"]["spec"].take());
    h.apply::<PipelineRollout>(failing).await;
    assert_eq!(run_ended(&h, "pipeline-pr-2").await, "Failed");
    h.until_within::<PipelineRollout, _, _>(UPGRADE, "the trial failed", "pr", |r| {
        let up = upgrading_pipeline(r?)?;
        (up.child.name == "pr-2" && up.child.assessment_result == Some(AssessmentResult::Failure))
            .then_some(())
    })
    .await;
    count
        .flowing(FLOWING, UPGRADE, "the promoted pipeline runs on")
        .await;

    h.apply::<PipelineRollout>(judged(4)).await;
    only_pipeline_left(&h, "pr-3", "pr-3 promoted, pr-1 and pr-2 drained").await;
    h.until_within(
        UPGRADE,
        "pr settled on pr-3",
        "pr",
        settled::<PipelineRollout>,
    )
    .await;
    count
        .flowing(FLOWING, UPGRADE, "messages after the fix")
        .await;
    finish(&h, &count, false).await
}

/// The same for a MonoVertex: promoted on its AnalysisRun's success, rolled back when its sink
/// fails every message (a MonoVertex acknowledges its source only once the sink has the
/// message, so the failing trial holds nothing).
async fn progressive_analysis_monovertex() -> Tally {
    let h = Harness::start_dataplane("dp-anamv", PROGRESSIVE).await;
    apply_sample_template(&h, SHIPPED_TEMPLATES).await;
    let count = CountDir::new();
    let judged = |spec| analysed(mvr(spec), MONOVERTEX_TEMPLATE);
    h.apply::<MonoVertexRollout>(judged(counting_monovertex(count.path(), 1)))
        .await;
    h.until_within(START, "mvr deployed", "mvr", settled::<MonoVertexRollout>)
        .await;
    count
        .flowing(FLOWING, START, "messages through the first MonoVertex")
        .await;
    h.apply::<MonoVertexRollout>(judged(counting_monovertex(count.path(), 2)))
        .await;
    assert_eq!(run_ended(&h, "monovertex-mvr-1").await, "Successful");
    support::eventually_within(UPGRADE, "mvr-1 promoted", || async {
        (monovertices(&h).await == ["mvr-1"]).then_some(())
    })
    .await;
    h.apply::<MonoVertexRollout>(judged(monovertex_with_failing_sink(counting_monovertex(
        count.path(),
        3,
    ))))
    .await;
    assert_eq!(run_ended(&h, "monovertex-mvr-2").await, "Failed");
    h.until_within(
        UPGRADE,
        "mvr settled on mvr-1",
        "mvr",
        |r: Option<&MonoVertexRollout>| {
            let st = r?.status.as_ref()?;
            let failed = support::condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")
                .is_some_and(|(status, _, _)| status == "False");
            failed.then_some(())
        },
    )
    .await;
    count
        .flowing(FLOWING, UPGRADE, "the promoted MonoVertex runs on")
        .await;
    finish(&h, &count, false).await
}

type Scenario = fn() -> BoxFuture<'static, Tally>;

/// Every scenario: name, what it shows, how it runs.
const SCENARIOS: &[(&str, &str, Scenario)] = &[
    (
        "ppnd-pipeline",
        "pause-and-drain of a pipeline (a data-loss change)",
        || Box::pin(ppnd_pipeline()),
    ),
    (
        "ppnd-numaflow-controller",
        "pause-and-drain of the pipelines of a Numaflow controller upgrade (1.7.5 to 1.8.1)",
        || Box::pin(ppnd_numaflow_controller()),
    ),
    (
        "progressive-pipeline",
        "progressive upgrade of a pipeline, trial promoted, replaced pipeline recycled",
        || Box::pin(progressive_pipeline()),
    ),
    (
        "progressive-numaflow-controller",
        "progressive Numaflow controller upgrade (1.7.5 to 1.8.1): the pipeline's trial on the trial controller promoted, the old one drained",
        || Box::pin(progressive_numaflow_controller()),
    ),
    (
        "ppnd-isbsvc",
        "pause-and-drain of the pipelines of an ISB service upgrade (JetStream 2.10.3 to 2.10.17)",
        || Box::pin(ppnd_isbsvc()),
    ),
    (
        "progressive-failure-force-drain",
        "progressive trial that cannot run fails; the fix is promoted and the failed trial force-drained",
        || Box::pin(progressive_failure_then_force_drain()),
    ),
    (
        "progressive-rollback",
        "progressive upgrade reverted during the assessment: trial discontinued and drained",
        || Box::pin(progressive_rollback()),
    ),
    (
        "progressive-analysis-pipeline",
        "shipped AnalysisTemplate on real metrics: healthy trial promoted, failing sink rolled back, fix promoted",
        || Box::pin(progressive_analysis_pipeline()),
    ),
    (
        "progressive-analysis-monovertex",
        "shipped AnalysisTemplate on real metrics: healthy MonoVertex promoted, failing sink rolled back",
        || Box::pin(progressive_analysis_monovertex()),
    ),
    (
        "progressive-monovertex",
        "progressive upgrade of a MonoVertex, trial promoted",
        || Box::pin(progressive_monovertex()),
    ),
    (
        "ppnd-topology-backlog",
        "pause-and-drain of a topology change with a backlog (slow map): drained first",
        || Box::pin(topology_change_with_backlog("dp-topo", false)),
    ),
    (
        "allowed-data-loss",
        "the same change let through with allow-data-loss (contrast: the loss the user allowed)",
        || Box::pin(topology_change_with_backlog("dp-loss", true)),
    ),
];

/// Deletes the namespaces a failed scenario left (a passing one deletes its own in [`finish`]).
async fn remove_namespaces(spaces: &std::sync::Mutex<Vec<String>>) {
    let names = spaces.lock().map(|s| s.clone()).unwrap_or_default();
    let client = numaplane_testenv::TestEnv::shared_dataplane()
        .await
        .client();
    let api = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client);
    for ns in names {
        eprintln!("removing {ns}, left by a failed scenario");
        let _ = api.delete(&ns, &Default::default()).await;
    }
}

/// What `make test` runs.
const SLICE: &[&str] = &["ppnd-pipeline", "progressive-pipeline"];

/// `DATAPLANE_SCENARIOS`: `all`, or names separated by commas; the slice by default.
fn chosen() -> Vec<&'static (&'static str, &'static str, Scenario)> {
    let wanted = std::env::var("DATAPLANE_SCENARIOS").unwrap_or_default();
    let names: Vec<&str> = match wanted.trim() {
        "" => SLICE.to_vec(),
        "all" => SCENARIOS.iter().map(|s| s.0).collect(),
        list => list.split(',').map(str::trim).collect(),
    };
    names
        .iter()
        .map(|n| {
            SCENARIOS
                .iter()
                .find(|s| s.0 == *n)
                .unwrap_or_else(|| panic!("DATAPLANE_SCENARIOS: no scenario {n:?}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_is_counted_through_every_upgrade() {
    let runs: Vec<(String, String, Result<Tally, String>, u64)> = futures::stream::iter(chosen())
        .map(|&(name, what, run)| async move {
            let started = Instant::now();
            let spaces = std::sync::Arc::default();
            let scoped = SCENARIO_NAMESPACES.scope(std::sync::Arc::clone(&spaces), run());
            let outcome = tokio::spawn(scoped).await.map_err(|e| {
                let panic = e.try_into_panic().ok();
                panic
                    .as_ref()
                    .and_then(|p| p.downcast_ref::<String>().cloned())
                    .or_else(|| panic.and_then(|p| p.downcast_ref::<&str>().map(|s| s.to_string())))
                    .unwrap_or_else(|| "cancelled".into())
            });
            if outcome.is_err() {
                remove_namespaces(&spaces).await;
            }
            (
                name.to_string(),
                what.to_string(),
                outcome,
                started.elapsed().as_secs(),
            )
        })
        .buffer_unordered(2)
        .collect()
        .await;
    let results: Vec<Value> = runs
        .iter()
        .map(|(name, what, outcome, seconds)| match outcome {
            Ok(t) => json!({"scenario": name, "what": what, "seconds": seconds, "tally": t}),
            Err(e) => json!({"scenario": name, "what": what, "seconds": seconds, "failed": e}),
        })
        .collect();
    for r in &results {
        println!("data plane: {r}");
    }
    if let Some(path) = std::env::var_os("DATAPLANE_RESULTS") {
        let doc = json!({
            "command": "make dataplane",
            "numaflow": "1.8.1",
            "source_rate_per_second": support::dataplane::RATE,
            "scenarios": results,
        });
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&doc).expect("json") + "\n",
        )
        .expect("write DATAPLANE_RESULTS");
    }
    let failed: Vec<String> = runs
        .iter()
        .filter_map(|(name, _, o, _)| o.as_ref().err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "scenarios failed:\n{}",
        failed.join("\n")
    );
}
