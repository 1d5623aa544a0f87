//! Update strategy, fence-posts, template hash and the new MachineSet's name (design: sets-and-deployments.md).

use super::*;

/// The update strategy with its fence-posts resolved against `spec.replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Scale all old sets to 0, then the new one up.
    Recreate,
    /// Surge new machines and remove old ones within the bounds.
    RollingUpdate {
        /// maxSurge, rounded up.
        max_surge: i32,
        /// maxUnavailable, rounded down (1 when both are 0).
        max_unavailable: i32,
    },
    /// Update machines in place (needs a target cluster).
    InPlaceUpdate {
        /// maxSurge as written (rounded up).
        max_surge: i32,
        /// maxUnavailable (1 when both are 0; surge counts as 0 for Manual).
        max_unavailable: i32,
        /// `orchestrationType: Manual`.
        manual: bool,
    },
}

/// Why the strategy could not be resolved (validation reports the same).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategyError {
    /// `strategy.type` is not one of the three.
    #[error("unexpected deployment strategy type {0:?}")]
    UnknownType(String),
    /// The parameters block of the strategy is missing.
    #[error("{0} is required")]
    Missing(&'static str),
    /// A fence-post does not resolve.
    #[error("{0}")]
    FencePost(#[from] IntOrStringError),
}

/// Resolves the strategy of a MachineDeployment spec.
pub fn resolve_strategy(spec: &MachineDeploymentSpec) -> Result<Strategy, StrategyError> {
    let replicas = spec.replicas;
    match &spec.strategy.type_ {
        MachineDeploymentStrategyType::Recreate => Ok(Strategy::Recreate),
        MachineDeploymentStrategyType::RollingUpdate => {
            let ru = spec
                .strategy
                .rolling_update
                .as_ref()
                .ok_or(StrategyError::Missing("spec.strategy.rollingUpdate"))?;
            let (max_surge, max_unavailable) =
                resolve_fenceposts(ru.max_surge.as_ref(), ru.max_unavailable.as_ref(), replicas)?;
            Ok(Strategy::RollingUpdate {
                max_surge,
                max_unavailable,
            })
        }
        MachineDeploymentStrategyType::InPlaceUpdate => {
            let ip = spec
                .strategy
                .in_place_update
                .as_ref()
                .ok_or(StrategyError::Missing("spec.strategy.inPlaceUpdate"))?;
            let manual = ip.orchestration_type == OrchestrationType::Manual;
            let cfg = &ip.update_configuration;
            let max_surge =
                scaled_value_from_int_or_percent(cfg.max_surge.as_ref(), replicas, true)?;
            let zero = IntOrString::Int(0);
            let surge_for_unavailable = if manual {
                Some(&zero)
            } else {
                cfg.max_surge.as_ref()
            };
            let (_, max_unavailable) = resolve_fenceposts(
                surge_for_unavailable,
                cfg.max_unavailable.as_ref(),
                replicas,
            )?;
            Ok(Strategy::InPlaceUpdate {
                max_surge,
                max_unavailable,
                manual,
            })
        }
        other => Err(StrategyError::UnknownType(other.as_str().to_string())),
    }
}

impl Strategy {
    /// `MaxSurge()`: the surge of a RollingUpdate, 0 for the other strategies
    /// (used for the `max-replicas` annotation and proportional scaling).
    pub fn max_surge(&self) -> i32 {
        match self {
            Strategy::RollingUpdate { max_surge, .. } => *max_surge,
            _ => 0,
        }
    }

    /// `MaxUnavailable()`: 0 for Recreate or 0 replicas, else the resolved
    /// value capped at `replicas`.
    pub fn max_unavailable(&self, replicas: i32) -> i32 {
        if replicas <= 0 {
            return 0;
        }
        match self {
            Strategy::Recreate => 0,
            Strategy::RollingUpdate {
                max_unavailable, ..
            }
            | Strategy::InPlaceUpdate {
                max_unavailable, ..
            } => (*max_unavailable).min(replicas),
        }
    }

    /// Whether this is a RollingUpdate.
    pub fn is_rolling(&self) -> bool {
        matches!(self, Strategy::RollingUpdate { .. })
    }
}

// ---------------------------------------------------------------------------
// Templates, hash, names
// ---------------------------------------------------------------------------

/// A copy of the template without the `machine-template-hash` label.
pub fn template_without_hash(t: &MachineTemplateSpec) -> MachineTemplateSpec {
    let mut out = t.clone();
    if let Some(labels) = out.metadata.labels.as_mut() {
        labels.remove(c::TEMPLATE_HASH_LABEL);
        if labels.is_empty() {
            out.metadata.labels = None;
        }
    }
    out
}

/// The part of a template whose change starts a rollout, as normalized JSON:
/// everything except the hash label, `spec.nodeTemplate`, the inline machine
/// configuration and `spec.class.kind` (those are propagated in place; design:
/// sets-and-deployments.md, "Template propagation").
pub(super) fn rollout_relevant(t: &MachineTemplateSpec) -> serde_json::Value {
    let mut t = template_without_hash(t);
    t.spec.node_template = Default::default();
    t.spec.configuration = Default::default();
    t.spec.class.kind = String::new();
    normalize(&serde_json::to_value(&t).unwrap_or(serde_json::Value::Null))
}

/// Template equality as the rollout sees it (`EqualIgnoreHash`): changes of
/// the hash label, the node template, the machine configuration or the class
/// kind do not make templates different. `nil` and empty values are equal.
pub fn equal_ignore_hash(a: &MachineTemplateSpec, b: &MachineTemplateSpec) -> bool {
    rollout_relevant(a) == rollout_relevant(b)
}

pub(super) fn write_canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(v) = m.get(k) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

pub(super) fn fnv1a32(bytes: &[u8], mut h: u32) -> u32 {
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The template hash (`ComputeHash`): FNV-1a 32 of the canonical JSON of the
/// template without the hash label, followed, when a collision count is set,
/// by that count as 8 little-endian bytes (only the low 4 set).
///
/// The Go reference hashes a go-spew dump, so the numbers differ from Go's;
/// that only affects names of newly created sets, because the new set is
/// found by template equality, never by hash (design: sets-and-deployments.md,
/// "New and old MachineSets").
pub fn template_hash(t: &MachineTemplateSpec, collision_count: Option<i32>) -> u32 {
    let mut s = String::new();
    let v = serde_json::to_value(template_without_hash(t)).unwrap_or(serde_json::Value::Null);
    write_canonical(&v, &mut s);
    let mut h = fnv1a32(s.as_bytes(), 0x811c_9dc5);
    if let Some(cc) = collision_count {
        let mut buf = [0u8; 8];
        buf[..4].copy_from_slice(&(cc as u32).to_le_bytes());
        h = fnv1a32(&buf, h);
    }
    h
}

/// Kubernetes' `rand.SafeEncodeString` alphabet (no vowels, no confusable digits).
pub(super) const SAFE_ALPHABET: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";

/// The MachineSet name suffix of a hash: the decimal hash string encoded
/// character-wise into the safe alphabet, first 5 characters.
pub fn hash_suffix(hash: u32) -> String {
    hash.to_string()
        .bytes()
        .take(5)
        .map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()]))
        .collect()
}

/// The name of a new MachineSet: `<deployment>-<hash suffix>`.
pub fn new_set_name(deployment: &str, hash: u32) -> String {
    format!("{deployment}-{}", hash_suffix(hash))
}
