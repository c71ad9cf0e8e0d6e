//! Numaflow and Argo Rollouts objects as Numaplane sees them: typed metadata, with `spec` and
//! `status` kept as raw JSON so nothing the user or Numaflow wrote is dropped or defaulted.
//! Small typed accessors live in `numaplane-core`'s child views.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{NamespaceResourceScope, Resource};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// Numaflow's API group.
pub const NUMAFLOW_GROUP: &str = "numaflow.numaproj.io";
/// Argo Rollouts' API group.
pub const ARGO_GROUP: &str = "argoproj.io";

macro_rules! raw_object {
    ($(#[$doc:meta])* $name:ident, $group:expr, $kind:literal, $plural:literal) => {
        $(#[$doc])*
        #[derive(Deserialize, Clone, Debug, Default, PartialEq)]
        pub struct $name {
            #[serde(default)]
            pub metadata: ObjectMeta,
            #[serde(default, deserialize_with = "crate::free_form::value")]
            pub spec: serde_json::Value,
            #[serde(default, deserialize_with = "crate::free_form::optional")]
            pub status: Option<serde_json::Value>,
        }

        // Written by hand so `apiVersion` and `kind` are always present (the API server
        // requires them on create and update).
        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                let mut st = s.serialize_struct(stringify!($name), 5)?;
                st.serialize_field("apiVersion", concat!($group, "/v1alpha1"))?;
                st.serialize_field("kind", $kind)?;
                st.serialize_field("metadata", &self.metadata)?;
                if !self.spec.is_null() {
                    st.serialize_field("spec", &self.spec)?;
                }
                if let Some(status) = &self.status {
                    st.serialize_field("status", status)?;
                }
                st.end()
            }
        }

        impl Resource for $name {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($group)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("v1alpha1")
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl crate::compact::RawObject for $name {
            fn from_parts(
                metadata: ObjectMeta,
                spec: serde_json::Value,
                status: Option<serde_json::Value>,
            ) -> Self {
                Self { metadata, spec, status }
            }
        }

        impl $name {
            /// A new object with `apiVersion`/`kind` implied by the type.
            pub fn new(metadata: ObjectMeta, spec: serde_json::Value) -> Self {
                Self { metadata, spec, status: None }
            }

            /// The object as JSON, with `apiVersion` and `kind`.
            pub fn to_json(&self) -> serde_json::Value {
                // Serialising plain JSON values and ObjectMeta cannot fail.
                serde_json::to_value(self).unwrap_or_default()
            }
        }
    };
}

raw_object!(
    /// A numaflow Pipeline.
    Pipeline, "numaflow.numaproj.io", "Pipeline", "pipelines"
);
raw_object!(
    /// A numaflow Vertex (created by Numaflow for each pipeline vertex).
    Vertex, "numaflow.numaproj.io", "Vertex", "vertices"
);
raw_object!(
    /// A numaflow MonoVertex.
    MonoVertex, "numaflow.numaproj.io", "MonoVertex", "monovertices"
);
raw_object!(
    /// A numaflow InterStepBufferService.
    InterStepBufferService, "numaflow.numaproj.io", "InterStepBufferService", "interstepbufferservices"
);
raw_object!(
    /// An Argo Rollouts AnalysisRun.
    AnalysisRun, "argoproj.io", "AnalysisRun", "analysisruns"
);
raw_object!(
    /// An Argo Rollouts AnalysisTemplate.
    AnalysisTemplate, "argoproj.io", "AnalysisTemplate", "analysistemplates"
);

/// A Vertex as the operator's Vertex watch reads it: its name, its pipeline and its replica
/// counts, what a trial pipeline's health sample needs. Everything else (the spec Numaflow
/// copies from the pipeline, annotations, owners) is dropped as it is parsed, since every
/// Vertex of the cluster goes through that watch.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(from = "VertexWire")]
pub struct VertexReplicas {
    pub metadata: ObjectMeta,
    pub ready_replicas: Option<i64>,
    pub desired_replicas: Option<i64>,
}

#[derive(Deserialize)]
struct VertexWire {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    status: Option<ReplicaCounts>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ReplicaCounts {
    ready_replicas: Option<i64>,
    desired_replicas: Option<i64>,
}

impl From<VertexWire> for VertexReplicas {
    fn from(w: VertexWire) -> Self {
        let pipeline = crate::keys::labels::NUMAFLOW_PIPELINE_NAME;
        let labels = w
            .metadata
            .labels
            .into_iter()
            .filter(|(k, _)| k == pipeline)
            .collect();
        let status = w.status.unwrap_or_default();
        VertexReplicas {
            metadata: ObjectMeta {
                name: w.metadata.name,
                namespace: w.metadata.namespace,
                // The watch resumes from the newest object's resource version.
                resource_version: w.metadata.resource_version,
                labels: Some(labels),
                ..ObjectMeta::default()
            },
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

impl Resource for VertexReplicas {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Vertex::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        Vertex::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        Vertex::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Vertex::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipeline_keeps_spec_and_status_verbatim() {
        let raw = serde_json::json!({
            "apiVersion": "numaflow.numaproj.io/v1alpha1",
            "kind": "Pipeline",
            "metadata": {"name": "p-0", "namespace": "ns"},
            "spec": {"vertices": [{"name": "in", "unknownField": {"x": 1.5}}]},
            "status": {"phase": "Running", "drainedOnPause": true}
        });
        let p: Pipeline = serde_json::from_value(raw.clone()).expect("parse");
        assert_eq!(p.to_json(), raw);
        assert_eq!(
            Pipeline::url_path(&(), Some("ns")),
            "/apis/numaflow.numaproj.io/v1alpha1/namespaces/ns/pipelines"
        );
    }

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
}
