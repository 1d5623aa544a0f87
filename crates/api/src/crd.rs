//! Generation of the four CustomResourceDefinitions.
//!
//! Machine, MachineSet and MachineDeployment come from `#[derive(CustomResource)]`; the
//! MachineClass CRD (no spec wrapper) is assembled here from its schemars schema with the same
//! schema settings kube-derive uses. All four then get the `apiVersion`, `kind` and `metadata`
//! root properties the reference CRDs declare.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::schema::{OptionalEnum, OptionalIntOrString, StructuralSchemaRewriter};
use kube_core::CustomResourceExt;
use schemars::generate::SchemaSettings;
use schemars::transform::AddNullable;

use crate::{Machine, MachineClass, MachineDeployment, MachineSet};

/// The schemars settings kube-derive uses for CRD schemas (OpenAPI v3, everything inlined,
/// `nullable` instead of null types, structural rewrites).
fn schema_settings() -> SchemaSettings {
    SchemaSettings::openapi3()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .with_transform(AddNullable::default())
        .with_transform(StructuralSchemaRewriter)
        .with_transform(OptionalEnum)
        .with_transform(OptionalIntOrString)
}

/// Converts the MachineClass schemars schema into `JSONSchemaProps`.
///
/// The conversion only fails if schemars emitted a keyword with an unexpected JSON type, which
/// the schema of a fixed Rust type cannot do at runtime; the crate's tests pin the exact
/// output (`committed_crds_match_generated`). Should it ever fail, the error is returned so the
/// caller can decide.
pub(crate) fn machine_class_schema() -> Result<JSONSchemaProps, serde_json::Error> {
    let generator = schema_settings().into_generator();
    let schema = generator.into_root_schema_for::<MachineClass>();
    serde_json::from_value(serde_json::to_value(schema)?)
}

/// A permissive (but valid, structural) root schema, used only if
/// [`machine_class_schema`] failed: an object that keeps every field.
fn permissive_schema() -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("object".to_owned()),
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..JSONSchemaProps::default()
    }
}

fn machine_class_crd() -> CustomResourceDefinition {
    let schema = machine_class_schema().unwrap_or_else(|_| permissive_schema());
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("machineclasses.{}", crate::GROUP)),
            ..ObjectMeta::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: crate::GROUP.to_owned(),
            names: CustomResourceDefinitionNames {
                kind: "MachineClass".to_owned(),
                plural: "machineclasses".to_owned(),
                singular: Some("machineclass".to_owned()),
                short_names: Some(vec!["mcc".to_owned()]),
                ..CustomResourceDefinitionNames::default()
            },
            scope: "Namespaced".to_owned(),
            versions: vec![CustomResourceDefinitionVersion {
                name: crate::VERSION.to_owned(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                ..CustomResourceDefinitionVersion::default()
            }],
            ..CustomResourceDefinitionSpec::default()
        },
        status: None,
    }
}

fn string_property(description: &str) -> JSONSchemaProps {
    JSONSchemaProps {
        description: Some(description.to_owned()),
        type_: Some("string".to_owned()),
        ..JSONSchemaProps::default()
    }
}

/// Adds what the reference CRDs have and kube-derive does not generate: the `apiVersion`,
/// `kind` and `metadata` root properties, and `listKind`.
fn with_type_meta(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    if crd.spec.names.list_kind.is_none() {
        crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
    }
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|validation| validation.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        // schemars titles the root schema with the type name; the reference has no title.
        schema.title = None;
        let properties = schema.properties.get_or_insert_with(BTreeMap::new);
        properties.insert(
            "apiVersion".to_owned(),
            string_property(
                "APIVersion defines the versioned schema of this representation of an object.",
            ),
        );
        properties.insert(
            "kind".to_owned(),
            string_property(
                "Kind is a string value representing the REST resource this object represents.",
            ),
        );
        properties.insert(
            "metadata".to_owned(),
            JSONSchemaProps {
                type_: Some("object".to_owned()),
                ..JSONSchemaProps::default()
            },
        );
    }
    crd
}

/// The four CRDs in a stable order: MachineClass, Machine, MachineSet, MachineDeployment.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        with_type_meta(machine_class_crd()),
        with_type_meta(Machine::crd()),
        with_type_meta(MachineSet::crd()),
        with_type_meta(MachineDeployment::crd()),
    ]
}

/// The file name under which a CRD is committed: `<plural>.<group>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.{}.yaml", crd.spec.names.plural, crd.spec.group)
}

/// One CRD as a YAML document (without a leading `---`). Should serialization ever fail, the
/// document is a YAML comment naming the error, which no apiserver accepts silently.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> String {
    serde_yaml::to_string(crd).unwrap_or_else(|error| {
        format!(
            "# failed to serialize CRD {}: {error}\n",
            crd.metadata.name.as_deref().unwrap_or_default()
        )
    })
}

/// All four CRDs as one multi-document YAML stream (each document starts with `---`), in the
/// order of [`crds`]. This is what `kubectl apply -f` takes.
pub fn crds_yaml() -> String {
    crds()
        .iter()
        .map(|crd| format!("---\n{}", crd_yaml(crd)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_class_schema_converts_without_fallback() {
        let schema = machine_class_schema().unwrap();
        let properties = schema.properties.unwrap();
        assert!(properties.contains_key("providerSpec"));
        assert_eq!(schema.required, Some(vec!["providerSpec".to_owned()]));
    }

    #[test]
    fn crds_are_in_stable_order_and_namespaced() {
        let names: Vec<_> = crds()
            .iter()
            .map(|crd| crd.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "machineclasses.machine.sapcloud.io",
                "machines.machine.sapcloud.io",
                "machinesets.machine.sapcloud.io",
                "machinedeployments.machine.sapcloud.io"
            ]
        );
        for crd in crds() {
            assert_eq!(crd.spec.scope, "Namespaced");
            assert_eq!(crd.spec.versions.len(), 1);
            assert_eq!(crd.spec.versions[0].name, "v1alpha1");
            assert!(crd.spec.versions[0].served && crd.spec.versions[0].storage);
        }
    }

    #[test]
    fn crds_yaml_is_a_multi_document_stream() {
        let yaml = crds_yaml();
        assert_eq!(yaml.matches("---\n").count(), 4);
        assert!(!yaml.contains("# failed"));
        for document in yaml.split("---\n").filter(|doc| !doc.is_empty()) {
            let crd: CustomResourceDefinition = serde_yaml::from_str(document).unwrap();
            assert_eq!(crd.spec.group, "machine.sapcloud.io");
        }
    }
}
