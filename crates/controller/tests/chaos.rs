//! Chaos (issue "Reliability…", item 2): random upgrade flows over several rollouts at once, on
//! the real stack, while faults are injected at random moments: SIGKILL and SIGTERM of the
//! operator (which runs with leader election, as installed: a successor waits for the Lease
//! `numaplane-controller-lock` a killed one never released), a restart of kube-apiserver, a
//! restart of etcd, and, through a proxy between the operator and the API server, rejected
//! requests (409/500/429), timeouts, answers lost after the write was applied and dropped
//! watches ([`numaplane_testenv::faults`]).
//!
//! Lanes run concurrently, each on its own rollout, each taking flows from a shared budget:
//! - two PipelineRollouts (one judged by the shipped AnalysisTemplate too: its successful upgrades
//!   check their AnalysisRun passed) and a MonoVertexRollout under `progressive`: successful upgrades,
//!   failed upgrades then reverted, replacement of a failing trial, force promotion of a failing
//!   trial, user pause and resume, rider edits (with the recycling and force drains they cause),
//!   and (pipelines) deletion of the rollout and its re-creation;
//! - a PipelineRollout, its ISBServiceRollout and the NumaflowControllerRollout of a namespace
//!   under `pause-and-drain`: pipeline, ISB service (in place, and a recreate field that
//!   replaces the service and its pipelines) and Numaflow controller changes, user pause.
//!
//! Every flow ends in a state the test checks (which child is promoted, with which spec), within
//! [`FLOW_BOUND`]. The process faults are dealt from a shuffled deck, so every kind comes up
//! within each few faults; injection goes on after the last flow until every fault kind reached
//! its minimum for the run's size ([`minimum_faults`]) and all together theirs
//! ([`minimum_total_faults`]), and the counts are asserted. Then, with
//! faults off, every rollout must reach the state its lane last asked for within
//! [`SETTLE_BOUND`], the invariant checker ([`support::invariants`]) must find nothing in the
//! whole history of both namespaces, and no operator incarnation may have panicked, exited on its
//! own, or exited uncleanly on SIGTERM.
//!
//! `CHAOS_FLOWS` (default 8: the slice `make test` runs), `CHAOS_SEED` (default 20261204),
//! `CHAOS_RESULTS` (write the figures there as JSON; `make chaos` writes
//! `bench/chaos-results.json`). A failure prints the seed, the flow log, the fault log and the
//! violations with the history around them.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use numaplane_api::keys::{labels, upgrade_state};
use numaplane_api::numaflow::{AnalysisRun, InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::progressive::AssessmentResult;
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowControllerRollout, PipelineRollout,
};
use numaplane_testenv::TestEnv;
use numaplane_testenv::faults::{FaultProxy, Rates};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::invariants::Recorder;
use support::scenario::{
    BAD_CAT, CAT, ISB, MV_BAD, MV_IMAGE, MV_JAVA, Rollout, settled, three_vertices, two_vertices,
    upgrading_pipeline,
};
use support::{Process, analysis, fixtures, install_numaflow, install_rbac, lease_holder, repo};

/// A good trial must show healthy within `end` (150 s) of its start: under the faults a fresh
/// vertex pod can take over 20 s to be ready (a pipeline trial once missed a 20 s window right
/// after an etcd restart, its vertices read live), and the Numaflow controller, itself restarted
/// and slowed by the restarts around it, has created a trial's vertices 39 s and a MonoVertex's
/// pods 40 s after the trial and then not reported them ready within a 90 s window; a trial
/// failed for the stack's slowness is no verdict on Numaplane. A bad trial then takes the full
/// 150 s to fail (unhealthy waits for `end`), inside [`FLOW_BOUND`].
const CONFIG: &str = r#"
defaultUpgradeStrategy: "progressive"
permittedRiders: "group=,kind=ConfigMap"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,150,2,1"
    - kind: MonoVertex
      schedule: "0,150,2,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

/// How long one step of a flow may take to reach its expected state, faults included: the
/// invariant checker's convergence bound.
const FLOW_BOUND: Duration = support::invariants::CONVERGENCE_BOUND;
/// Pause between process faults (uniform).
const FAULT_GAP: (u64, u64) = (6, 20);
/// How long the rollouts may take to reach their last asked state once the faults are off (a
/// trial's assessment window, and a successor's wait for the lease of a killed operator).
const SETTLE_BOUND: Duration = Duration::from_secs(240);
/// How long injection may go on after the last flow to reach the minimum of each fault kind.
const TOP_UP_BOUND: Duration = Duration::from_secs(600);
/// One deck of process faults: every kind, SIGKILL twice (the fault a crash-only design must
/// survive most).
const DECK: [&str; 5] = [
    "operator-sigkill",
    "operator-sigkill",
    "operator-sigterm",
    "apiserver-restart",
    "etcd-restart",
];
/// Kinds of fault the proxy injects ([`numaplane_testenv::faults::Counts`]).
const PROXY_FAULTS: [&str; 6] = [
    "conflict",
    "server-error",
    "too-many-requests",
    "timeout",
    "lost-answer",
    "watch-dropped",
];

/// The least count of faults of every kind together a run of `flows` flows must have injected:
/// five per two flows (500 for the full run).
fn minimum_total_faults(flows: usize) -> u64 {
    (flows as u64 * 5).div_ceil(2)
}

/// The least count of each fault kind a run of `flows` flows must have injected: each kind at
/// least once, and one more per 25 flows (the rarest kind, a 409, came 15 times in 200 flows).
fn minimum_faults(flows: usize) -> BTreeMap<&'static str, u64> {
    let each = (flows as u64 / 25).max(1);
    DECK.into_iter()
        .chain(PROXY_FAULTS)
        .map(|kind| (kind, each))
        .collect()
}
const POLL: Duration = Duration::from_millis(500);

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// splitmix64, one stream per lane and one for the injector.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Rng {
        Rng(seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// Set when a lane or the fault injector fails: the other lanes stop taking flows and give up
/// the step they wait for, so a failed run ends now, not a convergence bound later.
static FAILED: AtomicBool = AtomicBool::new(false);

/// What the lanes share: the user's client, the namespaces, the flow budget and the logs.
struct World {
    client: Client,
    prog: String,
    ppnd: String,
    budget: AtomicUsize,
    /// (lane, flow, seconds the slowest step took to converge), in completion order.
    flows: Mutex<Vec<(String, &'static str, f64)>>,
    /// (seconds since start, what) for every process fault and each flow step.
    log: Mutex<Vec<(f64, String)>>,
    /// When the API server or etcd was restarted: (down from, serving again).
    restarts: Mutex<Vec<(Instant, Instant)>>,
    /// Trials of a good spec that failed (the stack did not report their pods ready in the
    /// window), each asked again as a user would: "<rollout> <trial>: <reasons>".
    stack_failed_trials: Mutex<Vec<String>>,
    t0: Instant,
}

impl World {
    fn note(&self, what: String) {
        if std::env::var_os("CHAOS_VERBOSE").is_some() {
            eprintln!("[chaos {:7.1}s] {what}", self.t0.elapsed().as_secs_f64());
        }
        if let Ok(mut l) = self.log.lock() {
            l.push((self.t0.elapsed().as_secs_f64(), what));
        }
    }

    /// Records a good trial the stack failed; the lane then asks again.
    fn stack_failed(&self, what: String) {
        self.note(format!(
            "good trial failed by the stack, asked again: {what}"
        ));
        if let Ok(mut l) = self.stack_failed_trials.lock() {
            l.push(what);
        }
    }

    fn take_flow(&self) -> bool {
        !FAILED.load(Ordering::Relaxed)
            && self
                .budget
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
                .is_ok()
    }
}

/// Retries a user's API call through an API server or etcd restart (as kubectl's user would).
async fn retry<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match call().await {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("{what}: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => panic!("{what}: the API server did not come back within 120 s: {e}"),
        }
    }
}

fn api<K>(w: &World, ns: &str) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    Api::namespaced(w.client.clone(), ns)
}

/// Server-side applies `manifest` as the user.
async fn apply<K>(w: &World, ns: &str, manifest: &Value)
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
    let a = api::<K>(w, ns);
    let pp = PatchParams::apply("chaos-user").force();
    let patch = Patch::Apply(manifest);
    retry(&format!("apply {name}"), || a.patch(name, &pp, &patch)).await;
}

/// Polls `check` until it gives a value, for at most [`FLOW_BOUND`]; `Err` says what was last
/// seen.
async fn until<T, F, Fut>(what: &str, mut check: F) -> Result<(T, Duration), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let t0 = Instant::now();
    let mut last = String::new();
    while t0.elapsed() < FLOW_BOUND {
        if FAILED.load(Ordering::Relaxed) {
            return Err(format!(
                "{what}: given up, another lane failed; last seen: {last}"
            ));
        }
        match check().await {
            Ok(v) => return Ok((v, t0.elapsed())),
            Err(why) => last = why,
        }
        tokio::time::sleep(POLL).await;
    }
    Err(format!(
        "{what}: not reached within {FLOW_BOUND:?}; last seen: {last}"
    ))
}

/// The live children of `rollout` (not being deleted), by name, with their upgrade state.
async fn children<K>(w: &World, ns: &str, rollout: &str) -> Result<Vec<K>, String>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let lp = ListParams::default().labels(&format!("{}={rollout}", labels::PARENT_ROLLOUT_NAME));
    // The test's own reads go to the API server the injector restarts: retried like the
    // operator's, a restart is not a failure of the flow.
    let t0 = Instant::now();
    let items = loop {
        match api::<K>(w, ns).list(&lp).await {
            Ok(list) => break list.items,
            Err(e) if t0.elapsed() > Duration::from_secs(60) => {
                return Err(format!("listing children: {e}"));
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    };
    Ok(items
        .into_iter()
        .filter(|c| c.meta().deletion_timestamp.is_none())
        .collect())
}

fn names<K: Resource>(children: &[K]) -> std::collections::BTreeSet<String> {
    children
        .iter()
        .filter_map(|c| c.meta().name.clone())
        .collect()
}

/// Waits for a trial child of `rollout` that did not exist before (`existing`) and has the spec
/// the test just asked for (`asked`); returns its name.
async fn new_trial<K>(
    w: &World,
    ns: &str,
    rollout: &str,
    existing: &std::collections::BTreeSet<String>,
    asked: impl Fn(&K) -> bool,
) -> Result<String, String>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let (trial, _) = until(&format!("{rollout}: a trial of the new spec"), || async {
        let all = children::<K>(w, ns, rollout).await?;
        all.iter()
            .find(|c| {
                !existing.contains(&c.name_any())
                    && matches!(state(*c), upgrade_state::TRIAL | upgrade_state::IN_PROGRESS)
                    && asked(c)
            })
            .map(ResourceExt::name_any)
            .ok_or_else(|| format!("children {:?}", names(&all)))
    })
    .await?;
    Ok(trial)
}

fn state<K: Resource>(c: &K) -> &str {
    c.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::UPGRADE_STATE))
        .map_or("", String::as_str)
}

/// The one promoted child of `rollout`.
async fn promoted<K>(w: &World, ns: &str, rollout: &str) -> Result<K, String>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let all = children::<K>(w, ns, rollout).await?;
    let mut promoted: Vec<K> = all
        .iter()
        .filter(|c| state(*c) == upgrade_state::PROMOTED)
        .cloned()
        .collect();
    match promoted.len() {
        1 => Ok(promoted.remove(0)),
        n => Err(format!(
            "{n} promoted children; children: {:?}",
            all.iter()
                .map(|c| format!("{}={}", c.name_any(), state(c)))
                .collect::<Vec<_>>()
        )),
    }
}

/// The rollout settled (Deployed, current generation observed, nothing in progress, child
/// healthy).
async fn rollout_settled<R>(w: &World, ns: &str, name: &str) -> Result<(), String>
where
    R: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Rollout
        + Clone
        + Debug
        + DeserializeOwned
        + serde::Serialize,
{
    let r = api::<R>(w, ns)
        .get(name)
        .await
        .map_err(|e| format!("reading {name}: {e}"))?;
    settled(Some(&r)).ok_or_else(|| {
        format!(
            "{name} not settled: generation {} status {}",
            r.generation(),
            serde_json::to_value(r.common()).unwrap_or_default()
        )
    })
}

/// At most one good trial in this many flows may fail for the stack's sake (a user asks again;
/// more says something is wrong with Numaplane's judgement, not with the stack).
const FLOWS_PER_STACK_FAILURE: usize = 40;

/// A trial of the spec the lane asked for that failed its assessment: the name of the failed
/// child and its reasons, if the rollout's upgrading child is such a trial. `good` says
/// whether a child runs the spec asked for (a bad trial a flow reverts is not one).
async fn good_trial_failed<K>(
    w: &World,
    ns: &str,
    up: Option<&numaplane_api::progressive::UpgradingChildStatus>,
    good: impl Fn(&K) -> bool,
) -> Option<(String, String)>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let up = up.filter(|u| u.assessment_result == Some(AssessmentResult::Failure))?;
    let child = api::<K>(w, ns).get_opt(&up.name).await.ok()??;
    good(&child).then(|| (up.name.clone(), up.failure_reasons.join("; ")))
}

/// The failed good trials one wait has asked again for.
#[derive(Default)]
struct AskedAgain(Mutex<BTreeSet<String>>);

impl AskedAgain {
    /// Records `trial` of `rollout` as failed by the stack the first time it is seen; then
    /// returns how many this wait has asked again for.
    fn first_time(&self, w: &World, rollout: &str, trial: &str, why: &str) -> Option<usize> {
        let mut seen = self.0.lock().ok()?;
        if !seen.insert(trial.to_string()) {
            return None;
        }
        w.stack_failed(format!("{rollout} {trial}: {why}"));
        Some(seen.len())
    }
}

/// Marks a manifest as asked again for the `n`th time (an annotation on the child template),
/// so the rollout starts a new trial of the same spec.
fn asked_again(mut manifest: Value, template: &str, n: usize) -> Value {
    manifest["spec"][template]["metadata"]["annotations"]["chaos.numaplane.io/asked-again"] =
        json!(n.to_string());
    manifest
}

/// The upgrading child is `trial` and failed its assessment.
fn failed_trial(
    up: &numaplane_api::progressive::UpgradingChildStatus,
    trial: &str,
) -> Result<(), String> {
    (up.name == trial && up.assessment_result == Some(AssessmentResult::Failure))
        .then_some(())
        .ok_or_else(|| format!("upgrading {} result {:?}", up.name, up.assessment_result))
}

fn vertices(p: &Pipeline) -> usize {
    p.spec["vertices"].as_array().map_or(0, Vec::len)
}

fn cat_image(p: &Pipeline) -> &str {
    p.spec
        .pointer("/vertices/1/udf/container/image")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn phase_of(status: &Option<Value>) -> &str {
    status
        .as_ref()
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A pipeline lane's good specs: two vertices, or three with a working cat.
fn good_pipeline(three: bool) -> Value {
    if three {
        three_vertices(CAT, 10)
    } else {
        two_vertices(10)
    }
}

fn pipeline_rollout(name: &str, spec: Value, rider: Option<u64>) -> Value {
    let mut r = json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": spec}}
    });
    if let Some(n) = rider {
        r["spec"]["riders"] = cm_rider(n);
    }
    r
}

fn monovertex_rollout(name: &str, image: &str, rider: Option<u64>) -> Value {
    let mut r = json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": name},
        "spec": {"monoVertex": {"spec": {
            "scale": {"min": 1, "max": 2},
            "source": {"udsource": {"container": {"image": image}}},
            "sink": {"blackhole": {}}
        }}}
    });
    if let Some(n) = rider {
        r["spec"]["riders"] = cm_rider(n);
    }
    r
}

/// A ConfigMap rider named `cm` (its copy per child: `cm-<child>`) holding `n`.
fn cm_rider(n: u64) -> Value {
    json!([{"definition": {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
        "data": {"value": n.to_string()}
    }}])
}

/// The rider copy of child `child` holds `n`.
async fn rider_holds(w: &World, ns: &str, child: &str, n: u64) -> Result<(), String> {
    let name = format!("cm-{child}");
    let cm = api::<ConfigMap>(w, ns)
        .get_opt(&name)
        .await
        .map_err(|e| format!("reading {name}: {e}"))?
        .ok_or_else(|| format!("no ConfigMap {name}"))?;
    let have = cm.data.as_ref().and_then(|d| d.get("value")).cloned();
    (have.as_deref() == Some(n.to_string().as_str()))
        .then_some(())
        .ok_or_else(|| format!("{name} holds {have:?}, want {n}"))
}

/// One lane: a rollout, what the test last asked of it and its random stream.
struct Lane {
    name: String,
    rng: Rng,
    /// Pipelines: three vertices (else two). MonoVertices: the Java image (else Go).
    alt: bool,
    rider: Option<u64>,
    /// pause-and-drain lane: ISB service on 2.10.11 (else 2.10.17), controller 1.7.5 (else 1.8.1).
    isb_old: bool,
    nc_old: bool,
    /// pause-and-drain lane: the ISB service's volume 20Mi (else 10Mi), a recreate field.
    isb_big: bool,
    /// Pipelines: trials are also judged by the shipped AnalysisTemplate (Argo Rollouts,
    /// Prometheus), and a successful upgrade checks its AnalysisRun passed.
    analysis: bool,
}

type Step = Result<Duration, String>;

impl Lane {
    fn pipeline_manifest(&self, spec: Value) -> Value {
        let mut r = pipeline_rollout(&self.name, spec, self.rider);
        if self.analysis {
            r["spec"]["strategy"]["analysis"] = json!({
                "templates": [{"templateName": analysis::PIPELINE_TEMPLATE}],
                "args": analysis::fast_args(),
            });
        }
        r
    }

    /// The AnalysisRun of the lane's promoted pipeline `child` (its trial's) passed.
    async fn analysis_passed(&self, w: &World, ns: &str, child: &str) -> Step {
        let run = format!("pipeline-{child}");
        let (_, took) = until(
            &format!("{} AnalysisRun {run} Successful", self.name),
            || async {
                let r = api::<AnalysisRun>(w, ns)
                    .get_opt(&run)
                    .await
                    .map_err(|e| format!("reading {run}: {e}"))?
                    .ok_or_else(|| format!("no AnalysisRun {run}"))?;
                let phase = analysis::run_phase(&r);
                (phase == "Successful")
                    .then_some(())
                    .ok_or_else(|| format!("{run} is {phase:?}"))
            },
        )
        .await?;
        Ok(took)
    }

    /// Applies the lane's good pipeline spec and waits until its rollout is settled on it.
    async fn pipeline_good(&self, w: &World, ns: &str) -> Step {
        apply::<PipelineRollout>(w, ns, &self.pipeline_manifest(good_pipeline(self.alt))).await;
        self.pipeline_settled(w, ns).await
    }

    async fn pipeline_settled(&self, w: &World, ns: &str) -> Step {
        let want = if self.alt { 3 } else { 2 };
        let is_good = |p: &Pipeline| vertices(p) == want && (want == 2 || cat_image(p) == CAT);
        let asked = AskedAgain::default();
        let (_, took) = until(
            &format!("{} settled with {want} vertices", self.name),
            || async {
                let r = api::<PipelineRollout>(w, ns)
                    .get_opt(&self.name)
                    .await
                    .ok()
                    .flatten();
                let up = r
                    .as_ref()
                    .and_then(|r| upgrading_pipeline(r))
                    .map(|u| &u.child);
                if let Some((trial, why)) = good_trial_failed(w, ns, up, is_good).await
                    && let Some(n) = asked.first_time(w, &self.name, &trial, &why)
                {
                    let again = self.pipeline_manifest(good_pipeline(self.alt));
                    apply::<PipelineRollout>(w, ns, &asked_again(again, "pipeline", n)).await;
                    return Err(format!("{trial} failed ({why}): asked again"));
                }
                rollout_settled::<PipelineRollout>(w, ns, &self.name).await?;
                let p = promoted::<Pipeline>(w, ns, &self.name).await?;
                if vertices(&p) != want || (want == 3 && cat_image(&p) != CAT) {
                    return Err(format!("{} has spec {}", p.name_any(), p.spec));
                }
                if let Some(n) = self.rider {
                    rider_holds(w, ns, &p.name_any(), n).await?;
                }
                Ok(())
            },
        )
        .await?;
        Ok(took)
    }

    /// Deletes the lane's PipelineRollout, waits until it and its pipelines are gone, then
    /// creates it again and waits until it is settled.
    async fn delete_and_recreate(&self, w: &World, ns: &str) -> Step {
        let prs = api::<PipelineRollout>(w, ns);
        retry(&format!("delete {}", self.name), || async {
            match prs.delete(&self.name, &Default::default()).await {
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                other => other.map(|_| ()),
            }
        })
        .await;
        let (_, gone) = until(&format!("{} and its pipelines gone", self.name), || async {
            let left = api::<Pipeline>(w, ns)
                .list(&ListParams::default().labels(&format!(
                    "{}={}",
                    labels::PARENT_ROLLOUT_NAME,
                    self.name
                )))
                .await
                .map_err(|e| format!("listing pipelines: {e}"))?
                .items;
            let rollout = prs
                .get_opt(&self.name)
                .await
                .map_err(|e| format!("reading {}: {e}", self.name))?;
            (left.is_empty() && rollout.is_none())
                .then_some(())
                .ok_or_else(|| {
                    format!(
                        "rollout there: {}; pipelines {:?}",
                        rollout.is_some(),
                        names(&left)
                    )
                })
        })
        .await?;
        let back = self.pipeline_good(w, ns).await?;
        Ok(gone.max(back))
    }

    /// Asks for the lane's pipeline to pause and waits until its promoted child is Paused.
    async fn pipeline_paused(&self, w: &World, ns: &str) -> Step {
        let mut paused = good_pipeline(self.alt);
        paused["lifecycle"]["desiredPhase"] = "Paused".into();
        apply::<PipelineRollout>(w, ns, &self.pipeline_manifest(paused)).await;
        let (_, took) = until(&format!("{} paused", self.name), || async {
            let p = promoted::<Pipeline>(w, ns, &self.name).await?;
            (phase_of(&p.status) == "Paused")
                .then_some(())
                .ok_or_else(|| format!("{} phase {}", p.name_any(), phase_of(&p.status)))
        })
        .await?;
        Ok(took)
    }

    /// Applies a pipeline spec whose cat never runs and waits for its trial child.
    async fn pipeline_bad_trial(&self, w: &World, ns: &str) -> Result<String, String> {
        let existing = names(&children::<Pipeline>(w, ns, &self.name).await?);
        apply::<PipelineRollout>(w, ns, &self.pipeline_manifest(three_vertices(BAD_CAT, 10))).await;
        new_trial::<Pipeline>(w, ns, &self.name, &existing, |p| cat_image(p) == BAD_CAT).await
    }

    async fn pipeline_flow(&mut self, w: &World) -> Result<(&'static str, Duration), String> {
        let ns = w.prog.clone();
        let ns = ns.as_str();
        match self.rng.below(7) {
            6 => Ok((
                "delete-recreate-rollout",
                self.delete_and_recreate(w, ns).await?,
            )),
            0 => {
                let before = promoted::<Pipeline>(w, ns, &self.name).await?.name_any();
                self.alt = !self.alt;
                let took = self.pipeline_good(w, ns).await?;
                let now = promoted::<Pipeline>(w, ns, &self.name).await?.name_any();
                if now == before {
                    return Err(format!("{}: a topology change kept {now}", self.name));
                }
                if self.analysis {
                    let judged = self.analysis_passed(w, ns, &now).await?;
                    return Ok(("analysis-success", took.max(judged)));
                }
                Ok(("progressive-success", took))
            }
            1 => {
                let before = promoted::<Pipeline>(w, ns, &self.name).await?.name_any();
                let trial = self.pipeline_bad_trial(w, ns).await?;
                let (_, failed) = until(&format!("{} trial {trial} failed", self.name), || async {
                    let r = api::<PipelineRollout>(w, ns)
                        .get(&self.name)
                        .await
                        .map_err(|e| e.to_string())?;
                    let up = upgrading_pipeline(&r).ok_or("no upgrading status")?;
                    failed_trial(&up.child, &trial)
                })
                .await?;
                let back = self.pipeline_good(w, ns).await?;
                let now = promoted::<Pipeline>(w, ns, &self.name).await?.name_any();
                if now != before {
                    return Err(format!(
                        "{}: reverting a failed upgrade promoted {now}, not {before}",
                        self.name
                    ));
                }
                Ok(("failure-revert", failed.max(back)))
            }
            2 => {
                let trial = self.pipeline_bad_trial(w, ns).await?;
                self.alt = !self.alt;
                let took = self.pipeline_good(w, ns).await?;
                let now = promoted::<Pipeline>(w, ns, &self.name).await?.name_any();
                if now == trial {
                    return Err(format!(
                        "{}: the replaced trial {trial} was promoted",
                        self.name
                    ));
                }
                Ok(("replacement", took))
            }
            3 => {
                let trial = self.pipeline_bad_trial(w, ns).await?;
                let force = json!({"metadata": {"labels": {labels::FORCE_PROMOTE: "true"}}});
                let pipelines = api::<Pipeline>(w, ns);
                let (pp, patch) = (PatchParams::default(), Patch::Merge(&force));
                retry("force-promote label", || {
                    pipelines.patch(&trial, &pp, &patch)
                })
                .await;
                let (_, forced) =
                    until(&format!("{} force-promoted {trial}", self.name), || async {
                        let p = promoted::<Pipeline>(w, ns, &self.name).await?;
                        (p.name_any() == trial)
                            .then_some(())
                            .ok_or_else(|| format!("promoted is {}", p.name_any()))
                    })
                    .await?;
                // Then a working spec again (the user's fix after forcing a broken one).
                let fixed = self.pipeline_good(w, ns).await?;
                Ok(("force-promote", forced.max(fixed)))
            }
            4 => {
                let took = self.pipeline_paused(w, ns).await?;
                let resumed = self.pipeline_good(w, ns).await?;
                Ok(("pause-resume", took.max(resumed)))
            }
            _ => {
                self.rider = Some(self.rider.map_or(1, |n| n + 1));
                Ok(("rider-edit", self.pipeline_good(w, ns).await?))
            }
        }
    }

    async fn monovertex_good(&self, w: &World, ns: &str) -> Step {
        let image = if self.alt { MV_JAVA } else { MV_IMAGE };
        apply::<MonoVertexRollout>(w, ns, &monovertex_rollout(&self.name, image, self.rider)).await;
        self.monovertex_settled(w, ns).await
    }

    async fn monovertex_settled(&self, w: &World, ns: &str) -> Step {
        let image = if self.alt { MV_JAVA } else { MV_IMAGE };
        let is_good = |m: &MonoVertex| support::scenario::mv_image(m) == image;
        let asked = AskedAgain::default();
        let (_, took) = until(&format!("{} settled on {image}", self.name), || async {
            let r = api::<MonoVertexRollout>(w, ns)
                .get_opt(&self.name)
                .await
                .ok()
                .flatten();
            let up = r
                .as_ref()
                .and_then(|r| r.status.as_ref()?.progressive_status.as_ref())
                .and_then(|p| p.upgrading_mono_vertex_status.as_ref())
                .map(|u| &u.child);
            if let Some((trial, why)) = good_trial_failed(w, ns, up, is_good).await
                && let Some(n) = asked.first_time(w, &self.name, &trial, &why)
            {
                let again = monovertex_rollout(&self.name, image, self.rider);
                apply::<MonoVertexRollout>(w, ns, &asked_again(again, "monoVertex", n)).await;
                return Err(format!("{trial} failed ({why}): asked again"));
            }
            rollout_settled::<MonoVertexRollout>(w, ns, &self.name).await?;
            let mv = promoted::<MonoVertex>(w, ns, &self.name).await?;
            let have = support::scenario::mv_image(&mv);
            if have != image {
                return Err(format!("{} runs {have}", mv.name_any()));
            }
            if let Some(n) = self.rider {
                rider_holds(w, ns, &mv.name_any(), n).await?;
            }
            Ok(())
        })
        .await?;
        Ok(took)
    }

    async fn monovertex_flow(&mut self, w: &World) -> Result<(&'static str, Duration), String> {
        let ns = w.prog.clone();
        let ns = ns.as_str();
        match self.rng.below(3) {
            0 => {
                let before = promoted::<MonoVertex>(w, ns, &self.name).await?.name_any();
                self.alt = !self.alt;
                let took = self.monovertex_good(w, ns).await?;
                let now = promoted::<MonoVertex>(w, ns, &self.name).await?.name_any();
                if now == before {
                    return Err(format!("{}: an image change kept {now}", self.name));
                }
                Ok(("progressive-success", took))
            }
            1 => {
                let before = promoted::<MonoVertex>(w, ns, &self.name).await?.name_any();
                let existing = names(&children::<MonoVertex>(w, ns, &self.name).await?);
                apply::<MonoVertexRollout>(
                    w,
                    ns,
                    &monovertex_rollout(&self.name, MV_BAD, self.rider),
                )
                .await;
                let trial = new_trial::<MonoVertex>(w, ns, &self.name, &existing, |m| {
                    support::scenario::mv_image(m) == MV_BAD
                })
                .await?;
                let (_, failed) = until(&format!("{} trial {trial} failed", self.name), || async {
                    let r = api::<MonoVertexRollout>(w, ns)
                        .get(&self.name)
                        .await
                        .map_err(|e| e.to_string())?;
                    let up = r
                        .status
                        .as_ref()
                        .and_then(|s| s.progressive_status.as_ref())
                        .and_then(|p| p.upgrading_mono_vertex_status.as_ref())
                        .ok_or("no upgrading status")?;
                    failed_trial(&up.child, &trial)
                })
                .await?;
                let back = self.monovertex_good(w, ns).await?;
                let now = promoted::<MonoVertex>(w, ns, &self.name).await?.name_any();
                if now != before {
                    return Err(format!(
                        "{}: reverting a failed upgrade promoted {now}, not {before}",
                        self.name
                    ));
                }
                Ok(("failure-revert", failed.max(back)))
            }
            _ => {
                self.rider = Some(self.rider.map_or(1, |n| n + 1));
                Ok(("rider-edit", self.monovertex_good(w, ns).await?))
            }
        }
    }

    fn isb_manifest(&self) -> Value {
        let version = if self.isb_old { "2.10.11" } else { "2.10.17" };
        support::scenario::isb(version, self.isb_volume(), None)
    }

    fn isb_volume(&self) -> &'static str {
        if self.isb_big { "20Mi" } else { "10Mi" }
    }

    /// The pause-and-drain lane settled: the pipeline on its spec and Running, on the current
    /// ISB service, which runs the asked version; the controller on its version.
    async fn ppnd_settled(&self, w: &World, ns: &str) -> Step {
        let want = if self.alt { 3 } else { 2 };
        let version = if self.isb_old { "2.10.11" } else { "2.10.17" };
        let controller = if self.nc_old { "v1.7.5" } else { "v1.8.1" };
        let (_, took) = until(&format!("{} settled", self.name), || async {
            rollout_settled::<ISBServiceRollout>(w, ns, ISB).await?;
            rollout_settled::<PipelineRollout>(w, ns, &self.name).await?;
            rollout_settled::<NumaflowControllerRollout>(w, ns, "numaflow-controller").await?;
            let isbsvc = promoted::<InterStepBufferService>(w, ns, ISB).await?;
            let have = isbsvc
                .spec
                .pointer("/jetstream/version")
                .and_then(Value::as_str);
            if have != Some(version) {
                return Err(format!("{} on {have:?}", isbsvc.name_any()));
            }
            let volume = isbsvc
                .spec
                .pointer("/jetstream/persistence/volumeSize")
                .and_then(Value::as_str);
            if volume != Some(self.isb_volume()) {
                return Err(format!("{} has volume {volume:?}", isbsvc.name_any()));
            }
            let p = promoted::<Pipeline>(w, ns, &self.name).await?;
            if vertices(&p) != want || phase_of(&p.status) != "Running" {
                return Err(format!(
                    "{}: phase {} spec {}",
                    p.name_any(),
                    phase_of(&p.status),
                    p.spec
                ));
            }
            if p.spec["interStepBufferServiceName"] != json!(isbsvc.name_any()) {
                return Err(format!("{} not on {}", p.name_any(), isbsvc.name_any()));
            }
            let d = api::<Deployment>(w, ns)
                .get("numaflow-controller")
                .await
                .map_err(|e| e.to_string())?;
            let image = fixtures::image(&d);
            (image.ends_with(controller) && d.status.and_then(|s| s.available_replicas) == Some(1))
                .then_some(())
                .ok_or_else(|| format!("controller image {image}"))
        })
        .await?;
        Ok(took)
    }

    async fn ppnd_flow(&mut self, w: &World) -> Result<(&'static str, Duration), String> {
        let ns = w.ppnd.clone();
        let ns = ns.as_str();
        match self.rng.below(5) {
            0 => {
                self.alt = !self.alt;
                apply::<PipelineRollout>(w, ns, &self.pipeline_manifest(good_pipeline(self.alt)))
                    .await;
                Ok(("pause-and-drain-pipeline", self.ppnd_settled(w, ns).await?))
            }
            4 => {
                // A recreate field: the ISB service and its pipeline are replaced under new
                // names, the pipeline drained first.
                let before = promoted::<InterStepBufferService>(w, ns, ISB)
                    .await?
                    .name_any();
                self.isb_big = !self.isb_big;
                apply::<ISBServiceRollout>(w, ns, &self.isb_manifest()).await;
                let took = self.ppnd_settled(w, ns).await?;
                let now = promoted::<InterStepBufferService>(w, ns, ISB)
                    .await?
                    .name_any();
                if now == before {
                    return Err(format!("{ISB}: a volume change kept {now}"));
                }
                Ok(("pause-and-drain-isbsvc-recreate", took))
            }
            1 => {
                self.isb_old = !self.isb_old;
                apply::<ISBServiceRollout>(w, ns, &self.isb_manifest()).await;
                Ok(("pause-and-drain-isbsvc", self.ppnd_settled(w, ns).await?))
            }
            2 => {
                self.nc_old = !self.nc_old;
                let version = if self.nc_old { "1.7.5" } else { "1.8.1" };
                apply::<NumaflowControllerRollout>(w, ns, &fixtures::nc_rollout(version)).await;
                Ok((
                    "pause-and-drain-controller",
                    self.ppnd_settled(w, ns).await?,
                ))
            }
            _ => {
                let took = self.pipeline_paused(w, ns).await?;
                apply::<PipelineRollout>(w, ns, &self.pipeline_manifest(good_pipeline(self.alt)))
                    .await;
                Ok(("pause-resume", took.max(self.ppnd_settled(w, ns).await?)))
            }
        }
    }
}

impl Lane {
    /// The lane's rollouts reached the state it last asked for.
    async fn last_asked(&self, w: &World, kind: LaneKind) -> Step {
        match kind {
            LaneKind::Pipeline => self.pipeline_settled(w, &w.prog).await,
            LaneKind::MonoVertex => self.monovertex_settled(w, &w.prog).await,
            LaneKind::PauseAndDrain => self.ppnd_settled(w, &w.ppnd).await,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum LaneKind {
    Pipeline,
    MonoVertex,
    PauseAndDrain,
}

/// Runs flows on `lane` while the budget lasts; gives the lane back, with the first failure.
async fn run_lane(w: Arc<World>, kind: LaneKind, mut lane: Lane) -> (Lane, Result<(), String>) {
    let done = lane_flows(&w, kind, &mut lane).await;
    (lane, done)
}

async fn lane_flows(w: &World, kind: LaneKind, lane: &mut Lane) -> Result<(), String> {
    while w.take_flow() {
        w.note(format!("{} ({kind:?}): flow starts", lane.name));
        let done = match kind {
            LaneKind::Pipeline => lane.pipeline_flow(w).await,
            LaneKind::MonoVertex => lane.monovertex_flow(w).await,
            LaneKind::PauseAndDrain => lane.ppnd_flow(w).await,
        };
        match done {
            Ok((flow, took)) => {
                w.note(format!(
                    "{}: {flow} done, slowest step {:.1}s",
                    lane.name,
                    took.as_secs_f64()
                ));
                if let Ok(mut f) = w.flows.lock() {
                    f.push((lane.name.clone(), flow, took.as_secs_f64()));
                }
            }
            Err(e) => {
                FAILED.store(true, Ordering::Relaxed);
                return Err(format!("lane {}: {e}", lane.name));
            }
        }
    }
    Ok(())
}

/// The operator, with leader election, restarted after each kill; every incarnation's log is
/// kept.
struct Operator {
    current: Option<Process>,
    incarnation: usize,
    kubeconfig: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    logs: Vec<PathBuf>,
}

impl Operator {
    fn start(&mut self) {
        self.incarnation += 1;
        let name = format!("operator-{}", self.incarnation);
        let p = Process::start_with(
            &self.kubeconfig,
            &self.config,
            &self.dir,
            &name,
            &["--leader-elect"],
        );
        self.logs.push(p.log.clone());
        self.current = Some(p);
    }

    /// An error if the current incarnation has exited on its own.
    fn alive(&mut self) -> Result<(), String> {
        match self.current.as_mut().map(|p| p.child.try_wait()) {
            Some(Ok(Some(status))) => Err(format!(
                "operator incarnation {} exited on its own ({status}); last lines of {}:\n{}",
                self.incarnation,
                self.logs
                    .last()
                    .map(|l| l.display().to_string())
                    .unwrap_or_default(),
                self.logs
                    .last()
                    .map(|l| numaplane_testenv::controlplane::tail(l, 5))
                    .unwrap_or_default()
            )),
            _ => Ok(()),
        }
    }

    /// SIGKILL; returns an error if it had already exited on its own.
    fn kill(&mut self) -> Result<(), String> {
        self.alive()?;
        if let Some(mut p) = self.current.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        Ok(())
    }

    /// SIGTERM, as a rolling update stops a pod: in-flight reconciles finish, the lease is
    /// released, and the process exits 0 (within 30 s, else it is killed and that is an error).
    async fn terminate(&mut self) -> Result<(), String> {
        self.alive()?;
        let Some(mut p) = self.current.take() else {
            return Ok(());
        };
        p.signal("-TERM");
        let t0 = Instant::now();
        loop {
            match p.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(format!(
                        "operator incarnation {} exited with {status} on SIGTERM; last lines:\n{}",
                        self.incarnation,
                        numaplane_testenv::controlplane::tail(&p.log, 5)
                    ));
                }
                _ if t0.elapsed() > Duration::from_secs(30) => {
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                    return Err(format!(
                        "operator incarnation {} still running 30 s after SIGTERM",
                        self.incarnation
                    ));
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn panics(&self) -> Vec<String> {
        self.logs
            .iter()
            .filter_map(|l| {
                let text = std::fs::read_to_string(l).unwrap_or_default();
                text.lines()
                    .find(|line| line.contains("panicked at"))
                    .map(|line| format!("{}: {line}", l.display()))
            })
            .collect()
    }
}

/// Injects process faults, dealt from shuffled [`DECK`]s, until `stop`; then, for at most
/// [`TOP_UP_BOUND`], until every kind reached `minimum` and all together `min_total`: process
/// faults go on while one of theirs is short, and each proxy fault short is owed to the proxy
/// ([`FaultProxy::owe`]), which puts it on the operator's next request it applies to. Returns the count of each process fault.
async fn inject(
    env: &'static TestEnv,
    w: Arc<World>,
    op: Arc<tokio::sync::Mutex<Operator>>,
    proxy: Arc<FaultProxy>,
    (minimum, min_total): (BTreeMap<&'static str, u64>, u64),
    stop: Arc<AtomicBool>,
    seed: u64,
) -> Result<BTreeMap<&'static str, u64>, String> {
    let mut rng = Rng::new(seed, 0xfa17);
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut deck: Vec<&'static str> = Vec::new();
    let mut stopped_at: Option<Instant> = None;
    let short = |counts: &BTreeMap<&'static str, u64>, kind: &str| {
        let have = counts
            .get(kind)
            .copied()
            .unwrap_or_else(|| proxy.counts().get(kind).copied().unwrap_or(0));
        minimum.get(kind).map_or(0, |min| min.saturating_sub(have))
    };
    loop {
        let gap = Duration::from_secs(rng.between(FAULT_GAP.0, FAULT_GAP.1));
        let t = Instant::now();
        let mut topping_up_process = true;
        while t.elapsed() < gap {
            if stop.load(Ordering::Relaxed) {
                if stopped_at.is_none() {
                    stopped_at = Some(Instant::now());
                    for kind in PROXY_FAULTS {
                        for _ in 0..short(&counts, kind) {
                            proxy.owe(kind);
                        }
                    }
                    // Then what the total still lacks, spread over the proxy's kinds.
                    let injected = counts.values().sum::<u64>()
                        + proxy
                            .counts()
                            .iter()
                            .filter(|(k, _)| **k != "forwarded")
                            .map(|(_, v)| *v)
                            .sum::<u64>();
                    let lacking = min_total.saturating_sub(injected + proxy.owed() as u64);
                    for kind in PROXY_FAULTS.iter().cycle().take(lacking as usize) {
                        proxy.owe(kind);
                    }
                    if proxy.owed() > 0 {
                        w.note(format!("topping up: {} proxy faults owed", proxy.owed()));
                    }
                }
                topping_up_process = DECK.iter().any(|k| short(&counts, k) > 0);
                let proxy_short =
                    PROXY_FAULTS.iter().any(|k| short(&counts, k) > 0) || proxy.owed() > 0;
                let late = stopped_at.is_some_and(|t| t.elapsed() > TOP_UP_BOUND);
                if !(topping_up_process || proxy_short) || late || FAILED.load(Ordering::Relaxed) {
                    return Ok(counts);
                }
            }
            if let Err(e) = op.lock().await.alive() {
                FAILED.store(true, Ordering::Relaxed);
                return Err(e);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if !topping_up_process {
            continue;
        }
        if deck.is_empty() {
            deck = DECK.to_vec();
            // Fisher-Yates with the injector's stream.
            for i in (1..deck.len()).rev() {
                deck.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let what = deck.pop().unwrap_or("operator-sigkill");
        let down = Duration::from_millis(rng.below(2000));
        let done = match what {
            "operator-sigkill" => {
                let mut op = op.lock().await;
                let killed = op.kill();
                tokio::time::sleep(down).await;
                op.start();
                killed
            }
            "operator-sigterm" => {
                let mut op = op.lock().await;
                let clean = op.terminate().await;
                tokio::time::sleep(down).await;
                op.start();
                clean
            }
            restart => {
                let from = Instant::now();
                let part = if restart == "apiserver-restart" {
                    "kube-apiserver"
                } else {
                    "etcd"
                };
                let done = env.restart(part, down).await.map_err(|e| format!("{e:#}"));
                if let Ok(mut r) = w.restarts.lock() {
                    r.push((from, Instant::now()));
                }
                done
            }
        };
        if let Err(e) = done {
            FAILED.store(true, Ordering::Relaxed);
            return Err(e);
        }
        w.note(format!("fault: {what} (down {down:?})"));
        *counts.entry(what).or_insert(0) += 1;
    }
}

/// Sets up a namespace: strategy, Numaflow controller, an ISB service, the lanes' rollouts.
async fn namespace(client: &Client, env: &TestEnv, prefix: &str, strategy: &str) -> String {
    let ns = env.create_namespace(prefix).await;
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "strategy", "labels": {labels::CONFIG: "namespace-level-config"}},
        "data": {"upgradeStrategy": strategy}
    }))
    .expect("namespace config");
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &cm)
        .await
        .expect("create the namespace-level config");
    install_numaflow(client, "numaplane-system", &ns, "1.8.1").await;
    ns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_survive_crashes_restarts_and_api_faults() {
    let seed = setting("CHAOS_SEED", 20_261_204);
    let flows = setting("CHAOS_FLOWS", 8) as usize;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = TestEnv::shared_real().await;
    let client = env.client();
    install_rbac(&client).await;
    let usde: ConfigMap = serde_saphyr::from_str(
        &std::fs::read_to_string(repo("config/manager/usde-config.yaml")).expect("usde"),
    )
    .expect("parse usde-config.yaml");
    Api::<ConfigMap>::namespaced(client.clone(), "numaplane-system")
        .patch(
            "numaplane-controller-usde-config",
            &PatchParams::apply("chaos-setup").force(),
            &Patch::Apply(&usde),
        )
        .await
        .expect("the USDE ConfigMap");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).expect("config");

    let proxy = Arc::new(
        FaultProxy::start(env.operator_config(), Rates::default(), seed)
            .await
            .expect("fault proxy"),
    );
    let kubeconfig = dir.path().join("proxy.kubeconfig");
    proxy
        .write_kubeconfig(&kubeconfig)
        .expect("proxy kubeconfig");
    let op = Arc::new(tokio::sync::Mutex::new(Operator {
        current: None,
        incarnation: 0,
        kubeconfig,
        config,
        dir: dir.path().to_path_buf(),
        logs: Vec::new(),
    }));
    op.lock().await.start();

    let prog = namespace(&client, env, "chaos-prog", "progressive").await;
    analysis::apply_templates(&client, &prog, analysis::SHIPPED_TEMPLATES).await;
    let ppnd = namespace(&client, env, "chaos-ppnd", "pause-and-drain").await;
    let recorders = [
        Recorder::start(&client, &prog).await,
        Recorder::start(&client, &ppnd).await,
    ];
    for r in &recorders {
        r.configure(CONFIG);
        // The API server and etcd restarts make the watches relist.
        r.history_may_have_gaps();
    }
    let w = Arc::new(World {
        client: client.clone(),
        prog: prog.clone(),
        ppnd: ppnd.clone(),
        budget: AtomicUsize::new(flows),
        flows: Mutex::default(),
        log: Mutex::default(),
        restarts: Mutex::default(),
        stack_failed_trials: Mutex::default(),
        t0: Instant::now(),
    });
    let lane = |name: &str, stream: u64| Lane {
        name: name.into(),
        rng: Rng::new(seed, stream),
        alt: false,
        rider: None,
        isb_old: false,
        nc_old: false,
        isb_big: false,
        analysis: false,
    };
    let lanes = [
        (LaneKind::Pipeline, lane("pa", 1)),
        (
            LaneKind::Pipeline,
            Lane {
                analysis: true,
                ..lane("pb", 2)
            },
        ),
        (LaneKind::MonoVertex, lane("mv", 3)),
        (LaneKind::PauseAndDrain, lane("pd", 4)),
    ];

    // The starting point, without faults.
    for ns in [&prog, &ppnd] {
        apply::<ISBServiceRollout>(&w, ns, &support::scenario::isb("2.10.17", "10Mi", None)).await;
    }
    for (kind, l) in &lanes {
        match kind {
            LaneKind::Pipeline => l.pipeline_good(&w, &prog).await,
            LaneKind::MonoVertex => l.monovertex_good(&w, &prog).await,
            LaneKind::PauseAndDrain => {
                apply::<PipelineRollout>(&w, &ppnd, &l.pipeline_manifest(good_pipeline(false)))
                    .await;
                l.ppnd_settled(&w, &ppnd).await
            }
        }
        .unwrap_or_else(|e| panic!("set-up: {e}"));
    }

    // Flows under faults.
    let started = Instant::now();
    proxy.set_enabled(true);
    let stop = Arc::new(AtomicBool::new(false));
    let minimum = minimum_faults(flows);
    let injector = tokio::spawn(inject(
        env,
        w.clone(),
        op.clone(),
        proxy.clone(),
        (minimum.clone(), minimum_total_faults(flows)),
        stop.clone(),
        seed,
    ));
    let running: Vec<_> = lanes
        .into_iter()
        .map(|(kind, l)| (kind, tokio::spawn(run_lane(w.clone(), kind, l))))
        .collect();
    let mut failures = Vec::new();
    let mut lanes = Vec::new();
    for (kind, r) in running {
        match r.await {
            Ok((lane, done)) => {
                if let Err(e) = done {
                    failures.push(e);
                }
                lanes.push((kind, lane));
            }
            Err(e) => failures.push(format!("lane task: {e}")),
        }
    }
    let flows_wall = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let process_faults = match injector.await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            failures.push(format!("fault injector: {e}"));
            BTreeMap::new()
        }
        Err(e) => {
            failures.push(format!("fault injector task: {e}"));
            BTreeMap::new()
        }
    };
    proxy.set_enabled(false);
    let wall = started.elapsed();

    // With the faults off, every rollout reaches what its lane last asked for.
    let mut settle_seconds = 0.0_f64;
    if failures.is_empty() {
        let settle_start = Instant::now();
        for (kind, lane) in &lanes {
            let done = tokio::time::timeout(SETTLE_BOUND, lane.last_asked(&w, *kind)).await;
            match done {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => failures.push(format!("settle with faults off: {e}")),
                Err(_) => failures.push(format!(
                    "settle with faults off: {} ({kind:?}) not settled within {SETTLE_BOUND:?}",
                    lane.name
                )),
            }
        }
        settle_seconds = settle_start.elapsed().as_secs_f64();
        w.note(format!("settled with faults off in {settle_seconds:.1}s"));
    }

    // The whole history held the invariants.
    let mut violations = Vec::new();
    let mut unjudged = Vec::new();
    let mut traces = Vec::new();
    let restarts = w.restarts.lock().map(|r| r.clone()).unwrap_or_default();
    for (ns, r) in [(&prog, &recorders[0]), (&ppnd, &recorders[1])] {
        for &(from, to) in &restarts {
            r.control_plane_restarted(from, to);
        }
        let verdict = r.verdict_now(&client, ns).await;
        traces.extend(
            verdict
                .violations
                .iter()
                .map(|v| format!("{v}\n{}", r.trace(v, 60))),
        );
        violations.extend(verdict.violations);
        unjudged.extend(verdict.unjudged);
    }
    let vanished: usize = recorders.iter().map(Recorder::vanished).sum();
    let panics = op.lock().await.panics();
    // The last incarnation leads (it ran with leader election), and stops as a rolling update
    // would stop it, releasing the lease.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "numaplane-system");
    let incarnation = format!("operator-{}_", op.lock().await.incarnation);
    // A SIGKILLed holder cannot release: its successor takes the lease once it expires (15 s,
    // plus a retry period).
    let t0 = Instant::now();
    let mut holder = lease_holder(&leases).await;
    while !holder
        .as_deref()
        .is_some_and(|h| h.starts_with(&incarnation))
        && t0.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
        holder = lease_holder(&leases).await;
    }
    if !holder
        .as_deref()
        .is_some_and(|h| h.starts_with(&incarnation))
    {
        failures.push(format!(
            "the lease numaplane-controller-lock is held by {holder:?}, not the last incarnation ({incarnation}…)"
        ));
    }
    if let Err(e) = op.lock().await.terminate().await {
        failures.push(format!("the last operator incarnation: {e}"));
    } else if let Some(h) = lease_holder(&leases).await {
        failures.push(format!("the lease still held by {h} after SIGTERM"));
    }

    let mut faults: BTreeMap<String, u64> = process_faults
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    for (k, v) in proxy.counts() {
        if k != "forwarded" {
            faults.insert(k.to_string(), v);
        }
    }
    // Every kind of fault was injected, at least as often as the run's size asks.
    for (kind, min) in &minimum {
        let have = faults.get(*kind).copied().unwrap_or(0);
        if have < *min {
            failures.push(format!(
                "fault kind {kind} injected {have} times, below the minimum {min} for {flows} flows"
            ));
        }
    }
    let total: u64 = faults.values().sum();
    if total < minimum_total_faults(flows) {
        failures.push(format!(
            "{total} faults injected, below the minimum {} for {flows} flows",
            minimum_total_faults(flows)
        ));
    }
    let stack_failed = w
        .stack_failed_trials
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    let allowed = (flows / FLOWS_PER_STACK_FAILURE).max(1);
    if stack_failed.len() > allowed {
        failures.push(format!(
            "{} good trials failed (asked again each time), more than {allowed} for {flows} flows: {}",
            stack_failed.len(),
            stack_failed.join(" | ")
        ));
    }
    let done = w.flows.lock().map(|f| f.clone()).unwrap_or_default();
    let mut by_flow: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, f, _) in &done {
        *by_flow.entry(f).or_default() += 1;
    }
    let slowest = done.iter().map(|(_, _, s)| *s).fold(0.0, f64::max);
    let results = json!({
        "command": format!("CHAOS_FLOWS={flows} CHAOS_SEED={seed} make chaos"),
        "seed": seed,
        "flows": done.len(),
        "flows_by_kind": by_flow,
        "faults": total,
        "minimum_faults": minimum_total_faults(flows),
        "faults_by_kind": faults,
        "requests_forwarded": proxy.counts().get("forwarded").copied().unwrap_or(0),
        "minimum_faults_by_kind": minimum,
        "invariant_violations": violations.len(),
        "deletions_unseen_by_the_checker": vanished,
        "judgements_the_checker_could_not_make": unjudged.len(),
        "good_trials_failed_by_the_stack": stack_failed,
        "settle_with_faults_off_seconds": (settle_seconds * 10.0).round() / 10.0,
        "settle_bound_seconds": SETTLE_BOUND.as_secs(),
        "operator_panics": panics.len(),
        "slowest_convergence_seconds": (slowest * 10.0).round() / 10.0,
        "convergence_bound_seconds": FLOW_BOUND.as_secs(),
        "flows_wall_seconds": flows_wall.as_secs(),
        "wall_seconds": wall.as_secs(),
    });
    eprintln!("chaos: {results:#}");
    if let Ok(path) = std::env::var("CHAOS_RESULTS") {
        std::fs::write(&path, format!("{results:#}\n")).expect("write CHAOS_RESULTS");
    }
    if !(failures.is_empty() && violations.is_empty() && panics.is_empty()) {
        let log = w
            .log
            .lock()
            .map(|l| {
                l.iter()
                    .map(|(t, s)| format!("  {t:7.1}s {s}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        panic!(
            "chaos run failed (replay with CHAOS_SEED={seed} CHAOS_FLOWS={flows}; operator logs in {}):\n\
             failures:\n{}\npanics:\n{}\nviolations, each with its history:\n{}\njudgements the checker could not make (history lost in a relist or around a control-plane restart):\n{}\nflow and fault log:\n{log}",
            dir.keep().display(),
            failures.join("\n"),
            panics.join("\n"),
            traces.join("\n"),
            unjudged.join("\n"),
        );
    }
    assert_eq!(done.len(), flows, "every flow of the budget completed");
}
