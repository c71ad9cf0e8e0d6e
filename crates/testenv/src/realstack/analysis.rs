//! The real analysis path on its own, for a world whose pods something else makes (the
//! simulator): the metrics stand-in counting Numaflow's Ready pods, scraped by a real
//! Prometheus, and the Argo Rollouts controller (only its analysis controller) judging
//! AnalysisRuns with real PromQL. Started by [`crate::TestEnv`] when
//! [`crate::TestEnvOptions::analysis`] is set; the real stack starts the same parts itself.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;

use super::{MetricsStandIn, PROMETHEUS_HOST, PROMETHEUS_PORT};

/// The label every Numaflow pod carries (the real controller's and the simulator's).
pub(crate) const NUMAFLOW_PODS: &str = "app.kubernetes.io/part-of=numaflow";

/// A watch of Numaflow's pods, kept in a store, on the current runtime.
pub(crate) fn watch_pods(client: Client) -> kube::runtime::reflector::Store<Pod> {
    let (pods, writer) = kube::runtime::reflector::store::<Pod>();
    let watch = kube::runtime::reflector::reflector(
        writer,
        kube::runtime::watcher(
            Api::<Pod>::all(client),
            kube::runtime::watcher::Config::default().labels(NUMAFLOW_PODS),
        ),
    );
    tokio::spawn(
        kube::runtime::WatchStreamExt::default_backoff(watch)
            .for_each(|_| futures::future::ready(())),
    );
    pods
}

/// Where the Argo Rollouts controller runs and what it reaches.
pub struct ControllerInputs<'a> {
    pub program: &'a Path,
    /// Its state directory (logs) and the environment's pid file.
    pub dir: &'a Path,
    pub pids: &'a Path,
    pub kubeconfig: &'a Path,
    pub apiserver_port: u16,
    pub prometheus: std::net::SocketAddr,
}

/// Starts the Argo Rollouts controller with only its analysis controller, in a network
/// namespace where the samples' Prometheus address reaches `prometheus` and the API server is
/// forwarded.
pub fn start_controller(inputs: &ControllerInputs<'_>) -> Result<crate::netns::Pod> {
    let spec = crate::netns::PodSpec {
        program: PathBuf::from(inputs.program),
        args: vec![
            format!("--kubeconfig={}", inputs.kubeconfig.display()),
            "--controllers=analysis".into(),
            "--leader-elect=false".into(),
            "--loglevel=info".into(),
        ],
        env: Vec::new(),
        mounts: Vec::new(),
        hosts: vec![
            PROMETHEUS_HOST.to_string(),
            "prometheus-kube-prometheus-prometheus.prometheus.svc".to_string(),
        ],
        forwards: vec![
            crate::netns::Forward::local(
                inputs.apiserver_port,
                ([127, 0, 0, 1], inputs.apiserver_port),
            ),
            crate::netns::Forward::local(PROMETHEUS_PORT, inputs.prometheus),
        ],
    };
    crate::netns::Pod::start(inputs.dir, inputs.pids, "rollouts-controller", &spec)
}

/// The metrics stand-in on a runtime of its own, and the analysis controller once started.
pub struct AnalysisStack {
    runtime: Option<tokio::runtime::Runtime>,
    metrics: MetricsStandIn,
    controller: Option<crate::netns::Pod>,
}

impl AnalysisStack {
    /// Starts the metrics stand-in, counting the pods `client_config` can see.
    pub async fn start(client_config: kube::Config) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("testenv-analysis")
            .enable_all()
            .build()
            .context("building the analysis stack's runtime")?;
        let metrics = runtime
            .spawn(async move {
                let client = Client::try_from(client_config).context("stand-in client")?;
                MetricsStandIn::start(watch_pods(client)).await
            })
            .await
            .context("stand-in task")??;
        Ok(Self {
            runtime: Some(runtime),
            metrics,
            controller: None,
        })
    }

    /// Keeps the Argo Rollouts analysis controller ([`start_controller`]) running as long as
    /// the stack.
    pub fn attach_controller(&mut self, controller: crate::netns::Pod) {
        self.controller = Some(controller);
    }

    /// The metrics stand-in Prometheus scrapes.
    pub fn metrics(&self) -> &MetricsStandIn {
        &self.metrics
    }
}

impl Drop for AnalysisStack {
    fn drop(&mut self) {
        self.controller = None;
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
