//! EC2 errors and their mapping to machine error codes.

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::operation::RequestId;
use mcm_driver::{Code, Status};

/// EC2 error codes that mean "no capacity or quota left": the create fails
/// with `ResourceExhausted`, which autoscalers read as "try another pool".
pub const RESOURCE_EXHAUSTED_CODES: [&str; 17] = [
    "InsufficientCapacity",
    "InsufficientAddressCapacity",
    "InsufficientInstanceCapacity",
    "InsufficientVolumeCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientCapacityOnHost",
    "InsufficientFreeAddressesInSubnet",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "VolumeLimitExceeded",
    "MaxIOPSLimitExceeded",
    "RouteLimitExceeded",
    "NetworkInterfaceLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    "Unsupported",
];

/// EC2 error codes of throttling.
pub const THROTTLING_CODES: [&str; 4] = [
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
];

const AUTH_CODES: [&str; 5] = [
    "AuthFailure",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "ExpiredToken",
];

const PERMISSION_CODES: [&str; 4] = [
    "UnauthorizedOperation",
    "OptInRequired",
    "Blocked",
    "AccessDenied",
];

/// The code of an unknown instance ID.
pub const INSTANCE_NOT_FOUND: &str = "InvalidInstanceID.NotFound";

/// A failed EC2 call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ec2Error {
    /// EC2 answered with an error code.
    #[error("{action}: {code}: {message}{}", request_id_suffix(.request_id))]
    Api {
        /// The EC2 action, e.g. `RunInstances`.
        action: &'static str,
        /// The EC2 error code, e.g. `InsufficientInstanceCapacity`.
        code: String,
        /// EC2's message.
        message: String,
        /// The AWS request ID.
        request_id: Option<String>,
    },
    /// No usable answer (connection, timeout, unparseable response, credentials).
    #[error("{action}: {message}")]
    Transport {
        /// The EC2 action.
        action: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The answer lacked something the driver needs.
    #[error("{action}: {message}")]
    Unexpected {
        /// The EC2 action.
        action: &'static str,
        /// What was missing.
        message: String,
    },
}

/// EC2 puts the request ID of an error into the XML body
/// (`<RequestID>`), not always into a header.
fn request_id_from_body<E>(err: &SdkError<E>) -> Option<String> {
    let raw = match err {
        SdkError::ServiceError(e) => e.raw(),
        SdkError::ResponseError(e) => e.raw(),
        _ => return None,
    };
    let body = std::str::from_utf8(raw.body().bytes()?).ok()?;
    ["<RequestID>", "<RequestId>", "<requestId>"]
        .iter()
        .find_map(|open| {
            let start = body.find(open)? + open.len();
            let len = body[start..].find('<')?;
            let id = body[start..start + len].trim();
            (!id.is_empty() && id.len() <= 128).then(|| id.to_string())
        })
}

fn request_id_suffix(id: &Option<String>) -> String {
    id.as_ref()
        .map(|id| format!(" (request id {id})"))
        .unwrap_or_default()
}

impl Ec2Error {
    /// Converts an SDK error.
    pub fn from_sdk<E>(action: &'static str, err: SdkError<E>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let request_id = err
            .request_id()
            .map(str::to_string)
            .or_else(|| request_id_from_body(&err));
        match err.code() {
            Some(code) => Ec2Error::Api {
                action,
                code: code.to_string(),
                message: err.message().unwrap_or_default().to_string(),
                request_id,
            },
            None => Ec2Error::Transport {
                action,
                message: DisplayErrorContext(&err).to_string(),
            },
        }
    }

    /// The EC2 error code, if EC2 answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Ec2Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The AWS request ID, if any.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Ec2Error::Api { request_id, .. } => request_id.as_deref(),
            _ => None,
        }
    }

    /// Whether EC2 throttled the call.
    pub fn is_throttling(&self) -> bool {
        self.code().is_some_and(|c| THROTTLING_CODES.contains(&c))
    }

    /// Whether the code says a resource does not exist (`*.NotFound`, `NoSuchEntity`).
    pub fn is_not_found(&self) -> bool {
        self.code()
            .is_some_and(|c| c.ends_with(".NotFound") || c == "NoSuchEntity")
    }

    /// Whether this is "unknown instance ID".
    pub fn is_instance_not_found(&self) -> bool {
        self.code() == Some(INSTANCE_NOT_FOUND)
    }

    /// Whether the code means no capacity or quota.
    pub fn is_resource_exhausted(&self) -> bool {
        self.code()
            .is_some_and(|c| RESOURCE_EXHAUSTED_CODES.contains(&c))
    }

    /// Whether the code means the request itself is wrong.
    pub fn is_invalid_argument(&self) -> bool {
        self.code().is_some_and(|c| {
            !c.ends_with(".NotFound")
                && !AUTH_CODES.contains(&c)
                && (c.starts_with("Invalid")
                    || c.starts_with("Missing")
                    || c.starts_with("Unknown")
                    || c == "ValidationError"
                    || c == "UnsupportedOperation"
                    || c == "IdempotentParameterMismatch")
        })
    }

    /// The machine error code of this error: capacity/quota → ResourceExhausted,
    /// not found → NotFound, bad request → InvalidArgument, credentials →
    /// Unauthenticated, permissions → PermissionDenied, everything else (also
    /// throttling that outlived every retry) → Internal, no answer → Unavailable.
    pub fn code_for_mutation(&self) -> Code {
        match self {
            Ec2Error::Transport { .. } => Code::Unavailable,
            Ec2Error::Unexpected { .. } => Code::Internal,
            Ec2Error::Api { code, .. } => {
                if self.is_resource_exhausted() {
                    Code::ResourceExhausted
                } else if self.is_not_found() {
                    Code::NotFound
                } else if AUTH_CODES.contains(&code.as_str()) {
                    Code::Unauthenticated
                } else if PERMISSION_CODES.contains(&code.as_str()) {
                    Code::PermissionDenied
                } else if self.is_invalid_argument() {
                    Code::InvalidArgument
                } else {
                    Code::Internal
                }
            }
        }
    }

    /// The code for a failed look-up (describe): a look-up that fails must never
    /// read as "the VM does not exist" (that would make the controller create a
    /// second VM), so not-found codes become Internal here.
    pub fn code_for_lookup(&self) -> Code {
        match self.code_for_mutation() {
            Code::NotFound | Code::InvalidArgument | Code::ResourceExhausted => Code::Internal,
            other => other,
        }
    }

    /// A status for a failed mutation, with a context prefix.
    pub fn status(&self, context: &str) -> Status {
        Status::new(self.code_for_mutation(), format!("{context}: {self}"))
    }

    /// A status for a failed look-up, with a context prefix.
    pub fn lookup_status(&self, context: &str) -> Status {
        Status::new(self.code_for_lookup(), format!("{context}: {self}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: &str) -> Ec2Error {
        Ec2Error::Api {
            action: "RunInstances",
            code: code.into(),
            message: "m".into(),
            request_id: Some("req-1".into()),
        }
    }

    #[test]
    fn capacity_and_quota_codes_are_resource_exhausted() {
        for c in RESOURCE_EXHAUSTED_CODES {
            assert_eq!(api(c).code_for_mutation(), Code::ResourceExhausted, "{c}");
        }
    }

    #[test]
    fn the_mapping_table() {
        assert_eq!(
            api("InvalidInstanceID.NotFound").code_for_mutation(),
            Code::NotFound
        );
        assert_eq!(
            api("InvalidAMIID.NotFound").code_for_mutation(),
            Code::NotFound
        );
        assert_eq!(
            api("InvalidParameterValue").code_for_mutation(),
            Code::InvalidArgument
        );
        assert_eq!(
            api("InvalidParameterCombination").code_for_mutation(),
            Code::InvalidArgument
        );
        assert_eq!(
            api("MissingParameter").code_for_mutation(),
            Code::InvalidArgument
        );
        assert_eq!(
            api("InvalidAMIID.Malformed").code_for_mutation(),
            Code::InvalidArgument
        );
        assert_eq!(
            api("AuthFailure").code_for_mutation(),
            Code::Unauthenticated
        );
        assert_eq!(
            api("InvalidClientTokenId").code_for_mutation(),
            Code::Unauthenticated
        );
        assert_eq!(
            api("UnauthorizedOperation").code_for_mutation(),
            Code::PermissionDenied
        );
        assert_eq!(
            api("RequestLimitExceeded").code_for_mutation(),
            Code::Internal
        );
        assert!(api("RequestLimitExceeded").is_throttling());
        assert_eq!(api("InternalError").code_for_mutation(), Code::Internal);
        let t = Ec2Error::Transport {
            action: "DescribeInstances",
            message: "connection refused".into(),
        };
        assert_eq!(t.code_for_mutation(), Code::Unavailable);
    }

    #[test]
    fn lookups_never_say_not_found() {
        assert_eq!(
            api("InvalidInstanceID.NotFound").code_for_lookup(),
            Code::Internal
        );
        assert_eq!(
            api("InvalidParameterValue").code_for_lookup(),
            Code::Internal
        );
        assert_eq!(api("AuthFailure").code_for_lookup(), Code::Unauthenticated);
    }

    #[test]
    fn the_message_names_action_code_and_request_id() {
        let s = api("InsufficientInstanceCapacity").status("creating machine m1");
        assert_eq!(s.code, Code::ResourceExhausted);
        assert_eq!(
            s.message,
            "creating machine m1: RunInstances: InsufficientInstanceCapacity: m (request id req-1)"
        );
    }
}
