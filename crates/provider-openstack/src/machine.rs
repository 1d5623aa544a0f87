//! Creating and deleting a machine's server, port and root volume, as the
//! reference's executor does.

use crate::api::{self, Named, Server, ServerCreate};
use crate::driver::{machine_name, server_id, OpenStackDriver, Prepared, MACHINE_UID_KEY};
use crate::errors::OsError;
use crate::lookup::Kind;
use crate::secret::{value, USER_DATA};
use base64::Engine;
use mcm_driver::{MachineRequest, Status};
use tokio::time::Instant;
use tracing::{info, warn};

/// The one item of a look-up by exact name.
fn unique(found: Vec<Named>, what: &str, name: &str) -> Result<String, OsError> {
    let mut exact: Vec<Named> = found
        .into_iter()
        .filter(|n| n.name.as_deref() == Some(name))
        .collect();
    match exact.len() {
        0 => Err(OsError::NotFound(format!("{what} [Name={name:?}]"))),
        1 => Ok(exact.remove(0).id),
        _ => Err(OsError::MultipleFound(format!("{what} [Name={name:?}]"))),
    }
}

impl OpenStackDriver {
    async fn resolve(&self, p: &Prepared, kind: Kind, name: &str) -> Result<String, OsError> {
        if let Some(id) = self.lookups.get(&p.class_key, kind, name) {
            return Ok(id);
        }
        let c = &p.cloud;
        let id = match kind {
            Kind::Flavor => {
                let all = api::list_flavors(c).await?;
                unique(all, "flavor", name).map_err(|e| match e {
                    OsError::NotFound(_) => OsError::FlavorNotFound(name.to_string()),
                    other => other,
                })?
            }
            Kind::Image => {
                unique(api::list_images(c, name).await?, "image", name).map_err(|e| {
                    OsError::Failed(format!(
                        "error resolving image ID from image name {name:?}: {e}"
                    ))
                })?
            }
            Kind::Network => unique(api::list_networks(c, name).await?, "network", name)?,
            Kind::SecurityGroup => unique(
                api::list_security_groups(c, name).await?,
                "security group",
                name,
            )?,
        };
        self.lookups.put(&p.class_key, kind, name, &id);
        Ok(id)
    }

    /// Creates the server; after a failure, removes what was made (as the reference).
    pub(crate) async fn deploy_or_clean_up(
        &self,
        p: &Prepared,
        req: &MachineRequest,
    ) -> Result<Server, Status> {
        match self.deploy(p, req).await {
            Ok(id) => Ok(Server {
                id,
                ..Server::default()
            }),
            Err(e) => Err(self.clean_up_after(p, req, e).await),
        }
    }

    /// Deletes what a failed creation left (by name) and returns the creation's error.
    pub(crate) async fn clean_up_after(
        &self,
        p: &Prepared,
        req: &MachineRequest,
        e: OsError,
    ) -> Status {
        let name = machine_name(req);
        warn!(machine = name, error = %e, "creation failed; deleting what it made");
        let code = e.code();
        match self.delete(p, req, "").await {
            Ok(()) => Status::new(code, e.to_string()),
            Err(inner) => Status::new(
                code,
                format!("error deleting server [Name={name:?}] after unsuccessful creation attempt: {inner}. Original error: {e}"),
            ),
        }
    }

    async fn deploy(&self, p: &Prepared, req: &MachineRequest) -> Result<String, OsError> {
        let spec = &p.spec;
        let name = machine_name(req);
        let networks = self.resolve_networks(p, name).await?;
        let image = if spec.image_id.is_empty() {
            self.resolve(p, Kind::Image, &spec.image_name).await?
        } else {
            spec.image_id.clone()
        };
        let flavor = self.resolve(p, Kind::Flavor, &spec.flavor_name).await?;
        let boot_volume = if spec.root_disk_size > 0 {
            let size = i32::try_from(spec.root_disk_size).map_err(|_| {
                OsError::Failed(format!("rootDiskSize {} is too large", spec.root_disk_size))
            })?;
            Some(match &spec.root_disk_type {
                Some(t) => (
                    true,
                    self.ensure_volume(p, name, &image, t, size).await?,
                    size,
                    false,
                ),
                None => (false, image.clone(), size, true),
            })
        } else {
            None
        };
        let mut metadata = spec.tags.clone();
        if let Some(uid) = req
            .machine
            .metadata
            .uid
            .as_deref()
            .filter(|u| !u.is_empty())
        {
            metadata.insert(MACHINE_UID_KEY.to_string(), uid.to_string());
        }
        // The Machine's identity (docs/design/safety.md, "VM identity").
        if let Some(owner) = mcm_driver::MachineOwner::of(&req.machine) {
            metadata.extend(owner.tags(mcm_driver::TagStyle::Dash));
        }
        let user_data = value(&req.secret, USER_DATA).unwrap_or_default();
        let create = ServerCreate {
            name: name.to_string(),
            flavor,
            image,
            networks,
            security_groups: spec.security_groups.clone(),
            metadata,
            user_data: base64::engine::general_purpose::STANDARD.encode(user_data),
            availability_zone: spec.availability_zone.clone(),
            key_name: spec.key_name.clone(),
            config_drive: spec.use_config_drive,
            server_group: spec.server_group_id.clone().filter(|g| !g.is_empty()),
            boot_volume,
        };
        match api::create_server(&p.cloud, &create).await {
            Ok(id) => {
                info!(machine = name, server = %id, "server created");
                Ok(id)
            }
            Err(e) => {
                if e.status() == Some(400) {
                    self.lookups.forget_class(&p.class_key);
                }
                Err(e)
            }
        }
    }

    /// The server's NICs: the machine's own port (`networkID` + subnets), the
    /// network alone, or each entry of `networks`.
    async fn resolve_networks(
        &self,
        p: &Prepared,
        name: &str,
    ) -> Result<Vec<(String, Option<String>)>, OsError> {
        let spec = &p.spec;
        if spec.is_user_managed_network() {
            for s in spec.port_subnets() {
                if !api::subnet_exists(&p.cloud, &s).await? {
                    return Err(OsError::Failed(format!("subnet [ID={s:?}] not found")));
                }
            }
            let port = self.get_or_create_port(p, name).await?;
            return Ok(vec![(spec.network_id.clone(), Some(port))]);
        }
        if !spec.network_id.trim().is_empty() {
            return Ok(vec![(spec.network_id.clone(), None)]);
        }
        let mut out = Vec::new();
        for n in &spec.networks {
            let id = if n.id.trim().is_empty() {
                self.resolve(p, Kind::Network, &n.name).await?
            } else {
                n.id.clone()
            };
            out.push((id, None));
        }
        Ok(out)
    }

    async fn get_or_create_port(&self, p: &Prepared, name: &str) -> Result<String, OsError> {
        let existing = api::list_ports(&p.cloud, Some(name), None).await?;
        match existing.as_slice() {
            [one] => return Ok(one.id.clone()),
            [] => {}
            _ => return Err(OsError::MultipleFound(format!("port [Name={name:?}]"))),
        }
        let mut groups = Vec::new();
        for g in &p.spec.security_groups {
            groups.push(self.resolve(p, Kind::SecurityGroup, g).await?);
        }
        let port = api::create_port(
            &p.cloud,
            name,
            &p.spec.network_id,
            &p.spec.port_subnets(),
            &groups,
        )
        .await?;
        api::tag_port(
            &p.cloud,
            &port.id,
            &[p.cluster_key.as_str(), p.role_key.as_str()],
        )
        .await?;
        info!(machine = name, port = %port.id, "port created");
        Ok(port.id)
    }

    /// The machine's root volume (`rootDiskType`): found by name or created
    /// from the image, then waited for until `available`.
    async fn ensure_volume(
        &self,
        p: &Prepared,
        name: &str,
        image: &str,
        kind: &str,
        size: i32,
    ) -> Result<String, OsError> {
        let existing: Vec<_> = api::list_volumes(&p.cloud, name)
            .await?
            .into_iter()
            .filter(|v| v.name.as_deref() == Some(name))
            .collect();
        let id = match existing.as_slice() {
            [one] => one.id.clone(),
            [] => {
                let v = api::create_volume(
                    &p.cloud,
                    name,
                    size,
                    kind,
                    image,
                    &p.spec.availability_zone,
                    &p.spec.tags,
                )
                .await?;
                info!(machine = name, volume = %v.id, "root volume created");
                v.id
            }
            _ => return Err(OsError::MultipleFound(format!("volume [Name={name:?}]"))),
        };
        let polling = &self.config.polling;
        let deadline = Instant::now() + polling.volume_timeout;
        let mut wait = polling.initial;
        loop {
            let v = api::get_volume(&p.cloud, &id).await?;
            match v.as_ref().map(|v| v.status.as_str()) {
                None | Some("available") => return Ok(id),
                Some("creating" | "downloading") => {}
                Some(other) => {
                    return Err(OsError::Failed(format!(
                        "volume [ID={id:?}] reached status {other:?}. Retrying until status reaches [\"available\"]"
                    )))
                }
            }
            if Instant::now() >= deadline {
                return Err(OsError::Failed(format!(
                    "timed out waiting for volume [ID={id:?}] to become available"
                )));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(polling.max);
        }
    }

    /// Waits until the server is ACTIVE; BUILD is pending, anything else fails
    /// (with Nova's fault for ERROR).
    pub(crate) async fn wait_active(&self, p: &Prepared, id: &str) -> Result<Server, OsError> {
        let polling = &self.config.polling;
        let deadline = Instant::now() + polling.server_timeout;
        let mut wait = polling.initial;
        loop {
            let s = api::get_server(&p.cloud, id).await?.ok_or_else(|| {
                OsError::Failed(format!(
                    "server [ID={id:?}] disappeared while it was building"
                ))
            })?;
            match s.status.as_str() {
                "ACTIVE" => return Ok(s),
                "BUILD" => {}
                other => {
                    let mut msg = format!(
                        "error waiting for server [ID={id:?}] to reach target status: server [ID={id:?}] reached unexpected status {other:?}"
                    );
                    if let Some(f) = &s.fault {
                        msg.push_str(&format!(", fault: {}", f.message));
                    }
                    return Err(OsError::Failed(msg));
                }
            }
            if Instant::now() >= deadline {
                return Err(OsError::Failed(format!(
                    "timed out waiting for server [ID={id:?}] to become ACTIVE"
                )));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(polling.max);
        }
    }

    /// Allows the pod CIDRs as address pairs on the server's ports in the pod
    /// networks (all CIDRs at once, unlike the reference's one-per-update).
    pub(crate) async fn patch_pod_network_ports(
        &self,
        p: &Prepared,
        id: &str,
    ) -> Result<(), OsError> {
        let cidrs = p.spec.pod_cidrs();
        if cidrs.is_empty() {
            return Ok(());
        }
        let ports = api::list_ports(&p.cloud, None, Some(id)).await?;
        if ports.is_empty() {
            return Err(OsError::Failed(format!(
                "got an empty port list for server {id:?}"
            )));
        }
        let mut pod_networks = Vec::new();
        if !p.spec.network_id.trim().is_empty() {
            pod_networks.push(p.spec.network_id.clone());
        } else {
            for n in p.spec.networks.iter().filter(|n| n.pod_network) {
                pod_networks.push(if n.id.trim().is_empty() {
                    self.resolve(p, Kind::Network, &n.name).await?
                } else {
                    n.id.clone()
                });
            }
        }
        for port in ports
            .iter()
            .filter(|port| pod_networks.contains(&port.network_id))
        {
            let have: Vec<String> = port
                .allowed_address_pairs
                .iter()
                .map(|a| a.ip_address.clone())
                .collect();
            if cidrs.iter().all(|c| have.contains(c)) {
                continue;
            }
            let mut all = have.clone();
            all.extend(cidrs.iter().filter(|c| !have.contains(c)).cloned());
            api::set_allowed_address_pairs(&p.cloud, &port.id, &all).await?;
        }
        Ok(())
    }

    /// Deletes the server (by provider ID, else by name) and waits until it is
    /// gone, then the machine's ports (user-managed network) and root volume
    /// (`rootDiskType`). Nothing there is success.
    pub(crate) async fn delete(
        &self,
        p: &Prepared,
        req: &MachineRequest,
        provider_id: &str,
    ) -> Result<(), OsError> {
        let name = machine_name(req);
        let server = if provider_id.is_empty() {
            self.find_by_name(p, req).await?
        } else {
            match api::get_server(&p.cloud, server_id(provider_id)).await? {
                Some(s) if !p.is_member(&s) => {
                    // The machine's own server (its providerID names it) lacks
                    // the class's membership keys now: it is not gone, and
                    // deleting it is not proven safe. Keep the machine.
                    return Err(OsError::Failed(format!(
                        "server [ID={:?}] of machine {name:?} exists but lacks the class's cluster and role metadata keys; fix the MachineClass tags (or delete the server) to finish the deletion",
                        s.id
                    )));
                }
                found => found,
            }
        };
        if let Some(s) = server {
            info!(machine = name, server = %s.id, "deleting server");
            if api::delete_server(&p.cloud, &s.id).await? {
                self.wait_gone(p, &s.id).await?;
            }
        }
        if p.spec.is_user_managed_network() {
            for port in api::list_ports(&p.cloud, Some(name), None).await? {
                info!(machine = name, port = %port.id, "deleting port");
                api::delete_port(&p.cloud, &port.id).await?;
            }
        }
        if p.spec.root_disk_type.is_some() {
            let volumes = api::list_volumes(&p.cloud, name).await?;
            for v in volumes.iter().filter(|v| v.name.as_deref() == Some(name)) {
                if matches!(v.status.as_str(), "in-use" | "detaching" | "attaching") {
                    return Err(OsError::Api {
                        op: "cinder.volumes.delete",
                        status: 503,
                        message: format!(
                            "volume [ID={:?}] is still {}; retry later",
                            v.id, v.status
                        ),
                    });
                }
                info!(machine = name, volume = %v.id, "deleting root volume");
                api::delete_volume(&p.cloud, &v.id).await?;
            }
        }
        Ok(())
    }

    async fn wait_gone(&self, p: &Prepared, id: &str) -> Result<(), OsError> {
        let polling = &self.config.polling;
        let deadline = Instant::now() + polling.server_timeout;
        let mut wait = polling.initial;
        while api::get_server(&p.cloud, id).await?.is_some() {
            if Instant::now() >= deadline {
                return Err(OsError::Failed(format!(
                    "error while waiting for server [ID={id:?}] to be deleted: timed out"
                )));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(polling.max);
        }
        Ok(())
    }
}
