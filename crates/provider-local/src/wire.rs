//! The JSON documents of the local cloud's HTTP API, shared by the server, the
//! driver and the admin client.

use chrono::{DateTime, Utc};
use mcm_driver::Code;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The provider ID scheme of the local cloud: `local:///<zone>/<instance-id>`.
pub const PROVIDER_ID_SCHEME: &str = "local:///";

/// The lifecycle state of an instance as the API shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InstanceState {
    /// Booting: turns into `running` after the boot delay.
    Pending,
    /// Running: its simulated kubelet heartbeats (when a target cluster is set).
    Running,
    /// Stopped by an operator: no heartbeats; `start` boots it again.
    Stopped,
    /// Crashed (fault injection): no heartbeats; `start` boots it again.
    Killed,
}

impl InstanceState {
    /// The lowercase name used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Running => "running",
            InstanceState::Stopped => "stopped",
            InstanceState::Killed => "killed",
        }
    }
}

/// An instance of the local cloud.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// `i-` followed by 17 hex digits.
    pub id: String,
    /// The idempotency token it was created with (the Machine's UID).
    #[serde(default)]
    pub client_token: String,
    /// The name of the Machine it backs.
    pub machine_name: String,
    /// The name of its Node (the machine name).
    pub node_name: String,
    /// `local:///<zone>/<id>`.
    pub provider_id: String,
    /// Its zone.
    pub zone: String,
    /// Its image.
    pub image: String,
    /// Its instance type.
    pub instance_type: String,
    /// Its tags (from the class's providerSpec).
    pub tags: BTreeMap<String, String>,
    /// Its private IPv4 address (fake, never contacted).
    pub private_ip: String,
    /// When it was created.
    pub created: DateTime<Utc>,
    /// When it becomes (or became) visible to describe calls (eventual consistency).
    pub visible_at: DateTime<Utc>,
    /// When it finishes (or finished) booting.
    pub ready_at: DateTime<Utc>,
    /// Its state. A stored `pending` whose `readyAt` has passed is shown as `running`.
    pub state: InstanceState,
    /// The source/destination check flag (true at creation).
    pub src_dst_check: bool,
    /// Its IPv6 addresses (none at creation).
    #[serde(default)]
    pub ipv6_addresses: Vec<String>,
    /// Its IPv6 prefixes (none at creation).
    #[serde(default)]
    pub ipv6_prefixes: Vec<String>,
    /// A sequence number unique to this cloud, from which the addresses are derived.
    pub seq: u64,
    /// How often its image and type were changed in place (in-place updates).
    #[serde(default)]
    pub in_place_updates: u32,
    /// How often a hot update (UpdateMachine) changed its tags or instance
    /// type (a call that changed nothing is not counted).
    #[serde(default)]
    pub hot_updates: u32,
}

impl Instance {
    /// The state at `now`: `pending` turns into `running` once `readyAt` has passed.
    pub fn state_at(&self, now: DateTime<Utc>) -> InstanceState {
        match self.state {
            InstanceState::Pending if now >= self.ready_at => InstanceState::Running,
            s => s,
        }
    }

    /// Whether the instance is visible to describe calls at `now`.
    pub fn visible_at(&self, now: DateTime<Utc>) -> bool {
        now >= self.visible_at
    }

    /// The cluster tag key of the instance, if it has one.
    pub fn cluster_tag(&self) -> Option<&str> {
        self.tags
            .keys()
            .find(|k| k.starts_with(crate::spec::CLUSTER_TAG_PREFIX))
            .map(String::as_str)
    }
}

/// Builds `local:///<zone>/<id>`.
pub fn provider_id(zone: &str, id: &str) -> String {
    format!("{PROVIDER_ID_SCHEME}{zone}/{id}")
}

/// The instance ID of a local provider ID (`local:///<zone>/<id>`), if it is one.
pub fn instance_id_of(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix(PROVIDER_ID_SCHEME)?;
    let (_zone, id) = rest.rsplit_once('/')?;
    (id.starts_with("i-") && id.len() > 2).then_some(id)
}

/// `POST /v1/instances`: launch an instance (like RunInstances).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateInstanceRequest {
    /// The idempotency token (the Machine's UID): a retry returns the same instance.
    #[serde(default)]
    pub client_token: String,
    /// The machine name (also the node name).
    pub machine_name: String,
    /// The class's providerSpec.
    pub provider_spec: serde_json::Value,
    /// Tags added to the providerSpec's (the Machine's identity:
    /// `mcm_driver::MachineOwner::tags`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// `POST /v1/instances/{id}/initialize`: establish the spec's network settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeInstanceRequest {
    /// The class's providerSpec (what is wanted).
    pub provider_spec: serde_json::Value,
}

/// `POST /v1/instances/{id}/update`: change a running instance's tags and
/// instance type to the spec's (a hot update), idempotently.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateInstanceRequest {
    /// The class's providerSpec (what is wanted): its tags are set and its
    /// instance type applied.
    pub provider_spec: serde_json::Value,
    /// Tag keys to remove (those the last-applied spec had and this one has
    /// not); tags set out of band and the Machine's identity stay.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_tags: Vec<String>,
}

/// `POST /v1/instances/find`: the instances backing one machine (like a filtered
/// DescribeInstances). An instance matches when any given selector matches.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FindInstancesRequest {
    /// The instance ID (from the Machine's providerID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// The idempotency token (the Machine's UID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
    /// The machine name; with `clusterTag`, only instances carrying that tag key match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_name: Option<String>,
    /// The cluster tag key that name matches are restricted to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_tag: Option<String>,
}

/// A list of instances (answer of find, list and the admin listing).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceList {
    /// The instances.
    pub instances: Vec<Instance>,
}

/// `DELETE /v1/instances/{id}` answer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteInstanceResponse {
    /// Whether an instance was deleted (false when it was already gone).
    pub deleted: bool,
}

/// The body of every error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// The machine code name, e.g. `ResourceExhausted`.
    pub code: String,
    /// What went wrong.
    pub message: String,
}

impl ErrorBody {
    /// The machine code of this error.
    pub fn code(&self) -> Code {
        Code::from_name(&self.code)
    }
}

/// Per-operation counters (`GET /admin/stats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpStats {
    /// Requests received.
    pub calls: u64,
    /// Requests answered successfully.
    pub ok: u64,
    /// Requests answered `ResourceExhausted` by the rate limit.
    pub throttled: u64,
    /// Requests failed by fault injection (error rate, failed initializations).
    pub injected_faults: u64,
    /// All error answers by code name (throttles and injected faults included).
    pub errors_by_code: BTreeMap<String, u64>,
}

/// `GET /admin/stats`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Counters per operation (`create`, `initialize`, `update`, `delete`, `status`, `list`).
    pub operations: BTreeMap<String, OpStats>,
    /// Instances by state.
    pub instances_by_state: BTreeMap<String, u64>,
    /// When the counters were last reset (or the server started).
    pub since: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip() {
        let p = provider_id("local-1a", "i-0123456789abcdef0");
        assert_eq!(p, "local:///local-1a/i-0123456789abcdef0");
        assert_eq!(instance_id_of(&p), Some("i-0123456789abcdef0"));
        assert_eq!(instance_id_of("aws:///eu-west-1/i-1"), None);
        assert_eq!(instance_id_of("local:///zone/"), None);
        assert_eq!(instance_id_of("local:///"), None);
        assert_eq!(instance_id_of(""), None);
    }
}
