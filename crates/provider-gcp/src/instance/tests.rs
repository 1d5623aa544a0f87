use super::*;
use serde_json::{json, Value};

fn spec(extra: Value) -> GcpProviderSpec {
    let mut base = json!({
        "canIpForward": true,
        "disks": [
            {"boot": true, "sizeGb": 50, "type": "pd-ssd", "image": "projects/p/global/images/i",
             "labels": {"name": "disk"}, "provisionedIops": 3000,
             "encryption": {"kmsKeyName": " k ", "kmsKeyServiceAccount": ""}},
            {"type": "SCRATCH", "interface": "NVME", "autoDelete": false}
        ],
        "labels": {"name": "mc"},
        "machineType": "n1-standard-2",
        "metadata": [{"key": "ash", "value": "v"}],
        "networkInterfaces": [
            {"network": "net", "subnetwork": "sub", "stackType": "IPV4_IPV6",
             "ipv6accessType": "EXTERNAL", "ipCidrRange": "/24", "subnetworkRangeName": "pods"},
            {"subnetwork": "sub2", "disableExternalIP": true}
        ],
        "scheduling": {"automaticRestart": true, "onHostMaintenance": "TERMINATE"},
        "serviceAccounts": [{"email": "sa@p.iam.gserviceaccount.com", "scopes": ["s1"]}],
        "tags": ["kubernetes-io-cluster-c", "kubernetes-io-role-node"],
        "gpu": {"acceleratorType": "nvidia-tesla-t4", "count": 2},
        "region": "europe-west1",
        "zone": "europe-west1-b"
    });
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    GcpProviderSpec::from_json(&base).unwrap()
}

fn wire(spec: &GcpProviderSpec, user_data: &str) -> Value {
    let i = build_instance(
        spec,
        &InstanceInput {
            name: "m-1",
            machine_uid: "uid-1",
            project: "proj",
            user_data,
        },
    );
    serde_json::to_value(&i).unwrap()
}

#[test]
fn the_instance_on_the_wire_has_the_reference_shape() {
    let v = wire(&spec(json!({})), "#cloud-config\n");
    assert_eq!(v["name"], "m-1");
    assert_eq!(
        v["machineType"],
        "zones/europe-west1-b/machineTypes/n1-standard-2"
    );
    assert_eq!(v["canIpForward"], true);
    assert_eq!(v["labels"], json!({"name": "mc"}));
    assert_eq!(
        v["tags"]["items"],
        json!(["kubernetes-io-cluster-c", "kubernetes-io-role-node"])
    );
    assert_eq!(
        v["scheduling"],
        json!({"automaticRestart": true, "onHostMaintenance": "TERMINATE", "preemptible": false})
    );
    assert_eq!(
        v["guestAccelerators"],
        json!([{"acceleratorType": "projects/proj/zones/europe-west1-b/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 2}])
    );
    assert_eq!(
        v["serviceAccounts"],
        json!([{"email": "sa@p.iam.gserviceaccount.com", "scopes": ["s1"]}])
    );
}

#[test]
fn disks_persistent_with_int64_as_strings_and_scratch_local_ssd() {
    let v = wire(&spec(json!({})), "#cloud-config\n");
    let boot = &v["disks"][0];
    assert_eq!(boot["type"], "PERSISTENT");
    assert_eq!(boot["boot"], true);
    assert_eq!(boot["autoDelete"], true);
    let p = &boot["initializeParams"];
    // int64 fields travel as JSON strings, as in every Google discovery API.
    assert_eq!(p["diskSizeGb"], "50");
    assert_eq!(p["provisionedIops"], "3000");
    assert!(p.get("provisionedThroughput").is_none());
    assert_eq!(p["diskType"], "zones/europe-west1-b/diskTypes/pd-ssd");
    assert_eq!(p["sourceImage"], "projects/p/global/images/i");
    assert_eq!(boot["diskEncryptionKey"], json!({"kmsKeyName": "k"}));
    let scratch = &v["disks"][1];
    assert_eq!(scratch["type"], "SCRATCH");
    assert_eq!(scratch["interface"], "NVME");
    assert_eq!(scratch["autoDelete"], false);
    assert_eq!(
        scratch["initializeParams"]["diskType"],
        "zones/europe-west1-b/diskTypes/local-ssd"
    );
}

#[test]
fn interfaces_get_network_urls_external_ip_and_the_dual_stack_alias_range() {
    let v = wire(&spec(json!({})), "#cloud-config\n");
    let n0 = &v["networkInterfaces"][0];
    assert_eq!(n0["network"], "projects/proj/global/networks/net");
    assert_eq!(n0["subnetwork"], "regions/europe-west1/subnetworks/sub");
    assert_eq!(n0["accessConfigs"], json!([{}]));
    assert_eq!(n0["stackType"], "IPV4_IPV6");
    assert_eq!(n0["ipv6AccessType"], "EXTERNAL");
    assert_eq!(
        n0["aliasIpRanges"],
        json!([{"ipCidrRange": "/24", "subnetworkRangeName": "pods"}])
    );
    let n1 = &v["networkInterfaces"][1];
    assert!(n1.get("accessConfigs").is_none(), "{n1}");
    assert!(n1.get("network").is_none());
    assert!(n1.get("aliasIpRanges").is_none());
}

#[test]
fn cloud_config_goes_to_user_data_scripts_to_startup_script_and_the_uid_is_recorded() {
    let v = wire(&spec(json!({})), "#cloud-config\nruncmd: []\n");
    assert_eq!(
        v["metadata"]["items"],
        json!([
            {"key": "user-data", "value": "#cloud-config\nruncmd: []\n"},
            {"key": "ash", "value": "v"},
            {"key": "mcm-machine-uid", "value": "uid-1"}
        ])
    );
    let v = wire(&spec(json!({})), "#!/bin/bash\necho hi\n");
    assert_eq!(v["metadata"]["items"][0]["key"], "startup-script");
    let parsed: Instance = serde_json::from_value(v).unwrap();
    assert_eq!(machine_uid_of(&parsed), Some("uid-1"));
}
