//! The local provider out of process: the conformance kit and the contract's
//! codes through a `GrpcDriver` → Unix socket → `serve` → `LocalDriver` hop.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use mcm_driver::conformance::{run_all, Fixture};
use mcm_driver::{Code, Driver};
use mcm_driver_grpc::ClientOptions;
use serde_json::{json, Value};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_kit_passes_for_the_local_provider_over_a_unix_socket() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let (_stop, _task) = serve_on(local_driver(&cloud.url), local_info(), &socket).await;
    let d = client("local", &socket, ClientOptions::default());
    let mine = class("conformance-a");
    let fixture = Fixture {
        class: mine.clone(),
        other_class: class("conformance-b"),
        secret: Default::default(),
        new_machine: Box::new(|_| machine("conf")),
        invalid_classes: vec![
            (class_with("null", Value::Null), "providerSpec".to_string()),
            (
                class_with("empty", json!({})),
                "providerSpec.image".to_string(),
            ),
            (
                class_with("no-tags", json!({"image": "i", "instanceType": "t"})),
                "providerSpec.tags".to_string(),
            ),
        ],
    };
    let failures = run_all(&d, &fixture).await;
    assert!(failures.is_empty(), "conformance failures: {failures:#?}");
    let left = d.list_machines(&list_request(&mine)).await.expect("list");
    assert!(left.machine_list.is_empty(), "{:?}", left.machine_list);
}

#[tokio::test]
async fn uninitialized_survives_the_hop_with_the_vm_identity_and_the_reference_text() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let (_stop, _task) = serve_on(local_driver(&cloud.url), local_info(), &socket).await;
    let d = client("local", &socket, ClientOptions::default());
    let c = class("init");
    let req = request(&machine("init"), &c);
    let created = d.create_machine(&req).await.expect("create");

    let err = d.get_machine_status(&req).await.expect_err("uninitialized");
    assert_eq!(err.code, Code::Uninitialized, "{err}");
    assert!(
        err.to_string()
            .starts_with("machine codes error: code = [Uninitialized] message = ["),
        "{err}"
    );
    let in_process = local_driver(&cloud.url)
        .get_machine_status(&req)
        .await
        .expect_err("uninitialized in process");
    assert_eq!(
        err.message, in_process.message,
        "the provider's text is preserved"
    );
    let id = err.machine.expect("identity attached");
    assert_eq!(id.provider_id, created.provider_id);
    assert_eq!(id.node_name, created.node_name);

    d.initialize_machine(&req).await.expect("initialize");
    let ok = d.get_machine_status(&req).await.expect("initialized");
    assert_eq!(ok.provider_id, created.provider_id);
    d.delete_machine(&req).await.expect("delete");
    let gone = d.get_machine_status(&req).await.expect_err("gone");
    assert_eq!(gone.code, Code::NotFound);
}

#[tokio::test]
async fn the_socket_and_its_directory_are_private_to_the_driver_user() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let (stop, task) = serve_on(local_driver(&cloud.url), local_info(), &socket).await;
    let meta = std::fs::metadata(&socket).expect("socket");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let dir = std::fs::metadata(socket.parent().expect("dir")).expect("dir");
    assert_eq!(dir.permissions().mode() & 0o777, 0o700);
    stop.send(()).expect("stop");
    task.await.expect("server ends");
    assert!(!socket.exists(), "the socket is removed on shutdown");
}

#[tokio::test]
async fn a_stale_socket_is_replaced_and_a_regular_file_is_never_removed() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    std::fs::create_dir_all(socket.parent().expect("dir")).expect("dir");
    // A socket left behind by a driver that died.
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("stale socket"));
    let (_stop, _task) = serve_on(local_driver(&cloud.url), local_info(), &socket).await;

    let file = cloud.dir.path().join("not-a-socket");
    std::fs::write(&file, b"keep me").expect("file");
    let err = mcm_driver_grpc::serve(
        local_driver(&cloud.url),
        local_info(),
        mcm_driver_grpc::ServeOptions::new(mcm_driver_grpc::Endpoint::Unix(file.clone())),
    )
    .await
    .expect_err("refused");
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&file).expect("kept"), b"keep me");
}

#[tokio::test]
async fn a_driver_serving_another_provider_is_refused_with_a_clear_message() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let mut info = local_info();
    info.providers = vec!["aws".into()];
    let (_stop, _task) = serve_on(local_driver(&cloud.url), info, &socket).await;
    let d = client("local", &socket, ClientOptions::default());
    let req = request(&machine("mismatch"), &class("mismatch"));
    let err = d.create_machine(&req).await.expect_err("refused");
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    assert!(
        err.message
            .contains("serves the providers [\"aws\"], not local"),
        "{}",
        err.message
    );
    assert!(
        cloud.admin.instances().await.expect("instances").is_empty(),
        "no VM was created"
    );
}

#[tokio::test]
async fn a_class_of_a_provider_the_driver_does_not_serve_is_refused() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let (_stop, _task) = serve_on(local_driver(&cloud.url), local_info(), &socket).await;
    let d = client("local", &socket, ClientOptions::default());
    let mut c = class("other");
    c.provider = "gcp".into();
    let err = d
        .create_machine(&request(&machine("other"), &c))
        .await
        .expect_err("refused");
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    assert!(
        err.message
            .contains("MachineClass class-other has provider gcp"),
        "{}",
        err.message
    );
    assert!(cloud.admin.instances().await.expect("instances").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_place_check_and_optional_operations_cross_the_hop() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let (_stop, _task) = serve_on(local_driver(&cloud.url), local_info(), &socket).await;
    let d = client("local", &socket, ClientOptions::default());
    let a = spec("x");
    let mut b = spec("x");
    b["instanceType"] = json!("local.large");
    let local = local_driver(&cloud.url);
    assert_eq!(d.in_place_changes(&a, &b), local.in_place_changes(&a, &b));
    assert_eq!(
        d.provider_spec_warnings(&a),
        local.provider_spec_warnings(&a)
    );
    let vols = d
        .get_volume_ids(&mcm_driver::GetVolumeIdsRequest::default())
        .await
        .expect("volumes");
    assert!(vols.volume_ids.is_empty());
}

#[tokio::test]
async fn operations_the_driver_does_not_declare_answer_the_contract_default_without_a_call() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let mut info = local_info();
    info.operations = Some(vec![]);
    let (_stop, _task) = serve_on(local_driver(&cloud.url), info, &socket).await;
    let d = client("local", &socket, ClientOptions::default());
    let req = request(&machine("noinit"), &class("noinit"));
    d.create_machine(&req).await.expect("create");
    let err = d.initialize_machine(&req).await.expect_err("unimplemented");
    assert_eq!(err.code, Code::Unimplemented);
    let a = spec("x");
    let mut b = spec("x");
    b["tags"]["extra"] = json!("1");
    let c = d.in_place_changes(&a, &b);
    assert!(
        c.in_place.is_empty() && !c.need_replacement.is_empty(),
        "{c:?}"
    );
    d.delete_machine(&req).await.expect("delete");
}
