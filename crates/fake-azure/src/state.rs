//! The fake's state: resources, long-running operations, faults, the log.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What an injected fault answers.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultResponse {
    /// An HTTP error with ARM's envelope instead of the answer.
    Http {
        /// Status, e.g. 409 or 429.
        status: u16,
        /// ARM code, e.g. `OperationNotAllowed`.
        code: String,
        /// Message.
        message: String,
        /// `Retry-After` seconds.
        retry_after: Option<u64>,
    },
    /// The request is accepted, and its long-running operation ends `Failed`.
    LroFailed {
        /// ARM code, e.g. `AllocationFailed`.
        code: String,
        /// Message.
        message: String,
    },
}

/// A fault for requests of `method` on resources of `kind`
/// (`virtualMachines`, `networkInterfaces`, `disks`, `subnets`,
/// `resourcegroups`, `resources` for Resource Graph), optionally only for one
/// name, for the next `times` matching requests.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// HTTP method, e.g. `PUT`.
    pub method: String,
    /// Resource kind (case-insensitive).
    pub kind: String,
    /// Only this resource name, when set.
    pub name: Option<String>,
    /// How many requests it hits.
    pub times: u32,
    /// What they get.
    pub response: FaultResponse,
}

impl Fault {
    /// An HTTP error for the next `times` `method` requests on `kind`.
    pub fn http(
        method: &str,
        kind: &str,
        times: u32,
        status: u16,
        code: &str,
        message: &str,
    ) -> Self {
        Fault {
            method: method.into(),
            kind: kind.into(),
            name: None,
            times,
            response: FaultResponse::Http {
                status,
                code: code.into(),
                message: message.into(),
                retry_after: None,
            },
        }
    }

    /// 429 with `Retry-After: seconds` for the next `times` requests.
    pub fn throttle(method: &str, kind: &str, times: u32, seconds: u64) -> Self {
        Fault {
            method: method.into(),
            kind: kind.into(),
            name: None,
            times,
            response: FaultResponse::Http {
                status: 429,
                code: "TooManyRequests".into(),
                message: "The request is being throttled.".into(),
                retry_after: Some(seconds),
            },
        }
    }

    /// The next `method` on `kind` is accepted and its operation fails with `code`.
    pub fn lro_failed(method: &str, kind: &str, code: &str, message: &str) -> Self {
        Fault {
            method: method.into(),
            kind: kind.into(),
            name: None,
            times: 1,
            response: FaultResponse::LroFailed {
                code: code.into(),
                message: message.into(),
            },
        }
    }
}

/// What finishes when an operation succeeds.
#[derive(Clone, Debug)]
pub(crate) enum Finish {
    /// Set `provisioningState: Succeeded` on a resource.
    Provisioned(String, String, String),
    /// Remove a resource (and cascade, for VMs).
    Removed(String, String, String),
    /// Nothing (a PATCH).
    Nothing,
}

#[derive(Clone, Debug)]
pub(crate) struct Operation {
    pub polls_left: u32,
    pub failure: Option<(String, String)>,
    pub finish: Finish,
    pub done: bool,
}

/// A lower-cased `<rg>/<name>` key.
pub fn key(rg: &str, name: &str) -> String {
    format!("{}/{}", rg.to_ascii_lowercase(), name.to_ascii_lowercase())
}

pub(crate) struct State {
    pub base: String,
    pub rgs: BTreeSet<String>,
    pub subnets: BTreeSet<String>,
    /// kind (lower case) → `<rg>/<name>` → JSON.
    pub resources: BTreeMap<String, BTreeMap<String, Value>>,
    pub custom_data: HashMap<String, String>,
    pub ops: HashMap<String, Operation>,
    pub next_id: u64,
    pub lro_polls: u32,
    pub faults: Vec<Fault>,
    pub log: Vec<String>,
    pub tokens_issued: usize,
    pub graph_page_size: usize,
    pub graph_enabled: bool,
    pub plan_publishers: BTreeSet<String>,
    pub agreements: BTreeMap<String, bool>,
}

impl State {
    pub fn new(base: &str) -> Self {
        State {
            base: base.to_string(),
            rgs: BTreeSet::new(),
            subnets: BTreeSet::new(),
            resources: BTreeMap::new(),
            custom_data: HashMap::new(),
            ops: HashMap::new(),
            next_id: 1,
            lro_polls: 1,
            faults: Vec::new(),
            log: Vec::new(),
            tokens_issued: 0,
            graph_page_size: 1000,
            graph_enabled: true,
            plan_publishers: BTreeSet::new(),
            agreements: BTreeMap::new(),
        }
    }

    pub fn add_resource_group(&mut self, rg: &str) {
        self.rgs.insert(rg.to_ascii_lowercase());
    }

    pub fn add_subnet(&mut self, rg: &str, vnet: &str, subnet: &str) {
        self.add_resource_group(rg);
        self.subnets
            .insert(format!("{}/{}", key(rg, vnet), subnet.to_ascii_lowercase()));
    }

    pub fn agreement_accepted(&self, publisher: &str, offer: &str, plan: &str) -> bool {
        self.agreements
            .get(&format!("{publisher}/{offer}/{plan}").to_ascii_lowercase())
            .copied()
            .unwrap_or(false)
    }

    pub fn resources_of(&self, kind: &str, rg: &str) -> BTreeMap<String, Value> {
        let prefix = format!("{}/", rg.to_ascii_lowercase());
        self.resources
            .get(kind)
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(_, v)| {
                        (
                            v["name"].as_str().unwrap_or_default().to_string(),
                            v.clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn get(&self, kind: &str, rg: &str, name: &str) -> Option<&Value> {
        self.resources.get(kind).and_then(|m| m.get(&key(rg, name)))
    }

    pub fn get_mut(&mut self, kind: &str, rg: &str, name: &str) -> Option<&mut Value> {
        self.resources
            .get_mut(kind)
            .and_then(|m| m.get_mut(&key(rg, name)))
    }

    pub fn insert(&mut self, kind: &str, rg: &str, name: &str, v: Value) {
        self.resources
            .entry(kind.to_string())
            .or_default()
            .insert(key(rg, name), v);
    }

    pub fn remove(&mut self, kind: &str, rg: &str, name: &str) -> Option<Value> {
        self.resources
            .get_mut(kind)
            .and_then(|m| m.remove(&key(rg, name)))
    }

    pub fn put_raw(&mut self, kind: &str, rg: &str, name: &str, mut body: Value) {
        let kind_l = kind.to_ascii_lowercase();
        let provider = if kind_l == "networkinterfaces" {
            "Microsoft.Network"
        } else {
            "Microsoft.Compute"
        };
        body["name"] = json!(name);
        body["id"] = json!(self.id(rg, provider, kind, name));
        body["type"] = json!(format!("{provider}/{kind}"));
        self.insert(&kind_l, rg, name, body);
    }

    pub fn id(&self, rg: &str, provider: &str, kind: &str, name: &str) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{rg}/providers/{provider}/{kind}/{name}",
            crate::SUBSCRIPTION
        )
    }

    /// The fault for this request, if one is armed.
    pub fn take_fault(
        &mut self,
        method: &str,
        kind: &str,
        name: Option<&str>,
    ) -> Option<FaultResponse> {
        let i = self.faults.iter().position(|f| {
            f.method.eq_ignore_ascii_case(method)
                && f.kind.eq_ignore_ascii_case(kind)
                && f.times > 0
                && match (&f.name, name) {
                    (Some(want), Some(got)) => want.eq_ignore_ascii_case(got),
                    (Some(_), None) => false,
                    (None, _) => true,
                }
        })?;
        let f = &mut self.faults[i];
        f.times -= 1;
        let r = f.response.clone();
        if f.times == 0 {
            self.faults.remove(i);
        }
        Some(r)
    }

    /// Starts an operation; returns its ID.
    pub fn start_op(&mut self, failure: Option<(String, String)>, finish: Finish) -> String {
        let id = format!("op-{:06}", self.next_id);
        self.next_id += 1;
        self.ops.insert(
            id.clone(),
            Operation {
                polls_left: self.lro_polls,
                failure,
                finish,
                done: false,
            },
        );
        id
    }

    /// One poll of an operation: `None` = unknown, else (`InProgress` |
    /// `Succeeded` | `Failed`, error).
    pub fn poll(&mut self, id: &str) -> Option<(&'static str, Option<(String, String)>)> {
        let op = self.ops.get_mut(id)?;
        if !op.done && op.polls_left > 1 {
            op.polls_left -= 1;
            return Some(("InProgress", None));
        }
        if !op.done {
            op.done = true;
            let (failure, finish) = (op.failure.clone(), op.finish.clone());
            match &failure {
                Some(_) => self.fail(&finish),
                None => self.finish(&finish),
            }
        }
        let op = self.ops.get(id)?;
        Some(match &op.failure {
            Some(e) => ("Failed", Some(e.clone())),
            None => ("Succeeded", None),
        })
    }

    fn fail(&mut self, finish: &Finish) {
        if let Finish::Provisioned(kind, rg, name) = finish {
            if let Some(v) = self.get_mut(kind, rg, name) {
                v["properties"]["provisioningState"] = json!("Failed");
            }
        }
    }

    fn finish(&mut self, finish: &Finish) {
        match finish {
            Finish::Provisioned(kind, rg, name) => {
                if let Some(v) = self.get_mut(kind, rg, name) {
                    v["properties"]["provisioningState"] = json!("Succeeded");
                }
            }
            Finish::Removed(kind, rg, name) => {
                if let Some(vm) = self.remove(kind, rg, name) {
                    if kind == "virtualmachines" {
                        self.cascade(rg, &vm);
                    }
                }
            }
            Finish::Nothing => {}
        }
    }

    /// After a VM is gone: its NICs and disks are deleted (`deleteOption:
    /// Delete`) or detached.
    fn cascade(&mut self, rg: &str, vm: &Value) {
        let p = &vm["properties"];
        let mut items: Vec<(String, String, bool)> = Vec::new();
        for n in p["networkProfile"]["networkInterfaces"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let id = n["id"].as_str().unwrap_or_default();
            let del = n["properties"]["deleteOption"] == json!("Delete");
            items.push(("networkinterfaces".into(), last(id).to_string(), del));
        }
        let os = &p["storageProfile"]["osDisk"];
        items.push((
            "disks".into(),
            os["name"].as_str().unwrap_or_default().to_string(),
            os["deleteOption"] == json!("Delete"),
        ));
        for d in p["storageProfile"]["dataDisks"]
            .as_array()
            .into_iter()
            .flatten()
        {
            items.push((
                "disks".into(),
                d["name"].as_str().unwrap_or_default().to_string(),
                d["deleteOption"] == json!("Delete"),
            ));
        }
        for (kind, name, delete) in items {
            if delete {
                self.remove(&kind, rg, &name);
            } else if let Some(r) = self.get_mut(&kind, rg, &name) {
                if kind == "disks" {
                    if let Some(o) = r.as_object_mut() {
                        o.remove("managedBy");
                    }
                } else if let Some(o) = r["properties"].as_object_mut() {
                    o.remove("virtualMachine");
                }
            }
        }
    }
}

/// The last segment of an ARM ID.
pub fn last(id: &str) -> &str {
    id.rsplit('/').next().unwrap_or(id)
}
