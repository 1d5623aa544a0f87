//! The OpenStack calls the driver makes, on openstack_sdk's endpoint types,
//! with the answers reduced to the fields the driver reads.
//!
//! Two look-ups have no typed endpoint in openstack_sdk and use [`Get`]:
//! Nova's image proxy (`GET /images/detail?name=`, what the reference uses)
//! and Cinder's volume list filtered by name.

use crate::cloud::Cloud;
use crate::config::OpClass;
use crate::errors::OsError;
use openstack_sdk::api::block_storage::v3::volume as cinder_volume;
use openstack_sdk::api::compute::v2::flavor::list_detailed_20 as flavor_list;
use openstack_sdk::api::compute::v2::server::metadata::{
    create as metadata_create, delete as metadata_delete,
};
use openstack_sdk::api::compute::v2::server::{
    create_21 as server_create, delete as server_delete, get_20 as server_get,
    list_detailed_21 as server_list,
};
use openstack_sdk::api::network::v2::{network, port, security_group, subnet};
use openstack_sdk::api::rest_endpoint_prelude::*;
use openstack_sdk::api::{Pageable, RestEndpoint};
use openstack_sdk::types::{ApiVersion, ServiceType};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// A server as the driver reads it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Server {
    /// UUID.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// `BUILD`, `ACTIVE`, `ERROR`, ...
    #[serde(default)]
    pub status: String,
    /// Metadata (the spec's tags and the machine UID).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Addresses per network name.
    #[serde(default)]
    pub addresses: BTreeMap<String, Vec<Address>>,
    /// The fault of a server in `ERROR`.
    #[serde(default)]
    pub fault: Option<Fault>,
}

/// One address of a server.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Address {
    /// The IP address.
    pub addr: String,
    /// 4 or 6.
    #[serde(default)]
    pub version: u8,
    /// `fixed` or `floating`.
    #[serde(default, rename = "OS-EXT-IPS:type")]
    pub kind: String,
}

/// The fault of a failed server.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Fault {
    /// Nova's message, e.g. "No valid host was found. ...".
    #[serde(default)]
    pub message: String,
    /// HTTP-like code.
    #[serde(default)]
    pub code: Option<i64>,
}

/// Anything with an ID and a name (flavors, images, networks, security groups).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Named {
    /// ID.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: Option<String>,
}

/// A Neutron port as the driver reads it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Port {
    /// ID.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Network.
    #[serde(default)]
    pub network_id: String,
    /// The server it is bound to ("" when free).
    #[serde(default)]
    pub device_id: String,
    /// Allowed address pairs.
    #[serde(default)]
    pub allowed_address_pairs: Vec<AddressPair>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// One allowed address pair.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AddressPair {
    /// IP or CIDR.
    pub ip_address: String,
}

/// A Cinder volume as the driver reads it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Volume {
    /// ID.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: Option<String>,
    /// `creating`, `available`, `in-use`, `error`, ...
    #[serde(default)]
    pub status: String,
}

/// A GET with query parameters, for look-ups without a typed endpoint.
pub(crate) struct Get {
    service: ServiceType,
    path: &'static str,
    query: Vec<(&'static str, String)>,
    key: &'static str,
    min: ApiVersion,
    max: Option<ApiVersion>,
}

impl RestEndpoint for Get {
    fn method(&self) -> http::Method {
        http::Method::GET
    }

    fn endpoint(&self) -> Cow<'static, str> {
        self.path.into()
    }

    fn service_type(&self) -> ServiceType {
        self.service.clone()
    }

    fn parameters(&self) -> QueryParams<'_> {
        let mut p = QueryParams::default();
        for (k, v) in &self.query {
            p.push(*k, v.as_str());
        }
        p
    }

    fn response_key(&self) -> Option<Cow<'static, str>> {
        Some(self.key.into())
    }

    fn min_version(&self) -> Option<ApiVersion> {
        Some(self.min)
    }

    fn max_version(&self) -> Option<ApiVersion> {
        self.max
    }
}

impl Pageable for Get {}

fn build_err(e: impl std::fmt::Display) -> OsError {
    OsError::Failed(format!("building an OpenStack request: {e}"))
}

/// Servers whose name contains `name` (Nova's regex filter); all when `None`.
pub(crate) async fn list_servers(c: &Cloud, name: Option<&str>) -> Result<Vec<Server>, OsError> {
    let mut b = server_list::Request::builder();
    if let Some(n) = name {
        b.name(n);
    }
    c.list("nova.servers.list", b.build().map_err(build_err)?)
        .await
}

/// One server; `None` when Nova answers 404.
pub(crate) async fn get_server(c: &Cloud, id: &str) -> Result<Option<Server>, OsError> {
    let ep = server_get::Request::builder()
        .id(id)
        .build()
        .map_err(build_err)?;
    match c.run("nova.servers.get", OpClass::Read, ep).await {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes a server; `false` when it was already gone.
pub(crate) async fn delete_server(c: &Cloud, id: &str) -> Result<bool, OsError> {
    let ep = server_delete::Request::builder()
        .id(id)
        .build()
        .map_err(build_err)?;
    match c.send("nova.servers.delete", OpClass::Write, ep).await {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Creates or updates these metadata items of a server (Nova's
/// `POST /servers/{id}/metadata`; other items stay); returns every item.
pub(crate) async fn update_server_metadata(
    c: &Cloud,
    id: &str,
    items: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, OsError> {
    let ep = metadata_create::Request::builder()
        .server_id(id)
        .metadata(items.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .build()
        .map_err(build_err)?;
    c.run("nova.servers.metadata.create", OpClass::Write, ep)
        .await
}

/// Deletes one metadata item of a server; `false` when it had none of that key.
pub(crate) async fn delete_server_metadata_item(
    c: &Cloud,
    id: &str,
    key: &str,
) -> Result<bool, OsError> {
    let ep = metadata_delete::Request::builder()
        .server_id(id)
        .id(key)
        .build()
        .map_err(build_err)?;
    match c
        .send("nova.servers.metadata.delete", OpClass::Write, ep)
        .await
    {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Everything a server creation sends.
#[derive(Clone, Debug, Default)]
pub struct ServerCreate {
    /// Name (the machine's).
    pub name: String,
    /// Flavor ID.
    pub flavor: String,
    /// Image ID ("" when booting from a volume).
    pub image: String,
    /// `(network ID, port ID)` per NIC.
    pub networks: Vec<(String, Option<String>)>,
    /// Security group names.
    pub security_groups: Vec<String>,
    /// Metadata.
    pub metadata: BTreeMap<String, String>,
    /// Base64 user data.
    pub user_data: String,
    /// Availability zone.
    pub availability_zone: String,
    /// Key pair.
    pub key_name: String,
    /// Config drive.
    pub config_drive: Option<bool>,
    /// Server group (scheduler hint).
    pub server_group: Option<String>,
    /// Boot volume: `(source is a volume, image or volume ID, size GB, delete on termination)`.
    pub boot_volume: Option<(bool, String, i32, bool)>,
}

/// Creates a server; returns its ID.
pub(crate) async fn create_server(c: &Cloud, s: &ServerCreate) -> Result<String, OsError> {
    let mut server = server_create::ServerBuilder::default();
    server
        .name(s.name.as_str())
        .flavor_ref(s.flavor.as_str())
        .metadata(s.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .user_data(s.user_data.as_str())
        .availability_zone(s.availability_zone.as_str())
        .key_name(s.key_name.as_str());
    if !s.image.is_empty() {
        server.image_ref(s.image.as_str());
    }
    if let Some(cd) = s.config_drive {
        server.config_drive(cd);
    }
    let mut nets = Vec::new();
    for (uuid, port) in &s.networks {
        let mut n = server_create::NetworksBuilder::default();
        n.uuid(uuid.as_str());
        if let Some(p) = port {
            n.port(Some(p.as_str().into()));
        }
        nets.push(n.build().map_err(build_err)?);
    }
    server.networks(nets);
    if !s.security_groups.is_empty() {
        let mut groups = Vec::new();
        for g in &s.security_groups {
            groups.push(
                server_create::SecurityGroupsBuilder::default()
                    .name(g.as_str())
                    .build()
                    .map_err(build_err)?,
            );
        }
        server.security_groups(groups);
    }
    if let Some((from_volume, uuid, size, delete)) = &s.boot_volume {
        let bdm = server_create::BlockDeviceMappingV2Builder::default()
            .boot_index(Some("0".into()))
            .uuid(uuid.as_str())
            .source_type(if *from_volume {
                server_create::SourceType::Volume
            } else {
                server_create::SourceType::Image
            })
            .destination_type(server_create::DestinationType::Volume)
            .volume_size(*size)
            .delete_on_termination(*delete)
            .build()
            .map_err(build_err)?;
        server.block_device_mapping_v2(vec![bdm]);
    }
    let mut req = server_create::Request::builder();
    req.server(server.build().map_err(build_err)?);
    if let Some(g) = &s.server_group {
        req.os_scheduler_hints(
            // Nova's schema takes the group as a string (as gophercloud
            // sends it); the SDK's generated field is a list, so the string
            // goes in as an extra hint.
            server_create::OsSchedulerHintsBuilder::default()
                .properties(std::iter::once((
                    "group",
                    serde_json::Value::from(g.as_str()),
                )))
                .build()
                .map_err(build_err)?,
        );
    }
    let created: Named = c
        .run(
            "nova.servers.create",
            OpClass::CreateServer,
            req.build().map_err(build_err)?,
        )
        .await?;
    Ok(created.id)
}

/// Every flavor (with details).
pub(crate) async fn list_flavors(c: &Cloud) -> Result<Vec<Named>, OsError> {
    let ep = flavor_list::Request::builder().build().map_err(build_err)?;
    c.list("nova.flavors.list", ep).await
}

/// Images of this name through Nova's image proxy (up to microversion 2.35).
pub(crate) async fn list_images(c: &Cloud, name: &str) -> Result<Vec<Named>, OsError> {
    let ep = Get {
        service: ServiceType::Compute,
        path: "images/detail",
        query: vec![("name", name.to_string())],
        key: "images",
        min: ApiVersion::new(2, 1),
        max: Some(ApiVersion::new(2, 35)),
    };
    c.run("nova.images.list", OpClass::Read, ep).await
}

/// Networks of this name.
pub(crate) async fn list_networks(c: &Cloud, name: &str) -> Result<Vec<Named>, OsError> {
    let ep = network::list::Request::builder()
        .name(name)
        .build()
        .map_err(build_err)?;
    c.run("neutron.networks.list", OpClass::Read, ep).await
}

/// Whether a subnet exists.
pub(crate) async fn subnet_exists(c: &Cloud, id: &str) -> Result<bool, OsError> {
    let ep = subnet::get::Request::builder()
        .id(id)
        .build()
        .map_err(build_err)?;
    match c
        .run::<Named, _>("neutron.subnets.get", OpClass::Read, ep)
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Ports by name and/or device.
pub(crate) async fn list_ports(
    c: &Cloud,
    name: Option<&str>,
    device_id: Option<&str>,
) -> Result<Vec<Port>, OsError> {
    let mut b = port::list::Request::builder();
    if let Some(n) = name {
        b.name(n);
    }
    if let Some(d) = device_id {
        b.device_id(d);
    }
    c.run(
        "neutron.ports.list",
        OpClass::Read,
        b.build().map_err(build_err)?,
    )
    .await
}

/// Creates a port with fixed IPs on the subnets and the security groups (IDs).
pub(crate) async fn create_port(
    c: &Cloud,
    name: &str,
    network_id: &str,
    subnets: &[String],
    groups: &[String],
) -> Result<Port, OsError> {
    let mut fixed = Vec::new();
    for s in subnets {
        fixed.push(
            port::create::FixedIpsBuilder::default()
                .subnet_id(s.as_str())
                .build()
                .map_err(build_err)?,
        );
    }
    let p = port::create::PortBuilder::default()
        .name(name)
        .network_id(network_id)
        .fixed_ips(fixed)
        .security_groups(
            groups
                .iter()
                .map(|g| Cow::from(g.as_str()))
                .collect::<Vec<_>>(),
        )
        .build()
        .map_err(build_err)?;
    let ep = port::create::Request::builder()
        .port(p)
        .build()
        .map_err(build_err)?;
    c.run("neutron.ports.create", OpClass::Write, ep).await
}

/// Replaces a port's tags.
pub(crate) async fn tag_port(c: &Cloud, id: &str, tags: &[&str]) -> Result<(), OsError> {
    let ep = port::tag::replace::Request::builder()
        .port_id(id)
        .tags(tags.iter().map(|t| Cow::from(*t)).collect::<Vec<_>>())
        .build()
        .map_err(build_err)?;
    c.send("neutron.ports.tags.replace", OpClass::Write, ep)
        .await
}

/// Sets a port's allowed address pairs.
pub(crate) async fn set_allowed_address_pairs(
    c: &Cloud,
    id: &str,
    cidrs: &[String],
) -> Result<(), OsError> {
    let mut pairs = Vec::new();
    for cidr in cidrs {
        pairs.push(
            port::set::AllowedAddressPairsBuilder::default()
                .ip_address(cidr.as_str())
                .build()
                .map_err(build_err)?,
        );
    }
    let p = port::set::PortBuilder::default()
        .allowed_address_pairs(pairs)
        .build()
        .map_err(build_err)?;
    let ep = port::set::Request::builder()
        .id(id)
        .port(p)
        .build()
        .map_err(build_err)?;
    c.send("neutron.ports.update", OpClass::Write, ep).await
}

/// Deletes a port; `false` when it was already gone.
pub(crate) async fn delete_port(c: &Cloud, id: &str) -> Result<bool, OsError> {
    let ep = port::delete::Request::builder()
        .id(id)
        .build()
        .map_err(build_err)?;
    match c.send("neutron.ports.delete", OpClass::Write, ep).await {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Security groups of this name.
pub(crate) async fn list_security_groups(c: &Cloud, name: &str) -> Result<Vec<Named>, OsError> {
    let ep = security_group::list::Request::builder()
        .name(name)
        .build()
        .map_err(build_err)?;
    c.run("neutron.security-groups.list", OpClass::Read, ep)
        .await
}

/// Volumes of this name.
pub(crate) async fn list_volumes(c: &Cloud, name: &str) -> Result<Vec<Volume>, OsError> {
    let ep = Get {
        service: ServiceType::BlockStorage,
        path: "volumes/detail",
        query: vec![("name", name.to_string())],
        key: "volumes",
        min: ApiVersion::new(3, 0),
        max: None,
    };
    c.run("cinder.volumes.list", OpClass::Read, ep).await
}

/// Creates a volume from an image.
pub(crate) async fn create_volume(
    c: &Cloud,
    name: &str,
    size: i32,
    volume_type: &str,
    image: &str,
    az: &str,
    metadata: &BTreeMap<String, String>,
) -> Result<Volume, OsError> {
    let v = cinder_volume::create_30::VolumeBuilder::default()
        .name(Some(name.into()))
        .size(Some(size))
        .volume_type(Some(volume_type.into()))
        .image_ref(Some(image.into()))
        .availability_zone(Some(az.into()))
        .metadata(metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .build()
        .map_err(build_err)?;
    let ep = cinder_volume::create_30::Request::builder()
        .volume(v)
        .build()
        .map_err(build_err)?;
    c.run("cinder.volumes.create", OpClass::Write, ep).await
}

/// One volume; `None` on 404.
pub(crate) async fn get_volume(c: &Cloud, id: &str) -> Result<Option<Volume>, OsError> {
    let ep = cinder_volume::get::Request::builder()
        .id(id)
        .build()
        .map_err(build_err)?;
    match c.run("cinder.volumes.get", OpClass::Read, ep).await {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes a volume; `false` when it was already gone.
pub(crate) async fn delete_volume(c: &Cloud, id: &str) -> Result<bool, OsError> {
    let ep = cinder_volume::delete::Request::builder()
        .id(id)
        .build()
        .map_err(build_err)?;
    match c.send("cinder.volumes.delete", OpClass::Write, ep).await {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}
