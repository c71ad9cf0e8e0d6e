//! The install command of README.md and docs/install.md, exactly as a first-time user runs it:
//! one `kubectl apply --server-side -f config/install.yaml` against an API server with nothing
//! installed succeeds, and afterwards every object of the file exists where the file puts it;
//! namespace editors get the workload rollouts but not what installs the Numaflow controller.

use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{Discovery, Scope};
use numaplane_testenv::{TestEnv, TestEnvOptions};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn install_documents() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/install.yaml");
    let text = std::fs::read_to_string(&path).expect("config/install.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("parse install.yaml");
    docs.into_iter().filter(|d| d["kind"].is_string()).collect()
}

#[tokio::test]
async fn one_server_side_apply_installs_everything_on_an_empty_cluster() {
    let env = TestEnv::start_with(TestEnvOptions {
        no_crds: true,
        ..Default::default()
    })
    .await
    .expect("start an empty control plane");
    let kubectl = numaplane_testenv::binaries::kubectl().expect("kubectl");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(&kubectl)
        .current_dir(&repo)
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(["apply", "--server-side", "-f", "config/install.yaml"])
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "the first apply failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let client = env.client();
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("API discovery");
    let docs = install_documents();
    assert!(docs.len() > 20, "install.yaml holds {} objects", docs.len());
    for doc in docs {
        let (kind, name) = (doc["kind"].as_str().unwrap_or(""), &doc["metadata"]["name"]);
        let name = name.as_str().expect("every object is named");
        let (group, version) = match doc["apiVersion"].as_str().and_then(|a| a.split_once('/')) {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (
                String::new(),
                doc["apiVersion"].as_str().unwrap_or("").into(),
            ),
        };
        let (ar, caps) = discovery
            .groups()
            .filter(|g| g.name() == group)
            .flat_map(|g| g.versioned_resources(&version))
            .find(|(ar, _)| ar.kind == kind)
            .unwrap_or_else(|| panic!("{kind} {group}/{version} is not served"));
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &ar),
            Scope::Namespaced => {
                let ns = doc["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{kind} {name} has no namespace in the file"));
                Api::namespaced_with(client.clone(), ns, &ar)
            }
        };
        api.get(name)
            .await
            .unwrap_or_else(|e| panic!("{kind} {name} missing after one apply: {e}"));
    }

    // What the built-in `edit` and `admin` ClusterRoles aggregate (the ClusterRoles their
    // aggregation rules select, as the aggregation controller unions them) of our group.
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let aggregated = async |target: &str| -> Vec<String> {
        let role = roles.get(target).await.expect("built-in ClusterRole");
        let selectors = role
            .aggregation_rule
            .and_then(|a| a.cluster_role_selectors)
            .expect("an aggregated ClusterRole");
        let mut resources = Vec::new();
        for sel in selectors {
            let labels: Vec<String> = sel
                .match_labels
                .unwrap_or_default()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let lp = ListParams::default().labels(&labels.join(","));
            for r in roles.list(&lp).await.expect("list ClusterRoles").items {
                for rule in r.rules.unwrap_or_default() {
                    if rule
                        .api_groups
                        .unwrap_or_default()
                        .iter()
                        .any(|g| g == "numaplane.numaproj.io")
                    {
                        resources.extend(rule.resources.unwrap_or_default());
                    }
                }
            }
        }
        resources
    };
    let edit = aggregated("edit").await;
    assert!(edit.contains(&"pipelinerollouts".to_string()), "{edit:?}");
    assert!(
        !edit.iter().any(|r| r.starts_with("numaflowcontroller")),
        "a namespace editor must not choose what the operator installs: {edit:?}"
    );
    let admin = aggregated("admin").await;
    for r in [
        "numaflowcontrollerrollouts",
        "numaflowcontrollers",
        "pipelinerollouts",
    ] {
        assert!(admin.contains(&r.to_string()), "admin lacks {r}: {admin:?}");
    }
}
