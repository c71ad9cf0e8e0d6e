//! The Numaflow simulator against the real test control plane: each test runs in a fresh
//! namespace with its own namespaced simulator.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::Pod,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::ApiResource,
    runtime::{WatchStreamExt, wait::await_condition, watcher},
};
use numaplane_testenv::{
    Simulator, TestEnv,
    simulator::{MonoVertexBehaviour, PipelineBehaviour},
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);
const GOOD_CAT: &str = "quay.io/numaio/numaflow-go/map-cat:stable";
const BAD_CAT: &str = "quay.io/numaio/numaflow-go/map-badcat:stable";

fn numaflow(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "numaflow.numaproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "numaflow.numaproj.io/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

struct Fixture {
    client: Client,
    ns: String,
    sim: Simulator,
}

impl Fixture {
    async fn new(prefix: &str) -> Fixture {
        // RUST_LOG=numaplane_testenv=debug shows the simulated controllers' errors.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let env = TestEnv::shared().await;
        let client = env.client();
        let ns = env.create_namespace(prefix).await;
        let sim = Simulator::start_in_namespace(client.clone(), &ns)
            .await
            .expect("simulator starts");
        Fixture { client, ns, sim }
    }

    fn api(&self, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &numaflow(kind, plural))
    }
    fn pipelines(&self) -> Api<DynamicObject> {
        self.api("Pipeline", "pipelines")
    }
    fn vertices(&self) -> Api<DynamicObject> {
        self.api("Vertex", "vertices")
    }
    fn isbsvcs(&self) -> Api<DynamicObject> {
        self.api("InterStepBufferService", "interstepbufferservices")
    }
    fn monovertices(&self) -> Api<DynamicObject> {
        self.api("MonoVertex", "monovertices")
    }
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn create(&self, api: &Api<DynamicObject>, obj: Value) -> DynamicObject {
        let obj: DynamicObject = serde_json::from_value(obj).expect("valid object");
        api.create(&PostParams::default(), &obj)
            .await
            .expect("create")
    }

    async fn create_isbsvc(&self, name: &str, spec: Value) -> DynamicObject {
        let obj = json!({
            "apiVersion": "numaflow.numaproj.io/v1alpha1",
            "kind": "InterStepBufferService",
            "metadata": {"name": name},
            "spec": spec,
        });
        self.create(&self.isbsvcs(), obj).await
    }

    /// The `default` ISB service, Running and healthy.
    async fn healthy_isbsvc(&self) {
        self.create_isbsvc("default", json!({"jetstream": {"version": "2.10.17"}}))
            .await;
        wait(&self.isbsvcs(), "default", "isbsvc Running", |o| {
            healthy(o, "Running")
        })
        .await;
    }

    async fn create_pipeline(&self, name: &str, spec: Value) -> DynamicObject {
        let obj = json!({
            "apiVersion": "numaflow.numaproj.io/v1alpha1",
            "kind": "Pipeline",
            "metadata": {"name": name},
            "spec": spec,
        });
        self.create(&self.pipelines(), obj).await
    }

    async fn patch_spec(&self, api: &Api<DynamicObject>, name: &str, spec: Value) {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .expect("patch spec");
    }

    /// Name → resourceVersion of every pipeline, vertex, pod and deployment in the namespace.
    async fn resource_versions(&self) -> Vec<(String, String)> {
        let lp = ListParams::default();
        let mut out = Vec::new();
        for api in [self.pipelines(), self.vertices(), self.isbsvcs()] {
            for o in api.list(&lp).await.expect("list").items {
                out.push((o.name_any(), o.resource_version().unwrap_or_default()));
            }
        }
        for p in self.pods().list(&lp).await.expect("list pods").items {
            out.push((p.name_any(), p.resource_version().unwrap_or_default()));
        }
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.ns);
        for d in deployments.list(&lp).await.expect("list deployments").items {
            out.push((d.name_any(), d.resource_version().unwrap_or_default()));
        }
        out.sort();
        out
    }

    async fn pods_with(&self, selector: &str) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default().labels(selector))
            .await
            .expect("list pods")
            .items
    }
}

/// A source → cat → sink pipeline; `cat` runs 2 pods.
fn pipeline_spec(cat_image: &str, grace_seconds: i64) -> Value {
    json!({
        "lifecycle": {"pauseGracePeriodSeconds": grace_seconds},
        "vertices": [
            {"name": "in", "source": {"generator": {"rpu": 5, "duration": "1s"}}},
            {"name": "cat", "udf": {"container": {"image": cat_image}}, "scale": {"min": 2, "max": 3}},
            {"name": "out", "sink": {"log": {}}},
        ],
        "edges": [{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}],
    })
}

fn status(o: &DynamicObject) -> Value {
    o.data.get("status").cloned().unwrap_or(Value::Null)
}

fn phase(o: &DynamicObject) -> String {
    status(o)["phase"].as_str().unwrap_or("").to_owned()
}

fn cond(o: &DynamicObject, ty: &str) -> Option<(String, String)> {
    let st = status(o);
    let c = st["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)?
        .clone();
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str().unwrap_or("").to_owned(),
    ))
}

fn all_conditions_true(o: &DynamicObject) -> bool {
    status(o)["conditions"]
        .as_array()
        .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c["status"] == "True"))
}

fn observed(o: &DynamicObject) -> bool {
    status(o)["observedGeneration"].as_i64() == o.metadata.generation
}

fn healthy(o: &DynamicObject, want_phase: &str) -> bool {
    phase(o) == want_phase && all_conditions_true(o) && observed(o)
}

/// Waits (by watch) until `name` satisfies `pred`; fails the test after [`WAIT`].
async fn wait<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    pred: impl Fn(&K) -> bool + Send + 'static,
) -> K
where
    K: Resource + Clone + std::fmt::Debug + Send + serde::de::DeserializeOwned + 'static,
{
    let cond = move |o: Option<&K>| o.is_some_and(&pred);
    let res = tokio::time::timeout(WAIT, await_condition(api.clone(), name, cond)).await;
    match res {
        Ok(Ok(Some(o))) => o,
        Ok(Ok(None)) => panic!("{name} vanished while waiting for {what}"),
        Ok(Err(e)) => panic!("watch failed while waiting for {what}: {e}"),
        Err(_) => {
            let last = api.get_opt(name).await.ok().flatten();
            panic!("timed out after {WAIT:?} waiting for {what}; last seen: {last:#?}")
        }
    }
}

/// Polls `check` until it returns `Some`, failing the test after [`WAIT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Records every distinct phase one object goes through, from a watch.
struct PhaseRecorder {
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PhaseRecorder {
    fn start(api: &Api<DynamicObject>, name: &str) -> PhaseRecorder {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = seen.clone();
        let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(api.clone(), cfg).applied_objects();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(o)) = stream.next().await {
                let p = phase(&o);
                let mut g = sink.lock().expect("lock");
                if g.last() != Some(&p) {
                    g.push(p);
                }
            }
        });
        PhaseRecorder { seen, task }
    }

    fn phases(&self) -> Vec<String> {
        self.seen.lock().expect("lock").clone()
    }
}

impl Drop for PhaseRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn pod_ready(p: &Pod) -> bool {
    let st = p.status.as_ref();
    st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn vertex_pod_selector(pl: &str, vertex: &str) -> String {
    format!(
        "app.kubernetes.io/part-of=numaflow,app.kubernetes.io/component=vertex,\
         numaflow.numaproj.io/pipeline-name={pl},app.kubernetes.io/name={pl}-{vertex}"
    )
}

async fn wait_pipeline_running(f: &Fixture, name: &str) -> DynamicObject {
    wait(&f.pipelines(), name, "pipeline Running and healthy", |o| {
        healthy(o, "Running")
    })
    .await
}

#[tokio::test]
async fn pipeline_runs_with_vertices_pods_and_daemon_then_deletes() {
    let f = Fixture::new("sim-pl").await;
    f.healthy_isbsvc().await;
    let pl = f.create_pipeline("pl", pipeline_spec(GOOD_CAT, 30)).await;
    let running = wait_pipeline_running(&f, "pl").await;
    assert!(
        running
            .finalizers()
            .iter()
            .any(|x| x == "numaflow.numaproj.io/pipeline-controller")
    );
    assert_eq!(
        cond(&running, "SideInputsManagersHealthy"),
        Some(("True".into(), "NoSideInputs".into()))
    );
    assert_eq!(status(&running)["vertexCount"], json!(3));

    for (short, replicas) in [("in", 1), ("cat", 2), ("out", 1)] {
        let full = format!("pl-{short}");
        let v = wait(&f.vertices(), &full, "vertex healthy", |v| {
            healthy(v, "Running")
        })
        .await;
        let labels = v.labels();
        assert_eq!(
            labels
                .get("numaflow.numaproj.io/pipeline-name")
                .map(String::as_str),
            Some("pl")
        );
        assert_eq!(
            labels
                .get("numaflow.numaproj.io/vertex-name")
                .map(String::as_str),
            Some(short)
        );
        assert_eq!(
            labels
                .get("app.kubernetes.io/component")
                .map(String::as_str),
            Some("vertex")
        );
        let owner = v.owner_references().first().cloned().expect("owned");
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("Pipeline", pl.uid().as_deref().unwrap_or(""), Some(true))
        );
        let spec = v.data["spec"].clone();
        assert_eq!(spec["pipelineName"], json!("pl"));
        assert_eq!(spec["lifecycle"]["desiredPhase"], json!("Running"));
        assert_eq!(spec["replicas"], json!(replicas));
        assert_eq!(status(&v)["desiredReplicas"], json!(replicas));
        assert_eq!(status(&v)["readyReplicas"], json!(replicas));
        assert_eq!(cond(&v, "PodsHealthy").map(|c| c.0), Some("True".into()));
        let pods = f.pods_with(&vertex_pod_selector("pl", short)).await;
        assert_eq!(pods.len(), replicas as usize, "pods of {full}");
        assert!(pods.iter().all(pod_ready), "all pods of {full} ready");
    }
    let cat = f.vertices().get("pl-cat").await.expect("cat");
    assert_eq!(
        cat.data["spec"]["fromEdges"],
        json!([{"from": "in", "to": "cat"}])
    );
    assert_eq!(
        cat.data["spec"]["toEdges"],
        json!([{"from": "cat", "to": "out"}])
    );

    let daemon_pods = f
        .pods_with("app.kubernetes.io/component=daemon,numaflow.numaproj.io/pipeline-name=pl")
        .await;
    assert_eq!(daemon_pods.len(), 1);
    assert!(pod_ready(&daemon_pods[0]));

    // Settled objects are left alone: no write loops between the simulated controllers.
    let before = f.resource_versions().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        f.resource_versions().await,
        before,
        "objects changed while idle"
    );

    // Deletion: Deleting, then the finalizer goes and the pipeline is gone.
    let rec = PhaseRecorder::start(&f.pipelines(), "pl");
    f.pipelines()
        .delete("pl", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("pipeline gone", || async {
        f.pipelines()
            .get_opt("pl")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        rec.phases().contains(&"Deleting".to_owned()),
        "phases seen: {:?}",
        rec.phases()
    );
}

#[tokio::test]
async fn pause_drains_then_resume_runs_again() {
    let f = Fixture::new("sim-pause").await;
    f.healthy_isbsvc().await;
    f.create_pipeline("pl", pipeline_spec(GOOD_CAT, 30)).await;
    wait_pipeline_running(&f, "pl").await;

    let rec = PhaseRecorder::start(&f.pipelines(), "pl");
    f.patch_spec(
        &f.pipelines(),
        "pl",
        json!({"lifecycle": {"desiredPhase": "Paused"}}),
    )
    .await;
    let paused = wait(&f.pipelines(), "pl", "pipeline Paused", |o| {
        phase(o) == "Paused"
    })
    .await;
    assert_eq!(status(&paused)["drainedOnPause"], json!(true));
    assert!(
        rec.phases().contains(&"Pausing".to_owned()),
        "phases seen: {:?}",
        rec.phases()
    );
    let ts = paused
        .annotations()
        .get("numaflow.numaproj.io/pause-timestamp")
        .cloned()
        .expect("pause-timestamp");
    assert!(
        chrono::DateTime::parse_from_rfc3339(&ts).is_ok(),
        "RFC3339 pause-timestamp {ts}"
    );
    for short in ["in", "cat", "out"] {
        let v = wait(
            &f.vertices(),
            &format!("pl-{short}"),
            "vertex Paused",
            |v| phase(v) == "Paused",
        )
        .await;
        assert_eq!(v.data["spec"]["lifecycle"]["desiredPhase"], json!("Paused"));
        assert_eq!(status(&v)["desiredReplicas"], json!(0));
    }
    eventually("vertex pods gone", || async {
        f.pods_with("app.kubernetes.io/component=vertex")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    assert_eq!(
        f.pods_with("app.kubernetes.io/component=daemon")
            .await
            .len(),
        1,
        "daemon kept while paused"
    );

    // Slow resume: the vertices' replicas are nulled.
    f.pipelines()
        .patch(
            "pl",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"numaflow.numaproj.io/resume-strategy": "slow"}},
                                  "spec": {"lifecycle": {"desiredPhase": "Running"}}})),
        )
        .await
        .expect("resume");
    let resumed = wait_pipeline_running(&f, "pl").await;
    assert_eq!(status(&resumed)["drainedOnPause"], json!(false));
    assert!(
        !resumed
            .annotations()
            .contains_key("numaflow.numaproj.io/pause-timestamp")
    );
    let cat = wait(&f.vertices(), "pl-cat", "cat running", |v| {
        healthy(v, "Running")
    })
    .await;
    assert!(
        cat.data["spec"].get("replicas").is_none(),
        "slow resume nulls replicas: {:?}",
        cat.data["spec"]
    );
    assert_eq!(
        status(&cat)["readyReplicas"],
        json!(2),
        "null replicas clamp to min"
    );
}

#[tokio::test]
async fn unable_to_drain_pauses_only_after_grace_period() {
    let f = Fixture::new("sim-nodrain").await;
    f.healthy_isbsvc().await;
    f.sim
        .set_pipeline_behaviour(&f.ns, "pl", PipelineBehaviour::NeverDrain);
    f.create_pipeline("pl", pipeline_spec(GOOD_CAT, 5)).await;
    wait_pipeline_running(&f, "pl").await;

    f.patch_spec(
        &f.pipelines(),
        "pl",
        json!({"lifecycle": {"desiredPhase": "Paused"}}),
    )
    .await;
    let pausing = wait(&f.pipelines(), "pl", "pipeline Pausing", |o| {
        phase(o) == "Pausing"
    })
    .await;
    assert_eq!(status(&pausing)["message"], json!("Pausing in progress"));
    let paused = wait(&f.pipelines(), "pl", "pipeline Paused", |o| {
        phase(o) == "Paused"
    })
    .await;
    assert_eq!(status(&paused)["drainedOnPause"], json!(false));
    let ts = paused
        .annotations()
        .get("numaflow.numaproj.io/pause-timestamp")
        .cloned()
        .expect("pause-timestamp");
    let started = chrono::DateTime::parse_from_rfc3339(&ts).expect("rfc3339");
    let waited = chrono::Utc::now().signed_duration_since(started);
    assert!(
        waited >= chrono::Duration::seconds(5),
        "paused only after the 5 s grace period, took {waited}"
    );
}

#[tokio::test]
async fn slow_drain_stays_pausing_then_drains() {
    let f = Fixture::new("sim-slow").await;
    f.healthy_isbsvc().await;
    f.sim.set_pipeline_behaviour(
        &f.ns,
        "pl",
        PipelineBehaviour::SlowDrain(Duration::from_secs(4)),
    );
    f.create_pipeline("pl", pipeline_spec(GOOD_CAT, 60)).await;
    wait_pipeline_running(&f, "pl").await;

    let t0 = Instant::now();
    f.patch_spec(
        &f.pipelines(),
        "pl",
        json!({"lifecycle": {"desiredPhase": "Paused"}}),
    )
    .await;
    let paused = wait(&f.pipelines(), "pl", "pipeline Paused", |o| {
        phase(o) == "Paused"
    })
    .await;
    assert!(
        t0.elapsed() >= Duration::from_secs(4),
        "slow drain took {:?}",
        t0.elapsed()
    );
    assert_eq!(status(&paused)["drainedOnPause"], json!(true));
}

#[tokio::test]
async fn unpullable_image_is_unhealthy_and_cannot_drain() {
    let f = Fixture::new("sim-badimg").await;
    f.healthy_isbsvc().await;
    f.create_pipeline("pl", pipeline_spec(BAD_CAT, 3)).await;
    let pl = wait(&f.pipelines(), "pl", "VerticesHealthy Unavailable", |o| {
        cond(o, "VerticesHealthy") == Some(("False".into(), "Unavailable".into()))
    })
    .await;
    assert_eq!(phase(&pl), "Running");
    assert!(
        status(&pl)["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Degraded: "))
    );
    let cat = f.vertices().get("pl-cat").await.expect("cat vertex");
    assert_eq!(
        cond(&cat, "PodsHealthy"),
        Some(("False".into(), "PodImagePullBackOff".into()))
    );
    assert!(status(&cat)["readyReplicas"].as_i64() < status(&cat)["desiredReplicas"].as_i64());
    let pods = f.pods_with(&vertex_pod_selector("pl", "cat")).await;
    assert_eq!(pods.len(), 2);
    for p in &pods {
        let waiting = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
            });
        assert_eq!(waiting.as_deref(), Some("ImagePullBackOff"));
        assert!(!pod_ready(p));
    }

    f.patch_spec(
        &f.pipelines(),
        "pl",
        json!({"lifecycle": {"desiredPhase": "Paused"}}),
    )
    .await;
    let paused = wait(&f.pipelines(), "pl", "pipeline Paused", |o| {
        phase(o) == "Paused"
    })
    .await;
    assert_eq!(status(&paused)["drainedOnPause"], json!(false));

    // Fixing the image while paused and resuming makes it healthy.
    let mut spec = pipeline_spec(GOOD_CAT, 3);
    spec["lifecycle"]["desiredPhase"] = json!("Running");
    f.patch_spec(&f.pipelines(), "pl", spec).await;
    wait_pipeline_running(&f, "pl").await;
}

#[tokio::test]
async fn missing_isbsvc_fails_then_recovers() {
    let f = Fixture::new("sim-noisb").await;
    let mut spec = pipeline_spec(GOOD_CAT, 30);
    spec["interStepBufferServiceName"] = json!("my-isb");
    f.create_pipeline("pl", spec).await;
    let failed = wait(&f.pipelines(), "pl", "pipeline Failed", |o| {
        phase(o) == "Failed"
    })
    .await;
    assert_eq!(status(&failed)["message"], json!("isbsvc not healthy"));
    assert_eq!(cond(&failed, "Deployed").map(|c| c.0), Some("False".into()));
    assert!(
        f.vertices()
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );

    f.create_isbsvc("my-isb", json!({"jetstream": {"version": "latest"}}))
        .await;
    let running = wait_pipeline_running(&f, "pl").await;
    assert_eq!(
        f.vertices().get("pl-in").await.expect("in").data["spec"]["interStepBufferServiceName"],
        json!("my-isb")
    );
    assert_eq!(phase(&running), "Running");
}

#[tokio::test]
async fn invalid_edge_and_failing_isbsvc_fail_the_pipeline() {
    let f = Fixture::new("sim-invalid").await;
    f.create_isbsvc("bad", json!({"jetstream": {"version": "0.0.0"}}))
        .await;
    let isb = wait(&f.isbsvcs(), "bad", "isbsvc Failed", |o| {
        phase(o) == "Failed"
    })
    .await;
    assert_eq!(
        cond(&isb, "Deployed"),
        Some(("False".into(), "JetStreamStatefulSetFailed".into()))
    );

    let mut spec = pipeline_spec(GOOD_CAT, 30);
    spec["interStepBufferServiceName"] = json!("bad");
    f.create_pipeline("on-bad-isb", spec).await;
    wait(
        &f.pipelines(),
        "on-bad-isb",
        "pipeline on a failed isbsvc Failed",
        |o| phase(o) == "Failed",
    )
    .await;

    f.healthy_isbsvc().await;
    let mut spec = pipeline_spec(GOOD_CAT, 30);
    spec["edges"] = json!([{"from": "not", "to": "cat"}, {"from": "cat", "to": "out"}]);
    f.create_pipeline("invalid", spec).await;
    let failed = wait(&f.pipelines(), "invalid", "invalid pipeline Failed", |o| {
        phase(o) == "Failed"
    })
    .await;
    assert_eq!(
        cond(&failed, "Configured"),
        Some(("False".into(), "InvalidSpec".into()))
    );
    assert!(
        status(&failed)["message"]
            .as_str()
            .is_some_and(|m| m.contains("not"))
    );
}

#[tokio::test]
async fn fail_after_turns_a_running_pipeline_failed() {
    let f = Fixture::new("sim-failafter").await;
    f.healthy_isbsvc().await;
    f.create_pipeline("pl", pipeline_spec(GOOD_CAT, 30)).await;
    wait_pipeline_running(&f, "pl").await;
    let t0 = Instant::now();
    f.sim.set_pipeline_behaviour(
        &f.ns,
        "pl",
        PipelineBehaviour::FailAfter(Duration::from_secs(2)),
    );
    wait(&f.pipelines(), "pl", "pipeline Failed", |o| {
        phase(o) == "Failed"
    })
    .await;
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "failed after {:?}",
        t0.elapsed()
    );
    // A Failed pipeline never pauses.
    f.patch_spec(
        &f.pipelines(),
        "pl",
        json!({"lifecycle": {"desiredPhase": "Paused"}}),
    )
    .await;
    let after = wait(&f.pipelines(), "pl", "generation observed", observed).await;
    assert_eq!(phase(&after), "Failed");
}

#[tokio::test]
async fn isbsvc_gets_statefulset_and_pods() {
    let f = Fixture::new("sim-isb").await;
    let rec = PhaseRecorder::start(&f.isbsvcs(), "js");
    f.create_isbsvc("js", json!({"jetstream": {"version": "2.10.17", "replicas": 2, "persistence": {"volumeSize": "1Gi"}}}))
        .await;
    let isb = wait(&f.isbsvcs(), "js", "isbsvc Running", |o| {
        healthy(o, "Running")
    })
    .await;
    assert_eq!(status(&isb)["type"], json!("jetstream"));
    assert!(
        status(&isb)["config"]["jetstream"]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("nats://isbsvc-js-js-svc."))
    );
    assert_eq!(
        cond(&isb, "ChildrenResourcesHealthy").map(|c| c.0),
        Some("True".into())
    );
    assert!(isb.finalizers().iter().any(|x| x == "isbsvc-controller"));
    let phases: Vec<String> = rec.phases().into_iter().filter(|p| !p.is_empty()).collect();
    assert_eq!(phases, vec!["Pending", "Running"], "phases seen");

    let sts_api: Api<StatefulSet> = Api::namespaced(f.client.clone(), &f.ns);
    let sts = sts_api.get("isbsvc-js-js").await.expect("statefulset");
    assert_eq!(
        sts.spec.as_ref().and_then(|s| s.replicas),
        Some(3),
        "2 replicas become 3"
    );
    let sts_status = sts.status.clone().expect("sts status");
    assert_eq!(sts_status.observed_generation, sts.metadata.generation);
    assert_eq!(sts_status.updated_replicas, Some(3));
    assert_eq!(sts_status.ready_replicas, Some(3));
    assert_eq!(
        sts.labels()
            .get("numaflow.numaproj.io/isbsvc-name")
            .map(String::as_str),
        Some("js")
    );
    assert_eq!(
        sts.owner_references().first().map(|o| o.kind.as_str()),
        Some("InterStepBufferService")
    );
    let mut names: Vec<String> = f
        .pods_with("numaflow.numaproj.io/isbsvc-name=js")
        .await
        .iter()
        .filter(|p| pod_ready(p))
        .map(|p| p.name_any())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec!["isbsvc-js-js-0", "isbsvc-js-js-1", "isbsvc-js-js-2"]
    );

    f.isbsvcs()
        .delete("js", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("isbsvc gone", || async {
        f.isbsvcs()
            .get_opt("js")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn monovertex_runs_pauses_at_once_and_can_fail() {
    let f = Fixture::new("sim-mvtx").await;
    let mv = json!({
        "apiVersion": "numaflow.numaproj.io/v1alpha1",
        "kind": "MonoVertex",
        "metadata": {"name": "mv"},
        "spec": {
            "scale": {"min": 2, "max": 3},
            "source": {"udsource": {"container": {"image": "quay.io/numaio/numaflow-rs/simple-source:stable"}}},
            "sink": {"blackhole": {}},
        },
    });
    f.create(&f.monovertices(), mv).await;
    let running = wait(&f.monovertices(), "mv", "monovertex Running", |o| {
        healthy(o, "Running") && status(o)["readyReplicas"] == json!(2)
    })
    .await;
    assert_eq!(status(&running)["desiredReplicas"], json!(2));
    for ty in ["Deployed", "DaemonHealthy", "PodsHealthy"] {
        assert_eq!(cond(&running, ty).map(|c| c.0), Some("True".into()), "{ty}");
    }
    let pods = f.pods_with("app.kubernetes.io/component=mono-vertex,numaflow.numaproj.io/mono-vertex-name=mv,app.kubernetes.io/name=mv").await;
    assert_eq!(pods.len(), 2);
    assert!(pods.iter().all(pod_ready));
    let daemon = f.pods_with("app.kubernetes.io/component=mono-vertex-daemon,numaflow.numaproj.io/mono-vertex-name=mv").await;
    assert_eq!(daemon.len(), 1);

    let rec = PhaseRecorder::start(&f.monovertices(), "mv");
    f.patch_spec(
        &f.monovertices(),
        "mv",
        json!({"lifecycle": {"desiredPhase": "Paused"}}),
    )
    .await;
    let paused = wait(&f.monovertices(), "mv", "monovertex Paused", |o| {
        phase(o) == "Paused" && observed(o)
    })
    .await;
    assert_eq!(status(&paused)["desiredReplicas"], json!(0));
    assert!(
        !rec.phases().iter().any(|p| p == "Pausing"),
        "no Pausing for a MonoVertex: {:?}",
        rec.phases()
    );
    eventually("monovertex pods gone", || async {
        f.pods_with("app.kubernetes.io/component=mono-vertex")
            .await
            .is_empty()
            .then_some(())
    })
    .await;

    f.patch_spec(
        &f.monovertices(),
        "mv",
        json!({"lifecycle": {"desiredPhase": "Running"}}),
    )
    .await;
    wait(&f.monovertices(), "mv", "monovertex Running again", |o| {
        healthy(o, "Running")
    })
    .await;
    f.sim.set_monovertex_behaviour(
        &f.ns,
        "mv",
        MonoVertexBehaviour::FailAfter(Duration::from_secs(1)),
    );
    wait(&f.monovertices(), "mv", "monovertex Failed", |o| {
        phase(o) == "Failed"
    })
    .await;
}

#[tokio::test]
async fn numaflow_controller_deployment_becomes_available() {
    let f = Fixture::new("sim-nc").await;
    let api: Api<Deployment> = Api::namespaced(f.client.clone(), &f.ns);
    let deployment = |name: &str, image: &str| -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app.kubernetes.io/name": "controller-manager", "instance": name}},
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/name": "controller-manager", "instance": name}},
                    "spec": {"containers": [{"name": "controller-manager", "image": image}]},
                },
            },
        }))
        .expect("deployment")
    };
    api.create(
        &PostParams::default(),
        &deployment("numaflow-controller", "quay.io/numaproj/numaflow:v1.5.2"),
    )
    .await
    .expect("create");
    api.create(
        &PostParams::default(),
        &deployment(
            "numaflow-controller-bad",
            "quay.io/numaproj/numaflow:invalid",
        ),
    )
    .await
    .expect("create");
    let conds = |d: &Deployment, ty: &str| {
        d.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == ty))
            .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
    };
    let good = wait(
        &api,
        "numaflow-controller",
        "deployment available",
        move |d| {
            d.status
                .as_ref()
                .is_some_and(|s| s.available_replicas == Some(1))
        },
    )
    .await;
    let st = good.status.clone().expect("status");
    assert_eq!(st.observed_generation, good.metadata.generation);
    assert_eq!(
        (st.replicas, st.updated_replicas, st.ready_replicas),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(
        conds(&good, "Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
    assert_eq!(
        conds(&good, "Progressing"),
        Some(("True".into(), "NewReplicaSetAvailable".into()))
    );

    let bad = wait(&api, "numaflow-controller-bad", "deployment status", |d| {
        d.status.as_ref().is_some_and(|s| s.replicas == Some(1))
    })
    .await;
    assert_eq!(
        conds(&bad, "Available"),
        Some(("False".into(), "MinimumReplicasUnavailable".into()))
    );
    assert_eq!(
        bad.status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0),
        0
    );
    assert_eq!(
        bad.status.as_ref().and_then(|s| s.unavailable_replicas),
        Some(1)
    );

    // A new template rolls the pods.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "controller-manager", "image": "quay.io/numaproj/numaflow:v1.8.1"}]}}}});
    api.patch(
        "numaflow-controller",
        &PatchParams::default(),
        &Patch::Strategic(patch),
    )
    .await
    .expect("patch");
    wait(
        &api,
        "numaflow-controller",
        "new generation available",
        |d| {
            d.status.as_ref().is_some_and(|s| {
                s.observed_generation == d.metadata.generation && s.available_replicas == Some(1)
            })
        },
    )
    .await;
    let pods = f.pods_with("instance=numaflow-controller").await;
    assert_eq!(pods.len(), 1);
    let image = pods[0]
        .spec
        .as_ref()
        .and_then(|s| s.containers[0].image.clone());
    assert_eq!(image.as_deref(), Some("quay.io/numaproj/numaflow:v1.8.1"));
}

/// The Deployments of Numaflow's install manifest (as Numaplane applies it from the controller
/// definitions) become available: numaflow-controller, numaflow-server and the dex server.
#[tokio::test]
async fn numaflow_install_deployments_become_available() {
    let f = Fixture::new("sim-install").await;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/numaflow-controller-definitions/controller_def_1.8.1.yaml"
    );
    let cm: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(path).expect("definitions")).expect("yaml");
    let defs: Value = serde_saphyr::from_str(
        cm["data"]["controller_definitions.yaml"]
            .as_str()
            .expect("data"),
    )
    .expect("definitions yaml");
    let full_spec = defs["controllerDefinitions"][0]["fullSpec"]
        .as_str()
        .expect("fullSpec")
        .replace("{{ .InstanceSuffix }}", "")
        .replace("{{ .InstanceID }}", "");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&full_spec).expect("manifests");
    let api: Api<Deployment> = Api::namespaced(f.client.clone(), &f.ns);
    let mut names = Vec::new();
    for doc in docs.into_iter().filter(|d| d["kind"] == "Deployment") {
        let d: Deployment = serde_json::from_value(doc).expect("deployment");
        names.push(d.name_any());
        api.create(&PostParams::default(), &d)
            .await
            .expect("create deployment");
    }
    assert!(
        names.contains(&"numaflow-controller".to_owned()),
        "{names:?}"
    );
    for name in names {
        wait(&api, &name, "deployment available", |d| {
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            d.status.as_ref().is_some_and(|s| {
                s.observed_generation == d.metadata.generation && s.available_replicas == Some(want)
            })
        })
        .await;
    }
}
