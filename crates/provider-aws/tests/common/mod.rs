//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod mock;
pub mod moto;

use k8s_openapi::api::core::v1::Secret;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::MachineRequest;
use std::sync::atomic::{AtomicU64, Ordering};

pub const REGION: &str = "eu-west-1";
pub const USER_DATA: &str = "#cloud-config\nhostname: test\n";

/// A provider secret with the primary key spellings.
pub fn secret() -> Secret {
    secret_with(&[
        ("providerAccessKeyId", "testing"),
        ("providerSecretAccessKey", "testing"),
        ("userData", USER_DATA),
    ])
}

pub use mcm_driver::testing::secret_with;

pub fn class(name: &str, spec: serde_json::Value) -> MachineClass {
    let mut c = MachineClass::new(name, spec);
    c.provider = "AWS".into();
    c.metadata.namespace = Some("default".into());
    c
}

static SEQ: AtomicU64 = AtomicU64::new(1);

/// A unique suffix (process id + counter + random), so tests sharing one emulator never collide.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}-{:04x}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst),
        rand::random::<u16>()
    )
}

/// A Machine with a fresh name and UID.
pub fn machine(prefix: &str) -> Machine {
    let name = unique(prefix);
    let mut m = Machine::new(&name, MachineSpec::default());
    m.metadata.namespace = Some("default".into());
    m.metadata.uid = Some(format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        rand::random::<u32>(),
        rand::random::<u16>(),
        rand::random::<u16>() & 0xfff,
        rand::random::<u16>() & 0xfff,
        rand::random::<u64>() & 0xffff_ffff_ffff
    ));
    m
}

pub fn request(machine: &Machine, class: &MachineClass, secret: &Secret) -> MachineRequest {
    MachineRequest {
        machine: machine.clone(),
        machine_class: class.clone(),
        secret: secret.clone(),
    }
}

/// Prints `tracing` output of the driver when RUST_LOG is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}
