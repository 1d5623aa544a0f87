//! `MachineClass`: reusable provider configuration. Unlike the other kinds it has no
//! `spec`/`status` wrapper; its fields sit at the top level of the object, so it is written by
//! hand instead of with `#[derive(CustomResource)]`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::{atomic, provider_spec, resource_list};

/// MachineClass can be used to templatize and re-use provider configuration across multiple
/// Machines / MachineSets / MachineDeployments.
///
/// `machine.sapcloud.io/v1alpha1`, namespaced, short name `mcc`, no status subresource.
/// Implements [`k8s_openapi::Resource`] and [`k8s_openapi::Metadata`], hence
/// [`kube_core::Resource`], so `kube::Api<MachineClass>` works like for any other kind.
#[derive(Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    rename = "MachineClass",
    transform = require_provider_spec,
    description = "MachineClass can be used to templatize and re-use provider configuration across multiple Machines / MachineSets / MachineDeployments."
)]
pub struct MachineClass {
    /// Standard object metadata.
    #[serde(default)]
    #[schemars(skip)]
    pub metadata: ObjectMeta,

    /// NodeTemplate contains subfields to track all node resources and other node info
    /// required to scale nodegroup from zero (cluster-autoscaler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplate>,

    /// CredentialsSecretRef can optionally store the credentials (in this case the SecretRef
    /// does not need to store them). This might be useful if multiple machine classes with
    /// the same credentials but different user-datas are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "atomic::<SecretReference>")]
    pub credentials_secret_ref: Option<SecretReference>,

    /// Provider-specific configuration to use during node creation: raw JSON, passed to the
    /// driver unchanged (unknown fields are preserved). Required by the CRD; read as `Null`
    /// when missing, which [`validate_machine_class`](crate::validation::validate_machine_class)
    /// rejects.
    #[serde(default)]
    #[schemars(schema_with = "provider_spec")]
    pub provider_spec: serde_json::Value,

    /// Provider is the combination of name and location of cloud-specific drivers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider: String,

    /// SecretRef stores the necessary secrets such as credentials or userdata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "atomic::<SecretReference>")]
    pub secret_ref: Option<SecretReference>,
}

/// Node resources and other node information that cluster-autoscaler needs to scale a node
/// group from zero (`nodeTemplate` of a MachineClass).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct NodeTemplate {
    /// Capacity contains subfields to track all node resources required to scale nodegroup
    /// from zero (the machine controller requires cpu, gpu and memory).
    #[schemars(schema_with = "resource_list")]
    pub capacity: BTreeMap<String, Quantity>,

    /// VirtualCapacity represents the expected Node 'virtual' capacity ie comprising virtual
    /// extended resources.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list")]
    pub virtual_capacity: BTreeMap<String, Quantity>,

    /// Instance type of the node belonging to nodeGroup
    pub instance_type: String,

    /// Region of the expected node belonging to nodeGroup
    pub region: String,

    /// Zone of the expected node belonging to nodeGroup
    pub zone: String,

    /// CPU Architecture of the node belonging to nodeGroup
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

/// `providerSpec` is required in the CRD (as in the reference) even though the Rust type reads
/// a missing one as `Null` (so that validation can report it instead of a parse error).
fn require_provider_spec(schema: &mut schemars::Schema) {
    if let Some(required) = schema
        .ensure_object()
        .entry("required")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()))
        .as_array_mut()
    {
        let name = serde_json::Value::from("providerSpec");
        if !required.contains(&name) {
            required.push(name);
        }
    }
}

impl MachineClass {
    /// A MachineClass with the given name and providerSpec, everything else empty.
    pub fn new(name: &str, provider_spec: serde_json::Value) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            provider_spec,
            ..Self::default()
        }
    }
}

impl Serialize for MachineClass {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The wire shape: `apiVersion` and `kind` first, then the fields.
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Repr<'a> {
            api_version: &'a str,
            kind: &'a str,
            metadata: &'a ObjectMeta,
            #[serde(skip_serializing_if = "Option::is_none")]
            node_template: Option<&'a NodeTemplate>,
            #[serde(skip_serializing_if = "Option::is_none")]
            credentials_secret_ref: Option<&'a SecretReference>,
            provider_spec: &'a serde_json::Value,
            #[serde(skip_serializing_if = "str::is_empty")]
            provider: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            secret_ref: Option<&'a SecretReference>,
        }

        Repr {
            api_version: <Self as k8s_openapi::Resource>::API_VERSION,
            kind: <Self as k8s_openapi::Resource>::KIND,
            metadata: &self.metadata,
            node_template: self.node_template.as_ref(),
            credentials_secret_ref: self.credentials_secret_ref.as_ref(),
            provider_spec: &self.provider_spec,
            provider: &self.provider,
            secret_ref: self.secret_ref.as_ref(),
        }
        .serialize(serializer)
    }
}

impl k8s_openapi::Resource for MachineClass {
    const API_VERSION: &'static str = "machine.sapcloud.io/v1alpha1";
    const GROUP: &'static str = crate::GROUP;
    const KIND: &'static str = "MachineClass";
    const VERSION: &'static str = crate::VERSION;
    const URL_PATH_SEGMENT: &'static str = "machineclasses";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for MachineClass {
    const LIST_KIND: &'static str = "MachineClassList";
}

impl k8s_openapi::Metadata for MachineClass {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
