//! The benchmark's rollouts: one shared ISBServiceRollout, N PipelineRollouts and N/10
//! MonoVertexRollouts, created and updated as a user would (server-side apply), and an
//! independent watcher that tells when every one of them has converged.

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use numaplane_api::common::Status;
use numaplane_api::{ISBServiceRollout, MonoVertexRollout, PipelineRollout};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::time::{Duration, Instant};

pub const ISB_NAME: &str = "bench-isb";
/// Concurrent requests with which the "user" creates or updates rollouts.
const USER_CONCURRENCY: usize = 16;
const MANAGER: &str = "bench-user";

pub fn isbsvc_rollout() -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "ISBServiceRollout",
        "metadata": {"name": ISB_NAME},
        "spec": {"interStepBufferService": {"spec": {
            "jetstream": {"version": "2.10.17", "persistence": {"volumeSize": "10Mi"}}
        }}}
    })
}

/// A two-vertex pipeline; `rpu` is what the update storm changes.
pub fn pipeline_rollout(name: &str, rpu: u32) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": {
            "interStepBufferServiceName": ISB_NAME,
            "lifecycle": {"pauseGracePeriodSeconds": 10},
            "vertices": [
                {"name": "in", "scale": {"min": 1, "max": 1},
                 "source": {"generator": {"rpu": rpu, "duration": "1s"}}},
                {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
            ],
            "edges": [{"from": "in", "to": "out"}]
        }}}
    })
}

pub fn monovertex_rollout(name: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": name},
        "spec": {"monoVertex": {"spec": {
            "scale": {"min": 1, "max": 1},
            "source": {"udsource": {"container": {"image": "quay.io/numaio/numaflow-go/source-simple-source:stable"}}},
            "sink": {"blackhole": {}}
        }}}
    })
}

pub fn pipeline_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("pr-{i:04}")).collect()
}

pub fn monovertex_names(n: usize) -> Vec<String> {
    (0..n / 10).map(|i| format!("mvr-{i:04}")).collect()
}

/// Server-side applies `manifests` as the user, `USER_CONCURRENCY` at a time; returns each
/// object's generation after the apply.
pub async fn apply_all<K>(api: &Api<K>, manifests: Vec<Value>) -> Result<HashMap<String, i64>>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    let pp = PatchParams::apply(MANAGER).force();
    stream::iter(manifests)
        .map(|m| {
            let pp = pp.clone();
            async move {
                let name = m["metadata"]["name"]
                    .as_str()
                    .context("manifest without a name")?
                    .to_string();
                let obj = api
                    .patch(&name, &pp, &Patch::Apply(&m))
                    .await
                    .with_context(|| format!("applying {name}"))?;
                Ok::<_, anyhow::Error>((name, obj.meta().generation.unwrap_or(0)))
            }
        })
        .buffer_unordered(USER_CONCURRENCY)
        .try_collect()
        .await
}

/// Deployed, the current generation observed, children healthy.
pub fn converged(status: Option<&Status>, generation: Option<i64>) -> bool {
    status.is_some_and(|s| {
        s.phase == numaplane_api::common::Phase::Deployed
            && Some(s.observed_generation) == generation
            && s.conditions
                .iter()
                .any(|c| c.type_ == "ChildResourcesHealthy" && c.status == "True")
    })
}

/// Reflector caches of the three rollout kinds in the benchmark namespace, fed by the
/// benchmark's own (admin) watches: an observer independent of the controller.
pub struct Watcher {
    pipelines: Store<PipelineRollout>,
    monovertices: Store<MonoVertexRollout>,
    isbsvcs: Store<ISBServiceRollout>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// A reflector cache of `api`, calling `seen` with every object as its watch event arrives.
pub fn reflect<K>(
    api: Api<K>,
    seen: impl Fn(&K) + Send + Sync + 'static,
) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let task = tokio::spawn(async move {
        reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .touched_objects()
            .for_each(|o| {
                if let Ok(o) = o {
                    seen(&o);
                }
                futures::future::ready(())
            })
            .await;
    });
    (reader, task)
}

/// What [`Watcher::wait`] expects of each rollout.
#[derive(Debug, Default, Clone)]
pub struct Expect {
    /// Name → the least generation it must have reached (0 when any will do).
    pub pipelines: HashMap<String, i64>,
    pub monovertices: HashMap<String, i64>,
    pub isbsvcs: HashMap<String, i64>,
}

impl Expect {
    pub fn len(&self) -> usize {
        self.pipelines.len() + self.monovertices.len() + self.isbsvcs.len()
    }
}

/// Per-object convergence: seconds from `since` until the watcher first saw it converged.
pub struct Convergence {
    pub wall: Duration,
    pub per_object: Vec<f64>,
}

impl Watcher {
    pub fn start(client: &Client, ns: &str) -> Self {
        let (pipelines, a) = reflect(Api::namespaced(client.clone(), ns), |_| {});
        let (monovertices, b) = reflect(Api::namespaced(client.clone(), ns), |_| {});
        let (isbsvcs, c) = reflect(Api::namespaced(client.clone(), ns), |_| {});
        Self {
            pipelines,
            monovertices,
            isbsvcs,
            tasks: vec![a, b, c],
        }
    }

    /// Names of the expected rollouts that have not converged yet.
    fn pending(&self, expect: &Expect) -> Vec<String> {
        fn check<K: Resource<DynamicType = ()> + Clone>(
            store: &Store<K>,
            want: &HashMap<String, i64>,
            status: impl Fn(&K) -> Option<&Status>,
            out: &mut Vec<String>,
        ) {
            let have: HashMap<String, std::sync::Arc<K>> = store
                .state()
                .into_iter()
                .map(|o| (o.name_any(), o))
                .collect();
            for (name, min_gen) in want {
                let ok = have.get(name).is_some_and(|o| {
                    let generation = o.meta().generation;
                    generation.unwrap_or(0) >= *min_gen && converged(status(o), generation)
                });
                if !ok {
                    out.push(name.clone());
                }
            }
        }
        let mut out = Vec::new();
        check(
            &self.pipelines,
            &expect.pipelines,
            |o| o.status.as_ref().map(|s| &s.status),
            &mut out,
        );
        check(
            &self.monovertices,
            &expect.monovertices,
            |o| o.status.as_ref().map(|s| &s.status),
            &mut out,
        );
        check(
            &self.isbsvcs,
            &expect.isbsvcs,
            |o| o.status.as_ref().map(|s| &s.status),
            &mut out,
        );
        out
    }

    /// Waits until every expected rollout has converged; times are measured from `since`.
    pub async fn wait(
        &self,
        expect: &Expect,
        since: Instant,
        timeout: Duration,
    ) -> Result<Convergence> {
        let mut first_seen: HashMap<String, f64> = HashMap::new();
        let mut all: Vec<String> = expect
            .pipelines
            .keys()
            .chain(expect.monovertices.keys())
            .chain(expect.isbsvcs.keys())
            .cloned()
            .collect();
        all.sort();
        let mut last_report = Instant::now();
        loop {
            let pending = self.pending(expect);
            let now = since.elapsed().as_secs_f64();
            let pending_set: std::collections::HashSet<&String> = pending.iter().collect();
            for name in &all {
                if !pending_set.contains(name) {
                    first_seen.entry(name.clone()).or_insert(now);
                }
            }
            if pending.is_empty() {
                let mut per_object: Vec<f64> = first_seen.into_values().collect();
                per_object.sort_by(f64::total_cmp);
                return Ok(Convergence {
                    wall: since.elapsed(),
                    per_object,
                });
            }
            if since.elapsed() > timeout {
                bail!(
                    "{} of {} rollouts not converged after {timeout:?}, e.g. {:?}",
                    pending.len(),
                    expect.len(),
                    &pending[..pending.len().min(5)]
                );
            }
            if last_report.elapsed() > Duration::from_secs(10) {
                tracing::info!(
                    pending = pending.len(),
                    total = expect.len(),
                    "waiting for convergence"
                );
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The `q` quantile of sorted values (nearest rank).
pub fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted.get(rank.min(sorted.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use numaplane_api::common::Phase;

    fn status(phase: Phase, observed: i64, healthy: &str) -> Status {
        Status {
            phase,
            observed_generation: observed,
            conditions: vec![Condition {
                type_: "ChildResourcesHealthy".into(),
                status: healthy.into(),
                reason: "x".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(Default::default()),
            }],
            ..Status::default()
        }
    }

    #[test]
    fn converged_needs_deployed_current_generation_and_health() {
        assert!(converged(
            Some(&status(Phase::Deployed, 2, "True")),
            Some(2)
        ));
        assert!(!converged(
            Some(&status(Phase::Deployed, 1, "True")),
            Some(2)
        ));
        assert!(!converged(
            Some(&status(Phase::Deployed, 2, "False")),
            Some(2)
        ));
        assert!(!converged(
            Some(&status(Phase::Pending, 2, "True")),
            Some(2)
        ));
        assert!(!converged(None, Some(1)));
    }

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.5), Some(50.0));
        assert_eq!(nearest_rank(&v, 0.99), Some(99.0));
        assert_eq!(nearest_rank(&v, 1.0), Some(100.0));
        assert_eq!(nearest_rank(&[3.0], 0.01), Some(3.0));
        assert_eq!(nearest_rank(&[], 0.5), None);
    }

    #[test]
    fn manifests_name_the_shared_isb_and_distinct_rollouts() {
        let pr = pipeline_rollout("pr-0001", 7);
        assert_eq!(
            pr["spec"]["pipeline"]["spec"]["interStepBufferServiceName"],
            ISB_NAME
        );
        assert_eq!(
            pr["spec"]["pipeline"]["spec"]["vertices"][0]["source"]["generator"]["rpu"],
            7
        );
        assert_eq!(pipeline_names(1000).len(), 1000);
        assert_eq!(monovertex_names(1000).len(), 100);
        assert_eq!(monovertex_names(1000)[99], "mvr-0099");
    }
}
