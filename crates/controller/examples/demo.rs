//! `make demo`: the reference getting-started story on a laptop, without a cluster.
//!
//! It starts the real stack on loopback (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler, KWOK, the real Numaflow controller the NumaflowControllerRollout renders, the
//! real Argo Rollouts analysis controller and Prometheus, with the daemon and metrics stand-ins)
//! and Numaplane (progressive by default, with assessment schedules of seconds; the rollouts are
//! judged by the AnalysisTemplates of config/samples/analysis-templates.yaml, unchanged, given
//! arguments of seconds), then
//! walks the reference samples through:
//! install, a successful progressive upgrade, a failed one and its rollback, a fix that
//! force-drains the failed pipeline, an ISB service upgrade carrying its pipeline along, a
//! MonoVertex upgrade and a pause-and-drain upgrade. Each step waits (bounded) for its expected
//! state and prints the `kubectl numaplane get` tree; a step that does not get there fails the
//! demo with a non-zero exit. Everything is torn down at the end (`--keep` waits for Ctrl-C first).
//!
//! `demo dev-up --dir DIR` / `demo dev-down --dir DIR` (`make dev-up` / `make dev-down`) instead
//! leave the real stack and the `numaplane` binary running in the
//! background.

use anyhow::{Context, bail};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use numaplane::{Operator, OperatorOptions};
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowController, NumaflowControllerRollout,
    PipelineRollout,
};
use numaplane_testenv::{TestEnv, TestEnvOptions};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NS: &str = "example-namespace";
const OPERATOR_NS: &str = "numaplane-system";
/// Longest wait for one expected state: generous for a loaded CI machine, a few seconds usually.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// The shipped config with progressive as the default and schedules of seconds
/// (`delay,end,period,interval`): a trial must be healthy for 3 s, and fails if it is not
/// within 12 s.
const CONFIG: &str = r#"
logLevel: INFO
defaultUpgradeStrategy: "progressive"
permittedRiders: "group=autoscaling.k8s.io,kind=VerticalPodAutoscaler;group=autoscaling,kind=HorizontalPodAutoscaler;group=policy,kind=PodDisruptionBudget;group=,kind=ConfigMap"
includedResources: "group=apps,kind=Deployment;group=,kind=ConfigMap;group=,kind=ServiceAccount;group=,kind=Secret;group=,kind=Service;group=rbac.authorization.k8s.io,kind=RoleBinding;group=rbac.authorization.k8s.io,kind=Role"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,12,3,1"
    - kind: MonoVertex
      schedule: "0,12,3,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

const PR_SAMPLE: &str = "config/samples/numaplane.numaproj.io_v1alpha1_pipelinerollout.yaml";
const MVR_SAMPLE: &str = "config/samples/numaplane.numaproj.io_v1alpha1_monovertexrollout.yaml";
const ISBR_SAMPLE: &str = "config/samples/numaplane.numaproj.io_v1alpha1_isbservicerollout.yaml";
const NCR_SAMPLE: &str =
    "config/samples/numaplane.numaproj.io_v1alpha1_numaflowcontrollerrollout.yaml";
const NS_CONFIG_SAMPLE: &str = "config/samples/namespace-level-config.yaml";
/// The AnalysisTemplates Numaplane ships for Numaflow's real metric names: the samples'
/// templates query names no Numaflow pod exports (docs/compatibility.md), so the demo's rollouts
/// are judged by these.
const SHIPPED_TEMPLATES: &str = "config/samples/analysis-templates.yaml";

const CAT_V1: &str = "quay.io/numaio/numaflow-go/map-cat:v1";
/// An unpullable tag: KWOK reports its pods in ImagePullBackOff.
const CAT_BAD: &str = "quay.io/numaio/numaflow-go/map-cat:badpath1";
const CAT_V2: &str = "quay.io/numaio/numaflow-go/map-cat:v2";
const CAT_V3: &str = "quay.io/numaio/numaflow-go/map-cat:v3";
const SINK_V1: &str = "quay.io/numaio/numaflow-go/sink-log:v1";
const ISB_NEXT: &str = "2.10.11";

const PARENT: &str = "numaplane.numaproj.io/parent-rollout-name";
const STATE: &str = "numaplane.numaproj.io/upgrade-state";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// The documents of a YAML file (empty documents skipped).
fn docs(rel: &str) -> anyhow::Result<Vec<Value>> {
    let path = repo(rel);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).with_context(|| format!("parsing {rel}"))?;
    Ok(docs.into_iter().filter(|d| d.is_object()).collect())
}

/// The Numaplane object of a sample file (its AnalysisTemplates are applied separately). A
/// rollout with analysis is judged by the shipped template for its kind instead of the sample's
/// (which queries metric names no Numaflow pod exports; one rollout cannot name both, their
/// `interval` defaults differ) and passes it arguments of seconds (a measurement a second, three
/// successes in a row), as a user shortening them would; the templates stay unchanged.
fn rollout_sample(rel: &str) -> anyhow::Result<Value> {
    let mut r = docs(rel)?
        .into_iter()
        .find(|d| d["apiVersion"] == numaplane_api::API_VERSION)
        .with_context(|| format!("no Numaplane object in {rel}"))?;
    let shipped = match r["kind"].as_str() {
        Some("PipelineRollout") => Some("pipeline-acknowledges-what-it-reads"),
        Some("MonoVertexRollout") => Some("monovertex-acknowledges-what-it-reads"),
        _ => None,
    };
    if let (Some(shipped), true) = (shipped, r["spec"]["strategy"]["analysis"].is_object()) {
        r["spec"]["strategy"]["analysis"]["templates"] = json!([{"templateName": shipped}]);
    }
    if r["spec"]["strategy"]["analysis"].is_object() {
        r["spec"]["strategy"]["analysis"]["args"] = json!([
            {"name": "interval", "value": "1s"},
            {"name": "success-limit", "value": "3"}
        ]);
    }
    Ok(r)
}

/// The documents of a sample file that are not its Numaplane object.
fn sample_extras(rel: &str) -> anyhow::Result<Vec<Value>> {
    Ok(docs(rel)?
        .into_iter()
        .filter(|d| d["apiVersion"] != numaplane_api::API_VERSION)
        .collect())
}

/// The directory of this executable's sibling binaries (`target/<profile>`; examples live one
/// level down in `examples/`).
fn bin_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the demo executable")?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .context("the demo executable has no parent directory")
}

fn sibling_binary(name: &str, package: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir()?.join(name);
    anyhow::ensure!(
        path.exists(),
        "{} not found: build it first with `cargo build -p {package}` (the Makefile targets do)",
        path.display()
    );
    Ok(path)
}

// ---- Cluster access --------------------------------------------------------------------------

struct Cluster {
    client: Client,
    kubeconfig: PathBuf,
    cli: PathBuf,
    /// `kubectl numaplane dashboard`, running for the whole demo.
    dashboard: Option<Dashboard>,
}

/// `kubectl numaplane dashboard` as a child process (killed when dropped).
struct Dashboard {
    child: std::process::Child,
    /// The address it printed, with this run's token.
    url: String,
    port: u16,
    token: String,
}

impl Dashboard {
    /// Starts it on 127.0.0.1:3100, its default, or on a free port when that one is taken.
    fn start(cli: &Path, kubeconfig: &Path) -> anyhow::Result<Dashboard> {
        let port = if std::net::TcpListener::bind(("127.0.0.1", 3100)).is_ok() {
            "3100"
        } else {
            "0"
        };
        let mut child = Command::new(cli)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["dashboard", "--port", port])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {} dashboard", cli.display()))?;
        let stdout = child.stdout.take().context("dashboard stdout")?;
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        let first = lines
            .next()
            .transpose()?
            .context("the dashboard exited before printing its address")?;
        // Keep reading so the dashboard never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let url = first
            .strip_prefix("Numaplane dashboard: ")
            .with_context(|| format!("unexpected first line of the dashboard: {first:?}"))?
            .to_string();
        let (port, token) = url
            .strip_prefix("http://127.0.0.1:")
            .and_then(|rest| rest.split_once("/?token="))
            .and_then(|(port, token)| Some((port.parse().ok()?, token.to_string())))
            .with_context(|| format!("no port and token in {url}"))?;
        Ok(Dashboard {
            child,
            url,
            port,
            token,
        })
    }

    /// The dashboard's table, as a browser gets it.
    fn rows(&self) -> anyhow::Result<Vec<Value>> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            s,
            "GET /api/rollouts HTTP/1.0\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\n\r\n",
            self.port, self.token
        )?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .context("the dashboard's answer has no body")?;
        anyhow::ensure!(head.contains(" 200 "), "the dashboard answered {head}");
        let table: Value = serde_json::from_str(body).context("the dashboard's table")?;
        Ok(table["rows"].as_array().cloned().unwrap_or_default())
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the checks of a step look at: every object of the demo namespace that the story is
/// about, listed together at one moment.
#[derive(Default)]
struct Snapshot {
    objects: Vec<(&'static str, Value)>,
}

fn resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// The kinds a snapshot lists (Events for the drain reasons the controller reports).
fn watched() -> Vec<(&'static str, ApiResource)> {
    vec![
        ("PipelineRollout", resource::<PipelineRollout>()),
        ("MonoVertexRollout", resource::<MonoVertexRollout>()),
        ("ISBServiceRollout", resource::<ISBServiceRollout>()),
        (
            "NumaflowControllerRollout",
            resource::<NumaflowControllerRollout>(),
        ),
        ("NumaflowController", resource::<NumaflowController>()),
        ("Pipeline", resource::<Pipeline>()),
        ("MonoVertex", resource::<MonoVertex>()),
        (
            "InterStepBufferService",
            resource::<InterStepBufferService>(),
        ),
        ("Event", resource::<k8s_openapi::api::events::v1::Event>()),
    ]
}

impl Snapshot {
    fn all<'a, 'k>(&'a self, kind: &'k str) -> impl Iterator<Item = &'a Value> + use<'a, 'k> {
        self.objects
            .iter()
            .filter(move |(k, _)| *k == kind)
            .map(|(_, v)| v)
    }

    fn get<'a>(&'a self, kind: &str, name: &str) -> Option<&'a Value> {
        self.all(kind).find(|o| o["metadata"]["name"] == name)
    }

    /// The child of `rollout` in upgrade state `state` (`promoted`, `trial`, ...).
    fn child<'a>(&'a self, kind: &str, rollout: &str, state: &str) -> Option<&'a Value> {
        self.all(kind).find(|o| {
            let labels = &o["metadata"]["labels"];
            labels[PARENT] == rollout && labels[STATE] == state
        })
    }

    /// The rollout exists, its generation is observed, it is Deployed with healthy children and
    /// no upgrade in progress.
    fn settled(&self, kind: &str, name: &str) -> bool {
        self.get(kind, name).is_some_and(|r| {
            let st = &r["status"];
            st["phase"] == "Deployed"
                && st["observedGeneration"] == r["metadata"]["generation"]
                && st["upgradeInProgress"]
                    .as_str()
                    .unwrap_or_default()
                    .is_empty()
                && condition(r, "ChildResourcesHealthy").is_some_and(|c| c["status"] == "True")
        })
    }

    fn has_event(&self, regarding: &str, reason: &str) -> bool {
        self.all("Event")
            .any(|e| e["regarding"]["name"] == regarding && e["reason"] == reason)
    }
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn phase(obj: &Value) -> &str {
    obj["status"]["phase"].as_str().unwrap_or_default()
}

fn cat_image(pipeline: &Value) -> &str {
    vertex(pipeline, "cat")["udf"]["container"]["image"]
        .as_str()
        .unwrap_or_default()
}

fn vertex<'a>(pipeline: &'a Value, vertex: &str) -> &'a Value {
    pipeline["spec"]["vertices"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == vertex))
        .unwrap_or(&Value::Null)
}

impl Cluster {
    async fn connect(kubeconfig: &Path) -> anyhow::Result<Client> {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig)
            .with_context(|| format!("reading {}", kubeconfig.display()))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// Server-side applies any manifest (namespaced objects without a namespace go to the
    /// demo namespace), finding its resource through discovery.
    async fn apply(&self, doc: &Value) -> anyhow::Result<()> {
        apply(&self.client, doc).await
    }

    async fn apply_file(&self, rel: &str) -> anyhow::Result<()> {
        for d in docs(rel)? {
            self.apply(&d).await?;
        }
        Ok(())
    }

    async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let mut snap = Snapshot::default();
        for (kind, ar) in watched() {
            let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), NS, &ar);
            for o in api.list(&ListParams::default()).await? {
                snap.objects.push((kind, serde_json::to_value(o)?));
            }
        }
        Ok(snap)
    }

    /// Polls until `check` yields a value; on timeout prints the tree and fails with `what`.
    async fn until<T>(
        &self,
        what: &str,
        check: impl Fn(&Snapshot) -> Option<T>,
    ) -> anyhow::Result<T> {
        let start = Instant::now();
        let mut last_error = None;
        loop {
            match self.snapshot().await {
                Ok(snap) => {
                    if let Some(v) = check(&snap) {
                        println!("    ✓ {what} ({:.1}s)", start.elapsed().as_secs_f64());
                        return Ok(v);
                    }
                }
                // A transient API error is retried; it is reported if the wait times out.
                Err(e) => last_error = Some(e),
            }
            if start.elapsed() > STEP_TIMEOUT {
                println!("    ✗ {what}: not reached; the rollouts now:");
                let _ = self.tree().await;
                match last_error {
                    Some(e) => bail!(
                        "timed out after {}s waiting for: {what} (last API error: {e:#})",
                        STEP_TIMEOUT.as_secs()
                    ),
                    None => bail!(
                        "timed out after {}s waiting for: {what}",
                        STEP_TIMEOUT.as_secs()
                    ),
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Prints `kubectl numaplane get -n example-namespace`.
    /// The dashboard's table holds the `n` rollouts of the demo namespace, all Deployed (it
    /// follows watches, so it may take a moment after the API server has them).
    async fn dashboard_lists(&self, n: usize) -> anyhow::Result<()> {
        let Some(d) = &self.dashboard else {
            return Ok(());
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let rows = d.rows()?;
            let ours: Vec<&Value> = rows.iter().filter(|r| r["namespace"] == NS).collect();
            if ours.len() == n && ours.iter().all(|r| r["phase"] == "Deployed") {
                println!(
                    "    The dashboard ({}) lists the {n} rollouts, Deployed.",
                    d.url
                );
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the dashboard's table does not list the {n} Deployed rollouts of {NS}: {ours:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn tree(&self) -> anyhow::Result<()> {
        println!(
            "\n    $ kubectl numaplane get -n {NS}\n    {}",
            "─".repeat(60)
        );
        let out = tokio::process::Command::new(&self.cli)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["get", "-n", NS])
            .output()
            .await
            .with_context(|| format!("running {}", self.cli.display()))?;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            println!("    {line}");
        }
        anyhow::ensure!(
            out.status.success(),
            "kubectl numaplane get failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(())
    }

    /// Every version of the Pipelines of the demo namespace seen from now on: a watch misses no
    /// write, unlike polling (a pipeline may be Paused for less than a poll interval).
    fn record_pipelines(&self) -> (Arc<Mutex<Vec<Value>>>, tokio::task::JoinHandle<()>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let out = seen.clone();
        let api =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), NS, &resource::<Pipeline>());
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(
                watcher(api, watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
            );
            while let Some(ev) = stream.next().await {
                if let Ok(obj) = ev
                    && let Ok(v) = serde_json::to_value(obj)
                {
                    out.lock().unwrap_or_else(|e| e.into_inner()).push(v);
                }
            }
        });
        (seen, task)
    }
}

async fn apply(client: &Client, doc: &Value) -> anyhow::Result<()> {
    let api_version = doc["apiVersion"]
        .as_str()
        .context("manifest without apiVersion")?;
    let kind = doc["kind"].as_str().context("manifest without kind")?;
    let name = doc["metadata"]["name"]
        .as_str()
        .context("manifest without metadata.name")?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let (ar, caps) =
        kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind))
            .await
            .with_context(|| format!("finding the resource of {api_version} {kind}"))?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &ar),
        Scope::Namespaced => {
            let ns = doc["metadata"]["namespace"].as_str().unwrap_or(NS);
            Api::namespaced_with(client.clone(), ns, &ar)
        }
    };
    api.patch(
        name,
        &PatchParams::apply("demo").force(),
        &Patch::Apply(doc),
    )
    .await
    .with_context(|| format!("applying {kind} {name}"))?;
    Ok(())
}

/// What Numaplane needs in a cluster besides its CRDs (installed by the test environment): its
/// namespace, identity and RBAC, the USDE ConfigMap, the Numaflow controller definitions, the
/// demo namespace; and its config file, written to `config_file`.
async fn bootstrap(client: &Client, config_file: &Path) -> anyhow::Result<()> {
    std::fs::write(config_file, CONFIG)
        .with_context(|| format!("writing {}", config_file.display()))?;
    for ns in [OPERATOR_NS, NS] {
        apply(
            client,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await?;
    }
    for rel in [
        "config/rbac/service_account.yaml",
        "config/rbac/role.yaml",
        "config/rbac/role_binding.yaml",
        "config/rbac/leader_election_role.yaml",
        "config/rbac/leader_election_role_binding.yaml",
        "config/manager/usde-config.yaml",
        "config/numaflow-controller-definitions/controller_def_1.5.2.yaml",
        "config/numaflow-controller-definitions/controller_def_1.6.0.yaml",
    ] {
        for mut d in docs(rel)? {
            if d["metadata"]["namespace"].is_null() && d["kind"] != "ClusterRole" {
                d["metadata"]["namespace"] = OPERATOR_NS.into();
            }
            apply(client, &d)
                .await
                .with_context(|| format!("installing {rel}"))?;
        }
    }
    Ok(())
}

// ---- The story -------------------------------------------------------------------------------

struct Story<'a> {
    c: &'a Cluster,
    start: Instant,
    step: usize,
    title: String,
}

impl Story<'_> {
    fn step(&mut self, title: &str) {
        self.step += 1;
        self.title = title.to_string();
        println!(
            "\n\x1b[1m==> {}. {title}\x1b[0m  [{:.0}s]",
            self.step,
            self.start.elapsed().as_secs_f64()
        );
    }

    fn say(&self, text: &str) {
        for line in text.lines() {
            println!("    {line}");
        }
    }
}

async fn story(s: &mut Story<'_>) -> anyhow::Result<()> {
    let c = s.c;
    let pr = rollout_sample(PR_SAMPLE)?;
    let mvr = rollout_sample(MVR_SAMPLE)?;
    let isbr = rollout_sample(ISBR_SAMPLE)?;

    s.step("Install the Numaflow controller, an ISB service, a pipeline and a MonoVertex");
    s.say(
        "Samples: NumaflowControllerRollout (1.5.2), ISBServiceRollout my-isbsvc,\n\
         PipelineRollout my-pipeline and MonoVertexRollout my-monovertex, judged by the\n\
         AnalysisTemplates Numaplane ships for Numaflow's real metric names. The cluster\n\
         default strategy is progressive.",
    );
    for template in docs(SHIPPED_TEMPLATES)? {
        c.apply(&template).await?;
    }
    for rel in [NCR_SAMPLE, ISBR_SAMPLE, PR_SAMPLE, MVR_SAMPLE] {
        for extra in sample_extras(rel)? {
            c.apply(&extra).await?;
        }
        c.apply(&rollout_sample(rel)?).await?;
    }
    for (kind, name) in [
        ("NumaflowControllerRollout", "numaflow-controller"),
        ("ISBServiceRollout", "my-isbsvc"),
        ("PipelineRollout", "my-pipeline"),
        ("MonoVertexRollout", "my-monovertex"),
    ] {
        c.until(&format!("{kind} {name} Deployed and healthy"), |snap| {
            snap.settled(kind, name).then_some(())
        })
        .await?;
    }
    let first = c
        .until("my-pipeline-0 promoted and Running", |snap| {
            let p = snap.child("Pipeline", "my-pipeline", "promoted")?;
            (phase(p) == "Running").then(|| name(p))
        })
        .await?;
    c.tree().await?;
    c.dashboard_lists(4).await?;

    s.step("A successful progressive upgrade of the pipeline (cat image :stable -> :v1)");
    s.say(
        "A trial pipeline runs beside the promoted one with the pods split between them; once\n\
         it is healthy for the assessment period and its AnalysisRun succeeded it is promoted,\n\
         and the old pipeline drains and is deleted.",
    );
    let mut pr_v1 = pr.clone();
    set_cat_image(&mut pr_v1, CAT_V1)?;
    c.apply(&pr_v1).await?;
    let promoted = c
        .until("a new pipeline promoted with the :v1 image", |snap| {
            let p = snap.child("Pipeline", "my-pipeline", "promoted")?;
            (name(p) != first && cat_image(p) == CAT_V1).then(|| name(p))
        })
        .await?;
    c.until(&format!("{first} drained and deleted"), |snap| {
        snap.get("Pipeline", &first).is_none().then_some(())
    })
    .await?;
    c.until("my-pipeline settled, ProgressiveUpgradeSucceeded", |snap| {
        let r = snap.get("PipelineRollout", "my-pipeline")?;
        (snap.settled("PipelineRollout", "my-pipeline")
            && condition(r, "ProgressiveUpgradeSucceeded")?["status"] == "True")
            .then_some(())
    })
    .await?;
    c.tree().await?;

    s.step("A failed progressive upgrade (unpullable cat image :badpath1) and its rollback");
    s.say(
        "The trial's pods never become ready, so its assessment fails: the rollout reports\n\
         the failure and the promoted pipeline gets its saved scale back (it keeps running).",
    );
    let mut pr_bad = pr.clone();
    set_cat_image(&mut pr_bad, CAT_BAD)?;
    c.apply(&pr_bad).await?;
    let failed = c
        .until("the trial failed its assessment", |snap| {
            let r = snap.get("PipelineRollout", "my-pipeline")?;
            let cond = condition(r, "ProgressiveUpgradeSucceeded")?;
            let trial = snap.child("Pipeline", "my-pipeline", "trial")?;
            (cond["status"] == "False" && cond["reason"] == "Failed" && cat_image(trial) == CAT_BAD)
                .then(|| name(trial))
        })
        .await?;
    let saved_scale = vertex(&pr["spec"]["pipeline"], "cat")["scale"].clone();
    c.until(
        &format!("{promoted} still promoted, cat scale restored to {saved_scale}"),
        |snap| {
            let p = snap.child("Pipeline", "my-pipeline", "promoted")?;
            (name(p) == promoted
                && cat_image(p) == CAT_V1
                && vertex(p, "cat")["scale"] == saved_scale
                && phase(p) == "Running")
                .then_some(())
        },
    )
    .await?;
    c.tree().await?;

    s.step("A fix (cat image :v2): the failed trial is replaced and force-drained");
    s.say(
        "A new trial replaces the failed one and is promoted; the failed pipeline, which may\n\
         hold data it could never process, is drained with the new promoted spec before it is\n\
         deleted.",
    );
    let mut pr_v2 = pr.clone();
    set_cat_image(&mut pr_v2, CAT_V2)?;
    c.apply(&pr_v2).await?;
    let fixed = c
        .until("a new pipeline promoted with the :v2 image", |snap| {
            let p = snap.child("Pipeline", "my-pipeline", "promoted")?;
            (name(p) != promoted && name(p) != failed && cat_image(p) == CAT_V2).then(|| name(p))
        })
        .await?;
    c.until(&format!("{failed} force-drained and deleted"), |snap| {
        (snap.get("Pipeline", &failed).is_none() && snap.has_event(&failed, "ForceDrain"))
            .then_some(())
    })
    .await?;
    c.until(&format!("{promoted} drained and deleted"), |snap| {
        snap.get("Pipeline", &promoted).is_none().then_some(())
    })
    .await?;
    c.until("my-pipeline settled", |snap| {
        snap.settled("PipelineRollout", "my-pipeline").then_some(())
    })
    .await?;
    c.tree().await?;

    let old_isb = isbr["spec"]["interStepBufferService"]["spec"]["jetstream"]["version"]
        .as_str()
        .context("the ISB service sample has no jetstream version")?
        .to_string();
    s.step(&format!(
        "An ISB service upgrade (JetStream {old_isb} -> {ISB_NEXT}) carrying its pipeline along"
    ));
    s.say(
        "A trial ISB service is created; the pipeline follows it with a trial of its own, and\n\
         the ISB service is judged by the pipelines on it. Then the old pipeline drains and\n\
         goes, and so does the old ISB service nobody uses any more.",
    );
    let isb_before = c
        .until("the promoted ISB service", |snap| {
            snap.child("InterStepBufferService", "my-isbsvc", "promoted")
                .map(name)
        })
        .await?;
    let mut isbr_next = isbr.clone();
    isbr_next["spec"]["interStepBufferService"]["spec"]["jetstream"]["version"] = ISB_NEXT.into();
    c.apply(&isbr_next).await?;
    let isb_after = c
        .until(
            &format!("a new ISB service promoted on {ISB_NEXT}"),
            |snap| {
                let i = snap.child("InterStepBufferService", "my-isbsvc", "promoted")?;
                (name(i) != isb_before && i["spec"]["jetstream"]["version"] == ISB_NEXT)
                    .then(|| name(i))
            },
        )
        .await?;
    let carried = c
        .until(&format!("a new pipeline promoted on {isb_after}"), |snap| {
            let p = snap.child("Pipeline", "my-pipeline", "promoted")?;
            (name(p) != fixed && p["spec"]["interStepBufferServiceName"] == isb_after.as_str())
                .then(|| name(p))
        })
        .await?;
    c.until(
        &format!("{fixed} and {isb_before} drained and deleted"),
        |snap| {
            (snap.get("Pipeline", &fixed).is_none()
                && snap.get("InterStepBufferService", &isb_before).is_none())
            .then_some(())
        },
    )
    .await?;
    c.until("my-isbsvc and my-pipeline settled", |snap| {
        (snap.settled("ISBServiceRollout", "my-isbsvc")
            && snap.settled("PipelineRollout", "my-pipeline"))
        .then_some(())
    })
    .await?;
    c.tree().await?;

    s.step("A MonoVertex upgrade (sink image sink-log:stable -> :v1)");
    let mv_before = c
        .until("the promoted MonoVertex", |snap| {
            snap.child("MonoVertex", "my-monovertex", "promoted")
                .map(name)
        })
        .await?;
    let mut mvr_next = mvr.clone();
    let sink = mvr_next
        .pointer_mut("/spec/monoVertex/spec/sink/udsink/container/image")
        .context("the MonoVertex sample has no udsink image")?;
    *sink = SINK_V1.into();
    c.apply(&mvr_next).await?;
    c.until("a new MonoVertex promoted with the :v1 sink", |snap| {
        let m = snap.child("MonoVertex", "my-monovertex", "promoted")?;
        (name(m) != mv_before
            && m.pointer("/spec/sink/udsink/container/image") == Some(&json!(SINK_V1)))
        .then_some(())
    })
    .await?;
    c.until(
        &format!("{mv_before} deleted, my-monovertex settled"),
        |snap| {
            (snap.get("MonoVertex", &mv_before).is_none()
                && snap.settled("MonoVertexRollout", "my-monovertex"))
            .then_some(())
        },
    )
    .await?;
    c.tree().await?;

    s.step("Pause-and-drain: the namespace switches strategy, a data-loss change (cat :v3)");
    s.say(
        "The namespace-level ConfigMap sample sets upgradeStrategy: pause-and-drain for\n\
         example-namespace. A changed UDF image risks data loss, so Numaplane pauses the\n\
         pipeline, waits until it has drained, updates it in place and resumes it.",
    );
    c.apply_file(NS_CONFIG_SAMPLE).await?;
    // The controller learns the namespace's strategy from a watch; give it a moment so the
    // change below is not decided with the previous (progressive) strategy.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (seen, recorder) = c.record_pipelines();
    let mut pr_v3 = pr.clone();
    set_cat_image(&mut pr_v3, CAT_V3)?;
    c.apply(&pr_v3).await?;
    c.until(
        &format!("{carried} updated in place to :v3 and Running"),
        |snap| {
            let p = snap.get("Pipeline", &carried)?;
            (cat_image(p) == CAT_V3 && phase(p) == "Running").then_some(())
        },
    )
    .await?;
    c.until("my-pipeline settled", |snap| {
        snap.settled("PipelineRollout", "my-pipeline").then_some(())
    })
    .await?;
    recorder.abort();
    let drained_before_update = seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|p| {
            name(p) == carried
                && phase(p) == "Paused"
                && p["status"]["drainedOnPause"] == true
                && cat_image(p) == CAT_V2
        });
    anyhow::ensure!(
        drained_before_update,
        "{carried} was not seen Paused and drained before its image changed"
    );
    println!("    ✓ {carried} was paused and drained before the change");
    let count = c
        .snapshot()
        .await?
        .all("Pipeline")
        .filter(|p| p["metadata"]["labels"][PARENT] == "my-pipeline")
        .count();
    anyhow::ensure!(count == 1, "expected one pipeline, found {count}");
    c.tree().await?;

    s.step(
        "Delete the rollouts: each pipeline is paused and drained before it goes, and the ISB \
         service stays until no pipeline uses it",
    );
    // Pipelines and MonoVertices first, then what they run on, as a user would.
    delete(c, resource::<PipelineRollout>(), "my-pipeline").await?;
    delete(c, resource::<MonoVertexRollout>(), "my-monovertex").await?;
    c.until(
        "no PipelineRollouts, MonoVertexRollouts, Pipelines or MonoVertices left",
        |snap| {
            [
                "PipelineRollout",
                "MonoVertexRollout",
                "Pipeline",
                "MonoVertex",
            ]
            .iter()
            .all(|k| snap.all(k).next().is_none())
            .then_some(())
        },
    )
    .await?;
    delete(c, resource::<ISBServiceRollout>(), "my-isbsvc").await?;
    delete(
        c,
        resource::<NumaflowControllerRollout>(),
        "numaflow-controller",
    )
    .await?;
    c.until("no ISB services or Numaflow controllers left", |snap| {
        [
            "ISBServiceRollout",
            "NumaflowControllerRollout",
            "NumaflowController",
            "InterStepBufferService",
        ]
        .iter()
        .all(|k| snap.all(k).next().is_none())
        .then_some(())
    })
    .await?;
    Ok(())
}

async fn delete(c: &Cluster, ar: ApiResource, name: &str) -> anyhow::Result<()> {
    Api::<DynamicObject>::namespaced_with(c.client.clone(), NS, &ar)
        .delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting {} {name}", ar.kind))?;
    Ok(())
}

fn set_cat_image(pr: &mut Value, image: &str) -> anyhow::Result<()> {
    let vertices = pr
        .pointer_mut("/spec/pipeline/spec/vertices")
        .and_then(Value::as_array_mut)
        .context("the PipelineRollout sample has no vertices")?;
    let cat = vertices
        .iter_mut()
        .find(|v| v["name"] == "cat")
        .context("the PipelineRollout sample has no cat vertex")?;
    cat["udf"]["container"]["image"] = image.into();
    Ok(())
}

// ---- Entry points ----------------------------------------------------------------------------

const USAGE: &str =
    "usage: demo [--dir DIR] [--keep] | demo dev-up --dir DIR | demo dev-down --dir DIR";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1).collect::<Vec<_>>();
    let command = match args.first().map(String::as_str) {
        Some("dev-up" | "dev-down") => Some(args.remove(0)),
        _ => None,
    };
    let mut dir = PathBuf::from(".demo");
    let mut keep = false;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dir" => match it.next() {
                Some(d) => dir = PathBuf::from(d),
                None => return fail(&anyhow::anyhow!("--dir needs a value ({USAGE})")),
            },
            "--keep" => keep = true,
            // Accepted for compatibility: the demo always stops at the end unless --keep.
            "--exit" => {}
            other => return fail(&anyhow::anyhow!("unknown argument {other} ({USAGE})")),
        }
    }
    let result = match command.as_deref() {
        Some("dev-up") => dev_up(&dir).await,
        Some("dev-down") => dev_down(&dir),
        _ => demo(&dir, keep).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(e: &anyhow::Error) -> std::process::ExitCode {
    eprintln!("\n\x1b[1;31mdemo failed:\x1b[0m {e:#}");
    std::process::ExitCode::FAILURE
}

async fn demo(dir: &Path, keep: bool) -> anyhow::Result<()> {
    let cli = sibling_binary("kubectl-numaplane", "kubectl-numaplane")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let start = Instant::now();

    println!(
        "\x1b[1m==> Starting the real stack on loopback: etcd, kube-apiserver, kube-controller-manager,\n    \
         kube-scheduler, KWOK, Prometheus, Argo Rollouts (the Numaflow controller follows its Deployment)\x1b[0m"
    );
    let env = TestEnv::start_with(TestEnvOptions {
        dir: Some(dir.join("cluster")),
        real_stack: true,
        ..Default::default()
    })
    .await?;
    let client = env.client();
    println!("    kubeconfig: {}", env.kubeconfig_path().display());

    println!("\x1b[1m==> Starting Numaplane\x1b[0m");
    let config_file = dir.join("config.yaml");
    bootstrap(&client, &config_file).await?;
    let operator = Operator::start(
        env.operator_client(),
        OperatorOptions {
            config_file,
            operator_namespace: OPERATOR_NS.into(),
            workers: 4,
            instance: Some("demo".into()),
            watch_namespace: None,
            metrics: Default::default(),
            leadership: None,
            fence: None,
        },
    )
    .await?;

    let dashboard = Dashboard::start(&cli, &env.kubeconfig_path())?;
    println!(
        "    dashboard: {} (kubectl numaplane dashboard: every rollout, live)",
        dashboard.url
    );
    let cluster = Cluster {
        client,
        kubeconfig: env.kubeconfig_path(),
        cli,
        dashboard: Some(dashboard),
    };
    let mut s = Story {
        c: &cluster,
        start,
        step: 0,
        title: String::new(),
    };
    let result = story(&mut s).await;
    let result = result.with_context(|| format!("step {} ({})", s.step, s.title));
    if result.is_ok() {
        println!(
            "\n\x1b[1;32mThe story reached every expected state in {:.0}s.\x1b[0m",
            start.elapsed().as_secs_f64()
        );
        if keep {
            println!(
                "Everything keeps running. Try:\n  export KUBECONFIG={}\n  {} get -n {NS}\n  \
                 open {} (the dashboard)\n\
                 Press Ctrl-C to stop (the control plane is removed with it).",
                env.kubeconfig_path().display(),
                cluster.cli.display(),
                cluster
                    .dashboard
                    .as_ref()
                    .map(|d| d.url.as_str())
                    .unwrap_or_default()
            );
            tokio::signal::ctrl_c().await?;
        }
    }
    println!("\x1b[1m==> Stopping Numaplane and the stack\x1b[0m");
    operator.shutdown().await;
    // Kills every process of the stack and removes their files.
    drop(env);
    if result.is_ok() {
        println!(
            "Demo finished in {:.0}s; nothing left running.",
            start.elapsed().as_secs_f64()
        );
    }
    result
}

// ---- dev-up / dev-down -----------------------------------------------------------------------

const NUMAPLANE_PID: &str = "numaplane.pid";

/// `numaplane-testenv up` (the real stack in the background),
/// the bootstrap objects, then the `numaplane` binary detached with the operator's identity.
async fn dev_up(dir: &Path) -> anyhow::Result<()> {
    let testenv = sibling_binary("numaplane-testenv", "numaplane-testenv")?;
    let numaplane = sibling_binary("numaplane", "numaplane")?;
    let cli = sibling_binary("kubectl-numaplane", "kubectl-numaplane")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    if let Some(pid) = read_pid(&dir)?
        && alive(pid)
    {
        bail!(
            "Numaplane is already running (pid {pid}); `make dev-down` first (DEV_DIR={})",
            dir.display()
        );
    }
    println!(
        "==> Starting the real stack (control plane, KWOK, Numaflow and Argo Rollouts controllers, \
         Prometheus)"
    );
    let status = Command::new(&testenv)
        .args(["up", "--dir"])
        .arg(&dir)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("running {}", testenv.display()))?;
    anyhow::ensure!(status.success(), "numaplane-testenv up failed ({status})");
    let up = async {
        let kubeconfig = dir.join("kubeconfig");
        let client = Cluster::connect(&kubeconfig).await?;
        let config_file = dir.join("numaplane-config.yaml");
        bootstrap(&client, &config_file).await?;
        println!(
            "==> Starting numaplane (log: {})",
            dir.join("numaplane.log").display()
        );
        start_numaplane(&numaplane, &dir, &config_file).await
    };
    if let Err(e) = up.await {
        let _ = dev_down(&dir);
        return Err(e);
    }
    let kubeconfig = dir.join("kubeconfig");
    println!(
        "\nNumaplane runs against a local control plane (progressive by default, short assessment
schedules; config {config}). Try:

  export KUBECONFIG={kubeconfig}
  export PATH={bin}:$PATH   # kubectl-numaplane, so `kubectl numaplane` works
  kubectl apply -f config/samples/numaplane.numaproj.io_v1alpha1_numaflowcontrollerrollout.yaml
  kubectl apply -f config/samples/numaplane.numaproj.io_v1alpha1_isbservicerollout.yaml
  kubectl apply -f config/samples/numaplane.numaproj.io_v1alpha1_pipelinerollout.yaml
  kubectl numaplane get -n {NS} -w
  kubectl numaplane dashboard      # every rollout in a browser, live: http://127.0.0.1:3100/

Without kubectl: {cli} --kubeconfig {kubeconfig} get -n {NS}
Logs: {dir}/numaplane.log, {dir}/testenv.log. Stop everything with `make dev-down`.",
        config = dir.join("numaplane-config.yaml").display(),
        kubeconfig = kubeconfig.display(),
        bin = bin_dir()?.display(),
        cli = cli.display(),
        dir = dir.display(),
    );
    Ok(())
}

async fn start_numaplane(binary: &Path, dir: &Path, config_file: &Path) -> anyhow::Result<()> {
    let log_path = dir.join("numaplane.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let metrics_port = free_port()?;
    let probe_port = free_port()?;
    // Own process group and no terminal: it outlives `make` and the shell's Ctrl-C.
    let mut child = Command::new(binary)
        .arg("--kubeconfig")
        .arg(dir.join("operator.kubeconfig"))
        .arg("--config-file")
        .arg(config_file)
        .args(["--namespace", OPERATOR_NS])
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
        .arg(format!(
            "--health-probe-bind-address=127.0.0.1:{probe_port}"
        ))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    std::fs::write(dir.join(NUMAPLANE_PID), child.id().to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("numaplane exited ({status}); see {}", log_path.display());
        }
        if http_ok(probe_port, "/readyz") {
            println!(
                "    ready (pid {}; metrics on http://127.0.0.1:{metrics_port}/metrics)",
                child.id()
            );
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("numaplane not ready within 60s; see {}", log_path.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn dev_down(dir: &Path) -> anyhow::Result<()> {
    if let Some(pid) = read_pid(dir)? {
        if alive(pid) {
            println!("==> Stopping numaplane (pid {pid})");
            signal(pid, "TERM");
            let deadline = Instant::now() + Duration::from_secs(20);
            while alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            if alive(pid) {
                signal(pid, "KILL");
            }
        }
        let _ = std::fs::remove_file(dir.join(NUMAPLANE_PID));
    }
    println!("==> Stopping the real stack");
    let testenv = sibling_binary("numaplane-testenv", "numaplane-testenv")?;
    let status = Command::new(&testenv)
        .args(["down", "--dir"])
        .arg(dir)
        .status()
        .with_context(|| format!("running {}", testenv.display()))?;
    anyhow::ensure!(status.success(), "numaplane-testenv down failed ({status})");
    Ok(())
}

fn read_pid(dir: &Path) -> anyhow::Result<Option<u32>> {
    match std::fs::read_to_string(dir.join(NUMAPLANE_PID)) {
        Ok(s) => {
            Ok(Some(s.trim().parse().with_context(|| {
                format!("bad pid in {NUMAPLANE_PID}: {s:?}")
            })?))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).context(format!("reading {NUMAPLANE_PID}")),
    }
}

/// kill(1) rather than libc: the workspace forbids `unsafe`.
fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

fn alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-s", "0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A bare HTTP/1.0 GET: enough for a probe, without an HTTP client dependency.
fn http_ok(port: u16, path: &str) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200") || buf.starts_with("HTTP/1.0 200")
}
