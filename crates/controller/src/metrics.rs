//! Prometheus metrics: every metric name, type and label set of the reference (docs/compatibility.md, with
//! the constant label `intuit_alert="true"`), plus reconcile durations and errors per controller
//! and API requests by verb, resource and code. Label values are bounded: object names only in
//! the per-object health gauges (one series per object), reasons from a fixed set.

use numaplane_api::{Kind, Subject};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

pub type Labels = Vec<(&'static str, String)>;

/// The reference's pause-duration gauges.
#[derive(Clone, Copy, Debug)]
pub enum PauseGauge {
    /// `numaflow_pipeline_system_paused_seconds`: paused by Numaplane (0 for user pauses).
    PipelineSystemPaused,
    /// `numaflow_pipeline_system_pausing_seconds`.
    PipelineSystemPausing,
    /// `numaflow_isbservice_paused_seconds`: an ISBServiceRollout's pause request.
    IsbService,
    /// `numaflow_controller_rollout_paused_seconds`: a NumaflowControllerRollout's request.
    ControllerRollout,
}
type GaugeF = Gauge<f64, AtomicU64>;

/// Prometheus client_golang's default buckets, as the reference's histograms use.
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// A rollout as `(kind, namespace, name)`.
type RolloutKey = (Kind, String, String);

/// A progressive verdict: the trial judged and whether it succeeded.
type Verdict = (String, bool);

pub struct Metrics {
    registry: Registry,
    // Per-object health, one series per object (the current label combination).
    pub pipeline_rollout_health: Family<Labels, Gauge>,
    pub isb_services_rollout_health: Family<Labels, Gauge>,
    pub monovertex_rollout_health: Family<Labels, Gauge>,
    pub numaflow_controller_rollout_health: Family<Labels, Gauge>,
    pub numaflow_controller_health: Family<Labels, Gauge>,
    current_health: Mutex<HashMap<(Subject, String, String), Labels>>,
    // Rollouts per namespace.
    pub pipeline_rollouts_running: Family<Labels, Gauge>,
    pub isb_service_rollouts_running: Family<Labels, Gauge>,
    pub monovertex_rollouts_running: Family<Labels, Gauge>,
    pub numaflow_controller_rollouts_running: Family<Labels, Gauge>,
    known: Mutex<HashMap<Kind, HashMap<String, std::collections::BTreeSet<String>>>>,
    // Reconcile counts per controller (the reference's unlabelled counters).
    syncs: HashMap<Subject, (Counter, Counter)>,
    pub pipeline_rollout_queue_length: Gauge,
    pub progressive_pipeline_drains: Family<Labels, Counter>,
    pub pipeline_system_paused_seconds: Family<Labels, GaugeF>,
    pub pipeline_system_pausing_seconds: Family<Labels, GaugeF>,
    pub isbservice_paused_seconds: Family<Labels, GaugeF>,
    pub controller_rollout_paused_seconds: Family<Labels, GaugeF>,
    pub reconciliation_duration: Family<Labels, Histogram>,
    pub kube_request_total: Counter,
    pub kube_resource_monitored: Gauge,
    pub kube_resource_cache: Family<Labels, Gauge>,
    pub cluster_cache_error_total: Counter,
    pub progressive_started: HashMap<Kind, Family<Labels, Counter>>,
    pub progressive_completed: HashMap<Kind, Family<Labels, Counter>>,
    /// The last verdict counted per rollout `(kind, namespace, name)`.
    last_verdict: Mutex<HashMap<RolloutKey, Verdict>>,
    pub numaflow_controller_kubectl_execution_total: Counter,
    // Ours.
    pub reconcile_duration: Family<Labels, Histogram>,
    /// How long finished upgrade attempts took, by kind, strategy and outcome.
    pub upgrade_duration: Family<Labels, Histogram>,
    /// The last finished attempt counted per rollout `(kind, namespace, name)`: child and start.
    last_upgrade: Mutex<HashMap<RolloutKey, (String, String)>>,
    pub reconcile_errors: Family<Labels, Counter>,
    /// From the moment a scheduled step fell due to the start of its pass (`due_steps.rs`).
    pub due_step_delay: Family<Labels, Histogram>,
    pub kube_requests: Family<Labels, Counter>,
    pub leader: Gauge,
    /// Writes refused because this replica's lease renewal was overdue.
    pub fenced_writes: Counter,
    /// Counter families the reference exposes without the `_total` suffix.
    unsuffixed: Vec<String>,
    /// Every registered family and its type, as registered (see [`Metrics::series_names`]).
    families: Vec<(String, MetricType)>,
    /// controller-runtime's own families, as its registry exposes them (no constant label).
    runtime: Registry,
    runtime_reconcile: Family<Labels, Counter>,
    runtime_reconcile_errors: Family<Labels, Counter>,
    runtime_reconcile_time: Family<Labels, Histogram>,
    rest_client_requests: Family<Labels, Counter>,
}

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`.
/// Buckets of `numaplane_upgrade_duration_seconds`: an update applied at once up to a recycle
/// that drains for hours.
const UPGRADE_BUCKETS: [f64; 14] = [
    1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
    28800.0,
];

const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// The metric name part of a kind's progressive upgrades (`numaplane_<part>_progressive_started`),
/// as the reference names them.
fn progressive_prefix(kind: Kind) -> &'static str {
    match kind {
        Kind::Pipeline => "pipeline",
        Kind::MonoVertex => "monovertex",
        Kind::IsbService => "isbsvc",
        Kind::NumaflowController => "numaflowcontroller",
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_labels(
            [(Cow::Borrowed("intuit_alert"), Cow::Borrowed("true"))].into_iter(),
        );
        let mut families: Vec<(String, MetricType)> = Vec::new();
        fn type_of<M: TypedMetric>(_: &M) -> MetricType {
            M::TYPE
        }
        macro_rules! reg {
            ($name:expr, $help:expr, $m:expr) => {
                reg!(in registry, $name, $help, $m)
            };
            (in $registry:ident, $name:expr, $help:expr, $m:expr) => {{
                let m = $m;
                let name: String = $name.into();
                families.push((name.clone(), type_of(&m)));
                $registry.register(name, $help, m.clone());
                m
            }};
        }
        let pipeline_rollout_health = reg!(
            "numaplane_pipeline_rollout_health",
            "Health of a PipelineRollout (1 for its current phase and failure flags)",
            Family::<Labels, Gauge>::default()
        );
        let isb_services_rollout_health = reg!(
            "numaplane_isb_services_rollout_health",
            "Health of an ISBServiceRollout",
            Family::<Labels, Gauge>::default()
        );
        let monovertex_rollout_health = reg!(
            "numaplane_monovertex_rollout_health",
            "Health of a MonoVertexRollout",
            Family::<Labels, Gauge>::default()
        );
        let numaflow_controller_rollout_health = reg!(
            "numaflow_controller_rollout_health",
            "Health of a NumaflowControllerRollout",
            Family::<Labels, Gauge>::default()
        );
        let numaflow_controller_health = reg!(
            "numaflow_controller_health",
            "Health of a NumaflowController",
            Family::<Labels, Gauge>::default()
        );
        let pipeline_rollouts_running = reg!(
            "pipeline_rollouts_running",
            "PipelineRollouts per namespace",
            Family::<Labels, Gauge>::default()
        );
        let isb_service_rollouts_running = reg!(
            "isb_service_rollouts_running",
            "ISBServiceRollouts per namespace",
            Family::<Labels, Gauge>::default()
        );
        let monovertex_rollouts_running = reg!(
            "monovertex_rollouts_running",
            "MonoVertexRollouts per namespace",
            Family::<Labels, Gauge>::default()
        );
        let numaflow_controller_rollouts_running = reg!(
            "numaflow_controller_rollouts_running",
            "NumaflowControllerRollouts by name, namespace and version",
            Family::<Labels, Gauge>::default()
        );
        let mut syncs = HashMap::new();
        for subject in Subject::ALL {
            let prefix = match subject {
                Subject::Rollout(Kind::Pipeline) => "pipeline_rollout",
                Subject::Rollout(Kind::IsbService) => "isb_service_rollout",
                Subject::Rollout(Kind::MonoVertex) => "monovertex_rollout",
                Subject::Rollout(Kind::NumaflowController) => "numaflow_controller_rollout",
                Subject::NumaflowController => "numaflow_controller",
            };
            let total = reg!(
                format!("{prefix}_syncs"),
                "Reconciles started",
                Counter::default()
            );
            let errors = reg!(
                format!("{prefix}_sync_errors"),
                "Reconciles that failed",
                Counter::default()
            );
            syncs.insert(subject, (total, errors));
        }
        let pipeline_rollout_queue_length = reg!(
            "pipeline_rollout_queue_length",
            "PipelineRollout reconciles in flight",
            Gauge::default()
        );
        let progressive_pipeline_drains = reg!(
            "progressive_pipeline_drains",
            "Outcomes of draining replaced pipelines",
            Family::<Labels, Counter>::default()
        );
        let pipeline_system_paused_seconds = reg!(
            "numaflow_pipeline_system_paused_seconds",
            "Seconds a pipeline has been paused by Numaplane",
            Family::<Labels, GaugeF>::default()
        );
        let pipeline_system_pausing_seconds = reg!(
            "numaflow_pipeline_system_pausing_seconds",
            "Seconds a pipeline has been pausing for Numaplane",
            Family::<Labels, GaugeF>::default()
        );
        let isbservice_paused_seconds = reg!(
            "numaflow_isbservice_paused_seconds",
            "Seconds an ISBServiceRollout has requested pipelines to pause",
            Family::<Labels, GaugeF>::default()
        );
        let controller_rollout_paused_seconds = reg!(
            "numaflow_controller_rollout_paused_seconds",
            "Seconds a NumaflowControllerRollout has requested pipelines to pause",
            Family::<Labels, GaugeF>::default()
        );
        // Which build serves these metrics (1, labelled with the version), as Go binaries'
        // `*_build_info` do: a dashboard or alert can tell versions apart during an upgrade.
        let build_info = reg!(
            "numaplane_build_info",
            "The Numaplane build serving these metrics (always 1)",
            Family::<Labels, Gauge>::default()
        );
        build_info
            .get_or_create(&vec![("version", env!("CARGO_PKG_VERSION").to_string())])
            .set(1);
        let reconciliation_duration = reg!(
            "numaplane_reconciliation_duration_seconds",
            "Duration of reconciles that created, updated or deleted a child",
            Family::<Labels, Histogram>::new_with_constructor(histogram as fn() -> Histogram)
        );
        let kube_request_total = reg!(
            "numaplane_kube_request",
            "Requests made to the Kubernetes API",
            Counter::default()
        );
        let kube_resource_monitored = reg!(
            "numaplane_kube_resource_monitored",
            "Objects held in the watch caches",
            Gauge::default()
        );
        let kube_resource_cache = reg!(
            "numaplane_kube_resource_cache",
            "Watch caches in use, by API server version",
            Family::<Labels, Gauge>::default()
        );
        let cluster_cache_error_total = reg!(
            "numaplane_cluster_cache_error",
            "Watch errors (each is retried with backoff)",
            Counter::default()
        );
        let mut progressive_started = HashMap::new();
        let mut progressive_completed = HashMap::new();
        for kind in Kind::PROGRESSIVE {
            let k = progressive_prefix(kind);
            progressive_started.insert(
                kind,
                reg!(
                    format!("numaplane_{k}_progressive_started"),
                    "Progressive upgrades started",
                    Family::<Labels, Counter>::default()
                ),
            );
            progressive_completed.insert(
                kind,
                reg!(
                    format!("numaplane_{k}_progressive_completed"),
                    "Progressive upgrades completed",
                    Family::<Labels, Counter>::default()
                ),
            );
        }
        let numaflow_controller_kubectl_execution_total = reg!(
            "numaflow_controller_kubectl_execution",
            "Objects applied or pruned for NumaflowControllers",
            Counter::default()
        );
        let reconcile_duration = reg!(
            "numaplane_reconcile_duration_seconds",
            "Duration of every reconcile pass, by controller",
            Family::<Labels, Histogram>::new_with_constructor(histogram as fn() -> Histogram)
        );
        let upgrade_duration = reg!(
            "numaplane_upgrade_duration_seconds",
            "How long each finished upgrade attempt took (status.upgradeHistory), by kind, strategy and outcome",
            Family::<Labels, Histogram>::new_with_constructor(
                (|| Histogram::new(UPGRADE_BUCKETS)) as fn() -> Histogram
            )
        );
        let due_step_delay = reg!(
            "numaplane_due_step_delay_seconds",
            "From the moment a scheduled step (a progressive verdict) fell due to the start of the pass that took it, by controller and path (lane or worker)",
            Family::<Labels, Histogram>::new_with_constructor(histogram as fn() -> Histogram)
        );
        let reconcile_errors = reg!(
            "numaplane_reconcile_errors",
            "Failed reconcile passes by controller and reason",
            Family::<Labels, Counter>::default()
        );
        let kube_requests = reg!(
            "numaplane_kube_requests",
            "Kubernetes API requests by verb, resource and status code",
            Family::<Labels, Counter>::default()
        );
        let leader = reg!(
            "numaplane_leader",
            "1 while this replica holds the leader lease (or runs without election)",
            Gauge::default()
        );
        let fenced_writes = reg!(
            "numaplane_fenced_writes",
            "Writes refused before leaving because this replica's lease renewal was overdue",
            Counter::default()
        );
        let mut runtime = Registry::default();
        let runtime_reconcile = reg!(
            in runtime,
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            Family::<Labels, Counter>::default()
        );
        let runtime_reconcile_errors = reg!(
            in runtime,
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            Family::<Labels, Counter>::default()
        );
        let runtime_reconcile_time = reg!(
            in runtime,
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            Family::<Labels, Histogram>::new_with_constructor(
                (|| Histogram::new(RECONCILE_TIME_BUCKETS)) as fn() -> Histogram
            )
        );
        let rest_client_requests = reg!(
            in runtime,
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            Family::<Labels, Counter>::default()
        );
        Self {
            families,
            registry,
            runtime,
            runtime_reconcile,
            runtime_reconcile_errors,
            runtime_reconcile_time,
            rest_client_requests,
            pipeline_rollout_health,
            isb_services_rollout_health,
            monovertex_rollout_health,
            numaflow_controller_rollout_health,
            numaflow_controller_health,
            current_health: Mutex::default(),
            pipeline_rollouts_running,
            isb_service_rollouts_running,
            monovertex_rollouts_running,
            numaflow_controller_rollouts_running,
            known: Mutex::default(),
            syncs,
            pipeline_rollout_queue_length,
            progressive_pipeline_drains,
            pipeline_system_paused_seconds,
            pipeline_system_pausing_seconds,
            isbservice_paused_seconds,
            controller_rollout_paused_seconds,
            reconciliation_duration,
            kube_request_total,
            kube_resource_monitored,
            kube_resource_cache,
            cluster_cache_error_total,
            progressive_started,
            progressive_completed,
            last_verdict: Mutex::default(),
            numaflow_controller_kubectl_execution_total,
            reconcile_duration,
            upgrade_duration,
            last_upgrade: Mutex::default(),
            reconcile_errors,
            due_step_delay,
            kube_requests,
            leader,
            fenced_writes,
            unsuffixed: std::iter::once("progressive_pipeline_drains".to_string())
                .chain(
                    Kind::PROGRESSIVE
                        .map(progressive_prefix)
                        .iter()
                        .flat_map(|k| {
                            [
                                format!("numaplane_{k}_progressive_started"),
                                format!("numaplane_{k}_progressive_completed"),
                            ]
                        }),
                )
                .collect(),
        }
    }

    /// The Prometheus text exposition (format 0.0.4), as the reference's controller-runtime
    /// registry serves it: see [`prometheus_text`].
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        let _ = encode(&mut out, &self.runtime);
        prometheus_text(&out, &self.unsuffixed)
    }

    /// Every series name the exposition can carry, whether or not its family has series yet
    /// (empty families are not exposed): a counter as `x_total` (the reference's unsuffixed ones
    /// as `x`), a histogram as `x_bucket`, `x_sum` and `x_count`, a gauge as itself. What a
    /// dashboard or an alerting rule may select.
    pub fn series_names(&self) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        for (name, kind) in &self.families {
            match kind {
                MetricType::Counter if self.unsuffixed.contains(name) => {
                    out.insert(name.clone());
                }
                MetricType::Counter => {
                    out.insert(format!("{name}_total"));
                }
                MetricType::Histogram => {
                    out.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")));
                }
                _ => {
                    out.insert(name.clone());
                }
            }
        }
        out
    }

    fn health_family(&self, subject: Subject) -> &Family<Labels, Gauge> {
        match subject {
            Subject::Rollout(Kind::Pipeline) => &self.pipeline_rollout_health,
            Subject::Rollout(Kind::IsbService) => &self.isb_services_rollout_health,
            Subject::Rollout(Kind::MonoVertex) => &self.monovertex_rollout_health,
            Subject::Rollout(Kind::NumaflowController) => &self.numaflow_controller_rollout_health,
            Subject::NumaflowController => &self.numaflow_controller_health,
        }
    }

    /// Sets an object's one-hot health series, removing its previous combination.
    pub fn set_health(&self, subject: Subject, ns: &str, name: &str, labels: Labels) {
        let family = self.health_family(subject);
        let mut cur = self
            .current_health
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (subject, ns.to_string(), name.to_string());
        if let Some(old) = cur.get(&key)
            && *old != labels
        {
            family.remove(old);
        }
        family.get_or_create(&labels).set(1);
        cur.insert(key, labels);
    }

    /// Forgets a deleted object: its health series and its count in its namespace.
    pub fn forget(&self, subject: Subject, ns: &str, name: &str) {
        let family = self.health_family(subject);
        let mut cur = self
            .current_health
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(old) = cur.remove(&(subject, ns.to_string(), name.to_string())) {
            family.remove(&old);
        }
        drop(cur);
        if let Subject::Rollout(kind) = subject {
            self.count(kind, ns, name, false);
        }
        self.last_verdict
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(_, n_ns, n), _| !(n_ns == ns && n == name));
        self.last_upgrade
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(_, n_ns, n), _| !(n_ns == ns && n == name));
    }

    /// Tracks that a rollout exists (or not) and updates its namespace's `*_running` gauge.
    pub fn count(&self, kind: Kind, ns: &str, name: &str, exists: bool) {
        let family = match kind {
            Kind::Pipeline => &self.pipeline_rollouts_running,
            Kind::IsbService => &self.isb_service_rollouts_running,
            Kind::MonoVertex => &self.monovertex_rollouts_running,
            // Counted by the NumaflowControllerRollout reconciler, with the controllers it runs.
            Kind::NumaflowController => return,
        };
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let set = known
            .entry(kind)
            .or_default()
            .entry(ns.to_string())
            .or_default();
        let changed = if exists {
            set.insert(name.to_string())
        } else {
            set.remove(name)
        };
        if changed {
            family
                .get_or_create(&vec![("namespace", ns.to_string())])
                .set(set.len() as i64);
        }
    }

    /// Counts a reconcile start, and its failure when `error_reason` is set.
    pub fn reconciled(&self, subject: Subject, secs: f64, error_reason: Option<&'static str>) {
        let controller = subject.controller();
        if let Some((total, errors)) = self.syncs.get(&subject) {
            total.inc();
            if error_reason.is_some() {
                errors.inc();
            }
        }
        self.reconcile_duration
            .get_or_create(&vec![("controller", controller.to_string())])
            .observe(secs);
        let c = vec![("controller", controller.to_string())];
        let result = if error_reason.is_some() {
            "error"
        } else {
            "success"
        };
        self.runtime_reconcile
            .get_or_create(&vec![
                ("controller", controller.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
        self.runtime_reconcile_time.get_or_create(&c).observe(secs);
        if error_reason.is_some() {
            self.runtime_reconcile_errors.get_or_create(&c).inc();
        }
        if let Some(reason) = error_reason {
            self.reconcile_errors
                .get_or_create(&vec![
                    ("controller", controller.to_string()),
                    ("reason", reason.to_string()),
                ])
                .inc();
        }
    }

    /// The reference's duration of passes that created, updated or deleted a child.
    pub fn child_change(&self, controller: &'static str, phase: &'static str, secs: f64) {
        self.reconciliation_duration
            .get_or_create(&vec![
                ("type", controller.to_string()),
                ("phase", phase.to_string()),
            ])
            .observe(secs);
    }

    /// The outcome of recycling a pipeline (`progressive_pipeline_drains`).
    pub fn pipeline_drain(
        &self,
        ns: &str,
        rollout: &str,
        pipeline: &str,
        result: numaplane_core::recycle::DrainResult,
    ) {
        self.progressive_pipeline_drains
            .get_or_create(&vec![
                ("namespace", ns.to_string()),
                ("pipelineRollout", rollout.to_string()),
                ("pipeline", pipeline.to_string()),
                ("drainComplete", result.complete().to_string()),
                ("drainResult", result.as_str().to_string()),
            ])
            .inc();
    }

    /// A progressive upgrade started (a trial was created).
    pub fn progressive_started(&self, kind: Kind, ns: &str, rollout: &str, child: &str) {
        if let Some(f) = self.progressive_started.get(&kind) {
            f.get_or_create(&vec![
                ("namespace", ns.to_string()),
                ("rolloutName", rollout.to_string()),
                ("name", child.to_string()),
            ])
            .inc();
        }
    }

    /// A progressive upgrade ended with a verdict on trial `child`. Counted once: a pass that
    /// acts on the verdict again (cut short after its first write, say) adds nothing; a new
    /// verdict on the same trial (a failed one force-promoted) does.
    pub fn progressive_completed(
        &self,
        kind: Kind,
        ns: &str,
        rollout: &str,
        child: &str,
        success: bool,
        forced: bool,
    ) {
        let verdict = (child.to_string(), success);
        let key = (kind, ns.to_string(), rollout.to_string());
        let mut last = self.last_verdict.lock().unwrap_or_else(|e| e.into_inner());
        if last.get(&key) == Some(&verdict) {
            return;
        }
        last.insert(key, verdict);
        drop(last);
        if let Some(f) = self.progressive_completed.get(&kind) {
            f.get_or_create(&vec![
                ("namespace", ns.to_string()),
                ("rolloutName", rollout.to_string()),
                ("name", child.to_string()),
                ("success", success.to_string()),
                ("forcedSuccess", forced.to_string()),
                ("resourceHealthSuccess", String::new()),
            ])
            .inc();
        }
    }

    /// The upgrade attempts a pass finished (`before` → `after`: `status.upgradeHistory`), each
    /// observed once in `numaplane_upgrade_duration_seconds`: a pass that records the same end
    /// again (its status write failed, a held status) adds nothing.
    pub fn upgrades_finished(
        &self,
        kind: Kind,
        ns: &str,
        rollout: &str,
        before: &[numaplane_api::common::UpgradeRecord],
        after: &[numaplane_api::common::UpgradeRecord],
    ) {
        for (r, secs) in numaplane_core::history::finished_since(before, after) {
            let key = (kind, ns.to_string(), rollout.to_string());
            let id = (r.child.clone(), r.start_time.0.to_string());
            let mut last = self.last_upgrade.lock().unwrap_or_else(|e| e.into_inner());
            if last.get(&key) == Some(&id) {
                continue;
            }
            last.insert(key, id);
            drop(last);
            let outcome = r.outcome.map(|o| format!("{o:?}")).unwrap_or_default();
            self.upgrade_duration
                .get_or_create(&vec![
                    ("kind", kind.metric_label().to_string()),
                    ("strategy", format!("{:?}", r.strategy)),
                    ("outcome", outcome),
                ])
                .observe(secs);
        }
    }

    /// A pause gauge of the reference, with its label order.
    pub fn pause_seconds(&self, gauge: PauseGauge, ns: &str, name: &str, secs: f64) {
        let (family, labels): (_, Labels) = match gauge {
            PauseGauge::PipelineSystemPaused => (
                &self.pipeline_system_paused_seconds,
                vec![("namespace", ns.to_string()), ("name", name.to_string())],
            ),
            PauseGauge::PipelineSystemPausing => (
                &self.pipeline_system_pausing_seconds,
                vec![("namespace", ns.to_string()), ("name", name.to_string())],
            ),
            PauseGauge::IsbService => (
                &self.isbservice_paused_seconds,
                vec![("name", name.to_string()), ("namespace", ns.to_string())],
            ),
            PauseGauge::ControllerRollout => (
                &self.controller_rollout_paused_seconds,
                vec![("name", name.to_string()), ("namespace", ns.to_string())],
            ),
        };
        family.get_or_create(&labels).set(secs);
    }

    /// One Kubernetes API request.
    /// controller-runtime's `rest_client_requests_total{code,host,method}`.
    pub fn rest_request(&self, method: &str, host: &str, code: u16) {
        self.rest_client_requests
            .get_or_create(&vec![
                ("code", code.to_string()),
                ("host", host.to_string()),
                ("method", method.to_string()),
            ])
            .inc();
    }

    pub fn kube_request(&self, verb: &str, resource: &str, code: u16) {
        self.kube_request_total.inc();
        self.kube_requests
            .get_or_create(&vec![
                ("verb", verb.to_string()),
                ("resource", resource.to_string()),
                ("code", code.to_string()),
            ])
            .inc();
    }
}

/// Counts one unit on a gauge for as long as it lives.
pub struct InFlight<'a>(&'a Gauge);

impl<'a> InFlight<'a> {
    pub fn new(g: &'a Gauge) -> Self {
        g.inc();
        Self(g)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The content type of [`Metrics::encode`].
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Rewrites prometheus-client's OpenMetrics text as the Prometheus text format 0.0.4 that
/// client_golang serves by default (and so the reference): a counter family is named as its
/// samples are (`x_total`), except the counters the reference registered without that suffix
/// (`unsuffixed`: `progressive_pipeline_drains`, `numaplane_*_progressive_{started,completed}`),
/// whose samples drop it, exactly as the reference exposes them; no `# UNIT`, no `# EOF`.
pub fn prometheus_text(openmetrics: &str, unsuffixed: &[String]) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut counters: Vec<&str> = Vec::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some(name) = rest.strip_suffix(" counter")
        {
            counters.push(name);
        }
    }
    let exposed = |family: &str| -> String {
        if unsuffixed.iter().any(|u| u == family) {
            family.to_string()
        } else {
            format!("{family}_total")
        }
    };
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        if let Some((prefix, rest)) = meta {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(&name) {
                out.push_str(&format!("{prefix}{} {tail}\n", exposed(name)));
            } else {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let sample = &line[..name_end];
        match counters
            .iter()
            .find(|c| sample.strip_prefix(**c) == Some("_total"))
        {
            Some(c) => {
                out.push_str(&exposed(c));
                out.push_str(&line[name_end..]);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_as_the_reference_exposes_them() {
        let m = Metrics::new();
        m.pipeline_drain(
            "ns",
            "pr",
            "pr-0",
            numaplane_core::recycle::DrainResult::ForceDrain,
        );
        m.reconciled(Subject::Rollout(Kind::Pipeline), 0.01, None);
        let text = m.encode();
        assert!(
            text.contains("# TYPE progressive_pipeline_drains counter\n"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("progressive_pipeline_drains{")),
            "{text}"
        );
        assert!(
            !text.contains("progressive_pipeline_drains_total"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE pipeline_rollout_syncs_total counter\n"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("pipeline_rollout_syncs_total{"))
        );
        assert!(!text.contains("# EOF"), "{text}");
        // controller-runtime's families, without the reference's constant label.
        let runtime = text
            .lines()
            .find(|l| l.starts_with("controller_runtime_reconcile_total{"))
            .unwrap_or_default();
        assert!(
            runtime.contains(r#"controller="pipeline-rollout-controller""#)
                && runtime.contains(r#"result="success""#)
                && !runtime.contains("intuit_alert"),
            "{text}"
        );
        assert!(text.contains("# TYPE controller_runtime_reconcile_time_seconds histogram"));
        assert!(text.contains("# TYPE numaplane_reconcile_duration_seconds histogram"));
    }

    /// `series_names` agrees with the exposition: every sample the encoder writes is named there,
    /// including families that only have series once something happened.
    #[test]
    fn series_names_cover_every_exposed_sample() {
        let m = Metrics::new();
        let names = m.series_names();
        for name in [
            "progressive_pipeline_drains",
            "numaplane_pipeline_progressive_completed",
            "numaplane_reconcile_errors_total",
            "numaplane_reconcile_duration_seconds_bucket",
            "controller_runtime_reconcile_time_seconds_count",
            "rest_client_requests_total",
            "numaplane_leader",
        ] {
            assert!(names.contains(name), "{name} missing from {names:?}");
        }
        assert!(!names.contains("progressive_pipeline_drains_total"));
        m.pipeline_drain(
            "ns",
            "pr",
            "pr-0",
            numaplane_core::recycle::DrainResult::DrainIncomplete,
        );
        m.reconciled(Subject::Rollout(Kind::Pipeline), 0.01, Some("conflict"));
        m.progressive_completed(Kind::MonoVertex, "ns", "mv", "mv-1", false, false);
        m.pause_seconds(PauseGauge::IsbService, "ns", "isb", 3.0);
        m.rest_request("GET", "h", 200);
        m.kube_request("get", "pipelines", 200);
        m.set_health(
            Subject::NumaflowController,
            "ns",
            "nc",
            vec![("phase", "Deployed".into())],
        );
        let text = m.encode();
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| &l[..l.find(['{', ' ']).unwrap_or(l.len())])
            .collect();
        assert!(samples.len() > 20, "{text}");
        for s in samples {
            assert!(names.contains(s), "{s} is exposed but not in series_names");
        }
    }

    #[test]
    fn each_finished_upgrade_is_observed_once() {
        use numaplane_api::common::{UpgradeOutcome, UpgradeRecord, UpgradeStrategy};
        let t = |s: i64| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + s).expect("time"),
            )
        };
        let open = UpgradeRecord {
            child: "p-1".into(),
            previous_child: "p-0".into(),
            strategy: UpgradeStrategy::Progressive,
            generation: 2,
            start_time: t(0),
            end_time: None,
            outcome: None,
            reasons: Vec::new(),
            changed_fields: Vec::new(),
        };
        let done = UpgradeRecord {
            end_time: Some(t(90)),
            outcome: Some(UpgradeOutcome::Promoted),
            ..open.clone()
        };
        let m = Metrics::new();
        m.upgrades_finished(
            Kind::Pipeline,
            "ns",
            "p",
            std::slice::from_ref(&open),
            std::slice::from_ref(&done),
        );
        // The same end seen again (a retried status write) is not counted twice.
        m.upgrades_finished(Kind::Pipeline, "ns", "p", &[open], &[done]);
        let text = m.encode();
        let count = text
            .lines()
            .find(|l| l.starts_with("numaplane_upgrade_duration_seconds_count"))
            .unwrap_or_default();
        assert!(
            count.contains(r#"kind="pipeline""#)
                && count.contains(r#"strategy="Progressive""#)
                && count.contains(r#"outcome="Promoted""#)
                && count.ends_with(" 1"),
            "{text}"
        );
        assert!(
            text.contains(r#"numaplane_upgrade_duration_seconds_sum{"#)
                && text
                    .lines()
                    .any(|l| l.starts_with("numaplane_upgrade_duration_seconds_sum")
                        && l.ends_with(" 90.0")),
            "{text}"
        );
    }

    #[test]
    fn health_is_one_hot_per_object() {
        let m = Metrics::new();
        let l = |phase: &str| {
            vec![
                ("namespace", "ns".to_string()),
                ("pipeline", "p".to_string()),
                ("phase", phase.to_string()),
            ]
        };
        m.set_health(Subject::Rollout(Kind::Pipeline), "ns", "p", l("Pending"));
        m.set_health(Subject::Rollout(Kind::Pipeline), "ns", "p", l("Deployed"));
        let text = m.encode();
        assert!(text.contains(r#"phase="Deployed""#), "{text}");
        assert!(!text.contains(r#"phase="Pending""#), "{text}");
        assert!(text.contains(r#"intuit_alert="true""#), "{text}");
        m.forget(Subject::Rollout(Kind::Pipeline), "ns", "p");
        assert!(!m.encode().contains(r#"pipeline="p""#));
    }

    #[test]
    fn a_progressive_verdict_is_counted_once() {
        let m = Metrics::new();
        let Some(kind) = m.progressive_completed.keys().next().copied() else {
            panic!("no progressive_completed family");
        };
        let name = format!(
            "numaplane_{}_progressive_completed",
            progressive_prefix(kind)
        );
        let count = |m: &Metrics, success: &str| {
            value(
                &m.encode(),
                &name,
                &[r#"name="r-1""#, &format!(r#"success="{success}""#)],
            )
        };
        m.progressive_completed(kind, "ns", "r", "r-1", false, false);
        m.progressive_completed(kind, "ns", "r", "r-1", false, false);
        assert_eq!(count(&m, "false"), Some(1.0), "the same verdict again");
        // The failed trial force-promoted: a verdict of its own.
        m.progressive_completed(kind, "ns", "r", "r-1", true, true);
        assert_eq!(count(&m, "true"), Some(1.0));
        // A rollout deleted and created again under the same name starts afresh.
        m.forget(Subject::Rollout(Kind::Pipeline), "ns", "r");
        m.progressive_completed(kind, "ns", "r", "r-1", true, true);
        assert_eq!(count(&m, "true"), Some(2.0));
    }

    /// The value of the series of `name` carrying all `labels` (in any order).
    fn value(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .find(|l| labels.iter().all(|want| l.contains(want)))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
    }

    #[test]
    fn running_gauge_counts_rollouts_per_namespace() {
        let m = Metrics::new();
        m.count(Kind::Pipeline, "a", "x", true);
        m.count(Kind::Pipeline, "a", "y", true);
        m.count(Kind::Pipeline, "a", "y", true);
        let running = |m: &Metrics| {
            value(
                &m.encode(),
                "pipeline_rollouts_running",
                &[r#"namespace="a""#, r#"intuit_alert="true""#],
            )
        };
        assert_eq!(running(&m), Some(2.0));
        m.forget(Subject::Rollout(Kind::Pipeline), "a", "x");
        assert_eq!(running(&m), Some(1.0));
    }

    #[test]
    fn counters_carry_the_reference_names() {
        let m = Metrics::new();
        m.reconciled(Subject::Rollout(Kind::Pipeline), 0.01, Some("InvalidSpec"));
        m.kube_request("PATCH", "pipelines", 200);
        let text = m.encode();
        let cases: [(&str, &[&str]); 5] = [
            ("pipeline_rollout_syncs_total", &[]),
            ("pipeline_rollout_sync_errors_total", &[]),
            ("numaplane_kube_request_total", &[]),
            (
                "numaplane_reconcile_errors_total",
                &[
                    r#"controller="pipeline-rollout-controller""#,
                    r#"reason="InvalidSpec""#,
                ],
            ),
            (
                "numaplane_kube_requests_total",
                &[
                    r#"verb="PATCH""#,
                    r#"resource="pipelines""#,
                    r#"code="200""#,
                ],
            ),
        ];
        for (name, labels) in cases {
            assert_eq!(value(&text, name, labels), Some(1.0), "{name} in\n{text}");
        }
    }

    #[test]
    fn the_build_is_named() {
        let text = Metrics::new().encode();
        let version = format!(r#"version="{}""#, env!("CARGO_PKG_VERSION"));
        assert_eq!(
            value(&text, "numaplane_build_info", &[&version]),
            Some(1.0),
            "{text}"
        );
    }
}
