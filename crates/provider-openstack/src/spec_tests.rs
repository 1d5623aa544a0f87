//! The reference's validation messages, decoding and spec helpers.

use super::*;
use crate::secret::validate_secret;
use serde_json::json;

fn spec(v: serde_json::Value) -> OpenStackSpec {
    decode(&json!({"apiVersion": API_VERSION, "kind": KIND, "spec": v})).expect("decodes")
}

fn valid() -> serde_json::Value {
    json!({
        "imageName": "ubuntu", "region": "RegionOne", "availabilityZone": "nova",
        "flavorName": "m1.small", "keyName": "key", "networkID": "net",
        "podNetworkCIDRs": ["100.96.0.0/11"],
        "tags": {"kubernetes.io-cluster-shoot": "1", "kubernetes.io-role-node": "1"}
    })
}

use mcm_driver::testing::secret_with as secret;

#[test]
fn a_valid_spec_has_no_findings() {
    assert_eq!(validate_spec(&spec(valid())), vec![]);
}

#[test]
fn an_empty_spec_reports_every_required_field_with_the_reference_messages() {
    let errs = validate_spec(&spec(json!({})));
    let text = Join::Aggregate.apply(&errs);
    for expected in [
        "spec.imageName: Required value: ImageName is required if no ImageID is given",
        "spec.region: Required value: Region is required",
        "spec.flavorName: Required value: Flavor is required",
        "spec.availabilityZone: Required value: AvailabilityZone name is required",
        "spec.keyName: Required value: KeyName is required",
        "spec.networkID: Forbidden: both \"networks\" and \"networkID\" should not be empty",
        "spec.PodNetworkCIDRs: Required value: PodNetworkCIDRs is required",
        "spec.tags: Required value: Tag required of the form kubernetes.io-cluster-****",
        "spec.tags: Required value: Tag required of the form kubernetes.io-role-****",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from {text}");
    }
    assert!(text.starts_with('[') && text.ends_with(']'));
}

#[test]
fn network_rules_follow_the_reference() {
    let mut v = valid();
    v["networks"] = json!([{"id": "a", "name": "b"}, {}, {"name": "c", "podNetwork": true}]);
    v["podNetworkCIDRs"] = json!([]);
    v["rootDiskSize"] = json!(-1);
    let text = Join::Aggregate.apply(&validate_spec(&spec(v)));
    for expected in [
        "spec.networks: Forbidden: \"networks\" list should not be specified along with \"providerConfig.Spec.NetworkID\"",
        "spec.networks[0]: Forbidden: simultaneous use of network \"id\" and \"name\" is forbidden",
        "spec.networks[1]: Required value: at least one of network \"id\" or \"name\" is required",
        "spec.networks[2].podNetwork: Required value: \"podNetwork\" switch should not be used in absence of \"spec.podNetworkCidr\"",
        "spec.rootDiskSize: Required value: RootDiskSize can not be negative",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from {text}");
    }
}

#[test]
fn one_finding_is_not_bracketed() {
    let mut v = valid();
    v["region"] = json!("");
    assert_eq!(
        Join::Aggregate.apply(&validate_spec(&spec(v))),
        "spec.region: Required value: Region is required"
    );
}

#[test]
fn decoding_needs_the_reference_api_version_and_kind() {
    let e = decode(&json!({})).unwrap_err();
    assert!(e.contains("Object 'Kind' is missing"), "{e}");
    let e = decode(&json!({"apiVersion": "v1", "kind": "Pod", "spec": {}})).unwrap_err();
    assert!(e.contains("no kind \"Pod\" is registered"), "{e}");
    let e =
        decode(&json!({"apiVersion": API_VERSION, "kind": KIND, "spec": {"rootDiskSize": "big"}}))
            .unwrap_err();
    assert!(e.starts_with("failed to decode provider spec"), "{e}");
}

#[test]
fn user_managed_network_means_network_id_with_subnets() {
    let mut v = valid();
    assert!(!spec(v.clone()).is_user_managed_network());
    v["subnetID"] = json!("s2");
    v["subnetIDs"] = json!(["s1", "s2"]);
    let s = spec(v);
    assert!(s.is_user_managed_network());
    assert_eq!(s.port_subnets(), vec!["s1".to_string(), "s2".to_string()]);
}

#[test]
fn a_secret_without_anything_reports_the_reference_messages() {
    let text = Join::Aggregate.apply(&validate_secret(
        SecretData(&secret(&[])),
        SecretUse::Create,
    ));
    for expected in [
        "data[authURL]: Required value: authURL is required",
        "data[password]: Required value: must either specify 'password' or 'applicationCredentialSecret'",
        "data[applicationCredentialSecret]: Required value: must either specify 'password' or 'applicationCredentialSecret'",
        "data[applicationCredentialID]: Required value: applicationCredentialID or applicationCredentialName and username are required if applicationCredentialSecret present",
        "data[domainName]: Required value: one of the following keys is required [domainName|domainID]",
        "data[tenantName]: Required value: one of the following keys is required [tenantName|tenantID]",
        "data[userData]: Required value: userData is required",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from {text}");
    }
}

#[test]
fn password_and_application_credential_together_are_forbidden() {
    let s = secret(&[
        ("authURL", "https://keystone/v3"),
        ("password", "p"),
        ("applicationCredentialSecret", "s"),
        ("domainName", "d"),
        ("tenantName", "t"),
        ("userData", "x"),
        ("insecure", "yes"),
        ("clientCert", "pem"),
    ]);
    let text = Join::Aggregate.apply(&validate_secret(SecretData(&s), SecretUse::Create));
    for expected in [
        "data[password]: Forbidden: cannot specify both 'password' and 'applicationCredentialSecret'",
        "data[username]: Required value: username is required if 'password' is given",
        "data[clientKey]: Required value: clientKey is required, if clientCert is present",
        "data[insecure]: Invalid value: \"yes\": value does not match expected boolean value [\"true\"|\"false\"]",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from {text}");
    }
}

#[test]
fn a_complete_password_secret_is_valid_and_debug_hides_the_password() {
    let s = secret(&[
        ("authURL", "https://keystone/v3"),
        ("username", "u"),
        ("password", "super-secret"),
        ("domainName", "d"),
        ("tenantName", "t"),
        ("userData", "x"),
    ]);
    assert_eq!(validate_secret(SecretData(&s), SecretUse::Create), vec![]);
    let creds = crate::secret::Credentials::from_secret(&s);
    let dbg = format!("{creds:?}");
    assert!(!dbg.contains("super-secret"), "{dbg}");
    assert!(dbg.contains("<redacted>"));
}

/// Every field of the reference's `MachineProviderConfigSpec` (commit
/// 07427c68), spelled as its json tags, lands in its field.
#[test]
fn every_reference_spec_field_decodes_into_its_place() {
    let s = spec(json!({
        "imageID": "img-id", "imageName": "ubuntu", "region": "r", "availabilityZone": "az",
        "flavorName": "m1", "keyName": "k", "securityGroups": ["sg"],
        "tags": {"kubernetes.io-cluster-x": "1"}, "networkID": "net", "subnetID": "s1",
        "subnetIDs": ["s2"], "podNetworkCidr": "10.0.0.0/8", "podNetworkCIDRs": ["10.1.0.0/16"],
        "rootDiskSize": 50, "rootDiskType": "ssd", "useConfigDrive": true,
        "serverGroupID": "sg-1",
        "networks": [{"id": "n1", "name": "n1-name", "podNetwork": true}]
    }));
    assert_eq!(s.image_id, "img-id");
    assert_eq!(s.image_name, "ubuntu");
    assert_eq!(s.region, "r");
    assert_eq!(s.availability_zone, "az");
    assert_eq!(s.flavor_name, "m1");
    assert_eq!(s.key_name, "k");
    assert_eq!(s.security_groups, ["sg"]);
    assert_eq!(
        s.tags.get("kubernetes.io-cluster-x").map(String::as_str),
        Some("1")
    );
    assert_eq!(s.network_id, "net");
    assert_eq!(s.subnet_id.as_deref(), Some("s1"));
    assert_eq!(s.subnet_ids, ["s2"]);
    assert_eq!(s.pod_network_cidr, "10.0.0.0/8");
    assert_eq!(s.pod_network_cidrs, ["10.1.0.0/16"]);
    assert_eq!(s.pod_cidrs().len(), 2, "both pod CIDR fields are used");
    assert_eq!(s.root_disk_size, 50);
    assert_eq!(s.root_disk_type.as_deref(), Some("ssd"));
    assert_eq!(s.use_config_drive, Some(true));
    assert_eq!(s.server_group_id.as_deref(), Some("sg-1"));
    assert_eq!(s.networks.len(), 1);
    assert_eq!(s.networks[0].id, "n1");
    assert_eq!(s.networks[0].name, "n1-name");
    assert!(s.networks[0].pod_network);
}

/// Every Secret key of the reference (`cloudprovider.go`) lands in the credentials.
#[test]
fn every_reference_secret_key_is_read() {
    use crate::secret::{Credentials, Method};
    let c = Credentials::from_secret(&secret(&[
        ("authURL", "https://k/v3"),
        ("caCert", "CA"),
        ("insecure", "true"),
        ("domainName", "d"),
        ("domainID", "did"),
        ("tenantName", "t"),
        ("tenantID", "tid"),
        ("userDomainName", "ud"),
        ("userDomainID", "udid"),
        ("username", "u"),
        ("password", "p"),
        ("clientCert", "CERT"),
        ("clientKey", "KEY"),
    ]));
    assert_eq!(c.auth_url, "https://k/v3");
    assert_eq!(c.ca_cert.as_deref(), Some(&b"CA"[..]));
    assert!(c.insecure);
    assert_eq!((c.domain_name.as_str(), c.domain_id.as_str()), ("d", "did"));
    assert_eq!((c.tenant_name.as_str(), c.tenant_id.as_str()), ("t", "tid"));
    assert_eq!(
        (c.user_domain_name.as_str(), c.user_domain_id.as_str()),
        ("ud", "udid")
    );
    assert_eq!(c.client_cert.as_deref(), Some(&b"CERT"[..]));
    assert_eq!(c.client_key.as_deref(), Some(&b"KEY"[..]));
    assert!(
        matches!(c.method, Method::Password { ref username, ref password } if username == "u" && password == "p")
    );
    let ac = Credentials::from_secret(&secret(&[
        ("authURL", "https://k/v3"),
        ("applicationCredentialID", "id"),
        ("applicationCredentialName", "name"),
        ("applicationCredentialSecret", "s"),
    ]));
    assert!(matches!(ac.method,
        Method::ApplicationCredential { ref id, ref name, ref secret, .. }
            if id == "id" && name == "name" && secret == "s"));
    assert!(ac.client_cert.is_none() && ac.client_key.is_none());
}
