//! The real test world beyond the control plane (docs/architecture.md): kube-scheduler, KWOK with a
//! fake node (pods without containers), the controllers of kube-controller-manager that turn
//! Deployments, StatefulSets and Jobs into pods, and the real Numaflow controller for every
//! Numaflow controller Deployment ([`numaflow`]). Stand-ins only for what a container would
//! have done: the pipeline daemon's answers ([`daemon`]).
//!
//! Started by [`crate::TestEnv`] when [`crate::TestEnvOptions::real_stack`] is set; the services
//! run on a runtime of their own, so no test's runtime owns them.

pub mod analysis;
pub mod daemon;
pub mod metrics;
pub mod numaflow;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use crate::binaries::RealStackBinaries;
pub use daemon::DaemonStandIn;
pub use metrics::MetricsStandIn;

/// The in-cluster Prometheus address of the reference samples' AnalysisTemplates; inside the
/// Argo Rollouts controller's network namespace it reaches the test environment's Prometheus.
pub const PROMETHEUS_HOST: &str =
    "prometheus-kube-prometheus-prometheus.prometheus.svc.cluster.local";
pub const PROMETHEUS_PORT: u16 = 9090;

/// Prometheus scraping the metrics stand-in every second (`honor_labels`: the series' own
/// `namespace` label is kept, as a pod's would be with the usual relabelling) and, with
/// `pods_kubeconfig`, the real node's vertex and MonoVertex pods as a cluster's Prometheus
/// finds them: Kubernetes discovery, Numaflow's metrics port 2469 over TLS, the pod's
/// namespace as `namespace` (the host routes the pods' subnet through the node).
pub fn prometheus_config(metrics: std::net::SocketAddr, pods_kubeconfig: Option<&Path>) -> String {
    let mut cfg = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: numaflow
    honor_labels: true
    static_configs:
      - targets: [\"{metrics}\"]
"
    );
    if let Some(kubeconfig) = pods_kubeconfig {
        cfg.push_str(&format!(
            "  - job_name: numaflow-pods
    scheme: https
    tls_config: {{insecure_skip_verify: true}}
    kubernetes_sd_configs:
      - role: pod
        kubeconfig_file: {}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_labelpresent_numaflow_numaproj_io_vertex_name, __meta_kubernetes_pod_labelpresent_numaflow_numaproj_io_mono_vertex_name]
        regex: '.*true.*'
        action: keep
      - source_labels: [__meta_kubernetes_pod_phase]
        regex: Running
        action: keep
      - source_labels: [__meta_kubernetes_pod_ip]
        regex: '(.+)'
        replacement: '${{1}}:2469'
        target_label: __address__
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
",
            kubeconfig.display()
        ));
    }
    cfg
}

/// The fake node's name (KWOK manages nodes labelled `type=kwok`).
pub const NODE_NAME: &str = "kwok-node-0";

/// kube-controller-manager's controllers under the real stack: garbage collection and namespace
/// deletion as always, plus what turns workloads into pods and keeps the node's taints right
/// (without `nodelifecycle` the new node's not-ready taint never goes), and PVC protection:
/// the API server puts its finalizer on every claim, and without the controller a deleted
/// claim never goes, so an ISB service recreated under the same name never gets its pods
/// (its StatefulSet waits for a claim "being deleted").
pub const CONTROLLERS: &str = "garbagecollector,namespace,deployment,replicaset,statefulset,job,\
                               endpointslice,disruption,nodelifecycle,\
                               persistentvolumeclaim-protection-controller";

/// KWOK's stages (ours): nodes ready, pods ready, deleted, completed, or failing as directed by
/// their image.
pub const KWOK_STAGES: &str = include_str!("../../kwok/stages.yaml");

/// Scheduler configuration: PersistentVolumeClaims are never bound here (no provisioner), so the
/// volume plugins are off and pods with claims (ISB service StatefulSets with persistence) are
/// scheduled anyway.
pub fn scheduler_config(kubeconfig: &Path) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {{kubeconfig: {}, qps: 200, burst: 400}}
leaderElection: {{leaderElect: false}}
profiles:
  - schedulerName: default-scheduler
    plugins:
      multiPoint:
        disabled:
          - {{name: VolumeBinding}}
          - {{name: VolumeRestrictions}}
          - {{name: VolumeZone}}
          - {{name: NodeVolumeLimits}}
",
        kubeconfig.display()
    )
}

/// The running services of the real stack.
pub struct RealStack {
    runtime: Option<tokio::runtime::Runtime>,
    daemon: DaemonStandIn,
    metrics: MetricsStandIn,
    started: numaflow::StartLog,
    /// The Argo Rollouts controller (analysis only), once started.
    analysis: Option<crate::netns::Pod>,
}

/// What [`RealStack::start`] needs from the control plane.
pub struct StackInputs<'a> {
    pub bins: &'a RealStackBinaries,
    pub client_config: kube::Config,
    pub dir: &'a Path,
    pub pids: &'a Path,
    pub apiserver_port: u16,
    pub ca_pem: &'a str,
    pub serving_cert_pem: &'a str,
    pub serving_key_pem: &'a str,
}

impl RealStack {
    /// Starts the daemon stand-in and the Numaflow controller runner on a runtime of their own.
    pub async fn start(inputs: StackInputs<'_>) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("testenv-realstack")
            .enable_all()
            .build()
            .context("building the real stack's runtime")?;
        let (cert, key) = (
            inputs.serving_cert_pem.to_string(),
            inputs.serving_key_pem.to_string(),
        );
        let pods_config = inputs.client_config.clone();
        let (daemon, metrics) = runtime
            .spawn(async move {
                // One watch of Numaflow's pods, for both stand-ins.
                let client = Client::try_from(pods_config).context("stand-in client")?;
                let pods = analysis::watch_pods(client.clone());
                // And of the pipelines, for the daemon's view of their vertices.
                let (pipelines, writer) =
                    kube::runtime::reflector::store::<numaplane_api::numaflow::Pipeline>();
                let watch = kube::runtime::reflector::reflector(
                    writer,
                    kube::runtime::watcher(
                        Api::all(client.clone()),
                        kube::runtime::watcher::Config::default(),
                    ),
                );
                tokio::spawn(
                    kube::runtime::WatchStreamExt::default_backoff(watch)
                        .for_each(|_| futures::future::ready(())),
                );
                let daemon = DaemonStandIn::start(&cert, &key, pods.clone(), pipelines).await?;
                let metrics = MetricsStandIn::start(pods).await?;
                anyhow::Ok((daemon, metrics))
            })
            .await
            .context("stand-in task")??;
        let cfg = numaflow::RunnerConfig {
            bins: inputs.bins.clone(),
            dir: inputs.dir.join("numaflow"),
            pids: inputs.pids.to_path_buf(),
            apiserver_port: inputs.apiserver_port,
            ca_pem: inputs.ca_pem.to_string(),
            daemon: daemon.addr(),
            started: numaflow::StartLog::default(),
        };
        let started = cfg.started.clone();
        let client_config = inputs.client_config;
        runtime
            .spawn(async move {
                let client = Client::try_from(client_config).context("runner client")?;
                tokio::spawn(numaflow::run(client, cfg));
                anyhow::Ok(())
            })
            .await
            .context("runner task")??;
        Ok(Self {
            runtime: Some(runtime),
            daemon,
            metrics,
            started,
            analysis: None,
        })
    }

    /// Keeps the Argo Rollouts analysis controller ([`analysis::start_controller`]) running
    /// as long as the stack.
    pub fn attach_analysis(&mut self, controller: crate::netns::Pod) {
        self.analysis = Some(controller);
    }

    /// The metrics stand-in Prometheus scrapes.
    pub fn metrics(&self) -> &MetricsStandIn {
        &self.metrics
    }

    /// The Numaflow controller processes started in `namespace` so far, in start order.
    pub fn numaflow_controllers(&self, namespace: &str) -> Vec<numaflow::Started> {
        self.started
            .lock()
            .map(|l| {
                l.iter()
                    .filter(|s| s.namespace == namespace)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The pipeline daemon stand-in (drained unless told otherwise).
    pub fn daemon(&self) -> &DaemonStandIn {
        &self.daemon
    }
}

impl Drop for RealStack {
    fn drop(&mut self) {
        // Also safe inside an async context (a blocking shutdown would panic there); the
        // controllers' pods are killed when the runner's tasks are dropped.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Creates (or keeps) the fake node KWOK manages.
pub async fn create_node(client: &Client) -> Result<()> {
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {"type": "kwok", "kubernetes.io/hostname": NODE_NAME},
            "annotations": {"kwok.x-k8s.io/node": "fake"}
        }
    }))?;
    Api::<Node>::all(client.clone())
        .patch(
            NODE_NAME,
            &PatchParams::apply(crate::crds::FIELD_MANAGER).force(),
            &Patch::Apply(&node),
        )
        .await
        .context("creating the KWOK node")?;
    Ok(())
}

/// Waits until the node is Ready and has no taints (kube-controller-manager's node lifecycle
/// controller removes the not-ready taint once KWOK reports it ready).
pub async fn wait_for_node(client: &Client, timeout: std::time::Duration) -> Result<()> {
    let api = Api::<Node>::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let node = api.get_opt(NODE_NAME).await?;
        let ready = node.as_ref().is_some_and(|n| {
            let st = n.status.as_ref();
            let ready = st
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let untainted = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_none_or(|t| t.is_empty());
            ready && untainted
        });
        if ready {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("node {NODE_NAME} not Ready and untainted within {timeout:?}: {node:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Directory for the real stack's state under the environment's.
pub fn state_dir(env_dir: &Path) -> PathBuf {
    env_dir.join("realstack")
}
