//! A real control plane on loopback: etcd, kube-apiserver (RBAC, token authentication, TLS with a
//! CA generated in-process) and kube-controller-manager running only the garbage collector and the
//! namespace controller, with every CRD Numaplane needs installed and Established.
//!
//! Identities (from `--token-auth-file`):
//! - admin: user [`ADMIN_USER`] in group `system:masters`, used by [`TestEnv::client`];
//! - operator: the ServiceAccount `numaplane-system/numaplane-sa` ([`OPERATOR_USER`], groups
//!   `system:serviceaccounts` and `system:serviceaccounts:numaplane-system`), used by
//!   [`TestEnv::operator_client`]. It is granted nothing: RBAC bindings whose subject is that
//!   ServiceAccount (as the shipped manifests have) apply to it unchanged.
//!
//! Clean-up: each process runs in its own process group and its pid is recorded in `DIR/pids`. A
//! watchdog shell started first holds the read end of a pipe whose write end only this process
//! has; when this process ends in any way (normal exit without dropping statics, panic, abort,
//! SIGKILL) the pipe closes, and the watchdog kills every recorded process group and removes the
//! state. Dropping a [`TestEnv`] kills its processes synchronously.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use secrecy::SecretString;
use tokio::sync::OnceCell;
use tracing::{debug, warn};

use crate::binaries::Binaries;
use crate::certs::Pki;
use crate::crds;

/// User name of the admin identity (group `system:masters`).
pub const ADMIN_USER: &str = "testenv-admin";
/// Namespace of the operator's ServiceAccount.
pub const OPERATOR_NAMESPACE: &str = "numaplane-system";
/// Name of the operator's ServiceAccount.
pub const OPERATOR_SERVICE_ACCOUNT: &str = "numaplane-sa";
/// User name the apiserver gives the operator identity.
pub const OPERATOR_USER: &str = "system:serviceaccount:numaplane-system:numaplane-sa";

/// Audit policy used when [`TestEnvOptions::audit_log`] is set and no policy is given: every
/// request at Metadata level, one event per request.
pub const DEFAULT_AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
";

const READY_TIMEOUT: Duration = Duration::from_secs(120);
const ETCD_TIMEOUT: Duration = Duration::from_secs(30);
const CRD_TIMEOUT: Duration = Duration::from_secs(60);
const START_ATTEMPTS: usize = 3;
const LOG_TAIL_LINES: usize = 40;
/// Clean-up scripts the watchdog runs (for what killing process groups does not reach: a real
/// node's containers).
const CLEANUP_DIR: &str = "cleanup.d";

/// Set (to anything) to keep a temporary environment's logs after it stops.
pub const KEEP_LOGS_ENV: &str = "NUMAPLANE_TESTENV_KEEP_LOGS";

/// How to start a [`TestEnv`].
#[derive(Debug, Clone, Default)]
pub struct TestEnvOptions {
    /// Write an apiserver audit log (JSON lines) to this path.
    pub audit_log: Option<PathBuf>,
    /// Audit policy YAML; [`DEFAULT_AUDIT_POLICY`] when `None`.
    pub audit_policy: Option<String>,
    /// Keep state (kubeconfigs, logs, certificates) in this directory instead of a temporary one.
    /// Only etcd's data is removed on shutdown; used by `numaplane-testenv serve`.
    pub dir: Option<PathBuf>,
    /// Also start the real stack ([`crate::realstack`]): kube-scheduler, KWOK with a fake node,
    /// the workload controllers of kube-controller-manager, the real Numaflow controller for
    /// every Numaflow controller Deployment and the daemon stand-in. Not to be combined with the
    /// Numaflow simulator, which plays the same part.
    pub real_stack: bool,
    /// Also start the real analysis path alone ([`crate::realstack::analysis`]): the metrics
    /// stand-in, Prometheus and the Argo Rollouts analysis controller, for the pods the
    /// simulator makes. Implied by `real_stack`.
    pub analysis: bool,
    /// Start without any CustomResourceDefinition: an API server as empty as a new cluster's.
    pub no_crds: bool,
    /// Also start a real node ([`crate::realnode`]): kubelet and containerd running real
    /// containers, tainted and labelled so that only pods asking for it land there. Brings
    /// kube-scheduler and the workload controllers along when `real_stack` does not.
    pub real_node: bool,
}

struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
    /// How it was started, for [`TestEnv::restart`].
    bin: PathBuf,
    args: Vec<String>,
}

/// A running control plane. See the module documentation for identities and clean-up.
pub struct TestEnv {
    dir: PathBuf,
    /// Removed on drop and by the watchdog: the whole temporary dir, or etcd's data in a kept dir.
    scratch: PathBuf,
    apiserver_url: String,
    cluster_url: http::Uri,
    ca_der: Vec<u8>,
    admin_token: String,
    operator_token: String,
    audit_log: Option<PathBuf>,
    /// Behind a lock so that [`TestEnv::restart`] works on the shared environment too; shared
    /// with the supervisor thread ([`supervise`]).
    processes: Arc<std::sync::Mutex<Vec<Process>>>,
    /// Set when the environment stops: the supervisor starts nothing again.
    stopping: Arc<AtomicBool>,
    watchdog: Option<Child>,
    real: Option<crate::realstack::RealStack>,
    analysis: Option<crate::realstack::analysis::AnalysisStack>,
    real_node: Option<crate::realnode::RealNode>,
    /// [`TestEnvOptions::real_node`]: known before the node starts (Prometheus, started
    /// first, scrapes its pods).
    real_node_wanted: bool,
}

static SHARED: OnceCell<std::result::Result<TestEnv, String>> = OnceCell::const_new();
static SHARED_REAL: OnceCell<std::result::Result<TestEnv, String>> = OnceCell::const_new();
static SHARED_DATAPLANE: OnceCell<std::result::Result<TestEnv, String>> = OnceCell::const_new();

impl TestEnv {
    /// Starts a control plane in a fresh temporary directory.
    pub async fn start() -> Result<Self> {
        Self::start_with(TestEnvOptions::default()).await
    }

    /// Starts a control plane. Retries on a loopback port clash (ports are picked free, then
    /// released before the processes bind them, so another process can take one in between).
    pub async fn start_with(opts: TestEnvOptions) -> Result<Self> {
        let bins = Binaries::locate()?;
        let real_bins = if opts.real_stack || opts.analysis {
            Some(crate::binaries::RealStackBinaries::locate()?)
        } else {
            None
        };
        let node_bins = if opts.real_node {
            Some(crate::binaries::RealNodeBinaries::locate()?)
        } else {
            None
        };
        let t0 = Instant::now();
        let mut attempt = 1;
        loop {
            match Self::try_start(&bins, real_bins.as_ref(), node_bins.as_ref(), &opts).await {
                Ok(env) => {
                    debug!(url = %env.apiserver_url, elapsed = ?t0.elapsed(), "control plane ready");
                    return Ok(env);
                }
                Err(e)
                    if attempt < START_ATTEMPTS
                        && format!("{e:#}").contains("address already in use") =>
                {
                    debug!(attempt, "port clash, retrying: {e:#}");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The control plane shared by every test in this test binary, started on first use.
    /// Panics (failing the test loudly) if it cannot start; the failure is remembered, so later
    /// tests fail fast with the same message.
    pub async fn shared() -> &'static TestEnv {
        match Self::try_shared().await {
            Ok(env) => env,
            Err(e) => panic!("{e:#}"),
        }
    }

    /// [`TestEnv::shared`], returning the start-up error instead of panicking.
    ///
    /// Start-up runs on its own runtime in a blocking thread: nothing of the shared environment is
    /// bound to the runtime of the test that happened to start it. Its processes outlive every
    /// test and are reaped by the watchdog when the test binary exits.
    pub async fn try_shared() -> Result<&'static TestEnv> {
        Self::try_shared_in(&SHARED, TestEnvOptions::default()).await
    }

    /// The real stack ([`TestEnvOptions::real_stack`]) shared by every test in this test binary,
    /// started on first use; panics like [`TestEnv::shared`].
    pub async fn shared_real() -> &'static TestEnv {
        let opts = TestEnvOptions {
            real_stack: true,
            ..TestEnvOptions::default()
        };
        match Self::try_shared_in(&SHARED_REAL, opts).await {
            Ok(env) => env,
            Err(e) => panic!("{e:#}"),
        }
    }

    /// A real node with Numaflow's data-plane images in its registry
    /// ([`crate::binaries::DataPlaneImages`]) and the analysis path (Argo Rollouts, Prometheus
    /// scraping the node's pods), shared by every test in this test binary, started on first
    /// use; panics like [`TestEnv::shared`] (missing images included).
    pub async fn shared_dataplane() -> &'static TestEnv {
        let opts = TestEnvOptions {
            real_node: true,
            // Argo Rollouts and Prometheus, which scrapes the node's pods.
            analysis: true,
            ..TestEnvOptions::default()
        };
        let env = match Self::try_shared_in(&SHARED_DATAPLANE, opts).await {
            Ok(env) => env,
            Err(e) => panic!("{e:#}"),
        };
        static PUBLISHED: OnceCell<std::result::Result<(), String>> = OnceCell::const_new();
        let published = PUBLISHED
            .get_or_init(|| async {
                let images =
                    crate::binaries::DataPlaneImages::locate().map_err(|e| format!("{e:#}"))?;
                for archive in &images.archives {
                    env.publish_image(archive).map_err(|e| format!("{e:#}"))?;
                }
                Ok(())
            })
            .await;
        if let Err(e) = published {
            panic!("{e}");
        }
        env
    }

    async fn try_shared_in(
        cell: &'static OnceCell<std::result::Result<TestEnv, String>>,
        opts: TestEnvOptions,
    ) -> Result<&'static TestEnv> {
        let started = cell
            .get_or_init(|| async {
                let joined = tokio::task::spawn_blocking(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .context("building the start-up runtime")?
                        .block_on(TestEnv::start_with(opts))
                })
                .await;
                match joined {
                    Ok(Ok(env)) => Ok(env),
                    Ok(Err(e)) => Err(format!("{e:#}")),
                    Err(e) => Err(format!("start-up thread failed: {e}")),
                }
            })
            .await;
        started
            .as_ref()
            .map_err(|e| anyhow!("the shared test control plane failed to start: {e}"))
    }

    /// A new admin client (`system:masters`). Call it inside the Tokio runtime that uses the
    /// client: a `kube::Client` is bound to the runtime it was created in.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config())
            .expect("client configuration was validated at start-up")
    }

    /// A new client authenticated as the operator's ServiceAccount ([`OPERATOR_USER`]).
    pub fn operator_client(&self) -> kube::Client {
        kube::Client::try_from(self.operator_config())
            .expect("client configuration was validated at start-up")
    }

    /// Admin client configuration.
    pub fn config(&self) -> kube::Config {
        self.config_for(&self.admin_token)
    }

    /// Operator client configuration.
    pub fn operator_config(&self) -> kube::Config {
        self.config_for(&self.operator_token)
    }

    /// Admin kubeconfig (self-contained: CA data and token inline).
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Operator kubeconfig.
    pub fn operator_kubeconfig_path(&self) -> PathBuf {
        self.dir.join("operator.kubeconfig")
    }

    /// A kubeconfig of the admin identity impersonating `user` (kubeconfig `as:`), with
    /// `namespace` as its context's namespace: the API server then applies `user`'s RBAC, as for
    /// a user of a real cluster. Written beside the admin kubeconfig.
    pub fn kubeconfig_as(&self, user: &str, namespace: &str) -> Result<PathBuf> {
        let admin = std::fs::read_to_string(self.kubeconfig_path())
            .with_context(|| format!("reading {}", self.kubeconfig_path().display()))?;
        let token = format!("      token: {}\n", self.admin_token);
        anyhow::ensure!(
            admin.contains(&token) && admin.contains("      namespace: default\n"),
            "the admin kubeconfig does not have the expected shape"
        );
        let text = admin
            .replace(&token, &format!("{token}      as: {user}\n"))
            .replace(
                "      namespace: default\n",
                &format!("      namespace: {namespace}\n"),
            );
        let path = self.dir.join(format!("{user}.kubeconfig"));
        write(&path, &text)?;
        Ok(path)
    }

    /// Lets `user` get, list and watch rollouts, Numaflow objects, AnalysisRuns and Events in
    /// `namespace`, and nothing else (a Role and its RoleBinding named `read-only-<user>`).
    pub async fn grant_read_only(&self, namespace: &str, user: &str) -> Result<()> {
        use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
        let name = format!("read-only-{user}");
        let role: Role = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "rules": [
                {"apiGroups": ["numaplane.numaproj.io", "numaflow.numaproj.io", "argoproj.io"],
                 "resources": ["*"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
                 "verbs": ["get", "list", "watch"]}
            ]
        }))?;
        let binding: RoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
        }))?;
        let pp = PostParams::default();
        Api::<Role>::namespaced(self.client(), namespace)
            .create(&pp, &role)
            .await
            .with_context(|| format!("creating Role {name}"))?;
        Api::<RoleBinding>::namespaced(self.client(), namespace)
            .create(&pp, &binding)
            .await
            .with_context(|| format!("creating RoleBinding {name}"))?;
        Ok(())
    }

    /// `https://127.0.0.1:<port>`.
    pub fn apiserver_url(&self) -> &str {
        &self.apiserver_url
    }

    /// A directory for `what` under the scratch state (removed with it).
    fn scratch_path(&self, what: &str) -> PathBuf {
        if self.scratch == self.dir {
            self.dir.join(what)
        } else {
            self.dir.join(format!("{what}-data"))
        }
    }

    /// The pid of one of the environment's processes (`"prometheus"`, `"kwok"`, ...), for tests
    /// that take a part away (a provider outage).
    pub fn pid_of(&self, name: &str) -> Option<u32> {
        self.procs()
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.child.id())
    }

    /// The real stack's services, when started with [`TestEnvOptions::real_stack`].
    pub fn real(&self) -> Option<&crate::realstack::RealStack> {
        self.real.as_ref()
    }

    /// The real node, when started with [`TestEnvOptions::real_node`].
    pub fn real_node(&self) -> Option<&crate::realnode::RealNode> {
        self.real_node.as_ref()
    }

    /// Imports an OCI image archive into the real node's containerd (see
    /// [`crate::realnode::RealNode::import_image`]); fails without a real node.
    pub fn import_image(&self, archive: &Path) -> Result<()> {
        self.real_node
            .as_ref()
            .ok_or_else(|| anyhow!("no real node: start with TestEnvOptions::real_node"))?
            .import_image(archive)
    }

    /// Pushes an OCI image archive into the real node's registry (see
    /// [`crate::realnode::RealNode::publish_image`]); fails without a real node.
    pub fn publish_image(&self, archive: &Path) -> Result<String> {
        self.real_node
            .as_ref()
            .ok_or_else(|| anyhow!("no real node: start with TestEnvOptions::real_node"))?
            .publish_image(archive)
    }

    /// The analysis path's services, when started with [`TestEnvOptions::analysis`] alone.
    pub fn analysis(&self) -> Option<&crate::realstack::analysis::AnalysisStack> {
        self.analysis.as_ref()
    }

    /// The audit log, when enabled.
    pub fn audit_log_path(&self) -> Option<&Path> {
        self.audit_log.as_deref()
    }

    /// The environment's directory: kubeconfigs, certificates and one log per process.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates a namespace named `<prefix>-<random>` and returns its name. Panics on failure.
    pub async fn create_namespace(&self, prefix: &str) -> String {
        match self.try_create_namespace(prefix).await {
            Ok(name) => name,
            Err(e) => panic!("{e:#}"),
        }
    }

    /// [`TestEnv::create_namespace`] whose pods all go to the real node: annotated for the
    /// `PodNodeSelector` and `PodTolerationRestriction` admission plugins before any pod exists
    /// (docs/real-node.md), so manifests need no change.
    pub async fn create_namespace_on_real_node(&self, prefix: &str) -> String {
        match self
            .create_namespace_with(prefix, crate::realnode::namespace_annotations())
            .await
        {
            Ok(name) => name,
            Err(e) => panic!("{e:#}"),
        }
    }

    /// [`TestEnv::create_namespace`], returning errors.
    pub async fn try_create_namespace(&self, prefix: &str) -> Result<String> {
        self.create_namespace_with(prefix, Default::default()).await
    }

    async fn create_namespace_with(
        &self,
        prefix: &str,
        annotations: std::collections::BTreeMap<String, String>,
    ) -> Result<String> {
        let name = namespace_name(prefix)?;
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                annotations: (!annotations.is_empty()).then_some(annotations),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(name)
    }

    fn config_for(&self, token: &str) -> kube::Config {
        let mut config = kube::Config::new(self.cluster_url.clone());
        config.root_cert = Some(vec![self.ca_der.clone()]);
        config.auth_info.token = Some(SecretString::from(token.to_owned()));
        config
    }

    async fn try_start(
        bins: &Binaries,
        real_bins: Option<&crate::binaries::RealStackBinaries>,
        node_bins: Option<&crate::binaries::RealNodeBinaries>,
        opts: &TestEnvOptions,
    ) -> Result<Self> {
        let (dir, scratch) = match &opts.dir {
            Some(dir) => {
                fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                let dir = dir
                    .canonicalize()
                    .with_context(|| format!("resolving {}", dir.display()))?;
                let scratch = dir.join("etcd-data");
                remove_if_exists(&scratch)?;
                (dir, scratch)
            }
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("numaplane-testenv-")
                    .tempdir()
                    .context("creating the environment's temporary directory")?
                    .keep();
                if std::env::var_os(KEEP_LOGS_ENV).is_some() {
                    // A failure of a long run (chaos, fuzz) is explained by the control plane's
                    // own logs; keep them and drop only etcd's data.
                    eprintln!("numaplane-testenv: logs kept in {}", dir.display());
                    (dir.clone(), dir.join("etcd-data"))
                } else {
                    (dir.clone(), dir)
                }
            }
        };
        let pids = dir.join("pids");
        File::create(&pids).with_context(|| format!("creating {}", pids.display()))?;
        let watchdog = spawn_watchdog(&pids, &scratch)?;
        fs::create_dir_all(dir.join(CLEANUP_DIR))?;

        let [etcd_port, etcd_peer_port, api_port] = free_ports()?;
        let apiserver_url = format!("https://127.0.0.1:{api_port}");
        let pki = Pki::generate()?;
        // Drop cleans up from here on, including after a failed start.
        let mut env = TestEnv {
            cluster_url: apiserver_url
                .parse()
                .with_context(|| format!("parsing {apiserver_url}"))?,
            apiserver_url,
            dir,
            scratch,
            ca_der: pki.ca_cert_der.clone(),
            admin_token: random_token()?,
            operator_token: random_token()?,
            audit_log: opts.audit_log.clone(),
            processes: Default::default(),
            stopping: Default::default(),
            watchdog: Some(watchdog),
            real: None,
            analysis: None,
            real_node: None,
            real_node_wanted: opts.real_node,
        };
        debug!(dir = %env.dir.display(), "starting control plane");
        env.write_files(&pki, opts)?;

        env.spawn(
            "etcd",
            &bins.etcd,
            &env.etcd_args(etcd_port, etcd_peer_port),
        )?;
        env.wait_for_port("etcd", etcd_port).await?;
        debug!("etcd listening");

        env.spawn(
            "kube-apiserver",
            &bins.kube_apiserver,
            &env.apiserver_args(etcd_port, api_port, opts.real_node),
        )?;
        env.wait_for_readyz().await?;
        debug!("kube-apiserver ready");

        env.spawn(
            "kube-controller-manager",
            &bins.kube_controller_manager,
            &env.controller_manager_args(opts.real_stack || opts.real_node, opts.real_node),
        )?;

        if !opts.no_crds {
            let all = crds::all()?;
            crds::install(&env.client(), &all, CRD_TIMEOUT)
                .await
                .map_err(|e| env.with_logs(e))?;
            debug!(count = all.len(), "CRDs established");
        }
        // A controller manager that rejected its flags has exited by now.
        env.check_alive()?;
        match real_bins {
            Some(rb) if opts.real_stack => env.start_real_stack(rb, &pki).await?,
            Some(rb) => env.start_analysis(rb).await?,
            None => {}
        }
        if let Some(nb) = node_bins {
            env.start_real_node(nb, &pki, !opts.real_stack).await?;
        }
        supervise(&env.dir, &env.processes, &env.stopping);
        Ok(env)
    }

    /// The real node, with kube-scheduler when the real stack has not started one.
    async fn start_real_node(
        &mut self,
        nb: &crate::binaries::RealNodeBinaries,
        pki: &Pki,
        scheduler: bool,
    ) -> Result<()> {
        if scheduler {
            let bin = crate::binaries::kube_scheduler()?;
            let state = crate::realstack::state_dir(&self.dir);
            fs::create_dir_all(&state)?;
            let sched_cfg = state.join("scheduler.yaml");
            write(
                &sched_cfg,
                &crate::realstack::scheduler_config(&self.kubeconfig_path()),
            )?;
            self.spawn(
                "kube-scheduler",
                &bin,
                &[
                    format!("--config={}", sched_cfg.display()),
                    "--secure-port=0".into(),
                ],
            )?;
        }
        let node = crate::realnode::RealNode::start(
            &self.client(),
            crate::realnode::NodeInputs {
                bins: nb,
                dir: &if self.scratch == self.dir {
                    self.dir.join("realnode")
                } else {
                    self.dir.join(crate::realnode::KEPT_DIR)
                },
                pids: &self.dir.join("pids"),
                cleanup_dir: &self.dir.join(CLEANUP_DIR),
                apiserver_port: self.cluster_url.port_u16().unwrap_or(443),
                ca_pem: &pki.ca_cert_pem,
                token: &self.admin_token,
            },
        )
        .await
        .map_err(|e| self.with_logs(e))?;
        crate::realnode::default_storage_class(&self.client()).await?;
        self.real_node = Some(node);
        Ok(())
    }

    async fn start_real_stack(
        &mut self,
        rb: &crate::binaries::RealStackBinaries,
        pki: &Pki,
    ) -> Result<()> {
        use crate::realstack;
        let state = realstack::state_dir(&self.dir);
        fs::create_dir_all(&state)?;
        let sched_cfg = state.join("scheduler.yaml");
        write(
            &sched_cfg,
            &realstack::scheduler_config(&self.kubeconfig_path()),
        )?;
        self.spawn(
            "kube-scheduler",
            &rb.kube_scheduler,
            &[
                format!("--config={}", sched_cfg.display()),
                "--secure-port=0".into(),
            ],
        )?;
        let stages = state.join("kwok-stages.yaml");
        write(&stages, realstack::KWOK_STAGES)?;
        self.spawn(
            "kwok",
            &rb.kwok,
            &[
                format!("--kubeconfig={}", self.kubeconfig_path().display()),
                "--manage-nodes-with-label-selector=type=kwok".into(),
                format!("--config={}", stages.display()),
                // Its HTTP server (logs, metrics) is not needed; a free port avoids clashes.
                "--server-address=127.0.0.1:0".into(),
                "--node-lease-duration-seconds=40".into(),
            ],
        )?;
        let client = self.client();
        realstack::create_node(&client).await?;
        realstack::wait_for_node(&client, Duration::from_secs(60))
            .await
            .map_err(|e| self.with_logs(e))?;
        self.check_alive()?;
        let port = self.cluster_url.port_u16().unwrap_or(443);
        let stack = realstack::RealStack::start(realstack::StackInputs {
            bins: rb,
            client_config: self.config(),
            dir: &state,
            pids: &self.dir.join("pids"),
            apiserver_port: port,
            ca_pem: &pki.ca_cert_pem,
            serving_cert_pem: &pki.serving_cert_pem,
            serving_key_pem: &pki.serving_key_pem,
        })
        .await?;
        let controller = self
            .start_analysis_services(rb, &state, stack.metrics().addr())
            .await?;
        let mut stack = stack;
        stack.attach_analysis(controller);
        self.real = Some(stack);
        debug!("real stack ready");
        Ok(())
    }

    /// Prometheus on the host, scraping the metrics stand-in at `metrics`, and the Argo
    /// Rollouts analysis controller reaching it; returns the controller's pod.
    async fn start_analysis_services(
        &mut self,
        rb: &crate::binaries::RealStackBinaries,
        state: &Path,
        metrics: std::net::SocketAddr,
    ) -> Result<crate::netns::Pod> {
        let [prom_port] = free_ports()?;
        let prom_cfg = state.join("prometheus.yaml");
        let kubeconfig = self.kubeconfig_path();
        // With a real node, its pods are scraped as well (the stand-in covers KWOK's).
        let pods = self.real_node_wanted.then_some(kubeconfig.as_path());
        write(
            &prom_cfg,
            &crate::realstack::prometheus_config(metrics, pods),
        )?;
        self.spawn(
            "prometheus",
            &rb.prometheus,
            &[
                format!("--config.file={}", prom_cfg.display()),
                format!(
                    "--storage.tsdb.path={}",
                    self.scratch_path("prometheus").display()
                ),
                format!("--web.listen-address=127.0.0.1:{prom_port}"),
                "--log.level=warn".into(),
            ],
        )?;
        self.wait_for_port("prometheus", prom_port).await?;
        crate::realstack::analysis::start_controller(
            &crate::realstack::analysis::ControllerInputs {
                program: &rb.rollouts_controller,
                dir: state,
                pids: &self.dir.join("pids"),
                kubeconfig: &self.kubeconfig_path(),
                apiserver_port: self.cluster_url.port_u16().unwrap_or(443),
                prometheus: ([127, 0, 0, 1], prom_port).into(),
            },
        )
    }

    /// Starts the analysis path alone ([`TestEnvOptions::analysis`]) on a running environment
    /// without the real stack (which has its own): for a benchmark that wants it only for its
    /// last scenario.
    pub async fn start_analysis_path(&mut self) -> Result<()> {
        if self.real.is_some() || self.analysis.is_some() {
            bail!("the analysis path is already running");
        }
        let rb = crate::binaries::RealStackBinaries::locate()?;
        self.start_analysis(&rb).await
    }

    /// The analysis path alone ([`TestEnvOptions::analysis`]).
    async fn start_analysis(&mut self, rb: &crate::binaries::RealStackBinaries) -> Result<()> {
        use crate::realstack::{self, analysis};
        let state = realstack::state_dir(&self.dir);
        fs::create_dir_all(&state)?;
        let mut stack = analysis::AnalysisStack::start(self.config()).await?;
        let controller = self
            .start_analysis_services(rb, &state, stack.metrics().addr())
            .await?;
        stack.attach_controller(controller);
        self.analysis = Some(stack);
        debug!("analysis path ready");
        Ok(())
    }

    fn write_files(&self, pki: &Pki, opts: &TestEnvOptions) -> Result<()> {
        let pki_dir = self.dir.join("pki");
        fs::create_dir_all(&pki_dir)?;
        for (name, contents) in [
            ("ca.crt", &pki.ca_cert_pem),
            ("apiserver.crt", &pki.serving_cert_pem),
            ("apiserver.key", &pki.serving_key_pem),
            ("sa.key", &pki.sa_key_pem),
            ("sa.pub", &pki.sa_pub_pem),
        ] {
            write(&pki_dir.join(name), contents)?;
        }
        // token,user,uid,"groups"
        let tokens = format!(
            "{},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n\
             {},{OPERATOR_USER},{OPERATOR_USER},\"system:serviceaccounts,system:serviceaccounts:{OPERATOR_NAMESPACE}\"\n",
            self.admin_token, self.operator_token
        );
        write(&self.dir.join("tokens.csv"), &tokens)?;
        if let Some(log) = &self.audit_log {
            let policy = opts.audit_policy.as_deref().unwrap_or(DEFAULT_AUDIT_POLICY);
            write(&self.dir.join("audit-policy.yaml"), policy)?;
            if let Some(parent) = log.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent)?;
            }
        }
        let ca = base64::engine::general_purpose::STANDARD.encode(pki.ca_cert_pem.as_bytes());
        write(
            &self.kubeconfig_path(),
            &kubeconfig(&self.apiserver_url, &ca, "admin", &self.admin_token),
        )?;
        write(
            &self.operator_kubeconfig_path(),
            &kubeconfig(&self.apiserver_url, &ca, "operator", &self.operator_token),
        )?;
        Ok(())
    }

    fn etcd_args(&self, port: u16, peer_port: u16) -> Vec<String> {
        let client = format!("http://127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        vec![
            "--name=testenv".into(),
            format!("--data-dir={}", self.dir.join("etcd-data").display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=testenv={peer}"),
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ]
    }

    fn apiserver_args(&self, etcd_port: u16, port: u16, real_node: bool) -> Vec<String> {
        let pki = self.dir.join("pki");
        let p = |f: &str| pki.join(f).display().to_string();
        let mut args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            format!("--secure-port={port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--cert-dir={}", pki.display()),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            // Room for a daemon Service per pipeline at benchmark sizes (a /24 ran out at 250).
            format!("--service-cluster-ip-range={}", crate::certs::SERVICE_CIDR),
            format!("--service-account-issuer={}", self.apiserver_url),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            format!(
                "--token-auth-file={}",
                self.dir.join("tokens.csv").display()
            ),
            "--authorization-mode=RBAC".into(),
            "--allow-privileged=true".into(),
            "--enable-priority-and-fairness=false".into(),
            // A loopback advertise address cannot be an Endpoints address; nothing needs it.
            "--endpoint-reconciler-type=none".into(),
            // A real node's kubelet (logs, exec) is reached at its address: its host name
            // resolves nowhere.
            "--kubelet-preferred-address-types=InternalIP".into(),
        ];
        if real_node {
            // Pods that run get their ServiceAccount's token, as in any cluster; a namespace can
            // send its pods to the real node (`scheduler.alpha.kubernetes.io/node-selector` and
            // `.../defaultTolerations` annotations) without any change to their manifests.
            args.push("--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction".into());
        } else {
            // KWOK's pods run nothing: no token to mount, and no ServiceAccount controller is
            // needed to create each namespace's `default` account first.
            args.push("--disable-admission-plugins=ServiceAccount".into());
        }
        if let Some(log) = &self.audit_log {
            let policy = self.dir.join("audit-policy.yaml");
            args.push(format!("--audit-policy-file={}", policy.display()));
            args.push(format!("--audit-log-path={}", log.display()));
            // Events are written before the response is sent, so a test can read them at once.
            args.push("--audit-log-mode=blocking".into());
            // Never rotated (0 means lumberjack's 100 MB): the benchmark reads one file, and at
            // N=10,000 a cold start alone writes more than that.
            args.push("--audit-log-maxsize=1000000".into());
        }
        args
    }

    fn controller_manager_args(&self, real_stack: bool, real_node: bool) -> Vec<String> {
        let mut controllers = if real_stack {
            crate::realstack::CONTROLLERS.replace(char::is_whitespace, "")
        } else {
            "garbagecollector,namespace".into()
        };
        let mut args = vec![
            format!("--kubeconfig={}", self.kubeconfig_path().display()),
            "--use-service-account-credentials=false".into(),
            "--leader-elect=false".into(),
            // No HTTPS endpoint at all: nothing scrapes it, and no port can clash.
            "--secure-port=0".into(),
        ];
        if real_node {
            // What a running pod's token volume needs: its namespace's accounts and the
            // `kube-root-ca.crt` ConfigMap with the API server's CA.
            controllers
                .push_str(",serviceaccount-controller,root-ca-certificate-publisher-controller");
            // Volumes for the real node's pods (a JetStream ISB service's claims): Kubernetes'
            // own host-path provisioner behind the default StorageClass `start_real_node` makes.
            controllers.push_str(
                ",persistentvolume-binder-controller,persistentvolume-protection-controller",
            );
            args.push("--enable-hostpath-provisioner=true".into());
            args.push(format!(
                "--root-ca-file={}",
                self.dir.join("pki").join("ca.crt").display()
            ));
        }
        args.push(format!("--controllers={controllers}"));
        args
    }

    fn spawn(&mut self, name: &'static str, bin: &Path, args: &[String]) -> Result<()> {
        let p = self.launch(name, bin, args, false)?;
        self.procs().push(p);
        Ok(())
    }

    /// Starts one process ([`launch`]) in this environment's directory.
    fn launch(
        &self,
        name: &'static str,
        bin: &Path,
        args: &[String],
        append: bool,
    ) -> Result<Process> {
        launch(&self.dir, name, bin, args, append)
    }

    fn procs(&self) -> std::sync::MutexGuard<'_, Vec<Process>> {
        // A panic while holding the lock leaves the list itself intact.
        self.processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Kills process `name` (`"etcd"`, `"kube-apiserver"`, ...) with SIGKILL, leaves it down for
    /// `down`, starts it again with the same arguments and state (etcd keeps its data) and waits
    /// until it serves again: a crash and restart of one part of the control plane, for fault
    /// injection. Clients see refused connections, then the same server on the same port.
    pub async fn restart(&self, name: &str, down: Duration) -> Result<()> {
        let (pname, bin, args) = {
            let mut procs = self.procs();
            let p = procs
                .iter_mut()
                .find(|p| p.name == name)
                .ok_or_else(|| anyhow!("no process {name} in this environment"))?;
            let _ = p.child.kill();
            let _ = p.child.wait();
            (p.name, p.bin.clone(), p.args.clone())
        };
        tokio::time::sleep(down).await;
        let fresh = self.launch(pname, &bin, &args, true)?;
        if let Some(p) = self.procs().iter_mut().find(|p| p.name == name) {
            *p = fresh;
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if self.serving(name, &args).await {
                return Ok(());
            }
            if let Some(p) = self.procs().iter_mut().find(|p| p.name == name)
                && let Ok(Some(status)) = p.child.try_wait()
            {
                bail!(
                    "{name} exited ({status}) after a restart; last lines of {}:\n{}",
                    p.log.display(),
                    tail(&p.log, LOG_TAIL_LINES)
                );
            }
            if Instant::now() > deadline {
                bail!("{name} not serving within {READY_TIMEOUT:?} of a restart");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether a restarted process answers: the API server's `/readyz`, etcd's client port,
    /// anything else by being alive.
    async fn serving(&self, name: &str, args: &[String]) -> bool {
        match name {
            "kube-apiserver" => {
                let Ok(client) = kube::Client::try_from(self.config()) else {
                    return false;
                };
                let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
                    return false;
                };
                client.request_text(request).await.is_ok()
            }
            "etcd" => args
                .iter()
                .find_map(|a| a.strip_prefix("--listen-client-urls=http://"))
                .and_then(|addr| addr.parse::<SocketAddr>().ok())
                .is_some_and(|addr| {
                    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                }),
            _ => true,
        }
    }

    /// Fails, with the process's log tail, if any process has exited.
    fn check_alive(&mut self) -> Result<()> {
        for p in self.procs().iter_mut() {
            if let Some(status) = p.child.try_wait()? {
                bail!(
                    "{} exited ({status}) during start-up; last lines of {}:\n{}",
                    p.name,
                    p.log.display(),
                    tail(&p.log, LOG_TAIL_LINES)
                );
            }
        }
        Ok(())
    }

    /// Appends an exited process's log, or else the apiserver's, to a start-up error.
    fn with_logs(&mut self, e: anyhow::Error) -> anyhow::Error {
        if let Err(dead) = self.check_alive() {
            return anyhow!("{e:#}\n{dead:#}");
        }
        let procs = self.procs();
        match procs.iter().find(|p| p.name == "kube-apiserver") {
            Some(p) => anyhow!(
                "{e:#}\nlast lines of {}:\n{}",
                p.log.display(),
                tail(&p.log, LOG_TAIL_LINES)
            ),
            None => e,
        }
    }

    async fn wait_for_port(&mut self, name: &str, port: u16) -> Result<()> {
        let deadline = Instant::now() + ETCD_TIMEOUT;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            self.check_alive()?;
            if Instant::now() > deadline {
                let e = anyhow!("{name} did not listen on {addr} within {ETCD_TIMEOUT:?}");
                return Err(self.with_logs(e));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn wait_for_readyz(&mut self) -> Result<()> {
        let client = kube::Client::try_from(self.config()).context("building the admin client")?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let request = http::Request::get("/readyz").body(Vec::new())?;
            let last = match client.request_text(request).await {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            self.check_alive()?;
            if Instant::now() > deadline {
                let e = anyhow!(last).context(format!(
                    "kube-apiserver not ready within {READY_TIMEOUT:?} at {}/readyz",
                    self.apiserver_url
                ));
                return Err(self.with_logs(e));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        // The real node and the real stack's pods first: they talk to the apiserver.
        self.real_node = None;
        self.real = None;
        self.analysis = None;
        // Reverse start order: the controller manager and apiserver go before etcd.
        for p in self.procs().iter_mut().rev() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        // Everything is stopped; the watchdog has nothing left to do.
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        let _ = fs::remove_dir_all(&self.scratch);
        let _ = fs::remove_file(self.dir.join("pids"));
    }
}

/// Starts one process in its own process group and records its pid for the watchdog; a
/// restart appends to the log instead of truncating it.
fn launch(
    dir: &Path,
    name: &'static str,
    bin: &Path,
    args: &[String],
    append: bool,
) -> Result<Process> {
    let log = dir.join(format!("{name}.log"));
    let out = OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(&log)
        .with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    let child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Own process group: the watchdog kills the group, and Ctrl-C on the terminal
        // reaches only the test process, whose exit then triggers the watchdog.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = child.id();
    let pids = dir.join("pids");
    let recorded = OpenOptions::new()
        .append(true)
        .open(&pids)
        .and_then(|mut f| writeln!(f, "{pid}"));
    let p = Process {
        name,
        child,
        log,
        bin: bin.to_path_buf(),
        args: args.to_vec(),
    };
    recorded.with_context(|| format!("recording pid {pid} in {}", pids.display()))?;
    debug!(name, pid, "started");
    Ok(p)
}

/// Processes started again when they exit, as a kubelet restarts a static pod: kube-scheduler
/// exits on purpose when it finds its cache corrupted (a pod it placed seen on another node,
/// after an etcd restart), expecting its supervisor to start it again; until then no pod is
/// placed. etcd and kube-apiserver are left to [`TestEnv::restart`] (a fault test keeps them
/// down for a while), Prometheus to the tests that take it away.
const RESTARTED_WHEN_EXITED: [&str; 3] = ["kube-scheduler", "kube-controller-manager", "kwok"];

/// Watches the environment's processes from a thread of its own and starts again any of
/// [`RESTARTED_WHEN_EXITED`] that exited, its log appended to, until the environment stops.
fn supervise(
    dir: &Path,
    processes: &Arc<std::sync::Mutex<Vec<Process>>>,
    stopping: &Arc<AtomicBool>,
) {
    let (dir, processes, stopping) = (
        dir.to_path_buf(),
        Arc::downgrade(processes),
        stopping.clone(),
    );
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let Some(processes) = processes.upgrade() else {
                return;
            };
            let mut procs = processes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if stopping.load(Ordering::Relaxed) {
                return;
            }
            for p in procs
                .iter_mut()
                .filter(|p| RESTARTED_WHEN_EXITED.contains(&p.name))
            {
                let Ok(Some(status)) = p.child.try_wait() else {
                    continue;
                };
                warn!(name = p.name, %status, log = %p.log.display(), "exited; starting it again");
                match launch(&dir, p.name, &p.bin, &p.args, true) {
                    Ok(fresh) => *p = fresh,
                    Err(e) => warn!(name = p.name, "starting it again: {e:#}"),
                }
            }
        }
    });
}

/// Starts the watchdog (see the module documentation). The returned child's stdin is the pipe
/// the watchdog waits on: keep the `Child` alive for as long as the processes should run.
fn spawn_watchdog(pids: &Path, remove: &Path) -> Result<Child> {
    // `kill -s SIG -- -PGID` is the form both dash and bash accept for a process group.
    const SCRIPT: &str = r#"cat >/dev/null
for p in $(cat "$1" 2>/dev/null); do kill -s KILL -- "-$p" 2>/dev/null; done
for p in $(cat "$1" 2>/dev/null); do
  n=0
  while kill -s 0 -- "-$p" 2>/dev/null && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n+1)); done
done
for c in "${1%/*}"/cleanup.d/*.sh; do [ -f "$c" ] && sh "$c"; done
rm -rf "$2"
"#;
    Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("numaplane-testenv-watchdog")
        .arg(pids)
        .arg(remove)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Survives the terminal's Ctrl-C, which is exactly when it is needed.
        .process_group(0)
        .spawn()
        .context("starting the clean-up watchdog (sh)")
}

/// `N` distinct free loopback ports: all listeners are held until every port is chosen.
fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free loopback ports")?;
    let mut ports = [0; N];
    for (port, l) in ports.iter_mut().zip(&listeners) {
        *port = l.local_addr()?.port();
    }
    Ok(ports)
}

pub(crate) fn kubeconfig(server: &str, ca_data: &str, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
  - name: numaplane-testenv
    cluster:
      server: {server}
      certificate-authority-data: {ca_data}
users:
  - name: {user}
    user:
      token: {token}
contexts:
  - name: numaplane-testenv
    context:
      cluster: numaplane-testenv
      user: {user}
      namespace: default
current-context: numaplane-testenv
"
    )
}

/// `<prefix>-<6 random chars>`, a valid namespace name whatever the prefix.
fn namespace_name(prefix: &str) -> Result<String> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut base: String = prefix
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .take(50)
        .collect();
    base = base.trim_matches('-').to_string();
    if base.is_empty() {
        base.push_str("test");
    }
    let suffix: String = random_bytes::<6>()?
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect();
    Ok(format!("{base}-{suffix}"))
}

fn random_token() -> Result<String> {
    Ok(random_bytes::<24>()?
        .iter()
        .fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        }))
}

/// OS randomness, without a dependency for the few bytes the harness needs.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    use std::io::Read as _;
    let mut buf = [0; N];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .context("reading /dev/urandom")?;
    Ok(buf)
}

fn write(path: &Path, contents: &str) -> Result<()> {
    fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// The last `n` lines of a log file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_are_valid_and_unique() {
        let name = |p: &str| namespace_name(p).expect("name");
        let (a, b) = (name("My_Test::case"), name("My_Test::case"));
        assert_ne!(a, b);
        assert!(a.starts_with("my-test--case-"), "{a}");
        assert_eq!(a.len(), "my-test--case-".len() + 6);
        assert!(name("--").starts_with("test-"));
        assert!(name(&"x".repeat(100)).len() <= 63);
    }

    #[test]
    fn free_ports_are_distinct() {
        let [a, b, c] = free_ports().expect("ports");
        assert!(a != b && b != c && a != c);
    }
}
