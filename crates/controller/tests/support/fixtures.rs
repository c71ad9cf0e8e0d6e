//! Manifests and observers shared by the scenario tests.

use super::Harness;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use numaplane_api::numaflow::Pipeline;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

pub fn isb_rollout(name: &str, jetstream: Value) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "ISBServiceRollout",
        "metadata": {"name": name},
        "spec": {"interStepBufferService": {"spec": {"jetstream": jetstream}}}
    })
}

/// A fixture definitions ConfigMap, as JSON, without a namespace (applied to the test's).
pub fn definitions(version: &str) -> Value {
    let path = format!(
        "{}/../../config/numaflow-controller-definitions/controller_def_{version}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let cm: ConfigMap =
        serde_saphyr::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("parse");
    let mut v = serde_json::to_value(cm).expect("json");
    v["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("namespace");
    v
}

pub fn nc_rollout(version: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "NumaflowControllerRollout",
        "metadata": {"name": "numaflow-controller"},
        "spec": {"controller": {"version": version}}
    })
}

/// Image of the Numaflow controller Deployment.
pub fn image(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

pub fn phase(p: &Pipeline) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s["phase"].as_str())
        .unwrap_or_default()
}

/// Every version of object `name` of kind `K` seen from now on (a watch misses no write, unlike
/// polling: a pipeline may be Paused for less than a poll interval). Returns once the watch's
/// initial list is in, so no write made after the call is missed.
pub async fn record<K>(h: &Harness, name: &str) -> Arc<Mutex<Vec<K>>>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (out, api) = (seen.clone(), h.api::<K>());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (listed_tx, listed) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut listed_tx = Some(listed_tx);
        let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                    out.lock().expect("lock").push(obj)
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = listed_tx.take() {
                        let _ = tx.send(());
                    }
                }
                _ => {}
            }
        }
    });
    tokio::time::timeout(std::time::Duration::from_secs(30), listed)
        .await
        .expect("record: the watch's initial list did not arrive within 30 s")
        .expect("record: the watch task ended");
    seen
}

/// How many consecutive versions seen by a [`record`] watch differ as `differs` says.
pub fn versions_where<K>(seen: &Mutex<Vec<K>>, differs: impl Fn(&K, &K) -> bool) -> usize {
    let seen = seen.lock().expect("lock");
    seen.windows(2).filter(|w| differs(&w[0], &w[1])).count()
}

pub fn rv<K: kube::Resource>(k: &K) -> u64 {
    k.meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// The resourceVersion at which the pipeline was first seen Paused and drained.
pub fn paused_drained_at(seen: &Mutex<Vec<Pipeline>>) -> Option<u64> {
    seen.lock()
        .expect("lock")
        .iter()
        .find(|p| {
            phase(p) == "Paused"
                && p.status.as_ref().map(|s| &s["drainedOnPause"]) == Some(&json!(true))
        })
        .map(rv)
}

/// Reasons of the Events about objects of `kind` in the test namespace.
pub async fn event_reasons(h: &Harness, kind: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(h.client.clone(), &h.ns);
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some(kind))
        .filter_map(|e| e.reason)
        .collect()
}
