//! The simulator's own pod writes that the pod cache has yet to show ("expectations", as the
//! ReplicaSet controller and Numaflow's vertex controller keep them).
//!
//! A pod set is planned from the cache overlaid with these writes, so a pod created a moment ago
//! is neither created twice nor looked up with a live list: a label-selected list costs the API
//! server a scan of every pod in the namespace, which at a thousand pipelines made the simulator's
//! lists the largest single cost of the API server.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// How long a write may stay unseen by the cache before the set is read live instead.
const PATIENCE: Duration = Duration::from_secs(30);

struct Write {
    /// The pod as written (created or status patched); `None` once deleted.
    pod: Option<Pod>,
    at: Instant,
}

/// A pod set: its namespace and label selector.
type SetKey = (String, BTreeMap<String, String>);

/// Pod writes not yet seen in the cache, by pod set and pod name.
#[derive(Default)]
pub(crate) struct PodWrites {
    sets: Mutex<HashMap<SetKey, BTreeMap<String, Write>>>,
}

/// Resource versions are etcd revisions; the simulator may compare them (clients in general
/// must not).
fn revision(pod: &Pod) -> Option<u64> {
    pod.resource_version()?.parse().ok()
}

impl PodWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SetKey, BTreeMap<String, Write>>> {
        self.sets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, ns: &str, selector: &BTreeMap<String, String>, name: &str, pod: Option<Pod>) {
        let key = (ns.to_owned(), selector.clone());
        let write = Write {
            pod,
            at: Instant::now(),
        };
        self.lock()
            .entry(key)
            .or_default()
            .insert(name.to_owned(), write);
    }

    /// Records a pod of the set `ns`/`selector` as created or patched by the simulator.
    pub(crate) fn wrote(&self, ns: &str, selector: &BTreeMap<String, String>, pod: &Pod) {
        self.record(ns, selector, &pod.name_any(), Some(pod.clone()));
    }

    /// Records a pod of the set `ns`/`selector` as deleted by the simulator.
    pub(crate) fn deleted(&self, ns: &str, selector: &BTreeMap<String, String>, name: &str) {
        self.record(ns, selector, name, None);
    }

    /// The pods of the set `ns`/`selector`: the cached ones with the simulator's unseen writes
    /// laid over them. `None` when a write has gone unseen for too long (the pod may have been
    /// created and deleted by someone else in between): read the set live, then [`Self::forget`].
    pub(crate) fn overlay(
        &self,
        ns: &str,
        selector: &BTreeMap<String, String>,
        cached: Vec<Arc<Pod>>,
    ) -> Option<Vec<Pod>> {
        let mut pods: BTreeMap<String, Pod> = cached
            .into_iter()
            .map(|p| (p.name_any(), Pod::clone(&p)))
            .collect();
        let key = (ns.to_owned(), selector.clone());
        let mut sets = self.lock();
        let Some(writes) = sets.get_mut(&key) else {
            return Some(pods.into_values().collect());
        };
        let mut overdue = false;
        writes.retain(|name, w| {
            let seen = match (&w.pod, pods.get(name)) {
                // A deletion is seen once the cache no longer holds the pod.
                (None, cached) => cached.is_none(),
                // A write is seen once the cache holds that version or a later one.
                (Some(mine), cached) => cached.is_some_and(|c| revision(c) >= revision(mine)),
            };
            if seen {
                return false;
            }
            overdue |= w.at.elapsed() > PATIENCE;
            match &w.pod {
                None => pods.remove(name),
                Some(mine) => pods.insert(name.clone(), mine.clone()),
            };
            true
        });
        if writes.is_empty() {
            sets.remove(&key);
        }
        (!overdue).then(|| pods.into_values().collect())
    }

    /// Drops the writes to the set `ns`/`selector` (after it was read live).
    pub(crate) fn forget(&self, ns: &str, selector: &BTreeMap<String, String>) {
        self.lock().remove(&(ns.to_owned(), selector.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, rv: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        }))
        .unwrap_or_default()
    }

    fn sel(app: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("app".to_owned(), app.to_owned())])
    }

    fn names(pods: Option<Vec<Pod>>) -> Vec<String> {
        pods.unwrap_or_default()
            .iter()
            .map(|p| p.name_any())
            .collect()
    }

    #[test]
    fn a_created_pod_counts_until_the_cache_shows_it() {
        let w = PodWrites::default();
        w.wrote("ns", &sel("a"), &pod("a-0", "10"));
        assert_eq!(names(w.overlay("ns", &sel("a"), vec![])), ["a-0"]);
        // Another set's pods are not mixed in.
        assert!(names(w.overlay("ns", &sel("b"), vec![])).is_empty());
        // The cache catches up with the write: the entry goes, the cached copy is used.
        let cached = Arc::new(pod("a-0", "11"));
        let got = w.overlay("ns", &sel("a"), vec![cached]).unwrap_or_default();
        assert_eq!(got[0].resource_version().as_deref(), Some("11"));
        assert!(w.lock().is_empty());
    }

    #[test]
    fn a_stale_cached_copy_is_replaced_by_the_write() {
        let w = PodWrites::default();
        w.wrote("ns", &sel("a"), &pod("a-0", "12"));
        let stale = Arc::new(pod("a-0", "10"));
        let got = w.overlay("ns", &sel("a"), vec![stale]).unwrap_or_default();
        assert_eq!(got[0].resource_version().as_deref(), Some("12"));
        assert_eq!(w.lock().len(), 1);
    }

    #[test]
    fn a_deleted_pod_is_hidden_until_the_cache_drops_it() {
        let w = PodWrites::default();
        w.deleted("ns", &sel("a"), "a-0");
        let cached = Arc::new(pod("a-0", "10"));
        assert!(names(w.overlay("ns", &sel("a"), vec![cached])).is_empty());
        assert_eq!(w.lock().len(), 1);
        assert!(names(w.overlay("ns", &sel("a"), vec![])).is_empty());
        assert!(w.lock().is_empty());
    }

    #[test]
    fn forget_drops_only_the_set() {
        let w = PodWrites::default();
        w.wrote("ns", &sel("a"), &pod("a-0", "10"));
        w.wrote("ns", &sel("b"), &pod("b-0", "10"));
        w.forget("ns", &sel("a"));
        assert!(names(w.overlay("ns", &sel("a"), vec![])).is_empty());
        assert_eq!(names(w.overlay("ns", &sel("b"), vec![])), ["b-0"]);
    }
}
