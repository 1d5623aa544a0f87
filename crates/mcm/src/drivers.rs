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
    /// Azure Resource Manager and token endpoint override (the in-repo ARM fake);
    /// default: the cloud each MachineClass names.
    #[arg(long, env = "MCM_AZURE_ENDPOINT")]
    pub azure_endpoint: Option<String>,
}

/// Process-wide set-up that the compiled-in drivers need before any client
/// is built: openstack_sdk compiles rustls' aws-lc-rs backend in next to the
/// ring backend of kube, so rustls can no longer pick a default provider by
/// itself and the first Kubernetes client would panic.
pub fn init_process() {
    #[cfg(feature = "openstack")]
    mcm_provider_openstack::install_crypto_provider();
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
    #[cfg(feature = "azure")]
    {
        let config = mcm_provider_azure::AzureDriverConfig {
            endpoint: args.azure_endpoint.clone(),
            ..Default::default()
        };
        reg.register(
            "azure",
            Arc::new(mcm_provider_azure::AzureDriver::new(config)),
        );
    }
    #[cfg(feature = "gcp")]
    {
        let config = mcm_provider_gcp::GcpDriverConfig {
            endpoint: args.gcp_endpoint.clone(),
            ..Default::default()
        };
        reg.register("gcp", Arc::new(mcm_provider_gcp::GcpDriver::new(config)));
    }
    #[cfg(feature = "openstack")]
    {
        // Keystone URL, credentials and region come from each class's Secret and spec.
        reg.register(
            "openstack",
            Arc::new(mcm_provider_openstack::OpenStackDriver::default()),
        );
    }
    Ok(reg)
}
