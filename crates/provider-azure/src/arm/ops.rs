//! The ARM calls of the driver (the reference provider's set, plus a plain
//! list of VMs, NICs and disks as the fallback of Resource Graph).

use super::models::*;
use super::{
    ArmClient, ArmError, OpClass, COMPUTE_API, DISK_API, MARKETPLACE_API, NETWORK_API,
    RESOURCES_API, RESOURCE_GRAPH_API,
};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

fn to_json<T: Serialize>(v: &T, operation: &str) -> Result<Value, ArmError> {
    serde_json::to_value(v).map_err(|e| ArmError::Transport {
        operation: operation.to_string(),
        message: format!("encoding the request: {e}"),
    })
}

fn terminal(state: Option<&str>) -> bool {
    !matches!(
        state,
        Some("Creating" | "Updating" | "Deleting" | "Accepted" | "Running" | "InProgress")
    )
}

impl ArmClient {
    fn rg_path(rg: &str, provider: &str, name: &str) -> String {
        format!("/resourceGroups/{rg}/providers/{provider}/{name}")
    }

    /// GET; `None` on 404.
    async fn get_opt<T: DeserializeOwned>(
        &self,
        url: &str,
        operation: &str,
    ) -> Result<Option<T>, ArmError> {
        let a = self
            .call(OpClass::Read, Method::GET, url, None, operation)
            .await?;
        match a.status {
            404 => Ok(None),
            s if (200..300).contains(&s) => a.json(operation).map(Some),
            _ => Err(a.error(operation)),
        }
    }

    /// PUT (long-running), then the resource once its provisioning state is terminal.
    async fn put_resource<T: DeserializeOwned>(
        &self,
        url: &str,
        body: &Value,
        operation: &str,
        timeout: Duration,
        state: impl Fn(&T) -> Option<String>,
    ) -> Result<T, ArmError> {
        self.long_running(
            OpClass::Write,
            Method::PUT,
            url,
            Some(body),
            operation,
            timeout,
        )
        .await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let r: T = self
                .get_opt(url, operation)
                .await?
                .ok_or_else(|| ArmError::Transport {
                    operation: operation.to_string(),
                    message: "the resource is gone after a successful PUT".into(),
                })?;
            match state(&r).as_deref() {
                Some("Failed" | "Canceled") => {
                    return Err(ArmError::Api {
                        operation: operation.to_string(),
                        status: 200,
                        code: "ProvisioningFailed".into(),
                        message: "the resource's provisioningState is Failed".into(),
                        request_id: None,
                    })
                }
                s if terminal(s) => return Ok(r),
                _ => {
                    self.sleep_until(self.settings.poll_interval, deadline, operation, timeout)
                        .await?
                }
            }
        }
    }

    /// DELETE (long-running); `false` when it did not exist.
    async fn delete_resource(
        &self,
        url: &str,
        operation: &str,
        timeout: Duration,
    ) -> Result<bool, ArmError> {
        match self
            .long_running(
                OpClass::Delete,
                Method::DELETE,
                url,
                None,
                operation,
                timeout,
            )
            .await
        {
            Ok(a) => Ok(a.status != 204),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `HEAD /resourcegroups/{rg}`: 204 exists, 404 does not.
    pub async fn resource_group_exists(&self, rg: &str) -> Result<bool, ArmError> {
        let op = format!("HEAD resourcegroups/{rg}");
        let url = self.sub_url(&format!("/resourcegroups/{rg}"), RESOURCES_API);
        let a = self
            .call(OpClass::Read, Method::HEAD, &url, None, &op)
            .await?;
        match a.status {
            404 => Ok(false),
            s if (200..300).contains(&s) => Ok(true),
            _ => Err(a.error(&op)),
        }
    }

    fn vm_url(&self, rg: &str, name: &str) -> String {
        self.sub_url(
            &Self::rg_path(rg, "Microsoft.Compute/virtualMachines", name),
            COMPUTE_API,
        )
    }

    /// The VM, `None` when it does not exist.
    pub async fn get_vm(&self, rg: &str, name: &str) -> Result<Option<VirtualMachine>, ArmError> {
        self.get_opt(
            &self.vm_url(rg, name),
            &format!("GET virtualMachines/{name}"),
        )
        .await
    }

    /// Creates or updates a VM and waits until it is provisioned.
    pub async fn put_vm(
        &self,
        rg: &str,
        name: &str,
        vm: &VirtualMachine,
    ) -> Result<VirtualMachine, ArmError> {
        let op = format!("PUT virtualMachines/{name}");
        let body = to_json(vm, &op)?;
        self.put_resource(
            &self.vm_url(rg, name),
            &body,
            &op,
            self.settings.vm_timeout,
            |v: &VirtualMachine| v.provisioning_state().map(str::to_string),
        )
        .await
    }

    /// Patches a VM (the delete options, or only `tags`, which replaces
    /// them all) and waits.
    pub async fn patch_vm(&self, rg: &str, name: &str, patch: &Value) -> Result<(), ArmError> {
        let op = format!("PATCH virtualMachines/{name}");
        self.long_running(
            OpClass::Write,
            Method::PATCH,
            &self.vm_url(rg, name),
            Some(patch),
            &op,
            self.settings.vm_timeout,
        )
        .await
        .map(|_| ())
    }

    /// Deletes a VM (with the NIC and disks whose delete option is `Delete`) and waits.
    pub async fn delete_vm(&self, rg: &str, name: &str) -> Result<bool, ArmError> {
        let op = format!("DELETE virtualMachines/{name}");
        self.delete_resource(&self.vm_url(rg, name), &op, self.settings.vm_timeout)
            .await
    }

    fn nic_url(&self, rg: &str, name: &str) -> String {
        self.sub_url(
            &Self::rg_path(rg, "Microsoft.Network/networkInterfaces", name),
            NETWORK_API,
        )
    }

    /// The NIC, `None` when it does not exist.
    pub async fn get_nic(
        &self,
        rg: &str,
        name: &str,
    ) -> Result<Option<NetworkInterface>, ArmError> {
        self.get_opt(
            &self.nic_url(rg, name),
            &format!("GET networkInterfaces/{name}"),
        )
        .await
    }

    /// Creates a NIC and waits.
    pub async fn put_nic(
        &self,
        rg: &str,
        name: &str,
        nic: &NetworkInterface,
    ) -> Result<NetworkInterface, ArmError> {
        let op = format!("PUT networkInterfaces/{name}");
        let body = to_json(nic, &op)?;
        self.put_resource(
            &self.nic_url(rg, name),
            &body,
            &op,
            self.settings.nic_disk_timeout,
            |n: &NetworkInterface| n.properties.provisioning_state.clone(),
        )
        .await
    }

    /// Replaces a NIC's tags (`NetworkInterfaces_UpdateTags`, a PATCH with
    /// a `TagsObject`).
    pub async fn patch_nic_tags(
        &self,
        rg: &str,
        name: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), ArmError> {
        let op = format!("PATCH networkInterfaces/{name}");
        self.long_running(
            OpClass::Write,
            Method::PATCH,
            &self.nic_url(rg, name),
            Some(&serde_json::json!({ "tags": tags })),
            &op,
            self.settings.nic_disk_timeout,
        )
        .await
        .map(|_| ())
    }

    /// Deletes a NIC (gone = `false`) and waits.
    pub async fn delete_nic(&self, rg: &str, name: &str) -> Result<bool, ArmError> {
        let op = format!("DELETE networkInterfaces/{name}");
        self.delete_resource(&self.nic_url(rg, name), &op, self.settings.nic_disk_timeout)
            .await
    }

    /// A subnet, `None` when it does not exist.
    pub async fn get_subnet(
        &self,
        rg: &str,
        vnet: &str,
        subnet: &str,
    ) -> Result<Option<Subnet>, ArmError> {
        let url = self.sub_url(
            &format!("/resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/{vnet}/subnets/{subnet}"),
            NETWORK_API,
        );
        self.get_opt(&url, &format!("GET subnets/{vnet}/{subnet}"))
            .await
    }

    fn disk_url(&self, rg: &str, name: &str) -> String {
        self.sub_url(
            &Self::rg_path(rg, "Microsoft.Compute/disks", name),
            DISK_API,
        )
    }

    /// Creates a managed disk and waits.
    pub async fn put_disk(&self, rg: &str, name: &str, disk: &Disk) -> Result<Disk, ArmError> {
        let op = format!("PUT disks/{name}");
        let body = to_json(disk, &op)?;
        self.put_resource(
            &self.disk_url(rg, name),
            &body,
            &op,
            self.settings.nic_disk_timeout,
            |d: &Disk| d.properties.provisioning_state.clone(),
        )
        .await
    }

    /// The managed disk, `None` when it does not exist.
    pub async fn get_disk(&self, rg: &str, name: &str) -> Result<Option<Disk>, ArmError> {
        self.get_opt(&self.disk_url(rg, name), &format!("GET disks/{name}"))
            .await
    }

    /// Replaces a managed disk's tags (`Disks_Update`, a PATCH with only
    /// `tags`) and waits.
    pub async fn patch_disk_tags(
        &self,
        rg: &str,
        name: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), ArmError> {
        let op = format!("PATCH disks/{name}");
        self.long_running(
            OpClass::Write,
            Method::PATCH,
            &self.disk_url(rg, name),
            Some(&serde_json::json!({ "tags": tags })),
            &op,
            self.settings.nic_disk_timeout,
        )
        .await
        .map(|_| ())
    }

    /// Deletes a managed disk (gone = `false`) and waits.
    pub async fn delete_disk(&self, rg: &str, name: &str) -> Result<bool, ArmError> {
        let op = format!("DELETE disks/{name}");
        self.delete_resource(
            &self.disk_url(rg, name),
            &op,
            self.settings.nic_disk_timeout,
        )
        .await
    }

    /// A marketplace image version, `None` when it does not exist.
    pub async fn get_vm_image(
        &self,
        location: &str,
        publisher: &str,
        offer: &str,
        sku: &str,
        version: &str,
    ) -> Result<Option<VmImage>, ArmError> {
        let url = self.sub_url(
            &format!("/providers/Microsoft.Compute/locations/{location}/publishers/{publisher}/artifacttypes/vmimage/offers/{offer}/skus/{sku}/versions/{version}"),
            COMPUTE_API,
        );
        self.get_opt(
            &url,
            &format!("GET vmimage {publisher}:{offer}:{sku}:{version}"),
        )
        .await
    }

    fn agreement_url(&self, publisher: &str, offer: &str, plan: &str) -> String {
        self.sub_url(
            &format!("/providers/Microsoft.MarketplaceOrdering/offerTypes/virtualmachine/publishers/{publisher}/offers/{offer}/plans/{plan}/agreements/current"),
            MARKETPLACE_API,
        )
    }

    /// The marketplace terms of a plan, `None` when there are none.
    pub async fn get_agreement(
        &self,
        publisher: &str,
        offer: &str,
        plan: &str,
    ) -> Result<Option<Value>, ArmError> {
        self.get_opt(
            &self.agreement_url(publisher, offer, plan),
            &format!("GET agreements {publisher}/{offer}/{plan}"),
        )
        .await
    }

    /// Accepts the marketplace terms of a plan.
    pub async fn put_agreement(
        &self,
        publisher: &str,
        offer: &str,
        plan: &str,
        agreement: &Value,
    ) -> Result<(), ArmError> {
        let op = format!("PUT agreements {publisher}/{offer}/{plan}");
        self.call_ok(
            OpClass::Write,
            Method::PUT,
            &self.agreement_url(publisher, offer, plan),
            Some(agreement),
            &op,
        )
        .await
        .map(|_| ())
    }

    /// A Resource Graph query over this subscription, all pages.
    pub async fn query_resources(&self, query: &str) -> Result<Vec<Value>, ArmError> {
        let op = "POST Microsoft.ResourceGraph/resources";
        let url = format!(
            "{}/providers/Microsoft.ResourceGraph/resources?api-version={RESOURCE_GRAPH_API}",
            self.base
        );
        let mut rows = Vec::new();
        let mut skip_token = None;
        loop {
            let req = QueryRequest {
                subscriptions: vec![self.subscription.clone()],
                query: query.to_string(),
                options: QueryOptions {
                    skip_token: skip_token.take(),
                    result_format: "objectArray".into(),
                },
            };
            let body = to_json(&req, op)?;
            let a = self
                .call_ok(OpClass::ResourceGraph, Method::POST, &url, Some(&body), op)
                .await?;
            let page: QueryResponse = a.json(op)?;
            rows.extend(page.data);
            match page.skip_token {
                Some(t) if !t.is_empty() => skip_token = Some(t),
                _ => return Ok(rows),
            }
        }
    }

    /// Every resource of a type in a resource group (all pages), with its tags.
    pub async fn list_tagged(
        &self,
        rg: &str,
        provider_type: &str,
        api: &str,
    ) -> Result<Vec<TaggedResource>, ArmError> {
        let op = format!("GET {provider_type} (list)");
        let mut url = self.sub_url(
            &format!("/resourceGroups/{rg}/providers/{provider_type}"),
            api,
        );
        let mut out = Vec::new();
        loop {
            let a = self
                .call_ok(OpClass::Read, Method::GET, &url, None, &op)
                .await?;
            let page: ListPage<TaggedResource> = a.json(&op)?;
            out.extend(page.value);
            match page.next_link {
                Some(next) if !next.is_empty() => {
                    self.check_poll_url(&next, &op)?;
                    url = next;
                }
                _ => return Ok(out),
            }
        }
    }
}
