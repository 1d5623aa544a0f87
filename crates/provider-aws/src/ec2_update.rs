//! The EC2 calls of UpdateMachine (docs/design/providers/aws.md, "Hot
//! update"): tag edits, volume and network-interface descriptions and
//! modifications, instance metadata options. Every call goes through
//! [`Ec2::call`] (token bucket, throttling pause).

use crate::ec2::Ec2;
use crate::errors::Ec2Error;
use crate::ratelimit::ActionClass;
use aws_sdk_ec2::types::{
    AttributeBooleanValue, HttpTokensState, InstanceMetadataEndpointState,
    InstanceMetadataProtocolState, NetworkInterface, Tag, Volume, VolumeType,
};
use std::collections::BTreeMap;

/// The changes of one ModifyVolume call (`None`: leave as is).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeChange {
    /// New size in GiB (increase only).
    pub size: Option<i32>,
    /// New volume type.
    pub volume_type: Option<String>,
    /// New provisioned IOPS.
    pub iops: Option<i32>,
    /// New throughput in MiB/s.
    pub throughput: Option<i32>,
}

impl VolumeChange {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        *self == VolumeChange::default()
    }
}

/// The changes of one ModifyInstanceMetadataOptions call (`None`: leave as is).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetadataChange {
    /// `enabled` or `disabled`.
    pub http_endpoint: Option<String>,
    /// `required` or `optional`.
    pub http_tokens: Option<String>,
    /// Hop limit.
    pub http_put_response_hop_limit: Option<i32>,
    /// `enabled` or `disabled`.
    pub http_protocol_ipv6: Option<String>,
}

impl MetadataChange {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        *self == MetadataChange::default()
    }
}

impl Ec2 {
    /// CreateTags: sets these tags on every resource (overwriting values).
    pub async fn create_tags(
        &self,
        resources: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Result<(), Ec2Error> {
        let tags: Vec<Tag> = tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect();
        self.call("CreateTags", ActionClass::Mutating, || {
            self.client()
                .create_tags()
                .set_resources(Some(resources.to_vec()))
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await
        .map(|_| ())
    }

    /// DeleteTags: removes these keys (whatever their value) from every resource.
    pub async fn delete_tags(&self, resources: &[String], keys: &[String]) -> Result<(), Ec2Error> {
        let tags: Vec<Tag> = keys.iter().map(|k| Tag::builder().key(k).build()).collect();
        self.call("DeleteTags", ActionClass::Mutating, || {
            self.client()
                .delete_tags()
                .set_resources(Some(resources.to_vec()))
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await
        .map(|_| ())
    }

    /// DescribeVolumes of these IDs (none: no call).
    pub async fn volumes(&self, ids: &[String]) -> Result<Vec<Volume>, Ec2Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let out = self
            .call("DescribeVolumes", ActionClass::Describe, || {
                self.client()
                    .describe_volumes()
                    .set_volume_ids(Some(ids.to_vec()))
                    .send()
            })
            .await?;
        Ok(out.volumes().to_vec())
    }

    /// DescribeNetworkInterfaces of these IDs (none: no call).
    pub async fn network_interfaces(
        &self,
        ids: &[String],
    ) -> Result<Vec<NetworkInterface>, Ec2Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let out = self
            .call("DescribeNetworkInterfaces", ActionClass::Describe, || {
                self.client()
                    .describe_network_interfaces()
                    .set_network_interface_ids(Some(ids.to_vec()))
                    .send()
            })
            .await?;
        Ok(out.network_interfaces().to_vec())
    }

    /// ModifyVolume with the given changes.
    pub async fn modify_volume(&self, id: &str, c: &VolumeChange) -> Result<(), Ec2Error> {
        self.call("ModifyVolume", ActionClass::Mutating, || {
            self.client()
                .modify_volume()
                .volume_id(id)
                .set_size(c.size)
                .set_volume_type(c.volume_type.as_deref().map(VolumeType::from))
                .set_iops(c.iops)
                .set_throughput(c.throughput)
                .send()
        })
        .await
        .map(|_| ())
    }

    /// ModifyInstanceMetadataOptions with the given changes.
    pub async fn modify_metadata_options(
        &self,
        instance: &str,
        c: &MetadataChange,
    ) -> Result<(), Ec2Error> {
        self.call(
            "ModifyInstanceMetadataOptions",
            ActionClass::Mutating,
            || {
                self.client()
                    .modify_instance_metadata_options()
                    .instance_id(instance)
                    .set_http_endpoint(
                        c.http_endpoint
                            .as_deref()
                            .map(InstanceMetadataEndpointState::from),
                    )
                    .set_http_tokens(c.http_tokens.as_deref().map(HttpTokensState::from))
                    .set_http_put_response_hop_limit(c.http_put_response_hop_limit)
                    .set_http_protocol_ipv6(
                        c.http_protocol_ipv6
                            .as_deref()
                            .map(InstanceMetadataProtocolState::from),
                    )
                    .send()
            },
        )
        .await
        .map(|_| ())
    }

    /// Turns the source/destination check of an interface on or off.
    pub async fn set_source_dest_check(&self, eni: &str, on: bool) -> Result<(), Ec2Error> {
        self.call(
            "ModifyNetworkInterfaceAttribute",
            ActionClass::Mutating,
            || {
                self.client()
                    .modify_network_interface_attribute()
                    .network_interface_id(eni)
                    .source_dest_check(AttributeBooleanValue::builder().value(on).build())
                    .send()
            },
        )
        .await
        .map(|_| ())
    }

    /// UnassignIpv6Addresses of these addresses and prefixes from an interface.
    pub async fn unassign_ipv6(
        &self,
        eni: &str,
        addresses: &[String],
        prefixes: &[String],
    ) -> Result<(), Ec2Error> {
        let some = |v: &[String]| (!v.is_empty()).then(|| v.to_vec());
        self.call(
            "UnassignIpv6Addresses",
            ActionClass::AssignIpv6Addresses,
            || {
                self.client()
                    .unassign_ipv6_addresses()
                    .network_interface_id(eni)
                    .set_ipv6_addresses(some(addresses))
                    .set_ipv6_prefixes(some(prefixes))
                    .send()
            },
        )
        .await
        .map(|_| ())
    }
}
