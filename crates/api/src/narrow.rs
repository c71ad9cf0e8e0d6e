//! Numaflow and Argo Rollouts objects as one of the operator's watches reads them: only the
//! fields a pass reads, the rest dropped as the object is parsed. Every such object of the
//! cluster goes through the watch and stays in its cache, so what is not kept costs nothing
//! after the parse (a `serde_json` map costs several times its JSON text).

use crate::numaflow::{AnalysisRun, Vertex};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::{NamespaceResourceScope, Resource};
use serde::Deserialize;
use std::borrow::Cow;

/// `Resource` for a narrowed view of `$full`: the same kind, group, version and plural.
macro_rules! narrow_resource {
    ($view:ident, $full:ident) => {
        impl Resource for $view {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                $full::kind(&())
            }
            fn group(_: &()) -> Cow<'_, str> {
                $full::group(&())
            }
            fn version(_: &()) -> Cow<'_, str> {
                $full::version(&())
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $full::plural(&())
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// What a narrowed view parses of an object: `metadata` and `status`, the rest skipped.
#[derive(Deserialize)]
struct Wire<S> {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default = "Option::default")]
    status: Option<S>,
}

/// The metadata fields any view keeps.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    owner_references: Vec<OwnerReference>,
}

impl WireMeta {
    /// Name, namespace and resourceVersion (the watch resumes from the newest object's), with
    /// the one `label` a view reads and, when `owners`, the owner references.
    fn keep(self, label: Option<&str>, owners: bool) -> ObjectMeta {
        let labels = label.map(|l| self.labels.into_iter().filter(|(k, _)| k == l).collect());
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            resource_version: self.resource_version,
            labels,
            owner_references: owners.then_some(self.owner_references),
            ..ObjectMeta::default()
        }
    }
}

/// A Vertex as the operator's Vertex watch reads it: its name, its pipeline and its replica
/// counts, what a trial pipeline's health sample needs. Everything else (the spec Numaflow
/// copies from the pipeline, annotations, owners) is dropped as it is parsed, since every
/// Vertex of the cluster goes through that watch.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(from = "Wire<ReplicaCounts>")]
pub struct VertexReplicas {
    pub metadata: ObjectMeta,
    pub ready_replicas: Option<i64>,
    pub desired_replicas: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ReplicaCounts {
    ready_replicas: Option<i64>,
    desired_replicas: Option<i64>,
}

impl From<Wire<ReplicaCounts>> for VertexReplicas {
    fn from(w: Wire<ReplicaCounts>) -> Self {
        let status = w.status.unwrap_or_default();
        VertexReplicas {
            metadata: w
                .metadata
                .keep(Some(crate::keys::labels::NUMAFLOW_PIPELINE_NAME), false),
            ready_replicas: status.ready_replicas,
            desired_replicas: status.desired_replicas,
        }
    }
}

impl VertexReplicas {
    /// The pipeline this Vertex belongs to (Numaflow's label).
    pub fn pipeline(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(crate::keys::labels::NUMAFLOW_PIPELINE_NAME)
            .map(String::as_str)
    }
}

narrow_resource!(VertexReplicas, Vertex);

/// An AnalysisRun as the operator's run watch reads it: its name, its owners (the trial it
/// judges) and its outcome. Argo Rollouts rewrites a running run's status at every measurement
/// and keeps every measurement in it, beside the spec's metrics and Prometheus queries; a mass
/// upgrade with AnalysisTemplates leaves thousands of runs in the cache.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(from = "Wire<RunOutcome>")]
pub struct AnalysisRunPhase {
    pub metadata: ObjectMeta,
    /// `status.phase` (`Pending`, `Running`, `Successful`, `Failed`, `Error`, `Inconclusive`).
    pub phase: Option<String>,
    /// `status.completedAt`, as written.
    pub completed_at: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RunOutcome {
    phase: Option<String>,
    completed_at: Option<String>,
}

impl From<Wire<RunOutcome>> for AnalysisRunPhase {
    fn from(w: Wire<RunOutcome>) -> Self {
        let status = w.status.unwrap_or_default();
        AnalysisRunPhase {
            metadata: w.metadata.keep(None, true),
            phase: status.phase,
            completed_at: status.completed_at,
        }
    }
}

narrow_resource!(AnalysisRunPhase, AnalysisRun);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    #[test]
    fn a_vertex_is_cached_as_its_name_pipeline_and_replica_counts_only() {
        let raw = serde_json::json!({
            "apiVersion": "numaflow.numaproj.io/v1alpha1",
            "kind": "Vertex",
            "metadata": {"name": "p-0-in", "namespace": "ns", "resourceVersion": "7",
                         "uid": "u", "annotations": {"numaflow.numaproj.io/hash": "h"},
                         "labels": {"numaflow.numaproj.io/pipeline-name": "p-0",
                                    "numaflow.numaproj.io/vertex-name": "in"}},
            "spec": {"name": "in", "source": {"generator": {}}},
            "status": {"phase": "Running", "readyReplicas": 1, "desiredReplicas": 2}
        });
        let v: VertexReplicas = serde_json::from_value(raw).expect("parse");
        assert_eq!(v.pipeline(), Some("p-0"));
        assert_eq!(v.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(v.metadata.labels.as_ref().map(|l| l.len()), Some(1));
        assert!(v.metadata.annotations.is_none() && v.metadata.uid.is_none());
        assert_eq!((v.ready_replicas, v.desired_replicas), (Some(1), Some(2)));
        // A Vertex Numaflow has not reported on yet has no counts.
        let bare: VertexReplicas =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p-0-out"}}))
                .expect("parse");
        assert_eq!((bare.ready_replicas, bare.desired_replicas), (None, None));
        assert_eq!(VertexReplicas::plural(&()), "vertices");
    }

    #[test]
    fn an_analysis_run_is_cached_as_its_name_owners_and_outcome_only() {
        let raw = serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AnalysisRun",
            "metadata": {"name": "pipeline-p-1", "namespace": "ns", "resourceVersion": "9",
                         "uid": "u", "labels": {"app.kubernetes.io/part-of": "numaplane"},
                         "ownerReferences": [{"apiVersion": "numaflow.numaproj.io/v1alpha1",
                             "kind": "Pipeline", "name": "p-1", "uid": "trial-uid",
                             "controller": true}]},
            "spec": {"metrics": [{"name": "in", "provider": {"prometheus": {"query": "q"}}}]},
            "status": {"phase": "Successful", "completedAt": "2026-12-06T01:00:00Z",
                       "metricResults": [{"name": "in", "measurements": [{"value": "[1]"}]}]}
        });
        let r: AnalysisRunPhase = serde_json::from_value(raw).expect("parse");
        assert_eq!(r.phase.as_deref(), Some("Successful"));
        assert_eq!(r.completed_at.as_deref(), Some("2026-12-06T01:00:00Z"));
        assert_eq!(r.metadata.resource_version.as_deref(), Some("9"));
        let owners: Vec<_> = r.owner_references().iter().map(|o| &o.uid).collect();
        assert_eq!(owners, ["trial-uid"]);
        assert!(r.metadata.labels.is_none() && r.metadata.uid.is_none());
        // A run Argo has not picked up yet has no status.
        let bare: AnalysisRunPhase =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "new"}}))
                .expect("parse");
        assert_eq!((bare.phase, bare.completed_at), (None, None));
        assert_eq!(AnalysisRunPhase::plural(&()), "analysisruns");
        assert_eq!(AnalysisRunPhase::group(&()), "argoproj.io");
    }
}
