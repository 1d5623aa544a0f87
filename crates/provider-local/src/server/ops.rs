//! The cloud operations: create (idempotent by client token), initialize,
//! update (hot update of tags and instance type), delete, find, list and
//! the operator actions.

use super::error::{parse_body, ApiError};
use super::state::{after, lock, view, Change, Shared};
use crate::spec::LocalProviderSpec;
use crate::wire::{
    self, CreateInstanceRequest, DeleteInstanceResponse, FindInstancesRequest,
    InitializeInstanceRequest, Instance, InstanceList, InstanceState, UpdateInstanceRequest,
};
use axum::body::Bytes;
use chrono::Utc;
use mcm_driver::Code;
use std::net::Ipv6Addr;
use tracing::{debug, info, warn};

fn instance_id() -> String {
    // 17 hex digits, like EC2.
    format!("i-{:017x}", rand::random::<u128>() & ((1u128 << 68) - 1))
}

/// The fake private IPv4 address of sequence number `seq`: 10.x.y.z, z in 1..=254.
fn private_ip(seq: u64) -> String {
    let z = seq % 254 + 1;
    let rest = seq / 254;
    format!("10.{}.{}.{}", (rest / 256) % 256, rest % 256, z)
}

fn seq_words(seq: u64) -> (u16, u16) {
    (((seq >> 16) & 0xffff) as u16, (seq & 0xffff) as u16)
}

/// The `k`-th IPv6 address of sequence number `seq` (in the ULA range fd00::/8).
fn ipv6_address(seq: u64, k: usize) -> String {
    let (hi, lo) = seq_words(seq);
    let k = u16::try_from(k + 1).unwrap_or(u16::MAX);
    Ipv6Addr::new(0xfd00, 0x10, hi, lo, 0, 0, 0, k).to_string()
}

/// The `k`-th IPv6 /80 prefix of sequence number `seq`.
fn ipv6_prefix(seq: u64, k: usize) -> String {
    let (hi, lo) = seq_words(seq);
    let k = u16::try_from(k + 1).unwrap_or(u16::MAX);
    format!("{}/80", Ipv6Addr::new(0xfd00, 0x20, hi, lo, k, 0, 0, 0))
}

impl Shared {
    pub(super) async fn create(&self, body: Bytes) -> Result<Instance, ApiError> {
        let req: CreateInstanceRequest = parse_body(&body)?;
        let machine_name = req.machine_name.trim().to_string();
        if machine_name.is_empty() {
            return Err(ApiError::invalid("machineName: required"));
        }
        let spec = LocalProviderSpec::parse(&req.provider_spec)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        let t = self.tunables();
        let now = Utc::now();
        let st = self.lock_state().await;
        if !req.client_token.is_empty() {
            if let Some(existing) = st
                .by_token
                .get(&req.client_token)
                .and_then(|id| st.instances.get(id))
            {
                info!(instance = %existing.id, machine = %existing.machine_name,
                      "create retried with a known client token: returning the existing instance");
                return Ok(view(existing, now));
            }
        }
        let mut id = instance_id();
        while st.instances.contains_key(&id) {
            id = instance_id();
        }
        let zone = spec.zone.clone().unwrap_or_else(|| self.zone.clone());
        let seq = st.next_seq;
        let inst = Instance {
            provider_id: wire::provider_id(&zone, &id),
            id: id.clone(),
            client_token: req.client_token.clone(),
            node_name: machine_name.clone(),
            machine_name,
            zone,
            image: spec.image,
            instance_type: spec.instance_type,
            tags: {
                let mut tags = spec.tags;
                tags.extend(req.tags.clone());
                tags
            },
            private_ip: private_ip(seq),
            created: now,
            visible_at: after(now, t.eventual_consistency_ms),
            ready_at: after(now, t.boot_delay_ms),
            state: InstanceState::Pending,
            src_dst_check: true,
            ipv6_addresses: Vec::new(),
            ipv6_prefixes: Vec::new(),
            seq,
            in_place_updates: 0,
            hot_updates: 0,
        };
        let change = Change::Put {
            inst: Box::new(inst.clone()),
            next_seq: seq + 1,
        };
        self.commit(st, change).await?;
        // The namespace of the Machine that asked (the identity tag, empty for a VM
        // made out of band): one machine name may live in two namespaces.
        let namespace = inst
            .tags
            .get("machine.sapcloud.io/namespace")
            .map(String::as_str)
            .unwrap_or_default();
        info!(instance = %inst.id, machine = %inst.machine_name, namespace,
              provider_id = %inst.provider_id, ip = %inst.private_ip, "instance launched");
        Ok(view(&inst, now))
    }

    /// Takes one pending "fail initialization" for this instance, if any.
    fn take_init_failure(&self, inst: &Instance) -> Option<(Code, String)> {
        let mut t = lock(&self.tunables);
        let code = Code::from_name(&t.fail_initialization.code);
        let per = &mut t.fail_initialization.per_instance;
        for key in [&inst.id, &inst.machine_name] {
            if let Some(n) = per.get_mut(key.as_str()) {
                if *n > 0 {
                    *n -= 1;
                    let left = *n;
                    if left == 0 {
                        per.remove(key.as_str());
                    }
                    return Some((code, format!(
                        "injected fault: initialization of instance {} failed ({left} more to fail for {key})",
                        inst.id
                    )));
                }
            }
        }
        if t.fail_initialization.global > 0 {
            t.fail_initialization.global -= 1;
            let left = t.fail_initialization.global;
            return Some((code, format!(
                "injected fault: initialization of instance {} failed ({left} more to fail globally)",
                inst.id
            )));
        }
        None
    }

    pub(super) async fn initialize(&self, id: String, body: Bytes) -> Result<Instance, ApiError> {
        let req: InitializeInstanceRequest = parse_body(&body)?;
        let spec = LocalProviderSpec::parse(&req.provider_spec)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        let wanted = spec.wanted_network();
        let now = Utc::now();
        let st = self.lock_state().await;
        let inst = st
            .instances
            .get(&id)
            .filter(|i| i.visible_at(now))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&id))?;
        if let Some((code, message)) = self.take_init_failure(&inst) {
            warn!(instance = %inst.id, machine = %inst.machine_name, %code, "injecting an initialization failure");
            return Err(ApiError::injected(code, message));
        }
        let mut next = inst.clone();
        next.src_dst_check = wanted.src_dst_check;
        next.ipv6_addresses = (0..wanted.ipv6_address_count)
            .map(|k| ipv6_address(inst.seq, k))
            .collect();
        next.ipv6_prefixes = (0..wanted.ipv6_prefix_count)
            .map(|k| ipv6_prefix(inst.seq, k))
            .collect();
        if next != inst {
            let next_seq = st.next_seq;
            let change = Change::Put {
                inst: Box::new(next.clone()),
                next_seq,
            };
            self.commit(st, change).await?;
            info!(instance = %next.id, machine = %next.machine_name, src_dst_check = next.src_dst_check,
                  ipv6_addresses = next.ipv6_addresses.len(), ipv6_prefixes = next.ipv6_prefixes.len(),
                  "instance network initialized");
        } else {
            debug!(instance = %next.id, machine = %next.machine_name, "instance network already as wanted");
        }
        Ok(view(&next, now))
    }

    /// A hot update: the spec's tags set (the removed keys deleted, every
    /// other tag kept) and its instance type applied, on the same instance.
    /// Idempotent: a repeated call changes nothing and is not counted.
    pub(super) async fn update(&self, id: String, body: Bytes) -> Result<Instance, ApiError> {
        let req: UpdateInstanceRequest = parse_body(&body)?;
        let spec = LocalProviderSpec::parse(&req.provider_spec)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        let now = Utc::now();
        let st = self.lock_state().await;
        let inst = st
            .instances
            .get(&id)
            .filter(|i| i.visible_at(now))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&id))?;
        let mut next = inst.clone();
        for key in &req.removed_tags {
            if !spec.tags.contains_key(key) {
                next.tags.remove(key);
            }
        }
        next.tags.extend(spec.tags.clone());
        next.instance_type = spec.instance_type.clone();
        if next == inst {
            debug!(instance = %inst.id, machine = %inst.machine_name, "instance already as the spec wants");
            return Ok(view(&inst, now));
        }
        next.hot_updates = next.hot_updates.saturating_add(1);
        let next_seq = st.next_seq;
        let change = Change::Put {
            inst: Box::new(next.clone()),
            next_seq,
        };
        self.commit(st, change).await?;
        info!(instance = %next.id, machine = %next.machine_name, instance_type = %next.instance_type,
              tags = next.tags.len(), "instance updated in place");
        Ok(view(&next, now))
    }

    pub(super) async fn delete(&self, id: String) -> Result<DeleteInstanceResponse, ApiError> {
        let st = self.lock_state().await;
        let Some(inst) = st.instances.get(&id).cloned() else {
            debug!(instance = %id, "delete of a missing instance: nothing to do");
            return Ok(DeleteInstanceResponse { deleted: false });
        };
        self.commit(st, Change::Remove { id: id.clone() }).await?;
        info!(instance = %id, machine = %inst.machine_name, "instance terminated");
        Ok(DeleteInstanceResponse { deleted: true })
    }

    pub(super) async fn find(&self, body: Bytes) -> Result<InstanceList, ApiError> {
        let req: FindInstancesRequest = parse_body(&body)?;
        let nonempty =
            |s: &Option<String>| s.as_deref().filter(|v| !v.is_empty()).map(str::to_string);
        let (id, token, name, cluster) = (
            nonempty(&req.instance_id),
            nonempty(&req.client_token),
            nonempty(&req.machine_name),
            nonempty(&req.cluster_tag),
        );
        if id.is_none() && token.is_none() && name.is_none() {
            return Err(ApiError::invalid(
                "one of instanceId, clientToken or machineName is required",
            ));
        }
        let now = Utc::now();
        let st = self.state.lock().await;
        let instances = st
            .instances
            .values()
            .filter(|i| i.visible_at(now))
            .filter(|i| {
                id.as_deref() == Some(i.id.as_str())
                    || (token.is_some() && token.as_deref() == Some(i.client_token.as_str()))
                    || (name.as_deref() == Some(i.machine_name.as_str())
                        && cluster.as_ref().is_none_or(|c| i.tags.contains_key(c)))
            })
            .map(|i| view(i, now))
            .collect();
        Ok(InstanceList { instances })
    }

    pub(super) async fn list(&self, cluster_tag: Option<String>) -> Result<InstanceList, ApiError> {
        let Some(tag) = cluster_tag.filter(|t| !t.is_empty()) else {
            return Err(ApiError::invalid("query parameter clusterTag: required"));
        };
        let now = Utc::now();
        let st = self.state.lock().await;
        let instances = st
            .instances
            .values()
            .filter(|i| i.visible_at(now) && i.tags.contains_key(&tag))
            .map(|i| view(i, now))
            .collect();
        Ok(InstanceList { instances })
    }

    /// An operator action on the instance with this ID or, failing that, the
    /// one instance of the machine of this name.
    pub(super) async fn act(&self, key: &str, action: &str) -> Result<Instance, ApiError> {
        let now = Utc::now();
        let boot = self.tunables().boot_delay_ms;
        let st = self.lock_state().await;
        let inst = match st.instances.get(key) {
            Some(i) => i.clone(),
            None => {
                let of_machine: Vec<&Instance> = st
                    .instances
                    .values()
                    .filter(|i| i.machine_name == key)
                    .collect();
                match of_machine.as_slice() {
                    [] => {
                        return Err(ApiError::new(
                            Code::NotFound,
                            format!("no instance has the ID or machine name {key:?}"),
                        ))
                    }
                    [one] => (*one).clone(),
                    several => {
                        let ids: Vec<&str> = several.iter().map(|i| i.id.as_str()).collect();
                        return Err(ApiError::invalid(format!(
                            "machine {key:?} has several instances ({}): name one by its ID",
                            ids.join(", ")
                        )));
                    }
                }
            }
        };
        let id = inst.id.clone();
        let id = id.as_str();
        let current = inst.state_at(now);
        let mut next = inst.clone();
        match action {
            "stop" => next.state = InstanceState::Stopped,
            "kill" => next.state = InstanceState::Killed,
            "start" => {
                if matches!(current, InstanceState::Stopped | InstanceState::Killed) {
                    next.state = InstanceState::Pending;
                    next.ready_at = after(now, boot);
                }
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown action {other:?} (use stop, kill or start)"
                )))
            }
        }
        if next != inst {
            let next_seq = st.next_seq;
            let change = Change::Put {
                inst: Box::new(next.clone()),
                next_seq,
            };
            self.commit(st, change).await?;
        }
        info!(instance = %id, machine = %next.machine_name, action, from = current.as_str(),
              to = next.state_at(now).as_str(), "operator action");
        Ok(view(&next, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::tunables::Tunables;

    #[test]
    fn addresses_are_derived_from_the_sequence() {
        assert_eq!(private_ip(0), "10.0.0.1");
        assert_eq!(private_ip(253), "10.0.0.254");
        assert_eq!(private_ip(254), "10.0.1.1");
        assert_eq!(ipv6_address(1, 0), "fd00:10:0:1::1");
        assert_eq!(ipv6_address(0, 1), "fd00:10::2");
        assert_eq!(ipv6_prefix(1, 1), "fd00:20:0:1:2::/80");
        let id = instance_id();
        assert!(id.starts_with("i-") && id.len() == 19, "{id}");
    }

    fn shared(dir: &std::path::Path) -> Shared {
        let (store, loaded) = Store::open(&dir.join("cloud.redb")).expect("store");
        Shared::new("local-1a".into(), store, loaded, Tunables::unlimited())
    }

    fn create_body(token: &str, machine: &str) -> Bytes {
        let spec = serde_json::json!({
            "image": "local/ubuntu-24.04",
            "instanceType": "local.medium",
            "tags": {"kubernetes.io/cluster/c1": "1", "kubernetes.io/role/node": "1"}
        });
        let req =
            serde_json::json!({"clientToken": token, "machineName": machine, "providerSpec": spec});
        Bytes::from(req.to_string())
    }

    /// What memory holds and what a restarted server would load, both sorted by ID.
    async fn memory_and_store(s: &Shared) -> (Vec<Instance>, Vec<Instance>) {
        let memory: Vec<Instance> = s.state.lock().await.instances.values().cloned().collect();
        let mut stored = s.store.load().expect("load").instances;
        stored.sort_by(|a, b| a.id.cmp(&b.id));
        (memory, stored)
    }

    #[tokio::test]
    async fn a_create_cancelled_during_its_commit_completes_and_its_retry_returns_the_same_instance(
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let s = shared(dir.path());
        let body = create_body("uid-1", "m1");
        // The store's writer is busy: the create reaches its commit and waits there.
        let busy = s.store.hold_writes();
        let mut request = Box::pin(s.create(body.clone()));
        assert!(
            futures::poll!(request.as_mut()).is_pending(),
            "the create waits for the store"
        );
        // The client disconnects: the request future is dropped mid-commit.
        drop(request);
        busy.abort().expect("abort");

        let retried = s.create(body).await.expect("retried create");
        let (memory, stored) = memory_and_store(&s).await;
        assert_eq!(memory.len(), 1, "one instance, not two: {memory:?}");
        assert_eq!(
            memory[0].id, retried.id,
            "the retry returns the first attempt's instance"
        );
        assert_eq!(memory, stored, "memory and store agree");
        assert_eq!(s.state.lock().await.next_seq, 1);
    }

    #[tokio::test]
    async fn a_delete_cancelled_during_its_commit_leaves_memory_and_store_agreeing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let s = shared(dir.path());
        let inst = s.create(create_body("uid-2", "m2")).await.expect("create");
        let busy = s.store.hold_writes();
        let mut request = Box::pin(s.delete(inst.id.clone()));
        assert!(futures::poll!(request.as_mut()).is_pending());
        drop(request);
        busy.abort().expect("abort");

        let again = s.delete(inst.id.clone()).await.expect("retried delete");
        assert!(!again.deleted, "the first attempt already deleted it");
        let (memory, stored) = memory_and_store(&s).await;
        assert!(
            memory.is_empty() && stored.is_empty(),
            "{memory:?} {stored:?}"
        );
    }
}
