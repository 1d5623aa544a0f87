//! ARM errors (the `{"error": {"code", "message"}}` envelope, failed
//! long-running operations, transport failures) and their machine error codes.

use mcm_driver::{Code, Status};

/// ARM error codes that mean "no capacity or quota": CreateMachine answers
/// `ResourceExhausted`, which autoscalers read as "try another pool".
pub const RESOURCE_EXHAUSTED_CODES: [&str; 4] = [
    "ZonalAllocationFailed",
    "SkuNotAvailable",
    "AllocationFailed",
    "ResourceQuotaExceeded",
];

/// A failed ARM call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArmError {
    /// ARM answered with an HTTP error, or a long-running operation ended Failed/Canceled.
    #[error("{operation}: HTTP {status}: {code}: {message}{}", request_id_suffix(.request_id))]
    Api {
        /// What was called, e.g. `PUT virtualMachines/m1`.
        operation: String,
        /// The HTTP status (of the call or of the operation's final poll).
        status: u16,
        /// The ARM error code, e.g. `AllocationFailed`.
        code: String,
        /// ARM's message.
        message: String,
        /// `x-ms-request-id` (or the correlation ID).
        request_id: Option<String>,
    },
    /// No usable answer (connection, timeout, unparseable body, token).
    #[error("{operation}: {message}")]
    Transport {
        /// What was called.
        operation: String,
        /// What went wrong.
        message: String,
    },
    /// Throttled (429) on every try.
    #[error("{operation}: throttled (HTTP 429) on {tries} tries{}", request_id_suffix(.request_id))]
    Throttled {
        /// What was called.
        operation: String,
        /// How many times it was tried.
        tries: u32,
        /// The last request ID.
        request_id: Option<String>,
    },
    /// A long-running operation did not finish in time.
    #[error("{operation}: did not finish within {seconds} s")]
    Timeout {
        /// What was called.
        operation: String,
        /// The limit.
        seconds: u64,
    },
}

fn request_id_suffix(id: &Option<String>) -> String {
    id.as_ref()
        .map(|id| format!(" (request id {id})"))
        .unwrap_or_default()
}

/// Whether `s` contains `a` and later `b`, ignoring case (the reference's
/// `(?i)exceeding.*quota`).
fn contains_in_order(s: &str, a: &str, b: &str) -> bool {
    let s = s.to_ascii_lowercase();
    s.find(a).is_some_and(|i| s[i + a.len()..].contains(b))
}

/// Whether `s` says "not supported" (the reference's `(?i)not\s+supported`).
fn says_not_supported(s: &str) -> bool {
    let words: Vec<String> = s
        .split_whitespace()
        .map(|w| w.to_ascii_lowercase())
        .collect();
    words
        .windows(2)
        .any(|w| w[0].ends_with("not") && w[1].starts_with("supported"))
}

impl ArmError {
    /// The ARM error code, if ARM answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ArmError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The HTTP status, if ARM answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ArmError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the resource does not exist (HTTP 404).
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// The reference's classification: capacity and quota codes, an
    /// `OperationNotAllowed` about exceeding a quota, a `BadRequest` about
    /// something not supported.
    pub fn is_resource_exhausted(&self) -> bool {
        match self {
            ArmError::Api { code, message, .. } => {
                RESOURCE_EXHAUSTED_CODES.contains(&code.as_str())
                    || (code == "OperationNotAllowed"
                        && contains_in_order(message, "exceeding", "quota"))
                    || (code == "BadRequest" && says_not_supported(message))
            }
            _ => false,
        }
    }

    /// The machine error code of a failed mutation: `ResourceExhausted` as the
    /// reference classifies it, `Unauthenticated`/`PermissionDenied` for 401/403,
    /// `Unavailable` when ARM did not answer, `Internal` for the rest (the
    /// reference wraps everything else as `Internal`).
    pub fn machine_code(&self) -> Code {
        if self.is_resource_exhausted() {
            return Code::ResourceExhausted;
        }
        match self {
            ArmError::Api { status: 401, .. } => Code::Unauthenticated,
            ArmError::Api { status: 403, .. } => Code::PermissionDenied,
            ArmError::Transport { .. } => Code::Unavailable,
            _ => Code::Internal,
        }
    }

    /// A status with a context prefix.
    pub fn to_status(&self, context: &str) -> Status {
        Status::new(self.machine_code(), format!("{context}: {self}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: &str, message: &str) -> ArmError {
        ArmError::Api {
            operation: "PUT virtualMachines/m1".into(),
            status,
            code: code.into(),
            message: message.into(),
            request_id: Some("req-1".into()),
        }
    }

    #[test]
    fn capacity_and_quota_errors_are_resource_exhausted() {
        for c in RESOURCE_EXHAUSTED_CODES {
            assert_eq!(
                api(409, c, "m").machine_code(),
                Code::ResourceExhausted,
                "{c}"
            );
        }
        let quota = api(
            409,
            "OperationNotAllowed",
            "Operation could not be completed as it results in exceeding approved standardDSv3Family Cores quota.",
        );
        assert_eq!(quota.machine_code(), Code::ResourceExhausted);
        let other = api(409, "OperationNotAllowed", "The VM is being deleted.");
        assert_eq!(other.machine_code(), Code::Internal);
        let unsupported = api(
            400,
            "BadRequest",
            "The VM size is not  supported in zone 3.",
        );
        assert_eq!(unsupported.machine_code(), Code::ResourceExhausted);
        assert_eq!(
            api(400, "BadRequest", "nope").machine_code(),
            Code::Internal
        );
    }

    #[test]
    fn the_rest_is_internal_auth_or_unavailable() {
        assert_eq!(api(404, "NotFound", "m").machine_code(), Code::Internal);
        assert!(api(404, "ResourceNotFound", "m").is_not_found());
        assert_eq!(
            api(401, "InvalidAuthenticationToken", "m").machine_code(),
            Code::Unauthenticated
        );
        assert_eq!(
            api(403, "AuthorizationFailed", "m").machine_code(),
            Code::PermissionDenied
        );
        let t = ArmError::Transport {
            operation: "GET".into(),
            message: "connection refused".into(),
        };
        assert_eq!(t.machine_code(), Code::Unavailable);
    }

    #[test]
    fn the_message_names_the_call_the_code_and_the_request_id() {
        let s = api(409, "AllocationFailed", "no capacity").to_status("creating VM m1");
        assert_eq!(
            s.message,
            "creating VM m1: PUT virtualMachines/m1: HTTP 409: AllocationFailed: no capacity (request id req-1)"
        );
    }
}
