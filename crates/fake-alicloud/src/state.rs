//! The fake's ECS state and its actions (the three the driver's lifecycle
//! needs, and TagResources/UntagResources of UpdateMachine).

use crate::metadata::metadata;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// An instance of the fake.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeInstance {
    /// `i-...`.
    pub id: String,
    /// `InstanceName`.
    pub name: String,
    /// Region.
    pub region: String,
    /// Tags in order.
    pub tags: Vec<(String, String)>,
    /// The RunInstances parameters that created it.
    pub params: BTreeMap<String, String>,
    /// Private address.
    pub private_ip: String,
    /// `Stopped` once stopped by a test; else Pending, then Running.
    pub stopped: bool,
    created: Instant,
    seq: u64,
}

impl FakeInstance {
    /// `Pending` until `pending_for` has passed since creation, then `Running`
    /// (or `Stopped`).
    pub fn status(&self, pending_for: Duration) -> &'static str {
        if self.created.elapsed() < pending_for {
            "Pending"
        } else if self.stopped {
            "Stopped"
        } else {
            "Running"
        }
    }
}

/// An error answer.
#[derive(Clone, Debug, PartialEq)]
pub struct EcsFault {
    /// HTTP status.
    pub status: u16,
    /// Error code.
    pub code: String,
    /// Message.
    pub message: String,
}

fn fault(status: u16, code: &str, message: impl Into<String>) -> EcsFault {
    EcsFault {
        status,
        code: code.to_string(),
        message: message.into(),
    }
}

/// The whole state.
#[derive(Debug)]
pub struct State {
    /// Instances by ID.
    pub instances: BTreeMap<String, FakeInstance>,
    /// ClientToken → the instance IDs its first call created.
    pub tokens: BTreeMap<String, Vec<String>>,
    /// Pending faults per action: (code, HTTP status), served in order.
    pub faults: BTreeMap<String, VecDeque<(String, u16)>>,
    /// How long a new instance stays Pending.
    pub pending_for: Duration,
    /// Largest page DescribeInstances serves (the API's limit is 100).
    pub max_page: usize,
    /// Every request the fake accepted: (action, parameters).
    pub requests: Vec<(String, BTreeMap<String, String>)>,
    /// Signature nonces already used.
    pub nonces: std::collections::HashSet<String>,
    seq: u64,
}

impl Default for State {
    fn default() -> Self {
        State {
            instances: BTreeMap::new(),
            tokens: BTreeMap::new(),
            faults: BTreeMap::new(),
            pending_for: Duration::from_millis(300),
            max_page: 100,
            requests: Vec::new(),
            nonces: Default::default(),
            seq: 0,
        }
    }
}

fn random_id(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let tail: String = (0..20)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{tail}")
}

fn request_id() -> String {
    let h = hex::encode(rand::random::<[u8; 16]>()).to_uppercase();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

impl State {
    /// Serves one request: unknown parameters are refused, an injected fault
    /// is answered, else the action runs.
    pub fn handle(
        &mut self,
        action: &str,
        params: BTreeMap<String, String>,
    ) -> Result<Value, EcsFault> {
        let Some(meta) = metadata() else {
            return Err(fault(500, "InternalError", "the fake's metadata is broken"));
        };
        if !meta.apis.contains_key(action) {
            return Err(fault(
                400,
                "InvalidAction.NotFound",
                format!("{action} is not served by the fake"),
            ));
        }
        if let Some(bad) = params.keys().find(|k| !meta.param_known(action, k)) {
            return Err(fault(
                400,
                "InvalidParameter",
                format!("{bad} is not a parameter of {action} in the ECS metadata"),
            ));
        }
        if let Err((code, message)) = crate::checks::values(meta, action, &params) {
            return Err(fault(400, code, message));
        }
        self.requests.push((action.to_string(), params.clone()));
        if let Some((code, status)) = self.faults.get_mut(action).and_then(VecDeque::pop_front) {
            return Err(fault(status, &code, "injected by the fake"));
        }
        let mut answer = match action {
            "RunInstances" => self.run_instances(&params)?,
            "DescribeInstances" => self.describe_instances(&params)?,
            "DeleteInstance" => self.delete_instance(&params)?,
            "TagResources" => self.tag_resources(&params)?,
            "UntagResources" => self.untag_resources(&params)?,
            other => {
                return Err(fault(
                    400,
                    "InvalidAction.NotFound",
                    format!("{other} is not served"),
                ))
            }
        };
        answer["RequestId"] = json!(request_id());
        Ok(answer)
    }

    fn run_instances(&mut self, p: &BTreeMap<String, String>) -> Result<Value, EcsFault> {
        for required in ["RegionId", "ImageId", "InstanceType"] {
            if p.get(required).is_none_or(|v| v.is_empty()) {
                return Err(fault(
                    400,
                    "MissingParameter",
                    format!("{required} is mandatory for this action."),
                ));
            }
        }
        let token = p.get("ClientToken").filter(|t| !t.is_empty()).cloned();
        if let Some(ids) = token.as_ref().and_then(|t| self.tokens.get(t)) {
            return Ok(json!({"InstanceIdSets": {"InstanceIdSet": ids}}));
        }
        let amount: usize = match p.get("Amount") {
            None => 1,
            Some(a) => a
                .parse()
                .ok()
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| fault(400, "InvalidParameter", "Amount must be 1 to 100"))?,
        };
        let mut tags = Vec::new();
        for n in 1..=20 {
            match (
                p.get(&format!("Tag.{n}.Key")),
                p.get(&format!("Tag.{n}.Value")),
            ) {
                (Some(k), v) => tags.push((k.clone(), v.cloned().unwrap_or_default())),
                (None, _) => break,
            }
        }
        let mut ids = Vec::new();
        for _ in 0..amount {
            self.seq += 1;
            let id = random_id("i-");
            let instance = FakeInstance {
                id: id.clone(),
                name: p.get("InstanceName").cloned().unwrap_or_else(|| id.clone()),
                region: p.get("RegionId").cloned().unwrap_or_default(),
                tags: tags.clone(),
                params: p.clone(),
                private_ip: format!("10.0.{}.{}", (self.seq / 250) % 250, self.seq % 250 + 2),
                stopped: false,
                created: Instant::now(),
                seq: self.seq,
            };
            self.instances.insert(id.clone(), instance);
            ids.push(id);
        }
        if let Some(t) = token {
            self.tokens.insert(t, ids.clone());
        }
        Ok(json!({"InstanceIdSets": {"InstanceIdSet": ids}}))
    }

    fn describe_instances(&mut self, p: &BTreeMap<String, String>) -> Result<Value, EcsFault> {
        let ids: Option<Vec<String>> =
            match p.get("InstanceIds") {
                None => None,
                Some(raw) => Some(serde_json::from_str(raw).map_err(|_| {
                    fault(400, "InvalidParameter", "InstanceIds is not a JSON array")
                })?),
            };
        let mut tag_filters = Vec::new();
        for n in 1..=20 {
            let key = p.get(&format!("Tag.{n}.Key"));
            let value = p.get(&format!("Tag.{n}.Value"));
            match (key, value) {
                (Some(k), v) => tag_filters.push((k.clone(), v.cloned())),
                (None, Some(_)) => {
                    return Err(fault(
                        400,
                        "InvalidTag.Mismatch",
                        "The specified Tag.n.Key and Tag.n.Value are not match.",
                    ))
                }
                (None, None) => break,
            }
        }
        let limit = match p.get("MaxResults") {
            None => 10,
            Some(m) => m
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| fault(400, "InvalidParameter", "MaxResults must be 1 to 100"))?,
        }
        .min(self.max_page.max(1));
        let offset = match p.get("NextToken").filter(|t| !t.is_empty()) {
            None => 0,
            Some(t) => t
                .strip_prefix("page-")
                .and_then(|n| usize::from_str_radix(n, 16).ok())
                .ok_or_else(|| {
                    fault(
                        400,
                        "InvalidParameter",
                        "The specified NextToken is not valid.",
                    )
                })?,
        };
        let pending_for = self.pending_for;
        let mut matching: Vec<&FakeInstance> = self
            .instances
            .values()
            .filter(|i| ids.as_ref().is_none_or(|ids| ids.contains(&i.id)))
            .filter(|i| p.get("InstanceName").is_none_or(|n| *n == i.name))
            .filter(|i| p.get("RegionId").is_none_or(|r| *r == i.region))
            .filter(|i| p.get("Status").is_none_or(|s| s == i.status(pending_for)))
            .filter(|i| {
                tag_filters.iter().all(|(k, v)| {
                    i.tags
                        .iter()
                        .any(|(tk, tv)| tk == k && v.as_ref().is_none_or(|v| v == tv))
                })
            })
            .collect();
        matching.sort_by_key(|i| i.seq);
        let total = matching.len();
        let page: Vec<Value> = matching
            .iter()
            .skip(offset)
            .take(limit)
            .map(|i| instance_json(i, pending_for))
            .collect();
        let next = if offset + limit < total {
            format!("page-{:x}", offset + limit)
        } else {
            String::new()
        };
        Ok(json!({
            "TotalCount": total,
            "NextToken": next,
            "Instances": {"Instance": page}
        }))
    }

    fn delete_instance(&mut self, p: &BTreeMap<String, String>) -> Result<Value, EcsFault> {
        let id = p
            .get("InstanceId")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                fault(
                    400,
                    "MissingParameter",
                    "InstanceId is mandatory for this action.",
                )
            })?;
        let force = p.get("Force").is_some_and(|f| f == "true");
        let Some(instance) = self.instances.get(id) else {
            return Err(fault(
                404,
                "InvalidInstanceId.NotFound",
                "The specified InstanceId does not exist.",
            ));
        };
        match instance.status(self.pending_for) {
            "Stopped" => {}
            "Running" if force => {}
            _ => {
                return Err(fault(
                    403,
                    "IncorrectInstanceStatus",
                    "The current status of the resource does not support this operation.",
                ))
            }
        }
        self.instances.remove(id);
        Ok(json!({}))
    }
}

/// The instances a TagResources/UntagResources call names (`ResourceType`
/// `instance` only; an unknown ID is `InvalidResourceId.NotFound`, as ECS answers).
fn tagged_ids(p: &BTreeMap<String, String>) -> Result<Vec<String>, EcsFault> {
    for required in ["RegionId", "ResourceType", "ResourceId.1"] {
        if p.get(required).is_none_or(|v| v.is_empty()) {
            return Err(fault(
                400,
                "MissingParameter",
                format!("{required} is mandatory for this action."),
            ));
        }
    }
    if p.get("ResourceType").map(String::as_str) != Some("instance") {
        return Err(fault(
            400,
            "InvalidResourceType.NotSupported",
            "the fake tags instances only",
        ));
    }
    Ok((1..=50)
        .map_while(|n| p.get(&format!("ResourceId.{n}")).cloned())
        .collect())
}

impl State {
    fn tag_resources(&mut self, p: &BTreeMap<String, String>) -> Result<Value, EcsFault> {
        let ids = tagged_ids(p)?;
        let mut tags = Vec::new();
        for n in 1..=20 {
            match p.get(&format!("Tag.{n}.Key")) {
                Some(k) if k.is_empty() => {
                    return Err(fault(400, "InvalidTagKey.Malformed", "empty tag key"))
                }
                Some(k) => tags.push((
                    k.clone(),
                    p.get(&format!("Tag.{n}.Value"))
                        .cloned()
                        .unwrap_or_default(),
                )),
                None => break,
            }
        }
        if tags.is_empty() {
            return Err(fault(
                400,
                "MissingParameter",
                "Tag.1.Key is mandatory for this action.",
            ));
        }
        if let Some(bad) = ids.iter().find(|id| !self.instances.contains_key(*id)) {
            return Err(fault(
                404,
                "InvalidResourceId.NotFound",
                format!("The specified ResourceId {bad} is not found."),
            ));
        }
        for id in &ids {
            if let Some(i) = self.instances.get_mut(id) {
                for (k, v) in &tags {
                    match i.tags.iter_mut().find(|(have, _)| have == k) {
                        Some(t) => t.1 = v.clone(),
                        None => i.tags.push((k.clone(), v.clone())),
                    }
                }
            }
        }
        Ok(json!({}))
    }

    fn untag_resources(&mut self, p: &BTreeMap<String, String>) -> Result<Value, EcsFault> {
        let ids = tagged_ids(p)?;
        let keys: Vec<String> = (1..=20)
            .map_while(|n| p.get(&format!("TagKey.{n}")).cloned())
            .collect();
        let all = p.get("All").is_some_and(|a| a == "true");
        if let Some(bad) = ids.iter().find(|id| !self.instances.contains_key(*id)) {
            return Err(fault(
                404,
                "InvalidResourceId.NotFound",
                format!("The specified ResourceId {bad} is not found."),
            ));
        }
        for id in &ids {
            if let Some(i) = self.instances.get_mut(id) {
                i.tags.retain(|(k, _)| !all && !keys.contains(k));
            }
        }
        Ok(json!({}))
    }
}

fn instance_json(i: &FakeInstance, pending_for: Duration) -> Value {
    let param = |k: &str| i.params.get(k).cloned().unwrap_or_default();
    let bandwidth_out: i64 = param("InternetMaxBandwidthOut").parse().unwrap_or(0);
    let public: Vec<String> = if bandwidth_out > 0 {
        vec![format!("47.0.{}.{}", (i.seq / 250) % 250, i.seq % 250 + 2)]
    } else {
        Vec::new()
    };
    json!({
        "InstanceId": i.id,
        "InstanceName": i.name,
        "Status": i.status(pending_for),
        "RegionId": i.region,
        "ZoneId": param("ZoneId"),
        "InstanceType": param("InstanceType"),
        "ImageId": param("ImageId"),
        "HostName": format!("{}z", i.id.replacen('-', "z", 1)),
        "InstanceNetworkType": "vpc",
        "SpotStrategy": i.params.get("SpotStrategy").cloned().unwrap_or_else(|| "NoSpot".into()),
        "Tags": {"Tag": i.tags.iter().map(|(k, v)| json!({"TagKey": k, "TagValue": v})).collect::<Vec<_>>()},
        "VpcAttributes": {
            "VSwitchId": param("VSwitchId"),
            "PrivateIpAddress": {"IpAddress": [i.private_ip]}
        },
        "PublicIpAddress": {"IpAddress": public},
        "EipAddress": {"IpAddress": "", "AllocationId": ""},
        "SecurityGroupIds": {"SecurityGroupId": [param("SecurityGroupId")]}
    })
}
