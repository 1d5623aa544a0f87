//! The integration tests of this crate, in one test binary: each file beside
//! this one is a module (its first lines say what it proves), and the folders
//! are their shared support. Run one file's tests with
//! `cargo test -p <crate> --test integration <file>::`.
//! `cloud_metrics.rs` stays a binary of its own: it counts calls in the
//! process-wide cloud-API recorder, which the other tests would add to.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

// Shared support.
mod common;

// The tests.
mod cleanup;
mod decoding;
mod examples;
mod fake;
mod hot_update;
