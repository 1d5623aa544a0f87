//! Compatibility with Gardener's machine-controller-manager:
//!
//! * the generated CRDs accept everything the reference CRDs accept (same property paths, same
//!   types, preserve-unknown-fields in the same places, no extra required fields), with the
//!   same names, short names, subresources and printer columns;
//! * the reference examples and ours parse into the typed structs and serialize back to what
//!   the apiserver would store, unknown providerSpec fields included;
//! * objects as the Go controller writes them parse.
//!
//! The reference files are always read from the copies committed in `tests/fixtures/reference/`
//! (the repository stands alone, in CI as anywhere); `SHA256SUMS` there pins them (the
//! SHA-256 of the unmodified upstream files), and every test here runs and can fail everywhere:
//! none depends on a file outside the repository.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use mcm_api::validation::{
    validate_machine, validate_machine_class, validate_machine_deployment, validate_machine_set,
};
use mcm_api::{
    crds, Machine, MachineClass, MachineDeployment, MachineOperationType, MachinePhase, MachineSet,
    MachineState,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixtures_reference_dir() -> PathBuf {
    manifest_dir().join("tests/fixtures/reference")
}

/// `crds/` or `examples/` of the reference manifests (the committed copies).
fn reference_dir(sub: &str) -> PathBuf {
    fixtures_reference_dir().join(sub)
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", dir.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no YAML files in {}", dir.display());
    files
}

/// Every non-empty YAML document of a file, as JSON.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| {
            let yaml = serde_yaml::Value::deserialize(document)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            serde_json::to_value(yaml).unwrap()
        })
        .filter(|value| !value.is_null())
        .collect()
}

use serde::Deserialize as _;

fn reference_crd(kind: &str) -> Value {
    for path in yaml_files(&reference_dir("crds")) {
        for document in documents(&path) {
            if document["spec"]["names"]["kind"] == kind {
                return document;
            }
        }
    }
    panic!("no reference CRD for {kind}");
}

fn generated_crd(kind: &str) -> Value {
    let crd = crds()
        .into_iter()
        .find(|crd| crd.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no generated CRD for {kind}"));
    serde_json::to_value(crd).unwrap()
}

fn schema_of(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

const KINDS: [&str; 4] = ["MachineClass", "Machine", "MachineSet", "MachineDeployment"];

// ---------------------------------------------------------------------------------------------
// Schema comparison
// ---------------------------------------------------------------------------------------------

fn is_true(value: &Value, key: &str) -> bool {
    value.get(key) == Some(&Value::Bool(true))
}

fn is_int_or_string(schema: &Value) -> bool {
    is_true(schema, "x-kubernetes-int-or-string")
}

fn required_set(schema: &Value) -> BTreeSet<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Required fields ours may add on top of the reference: the root `spec` of the derived kinds
/// (kube-derive requires it; a Machine/MachineSet/MachineDeployment without spec is useless,
/// and the Go controller always writes one).
const ALLOWED_EXTRA_REQUIRED: [&str; 1] = ["<root>.spec"];

/// Walks the reference schema and checks that ours accepts every path with the same type.
fn compare_schema(reference: &Value, ours: &Value, path: &str, problems: &mut Vec<String>) {
    // Type.
    if is_int_or_string(reference) {
        if !is_int_or_string(ours) {
            problems.push(format!(
                "{path}: reference is int-or-string, ours is {ours}"
            ));
        }
    } else if let Some(reference_type) = reference.get("type") {
        if ours.get("type") != Some(reference_type) {
            problems.push(format!(
                "{path}: type {reference_type} in the reference, {:?} in ours",
                ours.get("type")
            ));
        }
    }
    // Format (date-time, int32, int64).
    if let Some(format) = reference.get("format") {
        if ours.get("format") != Some(format) {
            problems.push(format!(
                "{path}: format {format} in the reference, {:?} in ours",
                ours.get("format")
            ));
        }
    }
    // Unknown fields.
    if is_true(reference, "x-kubernetes-preserve-unknown-fields")
        && !is_true(ours, "x-kubernetes-preserve-unknown-fields")
    {
        problems.push(format!(
            "{path}: reference preserves unknown fields, ours does not"
        ));
    }
    // Required: ours must not demand more than the reference.
    for name in required_set(ours).difference(&required_set(reference)) {
        let field = format!("{path}.{name}");
        if !ALLOWED_EXTRA_REQUIRED
            .iter()
            .any(|allowed| field.ends_with(allowed))
        {
            problems.push(format!(
                "{field}: required in ours, optional in the reference"
            ));
        }
    }
    // Children.
    if let Some(properties) = reference.get("properties").and_then(Value::as_object) {
        for (name, reference_child) in properties {
            let child_path = format!("{path}.{name}");
            match ours.get("properties").and_then(|props| props.get(name)) {
                Some(our_child) => {
                    compare_schema(reference_child, our_child, &child_path, problems)
                }
                None => problems.push(format!("{child_path}: missing in ours")),
            }
        }
    }
    if let Some(reference_items) = reference.get("items") {
        match ours.get("items") {
            Some(our_items) => {
                compare_schema(reference_items, our_items, &format!("{path}[]"), problems)
            }
            None => problems.push(format!("{path}[]: items missing in ours")),
        }
    }
    if let Some(reference_values) = reference.get("additionalProperties") {
        match ours.get("additionalProperties") {
            Some(our_values) => compare_schema(
                reference_values,
                our_values,
                &format!("{path}{{*}}"),
                problems,
            ),
            None => problems.push(format!("{path}{{*}}: additionalProperties missing in ours")),
        }
    }
}

/// All property paths of a schema (for the sanity check that the walk covered something).
fn count_paths(schema: &Value) -> usize {
    let mut count = 1;
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        count += properties.values().map(count_paths).sum::<usize>();
    }
    if let Some(items) = schema.get("items") {
        count += count_paths(items);
    }
    count
}

#[test]
fn generated_schemas_accept_every_reference_field() {
    let mut problems = Vec::new();
    for kind in KINDS {
        let reference = reference_crd(kind);
        let ours = generated_crd(kind);
        let reference_schema = schema_of(&reference);
        assert!(
            count_paths(reference_schema) > 5,
            "{kind}: reference schema is empty"
        );
        compare_schema(
            reference_schema,
            schema_of(&ours),
            &format!("{kind}:<root>"),
            &mut problems,
        );
    }
    assert!(
        problems.is_empty(),
        "schema incompatibilities:\n{}",
        problems.join("\n")
    );
}

#[test]
fn schema_walk_detects_differences() {
    // The checker itself: a missing field, a wrong type, a lost preserve-unknown-fields and an
    // extra required field are all reported.
    let reference = json!({
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "integer"},
            "c": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "d": {"x-kubernetes-int-or-string": true},
        }
    });
    let ours = json!({
        "type": "object",
        "required": ["b"],
        "properties": {
            "b": {"type": "string"},
            "c": {"type": "object"},
            "d": {"type": "integer"},
        }
    });
    let mut problems = Vec::new();
    compare_schema(&reference, &ours, "<root>", &mut problems);
    assert_eq!(problems.len(), 5, "{problems:#?}");
}

#[test]
fn names_short_names_and_scope_match_reference() {
    for kind in KINDS {
        let reference = reference_crd(kind);
        let ours = generated_crd(kind);
        assert_eq!(
            ours["metadata"]["name"], reference["metadata"]["name"],
            "{kind}"
        );
        assert_eq!(ours["spec"]["group"], reference["spec"]["group"], "{kind}");
        assert_eq!(ours["spec"]["scope"], reference["spec"]["scope"], "{kind}");
        for key in ["kind", "listKind", "plural", "singular", "shortNames"] {
            assert_eq!(
                ours["spec"]["names"][key], reference["spec"]["names"][key],
                "{kind}: names.{key}"
            );
        }
        let (our_version, reference_version) = (
            &ours["spec"]["versions"][0],
            &reference["spec"]["versions"][0],
        );
        for key in ["name", "served", "storage"] {
            assert_eq!(
                our_version[key], reference_version[key],
                "{kind}: version {key}"
            );
        }
        assert_eq!(
            ours["spec"]["versions"].as_array().map(Vec::len),
            Some(1),
            "{kind}: one version"
        );
    }
}

#[test]
fn subresources_match_reference() {
    for kind in KINDS {
        let reference = reference_crd(kind);
        let ours = generated_crd(kind);
        assert_eq!(
            ours["spec"]["versions"][0]["subresources"],
            reference["spec"]["versions"][0]["subresources"],
            "{kind}: subresources"
        );
    }
    // Spelled out, so that a change of the reference is noticed too.
    assert_eq!(
        generated_crd("MachineClass")["spec"]["versions"][0]["subresources"],
        Value::Null
    );
    assert_eq!(
        generated_crd("Machine")["spec"]["versions"][0]["subresources"],
        json!({"status": {}})
    );
    for kind in ["MachineSet", "MachineDeployment"] {
        assert_eq!(
            generated_crd(kind)["spec"]["versions"][0]["subresources"],
            json!({
                "status": {},
                "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
            }),
            "{kind}"
        );
    }
}

fn printer_columns(crd: &Value) -> Vec<(String, String, String, i64)> {
    crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .map(|columns| {
            columns
                .iter()
                .map(|column| {
                    (
                        column["name"].as_str().unwrap_or_default().to_owned(),
                        column["jsonPath"].as_str().unwrap_or_default().to_owned(),
                        column["type"].as_str().unwrap_or_default().to_owned(),
                        column["priority"].as_i64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn printer_columns_match_reference() {
    for kind in KINDS {
        assert_eq!(
            printer_columns(&generated_crd(kind)),
            printer_columns(&reference_crd(kind)),
            "{kind}: printer columns (name, jsonPath, type, priority)"
        );
    }
    let machine = printer_columns(&generated_crd("Machine"));
    assert_eq!(
        machine.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        ["Status", "Age", "Node", "ProviderID"]
    );
    assert_eq!(machine[3].3, 1, "ProviderID only with -o wide");
}

/// `relative path -> sha256` from the committed `SHA256SUMS`.
fn pinned_checksums() -> std::collections::BTreeMap<String, String> {
    let path = fixtures_reference_dir().join("SHA256SUMS");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (sum, name) = line
                .split_once("  ")
                .unwrap_or_else(|| panic!("SHA256SUMS: bad line {line:?}"));
            (name.to_string(), sum.to_string())
        })
        .collect()
}

#[test]
fn reference_fixtures_are_committed_complete_and_unmodified() {
    use sha2::{Digest, Sha256};
    let pinned = pinned_checksums();
    let mut found = BTreeSet::new();
    for sub in ["crds", "examples"] {
        for path in yaml_files(&reference_dir(sub)) {
            let name = format!("{sub}/{}", path.file_name().unwrap().to_string_lossy());
            let bytes = std::fs::read(&path).unwrap();
            let sum: String = Sha256::digest(&bytes)
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect();
            assert_eq!(
                pinned.get(&name),
                Some(&sum),
                "tests/fixtures/reference/{name} is not the pinned reference file"
            );
            found.insert(name);
        }
    }
    let pinned_names: BTreeSet<String> = pinned.keys().cloned().collect();
    assert_eq!(found, pinned_names, "fixtures missing or not pinned");
    // Every kind the tests compare has its reference CRD among the fixtures.
    for kind in KINDS {
        reference_crd(kind);
    }
}

// ---------------------------------------------------------------------------------------------
// Pruning: what the apiserver stores for a manifest under a structural schema
// ---------------------------------------------------------------------------------------------

/// Drops the fields a structural schema does not know (unless unknown fields are preserved),
/// like the apiserver does on create/update. Returns the pruned paths.
fn prune(value: &mut Value, schema: &Value, path: &str, pruned: &mut Vec<String>) {
    let preserve = is_true(schema, "x-kubernetes-preserve-unknown-fields");
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let child_path = format!("{path}.{key}");
                let child_schema = properties
                    .and_then(|props| props.get(&key))
                    .or(additional.filter(|schema| schema.is_object()));
                // The apiserver handles the root `metadata` itself (ObjectMeta); never pruned.
                if path.is_empty() && key == "metadata" {
                    continue;
                }
                match child_schema {
                    Some(child_schema) => {
                        if let Some(child) = map.get_mut(&key) {
                            prune(child, child_schema, &child_path, pruned);
                        }
                    }
                    None if preserve => {}
                    None => {
                        map.remove(&key);
                        pruned.push(child_path);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    prune(item, item_schema, &format!("{path}[{index}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

/// Validates the JSON types of a manifest against a schema (the subset of OpenAPI the CRDs
/// use): type, int-or-string, required, items, properties, additionalProperties.
fn type_check(value: &Value, schema: &Value, path: &str, problems: &mut Vec<String>) {
    if value.is_null() {
        if !is_true(schema, "nullable") {
            problems.push(format!("{path}: null where the schema is not nullable"));
        }
        return;
    }
    let type_ok = if is_int_or_string(schema) {
        value.is_i64() || value.is_u64() || value.is_string()
    } else {
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => value.is_string(),
            Some("integer") => value.is_i64() || value.is_u64(),
            Some("number") => value.is_number(),
            Some("boolean") => value.is_boolean(),
            Some("array") => value.is_array(),
            Some("object") => value.is_object(),
            _ => true,
        }
    };
    if !type_ok {
        problems.push(format!("{path}: {value} does not match {schema}"));
        return;
    }
    if let Value::Object(map) = value {
        for name in required_set(schema) {
            if !map.contains_key(&name) {
                problems.push(format!("{path}.{name}: required"));
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (key, child) in map {
            let child_schema = properties
                .and_then(|props| props.get(key))
                .or(schema.get("additionalProperties").filter(|s| s.is_object()));
            if let Some(child_schema) = child_schema {
                type_check(child, child_schema, &format!("{path}.{key}"), problems);
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (value, schema.get("items")) {
        for (index, item) in items.iter().enumerate() {
            type_check(item, item_schema, &format!("{path}[{index}]"), problems);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Examples
// ---------------------------------------------------------------------------------------------

fn our_examples_dir() -> PathBuf {
    manifest_dir().join("../../examples")
}

fn all_example_files() -> Vec<PathBuf> {
    let mut files = yaml_files(&reference_dir("examples"));
    files.extend(yaml_files(&our_examples_dir()));
    files
}

fn is_mcm_kind(document: &Value) -> bool {
    document["apiVersion"] == "machine.sapcloud.io/v1alpha1"
}

/// Parses `document` into `T` and serializes it back.
fn round_trip<T: DeserializeOwned + Serialize>(document: &Value) -> Value {
    let typed: T = serde_json::from_value(document.clone())
        .unwrap_or_else(|error| panic!("does not parse: {error}\n{document:#}"));
    serde_json::to_value(&typed).unwrap()
}

fn round_trip_kind(document: &Value) -> Value {
    match document["kind"].as_str() {
        Some("MachineClass") => round_trip::<MachineClass>(document),
        Some("Machine") => round_trip::<Machine>(document),
        Some("MachineSet") => round_trip::<MachineSet>(document),
        Some("MachineDeployment") => round_trip::<MachineDeployment>(document),
        other => panic!("unexpected kind {other:?}"),
    }
}

#[test]
fn examples_round_trip_through_the_typed_structs() {
    let mut checked = 0;
    for path in all_example_files() {
        for document in documents(&path) {
            if !is_mcm_kind(&document) {
                continue;
            }
            let kind = document["kind"].as_str().unwrap_or_default().to_owned();
            // What the apiserver would store (the reference CRD prunes e.g. the unknown
            // `spec.template.spec.class.namespace` of the reference aws-machine-deployment).
            let mut stored = document.clone();
            let mut pruned = Vec::new();
            prune(
                &mut stored,
                schema_of(&reference_crd(&kind)),
                "",
                &mut pruned,
            );
            let back = round_trip_kind(&document);
            assert_eq!(
                back,
                stored,
                "{}: {kind} does not round-trip (pruned by the reference CRD: {pruned:?})",
                path.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} example objects found");
}

#[test]
fn examples_are_valid_against_generated_schemas_and_pruned_like_the_reference() {
    for path in all_example_files() {
        for document in documents(&path) {
            if !is_mcm_kind(&document) {
                continue;
            }
            let kind = document["kind"].as_str().unwrap_or_default().to_owned();
            let ours = generated_crd(&kind);
            let reference = reference_crd(&kind);
            let mut problems = Vec::new();
            type_check(&document, schema_of(&ours), "", &mut problems);
            assert!(problems.is_empty(), "{}: {problems:#?}", path.display());

            let (mut ours_pruned, mut reference_pruned) = (Vec::new(), Vec::new());
            prune(
                &mut document.clone(),
                schema_of(&ours),
                "",
                &mut ours_pruned,
            );
            prune(
                &mut document.clone(),
                schema_of(&reference),
                "",
                &mut reference_pruned,
            );
            assert_eq!(
                ours_pruned,
                reference_pruned,
                "{}: pruning differs",
                path.display()
            );
            // Our own examples must not contain anything that gets dropped.
            if path.starts_with(our_examples_dir()) {
                assert!(
                    ours_pruned.is_empty(),
                    "{}: {ours_pruned:?}",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn our_examples_are_complete_and_valid() {
    let dir = our_examples_dir();
    let mut kinds = BTreeSet::new();
    for path in yaml_files(&dir) {
        for document in documents(&path) {
            let kind = document["kind"].as_str().unwrap_or_default().to_owned();
            match kind.as_str() {
                "Secret" => {
                    let secret: Secret = serde_json::from_value(document.clone()).unwrap();
                    let data_keys: BTreeSet<String> = secret
                        .data
                        .iter()
                        .flat_map(|data| data.keys().cloned())
                        .chain(
                            secret
                                .string_data
                                .iter()
                                .flat_map(|data| data.keys().cloned()),
                        )
                        .collect();
                    assert!(!data_keys.is_empty(), "{}: empty Secret", path.display());
                }
                "MachineClass" => {
                    let class: MachineClass = serde_json::from_value(document.clone()).unwrap();
                    assert_eq!(validate_machine_class(&class), Ok(()), "{}", path.display());
                }
                "Machine" => {
                    let machine: Machine = serde_json::from_value(document.clone()).unwrap();
                    assert_eq!(validate_machine(&machine), Ok(()), "{}", path.display());
                }
                "MachineSet" => {
                    let set: MachineSet = serde_json::from_value(document.clone()).unwrap();
                    assert_eq!(validate_machine_set(&set), Ok(()), "{}", path.display());
                }
                "MachineDeployment" => {
                    let deployment: MachineDeployment =
                        serde_json::from_value(document.clone()).unwrap();
                    assert_eq!(
                        validate_machine_deployment(&deployment),
                        Ok(()),
                        "{}",
                        path.display()
                    );
                }
                other => panic!("{}: unexpected kind {other}", path.display()),
            }
            kinds.insert(kind);
        }
    }
    assert_eq!(
        kinds,
        [
            "Machine",
            "MachineClass",
            "MachineDeployment",
            "MachineSet",
            "Secret"
        ]
        .into_iter()
        .map(str::to_owned)
        .collect()
    );
    for file in [
        "machine-class.yaml",
        "machine.yaml",
        "machine-set.yaml",
        "machine-deployment.yaml",
        "aws-machine-class.yaml",
    ] {
        assert!(dir.join(file).is_file(), "examples/{file} missing");
    }
}

#[test]
fn local_machine_class_example_matches_the_local_provider_contract() {
    let docs = documents(&our_examples_dir().join("machine-class.yaml"));
    let secret = docs.iter().find(|doc| doc["kind"] == "Secret").unwrap();
    let secret: Secret = serde_json::from_value(secret.clone()).unwrap();
    assert_eq!(secret.metadata.name.as_deref(), Some("local-secret"));
    let user_data = secret
        .data
        .as_ref()
        .and_then(|data| data.get("userData"))
        .unwrap();
    assert!(String::from_utf8_lossy(&user_data.0).starts_with("#cloud-config"));

    let class = docs
        .iter()
        .find(|doc| doc["kind"] == "MachineClass")
        .unwrap();
    let class: MachineClass = serde_json::from_value(class.clone()).unwrap();
    assert_eq!(class.provider, "local");
    assert_eq!(
        class.secret_ref.as_ref().and_then(|r| r.name.as_deref()),
        Some("local-secret")
    );
    let spec = &class.provider_spec;
    assert_eq!(spec["image"], "local-ubuntu");
    assert_eq!(spec["instanceType"], "small");
    assert_eq!(spec["srcAndDstChecksEnabled"], false);
    assert_eq!(spec["ipv6AddressCount"], 1);
    assert_eq!(spec["ipv6PrefixCount"], 1);
    assert_eq!(spec["tags"]["kubernetes.io/cluster/shoot--demo"], "1");
    assert_eq!(spec["tags"]["kubernetes.io/role/node"], "1");

    let deployment = documents(&our_examples_dir().join("machine-deployment.yaml"))
        .into_iter()
        .next()
        .unwrap();
    let deployment: MachineDeployment = serde_json::from_value(deployment).unwrap();
    assert_eq!(deployment.spec.replicas, 3);
    let (surge, unavailable) = mcm_api::validation::resolve_fenceposts(
        deployment
            .spec
            .strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.max_surge.as_ref()),
        deployment
            .spec
            .strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.max_unavailable.as_ref()),
        deployment.spec.replicas,
    )
    .unwrap();
    assert_eq!((surge, unavailable), (1, 0));
}

#[test]
fn unknown_provider_spec_fields_survive_a_round_trip() {
    // Reference AWS example: deeply nested provider fields mcm-api knows nothing about.
    let path = reference_dir("examples").join("aws-machine-class.yaml");
    let document = documents(&path).into_iter().find(is_mcm_kind).unwrap();
    let class: MachineClass = serde_json::from_value(document.clone()).unwrap();
    let back = serde_json::to_value(&class).unwrap();
    assert_eq!(
        back["providerSpec"]["blockDevices"][1]["ebs"]["encrypted"],
        true
    );
    assert_eq!(
        back["providerSpec"]["instanceMetadataOptions"]["httpPutResponseHopLimit"],
        1
    );
    assert_eq!(back["providerSpec"]["spotPrice"], "");
    assert_eq!(back["providerSpec"], document["providerSpec"]);

    // A field no provider has ever had.
    let mut document = document;
    document["providerSpec"]["someFutureField"] = json!({"nested": [1, "two", {"three": null}]});
    let class: MachineClass = serde_json::from_value(document.clone()).unwrap();
    assert_eq!(
        serde_json::to_value(&class).unwrap()["providerSpec"]["someFutureField"],
        json!({"nested": [1, "two", {"three": null}]})
    );
}

// ---------------------------------------------------------------------------------------------
// Objects as the Go controller writes them
// ---------------------------------------------------------------------------------------------

/// A Machine as the Go machine controller writes it: every struct-valued field present (Go's
/// omitempty does not omit structs), zero times as null, a failed create in CrashLoopBackOff.
fn go_machine() -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": "shoot--demo--aws-worker-z1-6d5c7-x8kqp",
            "namespace": "shoot--demo--aws",
            "uid": "0b7e8f1c-1f5e-4f3c-9a4e-1d2c3b4a5f60",
            "resourceVersion": "123456",
            "generation": 1,
            "creationTimestamp": "2026-08-20T09:09:41Z",
            "labels": {"name": "worker-z1", "machine-template-hash": "2817305596"},
            "annotations": {"machinepriority.machine.sapcloud.io": "3"},
            "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
            "ownerReferences": [{
                "apiVersion": "machine.sapcloud.io/v1alpha1",
                "kind": "MachineSet",
                "name": "shoot--demo--aws-worker-z1-6d5c7",
                "uid": "5e0c1a9e-2b7d-4c55-9f0e-0c7b1d2a3f44",
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "class": {"kind": "MachineClass", "name": "shoot--demo--aws-worker-z1-8f3a1"},
            "nodeTemplate": {"metadata": {"creationTimestamp": null}, "spec": {}},
            "creationTimeout": "20m0s",
            "healthTimeout": "10m0s",
            "drainTimeout": "2h0m0s",
            "maxEvictRetries": 360,
            "nodeConditions": "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable"
        },
        "status": {
            "lastOperation": {
                "description": "Cloud provider message - machine codes error: code = [ResourceExhausted] message = [InsufficientInstanceCapacity: no m5.large capacity in eu-west-1a]. Retrying.",
                "errorCode": "ResourceExhausted",
                "lastUpdateTime": "2026-08-20T09:10:12Z",
                "state": "Failed",
                "type": "Create"
            },
            "currentStatus": {
                "phase": "CrashLoopBackOff",
                "timeoutActive": true,
                "lastUpdateTime": "2026-08-20T09:10:12Z"
            }
        }
    })
}

#[test]
fn machine_written_by_the_go_controller_parses() {
    let machine: Machine = serde_json::from_value(go_machine()).unwrap();
    let status = machine.status.as_ref().unwrap();
    assert_eq!(status.current_status.phase, MachinePhase::CrashLoopBackOff);
    assert_eq!(machine.phase(), MachinePhase::CrashLoopBackOff);
    assert!(status.current_status.timeout_active);
    assert_eq!(status.last_operation.state, MachineState::Failed);
    assert_eq!(status.last_operation.type_, MachineOperationType::Create);
    assert_eq!(status.last_operation.error_code, "ResourceExhausted");
    assert!(status
        .last_operation
        .description
        .contains("code = [ResourceExhausted]"));
    assert_eq!(
        machine.spec.configuration.creation_timeout_duration(),
        Ok(Some(std::time::Duration::from_secs(1200)))
    );
    assert_eq!(machine.spec.configuration.max_evict_retries, Some(360));
    assert_eq!(
        machine
            .spec
            .configuration
            .node_conditions_list()
            .map(|list| list.len()),
        Some(4)
    );
    assert_eq!(machine.meta().finalizers.as_ref().map(Vec::len), Some(1));
    assert_eq!(validate_machine(&machine), Ok(()));

    // Writing it back keeps every value (the null creationTimestamp of the node template
    // metadata and the empty node spec are dropped, which means the same to Go).
    let back = serde_json::to_value(&machine).unwrap();
    let mut expected = go_machine();
    expected["spec"]
        .as_object_mut()
        .unwrap()
        .remove("nodeTemplate");
    assert_eq!(back, expected);
    // And it parses again to the same value.
    let again: Machine = serde_json::from_value(back).unwrap();
    assert_eq!(again, machine);
}

#[test]
fn go_zero_values_parse() {
    // Zero times are written as null; empty strings for phase, state and type; empty structs.
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "m", "creationTimestamp": null},
        "spec": {"class": {}, "nodeTemplate": {"metadata": {}, "spec": {}}},
        "status": {
            "lastOperation": {"lastUpdateTime": null, "state": "", "type": ""},
            "currentStatus": {"phase": "", "lastUpdateTime": null, "preserveExpiryTime": null}
        }
    }))
    .unwrap();
    let status = machine.status.as_ref().unwrap();
    assert_eq!(status.current_status.phase, MachinePhase::Empty);
    assert_eq!(status.last_operation.state, MachineState::Empty);
    assert_eq!(status.last_operation.type_, MachineOperationType::Empty);
    assert_eq!(status.last_operation.last_update_time, None);
    // Serialized, the empty values disappear, as with Go's omitempty.
    assert_eq!(
        serde_json::to_value(&machine).unwrap(),
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "Machine",
            "metadata": {"name": "m"},
            "spec": {},
            "status": {}
        })
    );
}

#[test]
fn unknown_enum_values_round_trip() {
    let mut document = go_machine();
    document["status"]["currentStatus"]["phase"] = json!("Hibernating");
    document["status"]["lastOperation"]["state"] = json!("Queued");
    document["status"]["lastOperation"]["type"] = json!("Migrate");
    let machine: Machine = serde_json::from_value(document.clone()).unwrap();
    assert_eq!(machine.phase(), MachinePhase::Other("Hibernating".into()));
    let back = serde_json::to_value(&machine).unwrap();
    assert_eq!(back["status"], document["status"]);
}

#[test]
fn machine_set_written_by_the_go_controller_parses() {
    let document = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {
            "name": "worker-z1-6d5c7",
            "namespace": "shoot--demo--aws",
            "labels": {"name": "worker-z1", "machine-template-hash": "2817305596", "freeze": "True"},
            "annotations": {
                "deployment.kubernetes.io/revision": "1",
                "deployment.kubernetes.io/desired-replicas": "2",
                "deployment.kubernetes.io/max-replicas": "3"
            }
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"name": "worker-z1", "machine-template-hash": "2817305596"}},
            "machineClass": {},
            "template": {
                "metadata": {"creationTimestamp": null, "labels": {"name": "worker-z1", "machine-template-hash": "2817305596"}},
                "spec": {
                    "class": {"kind": "MachineClass", "name": "worker-z1-8f3a1"},
                    "nodeTemplate": {"metadata": {"creationTimestamp": null}, "spec": {}},
                    "creationTimeout": "20m0s"
                }
            },
            "autoPreserveFailedMachineMax": 1
        },
        "status": {
            "replicas": 3,
            "fullyLabeledReplicas": 3,
            "readyReplicas": 1,
            "availableReplicas": 1,
            "observedGeneration": 4,
            "machineSetCondition": [{
                "type": "Frozen",
                "status": "True",
                "lastTransitionTime": "2026-08-20T09:30:00Z",
                "reason": "OverShootingReplicaCount",
                "message": "The number of machines backing MachineSet: worker-z1-6d5c7 is 3 >= 2 which is the Max-ScaleUp-Limit"
            }],
            "lastOperation": {"lastUpdateTime": null},
            "failedMachines": [{
                "name": "worker-z1-6d5c7-x8kqp",
                "providerID": "aws:///eu-west-1/i-0123456789abcdef0",
                "ownerRef": "worker-z1-6d5c7",
                "lastOperation": {
                    "description": "Machine worker-z1-6d5c7-x8kqp failed to join the cluster in 20m0s minutes.",
                    "lastUpdateTime": "2026-08-20T09:29:00Z",
                    "state": "Failed",
                    "type": "HealthCheck"
                }
            }],
            "autoPreserveFailedMachineCount": 1
        }
    });
    let set: MachineSet = serde_json::from_value(document).unwrap();
    assert_eq!(validate_machine_set(&set), Ok(()));
    let status = set.status.as_ref().unwrap();
    assert_eq!(status.conditions.len(), 1);
    assert_eq!(
        status.conditions[0].type_,
        mcm_api::MachineSetConditionType::Frozen
    );
    assert_eq!(status.conditions[0].status, mcm_api::ConditionStatus::True);
    let failed = status.failed_machines.as_ref().unwrap();
    assert_eq!(
        failed[0].provider_id,
        "aws:///eu-west-1/i-0123456789abcdef0"
    );
    assert_eq!(
        failed[0].last_operation.type_,
        MachineOperationType::HealthCheck
    );
    assert_eq!(status.auto_preserve_failed_machine_count, 1);
    let back = serde_json::to_value(&set).unwrap();
    assert!(back["status"].get("machineSetCondition").is_some());
    assert!(back["status"].get("conditions").is_none());
}

#[test]
fn machine_deployment_written_by_the_go_controller_parses() {
    let document = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": "worker-z1", "namespace": "shoot--demo--aws", "generation": 3},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"name": "worker-z1"}},
            "template": {
                "metadata": {"creationTimestamp": null, "labels": {"name": "worker-z1"}},
                "spec": {"class": {"kind": "MachineClass", "name": "worker-z1-8f3a1"}, "nodeTemplate": {"metadata": {"creationTimestamp": null}, "spec": {}}}
            },
            "strategy": {
                "type": "InPlaceUpdate",
                "inPlaceUpdate": {"maxSurge": "25%", "maxUnavailable": 1, "orchestrationType": "Manual"}
            },
            "revisionHistoryLimit": 0,
            "rollbackTo": {"revision": 2},
            "progressDeadlineSeconds": 600,
            "paused": true
        },
        "status": {
            "observedGeneration": 3,
            "replicas": 2,
            "updatedReplicas": 1,
            "readyReplicas": 2,
            "availableReplicas": 2,
            "unavailableReplicas": 0,
            "conditions": [{
                "type": "Progressing",
                "status": "Unknown",
                "lastUpdateTime": "2026-08-20T09:14:02Z",
                "lastTransitionTime": "2026-08-20T09:14:02Z",
                "reason": "DeploymentPaused",
                "message": "Deployment is paused"
            }],
            "collisionCount": 0,
            "failedMachines": []
        }
    });
    let deployment: MachineDeployment = serde_json::from_value(document).unwrap();
    assert_eq!(validate_machine_deployment(&deployment), Ok(()));
    let spec = &deployment.spec;
    assert_eq!(
        spec.revision_history_limit,
        Some(0),
        "pointer: explicit zero is kept"
    );
    assert_eq!(spec.rollback_to.as_ref().map(|r| r.revision), Some(2));
    assert!(spec.paused);
    let in_place = spec.strategy.in_place_update.as_ref().unwrap();
    assert_eq!(
        in_place.orchestration_type,
        mcm_api::OrchestrationType::Manual
    );
    assert_eq!(
        in_place.update_configuration.max_surge,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("25%".into()))
    );
    let fence = spec.update_configuration().unwrap();
    assert_eq!(
        mcm_api::validation::resolve_fenceposts(
            fence.max_surge.as_ref(),
            fence.max_unavailable.as_ref(),
            2
        ),
        Ok((1, 1))
    );
    let status = deployment.status.as_ref().unwrap();
    assert_eq!(status.collision_count, Some(0));
    assert_eq!(status.conditions[0].reason, "DeploymentPaused");
    let back = serde_json::to_value(&deployment).unwrap();
    assert_eq!(back["spec"]["revisionHistoryLimit"], 0);
    assert_eq!(back["spec"]["strategy"]["inPlaceUpdate"]["maxSurge"], "25%");
    assert_eq!(back["status"]["collisionCount"], 0);
}

#[test]
fn kube_resource_metadata() {
    assert_eq!(Machine::api_version(&()), "machine.sapcloud.io/v1alpha1");
    assert_eq!(
        MachineClass::api_version(&()),
        "machine.sapcloud.io/v1alpha1"
    );
    assert_eq!(MachineClass::plural(&()), "machineclasses");
    assert_eq!(MachineSet::plural(&()), "machinesets");
    assert_eq!(MachineDeployment::plural(&()), "machinedeployments");
    let class = MachineClass::new("c", json!({"a": 1}));
    assert_eq!(class.meta().name.as_deref(), Some("c"));
    let value = serde_json::to_value(&class).unwrap();
    assert_eq!(value["apiVersion"], "machine.sapcloud.io/v1alpha1");
    assert_eq!(value["kind"], "MachineClass");
    assert_eq!(value["providerSpec"], json!({"a": 1}));
}
