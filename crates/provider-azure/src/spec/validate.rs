//! The reference's providerSpec validation, finding by finding, in its order
//! and wording.

use super::{
    blank, non_empty, AzureProviderSpec, DataDisk, ImageReference, VmProperties, CLOUD_NAMES,
    DISK_CONTROLLER_TYPES, SECURITY_ENCRYPTION_TYPES, SECURITY_TYPES,
};
use crate::names::{CLUSTER_TAG_PREFIX, ROLE_TAG_PREFIX};
use mcm_driver::provider_spec::FieldError;
use std::collections::BTreeMap;

/// Every finding of the reference's validation, in its order.
pub fn validate(spec: &AzureProviderSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if blank(&spec.location) {
        errs.push(FieldError::required(
            "providerSpec.location",
            "must provide a location",
        ));
    }
    if blank(&spec.resource_group) {
        errs.push(FieldError::required(
            "providerSpec.resourceGroup",
            "must provide a resourceGroup",
        ));
    }
    if blank(&spec.subnet_info.vnet_name) {
        errs.push(FieldError::required(
            "providerSpec.subnetInfo.vnetName",
            "must provide vnetName",
        ));
    }
    if blank(&spec.subnet_info.subnet_name) {
        errs.push(FieldError::required(
            "providerSpec.subnetInfo.subnetName",
            "must provide subnetName",
        ));
    }
    validate_properties(&spec.properties, &mut errs);
    validate_tags(&spec.tags, &mut errs);
    if let Some(cc) = &spec.cloud_configuration {
        if !CLOUD_NAMES.contains(&cc.name.as_str()) {
            errs.push(FieldError::not_supported(
                "providerSpec.cloudConfiguration.name",
                &cc.name,
                &["AzurePublic", "AzureChina", "AzureGovernment"],
            ));
        }
    }
    errs
}

fn validate_properties(p: &VmProperties, errs: &mut Vec<FieldError>) {
    const P: &str = "providerSpec.properties";
    if blank(&p.hardware_profile.vm_size) {
        errs.push(FieldError::required(
            format!("{P}.hardwareProfile.vmSize"),
            "must provide vmSize",
        ));
    }
    let sp = format!("{P}.storageProfile");
    validate_image_ref(
        &p.storage_profile.image_reference,
        &format!("{sp}.imageReference"),
        errs,
    );
    let dct = &p.storage_profile.disk_controller_type;
    if !blank(dct) && !DISK_CONTROLLER_TYPES.contains(&dct.as_str()) {
        errs.push(FieldError::not_supported(
            format!("{sp}.diskControllerType"),
            dct,
            &DISK_CONTROLLER_TYPES,
        ));
    }
    let os = &p.storage_profile.os_disk;
    if blank(&os.create_option) {
        errs.push(FieldError::required(
            format!("{sp}.osDisk.createOption"),
            "must provide createOption",
        ));
    }
    if os.disk_size_gb <= 0 {
        errs.push(FieldError::invalid(
            format!("{sp}.osDisk.diskSizeGB"),
            os.disk_size_gb,
            "OSDisk size must be positive and greater than 0",
        ));
    }
    if let Some(t) = os
        .managed_disk
        .security_profile
        .as_ref()
        .and_then(|s| s.security_encryption_type.as_deref())
    {
        if !blank(t) && !SECURITY_ENCRYPTION_TYPES.contains(&t) {
            errs.push(FieldError::not_supported(
                format!("{sp}.osDisk.securityEncryptionType"),
                t,
                &SECURITY_ENCRYPTION_TYPES,
            ));
        }
    }
    validate_data_disks(
        &p.storage_profile.data_disks,
        &format!("{sp}.dataDisks"),
        errs,
    );
    if blank(&p.os_profile.admin_username) {
        errs.push(FieldError::required(
            format!("{P}.osProfile.adminUsername"),
            "adminUsername must be provided",
        ));
    }
    let zone = p.zone.is_some();
    let aset = p.availability_set.as_ref().is_some_and(|s| !blank(&s.id));
    let vmss = p
        .virtual_machine_scale_set
        .as_ref()
        .is_some_and(|s| !blank(&s.id));
    if [zone, aset, vmss].iter().filter(|b| **b).count() != 1 {
        errs.push(FieldError::forbidden(
            format!("{P}.zone|.availabilitySet|.virtualMachineScaleSet"),
            "Only one of Zone, AvailabilitySet and VirtualMachineScaleSet can be set.",
        ));
    }
    if let Some(id) = p
        .capacity_reservation
        .as_ref()
        .and_then(|c| c.capacity_reservation_group_id.as_deref())
    {
        let path = format!("{P}.capacityReservation.capacityReservationGroupID");
        match crate::names::resource_type_of(id) {
            None => errs.push(FieldError::invalid(
                path,
                id,
                "invalid Azure resource ID: invalid resource ID",
            )),
            Some(t) if !t.eq_ignore_ascii_case("CapacityReservationGroups") => {
                errs.push(FieldError::invalid(
                    path,
                    id,
                    format!(
                        "provided resource ID must be of type 'CapacityReservationGroups', got '{t}'"
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(st) = p
        .security_profile
        .as_ref()
        .and_then(|s| s.security_type.as_deref())
    {
        if !blank(st) && !SECURITY_TYPES.contains(&st) {
            errs.push(FieldError::not_supported(
                format!("{P}.securityProfile.securityType"),
                st,
                &SECURITY_TYPES,
            ));
        }
    }
}

fn validate_image_ref(r: &ImageReference, path: &str, errs: &mut Vec<FieldError>) {
    let set = [
        r.urn_set(),
        non_empty(&r.community_gallery_image_id),
        !blank(&r.id),
        non_empty(&r.shared_gallery_image_id),
    ];
    if set.iter().filter(|b| **b).count() != 1 {
        errs.push(FieldError::forbidden(
            format!("{path}.id|.urn|.communityGalleryImageID|.sharedGalleryImageID"),
            "must specify only one of image id, community gallery image id, shared gallery image id or an urn",
        ));
        return;
    }
    if let Some(urn) = r.urn.as_deref().filter(|_| r.urn_set()) {
        let parts: Vec<&str> = urn.split(':').collect();
        if parts.len() != 4 {
            errs.push(FieldError::invalid(
                format!("{path}.urn"),
                urn,
                "invalid urn format, urn should be of the format publisher:offer:sku:version",
            ));
            return;
        }
        for (part, label) in parts.iter().zip(["publisher", "offer", "sku", "version"]) {
            if blank(part) {
                errs.push(FieldError::required(
                    format!("{path}.urn"),
                    format!("urn must have {label}"),
                ));
            }
        }
    }
}

fn validate_data_disks(disks: &[DataDisk], path: &str, errs: &mut Vec<FieldError>) {
    let mut luns: BTreeMap<i64, usize> = BTreeMap::new();
    for d in disks {
        if d.lun < 0 {
            errs.push(FieldError::invalid(
                format!("{path}.lun"),
                d.lun,
                "lun must be a positive number",
            ));
        } else {
            *luns.entry(d.lun).or_default() += 1;
        }
        if d.disk_size_gb <= 0 {
            errs.push(FieldError::invalid(
                format!("{path}.diskSizeGB"),
                d.disk_size_gb,
                "DataDisk size must be positive and greater than 0",
            ));
        }
        if blank(&d.storage_account_type) {
            errs.push(FieldError::required(
                format!("{path}.storageAccountType"),
                "must provide storageAccountType",
            ));
        }
        if let Some(r) = &d.image_ref {
            validate_image_ref(r, &format!("{path}.imageRef"), errs);
        }
    }
    for (lun, n) in luns {
        if n > 1 {
            errs.push(FieldError::invalid(
                format!("{path}.lun"),
                lun,
                format!("DataDisk Lun '{lun}' duplicated {n} times, Lun must be unique"),
            ));
        }
    }
}

fn validate_tags(tags: &BTreeMap<String, String>, errs: &mut Vec<FieldError>) {
    const T: &str = "providerSpec.tags";
    if tags.is_empty() {
        errs.push(FieldError::required(
            format!("{T}.{CLUSTER_TAG_PREFIX}.{ROLE_TAG_PREFIX}"),
            format!(
                "Tags starting with '{CLUSTER_TAG_PREFIX}' and '{ROLE_TAG_PREFIX}' must be set"
            ),
        ));
        return;
    }
    if !tags.keys().any(|k| k.starts_with(CLUSTER_TAG_PREFIX)) {
        errs.push(FieldError::required(
            format!("{T}.{CLUSTER_TAG_PREFIX}"),
            format!("Tag starting with {CLUSTER_TAG_PREFIX} must be set"),
        ));
    }
    if !tags.keys().any(|k| k.starts_with(ROLE_TAG_PREFIX)) {
        errs.push(FieldError::required(
            format!("{T}.{ROLE_TAG_PREFIX}"),
            format!("Tag starting with {ROLE_TAG_PREFIX} must be set"),
        ));
    }
}
