//! The integration tests of the `mcm` binary, in one test binary: each file
//! beside this one is a module (its first lines say what it proves), and the
//! folders are their shared support. Run one file's tests with
//! `cargo test -p mcm --test integration <file>::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

// Shared support.
#[cfg(feature = "aws")]
mod aws_common;
mod dropin;
mod e2e;
#[cfg(feature = "aws")]
mod ec2_proxy;
mod grpc_scenario;
mod local_scenario;
mod rbac_calls;

// The tests.
mod alicloud_e2e;
mod aws_e2e;
mod aws_hot_update;
mod azure_e2e;
mod deploy;
mod flags;
mod gardener_dropin;
mod gcp_e2e;
#[cfg(feature = "grpc")]
mod go_bridge;
mod grpc_local;
mod grpc_tls;
mod helm_chart;
mod hot_update;
mod in_place;
mod kill_hint;
mod leader_handover;
mod openstack_e2e;
mod preservation_local;
mod rbac_e2e;
mod reference_scenarios;
mod up;
mod validate_cli;
