//! # mcm-provider-alicloud: the Alibaba Cloud (ECS) provider of mcm-rs
//!
//! [`AlicloudDriver`] implements the machine-controller-manager
//! [`Driver`](mcm_driver::Driver) contract for `provider: Alicloud`
//! MachineClasses, reading the same `providerSpec` and Secret as Gardener's
//! Alicloud provider. No maintained Rust SDK signs with Alibaba's current
//! signature, so the crate carries a small ECS RPC client ([`ecs`]) with the
//! ACS3-HMAC-SHA256 signer ([`sign`]) on `reqwest`, `hmac` and `sha2`.
//!
//! ```no_run
//! use mcm_provider_alicloud::{AlicloudDriver, AlicloudDriverConfig};
//! // Real ECS: region and credentials come from each MachineClass / Secret.
//! let driver = AlicloudDriver::new(AlicloudDriverConfig::default());
//! // A test fake:
//! let fake = AlicloudDriver::new(AlicloudDriverConfig::with_endpoint("http://127.0.0.1:8080"));
//! ```
//!
//! ## Inputs
//! - **providerSpec** ([`spec::AlicloudProviderSpec`]): `imageID`,
//!   `instanceType`, `region`, `zoneID`, `securityGroupID`, `vSwitchID`,
//!   `privateIPAddress`, `systemDisk {category, size}`, `dataDisks[] {name,
//!   category, description, encrypted, deleteWithInstance, size}`,
//!   `instanceChargeType`, `internetChargeType`, `internetMaxBandwidthIn/Out`,
//!   `spotStrategy`, `IoOptimized`, `tags` (a `kubernetes.io/cluster/…` and a
//!   `kubernetes.io/role/…` key are required), `keyPairName`. Invalid specs fail
//!   with `InvalidArgument` listing every finding, e.g.
//!   `providerSpec.imageID: Required value: ImageID is required`.
//! - **Secret**: `alicloudAccessKeyID`/`accessKeyID`,
//!   `alicloudAccessKeySecret`/`accessKeySecret` (trimmed), `userData` (sent
//!   base64-encoded). Secrets and user data are never logged.
//!
//! ## Behaviour
//! - **CreateMachine**: first looks the machine's name up (DescribeInstances
//!   by `InstanceName`) and adopts the instance that carries this Machine's
//!   identity or, without one, the class's cluster and role tags (the Go
//!   provider's instance); one with another Machine's identity refuses the
//!   create (`FailedPrecondition`). Otherwise RunInstances with
//!   `InstanceName` = machine name and
//!   `ClientToken` = `mcm-<machine uid>`, so a retried create returns the
//!   instance of the first call; the answer's instance is then looked up
//!   (DescribeInstances by ID). When a token names an instance deleted since,
//!   the next token generation (`mcm-<uid>-1`, ...) is used. Provider ID
//!   `<region>.<instance-id>`, node name = the instance ID with its first `-`
//!   replaced by `z` plus a trailing `z`.
//! - **InitializeMachine** answers `Unimplemented`, as the reference.
//! - **GetMachineStatus**: DescribeInstances by machine name, keeping the
//!   instances with the class's cluster tag or this Machine's identity (a
//!   class whose cluster tag changed still finds them): `NotFound` for none,
//!   `OutOfRange` for several.
//! - **DeleteMachine**: DeleteInstance with `Force=true` for the providerID's
//!   instance (or every instance named after the machine); gone = OK; a
//!   Pending/Starting/Stopping instance is awaited up to
//!   [`AlicloudDriverConfig::settle_timeout`], then `Unavailable`.
//! - **ListMachines**: DescribeInstances by the cluster and role tags (key
//!   and value), every page (NextToken). **GetVolumeIDs**: disk CSI
//!   (`diskplugin.csi.alibabacloud.com`) handles and FlexVolume `volumeId`s.
//!
//! ## Errors and API budget
//! See [`errors`]: the reference's 13 RunInstances capacity/quota/zone codes
//! (e.g. `OperationDenied.NoStock`) are `ResourceExhausted`. Calls draw from
//! client-side token buckets per account, region and action
//! ([`config::RateLimits`], the shared `mcm_driver::budget`); `Throttling*`
//! answers pause the action class and are retried a few times.

pub mod config;
pub mod driver;
pub mod ecs;
pub mod errors;
pub mod launch;
pub mod sign;
pub mod spec;
pub mod update;

pub use config::{ActionClass, AlicloudDriverConfig, RateLimits, RetrySettings};
pub use driver::AlicloudDriver;
pub use errors::EcsError;
pub use spec::AlicloudProviderSpec;
