//! On the real stack (`--real-stack`), the Numaflow controller of the benchmark namespace, set up
//! as a user would: the shipped 1.8.1 definitions in the operator's namespace and a
//! NumaflowControllerRollout, which the controller under test renders; the test stack then runs
//! the real controller binary for the Deployment.

use anyhow::{Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use numaplane_api::NumaflowControllerRollout;
use std::time::{Duration, Instant};

pub async fn install(client: &Client, ns: &str, timeout: Duration) -> Result<()> {
    let mut defs: ConfigMap =
        crate::rbac::read("config/numaflow-controller-definitions/controller_def_1.8.1.yaml")?;
    defs.metadata.namespace = Some(numaplane_testenv::controlplane::OPERATOR_NAMESPACE.into());
    crate::rbac::apply(
        Api::namespaced(
            client.clone(),
            numaplane_testenv::controlplane::OPERATOR_NAMESPACE,
        ),
        &defs,
    )
    .await?;
    let ncr: NumaflowControllerRollout = serde_json::from_value(serde_json::json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "NumaflowControllerRollout",
        "metadata": {"name": "numaflow-controller", "namespace": ns},
        "spec": {"controller": {"version": "1.8.1"}}
    }))?;
    crate::rbac::apply(Api::namespaced(client.clone(), ns), &ncr).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let started = Instant::now();
    loop {
        let available = deployments
            .get_opt("numaflow-controller")
            .await?
            .and_then(|d| d.status?.available_replicas);
        if available == Some(1) {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!("the Numaflow controller Deployment was not available within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
