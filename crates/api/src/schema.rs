//! Schema helpers for fields kept as free-form JSON.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object whose fields the API server must keep as written (embedded child specs, rider
/// definitions, raw child status, HPA definitions).
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Like [`preserve_unknown_object`] but for optional fields.
pub fn optional_preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}
