//! The driver against moto: deletion (twice, retained volumes, a class moved
//! to another region), listing, retried and concurrent calls, and the EC2
//! calls per machine. See `tests/moto.rs` for how moto is started.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use aws_sdk_ec2::types::Filter;
use common::moto::*;
use common::*;
use mcm_driver::{Code, Driver, ListMachinesRequest};
use serde_json::json;

#[tokio::test]
async fn moto_delete_twice_then_status_not_found() {
    let Some(env) = Env::new().await else { return };
    let class = class("del", env.spec());
    let mut m = machine("del");
    let created = env
        .driver
        .create_machine(&request(&m, &class, &secret()))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    let req = request(&m, &class, &secret());
    env.driver.delete_machine(&req).await.expect("first delete");
    env.driver
        .delete_machine(&req)
        .await
        .expect("second delete is OK");
    let s = env.driver.get_machine_status(&req).await.expect_err("gone");
    assert_eq!(s.code, Code::NotFound, "{s}");
    // Without a provider ID too.
    m.spec.provider_id.clear();
    let req = request(&m, &class, &secret());
    env.driver
        .delete_machine(&req)
        .await
        .expect("delete by tags of a gone VM");
    assert_eq!(
        env.driver
            .get_machine_status(&req)
            .await
            .expect_err("gone")
            .code,
        Code::NotFound
    );
}

#[tokio::test]
async fn moto_list_by_cluster_and_role_tags() {
    let Some(env) = Env::new().await else { return };
    let class_a = class("list", env.spec());
    let mut spec_b = env.spec();
    spec_b["tags"] =
        json!({"kubernetes.io/cluster/other-shoot-x": "1", "kubernetes.io/role/node": "1"});
    let class_b = class("list-other", spec_b);
    // Same cluster, another role: listed only if the role tag is ignored.
    let mut spec_c = env.spec();
    spec_c["tags"] = json!({env.cluster.clone(): "1", "kubernetes.io/role/bastion": "1"});
    let class_c = class("list-other-role", spec_c);
    let mut mine = Vec::new();
    for _ in 0..3 {
        let m = machine("list");
        let c = env
            .driver
            .create_machine(&request(&m, &class_a, &secret()))
            .await
            .expect("create");
        mine.push((c.provider_id, m));
    }
    let other = machine("other");
    let other_created = env
        .driver
        .create_machine(&request(&other, &class_b, &secret()))
        .await
        .expect("create other");
    let other_role = machine("other-role");
    let other_role_created = env
        .driver
        .create_machine(&request(&other_role, &class_c, &secret()))
        .await
        .expect("create other role");
    let listed = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: class_a.clone(),
            secret: secret(),
        })
        .await
        .expect("list");
    assert_eq!(listed.machine_list.len(), 3, "{:?}", listed.machine_list);
    for (pid, m) in &mine {
        assert_eq!(listed.machine_list.get(pid), m.metadata.name.as_ref());
    }
    assert!(
        !listed.machine_list.contains_key(&other_created.provider_id),
        "another cluster's machine is not listed"
    );
    assert!(
        !listed
            .machine_list
            .contains_key(&other_role_created.provider_id),
        "the same cluster's machine of another role is not listed"
    );
    // The other role's class lists exactly its own machine.
    let listed_c = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: class_c.clone(),
            secret: secret(),
        })
        .await
        .expect("list other role");
    assert_eq!(
        listed_c.machine_list.keys().collect::<Vec<_>>(),
        vec![&other_role_created.provider_id],
        "{:?}",
        listed_c.machine_list
    );
    for (_, m) in &mine {
        env.driver
            .delete_machine(&request(m, &class_a, &secret()))
            .await
            .expect("delete");
    }
    env.driver
        .delete_machine(&request(&other, &class_b, &secret()))
        .await
        .expect("delete");
    env.driver
        .delete_machine(&request(&other_role, &class_c, &secret()))
        .await
        .expect("delete other role");
    let listed = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: class_a,
            secret: secret(),
        })
        .await
        .expect("list");
    assert!(
        listed.machine_list.is_empty(),
        "terminated VMs are not listed"
    );
}

#[tokio::test]
async fn moto_retried_create_with_the_same_uid_gives_one_instance() {
    let Some(env) = Env::new().await else { return };
    let class = class("retry", env.spec());
    let m = machine("retry");
    let req = request(&m, &class, &secret());
    let first = env.driver.create_machine(&req).await.expect("create");
    let second = env
        .driver
        .create_machine(&req)
        .await
        .expect("retried create");
    assert_eq!(first.provider_id, second.provider_id);
    // Concurrent retries of the same machine too.
    let (a, b) = tokio::join!(
        env.driver.create_machine(&req),
        env.driver.create_machine(&req)
    );
    assert_eq!(a.expect("a").provider_id, first.provider_id);
    assert_eq!(b.expect("b").provider_id, first.provider_id);
    let name = m.metadata.name.as_deref().expect("name");
    let live: Vec<_> = env
        .instances_named(name)
        .await
        .into_iter()
        .filter(|i| i.state().and_then(|s| s.name()).map(|s| s.as_str()) != Some("terminated"))
        .collect();
    assert_eq!(live.len(), 1, "exactly one instance for the machine");
    assert_eq!(
        live[0].client_token(),
        Some(format!("mcm-{}", m.metadata.uid.as_deref().expect("uid")).as_str())
    );
    env.driver.delete_machine(&req).await.expect("delete");
}

#[tokio::test]
async fn moto_concurrent_status_calls_share_one_describe_instances() {
    let Some(env) = Env::new().await else { return };
    let class = class("batch", env.spec());
    let mut reqs = Vec::new();
    for _ in 0..8 {
        let mut m = machine("batch");
        let c = env
            .driver
            .create_machine(&request(&m, &class, &secret()))
            .await
            .expect("create");
        m.spec.provider_id = c.provider_id;
        reqs.push(request(&m, &class, &secret()));
    }
    let before = env.driver.api_calls();
    let answers =
        futures::future::join_all(reqs.iter().map(|r| env.driver.get_machine_status(r))).await;
    for a in &answers {
        a.as_ref().expect("status OK");
    }
    let diff = env.driver.api_calls().since(&before);
    assert_eq!(
        diff.count("DescribeInstances"),
        1,
        "8 concurrent GetMachineStatus calls → one DescribeInstances: {diff:?}"
    );
    for r in &reqs {
        env.driver.delete_machine(r).await.expect("delete");
    }
}

#[tokio::test]
async fn moto_retained_volume_and_interface_survive_the_machine_with_their_tags() {
    let Some(env) = Env::new().await else { return };
    let mut spec = env.spec();
    spec["blockDevices"] = json!([
        {"deviceName": "/root", "ebs": {"volumeSize": 20, "volumeType": "gp3"}},
        {"deviceName": "/dev/sdf", "ebs": {"volumeSize": 5, "volumeType": "gp2", "deleteOnTermination": false}}
    ]);
    spec["networkInterfaces"] = json!([
        {"subnetID": env.subnet, "securityGroupIDs": [env.sg]},
        {"subnetID": env.subnet, "securityGroupIDs": [env.sg], "deleteOnTermination": false}
    ]);
    let class = class("keep", spec);
    let m = machine("keep");
    let name = m.metadata.name.clone().expect("name");
    let created = env
        .driver
        .create_machine(&request(&m, &class, &secret()))
        .await
        .expect("create");
    let id = instance_id(&created.provider_id);
    let instance = env
        .client
        .describe_instances()
        .instance_ids(&id)
        .send()
        .await
        .expect("instance");
    let kept_volume = instance
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .flat_map(|i| i.block_device_mappings())
        .find(|b| b.device_name() == Some("/dev/sdf"))
        .and_then(|b| b.ebs())
        .and_then(|e| e.volume_id())
        .expect("data volume")
        .to_string();
    let enis = env
        .client
        .describe_network_interfaces()
        .filters(
            Filter::builder()
                .name("attachment.instance-id")
                .values(&id)
                .build(),
        )
        .send()
        .await
        .expect("enis");
    let kept_eni = enis
        .network_interfaces()
        .iter()
        .find(|n| n.attachment().and_then(|a| a.device_index()) == Some(1))
        .and_then(|n| n.network_interface_id())
        .expect("second interface")
        .to_string();
    // Without provider ID: found by tags, terminated.
    env.driver
        .delete_machine(&request(&m, &class, &secret()))
        .await
        .expect("delete");
    let gone = env.instances_named(&name).await;
    assert!(
        gone.iter()
            .all(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) != Some("running")),
        "the VM is terminated"
    );
    // The volume survives the machine, with the machine's tags.
    let vols = env
        .client
        .describe_volumes()
        .volume_ids(&kept_volume)
        .send()
        .await
        .expect("volumes");
    let vol = vols
        .volumes()
        .first()
        .expect("the retained volume still exists");
    assert_ne!(vol.state().map(|s| s.as_str()), Some("deleted"));
    let tag = |k: &str| {
        vol.tags()
            .iter()
            .find(|t| t.key() == Some(k))
            .and_then(|t| t.value())
            .map(str::to_string)
    };
    assert_eq!(tag("Name").as_deref(), Some(name.as_str()));
    assert_eq!(tag(&env.cluster).as_deref(), Some("1"));
    // So does the interface.
    let left = env
        .client
        .describe_network_interfaces()
        .network_interface_ids(&kept_eni)
        .send()
        .await
        .expect("enis");
    assert_eq!(
        left.network_interfaces().len(),
        1,
        "kept interface survives"
    );
    // A second DeleteMachine (retried deletion) still leaves them.
    env.driver
        .delete_machine(&request(&m, &class, &secret()))
        .await
        .expect("second delete");
    let vols = env
        .client
        .describe_volumes()
        .volume_ids(&kept_volume)
        .send()
        .await
        .expect("volumes");
    assert_eq!(vols.volumes().len(), 1);
}

#[tokio::test]
async fn moto_ec2_calls_per_machine() {
    let Some(env) = Env::new().await else { return };
    let mut spec = env.spec();
    spec["srcAndDstChecksEnabled"] = json!(false);
    spec["networkInterfaces"] =
        json!([{"subnetID": env.subnet, "securityGroupIDs": [env.sg], "ipv6AddressCount": 1}]);
    let class = class("budget", spec);
    // Warm the AMI cache with one machine, as in any real scale-up.
    let warm = machine("warm");
    env.driver
        .create_machine(&request(&warm, &class, &secret()))
        .await
        .expect("create");
    env.driver
        .delete_machine(&request(&warm, &class, &secret()))
        .await
        .expect("delete");

    let mut m = machine("budget");
    let t0 = env.driver.api_calls();
    let created = env
        .driver
        .create_machine(&request(&m, &class, &secret()))
        .await
        .expect("create");
    let t1 = env.driver.api_calls();
    m.spec.provider_id = created.provider_id.clone();
    let req = request(&m, &class, &secret());
    env.driver
        .initialize_machine(&req)
        .await
        .expect("initialize");
    let t2 = env.driver.api_calls();
    env.driver
        .get_machine_status(&req)
        .await
        .expect("status OK");
    let t3 = env.driver.api_calls();
    env.driver.delete_machine(&req).await.expect("delete");
    let t4 = env.driver.api_calls();
    let show = |what: &str, c: &mcm_provider_aws::ApiCalls| {
        println!(
            "EC2 calls for {what}: {:?} (total {})",
            c.operations,
            c.total()
        );
    };
    show("CreateMachine", &t1.since(&t0));
    show("InitializeMachine", &t2.since(&t1));
    show("GetMachineStatus", &t3.since(&t2));
    show("DeleteMachine", &t4.since(&t3));
    let all = t4.since(&t0);
    show("create+initialize+status+delete", &all);
    assert_eq!(all.count("RunInstances"), 1);
    assert_eq!(all.count("TerminateInstances"), 1);
    assert_eq!(all.count("ModifyNetworkInterfaceAttribute"), 1);
    assert_eq!(all.count("AssignIpv6Addresses"), 1);
    assert_eq!(all.count("DescribeImages"), 0, "AMI cached");
    assert!(
        all.count("DescribeInstances") <= 2,
        "the adopt check and the status call; initialize and delete describe nothing: {all:?}"
    );
    assert!(all.total() <= 6, "{all:?}");
}

/// Issue 17, finding 3: a class moved to another region must not make the
/// VMs it created look gone. Status and delete look the VM up in the region
/// its providerID names; the instance in the old region is terminated.
#[tokio::test]
async fn moto_delete_after_the_class_moved_region_terminates_the_vm_where_it_lives() {
    let Some(env) = Env::new().await else { return };
    let name = unique("moved");
    let class_a = class("moved-a", env.spec());
    let mut m = machine(&name);
    let created = env
        .driver
        .create_machine(&request(&m, &class_a, &secret()))
        .await
        .expect("create in region A");
    assert!(
        created
            .provider_id
            .starts_with(&format!("aws:///{REGION}/")),
        "{}",
        created.provider_id
    );
    m.spec.provider_id = created.provider_id.clone();
    assert_eq!(
        live_states(&env, &instance_id(&created.provider_id)).await,
        vec!["running".to_string()]
    );
    let mut spec_b = env.spec();
    spec_b["region"] = json!("us-east-1");
    let class_b = class("moved-b", spec_b);
    let req_b = request(&m, &class_b, &secret());
    let status = env
        .driver
        .get_machine_status(&req_b)
        .await
        .expect("the VM is found in the region its providerID names");
    assert_eq!(status.provider_id, created.provider_id);
    env.driver
        .delete_machine(&req_b)
        .await
        .expect("delete with the moved class");
    let id = instance_id(&created.provider_id);
    let states = live_states(&env, &id).await;
    assert!(
        states
            .iter()
            .all(|s| s == "shutting-down" || s == "terminated"),
        "the instance in region A was terminated: {states:?}"
    );
}
