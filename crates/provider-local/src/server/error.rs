//! The API's error answers: `{code, message}` with a machine code name and
//! a matching HTTP status.

use crate::store::StoreError;
use crate::wire::ErrorBody;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mcm_driver::Code;
use serde::de::DeserializeOwned;
use tracing::warn;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ErrorKind {
    Plain,
    Throttled,
    Injected,
}

/// An error answer of the API.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(super) code: Code,
    pub(super) message: String,
    pub(super) kind: ErrorKind,
}

impl ApiError {
    pub(super) fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            kind: ErrorKind::Plain,
        }
    }

    pub(super) fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(Code::InvalidArgument, message)
    }

    pub(super) fn not_found(id: &str) -> Self {
        ApiError::new(
            Code::NotFound,
            format!("InvalidInstanceID.NotFound: the instance {id} does not exist"),
        )
    }

    pub(super) fn injected(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            kind: ErrorKind::Injected,
        }
    }

    pub(super) fn store(e: StoreError) -> Self {
        warn!(error = %e, "store write failed");
        ApiError::new(Code::Internal, format!("the cloud's store failed: {e}"))
    }
}

fn http_status(code: Code) -> StatusCode {
    match code {
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
            StatusCode::BAD_REQUEST
        }
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code.name(),
            message: self.message,
        };
        (http_status(self.code), Json(body)).into_response()
    }
}

pub(super) fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("request body: {e}")))
}
