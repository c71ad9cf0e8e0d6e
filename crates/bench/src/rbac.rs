//! Grants the operator identity exactly what the shipped manifests grant it (`config/rbac`), so
//! the controller under test runs with its production permissions.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::path::{Path, PathBuf};

const OPERATOR_NAMESPACE: &str = numaplane_testenv::controlplane::OPERATOR_NAMESPACE;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

pub(crate) fn read<K: DeserializeOwned>(rel: &str) -> Result<K> {
    let path = repo(rel);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Every document of a multi-document YAML file of the repository.
pub(crate) fn read_documents(rel: &str) -> Result<Vec<serde_json::Value>> {
    let path = repo(rel);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_multiple::<serde_json::Value>(&text)
        .with_context(|| format!("parsing {}", path.display()))
        .map(|docs| docs.into_iter().filter(|d| !d.is_null()).collect())
}

pub(crate) async fn apply<K>(api: Api<K>, obj: &K) -> Result<()>
where
    K: Resource + Clone + Debug + DeserializeOwned + Serialize,
{
    let name = obj.name_any();
    api.patch(
        &name,
        &PatchParams::apply("numaplane-bench").force(),
        &Patch::Apply(obj),
    )
    .await
    .with_context(|| format!("applying {name}"))?;
    Ok(())
}

pub async fn install(client: &Client) -> Result<()> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}
    }))?;
    apply(Api::all(client.clone()), &ns).await?;
    let role: ClusterRole = read("config/rbac/role.yaml")?;
    apply(Api::all(client.clone()), &role).await?;
    let binding: ClusterRoleBinding = read("config/rbac/role_binding.yaml")?;
    apply(Api::all(client.clone()), &binding).await?;
    let role: Role = read("config/rbac/leader_election_role.yaml")?;
    apply(Api::namespaced(client.clone(), OPERATOR_NAMESPACE), &role).await?;
    let binding: RoleBinding = read("config/rbac/leader_election_role_binding.yaml")?;
    apply(
        Api::namespaced(client.clone(), OPERATOR_NAMESPACE),
        &binding,
    )
    .await?;
    Ok(())
}
