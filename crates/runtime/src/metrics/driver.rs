//! The driver series (`mcm_cloud_api_driver_request_duration_seconds{provider,
//! operation}`, `mcm_cloud_api_driver_requests_failed_total{provider,
//! operation, error_code}`), written around every driver call as the
//! reference's providers write them: a successful call is timed, a failed
//! one counted with its numeric code.

use super::{error_code_label, operation_label, provider_label, DriverErrorLabels, DriverLabels};
use mcm_driver::Status;
use std::future::Future;
use std::time::Instant;

/// Runs `call` (driver operation `op`, e.g. `CreateMachine`, of `provider`)
/// and writes its series in `metrics`.
pub async fn observe<T>(
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
}
