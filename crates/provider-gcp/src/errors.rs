//! Compute Engine errors and their machine error codes, as the reference
//! maps them: capacity and quota → `ResourceExhausted`, the rest `Internal`.

use mcm_driver::Code;
use std::time::Duration;

/// Operation error codes that mean "no capacity in the zone".
pub const CAPACITY_CODES: [&str; 3] = [
    "RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
];

/// Error reasons of Compute's API rate quotas (the call may be retried later).
pub const THROTTLING_REASONS: [&str; 3] = [
    "rateLimitExceeded",
    "userRateLimitExceeded",
    "RATE_LIMIT_EXCEEDED",
];

/// A failed Compute call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GceError {
    /// Compute answered with an HTTP error.
    #[error("{method}: HTTP {status}{}: {message}", reason_suffix(.reason))]
    Api {
        /// The method, e.g. `instances.insert`.
        method: &'static str,
        /// The HTTP status.
        status: u16,
        /// The first `errors[].reason`, e.g. `alreadyExists`.
        reason: Option<String>,
        /// Compute's message.
        message: String,
    },
    /// A long-running operation ended `DONE` with errors.
    #[error("{method}: operation {operation} failed: {code}: {message}")]
    Operation {
        /// The method that started the operation.
        method: &'static str,
        /// The operation name.
        operation: String,
        /// The last error's code, e.g. `ZONE_RESOURCE_POOL_EXHAUSTED`.
        code: String,
        /// Every error message, joined with `; `.
        message: String,
    },
    /// An operation did not reach `DONE` in time.
    #[error("{method}: operation {operation} not done after {after:?}")]
    Timeout {
        /// The method that started the operation.
        method: &'static str,
        /// The operation name.
        operation: String,
        /// How long the driver waited.
        after: Duration,
    },
    /// No usable answer (connection, credentials, unparseable response).
    #[error("{method}: {message}")]
    Transport {
        /// The method.
        method: &'static str,
        /// What went wrong.
        message: String,
    },
}

fn reason_suffix(r: &Option<String>) -> String {
    r.as_ref().map(|r| format!(" {r}")).unwrap_or_default()
}

impl GceError {
    /// Converts a client error.
    pub fn from_client(method: &'static str, e: &google_cloud_gax::error::Error) -> GceError {
        match (e.http_status_code(), e.status()) {
            (Some(status), Some(s)) => {
                let reason = s.details.iter().find_map(|d| match d {
                    google_cloud_gax::error::rpc::StatusDetails::ErrorInfo(i)
                        if !i.reason.is_empty() =>
                    {
                        Some(i.reason.clone())
                    }
                    _ => None,
                });
                GceError::Api {
                    method,
                    status,
                    reason,
                    message: s.message.clone(),
                }
            }
            (Some(status), None) => GceError::Api {
                method,
                status,
                reason: None,
                message: e
                    .http_payload()
                    .map(|b| String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned())
                    .unwrap_or_default(),
            },
            _ => GceError::Transport {
                method,
                message: e.to_string(),
            },
        }
    }

    /// The HTTP status of an API error.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            GceError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    fn reason(&self) -> Option<&str> {
        match self {
            GceError::Api { reason, .. } => reason.as_deref(),
            _ => None,
        }
    }

    /// 404.
    pub fn is_not_found(&self) -> bool {
        self.http_status() == Some(404)
    }

    /// 409 `alreadyExists`.
    pub fn is_already_exists(&self) -> bool {
        self.http_status() == Some(409)
    }

    /// An API rate quota was hit (403 `rateLimitExceeded`, or 429).
    pub fn is_throttling(&self) -> bool {
        self.http_status() == Some(429)
            || (self.http_status() == Some(403)
                && self
                    .reason()
                    .is_some_and(|r| THROTTLING_REASONS.contains(&r)))
    }

    /// No capacity or quota: an operation error code in [`CAPACITY_CODES`] or
    /// containing `QUOTA`; an insert answered "… does not exist in zone …"
    /// (the machine type is not offered there); or a call refused with a
    /// quota reason (`QUOTA_EXCEEDED`, `quotaExceeded`).
    pub fn is_resource_exhausted(&self) -> bool {
        match self {
            GceError::Operation { code, .. } => {
                CAPACITY_CODES.contains(&code.as_str()) || code.contains("QUOTA")
            }
            GceError::Api {
                message, reason, ..
            } => {
                message.contains("does not exist in zone")
                    || reason
                        .as_deref()
                        .is_some_and(|r| r.to_ascii_uppercase().contains("QUOTA"))
            }
            _ => false,
        }
    }

    /// The machine error code: `ResourceExhausted` for capacity and quota,
    /// `Internal` for everything else (as the reference).
    pub fn code(&self) -> Code {
        if self.is_resource_exhausted() {
            Code::ResourceExhausted
        } else {
            Code::Internal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, reason: &str, message: &str) -> GceError {
        GceError::Api {
            method: "instances.insert",
            status,
            reason: Some(reason.into()),
            message: message.into(),
        }
    }

    fn op(code: &str) -> GceError {
        GceError::Operation {
            method: "instances.insert",
            operation: "operation-1".into(),
            code: code.into(),
            message: "m".into(),
        }
    }

    #[test]
    fn capacity_and_quota_operation_errors_are_resource_exhausted() {
        for c in CAPACITY_CODES {
            assert_eq!(op(c).code(), Code::ResourceExhausted, "{c}");
        }
        assert_eq!(op("QUOTA_EXCEEDED").code(), Code::ResourceExhausted);
        assert_eq!(
            op("REGIONAL_QUOTA_EXCEEDED").code(),
            Code::ResourceExhausted
        );
        assert_eq!(op("INVALID_FIELD_VALUE").code(), Code::Internal);
    }

    #[test]
    fn insert_answers_about_zone_offers_and_quota_are_resource_exhausted() {
        let e = api(
            400,
            "invalid",
            "Invalid value for field 'resource.machineType': 'zones/z/machineTypes/x'. Machine type with name 'x' does not exist in zone 'z'.",
        );
        assert_eq!(e.code(), Code::ResourceExhausted);
        assert_eq!(
            api(403, "QUOTA_EXCEEDED", "Quota 'CPUS' exceeded").code(),
            Code::ResourceExhausted
        );
        assert_eq!(
            api(403, "quotaExceeded", "q").code(),
            Code::ResourceExhausted
        );
    }

    #[test]
    fn other_answers_are_internal_and_throttling_is_recognised() {
        assert_eq!(api(409, "alreadyExists", "exists").code(), Code::Internal);
        assert_eq!(api(403, "forbidden", "no").code(), Code::Internal);
        assert!(api(403, "rateLimitExceeded", "slow down").is_throttling());
        assert!(api(429, "x", "y").is_throttling());
        assert!(!api(403, "forbidden", "no").is_throttling());
        let t = GceError::Transport {
            method: "instances.get",
            message: "connection refused".into(),
        };
        assert_eq!(t.code(), Code::Internal);
    }

    #[test]
    fn messages_name_the_method_status_and_reason() {
        assert_eq!(
            api(409, "alreadyExists", "The resource exists").to_string(),
            "instances.insert: HTTP 409 alreadyExists: The resource exists"
        );
        assert_eq!(
            op("ZONE_RESOURCE_POOL_EXHAUSTED").to_string(),
            "instances.insert: operation operation-1 failed: ZONE_RESOURCE_POOL_EXHAUSTED: m"
        );
    }
}
