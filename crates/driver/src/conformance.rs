//! The driver conformance kit: reusable async checks that every provider crate
//! runs against its own backend (a simulated cloud, moto, ...).
//!
//! A provider test builds a [`Fixture`] and calls [`run_all`] (or single checks).
//! Each check returns `Err(description)` on a contract violation, so it can be
//! used with any test harness. A provider that updates running VMs
//! (`UpdateMachine`, docs/design/hot-update.md) also builds an
//! [`UpdateFixture`] and calls [`run_update_checks`]; one that does not can
//! run [`update_unimplemented_claims_nothing_in_place`].

use crate::{
    Code, Driver, ListMachinesRequest, MachineOwner, MachineRequest, UpdateMachineRequest,
};
use k8s_openapi::api::core::v1::Secret;
use mcm_api::{Machine, MachineClass};
use std::future::Future;
use std::pin::Pin;

/// A boxed future of the fixtures' hooks.
pub type HookFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What the checks need from a provider: a valid class and secret, a way to
/// make fresh machines for it, and classes with bad providerSpecs.
pub struct Fixture {
    /// A valid class whose VMs belong to the cluster under test.
    pub class: MachineClass,
    /// A valid class of ANOTHER cluster (different cluster tags), to show that
    /// ListMachines does not leak other clusters' VMs.
    pub other_class: MachineClass,
    /// The merged secret for both classes.
    pub secret: Secret,
    /// Makes a new Machine object (with a fresh name, its namespace and a
    /// UID) for the given class.
    pub new_machine: Box<dyn Fn(&MachineClass) -> Machine + Send + Sync>,
    /// Classes with an empty or garbage providerSpec, each with a field name the
    /// error message must mention.
    pub invalid_classes: Vec<(MachineClass, String)>,
}

impl Fixture {
    fn request(&self, class: &MachineClass) -> MachineRequest {
        MachineRequest {
            machine: (self.new_machine)(class),
            machine_class: class.clone(),
            secret: self.secret.clone(),
        }
    }

    fn list_request(&self, class: &MachineClass) -> ListMachinesRequest {
        ListMachinesRequest {
            machine_class: class.clone(),
            secret: self.secret.clone(),
        }
    }
}

/// A check's outcome: `Err` describes the contract violation.
pub type CheckResult = Result<(), String>;

fn fail<T: std::fmt::Debug>(what: &str, got: T) -> String {
    format!("{what}: got {got:?}")
}

/// Create, then GetMachineStatus, return the same providerID (after initialization,
/// when the provider supports it).
pub async fn create_then_status_same_provider_id(d: &dyn Driver, f: &Fixture) -> CheckResult {
    let req = f.request(&f.class);
    let created = d
        .create_machine(&req)
        .await
        .map_err(|e| fail("CreateMachine failed", e))?;
    if created.provider_id.is_empty() {
        return Err("CreateMachine returned an empty providerID".into());
    }
    let status = match d.get_machine_status(&req).await {
        Ok(s) => s.into(),
        Err(e) if e.code == Code::Uninitialized => match e.machine {
            Some(m) => *m,
            None => return Err("Uninitialized answer without the machine's identity".into()),
        },
        Err(e) => return Err(fail("GetMachineStatus after create", e)),
    };
    if status.provider_id != created.provider_id {
        return Err(format!(
            "providerID differs: create {} status {}",
            created.provider_id, status.provider_id
        ));
    }
    d.delete_machine(&req)
        .await
        .map_err(|e| fail("DeleteMachine failed", e))?;
    Ok(())
}

/// GetMachineStatus of a machine that has no VM answers NotFound.
pub async fn status_without_vm_is_not_found(d: &dyn Driver, f: &Fixture) -> CheckResult {
    let req = f.request(&f.class);
    match d.get_machine_status(&req).await {
        Err(e) if e.code == Code::NotFound => Ok(()),
        other => Err(fail("expected NotFound for a machine without VM", other)),
    }
}

/// Delete twice: both succeed, and afterwards the status is NotFound.
pub async fn delete_is_idempotent(d: &dyn Driver, f: &Fixture) -> CheckResult {
    let req = f.request(&f.class);
    d.create_machine(&req)
        .await
        .map_err(|e| fail("CreateMachine failed", e))?;
    d.delete_machine(&req)
        .await
        .map_err(|e| fail("first DeleteMachine failed", e))?;
    d.delete_machine(&req)
        .await
        .map_err(|e| fail("DeleteMachine of a gone VM must be OK", e))?;
    match d.get_machine_status(&req).await {
        Err(e) if e.code == Code::NotFound => Ok(()),
        other => Err(fail("expected NotFound after delete", other)),
    }
}

/// ListMachines returns the class's VMs (by providerID, with the machine name) and
/// none of another cluster's.
pub async fn list_returns_only_the_class_machines(d: &dyn Driver, f: &Fixture) -> CheckResult {
    let mine = f.request(&f.class);
    let theirs = f.request(&f.other_class);
    let a = d
        .create_machine(&mine)
        .await
        .map_err(|e| fail("create (own cluster)", e))?;
    let b = d
        .create_machine(&theirs)
        .await
        .map_err(|e| fail("create (other cluster)", e))?;
    let listed = d
        .list_machines(&f.list_request(&f.class))
        .await
        .map_err(|e| fail("ListMachines failed", e))?;
    let result = if listed.machine_list.get(&a.provider_id) != mine.machine.metadata.name.as_ref() {
        Err(fail(
            "own machine missing from the list",
            &listed.machine_list,
        ))
    } else if listed.machine_list.contains_key(&b.provider_id) {
        Err(fail(
            "another cluster's machine is listed",
            &listed.machine_list,
        ))
    } else {
        Ok(())
    };
    let _ = d.delete_machine(&mine).await;
    let _ = d.delete_machine(&theirs).await;
    result
}

/// ListMachines reports, for a VM it lists, a canonical key and the identity
/// (the Machine's namespace and UID) that CreateMachine recorded on it
/// (docs/design/safety.md, "VM identity").
pub async fn list_reports_the_identity_recorded_on_create(
    d: &dyn Driver,
    f: &Fixture,
) -> CheckResult {
    let req = f.request(&f.class);
    let Some(owner) = MachineOwner::of(&req.machine) else {
        return Err("the fixture's machines need a namespace and a UID".into());
    };
    let created = d
        .create_machine(&req)
        .await
        .map_err(|e| fail("CreateMachine failed", e))?;
    let result = async {
        let listed = d
            .list_machines(&f.list_request(&f.class))
            .await
            .map_err(|e| fail("ListMachines failed", e))?;
        if !listed.machine_list.contains_key(&created.provider_id) {
            return Err(fail("the created VM is not listed", &listed.machine_list));
        }
        let facts = listed.facts(&created.provider_id);
        if facts.owner.as_ref() != Some(&owner) {
            return Err(format!(
                "ListMachines reports the identity {:?}, CreateMachine was asked for {owner:?}",
                facts.owner
            ));
        }
        if facts.instance_key.trim().is_empty() {
            return Err("ListMachines reports an empty instance key".into());
        }
        Ok(())
    }
    .await;
    let _ = d.delete_machine(&req).await;
    result
}

/// InitializeMachine is idempotent (twice OK, after which the status is OK), or
/// answers Unimplemented.
pub async fn initialize_is_idempotent_or_unimplemented(d: &dyn Driver, f: &Fixture) -> CheckResult {
    let req = f.request(&f.class);
    d.create_machine(&req)
        .await
        .map_err(|e| fail("CreateMachine failed", e))?;
    let result = async {
        match d.initialize_machine(&req).await {
            Err(e) if e.code == Code::Unimplemented => return Ok(()),
            Err(e) => return Err(fail("first InitializeMachine failed", e)),
            Ok(_) => {}
        }
        d.initialize_machine(&req)
            .await
            .map_err(|e| fail("second InitializeMachine failed", e))?;
        d.get_machine_status(&req)
            .await
            .map_err(|e| fail("status after initialization must be OK", e))?;
        Ok(())
    }
    .await;
    let _ = d.delete_machine(&req).await;
    result
}

/// An empty or garbage providerSpec answers InvalidArgument naming the field,
/// and creates nothing.
pub async fn invalid_provider_spec_is_invalid_argument(d: &dyn Driver, f: &Fixture) -> CheckResult {
    let before = d
        .list_machines(&f.list_request(&f.class))
        .await
        .map_err(|e| fail("ListMachines failed", e))?;
    for (class, field) in &f.invalid_classes {
        let req = f.request(class);
        match d.create_machine(&req).await {
            Err(e) if e.code == Code::InvalidArgument => {
                if !e.message.contains(field.as_str()) {
                    return Err(format!(
                        "InvalidArgument message {:?} does not name the field {field}",
                        e.message
                    ));
                }
            }
            other => {
                return Err(fail(
                    "expected InvalidArgument for a bad providerSpec",
                    other,
                ))
            }
        }
    }
    let after = d
        .list_machines(&f.list_request(&f.class))
        .await
        .map_err(|e| fail("ListMachines failed", e))?;
    if after != before {
        return Err("a bad providerSpec created a VM".into());
    }
    Ok(())
}

/// What the hot-update checks need besides a [`Fixture`].
pub struct UpdateFixture {
    /// The fixture's class with a change the driver makes in place (new
    /// tags, say): `in_place_changes(class, updated_class)` must be all in place.
    pub updated_class: MachineClass,
    /// Makes the provider's next UpdateMachine calls fail (an injected cloud
    /// fault), until [`UpdateFixture::heal`].
    pub break_updates: Box<dyn Fn() -> HookFuture<()> + Send + Sync>,
    /// Ends [`UpdateFixture::break_updates`].
    pub heal: Box<dyn Fn() -> HookFuture<()> + Send + Sync>,
    /// Whether the VM with this providerID has what the updated class asks
    /// for (read from the cloud); `Err` says what differs.
    pub converged: Box<dyn Fn(String) -> HookFuture<Result<(), String>> + Send + Sync>,
}

fn update_request(
    req: &MachineRequest,
    class: &MachineClass,
    last: &MachineClass,
) -> UpdateMachineRequest {
    let mut machine = req.machine.clone();
    machine.spec.class.name = class.metadata.name.clone().unwrap_or_default();
    UpdateMachineRequest {
        machine,
        machine_class: class.clone(),
        secret: req.secret.clone(),
        last_applied_provider_spec: last.provider_spec.clone(),
    }
}

/// Creates a VM for a fresh machine of the fixture's class and initializes
/// it when the provider initializes; the request and the providerID.
async fn running_vm(d: &dyn Driver, f: &Fixture) -> Result<(MachineRequest, String), String> {
    let mut req = f.request(&f.class);
    let created = d
        .create_machine(&req)
        .await
        .map_err(|e| fail("CreateMachine failed", e))?;
    req.machine.spec.provider_id = created.provider_id.clone();
    match d.initialize_machine(&req).await {
        Ok(_) => {}
        Err(e) if e.code == Code::Unimplemented => {}
        Err(e) => return Err(fail("InitializeMachine failed", e)),
    }
    Ok((req, created.provider_id))
}

/// The providerID GetMachineStatus reports for the machine.
async fn status_provider_id(d: &dyn Driver, req: &MachineRequest) -> Result<String, String> {
    match d.get_machine_status(req).await {
        Ok(s) => Ok(s.provider_id),
        Err(e) => Err(fail("GetMachineStatus after UpdateMachine", e)),
    }
}

/// The fixture's change is one the driver makes in place.
pub async fn update_fixture_change_is_in_place(
    d: &dyn Driver,
    f: &Fixture,
    u: &UpdateFixture,
) -> CheckResult {
    let c = d.in_place_changes(&f.class.provider_spec, &u.updated_class.provider_spec);
    if c.all_in_place() {
        Ok(())
    } else {
        Err(fail("the fixture's change must be all in place", c))
    }
}

/// UpdateMachine twice gives the same VM (same providerID, no second VM)
/// with the updated class's settings.
pub async fn update_is_idempotent(d: &dyn Driver, f: &Fixture, u: &UpdateFixture) -> CheckResult {
    let (req, provider_id) = running_vm(d, f).await?;
    let result = async {
        let up = update_request(&req, &u.updated_class, &f.class);
        d.update_machine(&up)
            .await
            .map_err(|e| fail("first UpdateMachine failed", e))?;
        d.update_machine(&up)
            .await
            .map_err(|e| fail("second UpdateMachine (same request) failed", e))?;
        let now = status_provider_id(d, &req).await?;
        if now != provider_id {
            return Err(format!(
                "UpdateMachine replaced the VM: {provider_id} became {now}"
            ));
        }
        let listed = d
            .list_machines(&f.list_request(&f.class))
            .await
            .map_err(|e| fail("ListMachines failed", e))?;
        let mine: Vec<&String> = listed
            .machine_list
            .iter()
            .filter(|(_, name)| Some(*name) == req.machine.metadata.name.as_ref())
            .map(|(id, _)| id)
            .collect();
        if mine != [&provider_id] {
            return Err(fail("one VM for the machine after two updates", mine));
        }
        (u.converged)(provider_id.clone()).await
    }
    .await;
    let _ = d.delete_machine(&req).await;
    result
}

/// An UpdateMachine that fails (a cloud fault) leaves the VM in place, and a
/// retry once the fault is gone converges it.
pub async fn failed_update_then_retry_converges(
    d: &dyn Driver,
    f: &Fixture,
    u: &UpdateFixture,
) -> CheckResult {
    let (req, provider_id) = running_vm(d, f).await?;
    let result = async {
        let up = update_request(&req, &u.updated_class, &f.class);
        (u.break_updates)().await;
        let failed = d.update_machine(&up).await;
        (u.heal)().await;
        match failed {
            Err(e) if e.code != Code::Unimplemented => {}
            other => {
                return Err(fail(
                    "UpdateMachine under an injected fault must fail",
                    other,
                ))
            }
        }
        if status_provider_id(d, &req).await? != provider_id {
            return Err("a failed UpdateMachine replaced the VM".into());
        }
        d.update_machine(&up)
            .await
            .map_err(|e| fail("UpdateMachine retried after the fault failed", e))?;
        if status_provider_id(d, &req).await? != provider_id {
            return Err("the retried UpdateMachine replaced the VM".into());
        }
        (u.converged)(provider_id.clone()).await
    }
    .await;
    let _ = d.delete_machine(&req).await;
    result
}

/// For a provider without UpdateMachine: it answers `Unimplemented` (the
/// default) and claims no change as in place, so the controller reports
/// every change as needing a new VM instead of calling it.
pub async fn update_unimplemented_claims_nothing_in_place(
    d: &dyn Driver,
    f: &Fixture,
) -> CheckResult {
    let req = f.request(&f.class);
    let up = update_request(&req, &f.other_class, &f.class);
    match d.update_machine(&up).await {
        Err(e) if e.code == Code::Unimplemented => {}
        other => {
            return Err(fail(
                "expected UpdateMachine to answer Unimplemented",
                other,
            ))
        }
    }
    let c = d.in_place_changes(&f.class.provider_spec, &f.other_class.provider_spec);
    if c.in_place.is_empty() {
        Ok(())
    } else {
        Err(fail(
            "a driver without UpdateMachine must claim nothing in place",
            c,
        ))
    }
}

/// Runs the hot-update checks and returns all violations (empty = conformant).
pub async fn run_update_checks(d: &dyn Driver, f: &Fixture, u: &UpdateFixture) -> Vec<String> {
    let checks: [(&str, CheckResult); 3] = [
        (
            "update_fixture_change_is_in_place",
            update_fixture_change_is_in_place(d, f, u).await,
        ),
        ("update_is_idempotent", update_is_idempotent(d, f, u).await),
        (
            "failed_update_then_retry_converges",
            failed_update_then_retry_converges(d, f, u).await,
        ),
    ];
    checks
        .into_iter()
        .filter_map(|(name, r)| r.err().map(|e| format!("{name}: {e}")))
        .collect()
}

/// Runs every check and returns all violations (empty = conformant).
pub async fn run_all(d: &dyn Driver, f: &Fixture) -> Vec<String> {
    let mut failures = Vec::new();
    let checks: [(&str, CheckResult); 7] = [
        (
            "create_then_status_same_provider_id",
            create_then_status_same_provider_id(d, f).await,
        ),
        (
            "status_without_vm_is_not_found",
            status_without_vm_is_not_found(d, f).await,
        ),
        ("delete_is_idempotent", delete_is_idempotent(d, f).await),
        (
            "list_returns_only_the_class_machines",
            list_returns_only_the_class_machines(d, f).await,
        ),
        (
            "list_reports_the_identity_recorded_on_create",
            list_reports_the_identity_recorded_on_create(d, f).await,
        ),
        (
            "initialize_is_idempotent_or_unimplemented",
            initialize_is_idempotent_or_unimplemented(d, f).await,
        ),
        (
            "invalid_provider_spec_is_invalid_argument",
            invalid_provider_spec_is_invalid_argument(d, f).await,
        ),
    ];
    for (name, r) in checks {
        if let Err(e) = r {
            failures.push(format!("{name}: {e}"));
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;
    use async_trait::async_trait;

    /// A driver that implements only what the contract requires.
    struct Minimal;

    #[async_trait]
    impl Driver for Minimal {
        async fn create_machine(
            &self,
            _: &CreateMachineRequest,
        ) -> DriverResult<CreateMachineResponse> {
            Err(Status::unimplemented("x"))
        }
        async fn delete_machine(
            &self,
            _: &DeleteMachineRequest,
        ) -> DriverResult<DeleteMachineResponse> {
            Ok(DeleteMachineResponse::default())
        }
        async fn get_machine_status(
            &self,
            _: &GetMachineStatusRequest,
        ) -> DriverResult<GetMachineStatusResponse> {
            Err(Status::not_found("x"))
        }
        async fn list_machines(
            &self,
            _: &ListMachinesRequest,
        ) -> DriverResult<ListMachinesResponse> {
            Ok(ListMachinesResponse::default())
        }
        async fn get_volume_ids(
            &self,
            _: &GetVolumeIdsRequest,
        ) -> DriverResult<GetVolumeIdsResponse> {
            Ok(GetVolumeIdsResponse::default())
        }
    }

    fn class(name: &str, tags: serde_json::Value) -> MachineClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": name}, "providerSpec": {"tags": tags}
        }))
        .expect("class")
    }

    #[tokio::test]
    async fn a_driver_without_update_machine_answers_unimplemented_and_claims_nothing_in_place() {
        let f = Fixture {
            class: class("a", serde_json::json!({"x": "1"})),
            other_class: class("b", serde_json::json!({"x": "2"})),
            secret: Default::default(),
            new_machine: Box::new(|_| {
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
                    "metadata": {"name": "m", "namespace": "ns", "uid": "u"},
                    "spec": {"class": {"name": "a"}}
                }))
                .expect("machine")
            }),
            invalid_classes: Vec::new(),
        };
        assert_eq!(
            update_unimplemented_claims_nothing_in_place(&Minimal, &f).await,
            Ok(())
        );
    }
}
