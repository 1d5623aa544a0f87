use super::*;
use mcm_api::MachineClass;
use serde_json::json;

pub(crate) fn valid_spec() -> serde_json::Value {
    json!({
        "location": "westeurope",
        "resourceGroup": "shoot--foo--bar",
        "subnetInfo": {"vnetName": "shoot--foo--bar", "subnetName": "shoot--foo--bar-nodes"},
        "tags": {"kubernetes.io-cluster-shoot--foo--bar": "1", "kubernetes.io-role-node": "1", "Name": "shoot--foo--bar"},
        "properties": {
            "hardwareProfile": {"vmSize": "Standard_D2s_v3"},
            "storageProfile": {
                "imageReference": {"urn": "sap:gardenlinux:greatest:1443.3.0"},
                "osDisk": {"caching": "None", "diskSizeGB": 50, "createOption": "FromImage",
                    "managedDisk": {"storageAccountType": "StandardSSD_LRS"}},
                "dataDisks": [{"lun": 0, "diskSizeGB": 20, "storageAccountType": "Premium_LRS", "name": "etcd"}]
            },
            "osProfile": {"adminUsername": "core", "linuxConfiguration": {"disablePasswordAuthentication": true,
                "ssh": {"publicKeys": {"path": "/home/core/.ssh/authorized_keys", "keyData": "ssh-rsa AAAA"}}}},
            "zone": 1
        }
    })
}

fn class(spec: serde_json::Value) -> MachineClass {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": "c", "namespace": "default"},
        "provider": "Azure",
        "providerSpec": spec
    }))
    .unwrap()
}

/// A Secret every check accepts.
fn good_secret() -> k8s_openapi::api::core::v1::Secret {
    let data = [
        ("clientID", "c"),
        ("clientSecret", "s"),
        ("subscriptionID", "sub"),
        ("tenantID", "t"),
        ("userData", "#!"),
    ];
    k8s_openapi::api::core::v1::Secret {
        data: Some(
            data.iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        k8s_openapi::ByteString(v.as_bytes().to_vec()),
                    )
                })
                .collect(),
        ),
        ..Default::default()
    }
}

/// CreateMachine's check of a class (the skeleton's, with a good Secret).
fn decode_and_validate(class: &MachineClass) -> Result<AzureProviderSpec, mcm_driver::Status> {
    mcm_driver::provider_spec::decode::<AzureProviderSpec>(class, &good_secret())
        .map(|d| d.value)
        .map_err(mcm_driver::Status::from)
}

fn message(spec: serde_json::Value) -> String {
    let e = decode_and_validate(&class(spec)).unwrap_err();
    assert_eq!(e.code, mcm_driver::Code::InvalidArgument);
    e.message
}

#[test]
fn a_valid_spec_decodes_with_every_field() {
    let s = decode_and_validate(&class(valid_spec())).unwrap();
    assert_eq!(s.location, "westeurope");
    assert_eq!(s.zones(), vec!["1".to_string()]);
    assert_eq!(s.properties.storage_profile.data_disks[0].name, "etcd");
    assert_eq!(
        s.membership_tag_keys(),
        Some((
            "kubernetes.io-cluster-shoot--foo--bar",
            "kubernetes.io-role-node"
        ))
    );
}

#[test]
fn an_empty_spec_lists_every_required_field_in_the_references_words() {
    assert_eq!(
        message(json!({})),
        "error in validation of AzureProviderSpec: [\
providerSpec.location: Required value: must provide a location \
providerSpec.resourceGroup: Required value: must provide a resourceGroup \
providerSpec.subnetInfo.vnetName: Required value: must provide vnetName \
providerSpec.subnetInfo.subnetName: Required value: must provide subnetName \
providerSpec.properties.hardwareProfile.vmSize: Required value: must provide vmSize \
providerSpec.properties.storageProfile.imageReference.id|.urn|.communityGalleryImageID|.sharedGalleryImageID: Forbidden: must specify only one of image id, community gallery image id, shared gallery image id or an urn \
providerSpec.properties.storageProfile.osDisk.createOption: Required value: must provide createOption \
providerSpec.properties.storageProfile.osDisk.diskSizeGB: Invalid value: 0: OSDisk size must be positive and greater than 0 \
providerSpec.properties.osProfile.adminUsername: Required value: adminUsername must be provided \
providerSpec.properties.zone|.availabilitySet|.virtualMachineScaleSet: Forbidden: Only one of Zone, AvailabilitySet and VirtualMachineScaleSet can be set. \
providerSpec.tags.kubernetes.io-cluster-.kubernetes.io-role-: Required value: Tags starting with 'kubernetes.io-cluster-' and 'kubernetes.io-role-' must be set]"
    );
}

#[test]
fn urn_data_disk_zone_and_tag_findings() {
    let mut s = valid_spec();
    s["properties"]["storageProfile"]["imageReference"] = json!({"urn": "sap:gardenlinux::1"});
    s["properties"]["storageProfile"]["dataDisks"] = json!([
        {"lun": 1, "diskSizeGB": 0, "storageAccountType": ""},
        {"lun": 1, "diskSizeGB": 5, "storageAccountType": "Premium_LRS"},
        {"lun": -1, "diskSizeGB": 5, "storageAccountType": "Premium_LRS"}
    ]);
    s["properties"]["availabilitySet"] = json!({"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/availabilitySets/a"});
    s["tags"] = json!({"kubernetes.io-role-node": "1"});
    let m = message(s);
    for part in [
        "providerSpec.properties.storageProfile.imageReference.urn: Required value: urn must have sku",
        "providerSpec.properties.storageProfile.dataDisks.diskSizeGB: Invalid value: 0: DataDisk size must be positive and greater than 0",
        "providerSpec.properties.storageProfile.dataDisks.storageAccountType: Required value: must provide storageAccountType",
        "providerSpec.properties.storageProfile.dataDisks.lun: Invalid value: -1: lun must be a positive number",
        "providerSpec.properties.storageProfile.dataDisks.lun: Invalid value: 1: DataDisk Lun '1' duplicated 2 times, Lun must be unique",
        "providerSpec.properties.zone|.availabilitySet|.virtualMachineScaleSet: Forbidden: Only one of Zone, AvailabilitySet and VirtualMachineScaleSet can be set.",
        "providerSpec.tags.kubernetes.io-cluster-: Required value: Tag starting with kubernetes.io-cluster- must be set",
    ] {
        assert!(m.contains(part), "{part:?} missing from {m}");
    }
}

#[test]
fn bad_urn_enums_cloud_and_capacity_reservation_are_named() {
    let mut s = valid_spec();
    s["properties"]["storageProfile"]["imageReference"] = json!({"urn": "a:b:c"});
    s["properties"]["storageProfile"]["diskControllerType"] = json!("IDE");
    s["properties"]["securityProfile"] = json!({"securityType": "Magic"});
    s["properties"]["capacityReservation"] = json!({"capacityReservationGroupID": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/availabilitySets/a"});
    s["cloudConfiguration"] = json!({"name": "Moon"});
    let m = message(s);
    for part in [
        "providerSpec.properties.storageProfile.imageReference.urn: Invalid value: \"a:b:c\": invalid urn format, urn should be of the format publisher:offer:sku:version",
        "providerSpec.properties.storageProfile.diskControllerType: Unsupported value: \"IDE\": supported values: \"NVMe\", \"SCSI\"",
        "providerSpec.properties.securityProfile.securityType: Unsupported value: \"Magic\"",
        "provided resource ID must be of type 'CapacityReservationGroups', got 'availabilitySets'",
        "providerSpec.cloudConfiguration.name: Unsupported value: \"Moon\"",
    ] {
        assert!(m.contains(part), "{part:?} missing from {m}");
    }
}

#[test]
fn the_deprecated_machine_set_becomes_an_availability_set_or_vmss() {
    let mut s = valid_spec();
    s["properties"].as_object_mut().unwrap().remove("zone");
    s["properties"]["machineSet"] = json!({"id": "/x/vmss", "kind": "vmo"});
    let d = decode_and_validate(&class(s.clone())).unwrap();
    assert_eq!(
        d.properties.virtual_machine_scale_set.unwrap().id,
        "/x/vmss"
    );
    s["properties"]["machineSet"] = json!({"id": "/x/as", "kind": "other"});
    assert_eq!(
        message(s),
        "error while validation providerSpec.Properties.MachineSet: [providerSpec.properties.machineSet.kind: Invalid value: \"other\": must provide one of [availabilityset vmo]]"
    );
}

#[test]
fn another_provider_or_garbage_is_invalid_argument() {
    let mut c = class(valid_spec());
    c.provider = "AWS".into();
    let e = decode_and_validate(&c).unwrap_err();
    assert_eq!(
        e.message,
        "error validating provider provider: Invalid value: \"AWS\": Request for provider AWS cannot be fulfilled. Only Azure provider is supported."
    );
    let e = decode_and_validate(&class(json!("garbage"))).unwrap_err();
    assert_eq!(e.code, mcm_driver::Code::InvalidArgument);
}

#[test]
fn every_field_of_the_references_api_decodes_without_a_warning() {
    // Each key of the reference's AzureProviderSpec (pkg/azure/api, 234641e3),
    // including those it decodes but never uses (`osDisk.name`,
    // `managedDisk.id`, `computerName`, `adminPassword`, `customData`,
    // `networkInterfaces`).
    let mut s = valid_spec();
    let p = &mut s["properties"];
    p["storageProfile"]["osDisk"]["name"] = json!("ignored");
    p["storageProfile"]["osDisk"]["managedDisk"]["id"] = json!("ignored");
    p["storageProfile"]["osDisk"]["managedDisk"]["securityProfile"] =
        json!({"securityEncryptionType": "VMGuestStateOnly"});
    p["storageProfile"]["diskControllerType"] = json!("SCSI");
    p["storageProfile"]["imageReference"]["skipMarketplaceAgreement"] = json!(true);
    p["storageProfile"]["dataDisks"][0]["caching"] = json!("ReadOnly");
    p["osProfile"]["computerName"] = json!("ignored");
    p["osProfile"]["adminPassword"] = json!("ignored");
    p["osProfile"]["customData"] = json!("ignored");
    p["networkProfile"] = json!({"acceleratedNetworking": true,
        "networkInterfaces": {"id": "/subscriptions/s/x/networkInterfaces/n", "properties": {"primary": true}}});
    p["identityID"] = json!("/subscriptions/s/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/i");
    p["diagnosticsProfile"] =
        json!({"enabled": true, "storageURI": "https://x.blob.core.windows.net/"});
    p["securityProfile"] = json!({"securityType": "TrustedLaunch", "uefiSettings": {"vtpmEnabled": true, "secureBootEnabled": true}});
    p["capacityReservation"] = json!({"capacityReservationGroupID": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/capacityReservationGroups/g"});
    p["machineSet"] = json!({"id": "x", "kind": "vmo"});
    s["subnetInfo"]["vnetResourceGroup"] = json!("net-rg");
    s["cloudConfiguration"] = json!({"name": "AzurePublic"});
    let d = <AzureProviderSpec as ProviderSpec>::decode(&s).expect("decodes");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let nic = d.value.properties.network_profile.network_interfaces;
    assert_eq!(
        nic.and_then(|n| n.properties).map(|p| p.primary),
        Some(true),
        "networkInterfaces is read as the reference's single reference"
    );
    // An array there is refused, as the reference's json.Unmarshal refuses it.
    let mut arr = valid_spec();
    arr["properties"]["networkProfile"] = json!({"networkInterfaces": [{"id": "n"}]});
    assert!(<AzureProviderSpec as ProviderSpec>::decode(&arr).is_err());
}
