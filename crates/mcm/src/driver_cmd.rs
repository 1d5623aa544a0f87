//! `mcm driver serve`: a compiled-in provider's driver out of process, over
//! `mcm.driver.v1` (design: docs/design/driver.md, "Out-of-process drivers").

use crate::drivers::ProviderArgs;
use clap::{Args, Subcommand};
use mcm_driver_grpc::{Endpoint, ServeOptions, ServerInfo, ServerTls};
use std::path::PathBuf;

/// `mcm driver ...`.
#[derive(Subcommand, Debug)]
pub enum DriverCommand {
    /// Serve a compiled-in provider's driver on a Unix socket (or TCP).
    Serve(ServeArgs),
}

/// Flags of `mcm driver serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The provider to serve (a MachineClass `provider` value: local, aws, ...).
    #[arg(long)]
    pub provider: String,
    /// Where to listen: `unix:///path.sock` (default transport), or TCP:
    /// `tcp://host:port` with --tls-cert, --tls-key and --tls-client-ca (TLS,
    /// client certificates required; `https://host:port` likewise), or plain
    /// on a loopback address only.
    #[arg(long, default_value = "unix:///var/run/mcm/driver.sock", value_parser = Endpoint::parse)]
    pub listen: Endpoint,
    /// The driver's TLS certificate chain (PEM), for a TCP listen.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The driver's TLS private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// The CA (PEM) a client's certificate must chain to: only clients with
    /// such a certificate are served.
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// The Unix socket's mode, octal (0600: only the driver's user; 0660 to
    /// share it with a group in a shared volume).
    #[arg(long, default_value = "600", value_parser = octal_mode)]
    pub socket_mode: u32,
    /// Settings of the compiled-in providers.
    #[command(flatten)]
    pub providers: ProviderArgs,
}

fn octal_mode(s: &str) -> Result<u32, String> {
    let m = u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .map_err(|e| format!("{s:?} is not an octal mode: {e}"))?;
    if m > 0o777 {
        return Err(format!("{s:?} is not a file mode (at most 777)"));
    }
    Ok(m)
}

/// How the controller derives the budget scope for a provider's requests,
/// matching the provider's own `rate_limit_scope` (one account and region
/// for AWS; the others use one scope per driver).
fn scope_recipe(provider: &str) -> (Vec<String>, Vec<String>) {
    match provider {
        "aws" => (
            vec!["region".into()],
            vec![
                "providerAccessKeyId".into(),
                "accessKeyID".into(),
                "roleARN".into(),
            ],
        ),
        _ => (Vec::new(), Vec::new()),
    }
}

/// Runs `mcm driver ...`.
pub async fn run(cmd: DriverCommand) -> anyhow::Result<()> {
    let DriverCommand::Serve(args) = cmd;
    let provider = args.provider.to_ascii_lowercase();
    let tls = ServerTls::from_flags(
        args.tls_cert.as_deref(),
        args.tls_key.as_deref(),
        args.tls_client_ca.as_deref(),
    )?;
    let registry = crate::drivers::registry(&args.providers)?;
    let Some(driver) = registry.get(Some(&provider)) else {
        anyhow::bail!(
            "provider {provider:?} is not compiled into this binary (available: {})",
            registry.providers().join(", ")
        );
    };
    let (fields, keys) = scope_recipe(&provider);
    let info = ServerInfo {
        name: format!("mcm-rs {provider}"),
        version: env!("CARGO_PKG_VERSION").to_string(),
        providers: vec![provider],
        scope_provider_spec_fields: fields,
        scope_secret_keys: keys,
        operations: None,
    };
    let options = ServeOptions {
        listen: args.listen,
        socket_mode: args.socket_mode,
        tls,
    };
    mcm_driver_grpc::serve_with_shutdown(driver, info, options, shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_modes_are_octal_and_at_most_777() {
        assert_eq!(octal_mode("600"), Ok(0o600));
        assert_eq!(octal_mode("0o660"), Ok(0o660));
        assert!(octal_mode("800").is_err());
        assert!(octal_mode("1777").is_err());
    }

    #[test]
    fn driver_endpoint_flags_name_a_provider_and_an_endpoint() {
        let (p, e) = crate::drivers::driver_endpoint("AWS=unix:///run/aws.sock").expect("valid");
        assert_eq!(p, "aws");
        assert_eq!(e, Endpoint::Unix("/run/aws.sock".into()));
        assert!(crate::drivers::driver_endpoint("unix:///x.sock").is_err());
        assert!(crate::drivers::driver_endpoint("=unix:///x.sock").is_err());
        assert!(crate::drivers::driver_endpoint("aws=relative.sock").is_err());
    }
}
