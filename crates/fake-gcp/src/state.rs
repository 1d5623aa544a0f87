//! The fake's in-memory state: instances, operations, injected faults, counters.

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// The Compute methods the fake serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    /// `instances.insert`
    InstancesInsert,
    /// `instances.get`
    InstancesGet,
    /// `instances.list`
    InstancesList,
    /// `instances.delete`
    InstancesDelete,
    /// `zoneOperations.get`
    ZoneOperationsGet,
    /// `instances.setLabels`
    InstancesSetLabels,
    /// `instances.setTags`
    InstancesSetTags,
    /// `instances.setMetadata`
    InstancesSetMetadata,
    /// `disks.resize`
    DisksResize,
}

impl Method {
    /// The discovery name, e.g. `instances.insert`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::InstancesInsert => "instances.insert",
            Method::InstancesGet => "instances.get",
            Method::InstancesList => "instances.list",
            Method::InstancesDelete => "instances.delete",
            Method::ZoneOperationsGet => "zoneOperations.get",
            Method::InstancesSetLabels => "instances.setLabels",
            Method::InstancesSetTags => "instances.setTags",
            Method::InstancesSetMetadata => "instances.setMetadata",
            Method::DisksResize => "disks.resize",
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An injected fault.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// The call fails at once with this HTTP status and error reason.
    Http {
        /// HTTP status, e.g. 409.
        status: u16,
        /// The `errors[].reason`, e.g. `alreadyExists`.
        reason: String,
        /// The message.
        message: String,
    },
    /// The call is carried out, but its answer is lost: 503 `backendError`
    /// (e.g. an insert that created the instance, as seen by a client whose
    /// connection broke).
    LostResponse,
    /// Insert, delete or a hot-update call: the operation starts, and ends
    /// `DONE` with this error (an insert's instance is then removed, a
    /// delete's kept, an update's change not made).
    OperationError {
        /// The operation error code, e.g. `ZONE_RESOURCE_POOL_EXHAUSTED`.
        code: String,
        /// The message.
        message: String,
    },
}

impl Fault {
    /// 409 `alreadyExists`.
    pub fn already_exists() -> Fault {
        Fault::Http {
            status: 409,
            reason: "alreadyExists".into(),
            message: "The resource already exists".into(),
        }
    }

    /// 404 `notFound`.
    pub fn not_found() -> Fault {
        Fault::Http {
            status: 404,
            reason: "notFound".into(),
            message: "The resource was not found".into(),
        }
    }

    /// 403 `QUOTA_EXCEEDED` on the call itself (a regional CPU quota).
    pub fn quota_exceeded() -> Fault {
        Fault::Http {
            status: 403,
            reason: "QUOTA_EXCEEDED".into(),
            message: "Quota 'CPUS' exceeded.  Limit: 24.0 in region europe-west1.".into(),
        }
    }

    /// 403 `rateLimitExceeded` (an API rate quota).
    pub fn rate_limit_exceeded() -> Fault {
        Fault::Http {
            status: 403,
            reason: "rateLimitExceeded".into(),
            message: "Rate Limit Exceeded".into(),
        }
    }

    /// An operation ending with `ZONE_RESOURCE_POOL_EXHAUSTED` (no capacity in the zone).
    pub fn zone_resource_pool_exhausted() -> Fault {
        Fault::OperationError {
            code: "ZONE_RESOURCE_POOL_EXHAUSTED".into(),
            message: "The zone does not have enough resources available to fulfill the request.  Try a different zone, or try again later.".into(),
        }
    }

    /// An operation ending with `QUOTA_EXCEEDED`.
    pub fn operation_quota_exceeded() -> Fault {
        Fault::OperationError {
            code: "QUOTA_EXCEEDED".into(),
            message: "Quota 'CPUS' exceeded.  Limit: 24.0 in region europe-west1.".into(),
        }
    }
}

/// What a DONE operation does.
#[derive(Clone, Debug)]
pub(crate) enum Effect {
    /// The inserted instance becomes RUNNING (or is removed on error).
    Insert,
    /// The instance is removed (kept on error).
    Delete,
    /// A change made when the call was accepted (`setLabels`, `resize`, ...):
    /// the operation's type and the kind of its target (`instances`, `disks`).
    Update {
        /// `operationType`, e.g. `setLabels`.
        op_type: &'static str,
        /// The target's collection, e.g. `disks`.
        kind: &'static str,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct Operation {
    pub project: String,
    pub zone: String,
    pub target: String,
    pub effect: Effect,
    pub polls_left: u32,
    pub error: Option<(String, String)>,
    pub json: Value,
}

pub(crate) type Key = (String, String, String);

pub(crate) struct State {
    pub instances: BTreeMap<Key, Value>,
    pub operations: HashMap<String, Operation>,
    pub faults: HashMap<Method, VecDeque<Fault>>,
    pub polls_until_done: u32,
    pub next_id: u64,
    pub requests: BTreeMap<Method, u64>,
    pub unauthenticated: u64,
    pub inserted: Vec<Value>,
    pub insert_log: Vec<(String, std::time::Instant, bool)>,
    pub list_filters: Vec<Option<String>>,
    pub max_page_size: usize,
    /// Images that do not exist (`FakeGce::delete_image`), by reference.
    pub deleted_images: std::collections::BTreeSet<String>,
}

impl Default for State {
    fn default() -> Self {
        State {
            instances: BTreeMap::new(),
            operations: HashMap::new(),
            faults: HashMap::new(),
            polls_until_done: 1,
            // Compute IDs are large decimal uint64 values.
            next_id: 7_000_000_000_000_000_000,
            requests: BTreeMap::new(),
            unauthenticated: 0,
            inserted: Vec::new(),
            insert_log: Vec::new(),
            list_filters: Vec::new(),
            max_page_size: 500,
            deleted_images: Default::default(),
        }
    }
}

/// A fingerprint of some content (labels, tags, metadata items), as Compute
/// makes one for optimistic locking: a hash, sent as a base64 byte string
/// (16 hex digits are valid base64 of 12 bytes and survive the client's
/// decode and encode unchanged). Objects are hashed with sorted keys.
pub(crate) fn fingerprint(v: &Value) -> String {
    use std::hash::{Hash, Hasher};
    fn canonical(v: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let sorted: BTreeMap<&String, Value> =
                    o.iter().map(|(k, v)| (k, canonical(v))).collect();
                json!(sorted)
            }
            Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    canonical(v).to_string().hash(&mut h);
    format!("{:016x}", h.finish())
}

/// The size a persistent disk gets without `diskSizeGb` (an image's 10 GB).
pub(crate) const DEFAULT_DISK_GB: i64 = 10;
/// The size of a local SSD.
pub(crate) const LOCAL_SSD_GB: i64 = 375;

/// A JSON int64 (a string on the wire, a number accepted).
pub(crate) fn int64(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// A fixed timestamp in the API's RFC 3339 form (the fake has no clock needs).
const TIMESTAMP: &str = "2026-12-02T10:00:00.000-08:00";

pub(crate) fn zone_url(project: &str, zone: &str) -> String {
    format!("https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}")
}

impl State {
    pub fn next_id(&mut self) -> String {
        self.next_id += 1;
        self.next_id.to_string()
    }

    pub fn take_fault(&mut self, m: Method) -> Option<Fault> {
        *self.requests.entry(m).or_default() += 1;
        self.faults.get_mut(&m).and_then(VecDeque::pop_front)
    }

    /// Stores an instance, filling in the output-only fields.
    pub fn put_instance(
        &mut self,
        project: &str,
        zone: &str,
        mut v: Value,
        running: bool,
    ) -> String {
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let id = self.next_id();
        let zurl = zone_url(project, zone);
        if let Some(o) = v.as_object_mut() {
            o.insert("kind".into(), json!("compute#instance"));
            o.entry("id").or_insert(json!(id));
            o.entry("creationTimestamp").or_insert(json!(TIMESTAMP));
            o.insert(
                "status".into(),
                json!(if running { "RUNNING" } else { "PROVISIONING" }),
            );
            o.insert("zone".into(), json!(zurl));
            o.insert("selfLink".into(), json!(format!("{zurl}/instances/{name}")));
            o.insert("fingerprint".into(), json!("ZmluZ2VycHJpbnQ="));
            let labels = o.get("labels").cloned().unwrap_or(json!({}));
            o.insert("labelFingerprint".into(), json!(fingerprint(&labels)));
            o.entry("metadata").or_insert(json!({}));
            o.entry("tags").or_insert(json!({}));
            if let Some(mt) = o.get("machineType").and_then(Value::as_str) {
                if !mt.starts_with("https://") {
                    let full =
                        format!("https://www.googleapis.com/compute/v1/projects/{project}/{mt}");
                    o.insert("machineType".into(), json!(full));
                }
            }
            if let Some(Value::Object(md)) = o.get_mut("metadata") {
                md.insert("kind".into(), json!("compute#metadata"));
                let items = md.get("items").cloned().unwrap_or(json!([]));
                md.insert("fingerprint".into(), json!(fingerprint(&items)));
            }
            if let Some(Value::Object(tags)) = o.get_mut("tags") {
                let items = tags.get("items").cloned().unwrap_or(json!([]));
                tags.insert("fingerprint".into(), json!(fingerprint(&items)));
            }
            let ordinal = self.instances.len() % 250 + 2;
            if let Some(Value::Array(nics)) = o.get_mut("networkInterfaces") {
                for (i, nic) in nics.iter_mut().enumerate() {
                    if let Some(n) = nic.as_object_mut() {
                        n.insert("kind".into(), json!("compute#networkInterface"));
                        n.insert("name".into(), json!(format!("nic{i}")));
                        n.entry("networkIP")
                            .or_insert(json!(format!("10.250.{i}.{ordinal}")));
                        n.insert("fingerprint".into(), json!("bmljZnA="));
                        // An external IP (an access config) gets its ephemeral address.
                        if let Some(Value::Array(acs)) = n.get_mut("accessConfigs") {
                            for ac in acs.iter_mut().filter_map(Value::as_object_mut) {
                                ac.insert("kind".into(), json!("compute#accessConfig"));
                                ac.entry("natIP")
                                    .or_insert(json!(format!("34.90.{i}.{ordinal}")));
                            }
                        }
                    }
                }
            }
            if let Some(Value::Array(disks)) = o.get_mut("disks") {
                for (i, d) in disks.iter_mut().enumerate() {
                    if let Some(d) = d.as_object_mut() {
                        d.insert("kind".into(), json!("compute#attachedDisk"));
                        d.insert("index".into(), json!(i));
                        d.insert("mode".into(), json!("READ_WRITE"));
                        let device = if i == 0 {
                            name.clone()
                        } else {
                            format!("{name}-{i}")
                        };
                        let scratch = d.get("type") == Some(&json!("SCRATCH"));
                        let size = if scratch {
                            LOCAL_SSD_GB
                        } else {
                            d.get("initializeParams")
                                .and_then(|p| p.get("diskSizeGb"))
                                .and_then(int64)
                                .unwrap_or(DEFAULT_DISK_GB)
                        };
                        d.entry("diskSizeGb").or_insert(json!(size.to_string()));
                        // Input only: Compute Engine never answers with it.
                        d.remove("initializeParams");
                        if !scratch {
                            // The disk made with the instance is named after its device.
                            d.entry("source")
                                .or_insert(json!(format!("{zurl}/disks/{device}")));
                        }
                        d.insert("deviceName".into(), json!(device));
                    }
                }
            }
        }
        self.instances
            .insert((project.into(), zone.into(), name.clone()), v);
        id
    }

    /// A new operation on `target`.
    pub fn start_operation(
        &mut self,
        project: &str,
        zone: &str,
        target: &str,
        target_id: &str,
        effect: Effect,
        error: Option<(String, String)>,
    ) -> Value {
        let id = self.next_id();
        let name = format!("operation-{id}-mcmfake");
        let zurl = zone_url(project, zone);
        let (op_type, kind) = match &effect {
            Effect::Insert => ("insert", "instances"),
            Effect::Delete => ("delete", "instances"),
            Effect::Update { op_type, kind } => (*op_type, *kind),
        };
        let json = json!({
            "kind": "compute#operation",
            "id": id,
            "name": name,
            "zone": zurl,
            "operationType": op_type,
            "targetLink": format!("{zurl}/{kind}/{target}"),
            "targetId": target_id,
            "status": "PENDING",
            "user": "mcm@example.iam.gserviceaccount.com",
            "progress": 0,
            "insertTime": TIMESTAMP,
            "selfLink": format!("{zurl}/operations/{name}"),
        });
        let op = Operation {
            project: project.into(),
            zone: zone.into(),
            target: target.into(),
            effect,
            polls_left: self.polls_until_done,
            error,
            json,
        };
        self.operations.insert(name.clone(), op);
        if self.polls_until_done == 0 {
            self.finish(&name);
        }
        self.operation_json(&name).unwrap_or(Value::Null)
    }

    /// One poll of an operation: counts down, finishes at 0.
    pub fn poll(&mut self, name: &str) -> Option<Value> {
        let op = self.operations.get_mut(name)?;
        if op.polls_left > 0 {
            op.polls_left -= 1;
            if op.polls_left == 0 {
                self.finish(name);
            } else if let Some(o) = op.json.as_object_mut() {
                o.insert("status".into(), json!("RUNNING"));
                o.insert("progress".into(), json!(50));
                o.insert("startTime".into(), json!(TIMESTAMP));
            }
        }
        self.operation_json(name)
    }

    fn operation_json(&self, name: &str) -> Option<Value> {
        self.operations.get(name).map(|o| o.json.clone())
    }

    fn finish(&mut self, name: &str) {
        let Some(op) = self.operations.get_mut(name) else {
            return;
        };
        op.polls_left = 0;
        if let Some(o) = op.json.as_object_mut() {
            o.insert("status".into(), json!("DONE"));
            o.insert("progress".into(), json!(100));
            o.insert("startTime".into(), json!(TIMESTAMP));
            o.insert("endTime".into(), json!(TIMESTAMP));
            if let Some((code, message)) = &op.error {
                let mut e = Map::new();
                e.insert("errors".into(), json!([{"code": code, "message": message}]));
                o.insert("error".into(), Value::Object(e));
                // As Compute Engine answers a failed operation: a stock-out
                // is 503, a quota 403, anything else 400.
                let (status, text) = if code.contains("RESOURCE_POOL_EXHAUSTED")
                    || code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
                {
                    (503, "SERVICE UNAVAILABLE")
                } else if code.contains("QUOTA") {
                    (403, "FORBIDDEN")
                } else {
                    (400, "BAD REQUEST")
                };
                o.insert("httpErrorStatusCode".into(), json!(status));
                o.insert("httpErrorMessage".into(), json!(text));
            }
        }
        let key = (op.project.clone(), op.zone.clone(), op.target.clone());
        let failed = op.error.is_some();
        match (&op.effect, failed) {
            (Effect::Insert, false) => {
                if let Some(Value::Object(i)) = self.instances.get_mut(&key) {
                    i.insert("status".into(), json!("RUNNING"));
                }
            }
            (Effect::Insert, true) | (Effect::Delete, false) => {
                self.instances.remove(&key);
            }
            (Effect::Delete, true) | (Effect::Update { .. }, _) => {}
        }
    }
}
