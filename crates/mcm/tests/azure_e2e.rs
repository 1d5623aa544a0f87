#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking
#![cfg(feature = "azure")]
//! The Azure provider end to end: the real `mcm run` binary, without a target
//! cluster, against the real control plane and the in-repo ARM fake
//! (`mcm-fake-azure`, started inside this test on a loopback port and passed
//! to `mcm run` as `--azure-endpoint`; it also serves the token endpoint, so
//! the driver's `azure_identity` client-secret credential runs for real).
//!
//! The MachineClass and its two Secrets are `examples/azure-machine-class.yaml`
//! as a user applies it, unchanged but for the namespace. A MachineDeployment of
//! 3 reaches `Available`, then is scaled to 0, after which the fake holds no
//! VM, NIC or disk.
//!
//! Without the control plane the test skips, except in CI (`CI` set and not `false`/`0`), where it fails.

use crate::e2e;

use kube::api::ListParams;
use kube::ResourceExt;
use mcm_fake_azure::FakeAzure;
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const EXAMPLE: &str = include_str!("../../../examples/azure-machine-class.yaml");
const DEPLOYMENT: &str = "azure-e2e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcm_run_on_the_arm_fake_brings_3_azure_machines_to_available_and_scales_to_0_without_vms_nics_or_disks(
) {
    let t0 = Instant::now();
    let Some(env) = TestEnv::new("azure-e2e").await else {
        return;
    };
    let ns = env.namespace.clone();

    // The fake, holding the example's resource group, virtual network and subnet.
    let docs = e2e::example_documents(EXAMPLE);
    let class_doc = docs
        .iter()
        .find(|d| d["kind"] == json!("MachineClass"))
        .expect("the example has a MachineClass");
    let spec = &class_doc["providerSpec"];
    let rg = spec["resourceGroup"]
        .as_str()
        .expect("resourceGroup")
        .to_string();
    let location = spec["location"].as_str().expect("location").to_string();
    let fake = FakeAzure::start().await.expect("start the ARM fake");
    fake.add_subnet(
        &rg,
        spec["subnetInfo"]["vnetName"].as_str().expect("vnetName"),
        spec["subnetInfo"]["subnetName"]
            .as_str()
            .expect("subnetName"),
    );
    fake.set_lro_polls(2);

    let class_name = e2e::create_example(&env, EXAMPLE, |_| {}).await;
    let mut mcm = e2e::start_mcm("azure", &ns, &["--azure-endpoint", fake.url()]).await;
    let e2e::Deployed {
        deployments,
        machines,
        took,
        ..
    } = e2e::deploy_available(&env, DEPLOYMENT, &class_name, 3, Duration::from_secs(180)).await;
    mcm.assert_alive();
    let requests_up = fake.requests().len();
    println!(
        "[{:>5.1?}] 3 machines Available {took:.1?} after the MachineDeployment was applied; {requests_up} ARM requests so far",
        t0.elapsed(),
    );

    // The machines and the fake's VMs are the same three, each with its NIC and disks.
    let list = machines
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    let names: Vec<String> = list.iter().map(|m| m.name_any()).collect();
    for m in &list {
        assert_eq!(
            m.spec.provider_id,
            format!("azure:///{location}/{}", m.name_any()),
            "providerID of {}",
            m.name_any()
        );
    }
    let vms: Vec<String> = fake.vms(&rg).into_keys().collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(vms, sorted, "one VM per Machine, named as the Machine");
    for n in &names {
        assert!(
            fake.nics(&rg).contains_key(&format!("{n}-nic")),
            "NIC of {n}"
        );
        assert!(
            fake.disks(&rg).contains_key(&format!("{n}-os-disk")),
            "OS disk of {n}"
        );
        assert!(
            fake.disks(&rg)
                .contains_key(&format!("{n}-data-0-data-disk")),
            "data disk of {n}"
        );
    }

    let t_scale = Instant::now();
    e2e::scale_to_zero(&deployments, DEPLOYMENT, &machines).await;
    must_eventually(
        Duration::from_secs(30),
        "no VM, NIC or disk left in the fake",
        || async {
            (fake.vms(&rg).is_empty() && fake.nics(&rg).is_empty() && fake.disks(&rg).is_empty())
                .then_some(())
        },
    )
    .await;
    mcm.assert_alive();
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for r in fake.requests() {
        let kind = r.split('/').next().unwrap_or(&r).to_string();
        *by_kind.entry(kind).or_default() += 1;
    }
    println!(
        "[{:>5.1?}] scaled to 0 in {:.1?}: no VM, NIC or disk left; ARM requests over the run: {by_kind:?}",
        t0.elapsed(),
        t_scale.elapsed()
    );
    drop(mcm);
}
