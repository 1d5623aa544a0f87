//! One test per transition of the creation step machine.

use super::super::tests::{t0, view};
use super::*;
use std::collections::BTreeMap;

fn at(minutes: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::minutes(minutes)
}

fn identity(pid: &str, node: &str) -> MachineIdentity {
    MachineIdentity {
        provider_id: pid.into(),
        node_name: node.into(),
        addresses: vec![NodeAddress {
            type_: "InternalIP".into(),
            address: "10.0.0.1".into(),
        }],
    }
}

/// A flow with (`true`) or without a target cluster.
fn new_flow(target: bool) -> CreationFlow {
    CreationFlow::new(target.then_some(()))
}

/// A new machine's flow (with or without a target cluster) through a probe
/// that finds no VM and a create that answers VM `p1` with Node
/// `ip-10-0-0-1`: the machine, the flow and the step after the create.
fn created_new_vm(target: bool) -> (MachineView, CreationFlow, CreationStep) {
    let m = view(Phase::Empty);
    let mut f = new_flow(target);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        t0(),
    );
    let step = f.next(
        &m,
        CreationOutcome::Created(Ok(created_resp("p1", "ip-10-0-0-1"))),
        t0(),
    );
    (m, f, step)
}

/// An identity without addresses.
fn bare(pid: &str, node: &str) -> MachineIdentity {
    MachineIdentity {
        addresses: Vec::new(),
        ..identity(pid, node)
    }
}

fn created_resp(pid: &str, node: &str) -> CreateMachineResponse {
    let id = identity(pid, node);
    CreateMachineResponse {
        provider_id: id.provider_id,
        node_name: id.node_name,
        last_known_state: String::new(),
        addresses: id.addresses,
    }
}

fn failure(step: CreationStep) -> CreationFailure {
    match step {
        CreationStep::Fail(f) => *f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn a_flow_starts_with_a_probe_never_with_a_create() {
    let mut f = new_flow(true);
    assert_eq!(
        f.next(&view(Phase::Empty), CreationOutcome::Start, t0()),
        CreationStep::Probe {
            take_create_turn: true
        }
    );
}

#[test]
fn no_vm_and_no_provider_id_creates() {
    let mut f = new_flow(true);
    let step = f.next(
        &view(Phase::Empty),
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        t0(),
    );
    assert_eq!(step, CreationStep::Create { turn_held: false });
    assert_eq!(f.init_reason(), Some(InitReason::FreshVm));
}

#[test]
fn a_machine_without_a_provider_id_takes_its_create_turn_before_the_probe_and_keeps_it() {
    let mut f = new_flow(true);
    let m = view(Phase::Empty);
    assert_eq!(
        f.next(&m, CreationOutcome::Start, t0()),
        CreationStep::Probe {
            take_create_turn: true
        }
    );
    assert_eq!(
        f.next(
            &m,
            CreationOutcome::Probed(Err(Status::not_found("none"))),
            t0()
        ),
        CreationStep::Create { turn_held: true }
    );
}

#[test]
fn a_machine_with_a_provider_id_probes_without_taking_a_create_turn() {
    let mut f = new_flow(true);
    let m = MachineView {
        provider_id: "aws:///r/i-1".into(),
        ..view(Phase::CrashLoopBackOff)
    };
    assert_eq!(
        f.next(&m, CreationOutcome::Start, t0()),
        CreationStep::Probe {
            take_create_turn: false
        }
    );
}

#[test]
fn a_fresh_vm_is_persisted_before_it_is_initialized() {
    let m = view(Phase::Empty);
    let mut f = new_flow(true);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        t0(),
    );
    let step = f.next(
        &m,
        CreationOutcome::Created(Ok(created_resp("p1", "m1"))),
        t0(),
    );
    assert_eq!(step, CreationStep::PersistIdentity(identity("p1", "m1")));
    assert_eq!(
        f.next(&m, CreationOutcome::Persisted(identity("p1", "m1")), t0()),
        CreationStep::Initialize {
            reason: InitReason::FreshVm,
            identity: identity("p1", "m1")
        }
    );
}

#[test]
fn an_existing_initialized_vm_is_adopted_without_initialization() {
    let m = view(Phase::Empty);
    let mut f = new_flow(true);
    let resp = GetMachineStatusResponse {
        provider_id: "p1".into(),
        node_name: "m1".into(),
        addresses: identity("p1", "m1").addresses,
    };
    let step = f.next(&m, CreationOutcome::Probed(Ok(resp)), t0());
    assert_eq!(step, CreationStep::PersistIdentity(identity("p1", "m1")));
    assert_eq!(f.init_reason(), None);
    assert!(matches!(
        f.next(&m, CreationOutcome::Persisted(identity("p1", "m1")), t0()),
        CreationStep::MarkCreated { .. }
    ));
}

#[test]
fn an_uninitialized_vm_is_initialized_never_created_again() {
    let m = view(Phase::Empty);
    let mut f = new_flow(true);
    let step = f.next(
        &m,
        CreationOutcome::Probed(Err(Status::uninitialized("not yet", identity("p1", "m1")))),
        t0(),
    );
    assert_eq!(step, CreationStep::PersistIdentity(identity("p1", "m1")));
    assert_eq!(
        f.next(&m, CreationOutcome::Persisted(identity("p1", "m1")), t0()),
        CreationStep::Initialize {
            reason: InitReason::ProviderSaysUninitialized,
            identity: identity("p1", "m1")
        }
    );
}

#[test]
fn a_failed_previous_initialization_is_retried_on_a_kept_vm() {
    let mut m = view(Phase::CrashLoopBackOff);
    m.provider_id = "p1".into();
    m.node = Some("m1".into());
    m.last_operation = Some((
        format!("Provider error: x. {}", markers::INSTANCE_INITIALIZATION),
        OpState::Failed,
        OpType::Create,
    ));
    let mut f = new_flow(true);
    let step = f.next(
        &m,
        CreationOutcome::Probed(Err(Status::unimplemented("n/a"))),
        t0(),
    );
    assert!(matches!(step, CreationStep::PersistIdentity(ref id) if id.provider_id == "p1"));
    assert_eq!(
        f.next(&m, CreationOutcome::Persisted(bare("p1", "m1")), t0()),
        CreationStep::Initialize {
            reason: InitReason::PreviousAttemptFailed,
            identity: bare("p1", "m1")
        }
    );
}

#[test]
fn a_probe_error_fails_and_clears_last_known_state() {
    let m = view(Phase::Empty);
    let mut f = new_flow(true);
    let fl = failure(f.next(
        &m,
        CreationOutcome::Probed(Err(Status::new(Code::PermissionDenied, "denied"))),
        at(1),
    ));
    assert_eq!(fl.call, "GetMachineStatus");
    assert!(!fl.keep_last_known_state);
    assert_eq!(fl.retry, CreationRetry::Backoff(FailureKind::Normal));
    let t = fl.transition.unwrap_or_else(|| panic!("a status to write"));
    assert_eq!(t.phase, Some(Phase::CrashLoopBackOff));
    assert_eq!(t.operation.error_code.as_deref(), Some("PermissionDenied"));
}

#[test]
fn a_create_answered_resource_exhausted_keeps_last_known_state_and_waits_the_resource_exhausted_retry(
) {
    let m = view(Phase::Empty);
    let mut f = new_flow(true);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        t0(),
    );
    let fl = failure(f.next(
        &m,
        CreationOutcome::Created(Err(Status::new(Code::ResourceExhausted, "slow down"))),
        at(1),
    ));
    assert_eq!(fl.call, "CreateMachine");
    assert!(fl.keep_last_known_state);
    assert_eq!(fl.retry, CreationRetry::HoldCreation(LONG_RETRY));
}

#[test]
fn a_create_answered_resource_exhausted_is_held_for_the_configured_resource_exhausted_retry() {
    let m = view(Phase::Empty);
    let hold = std::time::Duration::from_secs(42);
    let mut f = new_flow(true).with_resource_exhausted_retry(hold);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        t0(),
    );
    let fl = failure(f.next(
        &m,
        CreationOutcome::Created(Err(Status::new(Code::ResourceExhausted, "no capacity"))),
        at(1),
    ));
    assert_eq!(fl.retry, CreationRetry::HoldCreation(hold));
}

#[test]
fn a_create_throttled_by_the_clouds_request_rate_is_paused_by_the_pacer_not_held_nor_counted_as_a_failure(
) {
    for message in [
        "RequestLimitExceeded: request limit exceeded for create (bucket 5, refill 2/s)",
        "Quota exceeded: rateLimitExceeded",
        "429 TooManyRequests",
        "Throttling.User: Request was denied due to user flow control.",
    ] {
        let m = view(Phase::Empty);
        let mut f = new_flow(true);
        f.next(
            &m,
            CreationOutcome::Probed(Err(Status::not_found("none"))),
            t0(),
        );
        let fl = failure(f.next(
            &m,
            CreationOutcome::Created(Err(Status::new(Code::ResourceExhausted, message))),
            at(1),
        ));
        // The pacer holds the machine back (runtime.md, "Pacing cloud
        // calls"); the machine's backoff does not count a failure.
        assert_eq!(fl.retry, CreationRetry::Pause, "{message}");
        assert!(fl.keep_last_known_state, "{message}");
    }
}

#[test]
fn only_resource_exhausted_answers_that_name_a_rate_limit_count_as_throttling() {
    assert!(is_throttling(&Status::new(
        Code::ResourceExhausted,
        "RequestLimitExceeded: slow down"
    )));
    assert!(!is_throttling(&Status::new(
        Code::ResourceExhausted,
        "InsufficientInstanceCapacity: no capacity in eu-west-1a"
    )));
    assert!(!is_throttling(&Status::new(
        Code::ResourceExhausted,
        "ZONE_RESOURCE_POOL_EXHAUSTED"
    )));
    assert!(!is_throttling(&Status::new(Code::Internal, "Throttling")));
}

#[test]
fn a_probe_answered_resource_exhausted_waits_the_resource_exhausted_retry_too() {
    // The reference hands any probe error but NotFound/Unimplemented/
    // Uninitialized to machineCreateErrorHandler, which reads the code.
    let m = view(Phase::Empty);
    let mut f = new_flow(true);
    let fl = failure(f.next(
        &m,
        CreationOutcome::Probed(Err(Status::new(Code::ResourceExhausted, "quota"))),
        t0(),
    ));
    assert_eq!(fl.call, "GetMachineStatus");
    assert_eq!(fl.retry, CreationRetry::HoldCreation(LONG_RETRY));
}

#[test]
fn an_initialization_answered_resource_exhausted_is_paused_not_held() {
    // InitializeMachine errors are retried soon in the reference (ShortRetry).
    let m = view(Phase::Empty);
    let mut f = new_flow(true);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::uninitialized("not yet", identity("p1", "m1")))),
        t0(),
    );
    let step = f.next(&m, CreationOutcome::Persisted(identity("p1", "m1")), t0());
    assert!(matches!(step, CreationStep::Initialize { .. }), "{step:?}");
    let fl = failure(f.next(
        &m,
        CreationOutcome::Initialized {
            identity: identity("p1", "m1"),
            result: Err(Status::new(Code::ResourceExhausted, "slow down")),
        },
        t0(),
    ));
    assert_eq!(fl.call, "InitializeMachine");
    assert_eq!(fl.retry, CreationRetry::Pause);
}

#[test]
fn resource_exhausted_retry_is_the_flag_or_the_long_retry_for_zero() {
    use std::time::Duration;
    assert_eq!(
        resource_exhausted_retry(Duration::from_secs(30)),
        Duration::from_secs(30)
    );
    assert_eq!(
        resource_exhausted_retry(Duration::ZERO),
        Duration::from_secs(600)
    );
}

#[test]
fn a_create_failure_after_the_creation_timeout_fails_the_machine() {
    let m = view(Phase::CrashLoopBackOff);
    let mut f = new_flow(true);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        at(21),
    );
    let fl = failure(f.next(
        &m,
        CreationOutcome::Created(Err(Status::internal("boom"))),
        at(21),
    ));
    assert_eq!(fl.transition.and_then(|t| t.phase), Some(Phase::Failed));
}

#[test]
fn an_incomplete_identity_is_retried_without_writing_status() {
    let m = view(Phase::Empty);
    let mut f = new_flow(true);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        t0(),
    );
    let fl = failure(f.next(
        &m,
        CreationOutcome::Created(Ok(created_resp("", "m1"))),
        t0(),
    ));
    assert_eq!(fl.transition, None);
    assert_eq!(fl.error.code, Code::Internal);
    // Without a target cluster an empty node name is fine.
    let mut f = new_flow(false);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        t0(),
    );
    assert!(matches!(
        f.next(
            &m,
            CreationOutcome::Created(Ok(created_resp("p1", ""))),
            t0()
        ),
        CreationStep::PersistIdentity(_)
    ));
}

#[test]
fn a_vm_whose_node_name_differs_is_checked_for_a_stale_node() {
    let (m, mut f, step) = created_new_vm(true);
    assert_eq!(
        step,
        CreationStep::CheckStaleNode {
            identity: identity("p1", "ip-10-0-0-1"),
            target: ()
        }
    );
    assert_eq!(
        f.next(
            &m,
            CreationOutcome::NodeOwner {
                identity: identity("p1", "ip-10-0-0-1"),
                owner: None
            },
            t0()
        ),
        CreationStep::PersistIdentity(identity("p1", "ip-10-0-0-1"))
    );
}

#[test]
fn a_stale_node_of_another_machine_deletes_the_new_vm_and_fails() {
    let m = view(Phase::Empty);
    let mut f = new_flow(true);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        t0(),
    );
    f.next(
        &m,
        CreationOutcome::Created(Ok(created_resp("p1", "old-node"))),
        t0(),
    );
    assert_eq!(
        f.next(
            &m,
            CreationOutcome::NodeOwner {
                identity: identity("p1", "old-node"),
                owner: Some("m-old".into())
            },
            t0()
        ),
        CreationStep::DeleteStaleVm {
            provider_id: "p1".into()
        }
    );
    let fl = failure(f.next(&m, CreationOutcome::StaleVmDeleted(Ok(())), t0()));
    assert_eq!(fl.transition, Some(stale_node()));
}

#[test]
fn a_node_that_names_this_machine_is_no_stale_node() {
    let (m, mut f, _) = created_new_vm(true);
    assert_eq!(
        f.next(
            &m,
            CreationOutcome::NodeOwner {
                identity: identity("p1", "ip-10-0-0-1"),
                owner: Some("m1".into())
            },
            t0()
        ),
        CreationStep::PersistIdentity(identity("p1", "ip-10-0-0-1"))
    );
}

#[test]
fn only_an_owner_label_naming_another_machine_makes_a_node_stale() {
    let m = view(Phase::Empty);
    assert!(stale_node_of_other_machine(&m, Some("m-old")));
    assert!(!stale_node_of_other_machine(&m, Some("m1")));
    assert!(!stale_node_of_other_machine(&m, None));
}

#[test]
fn initialization_unimplemented_counts_as_done_and_marks_pending() {
    let m = view(Phase::Empty);
    let mut f = new_flow(true);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        t0(),
    );
    f.next(
        &m,
        CreationOutcome::Created(Ok(created_resp("p1", "m1"))),
        t0(),
    );
    f.next(&m, CreationOutcome::Persisted(identity("p1", "m1")), t0());
    let step = f.next(
        &m,
        CreationOutcome::Initialized {
            identity: identity("p1", "m1"),
            result: Err(Status::unimplemented("n/a")),
        },
        t0(),
    );
    assert_eq!(
        step,
        CreationStep::MarkCreated {
            transition: created(true),
            identity: identity("p1", "m1"),
            addresses: None
        }
    );
    assert_eq!(
        f.next(&m, CreationOutcome::Marked, t0()),
        CreationStep::Done
    );
}

#[test]
fn without_a_target_cluster_the_machine_becomes_available_with_initialized_addresses() {
    let m = view(Phase::Empty);
    let mut f = new_flow(false);
    f.next(
        &m,
        CreationOutcome::Probed(Err(Status::not_found("none"))),
        t0(),
    );
    f.next(
        &m,
        CreationOutcome::Created(Ok(created_resp("p1", "m1"))),
        t0(),
    );
    f.next(&m, CreationOutcome::Persisted(identity("p1", "m1")), t0());
    let v6 = NodeAddress {
        type_: "InternalIP".into(),
        address: "fd00::1".into(),
    };
    let step = f.next(
        &m,
        CreationOutcome::Initialized {
            identity: identity("p1", "m1"),
            result: Ok(InitializeMachineResponse {
                provider_id: "p1".into(),
                node_name: "m1".into(),
                addresses: vec![v6.clone()],
            }),
        },
        t0(),
    );
    let CreationStep::MarkCreated {
        transition,
        addresses: Some(addresses),
        ..
    } = step
    else {
        panic!("expected MarkCreated with addresses, got {step:?}");
    };
    assert_eq!(transition.phase, Some(Phase::Available));
    assert_eq!(addresses[0].type_, "Hostname");
    assert!(addresses.contains(&v6));
}

#[test]
fn a_failed_initialization_is_crash_loop_then_failed_after_the_timeout() {
    let m = view(Phase::Empty);
    for (now, phase) in [(at(1), Phase::CrashLoopBackOff), (at(25), Phase::Failed)] {
        let mut f = new_flow(true);
        f.next(
            &m,
            CreationOutcome::Probed(Err(Status::not_found("none"))),
            now,
        );
        f.next(
            &m,
            CreationOutcome::Created(Ok(created_resp("p1", "m1"))),
            now,
        );
        f.next(&m, CreationOutcome::Persisted(identity("p1", "m1")), now);
        let fl = failure(f.next(
            &m,
            CreationOutcome::Initialized {
                identity: identity("p1", "m1"),
                result: Err(Status::internal("eni")),
            },
            now,
        ));
        assert_eq!(fl.call, "InitializeMachine");
        assert!(fl.keep_last_known_state);
        let t = fl.transition.unwrap_or_else(|| panic!("a status"));
        assert_eq!(t.phase, Some(phase));
        assert!(t
            .operation
            .description
            .ends_with(markers::INSTANCE_INITIALIZATION));
    }
}

#[test]
fn an_adopted_machine_that_already_has_a_phase_keeps_it() {
    let mut m = view(Phase::Running);
    m.provider_id = "p1".into();
    let mut f = new_flow(true);
    f.next(
        &m,
        CreationOutcome::Probed(Ok(GetMachineStatusResponse {
            provider_id: "p1".into(),
            node_name: "m1".into(),
            addresses: vec![],
        })),
        t0(),
    );
    assert_eq!(
        f.next(&m, CreationOutcome::Persisted(bare("p1", "m1")), t0()),
        CreationStep::Done
    );
}

#[test]
fn persisting_the_identity_writes_the_provider_id_node_label_and_default_priority_once() {
    use mcm_api::constants as c;
    let id = MachineIdentity {
        provider_id: "p1".into(),
        node_name: "n1".into(),
        addresses: Vec::new(),
    };
    let spec = serde_json::json!({"image": "i-1"});
    let applied = AppliedSpec::of("c1", &spec);
    let fresh = view(Phase::Empty);
    assert_eq!(
        identity_write(&fresh, &id, true, "c1", &spec),
        Some(IdentityWrite {
            provider_id: Some("p1".into()),
            node_label: Some("n1".into()),
            priority: Some(c::DEFAULT_MACHINE_PRIORITY.to_string()),
            applied: Some(applied.clone()),
        })
    );
    assert_eq!(
        identity_write(&fresh, &id, false, "c1", &spec).and_then(|w| w.node_label),
        None,
        "no node label without a target cluster"
    );
    let mut annotations: BTreeMap<String, String> =
        [(c::PRIORITY_ANNOTATION.to_string(), "1".to_string())].into();
    for (k, v) in applied.annotations() {
        if let Some(v) = v {
            annotations.insert(k.to_string(), v);
        }
    }
    let done = MachineView {
        provider_id: "p1".into(),
        labels: [(c::NODE_LABEL.to_string(), "n1".to_string())].into(),
        annotations,
        ..view(Phase::Pending)
    };
    assert_eq!(identity_write(&done, &id, true, "c1", &spec), None);
}

#[test]
fn the_spec_the_vm_was_created_with_is_recorded_only_when_none_is_recorded_yet() {
    use mcm_api::constants as c;
    let id = MachineIdentity {
        provider_id: "p1".into(),
        node_name: "n1".into(),
        addresses: Vec::new(),
    };
    let old = AppliedSpec::of("c0", &serde_json::json!({"image": "old"}));
    let mut annotations: BTreeMap<String, String> =
        [(c::PRIORITY_ANNOTATION.to_string(), "1".to_string())].into();
    for (k, v) in old.annotations() {
        if let Some(v) = v {
            annotations.insert(k.to_string(), v);
        }
    }
    let recorded = MachineView {
        annotations,
        ..view(Phase::Empty)
    };
    let write = identity_write(
        &recorded,
        &id,
        true,
        "c1",
        &serde_json::json!({"image": "new"}),
    );
    assert_eq!(write.as_ref().and_then(|w| w.applied.clone()), None);
    assert_eq!(write.and_then(|w| w.provider_id), Some("p1".into()));
    // Only the record missing: the identity is not written again.
    let identified = MachineView {
        provider_id: "p1".into(),
        labels: [(c::NODE_LABEL.to_string(), "n1".to_string())].into(),
        annotations: [(c::PRIORITY_ANNOTATION.to_string(), "1".to_string())].into(),
        ..view(Phase::Pending)
    };
    let write = identity_write(&identified, &id, true, "c1", &serde_json::json!({}));
    assert_eq!(write.as_ref().and_then(|w| w.provider_id.clone()), None);
    assert!(write.is_some_and(|w| w.applied.is_some()));
}

// The probe's answers (`plan_creation`) as the flow acts on them.

fn after_probe(m: &MachineView, answer: Result<GetMachineStatusResponse, Status>) -> CreationStep {
    new_flow(true).next(m, CreationOutcome::Probed(answer), t0())
}

#[test]
fn an_unimplemented_status_without_provider_id_creates() {
    assert_eq!(
        after_probe(&view(Phase::Empty), Err(Status::unimplemented("no status"))),
        CreationStep::Create { turn_held: false }
    );
}

#[test]
fn not_found_with_provider_id_never_creates_a_second_vm() {
    let m = MachineView {
        provider_id: "p1".into(),
        node: Some("n1".into()),
        ..view(Phase::CrashLoopBackOff)
    };
    let step = after_probe(&m, Err(Status::not_found("no vm")));
    assert!(
        matches!(step, CreationStep::PersistIdentity(ref id) if id.provider_id == "p1" && id.node_name == "n1"),
        "{step:?}"
    );
}

#[test]
fn uninitialized_without_identity_uses_the_recorded_provider_id_instead_of_panicking() {
    let m = MachineView {
        provider_id: "p1".into(),
        node: Some("n1".into()),
        ..view(Phase::CrashLoopBackOff)
    };
    let mut f = new_flow(true);
    let step = f.next(
        &m,
        CreationOutcome::Probed(Err(Status::new(Code::Uninitialized, "nil response"))),
        t0(),
    );
    assert!(
        matches!(step, CreationStep::PersistIdentity(ref id) if id.provider_id == "p1"),
        "{step:?}"
    );
    assert_eq!(f.init_reason(), Some(InitReason::ProviderSaysUninitialized));
}

#[test]
fn uninitialized_without_any_identity_is_a_failure_not_a_create() {
    let fl = failure(after_probe(
        &view(Phase::Empty),
        Err(Status::new(Code::Uninitialized, "nil response")),
    ));
    assert_eq!(fl.error.code, Code::Internal);
    assert_eq!(fl.call, "GetMachineStatus");
}

#[test]
fn a_failed_initialization_is_retried_even_if_status_says_ok() {
    let m = MachineView {
        provider_id: "p1".into(),
        ..view(Phase::CrashLoopBackOff).on_node("n1").last_op(
            "Provider error: machine codes error: code = [Internal] message = [boom]. Initialize VM Instance",
            OpState::Failed,
            OpType::Create,
        )
    };
    let mut f = new_flow(true);
    f.next(
        &m,
        CreationOutcome::Probed(Ok(GetMachineStatusResponse {
            provider_id: "p1".into(),
            node_name: "n1".into(),
            addresses: vec![],
        })),
        t0(),
    );
    assert_eq!(f.init_reason(), Some(InitReason::PreviousAttemptFailed));
    assert!(matches!(
        f.next(&m, CreationOutcome::Persisted(bare("p1", "n1")), t0()),
        CreationStep::Initialize {
            reason: InitReason::PreviousAttemptFailed,
            ..
        }
    ));
}

#[test]
fn the_created_phase_carries_the_persisted_identity_and_names_its_node_as_the_hostname() {
    // Without a target cluster the addresses are persisted: the Hostname is
    // the node name of the identity handed back, never a default.
    let m = view(Phase::Empty);
    let mut f = new_flow(false);
    let step = f.next(
        &m,
        CreationOutcome::Probed(Ok(GetMachineStatusResponse {
            provider_id: "p1".into(),
            node_name: "host-1".into(),
            addresses: identity("p1", "host-1").addresses,
        })),
        t0(),
    );
    let CreationStep::PersistIdentity(id) = step else {
        panic!("expected PersistIdentity, got {step:?}");
    };
    let step = f.next(&m, CreationOutcome::Persisted(id.clone()), t0());
    let CreationStep::MarkCreated {
        identity: marked,
        addresses: Some(addresses),
        ..
    } = step
    else {
        panic!("expected MarkCreated with addresses, got {step:?}");
    };
    assert_eq!(marked, id);
    assert!(addresses
        .iter()
        .any(|a| a.type_ == "Hostname" && a.address == "host-1"));
    assert!(addresses.iter().any(|a| a.address == "10.0.0.1"));
}

#[test]
fn without_a_target_cluster_a_new_vm_is_never_checked_for_a_stale_node() {
    // The check reads a Node of the target cluster: without one the flow
    // has no cluster to hand out and goes straight to persisting.
    let (_, _, step) = created_new_vm(false);
    assert_eq!(
        step,
        CreationStep::PersistIdentity(identity("p1", "ip-10-0-0-1"))
    );
}
