//! Label selectors (evaluated in mcm-api) and label containment.

use super::*;

pub use mcm_api::selector::{
    selector_is_empty, selector_matches, validate_selector, SelectorError,
};

/// Whether `labels` contains every entry of `required` (`fullyLabeledReplicas`,
/// the safety loop's "carries the template labels").
pub fn labels_contain(
    labels: &BTreeMap<String, String>,
    required: &BTreeMap<String, String>,
) -> bool {
    required.iter().all(|(k, v)| labels.get(k) == Some(v))
}
