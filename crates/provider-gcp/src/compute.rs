//! The Compute calls of the driver on the official client: each call takes a
//! token of its rate-quota group from the project's budget, is counted, and
//! pauses its group and tries again when Compute throttles it.

use crate::config::{GcpDriverConfig, OpClass};
use crate::errors::GceError;
use google_cloud_compute_v1::client::{Disks, Instances, ZoneOperations};
use google_cloud_compute_v1::model::{
    operation, DisksResizeRequest, Instance, InstancesSetLabelsRequest, Metadata, Operation, Tags,
};
use mcm_driver::budget::Limiter;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;
use tracing::{debug, warn};

/// Compute calls by method (`instances.insert`, …), counted per call.
#[derive(Clone, Debug, Default)]
pub struct ApiCallRecorder {
    calls: Arc<Mutex<BTreeMap<&'static str, u64>>>,
}

impl ApiCallRecorder {
    fn bump(&self, method: &'static str) {
        if let Ok(mut c) = self.calls.lock() {
            *c.entry(method).or_default() += 1;
        }
    }

    /// The counts so far.
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

/// The reference's `service` label of a Compute method (its
/// `instance_*`/`operations_get` labels; the method otherwise).
pub fn service_label(method: &str) -> &str {
    match method {
        "instances.insert" => "instance_create",
        "instances.delete" => "instance_delete",
        "instances.list" => "instance_list",
        "instances.get" => "instance_get",
        "zoneOperations.get" => "operations_get",
        other => other,
    }
}

/// The Compute clients of one set of credentials.
#[derive(Clone, Debug)]
pub struct Clients {
    /// `instances.*`
    pub instances: Instances,
    /// `zoneOperations.*`
    pub operations: ZoneOperations,
    /// `disks.*`
    pub disks: Disks,
}

/// The clients of one set of credentials, and the budget of their project.
#[derive(Clone)]
pub struct Compute {
    instances: Instances,
    operations: ZoneOperations,
    disks: Disks,
    limiter: Arc<Limiter<OpClass>>,
    calls: ApiCallRecorder,
    config: Arc<GcpDriverConfig>,
    cloud_api: mcm_driver::cloud_api::CloudApi,
}

impl Compute {
    /// Wraps clients built for one set of credentials.
    pub fn new(
        clients: Clients,
        limiter: Arc<Limiter<OpClass>>,
        calls: ApiCallRecorder,
        config: Arc<GcpDriverConfig>,
    ) -> Self {
        Compute {
            instances: clients.instances,
            operations: clients.operations,
            disks: clients.disks,
            limiter,
            calls,
            config,
            cloud_api: Default::default(),
        }
    }

    /// Reports every call to `api` (the driver's handle).
    pub fn with_cloud_api(mut self, api: mcm_driver::cloud_api::CloudApi) -> Self {
        self.cloud_api = api;
        self
    }

    async fn call<T, F, Fut>(
        &self,
        method: &'static str,
        class: OpClass,
        f: F,
    ) -> Result<T, GceError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = google_cloud_compute_v1::Result<T>>,
    {
        let mut tries = 0u32;
        loop {
            let waited = self.limiter.acquire(class).await;
            if !waited.is_zero() {
                debug!(
                    method,
                    waited_ms = waited.as_millis() as u64,
                    "waited for the API budget"
                );
            }
            self.calls.bump(method);
            match self
                .cloud_api
                .observe("gcp", service_label(method), f())
                .await
            {
                Ok(v) => {
                    self.limiter.succeeded(class).await;
                    return Ok(v);
                }
                Err(e) => {
                    let err = GceError::from_client(method, &e);
                    if err.is_throttling() && tries < self.config.throttle_retries {
                        tries += 1;
                        let pause = self
                            .limiter
                            .penalize(
                                class,
                                self.config.throttle_pause,
                                self.config.throttle_max_pause,
                            )
                            .await;
                        warn!(
                            method,
                            pause_ms = pause.as_millis() as u64,
                            "Compute throttled the call; pausing its quota group"
                        );
                        continue;
                    }
                    return Err(err);
                }
            }
        }
    }

    /// `instances.insert`: the started operation.
    pub async fn insert(
        &self,
        project: &str,
        zone: &str,
        instance: &Instance,
    ) -> Result<Operation, GceError> {
        self.call("instances.insert", OpClass::Mutation, || {
            self.instances
                .insert()
                .set_project(project)
                .set_zone(zone)
                .set_body(instance.clone())
                .send()
        })
        .await
    }

    /// `instances.get`: `None` for 404.
    pub async fn get(
        &self,
        project: &str,
        zone: &str,
        name: &str,
    ) -> Result<Option<Instance>, GceError> {
        let r = self
            .call("instances.get", OpClass::Read, || {
                self.instances
                    .get()
                    .set_project(project)
                    .set_zone(zone)
                    .set_instance(name)
                    .send()
            })
            .await;
        match r {
            Ok(i) => Ok(Some(i)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `instances.list`, every page.
    pub async fn list(&self, project: &str, zone: &str) -> Result<Vec<Instance>, GceError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .call("instances.list", OpClass::List, || {
                    let mut b = self
                        .instances
                        .list()
                        .set_project(project)
                        .set_zone(zone)
                        .set_max_results(self.config.list_page_size.max(1));
                    if let Some(t) = &token {
                        b = b.set_page_token(t.clone());
                    }
                    b.send()
                })
                .await?;
            out.extend(page.items);
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// `instances.delete`: the started operation, `None` for 404.
    pub async fn delete(
        &self,
        project: &str,
        zone: &str,
        name: &str,
    ) -> Result<Option<Operation>, GceError> {
        let r = self
            .call("instances.delete", OpClass::Mutation, || {
                self.instances
                    .delete()
                    .set_project(project)
                    .set_zone(zone)
                    .set_instance(name)
                    .send()
            })
            .await;
        match r {
            Ok(op) => Ok(Some(op)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `instances.setLabels`: replaces the instance's labels; `fingerprint`
    /// is its current `labelFingerprint` (Compute answers 412 when stale).
    pub async fn set_labels(
        &self,
        project: &str,
        zone: &str,
        name: &str,
        body: InstancesSetLabelsRequest,
    ) -> Result<Operation, GceError> {
        self.call("instances.setLabels", OpClass::Mutation, || {
            self.instances
                .set_labels()
                .set_project(project)
                .set_zone(zone)
                .set_instance(name)
                .set_body(body.clone())
                .send()
        })
        .await
    }

    /// `instances.setTags`: replaces the network tags (with their fingerprint).
    pub async fn set_tags(
        &self,
        project: &str,
        zone: &str,
        name: &str,
        body: Tags,
    ) -> Result<Operation, GceError> {
        self.call("instances.setTags", OpClass::Mutation, || {
            self.instances
                .set_tags()
                .set_project(project)
                .set_zone(zone)
                .set_instance(name)
                .set_body(body.clone())
                .send()
        })
        .await
    }

    /// `instances.setMetadata`: replaces every metadata item (with the
    /// metadata fingerprint).
    pub async fn set_metadata(
        &self,
        project: &str,
        zone: &str,
        name: &str,
        body: Metadata,
    ) -> Result<Operation, GceError> {
        self.call("instances.setMetadata", OpClass::Mutation, || {
            self.instances
                .set_metadata()
                .set_project(project)
                .set_zone(zone)
                .set_instance(name)
                .set_body(body.clone())
                .send()
        })
        .await
    }

    /// `disks.resize`: grows a zonal persistent disk to `size_gb`.
    pub async fn resize_disk(
        &self,
        project: &str,
        zone: &str,
        disk: &str,
        size_gb: i64,
    ) -> Result<Operation, GceError> {
        self.call("disks.resize", OpClass::Mutation, || {
            self.disks
                .resize()
                .set_project(project)
                .set_zone(zone)
                .set_disk(disk)
                .set_body(DisksResizeRequest::new().set_size_gb(size_gb))
                .send()
        })
        .await
    }

    /// Polls a zone operation (`zoneOperations.get`) until it is `DONE`;
    /// `Err` when it ended with errors or took longer than the configured timeout.
    pub async fn wait(
        &self,
        method: &'static str,
        project: &str,
        zone: &str,
        op: Operation,
    ) -> Result<(), GceError> {
        let name = op.name.clone().unwrap_or_default();
        let started = Instant::now();
        let mut op = op;
        let mut step = 0u32;
        loop {
            if op.status == Some(operation::Status::Done) {
                return done(method, &name, &op);
            }
            if started.elapsed() >= self.config.operation_timeout {
                return Err(GceError::Timeout {
                    method,
                    operation: name,
                    after: started.elapsed(),
                });
            }
            tokio::time::sleep(self.config.operation_poll.delay(step)).await;
            step += 1;
            op = self
                .call("zoneOperations.get", OpClass::OperationRead, || {
                    self.operations
                        .get()
                        .set_project(project)
                        .set_zone(zone)
                        .set_operation(name.clone())
                        .send()
                })
                .await?;
            debug!(operation = %name, status = ?op.status, "polled operation");
        }
    }
}

/// The outcome of a DONE operation: its errors, the last one's code.
fn done(method: &'static str, name: &str, op: &Operation) -> Result<(), GceError> {
    let errors = op
        .error
        .as_ref()
        .map(|e| e.errors.as_slice())
        .unwrap_or_default();
    let Some(last) = errors.last() else {
        return Ok(());
    };
    let message = errors
        .iter()
        .filter_map(|e| e.message.clone())
        .collect::<Vec<_>>()
        .join("; ");
    Err(GceError::Operation {
        method,
        operation: name.to_string(),
        code: last.code.clone().unwrap_or_default(),
        message,
    })
}
