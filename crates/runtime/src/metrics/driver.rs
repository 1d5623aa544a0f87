//! The driver series (`mcm_cloud_api_driver_request_duration_seconds{provider,
//! operation}`, `mcm_cloud_api_driver_requests_failed_total{provider,
//! operation, error_code}`), written around every driver call as the
//! reference's providers write them: a successful call is timed, a failed
//! one counted with its numeric code.
//!
//! The controllers write them through [`Observed`], a driver that wraps the
//! provider's (`Context::observed_driver`), so every call is counted in one
//! place: the machine reconciler's, the GetVolumeIDs calls of its drains and
//! the orphan collector's.
//!
//! [`Observed`] is also where the leader's tenure is enforced: every mutating
//! call (CreateMachine, InitializeMachine, UpdateMachine, DeleteMachine, and any mutating
//! operation the Driver trait gains) checks the half's
//! [`TenureGate`](crate::leader::TenureGate) first and is refused, without
//! reaching the provider, once the tenure ended (design:
//! docs/design/leader-election.md, "One tenure deadline").

use super::{error_code_label, operation_label, provider_label, DriverErrorLabels, DriverLabels};
use crate::leader::TenureGate;
use async_trait::async_trait;
use mcm_driver::budget::BucketLimit;
use mcm_driver::{
    CloudOp, CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest,
    DeleteMachineResponse, Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse,
    GetVolumeIdsRequest, GetVolumeIdsResponse, InPlaceChanges, InitializeMachineRequest,
    InitializeMachineResponse, ListMachinesRequest, ListMachinesResponse, MachineRequest, Status,
    UpdateMachineRequest, UpdateMachineResponse,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tracing::warn;

/// Runs `call` (driver operation `op`, e.g. `CreateMachine`, of `provider`)
/// and writes its series in `metrics`.
async fn observe<T>(
    metrics: &super::Metrics,
    provider: &str,
    op: &str,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let start = Instant::now();
    let result = call.await;
    match &result {
        Ok(_) => metrics
            .driver_duration
            .get_or_create(&DriverLabels {
                provider: provider_label(provider),
                operation: operation_label(op),
            })
            .observe(start.elapsed().as_secs_f64()),
        Err(e) => {
            metrics
                .driver_failed
                .get_or_create(&DriverErrorLabels {
                    provider: provider_label(provider),
                    operation: operation_label(op),
                    error_code: error_code_label(e.code),
                })
                .inc();
        }
    }
    result
}

/// A provider's driver whose calls write the driver series under the
/// provider's name. Rate limits, scopes and spec warnings make no cloud call
/// and pass through unobserved.
pub(crate) struct Observed {
    inner: Arc<dyn Driver>,
    metrics: Arc<super::Metrics>,
    provider: String,
    tenure: TenureGate,
}

impl Observed {
    /// Wraps `inner`, the driver of `provider` (the MachineClass's
    /// `provider`), its mutating calls allowed only within `tenure`.
    pub(crate) fn wrap(
        inner: Arc<dyn Driver>,
        metrics: Arc<super::Metrics>,
        provider: &str,
        tenure: TenureGate,
    ) -> Arc<dyn Driver> {
        Arc::new(Observed {
            inner,
            metrics,
            provider: provider.to_string(),
            tenure,
        })
    }

    /// A mutating call: refused (not observed: no cloud call was made) once
    /// the tenure ended, else observed.
    async fn mutate<T>(
        &self,
        op: &str,
        f: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        if let Err(e) = self.tenure.check() {
            warn!(provider = %self.provider, operation = op, reason = %e, "cloud call refused: this replica no longer leads");
            return Err(e.into());
        }
        self.call(op, f).await
    }

    async fn call<T>(
        &self,
        op: &str,
        f: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        observe(&self.metrics, &self.provider, op, f).await
    }
}

#[async_trait]
impl Driver for Observed {
    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        self.mutate("CreateMachine", self.inner.create_machine(req))
            .await
    }

    async fn initialize_machine(
        &self,
        req: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        self.mutate("InitializeMachine", self.inner.initialize_machine(req))
            .await
    }

    /// A pure check, no cloud call: passed through unobserved.
    fn in_place_changes(
        &self,
        last_applied: &serde_json::Value,
        current: &serde_json::Value,
    ) -> InPlaceChanges {
        self.inner.in_place_changes(last_applied, current)
    }

    async fn update_machine(
        &self,
        req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        self.mutate("UpdateMachine", self.inner.update_machine(req))
            .await
    }

    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        self.mutate("DeleteMachine", self.inner.delete_machine(req))
            .await
    }

    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        self.call("GetMachineStatus", self.inner.get_machine_status(req))
            .await
    }

    async fn rate_limits(&self) -> Vec<(CloudOp, BucketLimit)> {
        self.inner.rate_limits().await
    }

    fn rate_limit_scope(&self, req: &MachineRequest) -> String {
        self.inner.rate_limit_scope(req)
    }

    fn cloud_api(&self) -> Option<mcm_driver::cloud_api::CloudApi> {
        self.inner.cloud_api()
    }

    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        self.call("ListMachines", self.inner.list_machines(req))
            .await
    }

    async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> DriverResult<GetVolumeIdsResponse> {
        self.call("GetVolumeIDs", self.inner.get_volume_ids(req))
            .await
    }

    fn provider_spec_warnings(&self, provider_spec: &serde_json::Value) -> Vec<String> {
        self.inner.provider_spec_warnings(provider_spec)
    }

    fn check_class(
        &self,
        class: &mcm_api::MachineClass,
        secret: &k8s_openapi::api::core::v1::Secret,
    ) -> mcm_driver::ClassCheck {
        self.inner.check_class(class, secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcm_driver::Code;
    use prometheus_client::registry::Registry;

    #[tokio::test]
    async fn successes_are_timed_and_failures_counted_with_their_code() {
        let mut registry = Registry::default();
        let m = super::super::Metrics::new(&mut registry);
        let ok: Result<(), Status> = observe(&m, "AWS", "ListMachines", async { Ok(()) }).await;
        assert!(ok.is_ok());
        let failed: Result<(), Status> = observe(&m, "AWS", "GetMachineStatus", async {
            Err(Status::new(Code::NotFound, "gone"))
        })
        .await;
        assert!(failed.is_err());
        let text = super::super::encode(&registry);
        assert!(text.contains(
            "mcm_cloud_api_driver_request_duration_seconds_count{provider=\"aws\",operation=\"list_machine\"} 1"
        ), "{text}");
        assert!(text.contains(
            "mcm_cloud_api_driver_requests_failed_total{provider=\"aws\",operation=\"get_machine_status\",error_code=\"5\"} 1"
        ), "{text}");
        assert!(
            !text.contains("mcm_cloud_api_driver_request_duration_seconds_count{provider=\"aws\",operation=\"get_machine_status\"}"),
            "a failed call is not timed: {text}"
        );
    }

    /// A driver that answers GetVolumeIDs and refuses creation.
    struct Stub;

    #[async_trait]
    impl Driver for Stub {
        async fn create_machine(
            &self,
            _: &CreateMachineRequest,
        ) -> DriverResult<CreateMachineResponse> {
            Err(Status::new(Code::ResourceExhausted, "no capacity"))
        }
        async fn delete_machine(
            &self,
            _: &DeleteMachineRequest,
        ) -> DriverResult<DeleteMachineResponse> {
            Err(Status::unimplemented("stub"))
        }
        async fn get_machine_status(
            &self,
            _: &GetMachineStatusRequest,
        ) -> DriverResult<GetMachineStatusResponse> {
            Err(Status::unimplemented("stub"))
        }
        async fn list_machines(
            &self,
            _: &ListMachinesRequest,
        ) -> DriverResult<ListMachinesResponse> {
            Err(Status::unimplemented("stub"))
        }
        async fn get_volume_ids(
            &self,
            _: &GetVolumeIdsRequest,
        ) -> DriverResult<GetVolumeIdsResponse> {
            Ok(GetVolumeIdsResponse {
                volume_ids: vec!["vol-1".into()],
            })
        }
        fn rate_limit_scope(&self, _: &MachineRequest) -> String {
            "eu-west-1/AKIA".into()
        }
    }

    #[tokio::test]
    async fn an_observed_driver_writes_the_series_of_every_call_including_a_drains_get_volume_ids()
    {
        let mut registry = Registry::default();
        let m = Arc::new(super::super::Metrics::new(&mut registry));
        let driver = Observed::wrap(Arc::new(Stub), m, "AWS", TenureGate::unbounded());
        let ids = driver
            .get_volume_ids(&GetVolumeIdsRequest::default())
            .await
            .map(|r| r.volume_ids);
        assert!(
            matches!(ids.as_deref(), Ok([id]) if id == "vol-1"),
            "answers pass through: {ids:?}"
        );
        let req = crate::pacing::tests::req();
        let created = driver.create_machine(&req).await;
        assert!(
            matches!(created, Err(ref e) if e.code == Code::ResourceExhausted),
            "{created:?}"
        );
        assert_eq!(
            driver.rate_limit_scope(&req),
            "eu-west-1/AKIA",
            "the scope passes through"
        );
        let text = super::super::encode(&registry);
        assert!(text.contains(
            "mcm_cloud_api_driver_request_duration_seconds_count{provider=\"aws\",operation=\"get_volume_ids\"} 1"
        ), "{text}");
        assert!(text.contains(
            "mcm_cloud_api_driver_requests_failed_total{provider=\"aws\",operation=\"create_machine\",error_code=\"8\"} 1"
        ), "{text}");
    }

    /// Counts the calls that reach it.
    #[derive(Default)]
    struct Counting {
        calls: std::sync::atomic::AtomicUsize,
    }

    impl Counting {
        fn calls(&self) -> usize {
            self.calls.load(std::sync::atomic::Ordering::SeqCst)
        }
        fn hit<T: Default>(&self) -> DriverResult<T> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(T::default())
        }
    }

    #[async_trait]
    impl Driver for Counting {
        async fn create_machine(
            &self,
            _: &CreateMachineRequest,
        ) -> DriverResult<CreateMachineResponse> {
            self.hit()
        }
        async fn initialize_machine(
            &self,
            _: &InitializeMachineRequest,
        ) -> DriverResult<InitializeMachineResponse> {
            self.hit()
        }
        async fn delete_machine(
            &self,
            _: &DeleteMachineRequest,
        ) -> DriverResult<DeleteMachineResponse> {
            self.hit()
        }
        async fn get_machine_status(
            &self,
            _: &GetMachineStatusRequest,
        ) -> DriverResult<GetMachineStatusResponse> {
            self.hit()
        }
        async fn list_machines(
            &self,
            _: &ListMachinesRequest,
        ) -> DriverResult<ListMachinesResponse> {
            self.hit()
        }
        async fn get_volume_ids(
            &self,
            _: &GetVolumeIdsRequest,
        ) -> DriverResult<GetVolumeIdsResponse> {
            self.hit()
        }
        fn rate_limit_scope(&self, _: &MachineRequest) -> String {
            String::new()
        }
        fn in_place_changes(&self, _: &serde_json::Value, _: &serde_json::Value) -> InPlaceChanges {
            InPlaceChanges {
                in_place: vec!["tags.a".into()],
                need_replacement: Vec::new(),
            }
        }
        async fn update_machine(
            &self,
            _: &UpdateMachineRequest,
        ) -> DriverResult<UpdateMachineResponse> {
            self.hit()
        }
    }

    fn update_req() -> UpdateMachineRequest {
        let req = crate::pacing::tests::req();
        UpdateMachineRequest {
            machine: req.machine,
            machine_class: req.machine_class,
            secret: req.secret,
            last_applied_provider_spec: serde_json::json!({}),
        }
    }

    #[tokio::test]
    async fn the_hot_update_calls_reach_the_provider_through_the_wrapper_and_are_observed() {
        let mut registry = Registry::default();
        let m = Arc::new(super::super::Metrics::new(&mut registry));
        let inner = Arc::new(Counting::default());
        let driver = Observed::wrap(inner.clone(), m, "AWS", TenureGate::unbounded());
        let changes = driver.in_place_changes(&serde_json::json!({}), &serde_json::json!({}));
        assert_eq!(
            changes.in_place,
            vec!["tags.a".to_string()],
            "the provider's answer, not the trait's default"
        );
        assert!(
            driver.update_machine(&update_req()).await.is_ok(),
            "the provider's UpdateMachine, not the default Unimplemented"
        );
        assert_eq!(inner.calls(), 1);
        let text = super::super::encode(&registry);
        assert!(text.contains(
            "mcm_cloud_api_driver_request_duration_seconds_count{provider=\"aws\",operation=\"update_machine\"} 1"
        ), "{text}");
    }

    #[tokio::test]
    async fn mutating_calls_after_the_tenure_deadline_are_refused_without_reaching_the_driver() {
        let mut registry = Registry::default();
        let m = Arc::new(super::super::Metrics::new(&mut registry));
        let inner = Arc::new(Counting::default());
        let gate = TenureGate::closed();
        gate.extend_to(Instant::now() + std::time::Duration::from_secs(60));
        let driver = Observed::wrap(inner.clone(), m, "AWS", gate.clone());
        let req = crate::pacing::tests::req();
        assert!(
            driver.create_machine(&req).await.is_ok(),
            "within the tenure"
        );
        assert_eq!(inner.calls(), 1);

        // The deadline passed (a paused leader resumed): refused, not sent.
        let past = TenureGate::closed();
        past.extend_to(Instant::now());
        let driver = Observed::wrap(
            inner.clone(),
            Arc::new(super::super::Metrics::new(&mut Registry::default())),
            "AWS",
            past,
        );
        for (op, r) in [
            ("create", driver.create_machine(&req).await.map(|_| ())),
            (
                "initialize",
                driver.initialize_machine(&req).await.map(|_| ()),
            ),
            ("delete", driver.delete_machine(&req).await.map(|_| ())),
            (
                "update",
                driver.update_machine(&update_req()).await.map(|_| ()),
            ),
        ] {
            let e = r.expect_err(op);
            assert_eq!(e.code, Code::Unavailable, "{op}: {e}");
            assert!(e.message.contains("tenure ended"), "{op}: {e}");
        }
        assert_eq!(inner.calls(), 1, "no refused call reached the driver");
        // Reads are not gated.
        assert!(driver.get_machine_status(&req).await.is_ok());
        assert_eq!(inner.calls(), 2);

        // Leadership lost: closed, refused too.
        gate.close();
        let driver = Observed::wrap(
            inner.clone(),
            Arc::new(super::super::Metrics::new(&mut Registry::default())),
            "AWS",
            gate,
        );
        assert!(driver.create_machine(&req).await.is_err());
        assert_eq!(inner.calls(), 2);
    }
}
