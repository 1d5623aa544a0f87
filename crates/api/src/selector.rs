//! Label selectors, evaluated the way Kubernetes does (`matchLabels` and
//! `matchExpressions`): a label missing from the set never matches a
//! `matchLabels` entry, not even one whose value is `""`. Validation and the
//! controllers use this one evaluation, so an object that validation accepts
//! is selected by its own selector at run time (see
//! `docs/design/sets-and-deployments.md`, "Selectors").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// A label selector that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A `matchExpressions` operator other than In, NotIn, Exists, DoesNotExist.
    #[error("unknown label selector operator {0:?}")]
    UnknownOperator(String),
    /// `In` / `NotIn` without values, or `Exists` / `DoesNotExist` with values.
    #[error("invalid values for operator {operator:?} on key {key:?}")]
    InvalidValues {
        /// The key.
        key: String,
        /// The operator.
        operator: String,
    },
}

/// Whether a selector has neither `matchLabels` nor `matchExpressions`.
///
/// Such a selector selects everything in Kubernetes; the MachineDeployment
/// controller refuses to act on it (`SelectingAll`) and so does mcm-rs's
/// MachineSet controller.
pub fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty())
}

/// Evaluates a label selector (`matchLabels` and `matchExpressions`) on a label set.
pub fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    if let Some(ml) = &selector.match_labels {
        for (k, v) in ml {
            if labels.get(k) != Some(v) {
                return Ok(false);
            }
        }
    }
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or(&[]);
        let value = labels.get(&req.key);
        let ok = match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(SelectorError::InvalidValues {
                    key: req.key.clone(),
                    operator: req.operator.clone(),
                })
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(SelectorError::InvalidValues {
                    key: req.key.clone(),
                    operator: req.operator.clone(),
                })
            }
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => return Err(SelectorError::UnknownOperator(other.to_string())),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Checks that every `matchExpressions` requirement of a selector can be
/// evaluated (known operator, values present exactly when required).
pub fn validate_selector(selector: &LabelSelector) -> Result<(), SelectorError> {
    for req in selector.match_expressions.iter().flatten() {
        let only = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![req.clone()]),
        };
        selector_matches(&only, &BTreeMap::new())?;
    }
    Ok(())
}
