//! # mcm: the mcm-rs binary
//!
//! A multi-call binary: invoked as `machine-controller-manager` or
//! `machine-controller` (by a link or a copy under that name, as the container
//! image has them: `/machine-controller-manager`, `/machine-controller`) it is
//! that half of the reference, with the reference's flags and no subcommand.
//! Invoked under any other name with flags and no subcommand (Gardener's
//! provider sidecar passes bare flags to the image's entrypoint) it is the
//! machine-controller half. Otherwise it is `mcm`:
//!
//! - `mcm run`: both halves in one process (flags named like Gardener MCM's).
//! - `mcm machine-controller-manager ...`, `mcm machine-controller ...`: one half.
//! - `mcm up`: a complete local environment (control plane, local cloud,
//!   controllers, an example MachineDeployment) with a live summary.
//! - `mcm local-cloud ...`: the simulated cloud and its operator commands.
//! - `mcm validate -f <files…>`: decode and validate MachineClasses and
//!   their Secrets offline, as the drivers do (check before you swap).
//! - `mcm driver serve --provider <p> --listen unix:///…`: a compiled-in
//!   provider's driver out of process (feature `grpc`).
//! - `mcm crds`, `mcm version`.
//!
//! `mcm up` and `mcm local-cloud` come with the cargo feature `local` (on by
//! default); a build without it answers them with what is missing.

#[cfg(feature = "grpc")]
mod driver_cmd;
mod drivers;
mod entry;
mod flags;
mod klog;
mod kubeclient;
mod rest_metrics;
mod run;
#[cfg(feature = "local")]
mod up;
mod validate;

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
    /// Run both halves: machine-controller-manager and machine-controller.
    Run(Box<run::RunArgs>),
    /// Run the MachineSet/MachineDeployment half (Lease `machine-controller-manager`, port 10258).
    #[command(name = "machine-controller-manager")]
    Manager(Box<run::ManagerArgs>),
    /// Run the Machine half (Lease `machine-controller`, port 10259).
    #[command(name = "machine-controller")]
    Controller(Box<run::ControllerArgs>),
    /// Start a local environment with machines of the `local` provider.
    #[cfg(feature = "local")]
    Up(up::UpArgs),
    /// The simulated local cloud.
    #[cfg(feature = "local")]
    #[command(subcommand)]
    LocalCloud(mcm_provider_local::LocalCloudCommand),
    /// Start a local environment (not in this build: needs the cargo feature `local`).
    #[cfg(not(feature = "local"))]
    Up(WithoutLocal),
    /// The simulated local cloud (not in this build: needs the cargo feature `local`).
    #[cfg(not(feature = "local"))]
    LocalCloud(WithoutLocal),
    /// Decode and validate MachineClasses and their Secrets from YAML files,
    /// offline, with the drivers' own code (exit code 1 on errors).
    Validate(ValidateCli),
    /// Out-of-process drivers.
    #[cfg(feature = "grpc")]
    #[command(subcommand)]
    Driver(driver_cmd::DriverCommand),
    /// Print the CustomResourceDefinitions as YAML.
    Crds,
    /// Print the version.
    Version,
}

/// `mcm validate`'s flags with the providers' (endpoint overrides are not
/// used: nothing is contacted).
#[derive(clap::Args)]
struct ValidateCli {
    #[command(flatten)]
    args: validate::ValidateArgs,
    #[command(flatten)]
    providers: drivers::ProviderArgs,
}

/// The arguments of a command this build does not have: taken as they come,
/// so that the answer is what is missing rather than a usage error.
#[cfg(not(feature = "local"))]
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
struct WithoutLocal {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<String>,
}

/// What `mcm up` and `mcm local-cloud` answer in a build without the local cloud.
#[cfg(not(feature = "local"))]
fn without_local(command: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "`mcm {command}` needs the simulated local cloud, which this binary was built \
         without: build it with the cargo feature `local` (on by default), e.g. \
         `cargo build -p mcm --features local`"
    )
}

/// `machine-controller-manager` as its own program.
#[derive(Parser)]
#[command(
    name = "machine-controller-manager",
    version,
    about = "mcm-rs machine-controller-manager: MachineSets, MachineDeployments and overshoot safety"
)]
struct ManagerCli {
    #[command(flatten)]
    args: run::ManagerArgs,
}

/// `machine-controller` as its own program.
#[derive(Parser)]
#[command(
    name = "machine-controller",
    version,
    about = "mcm-rs machine-controller: Machines, MachineClasses, orphan-VM and API-server safety"
)]
struct ControllerCli {
    #[command(flatten)]
    args: run::ControllerArgs,
}

#[cfg(any(feature = "local", feature = "grpc"))]
fn init_plain_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube=warn,hyper=warn"));
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// The name this binary was invoked under (`argv[0]`'s file name).
fn invoked_as() -> String {
    entry::invoked_as(std::env::args_os().next().as_ref())
}

async fn dispatch() -> anyhow::Result<()> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // A half's usage and errors name the half, whatever path started it.
    let as_half = |name: &str| {
        std::iter::once(std::ffi::OsString::from(name)).chain(argv.iter().skip(1).cloned())
    };
    match entry::route(&argv) {
        entry::Program::Manager => {
            let cli = ManagerCli::parse_from(as_half(run::MANAGER));
            run::init_logging(&cli.args.common);
            return run::run_manager(cli.args).await;
        }
        entry::Program::Controller => {
            let cli = ControllerCli::parse_from(as_half(run::CONTROLLER));
            run::init_logging(&cli.args.common);
            return run::run_controller(cli.args).await;
        }
        entry::Program::Mcm => {}
    }
    match Cli::parse_from(&argv).command {
        Command::Run(args) => {
            run::init_logging(&args.common);
            run::run(*args).await
        }
        Command::Manager(args) => {
            run::init_logging(&args.common);
            run::run_manager(*args).await
        }
        Command::Controller(args) => {
            run::init_logging(&args.common);
            run::run_controller(*args).await
        }
        #[cfg(feature = "local")]
        Command::Up(args) => up::up(args).await,
        #[cfg(feature = "local")]
        Command::LocalCloud(cmd) => {
            init_plain_logging();
            mcm_provider_local::admin::run(cmd)
                .await
                .map_err(anyhow::Error::from)
        }
        #[cfg(not(feature = "local"))]
        Command::Up(_) => Err(without_local("up")),
        #[cfg(not(feature = "local"))]
        Command::LocalCloud(_) => Err(without_local("local-cloud")),
        Command::Validate(cli) => validate::run(&cli.args, &cli.providers),
        #[cfg(feature = "grpc")]
        Command::Driver(cmd) => {
            init_plain_logging();
            driver_cmd::run(cmd).await
        }
        Command::Crds => {
            print!("{}", mcm_api::crds_yaml());
            Ok(())
        }
        Command::Version => {
            println!("mcm {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    drivers::init_process();
    match dispatch().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // A klog line, as every other line of the halves (crate::klog).
            let head = klog::header(
                &tracing::Level::ERROR,
                std::time::SystemTime::now(),
                std::process::id(),
                file!(),
                line!(),
            );
            eprintln!(
                "{head}{}: {}",
                invoked_as(),
                format!("{e:#}").replace('\n', "\\n")
            );
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(all(test, not(feature = "local")))]
mod without_local_tests {
    use super::{without_local, Cli, Command};
    use clap::Parser as _;

    #[test]
    fn up_without_the_local_feature_parses_and_names_the_missing_feature() {
        let cli = Cli::try_parse_from(["mcm", "up", "--replicas", "2"]).expect("parses");
        assert!(matches!(cli.command, Command::Up(_)));
        let text = without_local("up").to_string();
        assert!(text.contains("`mcm up`"), "{text}");
        assert!(text.contains("feature `local`"), "{text}");
    }

    #[test]
    fn local_cloud_without_the_local_feature_is_a_known_command() {
        let cli =
            Cli::try_parse_from(["mcm", "local-cloud", "serve", "--port", "1"]).expect("parses");
        assert!(matches!(cli.command, Command::LocalCloud(_)));
    }
}
