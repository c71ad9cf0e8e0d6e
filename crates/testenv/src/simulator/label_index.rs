//! Names of cached objects by namespace and label, so that a label-selected read of the cache
//! costs what it returns, not a scan of every object of the kind (which made the simulator
//! quadratic: at 10,000 pipelines it, not the operator, paced the benchmark's cold start).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use kube::{Resource, ResourceExt, runtime::watcher};

/// (namespace, label key, label value).
type Pair = (String, String, String);

#[derive(Default)]
struct Index {
    names: HashMap<Pair, BTreeSet<String>>,
    /// The labels each object was filed under: (namespace, name) → labels.
    filed: HashMap<(String, String), BTreeMap<String, String>>,
}

impl Index {
    fn insert(&mut self, ns: String, name: String, labels: BTreeMap<String, String>) {
        self.remove(&ns, &name);
        for (k, v) in &labels {
            self.names
                .entry((ns.clone(), k.clone(), v.clone()))
                .or_default()
                .insert(name.clone());
        }
        self.filed.insert((ns, name), labels);
    }

    fn remove(&mut self, ns: &str, name: &str) {
        let Some(labels) = self.filed.remove(&(ns.to_string(), name.to_string())) else {
            return;
        };
        for (k, v) in labels {
            let pair = (ns.to_string(), k, v);
            if let Some(names) = self.names.get_mut(&pair) {
                names.remove(name);
                if names.is_empty() {
                    self.names.remove(&pair);
                }
            }
        }
    }
}

/// Kept beside a store, fed the same watch events (a relist replaces it when it ends, as it
/// replaces the store's contents).
#[derive(Default)]
pub(crate) struct LabelIndex {
    state: Mutex<(Index, Option<Index>)>,
}

impl LabelIndex {
    pub(crate) fn observe<K: Resource>(&self, event: &watcher::Event<K>) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (live, relist) = &mut *st;
        let parts = |o: &K| {
            (
                o.namespace().unwrap_or_default(),
                o.name_any(),
                o.labels().clone(),
            )
        };
        match event {
            watcher::Event::Apply(o) => {
                let (ns, name, labels) = parts(o);
                live.insert(ns, name, labels);
            }
            watcher::Event::Delete(o) => {
                live.remove(&o.namespace().unwrap_or_default(), &o.name_any())
            }
            watcher::Event::Init => *relist = Some(Index::default()),
            watcher::Event::InitApply(o) => {
                let (ns, name, labels) = parts(o);
                relist.as_mut().unwrap_or(live).insert(ns, name, labels);
            }
            watcher::Event::InitDone => {
                if let Some(done) = relist.take() {
                    *live = done;
                }
            }
        }
    }

    /// Names in `ns` carrying every label of `selector` (which must not be empty), as far as
    /// the index knows: the caller reads each from the store and checks it again.
    pub(crate) fn matching(&self, ns: &str, selector: &BTreeMap<String, String>) -> Vec<String> {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let sets: Option<Vec<&BTreeSet<String>>> = selector
            .iter()
            .map(|(k, v)| st.0.names.get(&(ns.to_string(), k.clone(), v.clone())))
            .collect();
        let Some(mut sets) = sets else {
            return Vec::new(); // some label of the selector is on no object
        };
        sets.sort_by_key(|s| s.len());
        let Some((smallest, rest)) = sets.split_first() else {
            return Vec::new();
        };
        smallest
            .iter()
            .filter(|n| rest.iter().all(|s| s.contains(*n)))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;
    use watcher::Event;

    fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn sel(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selects_by_every_label_and_follows_changes() {
        let index = LabelIndex::default();
        for e in [
            Event::Init,
            Event::InitApply(pod("a", &[("pl", "p1"), ("v", "in")])),
            Event::InitApply(pod("b", &[("pl", "p1"), ("v", "out")])),
            Event::InitDone,
            Event::Apply(pod("c", &[("pl", "p2"), ("v", "in")])),
            Event::Apply(pod("b", &[("pl", "p2"), ("v", "out")])),
            Event::Delete(pod("a", &[])),
        ] {
            index.observe(&e);
        }
        assert!(index.matching("ns", &sel(&[("pl", "p1")])).is_empty());
        assert_eq!(index.matching("ns", &sel(&[("pl", "p2")])), ["b", "c"]);
        assert_eq!(
            index.matching("ns", &sel(&[("pl", "p2"), ("v", "in")])),
            ["c"]
        );
        assert!(index.matching("other", &sel(&[("pl", "p2")])).is_empty());
        assert!(
            index
                .matching("ns", &sel(&[("pl", "p2"), ("x", "y")]))
                .is_empty()
        );
    }

    #[test]
    fn a_relist_takes_over_when_it_ends() {
        let index = LabelIndex::default();
        for e in [
            Event::Apply(pod("a", &[("pl", "p1")])),
            Event::Init,
            Event::InitApply(pod("b", &[("pl", "p1")])),
        ] {
            index.observe(&e);
        }
        assert_eq!(index.matching("ns", &sel(&[("pl", "p1")])), ["a"]);
        index.observe(&Event::<Pod>::InitDone);
        assert_eq!(index.matching("ns", &sel(&[("pl", "p1")])), ["b"]);
    }
}
