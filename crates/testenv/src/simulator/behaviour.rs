//! Test-directed deviations from the default Numaflow model, and the little in-memory state the
//! simulator keeps (what real Numaflow would learn from its daemon: did data flow, when did the
//! buffers start emptying).

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
    time::Duration,
};

use chrono::{DateTime, Utc};

/// How a simulated Pipeline deviates from the default model. Set with
/// [`Simulator::set_pipeline_behaviour`](super::Simulator::set_pipeline_behaviour), keyed by
/// `(namespace, pipeline name)`; it may be set before the Pipeline exists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PipelineBehaviour {
    /// The default model: drained a few seconds after the sources stop (at once if the pipeline
    /// never ingested); never drained while a vertex has an unpullable image.
    #[default]
    Normal,
    /// Slow to drain: stays Pausing for this long after its source pods are gone, then drains
    /// (`drainedOnPause=true`) unless the pause grace period ends first.
    SlowDrain(Duration),
    /// Unable to drain: only `lifecycle.pauseGracePeriodSeconds` ends a pause, with
    /// `drainedOnPause=false`.
    NeverDrain,
    /// Runs normally, then goes Failed this long after the later of its creation and the moment
    /// this behaviour was set. A Failed pipeline never pauses.
    FailAfter(Duration),
}

/// How a simulated MonoVertex deviates from the default model (keyed like
/// [`PipelineBehaviour`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MonoVertexBehaviour {
    /// Pods follow the replica rules, pause is immediate.
    #[default]
    Normal,
    /// Runs normally, then goes Failed this long after the later of its creation and the moment
    /// this behaviour was set.
    FailAfter(Duration),
}

type Key = (String, String);

#[derive(Default)]
pub(crate) struct State {
    behaviours: Mutex<Behaviours>,
    memory: Mutex<Memory>,
}

#[derive(Default)]
struct Behaviours {
    pipelines: HashMap<Key, (PipelineBehaviour, DateTime<Utc>)>,
    monovertices: HashMap<Key, (MonoVertexBehaviour, DateTime<Utc>)>,
}

#[derive(Default)]
struct Memory {
    /// Pipeline UIDs whose source vertices had ready pods at some point (data flowed).
    ingested: HashSet<String>,
    /// (pipeline UID, pause-timestamp) → since when the pipeline has been draining unblocked.
    drain_clock: HashMap<(String, String), DateTime<Utc>>,
}

fn key(ns: &str, name: &str) -> Key {
    (ns.to_owned(), name.to_owned())
}

impl State {
    pub(crate) fn set_pipeline(&self, ns: &str, name: &str, b: PipelineBehaviour) {
        let mut g = self.behaviours.lock().unwrap_or_else(|e| e.into_inner());
        g.pipelines.insert(key(ns, name), (b, Utc::now()));
    }

    pub(crate) fn set_monovertex(&self, ns: &str, name: &str, b: MonoVertexBehaviour) {
        let mut g = self.behaviours.lock().unwrap_or_else(|e| e.into_inner());
        g.monovertices.insert(key(ns, name), (b, Utc::now()));
    }

    /// The behaviour of a pipeline and when it was set.
    pub(crate) fn pipeline(
        &self,
        ns: &str,
        name: &str,
    ) -> (PipelineBehaviour, Option<DateTime<Utc>>) {
        let g = self.behaviours.lock().unwrap_or_else(|e| e.into_inner());
        g.pipelines
            .get(&key(ns, name))
            .map(|(b, t)| (b.clone(), Some(*t)))
            .unwrap_or_default()
    }

    pub(crate) fn monovertex(
        &self,
        ns: &str,
        name: &str,
    ) -> (MonoVertexBehaviour, Option<DateTime<Utc>>) {
        let g = self.behaviours.lock().unwrap_or_else(|e| e.into_inner());
        g.monovertices
            .get(&key(ns, name))
            .map(|(b, t)| (b.clone(), Some(*t)))
            .unwrap_or_default()
    }

    pub(crate) fn mark_ingested(&self, uid: &str) {
        let mut g = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        g.ingested.insert(uid.to_owned());
    }

    pub(crate) fn ingested(&self, uid: &str) -> bool {
        let g = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        g.ingested.contains(uid)
    }

    /// Starts (or reads) the drain clock of one pause of a pipeline.
    pub(crate) fn drain_clock(
        &self,
        uid: &str,
        pause_ts: &str,
        now: DateTime<Utc>,
    ) -> DateTime<Utc> {
        let mut g = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        *g.drain_clock
            .entry((uid.to_owned(), pause_ts.to_owned()))
            .or_insert(now)
    }

    /// Stops the drain clock: something blocks draining again.
    pub(crate) fn reset_drain_clock(&self, uid: &str, pause_ts: &str) {
        let mut g = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        g.drain_clock.remove(&(uid.to_owned(), pause_ts.to_owned()));
    }

    /// Drops everything remembered about a pipeline that is gone.
    pub(crate) fn forget(&self, uid: &str) {
        let mut g = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        g.ingested.remove(uid);
        g.drain_clock.retain(|(u, _), _| u != uid);
    }
}

/// The instant a `FailAfter(d)` behaviour set at `set_at` fails an object created at `created`.
pub(crate) fn fail_deadline(
    d: Duration,
    set_at: Option<DateTime<Utc>>,
    created: Option<DateTime<Utc>>,
) -> DateTime<Utc> {
    let start = match (set_at, created) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => a.or(b).unwrap_or_else(Utc::now),
    };
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| start.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
