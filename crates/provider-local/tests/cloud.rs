//! The local cloud and its driver, in process, without a target cluster.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolumeSpec};
use mcm_driver::conformance::{run_all, Fixture};
use mcm_driver::{Code, Driver, GetVolumeIdsRequest};
use mcm_provider_local::server::CloudConfig;
use mcm_provider_local::wire::InstanceState;
use mcm_provider_local::{InstanceAction, LocalDriver, Tunables};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[tokio::test]
async fn conformance_kit_passes() {
    let cloud = start(Tunables::unlimited()).await;
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
                class_with("garbage", json!("garbage")),
                "providerSpec".to_string(),
            ),
            (
                class_with("no-tags", json!({"image": "i", "instanceType": "t"})),
                "providerSpec.tags".to_string(),
            ),
            (
                class_with(
                    "bad-count",
                    json!({"image": "i", "instanceType": "t", "ipv6PrefixCount": "x",
                           "tags": {"kubernetes.io/cluster/x": "1", "kubernetes.io/role/node": "1"}}),
                ),
                "providerSpec.ipv6PrefixCount".to_string(),
            ),
        ],
    };
    let failures = run_all(&cloud.driver, &fixture).await;
    assert!(failures.is_empty(), "conformance failures: {failures:#?}");
    // Nothing is left behind by the kit.
    let left = cloud
        .driver
        .list_machines(&list_request(&mine))
        .await
        .expect("list");
    assert!(left.machine_list.is_empty(), "{:?}", left.machine_list);
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn status_is_uninitialized_until_initialize_and_initialize_is_idempotent() {
    let cloud = start(Tunables::unlimited()).await;
    let c = class("init");
    let m = machine("init");
    let req = request(&m, &c);
    let created = cloud.driver.create_machine(&req).await.expect("create");
    assert!(
        created.provider_id.starts_with("local:///local-1a/i-"),
        "{}",
        created.provider_id
    );
    assert_eq!(&created.node_name, m.metadata.name.as_ref().expect("name"));

    let err = cloud
        .driver
        .get_machine_status(&req)
        .await
        .expect_err("uninitialized");
    assert_eq!(err.code, Code::Uninitialized, "{err}");
    assert!(err.message.contains("srcDstCheck"), "{}", err.message);
    let id = err.machine.expect("identity attached");
    assert_eq!(id.provider_id, created.provider_id);
    assert_eq!(id.node_name, created.node_name);

    let before = cloud.admin.instances().await.expect("instances");
    assert_eq!(before.len(), 1);
    assert!(before[0].src_dst_check);
    assert!(before[0].ipv6_addresses.is_empty() && before[0].ipv6_prefixes.is_empty());

    let init = cloud
        .driver
        .initialize_machine(&req)
        .await
        .expect("initialize");
    assert_eq!(init.provider_id, created.provider_id);
    assert_eq!(
        init.addresses.len(),
        4,
        "IPv4, 2 IPv6, hostname: {:?}",
        init.addresses
    );
    let after = cloud.admin.instances().await.expect("instances");
    let inst = &after[0];
    assert!(!inst.src_dst_check);
    assert_eq!(inst.ipv6_addresses.len(), 2);
    assert_eq!(inst.ipv6_prefixes.len(), 1);

    let status = cloud
        .driver
        .get_machine_status(&req)
        .await
        .expect("status OK after initialize");
    assert_eq!(status.provider_id, created.provider_id);

    // A second initialize (with the providerID now known) changes nothing.
    let mut m2 = m.clone();
    m2.spec.provider_id = created.provider_id.clone();
    let again = cloud
        .driver
        .initialize_machine(&request(&m2, &c))
        .await
        .expect("second initialize");
    assert_eq!(again, init);
    let unchanged = cloud.admin.instances().await.expect("instances");
    assert_eq!(unchanged, after);

    // A class that wants the checks on again makes the status Uninitialized again.
    let mut on = c.clone();
    on.provider_spec["srcAndDstChecksEnabled"] = json!(true);
    let err = cloud
        .driver
        .get_machine_status(&request(&m, &on))
        .await
        .expect_err("differs");
    assert_eq!(err.code, Code::Uninitialized);
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_retried_create_with_the_same_uid_returns_one_instance() {
    let cloud = start(Tunables::unlimited()).await;
    let c = class("retry");
    let m = machine("retry");
    let req = request(&m, &c);
    let first = cloud.driver.create_machine(&req).await.expect("create");
    let again = cloud
        .driver
        .create_machine(&req)
        .await
        .expect("retried create");
    assert_eq!(first, again);
    // Concurrent retries too.
    let many = futures::future::join_all((0..8).map(|_| cloud.driver.create_machine(&req))).await;
    for r in many {
        assert_eq!(r.expect("create").provider_id, first.provider_id);
    }
    assert_eq!(cloud.admin.instances().await.expect("instances").len(), 1);
    let listed = cloud
        .driver
        .list_machines(&list_request(&c))
        .await
        .expect("list");
    assert_eq!(listed.machine_list.len(), 1);
    assert_eq!(
        listed.machine_list.get(&first.provider_id),
        m.metadata.name.as_ref()
    );

    // Another machine of the same class gets another instance.
    let other = cloud
        .driver
        .create_machine(&request(&machine("retry"), &c))
        .await
        .expect("create");
    assert_ne!(other.provider_id, first.provider_id);
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn fail_initialization_n_times_then_succeed() {
    let cloud = start(Tunables::unlimited()).await;
    let c = class("failinit");
    let m = machine("failinit");
    let req = request(&m, &c);
    cloud.driver.create_machine(&req).await.expect("create");
    let name = m.metadata.name.clone().expect("name");
    cloud
        .admin
        .patch_tunables(&json!({"failInitialization": {"perInstance": {name.clone(): 2}}}))
        .await
        .expect("set faults");
    for i in 0..2 {
        let e = cloud
            .driver
            .initialize_machine(&req)
            .await
            .expect_err("injected failure");
        assert_eq!(e.code, Code::Internal, "failure {i}: {e}");
        assert!(e.message.contains("injected fault"), "{}", e.message);
        assert_eq!(
            cloud
                .driver
                .get_machine_status(&req)
                .await
                .expect_err("still uninitialized")
                .code,
            Code::Uninitialized
        );
    }
    cloud
        .driver
        .initialize_machine(&req)
        .await
        .expect("third initialize succeeds");
    cloud
        .driver
        .get_machine_status(&req)
        .await
        .expect("initialized");
    let t = cloud.admin.tunables().await.expect("tunables");
    assert!(t.fail_initialization.per_instance.is_empty(), "{t:?}");

    // Globally, with another code.
    cloud
        .admin
        .patch_tunables(&json!({"failInitialization": {"global": 1, "code": "Unavailable"}}))
        .await
        .expect("set faults");
    let e = cloud
        .driver
        .initialize_machine(&req)
        .await
        .expect_err("injected failure");
    assert_eq!(e.code, Code::Unavailable);
    cloud
        .driver
        .initialize_machine(&req)
        .await
        .expect("then fine");
    let stats = cloud.admin.stats().await.expect("stats");
    assert_eq!(stats.operations["initialize"].injected_faults, 3);
    assert_eq!(stats.operations["initialize"].ok, 2);
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn the_rate_limit_answers_resource_exhausted() {
    let cloud = start(Tunables::unlimited()).await;
    cloud
        .admin
        .patch_tunables(&json!({"create": {"rateLimit": {"capacity": 3, "refillPerSecond": 0.2}}}))
        .await
        .expect("set limit");
    let c = class("rate");
    for _ in 0..3 {
        cloud
            .driver
            .create_machine(&request(&machine("rate"), &c))
            .await
            .expect("within the burst");
    }
    let e = cloud
        .driver
        .create_machine(&request(&machine("rate"), &c))
        .await
        .expect_err("throttled");
    assert_eq!(e.code, Code::ResourceExhausted, "{e}");
    assert!(e.message.contains("RequestLimitExceeded"), "{}", e.message);
    // Other operations have their own buckets.
    cloud
        .driver
        .list_machines(&list_request(&c))
        .await
        .expect("list is not limited");
    let stats = cloud.admin.stats().await.expect("stats");
    assert_eq!(stats.operations["create"].calls, 4);
    assert_eq!(stats.operations["create"].throttled, 1);
    assert_eq!(
        stats.operations["create"].errors_by_code["ResourceExhausted"],
        1
    );
    assert_eq!(stats.instances_by_state.values().sum::<u64>(), 3);
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn the_default_limits_are_ec2_like() {
    // RunInstances: bucket 5, refill 2/s.
    let cloud = start(Tunables::default()).await;
    let c = class("ec2");
    let t0 = Instant::now();
    let results = futures::future::join_all((0..20).map(|_| {
        let d = cloud.driver.clone();
        let r = request(&machine("ec2"), &c);
        async move { d.create_machine(&r).await }
    }))
    .await;
    let elapsed = t0.elapsed().as_secs_f64();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let throttled = results
        .iter()
        .filter(|r| matches!(r, Err(e) if e.code == Code::ResourceExhausted))
        .count();
    assert_eq!(ok + throttled, 20);
    assert!(ok >= 5, "the burst of 5 passes: {ok}");
    assert!(
        (ok as f64) <= 5.0 + 2.0 * elapsed + 1.0,
        "{ok} in {elapsed}s"
    );
    assert!(throttled >= 1);
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_restarted_server_keeps_its_instances() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("state").join("cloud.redb");
    let c = class("restart");
    let m = machine("restart");
    let req = request(&m, &c);
    let (handle, driver, admin) = start_at(&store, Tunables::unlimited()).await;
    let created = driver.create_machine(&req).await.expect("create");
    driver.initialize_machine(&req).await.expect("initialize");
    let other = driver
        .create_machine(&request(&machine("restart"), &c))
        .await
        .expect("create");
    admin
        .instance_action(
            mcm_provider_local::wire::instance_id_of(&other.provider_id).expect("id"),
            InstanceAction::Stop,
        )
        .await
        .expect("stop");
    let before = admin.instances().await.expect("instances");
    handle.shutdown().await.expect("shutdown");

    let (handle, driver, admin) = start_at(&store, Tunables::unlimited()).await;
    let after = admin.instances().await.expect("instances");
    assert_eq!(before, after, "the store keeps every instance as it was");
    assert!(after.iter().any(|i| i.state == InstanceState::Stopped));
    let status = driver
        .get_machine_status(&req)
        .await
        .expect("still initialized");
    assert_eq!(status.provider_id, created.provider_id);
    // The client token survives too: a retried create finds the same instance.
    let retried = driver.create_machine(&req).await.expect("retried create");
    assert_eq!(retried.provider_id, created.provider_id);
    // Addresses are not handed out twice.
    let third = driver
        .create_machine(&request(&machine("restart"), &c))
        .await
        .expect("create");
    let ips: Vec<String> = admin
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .map(|i| i.private_ip)
        .collect();
    let mut unique = ips.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 3, "{ips:?}");
    assert_ne!(third.provider_id, created.provider_id);
    handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn eventual_consistency_hides_new_instances_for_a_while() {
    let mut t = Tunables::unlimited();
    t.eventual_consistency_ms = 700;
    let cloud = start(t).await;
    let c = class("ec");
    let m = machine("ec");
    let req = request(&m, &c);
    let created = cloud.driver.create_machine(&req).await.expect("create");
    let e = cloud
        .driver
        .get_machine_status(&req)
        .await
        .expect_err("not visible yet");
    assert_eq!(e.code, Code::NotFound, "{e}");
    assert!(cloud
        .driver
        .list_machines(&list_request(&c))
        .await
        .expect("list")
        .machine_list
        .is_empty());
    assert_eq!(
        cloud
            .driver
            .initialize_machine(&req)
            .await
            .expect_err("not visible yet")
            .code,
        Code::NotFound
    );
    // What a controller does on NotFound: create again; the token keeps it to one VM.
    assert_eq!(
        cloud.driver.create_machine(&req).await.expect("create"),
        created
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let e = cloud
        .driver
        .get_machine_status(&req)
        .await
        .expect_err("visible, uninitialized");
    assert_eq!(e.code, Code::Uninitialized);
    assert_eq!(
        cloud
            .driver
            .list_machines(&list_request(&c))
            .await
            .expect("list")
            .machine_list
            .len(),
        1
    );
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn operator_actions_boot_delay_and_stats() {
    let mut t = Tunables::unlimited();
    t.boot_delay_ms = 300;
    let cloud = start(t).await;
    let c = class("ops");
    let req = request(&machine("ops"), &c);
    let created = cloud.driver.create_machine(&req).await.expect("create");
    let id = mcm_provider_local::wire::instance_id_of(&created.provider_id)
        .expect("id")
        .to_string();
    assert_eq!(
        cloud.admin.instances().await.expect("list")[0].state,
        InstanceState::Pending
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        cloud.admin.instances().await.expect("list")[0].state,
        InstanceState::Running
    );

    let i = cloud
        .admin
        .instance_action(&id, InstanceAction::Kill)
        .await
        .expect("kill");
    assert_eq!(i.state, InstanceState::Killed);
    // A killed VM is still found (like a stopped EC2 instance).
    assert_eq!(
        cloud
            .driver
            .get_machine_status(&req)
            .await
            .expect_err("uninitialized")
            .code,
        Code::Uninitialized
    );
    let i = cloud
        .admin
        .instance_action(&id, InstanceAction::Start)
        .await
        .expect("start");
    assert_eq!(i.state, InstanceState::Pending);
    let i = cloud
        .admin
        .instance_action(&id, InstanceAction::Stop)
        .await
        .expect("stop");
    assert_eq!(i.state, InstanceState::Stopped);
    let e = cloud
        .admin
        .instance_action("i-00000000000000000", InstanceAction::Stop)
        .await
        .expect_err("unknown instance");
    assert!(
        matches!(
            e,
            mcm_provider_local::Error::Api {
                code: Code::NotFound,
                ..
            }
        ),
        "{e}"
    );

    cloud.driver.delete_machine(&req).await.expect("delete");
    cloud
        .driver
        .delete_machine(&req)
        .await
        .expect("delete again");
    let stats = cloud.admin.stats().await.expect("stats");
    assert_eq!(stats.operations["create"].calls, 1);
    // Without a providerID on the Machine, each delete first finds the instance by UID.
    assert_eq!(stats.operations["status"].calls, 3);
    assert_eq!(
        stats.operations["delete"].calls, 1,
        "the second delete found nothing to delete"
    );
    assert!(stats.instances_by_state.is_empty());
    let reset = cloud.admin.reset_stats().await.expect("reset");
    assert_eq!(reset.operations["create"].calls, 0);
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn error_rates_and_latency_are_injected() {
    let cloud = start(Tunables::unlimited()).await;
    let c = class("faults");
    let req = request(&machine("faults"), &c);
    cloud.driver.create_machine(&req).await.expect("create");
    cloud
        .admin
        .patch_tunables(
            &json!({"list": {"errorRate": 1.0, "errorCode": "Unavailable"},
                               "status": {"latencyMs": 250}}),
        )
        .await
        .expect("set faults");
    let e = cloud
        .driver
        .list_machines(&list_request(&c))
        .await
        .expect_err("injected");
    assert_eq!(e.code, Code::Unavailable);
    let t0 = Instant::now();
    let _ = cloud.driver.get_machine_status(&req).await;
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );

    // PUT replaces everything (fields left out take the defaults, with EC2 limits).
    let t = cloud
        .admin
        .put_tunables(&json!({"bootDelayMs": 0}))
        .await
        .expect("put");
    assert_eq!(t.list.error_rate, 0.0);
    assert!(t.create.rate_limit.is_some());
    cloud
        .driver
        .list_machines(&list_request(&c))
        .await
        .expect("no more faults");
    // Bad documents are refused and change nothing.
    let e = cloud
        .admin
        .patch_tunables(&json!({"create": {"errorRate": 3}}))
        .await
        .expect_err("refused");
    assert!(
        matches!(
            e,
            mcm_provider_local::Error::Api {
                code: Code::InvalidArgument,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(cloud.admin.tunables().await.expect("get"), t);
    let stats = cloud.admin.stats().await.expect("stats");
    assert_eq!(stats.operations["list"].injected_faults, 1);
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn transport_failures_are_unavailable_and_bad_input_is_invalid() {
    // A port nothing listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    let d = LocalDriver::with_timeout(format!("http://127.0.0.1:{port}"), Duration::from_secs(2))
        .expect("driver");
    let c = class("down");
    let e = d
        .create_machine(&request(&machine("down"), &c))
        .await
        .expect_err("down");
    assert_eq!(e.code, Code::Unavailable, "{e}");
    let e = d.list_machines(&list_request(&c)).await.expect_err("down");
    assert_eq!(e.code, Code::Unavailable, "{e}");
    // Validation happens before the network.
    let e = d
        .create_machine(&request(&machine("down"), &class_with("x", json!({}))))
        .await
        .expect_err("invalid");
    assert_eq!(e.code, Code::InvalidArgument);
    let mut aws = c.clone();
    aws.provider = "AWS".to_string();
    let e = d
        .create_machine(&request(&machine("down"), &aws))
        .await
        .expect_err("invalid");
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.message.contains("machineClass.provider"), "{}", e.message);
    assert!(LocalDriver::new("not a url").is_err());
    assert!(LocalDriver::new("ftp://127.0.0.1").is_err());
}

#[tokio::test]
async fn volume_ids_of_local_csi_volumes_only() {
    let d = LocalDriver::new("http://127.0.0.1:9").expect("driver");
    let pv = |driver: &str, handle: &str| PersistentVolumeSpec {
        csi: Some(CSIPersistentVolumeSource {
            driver: driver.to_string(),
            volume_handle: handle.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let r = d
        .get_volume_ids(&GetVolumeIdsRequest {
            pv_specs: vec![
                pv("local.csi.mcm.invalid", "vol-1"),
                pv("ebs.csi.aws.com", "vol-2"),
                PersistentVolumeSpec::default(),
                pv("local.csi.mcm.invalid", "vol-3"),
            ],
        })
        .await
        .expect("volume ids");
    assert_eq!(r.volume_ids, vec!["vol-1".to_string(), "vol-3".to_string()]);
}

#[tokio::test]
async fn a_second_server_cannot_open_a_store_in_use() {
    let cloud = start(Tunables::unlimited()).await;
    let e = mcm_provider_local::server::spawn(CloudConfig::new(&cloud.store))
        .await
        .expect_err("locked");
    assert!(matches!(e, mcm_provider_local::Error::Store(_)), "{e}");
    cloud.handle.shutdown().await.expect("shutdown");
}

#[derive(clap::Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: mcm_provider_local::LocalCloudCommand,
}

#[tokio::test]
async fn cli_helpers_act_on_one_instance() {
    use clap::Parser;
    let cloud = start(Tunables::unlimited()).await;
    let created = cloud
        .driver
        .create_machine(&request(&machine("cli"), &class("cli")))
        .await
        .expect("create");
    let url = cloud.handle.url();
    // By provider ID, as a person would paste it from a Machine.
    for (verb, state) in [
        ("kill", InstanceState::Killed),
        ("start", InstanceState::Running),
        ("stop", InstanceState::Stopped),
    ] {
        let cli = Cli::try_parse_from([
            "mcm",
            verb,
            created.provider_id.as_str(),
            "--local-cloud-url",
            url.as_str(),
        ])
        .expect("parses");
        mcm_provider_local::admin::run(cli.cmd).await.expect("runs");
        assert_eq!(
            cloud.admin.instances().await.expect("list")[0].state,
            state,
            "after {verb}"
        );
    }
    let cli = Cli::try_parse_from([
        "mcm",
        "faults",
        "--patch",
        r#"{"create": {"latencyMs": 5}}"#,
        "--local-cloud-url",
        url.as_str(),
    ])
    .expect("parses");
    mcm_provider_local::admin::run(cli.cmd).await.expect("runs");
    assert_eq!(
        cloud.admin.tunables().await.expect("get").create.latency_ms,
        5
    );
    for sub in ["stats", "instances"] {
        let cli =
            Cli::try_parse_from(["mcm", sub, "--local-cloud-url", url.as_str()]).expect("parses");
        mcm_provider_local::admin::run(cli.cmd).await.expect("runs");
    }
    let cli = Cli::try_parse_from([
        "mcm",
        "kill",
        "i-00000000000000000",
        "--local-cloud-url",
        url.as_str(),
    ])
    .expect("parses");
    assert!(mcm_provider_local::admin::run(cli.cmd).await.is_err());
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn serve_args_read_a_tunables_file() {
    use clap::Parser;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("faults.json");
    std::fs::write(
        &file,
        r#"{"status": {"errorRate": 0.25, "errorCode": "Unavailable"},
            "failInitialization": {"global": 2}, "eventualConsistencyMs": 100}"#,
    )
    .expect("write");
    let store = dir.path().join("c.redb");
    let cli = Cli::try_parse_from([
        "mcm",
        "serve",
        "--port",
        "0",
        "--store",
        store.to_str().expect("utf8"),
        "--config",
        file.to_str().expect("utf8"),
        "--boot-delay",
        "2s",
    ])
    .expect("parses");
    let mcm_provider_local::LocalCloudCommand::Serve(args) = cli.cmd else {
        panic!("serve expected");
    };
    let config = args.to_config().expect("config");
    assert_eq!(config.tunables.status.error_rate, 0.25);
    assert_eq!(config.tunables.fail_initialization.global, 2);
    assert_eq!(config.tunables.eventual_consistency_ms, 100);
    assert_eq!(config.tunables.boot_delay_ms, 2000);
    assert_eq!(
        config.tunables.create.rate_limit,
        Tunables::default().create.rate_limit
    );
    let (handle, _driver, admin) = start_with(config).await;
    assert_eq!(
        admin.tunables().await.expect("get").status.error_code,
        "Unavailable"
    );
    handle.shutdown().await.expect("shutdown");

    std::fs::write(&file, r#"{"status": {"errorRate": 7}}"#).expect("write");
    let e = args.to_config().expect_err("invalid file");
    assert!(e.to_string().contains("errorRate"), "{e}");
}
