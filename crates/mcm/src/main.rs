//! # mcm: the mcm-rs binary
//!
//! - `mcm run`: all controllers (Machine, MachineClass, MachineSet,
//!   MachineDeployment, safety), with flags named like Gardener MCM's.
//! - `mcm up`: a complete local environment (control plane, local cloud,
//!   controllers, an example MachineDeployment) with a live summary.
//! - `mcm local-cloud ...`: the simulated cloud and its operator commands.
//! - `mcm crds`, `mcm version`.

mod run;
mod up;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "mcm",
    version,
    about = "mcm-rs: a machine controller manager for Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controllers.
    Run(Box<run::RunArgs>),
    /// Start a local environment with machines of the `local` provider.
    Up(up::UpArgs),
    /// The simulated local cloud.
    #[command(subcommand)]
    LocalCloud(mcm_provider_local::LocalCloudCommand),
    /// Print the CustomResourceDefinitions as YAML.
    Crds,
    /// Print the version.
    Version,
}

fn init_logging(json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube=warn,hyper=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => {
            init_logging(args.log_json);
            run::run(*args).await
        }
        Command::Up(args) => up::up(args).await,
        Command::LocalCloud(cmd) => {
            init_logging(false);
            mcm_provider_local::admin::run(cmd)
                .await
                .map_err(anyhow::Error::from)
        }
        Command::Crds => {
            print!("{}", mcm_api::crds_yaml());
            Ok(())
        }
        Command::Version => {
            println!("mcm {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcm: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
