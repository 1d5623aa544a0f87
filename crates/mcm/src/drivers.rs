//! The compiled-in drivers and their flags. Each provider crate sits behind a
//! cargo feature of the same name, so a build without it does not compile its SDK.
//! The MachineClass's `provider` field (lower-cased) selects the driver.

use clap::Args;
use mcm_runtime::DriverRegistry;
use std::sync::Arc;

/// Flags of the compiled-in providers.
#[derive(Args, Debug, Clone)]
pub struct ProviderArgs {
    /// URL of the local cloud (the `local` provider).
    #[arg(
        long,
        env = "MCM_LOCAL_CLOUD_URL",
        default_value = "http://127.0.0.1:7070"
    )]
    pub local_cloud_url: String,
    /// EC2 endpoint override (moto, EC2-compatible clouds).
    #[arg(long, env = "MCM_AWS_ENDPOINT")]
    pub aws_endpoint: Option<String>,
    /// Compute Engine endpoint override (the in-repo fake); default: Google's.
    #[arg(long, env = "MCM_GCP_ENDPOINT")]
    pub gcp_endpoint: Option<String>,
    /// ECS endpoint override (the Alibaba Cloud fake); default: the region's endpoint.
    #[arg(long, env = "MCM_ALICLOUD_ENDPOINT")]
    pub alicloud_endpoint: Option<String>,
}

/// The registry of every compiled-in driver.
pub fn registry(args: &ProviderArgs) -> anyhow::Result<DriverRegistry> {
    let mut reg = DriverRegistry::new();
    reg.register(
        "local",
        Arc::new(mcm_provider_local::LocalDriver::new(&args.local_cloud_url)?),
    );
    #[cfg(feature = "aws")]
    {
        let config = mcm_provider_aws::AwsDriverConfig {
            endpoint_url: args.aws_endpoint.clone(),
            ..Default::default()
        };
        reg.register("aws", Arc::new(mcm_provider_aws::AwsDriver::new(config)));
    }
    #[cfg(feature = "gcp")]
    {
        let config = mcm_provider_gcp::GcpDriverConfig {
            endpoint: args.gcp_endpoint.clone(),
            ..Default::default()
        };
        reg.register("gcp", Arc::new(mcm_provider_gcp::GcpDriver::new(config)));
    }
    #[cfg(feature = "alicloud")]
    {
        let config = mcm_provider_alicloud::AlicloudDriverConfig {
            endpoint_url: args.alicloud_endpoint.clone(),
            ..Default::default()
        };
        reg.register(
            "alicloud",
            Arc::new(mcm_provider_alicloud::AlicloudDriver::new(config)),
        );
    }
    Ok(reg)
}
