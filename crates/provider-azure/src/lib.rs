//! # mcm-provider-azure: the Azure provider of mcm-rs
//!
//! [`AzureDriver`] implements the machine-controller-manager
//! [`Driver`](mcm_driver::Driver) contract for `provider: Azure`
//! MachineClasses, reading the same `providerSpec` and Secret as Gardener's
//! Azure provider. There is no maintained Azure management crate, so the
//! driver talks to Azure Resource Manager through a small client of its own
//! ([`arm`]: reqwest + serde, long-running operations, the ARM error
//! envelope, 429 retries), with tokens from the official `azure_identity`
//! ([`auth`]).
//!
//! ```no_run
//! use mcm_provider_azure::{AzureDriver, AzureDriverConfig};
//! // Real Azure: cloud and credentials come from each MachineClass / Secret.
//! let driver = AzureDriver::new(AzureDriverConfig::default());
//! // A local ARM fake (ARM and token endpoint on one origin):
//! let fake = AzureDriver::new(AzureDriverConfig::with_endpoint("http://127.0.0.1:8080"));
//! ```
//!
//! ## Inputs
//! - **providerSpec** ([`spec::AzureProviderSpec`]): `location`, `resourceGroup`,
//!   `subnetInfo` (`vnetName`, `vnetResourceGroup`, `subnetName`), `tags`
//!   (a `kubernetes.io-cluster-…` and a `kubernetes.io-role-…` key are
//!   required), `cloudConfiguration.name`, and `properties`: `hardwareProfile.vmSize`,
//!   `storageProfile` (`imageReference` = exactly one of `id`, `urn`,
//!   `communityGalleryImageID`, `sharedGalleryImageID`; `osDisk`; `dataDisks`
//!   with optional `imageRef`; `diskControllerType`), `osProfile`
//!   (`adminUsername`, SSH key), `networkProfile.acceleratedNetworking`, exactly
//!   one of `zone` / `availabilitySet` / `virtualMachineScaleSet` (or the
//!   deprecated `machineSet`), `identityID`, `diagnosticsProfile`,
//!   `securityProfile`, `capacityReservation`. Invalid specs answer
//!   `InvalidArgument` with the reference's messages, e.g.
//!   `error in validation of AzureProviderSpec: [providerSpec.location: Required value: must provide a location]`.
//! - **Secret**: `clientID`/`azureClientId`, `clientSecret`/`azureClientSecret`
//!   or `workloadIdentityTokenFile`, `subscriptionID`/`azureSubscriptionId`,
//!   `tenantID`/`azureTenantId`, and `userData` (required for every call, as in
//!   the reference). Secrets and user data are never logged.
//!
//! ## Behaviour
//! - **CreateMachine**: a VM of the machine's name carrying the machine's UID
//!   tag, or no UID but the class's cluster and role tags (the Go provider's
//!   VM), is adopted; any other VM of the name is refused with
//!   `FailedPrecondition`, never updated; otherwise marketplace terms are accepted when needed, the
//!   subnet is read, the NIC `<vm>-nic` is created unless it exists, data disks
//!   with an image are created, and the VM is PUT (idempotent by name) with
//!   every NIC and disk set to be deleted with it. A VM that fails for capacity
//!   or quota (`ResourceExhausted`) is cleaned up with its NIC and disks.
//!   Provider ID `azure:///<location>/<vm>`, node name = VM name.
//! - **DeleteMachine** (VM name lower-cased): nothing to do when the resource
//!   group is gone; otherwise the VM is patched to cascade-delete its NIC and
//!   disks where needed and deleted; a missing VM's leftover NIC and disks
//!   (from an older provider or a half-created machine) are deleted by name.
//! - **GetMachineStatus**: GET the VM; `NotFound` when there is none.
//! - **ListMachines**: one Resource Graph query for the VMs, NICs and disks of
//!   the resource group with the class's cluster and role tag keys (falling back
//!   to listing the three resource types when Resource Graph fails), mapped to
//!   VM names. **GetVolumeIDs**: `disk.csi.azure.com` handles and in-tree
//!   `azureDisk.diskName`. **InitializeMachine**: `Unimplemented`.
//! - **UpdateMachine** ([`update`]): changed `tags` (except the cluster, role,
//!   UID and identity keys) are applied to the VM, its NICs and its managed
//!   disks, one PATCH of `tags` per resource that differs; every other field
//!   needs a new VM.
//!
//! ## API budget
//! Calls take a token from the shared cloud budget ([`mcm_driver::budget`]) per
//! subscription and class ([`RateLimits`]: ARM's reads 250/25 per s, writes and
//! deletes 200/10 per s, Resource Graph 15 per 5 s). A 429 honours
//! `Retry-After` and pauses the class for every caller; at most
//! [`arm::ArmSettings::max_throttle_retries`] retries. [`AzureDriver::api_calls`]
//! counts the calls by method and resource kind.

pub mod arm;
pub mod auth;
pub mod body;
mod cleanup;
pub mod config;
mod create;
mod delete;
pub mod driver;
pub mod names;
pub mod secret;
pub mod spec;
pub mod update;

pub use auth::{StaticToken, TokenSource};
pub use config::{AzureDriverConfig, BucketLimit, RateLimits};
pub use driver::AzureDriver;
pub use spec::AzureProviderSpec;
