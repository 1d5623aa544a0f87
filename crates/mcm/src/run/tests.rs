use super::*;
use clap::Parser;
use std::time::Duration;

fn manager(args: &[&str]) -> Plan {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ManagerArgs,
    }
    let argv = std::iter::once("machine-controller-manager").chain(args.iter().copied());
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => panic!("flags {args:?}: {e}"),
    };
    Plan {
        name: MANAGER,
        common: cli.args.common,
        sets: Some(cli.args.sets),
        machines: None,
    }
}

fn all_in_one(args: &[&str]) -> Plan {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RunArgs,
    }
    let argv = std::iter::once("mcm").chain(args.iter().copied());
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => panic!("flags {args:?}: {e}"),
    };
    Plan {
        name: "mcm",
        common: cli.args.common,
        sets: Some(cli.args.sets),
        machines: Some(cli.args.machines),
    }
}

#[test]
fn concurrent_syncs_and_the_retry_periods_reach_the_set_controllers() {
    let c = runtime_config(&manager(&[
        "--namespace=shoot--a--b",
        "--concurrent-syncs=7",
        "--min-retry-period=3s",
        "--max-retry-period=90s",
        "--safety-up=4",
        "--safety-down=2",
        "--machine-safety-overshooting-period=45s",
        "--autoscaler-scaledown-annotation-during-rollout=false",
    ]));
    // `sets::run_with` reads exactly these fields of the one Config.
    assert_eq!(c.namespace, "shoot--a--b");
    assert_eq!(c.concurrent_syncs, 7);
    assert_eq!(c.short_retry, Duration::from_secs(3));
    assert_eq!(c.long_retry, Duration::from_secs(90));
    assert_eq!(c.sets.safety_up, 4);
    assert_eq!(c.sets.safety_down, 2);
    assert_eq!(c.sets.overshooting_period, Duration::from_secs(45));
    assert!(!c.sets.autoscaler_scaledown_annotation_during_rollout);
}

#[test]
fn each_half_defaults_concurrent_syncs_as_the_reference() {
    assert_eq!(runtime_config(&manager(&[])).concurrent_syncs, 10);
    assert_eq!(runtime_config(&all_in_one(&[])).concurrent_syncs, 50);
}

#[test]
fn all_in_one_gives_machines_and_sets_the_same_flags() {
    let c = runtime_config(&all_in_one(&[
        "--concurrent-syncs=3",
        "--machine-creation-timeout=7m",
        "--safety-up=5",
    ]));
    assert_eq!(c.concurrent_syncs, 3);
    assert_eq!(c.creation_timeout, Duration::from_secs(420));
    assert_eq!(c.sets.safety_up, 5);
}
