//! The ARM request and response bodies, with only the fields the driver
//! writes or reads (unknown fields are ignored on the way in).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A reference by ARM ID.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SubResource {
    /// The ARM ID.
    #[serde(default)]
    pub id: String,
}

impl SubResource {
    /// A reference to `id`.
    pub fn new(id: impl Into<String>) -> Self {
        SubResource { id: id.into() }
    }
}

mod vm;
pub use vm::*;

/// `Microsoft.Network/networkInterfaces`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkInterface {
    /// ARM ID (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Region.
    #[serde(default)]
    pub location: String,
    /// Tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Properties.
    #[serde(default)]
    pub properties: NicProperties,
}

/// `properties` of a NIC.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NicProperties {
    /// IP configurations.
    #[serde(default)]
    pub ip_configurations: Vec<IpConfiguration>,
    /// IP forwarding.
    #[serde(
        default,
        rename = "enableIPForwarding",
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_ip_forwarding: Option<bool>,
    /// Accelerated networking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_accelerated_networking: Option<bool>,
    /// `Standard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_type: Option<String>,
    /// Provisioning state (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<String>,
    /// The VM it is attached to (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine: Option<SubResource>,
}

/// An IP configuration of a NIC.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IpConfiguration {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Properties.
    #[serde(default)]
    pub properties: IpConfigurationProperties,
}

/// `properties` of an IP configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IpConfigurationProperties {
    /// `Dynamic`.
    #[serde(
        default,
        rename = "privateIPAllocationMethod",
        skip_serializing_if = "Option::is_none"
    )]
    pub private_ip_allocation_method: Option<String>,
    /// The subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<SubResource>,
    /// The private IP (read only).
    #[serde(
        default,
        rename = "privateIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub private_ip_address: Option<String>,
    /// Primary configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<bool>,
}

/// `Microsoft.Network/virtualNetworks/subnets`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Subnet {
    /// ARM ID.
    #[serde(default)]
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
}

/// `Microsoft.Compute/disks`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    /// ARM ID (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Region.
    #[serde(default)]
    pub location: String,
    /// Tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Storage account type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<DiskSku>,
    /// The VM it is attached to (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    /// Properties.
    #[serde(default)]
    pub properties: DiskProperties,
}

/// `sku` of a disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskSku {
    /// e.g. `Premium_LRS`.
    #[serde(default)]
    pub name: String,
}

/// `properties` of a disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskProperties {
    /// How it is created.
    #[serde(default)]
    pub creation_data: CreationData,
    /// Size in GiB.
    #[serde(
        default,
        rename = "diskSizeGB",
        skip_serializing_if = "Option::is_none"
    )]
    pub disk_size_gb: Option<i64>,
    /// `Linux`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_type: Option<String>,
    /// Provisioning state (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<String>,
}

/// `creationData` of a disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreationData {
    /// `FromImage`, `Empty`, …
    #[serde(default)]
    pub create_option: String,
    /// Image by ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_reference: Option<ImageDiskReference>,
    /// Gallery image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gallery_image_reference: Option<ImageDiskReference>,
}

/// An image a disk is created from (the Disks API's `ImageDiskReference`:
/// `id`, `sharedGalleryImageId`, `communityGalleryImageId`, in the REST API
/// specs' casing).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageDiskReference {
    /// Image ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Shared gallery image.
    #[serde(
        default,
        rename = "sharedGalleryImageId",
        skip_serializing_if = "Option::is_none"
    )]
    pub shared_gallery_image_id: Option<String>,
    /// Community gallery image.
    #[serde(
        default,
        rename = "communityGalleryImageId",
        skip_serializing_if = "Option::is_none"
    )]
    pub community_gallery_image_id: Option<String>,
}

/// A marketplace VM image version.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VmImage {
    /// ARM ID.
    #[serde(default)]
    pub id: String,
    /// Properties.
    #[serde(default)]
    pub properties: VmImageProperties,
}

/// `properties` of a VM image.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VmImageProperties {
    /// The purchase plan, for images that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<ImagePlan>,
}

/// A VM image's purchase plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ImagePlan {
    /// Publisher.
    #[serde(default)]
    pub publisher: String,
    /// Plan name.
    #[serde(default)]
    pub name: String,
    /// Product.
    #[serde(default)]
    pub product: String,
}

/// A page of a list call.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPage<T> {
    /// The items.
    #[serde(default = "Vec::new")]
    pub value: Vec<T>,
    /// The next page.
    #[serde(default)]
    pub next_link: Option<String>,
}

/// A named, typed, tagged resource of a list (VM, NIC or disk).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct TaggedResource {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Location.
    #[serde(default)]
    pub location: String,
    /// Tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// The body of a Resource Graph query.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueryRequest {
    /// Subscriptions to search.
    pub subscriptions: Vec<String>,
    /// The KQL query.
    pub query: String,
    /// Paging.
    pub options: QueryOptions,
}

/// Options of a Resource Graph query.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QueryOptions {
    /// The page to fetch.
    #[serde(rename = "$skipToken", skip_serializing_if = "Option::is_none")]
    pub skip_token: Option<String>,
    /// `objectArray`.
    #[serde(rename = "resultFormat")]
    pub result_format: String,
}

/// A page of a Resource Graph answer.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryResponse {
    /// All matching rows.
    #[serde(default)]
    pub total_records: i64,
    /// Rows in this page.
    #[serde(default)]
    pub count: i64,
    /// The rows (`objectArray`).
    #[serde(default)]
    pub data: Vec<Value>,
    /// The next page.
    #[serde(default, rename = "$skipToken")]
    pub skip_token: Option<String>,
}

/// The ARM error envelope.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ErrorEnvelope {
    /// The error.
    #[serde(default)]
    pub error: ErrorBody,
}

/// An ARM error.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ErrorBody {
    /// Code, e.g. `AllocationFailed`.
    #[serde(default)]
    pub code: String,
    /// Message.
    #[serde(default)]
    pub message: String,
}

/// The body of an `Azure-AsyncOperation` poll.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct OperationStatus {
    /// `InProgress`, `Succeeded`, `Failed`, `Canceled`.
    #[serde(default)]
    pub status: String,
    /// Why it failed.
    #[serde(default)]
    pub error: Option<ErrorBody>,
}

#[cfg(test)]
mod wire_name_tests {
    use super::ImageDiskReference;
    use serde_json::json;

    /// The Disks API's `ImageDiskReference` members, as azure-rest-api-specs
    /// (`DiskRP` `ImageDiskReference`) spells them; ARM answers in this casing.
    #[test]
    fn gallery_image_ids_use_the_rest_api_specs_wire_names() {
        let r = ImageDiskReference {
            id: None,
            shared_gallery_image_id: Some("/SharedGalleries/g/Images/i/Versions/1".into()),
            community_gallery_image_id: Some("/CommunityGalleries/c/Images/i/Versions/1".into()),
        };
        let body = serde_json::to_value(&r).expect("serializes");
        assert_eq!(
            body,
            json!({
                "sharedGalleryImageId": "/SharedGalleries/g/Images/i/Versions/1",
                "communityGalleryImageId": "/CommunityGalleries/c/Images/i/Versions/1",
            })
        );
        let answered: ImageDiskReference = serde_json::from_value(json!({
            "communityGalleryImageId": "/CommunityGalleries/c/Images/i/Versions/1",
            "lun": 0,
        }))
        .expect("parses ARM's answer");
        assert_eq!(
            answered.community_gallery_image_id.as_deref(),
            Some("/CommunityGalleries/c/Images/i/Versions/1")
        );
    }
}
