//! ECS errors and their machine error codes.
//!
//! ECS answers errors with an HTTP 4xx/5xx status and a JSON envelope
//! `{"RequestId", "HostId", "Code", "Message", "Recommend"}`. The driver maps
//! the codes the way Gardener's provider does (the 13 RunInstances capacity,
//! quota and zone codes are `ResourceExhausted`, so that the autoscaler can
//! fall back to another zone or type) and goes further where a better code
//! exists: throttling and server errors are `Unavailable` (short retry),
//! credentials `Unauthenticated`, RAM denials `PermissionDenied`, malformed
//! RunInstances parameters `InvalidArgument`; the rest is `Internal`.

use mcm_driver::{Code, Status};

/// RunInstances error codes that mean "no capacity or quota here" (the
/// reference's list), answered as `ResourceExhausted`.
pub const RESOURCE_EXHAUSTED_CODES: [&str; 13] = [
    "QuotaExceed.DiskCapacity",
    "QuotaExceed.ElasticQuota",
    "OperationDenied.ZoneSystemCategoryNotMatch",
    "OperationDenied.CloudSSDNotSupported",
    "OperationDenied.ZoneNotAllowed",
    "OperationDenied.NoStock",
    "Zone.NotOnSale",
    "Zone.NotOpen",
    "InvalidVpcZone.NotSupported",
    "InvalidZoneId.NotSupportShareEncryptedImage",
    "InvalidResourceType.NotSupported",
    "InvalidInstanceType.ZoneNotSupported",
    "ResourceNotAvailable",
];

/// Error codes of a bad or unknown access key or signature.
const AUTH_CODES: [&str; 6] = [
    "InvalidAccessKeyId.NotFound",
    "InvalidAccessKeyId.Inactive",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "InvalidSecurityToken.Expired",
];

/// A failed ECS call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EcsError {
    /// ECS answered with an error envelope.
    #[error("{action}: {code}: {message} (HTTP {http_status}, RequestId {request_id})")]
    Api {
        /// The ECS action.
        action: String,
        /// The ECS error code, e.g. `OperationDenied.NoStock`.
        code: String,
        /// The ECS error message.
        message: String,
        /// The request ID, for Alibaba support.
        request_id: String,
        /// The HTTP status.
        http_status: u16,
    },
    /// No answer (connection, timeout).
    #[error("{action}: no answer from ECS: {message}")]
    Transport {
        /// The ECS action.
        action: String,
        /// What went wrong.
        message: String,
    },
    /// An answer that could not be read.
    #[error("{action}: unreadable answer from ECS: {message}")]
    Decode {
        /// The ECS action.
        action: String,
        /// What went wrong.
        message: String,
    },
}

impl EcsError {
    /// The ECS error code (empty for transport and decode errors).
    pub fn code(&self) -> &str {
        match self {
            EcsError::Api { code, .. } => code,
            _ => "",
        }
    }

    /// A throttling answer (`Throttling`, `Throttling.User`, `Throttling.Api`, ...
    /// or HTTP 429), which the client retries after pausing the action class.
    pub fn is_throttling(&self) -> bool {
        match self {
            EcsError::Api {
                code, http_status, ..
            } => code.starts_with("Throttling") || *http_status == 429,
            _ => false,
        }
    }

    /// A transient failure: no answer, or a server error.
    pub fn is_transient(&self) -> bool {
        match self {
            EcsError::Transport { .. } => true,
            EcsError::Api {
                code, http_status, ..
            } => *http_status >= 500 || code == "ServiceUnavailable" || code == "InternalError",
            EcsError::Decode { .. } => false,
        }
    }

    /// A capacity, quota or zone answer of RunInstances.
    pub fn is_resource_exhausted(&self) -> bool {
        let code = self.code();
        RESOURCE_EXHAUSTED_CODES.contains(&code)
            || code.starts_with("QuotaExceed.")
            || code.starts_with("QuotaExceeded.")
    }

    /// The machine status for a failure of `what` (e.g. "creating the VM of machine m").
    pub fn status(&self, what: &str) -> Status {
        let msg = format!("{what}: {self}");
        let code = self.code();
        if self.is_throttling() || self.is_transient() {
            Status::new(Code::Unavailable, msg)
        } else if AUTH_CODES.contains(&code) {
            Status::new(Code::Unauthenticated, msg)
        } else if code.starts_with("Forbidden") || code == "NoPermission" {
            Status::new(Code::PermissionDenied, msg)
        } else {
            Status::internal(msg)
        }
    }

    /// The machine status for a failed RunInstances: capacity and quota codes
    /// are `ResourceExhausted`, malformed or unknown parameters `InvalidArgument`.
    pub fn create_status(&self, what: &str) -> Status {
        let code = self.code();
        if self.is_resource_exhausted() {
            Status::new(Code::ResourceExhausted, format!("{what}: {self}"))
        } else if !self.is_throttling()
            && !self.is_transient()
            && (code.starts_with("Invalid") || code.starts_with("MissingParameter"))
            && !AUTH_CODES.contains(&code)
        {
            Status::invalid_argument(format!("{what}: {self}"))
        } else {
            self.status(what)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: &str, http_status: u16) -> EcsError {
        EcsError::Api {
            action: "RunInstances".into(),
            code: code.into(),
            message: "m".into(),
            request_id: "r-1".into(),
            http_status,
        }
    }

    #[test]
    fn no_stock_and_quota_codes_are_resource_exhausted_on_create() {
        for c in RESOURCE_EXHAUSTED_CODES
            .iter()
            .copied()
            .chain(["QuotaExceed.AfterpayInstance"])
        {
            assert_eq!(
                api(c, 403).create_status("create").code,
                Code::ResourceExhausted,
                "{c}"
            );
        }
    }

    #[test]
    fn other_codes_map_to_the_closest_machine_code() {
        let cases = [
            ("Throttling.User", 400, Code::Unavailable),
            ("Throttling.Resource", 429, Code::Unavailable),
            ("ServiceUnavailable", 503, Code::Unavailable),
            ("InternalError", 500, Code::Unavailable),
            ("InvalidAccessKeyId.NotFound", 404, Code::Unauthenticated),
            ("SignatureDoesNotMatch", 400, Code::Unauthenticated),
            ("Forbidden.RAM", 403, Code::PermissionDenied),
            ("InvalidImageId.NotFound", 404, Code::InvalidArgument),
            ("IncorrectInstanceStatus", 403, Code::Internal),
        ];
        for (c, s, want) in cases {
            assert_eq!(api(c, s).create_status("create").code, want, "{c}");
        }
        // Outside creation, an invalid parameter is the driver's fault.
        assert_eq!(
            api("InvalidParameter", 400).status("x").code,
            Code::Internal
        );
        let t = EcsError::Transport {
            action: "DescribeInstances".into(),
            message: "refused".into(),
        };
        assert_eq!(t.status("x").code, Code::Unavailable);
    }

    #[test]
    fn messages_name_the_action_code_and_request_id() {
        let s = api("OperationDenied.NoStock", 403).create_status("creating the VM of machine m1");
        assert_eq!(
            s.message,
            "creating the VM of machine m1: RunInstances: OperationDenied.NoStock: m (HTTP 403, RequestId r-1)"
        );
    }
}
