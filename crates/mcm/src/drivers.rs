//! The compiled-in drivers and their flags. Each provider crate sits behind a
//! cargo feature of the same name, so a build without it does not compile its SDK.
//! The MachineClass's `provider` field (lower-cased) selects the driver: a
//! compiled-in one, or (feature `grpc`) a driver in another process reached
//! at the endpoint `--driver-endpoint <provider>=unix:///…` names, which
//! takes the place of a compiled-in driver of the same provider.

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
    /// A driver in another process for a provider: `<provider>=unix:///path.sock`,
    /// `=https://host:port` (TLS with --driver-tls-ca, --driver-tls-cert and
    /// --driver-tls-key) or `=tcp://127.0.0.1:port` (plain, loopback only);
    /// repeatable. Replaces a compiled-in driver of that provider.
    #[cfg(feature = "grpc")]
    #[arg(long = "driver-endpoint", value_name = "PROVIDER=ENDPOINT", value_parser = driver_endpoint)]
    pub driver_endpoints: Vec<(String, mcm_driver_grpc::Endpoint)>,
    /// The CA (PEM) an `https://` driver's certificate must chain to; the
    /// certificate must name the endpoint's host.
    #[cfg(feature = "grpc")]
    #[arg(long, value_name = "FILE")]
    pub driver_tls_ca: Option<std::path::PathBuf>,
    /// The controller's client certificate chain (PEM) for `https://` drivers.
    #[cfg(feature = "grpc")]
    #[arg(long, value_name = "FILE")]
    pub driver_tls_cert: Option<std::path::PathBuf>,
    /// The controller's client private key (PEM) for `https://` drivers.
    #[cfg(feature = "grpc")]
    #[arg(long, value_name = "FILE")]
    pub driver_tls_key: Option<std::path::PathBuf>,
    /// The longest one call to an out-of-process driver may take.
    #[cfg(feature = "grpc")]
    #[arg(long, default_value = "2m", value_parser = crate::flags::duration)]
    pub driver_call_timeout: std::time::Duration,
}

/// Parses `--driver-endpoint <provider>=<endpoint>`.
#[cfg(feature = "grpc")]
pub fn driver_endpoint(s: &str) -> Result<(String, mcm_driver_grpc::Endpoint), String> {
    let (provider, endpoint) = s.split_once('=').ok_or_else(|| {
        format!("{s:?}: expected <provider>=<endpoint>, e.g. aws=unix:///run/mcm/aws.sock")
    })?;
    let provider = provider.trim().to_ascii_lowercase();
    if provider.is_empty() {
        return Err(format!("{s:?}: the provider is empty"));
    }
    let endpoint = mcm_driver_grpc::Endpoint::parse(endpoint.trim()).map_err(|e| e.to_string())?;
    Ok((provider, endpoint))
}

impl ProviderArgs {
    /// What is wrong with the out-of-process driver flags, each naming its
    /// flag (checked with the other flags, before anything connects): TLS
    /// files that are partial or unreadable, an `https://` endpoint without
    /// them, plain TCP to a host that is not loopback.
    pub fn endpoint_problems(&self) -> Vec<String> {
        #[allow(unused_mut)]
        let mut errs = Vec::new();
        #[cfg(feature = "grpc")]
        {
            use mcm_driver_grpc::Endpoint;
            let tls = mcm_driver_grpc::ClientTls::from_flags(
                self.driver_tls_ca.as_deref(),
                self.driver_tls_cert.as_deref(),
                self.driver_tls_key.as_deref(),
            );
            let has_tls = matches!(tls, Ok(Some(_)));
            if let Err(e) = tls {
                errs.push(format!("--driver-tls-*: {e}"));
            }
            for (provider, endpoint) in &self.driver_endpoints {
                match endpoint {
                    Endpoint::Tls(_) if !has_tls => errs.push(format!(
                        "--driver-endpoint {provider}={endpoint}: an https:// driver needs --driver-tls-ca, --driver-tls-cert and --driver-tls-key"
                    )),
                    Endpoint::Tcp(_) if !endpoint.is_loopback() => errs.push(format!(
                        "--driver-endpoint {provider}={endpoint}: plain TCP is only for a loopback address (requests carry Secrets); use https:// with --driver-tls-ca, --driver-tls-cert and --driver-tls-key"
                    )),
                    _ => {}
                }
            }
        }
        errs
    }
}

/// The out-of-process drivers of a registry, for their start-up check.
#[cfg(feature = "grpc")]
pub type EndpointDrivers = Vec<(String, Arc<mcm_driver_grpc::GrpcDriver>)>;
/// The out-of-process drivers of a registry (none without feature `grpc`).
#[cfg(not(feature = "grpc"))]
pub type EndpointDrivers = Vec<()>;

/// Process-wide set-up that the compiled-in drivers need before any client
/// is built: openstack_sdk compiles rustls' aws-lc-rs backend in next to the
/// ring backend of kube, so rustls can no longer pick a default provider by
/// itself and the first Kubernetes client would panic.
pub fn init_process() {
    #[cfg(feature = "openstack")]
    mcm_provider_openstack::install_crypto_provider();
}

/// The registry of every compiled-in driver, then the out-of-process ones.
pub fn registry_with_endpoints(
    args: &ProviderArgs,
) -> anyhow::Result<(DriverRegistry, EndpointDrivers)> {
    // Both are extended only with the `grpc` feature.
    #[allow(unused_mut)]
    let mut reg = registry(args)?;
    #[allow(unused_mut)]
    let mut endpoints = EndpointDrivers::new();
    #[cfg(feature = "grpc")]
    let tls = mcm_driver_grpc::ClientTls::from_flags(
        args.driver_tls_ca.as_deref(),
        args.driver_tls_cert.as_deref(),
        args.driver_tls_key.as_deref(),
    )?;
    #[cfg(feature = "grpc")]
    for (provider, endpoint) in &args.driver_endpoints {
        let options = mcm_driver_grpc::ClientOptions {
            call_timeout: args.driver_call_timeout,
            tls: tls.clone(),
            ..Default::default()
        };
        let d = Arc::new(mcm_driver_grpc::GrpcDriver::new(
            provider, endpoint, options,
        )?);
        reg.register(provider, d.clone());
        endpoints.push((provider.clone(), d));
    }
    Ok((reg, endpoints))
}

/// Checks each out-of-process driver's `Info` at start-up, in the
/// background: an absent or refused driver is reported and asked again
/// (backing off up to 30 s) while the other providers work; once it
/// answers, its declared rate limits are registered with the pacer.
#[cfg(feature = "grpc")]
pub fn check_endpoints(ctx: Arc<mcm_runtime::Context>, endpoints: EndpointDrivers) {
    use std::time::Duration;
    for (provider, d) in endpoints {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut pause = Duration::from_secs(1);
            loop {
                match d.handshake().await {
                    Ok(h) => {
                        let limited = ctx.pacer.register(&provider, d.as_ref()).await;
                        tracing::info!(provider = %provider, endpoint = %d.endpoint(), driver = %h.info.name,
                            version = %h.info.version, protocol = %h.info.protocol_version,
                            rate_limited_operations = limited, "out-of-process driver registered");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(provider = %provider, endpoint = %d.endpoint(), code = %e.code,
                            error = %e.message, retry_in = ?pause,
                            "out-of-process driver not ready; its machines wait, other providers go on");
                    }
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(30));
            }
        });
    }
}

/// Without feature `grpc` there is nothing to check.
#[cfg(not(feature = "grpc"))]
pub fn check_endpoints(_ctx: Arc<mcm_runtime::Context>, _endpoints: EndpointDrivers) {}

/// The registry of every compiled-in driver.
// A build without any provider feature registers nothing.
#[cfg_attr(
    not(any(
        feature = "local",
        feature = "aws",
        feature = "alicloud",
        feature = "azure",
        feature = "gcp",
        feature = "openstack"
    )),
    allow(unused_mut, unused_variables)
)]
pub fn registry(args: &ProviderArgs) -> anyhow::Result<DriverRegistry> {
    let mut reg = DriverRegistry::new();
    #[cfg(feature = "local")]
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
