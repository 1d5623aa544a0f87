//! `mcm driver serve` over TCP with TLS: the binary's --tls-cert, --tls-key
//! and --tls-client-ca flags serve a controller holding a certificate of the
//! client CA and refuse one holding a certificate of another CA. The test
//! certificates are the gRPC crate's (crates/driver-grpc/tests/data/tls).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

#[cfg(feature = "grpc")]
mod with_grpc {
    use mcm_driver::Code;
    use mcm_driver_grpc::{ClientOptions, ClientTls, Endpoint, GrpcDriver};
    use mcm_testenv::KillOnDrop;
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    fn pem(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../driver-grpc/tests/data/tls")
            .join(name)
    }

    fn client(endpoint: &Endpoint, cert: &str, key: &str) -> GrpcDriver {
        let tls = ClientTls::from_files(&pem("ca.pem"), &pem(cert), &pem(key)).expect("TLS files");
        let options = ClientOptions {
            info_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            tls: Some(tls),
            ..Default::default()
        };
        GrpcDriver::new("local", endpoint, options).expect("client")
    }

    #[tokio::test]
    async fn driver_serve_with_tls_flags_serves_the_client_ca_only() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let _driver = KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_mcm"))
                .args(["driver", "serve", "--provider", "local"])
                .arg(format!("--listen=tcp://127.0.0.1:{port}"))
                .arg("--tls-cert")
                .arg(pem("server.pem"))
                .arg("--tls-key")
                .arg(pem("server-key.pem"))
                .arg("--tls-client-ca")
                .arg(pem("ca.pem"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn mcm driver serve"),
        );
        let endpoint = Endpoint::parse(&format!("https://127.0.0.1:{port}")).expect("endpoint");
        let ours = client(&endpoint, "client.pem", "client-key.pem");
        let mut last = None;
        for _ in 0..300 {
            match ours.handshake().await {
                Ok(h) => {
                    assert_eq!(h.info.providers, ["local"]);
                    last = None;
                    break;
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(last.is_none(), "never served over TLS: {last:?}");

        let theirs = client(&endpoint, "other-client.pem", "other-client-key.pem");
        let err = theirs.handshake().await.expect_err("another CA is refused");
        assert_eq!(err.code, Code::Unavailable, "{err}");
    }
}
