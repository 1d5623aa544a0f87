//! Neither side of the hop logs secret data: every log line of both, at
//! TRACE and including the transport libraries', is captured while machines
//! with a recognisable secret are created, probed, refused and deleted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use k8s_openapi::ByteString;
use mcm_driver::Driver;
use mcm_driver_grpc::ClientOptions;
use std::io::Write;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// One thread, and the subscriber is this thread's: the other tests of the
// binary set the global one, and every task of this test (client, server,
// local cloud, transport) runs here.
#[tokio::test(flavor = "current_thread")]
async fn secret_values_appear_in_no_log_line_of_client_or_server() {
    let captured = Captured::default();
    let writer = captured.clone();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish(),
    );

    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let (_stop, _task) = serve_on(local_driver(&cloud.url), local_info(), &socket).await;
    let d = client("local", &socket, ClientOptions::default());
    let mut req = request(&machine("secret"), &class("secret"));
    req.secret.data = Some(
        [
            (
                "userData".to_string(),
                ByteString(b"TOP-SECRET-USERDATA-1234".to_vec()),
            ),
            (
                "accessKeyID".to_string(),
                ByteString(b"TOP-SECRET-KEY-5678".to_vec()),
            ),
        ]
        .into(),
    );
    d.create_machine(&req).await.expect("create");
    let _ = d.get_machine_status(&req).await;
    let mut bad = req.clone();
    bad.machine_class.provider_spec = serde_json::json!({});
    let _ = d.create_machine(&bad).await.expect_err("invalid");
    d.delete_machine(&req).await.expect("delete");

    let text = String::from_utf8(captured.0.lock().expect("log").clone()).expect("utf-8");
    assert!(
        text.contains("CreateMachine"),
        "the calls were logged at all:\n{text}"
    );
    for secret in ["TOP-SECRET-USERDATA-1234", "TOP-SECRET-KEY-5678"] {
        assert!(!text.contains(secret), "{secret} was logged");
    }
    // Nor their base64 form (the JSON of the Secret on the wire).
    assert!(
        !text.contains("VE9QLVNFQ1JFVC"),
        "a base64 secret value was logged"
    );
}
