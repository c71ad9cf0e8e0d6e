//! Progressive upgrades at scale: N/10 PipelineRollouts and N/10 MonoVertexRollouts under the
//! progressive strategy (namespace-level config, the shipped USDE config) with a short
//! assessment schedule, upgraded all at once; then upgraded again with half the trials made to
//! fail (an image the simulator never brings up). Measures the time until every trial is judged
//! (and, on success, every replaced child drained and deleted), and how late each verdict came
//! against the moment it was due: for a promotion the end of the trial's continuous healthy
//! `period`, for a failure the end of the assessment window. A third run upgrades them once more
//! judged also by the shipped AnalysisTemplates (config/samples/analysis-templates.yaml),
//! evaluated by the real Argo Rollouts analysis controller with PromQL against a real Prometheus
//! scraping the metrics stand-in (the counters of the simulator's Ready pods); a promotion is
//! then due once the healthy period has passed and the AnalysisRun has succeeded, whichever
//! comes last.

use crate::workload::{self, ISB_NAME, converged, reflect};
use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use numaplane_api::keys::labels;
use numaplane_api::numaflow::{AnalysisRun, MonoVertex, Pipeline};
use numaplane_api::{MonoVertexRollout, PipelineRollout};
use numaplane_testenv::simulator::is_healthy;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The assessment schedule `delay,end,period,interval` = `0,<end>,5,1`: promoted once healthy
/// for 5 s, failed if not by `end` seconds after it starts.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// 120 s by default: at N=1000 the simulator needs more than 20 s to bring a hundred new
    /// trials up, so a shorter window fails healthy trials (the first run did); at N=10,000 it
    /// needs many minutes for a thousand.
    pub end_seconds: u64,
}

impl Schedule {
    fn text(self) -> String {
        format!("0,{},5,1", self.end_seconds)
    }

    fn end(self) -> f64 {
        self.end_seconds as f64
    }
}

const PERIOD_S: f64 = 5.0;
const IMAGE: &str = "quay.io/numaio/numaflow-go/map-cat:stable";
const SOURCE_IMAGE: &str = "quay.io/numaio/numaflow-go/source-simple-source:stable";
/// The simulator never brings up a container with this in its image.
const BAD: &str = "badcat";

pub fn pipeline_names(n: usize) -> Vec<String> {
    (0..(n / 10).max(1))
        .map(|i| format!("ppr-{i:04}"))
        .collect()
}

pub fn monovertex_names(n: usize) -> Vec<String> {
    (0..(n / 10).max(1))
        .map(|i| format!("pmvr-{i:04}"))
        .collect()
}

/// The AnalysisTemplates Numaplane ships for Numaflow's real metric names (the reference
/// samples' templates query names no pod exports), and the two the analysis run uses.
const SHIPPED_TEMPLATES: &str = "config/samples/analysis-templates.yaml";
const PIPELINE_TEMPLATE: &str = "pipeline-acknowledges-what-it-reads";
const MONOVERTEX_TEMPLATE: &str = "monovertex-acknowledges-what-it-reads";

/// The templates' arguments in seconds (they default to minutes): a measurement a second,
/// eight successes in a row pass, so the run outlasts the 5 s healthy period and its verdict is
/// what the promotion waits for; the first failure fails.
fn analysis_args() -> Value {
    json!([
        {"name": "interval", "value": "1s"},
        {"name": "success-limit", "value": "8"},
        {"name": "failure-limit", "value": "0"}
    ])
}

/// The rollout strategy: the short schedule, and with `template` an AnalysisTemplate too.
fn strategy(schedule: Schedule, template: Option<&str>) -> Value {
    let mut s = json!({"progressive": {"assessmentSchedule": schedule.text()}});
    if let Some(t) = template {
        s["analysis"] = json!({"templates": [{"templateName": t}], "args": analysis_args()});
    }
    s
}

/// A three-vertex pipeline whose `cat` vertex runs `tag` of the map-cat image; judged by the
/// shipped AnalysisTemplate too when `analysis`.
pub fn pipeline_rollout(name: &str, tag: &str, analysis: bool, schedule: Schedule) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {
            "strategy": strategy(schedule, analysis.then_some(PIPELINE_TEMPLATE)),
            "pipeline": {"spec": {
                "interStepBufferServiceName": ISB_NAME,
                "lifecycle": {"pauseGracePeriodSeconds": 10},
                "vertices": [
                    {"name": "in", "scale": {"min": 1, "max": 1},
                     "source": {"generator": {"rpu": 5, "duration": "1s"}}},
                    {"name": "cat", "scale": {"min": 1, "max": 1},
                     "udf": {"container": {"image": image(IMAGE, tag)}}},
                    {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
                ],
                "edges": [{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}]
            }}
        }
    })
}

/// A MonoVertex whose source runs `tag` of the simple-source image; judged by the sample
/// AnalysisTemplate too when `analysis`.
pub fn monovertex_rollout(name: &str, tag: &str, analysis: bool, schedule: Schedule) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": name},
        "spec": {
            "strategy": strategy(schedule, analysis.then_some(MONOVERTEX_TEMPLATE)),
            "monoVertex": {"spec": {
                "scale": {"min": 1, "max": 1},
                "source": {"udsource": {"container": {"image": image(SOURCE_IMAGE, tag)}}},
                "sink": {"blackhole": {}}
            }}
        }
    })
}

/// `base` with its tag replaced by `tag`; a tag naming [`BAD`] makes an image that never runs.
fn image(base: &str, tag: &str) -> String {
    let repo = base.rsplit_once(':').map_or(base, |(r, _)| r);
    if tag.contains(BAD) {
        format!("{repo}-{BAD}:{tag}")
    } else {
        format!("{repo}:{tag}")
    }
}

/// The shipped USDE config in the operator's namespace, as `config/install.yaml` installs it:
/// without one every change is carried as a data-loss change (pause-and-drain).
pub async fn install_usde(client: &Client) -> Result<()> {
    let operator_ns = numaplane_testenv::controlplane::OPERATOR_NAMESPACE;
    let namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": operator_ns}
    }))?;
    crate::rbac::apply(Api::all(client.clone()), &namespace).await?;
    let mut usde: ConfigMap = crate::rbac::read("config/manager/usde-config.yaml")?;
    usde.metadata.namespace = Some(operator_ns.to_string());
    crate::rbac::apply(Api::namespaced(client.clone(), operator_ns), &usde).await
}

/// Namespace `bench` under the progressive strategy, with the shipped USDE config in the
/// operator's namespace (the progressive strategy needs it to classify a change).
pub async fn configure(client: &Client, ns: &str) -> Result<()> {
    install_usde(client).await?;
    let strategy: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bench-strategy", "namespace": ns,
                     "labels": {"numaplane.numaproj.io/config": "namespace-level-config"}},
        "data": {"upgradeStrategy": "progressive"}
    }))?;
    crate::rbac::apply(Api::namespaced(client.clone(), ns), &strategy).await
}

/// The shipped AnalysisTemplates (config/samples/analysis-templates.yaml), as shipped but for their
/// namespace, in `ns`.
pub async fn apply_templates(client: &Client, ns: &str) -> Result<()> {
    use kube::api::{DynamicObject, Patch, PatchParams};
    use kube::core::{ApiResource, GroupVersionKind};
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "AnalysisTemplate",
    ));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    for name in [PIPELINE_TEMPLATE, MONOVERTEX_TEMPLATE] {
        let file = SHIPPED_TEMPLATES;
        let Some(mut template) = crate::rbac::read_documents(file)?
            .into_iter()
            .find(|d| d["kind"] == "AnalysisTemplate" && d["metadata"]["name"] == name)
        else {
            bail!("{file} has no AnalysisTemplate {name}");
        };
        template["metadata"]["namespace"] = json!(ns);
        let obj: DynamicObject = serde_json::from_value(template)?;
        api.patch(
            name,
            &PatchParams::apply("numaplane-bench").force(),
            &Patch::Apply(&obj),
        )
        .await
        .map_err(|e| anyhow::anyhow!("applying AnalysisTemplate {name}: {e}"))?;
    }
    Ok(())
}

/// Creates (or updates) every progressive rollout with image tag `tag`, the ones whose index
/// `fails` picks with a tag that never comes up, judged by the shipped AnalysisTemplates too when
/// `analysis`; returns each rollout's generation.
pub async fn apply(
    client: &Client,
    ns: &str,
    n: usize,
    tag: &str,
    analysis: bool,
    schedule: Schedule,
    fails: impl Fn(usize) -> bool,
) -> Result<(HashMap<String, i64>, HashMap<String, i64>)> {
    let tag_of = |i: usize| {
        if fails(i) {
            format!("{tag}-{BAD}")
        } else {
            tag.to_string()
        }
    };
    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), ns);
    let mvrs: Api<MonoVertexRollout> = Api::namespaced(client.clone(), ns);
    let p: Vec<Value> = pipeline_names(n)
        .iter()
        .enumerate()
        .map(|(i, name)| pipeline_rollout(name, &tag_of(i), analysis, schedule))
        .collect();
    let m: Vec<Value> = monovertex_names(n)
        .iter()
        .enumerate()
        .map(|(i, name)| monovertex_rollout(name, &tag_of(i), analysis, schedule))
        .collect();
    tokio::try_join!(workload::apply_all(&prs, p), workload::apply_all(&mvrs, m))
}

/// What the benchmark's watch saw of one child, by name (seconds since the epoch, stamped as
/// the watch event arrives).
#[derive(Debug, Default, Clone, Copy)]
struct ChildTimes {
    /// First seen: within the watch's delay of its creation.
    seen: Option<f64>,
    /// First seen up: phase Running with every condition True, as the simulated Numaflow
    /// controller reports a child whose vertices are ready. Its wait after `seen` is the
    /// simulator's; a trial's healthy window starting long after it is the operator's.
    up: Option<f64>,
    /// First seen labelled promoted, or its trial failed.
    promoted: Option<f64>,
    failed: Option<f64>,
}

type Children = std::sync::Arc<std::sync::Mutex<HashMap<String, ChildTimes>>>;

/// Whether a child's status says it is up, as the simulator itself judges it: phase Running
/// and every condition True.
fn is_up(status: Option<&Value>) -> bool {
    status.is_some_and(|st| is_healthy(st, &["Running"]))
}

/// Stamps `o` in `children`: the first time it is seen, seen up, labelled promoted, or failed.
fn stamp(children: &Children, o: &impl kube::Resource, status: Option<&Value>) {
    let now = epoch(SystemTime::now());
    let l = o.labels();
    let promoted = l.get(labels::UPGRADE_STATE).map(String::as_str) == Some("promoted");
    let failed = l.get(labels::PROGRESSIVE_RESULT_STATE).map(String::as_str) == Some("failed");
    let up = is_up(status);
    let mut m = children.lock().unwrap_or_else(|e| e.into_inner());
    let e = m.entry(o.name_any()).or_default();
    e.seen.get_or_insert(now);
    if up {
        e.up.get_or_insert(now);
    }
    if promoted {
        e.promoted.get_or_insert(now);
    }
    if failed {
        e.failed.get_or_insert(now);
    }
}

/// When each AnalysisRun was first seen finished (seconds since the epoch), by name.
type Finished = std::sync::Arc<std::sync::Mutex<HashMap<String, f64>>>;

/// Stamps `run` in `finished` the first time it is seen in a final phase.
fn stamp_run(finished: &Finished, run: &AnalysisRun) {
    let phase = run
        .status
        .as_ref()
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str);
    if matches!(
        phase,
        Some("Successful" | "Failed" | "Error" | "Inconclusive")
    ) {
        let now = epoch(SystemTime::now());
        let mut m = finished.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(run.name_any()).or_insert(now);
    }
}

/// How one rollout's upgrade went, as the observer saw it.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// The trial's name and its assessment times (seconds since the epoch), last seen in the
    /// rollout's status.
    trial: Option<String>,
    /// When the benchmark's watch first saw the trial, and first saw it up ([`ChildTimes`]).
    trial_seen: Option<f64>,
    trial_up: Option<f64>,
    window_start: Option<f64>,
    assessment_start: Option<f64>,
    /// When the trial's AnalysisRun was seen finished, if it had one.
    analysis_done: Option<f64>,
    /// When the trial was seen promoted, or labelled failed (seconds since the epoch).
    promoted_at: Option<f64>,
    failed_at: Option<f64>,
    /// When the API server received the promotion's label flip (the audit log): the trial's
    /// first patch after its healthy window began, a second after the window's start to be
    /// clear of the trial's creation (the start is recorded to the second).
    flip_sent: Option<f64>,
    /// Its trial was made to fail.
    to_fail: bool,
}

/// Figures of one progressive scenario.
#[derive(Debug, Default, serde::Serialize)]
pub struct Figures {
    /// The rollouts' `assessmentSchedule`.
    pub assessment_schedule: String,
    pub upgrades: usize,
    pub promoted: usize,
    pub failed: usize,
    /// Trials that failed though their image runs (judged unhealthy within the window).
    pub failed_unexpectedly: usize,
    /// Of those, the ones the benchmark's watch never saw up (phase Running, every condition
    /// True) before they were labelled failed: the simulator had not brought them up in time.
    pub failed_never_up: usize,
    /// Seconds from the watch first seeing a trial to seeing it up (the simulator's bring-up,
    /// over the trials seen up before any failure label).
    pub trial_up_p50_seconds: Option<f64>,
    pub trial_up_p99_seconds: Option<f64>,
    pub trial_up_max_seconds: Option<f64>,
    /// Seconds from the watch seeing a trial up to the healthy window's start the operator
    /// recorded in its status (truncated to the second, so down to -1 s).
    pub window_after_up_p50_seconds: Option<f64>,
    pub window_after_up_p99_seconds: Option<f64>,
    /// Trials whose AnalysisRun was seen finished, and of them the ones it held back (it
    /// finished after the healthy period ended).
    pub analysis_runs: usize,
    pub analysis_gated: usize,
    /// Seconds from the moment a promotion was due (end of the healthy period, or the end of
    /// its AnalysisRun if later) until the trial was seen labelled promoted.
    pub promotion_lateness_p50_seconds: Option<f64>,
    pub promotion_lateness_p99_seconds: Option<f64>,
    pub promotion_lateness_max_seconds: Option<f64>,
    /// The same until the API server received the promotion's label flip (the audit log):
    /// Numaplane's part, without the delay of the benchmark's watch. With an AnalysisTemplate
    /// the moment due is still when the benchmark's watch saw the run finish.
    pub promotion_write_lateness_p50_seconds: Option<f64>,
    pub promotion_write_lateness_p99_seconds: Option<f64>,
    pub promotion_write_lateness_max_seconds: Option<f64>,
    /// The same for failures (due at the end of the assessment window).
    pub failure_lateness_p50_seconds: Option<f64>,
    pub failure_lateness_p99_seconds: Option<f64>,
    pub api_requests_per_upgrade: f64,
    /// The controller's steady RSS once the progressive rollouts were created and settled,
    /// before the first upgrade: what the upgrades add is the scenario's RSS less this.
    pub rss_before_upgrades_mib: Option<f64>,
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn time_at(v: &Value, pointer: &str) -> Option<f64> {
    let s = v.pointer(pointer)?.as_str()?;
    let t: k8s_openapi::jiff::Timestamp = s.parse().ok()?;
    Some(t.as_millisecond() as f64 / 1000.0)
}

/// Independent watches of the progressive rollouts and their children.
pub struct Observer {
    prs: Store<PipelineRollout>,
    mvrs: Store<MonoVertexRollout>,
    pipelines: Store<Pipeline>,
    monovertices: Store<MonoVertex>,
    times: Children,
    finished: Finished,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The watches' own thread, client and connections: in the runner's runtime they would
    /// wait behind the Numaflow simulator's passes before stamping what they saw.
    _runtime: Background,
}

impl Drop for Observer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A runtime shut down in the background when dropped: dropped as usual inside the runner's
/// runtime, it would panic.
struct Background(Option<tokio::runtime::Runtime>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Observer {
    pub fn start(config: kube::Config, ns: &str) -> Result<Self> {
        let runtime = Background(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("bench-observer")
                .enable_all()
                .build()?,
        ));
        // Entered, so that the client's request task, its connections and the watches are
        // spawned on that runtime.
        let entered = runtime.0.as_ref().map(|rt| rt.enter());
        let client = Client::try_from(config)?;
        let times = Children::default();
        let (prs, a) = reflect(Api::namespaced(client.clone(), ns), |_| {});
        let (mvrs, b) = reflect(Api::namespaced(client.clone(), ns), |_| {});
        let f = times.clone();
        let (pipelines, c) = reflect(Api::namespaced(client.clone(), ns), move |o: &Pipeline| {
            stamp(&f, o, o.status.as_ref())
        });
        let f = times.clone();
        let (monovertices, d) = reflect(
            Api::namespaced(client.clone(), ns),
            move |o: &MonoVertex| stamp(&f, o, o.status.as_ref()),
        );
        let finished = Finished::default();
        let f = finished.clone();
        let (_, e) = reflect(
            Api::namespaced(client.clone(), ns),
            move |o: &AnalysisRun| stamp_run(&f, o),
        );
        drop(entered);
        Ok(Observer {
            prs,
            mvrs,
            pipelines,
            monovertices,
            times,
            finished,
            tasks: vec![a, b, c, d, e],
            _runtime: runtime,
        })
    }

    /// Waits until every rollout in `want` (name → generation) is converged at its generation
    /// with no replaced child left, or, for the ones `fails` names, has its trial labelled
    /// failed; then returns the figures. Looked at every 200 ms; the label flips are stamped as
    /// their watch events arrive.
    pub async fn wait(
        &self,
        want: &HashMap<String, i64>,
        fails: &dyn Fn(&str) -> bool,
        schedule: Schedule,
        timeout: Duration,
    ) -> Result<(Duration, Judged)> {
        let started = Instant::now();
        let mut seen: HashMap<String, Seen> = HashMap::new();
        let mut last_report = Instant::now();
        loop {
            let rollouts = self.rollouts(want);
            let children = self.children(want);
            let times = self.times.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let finished = self
                .finished
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let mut pending = Vec::new();
            for (name, generation) in want {
                let s = seen.entry(name.clone()).or_default();
                let (status, observed) = match rollouts.get(name) {
                    Some((st, g)) => (Some(st), *g >= *generation),
                    None => (None, false),
                };
                let empty = Vec::new();
                let kids = children.get(name).unwrap_or(&empty);
                let seen_now = Looked {
                    status,
                    observed,
                    children: kids,
                    times: &times,
                    finished: &finished,
                };
                if !look(&seen_now, fails(name), s) {
                    pending.push(name.clone());
                }
            }
            if pending.is_empty() {
                return Ok((started.elapsed(), Judged { seen, schedule }));
            }
            if started.elapsed() > timeout {
                bail!(
                    "{} of {} progressive upgrades not finished after {timeout:?}, e.g. {:?}",
                    pending.len(),
                    want.len(),
                    &pending[..pending.len().min(5)]
                );
            }
            if last_report.elapsed() > Duration::from_secs(10) {
                tracing::info!(pending = pending.len(), "waiting for progressive upgrades");
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until every rollout in `want` is converged at its generation (not measured: the
    /// setup before the upgrades).
    pub async fn settle(&self, want: &HashMap<String, i64>, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            let rollouts = self.rollouts(want);
            let pending = want
                .iter()
                .filter(|(name, generation)| {
                    rollouts.get(*name).is_none_or(|(_, at)| at < *generation)
                })
                .count();
            if pending == 0 {
                return Ok(());
            }
            if started.elapsed() > timeout {
                bail!("{pending} progressive rollouts not Deployed after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The wanted rollouts' statuses as JSON, each with the generation it is converged at (0
    /// when it is not).
    fn rollouts(&self, want: &HashMap<String, i64>) -> HashMap<String, (Value, i64)> {
        fn of<K: kube::Resource<DynamicType = ()> + Clone>(
            store: &Store<K>,
            want: &HashMap<String, i64>,
            status: impl Fn(&K) -> Option<(Value, Option<&numaplane_api::common::Status>)>,
            out: &mut HashMap<String, (Value, i64)>,
        ) {
            for r in store.state() {
                let name = r.name_any();
                if !want.contains_key(&name) {
                    continue;
                }
                if let Some((json, st)) = status(&r) {
                    let g = r.meta().generation;
                    let at = if converged(st, g) { g.unwrap_or(0) } else { 0 };
                    out.insert(name, (json, at));
                }
            }
        }
        let mut out = HashMap::new();
        of(
            &self.prs,
            want,
            |r: &PipelineRollout| {
                let st = r.status.as_ref()?;
                Some((serde_json::to_value(st).ok()?, Some(&st.status)))
            },
            &mut out,
        );
        of(
            &self.mvrs,
            want,
            |r: &MonoVertexRollout| {
                let st = r.status.as_ref()?;
                Some((serde_json::to_value(st).ok()?, Some(&st.status)))
            },
            &mut out,
        );
        out
    }

    /// The wanted rollouts' children: name and upgrade state.
    fn children(&self, want: &HashMap<String, i64>) -> HashMap<String, Vec<(String, String)>> {
        let mut out: HashMap<String, Vec<(String, String)>> = HashMap::new();
        let mut add = |l: &std::collections::BTreeMap<String, String>, name: String| {
            if let Some(parent) = l.get(labels::PARENT_ROLLOUT_NAME)
                && want.contains_key(parent)
            {
                let state = l.get(labels::UPGRADE_STATE).cloned().unwrap_or_default();
                out.entry(parent.clone()).or_default().push((name, state));
            }
        };
        for c in self.pipelines.state() {
            add(c.labels(), c.name_any());
        }
        for c in self.monovertices.state() {
            add(c.labels(), c.name_any());
        }
        out
    }
}

/// One look at a rollout: its status, whether it is converged at the wanted generation, its
/// children (name, upgrade state), and the children's times and finished AnalysisRuns seen so far.
struct Looked<'a> {
    status: Option<&'a Value>,
    observed: bool,
    children: &'a [(String, String)],
    times: &'a HashMap<String, ChildTimes>,
    finished: &'a HashMap<String, f64>,
}

/// Updates `s` from one look at a rollout; whether its upgrade is over: its trial failed
/// (expected when `to_fail`, counted in the figures either way), or it was promoted, its
/// rollout converged and no replaced child is left.
fn look(l: &Looked<'_>, to_fail: bool, s: &mut Seen) -> bool {
    let Looked {
        status,
        observed,
        children,
        times,
        finished,
    } = *l;
    let up = status.and_then(|st| {
        [
            "/progressiveStatus/upgradingPipelineStatus",
            "/progressiveStatus/upgradingMonoVertexStatus",
        ]
        .iter()
        .find_map(|p| st.pointer(p))
    });
    if let Some(up) = up
        && let Some(trial) = up.get("name").and_then(Value::as_str)
    {
        if s.trial.as_deref() != Some(trial) {
            *s = Seen {
                trial: Some(trial.to_string()),
                ..Seen::default()
            };
        }
        s.to_fail = to_fail;
        if let Some(t) = time_at(up, "/trialWindowStartTime") {
            s.window_start = Some(t);
        }
        if let Some(t) = time_at(up, "/basicAssessmentStartTime") {
            s.assessment_start = Some(t);
        }
    }
    if let Some(c) = s.trial.as_ref().and_then(|t| times.get(t)) {
        s.trial_seen = c.seen;
        s.trial_up = c.up;
        s.promoted_at = c.promoted;
        s.failed_at = c.failed;
    }
    if let Some(t) = &s.trial {
        // Numaplane names a trial's run after its kind and the trial.
        s.analysis_done = ["pipeline", "monovertex"]
            .iter()
            .find_map(|k| finished.get(&format!("{k}-{t}")).copied());
    }
    if to_fail || s.failed_at.is_some() {
        return s.failed_at.is_some();
    }
    let replaced_left = children
        .iter()
        .any(|(n, state)| Some(n) != s.trial.as_ref() && state != "promoted");
    observed && s.promoted_at.is_some() && !replaced_left
}

/// The upgrades of one progressive run as the observer saw them.
pub struct Judged {
    seen: HashMap<String, Seen>,
    schedule: Schedule,
}

impl Judged {
    /// Adds when each promotion's label flip reached the API server, from the operator's
    /// Pipeline and MonoVertex patches by name ([`crate::audit::child_patches_since`]).
    pub fn with_patches(mut self, patches: &std::collections::BTreeMap<String, Vec<f64>>) -> Self {
        for s in self.seen.values_mut() {
            let (Some(trial), Some(start), Some(_)) = (&s.trial, s.window_start, s.promoted_at)
            else {
                continue;
            };
            s.flip_sent = patches
                .get(trial)
                .and_then(|times| times.iter().copied().find(|t| *t > start + 1.0));
        }
        self
    }

    pub fn figures(&self) -> Figures {
        figures(&self.seen, self.schedule)
    }

    pub fn table(&self) -> String {
        trials_table(&self.seen)
    }
}

/// When a promotion was due: once the healthy period has passed and the AnalysisRun (if any)
/// has finished.
fn promotion_due(s: &Seen) -> Option<f64> {
    let healthy = s.window_start? + PERIOD_S;
    Some(s.analysis_done.map_or(healthy, |a| a.max(healthy)))
}

/// When the trial was seen up, if before it was labelled failed (a failed trial the operator
/// scales to zero reports Running with every condition True).
fn up_before_failing(s: &Seen) -> Option<f64> {
    s.trial_up.filter(|up| s.failed_at.is_none_or(|f| *up < f))
}

/// Every upgrade's times (seconds since the epoch) as tab-separated text, latest verdict last,
/// to set the late ones beside the operator's log.
fn trials_table(seen: &HashMap<String, Seen>) -> String {
    let cell = |t: Option<f64>| t.map(|t| format!("{t:.3}")).unwrap_or_default();
    let mut rows: Vec<_> = seen.iter().collect();
    rows.sort_by(|a, b| {
        let at = |s: &Seen| s.promoted_at.or(s.failed_at).unwrap_or(0.0);
        at(a.1).total_cmp(&at(b.1))
    });
    let mut out = String::from(
        "rollout\ttrial\twindow_start\tanalysis_done\tpromotion_due\tflip_sent\tpromoted_at\tfailed_at\tpromotion_lateness\ttrial_seen\ttrial_up\n",
    );
    for (name, s) in rows {
        let due = promotion_due(s);
        let late = s.promoted_at.zip(due).map(|(p, d)| p - d);
        out += &format!(
            "{name}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            s.trial.as_deref().unwrap_or_default(),
            cell(s.window_start),
            cell(s.analysis_done),
            cell(due),
            cell(s.flip_sent),
            cell(s.promoted_at),
            cell(s.failed_at),
            cell(late),
            cell(s.trial_seen),
            cell(s.trial_up),
        );
    }
    out
}

fn figures(seen: &HashMap<String, Seen>, schedule: Schedule) -> Figures {
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let promotion = sorted(
        seen.values()
            .filter_map(|s| Some(s.promoted_at? - promotion_due(s)?))
            .collect(),
    );
    let written = sorted(
        seen.values()
            .filter_map(|s| Some(s.flip_sent? - promotion_due(s)?))
            .collect(),
    );
    // A failure is due the first second after `start + end`.
    let failure = sorted(
        seen.values()
            .filter_map(|s| Some(s.failed_at? - (s.assessment_start? + schedule.end() + 1.0)))
            .collect(),
    );
    // From the watch first seeing a trial to seeing it up (the simulator's part), and from
    // then to the healthy window's start the operator recorded (to the second, truncated).
    let up = sorted(
        seen.values()
            .filter_map(|s| Some(up_before_failing(s)? - s.trial_seen?))
            .collect(),
    );
    let noticed = sorted(
        seen.values()
            .filter_map(|s| Some(s.window_start? - up_before_failing(s)?))
            .collect(),
    );
    let q = |v: &[f64], p: f64| workload::nearest_rank(v, p).map(crate::measure::round3);
    Figures {
        assessment_schedule: schedule.text(),
        upgrades: seen.len(),
        promoted: seen.values().filter(|s| s.promoted_at.is_some()).count(),
        failed: seen.values().filter(|s| s.failed_at.is_some()).count(),
        failed_unexpectedly: seen
            .values()
            .filter(|s| s.failed_at.is_some() && !s.to_fail)
            .count(),
        failed_never_up: seen
            .values()
            .filter(|s| s.failed_at.is_some() && !s.to_fail && up_before_failing(s).is_none())
            .count(),
        trial_up_p50_seconds: q(&up, 0.5),
        trial_up_p99_seconds: q(&up, 0.99),
        trial_up_max_seconds: q(&up, 1.0),
        window_after_up_p50_seconds: q(&noticed, 0.5),
        window_after_up_p99_seconds: q(&noticed, 0.99),
        analysis_runs: seen.values().filter(|s| s.analysis_done.is_some()).count(),
        analysis_gated: seen
            .values()
            .filter(|s| {
                s.analysis_done
                    .zip(s.window_start)
                    .is_some_and(|(a, w)| a > w + PERIOD_S)
            })
            .count(),
        promotion_lateness_p50_seconds: q(&promotion, 0.5),
        promotion_lateness_p99_seconds: q(&promotion, 0.99),
        promotion_lateness_max_seconds: q(&promotion, 1.0),
        promotion_write_lateness_p50_seconds: q(&written, 0.5),
        promotion_write_lateness_p99_seconds: q(&written, 0.99),
        promotion_write_lateness_max_seconds: q(&written, 1.0),
        failure_lateness_p50_seconds: q(&failure, 0.5),
        failure_lateness_p99_seconds: q(&failure, 0.99),
        api_requests_per_upgrade: 0.0,
        rss_before_upgrades_mib: None,
    }
}

/// One name → generation map for both kinds.
pub fn merged(a: HashMap<String, i64>, b: HashMap<String, i64>) -> HashMap<String, i64> {
    a.into_iter().chain(b).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_tag_makes_an_image_the_simulator_never_runs() {
        assert_eq!(image(IMAGE, "v1"), "quay.io/numaio/numaflow-go/map-cat:v1");
        assert_eq!(
            image(IMAGE, "v2-badcat"),
            "quay.io/numaio/numaflow-go/map-cat-badcat:v2-badcat"
        );
        let schedule = Schedule { end_seconds: 900 };
        let p = pipeline_rollout("ppr-0000", "v1", false, schedule);
        assert_eq!(
            p["spec"]["strategy"]["progressive"]["assessmentSchedule"],
            "0,900,5,1"
        );
        assert!(p["spec"]["strategy"].get("analysis").is_none());
        let p = pipeline_rollout("ppr-0000", "v1", true, schedule);
        assert_eq!(
            p["spec"]["strategy"]["analysis"]["templates"][0]["templateName"],
            PIPELINE_TEMPLATE
        );
        let m = monovertex_rollout("pmvr-0000", "v1", true, schedule);
        assert_eq!(
            m["spec"]["strategy"]["analysis"]["templates"][0]["templateName"],
            MONOVERTEX_TEMPLATE
        );
        assert_eq!(pipeline_names(1000).len(), 100);
        assert_eq!(monovertex_names(100)[9], "pmvr-0009");
        assert_eq!(monovertex_names(5), vec!["pmvr-0000".to_string()]);
    }

    #[test]
    fn a_child_is_up_when_running_with_every_condition_true() {
        let st = |phase: &str, c: &str| {
            json!({"phase": phase, "conditions": [
                {"type": "Deployed", "status": "True"},
                {"type": "VerticesHealthy", "status": c},
            ]})
        };
        assert!(is_up(Some(&st("Running", "True"))));
        assert!(!is_up(Some(&st("Running", "False"))));
        assert!(!is_up(Some(&st("Pending", "True"))));
        assert!(!is_up(Some(&json!({"phase": "Running"}))));
        assert!(!is_up(None));
    }

    #[test]
    fn lateness_is_measured_from_the_moment_the_verdict_was_due() {
        let mut seen = HashMap::new();
        seen.insert(
            "a".to_string(),
            Seen {
                trial: Some("a-1".into()),
                trial_seen: Some(90.0),
                trial_up: Some(99.5),
                window_start: Some(100.0),
                promoted_at: Some(105.4),
                ..Seen::default()
            },
        );
        seen.insert(
            "b".to_string(),
            Seen {
                trial: Some("b-1".into()),
                assessment_start: Some(100.0),
                failed_at: Some(221.2),
                to_fail: true,
                ..Seen::default()
            },
        );
        // Not made to fail, seen but never up: the simulator's.
        seen.insert(
            "d".to_string(),
            Seen {
                trial: Some("d-1".into()),
                trial_seen: Some(95.0),
                assessment_start: Some(100.0),
                failed_at: Some(221.5),
                // Scaled to zero once failed.
                trial_up: Some(230.0),
                ..Seen::default()
            },
        );
        // Its AnalysisRun finished 2 s after the healthy period: due then.
        seen.insert(
            "c".to_string(),
            Seen {
                trial: Some("c-1".into()),
                window_start: Some(100.0),
                analysis_done: Some(107.0),
                promoted_at: Some(107.3),
                ..Seen::default()
            },
        );
        let f = figures(&seen, Schedule { end_seconds: 120 });
        assert_eq!((f.upgrades, f.promoted, f.failed), (4, 2, 2));
        assert_eq!((f.failed_unexpectedly, f.failed_never_up), (1, 1));
        assert_eq!((f.analysis_runs, f.analysis_gated), (1, 1));
        assert_eq!(f.promotion_lateness_max_seconds, Some(0.4));
        assert_eq!(f.promotion_lateness_p50_seconds, Some(0.3));
        assert_eq!(
            (f.trial_up_p50_seconds, f.trial_up_max_seconds),
            (Some(9.5), Some(9.5))
        );
        assert_eq!(f.window_after_up_p99_seconds, Some(0.5));
        assert_eq!(f.promotion_lateness_p99_seconds, Some(0.4));
        assert_eq!(f.failure_lateness_p99_seconds, Some(0.5));
        assert_eq!(f.promotion_write_lateness_max_seconds, None);
        // The flips as the API server received them: a-1's creation (within a second of its
        // window's start) is not its flip; b-1 failed, so it has none.
        let patches = [
            ("a-1", vec![100.6, 105.1, 105.9]),
            ("b-1", vec![150.0]),
            ("c-1", vec![107.05]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let j = Judged {
            seen,
            schedule: Schedule { end_seconds: 120 },
        }
        .with_patches(&patches);
        let f = j.figures();
        assert_eq!(f.promotion_write_lateness_p50_seconds, Some(0.05));
        assert_eq!(f.promotion_write_lateness_max_seconds, Some(0.1));
        let table = j.table();
        assert_eq!(table.lines().count(), 5, "{table}");
        assert!(
            table.lines().any(
                |l| l.starts_with("a\ta-1\t100.000\t\t105.000\t105.100\t105.400")
                    && l.ends_with("\t90.000\t99.500")
            ),
            "{table}"
        );
    }
}
