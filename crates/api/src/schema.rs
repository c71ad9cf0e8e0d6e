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

/// An optional 32-bit integer, bounded in the schema: the API server does not enforce
/// `format: int32` in a CRD (kubernetes/kubernetes#136091), and one stored value out of range
/// would fail every list of the kind in the operator (the whole kind would stop reconciling).
pub fn optional_int32(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "integer",
        "format": "int32",
        "nullable": true,
        "minimum": i32::MIN,
        "maximum": i32::MAX
    })
}
