//! The fake's in-memory state: resources, injected faults, counters.

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// An operation of the fake, the unit of fault injection and call counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `POST /v3/auth/tokens`.
    IssueToken,
    /// `POST /servers`.
    CreateServer,
    /// `GET /servers/{id}`.
    GetServer,
    /// `GET /servers/detail`.
    ListServers,
    /// `DELETE /servers/{id}`.
    DeleteServer,
    /// `POST /servers/{id}/metadata` (create or update items).
    UpdateServerMetadata,
    /// `PUT /servers/{id}/metadata` (replace all items).
    ReplaceServerMetadata,
    /// `DELETE /servers/{id}/metadata/{key}`.
    DeleteServerMetadataItem,
    /// `GET /flavors/detail`.
    ListFlavors,
    /// `GET /images/detail`.
    ListImages,
    /// `GET /networks`.
    ListNetworks,
    /// `GET /subnets/{id}`.
    GetSubnet,
    /// `GET /ports`.
    ListPorts,
    /// `POST /ports`.
    CreatePort,
    /// `PUT /ports/{id}`.
    UpdatePort,
    /// `PUT /ports/{id}/tags`.
    TagPort,
    /// `DELETE /ports/{id}`.
    DeletePort,
    /// `GET /security-groups`.
    ListSecurityGroups,
    /// `GET /volumes/detail`.
    ListVolumes,
    /// `POST /volumes`.
    CreateVolume,
    /// `GET /volumes/{id}`.
    GetVolume,
    /// `DELETE /volumes/{id}`.
    DeleteVolume,
}

impl Op {
    /// The operation's name in [`crate::FakeOpenStack::calls`].
    pub fn name(self) -> &'static str {
        match self {
            Op::IssueToken => "keystone.tokens.create",
            Op::CreateServer => "nova.servers.create",
            Op::GetServer => "nova.servers.get",
            Op::ListServers => "nova.servers.list",
            Op::DeleteServer => "nova.servers.delete",
            Op::UpdateServerMetadata => "nova.servers.metadata.create",
            Op::ReplaceServerMetadata => "nova.servers.metadata.replace",
            Op::DeleteServerMetadataItem => "nova.servers.metadata.delete",
            Op::ListFlavors => "nova.flavors.list",
            Op::ListImages => "nova.images.list",
            Op::ListNetworks => "neutron.networks.list",
            Op::GetSubnet => "neutron.subnets.get",
            Op::ListPorts => "neutron.ports.list",
            Op::CreatePort => "neutron.ports.create",
            Op::UpdatePort => "neutron.ports.update",
            Op::TagPort => "neutron.ports.tags.replace",
            Op::DeletePort => "neutron.ports.delete",
            Op::ListSecurityGroups => "neutron.security-groups.list",
            Op::ListVolumes => "cinder.volumes.list",
            Op::CreateVolume => "cinder.volumes.create",
            Op::GetVolume => "cinder.volumes.get",
            Op::DeleteVolume => "cinder.volumes.delete",
        }
    }

    pub(crate) fn is_neutron(self) -> bool {
        self.name().starts_with("neutron.")
    }
}

/// An injected failure: the next `times` calls answer `status` with `message`
/// in the service's error envelope (Neutron's `NeutronError`, Nova's and
/// Cinder's `{"<kind>": {"code", "message"}}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// HTTP status, e.g. 403 for a Nova quota error, 409, 500.
    pub status: u16,
    /// The error message.
    pub message: String,
    /// How many calls fail.
    pub times: u32,
}

impl Fault {
    /// A fault with this status and message for the next `times` calls.
    pub fn new(status: u16, message: &str, times: u32) -> Fault {
        Fault {
            status,
            message: message.to_string(),
            times,
        }
    }

    /// Nova's quota answer (403 Forbidden, "Quota exceeded for ...").
    pub fn nova_quota(times: u32) -> Fault {
        Fault::new(
            403,
            "Quota exceeded for instances: Requested 1, but already used 10 of 10 instances",
            times,
        )
    }
}

/// A server as the fake keeps it.
#[derive(Clone, Debug)]
pub(crate) struct ServerRec {
    pub id: String,
    pub name: String,
    pub status: String,
    pub polls_left: u32,
    pub fail_with: Option<String>,
    pub metadata: Value,
    pub flavor_id: String,
    pub image_id: String,
    pub az: String,
    pub key_name: Option<String>,
    pub security_groups: Vec<String>,
    /// Ports attached (the caller's and Nova's own).
    pub ports: Vec<String>,
    /// Ports Nova created itself (deleted with the server).
    pub own_ports: Vec<String>,
    /// Attached volumes and whether they go with the server.
    pub volumes: Vec<(String, bool)>,
    pub created: String,
}

pub(crate) struct State {
    pub base: String,
    pub project_id: String,
    pub tokens: BTreeSet<String>,
    pub next_id: u64,
    pub flavors: BTreeMap<String, String>,
    pub images: BTreeMap<String, String>,
    pub networks: BTreeMap<String, Value>,
    pub subnets: BTreeMap<String, Value>,
    pub security_groups: BTreeMap<String, Value>,
    pub servers: BTreeMap<String, ServerRec>,
    pub ports: BTreeMap<String, Value>,
    pub volumes: BTreeMap<String, Value>,
    pub volume_polls: HashMap<String, u32>,
    pub faults: HashMap<Op, Fault>,
    pub build_polls: u32,
    pub failing_builds: u32,
    pub build_fault: String,
    pub calls: BTreeMap<String, u64>,
    pub unmatched: Vec<String>,
    pub last_server_create: Option<Value>,
    pub ip_counter: u32,
    /// Key pairs of the project (`key_name` must name one).
    pub keypairs: BTreeSet<String>,
    /// Server groups that exist (their UUIDs).
    pub server_groups: BTreeSet<String>,
    /// Availability zones (`nova` from the start).
    pub zones: BTreeSet<String>,
    /// What the token's service catalog lists.
    pub catalog: Catalog,
}

/// The shape of the service catalog the fake's Keystone hands out with a
/// token: clouds differ in it, and the provider must cope with each shape.
#[derive(Clone, Debug)]
pub struct Catalog {
    /// The service types under which Cinder is listed (`block-storage`,
    /// `volumev3`, `volume`, ...); empty: the cloud has no block storage.
    pub block_storage_types: Vec<String>,
    /// Each endpoint's `region` (its name).
    pub region: String,
    /// Each endpoint's `region_id`.
    pub region_id: String,
    /// Also list `internal` and `admin` endpoints, on a URL nobody answers,
    /// so a client that picks one of them fails.
    pub unreachable_internal_and_admin: bool,
}

impl Default for Catalog {
    fn default() -> Catalog {
        Catalog {
            block_storage_types: vec!["block-storage".into(), "volumev3".into()],
            region: crate::REGION.into(),
            region_id: crate::REGION.into(),
            unreachable_internal_and_admin: false,
        }
    }
}

pub(crate) const TIME: &str = "2026-12-02T12:00:00Z";

impl State {
    pub fn new(base: String) -> State {
        State {
            base,
            project_id: "6f70656e737461636b20342065766572".to_string(),
            tokens: BTreeSet::new(),
            next_id: 1,
            flavors: BTreeMap::new(),
            images: BTreeMap::new(),
            networks: BTreeMap::new(),
            subnets: BTreeMap::new(),
            security_groups: BTreeMap::new(),
            servers: BTreeMap::new(),
            ports: BTreeMap::new(),
            volumes: BTreeMap::new(),
            volume_polls: HashMap::new(),
            faults: HashMap::new(),
            build_polls: 0,
            failing_builds: 0,
            build_fault: String::new(),
            calls: BTreeMap::new(),
            unmatched: Vec::new(),
            last_server_create: None,
            ip_counter: 10,
            keypairs: BTreeSet::new(),
            server_groups: BTreeSet::new(),
            zones: ["nova".to_string()].into_iter().collect(),
            catalog: Catalog::default(),
        }
    }

    /// A fresh UUID-shaped ID.
    pub fn uuid(&mut self) -> String {
        let n = self.next_id;
        self.next_id += 1;
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            0x5eed_0000u64 + (n >> 32),
            n & 0xffff,
            (n >> 16) & 0xfff,
            (n >> 28) & 0xfff,
            n.wrapping_mul(0x9e37_79b9) & 0xffff_ffff_ffff
        )
    }

    pub fn add_flavor(&mut self, name: &str) -> String {
        let id = format!("{}", 100 + self.flavors.len());
        self.flavors.insert(id.clone(), name.to_string());
        id
    }

    pub fn add_image(&mut self, name: &str) -> String {
        let id = self.uuid();
        self.images.insert(id.clone(), name.to_string());
        id
    }

    pub fn add_network(&mut self, name: &str) -> String {
        let id = self.uuid();
        let p = self.project_id.clone();
        self.networks.insert(
            id.clone(),
            json!({
                "admin_state_up": true, "availability_zone_hints": [], "availability_zones": ["nova"],
                "created_at": TIME, "dns_domain": "", "id": id, "ipv4_address_scope": null,
                "ipv6_address_scope": null, "l2_adjacency": true, "mtu": 1450, "name": name,
                "port_security_enabled": true, "project_id": p, "pvlan": false, "qos_policy_id": null,
                "revision_number": 1, "router:external": false, "shared": false, "status": "ACTIVE",
                "subnets": [], "tags": [], "tenant_id": p, "updated_at": TIME, "vlan_transparent": false,
                "qinq": false, "description": "", "is_default": false
            }),
        );
        id
    }

    pub fn add_subnet(&mut self, network_id: &str, name: &str, cidr: &str) -> String {
        let id = self.uuid();
        let p = self.project_id.clone();
        let prefix = cidr.rsplit_once('.').map(|(a, _)| a).unwrap_or("10.0.0");
        self.subnets.insert(
            id.clone(),
            json!({
                "name": name, "enable_dhcp": true, "network_id": network_id, "segment_id": null,
                "project_id": p, "tenant_id": p, "created_at": TIME, "dns_nameservers": [],
                "dns_publish_fixed_ip": false,
                "allocation_pools": [{"start": format!("{prefix}.2"), "end": format!("{prefix}.254")}],
                "host_routes": [], "ip_version": 4, "gateway_ip": format!("{prefix}.1"), "cidr": cidr,
                "updated_at": TIME, "id": id, "description": "", "ipv6_address_mode": null,
                "ipv6_ra_mode": null, "revision_number": 1, "service_types": [], "subnetpool_id": null,
                "tags": [], "router:external": false
            }),
        );
        if let Some(Value::Array(subnets)) = self
            .networks
            .get_mut(network_id)
            .and_then(|n| n.get_mut("subnets"))
        {
            subnets.push(json!(id));
        }
        id
    }

    pub fn add_security_group(&mut self, name: &str) -> String {
        let id = self.uuid();
        let p = self.project_id.clone();
        self.security_groups.insert(
            id.clone(),
            json!({
                "description": name, "id": id, "name": name, "security_group_rules": [],
                "project_id": p, "revision_number": 1, "created_at": TIME, "updated_at": TIME,
                "tags": [], "tenant_id": p, "stateful": true, "shared": false
            }),
        );
        id
    }

    /// A new IPv4 address in a subnet's range.
    pub fn next_ip(&mut self, subnet_id: &str) -> String {
        self.ip_counter += 1;
        let cidr = self
            .subnets
            .get(subnet_id)
            .and_then(|s| s["cidr"].as_str())
            .unwrap_or("10.0.0.0/24")
            .to_string();
        let prefix = cidr.rsplit_once('.').map(|(a, _)| a).unwrap_or("10.0.0");
        format!("{prefix}.{}", self.ip_counter % 250 + 2)
    }

    /// A new port (Neutron's full view).
    pub fn new_port(
        &mut self,
        name: &str,
        network_id: &str,
        fixed: Vec<Value>,
        sgs: Vec<Value>,
    ) -> Value {
        let id = self.uuid();
        let p = self.project_id.clone();
        let mut fixed_ips = Vec::new();
        let mut subnet_ids: Vec<String> = fixed
            .iter()
            .filter_map(|f| f["subnet_id"].as_str().map(str::to_string))
            .collect();
        if subnet_ids.is_empty() {
            subnet_ids = self
                .subnets
                .values()
                .filter(|s| s["network_id"] == json!(network_id))
                .filter_map(|s| s["id"].as_str().map(str::to_string))
                .take(1)
                .collect();
        }
        for s in subnet_ids {
            let ip = self.next_ip(&s);
            fixed_ips.push(json!({"ip_address": ip, "subnet_id": s}));
        }
        let n = self.ip_counter;
        let port = json!({
            "admin_state_up": true, "allowed_address_pairs": [], "created_at": TIME,
            "data_plane_status": null, "description": "", "device_id": "", "device_owner": "",
            "dns_assignment": [], "dns_domain": "", "dns_name": "", "extra_dhcp_opts": [],
            "fixed_ips": fixed_ips, "id": id, "ip_allocation": "immediate",
            "mac_address": format!("fa:16:3e:00:{:02x}:{:02x}", (n >> 8) & 0xff, n & 0xff),
            "name": name, "network_id": network_id, "port_security_enabled": true, "project_id": p,
            "revision_number": 1, "security_groups": sgs, "status": "DOWN", "tags": [],
            "tenant_id": p, "updated_at": TIME, "qos_network_policy_id": null, "qos_policy_id": null,
            "propagate_uplink_status": false, "pvlan_type": "", "pvlan_community": "",
            "hardware_offload_type": "", "trusted": null,
            "binding:host_id": "", "binding:profile": {}, "binding:vif_details": {},
            "binding:vif_type": "unbound", "binding:vnic_type": "normal"
        });
        self.ports.insert(id, port.clone());
        port
    }

    /// Adds a server that is ACTIVE at once, as if made by someone else.
    pub fn add_server_direct(&mut self, name: &str, metadata: Value) -> String {
        let id = self.uuid();
        let rec = ServerRec {
            id: id.clone(),
            name: name.to_string(),
            status: "ACTIVE".into(),
            polls_left: 0,
            fail_with: None,
            metadata,
            flavor_id: self.flavors.keys().next().cloned().unwrap_or_default(),
            image_id: self.images.keys().next().cloned().unwrap_or_default(),
            az: "nova".into(),
            key_name: None,
            security_groups: vec!["default".into()],
            ports: Vec::new(),
            own_ports: Vec::new(),
            volumes: Vec::new(),
            created: TIME.into(),
        };
        self.servers.insert(id.clone(), rec);
        id
    }

    /// A server as [`Self::add_server_direct`], with a Nova-made port on
    /// `network_id` (as a server another client booted has).
    pub fn add_server_on(&mut self, name: &str, metadata: Value, network_id: &str) -> String {
        let id = self.add_server_direct(name, metadata);
        let port = self.new_port("", network_id, Vec::new(), Vec::new());
        let pid = port["id"].as_str().unwrap_or_default().to_string();
        if let Some(p) = self.ports.get_mut(&pid) {
            p["device_id"] = serde_json::json!(id);
            p["device_owner"] = serde_json::json!("compute:nova");
        }
        if let Some(rec) = self.servers.get_mut(&id) {
            rec.ports.push(pid.clone());
            rec.own_ports.push(pid);
        }
        id
    }

    /// One read of a server: BUILD counts down, then ACTIVE or ERROR.
    pub fn advance(&mut self, id: &str) {
        let Some(rec) = self.servers.get_mut(id) else {
            return;
        };
        if rec.status != "BUILD" {
            return;
        }
        if rec.polls_left > 0 {
            rec.polls_left -= 1;
            return;
        }
        rec.status = if rec.fail_with.is_some() {
            "ERROR"
        } else {
            "ACTIVE"
        }
        .into();
        let (id, status) = (rec.id.clone(), rec.status.clone());
        for p in self.ports.values_mut() {
            if p["device_id"] == json!(id) {
                p["status"] = json!(if status == "ACTIVE" { "ACTIVE" } else { "DOWN" });
            }
        }
    }

    /// Nova's full server view (the `server-get-resp` sample's keys).
    pub fn server_view(&self, r: &ServerRec) -> Value {
        let b = &self.base;
        let p = &self.project_id;
        let mut addresses = Map::new();
        for port_id in &r.ports {
            let Some(port) = self.ports.get(port_id) else {
                continue;
            };
            let net = port["network_id"].as_str().unwrap_or_default();
            let net_name = self
                .networks
                .get(net)
                .and_then(|n| n["name"].as_str())
                .unwrap_or(net)
                .to_string();
            let entries = addresses.entry(net_name).or_insert_with(|| json!([]));
            for ip in port["fixed_ips"].as_array().into_iter().flatten() {
                if let Value::Array(list) = entries {
                    list.push(json!({
                        "addr": ip["ip_address"], "OS-EXT-IPS-MAC:mac_addr": port["mac_address"],
                        "OS-EXT-IPS:type": "fixed", "version": 4
                    }));
                }
            }
        }
        let (power, vm_state, task) = match r.status.as_str() {
            "ACTIVE" => (1, "active", Value::Null),
            "ERROR" => (0, "error", Value::Null),
            _ => (0, "building", json!("spawning")),
        };
        let mut v = json!({
            "accessIPv4": "", "accessIPv6": "", "addresses": addresses, "created": r.created,
            "flavor": {"id": r.flavor_id, "links": [{"href": format!("{b}/compute/flavors/{}", r.flavor_id), "rel": "bookmark"}]},
            "hostId": if r.status == "ACTIVE" { "f4a6c1d2e3b4a5968778695a4b3c2d1e0f1a2b3c4d5e6f7a8b9c0d1e" } else { "" },
            "id": r.id,
            "image": if r.image_id.is_empty() { json!("") } else { json!({"id": r.image_id, "links": [{"href": format!("{b}/compute/images/{}", r.image_id), "rel": "bookmark"}]}) },
            "key_name": r.key_name,
            "links": [
                {"href": format!("{b}/compute/v2.1/servers/{}", r.id), "rel": "self"},
                {"href": format!("{b}/compute/servers/{}", r.id), "rel": "bookmark"}
            ],
            "metadata": r.metadata, "name": r.name, "config_drive": "", "OS-DCF:diskConfig": "MANUAL",
            "OS-EXT-AZ:availability_zone": r.az, "OS-EXT-SRV-ATTR:host": "fake-host",
            "OS-EXT-SRV-ATTR:hypervisor_hostname": "fake-mini",
            "OS-EXT-SRV-ATTR:instance_name": format!("instance-{}", &r.id[..8]),
            "OS-EXT-STS:power_state": power, "OS-EXT-STS:task_state": task, "OS-EXT-STS:vm_state": vm_state,
            "os-extended-volumes:volumes_attached": r.volumes.iter().map(|(id, _)| json!({"id": id})).collect::<Vec<_>>(),
            "OS-SRV-USG:launched_at": if r.status == "ACTIVE" { json!("2026-12-02T12:00:01.000000") } else { Value::Null },
            "OS-SRV-USG:terminated_at": null, "progress": 0,
            "security_groups": r.security_groups.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
            "status": r.status, "tenant_id": p, "updated": TIME, "user_id": "mcm-user"
        });
        if let Some(msg) = r.fail_with.as_ref().filter(|_| r.status == "ERROR") {
            v["fault"] = json!({"code": 500, "created": TIME, "message": msg});
        }
        v
    }
}
