//! The install as users run it: Numaplane's own image (hack/image.sh, from this build's binary)
//! on the test stack's real node, installed by the commands of README.md's "Install" section,
//! running as a pod under `numaplane-sa` and the shipped RBAC. Everything is judged from what the
//! cluster and the host show: the pod's probes and metrics through the API server, the
//! container's process as the kernel sees it, a reference sample going to Deployed, the leader
//! Lease across the loss of its holder, and the API server's audit log across an image upgrade.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use numaplane_testenv::{TestEnv, TestEnvOptions};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use support::install::*;
use support::invariants::Recorder;
use support::{eventually, lease_holder, repo};

const DEPLOYMENT: &str = "numaplane-controller-manager";
const OPERATOR_USER: &str = "system:serviceaccount:numaplane-system:numaplane-sa";

/// What the kernel says about the container's process: the one process named `numaplane` in
/// the pod's cgroup (kubelet's cgroupfs layout names it `pod<uid>`).
struct Observed {
    pid: u32,
    status: String,
    root_mount: String,
}

fn observe_operator_process(pod_uid: &str) -> Observed {
    let needle = format!("/pod{pod_uid}/");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc") {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let in_pod = std::fs::read_to_string(dir.join("cgroup")).is_ok_and(|c| c.contains(&needle));
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if in_pod && comm.trim() == "numaplane" {
            found.push(pid);
        }
    }
    assert_eq!(
        found.len(),
        1,
        "one numaplane process in pod {pod_uid}'s cgroup, found {found:?}"
    );
    let pid = found[0];
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let root_mount = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .expect("mountinfo")
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/"))
        .expect("a root mount")
        .to_string();
    Observed {
        pid,
        status,
        root_mount,
    }
}

fn status_field<'a>(status: &'a str, field: &str) -> Vec<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.split_whitespace().collect())
        .unwrap_or_default()
}

/// Non-root, no capability, no privilege escalation, seccomp filtering, read-only root: as the
/// pod's security context asks, observed on the running process.
fn assert_confined(pod: &Pod) {
    let uid = pod.metadata.uid.clone().expect("uid");
    let o = observe_operator_process(&uid);
    let why = format!("process {} of pod {}:\n{}", o.pid, name(pod), o.status);
    assert_eq!(status_field(&o.status, "Uid"), ["65532"; 4], "uid: {why}");
    assert_eq!(status_field(&o.status, "Gid"), ["65532"; 4], "gid: {why}");
    for caps in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(
            status_field(&o.status, caps),
            ["0000000000000000"],
            "{caps}: {why}"
        );
    }
    assert_eq!(status_field(&o.status, "NoNewPrivs"), ["1"], "{why}");
    assert_eq!(
        status_field(&o.status, "Seccomp"),
        ["2"],
        "seccomp filter: {why}"
    );
    let options = o.root_mount.split(' ').nth(5).unwrap_or_default();
    assert!(
        options.split(',').any(|f| f == "ro"),
        "the root filesystem is mounted read-only: {}",
        o.root_mount
    );
}

async fn lease_holder_pod(leases: &Api<Lease>) -> Option<String> {
    // The identity is `<pod name>_<incarnation>_<random>`.
    let holder = lease_holder(leases).await?;
    Some(holder.split('_').next().unwrap_or_default().to_string())
}

/// The operator's writes in the audit log from byte `from` on: `(verb, resource, name)` of every
/// create, update, patch or delete.
fn operator_writes(audit: &Path, from: usize) -> (Vec<(String, String, String)>, usize) {
    let text = std::fs::read_to_string(audit).expect("audit log");
    let mut writes = Vec::new();
    let mut requests = 0;
    for line in text.get(from..).unwrap_or_default().lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if e["user"]["username"] != OPERATOR_USER || e["stage"] != "ResponseComplete" {
            continue;
        }
        requests += 1;
        let verb = e["verb"].as_str().unwrap_or_default();
        if matches!(
            verb,
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) {
            let r = &e["objectRef"];
            let resource = match r["subresource"].as_str() {
                Some(sub) => format!("{}/{sub}", r["resource"].as_str().unwrap_or_default()),
                None => r["resource"].as_str().unwrap_or_default().to_string(),
            };
            writes.push((
                verb.to_string(),
                resource,
                format!(
                    "{}/{}",
                    r["namespace"].as_str().unwrap_or_default(),
                    r["name"].as_str().unwrap_or_default()
                ),
            ));
        }
    }
    (writes, requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_install_runs_the_operator_as_a_pod_on_a_real_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.log");
    let env = TestEnv::start_with(TestEnvOptions {
        real_stack: true,
        real_node: true,
        audit_log: Some(audit.clone()),
        ..Default::default()
    })
    .await
    .expect("start the test stack with a real node");
    let client = env.client();
    let manifest_image = {
        let text = std::fs::read_to_string(repo("config/manager/manager.yaml")).expect("manager");
        text.lines()
            .find_map(|l| l.trim().strip_prefix("image: "))
            .expect("manager.yaml names an image")
            .to_string()
    };
    let tag = manifest_image
        .rsplit(':')
        .next()
        .expect("a tag")
        .to_string();
    env.import_image(&build_image(&dir.path().join("image"), &tag, "1700000000"))
        .expect("import the image into the real node");

    // The test stack's way to send a namespace's pods to the real node (docs/real-node.md); the
    // install itself stays exactly as the README gives it.
    kubectl(&env, &["create", "namespace", NS]);
    send_to_real_node(&env, NS);
    for command in doc_commands("README.md", "Install", 0) {
        assert!(
            command.starts_with("kubectl "),
            "README's install runs kubectl only here: {command}"
        );
        run_doc_command(&env, &command, "");
    }

    // Up under its ServiceAccount, Ready (the readiness probe passed), on the real node.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let first = wait_for_pods(&pods, 1, "the operator's pod Ready on the real node").await;
    let pod = &first[0];
    let spec = pod.spec.as_ref().expect("spec");
    assert_eq!(spec.service_account_name.as_deref(), Some("numaplane-sa"));
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some(manifest_image.as_str())
    );
    for (port, path, expect) in [(8081, "/healthz", "ok"), (8081, "/readyz", "ok")] {
        let body = pod_get(&client, &name(pod), port, path).await;
        assert!(
            body.as_deref().is_some_and(|b| b.contains(expect)),
            "{path} on port {port}: {body:?}"
        );
    }
    let scrape = eventually("metrics through the metrics Service", || async {
        let req = http::Request::get(format!(
            "/api/v1/namespaces/{NS}/services/numaplane-controller-metrics:8080/proxy/metrics"
        ))
        .body(Vec::new())
        .ok()?;
        client.request_text(req).await.ok()
    })
    .await;
    assert!(
        scrape.contains("# TYPE pipeline_rollout_syncs_total counter"),
        "the metrics Service serves the operator's metrics:\n{scrape}"
    );
    assert_confined(pod);

    // docs/getting-started.md's "On a real cluster", as written: the install again (a no-op),
    // its rollout status, the reference samples (`kubectl apply -k config/samples`: the Numaflow
    // controller, an ISB service, a pipeline, a MonoVertex, AnalysisTemplates) and
    // `kubectl numaplane get -w` showing them. `cargo install` is left to the test build, whose
    // plugin is on the PATH.
    let recorder = Recorder::start(&client, SAMPLES).await;
    recorder.configure(
        &std::fs::read_to_string(repo("config/manager/controller-config.yaml"))
            .expect("controller-config.yaml"),
    );
    for block in 0..2 {
        for command in doc_commands("docs/getting-started.md", "On a real cluster", block) {
            run_doc_command(&env, &command, "my-pipeline");
        }
    }
    samples_converged(&client, "the samples Deployed by the operator in its pod").await;

    // Two replicas: one leader; the leader's pod deleted, the other takes over within the lease.
    kubectl(
        &env,
        &["-n", NS, "scale", "deployment", DEPLOYMENT, "--replicas=2"],
    );
    let two = wait_for_pods(&pods, 2, "two operator pods Ready").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let leader = eventually("a leader among the two", || async {
        let holder = lease_holder_pod(&leases).await?;
        two.iter().any(|p| name(p) == holder).then_some(holder)
    })
    .await;
    let follower = two
        .iter()
        .map(name)
        .find(|n| *n != leader)
        .expect("a second pod");
    let follower_log = kubectl(&env, &["-n", NS, "logs", &follower]);
    assert!(
        !follower_log.contains("became leader"),
        "only {leader} leads; {follower} logged:\n{follower_log}"
    );
    let lease_seconds = leases
        .get("numaplane-controller-lock")
        .await
        .ok()
        .and_then(|l| l.spec?.lease_duration_seconds)
        .expect("the Lease's duration");
    let t0 = Instant::now();
    kubectl(&env, &["-n", NS, "delete", "pod", &leader, "--wait=false"]);
    // Another pod leads: the follower, or the leader's replacement if it was quicker.
    let successor = eventually("another pod takes the lease", || async {
        let holder = lease_holder_pod(&leases).await?;
        let live = operator_pods(&pods).await;
        (holder != leader && live.iter().any(|p| name(p) == holder)).then_some(holder)
    })
    .await;
    let handover = t0.elapsed();
    eprintln!("leadership went from {leader} to {successor} in {handover:?}");
    assert!(
        handover <= Duration::from_secs(lease_seconds.unsigned_abs().into()),
        "handover took {handover:?}, longer than the {lease_seconds} s lease"
    );
    // The new leader reconciles: a change made after the handover reaches the child.
    kubectl(
        &env,
        &[
            "-n",
            SAMPLES,
            "patch",
            "pipelinerollout",
            "my-pipeline",
            "--type=merge",
            "-p",
            r#"{"spec":{"pipeline":{"metadata":{"labels":{"after":"failover"}}}}}"#,
        ],
    );
    let pipelines: Api<numaplane_api::numaflow::Pipeline> =
        Api::namespaced(client.clone(), SAMPLES);
    eventually("the new leader applies a change", || async {
        let list = pipelines.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("after"))
                    .is_some_and(|v| v == "failover")
            })
            .then_some(())
    })
    .await;
    samples_converged(&client, "every rollout converged after the handover").await;
    let settled = wait_for_pods(&pods, 2, "two operator pods again").await;

    // A new image (another build, another digest), as an upgrade of the operator: the pods roll
    // and the operator writes no child.
    let old_ids: Vec<String> = settled.iter().map(image_id).collect();
    let next = format!("{tag}-next");
    env.import_image(&build_image(&dir.path().join("next"), &next, "1700086400"))
        .expect("import the next image");
    let from = std::fs::metadata(&audit).map(|m| m.len()).unwrap_or(0) as usize;
    let repository = manifest_image.rsplit_once(':').expect("a tag").0;
    kubectl(
        &env,
        &[
            "-n",
            NS,
            "set",
            "image",
            &format!("deployment/{DEPLOYMENT}"),
            &format!("manager={repository}:{next}"),
        ],
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let rolled = eventually("the operator's pods rolled to the new image", || async {
        let d = deployments.get(DEPLOYMENT).await.ok()?;
        let s = d.status?;
        let done = s.observed_generation == d.metadata.generation
            && s.updated_replicas == Some(2)
            && s.available_replicas == Some(2)
            && s.replicas == Some(2);
        let list = operator_pods(&pods).await;
        (done && list.len() == 2 && list.iter().all(ready)).then_some(list)
    })
    .await;
    for p in &rolled {
        assert!(
            !old_ids.contains(&image_id(p)),
            "{} runs the new image ({} was among {old_ids:?})",
            name(p),
            image_id(p)
        );
        assert_confined(p);
    }
    let new_leader = eventually("a new pod leads", || async {
        let holder = lease_holder_pod(&leases).await?;
        rolled.iter().any(|p| name(p) == holder).then_some(holder)
    })
    .await;
    // The new leader has listed and judged every rollout (its reconcile counters moved) before
    // the audit is read.
    eventually("the new leader reconciled the samples", || async {
        let text = pod_get(&client, &new_leader, 8080, "/metrics").await?;
        let synced = |metric: &str| {
            support::samples(&text, metric)
                .iter()
                .map(|(_, v)| v)
                .sum::<f64>()
                > 0.0
        };
        (synced("pipeline_rollout_syncs_total") && synced("isb_service_rollout_syncs_total"))
            .then_some(())
    })
    .await;
    samples_converged(&client, "every rollout still converged after the upgrade").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (writes, requests) = operator_writes(&audit, from);
    assert!(
        requests > 0,
        "the audit log shows the operator's requests as {OPERATOR_USER}"
    );
    let child_writes: Vec<_> = writes
        .iter()
        .filter(|(_, resource, _)| {
            !matches!(resource.as_str(), "leases" | "events")
                && !resource.ends_with("rollouts/status")
                && !resource.ends_with("rollouts")
        })
        .collect();
    assert!(
        child_writes.is_empty(),
        "the operator wrote children while only its own image changed: {child_writes:?}\n\
         (all its writes: {writes:?})"
    );
    recorder.assert_held(&client, SAMPLES).await;
    assert_eq!(restarts(&rolled[0]) + restarts(&rolled[1]), 0);
}
