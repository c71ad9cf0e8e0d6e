//! What every reconcile shares: the client, live settings, watch caches, Event recorders, and
//! small per-object memories (read-your-writes status cache, failure counts).

use crate::child_cache::ChildCache;
use crate::events::EventSink;
use crate::settings::Settings;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::runtime::reflector::Store;
use numaplane_api::narrow::AnalysisRunPhase;
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::{ISBServiceRollout, NumaflowControllerRollout};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Watch caches of the objects our rollouts own or read. Children are watched by the
/// `parent-rollout-name` label only, with `managedFields` stripped.
#[derive(Clone)]
pub struct Stores {
    pub pipelines: ChildCache<Pipeline>,
    pub monovertices: ChildCache<MonoVertex>,
    pub isbsvcs: ChildCache<InterStepBufferService>,
    pub isb_rollouts: Store<ISBServiceRollout>,
    /// NumaflowControllerRollouts: their pause requests apply to every pipeline of their namespace.
    pub nc_rollouts: Store<NumaflowControllerRollout>,
    pub statefulsets: Store<StatefulSet>,
    pub pdbs: Store<PodDisruptionBudget>,
    /// Numaplane's AnalysisRuns, their owners and outcome only (`run_watch.rs`); empty without
    /// Argo Rollouts' CRDs.
    pub analysis_runs: Store<AnalysisRunPhase>,
    /// Every Vertex's replica counts (a trial pipeline's health sample reads them).
    pub vertices: crate::vertex_cache::VertexCache,
}

pub struct Ctx {
    pub client: Client,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Whether this replica may write (holds the lease, or runs without election).
    pub leader: Arc<std::sync::atomic::AtomicBool>,
    /// Bounds the lease holder's writes in time (`lease_fence`); open without election.
    pub fence: Arc<crate::lease_fence::Fence>,
    pub settings: Arc<Settings>,
    pub events: EventSink,
    pub stores: Stores,
    pub operator_namespace: String,
    /// Status objects we wrote, by UID, until the watch cache catches up (read-your-writes).
    pub written: Mutex<HashMap<String, (u64, serde_json::Value)>>,
    /// Consecutive failed reconciles per object (for per-object backoff).
    pub failures: Mutex<HashMap<String, u32>>,
    /// When riders of an object were last compared with the cluster.
    pub rider_checks: Mutex<HashMap<String, Instant>>,
    /// Discovered API resources of rider kinds.
    pub rider_resources: Mutex<HashMap<String, kube::discovery::ApiResource>>,
    /// Status writes held back while a child settles.
    pub status_holds: crate::status_hold::StatusHolds,
    /// Engine-scheduled steps by rollout, taken at their moment beside the workers.
    pub due_steps: Arc<crate::due_steps::DueSteps>,
}

/// Riders are re-read from the cluster at least this often even when nothing changed.
pub const RIDER_RECHECK: Duration = Duration::from_secs(300);
/// Periodic re-reconcile of a quiet rollout (like an informer resync).
pub const RESYNC: Duration = Duration::from_secs(900);

impl Ctx {
    pub fn new(
        client: Client,
        settings: Arc<Settings>,
        events: EventSink,
        stores: Stores,
        operator_namespace: String,
    ) -> Self {
        Self {
            client,
            metrics: Arc::default(),
            leader: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            fence: Arc::new(crate::lease_fence::Fence::open()),
            settings,
            events,
            stores,
            operator_namespace,
            written: Mutex::default(),
            failures: Mutex::default(),
            rider_checks: Mutex::default(),
            rider_resources: Mutex::default(),
            status_holds: Default::default(),
            due_steps: Default::default(),
        }
    }

    /// Holds the lease, and its last renewal is fresh enough that no one else can hold it.
    pub fn is_leader(&self) -> bool {
        self.leader.load(std::sync::atomic::Ordering::Acquire) && self.fence.allows()
    }

    /// Every write goes through here: a replica that lost the lease stops writing at once.
    pub fn ensure_leader(&self) -> Result<(), crate::error::Error> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(crate::error::Error::NotLeader)
        }
    }

    /// Records a failure and returns the backoff before the next attempt: 1 s doubling to 5 min.
    pub fn backoff(&self, key: &str) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = f.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        let secs = 1u64.checked_shl(n.saturating_sub(1).min(9)).unwrap_or(300);
        Duration::from_secs(secs.min(300))
    }

    pub fn clear_failures(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Whether riders of `uid` are due for a check against the cluster.
    pub fn riders_due(&self, uid: &str, forced: bool) -> bool {
        let m = self.rider_checks.lock().unwrap_or_else(|e| e.into_inner());
        forced || m.get(uid).is_none_or(|t| t.elapsed() >= RIDER_RECHECK)
    }

    /// Records a successful rider check (a failed one is retried on the next pass).
    pub fn riders_checked(&self, uid: &str) {
        self.rider_checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), Instant::now());
    }

    pub fn forget(&self, uid: &str) {
        self.status_holds.release(uid);
        self.due_steps.forget(uid);
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.rider_checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }
}
