//! # mcm-provider-aws: the AWS EC2 provider of mcm-rs
//!
//! [`AwsDriver`] implements the machine-controller-manager
//! [`Driver`](mcm_driver::Driver) contract on top of the official
//! `aws-sdk-ec2`. It reads the same MachineClass `providerSpec` and Secret that
//! users already write for Gardener's AWS provider.
//!
//! ```no_run
//! use mcm_provider_aws::{AwsDriver, AwsDriverConfig};
//! // Real EC2: region and credentials come from each MachineClass / Secret.
//! let driver = AwsDriver::new(AwsDriverConfig::default());
//! // An emulator or an EC2-compatible cloud:
//! let moto = AwsDriver::new(AwsDriverConfig::with_endpoint("http://127.0.0.1:5000"));
//! ```
//!
//! ## Inputs
//! - **providerSpec** ([`spec::AwsProviderSpec`]): `ami`, `machineType`, `region`,
//!   `iam` (`name` or `arn`), `networkInterfaces` (subnet, security groups,
//!   public IP, `ipv6AddressCount`, `ipv6PrefixCount`, `primaryIpv6`,
//!   `interfaceType`, `deviceIndex`, `networkCardIndex`, `deleteOnTermination`),
//!   `blockDevices` (`/root` = the AMI's root device; `ebs.volumeSize/volumeType/
//!   iops/throughput/encrypted/kmsKeyID/snapshotID/deleteOnTermination`),
//!   `tags` (must contain a `kubernetes.io/cluster/…` and a `kubernetes.io/role/…`
//!   key), `keyName`, `spotPrice`, `instanceMarketOptions`, `capacityReservation`,
//!   `placement`, `instanceMetadataOptions`, `cpuOptions`, `ebsOptimized`,
//!   `monitoring`, `srcAndDstChecksEnabled`. Unknown keys are ignored with a
//!   warning. Keys are matched as Go's `encoding/json` matches them: exactly,
//!   else case-insensitively (`subnetId` fills `subnetID`), each such key a
//!   warning naming the canonical key ([`spec::decode`],
//!   `Driver::provider_spec_warnings`; the spelling that sorts last wins, as
//!   in Go after the API server). Invalid
//!   specs fail with `InvalidArgument` listing every finding, e.g.
//!   `providerSpec.ami: Required value: AMI is required`.
//! - **Secret**: `providerAccessKeyId`/`accessKeyID` and
//!   `providerSecretAccessKey`/`secretAccessKey` (either spelling), or
//!   `workloadIdentityTokenFile` + `roleARN` (STS AssumeRoleWithWebIdentity);
//!   `userData` (sent base64-encoded). Secrets and user data are never logged.
//!
//! ## Behaviour
//! - **CreateMachine** adopts a VM that already carries the machine's `Name`
//!   tag and the class's cluster and role tags, when it carries this
//!   Machine's identity or none (the Go provider's VM); one carrying another
//!   Machine's identity refuses the create (`FailedPrecondition`). Else it calls RunInstances with a `ClientToken` derived from the
//!   Machine's UID (a retried create returns the same instance; a token whose
//!   instance was terminated since moves on to the next token generation), tags
//!   instance, volumes and interfaces with the spec's tags plus
//!   `Name=<machine>`. When RunInstances' answer lacks the private DNS name,
//!   it waits with back-off until DescribeInstances shows the instance.
//!   Provider ID `aws:///<region>/<instance-id>`, node name = the private DNS
//!   name.
//! - **InitializeMachine** turns the source/destination check off on every
//!   non-EFA interface that still has it (when `srcAndDstChecksEnabled: false`)
//!   and assigns the IPv6 prefixes and addresses still missing per interface
//!   (AssignIpv6Addresses). It only acts on what differs, so a second call makes
//!   no mutating call. Failures answer `Uninitialized`.
//! - **GetMachineStatus** finds the VM by provider ID (or by `Name` + cluster +
//!   role tags), ignoring shutting-down/terminated ones: `NotFound` when there
//!   is none, `OutOfRange` for several, `Uninitialized` (with the VM's identity)
//!   while InitializeMachine still has something to do.
//! - **DeleteMachine** terminates the VM (gone = OK). Volumes and interfaces
//!   the spec marks `deleteOnTermination: false` are kept, as the user asked
//!   and as the Go provider does; they carry the spec's tags and
//!   `Name=<machine>` from creation, so they can be found later.
//! - **ListMachines**: providerID → `Name` tag of every live VM with the class's
//!   cluster and role tag keys (all pages). **GetVolumeIDs**: EBS CSI
//!   (`ebs.csi.aws.com`) handles and in-tree `awsElasticBlockStore` IDs.
//!
//! ## Errors
//! Capacity and quota codes (`InsufficientInstanceCapacity`, `VcpuLimitExceeded`,
//! …) → `ResourceExhausted`; `*.NotFound` → `NotFound` (never for look-ups,
//! which must not make the controller create a second VM); malformed or
//! invalid parameters → `InvalidArgument`; credentials → `Unauthenticated`;
//! permissions → `PermissionDenied`; no answer → `Unavailable`; the rest
//! (including throttling that outlived every retry) → `Internal`. Messages name
//! the EC2 action, the AWS error code and the AWS request ID.
//!
//! ## API budget
//! EC2 limits requests per account and region with token buckets per action
//! class. The driver keeps its own copy ([`RateLimits`], defaults = EC2's
//! published limits, RunInstances 5 burst / 2 per s, describes 100 / 20 per s,
//! TerminateInstances 100 / 5, other mutations 50 / 5, less one token of burst
//! and a tenth of the rate, so that jitter between the driver's sends and
//! EC2's arrivals does not draw throttled answers), so that a scale-up
//! queues locally. A throttled answer (`RequestLimitExceeded`) is retried by
//! the SDK's standard retry strategy, then pauses the whole action class with
//! a growing pause before at most [`RetrySettings::throttle_retries`] more
//! tries, so throttling never turns into a retry storm. Concurrent look-ups by
//! instance ID or machine name within [`AwsDriverConfig::batch_window`] are
//! merged into one DescribeInstances call, AMI root devices are cached, and a
//! semaphore caps concurrent creates. A call does not ask EC2 what the call
//! before it for the same machine just learnt (a status probe's "no VM" for
//! the create, the create's description for InitializeMachine), and deleting
//! a known VM terminates it without a look-up: about 5 EC2 calls per machine
//! for create + initialize + delete against moto. [`AwsDriver::api_calls`]
//! counts the EC2 calls per action. Design: `docs/design/providers/aws.md`.
//!
//! ## Differences from Gardener's Go provider
//! `kmsKeyID`, `ebsOptimized`, `monitoring`, `noDevice` and `virtualName` are
//! sent to EC2 (the Go provider parses but ignores them); RunInstances carries
//! a `ClientToken`; InitializeMachine also tops up `ipv6AddressCount` and gates
//! the source/destination check per interface; surplus IPv6 prefixes are
//! accepted instead of looping; look-ups by provider ID skip terminated
//! instances.

pub mod calls;
pub mod cloud_metrics;
pub mod config;
pub mod driver;
pub mod ec2;
pub mod ec2_update;
pub mod errors;
pub mod launch;
pub mod ratelimit;
pub mod spec;

pub use calls::{ApiCallRecorder, ApiCalls};
pub use config::{AwsDriverConfig, Backoff, BucketLimit, RateLimits, RetrySettings, SdkConfigHook};
pub use driver::AwsDriver;
pub use errors::Ec2Error;
pub use spec::AwsProviderSpec;
