//! Shared set-up of the controller's integration tests: a namespace on the shared real stack (the
//! control plane, KWOK, the real Numaflow and Argo Rollouts controllers, Prometheus), a Numaflow
//! controller rendered there by a NumaflowControllerRollout, and a Numaplane operator scoped to
//! it, running with its own identity and the ClusterRole from `config/rbac`.

#![allow(dead_code)]

pub mod analysis;
pub mod dataplane;
pub mod fixtures;
pub mod install;
pub mod invariants;
pub mod scenario;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use numaplane::{Operator, OperatorOptions};
use numaplane_testenv::TestEnv;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::OnceCell;

pub const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(200);

pub struct Harness {
    pub env: &'static TestEnv,
    pub client: Client,
    pub ns: String,
    /// `None` while stopped (see [`Harness::restart_operator`]).
    pub operator: Option<Operator>,
    pub config_file: PathBuf,
    /// The operator's metrics registry (kept across restarts).
    pub metrics: std::sync::Arc<numaplane::metrics::Metrics>,
    own_namespace: bool,
    /// The namespace's history, for [`Harness::assert_invariants`].
    pub history: invariants::Recorder,
    /// The fault proxy the operator talks through, once [`Harness::through_proxy`] set one.
    pub proxy: Option<numaplane_testenv::faults::FaultProxy>,
    _dir: tempfile::TempDir,
}

/// The controller config used by tests: no-strategy, riders of the reference e2e config.
pub const TEST_CONFIG: &str = r#"
logLevel: DEBUG
defaultUpgradeStrategy: "no-strategy"
permittedRiders: "group=autoscaling.k8s.io,kind=VerticalPodAutoscaler;group=,kind=ConfigMap;group=autoscaling,kind=HorizontalPodAutoscaler;group=policy,kind=PodDisruptionBudget"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,30,5,1"
    - kind: MonoVertex
      schedule: "0,30,5,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

/// A path in the repository.
pub fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Grants the operator identity the shipped ClusterRole and leader-election Role, exactly as
/// `config/rbac` does.
pub async fn install_rbac(client: &Client) {
    static DONE: OnceCell<()> = OnceCell::const_new();
    DONE.get_or_init(|| async {
        let pp = PatchParams::apply("numaplane-tests").force();
        // The operator's own namespace (its Events about configuration land there).
        let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "numaplane-system"}
        }))
        .expect("namespace");
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .patch("numaplane-system", &pp, &Patch::Apply(&ns))
            .await
            .expect("apply namespace numaplane-system");
        let role: ClusterRole = serde_saphyr::from_str(
            &std::fs::read_to_string(repo("config/rbac/role.yaml")).expect("role.yaml"),
        )
        .expect("parse role.yaml");
        Api::<ClusterRole>::all(client.clone())
            .patch(
                &role.metadata.name.clone().expect("name"),
                &pp,
                &Patch::Apply(&role),
            )
            .await
            .expect("apply ClusterRole");
        let binding: ClusterRoleBinding = serde_saphyr::from_str(
            &std::fs::read_to_string(repo("config/rbac/role_binding.yaml")).expect("role_binding"),
        )
        .expect("parse role_binding.yaml");
        Api::<ClusterRoleBinding>::all(client.clone())
            .patch(
                &binding.metadata.name.clone().expect("name"),
                &pp,
                &Patch::Apply(&binding),
            )
            .await
            .expect("apply ClusterRoleBinding");
        let role: k8s_openapi::api::rbac::v1::Role = serde_saphyr::from_str(
            &std::fs::read_to_string(repo("config/rbac/leader_election_role.yaml")).expect("role"),
        )
        .expect("parse leader_election_role.yaml");
        Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), "numaplane-system")
            .patch(
                &role.metadata.name.clone().expect("name"),
                &pp,
                &Patch::Apply(&role),
            )
            .await
            .expect("apply leader election Role");
        let rb: k8s_openapi::api::rbac::v1::RoleBinding = serde_saphyr::from_str(
            &std::fs::read_to_string(repo("config/rbac/leader_election_role_binding.yaml"))
                .expect("rolebinding"),
        )
        .expect("parse leader_election_role_binding.yaml");
        Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(
            client.clone(),
            "numaplane-system",
        )
        .patch(
            &rb.metadata.name.clone().expect("name"),
            &pp,
            &Patch::Apply(&rb),
        )
        .await
        .expect("apply leader election RoleBinding");
    })
    .await;
}

/// Name of the shipped USDE ConfigMap (`config/manager/usde-config.yaml`).
pub const USDE_NAME: &str = "numaplane-controller-usde-config";

impl Harness {
    /// An operator whose own namespace is the test namespace, with the shipped USDE ConfigMap
    /// (`config/manager/usde-config.yaml`) installed there, and Numaflow controller 1.8.1.
    pub async fn start_real(prefix: &str, config: &str) -> Harness {
        Self::start_real_on(prefix, config, "1.8.1").await
    }

    /// The operator in `numaplane-system` (as installed, with the shipped USDE ConfigMap), and
    /// Numaflow controller 1.8.1.
    pub async fn start_real_with_config(prefix: &str, config: &str) -> Harness {
        let mut h = Self::start_full(prefix, config, false, true).await;
        h.install_numaflow_controller("1.8.1").await;
        h
    }

    /// [`Harness::start_real`] with Numaflow controller `version` installed.
    pub async fn start_real_on(prefix: &str, config: &str, version: &str) -> Harness {
        let mut h = Self::start_full(prefix, config, true, true).await;
        h.install_numaflow_controller(version).await;
        h
    }

    /// [`Harness::start_real`] without any USDE ConfigMap: the operator has never loaded one.
    pub async fn start_real_without_usde(prefix: &str, config: &str) -> Harness {
        let mut h = Self::start_full(prefix, config, true, false).await;
        h.install_numaflow_controller("1.8.1").await;
        h
    }

    /// Deletes the USDE ConfigMap of an operator whose own namespace is the test namespace.
    pub async fn delete_usde(&self) {
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(self.client.clone(), &self.ns)
            .delete(USDE_NAME, &Default::default())
            .await
            .expect("delete USDE ConfigMap");
    }

    /// The real stack's daemon stand-in.
    pub fn daemon(&self) -> &numaplane_testenv::realstack::DaemonStandIn {
        self.env
            .real()
            .expect("the shared real stack has a daemon stand-in")
            .daemon()
    }

    /// An operator whose own namespace is the test namespace, on the real node with Numaflow's
    /// data plane (`TestEnv::shared_dataplane`): every pod of the namespace runs there, the
    /// Numaflow controller 1.8.1 included.
    pub async fn start_dataplane(prefix: &str, config: &str) -> Harness {
        Self::start_dataplane_on(prefix, config, "1.8.1").await
    }

    /// [`Harness::start_dataplane`] with Numaflow controller `version`.
    pub async fn start_dataplane_on(prefix: &str, config: &str, version: &str) -> Harness {
        let env = TestEnv::shared_dataplane().await;
        let ns = env.create_namespace_on_real_node(prefix).await;
        let _ = dataplane::SCENARIO_NAMESPACES.try_with(|spaces| {
            if let Ok(mut spaces) = spaces.lock() {
                spaces.push(ns.clone());
            }
        });
        let mut h = Self::start_in(env, ns, config, true, true).await;
        h.install_numaflow_controller(version).await;
        h
    }

    async fn start_full(prefix: &str, config: &str, own_namespace: bool, usde: bool) -> Harness {
        let env = TestEnv::shared_real().await;
        let ns = env.create_namespace(prefix).await;
        Self::start_in(env, ns, config, own_namespace, usde).await
    }

    async fn start_in(
        env: &'static TestEnv,
        ns: String,
        config: &str,
        own_namespace: bool,
        usde: bool,
    ) -> Harness {
        let client = env.client();
        install_rbac(&client).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let config_file = dir.path().join("config.yaml");
        std::fs::write(&config_file, config).expect("write config");
        if usde {
            // In the test namespace for an operator of its own; in `numaplane-system` as
            // `install.yaml` ships it (shared by the tests there: created once).
            let at = if own_namespace {
                ns.clone()
            } else {
                "numaplane-system".to_string()
            };
            let mut usde: k8s_openapi::api::core::v1::ConfigMap = serde_saphyr::from_str(
                &std::fs::read_to_string(repo("config/manager/usde-config.yaml")).expect("usde"),
            )
            .expect("parse usde-config.yaml");
            usde.metadata.namespace = Some(at.clone());
            match Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &at)
                .create(&Default::default(), &usde)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("create USDE ConfigMap: {e}"),
            }
        }
        let mut history = invariants::Recorder::start(&client, &ns).await;
        history.follow_config_file(&config_file);
        let mut h = Harness {
            env,
            client,
            history,
            ns,
            operator: None,
            config_file,
            metrics: Default::default(),
            own_namespace,
            proxy: None,
            _dir: dir,
        };
        h.start_operator().await;
        h
    }

    /// Restarts the operator talking to the API server through a fault proxy, its faults off
    /// (a test freezes a watch or owes a fault itself).
    pub async fn through_proxy(&mut self) {
        let proxy = numaplane_testenv::faults::FaultProxy::start(
            self.env.operator_config(),
            numaplane_testenv::faults::Rates::default(),
            1,
        )
        .await
        .expect("fault proxy");
        self.stop_operator().await;
        self.proxy = Some(proxy);
        self.start_operator().await;
    }

    async fn install_numaflow_controller(&mut self, version: &str) {
        let operator_ns = if self.own_namespace {
            self.ns.clone()
        } else {
            "numaplane-system".to_string()
        };
        install_numaflow(&self.client, &operator_ns, &self.ns, version).await;
    }

    async fn start_operator(&mut self) {
        // Requests counted as the binary counts them (`numaplane_kube_requests_total`).
        let config = match &self.proxy {
            Some(p) => kube::Config::new(
                format!("http://{}", p.addr())
                    .parse()
                    .expect("the proxy's address"),
            ),
            None => self.env.operator_config(),
        };
        let client = kube::client::ClientBuilder::try_from(config)
            .expect("operator client")
            .with_layer(&numaplane::api_metrics::RequestMetricsLayer::new(
                self.metrics.clone(),
            ))
            .build();
        let operator = Operator::start(
            client,
            OperatorOptions {
                config_file: self.config_file.clone(),
                operator_namespace: if self.own_namespace {
                    self.ns.clone()
                } else {
                    "numaplane-system".into()
                },
                workers: 4,
                instance: Some(format!("test-{}", self.ns)),
                watch_namespace: Some(self.ns.clone()),
                metrics: self.metrics.clone(),
                leadership: None,
                fence: None,
            },
        )
        .await
        .expect("start operator");
        self.operator = Some(operator);
    }

    /// The namespace's Events regarding object `name`.
    pub async fn events_about(&self, name: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(self.client.clone(), &self.ns)
            .list(&Default::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect()
    }

    /// Asserts that no upgrade invariant was broken in the namespace so far (see
    /// [`invariants`]).
    pub async fn assert_invariants(&self) {
        self.history.assert_held(&self.client, &self.ns).await;
    }

    /// Stops the operator (in-flight reconciles finish; nothing of it stays in memory).
    pub async fn stop_operator(&mut self) {
        if let Some(op) = self.operator.take() {
            op.shutdown().await;
        }
    }

    /// Starts a fresh operator after [`Harness::stop_operator`]: empty caches, state only
    /// from the cluster.
    pub async fn restart_operator(&mut self) {
        self.stop_operator().await;
        self.start_operator().await;
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Server-side applies a JSON manifest (namespace filled in) as the test user.
    pub async fn apply<K>(&self, mut manifest: serde_json::Value) -> K
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned
            + serde::Serialize,
    {
        manifest["metadata"]["namespace"] = self.ns.clone().into();
        let name = manifest["metadata"]["name"]
            .as_str()
            .expect("manifest name")
            .to_string();
        self.api::<K>()
            .patch(
                &name,
                &PatchParams::apply("test-user").force(),
                &Patch::Apply(&manifest),
            )
            .await
            .unwrap_or_else(|e| panic!("applying {name}: {e}"))
    }

    /// The names, sorted, of the objects of kind `K` in the namespace that are not being
    /// deleted and whose `numaplane.numaproj.io/upgrade-state` label passes `state`.
    pub async fn live_names<K>(&self, state: impl Fn(Option<&str>) -> bool) -> Vec<String>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
    {
        let mut names: Vec<String> = self
            .api::<K>()
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .iter()
            .filter(|o| o.meta().deletion_timestamp.is_none())
            .filter(|o| {
                state(
                    o.meta()
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("numaplane.numaproj.io/upgrade-state"))
                        .map(String::as_str),
                )
            })
            .filter_map(|o| o.meta().name.clone())
            .collect();
        names.sort();
        names
    }

    /// Merge-patches an object as the test user.
    pub async fn merge<K>(&self, name: &str, patch: serde_json::Value) -> K
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
    {
        self.api::<K>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("patching {name}: {e}"))
    }

    /// Waits until `check` returns `Some` for the object (or its absence).
    pub async fn until<K, T, F>(&self, what: &str, name: &str, check: F) -> T
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
        F: FnMut(Option<&K>) -> Option<T>,
    {
        self.until_within(WAIT, what, name, check).await
    }

    /// [`Harness::until`] with a bound of its own (real pods start slower than KWOK's).
    pub async fn until_within<K, T, F>(
        &self,
        bound: Duration,
        what: &str,
        name: &str,
        mut check: F,
    ) -> T
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
        F: FnMut(Option<&K>) -> Option<T>,
    {
        let api = self.api::<K>();
        let mut last = None;
        let res = tokio::time::timeout(bound, async {
            loop {
                let obj = api.get_opt(name).await.ok().flatten();
                if let Some(v) = check(obj.as_ref()) {
                    return v;
                }
                last = obj.map(|o| format!("{o:?}"));
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        match res {
            Ok(v) => v,
            Err(_) => panic!(
                "timed out after {bound:?} waiting for {what} ({name}); last seen: {}",
                last.unwrap_or_else(|| "nothing".into())
            ),
        }
    }

    /// Asserts `check` holds for the object during `period`.
    pub async fn stays<K, F>(&self, what: &str, name: &str, period: Duration, mut check: F)
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
        F: FnMut(Option<&K>) -> bool,
    {
        let api = self.api::<K>();
        let end = tokio::time::Instant::now() + period;
        while tokio::time::Instant::now() < end {
            let obj = api.get_opt(name).await.expect("get");
            assert!(
                check(obj.as_ref()),
                "{what} ({name}) stopped holding: {obj:?}"
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

/// On the real stack a namespace runs Numaflow only once a NumaflowControllerRollout renders
/// the controller there, as on a real cluster: the definitions of every built version in the
/// operator's namespace, and a NumaflowControllerRollout of `version` in `ns` (a test may change
/// it later), waited for until its Deployment is available. A Numaplane operator watching `ns`
/// must be running.
pub async fn install_numaflow(client: &Client, operator_ns: &str, ns: &str, version: &str) {
    let ssa = PatchParams::apply("test-user").force();
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), operator_ns);
    for v in ["1.7.5", "1.8.1"] {
        let mut cm = fixtures::definitions(v);
        cm["metadata"]["namespace"] = operator_ns.into();
        let name = cm["metadata"]["name"].as_str().expect("name").to_string();
        cms.patch(&name, &ssa, &Patch::Apply(&cm))
            .await
            .expect("definitions ConfigMap");
    }
    let mut ncr = fixtures::nc_rollout(version);
    ncr["metadata"]["namespace"] = ns.into();
    Api::<numaplane_api::NumaflowControllerRollout>::namespaced(client.clone(), ns)
        .patch("numaflow-controller", &ssa, &Patch::Apply(&ncr))
        .await
        .expect("NumaflowControllerRollout");
    let deployments = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), ns);
    eventually("the Numaflow controller Deployment available", || async {
        let d = deployments
            .get_opt("numaflow-controller")
            .await
            .ok()
            .flatten()?;
        (d.status?.available_replicas == Some(1)).then_some(())
    })
    .await;
}

/// The holder of the operator's lease `numaplane-controller-lock`, if anyone holds it.
pub async fn lease_holder(
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
) -> Option<String> {
    leases
        .get_opt("numaplane-controller-lock")
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Labels the pipeline of PipelineRollout `pr` `after: failover` and waits until its child
/// `pr-0` carries it (whoever leads by then must apply it).
pub async fn label_after_failover(client: &Client, ns: &str, what: &str) {
    use numaplane_api::PipelineRollout;
    use numaplane_api::numaflow::Pipeline;
    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), ns);
    let pipelines: Api<Pipeline> = Api::namespaced(client.clone(), ns);
    let mut pr = prs.get("pr").await.expect("pr");
    pr.spec.pipeline.metadata = Some(
        serde_json::from_value(serde_json::json!({"labels": {"after": "failover"}})).expect("meta"),
    );
    pr.metadata.managed_fields = None;
    prs.replace("pr", &Default::default(), &pr)
        .await
        .expect("label pr");
    eventually(what, || async {
        let p = pipelines.get("pr-0").await.ok()?;
        let labels = p.metadata.labels?;
        (labels.get("after").map(String::as_str) == Some("failover")).then_some(())
    })
    .await;
}

/// A controller binary running as a child process (killed when dropped).
pub struct Process {
    pub child: std::process::Child,
    pub health: u16,
    pub metrics: u16,
    pub log: PathBuf,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Process {
    /// Starts `numaplane` with the operator identity, scoped to `ns`.
    pub fn start(
        env: &TestEnv,
        ns: &str,
        config: &Path,
        dir: &Path,
        name: &str,
        extra: &[&str],
    ) -> Process {
        let mut args = vec!["--watch-namespace", ns];
        args.extend_from_slice(extra);
        Self::start_with(&env.operator_kubeconfig_path(), config, dir, name, &args)
    }

    /// Starts `numaplane` with `kubeconfig` (the log in `dir/name.log`), in `numaplane-system`.
    pub fn start_with(
        kubeconfig: &Path,
        config: &Path,
        dir: &Path,
        name: &str,
        extra: &[&str],
    ) -> Process {
        let (health, metrics) = (free_port(), free_port());
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_numaplane"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--config-file")
            .arg(config)
            .args(["--namespace", "numaplane-system"])
            .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
            .args(extra)
            .env("POD_NAME", name)
            .env_remove("KUBECONFIG")
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start numaplane");
        Process {
            child,
            health,
            metrics,
            log,
        }
    }

    /// Status code of GET `path` on the probe port (None when not listening).
    pub async fn probe(&self, path: &str) -> Option<u16> {
        http_get(self.health, path).await.map(|(code, _)| code)
    }

    pub async fn metrics_text(&self) -> String {
        http_get(self.metrics, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    pub fn signal(&self, sig: &str) {
        let _ = std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.0 GET on loopback (no client crate needed for two endpoints).
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// Sample lines of an exposition for a metric name: (labels, value).
pub fn samples(text: &str, name: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}').to_string()),
                None => (series, String::new()),
            };
            (n == name).then(|| (labels, value.parse().unwrap_or(f64::NAN)))
        })
        .collect()
}

/// Polls an async check until it returns `Some`.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(WAIT, what, check).await
}

/// [`eventually`] with a bound of its own.
pub async fn eventually_within<T, F, Fut>(bound: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    tokio::time::timeout(bound, async {
        loop {
            if let Some(v) = check().await {
                return v;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out after {bound:?} waiting for {what}"))
}

/// A condition of a status, as (status, reason, message).
pub fn condition(
    conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<(String, String, String)> {
    conds
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}
