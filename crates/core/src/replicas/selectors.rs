//! Label selectors (evaluated in mcm-api), label containment, and whether an
//! object is selected but for labels the controllers wrote.

use super::*;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
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

/// How a selector sees an object's labels, for [`claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// The selector matches.
    Selected,
    /// The selector does not match, but would if every requirement on a key
    /// the controllers own ([`mcm_api::constants::CONTROLLER_OWNED_LABELS`])
    /// were left out: the object stopped matching only because a controller
    /// wrote such a label (or could have).
    SelectedButForControllerLabels,
    /// The selector does not match for a label the controllers never write
    /// (or cannot be evaluated).
    NotSelected,
}

impl Selection {
    /// Whether the selector matches outright.
    pub fn is_selected(self) -> bool {
        self == Selection::Selected
    }
}

impl From<bool> for Selection {
    fn from(matches: bool) -> Self {
        if matches {
            Selection::Selected
        } else {
            Selection::NotSelected
        }
    }
}

/// `selector` without its requirements (`matchLabels` entries and
/// `matchExpressions`) on keys the controllers own.
pub fn without_controller_owned_keys(selector: &LabelSelector) -> LabelSelector {
    let owned = |k: &str| mcm_api::constants::is_controller_owned_label(k);
    LabelSelector {
        match_labels: selector.match_labels.as_ref().map(|m| {
            m.iter()
                .filter(|(k, _)| !owned(k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        }),
        match_expressions: selector.match_expressions.as_ref().map(|e| {
            e.iter()
                .filter(|r| !owned(r.key.as_str()))
                .cloned()
                .collect()
        }),
    }
}

/// How `selector` sees `labels` (design: sets-and-deployments.md, "Labels the
/// controllers own"). A selector that cannot be evaluated selects nothing.
pub fn selection(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Selection {
    if selector_matches(selector, labels).unwrap_or(false) {
        return Selection::Selected;
    }
    let rest = without_controller_owned_keys(selector);
    if selector_matches(&rest, labels).unwrap_or(false) {
        Selection::SelectedButForControllerLabels
    } else {
        Selection::NotSelected
    }
}
