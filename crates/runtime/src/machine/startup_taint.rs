//! The startup taint's effects (design: startup-taint.md): the decision is
//! [`mcm_core::machine::startup_taint::startup_taint`]; node sync removes the
//! taint in its own write when only the template held it
//! ([`mcm_core::machine::startup_taint::removed_with_sync`]); else this removes it
//! with a resourceVersion-guarded write, records the metric, and reports a
//! failed removal (Warning Event, log) for a retry with the machine's backoff.

#[allow(clippy::wildcard_imports)]
use super::*;
use mcm_core::machine::startup_taint::{
    self as st, has_startup_taint, held_description, StartupTaint, StartupTaintNode,
};
use mcm_core::node_template::{template_applied, NodeSyncInput};
use std::collections::BTreeMap;

/// What the startup taint means for the rest of this reconcile.
#[derive(Debug, Default)]
pub(super) struct TaintState {
    /// `Some(description)` while the taint holds the machine out of Running
    /// (for [`decide::NodeView::startup_taint`]).
    pub(super) held: Option<String>,
    /// A failed removal is retried after this long (the machine's backoff).
    pub(super) retry: Option<Duration>,
}

/// Removes the startup taint `key` from `node`, guarded by the taint list as
/// read: a list changed since is refused (a conflict) and never
/// overwritten. Answers the patched Node; `None` when it is gone.
pub(crate) async fn remove_startup_taint(
    target: &kube::Client,
    key: &str,
    node: &Node,
) -> Result<Option<Node>, kube::Error> {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let rest = st::without_startup_taint(key, &taints);
    let nodes: Api<Node> = Api::all(target.clone());
    MetaPatch::new()
        .guarded_by_read(node)
        .taints(rest)
        .send_unless_gone(&nodes, &node.name_any())
        .await
}

/// A short, stable name of a removal error (for the status text; the full
/// error goes to the Event and the log).
fn error_kind(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.reason.is_empty() => s.reason.clone(),
        kube::Error::Api(s) => format!("HTTP {}", s.code),
        _ => "request failed".into(),
    }
}

impl Reconciler<'_> {
    /// The startup taint's facts on `node`. Whether the template is applied
    /// (node sync's plan) is worked out only for a tainted Node: every
    /// reconcile of a running machine asks, and its Node has no taint.
    fn taint_facts(&self, class: &MachineClass, key: &str, node: &Node) -> StartupTaintNode {
        let node_taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default();
        let template_taints = self
            .machine
            .spec
            .node_template
            .spec
            .taints
            .as_deref()
            .unwrap_or_default();
        if !has_startup_taint(key, node_taints) {
            return StartupTaintNode::of(key, node_taints, template_taints, false);
        }
        let name = self.name();
        let empty = BTreeMap::new();
        let input = NodeSyncInput {
            machine_name: &name,
            template: &self.machine.spec.node_template,
            virtual_capacity: class
                .node_template
                .as_ref()
                .map_or(&empty, |t| &t.virtual_capacity),
        };
        StartupTaintNode::of(
            key,
            node_taints,
            template_taints,
            template_applied(&input, node),
        )
    }

    /// The startup taint's key when node sync is to remove it in its own
    /// write ([`st::removed_with_sync`], judged on the cached Node).
    pub(super) fn startup_taint_with_sync(&self, class: &MachineClass) -> Option<String> {
        self.ctx.target.as_ref()?;
        let view = self.view();
        let node = self.ctx.nodes.get(&ObjectRef::new(view.node.as_deref()?))?;
        let key = &self.ctx.config.startup_taint_key;
        st::removed_with_sync(&view, &self.taint_facts(class, key, &node)).then(|| key.clone())
    }

    /// Decides on the machine's startup taint and, when it may go, removes it.
    ///
    /// `fresh` is the Node as node sync left it (`None` when the sync did not
    /// finish: then the cached Node is judged, and nothing is written).
    /// `with_sync`: node sync was asked to remove the taint in its write.
    pub(super) async fn startup_taint(
        &mut self,
        class: &MachineClass,
        fresh: Option<Node>,
        with_sync: bool,
    ) -> TaintState {
        let Some(target) = self.ctx.target.clone() else {
            return TaintState::default();
        };
        let view = self.view();
        let Some(node_name) = view.node.clone() else {
            return TaintState::default();
        };
        let may_write = fresh.is_some();
        let Some(node) = fresh.or_else(|| {
            self.ctx
                .nodes
                .get(&ObjectRef::new(&node_name))
                .map(|n| (*n).clone())
        }) else {
            return TaintState::default();
        };
        let key = self.ctx.config.startup_taint_key.clone();
        let facts = self.taint_facts(class, &key, &node);
        if !facts.tainted {
            if with_sync && may_write {
                // Node sync's write took it off.
                self.taint_removed(&key, &node);
            }
            return TaintState::default();
        }
        let held = |why: &str| Some(held_description(&node_name, &key, why));
        match st::startup_taint(&view, &facts) {
            StartupTaint::Absent | StartupTaint::TemplateOwned => TaintState::default(),
            StartupTaint::Keep(reason) => {
                debug!(node = %node_name, reason = reason.as_str(), "keeping the startup taint");
                TaintState {
                    held: held(reason.as_str()),
                    retry: None,
                }
            }
            StartupTaint::Remove if !may_write => TaintState {
                held: held("node sync has not finished"),
                retry: None,
            },
            StartupTaint::Remove => match remove_startup_taint(&target, &key, &node).await {
                Ok(None) => TaintState::default(),
                Ok(Some(_)) => {
                    self.taint_removed(&key, &node);
                    TaintState::default()
                }
                Err(e) => {
                    let retry = self.ctx.failure_delay(&self.key, FailureKind::Normal);
                    warn!(node = %node_name, taint = %key, error = %e, ?retry,
                              "could not remove the startup taint; retrying with backoff");
                    self.event(
                            EventType::Warning,
                            "StartupTaintRemovalFailed",
                            format!("Could not remove the startup taint {key}:NoSchedule from Node {node_name} (retrying): {e}"),
                        )
                        .await;
                    TaintState {
                        held: held(&format!(
                            "removing it failed ({}); retrying with backoff",
                            error_kind(&e)
                        )),
                        retry: Some(retry),
                    }
                }
            },
        }
    }

    /// The metric and log of a removed startup taint; the Event's text waits
    /// for the phase-change Event it joins ([`Reconciler::announce`]).
    fn taint_removed(&mut self, key: &str, node: &Node) {
        let node_name = node.name_any();
        let since = node
            .metadata
            .creation_timestamp
            .as_ref()
            .map(mcm_core::time::from_k8s);
        let took = since.map_or(0.0, |t| {
            (Utc::now() - t).to_std().unwrap_or_default().as_secs_f64()
        });
        self.ctx
            .metrics
            .startup_taint_removal
            .get_or_create(&crate::metrics::DrainLabels::of(&self.machine))
            .observe(took);
        info!(node = %node_name, taint = %key, seconds_since_registration = took,
              "removed the startup taint: the node is schedulable");
        self.phase_note = Some(format!(
            "Removed the startup taint {key}:NoSchedule from Node {node_name} {took:.0}s after it registered"
        ));
    }
}
