//! The local cloud refuses what a web page could send it: a request naming
//! another Host (DNS rebinding) and a body that is not JSON (a cross-site
//! form or `text/plain` fetch), and nothing changes when it does.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use mcm_provider_local::Tunables;
use serde_json::json;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends one raw HTTP/1.1 request and returns the status code and body.
async fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.expect("write");
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.expect("read");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

fn create_body() -> String {
    json!({"clientToken": "uid-guard", "machineName": "guard-1", "providerSpec": spec("guard")})
        .to_string()
}

#[tokio::test]
async fn a_foreign_host_is_refused_and_loopback_hosts_are_served() {
    let cloud = start(Tunables::unlimited()).await;
    let addr = cloud.handle.addr();
    let port = addr.port().to_string();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let (status, _) = raw(addr, "GET", "/admin/instances", &[("Host", &host)], "").await;
        assert_eq!(status, 200, "Host {host}");
    }
    for host in [format!("evil.example:{port}"), "10.1.2.3".to_string()] {
        let (status, body) = raw(addr, "GET", "/admin/instances", &[("Host", &host)], "").await;
        assert_eq!(status, 403, "Host {host}: {body}");
        assert!(body.contains("PermissionDenied"), "{body}");
        let (status, _) = raw(
            addr,
            "POST",
            "/v1/instances",
            &[("Host", &host), ("Content-Type", "application/json")],
            &create_body(),
        )
        .await;
        assert_eq!(status, 403, "Host {host}");
    }
    assert!(
        cloud.admin.instances().await.expect("list").is_empty(),
        "nothing was created"
    );
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn bodies_that_are_not_json_are_refused_and_change_nothing() {
    let cloud = start(Tunables::unlimited()).await;
    let addr = cloud.handle.addr();
    let host = format!("127.0.0.1:{}", addr.port());
    for ct in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
    ] {
        let (status, body) = raw(
            addr,
            "POST",
            "/v1/instances",
            &[("Host", &host), ("Content-Type", ct)],
            &create_body(),
        )
        .await;
        assert_eq!(status, 415, "{ct}: {body}");
        let (status, _) = raw(
            addr,
            "PUT",
            "/admin/faults",
            &[("Host", &host), ("Content-Type", ct)],
            r#"{"create": {"errorRate": 1.0}}"#,
        )
        .await;
        assert_eq!(status, 415, "{ct}");
    }
    // No content type at all (a body-less cross-site POST) is refused too.
    let (status, _) = raw(
        addr,
        "POST",
        "/admin/instances/i-00000000000000000/kill",
        &[("Host", &host)],
        "",
    )
    .await;
    assert_eq!(status, 415);
    assert!(
        cloud.admin.instances().await.expect("list").is_empty(),
        "nothing was created"
    );
    assert_eq!(
        cloud
            .admin
            .tunables()
            .await
            .expect("tunables")
            .create
            .error_rate,
        0.0
    );

    // The same create as JSON is served.
    let (status, body) = raw(
        addr,
        "POST",
        "/v1/instances",
        &[
            ("Host", &host),
            ("Content-Type", "application/json; charset=utf-8"),
        ],
        &create_body(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(cloud.admin.instances().await.expect("list").len(), 1);
    cloud.handle.shutdown().await.expect("shutdown");
}
