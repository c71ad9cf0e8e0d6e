//! `version`: the plugin's version, and what the cluster runs.

use crate::cluster::Cluster;
use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

/// The label every Numaplane operator Deployment of `config/install.yaml` carries.
const OPERATOR_SELECTOR: &str =
    "app.kubernetes.io/part-of=numaplane,app.kubernetes.io/component=controller-manager";

pub fn client() -> String {
    format!(
        "Client Version: kubectl-numaplane {}",
        env!("CARGO_PKG_VERSION")
    )
}

/// Prints the client line, then one line per operator Deployment: cluster-wide if allowed,
/// else in the command's namespace.
pub async fn run(cluster: &Cluster) -> Result<i32> {
    println!("{}", client());
    let lp = ListParams::default().labels(OPERATOR_SELECTOR);
    let all: Api<Deployment> = Api::all(cluster.client.clone());
    let deployments = match all.list(&lp).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(e)) if e.code == 403 => {
            Api::<Deployment>::namespaced(cluster.client.clone(), &cluster.namespace)
                .list(&lp)
                .await
                .with_context(|| {
                    format!(
                        "listing operator Deployments in namespace {} (not allowed cluster-wide)",
                        cluster.namespace
                    )
                })?
                .items
        }
        Err(e) => return Err(e).context("listing operator Deployments"),
    };
    if deployments.is_empty() {
        println!("Operator: none found (no Deployment labelled {OPERATOR_SELECTOR})");
    }
    for d in &deployments {
        println!("Operator: {}", operator_line(d));
    }
    Ok(super::EXIT_OK)
}

/// `<namespace>/<name> <image> (<ready>/<wanted> ready)`.
fn operator_line(d: &Deployment) -> String {
    let images: Vec<String> = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| {
            p.containers
                .iter()
                .filter_map(|c| c.image.clone())
                .collect()
        })
        .unwrap_or_default();
    let wanted = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let ready = d
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    format!(
        "{}/{} {} ({ready}/{wanted} ready)",
        d.namespace().unwrap_or_default(),
        d.name_any(),
        if images.is_empty() {
            "(no image)".to_string()
        } else {
            images.join(", ")
        }
    )
}
