//! docs/migration.md's switch to Numaplane, run as written on the test stack's real node, with an
//! upgrade in flight. The operator the cluster had (here an earlier install of ours running the
//! Go operator's ConfigMaps from testdata/reference-config; the Go operator's image and CRDs are
//! not available here) starts a pause-and-drain update of the reference pipeline, whose drain the
//! daemon stand-in holds, and is scaled to zero mid-update. The guide's commands then save the
//! ConfigMaps, apply config/install.yaml over the install, put the ConfigMaps back and wait for
//! the rollout; the new operator finishes the update once the pipeline drains, the saved
//! configuration is what it runs with, and no pipeline is changed before it drained (the
//! invariant checker).

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams};
use numaplane_api::PipelineRollout;
use numaplane_api::numaflow::Pipeline;
use serde_json::{Value, json};
use std::time::Duration;
use support::install::*;
use support::invariants::Recorder;
use support::{eventually, install_numaflow, repo};

const DEPLOYMENT: &str = "numaplane-controller-manager";

/// The env of the samples' `cat` vertex in the pipeline `p` (a data-loss field).
fn cat_env(p: &Pipeline) -> Value {
    p.spec["vertices"][1]["containerTemplate"]["env"].clone()
}

fn desired_phase(p: &Pipeline) -> String {
    p.spec["lifecycle"]["desiredPhase"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_operators_mid_update_finishes_the_update_after_the_drain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = real_node_with_operator_image(dir.path()).await;
    let client = env.client();
    kubectl(
        &env,
        &["apply", "--server-side", "-f", "config/install.yaml"],
    );
    for file in [
        "testdata/reference-config/controller-config.yaml",
        "testdata/reference-config/usde-config.yaml",
    ] {
        kubectl(
            &env,
            &[
                "-n",
                NS,
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                file,
            ],
        );
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    wait_for_pods(&pods, 1, "the earlier operator Ready").await;

    // The reference pipeline, deployed, then a data-loss change under pause-and-drain whose
    // drain does not finish.
    kubectl(&env, &["create", "namespace", SAMPLES]);
    let recorder = Recorder::start(&client, SAMPLES).await;
    recorder.configure(
        &std::fs::read_to_string(repo("testdata/reference-config/controller-config.yaml"))
            .expect("reference controller config"),
    );
    install_numaflow(&client, NS, SAMPLES, "1.8.1").await;
    for sample in [
        "config/samples/numaplane.numaproj.io_v1alpha1_isbservicerollout.yaml",
        "config/samples/numaplane.numaproj.io_v1alpha1_pipelinerollout.yaml",
        "config/samples/namespace-level-config.yaml",
    ] {
        kubectl(&env, &["apply", "--server-side", "-f", sample]);
    }
    samples_converged(&client, "the samples Deployed by the earlier operator").await;
    let daemon = env.real().expect("real stack").daemon();
    daemon.set_pending(SAMPLES, "my-pipeline-0", 100);
    let env_var = json!([{"name": "MIGRATION", "value": "1"}]);
    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), SAMPLES);
    let mut pr = prs.get("my-pipeline").await.expect("my-pipeline");
    let mut spec = pr.spec.pipeline.spec.clone();
    spec["vertices"][1]["containerTemplate"] = json!({"env": env_var});
    pr.spec.pipeline.spec = spec;
    pr.metadata.managed_fields = None;
    pr.metadata.resource_version = None;
    prs.patch(
        "my-pipeline",
        &PatchParams::apply("test-user").force(),
        &Patch::Apply(&pr),
    )
    .await
    .expect("the data-loss change");
    let pipelines: Api<Pipeline> = Api::namespaced(client.clone(), SAMPLES);
    eventually("the pipeline pausing for the update", || async {
        let p = pipelines.get("my-pipeline-0").await.ok()?;
        let r = prs.get("my-pipeline").await.ok()?;
        let in_progress = r.status.as_ref()?.status.upgrade_in_progress
            == numaplane_api::common::UpgradeStrategy::PipelinePauseAndDrain;
        (desired_phase(&p) == "Paused" && in_progress).then_some(())
    })
    .await;
    kubectl(
        &env,
        &["-n", NS, "scale", "deployment", DEPLOYMENT, "--replicas=0"],
    );
    eventually("the earlier operator stopped", || async {
        operator_pods(&pods).await.is_empty().then_some(())
    })
    .await;

    // docs/migration.md's steps, as written, in a directory of their own (they write
    // numaplane-config.yaml and read config/install.yaml).
    let work = tempfile::tempdir().expect("work dir");
    std::os::unix::fs::symlink(repo("config"), work.path().join("config")).expect("link config");
    for block in 0..2 {
        for command in doc_commands("docs/migration.md", "Switching from the Go operator", block) {
            run_doc_command_in(&env, &command, "my-pipeline", work.path());
        }
    }
    wait_for_pods(&pods, 1, "the new operator Ready").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    for file in [
        "testdata/reference-config/controller-config.yaml",
        "testdata/reference-config/usde-config.yaml",
    ] {
        let want = &yaml_documents(&std::fs::read_to_string(repo(file)).expect("read"))[0];
        let name = want["metadata"]["name"].as_str().expect("name");
        let got = cms.get(name).await.expect("ConfigMap");
        assert_eq!(
            serde_json::to_value(&got.data).expect("data"),
            want["data"],
            "{name} is the saved one, not the install's"
        );
    }

    // The update waits for the drain, then completes under the new operator.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let p = pipelines.get("my-pipeline-0").await.expect("my-pipeline-0");
    assert_ne!(
        cat_env(&p),
        env_var,
        "not updated before the pipeline drained"
    );
    daemon.set_pending(SAMPLES, "my-pipeline-0", 0);
    eventually("the update applied and the pipeline resumed", || async {
        let p = pipelines.get("my-pipeline-0").await.ok()?;
        (cat_env(&p) == env_var && desired_phase(&p) != "Paused").then_some(())
    })
    .await;
    samples_converged(&client, "the samples Deployed by the new operator").await;
    recorder.assert_held(&client, SAMPLES).await;
}
