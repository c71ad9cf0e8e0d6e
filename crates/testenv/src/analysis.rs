//! An Argo Rollouts (v1.8.4) AnalysisRun stand-in (scenarios.md B.8).
//!
//! It watches `argoproj.io/v1alpha1` AnalysisRuns and runs them like the Argo controller does —
//! validation, scheduled measurements, per-metric counters, metric and run phases, `runSummary`,
//! `startedAt`/`completedAt` — except that measurements are not queried from Prometheus: each
//! one's result is the outcome the test directed for that run ([`AnalysisOutcome`]), and
//! measurements are taken every [`AnalysisConfig::step`] instead of every metric `interval`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context as _;
use chrono::{DateTime, SecondsFormat, Utc};
use futures::{
    StreamExt,
    channel::mpsc::{UnboundedSender, unbounded},
    future,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams, PostParams},
    core::ApiResource,
    runtime::{Controller, controller::Action, watcher},
};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// What every measurement of a run yields, and so how the run ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AnalysisOutcome {
    /// Measurements succeed; the run ends `Successful`.
    #[default]
    Successful,
    /// Measurements fail (an empty result, `[]`); the run ends `Failed` once `failureLimit` is exceeded.
    Failed,
    /// Measurements error (provider unreachable); the run ends `Error` after `consecutiveErrorLimit`.
    Error,
    /// Measurements are inconclusive; the run ends `Inconclusive`.
    Inconclusive,
    /// No measurement ever completes: the run stays `Running`.
    Never,
}

/// Knobs of the stand-in.
#[derive(Clone, Debug)]
pub struct AnalysisConfig {
    /// Watch only this namespace; `None` watches the whole cluster.
    pub namespace: Option<String>,
    /// Time between measurements (replaces each metric's `interval`). Default 500 ms.
    pub step: Duration,
    /// A metric whose rules would measure forever (an `interval` with neither `count` nor
    /// `consecutiveSuccessLimit`) is assessed with the directed outcome after this many
    /// measurements. Default 5.
    pub max_measurements: i64,
    /// Outcome of runs without a directed one. Default [`AnalysisOutcome::Successful`].
    pub default_outcome: AnalysisOutcome,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            step: Duration::from_millis(500),
            max_measurements: 5,
            default_outcome: AnalysisOutcome::Successful,
        }
    }
}

/// Handle to a running stand-in; clones share it, the task stops on [`AnalysisStandIn::shutdown`]
/// or when the last clone is dropped. Like the simulator, it runs on the Tokio runtime that
/// started it: start one per test (e.g. [`AnalysisStandIn::start_in_namespace`]).
#[derive(Clone)]
pub struct AnalysisStandIn {
    inner: Arc<Inner>,
}

struct Inner {
    ctx: Arc<Ctx>,
    task: JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Ctx {
    client: Client,
    /// Re-evaluates every run when a directive changes.
    trigger: UnboundedSender<()>,
    config: AnalysisConfig,
    default_outcome: Mutex<AnalysisOutcome>,
    outcomes: Mutex<HashMap<(String, String), AnalysisOutcome>>,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct StandInError(#[from] kube::Error);

fn analysis_run_resource() -> ApiResource {
    ApiResource {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "AnalysisRun".into(),
        plural: "analysisruns".into(),
    }
}

impl AnalysisStandIn {
    /// Starts a cluster-wide stand-in with the default [`AnalysisConfig`].
    pub async fn start(client: Client) -> anyhow::Result<AnalysisStandIn> {
        Self::start_with(client, AnalysisConfig::default()).await
    }

    /// Starts a stand-in watching only `namespace`, otherwise with the default [`AnalysisConfig`].
    pub async fn start_in_namespace(
        client: Client,
        namespace: &str,
    ) -> anyhow::Result<AnalysisStandIn> {
        let config = AnalysisConfig {
            namespace: Some(namespace.to_owned()),
            ..AnalysisConfig::default()
        };
        Self::start_with(client, config).await
    }

    /// Starts a stand-in; fails if the AnalysisRun CRD is not installed.
    pub async fn start_with(
        client: Client,
        config: AnalysisConfig,
    ) -> anyhow::Result<AnalysisStandIn> {
        let ar = analysis_run_resource();
        Api::<DynamicObject>::all_with(client.clone(), &ar)
            .list(&ListParams::default().limit(1))
            .await
            .context("the AnalysisRun CRD must be installed")?;
        let api = match &config.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let (trigger, trigger_rx) = unbounded();
        let ctx = Arc::new(Ctx {
            client,
            trigger,
            default_outcome: Mutex::new(config.default_outcome),
            config,
            outcomes: Mutex::new(HashMap::new()),
        });
        let stream = Controller::new_with(api, watcher::Config::default(), ar)
            .reconcile_all_on(trigger_rx)
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|res| {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "analysis stand-in error");
                }
                future::ready(())
            });
        let task = tokio::spawn(stream);
        Ok(AnalysisStandIn {
            inner: Arc::new(Inner { ctx, task }),
        })
    }

    /// Directs the outcome of the AnalysisRun `namespace/name` (it need not exist yet). Takes
    /// effect from its next measurement; a `Never` run resumes measuring.
    pub fn set_outcome(&self, namespace: &str, name: &str, outcome: AnalysisOutcome) {
        let mut g = self
            .inner
            .ctx
            .outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        g.insert((namespace.to_owned(), name.to_owned()), outcome);
        drop(g);
        let _ = self.inner.ctx.trigger.unbounded_send(());
    }

    /// Directs the outcome of every run without its own directive.
    pub fn set_default_outcome(&self, outcome: AnalysisOutcome) {
        *self
            .inner
            .ctx
            .default_outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = outcome;
        let _ = self.inner.ctx.trigger.unbounded_send(());
    }

    /// Stops watching (runs are left as they are).
    pub fn shutdown(&self) {
        self.inner.task.abort();
    }
}

impl Ctx {
    fn outcome(&self, ns: &str, name: &str) -> AnalysisOutcome {
        let directed = self
            .outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(ns.to_owned(), name.to_owned()))
            .copied();
        directed.unwrap_or_else(|| {
            *self
                .default_outcome
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        })
    }
}

fn error_policy(_run: Arc<DynamicObject>, _err: &StandInError, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

fn now_str(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn is_terminal(phase: &str) -> bool {
    matches!(phase, "Successful" | "Failed" | "Error" | "Inconclusive")
}

/// Severity order of completed phases: Successful < Inconclusive < Error < Failed.
fn severity(phase: &str) -> u8 {
    match phase {
        "Successful" => 1,
        "Inconclusive" => 2,
        "Error" => 3,
        "Failed" => 4,
        _ => 0,
    }
}

/// An int-or-string limit (`failureLimit: 3` or `"3"`).
fn limit(metric: &Value, key: &str, default: i64) -> i64 {
    match metric.get(key) {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(default),
        Some(Value::String(s)) => s.parse().unwrap_or(default),
        _ => default,
    }
}

fn has_interval(metric: &Value) -> bool {
    metric
        .get("interval")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

/// Argo's spec validation (B.8 step 1); the error message when invalid.
fn validate(spec: &Value) -> Option<String> {
    for arg in spec
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if arg.get("value").is_none() && arg.get("valueFrom").is_none() {
            let name = arg.get("name").and_then(Value::as_str).unwrap_or("");
            return Some(format!("args.{name} was not resolved"));
        }
    }
    let metrics = spec
        .get("metrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if metrics.is_empty() {
        return Some("at least one metric is required".into());
    }
    for (i, m) in metrics.iter().enumerate() {
        let fl = limit(m, "failureLimit", 0);
        let csl = limit(m, "consecutiveSuccessLimit", 0);
        let count = limit(m, "count", 0);
        let prefix = format!("metrics[{i}]");
        if fl < -1 {
            return Some(format!("{prefix}: failureLimit must be >= -1"));
        }
        if fl == -1 && csl == 0 {
            return Some(format!(
                "{prefix}: failureLimit and consecutiveSuccessLimit cannot both be disabled"
            ));
        }
        if count > 0 && count < fl + csl {
            return Some(format!(
                "{prefix}: count must be >= failureLimit + consecutiveSuccessLimit"
            ));
        }
        if count > 1 && !has_interval(m) {
            return Some(format!(
                "{prefix}: interval must be specified when count > 1"
            ));
        }
        let providers = m
            .get("provider")
            .and_then(Value::as_object)
            .map_or(0, |p| p.len());
        if providers != 1 {
            return Some(format!("{prefix}: exactly one provider must be specified"));
        }
    }
    None
}

/// The metric phase from its counters (B.8 step 6), the cap forcing the directed outcome.
fn assess(
    metric: &Value,
    r: &Value,
    outcome_phase: &str,
    max_measurements: i64,
) -> (String, String) {
    let get = |k: &str| r.get(k).and_then(Value::as_i64).unwrap_or(0);
    let name = metric.get("name").and_then(Value::as_str).unwrap_or("");
    let fl = limit(metric, "failureLimit", 0);
    let il = limit(metric, "inconclusiveLimit", 0);
    let cel = limit(metric, "consecutiveErrorLimit", 4);
    let csl = limit(metric, "consecutiveSuccessLimit", 0);
    let count_limit = match limit(metric, "count", 0) {
        c if c > 0 => Some(c),
        _ if !has_interval(metric) => Some(1),
        _ => None,
    };
    if fl >= 0 && get("failed") > fl {
        let m = format!(
            "Metric \"{name}\" assessed Failed due to failed ({}) > failureLimit ({fl})",
            get("failed")
        );
        return ("Failed".into(), m);
    }
    if get("inconclusive") > il {
        let m = format!(
            "Metric \"{name}\" assessed Inconclusive due to inconclusive ({}) > inconclusiveLimit ({il})",
            get("inconclusive")
        );
        return ("Inconclusive".into(), m);
    }
    if get("consecutiveError") > cel {
        let m = format!(
            "Metric \"{name}\" assessed Error due to consecutiveErrors ({}) > consecutiveErrorLimit ({cel})",
            get("consecutiveError")
        );
        return ("Error".into(), m);
    }
    if csl > 0 && get("consecutiveSuccess") >= csl {
        return ("Successful".into(), String::new());
    }
    if count_limit.is_some_and(|c| get("count") >= c) {
        let phase = match (fl >= 0, csl > 0) {
            (true, true) => "Inconclusive",
            (false, true) => "Failed",
            _ => "Successful",
        };
        return (phase.into(), String::new());
    }
    if get("count") + get("error") >= max_measurements {
        return (
            outcome_phase.into(),
            format!("Metric \"{name}\" assessed {outcome_phase} (stand-in measurement cap)"),
        );
    }
    ("Running".into(), String::new())
}

/// One simulated measurement with the directed result; updates the counters of `r`.
fn measure(r: &mut Value, outcome: AnalysisOutcome, started: DateTime<Utc>, t: DateTime<Utc>) {
    let inc = |r: &mut Value, k: &str| {
        let v = r.get(k).and_then(Value::as_i64).unwrap_or(0) + 1;
        r[k] = json!(v);
    };
    let mut m = json!({"startedAt": now_str(started), "finishedAt": now_str(t)});
    match outcome {
        AnalysisOutcome::Successful => {
            m["phase"] = json!("Successful");
            m["value"] = json!("[1]");
            inc(r, "successful");
            inc(r, "count");
            inc(r, "consecutiveSuccess");
            r["consecutiveError"] = json!(0);
        }
        AnalysisOutcome::Failed | AnalysisOutcome::Inconclusive => {
            let (phase, key, value) = if outcome == AnalysisOutcome::Failed {
                ("Failed", "failed", "[]")
            } else {
                ("Inconclusive", "inconclusive", "[0]")
            };
            m["phase"] = json!(phase);
            m["value"] = json!(value);
            inc(r, key);
            inc(r, "count");
            r["consecutiveSuccess"] = json!(0);
            r["consecutiveError"] = json!(0);
        }
        AnalysisOutcome::Error | AnalysisOutcome::Never => {
            m["phase"] = json!("Error");
            m["message"] =
                json!("Post \"http://prometheus:9090/api/v1/query\": dial tcp: connection refused");
            inc(r, "error");
            inc(r, "consecutiveError");
        }
    }
    let mut ms = r
        .get("measurements")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    ms.push(m);
    let keep = ms.len().saturating_sub(10);
    r["measurements"] = json!(ms.split_off(keep));
}

fn outcome_phase(o: AnalysisOutcome) -> &'static str {
    match o {
        AnalysisOutcome::Successful => "Successful",
        AnalysisOutcome::Failed => "Failed",
        AnalysisOutcome::Error => "Error",
        AnalysisOutcome::Inconclusive => "Inconclusive",
        AnalysisOutcome::Never => "Running",
    }
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, StandInError> {
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ns, &analysis_run_resource());
    let Some(run) = api.get_opt(&obj.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let mut st = match run.data.get("status") {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => json!({}),
    };
    let phase = st
        .get("phase")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if is_terminal(&phase) || run.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let spec = run.data.get("spec").cloned().unwrap_or_else(|| json!({}));
    let t = Utc::now();
    let step = ctx.config.step;
    if phase.is_empty() {
        st["phase"] = json!("Pending");
        write(&api, &run, st).await?;
        return Ok(Action::await_change());
    }
    if let Some(msg) = validate(&spec) {
        st["phase"] = json!("Error");
        st["message"] = json!(msg);
        st["startedAt"] = st
            .get("startedAt")
            .cloned()
            .unwrap_or_else(|| json!(now_str(t)));
        st["completedAt"] = json!(now_str(t));
        write(&api, &run, st).await?;
        return Ok(Action::await_change());
    }
    let metrics = spec
        .get("metrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if phase == "Pending" {
        st["phase"] = json!("Running");
        st["startedAt"] = json!(now_str(t));
        let results: Vec<Value> = metrics
            .iter()
            .map(|m| {
                json!({"name": m.get("name").cloned().unwrap_or(json!("")), "phase": "Running", "count": 0,
                       "successful": 0, "failed": 0, "inconclusive": 0, "error": 0,
                       "consecutiveError": 0, "consecutiveSuccess": 0, "measurements": []})
            })
            .collect();
        st["metricResults"] = json!(results);
        st["runSummary"] = run_summary(&results);
        write(&api, &run, st).await?;
        return Ok(Action::requeue(step));
    }
    if spec
        .get("terminate")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        st["phase"] = json!("Successful");
        st["message"] = json!("Run Terminated");
        st["completedAt"] = json!(now_str(t));
        write(&api, &run, st).await?;
        return Ok(Action::await_change());
    }
    let outcome = ctx.outcome(&ns, &run.name_any());
    if outcome == AnalysisOutcome::Never {
        return Ok(Action::await_change());
    }
    // Measurements are due `step` after the previous one (or after the start).
    let last = st
        .get("metricResults")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            r.get("measurements")?
                .as_array()?
                .last()?
                .get("finishedAt")?
                .as_str()
                .map(str::to_owned)
        })
        .chain(
            st.get("startedAt")
                .and_then(Value::as_str)
                .map(str::to_owned),
        )
        .filter_map(|s| {
            DateTime::parse_from_rfc3339(&s)
                .ok()
                .map(|d| d.with_timezone(&Utc))
        })
        .max()
        .unwrap_or(t);
    let due = last + chrono::Duration::from_std(step).unwrap_or(chrono::Duration::zero());
    if t < due {
        return Ok(Action::requeue((due - t).to_std().unwrap_or(step)));
    }
    let mut results = st
        .get("metricResults")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut message = String::new();
    for (metric, r) in metrics.iter().zip(results.iter_mut()) {
        if r.get("phase").and_then(Value::as_str) != Some("Running") {
            continue;
        }
        measure(r, outcome, last.min(t), t);
        let (p, msg) = assess(
            metric,
            r,
            outcome_phase(outcome),
            ctx.config.max_measurements,
        );
        r["phase"] = json!(p);
        if !msg.is_empty() && message.is_empty() && p != "Successful" {
            message = msg;
        }
    }
    let phases: Vec<String> = results
        .iter()
        .map(|r| {
            r.get("phase")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    // A Failed, Error or Inconclusive metric stops the run; otherwise it waits for every metric.
    let stop = phases
        .iter()
        .any(|p| matches!(p.as_str(), "Failed" | "Error" | "Inconclusive"));
    let all_done = phases.iter().all(|p| is_terminal(p));
    st["runSummary"] = run_summary(&results);
    st["metricResults"] = json!(results);
    if stop || all_done {
        let worst = phases
            .iter()
            .filter(|p| is_terminal(p))
            .max_by_key(|p| severity(p))
            .cloned();
        st["phase"] = json!(worst.unwrap_or_else(|| "Successful".into()));
        st["message"] = json!(message);
        st["completedAt"] = json!(now_str(t));
        write(&api, &run, st).await?;
        return Ok(Action::await_change());
    }
    write(&api, &run, st).await?;
    Ok(Action::requeue(step))
}

fn run_summary(results: &[Value]) -> Value {
    let n = |phase: &str| {
        results
            .iter()
            .filter(|r| r.get("phase").and_then(Value::as_str) == Some(phase))
            .count()
    };
    json!({
        "count": results.len(),
        "successful": n("Successful"),
        "failed": n("Failed"),
        "inconclusive": n("Inconclusive"),
        "error": n("Error"),
    })
}

/// AnalysisRuns have no status subresource: the whole object is replaced (resourceVersion-guarded).
async fn write(
    api: &Api<DynamicObject>,
    run: &DynamicObject,
    status: Value,
) -> Result<(), StandInError> {
    let mut updated = run.clone();
    updated.data["status"] = status;
    let pp = PostParams {
        field_manager: Some("argo-rollouts-stand-in".into()),
        ..PostParams::default()
    };
    api.replace(&run.name_any(), &pp, &updated).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e2e_metric() -> Value {
        json!({"name": "m", "interval": "60s", "failureLimit": 3, "consecutiveSuccessLimit": 3,
               "successCondition": "true", "provider": {"prometheus": {"query": "q"}}})
    }

    fn run_until_done(metric: &Value, outcome: AnalysisOutcome) -> (String, i64) {
        let mut r = json!({"name": "m", "phase": "Running"});
        let t = Utc::now();
        for i in 1..=20 {
            measure(&mut r, outcome, t, t);
            let (p, _) = assess(metric, &r, outcome_phase(outcome), 100);
            if p != "Running" {
                return (p, i);
            }
        }
        ("Running".into(), 20)
    }

    #[test]
    fn e2e_timings_follow_the_counters() {
        assert_eq!(
            run_until_done(&e2e_metric(), AnalysisOutcome::Successful),
            ("Successful".into(), 3)
        );
        assert_eq!(
            run_until_done(&e2e_metric(), AnalysisOutcome::Failed),
            ("Failed".into(), 4)
        );
        assert_eq!(
            run_until_done(&e2e_metric(), AnalysisOutcome::Error),
            ("Error".into(), 5)
        );
        assert_eq!(
            run_until_done(&e2e_metric(), AnalysisOutcome::Inconclusive),
            ("Inconclusive".into(), 1)
        );
    }

    #[test]
    fn single_measurement_without_interval() {
        let m = json!({"name": "m", "provider": {"web": {}}});
        assert_eq!(
            run_until_done(&m, AnalysisOutcome::Successful),
            ("Successful".into(), 1)
        );
        assert_eq!(
            run_until_done(&m, AnalysisOutcome::Failed),
            ("Failed".into(), 1)
        );
    }

    #[test]
    fn validation_errors() {
        assert!(validate(&json!({"metrics": [e2e_metric()]})).is_none());
        assert_eq!(
            validate(&json!({"args": [{"name": "x"}], "metrics": [e2e_metric()]})).as_deref(),
            Some("args.x was not resolved")
        );
        assert!(
            validate(&json!({"metrics": [{"name": "m", "count": 2, "provider": {"p": {}}}]}))
                .is_some()
        );
        assert!(validate(&json!({"metrics": [{"name": "m", "provider": {}}]})).is_some());
        assert!(validate(&json!({"metrics": []})).is_some());
    }

    #[test]
    fn measurements_are_capped_at_ten() {
        let mut r = json!({"name": "m"});
        let t = Utc::now();
        for _ in 0..15 {
            measure(&mut r, AnalysisOutcome::Successful, t, t);
        }
        assert_eq!(r["measurements"].as_array().map(Vec::len), Some(10));
        assert_eq!(r["count"], json!(15));
    }
}
