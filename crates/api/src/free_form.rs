//! Free-form JSON fields (embedded child specs, rider definitions, raw child status) read so that
//! one object nested too deep never stops the watch of its kind.
//!
//! serde_json refuses documents nested deeper than 128 levels, while the API server stores up to
//! 10,000 (and the Go reference reads them). Read as part of a list, one such rollout failed the
//! whole list: every rollout of the kind stopped reconciling at the next relist. Here the field
//! is first taken as raw text (skipped without recursion), then parsed; a field that cannot be
//! parsed becomes `{UNREADABLE: <why>}`, which the reconcile reports at the field's path.

use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// The one key of a free-form field that could not be read.
pub const UNREADABLE: &str = "numaplane.numaproj.io/unreadable";

/// Parses one free-form field, or says why it could not (see the module's comment).
pub fn parse(raw: &RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap_or_else(|e| {
        let mut why = serde_json::Map::new();
        let msg = e.to_string();
        let msg = if msg.starts_with("recursion limit exceeded") {
            "nested deeper than 128 levels".to_string()
        } else {
            msg
        };
        why.insert(UNREADABLE.into(), msg.into());
        Value::Object(why)
    })
}

/// `#[serde(deserialize_with)]` for a `Value` field.
pub fn value<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    Ok(parse(&Box::<RawValue>::deserialize(d)?))
}

/// `#[serde(deserialize_with)]` for an `Option<Value>` field.
pub fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Ok(Option::<Box<RawValue>>::deserialize(d)?
        .map(|raw| parse(&raw))
        .filter(|v| !v.is_null()))
}

/// Why a free-form value could not be read, if it could not.
pub fn unreadable(v: &Value) -> Option<&str> {
    let obj = v.as_object()?;
    if obj.len() != 1 {
        return None;
    }
    obj.get(UNREADABLE)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PipelineRollout;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        (0..depth).fold(json!("bottom"), |v, _| json!([v]))
    }

    fn rollout(edges: Value) -> String {
        json!({
            "apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "PipelineRollout",
            "metadata": {"name": "deep"},
            "spec": {"pipeline": {"spec": {"vertices": [], "edges": edges}}}
        })
        .to_string()
    }

    #[test]
    fn a_spec_nested_too_deep_is_read_as_unreadable_not_refused() {
        // A list of these failed as a whole before; now the object is read and says why.
        let deep = rollout(nested(300));
        let pr: PipelineRollout = serde_json::from_str(&deep).expect("read");
        assert_eq!(
            unreadable(&pr.spec.pipeline.spec),
            Some("nested deeper than 128 levels")
        );
        // As a list page is read (kube's ObjectList).
        #[derive(Deserialize)]
        struct List {
            items: Vec<PipelineRollout>,
        }
        let list = format!(r#"{{"items": [{deep}, {}]}}"#, rollout(json!([])));
        let list: List = serde_json::from_str(&list).expect("both items");
        assert_eq!(list.items.len(), 2);
        assert_eq!(unreadable(&list.items[1].spec.pipeline.spec), None);
    }

    #[test]
    fn ordinary_and_moderately_deep_values_are_unchanged() {
        let doc = rollout(nested(100));
        let pr: PipelineRollout = serde_json::from_str(&doc).expect("read");
        assert_eq!(pr.spec.pipeline.spec["edges"], nested(100));
        // Read from a Value (YAML files go through one) as well as from text.
        let v: Value = serde_json::from_str(&rollout(json!([{"from": "a", "to": "b"}]))).unwrap();
        let pr: PipelineRollout = serde_json::from_value(v).expect("from a value");
        assert_eq!(pr.spec.pipeline.spec["edges"][0]["to"], "b");
        assert_eq!(unreadable(&pr.spec.pipeline.spec), None);
    }
}
