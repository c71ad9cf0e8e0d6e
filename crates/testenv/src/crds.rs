//! The CRDs every test control plane serves, embedded at compile time so tests do not depend on
//! the working directory, and their installation (server-side apply, then wait for Established).

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use futures::future::try_join_all;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

/// Field manager used for the CRDs' server-side apply.
pub const FIELD_MANAGER: &str = "numaplane-testenv";

/// The minimal Numaflow CRDs shipped with Numaplane (`config/numaflow-crds`); servingpipelines is
/// the one the real Numaflow controller (1.8) refuses to run without.
const NUMAFLOW: [(&str, &str); 5] = [
    (
        "interstepbufferservices.yaml",
        include_str!("../../../config/numaflow-crds/interstepbufferservices.yaml"),
    ),
    (
        "monovertices.yaml",
        include_str!("../../../config/numaflow-crds/monovertices.yaml"),
    ),
    (
        "pipelines.yaml",
        include_str!("../../../config/numaflow-crds/pipelines.yaml"),
    ),
    (
        "servingpipelines.yaml",
        include_str!("../../../config/numaflow-crds/servingpipelines.yaml"),
    ),
    (
        "vertices.yaml",
        include_str!("../../../config/numaflow-crds/vertices.yaml"),
    ),
];

/// Argo Rollouts v1.8.4 analysis kinds, used by progressive-upgrade analysis.
const ARGO_ROLLOUTS: [(&str, &str); 3] = [
    (
        "analysis-run-crd.yaml",
        include_str!("../../../testdata/crds/argo-rollouts-v1.8.4/analysis-run-crd.yaml"),
    ),
    (
        "analysis-template-crd.yaml",
        include_str!("../../../testdata/crds/argo-rollouts-v1.8.4/analysis-template-crd.yaml"),
    ),
    (
        "cluster-analysis-template-crd.yaml",
        include_str!(
            "../../../testdata/crds/argo-rollouts-v1.8.4/cluster-analysis-template-crd.yaml"
        ),
    ),
];

/// A schemaless VerticalPodAutoscaler (autoscaling.k8s.io/v1), a rider kind.
const VPA: (&str, &str) = ("vpa.yaml", include_str!("../../../testdata/crds/vpa.yaml"));

/// The five Numaplane CRDs, generated from the Rust types.
pub fn numaplane() -> Vec<CustomResourceDefinition> {
    numaplane_api::crds::all()
}

/// Numaflow Pipeline, Vertex, MonoVertex and InterStepBufferService.
pub fn numaflow() -> Result<Vec<CustomResourceDefinition>> {
    NUMAFLOW.iter().map(|(n, y)| parse(n, y)).collect()
}

/// Argo Rollouts AnalysisRun, AnalysisTemplate and ClusterAnalysisTemplate.
pub fn argo_rollouts() -> Result<Vec<CustomResourceDefinition>> {
    ARGO_ROLLOUTS.iter().map(|(n, y)| parse(n, y)).collect()
}

/// VerticalPodAutoscaler.
pub fn vpa() -> Result<CustomResourceDefinition> {
    parse(VPA.0, VPA.1)
}

/// Every CRD a test control plane installs.
pub fn all() -> Result<Vec<CustomResourceDefinition>> {
    let mut crds = numaplane();
    crds.extend(numaflow()?);
    crds.extend(argo_rollouts()?);
    crds.push(vpa()?);
    Ok(crds)
}

fn parse(file: &str, yaml: &str) -> Result<CustomResourceDefinition> {
    serde_saphyr::from_str(yaml).with_context(|| format!("parsing embedded CRD {file}"))
}

/// Server-side applies `crds` (forcing ownership) and waits until each is Established.
pub async fn install(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
    timeout: Duration,
) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    try_join_all(crds.iter().map(|crd| {
        let api = api.clone();
        let params = params.clone();
        async move {
            let name = crd
                .metadata
                .name
                .as_deref()
                .ok_or_else(|| anyhow!("CRD without metadata.name"))?;
            api.patch(name, &params, &Patch::Apply(crd))
                .await
                .with_context(|| format!("applying CRD {name}"))?;
            tokio::time::timeout(
                timeout,
                await_condition(api.clone(), name, conditions::is_crd_established()),
            )
            .await
            .map_err(|_| anyhow!("CRD {name} not Established within {timeout:?}"))?
            .with_context(|| format!("watching CRD {name}"))?;
            tracing::debug!(crd = name, "CRD established");
            Ok::<_, anyhow::Error>(())
        }
    }))
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_crds_parse() {
        let crds = all().expect("parse");
        let names: Vec<_> = crds
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        for want in [
            "pipelines.numaflow.numaproj.io",
            "servingpipelines.numaflow.numaproj.io",
            "analysisruns.argoproj.io",
            "verticalpodautoscalers.autoscaling.k8s.io",
            "pipelinerollouts.numaplane.numaproj.io",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
        assert_eq!(names.len(), 5 + 5 + 3 + 1);
    }
}
