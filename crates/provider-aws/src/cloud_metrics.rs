//! The reference's cloud API series for EC2: an SDK interceptor that every
//! client of the driver carries reports each finished call (after the SDK's
//! retries) to the driver's [`mcm_driver::cloud_api::CloudApi`], with provider `aws` and the
//! reference's service label for the call (see [`service_label`]).

use aws_sdk_ec2::config::interceptors::{
    BeforeSerializationInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::BoxError;
use aws_sdk_ec2::operation::describe_instances::DescribeInstancesInput;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use std::time::Instant;

/// The reference's `provider` label.
pub const PROVIDER: &str = "aws";

/// The interceptor; add it to every EC2 client.
#[derive(Clone, Debug, Default)]
pub struct CloudApiMetrics {
    /// Where the calls are reported (the driver's handle).
    pub api: mcm_driver::cloud_api::CloudApi,
}

/// When the call started, and whether it is a DescribeInstances by IDs.
#[derive(Clone, Debug)]
struct Started(Instant, bool);

impl Storable for Started {
    type Storer = StoreReplace<Self>;
}

/// The reference's service label of an EC2 action (its helpers'
/// `instance_*` labels where one covers the action, the action in snake case
/// otherwise). `by_ids`: a DescribeInstances by instance IDs.
pub fn service_label(action: &str, by_ids: bool) -> String {
    match action {
        "DescribeInstances" if by_ids => "instance_get_by_id".into(),
        "DescribeInstances" => "instance_get_by_tag_and_status".into(),
        "TerminateInstances" => "instance_terminate".into(),
        "ModifyNetworkInterfaceAttribute" => "instance_disable_source_dest_check".into(),
        other => mcm_driver::cloud_api::snake_case(other),
    }
}

impl Intercept for CloudApiMetrics {
    fn name(&self) -> &'static str {
        "McmCloudApiMetrics"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // The operation's Metadata is not in the bag yet: named at the end.
        let by_ids = context
            .input()
            .downcast_ref::<DescribeInstancesInput>()
            .is_some_and(|i| !i.instance_ids().is_empty());
        cfg.interceptor_state()
            .store_put(Started(Instant::now(), by_ids));
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Started(start, by_ids)) = cfg.load::<Started>() {
            let action = cfg.load::<Metadata>().map_or("unknown", |m| m.name());
            let ok = matches!(context.output_or_error(), Some(Ok(_)));
            let service = service_label(action, *by_ids);
            self.api.record(PROVIDER, &service, start.elapsed(), ok);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_get_the_references_service_labels() {
        assert_eq!(
            service_label("DescribeInstances", true),
            "instance_get_by_id"
        );
        assert_eq!(
            service_label("DescribeInstances", false),
            "instance_get_by_tag_and_status"
        );
        assert_eq!(
            service_label("TerminateInstances", false),
            "instance_terminate"
        );
        assert_eq!(service_label("RunInstances", false), "run_instances");
    }
}
