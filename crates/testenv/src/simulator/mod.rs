//! A Numaflow controller simulator for tests (CONTRIBUTING.md).
//!
//! It watches Pipelines, Vertices, MonoVertices and InterStepBufferServices
//! (`numaflow.numaproj.io/v1alpha1`) plus the Deployments and StatefulSets Numaflow owns and the
//! `numaflow-controller[-<id>]` Deployments, and reacts to watch events with one
//! `kube::runtime::Controller` per kind, writing what Numaflow and its kubelet-backed pods would:
//! child objects, pods with a kubelet-like status, phases, conditions, `observedGeneration`,
//! the pause/resume protocol and `drainedOnPause`. Like Numaflow, it reads from watch caches
//! (`cache`) rather than the API server. Timers are used only where Numaflow itself
//! uses time (pause grace period, drain delay, requeue while pausing, the deletion wait).
//!
//! Tests steer deviations from the default model through [`Simulator::set_pipeline_behaviour`]
//! and [`Simulator::set_monovertex_behaviour`].

mod behaviour;
mod cache;
mod expectations;
mod isbsvc;
mod monovertex;
mod pipeline;
mod pipeline_children;
mod pipeline_lifecycle;
mod pods;
mod turns;
mod util;
mod vertex;
mod workloads;

use std::{fmt::Debug, sync::Arc, time::Duration};

use anyhow::Context as _;
use futures::{
    Stream, StreamExt,
    channel::mpsc::{UnboundedSender, unbounded},
    future,
};
use k8s_openapi::NamespaceResourceScope;
use kube::{
    Api, Client, Resource,
    api::{DynamicObject, ListParams},
    core::ApiResource,
    runtime::controller::{self, Action},
};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

pub use behaviour::{MonoVertexBehaviour, PipelineBehaviour};
pub(crate) use turns::in_turn;
pub use util::is_healthy;

/// Knobs of the simulated Numaflow controller.
#[derive(Clone, Debug)]
pub struct SimulatorConfig {
    /// Watch only this namespace; `None` watches the whole cluster.
    pub namespace: Option<String>,
    /// How long a pipeline that ingested data and has healthy vertices takes to drain once its
    /// source pods are gone ("a few seconds" in B.7). Default 2 s.
    pub drain_delay: Duration,
    /// How long a deleted Pipeline stays `Deleting` (after its source pods are gone) before the
    /// simulator removes its finalizer; stands in for Numaflow's drain wait on deletion.
    /// Default 1 s.
    pub deletion_delay: Duration,
    /// Concurrent reconciles per kind, started in the order they fell due (`in_turn`).
    /// Default 8.
    pub concurrency: u16,
    /// How long a simulated controller lets the triggers of one object gather before it
    /// reconciles it (a pod created and made Ready, a vertex status, its own status write),
    /// as Numaflow's work queue merges a burst for one key. Default 200 ms.
    pub debounce: Duration,
}

impl Default for SimulatorConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            drain_delay: Duration::from_secs(2),
            deletion_delay: Duration::from_secs(1),
            concurrency: 8,
            debounce: Duration::from_millis(200),
        }
    }
}

/// Handle to a running simulator. Clones share it; the tasks stop on [`Simulator::shutdown`] or
/// when the last clone is dropped.
///
/// Its tasks run on the Tokio runtime that started it. `#[tokio::test]` gives every test its own
/// runtime, so start one simulator per test, e.g. [`Simulator::start_in_namespace`] on the test's
/// namespace (two simulators must not watch the same namespace).
#[derive(Clone)]
pub struct Simulator {
    inner: Arc<Inner>,
}

struct Inner {
    ctx: Arc<Ctx>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Shared by every simulated controller.
pub(crate) struct Ctx {
    pub(crate) client: Client,
    pub(crate) config: SimulatorConfig,
    pub(crate) state: behaviour::State,
    pub(crate) caches: cache::Caches,
    /// Pod writes the pod cache has yet to show.
    pub(crate) pod_writes: expectations::PodWrites,
    pipeline_trigger: UnboundedSender<()>,
    monovertex_trigger: UnboundedSender<()>,
}

impl Ctx {
    /// A dynamic API over the watched scope (one namespace or all).
    pub(crate) fn dyn_scoped(&self, ar: &ApiResource) -> Api<DynamicObject> {
        dyn_scoped_api(&self.client, self.config.namespace.as_deref(), ar)
    }
}

/// A dynamic API over one namespace, or all with `None`.
pub(crate) fn dyn_scoped_api(
    client: &Client,
    namespace: Option<&str>,
    ar: &ApiResource,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// A typed API over one namespace, or all with `None`.
pub(crate) fn scoped_api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Errors of one reconcile; the controller retries on the next event or after a short delay.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SimError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl SimError {
    fn is_conflict(&self) -> bool {
        matches!(self, SimError::Kube(kube::Error::Api(e)) if e.code == 409)
    }
}

/// Retry policy shared by every simulated controller: a resourceVersion conflict means a newer
/// event is already on its way, so retry soon; anything else backs off a little.
pub(crate) fn error_policy<K>(_obj: Arc<K>, err: &SimError, _ctx: Arc<Ctx>) -> Action {
    if err.is_conflict() {
        return Action::requeue(Duration::from_millis(100));
    }
    // Gone objects and terminating namespaces are routine; anything else is worth seeing.
    match err {
        SimError::Kube(kube::Error::Api(e)) if matches!(e.code, 403 | 404 | 410) => {
            tracing::debug!(error = %err, "simulator reconcile failed")
        }
        _ => tracing::warn!(error = %err, "simulator reconcile failed"),
    }
    Action::requeue(Duration::from_secs(1))
}

/// Drives a controller stream to completion, logging failures.
pub(crate) async fn drive<T, E1, E2>(
    name: &'static str,
    stream: impl Stream<Item = Result<T, controller::Error<E1, E2>>>,
) where
    E1: std::error::Error + 'static,
    E2: std::error::Error + 'static,
{
    stream
        .for_each(|res| {
            if let Err(e) = res {
                tracing::debug!(controller = name, error = %e, "simulator controller error");
            }
            future::ready(())
        })
        .await;
}

/// kube-runtime dispatches every pass at once (no limit of its own); `in_turn` bounds them.
pub(crate) fn controller_config(ctx: &Ctx) -> controller::Config {
    controller::Config::default()
        .concurrency(0)
        .debounce(ctx.config.debounce)
}

impl Simulator {
    /// Starts a cluster-wide simulator with the default [`SimulatorConfig`].
    pub async fn start(client: Client) -> anyhow::Result<Simulator> {
        Self::start_with(client, SimulatorConfig::default()).await
    }

    /// Starts a simulator watching only `namespace` (handy for one simulator per test).
    pub async fn start_in_namespace(client: Client, namespace: &str) -> anyhow::Result<Simulator> {
        let config = SimulatorConfig {
            namespace: Some(namespace.to_owned()),
            ..SimulatorConfig::default()
        };
        Self::start_with(client, config).await
    }

    /// Starts a simulator; fails if the Numaflow CRDs are not installed.
    pub async fn start_with(client: Client, config: SimulatorConfig) -> anyhow::Result<Simulator> {
        for ar in [
            util::pipeline_resource(),
            util::vertex_resource(),
            util::monovertex_resource(),
            util::isbsvc_resource(),
        ] {
            Api::<DynamicObject>::all_with(client.clone(), &ar)
                .list(&ListParams::default().limit(1))
                .await
                .with_context(|| format!("the {} CRD must be installed", ar.kind))?;
        }
        let (caches, mut tasks) =
            cache::Caches::start(&client, config.namespace.as_deref()).await?;
        let (pipeline_trigger, pipeline_rx) = unbounded();
        let (monovertex_trigger, monovertex_rx) = unbounded();
        let ctx = Arc::new(Ctx {
            client,
            config,
            state: behaviour::State::default(),
            caches,
            pod_writes: Default::default(),
            pipeline_trigger,
            monovertex_trigger,
        });
        tasks.extend([
            tokio::spawn(pipeline::run(ctx.clone(), pipeline_rx)),
            tokio::spawn(vertex::run(ctx.clone())),
            tokio::spawn(monovertex::run(ctx.clone(), monovertex_rx)),
            tokio::spawn(isbsvc::run(ctx.clone())),
            tokio::spawn(workloads::run_deployments(ctx.clone())),
            tokio::spawn(workloads::run_statefulsets(ctx.clone())),
        ]);
        Ok(Simulator {
            inner: Arc::new(Inner { ctx, tasks }),
        })
    }

    /// Directs how the Pipeline `namespace/name` behaves from now on (it need not exist yet):
    /// e.g. `PipelineBehaviour::SlowDrain(Duration::from_secs(20))` keeps a pause in Pausing for
    /// 20 s after the sources stop, `NeverDrain` lets only the grace period end a pause
    /// (`drainedOnPause=false`), `FailAfter(d)` turns the pipeline Failed after `d`.
    pub fn set_pipeline_behaviour(
        &self,
        namespace: &str,
        name: &str,
        behaviour: PipelineBehaviour,
    ) {
        self.inner
            .ctx
            .state
            .set_pipeline(namespace, name, behaviour);
        // Re-evaluate now rather than on the pipeline's next event.
        let _ = self.inner.ctx.pipeline_trigger.unbounded_send(());
    }

    /// Directs how the MonoVertex `namespace/name` behaves from now on (it need not exist yet).
    pub fn set_monovertex_behaviour(
        &self,
        namespace: &str,
        name: &str,
        behaviour: MonoVertexBehaviour,
    ) {
        self.inner
            .ctx
            .state
            .set_monovertex(namespace, name, behaviour);
        let _ = self.inner.ctx.monovertex_trigger.unbounded_send(());
    }

    /// The configuration this simulator runs with.
    pub fn config(&self) -> &SimulatorConfig {
        &self.inner.ctx.config
    }

    /// Stops every simulated controller (objects are left as they are).
    pub fn shutdown(&self) {
        for t in &self.inner.tasks {
            t.abort();
        }
    }
}
