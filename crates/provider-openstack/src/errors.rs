//! Errors of the OpenStack calls and their machine error codes.
//!
//! The mapping follows the reference (design: providers/openstack.md, "Errors"): not found
//! → `NotFound`, several found → `OutOfRange`, HTTP 401 → `Unauthenticated`,
//! 403 → `PermissionDenied`, a flavor that does not exist or Nova's "No valid
//! host was found" → `ResourceExhausted`, the rest → `Internal`. On top of it,
//! quota answers (Nova's 403 "Quota exceeded", 413 `overLimit`, Neutron's 409
//! `OverQuota`) are `ResourceExhausted` so that the autoscaler can fall back,
//! and a cloud that cannot be reached or throttles (429, 503) is `Unavailable`
//! (a short retry).

use mcm_driver::Code;

/// Part of Nova's scheduler message when no hypervisor fits.
pub const NO_VALID_HOST: &str = "No valid host was found";
/// Part of the message of a flavor that cannot be resolved.
pub const FLAVOR_NOT_FOUND: &str = "error resolving flavor";

/// An error of an OpenStack call or of the driver's logic around it.
#[derive(Debug, thiserror::Error)]
pub enum OsError {
    /// The cloud answered with an HTTP error.
    #[error("{op}: HTTP {status}: {message}")]
    Api {
        /// The operation, e.g. `nova.servers.create`.
        op: &'static str,
        /// HTTP status.
        status: u16,
        /// The cloud's message (from its error envelope).
        message: String,
    },
    /// The cloud could not be reached, or the answer could not be read.
    #[error("{op}: {message}")]
    Transport {
        /// The operation.
        op: &'static str,
        /// What went wrong.
        message: String,
    },
    /// Authentication or catalog set-up failed.
    #[error("failed to construct OpenStack client: {0}")]
    Connect(String),
    /// A look-up found nothing.
    #[error("{0}: resource not found")]
    NotFound(String),
    /// A look-up that must be unique found several.
    #[error("{0}: multiple resources found")]
    MultipleFound(String),
    /// The flavor does not exist (here): the class cannot be served in this region.
    #[error(
        "error resolving flavor ID from flavor name {0:?}: Unable to find flavor with name {0}"
    )]
    FlavorNotFound(String),
    /// A server or volume reached a failed state, or did not finish in time.
    #[error("{0}")]
    Failed(String),
    /// The Secret holds something unusable (e.g. a client key that is not PEM).
    #[error("{0}")]
    InvalidSecret(String),
}

impl OsError {
    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            OsError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the cloud answered 404.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// The machine error code (see the module documentation).
    pub fn code(&self) -> Code {
        let text = self.to_string();
        if text.contains(NO_VALID_HOST) || text.contains(FLAVOR_NOT_FOUND) {
            return Code::ResourceExhausted;
        }
        match self {
            OsError::NotFound(_) => Code::NotFound,
            OsError::MultipleFound(_) => Code::OutOfRange,
            OsError::FlavorNotFound(_) => Code::ResourceExhausted,
            OsError::InvalidSecret(_) => Code::InvalidArgument,
            OsError::Transport { .. } => Code::Unavailable,
            OsError::Connect(m) if m.contains("HTTP 401") => Code::Unauthenticated,
            OsError::Connect(m) if m.contains("HTTP 403") => Code::PermissionDenied,
            OsError::Connect(_) => Code::Unavailable,
            OsError::Api {
                status, message, ..
            } => {
                let quota = message.to_ascii_lowercase().contains("quota");
                match *status {
                    401 => Code::Unauthenticated,
                    403 if quota => Code::ResourceExhausted,
                    403 => Code::PermissionDenied,
                    409 if quota => Code::ResourceExhausted,
                    413 => Code::ResourceExhausted,
                    429 | 502 | 503 | 504 => Code::Unavailable,
                    _ => Code::Internal,
                }
            }
            OsError::Failed(_) => Code::Internal,
        }
    }
}

/// The message of an OpenStack error body: Nova and Cinder wrap it as
/// `{"<kind>": {"message"}}`, Neutron as `{"NeutronError": {"message"}}`,
/// Keystone as `{"error": {"message"}}`.
pub fn error_message(body: &serde_json::Value) -> Option<String> {
    if let Some(m) = body.get("message").and_then(|m| m.as_str()) {
        return Some(m.to_string());
    }
    body.as_object()?.values().find_map(|v| {
        v.get("message")
            .and_then(|m| m.as_str())
            .map(str::to_string)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, message: &str) -> OsError {
        OsError::Api {
            op: "nova.servers.create",
            status,
            message: message.into(),
        }
    }

    #[test]
    fn codes_follow_the_reference_mapping_plus_quota_and_unavailable() {
        assert_eq!(OsError::NotFound("x".into()).code(), Code::NotFound);
        assert_eq!(OsError::MultipleFound("x".into()).code(), Code::OutOfRange);
        assert_eq!(api(401, "auth").code(), Code::Unauthenticated);
        assert_eq!(
            api(403, "Policy doesn't allow").code(),
            Code::PermissionDenied
        );
        assert_eq!(
            api(403, "Quota exceeded for instances: Requested 1").code(),
            Code::ResourceExhausted
        );
        assert_eq!(
            api(409, "Quota exceeded for resources: ['port']").code(),
            Code::ResourceExhausted
        );
        assert_eq!(api(413, "overLimit").code(), Code::ResourceExhausted);
        assert_eq!(
            api(500, "No valid host was found. There are not enough hosts").code(),
            Code::ResourceExhausted
        );
        assert_eq!(
            OsError::FlavorNotFound("m1".into()).code(),
            Code::ResourceExhausted
        );
        assert_eq!(api(500, "boom").code(), Code::Internal);
        assert_eq!(api(409, "Port is still in use").code(), Code::Internal);
        assert_eq!(api(503, "down").code(), Code::Unavailable);
        assert_eq!(
            OsError::Failed("server reached unexpected status \"ERROR\"".into()).code(),
            Code::Internal
        );
    }

    #[test]
    fn error_messages_are_read_from_every_service_envelope() {
        let nova = serde_json::json!({"forbidden": {"code": 403, "message": "Quota exceeded"}});
        let neutron = serde_json::json!({"NeutronError": {"type": "OverQuota", "message": "over", "detail": ""}});
        let keystone =
            serde_json::json!({"error": {"code": 401, "message": "nope", "title": "Unauthorized"}});
        assert_eq!(error_message(&nova).as_deref(), Some("Quota exceeded"));
        assert_eq!(error_message(&neutron).as_deref(), Some("over"));
        assert_eq!(error_message(&keystone).as_deref(), Some("nope"));
    }
}
