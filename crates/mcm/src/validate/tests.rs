//! The report of `mcm validate`, built from in-memory YAML with the real drivers.

use super::*;

const CLASS: &str = r#"
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineClass
metadata: {name: c, namespace: ns}
provider: GCP
secretRef: {name: s, namespace: ns}
credentialsSecretRef: {name: creds}
providerSpec:
  zone: z
  Disks: [{sizeGB: 10, type: pd-ssd, boot: true}]
---
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: ns}
data:
  userData: Y2xvdWQtY29uZmlnLXRoYXQtaXMtc2VjcmV0   # cloud-config-that-is-secret
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: ns}
stringData:
  serviceAccountJSON: '{"type": "service_account", "project_id": "p", "private_key": "hunter2-hunter2-hunter2"}'
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
"#;

fn report(yaml: &str) -> (Vec<ClassReport>, String) {
    let mut objects = Objects::default();
    objects.add_yaml("mem.yaml", yaml).expect("parses");
    let args = crate::drivers::ProviderArgs {
        local_cloud_url: "http://127.0.0.1:1".into(),
        aws_endpoint: None,
        gcp_endpoint: None,
        alicloud_endpoint: None,
        azure_endpoint: None,
        #[cfg(feature = "grpc")]
        driver_endpoints: Vec::new(),
        #[cfg(feature = "grpc")]
        driver_tls_ca: None,
        #[cfg(feature = "grpc")]
        driver_tls_cert: None,
        #[cfg(feature = "grpc")]
        driver_tls_key: None,
        #[cfg(feature = "grpc")]
        driver_call_timeout: std::time::Duration::from_secs(120),
    };
    let registry = crate::drivers::registry(&args).expect("drivers");
    let reports = check_all(&objects, &|p| registry.get(Some(p)));
    let text = render(&reports, &objects);
    (reports, text)
}

#[test]
fn secrets_of_both_references_are_merged_and_the_class_checked_by_its_driver() {
    let (reports, text) = report(CLASS);
    assert_eq!(reports.len(), 1, "the ConfigMap is skipped");
    let r = &reports[0];
    assert_eq!(r.class, "ns/c");
    let warnings: Vec<&str> = r.check.warnings.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        warnings,
        ["providerSpec.Disks", "providerSpec.disks[0].sizeGB"],
        "{text}"
    );
    assert!(!r.check.is_ok(), "the spec lacks most fields: {text}");
    assert!(
        r.check
            .errors
            .iter()
            .all(|f| !f.field.starts_with("secretRef")),
        "userData and the credentials were found in the two Secrets: {text}"
    );
    assert!(
        text.contains("  warning: providerSpec.Disks: read as disks"),
        "{text}"
    );
    assert!(
        text.ends_with("1 MachineClass(es) checked, 1 with errors\n"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    assert!(!text.contains("cloud-config-that-is-secret"), "{text}");
}

#[test]
fn a_class_of_an_unknown_provider_is_an_error() {
    let (reports, text) =
        report("kind: MachineClass\nmetadata: {name: c}\nprovider: Nimbus\nproviderSpec: {}\n");
    assert_eq!(
        reports[0].check.errors,
        [Finding::new(
            "provider",
            "\"Nimbus\": no driver of this build serves this provider"
        )],
        "{text}"
    );
    assert!(text.contains("MachineClass default/c"), "{text}");
}

#[test]
fn a_message_quoting_a_secret_value_is_redacted() {
    let mut objects = Objects::default();
    objects
        .add_yaml(
            "mem.yaml",
            "kind: Secret\nmetadata: {name: s}\nstringData: {k: \"line one\\nsecret-word-123456 tail\"}\n",
        )
        .expect("parses");
    let reports = vec![ClassReport {
        class: "ns/c".into(),
        source: "mem.yaml".into(),
        provider: "X".into(),
        check: ClassCheck {
            errors: vec![Finding::new("secretRef.k", "bad value secret-word-123456")],
            warnings: Vec::new(),
        },
    }];
    let text = render(&reports, &objects);
    assert!(
        text.contains("  error:   secretRef.k: bad value <redacted>"),
        "{text}"
    );
    assert!(!text.contains("secret-word"), "{text}");
}
