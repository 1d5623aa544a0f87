use super::*;
use serde::Deserialize;
use serde_json::json;

const SENTINEL: &str = "SENTINEL-s3cr3t";

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
struct Spec {
    region: String,
    machine_type: String,
}

impl ProviderSpec for Spec {
    const PROVIDER: &'static str = "Test";
    const MESSAGES: Messages = Messages {
        join: Join::Aggregate,
        decode: "providerSpec: cannot decode: ",
        spec: "error while validating ProviderSpec ",
        secret: None,
    };

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.region.is_empty() {
            errs.push(FieldError::required(
                "providerSpec.region",
                "Region is required",
            ));
        }
        if self.machine_type.is_empty() {
            errs.push(FieldError::required(
                "providerSpec.machineType",
                "MachineType is required",
            ));
        }
        errs
    }

    fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
        let mut errs = Vec::new();
        secret.require(
            &mut errs,
            "secretRef.accessKeyID",
            &["accessKeyID", "providerAccessKeyId"],
            "Mention accessKeyID",
        );
        if purpose.needs_user_data() && !secret.is_set("userData") {
            errs.push(FieldError::required(
                "secretRef.userData",
                "Mention userData",
            ));
        }
        errs
    }
}

/// The same spec with the other wording: Go slices, Secret findings apart.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(transparent)]
struct GoSpec(Spec);

impl ProviderSpec for GoSpec {
    const PROVIDER: &'static str = "Go";
    const MESSAGES: Messages = Messages {
        join: Join::GoSlice,
        decode: "",
        spec: "error in validation of spec: ",
        secret: Some("error in validating secret: "),
    };
    fn validate(&self) -> Vec<FieldError> {
        self.0.validate()
    }
    fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
        Spec::validate_secret(secret, purpose)
    }
}

fn class(provider: &str, spec: serde_json::Value) -> MachineClass {
    MachineClass {
        provider: provider.into(),
        provider_spec: spec,
        ..Default::default()
    }
}

use crate::testing::secret_with as secret;

fn good_secret() -> Secret {
    secret(&[("accessKeyID", SENTINEL), ("userData", SENTINEL)])
}

#[test]
fn a_valid_class_decodes_with_its_key_warnings() {
    let d = decode::<Spec>(
        &class(
            "Test",
            json!({"Region": "eu", "machineType": "m", "extra": 1}),
        ),
        &good_secret(),
    )
    .expect("valid");
    assert_eq!(d.value.region, "eu");
    let fields: Vec<&str> = d.warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(fields, ["providerSpec.Region", "providerSpec.extra"]);
}

#[test]
fn every_spec_and_secret_finding_joins_one_invalid_argument() {
    let e = decode::<Spec>(&class("Test", json!({})), &secret(&[])).expect_err("invalid");
    assert_eq!(e.stage, Stage::Spec);
    assert_eq!(
        e.message,
        "error while validating ProviderSpec [providerSpec.region: Required value: Region is required, \
         providerSpec.machineType: Required value: MachineType is required, \
         secretRef.accessKeyID: Required value: Mention accessKeyID, \
         secretRef.userData: Required value: Mention userData]"
    );
    let status = Status::from(e);
    assert_eq!(status.code, crate::Code::InvalidArgument);
}

#[test]
fn one_finding_is_printed_alone_and_a_repeated_one_once() {
    let errs = [
        FieldError::required("a", "x"),
        FieldError::required("a", "x"),
    ];
    assert_eq!(Join::Aggregate.apply(&errs), "a: Required value: x");
    assert_eq!(
        Join::GoSlice.apply(&errs),
        "[a: Required value: x a: Required value: x]"
    );
    assert_eq!(Join::GoSlice.apply(&errs[..1]), "[a: Required value: x]");
}

#[test]
fn with_a_secret_prefix_the_spec_is_reported_first_then_the_secret() {
    let e =
        decode::<GoSpec>(&class("Go", json!({"region": "eu"})), &secret(&[])).expect_err("invalid");
    assert_eq!(e.stage, Stage::Spec);
    assert_eq!(
        e.message,
        "error in validation of spec: [providerSpec.machineType: Required value: MachineType is required]"
    );
    let e = decode::<GoSpec>(
        &class("Go", json!({"region": "eu", "machineType": "m"})),
        &secret(&[]),
    )
    .expect_err("invalid");
    assert_eq!(e.stage, Stage::Secret);
    assert_eq!(
        e.message,
        "error in validating secret: [secretRef.accessKeyID: Required value: Mention accessKeyID \
         secretRef.userData: Required value: Mention userData]"
    );
}

#[test]
fn another_provider_is_refused_before_decoding() {
    let e =
        decode::<Spec>(&class("AWS", json!("not an object")), &good_secret()).expect_err("refused");
    assert_eq!(e.stage, Stage::Provider);
    assert_eq!(
        e.message,
        "requested for Provider 'AWS', we only support 'Test'"
    );
}

#[test]
fn a_value_of_the_wrong_type_is_a_decode_refusal_naming_its_field() {
    let e =
        decode::<Spec>(&class("Test", json!({"region": 3})), &good_secret()).expect_err("refused");
    assert_eq!(e.stage, Stage::Decode);
    assert!(
        e.message
            .starts_with("providerSpec: cannot decode: providerSpec.region: invalid type"),
        "{}",
        e.message
    );
}

#[test]
fn null_is_the_empty_spec() {
    let d = decode_class::<Spec>(&class("Test", serde_json::Value::Null)).expect("decodes");
    assert_eq!(d.value, Spec::default());
}

#[test]
fn existing_vms_need_credentials_but_neither_a_valid_spec_nor_user_data() {
    let creds = secret(&[("providerAccessKeyId", " k ")]);
    let d = decode_existing::<Spec>(&class("Test", json!({})), &creds).expect("usable");
    assert_eq!(d.value, Spec::default());
    let e = decode_existing::<Spec>(&class("Test", json!({})), &secret(&[("accessKeyID", "  ")]))
        .expect_err("no credentials");
    assert_eq!(
        e.message,
        "error while validating ProviderSpec secretRef.accessKeyID: Required value: Mention accessKeyID"
    );
}

#[test]
fn check_class_lists_every_finding_by_field_and_never_a_secret_value() {
    let bad_secret = secret(&[("userData", SENTINEL), ("other", SENTINEL)]);
    let check = check_class::<Spec>(&class("AWS", json!({"Region": "eu"})), &bad_secret);
    let errors: Vec<String> = check.errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        errors,
        [
            "provider: \"AWS\": this driver serves \"Test\"",
            "providerSpec.machineType: Required value: MachineType is required",
            "secretRef.accessKeyID: Required value: Mention accessKeyID",
        ]
    );
    assert_eq!(check.warnings.len(), 1);
    assert!(!format!("{check:?}").contains(SENTINEL));
    assert!(!format!("{:?}", SecretData(&bad_secret)).contains(SENTINEL));
}

#[test]
fn check_class_reports_a_decode_failure_and_still_checks_the_secret() {
    let check = check_class::<Spec>(&class("Test", json!({"region": []})), &secret(&[]));
    assert_eq!(check.errors[0].field, "providerSpec.region");
    assert_eq!(check.errors.len(), 3);
}

#[test]
fn warnings_come_from_decoding_even_when_it_fails() {
    let w = warnings::<Spec>(&json!({"REGION": 1}));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("providerSpec.REGION: "), "{w:?}");
    assert!(warnings::<Spec>(&json!({"region": "eu"})).is_empty());
}

#[test]
fn field_errors_print_as_kubernetes_prints_them() {
    let printed: Vec<String> = [
        FieldError::required("f", "d"),
        FieldError::invalid("f", "x", "d"),
        FieldError::invalid("f", 3, "d"),
        FieldError::forbidden("f", "d"),
        FieldError::not_supported("f", "x", &["a", "b"]),
        FieldError::unworded("secretRef", "secret userData is required field"),
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(
        printed,
        [
            "f: Required value: d",
            "f: Invalid value: \"x\": d",
            "f: Invalid value: 3: d",
            "f: Forbidden: d",
            "f: Unsupported value: \"x\": supported values: \"a\", \"b\"",
            "secret userData is required field",
        ]
    );
}

#[test]
fn a_finding_is_about_the_key_its_field_ends_with() {
    assert!(FieldError::required("secretRef.userData", "").is_about("userData"));
    assert!(FieldError::required("data[userData]", "").is_about("userData"));
    assert!(!FieldError::required("secretRef.notUserData", "").is_about("userData"));
}
