//! What ARM and the Compute resource provider check before they act, each
//! refused with ARM's error envelope and the code ARM answers:
//!
//! - `api-version`: missing → 400 `MissingApiVersionParameter`; a version
//!   the resource type does not publish → 400 `NoRegisteredProviderFound`.
//!   The versions known per type are the stable (and the one preview)
//!   folders of `Azure/azure-rest-api-specs` listed in [`versions_of`];
//! - a VM body with a member the 2023-07-01 `VirtualMachine` or
//!   `VirtualMachineProperties` definitions do not have → 400
//!   `InvalidRequestContent` ("Could not find member …");
//! - required VM parameters (`osDisk.createOption`, `adminUsername`) → 400
//!   `InvalidParameter` "Required parameter '…' is missing (null).", with
//!   the parameter as `target`;
//! - a Linux computer name longer than 64 characters or with a character
//!   Compute refuses → 400 `InvalidParameter`, target `computerName`.

use serde_json::Value;

/// The API versions the fake knows for a path's resource type, from the
/// folders of `azure-rest-api-specs` (`specification/<rp>/resource-manager/
/// <namespace>/…/stable|preview/<version>`); `None` for paths without a
/// resource type (the token endpoint).
pub(crate) fn versions_of(segs: &[&str]) -> Option<&'static [&'static str]> {
    let lower: Vec<String> = segs.iter().map(|s| s.to_ascii_lowercase()).collect();
    let after = |word: &str| {
        lower
            .iter()
            .position(|s| s == word)
            .and_then(|i| lower.get(i + 1))
            .map(String::as_str)
    };
    const COMPUTE: &[&str] = &[
        "2023-03-01",
        "2023-07-01",
        "2023-09-01",
        "2024-03-01",
        "2024-07-01",
    ];
    const DISK: &[&str] = &["2023-01-02", "2023-04-02", "2023-10-02", "2024-03-02"];
    const NETWORK: &[&str] = &[
        "2023-04-01",
        "2023-05-01",
        "2023-06-01",
        "2023-09-01",
        "2023-11-01",
        "2024-01-01",
    ];
    const RESOURCES: &[&str] = &["2021-04-01", "2022-09-01"];
    const GRAPH: &[&str] = &["2021-03-01", "2021-06-01-preview", "2022-10-01"];
    const MARKETPLACE: &[&str] = &["2015-06-01", "2021-01-01"];
    match after("providers") {
        Some("microsoft.compute") => {
            let kind = lower
                .iter()
                .rposition(|s| s == "microsoft.compute")
                .and_then(|i| lower.get(i + 1));
            match kind.map(String::as_str) {
                Some("disks") => Some(DISK),
                _ => Some(COMPUTE),
            }
        }
        Some("microsoft.network") => Some(NETWORK),
        Some("microsoft.resourcegraph") => Some(GRAPH),
        Some("microsoft.marketplaceordering") => Some(MARKETPLACE),
        Some(_) => None,
        None if lower.first().is_some_and(|s| s == "subscriptions") => Some(RESOURCES),
        None => None,
    }
}

/// A refusal: status, ARM code, message, optional target.
pub(crate) type Refused = (u16, &'static str, String, Option<&'static str>);

/// Checks the `api-version` query parameter of a request on `segs`.
pub(crate) fn api_version(segs: &[&str], query: Option<&str>) -> Result<(), Refused> {
    let Some(known) = versions_of(segs) else {
        return Ok(());
    };
    let version = query
        .unwrap_or_default()
        .split('&')
        .find_map(|p| p.strip_prefix("api-version="))
        .filter(|v| !v.is_empty());
    let Some(version) = version else {
        return Err((
            400,
            "MissingApiVersionParameter",
            "The api-version query parameter (?api-version=) is required for all requests.".into(),
            None,
        ));
    };
    if known.contains(&version) {
        return Ok(());
    }
    let kind = segs.last().copied().unwrap_or_default();
    Err((
        400,
        "NoRegisteredProviderFound",
        format!(
            "No registered resource provider found for location 'westeurope' and API version '{version}' for type '{kind}'. The supported api-versions are '{}'.",
            known.join(", ")
        ),
        None,
    ))
}

/// Members of `VirtualMachine` (with those of `Resource`) at 2023-07-01.
const VM_MEMBERS: &[&str] = &[
    "id",
    "name",
    "type",
    "location",
    "tags",
    "plan",
    "properties",
    "resources",
    "identity",
    "zones",
    "extendedLocation",
    "managedBy",
    "etag",
];

/// Members of `VirtualMachineProperties` at 2023-07-01.
const VM_PROPERTIES: &[&str] = &[
    "hardwareProfile",
    "scheduledEventsPolicy",
    "storageProfile",
    "additionalCapabilities",
    "osProfile",
    "networkProfile",
    "securityProfile",
    "diagnosticsProfile",
    "availabilitySet",
    "virtualMachineScaleSet",
    "proximityPlacementGroup",
    "priority",
    "evictionPolicy",
    "billingProfile",
    "host",
    "hostGroup",
    "provisioningState",
    "instanceView",
    "licenseType",
    "vmId",
    "extensionsTimeBudget",
    "platformFaultDomain",
    "scheduledEventsProfile",
    "userData",
    "capacityReservation",
    "applicationProfile",
    "timeCreated",
];

/// Members of `NetworkInterface` (with those of `Resource`), Microsoft.Network stable.
const NIC_MEMBERS: &[&str] = &[
    "id",
    "name",
    "type",
    "location",
    "tags",
    "extendedLocation",
    "etag",
    "properties",
];

/// Members of `NetworkInterfacePropertiesFormat`, Microsoft.Network stable.
const NIC_PROPERTIES: &[&str] = &[
    "virtualMachine",
    "networkSecurityGroup",
    "privateEndpoint",
    "ipConfigurations",
    "tapConfigurations",
    "dnsSettings",
    "macAddress",
    "primary",
    "vnetEncryptionSupported",
    "defaultOutboundConnectivityEnabled",
    "enableAcceleratedNetworking",
    "disableTcpStateTracking",
    "enableIPForwarding",
    "hostedWorkloads",
    "dscpConfiguration",
    "resourceGuid",
    "provisioningState",
    "workloadType",
    "nicType",
    "privateLinkService",
    "migrationPhase",
    "auxiliaryMode",
    "auxiliarySku",
];

/// Members of `NetworkInterfaceIPConfiguration` and its properties format.
const IP_CONFIGURATION_MEMBERS: &[&str] = &["id", "name", "type", "etag", "properties"];
const IP_CONFIGURATION_PROPERTIES: &[&str] = &[
    "gatewayLoadBalancer",
    "virtualNetworkTaps",
    "applicationGatewayBackendAddressPools",
    "loadBalancerBackendAddressPools",
    "loadBalancerInboundNatRules",
    "privateIPAddress",
    "privateIPAddressPrefixLength",
    "privateIPAllocationMethod",
    "privateIPAddressVersion",
    "subnet",
    "primary",
    "publicIPAddress",
    "applicationSecurityGroups",
    "provisioningState",
    "privateLinkConnectionProperties",
];

/// Members of `Disk` (with those of `Resource`), DiskRP stable.
const DISK_MEMBERS: &[&str] = &[
    "id",
    "name",
    "type",
    "location",
    "tags",
    "managedBy",
    "managedByExtended",
    "sku",
    "zones",
    "extendedLocation",
    "properties",
];

/// Members of `DiskProperties`, DiskRP stable.
const DISK_PROPERTIES: &[&str] = &[
    "timeCreated",
    "osType",
    "hyperVGeneration",
    "purchasePlan",
    "supportedCapabilities",
    "creationData",
    "diskSizeGB",
    "diskSizeBytes",
    "uniqueId",
    "encryptionSettingsCollection",
    "provisioningState",
    "diskIOPSReadWrite",
    "diskMBpsReadWrite",
    "diskIOPSReadOnly",
    "diskMBpsReadOnly",
    "diskState",
    "encryption",
    "maxShares",
    "shareInfo",
    "networkAccessPolicy",
    "diskAccessId",
    "burstingEnabledTime",
    "tier",
    "burstingEnabled",
    "propertyUpdatesInProgress",
    "supportsHibernation",
    "securityProfile",
    "completionPercent",
    "publicNetworkAccess",
    "dataAccessAuthMode",
    "optimizedForFrequentAttach",
    "LastOwnershipUpdateTime",
    "availabilityPolicy",
];

/// Members of `CreationData` and `ImageDiskReference`, DiskRP stable.
const CREATION_DATA: &[&str] = &[
    "createOption",
    "storageAccountId",
    "imageReference",
    "galleryImageReference",
    "sourceUri",
    "sourceResourceId",
    "sourceUniqueId",
    "uploadSizeBytes",
    "logicalSectorSize",
    "securityDataUri",
    "performancePlus",
    "elasticSanResourceId",
    "provisionedBandwidthCopySpeed",
];
const IMAGE_DISK_REFERENCE: &[&str] = &[
    "id",
    "sharedGalleryImageId",
    "communityGalleryImageId",
    "lun",
];

/// The Network resource provider's checks of a NIC PUT body.
pub(crate) fn nic_put(body: &Value) -> Result<(), Refused> {
    unknown_member(body, NIC_MEMBERS, "NetworkInterface", "")?;
    let props = &body["properties"];
    unknown_member(
        props,
        NIC_PROPERTIES,
        "NetworkInterfacePropertiesFormat",
        "properties.",
    )?;
    for (i, ipc) in props["ipConfigurations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("properties.ipConfigurations[{i}].");
        unknown_member(
            ipc,
            IP_CONFIGURATION_MEMBERS,
            "NetworkInterfaceIPConfiguration",
            &path,
        )?;
        unknown_member(
            &ipc["properties"],
            IP_CONFIGURATION_PROPERTIES,
            "NetworkInterfaceIPConfigurationPropertiesFormat",
            &format!("{path}properties."),
        )?;
    }
    Ok(())
}

/// The Compute (disk) resource provider's checks of a disk PUT body.
pub(crate) fn disk_put(body: &Value) -> Result<(), Refused> {
    unknown_member(body, DISK_MEMBERS, "Disk", "")?;
    let props = &body["properties"];
    unknown_member(props, DISK_PROPERTIES, "DiskProperties", "properties.")?;
    let creation = &props["creationData"];
    unknown_member(
        creation,
        CREATION_DATA,
        "CreationData",
        "properties.creationData.",
    )?;
    for r in ["imageReference", "galleryImageReference"] {
        unknown_member(
            &creation[r],
            IMAGE_DISK_REFERENCE,
            "ImageDiskReference",
            &format!("properties.creationData.{r}."),
        )?;
    }
    if creation.is_object() && creation["createOption"].as_str().is_none_or(str::is_empty) {
        return Err(required("creationData.createOption"));
    }
    Ok(())
}

fn unknown_member(obj: &Value, known: &[&str], ty: &str, path: &str) -> Result<(), Refused> {
    for k in obj.as_object().into_iter().flat_map(|o| o.keys()) {
        // Newtonsoft matches member names case-insensitively.
        if !known.iter().any(|m| m.eq_ignore_ascii_case(k)) {
            return Err((
                400,
                "InvalidRequestContent",
                format!(
                    "The request content was invalid and could not be deserialized: 'Could not find member '{k}' on object of type '{ty}'. Path '{path}{k}'.'."
                ),
                None,
            ));
        }
    }
    Ok(())
}

fn required(name: &'static str) -> Refused {
    (
        400,
        "InvalidParameter",
        format!("Required parameter '{name}' is missing (null)."),
        Some(name),
    )
}

/// The Compute resource provider's checks of a VM PUT body.
pub(crate) fn vm_put(body: &Value) -> Result<(), Refused> {
    unknown_member(body, VM_MEMBERS, "VirtualMachine", "")?;
    let props = &body["properties"];
    unknown_member(
        props,
        VM_PROPERTIES,
        "VirtualMachineProperties",
        "properties.",
    )?;
    let os_disk = &props["storageProfile"]["osDisk"];
    if os_disk.is_object() && os_disk["createOption"].as_str().is_none_or(str::is_empty) {
        return Err(required("osDisk.createOption"));
    }
    let os = &props["osProfile"];
    if os.is_object() {
        if os["adminUsername"].as_str().is_none_or(str::is_empty) {
            return Err(required("adminUsername"));
        }
        let name = os["computerName"].as_str().unwrap_or_default();
        const REFUSED: &str = "`~!@#$%^&*()=+_[]{}\\|;:'\",<>/?";
        if name.len() > 64
            || name
                .chars()
                .any(|c| REFUSED.contains(c) || c.is_whitespace())
        {
            return Err((
                400,
                "InvalidParameter",
                "Linux host name cannot exceed 64 characters in length or contain the following characters: ` ~ ! @ # $ % ^ & * ( ) = + _ [ ] { } \\ | ; : ' \" , < > / ?.".into(),
                Some("computerName"),
            ));
        }
    }
    Ok(())
}
