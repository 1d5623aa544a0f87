//! # mcm-driver-grpc: out-of-process drivers over `mcm.driver.v1`
//!
//! The [`mcm_driver::Driver`] contract over gRPC (proto:
//! `proto/mcm/driver/v1/driver.proto`; design: docs/design/driver.md,
//! "Out-of-process drivers"):
//!
//! - [`GrpcDriver`]: a client that implements `Driver`, so the controllers
//!   use a driver in another process exactly like a compiled-in one. Every
//!   call has a bounded deadline; a dead or hung server gives `Unavailable`
//!   or `DeadlineExceeded`, never a hang or a panic.
//! - [`serve`]: serves any `Driver` on a Unix socket (mode 0600 by default)
//!   or TCP with TLS and client certificates ([`tls`]); plain TCP on
//!   loopback only.
//!
//! Errors cross as gRPC statuses with the machine code in the metadata key
//! [`wire::MACHINE_CODE_KEY`], so `Uninitialized` (17, not a gRPC code)
//! survives every hop. Secret data is carried in the request, never logged.

pub mod client;
pub mod endpoint;
pub mod loopback;
pub mod server;
pub mod tls;
pub mod wire;

/// The code generated from `mcm.driver.v1`.
#[allow(
    missing_docs,
    clippy::all,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
pub mod pb {
    tonic::include_proto!("mcm.driver.v1");
}

pub use client::{ClientOptions, GrpcDriver};
pub use endpoint::{Endpoint, EndpointError};
pub use loopback::{Loopback, LoopbackError};
pub use server::{serve, serve_with_shutdown, ServeError, ServeOptions, ServerInfo};
pub use tls::{ClientTls, ServerTls, TlsError};

/// The protocol version this crate speaks (`MAJOR.MINOR`). A peer with
/// another major version is refused; minors are compatible both ways.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The major version of [`PROTOCOL_VERSION`].
pub const PROTOCOL_MAJOR: u32 = 1;
