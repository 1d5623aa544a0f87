//! The providerSpec's rules: every finding, as the drivers' shared
//! [`FieldError`] (printed like Kubernetes field errors).

use super::{
    AwsProviderSpec, BlockDevice, NetworkInterface, CLUSTER_TAG_PREFIX, ROLE_TAG_PREFIX,
    ROOT_DEVICE_NAME, VALID_MARKET_TYPES, VALID_VOLUME_TYPES,
};
use mcm_driver::provider_spec::FieldError;
use std::collections::BTreeMap;

fn one_of(errs: &mut Vec<FieldError>, field: String, value: &str, accepted: &[&str]) {
    if !accepted.contains(&value) {
        errs.push(FieldError::not_supported(field, value, accepted));
    }
}

pub(super) fn is_data_device_name(name: &str) -> bool {
    // ^/dev/(sd[a-z]|xvd[a-c][a-z]?)$
    let lower = |c: u8| c.is_ascii_lowercase();
    if let Some(rest) = name.strip_prefix("/dev/sd") {
        let b = rest.as_bytes();
        return matches!(b, [c] if lower(*c));
    }
    if let Some(rest) = name.strip_prefix("/dev/xvd") {
        let b = rest.as_bytes();
        return match b {
            [a] => (b'a'..=b'c').contains(a),
            [a, z] => (b'a'..=b'c').contains(a) && lower(*z),
            _ => false,
        };
    }
    false
}

/// Validates a providerSpec (all findings, not just the first).
pub fn validate_spec(spec: &AwsProviderSpec) -> Vec<FieldError> {
    let p = "providerSpec";
    let mut errs = Vec::new();
    if spec.ami.is_empty() {
        errs.push(FieldError::required(format!("{p}.ami"), "AMI is required"));
    }
    if spec.region.is_empty() {
        errs.push(FieldError::required(
            format!("{p}.region"),
            "Region is required",
        ));
    }
    if spec.machine_type.is_empty() {
        errs.push(FieldError::required(
            format!("{p}.machineType"),
            "MachineType is required",
        ));
    }
    if spec.iam.name.is_empty() == spec.iam.arn.is_empty() {
        errs.push(FieldError::invalid(
            format!("{p}.iam"),
            &spec.iam,
            "either IAM Name or ARN must be set",
        ));
    }
    validate_tags(spec, &mut errs);
    validate_block_devices(&spec.block_devices, &mut errs);
    if let Some(cr) = &spec.capacity_reservation {
        let f = format!("{p}.capacityReservation");
        if !cr.capacity_reservation_preference.is_empty() {
            if cr.capacity_reservation_id.is_some()
                || cr.capacity_reservation_resource_group_arn.is_some()
            {
                errs.push(FieldError::required(
                    f,
                    "CapacityReservationPreference cannot be set when also providing a CapacityReservationID or CapacityReservationResourceGroupArn",
                ));
            }
        } else if cr.capacity_reservation_id.is_some()
            && cr.capacity_reservation_resource_group_arn.is_some()
        {
            errs.push(FieldError::required(
                f,
                "CapacityReservationResourceGroupArn or CapacityReservationId are optional but only one should be used",
            ));
        }
    }
    validate_network_interfaces(&spec.network_interfaces, &mut errs);
    if let Some(md) = &spec.instance_metadata_options {
        let f = format!("{p}.instanceMetadataOptions");
        if let Some(h) = md.http_put_response_hop_limit {
            if !(0..=64).contains(&h) {
                errs.push(FieldError::invalid(
                    format!("{f}.httpPutResponseHopLimit"),
                    h,
                    "Only values between 0 and 64, both included, are accepted",
                ));
            }
        }
        if !md.http_endpoint.is_empty() {
            one_of(
                &mut errs,
                format!("{f}.httpEndpoint"),
                &md.http_endpoint,
                &["enabled", "disabled"],
            );
        }
        if !md.http_tokens.is_empty() {
            one_of(
                &mut errs,
                format!("{f}.httpTokens"),
                &md.http_tokens,
                &["required", "optional"],
            );
        }
        if !md.http_protocol_ipv6.is_empty() {
            one_of(
                &mut errs,
                format!("{f}.httpProtocolIpv6"),
                &md.http_protocol_ipv6,
                &["enabled", "disabled"],
            );
        }
    }
    if let Some(cpu) = &spec.cpu_options {
        let f = format!("{p}.cpuOptions");
        if let Some(a) = &cpu.amd_sev_snp {
            one_of(
                &mut errs,
                format!("{f}.amdSevSnp"),
                a,
                &["enabled", "disabled"],
            );
        }
        match (cpu.core_count, cpu.threads_per_core) {
            (Some(_), None) => errs.push(FieldError::required(
                format!("{f}.threadsPerCore"),
                "ThreadsPerCore is required together with CoreCount",
            )),
            (None, Some(_)) => errs.push(FieldError::required(
                format!("{f}.coreCount"),
                "CoreCount is required together with ThreadsPerCore",
            )),
            _ => {}
        }
        if let Some(t) = cpu.threads_per_core {
            if !(1..=2).contains(&t) {
                errs.push(FieldError::invalid(
                    format!("{f}.threadsPerCore"),
                    t,
                    "ThreadsPerCore must be either '1' or '2'",
                ));
            }
        }
        if let Some(c) = cpu.core_count {
            if c < 1 {
                errs.push(FieldError::invalid(
                    format!("{f}.coreCount"),
                    c,
                    "CoreCount must be positive",
                ));
            }
        }
    }
    if let Some(pl) = &spec.placement {
        let f = format!("{p}.placement");
        if let Some(t) = &pl.tenancy {
            one_of(
                &mut errs,
                format!("{f}.tenancy"),
                t,
                &["default", "dedicated", "host"],
            );
        }
        if let Some(a) = &pl.affinity {
            one_of(&mut errs, format!("{f}.affinity"), a, &["default", "host"]);
        }
        if pl.host_id.as_deref().is_some_and(|h| !h.is_empty())
            && pl.tenancy.as_deref() != Some("host")
        {
            errs.push(FieldError::invalid(
                format!("{f}.hostId"),
                pl.host_id.as_deref().unwrap_or_default(),
                "hostId can only be set when tenancy is 'host'",
            ));
        }
        if let Some(n) = pl.partition_number {
            if n < 1 {
                errs.push(FieldError::invalid(
                    format!("{f}.partitionNumber"),
                    n,
                    "partitionNumber must be at least 1",
                ));
            }
        }
    }
    if let Some(m) = &spec.instance_market_options {
        one_of(
            &mut errs,
            format!("{p}.instanceMarketOptions.marketType"),
            &m.market_type,
            &VALID_MARKET_TYPES,
        );
    }
    errs
}

fn validate_tags(spec: &AwsProviderSpec, errs: &mut Vec<FieldError>) {
    if spec.cluster_tag_key().is_none() {
        errs.push(FieldError::required(
            "providerSpec.tags",
            format!("Tag required of the form {CLUSTER_TAG_PREFIX}****"),
        ));
    }
    if spec.role_tag_key().is_none() {
        errs.push(FieldError::required(
            "providerSpec.tags",
            format!("Tag required of the form {ROLE_TAG_PREFIX}****"),
        ));
    }
}

fn validate_block_devices(disks: &[BlockDevice], errs: &mut Vec<FieldError>) {
    let f = "providerSpec.blockDevices";
    let mut roots = 0;
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, disk) in disks.iter().enumerate() {
        let idx = format!("{f}[{i}]");
        if disk.device_name == ROOT_DEVICE_NAME {
            roots += 1;
        } else if disks.len() > 1 && !is_data_device_name(&disk.device_name) {
            errs.push(FieldError::invalid(
                format!("{idx}.deviceName"),
                &disk.device_name,
                format!(
                    "Device name given: {} does not match the expected pattern ^/dev/(sd[a-z]|xvd[a-c][a-z]?)$",
                    disk.device_name
                ),
            ));
        }
        *names.entry(disk.device_name.as_str()).or_default() += 1;
        if !VALID_VOLUME_TYPES.contains(&disk.ebs.volume_type.as_str()) {
            errs.push(FieldError::required(
                format!("{idx}.ebs.volumeType"),
                format!("Please mention a valid EBS volume type: {VALID_VOLUME_TYPES:?}"),
            ));
        }
        if disk.ebs.volume_size <= 0 {
            errs.push(FieldError::required(
                format!("{idx}.ebs.volumeSize"),
                "Please mention a valid EBS volume size",
            ));
        }
        if disk.ebs.iops < 0 || (disk.ebs.volume_type == "io1" && disk.ebs.iops == 0) {
            errs.push(FieldError::required(
                format!("{idx}.ebs.iops"),
                "Please mention a valid EBS volume iops",
            ));
        }
        if let Some(t) = disk.ebs.throughput {
            if t <= 0 {
                errs.push(FieldError::invalid(
                    format!("{idx}.ebs.throughput"),
                    t,
                    "Throughput should be a positive value",
                ));
            }
        }
    }
    if roots > 1 || (roots == 0 && disks.len() > 1) {
        errs.push(FieldError::required(
            f,
            "Only one device can be specified as root",
        ));
    }
    for (name, n) in names {
        if n > 1 {
            errs.push(FieldError::required(
                f,
                format!("Device name '{name}' duplicated {n} times, DeviceName must be unique"),
            ));
        }
    }
}

fn validate_network_interfaces(nis: &[NetworkInterface], errs: &mut Vec<FieldError>) {
    let f = "providerSpec.networkInterfaces";
    if nis.is_empty() {
        errs.push(FieldError::required(
            f,
            "Mention at least one NetworkInterface",
        ));
        return;
    }
    for (i, ni) in nis.iter().enumerate() {
        let idx = format!("{f}[{i}]");
        if ni.subnet_id.is_empty() {
            errs.push(FieldError::required(
                format!("{idx}.subnetID"),
                "SubnetID is required",
            ));
        }
        if ni.security_group_ids.is_empty() {
            errs.push(FieldError::required(
                format!("{idx}.securityGroupIDs"),
                "Mention at least one securityGroupID",
            ));
        }
        for (j, sg) in ni.security_group_ids.iter().enumerate() {
            if sg.trim().is_empty() {
                errs.push(FieldError::required(
                    format!("{idx}.securityGroupIDs[{j}]"),
                    format!("securityGroupIDs cannot be blank for networkInterface:{i} securityGroupID:{j}"),
                ));
            }
        }
        if let Some(t) = &ni.interface_type {
            one_of(
                errs,
                format!("{idx}.interfaceType"),
                t,
                &["", "interface", "efa", "efa-only"],
            );
        }
        if let Some(d) = ni.device_index {
            if d < 0 {
                errs.push(FieldError::invalid(
                    format!("{idx}.deviceIndex"),
                    d,
                    "deviceIndex must not be negative",
                ));
            }
        }
        if let Some(n) = ni.network_card_index {
            if n < 0 {
                errs.push(FieldError::invalid(
                    format!("{idx}.networkCardIndex"),
                    n,
                    "networkCardIndex must not be negative",
                ));
            }
        }
        for (name, v) in [
            ("ipv6AddressCount", ni.ipv6_address_count),
            ("ipv6PrefixCount", ni.ipv6_prefix_count),
        ] {
            if let Some(v) = v {
                if v < 0 {
                    errs.push(FieldError::invalid(
                        format!("{idx}.{name}"),
                        v,
                        "must not be negative",
                    ));
                }
            }
        }
    }
}
