//! The RunInstances parameters of a machine.

use crate::ecs::Params;
use crate::spec::{AlicloudProviderSpec, EPHEMERAL_SSD};

/// How many client-token generations a create tries when the earlier tokens
/// of the machine name instances that were deleted since.
pub const MAX_TOKEN_GENERATIONS: u32 = 4;

/// The idempotency token of a machine's create: `mcm-<uid>` (then `mcm-<uid>-<n>`
/// for later generations). ECS accepts at most 64 ASCII characters.
pub fn client_token(uid: &str, generation: u32) -> String {
    let base: String = format!("mcm-{uid}")
        .chars()
        .filter(char::is_ascii)
        .take(58)
        .collect();
    if generation == 0 {
        base
    } else {
        format!("{base}-{generation}")
    }
}

/// RunInstances parameters for a machine, as the reference builds them:
/// zone, image, type, security group, vSwitch, private IP, charge types,
/// spot strategy, I/O optimisation, key pair, bandwidths, system disk, data
/// disks (`<machine>-<name>-data-disk`, `DeleteWithInstance` default true and
/// never for `ephemeral_ssd`), tags, `InstanceName` = machine name, the
/// client token and the (base64) user data. Empty optional fields are omitted.
pub fn run_params(
    spec: &AlicloudProviderSpec,
    machine: &str,
    user_data_b64: &str,
    token: &str,
) -> Params {
    let mut p = Params::new();
    p.set_non_empty("ZoneId", &spec.zone_id)
        .set("ImageId", &spec.image_id)
        .set("InstanceType", &spec.instance_type)
        .set("SecurityGroupId", &spec.security_group_id)
        .set("VSwitchId", &spec.v_switch_id)
        .set_non_empty("PrivateIpAddress", &spec.private_ip_address)
        .set_non_empty("InstanceChargeType", &spec.instance_charge_type)
        .set_non_empty("InternetChargeType", &spec.internet_charge_type)
        .set_non_empty("SpotStrategy", &spec.spot_strategy)
        .set_non_empty("IoOptimized", &spec.io_optimized)
        .set_non_empty("KeyPairName", &spec.key_pair_name)
        .set("InstanceName", machine)
        .set("ClientToken", token)
        .set("Amount", 1)
        .set_non_empty("UserData", user_data_b64);
    if let Some(v) = spec.internet_max_bandwidth_in {
        p.set("InternetMaxBandwidthIn", v);
    }
    if let Some(v) = spec.internet_max_bandwidth_out {
        p.set("InternetMaxBandwidthOut", v);
    }
    if let Some(d) = &spec.system_disk {
        p.set_non_empty("SystemDisk.Category", &d.category);
        if d.size > 0 {
            p.set("SystemDisk.Size", d.size);
        }
    }
    for (i, d) in spec.data_disks.iter().enumerate() {
        let n = i + 1;
        p.set_item(
            "DataDisk",
            n,
            "DiskName",
            format!("{machine}-{}-data-disk", d.name),
        )
        .set_item("DataDisk", n, "Category", &d.category)
        .set_item("DataDisk", n, "Size", d.size)
        .set_item("DataDisk", n, "Encrypted", d.encrypted);
        if !d.description.is_empty() {
            p.set_item("DataDisk", n, "Description", &d.description);
        }
        if d.category != EPHEMERAL_SSD {
            p.set_item(
                "DataDisk",
                n,
                "DeleteWithInstance",
                d.delete_with_instance.unwrap_or(true),
            );
        }
    }
    p.set_tags(spec.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_client_token_derives_from_the_machine_uid() {
        let uid = "0b6c7e3c-1f0e-4c5e-9f43-6a1c2d3e4f50";
        assert_eq!(client_token(uid, 0), format!("mcm-{uid}"));
        assert_eq!(client_token(uid, 2), format!("mcm-{uid}-2"));
        assert!(client_token(&"x".repeat(100), 3).len() <= 64);
    }

    #[test]
    fn run_params_flatten_disks_and_tags_like_the_reference() {
        let spec = AlicloudProviderSpec::from_json(&json!({
            "imageID": "m-1", "instanceType": "ecs.g7.large", "region": "eu-central-1",
            "zoneID": "eu-central-1a", "securityGroupID": "sg-1", "vSwitchID": "vsw-1",
            "systemDisk": {"category": "cloud_essd", "size": 50},
            "dataDisks": [
                {"name": "logs", "category": "cloud_essd", "size": 100, "encrypted": true},
                {"name": "scratch", "category": "ephemeral_ssd", "size": 20, "deleteWithInstance": false}
            ],
            "internetMaxBandwidthOut": 0,
            "tags": {"kubernetes.io/cluster/c": "1", "kubernetes.io/role/node": "1"}
        }))
        .unwrap();
        let p = run_params(&spec, "m1", "I2Nsb3Vk", "mcm-uid");
        let want = [
            ("ZoneId", "eu-central-1a"),
            ("ImageId", "m-1"),
            ("InstanceName", "m1"),
            ("ClientToken", "mcm-uid"),
            ("UserData", "I2Nsb3Vk"),
            ("InternetMaxBandwidthOut", "0"),
            ("SystemDisk.Category", "cloud_essd"),
            ("SystemDisk.Size", "50"),
            ("DataDisk.1.DiskName", "m1-logs-data-disk"),
            ("DataDisk.1.Encrypted", "true"),
            ("DataDisk.1.DeleteWithInstance", "true"),
            ("DataDisk.2.Size", "20"),
            ("Tag.1.Key", "kubernetes.io/cluster/c"),
            ("Tag.2.Key", "kubernetes.io/role/node"),
        ];
        for (k, v) in want {
            assert_eq!(p.get(k), Some(v), "{k}");
        }
        assert_eq!(p.get("DataDisk.2.DeleteWithInstance"), None);
        assert_eq!(p.get("PrivateIpAddress"), None, "empty fields are omitted");
        assert_eq!(p.get("InternetMaxBandwidthIn"), None);
    }
}
