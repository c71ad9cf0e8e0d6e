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
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;
use serde_path_to_error::Track;
use std::borrow::Cow;
use std::marker::PhantomData;

/// Why a cached object does not parse into its type, with the field's path.
pub type Unreadable = serde_path_to_error::Error<serde_json::Error>;

/// `err` for a person: the field and the problem, without the position in the text Numaplane
/// put together to parse it (meaningless to the reader).
pub fn describe(err: &Unreadable) -> String {
    let full = err.to_string();
    match full.rsplit_once(" at line ") {
        Some((message, position))
            if position.split(" column ").all(|n| n.parse::<u64>().is_ok()) =>
        {
            message.to_string()
        }
        _ => full,
    }
}

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
    /// What the operator looks objects of this kind up by besides their name, taken from the
    /// spec when cached (a PipelineRollout's ISBServiceRollout): see [`Compact::with_key`].
    #[serde(skip)]
    key: Option<Box<str>>,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Compact<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            spec: self.spec.clone(),
            status: self.status.clone(),
            key: self.key.clone(),
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
            .field("key", &self.key)
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

impl<K> Compact<K> {
    /// Files the object under `key(spec)`, read from its spec text once, here, rather than on
    /// every lookup.
    pub fn with_key(&mut self, key: impl FnOnce(&str) -> Option<String>) {
        self.key = self
            .spec
            .as_deref()
            .and_then(|s| key(s.get()))
            .map(String::into_boxed_str);
    }

    /// The key [`Compact::with_key`] filed it under.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

impl<K: Resource<DynamicType = ()> + DeserializeOwned> Compact<K> {
    /// The object parsed into its typed form (for kinds whose `spec` and `status` are typed:
    /// the rollouts). Fails where the watch would have failed on the whole object, naming the
    /// field (`status.phase: unknown variant ...`).
    pub fn typed(&self) -> Result<K, Unreadable> {
        let mut text = String::with_capacity(
            64 + self.spec.as_ref().map_or(0, |s| s.get().len())
                + self.status.as_ref().map_or(0, |s| s.get().len()),
        );
        text.push_str("{\"metadata\":");
        match serde_json::to_string(&self.metadata) {
            Ok(meta) => text.push_str(&meta),
            // (Only a map with non-string keys fails to serialize: ObjectMeta has none.)
            Err(e) => return Err(serde_path_to_error::Error::new(Track::new().path(), e)),
        }
        for (key, part) in [("spec", &self.spec), ("status", &self.status)] {
            if let Some(raw) = part {
                text.push_str(",\"");
                text.push_str(key);
                text.push_str("\":");
                text.push_str(raw.get());
            }
        }
        text.push('}');
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text))
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
    fn typed_is_what_a_rollout_parses_to() {
        use crate::PipelineRollout;
        let raw = json!({
            "apiVersion": "numaplane.numaproj.io/v1alpha1",
            "kind": "PipelineRollout",
            "metadata": {"name": "pr", "namespace": "ns", "generation": 3,
                         "annotations": {"a": "b"}, "finalizers": ["f"]},
            "spec": {"pipeline": {"spec": {"interStepBufferServiceName": "isb",
                                           "vertices": [{"name": "in", "x": null}]}},
                     "strategy": {"progressive": {"forcePromote": true}}},
            "status": {"phase": "Deployed", "observedGeneration": 3, "nameCount": 2}
        });
        let text = raw.to_string();
        let compact: Compact<PipelineRollout> = serde_json::from_str(&text).expect("compact");
        let direct: PipelineRollout = serde_json::from_str(&text).expect("direct");
        let typed = compact.typed().expect("typed");
        assert_eq!(typed.metadata, direct.metadata);
        assert_eq!(typed.spec, direct.spec);
        assert_eq!(typed.status, direct.status);
        // Without a status, and with one the typed form refuses.
        let bare = json!({"metadata": {"name": "pr"}, "spec": {"pipeline": {"spec": {}}}});
        let compact: Compact<PipelineRollout> =
            serde_json::from_value(bare.clone()).expect("compact");
        let (typed, direct) = (
            compact.typed().expect("typed"),
            serde_json::from_value::<PipelineRollout>(bare).expect("direct"),
        );
        assert_eq!((typed.spec, typed.status), (direct.spec, direct.status));
        let bad = json!({"metadata": {"name": "pr"}, "spec": {"pipeline": {"spec": {}}},
                         "status": {"nameCount": "two"}});
        let compact: Compact<PipelineRollout> = serde_json::from_value(bad).expect("compact");
        let err = compact.typed().expect_err("a string nameCount");
        assert_eq!(err.path().to_string(), "status.nameCount");
        assert_eq!(
            describe(&err),
            r#"status.nameCount: invalid type: string "two", expected i32"#
        );
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
