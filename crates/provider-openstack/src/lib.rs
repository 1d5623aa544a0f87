//! # mcm-provider-openstack: the OpenStack provider of mcm-rs
//!
//! [`OpenStackDriver`] implements the machine-controller-manager
//! [`Driver`](mcm_driver::Driver) contract on `openstack_sdk` (Keystone v3,
//! Nova, Neutron, Cinder). It reads the MachineClasses and Secrets that users
//! write for Gardener's OpenStack provider (`provider: OpenStack`).
//!
//! ```no_run
//! use mcm_provider_openstack::{OpenStackDriver, OpenStackDriverConfig};
//! // Keystone URL, credentials and region come from each MachineClass and Secret.
//! let driver = OpenStackDriver::new(OpenStackDriverConfig::default());
//! ```
//!
//! ## Inputs
//! - **providerSpec** ([`spec::MachineProviderConfig`]): `apiVersion:
//!   openstack.machine.gardener.cloud/v1alpha1`, `kind: MachineProviderConfig`,
//!   and under `spec`: `imageID`/`imageName`, `region`, `availabilityZone`,
//!   `flavorName`, `keyName`, `securityGroups`, `tags` (must hold a
//!   `kubernetes.io-cluster-…` and a `kubernetes.io-role-…` key), `networkID`
//!   with `subnetID`/`subnetIDs`, or `networks` (`id`/`name`, `podNetwork`),
//!   `podNetworkCidr`/`podNetworkCIDRs`, `rootDiskSize`, `rootDiskType`,
//!   `useConfigDrive`, `serverGroupID`. Invalid specs answer `InvalidArgument`
//!   with every finding, e.g. `spec.region: Required value: Region is required`.
//! - **Secret** ([`secret`]): `authURL`; `username` + `password` or an
//!   application credential; `domainName`/`domainID`, `tenantName`/`tenantID`,
//!   `userDomainName`/`userDomainID`, `caCert`, `clientCert` + `clientKey`
//!   (TLS client certificate, presented on every request), `insecure`;
//!   `userData`.
//!
//! ## Behaviour
//! - **CreateMachine** adopts the server that has the machine's exact name and
//!   this Machine's UID or, without a UID, the class's cluster and role
//!   metadata keys (the Go provider's server); a server of the name with
//!   another Machine's UID refuses the create (`FailedPrecondition`);
//!   otherwise it creates (for `networkID` + subnets) the machine's port,
//!   tagged with the two keys, resolves image and flavor names (cached per
//!   class), creates the root volume (`rootDiskType`), and creates the server
//!   with the spec's tags plus the Machine UID as metadata, user data,
//!   security groups, key, zone, config drive and the server group hint. It
//!   waits for `ACTIVE`, then allows the pod CIDRs on the pod-network ports.
//!   A failure deletes what was made. Provider ID `openstack:///<region>/<id>`,
//!   node name = machine name.
//! - **DeleteMachine** deletes the server (by provider ID, else by name) and
//!   waits until it is gone, then the machine's ports and root volume.
//! - **GetMachineStatus** finds the server like DeleteMachine (`NotFound`
//!   without one); **ListMachines** lists every server with the class's two
//!   metadata keys; **GetVolumeIDs** reads Cinder CSI and in-tree volumes;
//!   **InitializeMachine** answers `Unimplemented`, as the reference.
//! - **UpdateMachine** ([`update`]): changed items of `tags` are applied to
//!   the running server's metadata (Nova `POST /servers/{id}/metadata`, and
//!   `DELETE /servers/{id}/metadata/{key}` for items dropped from the class);
//!   every other field, and the cluster and role keys, need a new server.
//!
//! ## Errors
//! See [`errors`]: not found → `NotFound`, several → `OutOfRange`, 401 →
//! `Unauthenticated`, 403 → `PermissionDenied`, missing flavor, "No valid host
//! was found" and quota answers → `ResourceExhausted`, unreachable or
//! throttling cloud → `Unavailable`, the rest → `Internal`.
//!
//! ## API budget
//! Calls go through the shared client-side budget (`mcm_driver::budget`) per
//! identity, project and region ([`config::RateLimits`]).
//! [`OpenStackDriver::api_calls`] counts the calls per operation.

pub mod api;
mod catalog;
pub mod cloud;
pub mod config;
mod direct;
pub mod driver;
pub mod errors;
pub mod lookup;
mod machine;
pub mod secret;
pub mod spec;
pub mod update;

pub use cloud::ApiCallRecorder;
pub use config::{OpClass, OpenStackDriverConfig, Polling, RateLimits};
pub use driver::{
    install_crypto_provider, provider_id, OpenStackDriver, CINDER_CSI_DRIVER, MACHINE_UID_KEY,
};
pub use errors::OsError;
pub use spec::{OpenStackSpec, PROVIDER_NAME};
