//! The AnalysisRun stand-in against the real test control plane: each directed outcome ends in
//! the matching phase with Argo-shaped metric results.

use std::time::Duration;

use kube::{
    Api, Client,
    api::{DynamicObject, PostParams},
    core::ApiResource,
    runtime::wait::await_condition,
};
use numaplane_testenv::{
    AnalysisStandIn, TestEnv,
    analysis::{AnalysisConfig, AnalysisOutcome},
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn runs(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "AnalysisRun".into(),
        plural: "analysisruns".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// The e2e metric shape: interval 60 s, failureLimit 3, consecutiveSuccessLimit 3.
fn metric(name: &str) -> Value {
    json!({
        "name": name,
        "interval": "60s",
        "failureLimit": 3,
        "consecutiveSuccessLimit": 3,
        "successCondition": "len(result) == 0 || result[0] >= 0",
        "provider": {"prometheus": {"address": "http://prometheus:9090", "query": "vector(1)"}},
    })
}

async fn setup(prefix: &str) -> (Api<DynamicObject>, String, AnalysisStandIn) {
    // RUST_LOG=numaplane_testenv=debug shows the simulated controllers' errors.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace(prefix).await;
    let config = AnalysisConfig {
        namespace: Some(ns.clone()),
        step: Duration::from_millis(200),
        ..AnalysisConfig::default()
    };
    let stand_in = AnalysisStandIn::start_with(client.clone(), config)
        .await
        .expect("stand-in starts");
    (runs(&client, &ns), ns, stand_in)
}

async fn create_run(api: &Api<DynamicObject>, name: &str, spec: Value) {
    let run: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AnalysisRun",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "numaplane"}},
        "spec": spec,
    }))
    .expect("run");
    api.create(&PostParams::default(), &run)
        .await
        .expect("create run");
}

fn status(run: &DynamicObject) -> Value {
    run.data.get("status").cloned().unwrap_or(Value::Null)
}

async fn wait_phase(api: &Api<DynamicObject>, name: &str, phase: &'static str) -> DynamicObject {
    let cond = move |o: Option<&DynamicObject>| o.is_some_and(|r| status(r)["phase"] == phase);
    match tokio::time::timeout(WAIT, await_condition(api.clone(), name, cond)).await {
        Ok(Ok(Some(r))) => r,
        other => {
            let last = api.get_opt(name).await.ok().flatten().map(|r| status(&r));
            panic!("run {name} did not reach {phase}: {other:?}; last status {last:#?}")
        }
    }
}

fn result<'a>(st: &'a Value, metric: &str) -> &'a Value {
    st["metricResults"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == metric))
        .unwrap_or_else(|| panic!("no metric result for {metric} in {st:#}"))
}

#[tokio::test]
async fn directed_outcomes_end_in_their_phase() {
    let (api, ns, stand_in) = setup("analysis").await;
    // (run, outcome, final phase, expected (count, successful, failed, inconclusive, error) of each metric)
    let cases = [
        (
            "ok",
            AnalysisOutcome::Successful,
            "Successful",
            (3, 3, 0, 0, 0),
        ),
        ("bad", AnalysisOutcome::Failed, "Failed", (4, 0, 4, 0, 0)),
        ("broken", AnalysisOutcome::Error, "Error", (0, 0, 0, 0, 5)),
        (
            "unsure",
            AnalysisOutcome::Inconclusive,
            "Inconclusive",
            (1, 0, 0, 1, 0),
        ),
    ];
    for (name, outcome, _, _) in &cases {
        stand_in.set_outcome(&ns, name, *outcome);
        create_run(
            &api,
            name,
            json!({"metrics": [metric("metric-1"), metric("metric-2")]}),
        )
        .await;
    }
    for (name, _, phase, (count, ok, failed, inconclusive, error)) in cases {
        let run = wait_phase(&api, name, phase).await;
        let st = status(&run);
        assert!(st["startedAt"].is_string(), "{name}: startedAt");
        assert!(st["completedAt"].is_string(), "{name}: completedAt");
        assert_eq!(st["runSummary"]["count"], json!(2), "{name}: runSummary");
        for m in ["metric-1", "metric-2"] {
            let r = result(&st, m);
            assert_eq!(r["phase"], json!(phase), "{name}/{m}");
            let counters = (
                &r["count"],
                &r["successful"],
                &r["failed"],
                &r["inconclusive"],
                &r["error"],
            );
            let want = (
                &json!(count),
                &json!(ok),
                &json!(failed),
                &json!(inconclusive),
                &json!(error),
            );
            assert_eq!(counters, want, "{name}/{m} counters");
            let measurements = r["measurements"].as_array().expect("measurements");
            assert_eq!(
                measurements.len() as i64,
                count + error,
                "{name}/{m} measurements"
            );
            assert!(
                measurements
                    .iter()
                    .all(|x| x["phase"].is_string() && x["finishedAt"].is_string())
            );
        }
        if phase != "Successful" {
            assert!(
                st["message"].as_str().is_some_and(|m| m.contains(phase)),
                "{name}: message {st:#}"
            );
        }
    }
    let bad = api.get("bad").await.expect("bad run");
    let last = result(&status(&bad), "metric-1")["measurements"][3].clone();
    assert_eq!(
        (last["phase"].clone(), last["value"].clone()),
        (json!("Failed"), json!("[]"))
    );
}

#[tokio::test]
async fn never_stays_running_and_default_applies() {
    let (api, ns, stand_in) = setup("analysis-never").await;
    stand_in.set_default_outcome(AnalysisOutcome::Failed);
    stand_in.set_outcome(&ns, "forever", AnalysisOutcome::Never);
    create_run(&api, "forever", json!({"metrics": [metric("m")]})).await;
    create_run(
        &api,
        "defaulted",
        json!({"metrics": [{"name": "once", "provider": {"web": {"url": "x"}}}]}),
    )
    .await;

    let defaulted = wait_phase(&api, "defaulted", "Failed").await;
    let r = result(&status(&defaulted), "once").clone();
    assert_eq!(
        (r["count"].clone(), r["failed"].clone()),
        (json!(1), json!(1)),
        "no interval: one measurement"
    );

    wait_phase(&api, "forever", "Running").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = status(&api.get("forever").await.expect("run"));
    assert_eq!(st["phase"], json!("Running"));
    assert!(st.get("completedAt").is_none());
    assert_eq!(result(&st, "m")["phase"], json!("Running"));

    // Redirecting a running run takes effect from its next measurement.
    stand_in.set_outcome(&ns, "forever", AnalysisOutcome::Successful);
    wait_phase(&api, "forever", "Successful").await;
}

#[tokio::test]
async fn invalid_runs_error_at_once() {
    let (api, _ns, _stand_in) = setup("analysis-invalid").await;
    create_run(
        &api,
        "unresolved",
        json!({"args": [{"name": "pipeline"}], "metrics": [metric("m")]}),
    )
    .await;
    let run = wait_phase(&api, "unresolved", "Error").await;
    assert_eq!(
        status(&run)["message"],
        json!("args.pipeline was not resolved")
    );
}
