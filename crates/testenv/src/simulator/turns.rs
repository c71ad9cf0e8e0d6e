//! Passes of one simulated controller taken in turn: first due, first served.

use std::{hash::Hash, sync::Arc};

use futures::future::BoxFuture;
use kube::{
    Resource,
    runtime::{
        controller::Action,
        reflector::{ObjectRef, Store},
    },
};
use tokio::sync::Semaphore;

type Pass<E> = BoxFuture<'static, Result<Action, E>>;

/// Wraps a simulated controller's `reconcile` so that at most `concurrency` passes of its kind
/// run at once, started in the order they fell due, each on the newest cached copy.
///
/// kube-runtime's own limit parks what falls due while its workers are busy and hands a freed
/// worker to whichever parked object comes first in hash order; under a steady load (a
/// thousand pipelines scaled down and drained while a thousand trials come up, at N=10,000)
/// an unlucky trial could wait out its whole assessment window. Numaflow's work queue is
/// first-in first-out, and so is tokio's semaphore.
pub(crate) fn in_turn<K, C, E, F, Fut>(
    concurrency: u16,
    store: Store<K>,
    dyntype: K::DynamicType,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<C>) -> Pass<E>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + Hash + Send + Sync,
    C: Send + Sync + 'static,
    E: Send + 'static,
    F: Fn(Arc<K>, Arc<C>) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let turns = Arc::new(Semaphore::new(usize::from(concurrency.max(1))));
    move |obj, ctx| {
        let (turns, store, dyntype) = (turns.clone(), store.clone(), dyntype.clone());
        Box::pin(async move {
            let Ok(_turn) = turns.acquire_owned().await else {
                return Ok(Action::await_change());
            };
            // The copy handed over at dispatch may be stale after the wait; gone means deleted.
            match store.get(&ObjectRef::from_obj_with(&*obj, dyntype)) {
                Some(newest) => reconcile(newest, ctx).await,
                None => Ok(Action::await_change()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::{
        api::ObjectMeta,
        runtime::{reflector::store::Writer, watcher},
    };

    use super::*;

    struct Seen {
        /// (name, resourceVersion) of each pass, in the order they started.
        passes: Mutex<Vec<(String, String)>>,
        /// Holds the first pass (and with it the only turn) until released.
        gate: Semaphore,
    }

    async fn record(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ()> {
        let name = cm.metadata.name.clone().unwrap_or_default();
        let rv = cm.metadata.resource_version.clone().unwrap_or_default();
        seen.passes.lock().map_err(drop)?.push((name.clone(), rv));
        if name == "first" {
            let _ = seen.gate.acquire().await;
        }
        Ok(Action::await_change())
    }

    fn cm(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[tokio::test]
    async fn passes_start_in_the_order_they_fell_due_on_the_newest_copy() {
        let mut writer = Writer::<ConfigMap>::default();
        let names = ["first", "q", "b", "zz", "a", "m", "c", "gone", "k", "d"];
        for n in names {
            writer.apply_watcher_event(&watcher::Event::Apply(cm(n, "1")));
        }
        let seen = Arc::new(Seen {
            passes: Mutex::default(),
            gate: Semaphore::new(0),
        });
        let mut turn = in_turn(1, writer.as_reader(), (), record);
        let mut passes = Vec::new();
        for n in names {
            passes.push(tokio::spawn(turn(Arc::new(cm(n, "1")), seen.clone())));
            // The spawned pass runs until it holds the turn or waits for it.
            tokio::task::yield_now().await;
        }
        // Changed and deleted while waiting for their turn.
        writer.apply_watcher_event(&watcher::Event::Apply(cm("m", "2")));
        writer.apply_watcher_event(&watcher::Event::Delete(cm("gone", "1")));
        seen.gate.add_permits(1);
        for p in passes {
            assert!(matches!(p.await, Ok(Ok(_))));
        }
        let passes = seen.passes.lock().map(|p| p.clone()).unwrap_or_default();
        let want: Vec<(String, String)> = names
            .iter()
            .filter(|n| **n != "gone")
            .map(|n| (n.to_string(), if *n == "m" { "2" } else { "1" }.to_string()))
            .collect();
        assert_eq!(passes, want);
    }
}
