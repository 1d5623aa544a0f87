//! The conversions between the contract's types and `mcm.driver.v1`'s
//! messages, and the status mapping both sides share.
//!
//! Kubernetes objects travel as JSON bytes (see the proto's header). Machine
//! codes travel as gRPC codes where gRPC has them (0-16) and always in the
//! metadata key [`MACHINE_CODE_KEY`], so `Uninitialized` (17) keeps its code
//! across any hop that forwards metadata.

use crate::pb;
use k8s_openapi::api::core::v1::{NodeAddress, PersistentVolumeSpec, Secret};
use mcm_api::{Machine, MachineClass};
use mcm_driver::budget::BucketLimit;
use mcm_driver::{CloudOp, Code, MachineIdentity, MachineOwner, MachineRequest, Status};
use std::hash::{Hash, Hasher};
use tonic::metadata::{MetadataMap, MetadataValue};

/// The metadata key with the machine code's number (`0`..`17`).
pub const MACHINE_CODE_KEY: &str = "mcm-machine-code";
/// The binary metadata key with the VM's identity (JSON) of an error answer.
pub const MACHINE_IDENTITY_KEY: &str = "mcm-machine-identity-bin";

/// A request field that did not decode.
#[derive(Debug, thiserror::Error)]
#[error("field {field} is not valid JSON of a {kind}: {source}")]
pub struct DecodeError {
    /// The proto field.
    pub field: &'static str,
    /// What it should hold.
    pub kind: &'static str,
    /// The JSON error (position and kind only, never the content).
    #[source]
    pub source: serde_json::Error,
}

impl From<DecodeError> for Status {
    fn from(e: DecodeError) -> Status {
        Status::invalid_argument(e.to_string())
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    field: &'static str,
    kind: &'static str,
) -> Result<T, DecodeError> {
    serde_json::from_slice(bytes).map_err(|source| DecodeError {
        field,
        kind,
        source,
    })
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Serializing these API types cannot fail (string keys, no non-finite floats
    // from JSON); an empty body decodes as an error on the other side.
    serde_json::to_vec(value).unwrap_or_default()
}

/// The proto form of a machine-scoped request.
pub fn machine_request(req: &MachineRequest) -> pb::MachineRequest {
    pb::MachineRequest {
        machine_json: encode(&req.machine),
        machine_class_json: encode(&req.machine_class),
        secret_json: encode(&req.secret),
    }
}

/// The contract's form of a machine-scoped request.
pub fn from_machine_request(req: &pb::MachineRequest) -> Result<MachineRequest, DecodeError> {
    Ok(MachineRequest {
        machine: decode::<Machine>(&req.machine_json, "machine_json", "Machine")?,
        machine_class: decode::<MachineClass>(
            &req.machine_class_json,
            "machine_class_json",
            "MachineClass",
        )?,
        secret: decode::<Secret>(&req.secret_json, "secret_json", "Secret")?,
    })
}

/// The proto form of a ListMachines request.
pub fn list_request(req: &mcm_driver::ListMachinesRequest) -> pb::ListMachinesRequest {
    pb::ListMachinesRequest {
        machine_class_json: encode(&req.machine_class),
        secret_json: encode(&req.secret),
    }
}

/// The contract's form of a ListMachines request.
pub fn from_list_request(
    req: &pb::ListMachinesRequest,
) -> Result<mcm_driver::ListMachinesRequest, DecodeError> {
    Ok(mcm_driver::ListMachinesRequest {
        machine_class: decode(
            &req.machine_class_json,
            "machine_class_json",
            "MachineClass",
        )?,
        secret: decode(&req.secret_json, "secret_json", "Secret")?,
    })
}

/// The proto form of an UpdateMachine request.
pub fn update_request(req: &mcm_driver::UpdateMachineRequest) -> pb::UpdateMachineRequest {
    pb::UpdateMachineRequest {
        machine: Some(pb::MachineRequest {
            machine_json: encode(&req.machine),
            machine_class_json: encode(&req.machine_class),
            secret_json: encode(&req.secret),
        }),
        last_applied_provider_spec_json: encode(&req.last_applied_provider_spec),
    }
}

/// The contract's form of an UpdateMachine request.
pub fn from_update_request(
    req: &pb::UpdateMachineRequest,
) -> Result<mcm_driver::UpdateMachineRequest, DecodeError> {
    let inner = from_machine_request(
        req.machine
            .as_ref()
            .unwrap_or(&pb::MachineRequest::default()),
    )?;
    Ok(mcm_driver::UpdateMachineRequest {
        machine: inner.machine,
        machine_class: inner.machine_class,
        secret: inner.secret,
        last_applied_provider_spec: decode(
            &req.last_applied_provider_spec_json,
            "last_applied_provider_spec_json",
            "providerSpec",
        )?,
    })
}

/// The proto form of GetVolumeIDs' PV specs.
pub fn volume_request(req: &mcm_driver::GetVolumeIdsRequest) -> pb::GetVolumeIDsRequest {
    pb::GetVolumeIDsRequest {
        pv_spec_json: req.pv_specs.iter().map(encode).collect(),
    }
}

/// The contract's form of GetVolumeIDs' PV specs.
pub fn from_volume_request(
    req: &pb::GetVolumeIDsRequest,
) -> Result<mcm_driver::GetVolumeIdsRequest, DecodeError> {
    let pv_specs = req
        .pv_spec_json
        .iter()
        .map(|b| decode::<PersistentVolumeSpec>(b, "pv_spec_json", "PersistentVolumeSpec"))
        .collect::<Result<_, _>>()?;
    Ok(mcm_driver::GetVolumeIdsRequest { pv_specs })
}

/// JSON bytes of a providerSpec (for the in-place check and the warnings).
pub fn spec_json(v: &serde_json::Value) -> Vec<u8> {
    encode(v)
}

/// A providerSpec from JSON bytes.
pub fn from_spec_json(bytes: &[u8], field: &'static str) -> Result<serde_json::Value, DecodeError> {
    decode(bytes, field, "providerSpec")
}

/// Addresses to the proto.
pub fn addresses(a: &[NodeAddress]) -> Vec<pb::NodeAddress> {
    a.iter()
        .map(|a| pb::NodeAddress {
            r#type: a.type_.clone(),
            address: a.address.clone(),
        })
        .collect()
}

/// Addresses from the proto.
pub fn from_addresses(a: &[pb::NodeAddress]) -> Vec<NodeAddress> {
    a.iter()
        .map(|a| NodeAddress {
            type_: a.r#type.clone(),
            address: a.address.clone(),
        })
        .collect()
}

/// The ListMachines answer to the proto.
pub fn list_response(r: &mcm_driver::ListMachinesResponse) -> pb::ListMachinesResponse {
    pb::ListMachinesResponse {
        machines: r
            .machine_list
            .iter()
            .map(|(provider_id, name)| {
                let facts = r.facts.get(provider_id);
                pb::ListedVm {
                    provider_id: provider_id.clone(),
                    machine_name: name.clone(),
                    instance_key: facts.map(|f| f.instance_key.clone()).unwrap_or_default(),
                    owner: facts
                        .and_then(|f| f.owner.as_ref())
                        .map(|o| pb::MachineOwner {
                            namespace: o.namespace.clone(),
                            uid: o.uid.clone(),
                        }),
                }
            })
            .collect(),
    }
}

/// The ListMachines answer from the proto.
pub fn from_list_response(r: pb::ListMachinesResponse) -> mcm_driver::ListMachinesResponse {
    let mut out = mcm_driver::ListMachinesResponse::default();
    for vm in r.machines {
        if vm.instance_key.is_empty() && vm.owner.is_none() {
            out.machine_list.insert(vm.provider_id, vm.machine_name);
        } else {
            let key = if vm.instance_key.is_empty() {
                vm.provider_id.clone()
            } else {
                vm.instance_key
            };
            let owner = vm.owner.map(|o| MachineOwner {
                namespace: o.namespace,
                uid: o.uid,
            });
            out.insert(vm.provider_id, vm.machine_name, key, owner);
        }
    }
    out
}

/// A cloud operation to the proto.
pub fn cloud_op(op: CloudOp) -> pb::CloudOp {
    match op {
        CloudOp::Create => pb::CloudOp::Create,
        CloudOp::Initialize => pb::CloudOp::Initialize,
        CloudOp::Delete => pb::CloudOp::Delete,
        CloudOp::Status => pb::CloudOp::Status,
        CloudOp::List => pb::CloudOp::List,
        CloudOp::Update => pb::CloudOp::Update,
    }
}

/// A cloud operation from the proto (`None`: unspecified or unknown).
pub fn from_cloud_op(op: i32) -> Option<CloudOp> {
    match pb::CloudOp::try_from(op).ok()? {
        pb::CloudOp::Unspecified => None,
        pb::CloudOp::Create => Some(CloudOp::Create),
        pb::CloudOp::Initialize => Some(CloudOp::Initialize),
        pb::CloudOp::Delete => Some(CloudOp::Delete),
        pb::CloudOp::Status => Some(CloudOp::Status),
        pb::CloudOp::List => Some(CloudOp::List),
        pb::CloudOp::Update => Some(CloudOp::Update),
    }
}

/// Declared rate limits from the proto; entries with an unknown operation or
/// a limit that is zero or not finite are dropped (named in the result's
/// second half, for the log).
pub fn from_rate_limits(limits: &[pb::RateLimit]) -> (Vec<(CloudOp, BucketLimit)>, Vec<String>) {
    let mut ok = Vec::new();
    let mut dropped = Vec::new();
    for l in limits {
        match from_cloud_op(l.op) {
            Some(op)
                if l.capacity > 0 && l.refill_per_sec.is_finite() && l.refill_per_sec > 0.0 =>
            {
                ok.push((op, BucketLimit::new(l.capacity, l.refill_per_sec)))
            }
            _ => dropped.push(format!(
                "op {} capacity {} refill {}/s",
                l.op, l.capacity, l.refill_per_sec
            )),
        }
    }
    (ok, dropped)
}

/// The budget scope of a request by a driver's declared recipe: the
/// providerSpec values, then a hash of each named Secret value (never the
/// value itself), joined with `/`.
pub fn scope_key(recipe: &pb::RateLimitScope, req: &MachineRequest) -> String {
    let mut parts: Vec<String> = Vec::new();
    for path in &recipe.provider_spec_fields {
        let mut v = Some(&req.machine_class.provider_spec);
        for key in path.split('.') {
            v = v.and_then(|x| x.get(key));
        }
        parts.push(match v {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        });
    }
    for key in &recipe.secret_keys {
        parts.push(match mcm_driver::secret_bytes(&req.secret, key) {
            Some(bytes) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut h);
                format!("{:016x}", h.finish())
            }
            None => String::new(),
        });
    }
    parts.join("/")
}

fn identity_json(m: &MachineIdentity) -> Vec<u8> {
    encode(&serde_json::json!({
        "providerID": m.provider_id,
        "nodeName": m.node_name,
        "addresses": m.addresses,
    }))
}

fn identity_from_json(bytes: &[u8]) -> Option<MachineIdentity> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    Some(MachineIdentity {
        provider_id: v.get("providerID")?.as_str()?.to_string(),
        node_name: v
            .get("nodeName")
            .and_then(|n| n.as_str())
            .unwrap_or_default()
            .to_string(),
        addresses: v
            .get("addresses")
            .and_then(|a| serde_json::from_value(a.clone()).ok())
            .unwrap_or_default(),
    })
}

/// A driver's error as a gRPC status: the gRPC code for 0-16, `Unknown` for
/// the machine codes past gRPC's, and always the machine code in
/// [`MACHINE_CODE_KEY`]; the message is the provider's, unchanged.
pub fn to_grpc(status: &Status) -> tonic::Status {
    let value = status.code.value();
    let code = if value <= 16 {
        tonic::Code::from(value as i32)
    } else {
        tonic::Code::Unknown
    };
    let mut md = MetadataMap::new();
    md.insert(MACHINE_CODE_KEY, MetadataValue::from(value));
    if let Some(m) = &status.machine {
        md.insert_bin(
            MACHINE_IDENTITY_KEY,
            MetadataValue::from_bytes(&identity_json(m)),
        );
    }
    tonic::Status::with_metadata(code, status.message.clone(), md)
}

/// A gRPC status as the driver error it carries. A status from an
/// `mcm.driver.v1` server carries its machine code in the metadata; one
/// without (from the transport, a proxy or a foreign server) keeps its gRPC
/// code, except that a broken connection (a transport error reported as
/// `Unknown`, `Internal` or `Cancelled`) is `Unavailable`. An unknown or
/// unreadable machine code is `Unknown`, with the number in the message.
pub fn from_grpc(s: &tonic::Status, endpoint: &str) -> Status {
    let machine = s
        .metadata()
        .get_bin(MACHINE_IDENTITY_KEY)
        .and_then(|v| v.to_bytes().ok())
        .and_then(|b| identity_from_json(&b))
        .map(Box::new);
    match s.metadata().get(MACHINE_CODE_KEY) {
        Some(v) => {
            let text = v.to_str().unwrap_or("<not text>");
            match text.trim().parse::<u32>() {
                Ok(n) if n <= 17 => Status {
                    code: Code::from_value(n),
                    message: s.message().to_string(),
                    machine,
                },
                _ => Status::new(
                    Code::Unknown,
                    format!(
                        "driver at {endpoint} answered an unknown machine code {text:?}: {}",
                        s.message()
                    ),
                ),
            }
        }
        None => {
            let mut timed_out = false;
            let mut source = std::error::Error::source(s);
            while let Some(e) = source {
                timed_out |= e.downcast_ref::<tonic::TimeoutExpired>().is_some();
                source = e.source();
            }
            let transport = matches!(
                s.code(),
                tonic::Code::Unknown | tonic::Code::Internal | tonic::Code::Cancelled
            ) && std::error::Error::source(s).is_some();
            let code = if timed_out {
                Code::DeadlineExceeded
            } else if transport {
                Code::Unavailable
            } else {
                Code::from_value(s.code() as u32)
            };
            let mut message = format!("driver at {endpoint}: {}", s.message());
            let mut source = std::error::Error::source(s);
            while let Some(e) = source {
                let text = e.to_string();
                if !message.contains(&text) {
                    message.push_str(": ");
                    message.push_str(&text);
                }
                source = e.source();
            }
            Status::new(code, message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_machine_code_survives_the_grpc_status_and_back() {
        for code in Code::all() {
            if code == Code::Ok {
                continue;
            }
            let s = Status::new(code, format!("msg of {code} [with] brackets"));
            let back = from_grpc(&to_grpc(&s), "test");
            assert_eq!(back.code, code);
            assert_eq!(back.message, s.message);
            assert_eq!(back.to_string(), s.to_string(), "the reference's text form");
        }
    }

    #[test]
    fn uninitialized_keeps_the_identity_and_is_unknown_to_plain_grpc() {
        let s = Status::uninitialized(
            "srcDstCheck still on",
            MachineIdentity {
                provider_id: "local:///z/i-1".into(),
                node_name: "n1".into(),
                addresses: vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: "10.0.0.1".into(),
                }],
            },
        );
        let g = to_grpc(&s);
        assert_eq!(g.code(), tonic::Code::Unknown);
        let back = from_grpc(&g, "test");
        assert_eq!(back, s);
    }

    #[test]
    fn an_unknown_or_garbage_machine_code_is_unknown_with_a_clear_message() {
        for bad in ["99", "banana", "-1"] {
            let mut md = MetadataMap::new();
            md.insert(
                MACHINE_CODE_KEY,
                MetadataValue::try_from(bad).expect("ascii"),
            );
            let g = tonic::Status::with_metadata(tonic::Code::Internal, "boom", md);
            let back = from_grpc(&g, "unix:///x");
            assert_eq!(back.code, Code::Unknown);
            assert!(
                back.message.contains("unknown machine code"),
                "{}",
                back.message
            );
            assert!(back.message.contains("boom"));
        }
    }

    #[test]
    fn a_foreign_status_keeps_its_grpc_code_and_names_the_endpoint() {
        let back = from_grpc(
            &tonic::Status::unavailable("connection refused"),
            "unix:///s",
        );
        assert_eq!(back.code, Code::Unavailable);
        assert!(back.message.contains("unix:///s"));
    }

    #[test]
    fn the_scope_key_hashes_secret_values_and_reads_spec_paths() {
        let recipe = pb::RateLimitScope {
            provider_spec_fields: vec!["region".into(), "a.b".into()],
            secret_keys: vec!["accessKeyID".into()],
        };
        let mut req = MachineRequest {
            machine: Machine::default(),
            machine_class: MachineClass::default(),
            secret: Secret::default(),
        };
        req.machine_class.provider_spec = serde_json::json!({"region": "eu-1", "a": {"b": 3}});
        req.secret.string_data =
            Some([("accessKeyID".to_string(), "AKIASECRET".to_string())].into());
        let key = scope_key(&recipe, &req);
        assert!(key.starts_with("eu-1/3/"), "{key}");
        assert!(!key.contains("AKIASECRET"));
        assert_eq!(key, scope_key(&recipe, &req.clone()));
    }

    #[test]
    fn list_answers_keep_names_keys_and_owners() {
        let mut r = mcm_driver::ListMachinesResponse::default();
        r.insert(
            "p1".into(),
            "m1".into(),
            "i-1".into(),
            Some(MachineOwner {
                namespace: "ns".into(),
                uid: "u".into(),
            }),
        );
        r.machine_list.insert("p2".into(), "m2".into());
        assert_eq!(from_list_response(list_response(&r)), r);
    }
}
