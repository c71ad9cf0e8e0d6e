//! Watch caches the simulated controllers read instead of the API server, as Numaflow reads its
//! informers.
//!
//! One reflector per kind keeps a `Store`. Every change is forwarded to the controllers that
//! subscribed to the kind only once the store holds it, so a reconcile triggered by a change
//! always reads that change (or a newer one) from the cache.

use std::{
    collections::BTreeMap,
    fmt::Debug,
    hash::Hash,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use anyhow::Context as _;
use futures::{
    Stream, StreamExt,
    channel::mpsc::{UnboundedSender, unbounded},
};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::Pod,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::DynamicObject,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store, store::Writer},
        watcher,
    },
};
use numaplane_api::label_index::LabelIndex;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::{
    dyn_scoped_api, scoped_api,
    util::{isbsvc_resource, vertex_resource},
};

/// How long the initial lists may take before the simulator gives up starting.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

type Filter<K> = Box<dyn Fn(&K) -> bool + Send + Sync>;

struct Subscriber<K> {
    filter: Filter<K>,
    tx: UnboundedSender<K>,
}

/// The cached objects of one kind and the controllers to notify of their changes.
pub(crate) struct Cache<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash,
{
    store: Store<K>,
    index: Arc<LabelIndex>,
    dyntype: K::DynamicType,
    subscribers: Arc<Mutex<Vec<Subscriber<K>>>>,
}

impl<K> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    /// A cache fed by `api`, and the task that keeps it (not yet running).
    fn new(
        api: Api<K>,
        config: watcher::Config,
        dyntype: K::DynamicType,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let writer = Writer::new(dyntype.clone());
        let cache = Cache {
            store: writer.as_reader(),
            index: Arc::default(),
            dyntype,
            subscribers: Arc::default(),
        };
        let index = cache.index.clone();
        // The index is fed before the store: what a woken reconcile reads is in both.
        let watch = watcher(api, config).default_backoff().inspect(move |ev| {
            if let Ok(ev) = ev {
                index.observe(ev);
            }
        });
        let events = reflector::reflector(writer, watch);
        let feed = forward(events, cache.subscribers.clone());
        (cache, feed)
    }

    pub(crate) fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// The cached object `ns/name`.
    pub(crate) fn get(&self, ns: &str, name: &str) -> Option<Arc<K>> {
        self.store
            .get(&ObjectRef::new_with(name, self.dyntype.clone()).within(ns))
    }

    /// The cached objects in `ns` carrying every label of `selector`.
    pub(crate) fn list(&self, ns: &str, selector: &BTreeMap<String, String>) -> Vec<Arc<K>> {
        if selector.is_empty() {
            return self
                .store
                .state_filter(|o| o.namespace().as_deref() == Some(ns));
        }
        let pairs: Vec<(&str, &str)> = selector
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.index
            .matching(ns, &pairs)
            .iter()
            .filter_map(|name| self.get(ns, name))
            // The index runs a moment ahead of the store.
            .filter(|o| selector.iter().all(|(k, v)| o.labels().get(k) == Some(v)))
            .collect()
    }

    /// Every cached object passing `filter`, then each change of one, as a controller trigger.
    pub(crate) fn subscribe(
        &self,
        filter: impl Fn(&K) -> bool + Send + Sync + 'static,
    ) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        let (tx, rx) = unbounded();
        let mut subscribers = lock(&self.subscribers);
        // Replay under the lock: a change lands either in this snapshot or in a later send.
        for obj in self.store.state() {
            if filter(obj.as_ref()) {
                let _ = tx.unbounded_send(K::clone(&obj));
            }
        }
        subscribers.push(Subscriber {
            filter: Box::new(filter),
            tx,
        });
        rx.map(Ok)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends each change the reflector applied to the interested subscribers. Objects of a (re)list
/// are held back until the list is complete, because only then does the store swap them in.
async fn forward<K: Clone>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>>,
    subscribers: Arc<Mutex<Vec<Subscriber<K>>>>,
) {
    let mut listed = Vec::new();
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(obj) | watcher::Event::Delete(obj)) => {
                broadcast(&subscribers, &obj)
            }
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitApply(obj)) => listed.push(obj),
            Ok(watcher::Event::InitDone) => {
                for obj in listed.drain(..) {
                    broadcast(&subscribers, &obj);
                }
            }
            Err(e) => tracing::debug!(error = %e, "simulator cache watch failed"),
        }
    }
}

fn broadcast<K: Clone>(subscribers: &Mutex<Vec<Subscriber<K>>>, obj: &K) {
    // Subscribers whose controller has stopped are dropped.
    lock(subscribers).retain(|s| !(s.filter)(obj) || s.tx.unbounded_send(obj.clone()).is_ok());
}

/// A filter passing objects labelled `key=value`.
pub(crate) fn labelled<K: Resource>(
    key: &'static str,
    value: &'static str,
) -> impl Fn(&K) -> bool + Send + Sync + 'static {
    move |o| o.labels().get(key).map(String::as_str) == Some(value)
}

/// A filter passing everything.
pub(crate) fn all<K>(_: &K) -> bool {
    true
}

/// The caches of every kind the simulator reads besides the one a controller reconciles.
pub(crate) struct Caches {
    pub(crate) pods: Cache<Pod>,
    pub(crate) vertices: Cache<DynamicObject>,
    pub(crate) isbsvcs: Cache<DynamicObject>,
    pub(crate) deployments: Cache<Deployment>,
    pub(crate) statefulsets: Cache<StatefulSet>,
}

impl Caches {
    /// Starts the watches over the given scope and waits for their initial lists, so that no
    /// controller reads an empty cache.
    pub(crate) async fn start(
        client: &Client,
        namespace: Option<&str>,
    ) -> anyhow::Result<(Caches, Vec<JoinHandle<()>>)> {
        let everything = watcher::Config::default;
        let (pods, pods_feed) = Cache::<Pod>::new(scoped_api(client, namespace), everything(), ());
        let (vertices, vertices_feed) = Cache::<DynamicObject>::new(
            dyn_scoped_api(client, namespace, &vertex_resource()),
            everything(),
            vertex_resource(),
        );
        let (isbsvcs, isbsvcs_feed) = Cache::<DynamicObject>::new(
            dyn_scoped_api(client, namespace, &isbsvc_resource()),
            everything(),
            isbsvc_resource(),
        );
        let (deployments, deployments_feed) =
            Cache::<Deployment>::new(scoped_api(client, namespace), everything(), ());
        // Only the StatefulSets the simulator plays the controller for.
        let (statefulsets, statefulsets_feed) = Cache::<StatefulSet>::new(
            scoped_api(client, namespace),
            everything().labels("app.kubernetes.io/component=isbsvc"),
            (),
        );
        let tasks = vec![
            tokio::spawn(pods_feed),
            tokio::spawn(vertices_feed),
            tokio::spawn(isbsvcs_feed),
            tokio::spawn(deployments_feed),
            tokio::spawn(statefulsets_feed),
        ];
        let caches = Caches {
            pods,
            vertices,
            isbsvcs,
            deployments,
            statefulsets,
        };
        if let Err(e) = tokio::time::timeout(READY_TIMEOUT, caches.wait_until_ready()).await {
            tasks.iter().for_each(JoinHandle::abort);
            return Err(e).context("the simulator's watch caches did not fill");
        }
        Ok((caches, tasks))
    }

    async fn wait_until_ready(&self) {
        // The writers live in the feed tasks, which run until aborted.
        let _ = futures::join!(
            self.pods.store.wait_until_ready(),
            self.vertices.store.wait_until_ready(),
            self.isbsvcs.store.wait_until_ready(),
            self.deployments.store.wait_until_ready(),
            self.statefulsets.store.wait_until_ready(),
        );
    }
}
