//! kubectl-numaplane against a real kube-apiserver: rollouts, children and statuses are written
//! directly with the admin client (no operator), then the built binary is run and its output,
//! exit code and writes are checked.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use numaplane_api::keys::{annotations, labels};
use numaplane_api::numaflow::{AnalysisRun, InterStepBufferService, MonoVertex, Pipeline, Vertex};
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowControllerRollout, PipelineRollout,
};
use numaplane_testenv::TestEnv;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::fmt::Debug;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

mod support;
use support::{condition, create, deployed_status, pipeline_rollout};

const BIN: &str = env!("CARGO_BIN_EXE_kubectl-numaplane");

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn command(env: &TestEnv, ns: &str, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(args)
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(["-n", ns])
        .env("NO_COLOR", "1")
        .env_remove("KUBECONFIG")
        .kill_on_drop(true);
    cmd
}

async fn run(env: &TestEnv, ns: &str, args: &[&str]) -> Out {
    let out = tokio::time::timeout(Duration::from_secs(60), command(env, ns, args).output())
        .await
        .unwrap_or_else(|_| panic!("kubectl-numaplane {args:?} did not finish within 60s"))
        .expect("running kubectl-numaplane");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn set_status<K>(client: &Client, ns: &str, name: &str, status: Value)
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    Api::<K>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .expect("patch status");
}

fn mono_vertex_rollout(name: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": name},
        "spec": {"monoVertex": {"spec": {"source": {"udsource": {"container": {"image": "src"}}},
                                         "sink": {"log": {}}}}}
    })
}

#[tokio::test]
async fn get_shows_the_tree() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-get").await;

    let mut status = deployed_status(1);
    status["riders"] = json!([{"groupVersionKind": {"group": "", "version": "v1", "kind": "ConfigMap"}, "name": "cm-my-pipeline-0"}]);
    create::<PipelineRollout>(&client, &ns, pipeline_rollout("my-pipeline"), Some(status)).await;
    let child: Pipeline = create(
        &client,
        &ns,
        json!({
            "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "Pipeline",
            "metadata": {"name": "my-pipeline-0", "labels": {
                labels::PARENT_ROLLOUT_NAME: "my-pipeline", labels::UPGRADE_STATE: "promoted"}},
            "spec": {"lifecycle": {"desiredPhase": "Paused"}, "vertices": []}
        }),
        Some(
            json!({"phase": "Pausing", "drainedOnPause": false, "conditions": [
                condition("DaemonServiceHealthy", "True", "Healthy", ""),
                condition("VerticesHealthy", "False", "Progressing", "1 vertex not ready"),
            ]}),
        ),
    )
    .await;
    for (vertex, ready) in [("in", 1), ("out", 0)] {
        create::<Vertex>(
            &client,
            &ns,
            json!({
                "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "Vertex",
                "metadata": {"name": format!("my-pipeline-0-{vertex}"),
                             "labels": {labels::NUMAFLOW_PIPELINE_NAME: "my-pipeline-0"}},
                "spec": {"name": vertex}
            }),
            Some(json!({"readyReplicas": ready, "desiredReplicas": 1, "replicas": 1})),
        )
        .await;
    }
    let uid = child.metadata.uid.clone().expect("uid");
    create::<AnalysisRun>(
        &client,
        &ns,
        json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisRun",
            "metadata": {"name": "my-pipeline-0", "ownerReferences": [{
                "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "Pipeline",
                "name": "my-pipeline-0", "uid": uid, "controller": true}]},
            "spec": {"metrics": [{"name": "success-rate", "provider": {"job": {"spec": {"template": {"spec": {"containers": []}}}}}}]},
            "status": {"phase": "Successful", "metricResults": [{"name": "success-rate", "phase": "Successful"}]}
        }),
        None,
    )
    .await;
    // A second rollout of another kind, waiting on its child.
    create::<MonoVertexRollout>(
        &client,
        &ns,
        mono_vertex_rollout("my-mvtx"),
        Some(json!({"phase": "Pending", "message": "Progressing", "observedGeneration": 1,
                    "conditions": [condition("ChildResourcesHealthy", "False", "Progressing", "MonoVertex Progressing")]})),
    )
    .await;
    create::<MonoVertex>(
        &client,
        &ns,
        json!({
            "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "MonoVertex",
            "metadata": {"name": "my-mvtx-0", "labels": {
                labels::PARENT_ROLLOUT_NAME: "my-mvtx", labels::UPGRADE_STATE: "promoted"}},
            "spec": {}
        }),
        Some(
            json!({"phase": "Running", "readyReplicas": 1, "desiredReplicas": 2,
                    "conditions": [condition("PodsHealthy", "True", "Healthy", "")]}),
        ),
    )
    .await;

    let out = run(env, &ns, &["get"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let text = &out.stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("PipelineRollout/my-pipeline  Deployed  [Healthy]  age "),
        "{text}"
    );
    assert!(
        lines[1]
            .starts_with("├─ Pipeline/my-pipeline-0  promoted  Pausing  Unhealthy  pods 1/2  age "),
        "{text}"
    );
    assert_eq!(
        lines[2],
        "│  ├─ pause: desiredPhase Paused, phase Pausing, drainedOnPause false"
    );
    assert_eq!(
        lines[3],
        "│  ├─ VerticesHealthy=False (Progressing): 1 vertex not ready"
    );
    assert_eq!(
        lines[4],
        "│  └─ AnalysisRun/my-pipeline-0  Successful  success-rate=Successful"
    );
    assert_eq!(lines[5], "└─ rider ConfigMap/cm-my-pipeline-0");
    assert_eq!(lines[6], "");
    assert!(
        lines[7].starts_with("MonoVertexRollout/my-mvtx  Pending  [Unhealthy]  age "),
        "{text}"
    );
    assert_eq!(lines[8], "  message: Progressing");
    assert_eq!(
        lines[9],
        "  waiting: ChildResourcesHealthy=False (Progressing): MonoVertex Progressing"
    );
    assert!(
        lines[10]
            .starts_with("└─ MonoVertex/my-mvtx-0  promoted  Running  Healthy  pods 1/2  age "),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "no colour when not a terminal");

    // One kind, by alias and name; json for scripts.
    let out = run(env, &ns, &["get", "pr", "my-pipeline", "-o", "json"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("json output");
    assert_eq!(v["rollouts"].as_array().map(Vec::len), Some(1));
    let pr = &v["rollouts"][0];
    assert_eq!(pr["kind"], "PipelineRollout");
    assert_eq!(pr["namespace"], ns.as_str());
    assert_eq!(pr["phase"], "Deployed");
    assert_eq!(pr["children"][0]["name"], "my-pipeline-0");
    assert_eq!(pr["children"][0]["pods"], json!({"ready": 1, "desired": 2}));
    assert_eq!(pr["children"][0]["pause"]["drainedOnPause"], false);
    assert_eq!(pr["children"][0]["analysisRuns"][0]["phase"], "Successful");

    let out = run(env, &ns, &["get", "mvr", "-o", "yaml"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("name: my-mvtx-0"), "{}", out.stdout);
    assert!(!out.stdout.contains("my-pipeline"), "{}", out.stdout);

    let out = run(env, &ns, &["get", "pr", "nope"]).await;
    assert_eq!(out.code, 0);
    assert_eq!(
        out.stdout,
        format!("No PipelineRollout named \"nope\" in namespace {ns}.\n")
    );

    let out = run(env, &ns, &["get", "pipelines"]).await;
    assert_eq!(out.code, 2, "usage error");
    assert!(out.stderr.contains("unknown kind"), "{}", out.stderr);
}

#[tokio::test]
async fn get_watch_redraws_on_change() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-watch").await;
    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("w"),
        Some(json!({"phase": "Pending", "message": "Progressing"})),
    )
    .await;

    let mut child = command(env, &ns, &["get", "pr", "w", "-w"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn get -w");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut seen = String::new();
    let mut next_line = async || {
        tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("get -w printed nothing within 30s")
            .expect("reading stdout")
            .expect("get -w ended")
    };
    loop {
        let line = next_line().await;
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("PipelineRollout/w  Pending") {
            break;
        }
    }
    set_status::<PipelineRollout>(&client, &ns, "w", deployed_status(1)).await;
    loop {
        let line = next_line().await;
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("PipelineRollout/w  Deployed  [Healthy]") {
            break;
        }
    }
    assert!(
        seen.contains("---\n"),
        "redraws are separated when not on a terminal: {seen}"
    );
    child.kill().await.expect("kill get -w");
}

#[tokio::test]
async fn list_shows_one_line_per_rollout_and_watches_changes() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-list").await;
    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("p"),
        Some(deployed_status(1)),
    )
    .await;
    create::<MonoVertexRollout>(
        &client,
        &ns,
        mono_vertex_rollout("m"),
        Some(json!({
            "phase": "Pending", "message": "Progressing", "observedGeneration": 1,
            "upgradeInProgress": "Progressive",
            "progressiveStatus": {"upgradingMonoVertexStatus": {
                "name": "m-1", "assessmentResult": "Unknown"}}
        })),
    )
    .await;
    let out = run(env, &ns, &["list"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "KIND", "NAME", "PHASE", "UPGRADE", "TRIAL", "HEALTH", "AGE", "MESSAGE"
        ],
        "{}",
        out.stdout
    );
    assert_eq!(
        lines.len(),
        3,
        "a header and one line per rollout: {}",
        out.stdout
    );
    let m = &lines[1];
    assert_eq!(
        &m[..7],
        [
            "MonoVertexRollout",
            "m",
            "Pending",
            "Progressive",
            "m-1",
            "(Unknown)",
            "-"
        ]
    );
    assert_eq!(m[8..].join(" "), "Progressing", "{}", out.stdout);
    let p = &lines[2];
    assert_eq!(
        &p[..6],
        ["PipelineRollout", "p", "Deployed", "-", "-", "Healthy"]
    );

    let out = run(env, &ns, &["list", "pr"]).await;
    assert_eq!(
        out.stdout.lines().count(),
        2,
        "only PipelineRollouts: {}",
        out.stdout
    );
    let out = run(env, &ns, &["list", "-A"]).await;
    assert!(
        out.stdout.starts_with("NAMESPACE") && out.stdout.lines().any(|l| l.starts_with(&ns)),
        "{}",
        out.stdout
    );

    // -w: the list, then a line for each change.
    let mut child = command(env, &ns, &["list", "-w"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn list -w");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut next_line = async || {
        tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("list -w printed nothing within 30s")
            .expect("reading stdout")
            .expect("list -w ended")
    };
    for _ in 0..3 {
        next_line().await;
    }
    set_status::<MonoVertexRollout>(&client, &ns, "m", deployed_status(1)).await;
    let changed = next_line().await;
    let cells: Vec<&str> = changed.split_whitespace().collect();
    assert_eq!(
        &cells[..3],
        ["MonoVertexRollout", "m", "Deployed"],
        "{changed}"
    );
    child.kill().await.expect("kill list -w");
}

fn desired_phase(obj: &Value, field: &str) -> Value {
    obj.pointer(&format!("/spec/{field}/spec/lifecycle/desiredPhase"))
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn pause_and_resume() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-pause").await;
    create::<PipelineRollout>(&client, &ns, pipeline_rollout("p"), None).await;
    create::<MonoVertexRollout>(&client, &ns, mono_vertex_rollout("m"), None).await;
    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), &ns);
    let mvrs: Api<MonoVertexRollout> = Api::namespaced(client.clone(), &ns);
    let get_pr = async || serde_json::to_value(prs.get("p").await.expect("get")).expect("json");

    let out = run(env, &ns, &["pause", "p"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("PipelineRollout/p paused"),
        "{}",
        out.stdout
    );
    let pr = get_pr().await;
    assert_eq!(desired_phase(&pr, "pipeline"), "Paused");
    assert_eq!(
        pr["spec"]["pipeline"]["spec"]["vertices"][0]["name"], "in",
        "rest of the spec kept"
    );
    let managers: Vec<&str> = pr["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"kubectl-numaplane"), "{managers:?}");

    let out = run(env, &ns, &["pause", "p"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: PipelineRollout p is already paused (desiredPhase Paused)\n"
    );

    let out = run(env, &ns, &["resume", "p", "--fast"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let pr = get_pr().await;
    assert_eq!(desired_phase(&pr, "pipeline"), "Running");
    assert_eq!(pr["spec"]["strategy"]["pauseResume"]["fastResume"], true);

    let out = run(env, &ns, &["resume", "p"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: PipelineRollout p is not paused (desiredPhase Running)\n"
    );

    // MonoVertexRollouts, found by name.
    let out = run(env, &ns, &["pause", "m"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mvr = serde_json::to_value(mvrs.get("m").await.expect("get")).expect("json");
    assert_eq!(desired_phase(&mvr, "monoVertex"), "Paused");
    let out = run(env, &ns, &["resume", "m"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mvr = serde_json::to_value(mvrs.get("m").await.expect("get")).expect("json");
    assert_eq!(desired_phase(&mvr, "monoVertex"), "Running");
    assert_eq!(
        mvr["spec"].get("strategy"),
        None,
        "slow resume leaves the strategy alone"
    );

    // A name both kinds use needs --kind.
    create::<MonoVertexRollout>(&client, &ns, mono_vertex_rollout("p"), None).await;
    let out = run(env, &ns, &["pause", "p"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("choose one with --kind"),
        "{}",
        out.stderr
    );
    let out = run(env, &ns, &["pause", "p", "--kind", "mvr"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);

    let out = run(env, &ns, &["pause", "nope"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        format!(
            "error: no PipelineRollout or MonoVertexRollout named \"nope\" in namespace {ns}\n"
        )
    );
    let out = run(env, &ns, &["pause", "x", "--kind", "isbr"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("ISBServiceRollouts cannot be paused"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn allow_data_loss_sets_and_removes_the_annotation() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-adl").await;
    create::<PipelineRollout>(&client, &ns, pipeline_rollout("p"), None).await;
    create::<MonoVertexRollout>(&client, &ns, mono_vertex_rollout("m"), None).await;
    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), &ns);
    let annotation = async || {
        prs.get("p")
            .await
            .expect("get")
            .metadata
            .annotations
            .and_then(|a| a.get(annotations::ALLOW_DATA_LOSS).cloned())
    };

    let out = run(env, &ns, &["allow-data-loss", "p"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(annotation().await.as_deref(), Some("true"));
    let out = run(env, &ns, &["allow-data-loss", "p"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("already allows data loss"),
        "{}",
        out.stderr
    );
    let out = run(env, &ns, &["get", "pr", "p"]).await;
    assert!(
        out.stdout.contains("  allow-data-loss: true\n"),
        "{}",
        out.stdout
    );

    let out = run(env, &ns, &["allow-data-loss", "p", "--off"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(annotation().await, None);
    let out = run(env, &ns, &["allow-data-loss", "p", "--off"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("does not have the annotation"),
        "{}",
        out.stderr
    );

    let out = run(env, &ns, &["allow-data-loss", "m"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: allow-data-loss applies only to PipelineRollouts; m is a MonoVertexRollout\n"
    );
}

#[tokio::test]
async fn history_prints_the_recorded_attempts() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-history").await;
    let mut status = deployed_status(3);
    status["upgradeHistory"] = json!([
        {"child": "p-0", "strategy": "DirectApply", "generation": 1,
         "startTime": "2026-12-03T10:00:00Z", "endTime": "2026-12-03T10:00:00Z",
         "outcome": "Created"},
        {"child": "p-1", "previousChild": "p-0", "strategy": "Progressive", "generation": 2,
         "startTime": "2026-12-03T10:05:00Z", "endTime": "2026-12-03T10:06:10Z",
         "outcome": "Failed", "reasons": ["aborted by the user"],
         "changedFields": ["spec.pipeline.spec.vertices[1].udf.container.image"]}
    ]);
    create::<PipelineRollout>(&client, &ns, pipeline_rollout("p"), Some(status.clone())).await;
    create::<MonoVertexRollout>(&client, &ns, mono_vertex_rollout("m"), None).await;

    let out = run(env, &ns, &["history", "p"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!(
            "PipelineRollout {ns}/p: 2 upgrade attempts (oldest first)
#  CHILD  STRATEGY     STARTED               DURATION  OUTCOME
1  p-0    DirectApply  2026-12-03T10:00:00Z  0s        Created
2  p-1    Progressive  2026-12-03T10:05:00Z  70s       Failed
   from p-0
   changed: spec.pipeline.spec.vertices[1].udf.container.image
   reason: aborted by the user
"
        )
    );
    // The records as stored, for scripts.
    let out = run(env, &ns, &["history", "p", "-o", "json"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v["kind"], "PipelineRollout");
    assert_eq!(v["upgradeHistory"], status["upgradeHistory"]);

    let out = run(env, &ns, &["history", "m"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!("MonoVertexRollout {ns}/m: no upgrade recorded yet\n")
    );
    let out = run(env, &ns, &["history", "nope"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .contains("no PipelineRollout or MonoVertexRollout"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn wait_exit_codes() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-wait").await;

    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("ok"),
        Some(deployed_status(1)),
    )
    .await;
    let out = run(
        env,
        &ns,
        &["wait", "ok", "--for", "deployed", "--timeout", "3s"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "PipelineRollout/ok is deployed\n");
    let out = run(
        env,
        &ns,
        &["wait", "ok", "--for", "healthy", "--timeout", "3s"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);

    // Deployed for an older generation: not deployed.
    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("stale"),
        Some(json!({"phase": "Deployed", "message": "Deployed", "observedGeneration": 7})),
    )
    .await;
    let started = std::time::Instant::now();
    let out = run(
        env,
        &ns,
        &["wait", "stale", "--for", "deployed", "--timeout", "3s"],
    )
    .await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert_eq!(
        out.stderr,
        "error: timed out after 3s waiting for PipelineRollout/stale to be deployed: \
         phase Deployed; observedGeneration 7 != generation 1\n"
    );

    // Deployed but unhealthy: deployed yes, healthy no.
    let mut status = deployed_status(1);
    status["conditions"][1] = condition(
        "ChildResourcesHealthy",
        "False",
        "Progressing",
        "Pipeline Progressing",
    );
    create::<PipelineRollout>(&client, &ns, pipeline_rollout("sick"), Some(status)).await;
    let out = run(
        env,
        &ns,
        &["wait", "sick", "--for", "deployed", "--timeout", "3s"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = run(
        env,
        &ns,
        &["wait", "sick", "--for", "healthy", "--timeout", "2s"],
    )
    .await;
    assert_eq!(out.code, 3);
    assert!(
        out.stderr.ends_with("to be healthy: phase Deployed; ChildResourcesHealthy=False (Progressing): Pipeline Progressing\n"),
        "{}",
        out.stderr
    );

    // Failed: exit 1 at once with the message.
    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("bad"),
        Some(json!({"phase": "Failed", "message": "unable to find ISBServiceRollout", "observedGeneration": 1})),
    )
    .await;
    let started = std::time::Instant::now();
    let out = run(
        env,
        &ns,
        &["wait", "bad", "--for", "deployed", "--timeout", "1m"],
    )
    .await;
    assert_eq!(out.code, 1);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(
        out.stderr,
        "error: PipelineRollout/bad failed: phase Failed: unable to find ISBServiceRollout\n"
    );

    // Reached while waiting: the watch sees the status change.
    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("later"),
        Some(json!({"phase": "Pending", "message": "Progressing"})),
    )
    .await;
    let waiter = command(
        env,
        &ns,
        &["wait", "later", "--for", "healthy", "--timeout", "30s"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn wait");
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_status::<PipelineRollout>(&client, &ns, "later", deployed_status(1)).await;
    let out = tokio::time::timeout(Duration::from_secs(30), waiter.wait_with_output())
        .await
        .expect("wait did not return after the rollout became healthy")
        .expect("wait output");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = run(env, &ns, &["wait", "nope", "--for", "deployed"]).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.starts_with("error: no PipelineRollout or MonoVertexRollout or ISBServiceRollout or NumaflowControllerRollout named \"nope\""), "{}", out.stderr);
    let out = run(
        env,
        &ns,
        &["wait", "ok", "--for", "deployed", "--timeout", "soon"],
    )
    .await;
    assert_eq!(out.code, 2);
}

/// A child of `rollout` in the given upgrade state.
fn child_manifest(kind: &str, name: &str, rollout: &str, state: &str) -> Value {
    json!({
        "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": kind,
        "metadata": {"name": name, "labels": {
            labels::PARENT_ROLLOUT_NAME: rollout, labels::UPGRADE_STATE: state}},
        "spec": {}
    })
}

#[tokio::test]
async fn promote_labels_the_trial() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-promote").await;
    create::<PipelineRollout>(&client, &ns, pipeline_rollout("p"), None).await;
    create::<Pipeline>(
        &client,
        &ns,
        child_manifest("Pipeline", "p-0", "p", "promoted"),
        None,
    )
    .await;
    create::<Pipeline>(
        &client,
        &ns,
        child_manifest("Pipeline", "p-1", "p", "trial"),
        None,
    )
    .await;
    // Another rollout's trial is not ours.
    create::<Pipeline>(
        &client,
        &ns,
        child_manifest("Pipeline", "other-1", "other", "trial"),
        None,
    )
    .await;
    let pipelines: Api<Pipeline> = Api::namespaced(client.clone(), &ns);
    let force = async |name: &str| {
        pipelines
            .get(name)
            .await
            .expect("get")
            .metadata
            .labels
            .and_then(|l| l.get(labels::FORCE_PROMOTE).cloned())
    };

    let out = run(env, &ns, &["promote", "p"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "Pipeline/p-1 (trial of PipelineRollout/p) labelled numaplane.numaproj.io/force-promote: \"true\"; the controller promotes it at its next assessment\n"
    );
    assert_eq!(force("p-1").await.as_deref(), Some("true"));
    assert_eq!(force("p-0").await, None, "the promoted child is left alone");
    assert_eq!(force("other-1").await, None);

    let out = run(env, &ns, &["promote", "p"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: Pipeline/p-1 is already being force-promoted (label numaplane.numaproj.io/force-promote present)\n"
    );

    // No trial: refused.
    create::<MonoVertexRollout>(&client, &ns, mono_vertex_rollout("m"), None).await;
    create::<MonoVertex>(
        &client,
        &ns,
        child_manifest("MonoVertex", "m-0", "m", "promoted"),
        None,
    )
    .await;
    let out = run(env, &ns, &["promote", "m"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: MonoVertexRollout m has no progressive upgrade in progress: no MonoVertex labelled numaplane.numaproj.io/upgrade-state=trial to promote\n"
    );
    let mvs: Api<MonoVertex> = Api::namespaced(client.clone(), &ns);
    let m0 = mvs.get("m-0").await.expect("get");
    assert!(
        !m0.metadata
            .labels
            .unwrap_or_default()
            .contains_key(labels::FORCE_PROMOTE)
    );

    let out = run(env, &ns, &["promote", "x", "--kind", "ncr"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("have no trial to promote"),
        "{}",
        out.stderr
    );
    let out = run(env, &ns, &["promote", "nope"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        format!(
            "error: no PipelineRollout or MonoVertexRollout or ISBServiceRollout named \"nope\" in namespace {ns}\n"
        )
    );
}

/// MonoVertexRollout `m` with its promoted child `m-0` and trial `m-1`.
async fn rollout_with_trial(client: &Client, ns: &str) -> Api<MonoVertex> {
    create::<MonoVertexRollout>(client, ns, mono_vertex_rollout("m"), None).await;
    for (name, state) in [("m-0", "promoted"), ("m-1", "trial")] {
        create::<MonoVertex>(
            client,
            ns,
            child_manifest("MonoVertex", name, "m", state),
            None,
        )
        .await;
    }
    Api::namespaced(client.clone(), ns)
}

async fn label_of(mvs: &Api<MonoVertex>, name: &str, key: &str) -> Option<String> {
    mvs.get(name)
        .await
        .expect("get")
        .metadata
        .labels
        .and_then(|l| l.get(key).cloned())
}

/// `verb` (command, label, "being" word) labels trial `m-1` of [`rollout_with_trial`], says what
/// follows (`then`), leaves the promoted child alone, and refuses a second time.
async fn labels_the_trial_once(
    env: &TestEnv,
    ns: &str,
    mvs: &Api<MonoVertex>,
    (command, label, being): (&str, &str, &str),
    then: &str,
) {
    let out = run(env, ns, &[command, "m"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let said =
        format!("MonoVertex/m-1 (trial of MonoVertexRollout/m) labelled {label}: \"true\"; {then}");
    assert!(out.stdout.starts_with(&said), "{}", out.stdout);
    assert_eq!(label_of(mvs, "m-1", label).await.as_deref(), Some("true"));
    assert_eq!(
        label_of(mvs, "m-0", label).await,
        None,
        "the promoted child is left alone"
    );
    let out = run(env, ns, &[command, "m"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        format!("error: MonoVertex/m-1 is already being {being} (label {label} present)\n")
    );
}

#[tokio::test]
async fn abort_labels_the_trial_unless_it_is_force_promoted() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-abort").await;
    let mvs = rollout_with_trial(&client, &ns).await;
    let label = async |name: &str, key: &str| label_of(&mvs, name, key).await;

    labels_the_trial_once(
        env,
        &ns,
        &mvs,
        ("abort", labels::ABORT, "aborted"),
        "the controller fails it now",
    )
    .await;

    // A trial being force-promoted is not aborted: the force-promote label would win.
    create::<MonoVertex>(
        &client,
        &ns,
        child_manifest("MonoVertex", "m-2", "m", "trial"),
        None,
    )
    .await;
    let out = run(env, &ns, &["promote", "m"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = run(env, &ns, &["abort", "m"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .contains("carries label numaplane.numaproj.io/force-promote"),
        "{}",
        out.stderr
    );
    assert_eq!(label("m-2", labels::ABORT).await, None);
    let out = run(env, &ns, &["abort", "x", "--kind", "ncr"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("have no trial to abort"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn retry_labels_only_a_failed_trial() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-retry").await;
    let mvs = rollout_with_trial(&client, &ns).await;
    let label = async |name: &str, key: &str| label_of(&mvs, name, key).await;
    // Still being assessed: refused, nothing written.
    let out = run(env, &ns, &["retry", "m"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: MonoVertex/m-1 has not failed: only a failed or aborted trial is retried (abort it first to start over)\n"
    );
    assert_eq!(label("m-1", labels::RETRY).await, None);

    // Failed: labelled.
    mvs.patch(
        "m-1",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"labels": {labels::PROGRESSIVE_RESULT_STATE: "failed"}}}),
        ),
    )
    .await
    .expect("mark failed");
    labels_the_trial_once(
        env,
        &ns,
        &mvs,
        ("retry", labels::RETRY, "retried"),
        "the controller replaces it by a new trial of the same spec",
    )
    .await;
    let out = run(env, &ns, &["retry", "x", "--kind", "ncr"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("have no trial to retry"),
        "{}",
        out.stderr
    );
}

fn progressive_status(phase: &str, in_progress: &str, upgrading: Value) -> Value {
    json!({
        "phase": phase, "message": if phase == "Pending" { "Progressing" } else { phase },
        "observedGeneration": 1, "upgradeInProgress": in_progress,
        "progressiveStatus": {"upgradingPipelineStatus": upgrading}
    })
}

#[tokio::test]
async fn wait_for_promoted() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-wait-promoted").await;
    let wait = |name: &'static str, timeout: &'static str| {
        ["wait", name, "--for", "promoted", "--timeout", timeout]
    };

    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("done"),
        Some(progressive_status(
            "Deployed",
            "",
            json!({"name": "done-1", "assessmentResult": "Success"}),
        )),
    )
    .await;
    let out = run(env, &ns, &wait("done", "3s")).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "PipelineRollout/done is promoted\n");

    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("failed"),
        Some(progressive_status(
            "Pending",
            "Progressive",
            json!({"name": "failed-1", "assessmentResult": "Failure",
                   "failureReasons": ["child phase is in Failed state"]}),
        )),
    )
    .await;
    let out = run(env, &ns, &wait("failed", "1m")).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: PipelineRollout/failed failed: progressive upgrade failed: trial failed-1: child phase is in Failed state (fix the spec, or force-promote with `kubectl numaplane promote`)\n"
    );

    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("slow"),
        Some(progressive_status(
            "Pending",
            "Progressive",
            json!({"name": "slow-1", "assessmentResult": "Unknown"}),
        )),
    )
    .await;
    let out = run(env, &ns, &wait("slow", "2s")).await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert_eq!(
        out.stderr,
        "error: timed out after 2s waiting for PipelineRollout/slow to be promoted: phase Pending (Progressing); trial slow-1 assessment Unknown, upgrade in progress\n"
    );

    // A direct apply never promotes anything: the wait says so on timeout.
    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("direct"),
        Some(deployed_status(1)),
    )
    .await;
    let out = run(env, &ns, &wait("direct", "1s")).await;
    assert_eq!(out.code, 3);
    assert!(
        out.stderr.ends_with(
            "phase Deployed; no progressive upgrade recorded (status.progressiveStatus has no trial)\n"
        ),
        "{}",
        out.stderr
    );

    // Promoted while waiting.
    let waiter = command(env, &ns, &wait("slow", "30s"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wait");
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_status::<PipelineRollout>(
        &client,
        &ns,
        "slow",
        progressive_status(
            "Deployed",
            "",
            json!({"name": "slow-1", "assessmentResult": "Success", "forcedSuccess": true,
                   "forcedSuccessReason": "force_promote"}),
        ),
    )
    .await;
    let out = tokio::time::timeout(Duration::from_secs(30), waiter.wait_with_output())
        .await
        .expect("wait did not return after the trial was promoted")
        .expect("wait output");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Failed later while waiting: exit 1.
    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("later"),
        Some(progressive_status(
            "Pending",
            "Progressive",
            json!({"name": "later-1", "assessmentResult": "Unknown"}),
        )),
    )
    .await;
    let waiter = command(env, &ns, &wait("later", "30s"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wait");
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_status::<PipelineRollout>(
        &client,
        &ns,
        "later",
        json!({"progressiveStatus": {"upgradingPipelineStatus": {"assessmentResult": "Failure", "failureReasons": ["readyReplicas=0 is less than desiredReplicas=1 (vertex: in)"]}}}),
    )
    .await;
    let out = tokio::time::timeout(Duration::from_secs(30), waiter.wait_with_output())
        .await
        .expect("wait did not return after the assessment failed")
        .expect("wait output");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("readyReplicas=0 is less than desiredReplicas=1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn repo_file(rel: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Installs a shipped ConfigMap (config/manager/...) into `ns`.
async fn install_configmap(client: &Client, ns: &str, rel: &str) {
    let mut cm: ConfigMap = serde_saphyr::from_str(&repo_file(rel)).expect("parse ConfigMap");
    cm.metadata.namespace = Some(ns.to_string());
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create ConfigMap");
}

async fn set_namespace_strategy(client: &Client, ns: &str, strategy: &str) {
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "numaplane-strategy", "labels": {labels::CONFIG: "namespace-level-config"}},
        "data": {"upgradeStrategy": strategy}
    }))
    .expect("ConfigMap");
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "numaplane-strategy",
            &PatchParams::apply("cli-tests").force(),
            &Patch::Apply(&cm),
        )
        .await
        .expect("apply namespace ConfigMap");
}

fn plan_rollout(image: &str, rpu: i64) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "my-pipeline"},
        "spec": {"pipeline": {
            "metadata": {"annotations": {"owner": "{{.pipeline-name}}"}},
            "spec": {
                "interStepBufferServiceName": "default",
                "vertices": [
                    {"name": "in", "source": {"generator": {"rpu": rpu}}},
                    {"name": "cat", "udf": {"container": {"image": image}}},
                    {"name": "out", "sink": {"log": {}}}
                ],
                "edges": [{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}]
            }
        }}
    })
}

/// A namespace `<prefix>-…` for the rollouts, and `<prefix>-ctl-…` with the shipped USDE and
/// controller ConfigMaps (`defaultUpgradeStrategy: progressive`) for `--controller-namespace`.
async fn plan_namespaces(env: &TestEnv, prefix: &str) -> (String, String) {
    let ns = env.create_namespace(prefix).await;
    let ctl = env.create_namespace(&format!("{prefix}-ctl")).await;
    let client = env.client();
    install_configmap(&client, &ctl, "config/manager/usde-config.yaml").await;
    install_configmap(&client, &ctl, "config/manager/controller-config.yaml").await;
    (ns, ctl)
}

/// ISBServiceRollout `default` (JetStream 2.10.3).
fn default_isb_rollout() -> Value {
    json!({"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "ISBServiceRollout",
           "metadata": {"name": "default"},
           "spec": {"interStepBufferService": {"spec": {"jetstream": {"version": "2.10.3"}}}}})
}

/// The promoted child `my-pipeline-<n>` the controller would have made of `applied`, on ISB
/// service child `default-<n>` (its source takes in data: marked to drain before deletion).
fn promoted_pipeline(applied: &Value, n: u32) -> Value {
    let (name, isb) = (format!("my-pipeline-{n}"), format!("default-{n}"));
    let mut live = json!({
        "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "Pipeline",
        "metadata": {"name": name,
            "labels": {labels::PARENT_ROLLOUT_NAME: "my-pipeline", labels::UPGRADE_STATE: "promoted",
                       labels::ISBSVC_NAME: "default", labels::ISBSVC_CHILD_NAME: isb},
            "annotations": {"owner": name, annotations::REQUIRES_DRAIN: "true"}},
        "spec": applied["spec"]["pipeline"]["spec"].clone()
    });
    live["spec"]["interStepBufferServiceName"] = json!(isb);
    live
}

/// ISBServiceRollout `default` with its promoted child `default-<n>`, and the PipelineRollout
/// `plan_rollout("cat:v1", 5)` on it; returns the rollout as applied.
async fn rollouts_on_isb_child(client: &Client, ns: &str, n: u32) -> Value {
    create::<ISBServiceRollout>(client, ns, default_isb_rollout(), None).await;
    create::<InterStepBufferService>(
        client,
        ns,
        child_manifest(
            "InterStepBufferService",
            &format!("default-{n}"),
            "default",
            "promoted",
        ),
        None,
    )
    .await;
    let applied = plan_rollout("cat:v1", 5);
    create::<PipelineRollout>(client, ns, applied.clone(), None).await;
    applied
}

/// `plan -o json` of `manifest` in `ns`, with the controller's ConfigMaps in `ctl`; asserts it
/// exits 0.
async fn plan_json(env: &TestEnv, ns: &str, ctl: &str, manifest: &Value) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("manifest.yaml");
    std::fs::write(&file, serde_saphyr::to_string(manifest).expect("yaml")).expect("write");
    let file = file.display().to_string();
    let args = [
        "plan",
        "-f",
        &file,
        "--controller-namespace",
        ctl,
        "-o",
        "json",
    ];
    let out = run(env, ns, &args).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).expect("json plan")
}

/// After a progressive Numaflow controller upgrade, children carry the promoted controller's
/// instance annotation: `plan` renders the child there as the controller does, so an unchanged
/// manifest is no change (it read as a data-loss change of the instance annotation).
#[tokio::test]
async fn plan_places_the_child_on_the_promoted_controller_instance() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let (ns, ctl) = plan_namespaces(env, "cli-plan-placed").await;
    create::<NumaflowControllerRollout>(
        &client,
        &ns,
        json!({"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "NumaflowControllerRollout",
               "metadata": {"name": "numaflow-controller"},
               "spec": {"controller": {"version": "1.8.1"}}}),
        Some(json!({"phase": "Deployed", "observedGeneration": 1,
            "progressiveStatus": {"promotedControllerStatus": {
                "name": "numaflow-controller-1", "instanceID": "1", "version": "1.8.1"}}})),
    )
    .await;
    let applied = rollouts_on_isb_child(&client, &ns, 2).await;
    let mut live = promoted_pipeline(&applied, 2);
    live["metadata"]["annotations"]["numaflow.numaproj.io/instance"] = json!("1");
    create::<Pipeline>(&client, &ns, live, None).await;

    let p = plan_json(env, &ns, &ctl, &applied).await;
    assert_eq!(p["strategy"], "no-op", "{p}");
    assert_eq!(p["fields"], json!([]), "{p}");
}

/// A pipeline that takes in data is marked `requires-drain` by the controller, so that it is
/// drained before it is deleted. A live pipeline without the mark (the Go operator's, say) is
/// given it directly: `plan` of the unchanged manifest says so, as the controller does it (the
/// plugin's own rendering left the mark out and answered no change).
#[tokio::test]
async fn plan_adds_the_drain_mark_as_the_controller_does() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let (ns, ctl) = plan_namespaces(env, "cli-plan-drain-mark").await;
    let applied = rollouts_on_isb_child(&client, &ns, 0).await;
    let mut live = promoted_pipeline(&applied, 0);
    live["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations")
        .remove(annotations::REQUIRES_DRAIN);
    create::<Pipeline>(&client, &ns, live, None).await;

    let p = plan_json(env, &ns, &ctl, &applied).await;
    assert_eq!(p["strategy"], "direct-apply", "{p}");
    assert_eq!(
        p["fields"],
        json!([{"path": format!("metadata.annotations[{}]", annotations::REQUIRES_DRAIN),
                "class": "metadata"}]),
        "{p}"
    );
}

/// While its ISBServiceRollout asks its pipelines to pause (an ISB service upgrade under
/// pause-and-drain), the controller keeps the pipeline paused: `plan` of the unchanged manifest
/// is no change, and says why the pipeline is paused.
#[tokio::test]
async fn plan_keeps_the_pipeline_paused_while_a_pause_is_requested() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let (ns, ctl) = plan_namespaces(env, "cli-plan-paused").await;
    create::<ISBServiceRollout>(
        &client,
        &ns,
        default_isb_rollout(),
        Some(json!({"phase": "Pending", "observedGeneration": 1,
                    "upgradeInProgress": "PipelinePauseAndDrain"})),
    )
    .await;
    create::<InterStepBufferService>(
        &client,
        &ns,
        child_manifest("InterStepBufferService", "default-0", "default", "promoted"),
        None,
    )
    .await;
    let applied = plan_rollout("cat:v1", 5);
    create::<PipelineRollout>(&client, &ns, applied.clone(), None).await;
    let mut live = promoted_pipeline(&applied, 0);
    live["spec"]["lifecycle"]["desiredPhase"] = json!("Paused");
    create::<Pipeline>(&client, &ns, live, None).await;

    let p = plan_json(env, &ns, &ctl, &applied).await;
    assert_eq!(p["strategy"], "no-op", "{p}");
    assert_eq!(p["fields"], json!([]), "{p}");
    assert!(
        p["notes"].as_array().is_some_and(|n| n.iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.contains("ISBServiceRollout default asks its pipelines to pause")))),
        "{p}"
    );
}

#[tokio::test]
async fn plan_reports_the_strategy() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let (ns, ctl) = plan_namespaces(env, "cli-plan").await;

    // The live state the controller would have produced for plan_rollout("cat:v1", 5).
    let applied = rollouts_on_isb_child(&client, &ns, 0).await;
    create::<Pipeline>(&client, &ns, promoted_pipeline(&applied, 0), None).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, manifest: &Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, serde_saphyr::to_string(manifest).expect("yaml")).expect("write");
        path.display().to_string()
    };
    let plan = async |file: &str| {
        let out = run(
            env,
            &ns,
            &[
                "plan",
                "-f",
                file,
                "--controller-namespace",
                &ctl,
                "-o",
                "json",
            ],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        serde_json::from_str::<Value>(&out.stdout).expect("json plan")
    };

    // No change.
    let same = write("same.yaml", &applied);
    let p = plan(&same).await;
    assert_eq!(p["strategy"], "no-op", "{p}");
    assert_eq!(p["liveChild"], "Pipeline/my-pipeline-0");
    assert_eq!(p["userStrategy"], "progressive");
    assert_eq!(p["fields"], json!([]));

    // Under pause-and-drain: an image change risks data loss, a generator rate does not.
    set_namespace_strategy(&client, &ns, "pause-and-drain").await;
    let image = write("image.yaml", &plan_rollout("cat:v2", 5));
    let p = plan(&image).await;
    assert_eq!(p["strategy"], "pause-and-drain", "{p}");
    assert_eq!(p["recreate"], false);
    assert_eq!(
        p["fields"],
        json!([{"path": "spec.vertices.udf.container.image", "class": "dataLoss"}])
    );
    assert_eq!(
        p["userStrategySource"],
        format!("ConfigMap {ns}/numaplane-strategy (upgradeStrategy)")
    );
    let rate = write("rate.yaml", &plan_rollout("cat:v1", 10));
    let p = plan(&rate).await;
    assert_eq!(p["strategy"], "direct-apply", "{p}");
    assert_eq!(
        p["fields"],
        json!([{"path": "spec.vertices[0].source.generator.rpu", "class": "other"}])
    );

    // Under progressive the generator is a progressive field.
    set_namespace_strategy(&client, &ns, "progressive").await;
    let p = plan(&rate).await;
    assert_eq!(p["strategy"], "progressive", "{p}");
    assert_eq!(
        p["fields"],
        json!([{"path": "spec.vertices.source.generator", "class": "progressive"}])
    );

    // Text output, and nothing was written.
    let out = run(
        env,
        &ns,
        &["plan", "-f", &image, "--controller-namespace", &ctl],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!(
            "PipelineRollout/my-pipeline in namespace {ns}\n  namespace strategy: progressive (from ConfigMap {ns}/numaplane-strategy (upgradeStrategy))\n  live child: Pipeline/my-pipeline-0\nstrategy: progressive\ndecided by:\n  spec.vertices.udf.container.image  dataLoss\n"
        )
    );
    let pr: PipelineRollout = Api::namespaced(client.clone(), &ns)
        .get("my-pipeline")
        .await
        .expect("get");
    assert_eq!(
        pr.spec.pipeline.spec["vertices"][1]["udf"]["container"]["image"], "cat:v1",
        "plan writes nothing"
    );

    // A rollout that does not exist yet; a file that is not a rollout.
    let mut other = applied.clone();
    other["metadata"]["name"] = json!("new-pipeline");
    let new = write("new.yaml", &other);
    let p = plan(&new).await;
    assert_eq!(p["strategy"], "create");
    let cm = write(
        "cm.yaml",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
    );
    let out = run(env, &ns, &["plan", "-f", &cm]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("is not a Numaplane rollout"),
        "{}",
        out.stderr
    );
    let out = run(env, &ns, &["plan", "-f", "/nonexistent.yaml"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.starts_with("error: reading /nonexistent.yaml"),
        "{}",
        out.stderr
    );

    // What `kubectl apply -f` takes: the PipelineRollout sample of config/samples (a rollout and
    // its AnalysisTemplate).
    let sample = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/samples/numaplane.numaproj.io_v1alpha1_pipelinerollout.yaml"
    );
    let out = run(
        env,
        &ns,
        &["plan", "-f", sample, "--controller-namespace", &ctl],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("PipelineRollout/my-pipeline in namespace example-namespace\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.ends_with(&format!(
            "not planned: AnalysisTemplate/pipeline-template ({sample} document 2 (line 66)): not a Numaplane rollout\n"
        )),
        "{}",
        out.stdout
    );
    // A directory with a file of several documents, one of them broken, and a JSON file.
    let many = dir.path().join("many");
    std::fs::create_dir(&many).expect("mkdir");
    let first = serde_saphyr::to_string(&applied).expect("yaml");
    std::fs::write(
        many.join("a.yaml"),
        format!("{first}---\nkind: PipelineRollout\nmetadata: [unclosed\n"),
    )
    .expect("write");
    std::fs::write(
        many.join("b.json"),
        serde_json::to_string(&other).expect("json"),
    )
    .expect("write");
    let broken_line = first.lines().count() + 3;
    let out = run(
        env,
        &ns,
        &[
            "plan",
            "-f",
            &many.display().to_string(),
            "--controller-namespace",
            &ctl,
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    let all: Value = serde_json::from_str(&out.stdout).expect("json");
    let names: Vec<&Value> = all["plans"]
        .as_array()
        .expect("plans")
        .iter()
        .map(|p| &p["name"])
        .collect();
    assert_eq!(names, ["my-pipeline", "new-pipeline"], "{all}");
    assert_eq!(all["plans"][0]["strategy"], "no-op", "{all}");
    assert_eq!(all["plans"][1]["strategy"], "create", "{all}");
    let a = many.join("a.yaml").display().to_string();
    assert_eq!(
        all["errors"][0]["origin"],
        format!("{a} document 2 (line {})", first.lines().count() + 2)
    );
    assert!(
        out.stderr.starts_with(&format!(
            "error: {a} document 2 (line {}): ",
            first.lines().count() + 2
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("a.yaml:{broken_line}")),
        "the parse error names its line in the file: {}",
        out.stderr
    );
}

#[test]
fn every_command_has_help() {
    for (cmd, expect) in [
        ("promote", "force-promote"),
        ("plan", "pause-and-drain"),
        ("wait", "promoted"),
        ("history", "status.upgradeHistory"),
    ] {
        let out = std::process::Command::new(BIN)
            .args([cmd, "--help"])
            .output()
            .expect("run --help");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{cmd} --help");
        assert!(text.contains(expect), "{cmd} --help: {text}");
        assert!(text.contains("Exit codes:"), "{cmd} --help: {text}");
    }
}

#[tokio::test]
async fn plan_reports_a_progressive_controller_upgrade_only_when_opted_in() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let (ns, ctl) = plan_namespaces(env, "cli-plan-nc").await;
    // The namespace: an ISB service with a pipeline on it, a MonoVertex, and the controller.
    create::<ISBServiceRollout>(&client, &ns, default_isb_rollout(), None).await;
    create::<PipelineRollout>(&client, &ns, plan_rollout("cat:v1", 5), None).await;
    create::<MonoVertexRollout>(&client, &ns, mono_vertex_rollout("mv"), None).await;
    let ncr = |strategy: Option<Value>| {
        let mut r = json!({"apiVersion": "numaplane.numaproj.io/v1alpha1",
            "kind": "NumaflowControllerRollout", "metadata": {"name": "numaflow-controller"},
            "spec": {"controller": {"version": "1.7.5"}}});
        if let Some(s) = strategy {
            r["spec"]["strategy"] = s;
        }
        r
    };
    create::<numaplane_api::NumaflowControllerRollout>(&client, &ns, ncr(None), None).await;
    create::<numaplane_api::NumaflowController>(
        &client,
        &ns,
        json!({"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "NumaflowController",
               "metadata": {"name": "numaflow-controller"}, "spec": {"version": "1.7.5"}}),
        None,
    )
    .await;

    let dir = tempfile::tempdir().expect("tempdir");
    let plan = async |manifest: Value| {
        let path = dir.path().join("ncr.yaml");
        std::fs::write(&path, serde_saphyr::to_string(&manifest).expect("yaml")).expect("write");
        let file = path.display().to_string();
        let out = run(
            env,
            &ns,
            &[
                "plan",
                "-f",
                &file,
                "--controller-namespace",
                &ctl,
                "-o",
                "json",
            ],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        serde_json::from_str::<Value>(&out.stdout).expect("json plan")
    };
    let mut opted = ncr(Some(json!({"progressive": {"maxParallel": 2}})));
    opted["spec"]["controller"]["version"] = json!("1.8.1");
    let p = plan(opted).await;
    assert_eq!(p["strategy"], "progressive", "{p}");
    assert_eq!(p["fields"][0]["path"], "spec.controller.version", "{p}");
    let note = p["notes"]
        .as_array()
        .and_then(|n| {
            n.iter()
                .filter_map(Value::as_str)
                .find(|n| n.contains("Numaflow controller upgrade"))
        })
        .unwrap_or_default()
        .to_string();
    assert!(
        note.starts_with("a progressive Numaflow controller upgrade from 1.7.5 to 1.8.1")
            && note.contains("ISBServiceRollout default with PipelineRollouts my-pipeline; MonoVertexRollout mv (2 at a time)"),
        "{p}"
    );
    // Without the opt-in a version change applies in place, as in the reference.
    let mut plain = ncr(None);
    plain["spec"]["controller"]["version"] = json!("1.8.1");
    let p = plan(plain).await;
    assert_ne!(p["strategy"], "progressive", "{p}");
}

/// `version`: the plugin's own version without a cluster; with one, the image and readiness of
/// the operator Deployment as `config/manager/manager.yaml` ships it.
#[tokio::test]
async fn version_names_the_client_and_the_operator_image() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("cli-version").await;
    let client_line = format!(
        "Client Version: kubectl-numaplane {}",
        env!("CARGO_PKG_VERSION")
    );

    let out = run(env, &ns, &["version", "--client"]).await;
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, client_line.as_str()),
        "{}",
        out.stderr
    );

    let mut manifest: Value = serde_saphyr::from_str(&repo_file("config/manager/manager.yaml"))
        .expect("parse manager.yaml");
    manifest["metadata"]["namespace"] = json!(ns);
    let image = manifest["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .expect("an image")
        .to_string();
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(manifest).expect("Deployment"),
        )
        .await
        .expect("create the operator Deployment");
    let out = run(env, &ns, &["version"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.starts_with(&client_line), "{}", out.stdout);
    let want = format!("Operator: {ns}/numaplane-controller-manager {image} (0/1 ready)");
    assert!(
        out.stdout.lines().any(|l| l == want),
        "want {want:?} in:\n{}",
        out.stdout
    );
}

/// `completion`: a script for each shell, naming every subcommand; bash's parses.
#[tokio::test]
async fn completion_scripts_cover_every_subcommand() {
    let env = TestEnv::shared().await;
    for shell in ["bash", "zsh", "fish"] {
        let out = run(env, "default", &["completion", shell]).await;
        assert_eq!(out.code, 0, "{shell}: {}", out.stderr);
        for sub in [
            "get",
            "pause",
            "resume",
            "allow-data-loss",
            "wait",
            "promote",
            "abort",
            "history",
            "plan",
            "dashboard",
            "version",
            "completion",
        ] {
            assert!(out.stdout.contains(sub), "{shell} completion lacks {sub}");
        }
        if shell == "bash" {
            let dir = tempfile::tempdir().expect("tempdir");
            let script = dir.path().join("completion.bash");
            std::fs::write(&script, &out.stdout).expect("write");
            let check = std::process::Command::new("bash")
                .arg("-n")
                .arg(&script)
                .output()
                .expect("bash -n");
            assert!(
                check.status.success(),
                "bash rejects the script: {}",
                String::from_utf8_lossy(&check.stderr)
            );
        }
    }
}

/// kubectl's connection and authentication flags reach the API server: impersonation with
/// groups, a bearer token, another server address, a request timeout.
#[tokio::test]
async fn kubectl_auth_and_connection_flags() {
    let env = TestEnv::shared().await;
    let ns = env.create_namespace("cli-auth").await;

    let out = run(env, &ns, &["get", "--as", "someone"]).await;
    assert_eq!(
        out.code, 1,
        "impersonating a user without rights: {}",
        out.stdout
    );
    assert!(
        out.stderr.contains("someone") && out.stderr.contains("forbidden"),
        "the refusal names the impersonated user: {}",
        out.stderr
    );
    // A watch it may not make ends with the refusal instead of hanging.
    let out = run(env, &ns, &["get", "-w", "--as", "someone"]).await;
    assert_eq!(out.code, 1, "get -w refused: {}", out.stdout);
    assert!(out.stderr.contains("watch error"), "{}", out.stderr);
    let out = run(
        env,
        &ns,
        &["get", "--as", "someone", "--as-group", "system:masters"],
    )
    .await;
    assert_eq!(out.code, 0, "with a group that may: {}", out.stderr);
    let out = run(env, &ns, &["get", "--as-group", "system:masters"]).await;
    assert_eq!(out.code, 1, "--as-group alone is refused: {}", out.stderr);
    assert!(
        out.stderr.contains("--as-group needs --as"),
        "{}",
        out.stderr
    );

    let out = run(env, &ns, &["get", "--token", "not-a-token"]).await;
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(
        out.stderr.contains("Unauthorized") || out.stderr.contains("401"),
        "a wrong token: {}",
        out.stderr
    );

    let refused = format!("https://127.0.0.1:{}", {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    });
    let out = run(
        env,
        &ns,
        &["get", "--server", &refused, "--request-timeout", "5s"],
    )
    .await;
    assert_eq!(out.code, 1, "nothing listens at --server: {}", out.stdout);

    let out = run(env, &ns, &["get", "--request-timeout", "0"]).await;
    assert_eq!(out.code, 0, "no limit: {}", out.stderr);
    let out = run(env, &ns, &["get", "--request-timeout", "soon"]).await;
    assert_eq!(
        out.code, 2,
        "a bad duration is a command-line error: {}",
        out.stderr
    );
}
