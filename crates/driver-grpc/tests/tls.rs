//! TCP with TLS and client certificates: a controller with a certificate of
//! the driver's client CA is served; one without a certificate, with one of
//! another CA, or that does not trust the driver's CA is refused before any
//! driver call. Plain TCP is refused off loopback on both sides. The test
//! certificates are in tests/data/tls (README there).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use mcm_driver::{Code, Driver};
use mcm_driver_grpc::{
    pb, ClientOptions, ClientTls, Endpoint, GrpcDriver, ServeError, ServeOptions, ServerTls,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn pem(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/tls")
        .join(name)
}

fn server_tls() -> ServerTls {
    ServerTls::from_files(&pem("server.pem"), &pem("server-key.pem"), &pem("ca.pem"))
        .expect("server TLS files")
}

fn client_tls(server_ca: &str, cert: &str, key: &str) -> ClientTls {
    ClientTls::from_files(&pem(server_ca), &pem(cert), &pem(key)).expect("client TLS files")
}

fn options(tls: ClientTls) -> ClientOptions {
    ClientOptions {
        call_timeout: Duration::from_secs(5),
        info_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        tls: Some(tls),
    }
}

/// A free port on 127.0.0.1 (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Serves the local driver with TLS on `https://<host>:<port>`; returns
/// the endpoint once the port accepts connections.
async fn serve_tls(cloud: &Cloud, host: &str) -> (Endpoint, tokio::sync::oneshot::Sender<()>) {
    let port = free_port();
    let endpoint = Endpoint::parse(&format!("https://{host}:{port}")).expect("endpoint");
    let mut opts = ServeOptions::new(endpoint.clone());
    opts.tls = Some(server_tls());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let driver = local_driver(&cloud.url);
    tokio::spawn(async move {
        mcm_driver_grpc::serve_with_shutdown(driver, local_info(), opts, async {
            let _ = rx.await;
        })
        .await
        .expect("serve");
    });
    for _ in 0..200 {
        if tokio::net::TcpStream::connect((host, port)).await.is_ok() {
            return (endpoint, tx);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("port {port} never accepted");
}

#[tokio::test]
async fn a_controller_with_a_certificate_of_the_drivers_client_ca_is_served() {
    let cloud = cloud().await;
    for host in ["127.0.0.1", "localhost"] {
        let (endpoint, _stop) = serve_tls(&cloud, host).await;
        let d = GrpcDriver::new(
            "local",
            &endpoint,
            options(client_tls("ca.pem", "client.pem", "client-key.pem")),
        )
        .expect("client");
        let req = request(&machine("tls"), &class("tls"));
        let created = d.create_machine(&req).await.expect("create over TLS");
        assert!(!created.provider_id.is_empty());
        d.delete_machine(&req).await.expect("delete over TLS");
    }
    assert!(cloud.admin.instances().await.expect("instances").is_empty());
}

/// The call is refused, and it reached no driver: no VM exists.
async fn assert_refused(cloud: &Cloud, d: &GrpcDriver) {
    let req = request(&machine("refused"), &class("refused"));
    let err = d.create_machine(&req).await.expect_err("refused");
    assert_eq!(err.code, Code::Unavailable, "{err}");
    assert!(
        cloud.admin.instances().await.expect("instances").is_empty(),
        "a refused client made a VM"
    );
}

#[tokio::test]
async fn a_client_certificate_of_another_ca_is_refused() {
    let cloud = cloud().await;
    let (endpoint, _stop) = serve_tls(&cloud, "127.0.0.1").await;
    let d = GrpcDriver::new(
        "local",
        &endpoint,
        options(client_tls(
            "ca.pem",
            "other-client.pem",
            "other-client-key.pem",
        )),
    )
    .expect("client");
    assert_refused(&cloud, &d).await;
}

#[tokio::test]
async fn a_controller_that_does_not_trust_the_drivers_ca_refuses_it() {
    let cloud = cloud().await;
    let (endpoint, _stop) = serve_tls(&cloud, "127.0.0.1").await;
    let d = GrpcDriver::new(
        "local",
        &endpoint,
        options(client_tls("other-ca.pem", "client.pem", "client-key.pem")),
    )
    .expect("client");
    assert_refused(&cloud, &d).await;
}

#[tokio::test]
async fn a_driver_certificate_for_another_name_is_refused() {
    let cloud = cloud().await;
    let (endpoint, _stop) = serve_tls(&cloud, "127.0.0.1").await;
    let mut tls = client_tls("ca.pem", "client.pem", "client-key.pem");
    tls.server_name = Some("driver.elsewhere.example".into());
    let d = GrpcDriver::new("local", &endpoint, options(tls)).expect("client");
    assert_refused(&cloud, &d).await;
}

/// A raw gRPC client (not `GrpcDriver`, which always sends a certificate).
async fn raw_info(uri: String, tls: Option<tonic::transport::ClientTlsConfig>) -> tonic::Status {
    let mut ep = tonic::transport::Endpoint::from_shared(uri)
        .expect("uri")
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5));
    if let Some(tls) = tls {
        ep = ep.tls_config(tls).expect("tls config");
    }
    let mut c = pb::driver_client::DriverClient::new(ep.connect_lazy());
    c.info(pb::InfoRequest::default())
        .await
        .expect_err("refused")
}

#[tokio::test]
async fn a_client_without_a_certificate_or_without_tls_is_refused() {
    let cloud = cloud().await;
    let (endpoint, _stop) = serve_tls(&cloud, "127.0.0.1").await;
    let addr = endpoint.to_string().replace("https://", "");
    let ca = std::fs::read(pem("ca.pem")).expect("ca");
    let no_cert = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .domain_name("127.0.0.1");
    let s = raw_info(format!("https://{addr}"), Some(no_cert)).await;
    // The handshake fails (TLS 1.3 reports it with the first request).
    assert!(
        matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown),
        "{s}"
    );
    assert!(format!("{s:?}").contains("Certificate"), "{s:?}");
    let s = raw_info(format!("http://{addr}"), None).await;
    assert_ne!(s.code(), tonic::Code::Ok, "{s}");
    assert!(cloud.admin.instances().await.expect("instances").is_empty());
}

async fn serve_err(listen: &str, tls: Option<ServerTls>) -> ServeError {
    let cloud = cloud().await;
    let mut opts = ServeOptions::new(Endpoint::parse(listen).expect("endpoint"));
    opts.tls = tls;
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        mcm_driver_grpc::serve(local_driver(&cloud.url), local_info(), opts),
    )
    .await
    .expect("refused at once, not served");
    r.expect_err("refused")
}

#[tokio::test]
async fn plain_tcp_off_loopback_an_https_listen_without_tls_and_tls_on_a_socket_are_refused() {
    for listen in [
        "tcp://0.0.0.0:0",
        "tcp://[::]:0",
        "tcp://driver.example:7000",
    ] {
        let e = serve_err(listen, None).await;
        assert!(
            matches!(e, ServeError::PlainTcpNotLoopback(_)),
            "{listen}: {e}"
        );
        let text = e.to_string();
        assert!(
            text.contains("not a loopback address") && text.contains("--tls-client-ca"),
            "{text}"
        );
    }
    let e = serve_err("https://127.0.0.1:0", None).await;
    assert!(e.to_string().contains("needs --tls-cert"), "{e}");
    let e = serve_err("unix:///tmp/mcm-tls-test/driver.sock", Some(server_tls())).await;
    assert!(e.to_string().contains("TLS applies to TCP"), "{e}");
}

#[tokio::test]
async fn plain_tcp_on_loopback_is_served_and_tls_on_any_address_is_allowed() {
    let cloud = cloud().await;
    let port = free_port();
    let endpoint = Endpoint::parse(&format!("tcp://127.0.0.1:{port}")).expect("endpoint");
    let driver = local_driver(&cloud.url);
    let opts = ServeOptions::new(endpoint.clone());
    tokio::spawn(mcm_driver_grpc::serve(driver, local_info(), opts));
    let d = GrpcDriver::new("local", &endpoint, ClientOptions::default()).expect("client");
    let mut answered = false;
    for _ in 0..200 {
        if d.handshake().await.is_ok() {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(answered, "plain TCP on loopback is served");

    // TLS on the wildcard address: `tcp://` with TLS settings is TLS.
    let port = free_port();
    let mut opts =
        ServeOptions::new(Endpoint::parse(&format!("tcp://0.0.0.0:{port}")).expect("ep"));
    opts.tls = Some(server_tls());
    tokio::spawn(mcm_driver_grpc::serve(
        local_driver(&cloud.url),
        local_info(),
        opts,
    ));
    let d = GrpcDriver::new(
        "local",
        &Endpoint::parse(&format!("https://127.0.0.1:{port}")).expect("ep"),
        options(client_tls("ca.pem", "client.pem", "client-key.pem")),
    )
    .expect("client");
    let mut answered = false;
    for _ in 0..200 {
        if d.handshake().await.is_ok() {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(answered, "TLS on 0.0.0.0 is served");
}

#[tokio::test]
async fn the_client_refuses_plain_tcp_off_loopback_and_https_without_its_certificate() {
    let e = GrpcDriver::new(
        "aws",
        &Endpoint::parse("tcp://10.0.0.1:7000").expect("ep"),
        ClientOptions::default(),
    )
    .expect_err("refused");
    assert!(e.to_string().contains("loopback"), "{e}");
    let e = GrpcDriver::new(
        "aws",
        &Endpoint::parse("https://driver:7443").expect("ep"),
        ClientOptions::default(),
    )
    .expect_err("refused");
    assert!(e.to_string().contains("--driver-tls-cert"), "{e}");
}
