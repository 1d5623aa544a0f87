//! What every request must pass before a handler sees it: the API has no
//! authentication and listens on loopback, so it must not be reachable from
//! a web page either.
//!
//! - **Host**: a loopback name or address (`localhost`, `127.0.0.1`,
//!   `[::1]`, any `127.x.y.z`), the listen address, or a name given with
//!   `--allowed-host`. A page on `http://evil.example` whose name was
//!   re-pointed at 127.0.0.1 (DNS rebinding) sends `Host: evil.example` and
//!   is refused with 403.
//! - **Content type**: `POST`, `PUT` and `PATCH` must say
//!   `Content-Type: application/json` (what [`crate::LocalDriver`] and
//!   [`crate::AdminClient`] send). A cross-site form or `fetch` without a
//!   CORS preflight can only send `text/plain`, `multipart/form-data` or
//!   `application/x-www-form-urlencoded`: they are refused with 415.
//!   (`DELETE` and the others always need a preflight, which this server
//!   never grants.)

use crate::wire::ErrorBody;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mcm_driver::Code;
use std::net::IpAddr;
use std::sync::Arc;
use tracing::warn;

/// The hosts a request may name.
#[derive(Debug, Clone)]
pub(super) struct Guard {
    listen: IpAddr,
    allowed_hosts: Vec<String>,
}

impl Guard {
    pub(super) fn new(listen: IpAddr, allowed_hosts: &[String]) -> Guard {
        Guard {
            listen,
            allowed_hosts: allowed_hosts.iter().map(|h| normalize(h)).collect(),
        }
    }

    /// Whether a `Host` value (`name`, `name:port`, `[v6]:port`) is acceptable.
    pub(super) fn host_allowed(&self, host: &str) -> bool {
        let name = normalize(strip_port(host.trim()));
        if name.is_empty() {
            return false;
        }
        if name == "localhost" || self.allowed_hosts.contains(&name) {
            return true;
        }
        match name.parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback() || (ip == self.listen && !ip.is_unspecified()),
            Err(_) => false,
        }
    }
}

fn normalize(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// `name:port` → `name`; `[v6]:port` and `[v6]` → `v6`; a bare IPv6 address stays.
fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// Whether a request of `method` with these headers has an acceptable content type.
pub(super) fn content_type_allowed(method: &Method, headers: &HeaderMap) -> bool {
    if !matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
        return true;
    }
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

fn refuse(status: StatusCode, code: Code, message: String) -> Response {
    let body = ErrorBody {
        code: code.name(),
        message,
    };
    (status, Json(body)).into_response()
}

/// The middleware: checks Host and Content-Type, then hands the request on.
pub(super) async fn check(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_string()))
        .unwrap_or_default();
    if !guard.host_allowed(&host) {
        warn!(host = %host, path = %req.uri().path(), "refusing a request for a host that is not this cloud");
        return refuse(
            StatusCode::FORBIDDEN,
            Code::PermissionDenied,
            format!(
                "host {host:?} is not allowed: use a loopback address or localhost (or start the cloud with --allowed-host)"
            ),
        );
    }
    if !content_type_allowed(req.method(), req.headers()) {
        let got = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_string();
        warn!(content_type = %got, path = %req.uri().path(), "refusing a request body that is not JSON");
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::InvalidArgument,
            format!("Content-Type {got:?} is not accepted: send application/json"),
        );
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use std::net::Ipv4Addr;

    fn loopback_guard() -> Guard {
        Guard::new(IpAddr::V4(Ipv4Addr::LOCALHOST), &[])
    }

    #[test]
    fn loopback_names_and_addresses_are_allowed() {
        let g = loopback_guard();
        for host in [
            "127.0.0.1:7070",
            "127.0.0.1",
            "127.3.4.5:80",
            "localhost:7070",
            "LOCALHOST.",
            "[::1]:7070",
            "[::1]",
            "::1",
        ] {
            assert!(g.host_allowed(host), "{host}");
        }
    }

    #[test]
    fn other_names_and_addresses_are_refused() {
        let g = loopback_guard();
        for host in [
            "evil.example:7070",
            "evil.example",
            "localhost.evil.example",
            "10.0.0.1:7070",
            "0.0.0.0:7070",
            "[fd00::1]:7070",
            "",
            ":7070",
        ] {
            assert!(!g.host_allowed(host), "{host}");
        }
    }

    #[test]
    fn the_listen_address_and_allowed_hosts_are_allowed() {
        let g = Guard::new(
            "192.168.1.5".parse().expect("ip"),
            &["Cloud.Example".to_string()],
        );
        assert!(g.host_allowed("192.168.1.5:7070"));
        assert!(g.host_allowed("cloud.example:7070"));
        assert!(!g.host_allowed("192.168.1.6:7070"));
        let any = Guard::new("0.0.0.0".parse().expect("ip"), &[]);
        assert!(!any.host_allowed("0.0.0.0:7070"));
        assert!(!any.host_allowed("192.168.1.5:7070"));
    }

    #[test]
    fn bodies_must_be_json() {
        let with = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(ct).expect("value"),
            );
            h
        };
        assert!(content_type_allowed(
            &Method::POST,
            &with("application/json")
        ));
        assert!(content_type_allowed(
            &Method::PATCH,
            &with("Application/JSON; charset=utf-8")
        ));
        for ct in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            assert!(!content_type_allowed(&Method::POST, &with(ct)), "{ct}");
        }
        assert!(!content_type_allowed(&Method::POST, &HeaderMap::new()));
        assert!(!content_type_allowed(&Method::PUT, &HeaderMap::new()));
        assert!(content_type_allowed(&Method::GET, &HeaderMap::new()));
        assert!(content_type_allowed(&Method::DELETE, &HeaderMap::new()));
    }
}
