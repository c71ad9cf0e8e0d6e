//! The README's install command, exactly as a first-time user runs it: one
//! `kubectl apply --server-side -f config/install.yaml` against an API server with nothing
//! installed succeeds, and afterwards every object of the file exists where the file puts it.

use kube::api::{Api, DynamicObject};
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
}
