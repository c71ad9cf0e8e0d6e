//! What every reconcile shares: the client, live settings, watch caches, Event recorders, and
//! small per-object memories (read-your-writes status cache, failure counts).

use crate::events::EventSink;
use crate::settings::Settings;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::runtime::reflector::Store;
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::{ISBServiceRollout, NumaflowControllerRollout};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Watch caches of the objects our rollouts own or read. Children are watched by the
/// `parent-rollout-name` label only, with `managedFields` stripped.
#[derive(Clone)]
pub struct Stores {
    pub pipelines: Store<Pipeline>,
    pub monovertices: Store<MonoVertex>,
    pub isbsvcs: Store<InterStepBufferService>,
    pub isb_rollouts: Store<ISBServiceRollout>,
    /// NumaflowControllerRollouts: their pause requests apply to every pipeline of their namespace.
    pub nc_rollouts: Store<NumaflowControllerRollout>,
    pub statefulsets: Store<StatefulSet>,
    pub pdbs: Store<PodDisruptionBudget>,
}

pub struct Ctx {
    pub client: Client,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Whether this replica may write (holds the lease, or runs without election).
    pub leader: Arc<std::sync::atomic::AtomicBool>,
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
    /// Status writes held back while a child settles (the held status is the base of the next
    /// pass, so nothing it recorded is lost).
    pub held_status: Mutex<HashMap<String, HeldStatus>>,
}

pub struct HeldStatus {
    /// When the hold began.
    first: Instant,
    /// When the child's controller was first seen to have observed the child during the hold.
    observed: Option<Instant>,
    /// When it was last (re)started by a change of the child.
    since: Instant,
    /// The child's resourceVersion when the hold was last (re)started.
    child_version: String,
    status: serde_json::Value,
}

/// What is left of a hold that began `first` ago, saw the child observed by its controller
/// `observed` ago (if yet) and was last restarted `since` ago.
fn hold_left(first: Duration, observed: Option<Duration>, since: Duration) -> Option<Duration> {
    let left = match observed {
        None => OBSERVE_HOLD.saturating_sub(first),
        Some(observed) => STATUS_HOLD
            .saturating_sub(since)
            .min((STATUS_HOLD * 2).saturating_sub(observed)),
    };
    (!left.is_zero()).then_some(left)
}

/// Riders are re-read from the cluster at least this often even when nothing changed.
pub const RIDER_RECHECK: Duration = Duration::from_secs(300);
/// How long a status write may be held back while a child catches up with what we just wrote
/// (restarted while the child keeps moving, at most twice this from its controller's first
/// reaction): the child's own reaction usually arrives within it, so both go out as one write.
/// Meanwhile `observedGeneration` still shows the change as not yet observed. 30 s because a
/// Numaflow controller busy with a thousand new pipelines leaves a progressing one untouched for
/// 15 s and more (with 10 s and 15 s windows, one new rollout in ten wrote its status twice).
pub const STATUS_HOLD: Duration = Duration::from_secs(30);
/// How long a status write may wait for the child's controller to first observe what we wrote
/// (a Numaflow controller working through a backlog, e.g. a thousand new pipelines): until it
/// does, a write could only repeat that the child is progressing, and would be followed by
/// another once the child settles.
pub const OBSERVE_HOLD: Duration = Duration::from_secs(60);
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
            settings,
            events,
            stores,
            operator_namespace,
            written: Mutex::default(),
            failures: Mutex::default(),
            rider_checks: Mutex::default(),
            rider_resources: Mutex::default(),
            held_status: Mutex::default(),
        }
    }

    pub fn is_leader(&self) -> bool {
        self.leader.load(std::sync::atomic::Ordering::Acquire)
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

    /// Holds back the write of `status` for `uid` (starting the hold now if none runs) and returns
    /// how long is left; `None` once the hold is over and the write must go out.
    /// While the child's controller has yet to observe the child (`unobserved`), the hold waits
    /// for its first reaction, up to [`OBSERVE_HOLD`]. After that a change of the child (a new
    /// `child_version`: our write, or its controller at work) starts a [`STATUS_HOLD`] window
    /// afresh, the wait being for its next step, but a child that changes on every pass cannot
    /// keep the status from being written for more than twice [`STATUS_HOLD`].
    pub fn hold_status<S: serde::Serialize>(
        &self,
        uid: &str,
        status: &S,
        child_version: &str,
        unobserved: bool,
    ) -> Option<Duration> {
        let value = serde_json::to_value(status).ok()?;
        let mut m = self.held_status.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let held = m.entry(uid.to_string()).or_insert_with(|| HeldStatus {
            first: now,
            observed: None,
            since: now,
            child_version: child_version.to_string(),
            status: serde_json::Value::Null,
        });
        if held.child_version != child_version {
            held.since = now;
            held.child_version = child_version.to_string();
        }
        if !unobserved && held.observed.is_none() {
            held.observed = Some(now);
        }
        held.status = value;
        hold_left(
            held.first.elapsed(),
            held.observed.map(|o| o.elapsed()),
            held.since.elapsed(),
        )
    }

    /// The status held back for `uid`, if any: newer than the cached one.
    pub fn held_status_of<S: serde::de::DeserializeOwned>(&self, uid: &str) -> Option<S> {
        let m = self.held_status.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::from_value(m.get(uid)?.status.clone()).ok()
    }

    /// Ends any hold of `uid`'s status (it was written, or needs no write).
    pub fn release_status(&self, uid: &str) {
        self.held_status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }

    pub fn forget(&self, uid: &str) {
        self.release_status(uid);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_ends_after_its_window_and_restarts_cannot_stretch_it_past_twice_that() {
        let s = Duration::from_secs;
        let seen = Some(s(0));
        assert_eq!(hold_left(s(0), seen, s(0)), Some(STATUS_HOLD));
        assert_eq!(hold_left(s(4), Some(s(4)), s(4)), Some(STATUS_HOLD - s(4)));
        assert_eq!(hold_left(STATUS_HOLD, Some(STATUS_HOLD), STATUS_HOLD), None);
        // Restarted by a child write: a fresh window...
        assert_eq!(
            hold_left(STATUS_HOLD, Some(STATUS_HOLD), s(0)),
            Some(STATUS_HOLD)
        );
        // ...but never beyond twice the window from when the child was first observed.
        assert_eq!(
            hold_left(STATUS_HOLD * 2 - s(1), Some(STATUS_HOLD * 2 - s(1)), s(0)),
            Some(s(1))
        );
        assert_eq!(
            hold_left(STATUS_HOLD * 2, Some(STATUS_HOLD * 2), s(0)),
            None
        );
    }

    #[test]
    fn a_hold_waits_for_the_child_controller_first_reaction_up_to_its_own_limit() {
        let s = Duration::from_secs;
        // Not yet observed: no window, only the overall limit.
        assert_eq!(hold_left(s(30), None, s(30)), Some(OBSERVE_HOLD - s(30)));
        assert_eq!(hold_left(OBSERVE_HOLD, None, s(0)), None);
        // Observed after 40 s: the usual windows count from then, not from the start.
        assert_eq!(hold_left(s(40), Some(s(0)), s(0)), Some(STATUS_HOLD));
        assert_eq!(
            hold_left(
                s(40) + STATUS_HOLD * 2 - s(10),
                Some(STATUS_HOLD * 2 - s(10)),
                s(1)
            ),
            Some(s(10))
        );
        assert_eq!(hold_left(s(52), Some(s(12)), STATUS_HOLD), None);
    }
}
