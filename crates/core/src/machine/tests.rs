//! One test per transition of the Machine state machine.

use super::*;
use crate::time::to_k8s;
use chrono::TimeZone;
use mcm_driver::{Code, Status};

pub(super) fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0)
        .single()
        .unwrap_or_default()
}

fn mins(n: i64) -> chrono::Duration {
    chrono::Duration::minutes(n)
}

/// Machine `m1` in `phase` since `t0`, created at `t0`, with the finalizer.
pub(super) fn view(phase: Phase) -> MachineView {
    MachineView {
        has_finalizer: true,
        ..MachineView::test("m1", phase)
            .created_at(t0())
            .in_phase_since(t0())
    }
}

fn cond(ty: &str, status: &str) -> NodeCondition {
    NodeCondition {
        type_: ty.into(),
        status: status.into(),
        ..Default::default()
    }
}

fn cond_since(ty: &str, status: &str, since: DateTime<Utc>) -> NodeCondition {
    NodeCondition {
        last_transition_time: Some(to_k8s(since)),
        ..cond(ty, status)
    }
}

fn ready_node() -> NodeView {
    NodeView {
        conditions: vec![cond("Ready", "True")],
        critical_components_not_ready: false,
        startup_taint: None,
    }
}

fn init_failed_view(phase: Phase) -> MachineView {
    MachineView {
        provider_id: "local:///z/i-1".into(),
        ..view(phase).on_node("node-1").last_op(
            "Provider error: machine codes error: code = [Internal] message = [boom]. Initialize VM Instance",
            OpState::Failed,
            OpType::Create,
        )
    }
}

// --- durations

#[test]
fn go_durations_parse_like_go() {
    assert_eq!(parse_go_duration("20m"), Some(Duration::from_secs(1200)));
    assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
    assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
    assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
    assert_eq!(parse_go_duration("10"), None);
    assert_eq!(parse_go_duration("-5m"), None);
    assert_eq!(parse_go_duration("5x"), None);
    assert_eq!(parse_go_duration(""), None);
    assert_eq!(format_go_duration(Duration::from_secs(1200)), "20m0s");
    assert_eq!(format_go_duration(Duration::from_secs(3723)), "1h2m3s");
}

#[test]
fn condition_lists_are_trimmed_unlike_the_reference() {
    assert_eq!(split_conditions("A, B ,,C"), vec!["A", "B", "C"]);
}

// --- creation

// The creation flow's transitions: creation/tests.rs.

#[test]
fn create_failure_is_crashloopbackoff_before_the_timeout_and_failed_after() {
    let m = view(Phase::Empty);
    let err = Status::internal("boom");
    let early = create_failed(&m, &err, t0() + mins(5));
    assert_eq!(early.phase, Some(Phase::CrashLoopBackOff));
    assert_eq!(
        early.operation.description,
        "Cloud provider message - machine codes error: code = [Internal] message = [boom]"
    );
    assert_eq!(early.operation.error_code.as_deref(), Some("Internal"));
    assert_eq!(early.operation.state, OpState::Failed);
    assert_eq!(early.operation.kind, OpType::Create);
    let late = create_failed(&m, &err, t0() + mins(21));
    assert_eq!(late.phase, Some(Phase::Failed));
}

#[test]
fn initialization_failure_writes_the_contract_text() {
    let m = view(Phase::Empty);
    let err = Status::new(Code::Uninitialized, "VM instance could not be initialized");
    let t = initialize_failed(&m, &err, t0() + mins(1));
    assert_eq!(t.phase, Some(Phase::CrashLoopBackOff));
    assert_eq!(
        t.operation.description,
        "Provider error: machine codes error: code = [Uninitialized] message = [VM instance could not be initialized]. Initialize VM Instance"
    );
    assert_eq!(t.operation.error_code.as_deref(), Some("Uninitialized"));
    assert_eq!(t.operation.state, OpState::Failed);
    assert_eq!(t.operation.kind, OpType::Create);
}

#[test]
fn created_is_pending_with_a_target_cluster_and_available_without() {
    let with = created(true);
    assert_eq!(with.phase, Some(Phase::Pending));
    assert_eq!(
        with.operation.description,
        "Creating machine on cloud provider"
    );
    assert_eq!(with.timeout_active, Some(true));
    let without = created(false);
    assert_eq!(without.phase, Some(Phase::Available));
    assert_eq!(
        without.operation.description,
        "Created machine on cloud provider"
    );
    assert_eq!(without.operation.state, OpState::Successful);
}

#[test]
fn only_a_machine_with_a_node_and_a_phase_is_health_checked_and_only_with_a_target_cluster() {
    let on_node = view(Phase::Running).on_node("node-1");
    assert!(on_node.needs_health_check(true));
    assert!(!on_node.needs_health_check(false));
    assert!(!view(Phase::Running).needs_health_check(true));
    assert!(!view(Phase::Empty)
        .on_node("node-1")
        .needs_health_check(true));
}

#[test]
fn failed_machines_never_reenter_the_creation_flow() {
    assert!(view(Phase::Empty).needs_creation_flow());
    assert!(view(Phase::CrashLoopBackOff).needs_creation_flow());
    assert!(!view(Phase::Failed).needs_creation_flow());
    let pending = MachineView {
        provider_id: "p".into(),
        ..view(Phase::Pending)
    };
    assert!(!pending.needs_creation_flow());
}

// --- health

#[test]
fn pending_machine_with_ready_node_joins_and_runs() {
    let m = MachineView {
        node: Some("node-1".into()),
        last_operation: Some(("Creating".into(), OpState::Processing, OpType::Create)),
        ..view(Phase::Pending)
    };
    let d = health(&m, Some(&ready_node()), t0() + mins(3));
    let t = d.transition.expect("transition");
    assert_eq!(t.phase, Some(Phase::Running));
    assert_eq!(
        t.operation.description,
        "Machine m1 successfully joined the cluster in 3m0s"
    );
    assert!(d.joined);
}

#[test]
fn critical_components_taint_blocks_pending_to_running() {
    let m = view(Phase::Pending);
    let node = NodeView {
        critical_components_not_ready: true,
        ..ready_node()
    };
    let d = health(&m, Some(&node), t0() + mins(1));
    assert!(d.transition.is_none());
}

#[test]
fn crashloop_machine_with_failed_initialization_is_held_out_of_running() {
    let m = init_failed_view(Phase::CrashLoopBackOff);
    let d = health(&m, Some(&ready_node()), t0() + mins(1));
    assert!(d.transition.is_none(), "must not become Running");
    assert!(d.held_for_initialization);
}

#[test]
fn failed_machine_whose_initialization_failed_is_not_promoted_by_a_ready_node() {
    let m = init_failed_view(Phase::Failed);
    let d = health(&m, Some(&ready_node()), t0() + mins(30));
    assert!(d.transition.is_none());
    assert!(d.held_for_initialization);
}

#[test]
fn failed_machine_whose_node_recovers_rejoins_as_in_the_reference() {
    let m = MachineView {
        last_operation: Some((
            "Machine m1 is unhealthy - changing MachinePhase to Failed".into(),
            OpState::Failed,
            OpType::HealthCheck,
        )),
        ..view(Phase::Failed)
    };
    let d = health(&m, Some(&ready_node()), t0() + mins(30));
    let t = d
        .transition
        .expect("a Failed machine with a healthy Node re-joins");
    assert_eq!(t.phase, Some(Phase::Running));
    assert_eq!(
        t.operation.description,
        "Machine m1 successfully re-joined the cluster"
    );
    assert!(!d.joined, "a re-join is no first join");
}

#[test]
fn failed_machine_that_never_joined_joins_when_its_node_turns_ready() {
    let m = MachineView {
        last_operation: Some((
            "Machine m1 failed to join the cluster in 20m0s minutes.".into(),
            OpState::Failed,
            OpType::Create,
        )),
        ..view(Phase::Failed)
    };
    let d = health(&m, Some(&ready_node()), t0() + mins(30));
    let t = d.transition.expect("joins");
    assert_eq!(t.phase, Some(Phase::Running));
    assert!(t
        .operation
        .description
        .starts_with("Machine m1 successfully joined the cluster in "));
    assert!(d.joined);
}

#[test]
fn running_machine_with_not_ready_node_goes_unknown() {
    let m = MachineView {
        conditions: vec![cond("Ready", "True")],
        ..view(Phase::Running)
    };
    let node = NodeView {
        conditions: vec![cond("Ready", "False")],
        critical_components_not_ready: false,
        startup_taint: None,
    };
    let d = health(&m, Some(&node), t0());
    let t = d.transition.expect("transition");
    assert_eq!(t.phase, Some(Phase::Unknown));
    assert!(t
        .operation
        .description
        .starts_with("Machine m1 is unhealthy - changing MachinePhase to Unknown"));
    assert!(d.conditions.is_some());
}

#[test]
fn a_watched_condition_that_is_not_false_is_unhealthy() {
    let watched = Settings::default().node_conditions;
    assert!(!is_healthy(
        &[cond("Ready", "True"), cond("DiskPressure", "Unknown")],
        &watched
    ));
    assert!(is_healthy(
        &[cond("Ready", "True"), cond("Other", "True")],
        &watched
    ));
    assert!(!is_healthy(&[], &watched));
    assert!(is_healthy(&[cond("DiskPressure", "False")], &watched));
}

#[test]
fn running_machine_whose_node_vanished_goes_unknown() {
    let m = MachineView {
        conditions: vec![cond("Ready", "True")],
        ..view(Phase::Running)
    };
    let d = health(&m, None, t0());
    let t = d.transition.expect("transition");
    assert_eq!(t.phase, Some(Phase::Unknown));
    assert_eq!(
        t.operation.description,
        "Node object went missing. Machine m1 is unhealthy - changing MachinePhase to Unknown"
    );
}

#[test]
fn unknown_machine_with_healthy_node_rejoins() {
    let m = MachineView {
        conditions: vec![cond("Ready", "True")],
        last_operation: Some(("x".into(), OpState::Processing, OpType::HealthCheck)),
        ..view(Phase::Unknown)
    };
    let d = health(&m, Some(&ready_node()), t0());
    let t = d.transition.expect("transition");
    assert_eq!(t.phase, Some(Phase::Running));
    assert_eq!(
        t.operation.description,
        "Machine m1 successfully re-joined the cluster"
    );
    assert!(!d.joined);
}

#[test]
fn unknown_past_the_health_timeout_fails_through_the_limiter() {
    let m = MachineView {
        conditions: vec![cond("Ready", "False")],
        last_operation: Some(("x".into(), OpState::Processing, OpType::HealthCheck)),
        ..view(Phase::Unknown)
    };
    let node = NodeView {
        conditions: vec![cond("Ready", "False")],
        critical_components_not_ready: false,
        startup_taint: None,
    };
    let d = health(&m, Some(&node), t0() + mins(11));
    let t = d.transition.expect("transition");
    assert_eq!(t.phase, Some(Phase::Failed));
    assert!(d.rate_limited);
    assert!(t.operation.description.starts_with(
        "Machine m1 health checks failing since last 10m0s minutes. Updating machine phase to Failed."
    ));
}

#[test]
fn unknown_within_the_health_timeout_rechecks_later() {
    let m = MachineView {
        conditions: vec![cond("Ready", "False")],
        ..view(Phase::Unknown)
    };
    let node = NodeView {
        conditions: vec![cond("Ready", "False")],
        critical_components_not_ready: false,
        startup_taint: None,
    };
    let d = health(&m, Some(&node), t0() + mins(5));
    assert!(d.transition.is_none());
    assert!(d.recheck_after.is_some());
}

#[test]
fn disabled_health_timeout_keeps_unknown() {
    let mut m = view(Phase::Unknown);
    m.settings.disable_health_timeout = true;
    let d = health(&m, None, t0() + mins(60));
    assert!(d.transition.is_none());
}

#[test]
fn pending_past_the_creation_timeout_fails_without_the_limiter() {
    let m = MachineView {
        last_operation: Some(("Creating".into(), OpState::Processing, OpType::Create)),
        ..view(Phase::Pending)
    };
    let d = health(&m, None, t0() + mins(21));
    let t = d.transition.expect("transition");
    assert_eq!(t.phase, Some(Phase::Failed));
    assert_eq!(
        t.operation.description,
        "Machine m1 failed to join the cluster in 20m0s minutes."
    );
    assert!(!d.rate_limited);
}

#[test]
fn only_one_replacement_at_a_time_per_deployment() {
    assert!(may_mark_failed(&[
        Phase::Running,
        Phase::Unknown,
        Phase::Unknown
    ]));
    assert!(!may_mark_failed(&[Phase::Running, Phase::Pending]));
    assert!(!may_mark_failed(&[Phase::Terminating]));
    assert!(!may_mark_failed(&[Phase::Failed]));
}

fn listed(phases: &[(&str, Phase)]) -> Vec<(String, Phase)> {
    phases
        .iter()
        .map(|(n, p)| (n.to_string(), p.clone()))
        .collect()
}

#[test]
fn two_unknown_machines_of_one_deployment_are_not_both_marked_failed_in_one_recheck() {
    let mut marks = FailedMarks::default();
    // Both reach their health timeout in one pass: both decisions see the
    // same listing (m1's Failed write is not in it yet).
    let seen = listed(&[
        ("m1", Phase::Unknown),
        ("m2", Phase::Unknown),
        ("m3", Phase::Running),
    ]);
    assert!(marks.grant("pool", "m1", &seen, t0()));
    assert!(
        !marks.grant("pool", "m2", &seen, t0()),
        "m2 must see m1's decision"
    );
    // Another deployment is not held up.
    assert!(marks.grant("other", "x1", &listed(&[("x1", Phase::Unknown)]), t0()));
    // Once the listing shows m1 Failed, m1 counts itself: still one at a time.
    let later = listed(&[
        ("m1", Phase::Failed),
        ("m2", Phase::Unknown),
        ("m3", Phase::Running),
    ]);
    assert!(!marks.grant("pool", "m2", &later, t0()));
    // m1 replaced and gone: m2 may go.
    let replaced = listed(&[("m2", Phase::Unknown), ("m3", Phase::Running)]);
    assert!(marks.grant("pool", "m2", &replaced, t0()));
}

#[test]
fn a_released_or_lost_failed_mark_stops_counting() {
    let mut marks = FailedMarks::default();
    let seen = listed(&[("m1", Phase::Unknown), ("m2", Phase::Unknown)]);
    assert!(marks.grant("pool", "m1", &seen, t0()));
    marks.release("pool", "m1");
    assert!(marks.grant("pool", "m2", &seen, t0()), "m1's write failed");
    // m2's write was lost without a release: it counts for PENDING only.
    let much_later = t0() + chrono::Duration::from_std(FailedMarks::PENDING).unwrap_or_default();
    assert!(!marks.grant("pool", "m1", &seen, t0()));
    assert!(marks.grant("pool", "m1", &seen, much_later));
}

// --- deletion

#[test]
fn deletion_starts_by_setting_terminating() {
    let m = view(Phase::Running);
    assert_eq!(deletion_stage(&m), DeletionStage::SetTerminating);
    let t = set_terminating();
    assert_eq!(t.phase, Some(Phase::Terminating));
    assert_eq!(t.operation.description, markers::GET_VM_STATUS);
}

#[test]
fn deletion_without_finalizer_does_nothing() {
    let m = MachineView {
        has_finalizer: false,
        ..view(Phase::Running)
    };
    assert_eq!(deletion_stage(&m), DeletionStage::MissingFinalizer);
}

#[test]
fn a_marker_quoted_in_user_text_does_not_choose_the_deletion_step() {
    use markers::*;
    let step_of = |description: &str| {
        deletion_stage(&MachineView {
            last_operation: Some((description.into(), OpState::Failed, OpType::Delete)),
            ..view(Phase::Terminating)
        })
    };
    // A provider error quoting a class kind / provider string that carries
    // other steps' markers: the flow stays at VM deletion.
    let planted = format!(
        "machine class kind \"{GET_VM_STATUS}\" of provider \"{INITIATE_FINALIZER_REMOVAL}\" is unknown"
    );
    let t = after_delete_vm::<()>(
        &Err(Status::new(Code::Internal, planted.clone())),
        VmRecord::HasVm,
    );
    assert!(t.operation.description.contains(GET_VM_STATUS));
    assert_eq!(step_of(&t.operation.description), DeletionStage::DeleteVm);
    // A drain error quoting a pod named like a later marker: drain again.
    let t = after_drain(
        &DrainPlan {
            force: false,
            timeout: Duration::from_secs(60),
            max_evict_retries: 1,
        },
        true,
        Err(format!(
            "pod \"{INITIATE_FINALIZER_REMOVAL}\" cannot be evicted"
        )),
    );
    assert_eq!(step_of(&t.operation.description), DeletionStage::Drain);
    // A marker followed by more text is not a step; trailing blanks are fine.
    assert_eq!(
        step_of(&format!("{INITIATE_FINALIZER_REMOVAL} (forged)")),
        DeletionStage::SetTerminating
    );
    assert_eq!(
        step_of(&format!("ok. {INITIATE_NODE_DELETION} \n")),
        DeletionStage::DeleteNode
    );
}

#[test]
fn deletion_steps_dispatch_on_the_description_markers_in_order() {
    let cases = [
        (markers::GET_VM_STATUS, DeletionStage::GetVmStatus),
        ("x. Initiate node drain", DeletionStage::Drain),
        (
            "Force Drain successful. Delete Volume Attachments",
            DeletionStage::DeleteVolumeAttachments,
        ),
        (
            "Drain successful. Initiate VM deletion",
            DeletionStage::DeleteVm,
        ),
        (
            "VM deletion was successful. Initiate node object deletion",
            DeletionStage::DeleteNode,
        ),
        (
            "ok. Initiate machine object finalizer removal",
            DeletionStage::RemoveFinalizer,
        ),
        ("garbage", DeletionStage::SetTerminating),
    ];
    for (desc, step) in cases {
        let m = MachineView {
            last_operation: Some((desc.into(), OpState::Processing, OpType::Delete)),
            ..view(Phase::Terminating)
        };
        assert_eq!(deletion_stage(&m), step, "{desc}");
    }
}

#[test]
fn get_vm_status_step_texts() {
    assert!(after_get_vm_status(false, false, None, VmRecord::HasVm)
        .operation
        .description
        .ends_with("Initiate VM deletion"));
    assert_eq!(
        after_get_vm_status(true, true, None, VmRecord::HasVm)
            .operation
            .description,
        "Initiate node drain"
    );
    let uninit = Err(Status::new(Code::Uninitialized, "x"));
    assert_eq!(
        after_get_vm_status(true, false, Some(&uninit), VmRecord::HasVm)
            .operation
            .description,
        "VM instance was not initialized. Moving forward to node drain. Initiate node drain"
    );
    let nf = Err(Status::not_found("x"));
    assert_eq!(
        after_get_vm_status(true, false, Some(&nf), VmRecord::HasVm)
            .operation
            .description,
        "VM was not found at provider. Moving forward to node drain. Initiate node drain"
    );
    let transient = Err(Status::new(Code::Unavailable, "x"));
    let t = after_get_vm_status(true, false, Some(&transient), VmRecord::HasVm);
    assert_eq!(t.operation.state, OpState::Failed);
    assert!(t.operation.description.contains(markers::GET_VM_STATUS));
}

#[test]
fn drain_is_forced_by_label_timeout_or_a_long_notready_node() {
    let now = t0() + mins(60);
    let normal = MachineView {
        deleting_since: Some(now),
        ..view(Phase::Terminating)
    };
    let p = plan_drain(&normal, now);
    assert!(!p.force);
    assert_eq!(p.max_evict_retries, 360);
    let labelled = MachineView {
        force_deletion: true,
        ..normal.clone()
    };
    assert!(plan_drain(&labelled, now).force);
    let old = MachineView {
        deleting_since: Some(t0()),
        settings: Settings {
            drain_timeout: Duration::from_secs(600),
            ..Settings::default()
        },
        ..normal.clone()
    };
    assert!(plan_drain(&old, now).force);
    let notready = MachineView {
        conditions: vec![cond_since("Ready", "False", now - mins(6))],
        ..normal.clone()
    };
    assert!(plan_drain(&notready, now).force);
    let recently = MachineView {
        conditions: vec![cond_since("Ready", "False", now - mins(2))],
        ..normal
    };
    assert!(!plan_drain(&recently, now).force);
}

#[test]
fn drain_outcomes_lead_to_the_right_next_step() {
    let normal = DrainPlan {
        force: false,
        timeout: Duration::from_secs(60),
        max_evict_retries: 3,
    };
    let forced = DrainPlan {
        force: true,
        ..normal
    };
    assert_eq!(
        after_drain(&normal, true, Ok(())).operation.description,
        "Drain successful. Initiate VM deletion"
    );
    assert_eq!(
        after_drain(&forced, true, Ok(())).operation.description,
        "Force Drain successful. Delete Volume Attachments"
    );
    let failed = after_drain(&normal, true, Err("pdb".into()));
    assert_eq!(failed.operation.state, OpState::Failed);
    assert_eq!(
        failed.operation.description,
        "Drain failed due to - pdb. Will retry in next sync. Initiate node drain"
    );
    assert!(after_drain(&normal, false, Ok(()))
        .operation
        .description
        .starts_with("Skipping drain"));
}

#[test]
fn vm_deletion_outcomes() {
    let ok = after_delete_vm::<()>(&Ok(()), VmRecord::HasVm);
    assert_eq!(
        ok.operation.description,
        "VM deletion was successful. Initiate node object deletion"
    );
    let nf = after_delete_vm::<()>(&Err(Status::not_found("x")), VmRecord::HasVm);
    assert_eq!(
        nf.operation.description,
        "VM not found. Continuing deletion flow. Initiate node object deletion"
    );
    let tr = after_delete_vm::<()>(&Err(Status::new(Code::Unavailable, "x")), VmRecord::HasVm);
    assert!(tr.operation.description.ends_with("Initiate VM deletion"));
    let hard = after_delete_vm::<()>(
        &Err(Status::new(Code::PermissionDenied, "x")),
        VmRecord::HasVm,
    );
    assert_eq!(hard.operation.state, OpState::Failed);
    assert!(hard.operation.description.ends_with("Initiate VM deletion"));
}

#[test]
fn node_deletion_outcomes_lead_to_finalizer_removal() {
    for o in [
        NodeDeletion::NoLabel,
        NodeDeletion::NotFound("n".into()),
        NodeDeletion::Deleted("n".into()),
    ] {
        assert!(after_delete_node("m1", &o)
            .operation
            .description
            .ends_with(markers::INITIATE_FINALIZER_REMOVAL));
    }
    let f = after_delete_node("m1", &NodeDeletion::Failed("n".into(), "e".into()));
    assert!(f
        .operation
        .description
        .ends_with(markers::INITIATE_NODE_DELETION));
}

// --- userdata

#[test]
fn userdata_placeholders_are_substituted_raw_or_escaped() {
    assert_eq!(
        substitute_userdata(
            b"name=<<MACHINE_NAME>> t=<<BOOTSTRAP_TOKEN>>",
            "m1",
            Some("abc.def")
        ),
        b"name=m1 t=abc.def"
    );
    assert_eq!(
        substitute_userdata(b"u?t=%3C%3CBOOTSTRAP_TOKEN%3E%3E", "m1", Some("a b")),
        b"u?t=a+b"
    );
    assert_eq!(
        substitute_userdata(b"t=<<BOOTSTRAP_TOKEN>>", "m1", None),
        b"t=<<BOOTSTRAP_TOKEN>>"
    );
}

/// `#cloud-config\nhostname: x\n`, gzip-compressed: not UTF-8.
pub(crate) const GZIPPED_CLOUD_CONFIG: &[u8] = &[
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x53, 0x4e, 0xce, 0xc9, 0x2f, 0x4d,
    0xd1, 0x4d, 0xce, 0xcf, 0x4b, 0xcb, 0x4c, 0xe7, 0xca, 0xc8, 0x2f, 0x2e, 0xc9, 0x4b, 0xcc, 0x4d,
    0xb5, 0x52, 0xa8, 0xe0, 0x02, 0x00, 0x49, 0x75, 0xb3, 0x15, 0x1a, 0x00, 0x00, 0x00,
];

#[test]
fn userdata_that_is_not_utf8_is_kept_byte_for_byte() {
    assert!(String::from_utf8(GZIPPED_CLOUD_CONFIG.to_vec()).is_err());
    assert_eq!(
        substitute_userdata(GZIPPED_CLOUD_CONFIG, "m1", Some("abc.def")),
        GZIPPED_CLOUD_CONFIG
    );
    // Placeholders are replaced around bytes that are not UTF-8.
    let mut mixed = vec![0xff, 0xfe];
    mixed.extend_from_slice(b"<<MACHINE_NAME>>");
    mixed.push(0x8b);
    assert_eq!(
        substitute_userdata(&mixed, "m1", None),
        [&[0xff, 0xfe][..], b"m1", &[0x8b]].concat()
    );
}

#[test]
fn bootstrap_token_ids_differ_for_similar_names_and_short_names_work() {
    let a = bootstrap_token_id("pool-abc12-xyz", "uid-1");
    let b = bootstrap_token_id("pool-def12-xyz", "uid-2");
    assert_ne!(a, b);
    assert_eq!(a.len(), 6);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(bootstrap_token_id("m", "u").len(), 6);
    assert_eq!(a, bootstrap_token_id("pool-abc12-xyz", "uid-1"));
}

// ---------------------------------------------------------------------------
// Startup taint (design: startup-taint.md)

fn tainted_ready_node() -> NodeView {
    NodeView {
        startup_taint: Some(startup_taint::held_description(
            "node-1",
            mcm_api::constants::STARTUP_TAINT_KEY,
            "waiting",
        )),
        ..ready_node()
    }
}

#[test]
fn startup_taint_keeps_a_pending_machine_out_of_running_and_says_why() {
    let m = MachineView {
        last_operation: Some((
            "Creating machine on cloud provider".into(),
            OpState::Processing,
            OpType::Create,
        )),
        ..view(Phase::Pending)
    };
    let d = health(&m, Some(&tainted_ready_node()), t0() + mins(1));
    assert!(d.held_for_startup_taint);
    let t = d.transition.expect("the reason is recorded");
    assert_eq!(t.phase, None, "stays Pending");
    assert!(t
        .operation
        .description
        .contains("carries the startup taint node.machine.sapcloud.io/not-initialized"));
    assert_eq!(t.operation.kind, OpType::Create);
    assert_eq!(t.operation.state, OpState::Processing);
    assert!(!d.joined);
}

#[test]
fn startup_taint_reason_already_recorded_is_not_written_again() {
    let node = tainted_ready_node();
    let recorded = node.startup_taint.clone().expect("text");
    let m = MachineView {
        last_operation: Some((recorded, OpState::Processing, OpType::Create)),
        conditions: vec![cond("Ready", "True")],
        ..view(Phase::Pending)
    };
    let d = health(&m, Some(&node), t0() + mins(1));
    assert!(d.held_for_startup_taint);
    assert!(d.transition.is_none());
    assert!(d.recheck_after.is_some(), "the creation timeout still runs");
}

#[test]
fn startup_taint_held_past_the_creation_timeout_fails_the_machine() {
    let node = tainted_ready_node();
    let recorded = node.startup_taint.clone().expect("text");
    let m = MachineView {
        last_operation: Some((recorded, OpState::Processing, OpType::Create)),
        conditions: vec![cond("Ready", "True")],
        ..view(Phase::Pending)
    };
    let d = health(&m, Some(&node), t0() + mins(21));
    assert_eq!(d.transition.expect("timeout").phase, Some(Phase::Failed));
}

#[test]
fn pending_machine_becomes_running_once_the_startup_taint_is_gone() {
    let node = tainted_ready_node();
    let recorded = node.startup_taint.clone().expect("text");
    let m = MachineView {
        last_operation: Some((recorded, OpState::Processing, OpType::Create)),
        ..view(Phase::Pending)
    };
    let d = health(&m, Some(&ready_node()), t0() + mins(2));
    let t = d.transition.expect("promoted");
    assert_eq!(t.phase, Some(Phase::Running));
    assert!(d.joined, "the held description keeps it a first join");
    assert!(!d.held_for_startup_taint);
}

#[test]
fn startup_taint_keeps_unknown_and_in_place_updated_machines_out_of_running() {
    for phase in [Phase::Unknown, Phase::InPlaceUpdateSuccessful] {
        let m = view(phase.clone());
        let d = health(&m, Some(&tainted_ready_node()), t0() + mins(1));
        assert!(d.held_for_startup_taint, "{phase:?}");
        assert!(
            d.transition.as_ref().and_then(|t| t.phase.clone()) != Some(Phase::Running),
            "{phase:?} must not become Running"
        );
    }
}

#[test]
fn startup_taint_does_not_demote_a_running_machine() {
    let m = MachineView {
        conditions: vec![cond("Ready", "True")],
        ..view(Phase::Running)
    };
    let d = health(&m, Some(&tainted_ready_node()), t0() + mins(1));
    assert!(d.transition.is_none());
}
