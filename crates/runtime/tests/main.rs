//! The integration tests of mcm-runtime, in one test binary: each file beside
//! this one is a module (its first lines say what it proves), and the folders
//! are their shared support. Run one file's tests with
//! `cargo test -p mcm-runtime --test integration <file>::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

// Shared support.
mod blackhole;
mod local_world;
mod machine_common;
mod sets_common;

// The tests.
mod bootstrap_token;
mod class_warnings;
mod drain;
mod finalizers;
mod healthz;
mod hot_update;
mod leader;
mod machine_controller;
mod machine_deletion;
mod machine_retries;
mod metrics;
mod node_sync;
mod pacing;
mod preservation;
mod safety;
mod sets_deployment;
mod sets_invalid_input;
mod sets_machineset;
mod sets_rollout_nodes;
mod sets_safety;
mod startup_taint;
