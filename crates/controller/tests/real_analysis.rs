//! Progressive upgrades judged for real: the AnalysisTemplates shipped in `config/samples`
//! (unchanged; only their namespace is the test's), evaluated by the real Argo Rollouts
//! controller with real PromQL against a real Prometheus, which scrapes the metrics a running
//! pipeline exports under Numaflow's real names (the metrics stand-in, counting while KWOK's pods
//! are Ready). Pipelines run under the real Numaflow controller. The reference sample's template
//! runs beside the shipped one, to show that it passes a trial whose sink never acknowledges.

mod support;

use kube::ResourceExt;
use numaplane_api::PipelineRollout;
use numaplane_api::numaflow::{AnalysisRun, Pipeline};
use numaplane_api::progressive::AssessmentResult;
use serde_json::{Value, json};
use support::analysis::*;
use support::scenario::settled;
use support::{Harness, condition};

#[tokio::test]
async fn a_healthy_trial_is_promoted_by_real_analysis() {
    let h = setup("real-ar-ok").await;
    h.apply::<PipelineRollout>(pr(CAT2)).await;
    let r = h
        .until::<PipelineRollout, _, _>("pr-1 promoted", "pr", |r| {
            settled(r)?;
            let r = r?.clone();
            let up = support::scenario::upgrading_pipeline(&r)?.clone();
            (up.child.name == "pr-1").then_some((r, up))
        })
        .await;
    assert_eq!(r.1.child.assessment_result, Some(AssessmentResult::Success));
    // Argo decided it, from Prometheus: the shipped template counted no vertex reading without
    // acknowledging (the failing test below shows it counts one that does).
    let run: AnalysisRun = h.api().get("pipeline-pr-1").await.expect("AnalysisRun");
    assert_eq!(run_phase(&run), "Successful", "{:?}", run.status);
    let ms = measurements(&run);
    assert!(
        ms.iter()
            .any(|(m, v, p)| m == SHIPPED_METRIC && p == "Successful" && v == "[0]"),
        "{ms:?}"
    );
    // The run Numaplane made: owned by the trial, labelled, the template's arguments filled.
    assert_eq!(run.owner_references()[0].name, "pr-1");
    assert_eq!(run.owner_references()[0].controller, Some(true));
    assert_eq!(
        run.labels()
            .get("app.kubernetes.io/part-of")
            .map(String::as_str),
        Some("numaplane")
    );
    let args = run.spec["args"].as_array().cloned().unwrap_or_default();
    assert!(
        args.contains(&json!({"name": "upgrading-pipeline-name", "value": "pr-1"}))
            && args.contains(&json!({"name": "pipeline-namespace", "value": h.ns})),
        "{args:?}"
    );
    assert_eq!(
        r.1.analysis.as_ref().map(|a| a.analysis_run_name.as_str()),
        Some("pipeline-pr-1")
    );
    let p1: Pipeline = h.api().get("pr-1").await.expect("pr-1");
    assert_eq!(
        p1.labels()
            .get("numaplane.numaproj.io/upgrade-state")
            .map(String::as_str),
        Some("promoted")
    );
    h.assert_invariants().await;
}

#[tokio::test]
async fn a_trial_whose_sink_never_acks_is_rolled_back_by_real_analysis() {
    let h = setup("real-ar-fail").await;
    let metrics = h.env.real().expect("real stack").metrics();
    metrics.never_ack(&h.ns, "pr-1", Some("out"));
    h.apply::<PipelineRollout>(pr(CAT2)).await;
    h.until::<PipelineRollout, _, _>("trial failed", "pr", |r| {
        let st = r?.status.as_ref()?;
        let (s, reason, _) = condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")?;
        (s == "False" && reason == "Failed").then_some(())
    })
    .await;
    let run: AnalysisRun = h.api().get("pipeline-pr-1").await.expect("AnalysisRun");
    assert_eq!(run_phase(&run), "Failed", "{:?}", run.status);
    let ms = measurements(&run);
    assert!(
        ms.iter()
            .any(|(m, v, p)| m == SHIPPED_METRIC && p == "Failed" && v == "[1]"),
        "the shipped template counted the sink reading without acknowledging: {ms:?}"
    );

    // Rolled back: pr-0 stays promoted with its scale back, pr-1 is not promoted.
    h.until::<Pipeline, _, _>("pr-0 promoted, scale restored", "pr-0", |p| {
        let p = p?;
        (p.labels()
            .get("numaplane.numaproj.io/upgrade-state")
            .map(String::as_str)
            == Some("promoted")
            && p.spec["vertices"][1]["scale"] == json!({"min": 3, "max": 5}))
        .then_some(())
    })
    .await;

    // The same failing sink judged by the reference sample's template alone: it queries names no
    // Numaflow pod exports, finds nothing and passes the trial (docs/compatibility.md).
    metrics.never_ack(&h.ns, "pr-2", Some("out"));
    let mut sample_judged = pr(CAT3);
    sample_judged["spec"]["strategy"]["analysis"]["templates"] =
        json!([{"templateName": SAMPLE_PIPELINE_TEMPLATE}]);
    h.apply::<PipelineRollout>(sample_judged).await;
    h.until::<PipelineRollout, _, _>("pr-2 promoted by the sample's template", "pr", |r| {
        settled(r)?;
        let up = support::scenario::upgrading_pipeline(r?)?;
        (up.child.name == "pr-2" && up.child.assessment_result == Some(AssessmentResult::Success))
            .then_some(())
    })
    .await;
    let run: AnalysisRun = h.api().get("pipeline-pr-2").await.expect("AnalysisRun");
    assert_eq!(run_phase(&run), "Successful", "{:?}", run.status);
    h.assert_invariants().await;
}

/// The metric of the shipped pipeline template.
const SHIPPED_METRIC: &str = "vertices-reading-without-acknowledging";
/// The metric of the shipped MonoVertex template.
const SHIPPED_MV_METRIC: &str = "reading-without-acknowledging";

/// The sample MonoVertexRollout with its sink running `sink`, judged by the shipped template.
fn mvr(sink: &str) -> Value {
    let mut r = sample("numaplane.numaproj.io_v1alpha1_monovertexrollout.yaml")
        .into_iter()
        .find(|d| d["kind"] == "MonoVertexRollout")
        .expect("the sample has a MonoVertexRollout");
    r["metadata"] = json!({"name": "mvr"});
    r["spec"]["monoVertex"]["spec"]["sink"]["udsink"]["container"]["image"] = json!(sink);
    r["spec"]["strategy"]["analysis"]["templates"] = json!([{"templateName": MONOVERTEX_TEMPLATE}]);
    r["spec"]["strategy"]["analysis"]["args"] = fast_args();
    r
}

const SINK: &str = "quay.io/numaio/numaflow-go/sink-log:stable";
const SINK2: &str = "quay.io/numaio/numaflow-go/sink-log:v1";
/// The sample's own suggestion for failing the AnalysisRun.
const FAILING_SINK: &str = "quay.io/numaio/numaflow-go/sink-log-failure:stable";

#[tokio::test]
async fn monovertex_trials_are_judged_by_the_shipped_template() {
    use numaplane_api::MonoVertexRollout;
    use numaplane_api::numaflow::MonoVertex;
    let h = Harness::start_real("real-ar-mv", CONFIG).await;
    apply_sample_template(&h, SHIPPED_TEMPLATES).await;
    h.apply::<MonoVertexRollout>(mvr(SINK)).await;
    h.until::<MonoVertexRollout, _, _>("mvr-0 deployed", "mvr", settled)
        .await;

    // A healthy sink: promoted on Argo's verdict from Prometheus.
    h.apply::<MonoVertexRollout>(mvr(SINK2)).await;
    h.until::<MonoVertexRollout, _, _>("mvr-1 promoted", "mvr", |r| {
        settled(r)?;
        let up = r?
            .status
            .as_ref()?
            .progressive_status
            .as_ref()?
            .upgrading_mono_vertex_status
            .clone()?;
        (up.child.name == "mvr-1" && up.child.assessment_result == Some(AssessmentResult::Success))
            .then_some(())
    })
    .await;
    let run: AnalysisRun = h.api().get("monovertex-mvr-1").await.expect("AnalysisRun");
    assert_eq!(run_phase(&run), "Successful", "{:?}", run.status);
    assert!(
        measurements(&run)
            .iter()
            .any(|(m, v, p)| m == SHIPPED_MV_METRIC && p == "Successful" && v == "[0]")
    );

    // The sample's failing sink: reads, never acknowledges; the run fails and mvr-1 stays.
    h.apply::<MonoVertexRollout>(mvr(FAILING_SINK)).await;
    h.until::<MonoVertexRollout, _, _>("trial failed", "mvr", |r| {
        let st = r?.status.as_ref()?;
        let (s, reason, _) = condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")?;
        (s == "False" && reason == "Failed").then_some(())
    })
    .await;
    let run: AnalysisRun = h.api().get("monovertex-mvr-2").await.expect("AnalysisRun");
    assert_eq!(run_phase(&run), "Failed", "{:?}", run.status);
    assert!(
        measurements(&run)
            .iter()
            .any(|(m, v, p)| m == SHIPPED_MV_METRIC && p == "Failed" && v == "[1]"),
        "{:?}",
        measurements(&run)
    );
    h.until::<MonoVertex, _, _>("mvr-1 promoted with its scale", "mvr-1", |m| {
        let m = m?;
        (m.labels()
            .get("numaplane.numaproj.io/upgrade-state")
            .map(String::as_str)
            == Some("promoted")
            && m.spec["scale"]["min"] == json!(2)
            && m.spec["scale"]["max"] == json!(3))
        .then_some(())
    })
    .await;
    h.assert_invariants().await;
}

/// Applies an Argo Rollouts (Cluster)AnalysisTemplate as the test user.
async fn apply_template(h: &Harness, kind: &str, body: Value) {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::core::{ApiResource, GroupVersionKind};
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", kind));
    let name = body["metadata"]["name"].as_str().expect("name").to_string();
    let api: Api<DynamicObject> = if kind == "ClusterAnalysisTemplate" {
        Api::all_with(h.client.clone(), &ar)
    } else {
        Api::namespaced_with(h.client.clone(), &h.ns, &ar)
    };
    let obj: DynamicObject = serde_json::from_value(body).expect("template");
    api.patch(
        &name,
        &PatchParams::apply("test-user").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
}

/// CONTRIBUTING.md: a MonoVertex trial judged by two templates, merged as Argo Rollouts merges
/// them: the sample template, and a namespaced template whose nested references name a
/// ClusterAnalysisTemplate (with a dry-run metric) and the sample template again (used once).
#[tokio::test]
async fn monovertex_trials_are_judged_by_merged_nested_templates() {
    use numaplane_api::MonoVertexRollout;
    let h = Harness::start_real("real-ar-mv2", CONFIG).await;
    apply_sample_template(&h, "numaplane.numaproj.io_v1alpha1_monovertexrollout.yaml").await;
    let cluster = format!("read-messages-{}", h.ns);
    let query = "sum(monovtx_read_total{namespace=\"{{args.monovertex-namespace}}\", \
                 mvtx_name=\"{{args.upgrading-monovertex-name}}\"}) or vector(0)";
    apply_template(
        &h,
        "ClusterAnalysisTemplate",
        json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "ClusterAnalysisTemplate",
            "metadata": {"name": cluster},
            "spec": {
                "args": [{"name": "upgrading-monovertex-name"}, {"name": "monovertex-namespace"}],
                "metrics": [{
                    "name": "read-messages", "interval": "1s", "count": 3,
                    "successCondition": "result[0] > 0",
                    "provider": {"prometheus": {
                        "address": "http://prometheus-kube-prometheus-prometheus.prometheus.svc.cluster.local:9090",
                        "query": query
                    }}
                }],
                "dryRun": [{"metricName": "read-messages"}]
            }
        }),
    )
    .await;
    apply_template(
        &h,
        "AnalysisTemplate",
        json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisTemplate",
            "metadata": {"name": "wrapper"},
            "spec": {"templates": [
                {"templateName": cluster, "clusterScope": true},
                {"templateName": "mvtx-acknowledged-messages"}
            ]}
        }),
    )
    .await;
    let with_templates = |sink: &str| {
        let mut r = mvr(sink);
        r["spec"]["strategy"]["analysis"]["templates"] = json!([
            {"templateName": "mvtx-acknowledged-messages"},
            {"templateName": "wrapper"}
        ]);
        r
    };
    h.apply::<MonoVertexRollout>(with_templates(SINK)).await;
    h.until::<MonoVertexRollout, _, _>("mvr-0 deployed", "mvr", settled)
        .await;
    h.apply::<MonoVertexRollout>(with_templates(SINK2)).await;
    h.until::<MonoVertexRollout, _, _>("mvr-1 promoted", "mvr", |r| {
        settled(r)?;
        let up = r?
            .status
            .as_ref()?
            .progressive_status
            .as_ref()?
            .upgrading_mono_vertex_status
            .clone()?;
        (up.child.name == "mvr-1" && up.child.assessment_result == Some(AssessmentResult::Success))
            .then_some(())
    })
    .await;
    let run: AnalysisRun = h.api().get("monovertex-mvr-1").await.expect("AnalysisRun");
    assert_eq!(run_phase(&run), "Successful", "{:?}", run.status);
    let names: Vec<&str> = run.spec["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(names, ["acknowledged-messages", "read-messages"]);
    assert_eq!(run.spec["dryRun"], json!([{"metricName": "read-messages"}]));
    let measured: Vec<String> = measurements(&run).into_iter().map(|(m, _, _)| m).collect();
    assert!(
        measured.iter().any(|m| m == "read-messages"),
        "{measured:?}"
    );
    assert!(
        measured.iter().any(|m| m == "acknowledged-messages"),
        "{measured:?}"
    );
    let del = kube::api::DeleteParams::default();
    let ar = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "ClusterAnalysisTemplate",
    ));
    let _ = kube::api::Api::<kube::api::DynamicObject>::all_with(h.client.clone(), &ar)
        .delete(&cluster, &del)
        .await;
    h.assert_invariants().await;
}

/// A finished AnalysisRun is acted on when Argo Rollouts finishes it, not at the trial's next
/// assessment sample: with a 30 s sample interval, the trial is promoted within seconds of its
/// run succeeding (the rollout is woken by the run's watch event).
#[tokio::test]
async fn a_finished_run_is_acted_on_before_the_next_sample() {
    use numaplane_api::MonoVertexRollout;
    use numaplane_api::numaflow::MonoVertex;
    use std::time::{Duration, Instant};
    let h = Harness::start_real("real-ar-wake", CONFIG).await;
    apply_sample_template(&h, SHIPPED_TEMPLATES).await;
    let slow_samples = |sink: &str| {
        let mut r = mvr(sink);
        r["spec"]["strategy"]["progressive"] = json!({"assessmentSchedule": "0,120,1,30"});
        r
    };
    h.apply::<MonoVertexRollout>(slow_samples(SINK)).await;
    h.until::<MonoVertexRollout, _, _>("mvr-0 deployed", "mvr", settled)
        .await;
    h.apply::<MonoVertexRollout>(slow_samples(SINK2)).await;
    h.until::<AnalysisRun, _, _>("the run succeeded", "monovertex-mvr-1", |r| {
        (run_phase(r?) == "Successful").then_some(())
    })
    .await;
    let finished = Instant::now();
    h.until::<MonoVertex, _, _>("mvr-1 promoted", "mvr-1", |m| {
        (m?.labels()
            .get("numaplane.numaproj.io/upgrade-state")
            .map(String::as_str)
            == Some("promoted"))
        .then_some(())
    })
    .await;
    let after = finished.elapsed();
    assert!(
        after < Duration::from_secs(10),
        "promoted {after:?} after its run succeeded: waited for the 30 s sample"
    );
    h.assert_invariants().await;
}
