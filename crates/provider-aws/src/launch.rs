//! Turns a providerSpec into a RunInstances request.

use crate::spec::{AwsProviderSpec, ROOT_DEVICE_NAME};
use aws_sdk_ec2::operation::run_instances::builders::RunInstancesFluentBuilder;
use aws_sdk_ec2::types::{
    AmdSevSnpSpecification, BlockDeviceMapping, CapacityReservationPreference,
    CapacityReservationSpecification, CapacityReservationTarget, CpuOptionsRequest, EbsBlockDevice,
    HttpTokensState, IamInstanceProfileSpecification, InstanceMarketOptionsRequest,
    InstanceMetadataEndpointState, InstanceMetadataOptionsRequest, InstanceMetadataProtocolState,
    InstanceNetworkInterfaceSpecification, InstanceType, MarketType, Placement, ResourceType,
    RunInstancesMonitoringEnabled, SpotInstanceType, SpotMarketOptions, Tag, TagSpecification,
    Tenancy, VolumeType,
};
use std::collections::BTreeMap;

/// The node-template annotation that may carry a JSON EC2 placement.
pub const PLACEMENT_ANNOTATION: &str = "machine.sapcloud.io/awsPlacement";

/// What else a launch needs besides the spec.
pub struct LaunchInput<'a> {
    /// The machine name (the `Name` tag).
    pub machine_name: &'a str,
    /// The AMI's root device name.
    pub root_device_name: &'a str,
    /// Base64 user data.
    pub user_data: String,
    /// The idempotency token.
    pub client_token: String,
    /// The JSON of the machine's placement annotation, if any.
    pub placement_annotation: Option<&'a str>,
}

/// Fills a RunInstances request. Errors are user errors (InvalidArgument).
pub fn run_instances_request(
    b: RunInstancesFluentBuilder,
    spec: &AwsProviderSpec,
    input: &LaunchInput<'_>,
) -> Result<RunInstancesFluentBuilder, String> {
    let mut b = b
        .image_id(&spec.ami)
        .instance_type(InstanceType::from(spec.machine_type.as_str()))
        .min_count(1)
        .max_count(1)
        .user_data(input.user_data.clone())
        .client_token(input.client_token.clone())
        .set_block_device_mappings(Some(block_devices(spec, input.root_device_name)?))
        .set_network_interfaces(Some(network_interfaces(spec)))
        .set_tag_specifications(Some(tag_specifications(&spec.tags, input.machine_name)))
        .iam_instance_profile(if spec.iam.name.is_empty() {
            IamInstanceProfileSpecification::builder()
                .arn(&spec.iam.arn)
                .build()
        } else {
            IamInstanceProfileSpecification::builder()
                .name(&spec.iam.name)
                .build()
        });
    if let Some(k) = spec.key_name.as_deref().filter(|k| !k.is_empty()) {
        b = b.key_name(k);
    }
    if spec.ebs_optimized {
        b = b.ebs_optimized(true);
    }
    if spec.monitoring {
        b = b.monitoring(
            RunInstancesMonitoringEnabled::builder()
                .enabled(true)
                .build(),
        );
    }
    if let Some(md) = &spec.instance_metadata_options {
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let o = InstanceMetadataOptionsRequest::builder()
            .set_http_endpoint(
                non_empty(&md.http_endpoint)
                    .map(|s| InstanceMetadataEndpointState::from(s.as_str())),
            )
            .set_http_tokens(non_empty(&md.http_tokens).map(|s| HttpTokensState::from(s.as_str())))
            .set_http_protocol_ipv6(
                non_empty(&md.http_protocol_ipv6)
                    .map(|s| InstanceMetadataProtocolState::from(s.as_str())),
            )
            .set_http_put_response_hop_limit(md.http_put_response_hop_limit)
            .build();
        b = b.metadata_options(o);
    }
    if let Some(cpu) = &spec.cpu_options {
        let mut o = CpuOptionsRequest::builder()
            .set_amd_sev_snp(cpu.amd_sev_snp.as_deref().map(AmdSevSnpSpecification::from));
        if let (Some(c), Some(t)) = (cpu.core_count, cpu.threads_per_core) {
            o = o.core_count(c).threads_per_core(t);
        }
        b = b.cpu_options(o.build());
    }
    if let Some(cr) = &spec.capacity_reservation {
        if !cr.capacity_reservation_preference.is_empty() {
            b = b.capacity_reservation_specification(
                CapacityReservationSpecification::builder()
                    .capacity_reservation_preference(CapacityReservationPreference::from(
                        cr.capacity_reservation_preference.as_str(),
                    ))
                    .build(),
            );
        } else if cr.capacity_reservation_id.is_some()
            || cr.capacity_reservation_resource_group_arn.is_some()
        {
            b = b.capacity_reservation_specification(
                CapacityReservationSpecification::builder()
                    .capacity_reservation_target(
                        CapacityReservationTarget::builder()
                            .set_capacity_reservation_id(cr.capacity_reservation_id.clone())
                            .set_capacity_reservation_resource_group_arn(
                                cr.capacity_reservation_resource_group_arn.clone(),
                            )
                            .build(),
                    )
                    .build(),
            );
        }
    }
    if let Some(m) = market_options(spec) {
        b = b.instance_market_options(m);
    }
    if let Some(p) = placement(spec, input.placement_annotation)? {
        b = b.placement(p);
    }
    Ok(b)
}

/// The block device mappings: `/root` (or the only disk) gets the AMI's root
/// device name; volumes are deleted with the instance unless the spec says
/// `deleteOnTermination: false`; a KMS key implies encryption.
pub fn block_devices(
    spec: &AwsProviderSpec,
    root_device_name: &str,
) -> Result<Vec<BlockDeviceMapping>, String> {
    if spec.block_devices.is_empty() {
        return Err("providerSpec.blockDevices: no block devices passed".into());
    }
    let single = spec.block_devices.len() == 1;
    let mut out = Vec::with_capacity(spec.block_devices.len());
    for disk in &spec.block_devices {
        let name = if single || disk.device_name == ROOT_DEVICE_NAME {
            if root_device_name.is_empty() {
                return Err(format!("image {} has no root device name", spec.ami));
            }
            root_device_name.to_string()
        } else {
            disk.device_name.clone()
        };
        let mut m = BlockDeviceMapping::builder().device_name(name);
        if !disk.no_device.is_empty() {
            out.push(m.no_device(disk.no_device.clone()).build());
            continue;
        }
        if !disk.virtual_name.is_empty() {
            out.push(m.virtual_name(disk.virtual_name.clone()).build());
            continue;
        }
        let e = &disk.ebs;
        let kms = e.kms_key_id.clone().filter(|k| !k.is_empty());
        let mut ebs = EbsBlockDevice::builder()
            .encrypted(e.encrypted || kms.is_some())
            .volume_size(e.volume_size)
            .volume_type(VolumeType::from(e.volume_type.as_str()))
            .delete_on_termination(e.delete_on_termination.unwrap_or(true))
            .set_throughput(e.throughput)
            .set_snapshot_id(e.snapshot_id.clone().filter(|s| !s.is_empty()))
            .set_kms_key_id(kms);
        if e.iops > 0 {
            ebs = ebs.iops(e.iops);
        }
        m = m.ebs(ebs.build());
        out.push(m.build());
    }
    Ok(out)
}

/// One interface per spec entry; device index = spec value or list position;
/// deleted with the instance unless `deleteOnTermination: false`; IPv6
/// addresses with the first one primary unless `primaryIpv6: false`.
pub fn network_interfaces(spec: &AwsProviderSpec) -> Vec<InstanceNetworkInterfaceSpecification> {
    spec.network_interfaces
        .iter()
        .enumerate()
        .map(|(i, ni)| {
            let mut b = InstanceNetworkInterfaceSpecification::builder()
                .set_groups(Some(ni.security_group_ids.clone()))
                .subnet_id(&ni.subnet_id)
                .set_associate_public_ip_address(ni.associate_public_ip_address)
                .set_description(ni.description.clone())
                .device_index(ni.device_index.unwrap_or(i as i32))
                .set_network_card_index(ni.network_card_index)
                .set_interface_type(ni.interface_type.clone().filter(|t| !t.is_empty()))
                .delete_on_termination(ni.delete_on_termination.unwrap_or(true));
            if let Some(n) = ni.ipv6_address_count.filter(|n| *n > 0) {
                b = b
                    .ipv6_address_count(n)
                    .primary_ipv6(ni.primary_ipv6.unwrap_or(true));
            }
            b.build()
        })
        .collect()
}

/// Instance, volume and interface tags: the spec's tags (without `Name`) and
/// `Name` = machine name.
pub fn tag_specifications(
    tags: &BTreeMap<String, String>,
    machine_name: &str,
) -> Vec<TagSpecification> {
    let mut list: Vec<Tag> = tags
        .iter()
        .filter(|(k, _)| k.as_str() != "Name")
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect();
    list.push(Tag::builder().key("Name").value(machine_name).build());
    [
        ResourceType::Instance,
        ResourceType::Volume,
        ResourceType::NetworkInterface,
    ]
    .into_iter()
    .map(|r| {
        TagSpecification::builder()
            .resource_type(r)
            .set_tags(Some(list.clone()))
            .build()
    })
    .collect()
}

/// Market options as the reference (v0.28) sends them: `instanceMarketOptions`
/// wins and goes out as its market type alone (the deprecated `spotPrice` is
/// then ignored, also as a max price: EC2's defaults apply, one-time spot at up
/// to the on-demand price); else an ML capacity block (our extension); else
/// the deprecated `spotPrice` (one-time spot, max price if non-empty).
pub fn market_options(spec: &AwsProviderSpec) -> Option<InstanceMarketOptionsRequest> {
    if let Some(m) = spec
        .instance_market_options
        .as_ref()
        .filter(|m| !m.market_type.is_empty())
    {
        return Some(
            InstanceMarketOptionsRequest::builder()
                .market_type(MarketType::from(m.market_type.as_str()))
                .build(),
        );
    }
    if spec
        .capacity_reservation
        .as_ref()
        .and_then(|c| c.is_ml_capacity_block)
        .unwrap_or(false)
    {
        return Some(
            InstanceMarketOptionsRequest::builder()
                .market_type(MarketType::CapacityBlock)
                .build(),
        );
    }
    spec.spot_price.as_deref().map(|price| {
        InstanceMarketOptionsRequest::builder()
            .market_type(MarketType::Spot)
            .spot_options(spot_options(price))
            .build()
    })
}

fn spot_options(price: &str) -> SpotMarketOptions {
    SpotMarketOptions::builder()
        .spot_instance_type(SpotInstanceType::OneTime)
        .set_max_price(Some(price).filter(|p| !p.is_empty()).map(str::to_string))
        .build()
}

/// Placement from the spec, else from the machine's placement annotation
/// (JSON with EC2 `Placement` keys, matched case-insensitively).
pub fn placement(
    spec: &AwsProviderSpec,
    annotation: Option<&str>,
) -> Result<Option<Placement>, String> {
    if let Some(p) = &spec.placement {
        let any = p.group_id.is_some()
            || p.tenancy.is_some()
            || p.host_id.is_some()
            || p.partition_number.is_some()
            || p.affinity.is_some();
        if !any {
            return Ok(None);
        }
        return Ok(Some(
            Placement::builder()
                .set_group_id(p.group_id.clone())
                .set_tenancy(p.tenancy.as_deref().map(Tenancy::from))
                .set_host_id(p.host_id.clone())
                .set_partition_number(p.partition_number)
                .set_affinity(p.affinity.clone())
                .build(),
        ));
    }
    let Some(text) = annotation.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| format!("annotation {PLACEMENT_ANNOTATION}: cannot decode {text:?}: {e}"))?;
    let Some(obj) = v.as_object() else {
        return Err(format!(
            "annotation {PLACEMENT_ANNOTATION}: not a JSON object"
        ));
    };
    let get = |key: &str| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    };
    let string = |key: &str| {
        get(key)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let partition = get("partitionNumber")
        .and_then(|v| v.as_i64())
        .and_then(|n| i32::try_from(n).ok())
        .filter(|n| *n != 0);
    let p = Placement::builder()
        .set_availability_zone(string("availabilityZone"))
        .set_affinity(string("affinity"))
        .set_group_name(string("groupName"))
        .set_group_id(string("groupId"))
        .set_host_id(string("hostId"))
        .set_host_resource_group_arn(string("hostResourceGroupArn"))
        .set_spread_domain(string("spreadDomain"))
        .set_tenancy(string("tenancy").map(|t| Tenancy::from(t.as_str())))
        .set_partition_number(partition)
        .build();
    if p == Placement::builder().build() {
        return Ok(None);
    }
    Ok(Some(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> AwsProviderSpec {
        AwsProviderSpec::from_json(&v).expect("spec")
    }

    #[test]
    fn block_devices_map_root_kms_iops_and_delete_on_termination() {
        let s = spec(json!({"ami": "ami-1", "blockDevices": [
            {"deviceName": "/root", "ebs": {"volumeSize": 50, "volumeType": "gp3", "throughput": 200, "iops": 4000}},
            {"deviceName": "/dev/sdb", "ebs": {"volumeSize": 10, "volumeType": "gp2", "deleteOnTermination": false, "kmsKeyID": "arn:kms:1", "snapshotID": "snap-1"}},
            {"deviceName": "/dev/sdc", "virtualName": "ephemeral0"},
            {"deviceName": "/dev/sdd", "noDevice": "true"}
        ]}));
        let m = block_devices(&s, "/dev/xvda").expect("mappings");
        assert_eq!(m[0].device_name(), Some("/dev/xvda"));
        let root = m[0].ebs().expect("ebs");
        assert_eq!(root.iops(), Some(4000));
        assert_eq!(root.throughput(), Some(200));
        assert_eq!(root.delete_on_termination(), Some(true));
        assert_eq!(root.encrypted(), Some(false));
        let data = m[1].ebs().expect("ebs");
        assert_eq!(m[1].device_name(), Some("/dev/sdb"));
        assert_eq!(data.delete_on_termination(), Some(false));
        assert_eq!(data.kms_key_id(), Some("arn:kms:1"));
        assert_eq!(data.encrypted(), Some(true), "a KMS key implies encryption");
        assert_eq!(data.iops(), None);
        assert_eq!(data.snapshot_id(), Some("snap-1"));
        assert_eq!(m[2].virtual_name(), Some("ephemeral0"));
        assert!(m[2].ebs().is_none());
        assert_eq!(m[3].no_device(), Some("true"));
    }

    #[test]
    fn a_single_disk_is_the_root_disk_and_no_disk_is_an_error() {
        let s = spec(
            json!({"ami": "ami-1", "blockDevices": [{"ebs": {"volumeSize": 8, "volumeType": "gp2"}}]}),
        );
        assert_eq!(
            block_devices(&s, "/dev/sda1").expect("ok")[0].device_name(),
            Some("/dev/sda1")
        );
        let s = spec(json!({"ami": "ami-1"}));
        assert!(block_devices(&s, "/dev/sda1").is_err());
    }

    #[test]
    fn interfaces_get_device_indexes_ipv6_and_defaults() {
        let s = spec(json!({"networkInterfaces": [
            {"subnetID": "s1", "securityGroupIDs": ["g1", "g2"], "ipv6AddressCount": 2, "associatePublicIPAddress": true},
            {"subnetID": "s2", "securityGroupIDs": ["g3"], "deviceIndex": 3, "deleteOnTermination": false,
             "interfaceType": "efa", "networkCardIndex": 1, "ipv6AddressCount": 1, "primaryIpv6": false, "description": "d"}
        ]}));
        let n = network_interfaces(&s);
        assert_eq!(n[0].device_index(), Some(0));
        assert_eq!(n[0].groups(), ["g1", "g2"]);
        assert_eq!(n[0].ipv6_address_count(), Some(2));
        assert_eq!(n[0].primary_ipv6(), Some(true));
        assert_eq!(n[0].delete_on_termination(), Some(true));
        assert_eq!(n[0].associate_public_ip_address(), Some(true));
        assert_eq!(n[1].device_index(), Some(3));
        assert_eq!(n[1].delete_on_termination(), Some(false));
        assert_eq!(n[1].interface_type(), Some("efa"));
        assert_eq!(n[1].network_card_index(), Some(1));
        assert_eq!(n[1].primary_ipv6(), Some(false));
        assert_eq!(n[1].description(), Some("d"));
    }

    #[test]
    fn tags_replace_name_with_the_machine_name_on_three_resource_types() {
        let tags: BTreeMap<String, String> =
            [("Name", "x"), ("kubernetes.io/cluster/c", "1"), ("a", "b")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let t = tag_specifications(&tags, "machine-1");
        assert_eq!(t.len(), 3);
        for spec in &t {
            let names: Vec<_> = spec
                .tags()
                .iter()
                .filter(|t| t.key() == Some("Name"))
                .collect();
            assert_eq!(names.len(), 1);
            assert_eq!(names[0].value(), Some("machine-1"));
            assert_eq!(spec.tags().len(), 3);
        }
        assert_eq!(t[2].resource_type(), Some(&ResourceType::NetworkInterface));
    }

    #[test]
    fn market_options_precedence() {
        let m = market_options(&spec(json!({"spotPrice": ""}))).expect("spot");
        assert_eq!(m.market_type(), Some(&MarketType::Spot));
        assert_eq!(m.spot_options().and_then(|s| s.max_price()), None);
        let m = market_options(&spec(json!({"spotPrice": "0.5"}))).expect("spot");
        assert_eq!(m.spot_options().and_then(|s| s.max_price()), Some("0.5"));
        let m = market_options(&spec(
            json!({"spotPrice": "0.5", "instanceMarketOptions": {"marketType": "capacity-block"}}),
        ))
        .expect("cb");
        assert_eq!(m.market_type(), Some(&MarketType::CapacityBlock));
        assert!(market_options(&spec(json!({}))).is_none());
    }

    #[test]
    fn market_type_spot_goes_out_alone_and_the_deprecated_spot_price_is_ignored_as_the_reference_does(
    ) {
        let m = market_options(&spec(
            json!({"spotPrice": "0.5", "instanceMarketOptions": {"marketType": "spot"}}),
        ))
        .expect("market");
        assert_eq!(m.market_type(), Some(&MarketType::Spot));
        assert!(
            m.spot_options().is_none(),
            "the reference v0.28 sends the market type alone: {m:?}"
        );
    }

    #[test]
    fn placement_from_spec_or_annotation() {
        let p = placement(
            &spec(json!({"placement": {"tenancy": "host", "hostId": "h-1", "partitionNumber": 2}})),
            None,
        )
        .expect("ok")
        .expect("some");
        assert_eq!(p.tenancy(), Some(&Tenancy::Host));
        assert_eq!(p.host_id(), Some("h-1"));
        assert_eq!(p.partition_number(), Some(2));
        let a = r#"{ "affinity": "host", "availabilityZone": "eu-west-1a", "tenancy": "host"}"#;
        let p = placement(&spec(json!({})), Some(a))
            .expect("ok")
            .expect("some");
        assert_eq!(p.availability_zone(), Some("eu-west-1a"));
        assert_eq!(p.affinity(), Some("host"));
        assert!(placement(&spec(json!({})), Some("{}"))
            .expect("ok")
            .is_none());
        assert!(placement(&spec(json!({})), None).expect("ok").is_none());
        assert!(placement(&spec(json!({})), Some("{nope")).is_err());
    }
}
