//! # mcm-provider-gcp: the Google Compute Engine provider of mcm-rs
//!
//! [`GcpDriver`] implements the machine-controller-manager
//! [`Driver`](mcm_driver::Driver) contract on Google's official
//! `google-cloud-compute-v1` client (instances, disks and zone operations only) and
//! `google-cloud-auth`. It reads the MachineClass `providerSpec` and Secret
//! that users already write for Gardener's GCP provider (`provider: GCP`).
//!
//! ```no_run
//! use mcm_provider_gcp::{GcpDriver, GcpDriverConfig};
//! // Real Compute Engine: project and credentials come from each Secret.
//! let driver = GcpDriver::new(GcpDriverConfig::default());
//! // Another endpoint (the in-repo fake in tests):
//! let fake = GcpDriver::new(GcpDriverConfig::with_endpoint("http://127.0.0.1:8400"));
//! ```
//!
//! ## Inputs
//! - **providerSpec** ([`spec::GcpProviderSpec`]): `machineType`, `region`,
//!   `zone`, `disks` (boot image, `SCRATCH` local SSDs with `NVME`/`SCSI`,
//!   sizes, types, labels, IOPS, throughput, storage pool, CMEK), `networkInterfaces`
//!   (network, subnetwork, `disableExternalIP`, dual stack, alias range),
//!   `tags` (must contain `kubernetes-io-cluster-…` and `kubernetes-io-role-…`),
//!   `labels`, `metadata`, `scheduling`, `serviceAccounts`, `gpu`,
//!   `minCpuPlatform`, `description`, `canIpForward`, `deletionProtection`,
//!   `shieldedInstanceConfiguration`, `advancedMachineFeatures`. Validation
//!   messages are the reference's ([`validation`]).
//! - **Secret**: credentials under `serviceAccountJSON`, `serviceaccount.json`
//!   or `credentialsConfig` (the first present wins): a `service_account` key
//!   limited to the reference's allow-listed fields, or a Gardener workload
//!   identity `external_account` config ([`credentials`]); the project is the
//!   JSON's `project_id`, else `projectID`; `userData` (metadata `user-data`
//!   when it starts with `#cloud-config`, else `startup-script`). Credentials
//!   and user data are never logged.
//!
//! ## Behaviour
//! - **CreateMachine** inserts one instance named after the machine, with the
//!   Machine's UID in its metadata (`mcm-machine-uid`), and polls the zone
//!   operation until `DONE`. A retried insert that gets `409 alreadyExists`
//!   reads the instance and adopts it when its UID is the machine's, or when
//!   it has no UID but the class's cluster and role tags (the Go provider's
//!   instance of this machine); any other is `FailedPrecondition`, never
//!   adopted (`mcm_driver::adoption`). Provider ID
//!   `gce:///<project>/<zone>/<name>`, node name = machine name.
//! - **GetMachineStatus** reads the instance by name (`instances.get`) and
//!   requires the class's cluster and role tags; `NotFound` otherwise.
//! - **DeleteMachine** deletes that instance and waits for the operation; a
//!   gone instance (or one without the class's tags, which is never touched)
//!   is success.
//! - **ListMachines**: every instance of the zone (all pages) whose cluster
//!   and role tags are the class's; none when the class lacks either tag.
//! - **GetVolumeIDs**: GCE PD CSI (`pd.csi.storage.gke.io`) handles and in-tree
//!   `gcePersistentDisk.pdName`.
//! - **InitializeMachine**: `Unimplemented`, as the reference.
//! - **UpdateMachine** ([`update`]): labels (`instances.setLabels`), network
//!   tags other than the cluster and role tags (`instances.setTags`),
//!   metadata items other than the user data and UID (`instances.setMetadata`),
//!   each with its fingerprint, and persistent disks that grow
//!   (`disks.resize`) change in place; every other field needs a new instance.
//!
//! ## Errors
//! Capacity and quota (operation codes `*RESOURCE_POOL_EXHAUSTED*` or
//! containing `QUOTA`, quota refusals, "does not exist in zone") →
//! `ResourceExhausted`; everything else → `Internal`, as the reference.
//! Bad providerSpecs and Secrets → `InvalidArgument` (the reference says
//! `Internal`; the driver contract of mcm-rs asks for `InvalidArgument`).
//!
//! ## API budget
//! Client-side token buckets per project and Compute rate-quota group
//! ([`config::RateLimits`]: mutations, reads and lists 1,500 per minute,
//! operation reads 3,000 per minute), on the shared
//! [`mcm_driver::budget`] mechanism. A throttled answer (403
//! `rateLimitExceeded`, 429) pauses the whole group before a bounded retry.
//! [`GcpDriver::api_calls`] counts the calls per method.

pub mod compute;
pub mod config;
pub mod credentials;
pub mod driver;
pub mod errors;
pub mod instance;
pub mod spec;
pub mod update;
pub mod validation;

pub use config::{Backoff, GcpDriverConfig, OpClass, RateLimits};
pub use driver::{provider_id, GcpDriver, GCE_PD_CSI_DRIVER};
pub use errors::GceError;
pub use spec::GcpProviderSpec;
