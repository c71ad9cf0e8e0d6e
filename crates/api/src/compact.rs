//! A Numaflow object as a watch cache keeps it: typed metadata, `spec` and `status` as the JSON
//! text the API server sent.
//!
//! Parsed into `serde_json::Value`, a two-vertex Pipeline takes about 16 KiB of memory (every
//! JSON object is a `BTreeMap` node of over 600 bytes); as text about 2 KiB. With 10,000
//! pipelines the difference is most of the operator's memory. The reconcile parses the few
//! objects it reads ([`Compact::full`]).

use crate::free_form;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::Resource;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::marker::PhantomData;

/// An object with free-form `spec` and `status`, built back from its parts.
pub trait RawObject: Resource<DynamicType = ()> + Sized {
    fn from_parts(metadata: ObjectMeta, spec: Value, status: Option<Value>) -> Self;
}

/// `K` with its `spec` and `status` left as text.
#[derive(Deserialize)]
#[serde(bound = "")]
pub struct Compact<K> {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<Box<RawValue>>,
    #[serde(default)]
    status: Option<Box<RawValue>>,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Compact<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            spec: self.spec.clone(),
            status: self.status.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Compact<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compact")
            .field("metadata", &self.metadata)
            .field("spec", &self.spec)
            .field("status", &self.status)
            .finish()
    }
}

impl<K: RawObject> Compact<K> {
    /// The object with `spec` and `status` parsed (as the watch would have parsed `K`).
    pub fn full(&self) -> K {
        K::from_parts(
            self.metadata.clone(),
            self.spec
                .as_deref()
                .map(free_form::parse)
                .unwrap_or(Value::Null),
            self.status
                .as_deref()
                .map(free_form::parse)
                .filter(|v| !v.is_null()),
        )
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Compact<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
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
    use crate::numaflow::Pipeline;
    use serde_json::json;

    #[test]
    fn full_is_what_the_object_parses_to() {
        let raw = json!({
            "apiVersion": "numaflow.numaproj.io/v1alpha1",
            "kind": "Pipeline",
            "metadata": {"name": "p-0", "namespace": "ns", "labels": {"a": "b"}},
            "spec": {"vertices": [{"name": "in", "unknownField": {"x": 1.5}}]},
            "status": {"phase": "Running", "drainedOnPause": true}
        });
        let text = raw.to_string();
        let compact: Compact<Pipeline> = serde_json::from_str(&text).expect("compact");
        let direct: Pipeline = serde_json::from_str(&text).expect("direct");
        assert_eq!(compact.full(), direct);
        assert_eq!(compact.full().to_json(), raw);
        assert_eq!(Compact::<Pipeline>::plural(&()), "pipelines");
    }

    #[test]
    fn missing_null_and_unreadable_parts_read_as_the_full_type_reads_them() {
        let deep = (0..200).fold(json!(1), |v, _| json!([v]));
        for raw in [
            json!({"metadata": {"name": "p"}}),
            json!({"metadata": {"name": "p"}, "spec": {"x": 1}, "status": null}),
            json!({"metadata": {"name": "p"}, "spec": {"deep": deep}}),
        ] {
            let text = raw.to_string();
            let compact: Compact<Pipeline> = serde_json::from_str(&text).expect("compact");
            let direct: Pipeline = serde_json::from_str(&text).expect("direct");
            assert_eq!(compact.full(), direct, "{text:.80}");
        }
    }
}
