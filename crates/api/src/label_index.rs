//! Names of watch-cached objects by namespace and label, kept beside a reflector store, so that
//! a label-selected read of the cache costs what it returns instead of a scan of every object
//! of the kind. Scans made both the operator (children of a rollout) and the benchmark's
//! Numaflow simulator (Vertices of a pipeline, pods of a Vertex) quadratic at 10,000 pipelines.
//! It lives here because both use it and this is the crate they share.

use kube::Resource;
use kube::ResourceExt;
use kube::runtime::watcher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{PoisonError, RwLock};

/// (namespace, label key, label value).
type Pair = (String, String, String);

#[derive(Default)]
struct Index {
    names: HashMap<Pair, BTreeSet<String>>,
    /// The labels each object was filed under, (namespace, name) → labels: to unfile it when
    /// its labels change or it goes.
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
        if !labels.is_empty() {
            self.filed.insert((ns, name), labels);
        }
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

/// The live index and the relist being built: a relist replaces the index when it ends, as it
/// replaces the store's contents.
#[derive(Default)]
struct State {
    live: Index,
    relist: Option<Index>,
}

/// Fed the same watch events as its store, before the store sees them, so that a reconcile
/// woken by the store never finds the index behind it.
#[derive(Default)]
pub struct LabelIndex {
    /// The label keys filed; `None`: every label.
    keys: Option<&'static [&'static str]>,
    state: RwLock<State>,
}

impl LabelIndex {
    /// An index of the given label keys only (less memory where only they are selected on).
    pub fn of_keys(keys: &'static [&'static str]) -> Self {
        Self {
            keys: Some(keys),
            state: RwLock::default(),
        }
    }

    pub fn observe<K: Resource>(&self, event: &watcher::Event<K>) {
        let mut st = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let State { live, relist } = &mut *st;
        let parts = |o: &K| {
            let labels = o
                .labels()
                .iter()
                .filter(|(k, _)| self.keys.is_none_or(|keys| keys.contains(&k.as_str())))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (o.namespace().unwrap_or_default(), o.name_any(), labels)
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

    /// Names in `ns` carrying every label of `selector` (which must not be empty), by name, as
    /// far as the index knows: the caller reads each from the store and checks it again.
    pub fn matching(&self, ns: &str, selector: &[(&str, &str)]) -> Vec<String> {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let sets: Option<Vec<&BTreeSet<String>>> = selector
            .iter()
            .map(|(k, v)| {
                st.live
                    .names
                    .get(&(ns.to_string(), k.to_string(), v.to_string()))
            })
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
        assert!(index.matching("ns", &[("pl", "p1")]).is_empty());
        assert_eq!(index.matching("ns", &[("pl", "p2")]), ["b", "c"]);
        assert_eq!(index.matching("ns", &[("pl", "p2"), ("v", "in")]), ["c"]);
        assert!(index.matching("other", &[("pl", "p2")]).is_empty());
        assert!(index.matching("ns", &[("pl", "p2"), ("x", "y")]).is_empty());
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
        assert_eq!(index.matching("ns", &[("pl", "p1")]), ["a"]);
        index.observe(&Event::<Pod>::InitDone);
        assert_eq!(index.matching("ns", &[("pl", "p1")]), ["b"]);
    }

    #[test]
    fn files_only_its_keys() {
        let index = LabelIndex::of_keys(&["pl"]);
        index.observe(&Event::Apply(pod("a", &[("pl", "p1"), ("v", "in")])));
        assert_eq!(index.matching("ns", &[("pl", "p1")]), ["a"]);
        assert!(index.matching("ns", &[("v", "in")]).is_empty());
    }
}
