//! The shared watches every controller of the operator reads from, and the trigger streams
//! built on them (configuration changes, leadership): the plumbing below `runtime` and
//! `numaflow_controller::wiring`, which both start controllers from it.

use crate::metrics::Metrics;
use crate::settings::{ConfigScope, Settings};
use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use numaplane_api::label_index::LabelIndex;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Waits until a controller's own store has been listed. kube-runtime's readiness wakes one
/// waiter only, and the controller's runner waits on the same store: the second waiter would
/// sleep forever, so it looks again every 100 ms instead of trusting the wake-up.
pub(crate) async fn until_listed<K>(store: &Store<K>) -> Result<(), reflector::store::WriterDropped>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        let look = tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready());
        if let Ok(ready) = look.await {
            return ready;
        }
    }
}

/// An API over the watched scope.
pub(crate) fn scoped<K>(client: &Client, ns: &Option<String>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

pub(crate) fn subscribe<K>(
    w: &reflector::store::Writer<K>,
) -> anyhow::Result<reflector::ReflectHandle<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    w.subscribe()
        .ok_or_else(|| anyhow::anyhow!("store is not shared"))
}

/// Where a shared watch's objects go: the store's writer and, for children, their parent index
/// (fed first).
pub(crate) struct Feed<K: Resource<DynamicType = ()> + Clone + 'static> {
    pub writer: reflector::store::Writer<K>,
    pub index: Option<Arc<LabelIndex>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> From<reflector::store::Writer<K>>
    for Feed<K>
{
    fn from(writer: reflector::store::Writer<K>) -> Self {
        Self {
            writer,
            index: None,
        }
    }
}

/// A shared watch feeding `feed`, with a given reaction to deletions (which shared streams don't pass on).
pub(crate) fn spawn_watch_with<K>(
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
    api: Api<K>,
    cfg: watcher::Config,
    feed: Feed<K>,
    metrics: Arc<Metrics>,
    on_delete: impl Fn(&K) + Send + Sync + 'static,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let token = cancel.clone();
    let Feed { writer, index } = feed;
    tasks.spawn(async move {
        let stream = watcher(api, cfg)
            .default_backoff()
            .modify(|o: &mut K| o.meta_mut().managed_fields = None)
            .inspect(move |ev| {
                if let (Some(index), Ok(ev)) = (&index, ev) {
                    index.observe(ev);
                }
            })
            .reflect_shared(writer)
            .for_each(|ev| {
                match ev {
                    Ok(watcher::Event::Delete(obj)) => on_delete(&obj),
                    Ok(_) => {}
                    Err(e) => {
                        metrics.cluster_cache_error_total.inc();
                        tracing::warn!(kind = %K::kind(&()), error = %e, "watch error (retrying)");
                    }
                }
                futures::future::ready(())
            });
        tokio::select! {
            _ = token.cancelled() => {}
            _ = stream => {}
        }
    });
}

/// Rollouts of `store` in the scope of a configuration change.
fn in_scope<R>(store: &Store<R>, scope: &ConfigScope) -> Vec<ObjectRef<R>>
where
    R: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter(|r| match scope {
            ConfigScope::All => true,
            ConfigScope::Namespace(ns) => r.namespace().as_deref() == Some(ns.as_str()),
        })
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}

pub(crate) fn config_triggers<R>(
    settings: &Settings,
    store: Store<R>,
) -> impl Stream<Item = ObjectRef<R>> + Send + 'static
where
    R: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    settings
        .changes()
        .flat_map(move |scope| futures::stream::iter(in_scope(&store, &scope)))
}

/// Fires when this replica becomes leader: a new leader reconciles everything, as standbys did
/// nothing while it was away.
pub(crate) fn leadership_gained(
    gained: &broadcast::Sender<()>,
) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(gained.subscribe(), |mut rx| async move {
        match rx.recv().await {
            Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => Some(((), rx)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

/// What wakes a rollout that its controller's streams don't carry: shared watches don't pass
/// deletions on, so deletions of labelled children are announced and mapped back to their
/// rollout (a deleted child must be recreated); and a trial's AnalysisRun finishing
/// (`crate::run_watch`, kind `AnalysisRun/<child kind>`).
#[derive(Clone, Debug)]
pub struct Announced {
    /// The deleted child's kind, or `AnalysisRun/<child kind>`.
    pub kind: String,
    pub namespace: String,
    pub parent: String,
    /// The ISBServiceRollout a deleted pipeline ran on: a recreate waits for its pipelines.
    pub isb_rollout: Option<String>,
}
