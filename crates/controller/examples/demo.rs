//! `make demo`: a local control plane (real etcd + kube-apiserver + kube-controller-manager),
//! the Numaflow simulator, and Numaplane, walking the reference samples through their life:
//! deploy, update in place, pause and resume, delete. Afterwards everything keeps running for
//! `kubectl --kubeconfig <dir>/kubeconfig ...` until Ctrl-C (or exits with `--exit`).

use anyhow::Context;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use numaplane::{Operator, OperatorOptions};
use numaplane_api::common::Phase;
use numaplane_api::numaflow::{MonoVertex, Pipeline};
use numaplane_api::{ISBServiceRollout, MonoVertexRollout, PipelineRollout};
use numaplane_testenv::{Simulator, TestEnv, TestEnvOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const NS: &str = "example-namespace";
const CONFIG: &str = r#"
logLevel: INFO
defaultUpgradeStrategy: "no-strategy"
permittedRiders: "group=autoscaling.k8s.io,kind=VerticalPodAutoscaler;group=autoscaling,kind=HorizontalPodAutoscaler;group=policy,kind=PodDisruptionBudget;group=,kind=ConfigMap"
"#;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn step(msg: &str) {
    println!("\n\x1b[1m==> {msg}\x1b[0m");
}

/// The Numaplane objects of a sample file (AnalysisTemplates etc. are skipped).
fn sample(file: &str) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(repo(&format!("config/samples/{file}")))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)?;
    docs.into_iter()
        .find(|d| d["apiVersion"] == numaplane_api::API_VERSION)
        .context("no Numaplane object in sample")
}

async fn apply<K>(client: &Client, doc: &Value) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let name = doc["metadata"]["name"].as_str().context("name")?;
    Api::<K>::namespaced(client.clone(), NS)
        .patch(
            name,
            &PatchParams::apply("demo").force(),
            &Patch::Apply(doc),
        )
        .await?;
    Ok(())
}

async fn wait<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(120),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!("    {what} ({:.1}s)", start.elapsed().as_secs_f64());
    Ok(())
}

async fn show(client: &Client) -> anyhow::Result<()> {
    let prs = Api::<PipelineRollout>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await?;
    let mvrs = Api::<MonoVertexRollout>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await?;
    let isbrs = Api::<ISBServiceRollout>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await?;
    let row = |kind: &str, name: String, st: Option<&numaplane_api::common::Status>| {
        let (phase, healthy) = st
            .map(|s| {
                let h = s
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "ChildResourcesHealthy")
                    .map(|c| c.status.clone())
                    .unwrap_or_default();
                (s.phase.as_str().to_string(), h)
            })
            .unwrap_or_default();
        println!("    {kind:<20} {name:<16} phase={phase:<9} healthy={healthy}");
    };
    for r in &isbrs {
        row(
            "ISBServiceRollout",
            r.name_any(),
            r.status.as_ref().map(|s| &s.status),
        );
    }
    for r in &prs {
        row(
            "PipelineRollout",
            r.name_any(),
            r.status.as_ref().map(|s| &s.status),
        );
    }
    for r in &mvrs {
        row(
            "MonoVertexRollout",
            r.name_any(),
            r.status.as_ref().map(|s| &s.status),
        );
    }
    for p in Api::<Pipeline>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await?
    {
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s["phase"].as_str())
            .unwrap_or("")
            .to_string();
        println!(
            "    Pipeline             {:<16} phase={phase}",
            p.name_any()
        );
    }
    for m in Api::<MonoVertex>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await?
    {
        let phase = m
            .status
            .as_ref()
            .and_then(|s| s["phase"].as_str())
            .unwrap_or("")
            .to_string();
        println!(
            "    MonoVertex           {:<16} phase={phase}",
            m.name_any()
        );
    }
    Ok(())
}

fn deployed(st: Option<&numaplane_api::common::Status>, generation: Option<i64>) -> bool {
    st.is_some_and(|s| {
        s.phase == Phase::Deployed
            && Some(s.observed_generation) == generation
            && s.conditions
                .iter()
                .any(|c| c.type_ == "ChildResourcesHealthy" && c.status == "True")
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut dir = PathBuf::from(".demo");
    let mut exit = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dir" => dir = args.next().map(PathBuf::from).context("--dir DIR")?,
            "--exit" => exit = true,
            other => anyhow::bail!("unknown argument {other} (usage: demo [--dir DIR] [--exit])"),
        }
    }
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;

    step("Starting etcd, kube-apiserver and kube-controller-manager on loopback");
    let env = TestEnv::start_with(TestEnvOptions {
        dir: Some(dir.join("cluster")),
        ..Default::default()
    })
    .await?;
    let client = env.client();
    println!("    kubeconfig: {}", env.kubeconfig_path().display());

    step("Starting the Numaflow simulator and Numaplane (no-strategy: changes apply directly)");
    let _sim = Simulator::start(client.clone()).await?;
    let config_file = dir.join("config.yaml");
    std::fs::write(&config_file, CONFIG)?;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NS}}))?;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            NS,
            &PatchParams::apply("demo"),
            &Patch::Apply(&serde_json::to_value(&ns)?),
        )
        .await?;
    let operator = Operator::start(
        client.clone(),
        OperatorOptions {
            config_file,
            operator_namespace: "numaplane-system".into(),
            workers: 4,
            instance: Some("demo".into()),
            watch_namespace: None,
            metrics: Default::default(),
            leadership: None,
        },
    )
    .await?;

    step("Applying the samples: ISBServiceRollout, PipelineRollout, MonoVertexRollout");
    let isbr = sample("numaplane.numaproj.io_v1alpha1_isbservicerollout.yaml")?;
    let pr = sample("numaplane.numaproj.io_v1alpha1_pipelinerollout.yaml")?;
    let mvr = sample("numaplane.numaproj.io_v1alpha1_monovertexrollout.yaml")?;
    apply::<ISBServiceRollout>(&client, &isbr).await?;
    apply::<PipelineRollout>(&client, &pr).await?;
    apply::<MonoVertexRollout>(&client, &mvr).await?;
    let pr_api = Api::<PipelineRollout>::namespaced(client.clone(), NS);
    let mvr_api = Api::<MonoVertexRollout>::namespaced(client.clone(), NS);
    let pr_ready = || async {
        pr_api
            .get("my-pipeline")
            .await
            .is_ok_and(|p| deployed(p.status.as_ref().map(|s| &s.status), p.metadata.generation))
    };
    wait("my-pipeline Deployed and healthy", pr_ready).await?;
    let mvr_ready = || async {
        mvr_api
            .get("my-monovertex")
            .await
            .is_ok_and(|p| deployed(p.status.as_ref().map(|s| &s.status), p.metadata.generation))
    };
    wait("my-monovertex Deployed and healthy", mvr_ready).await?;
    show(&client).await?;

    step("Updating the pipeline (cat vertex scale 3-5 -> 2-4): applied in place to my-pipeline-0");
    let mut pr2 = pr.clone();
    pr2["spec"]["pipeline"]["spec"]["vertices"][1]["scale"] =
        serde_json::json!({"min": 2, "max": 4});
    apply::<PipelineRollout>(&client, &pr2).await?;
    let pl_api = Api::<Pipeline>::namespaced(client.clone(), NS);
    wait("my-pipeline-0 has the new scale", || async {
        pl_api
            .get("my-pipeline-0")
            .await
            .is_ok_and(|p| p.spec["vertices"][1]["scale"]["min"] == 2)
    })
    .await?;
    wait("my-pipeline Deployed and healthy", pr_ready).await?;

    step("Pausing the pipeline through the rollout (lifecycle.desiredPhase: Paused)");
    let mut paused = pr2.clone();
    paused["spec"]["pipeline"]["spec"]["lifecycle"]["desiredPhase"] = "Paused".into();
    apply::<PipelineRollout>(&client, &paused).await?;
    wait("my-pipeline-0 drained and Paused", || async {
        pl_api.get("my-pipeline-0").await.is_ok_and(|p| {
            p.status
                .as_ref()
                .is_some_and(|s| s["phase"] == "Paused" && s["drainedOnPause"] == true)
        })
    })
    .await?;
    show(&client).await?;

    step("Resuming it");
    apply::<PipelineRollout>(&client, &pr2).await?;
    wait("my-pipeline-0 Running", || async {
        pl_api
            .get("my-pipeline-0")
            .await
            .is_ok_and(|p| p.status.as_ref().is_some_and(|s| s["phase"] == "Running"))
    })
    .await?;
    wait("my-pipeline Deployed and healthy", pr_ready).await?;

    step("Deleting a child by hand: Numaplane replaces it");
    pl_api
        .delete("my-pipeline-0", &DeleteParams::default())
        .await?;
    wait("my-pipeline-1 created", || async {
        pl_api.get("my-pipeline-1").await.is_ok()
    })
    .await?;
    wait("my-pipeline Deployed and healthy", pr_ready).await?;
    show(&client).await?;

    if exit {
        step("Deleting the rollouts");
        pr_api
            .delete("my-pipeline", &DeleteParams::default())
            .await?;
        mvr_api
            .delete("my-monovertex", &DeleteParams::default())
            .await?;
        wait("children removed", || async {
            pl_api
                .list(&Default::default())
                .await
                .is_ok_and(|l| l.items.is_empty())
        })
        .await?;
        operator.shutdown().await;
        println!("\nDemo finished.");
        return Ok(());
    }
    println!(
        "\nEverything keeps running. Try:\n  kubectl --kubeconfig {} -n {NS} get pipelinerollouts,pipelines,monovertexrollouts,monovertices\nPress Ctrl-C to stop (the control plane is removed with it).",
        env.kubeconfig_path().display()
    );
    tokio::signal::ctrl_c().await?;
    operator.shutdown().await;
    Ok(())
}
