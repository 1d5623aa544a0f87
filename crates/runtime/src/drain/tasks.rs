//! Drains that run beside the reconciles, not inside them.
//!
//! A drain may take up to the drain timeout (2 h by default) while a
//! PodDisruptionBudget blocks an eviction. Inside a reconcile that would hold
//! one of the `--concurrent-syncs` slots all that time, and a few blocked
//! drains would stop every other machine from being created or health-checked.
//! So the deletion flow's Drain step starts the drain as a task in this
//! registry and returns at once; the task wakes its machine when it ends (see
//! [`DrainTasks::take_wakeups`]) and the next reconcile hands the outcome to
//! `mcm_core::machine::after_drain`.
//!
//! At most one task runs per machine (keyed by `namespace/name`, checked
//! against the UID). A task is aborted when its machine is gone, when another
//! drain replaces it (a forced drain superseding a normal one), and when the
//! machine controller stops, e.g. because leadership was lost.

use crate::keys::ObjectKey;
use futures::channel::mpsc;
use mcm_core::machine::DrainPlan;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::AbortHandle;
use tracing::{debug, info};

/// How often a running drain checks that its machine still exists.
const GONE_CHECK: Duration = Duration::from_secs(5);

/// A finished drain's outcome.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finished {
    /// The plan the drain ran with.
    pub(crate) plan: DrainPlan,
    /// Its result (the error text on failure).
    pub(crate) result: Result<(), String>,
    /// How long it ran.
    pub(crate) elapsed: Duration,
}

/// The state of one machine's drain.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DrainState {
    /// No drain runs: none was started, or the last one was aborted.
    Idle,
    /// A drain runs with this plan.
    Running(DrainPlan),
    /// The drain ended. The outcome is handed out once, then the state is `Idle`.
    Finished(Finished),
}

type Outcome = Arc<Mutex<Option<Result<(), String>>>>;

struct Entry {
    uid: String,
    plan: DrainPlan,
    started: Instant,
    abort: AbortHandle,
    outcome: Outcome,
}

/// The running drains of one controller, at most one per machine.
pub struct DrainTasks {
    entries: Arc<Mutex<HashMap<ObjectKey, Entry>>>,
    wake: mpsc::UnboundedSender<ObjectKey>,
    wakeups: Mutex<Option<mpsc::UnboundedReceiver<ObjectKey>>>,
    gone_check: Duration,
}

impl Default for DrainTasks {
    fn default() -> Self {
        Self::new()
    }
}

impl DrainTasks {
    /// An empty registry.
    pub(crate) fn new() -> Self {
        Self::checking_every(GONE_CHECK)
    }

    /// An empty registry whose tasks check for their machine every `gone_check`.
    fn checking_every(gone_check: Duration) -> Self {
        let (wake, wakeups) = mpsc::unbounded();
        DrainTasks {
            entries: Arc::new(Mutex::new(HashMap::new())),
            wake,
            wakeups: Mutex::new(Some(wakeups)),
            gone_check,
        }
    }

    /// The machines whose drain ended, as a stream (taken once, by the controller
    /// that reconciles them).
    pub(crate) fn take_wakeups(&self) -> Option<mpsc::UnboundedReceiver<ObjectKey>> {
        self.wakeups.lock().ok().and_then(|mut w| w.take())
    }

    /// The drain state of the machine `key` with `uid`. A finished drain's
    /// outcome is removed as it is returned; a task of another UID (an older
    /// machine of the same name) is aborted and forgotten.
    pub(crate) fn state(&self, key: &ObjectKey, uid: &str) -> DrainState {
        let Ok(mut map) = self.entries.lock() else {
            return DrainState::Idle;
        };
        let Some(e) = map.get(key) else {
            return DrainState::Idle;
        };
        if e.uid != uid {
            e.abort.abort();
            map.remove(key);
            return DrainState::Idle;
        }
        // Finished is read before the outcome: a task stores its outcome before
        // it ends, so "ended without outcome" can only mean aborted.
        let ended = e.abort.is_finished();
        let outcome = e.outcome.lock().ok().and_then(|mut o| o.take());
        match (outcome, ended) {
            (Some(result), _) => {
                let plan = e.plan;
                let elapsed = e.started.elapsed();
                map.remove(key);
                DrainState::Finished(Finished {
                    plan,
                    result,
                    elapsed,
                })
            }
            (None, true) => {
                map.remove(key);
                DrainState::Idle
            }
            (None, false) => DrainState::Running(e.plan),
        }
    }

    /// Starts `drain` for `machine` (key `key`, UID `uid`) with `plan`,
    /// aborting a task the machine already has. The task gives up when
    /// `still_wanted` turns false (checked every few seconds), and wakes the
    /// machine when it ends.
    pub(crate) fn start<F, W>(
        &self,
        key: &ObjectKey,
        machine: ObjectKey,
        uid: &str,
        plan: DrainPlan,
        drain: F,
        still_wanted: W,
    ) where
        F: Future<Output = Result<(), String>> + Send + 'static,
        W: Fn() -> bool + Send + 'static,
    {
        let outcome: Outcome = Arc::new(Mutex::new(None));
        let slot = outcome.clone();
        let wake = self.wake.clone();
        let task_key = key.clone();
        let task_uid = uid.to_string();
        let entries = self.entries.clone();
        let every = self.gone_check;
        let handle = tokio::spawn(async move {
            let gone = async move {
                loop {
                    tokio::time::sleep(every).await;
                    if !still_wanted() {
                        return;
                    }
                }
            };
            tokio::select! {
                result = drain => {
                    if let Ok(mut s) = slot.lock() {
                        *s = Some(result);
                    }
                    let _ = wake.unbounded_send(machine);
                }
                () = gone => {
                    info!(machine = %task_key, "machine gone; drain abandoned");
                    if let Ok(mut map) = entries.lock() {
                        if map.get(&task_key).is_some_and(|e| e.uid == task_uid) {
                            map.remove(&task_key);
                        }
                    }
                }
            }
        });
        let entry = Entry {
            uid: uid.to_string(),
            plan,
            started: Instant::now(),
            abort: handle.abort_handle(),
            outcome,
        };
        if let Ok(mut map) = self.entries.lock() {
            if let Some(old) = map.insert(key.clone(), entry) {
                debug!(machine = %key, "replacing a running drain");
                old.abort.abort();
            }
        } else {
            handle.abort();
        }
    }

    /// Aborts the drain of `key`, if one runs.
    pub(crate) fn abort(&self, key: &ObjectKey) {
        if let Ok(mut map) = self.entries.lock() {
            if let Some(e) = map.remove(key) {
                e.abort.abort();
            }
        }
    }

    /// Aborts every drain (the controller stops).
    pub(crate) fn abort_all(&self) {
        if let Ok(mut map) = self.entries.lock() {
            for (_, e) in map.drain() {
                e.abort.abort();
            }
        }
    }

    /// How many drains are registered (running, or finished and not yet consumed).
    pub fn len(&self) -> usize {
        self.entries.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether no drain is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for DrainTasks {
    fn drop(&mut self) {
        self.abort_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Kind;

    fn k(key: &str) -> ObjectKey {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        ObjectKey::new(Kind::Machine, ns, name)
    }

    fn plan(force: bool) -> DrainPlan {
        DrainPlan {
            force,
            timeout: Duration::from_secs(60),
            max_evict_retries: 1,
        }
    }

    fn machine() -> ObjectKey {
        k("ns/m")
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_finished_drain_hands_its_outcome_out_once_and_wakes_the_machine() {
        let tasks = DrainTasks::new();
        let mut wakeups = tasks.take_wakeups().expect("wakeups");
        assert!(tasks.take_wakeups().is_none(), "taken once");
        tasks.start(
            &k("ns/m"),
            machine(),
            "u1",
            plan(false),
            async { Ok(()) },
            || true,
        );
        let woken = futures::StreamExt::next(&mut wakeups).await;
        assert_eq!(woken, Some(machine()));
        settle().await;
        match tasks.state(&k("ns/m"), "u1") {
            DrainState::Finished(f) => {
                assert_eq!(f.result, Ok(()));
                assert_eq!(f.plan, plan(false));
            }
            other => panic!("expected Finished, got {other:?}"),
        }
        assert_eq!(tasks.state(&k("ns/m"), "u1"), DrainState::Idle);
        assert!(tasks.is_empty());
    }

    #[tokio::test]
    async fn a_running_drain_is_reported_running_and_a_restart_replaces_it() {
        let tasks = DrainTasks::new();
        tasks.start(
            &k("ns/m"),
            machine(),
            "u1",
            plan(false),
            std::future::pending(),
            || true,
        );
        assert_eq!(
            tasks.state(&k("ns/m"), "u1"),
            DrainState::Running(plan(false))
        );
        tasks.start(
            &k("ns/m"),
            machine(),
            "u1",
            plan(true),
            async { Err("x".to_string()) },
            || true,
        );
        assert_eq!(tasks.len(), 1, "at most one drain per machine");
        settle().await;
        match tasks.state(&k("ns/m"), "u1") {
            DrainState::Finished(f) => assert_eq!(f.plan, plan(true)),
            other => panic!("expected the forced drain's outcome, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_drain_of_another_uid_or_an_aborted_one_is_forgotten() {
        let tasks = DrainTasks::new();
        tasks.start(
            &k("ns/m"),
            machine(),
            "old",
            plan(false),
            std::future::pending(),
            || true,
        );
        assert_eq!(tasks.state(&k("ns/m"), "new"), DrainState::Idle);
        assert!(tasks.is_empty());
        tasks.start(
            &k("ns/m"),
            machine(),
            "new",
            plan(false),
            std::future::pending(),
            || true,
        );
        tasks.abort_all();
        assert!(tasks.is_empty());
        assert_eq!(tasks.state(&k("ns/m"), "new"), DrainState::Idle);
    }

    #[tokio::test]
    async fn a_drain_whose_machine_is_gone_ends_without_an_outcome() {
        let tasks = DrainTasks::checking_every(Duration::from_millis(10));
        tasks.start(
            &k("ns/m"),
            machine(),
            "u1",
            plan(false),
            std::future::pending(),
            || false,
        );
        for _ in 0..200 {
            if tasks.is_empty() {
                assert_eq!(tasks.state(&k("ns/m"), "u1"), DrainState::Idle);
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the drain of a machine that is gone still runs");
    }
}
