//! Every Vertex's replica counts, which a trial pipeline's health sample reads (instead of one
//! label-selected LIST per sample, which the API server answers by scanning every Vertex of the
//! namespace). A map of its own rather than a reflector store: a store keeps each object with a
//! full `ObjectMeta`, about a kilobyte per Vertex whatever is stripped from it, and there are a
//! few Vertices per pipeline; this keeps about a hundred and fifty bytes.

use crate::metrics::Metrics;
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::narrow::VertexReplicas;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What a health sample reads of one Vertex.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Its pipeline (Numaflow's `numaflow.numaproj.io/pipeline-name` label).
    pub pipeline: String,
    pub ready: Option<i64>,
    pub desired: Option<i64>,
}

impl Counts {
    fn of(v: &VertexReplicas) -> Self {
        Counts {
            pipeline: v.pipeline().unwrap_or_default().to_string(),
            ready: v.ready_replicas,
            desired: v.desired_replicas,
        }
    }

    /// The Vertex `name` as the health rules read it: its name and replica counts.
    pub fn to_json(&self, name: &str) -> serde_json::Value {
        let mut status = serde_json::Map::new();
        if let Some(r) = self.ready {
            status.insert("readyReplicas".into(), r.into());
        }
        if let Some(d) = self.desired {
            status.insert("desiredReplicas".into(), d.into());
        }
        serde_json::json!({"metadata": {"name": name}, "status": status})
    }
}

type Map = HashMap<String, Counts>;

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The counts of every Vertex in the operator's scope, kept by a watch.
#[derive(Clone, Default)]
pub struct VertexCache(Arc<RwLock<Map>>);

impl VertexCache {
    pub fn get(&self, namespace: &str, name: &str) -> Option<Counts> {
        let m = self.0.read().unwrap_or_else(|e| e.into_inner());
        m.get(&key(namespace, name)).cloned()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Map> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watch event; `relist` collects a (re)list until it is done.
    fn apply(&self, event: watcher::Event<VertexReplicas>, relist: &mut Option<Map>) {
        let k = |v: &VertexReplicas| key(v.ns(), &v.name_any());
        match event {
            watcher::Event::Apply(v) => {
                self.write().insert(k(&v), Counts::of(&v));
            }
            watcher::Event::Delete(v) => {
                self.write().remove(&k(&v));
            }
            watcher::Event::Init => *relist = Some(Map::new()),
            watcher::Event::InitApply(v) => {
                relist
                    .get_or_insert_with(Map::new)
                    .insert(k(&v), Counts::of(&v));
            }
            watcher::Event::InitDone => {
                if let Some(m) = relist.take() {
                    *self.write() = m;
                }
            }
        }
    }

    /// Starts the watch that keeps the cache; a lookup that misses before its first list is
    /// answered by a live read.
    pub fn spawn(
        &self,
        tasks: &mut JoinSet<()>,
        cancel: &CancellationToken,
        api: Api<VertexReplicas>,
        metrics: Arc<Metrics>,
    ) {
        let (cache, token) = (self.clone(), cancel.clone());
        tasks.spawn(async move {
            let mut relist = None;
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .for_each(|ev| {
                    match ev {
                        Ok(ev) => cache.apply(ev, &mut relist),
                        Err(e) => {
                            metrics.cluster_cache_error_total.inc();
                            tracing::warn!(kind = "Vertex", error = %e, "watch error (retrying)");
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vertex(name: &str, ready: i64) -> VertexReplicas {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns",
                         "labels": {"numaflow.numaproj.io/pipeline-name": "p"}},
            "status": {"readyReplicas": ready, "desiredReplicas": 1}
        }))
        .expect("vertex")
    }

    #[test]
    fn events_and_relists_keep_the_counts_current() {
        let cache = VertexCache::default();
        let mut relist = None;
        cache.apply(watcher::Event::Apply(vertex("p-in", 0)), &mut relist);
        let got = cache.get("ns", "p-in").expect("cached");
        assert_eq!(
            (got.pipeline.as_str(), got.ready, got.desired),
            ("p", Some(0), Some(1))
        );
        assert_eq!(
            got.to_json("p-in"),
            json!({"metadata": {"name": "p-in"}, "status": {"readyReplicas": 0, "desiredReplicas": 1}})
        );
        cache.apply(watcher::Event::Apply(vertex("p-in", 1)), &mut relist);
        assert_eq!(cache.get("ns", "p-in").and_then(|c| c.ready), Some(1));
        cache.apply(watcher::Event::Apply(vertex("p-out", 1)), &mut relist);
        cache.apply(watcher::Event::Delete(vertex("p-out", 1)), &mut relist);
        assert_eq!(cache.get("ns", "p-out"), None);
        // A relist replaces everything once done; until then the old counts answer.
        cache.apply(watcher::Event::Init, &mut relist);
        cache.apply(watcher::Event::InitApply(vertex("p-cat", 1)), &mut relist);
        assert!(cache.get("ns", "p-in").is_some() && cache.get("ns", "p-cat").is_none());
        cache.apply(watcher::Event::InitDone, &mut relist);
        assert!(cache.get("ns", "p-in").is_none() && cache.get("ns", "p-cat").is_some());
    }
}
