//! The integration tests of this crate, in one test binary: each file beside
//! this one is a module (its first lines say what it proves), and the folders
//! are their shared support. Run one file's tests with
//! `cargo test -p <crate> --test integration <file>::`.
//! `no_secret_logged.rs` stays a binary of its own: it installs the
//! process-wide log subscriber and reads every line of the process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

// Shared support.
mod common;

// The tests.
mod faults;
mod over_grpc;
mod tls;
mod update;
