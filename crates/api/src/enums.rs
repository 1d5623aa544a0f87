//! String-valued enumerations of the API (phases, operation states and types, strategy types,
//! condition types and statuses).
//!
//! In Go these are `type X string` with a set of well-known constants, so any string is a valid
//! value on the wire. The Rust enums mirror that: every well-known value has its own variant, the
//! empty string (the Go zero value, written when a field was never set) is [`Empty`](MachinePhase::Empty),
//! and anything else is kept verbatim in `Other(String)` so that an object written by a newer Go
//! controller (or by hand) always parses and round-trips unchanged.
//!
//! On the wire every enum is a plain JSON string; `null` is read as the empty value.

/// Declares a string enum with well-known values, an `Empty` default and an `Other(String)`
/// catch-all, plus serde, schemars, `Display`, `FromStr`, `From<&str>` and `as_str()`.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident => $value:literal,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default)]
        pub enum $name {
            /// The empty string: the Go zero value, i.e. "not set".
            #[default]
            Empty,
            $(
                $(#[$vmeta])*
                $variant,
            )*
            /// A value that this version of mcm-rs does not know. It is kept verbatim so that the
            /// object round-trips unchanged. Never construct it with a well-known value; use
            /// `From<&str>` (which normalises) instead. Equality compares the string form, so
            /// `Other("X".into())` still equals the well-known variant for `"X"`.
            Other(String),
        }

        impl $name {
            /// Every well-known (non-empty) value, in declaration order.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),*];

            /// The wire (JSON) representation of this value.
            pub fn as_str(&self) -> &str {
                match self {
                    $name::Empty => "",
                    $($name::$variant => $value,)*
                    $name::Other(value) => value.as_str(),
                }
            }

            /// True for the empty (unset) value.
            pub fn is_empty(&self) -> bool {
                self.as_str().is_empty()
            }

            /// True for one of the well-known, non-empty values.
            pub fn is_known(&self) -> bool {
                !self.is_empty() && !matches!($name::from(self.as_str()), $name::Other(_))
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                match value {
                    "" => $name::Empty,
                    $($value => $name::$variant,)*
                    other => $name::Other(other.to_owned()),
                }
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                match $name::from(value.as_str()) {
                    $name::Other(_) => $name::Other(value),
                    known => known,
                }
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                match value {
                    $name::Other(value) => value,
                    known => known.as_str().to_owned(),
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::convert::Infallible;

            fn from_str(value: &str) -> Result<Self, Self::Err> {
                Ok($name::from(value))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.as_str() == other.as_str()
            }
        }

        impl Eq for $name {}

        impl std::hash::Hash for $name {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.as_str().hash(state)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value: Option<String> = serde::Deserialize::deserialize(deserializer)?;
                Ok(value.map($name::from).unwrap_or_default())
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn inline_schema() -> bool {
                true
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string" })
            }
        }
    };
}

string_enum! {
    /// The phase of a [`Machine`](crate::Machine) (`status.currentStatus.phase`).
    ///
    /// [`Empty`](MachinePhase::Empty) means creation was not attempted or not acknowledged yet.
    pub enum MachinePhase {
        /// The machine is being created / its node has not joined yet.
        Pending => "Pending",
        /// The VM exists and no target cluster is configured (no node to wait for).
        Available => "Available",
        /// The node joined and is healthy.
        Running => "Running",
        /// The machine is being deleted.
        Terminating => "Terminating",
        /// The node became unhealthy; the health timeout is running.
        Unknown => "Unknown",
        /// Creation or health timed out; the machine will be replaced.
        Failed => "Failed",
        /// Creation failed and is retried with back-off.
        CrashLoopBackOff => "CrashLoopBackOff",
        /// An in-place update is in progress.
        InPlaceUpdating => "InPlaceUpdating",
        /// The in-place update succeeded.
        InPlaceUpdateSuccessful => "InPlaceUpdateSuccessful",
        /// The in-place update failed.
        InPlaceUpdateFailed => "InPlaceUpdateFailed",
    }
}

string_enum! {
    /// The state of the last operation (`status.lastOperation.state`).
    pub enum MachineState {
        /// The operation is in progress.
        Processing => "Processing",
        /// The operation failed.
        Failed => "Failed",
        /// The operation succeeded.
        Successful => "Successful",
    }
}

string_enum! {
    /// The type of the last operation (`status.lastOperation.type`).
    pub enum MachineOperationType {
        /// Machine creation.
        Create => "Create",
        /// Machine update (declared, unused by the reference controller).
        Update => "Update",
        /// In-place update.
        InPlaceUpdate => "InPlaceUpdate",
        /// Node drain during an in-place update.
        DrainNode => "DrainNode",
        /// Health check.
        HealthCheck => "HealthCheck",
        /// Machine deletion.
        Delete => "Delete",
    }
}

string_enum! {
    /// The status of a condition.
    pub enum ConditionStatus {
        /// The condition holds.
        True => "True",
        /// The condition does not hold.
        False => "False",
        /// It is not known whether the condition holds.
        Unknown => "Unknown",
    }
}

string_enum! {
    /// The type of a [`MachineSetCondition`](crate::MachineSetCondition).
    pub enum MachineSetConditionType {
        /// Machines could not be created or deleted.
        ReplicaFailure => "ReplicaFailure",
        /// The safety loop froze the set.
        Frozen => "Frozen",
    }
}

string_enum! {
    /// The type of a [`MachineDeploymentCondition`](crate::MachineDeploymentCondition).
    pub enum MachineDeploymentConditionType {
        /// At least the minimum number of machines is available.
        Available => "Available",
        /// The rollout is progressing (or finished).
        Progressing => "Progressing",
        /// Machines could not be created or deleted.
        ReplicaFailure => "ReplicaFailure",
        /// The safety loop froze the deployment.
        Frozen => "Frozen",
    }
}

string_enum! {
    /// The update strategy of a MachineDeployment (`spec.strategy.type`). Not defaulted: an
    /// unset type fails validation.
    pub enum MachineDeploymentStrategyType {
        /// Delete all old machines before creating new ones.
        Recreate => "Recreate",
        /// Replace machines gradually (maxSurge / maxUnavailable).
        RollingUpdate => "RollingUpdate",
        /// Update machines in place.
        InPlaceUpdate => "InPlaceUpdate",
    }
}

string_enum! {
    /// Who drives an in-place update (`spec.strategy.inPlaceUpdate.orchestrationType`).
    pub enum OrchestrationType {
        /// The controller selects the machines to update.
        Auto => "Auto",
        /// An external actor selects the machines to update.
        Manual => "Manual",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_round_trips_known_empty_and_unknown_values() {
        for phase in MachinePhase::KNOWN {
            let json = serde_json::to_string(phase).unwrap();
            let back: MachinePhase = serde_json::from_str(&json).unwrap();
            assert_eq!(&back, phase);
            assert!(phase.is_known());
        }
        let empty: MachinePhase = serde_json::from_str("\"\"").unwrap();
        assert_eq!(empty, MachinePhase::Empty);
        assert_eq!(empty, MachinePhase::default());
        let null: MachinePhase = serde_json::from_str("null").unwrap();
        assert_eq!(null, MachinePhase::Empty);
        let other: MachinePhase = serde_json::from_str("\"Hibernating\"").unwrap();
        assert_eq!(other, MachinePhase::Other("Hibernating".into()));
        assert!(!other.is_known());
        assert_eq!(serde_json::to_string(&other).unwrap(), "\"Hibernating\"");
    }

    #[test]
    fn enums_display_and_parse() {
        assert_eq!(
            MachinePhase::CrashLoopBackOff.to_string(),
            "CrashLoopBackOff"
        );
        assert_eq!(MachinePhase::CrashLoopBackOff.as_str(), "CrashLoopBackOff");
        assert_eq!(
            "Running".parse::<MachinePhase>().unwrap(),
            MachinePhase::Running
        );
        assert_eq!(MachineState::from("Processing"), MachineState::Processing);
        assert_eq!(
            MachineOperationType::from("DrainNode"),
            MachineOperationType::DrainNode
        );
        assert_eq!(MachineOperationType::Empty.as_str(), "");
        assert_eq!(String::from(MachineState::Failed), "Failed");
        assert_eq!(MachinePhase::KNOWN.len(), 10);
        assert_eq!(MachineState::KNOWN.len(), 3);
        assert_eq!(MachineOperationType::KNOWN.len(), 6);
    }

    #[test]
    fn other_with_known_value_equals_known_variant() {
        assert_eq!(MachinePhase::Other("Running".into()), MachinePhase::Running);
        assert_eq!(
            MachinePhase::from(String::from("Running")),
            MachinePhase::Running
        );
        assert!(MachinePhase::Running == "Running");
    }
}
