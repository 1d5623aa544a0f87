//! Decoding the providerSpec JSON with the key matching of Go's
//! `encoding/json`, through the drivers' shared decoder
//! ([`mcm_driver::spec_decode`], design: docs/design/driver.md, "Decoding"):
//! `subnetId` fills `subnetID`, `IAM` fills `iam`, each such key and each
//! unknown key is reported as a warning (the MachineClass controller
//! publishes it as a `ProviderSpecWarning` Event on the class). The keys of
//! `tags` are the user's data and are kept as written.

use super::AwsProviderSpec;
use mcm_driver::provider_spec::ROOT;
use mcm_driver::spec_decode;
use serde_json::Value;

/// The providerSpec with every key that Go's `encoding/json` would match to
/// a field case-insensitively renamed to the field's canonical key (losing
/// spellings removed, unknown keys kept), and one warning per key read under
/// another spelling, ignored or unknown.
pub fn canonical_keys(value: &Value) -> (Value, Vec<String>) {
    if value.is_null() {
        return (Value::Null, Vec::new());
    }
    let (v, warnings) = spec_decode::canonical_keys::<AwsProviderSpec>(value, ROOT);
    (v, warnings.into_iter().map(|w| w.to_string()).collect())
}

#[cfg(test)]
mod tests;
