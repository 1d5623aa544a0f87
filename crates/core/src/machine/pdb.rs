//! PodDisruptionBudgets during a drain: which budget guards a pod whose
//! eviction was refused, and whether that budget can never allow it
//! (design: machine.md, "Drain").

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use mcm_api::selector::selector_matches;

/// The budget of `pod` among the budgets of its namespace, as the
/// reference's `getPdbForPod` picks it: a budget whose selector matches the
/// pod's labels (an empty selector matches every pod, a missing one none; a
/// pod without labels has none). Of several, the reference takes its
/// lister's first; mcm-rs takes the first by name, so the choice is stable.
pub fn pdb_for_pod<'a>(
    pdbs: &'a [PodDisruptionBudget],
    pod: &Pod,
) -> Option<&'a PodDisruptionBudget> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    if labels.is_empty() {
        return None;
    }
    let pod_ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    pdbs.iter()
        .filter(|b| b.metadata.namespace.as_deref().unwrap_or_default() == pod_ns)
        .filter(|b| {
            b.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .is_some_and(|sel| selector_matches(sel, &labels).unwrap_or(false))
        })
        .min_by(|a, b| a.metadata.name.cmp(&b.metadata.name))
}

/// Whether the budget requires zero voluntary evictions for good, so that
/// retrying a refused eviction is pointless (the reference's
/// `isMisconfiguredPdb`, with upstream #1127): its status is current
/// (`observedGeneration` = `generation`), it has pods, all of them healthy
/// (`currentHealthy >= expectedPods`; more during a scale-down), no pod is
/// being disrupted right now (`disruptedPods` empty: an eviction in flight
/// makes `currentHealthy` stale, and the budget frees up once it is done),
/// and it allows no disruption.
pub fn is_misconfigured_pdb(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = pdb.status.as_ref() else {
        return false;
    };
    if pdb.metadata.generation != status.observed_generation {
        return false;
    }
    let no_disrupted_pods = status.disrupted_pods.as_ref().is_none_or(|d| d.is_empty());
    let expected = status.expected_pods.unwrap_or(0);
    expected > 0
        && status.current_healthy.unwrap_or(0) >= expected
        && no_disrupted_pods
        && status.disruptions_allowed.unwrap_or(0) == 0
}

/// The drain error for a pod whose budget is misconfigured (the reference's
/// text).
pub fn misconfigured_pdb_error(pod: &str, pdb_namespace: &str, pdb_name: &str) -> String {
    format!(
        "error while evicting pod {pod:?}: pod disruption budget {pdb_namespace}/{pdb_name} is misconfigured and requires zero voluntary evictions"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
    use std::collections::BTreeMap;

    fn pdb(
        name: &str,
        selector: Option<&[(&str, &str)]>,
        expected: i32,
        healthy: i32,
        allowed: i32,
        disrupted: usize,
    ) -> PodDisruptionBudget {
        let disrupted_pods: BTreeMap<String, Time> = (0..disrupted)
            .map(|i| {
                (
                    format!("pod-{i}"),
                    Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                )
            })
            .collect();
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                generation: Some(2),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: selector.map(|pairs| LabelSelector {
                    match_labels: Some(
                        pairs
                            .iter()
                            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                observed_generation: Some(2),
                expected_pods: Some(expected),
                current_healthy: Some(healthy),
                desired_healthy: Some(expected),
                disruptions_allowed: Some(allowed),
                disrupted_pods: (disrupted > 0).then_some(disrupted_pods),
                ..Default::default()
            }),
        }
    }

    fn pod(labels: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_budget_of_healthy_pods_allowing_no_disruption_is_misconfigured() {
        assert!(is_misconfigured_pdb(&pdb("b", None, 2, 2, 0, 0)));
        // More healthy than expected (a scale-down in progress) too.
        assert!(is_misconfigured_pdb(&pdb("b", None, 2, 3, 0, 0)));
    }

    #[test]
    fn a_budget_with_pods_being_disrupted_is_not_misconfigured_upstream_1127() {
        // An eviction in flight: currentHealthy is not yet updated, the
        // budget frees up once the disrupted pod is gone.
        assert!(!is_misconfigured_pdb(&pdb("b", None, 2, 2, 0, 1)));
    }

    #[test]
    fn a_budget_that_may_allow_an_eviction_later_is_not_misconfigured() {
        // Allows one now.
        assert!(!is_misconfigured_pdb(&pdb("b", None, 2, 2, 1, 0)));
        // A pod is unhealthy: it may recover.
        assert!(!is_misconfigured_pdb(&pdb("b", None, 2, 1, 0, 0)));
        // No pods.
        assert!(!is_misconfigured_pdb(&pdb("b", None, 0, 0, 0, 0)));
        // Status of an older generation.
        let mut stale = pdb("b", None, 2, 2, 0, 0);
        stale.metadata.generation = Some(3);
        assert!(!is_misconfigured_pdb(&stale));
        let mut no_status = pdb("b", None, 2, 2, 0, 0);
        no_status.status = None;
        assert!(!is_misconfigured_pdb(&no_status));
    }

    #[test]
    fn the_pods_budget_is_the_first_by_name_whose_selector_matches_its_labels() {
        let budgets = [
            pdb("z-web", Some(&[("app", "web")]), 1, 1, 0, 0),
            pdb("a-db", Some(&[("app", "db")]), 1, 1, 0, 0),
            pdb("b-web", Some(&[("app", "web")]), 1, 1, 0, 0),
            pdb("no-selector", None, 1, 1, 0, 0),
        ];
        let name = |p: &Pod| pdb_for_pod(&budgets, p).and_then(|b| b.metadata.name.clone());
        assert_eq!(name(&pod(&[("app", "web")])), Some("b-web".into()));
        assert_eq!(name(&pod(&[("app", "other")])), None);
        // A pod without labels has no budget.
        assert_eq!(name(&pod(&[])), None);
        // An empty selector matches every pod (policy/v1).
        let all = [pdb("all", Some(&[]), 1, 1, 0, 0)];
        assert!(pdb_for_pod(&all, &pod(&[("x", "y")])).is_some());
        // Budgets of other namespaces never apply.
        let mut other = pdb("other-ns", Some(&[("app", "web")]), 1, 1, 0, 0);
        other.metadata.namespace = Some("elsewhere".into());
        assert!(pdb_for_pod(&[other], &pod(&[("app", "web")])).is_none());
    }

    #[test]
    fn the_error_names_the_pod_and_the_budget_as_the_reference() {
        assert_eq!(
            misconfigured_pdb_error("web-0", "ns", "web"),
            "error while evicting pod \"web-0\": pod disruption budget ns/web is misconfigured and requires zero voluntary evictions"
        );
    }
}
