//! The watch cache of one kind of child, with its names indexed by namespace and parent rollout.
//!
//! A reconcile asks for "the children of this rollout" several times per pass. Filtering the
//! whole store for it made every pass O(all children): at 10,000 PipelineRollouts nine tenths
//! of the operator's CPU went to comparing label strings, and a cold start took minutes longer
//! than the API server needed. The index answers in O(children of the rollout).
//!
//! It also reads this operator's own writes: a child it patched is read as written until the
//! watch delivers that version or a newer one (as client-go's mutation cache does). Under load
//! the watch can lag seconds behind a write, and a pass woken meanwhile (by a status write, a
//! timer) used to read the child from before the write and make it again: a promotion's label
//! flip, a drain's pause, a scale restore.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store, store::WriterDropped};
use numaplane_api::compact::{Compact, RawObject};
use numaplane_api::keys::labels;
use numaplane_api::label_index::LabelIndex;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The labels a child cache files names under.
pub const INDEXED_LABELS: &[&str] = &[labels::PARENT_ROLLOUT_NAME];

/// A reflector store of children (kept compact, parsed when read) and its parent index.
pub struct ChildCache<K: Resource<DynamicType = ()> + 'static> {
    store: Store<Compact<K>>,
    index: Arc<LabelIndex>,
    /// Objects this operator wrote, until the store holds that version.
    written: Arc<Mutex<Written<K>>>,
}

/// Written objects by namespace and name.
type Written<K> = HashMap<(String, String), Arc<K>>;

impl<K: Resource<DynamicType = ()> + 'static> Clone for ChildCache<K> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            index: self.index.clone(),
            written: self.written.clone(),
        }
    }
}

impl<K> ChildCache<K>
where
    K: RawObject + Clone + 'static,
{
    pub fn new(store: Store<Compact<K>>, index: Arc<LabelIndex>) -> Self {
        Self {
            store,
            index,
            written: Arc::default(),
        }
    }

    /// Keeps `obj`, as the API server answered a write of it, to be read until the watch
    /// brings that version. Only objects the store holds are read this way (a write never
    /// brings back an object the watch saw deleted); entries the store caught up with go.
    pub fn remember(&self, obj: &K) {
        let (Some(ns), Some(name)) = (obj.meta().namespace.clone(), obj.meta().name.clone()) else {
            return;
        };
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written.retain(|(ns, name), w| {
            self.store
                .get(&ObjectRef::new(name).within(ns))
                .is_some_and(|c| newer(w.meta(), &c.metadata))
        });
        let mut obj = obj.clone();
        // (The watches drop them too: a field tree per manager, read by no pass.)
        obj.meta_mut().managed_fields = None;
        written.insert((ns, name), Arc::new(obj));
    }

    /// What this operator wrote of `ns/name` if it is newer than `cached`, the store's copy.
    fn written(&self, ns: &str, name: &str, cached: &ObjectMeta) -> Option<Arc<K>> {
        let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if written.is_empty() {
            return None;
        }
        written
            .get(&(ns.to_string(), name.to_string()))
            .filter(|w| newer(w.meta(), cached))
            .cloned()
    }

    /// The freshest copy of a cached object: the store's, or this operator's newer write.
    fn fresh(&self, ns: &str, c: &Compact<K>) -> Arc<K> {
        let name = c.metadata.name.as_deref().unwrap_or_default();
        self.written(ns, name, &c.metadata)
            .unwrap_or_else(|| Arc::new(c.full()))
    }

    /// The metadata of the freshest copy of `ns/name`, read without parsing the rest.
    fn fresh_meta<T>(
        &self,
        ns: &str,
        name: &str,
        read: impl FnOnce(&ObjectMeta) -> T,
    ) -> Option<T> {
        let c = self.store.get(&ObjectRef::new(name).within(ns))?;
        Some(match self.written(ns, name, &c.metadata) {
            Some(w) => read(w.meta()),
            None => read(&c.metadata),
        })
    }

    /// The cached objects whose metadata passes `keep`, parsed: a scan of all (for rare
    /// namespace-wide questions) that parses only what it returns.
    pub fn filtered(&self, keep: impl Fn(&ObjectMeta) -> bool) -> Vec<Arc<K>> {
        let ns_of = |c: &Compact<K>| c.metadata.namespace.clone().unwrap_or_default();
        self.store
            .state_filter(|c| {
                let name = c.metadata.name.as_deref().unwrap_or_default();
                match self.written(&ns_of(c), name, &c.metadata) {
                    Some(w) => keep(w.meta()),
                    None => keep(&c.metadata),
                }
            })
            .iter()
            .map(|c| self.fresh(&ns_of(c), c))
            .collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// The cached object `name` in `ns`.
    pub fn named(&self, ns: &str, name: &str) -> Option<Arc<K>> {
        self.store
            .get(&ObjectRef::new(name).within(ns))
            .map(|c| self.fresh(ns, &c))
    }

    /// `read` applied to the metadata of the cached object `ns/name`, without parsing the rest.
    pub fn read_meta<T>(
        &self,
        ns: &str,
        name: &str,
        read: impl FnOnce(&ObjectMeta) -> T,
    ) -> Option<T> {
        self.fresh_meta(ns, name, read)
    }

    /// Label `label` of the cached object `ns/name`, read without parsing the object.
    pub fn label_of(&self, ns: &str, name: &str, label: &str) -> Option<String> {
        self.fresh_meta(ns, name, |m| m.labels.as_ref()?.get(label).cloned())
            .flatten()
    }

    /// The cached children of rollout `parent` in `ns`, by name.
    pub fn children_of(&self, ns: &str, parent: &str) -> Vec<Arc<K>> {
        self.index
            .matching(ns, &[(labels::PARENT_ROLLOUT_NAME, parent)])
            .iter()
            .filter_map(|name| self.store.get(&ObjectRef::new(name).within(ns)))
            // The index runs a moment ahead of the store: a relabelled object is checked again.
            .filter(|o| {
                o.labels()
                    .get(labels::PARENT_ROLLOUT_NAME)
                    .map(String::as_str)
                    == Some(parent)
            })
            .map(|c| self.fresh(ns, &c))
            .collect()
    }

    pub async fn wait_until_ready(&self) -> Result<(), WriterDropped> {
        self.store.wait_until_ready().await
    }
}

/// Whether `written` is a later version than `cached`. Resource versions are etcd revisions,
/// compared as numbers (as the status writes are, `status.rs`); one that does not parse is
/// never newer, so the watch's copy is read.
fn newer(written: &ObjectMeta, cached: &ObjectMeta) -> bool {
    let rv = |m: &ObjectMeta| m.resource_version.as_deref()?.parse::<u64>().ok();
    matches!((rv(written), rv(cached)), (Some(w), Some(c)) if w > c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use numaplane_api::numaflow::Pipeline;

    fn child(name: &str, parent: Option<&str>) -> Compact<Pipeline> {
        let labels = parent.map(|p| serde_json::json!({labels::PARENT_ROLLOUT_NAME: p}));
        let raw = serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"vertices": []},
        });
        serde_json::from_str(&raw.to_string()).expect("compact")
    }

    /// The index and the store, fed as the watch feeds them: the index first.
    struct Fed {
        cache: ChildCache<Pipeline>,
        writer: reflector::store::Writer<Compact<Pipeline>>,
    }

    impl Fed {
        fn new() -> Self {
            let (reader, writer) = reflector::store();
            let cache = ChildCache::new(reader, Arc::new(LabelIndex::of_keys(INDEXED_LABELS)));
            Self { cache, writer }
        }

        fn feed(&mut self, events: Vec<Event<Compact<Pipeline>>>) -> &mut Self {
            for e in events {
                self.cache.index.observe(&e);
                self.writer.apply_watcher_event(&e);
            }
            self
        }

        fn names(&self, parent: &str) -> Vec<String> {
            let children = self.cache.children_of("ns", parent);
            children.iter().map(|c| c.name_any()).collect()
        }
    }

    #[test]
    fn follows_applies_relabels_and_deletes() {
        let mut fed = Fed::new();
        fed.feed(vec![
            Event::Init,
            Event::InitApply(child("a-0", Some("a"))),
            Event::InitApply(child("b-0", Some("b"))),
            Event::InitApply(child("x", None)),
            Event::InitDone,
            Event::Apply(child("a-1", Some("a"))),
            Event::Apply(child("b-0", Some("a"))),
            Event::Delete(child("a-0", Some("a"))),
        ]);
        assert_eq!(fed.names("a"), ["a-1", "b-0"]);
        assert!(fed.names("b").is_empty());
        assert!(fed.cache.children_of("other-ns", "a").is_empty());
        assert!(fed.cache.named("ns", "x").is_some());
    }

    fn at(mut c: Compact<Pipeline>, rv: &str, state: &str) -> Compact<Pipeline> {
        c.metadata.resource_version = Some(rv.into());
        c.metadata
            .labels
            .get_or_insert_default()
            .insert(labels::UPGRADE_STATE.into(), state.into());
        c
    }

    #[test]
    fn reads_its_own_writes_until_the_watch_brings_them() {
        let mut fed = Fed::new();
        let state = |fed: &Fed| fed.cache.label_of("ns", "a-1", labels::UPGRADE_STATE);
        fed.feed(vec![
            Event::Init,
            Event::InitApply(at(child("a-1", Some("a")), "5", "trial")),
            Event::InitDone,
        ]);
        // The operator flipped it (rv 7); the watch has not delivered that yet.
        fed.cache
            .remember(&at(child("a-1", Some("a")), "7", "promoted").full());
        assert_eq!(state(&fed).as_deref(), Some("promoted"));
        let read = |c: Option<Arc<Pipeline>>| {
            c.and_then(|p| p.labels().get(labels::UPGRADE_STATE).cloned())
        };
        assert_eq!(
            read(fed.cache.named("ns", "a-1")).as_deref(),
            Some("promoted")
        );
        assert_eq!(
            read(fed.cache.children_of("ns", "a").pop()).as_deref(),
            Some("promoted")
        );
        let promoted = fed.cache.filtered(|m| {
            m.labels
                .as_ref()
                .and_then(|l| l.get(labels::UPGRADE_STATE))
                .map(String::as_str)
                == Some("promoted")
        });
        assert_eq!(promoted.len(), 1);
        assert_eq!(
            fed.cache
                .read_meta("ns", "a-1", |m| m.resource_version.clone())
                .flatten()
                .as_deref(),
            Some("7")
        );
        // A later version from the watch (another writer after ours) wins.
        fed.feed(vec![Event::Apply(at(
            child("a-1", Some("a")),
            "8",
            "recyclable",
        ))]);
        assert_eq!(state(&fed).as_deref(), Some("recyclable"));
        // An older write than the store holds is not read; nor one whose version is no number.
        fed.cache
            .remember(&at(child("a-1", Some("a")), "6", "trial").full());
        fed.cache
            .remember(&at(child("a-1", Some("a")), "x9", "trial").full());
        assert_eq!(state(&fed).as_deref(), Some("recyclable"));
        // A write never brings back an object the watch saw deleted, and is then forgotten.
        fed.cache
            .remember(&at(child("a-1", Some("a")), "9", "promoted").full());
        fed.feed(vec![Event::Delete(at(
            child("a-1", Some("a")),
            "10",
            "promoted",
        ))]);
        assert!(fed.cache.named("ns", "a-1").is_none());
        assert!(fed.names("a").is_empty());
        fed.cache
            .remember(&at(child("b-1", Some("b")), "11", "trial").full());
        assert!(fed.cache.named("ns", "b-1").is_none());
        let kept = fed.cache.written.lock().expect("lock").len();
        assert_eq!(kept, 1, "only the last write is kept");
    }

    #[test]
    fn a_relist_replaces_the_index_when_it_ends() {
        let mut fed = Fed::new();
        fed.feed(vec![
            Event::Init,
            Event::InitApply(child("a-0", Some("a"))),
            Event::InitDone,
            // The relist no longer has a-0 (deleted while the watch was down).
            Event::Init,
            Event::InitApply(child("a-1", Some("a"))),
        ]);
        // Until the relist ends, the store and the index answer from the old list.
        assert_eq!(fed.names("a"), ["a-0"]);
        fed.feed(vec![Event::InitDone]);
        assert_eq!(fed.names("a"), ["a-1"]);
    }
}
