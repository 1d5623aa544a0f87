//! schemars helpers for the parts of the CRD schemas that are not derived 1:1 from the Rust
//! types (free-form objects, atomic maps), and the serde helpers shared by the types.

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};

/// `{type: object, x-kubernetes-preserve-unknown-fields: true}`: used for embedded
/// `ObjectMeta` (template and nodeTemplate metadata) exactly as the reference CRDs do.
pub(crate) fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Free-form metadata of a template (labels, annotations, ...), unknown fields preserved.
pub(crate) fn template_metadata(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Standard object's metadata (labels, annotations, finalizers, ...) copied to the objects created from this template.",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// The opaque, provider-specific `providerSpec` of a MachineClass.
pub(crate) fn provider_spec(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Provider-specific configuration used to create the machines. Opaque to the controllers; interpreted by the provider driver.",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A `ResourceList` (resource name → quantity) such as `{cpu: "2", memory: 8Gi}`.
pub(crate) fn resource_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": true,
        },
    })
}

/// The schema of `T`, marked `x-kubernetes-map-type: atomic` (replaced as a whole by
/// server-side apply), as the reference does for selectors and secret references.
pub(crate) fn atomic<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<T>();
    schema.insert("x-kubernetes-map-type".to_owned(), "atomic".into());
    schema
}

/// `skip_serializing_if` helper: omit plain values that equal their default (Go `omitempty`).
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
