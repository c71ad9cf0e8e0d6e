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
}
