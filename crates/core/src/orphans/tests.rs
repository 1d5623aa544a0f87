use super::*;
use serde_json::json;

const NS: &str = "shoot--a";

fn machine(name: &str, uid: &str, pid: &str, phase: &str) -> Machine {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "namespace": NS, "uid": uid},
        "spec": {"class": {"name": "c"}, "providerID": pid},
        "status": {"currentStatus": {"phase": phase}}
    }))
    .expect("machine")
}

fn owner(ns: &str, uid: &str) -> Option<MachineOwner> {
    Some(MachineOwner {
        namespace: ns.into(),
        uid: uid.into(),
    })
}

fn vm(pid: &str, name: &str, owner: Option<MachineOwner>) -> ListedVm {
    ListedVm {
        class: "c".into(),
        provider_id: pid.into(),
        name: name.into(),
        instance_key: pid.into(),
        owner,
    }
}

#[test]
fn provider_ids_compare_normalized() {
    let n = normalize_provider_id;
    assert_eq!(n("aws:///eu-west-1/i-0abc"), n("aws:////i-0abc"));
    assert_eq!(n("aws:///eu-west-1/i-0abc"), n("aws:///eu-west-1a/i-0abc/"));
    assert_eq!(n(" AWS:///EU-WEST-1/I-0ABC "), n("aws:///eu-west-1/i-0abc"));
    assert_eq!(n("gce:///p/z/n/"), "gce:///p/z/n");
    assert_ne!(n("gce:///p/z/n"), n("gce:///p/z/m"));
    assert_ne!(n("aws:///r/i-1"), n("aws:///r/i-2"));
}

#[test]
fn a_vm_whose_machine_has_its_provider_id_in_another_form_is_owned() {
    let machines = vec![machine("m1", "u1", "AWS:///eu-west-1/i-0abc/", "Running")];
    let v = judge(&vm("aws:///eu-west-1/i-0abc", "m1", None), &machines, NS);
    assert_eq!(v, OrphanVerdict::Owned);
}

/// Finding 3: the class's location was edited, so the provider lists the
/// Running machine's VM under a providerID built from the new location.
#[test]
fn a_running_machines_vm_listed_under_a_provider_id_from_an_edited_location_is_kept() {
    let machines = vec![machine("m1", "u1", "azure:///westeurope/m1", "Running")];
    // Without identity (created before VMs carried one), by its name.
    let listed = ListedVm {
        instance_key:
            "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/virtualmachines/m1"
                .into(),
        ..vm("azure:///northeurope/m1", "m1", None)
    };
    let v = judge(&listed, &machines, NS);
    assert!(!v.is_orphan(), "{v:?}");
    // With identity, by its UID.
    let with_uid = ListedVm {
        name: "renamed".into(),
        ..vm("azure:///northeurope/m1", "m1", owner(NS, "u1"))
    };
    assert_eq!(judge(&with_uid, &machines, NS), OrphanVerdict::Owned);
    // By the canonical key when the provider keys VMs by their providerID.
    let by_key = ListedVm {
        name: "renamed".into(),
        instance_key: "azure:///westeurope/m1".into(),
        ..vm("azure:///northeurope/m1", "m1", None)
    };
    assert_eq!(judge(&by_key, &machines, NS), OrphanVerdict::Owned);
}

#[test]
fn a_vm_of_a_machine_being_created_or_deleted_is_kept() {
    for phase in ["", "CrashLoopBackOff"] {
        let v = judge(&vm("p1", "m1", None), &[machine("m1", "u1", "", phase)], NS);
        assert_eq!(v, OrphanVerdict::MachineBusy, "{phase:?}");
    }
    let mut deleting = machine("m1", "u1", "p0", "Running");
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    assert_eq!(
        judge(&vm("p1", "m1", None), &[deleting], NS),
        OrphanVerdict::MachineBusy
    );
}

/// The reference deletes a second VM of a live Machine (its providerID
/// differs); it may be that Machine's own VM under another providerID, so
/// it is kept.
#[test]
fn a_vm_carrying_a_live_machines_name_is_never_an_orphan() {
    let m = machine("m1", "u1", "p-own", "Running");
    for owner in [None, owner(NS, "u-older"), owner("other", "u9")] {
        let v = judge(
            &vm("p-dup", "m1", owner.clone()),
            std::slice::from_ref(&m),
            NS,
        );
        assert_eq!(v, OrphanVerdict::LiveMachineName, "{owner:?}");
    }
}

/// Upstream #1146: the VM of a preserved machine is never collected.
#[test]
fn a_preserved_machines_vm_is_never_an_orphan() {
    let mut m = machine("m1", "u1", "p-own", "Failed");
    m.metadata.annotations = Some(
        [(c::PRESERVE_ANNOTATION.to_string(), "now".to_string())]
            .into_iter()
            .collect(),
    );
    for listed in [
        vm("p-own", "m1", None),
        vm("p-other", "m1", None),
        vm("p-other", "renamed", owner(NS, "u1")),
    ] {
        assert_eq!(
            judge(&listed, std::slice::from_ref(&m), NS),
            OrphanVerdict::Preserved,
            "{listed:?}"
        );
    }
    let mut by_status = machine("m1", "u1", "p-own", "Failed");
    by_status
        .status
        .get_or_insert_with(Default::default)
        .current_status
        .preserve_expiry_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    assert!(is_preserved(&by_status));
    m.metadata.annotations = Some(
        [(c::PRESERVE_ANNOTATION.to_string(), "false".to_string())]
            .into_iter()
            .collect(),
    );
    assert!(!is_preserved(&m));
}

/// Finding 5: a name collision across namespaces sharing a cluster tag.
#[test]
fn a_vm_carrying_another_namespaces_identity_is_never_an_orphan() {
    let v = judge(&vm("p-b", "w1", owner("shoot--b", "u-b")), &[], NS);
    assert_eq!(v, OrphanVerdict::OtherNamespace);
    assert!(!v.is_orphan());
    // Even when this namespace has a Machine of that UID string: the UID
    // counts only together with the namespace.
    let v = judge(
        &vm("p-b", "w1", owner("shoot--b", "u1")),
        &[machine("other-name", "u1", "p-a", "Running")],
        NS,
    );
    assert_eq!(v, OrphanVerdict::OtherNamespace);
}

#[test]
fn a_vm_carrying_this_namespaces_identity_is_an_orphan_once_its_machine_is_gone() {
    let gone = vm("p1", "m1", owner(NS, "u1"));
    assert_eq!(judge(&gone, &[], NS), OrphanVerdict::MachineGone);
    assert!(OrphanVerdict::MachineGone.is_orphan());
    // Its Machine (that UID) still there under another name: owned.
    assert_eq!(
        judge(&gone, &[machine("renamed", "u1", "", "Running")], NS),
        OrphanVerdict::Owned
    );
}

/// The reference's rule for a VM without identity (out of band, the Go
/// controller, before this change): listed for the class's tags and no
/// Machine of its name.
#[test]
fn a_vm_without_identity_and_without_a_machine_of_its_name_is_an_orphan() {
    let v = judge(
        &vm("p-oob", "oob", None),
        &[machine("m1", "u1", "p1", "Running")],
        NS,
    );
    assert_eq!(v, OrphanVerdict::NoIdentity);
    assert!(v.is_orphan());
}

#[test]
fn an_orphan_is_due_only_after_being_seen_for_the_whole_grace_period() {
    let mut t = OrphanTracker::default();
    let start = Instant::now();
    let g = Duration::from_secs(60);
    let set: HashSet<String> = ["p".to_string()].into_iter().collect();
    assert!(t.due(&set, g, start).is_empty());
    assert!(t.due(&set, g, start + Duration::from_secs(30)).is_empty());
    assert_eq!(t.due(&set, g, start + Duration::from_secs(61)), vec!["p"]);
    // A candidate that disappears and comes back starts over.
    t.due(&HashSet::new(), g, start + Duration::from_secs(62));
    assert!(t.due(&set, g, start + Duration::from_secs(63)).is_empty());
}
