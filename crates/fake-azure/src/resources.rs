//! VMs, NICs, disks, subnets, images, agreements and the Resource Graph query.

use crate::server::arm_error;
use crate::state::{last, Finish, State};
use serde_json::{json, Value};

/// An HTTP answer of the fake.
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Option<Value>,
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: Some(body),
        }
    }

    pub fn empty(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: None,
        }
    }

    fn header(mut self, k: &str, v: String) -> Self {
        self.headers.push((k.to_string(), v));
        self
    }
}

const TIME: &str = "2026-12-02T00:00:00.0000000+00:00";

fn op_url(s: &State, location: &str, kind: &str, id: &str) -> String {
    format!(
        "{}/subscriptions/{}/providers/Microsoft.Compute/locations/{location}/{kind}/{id}?api-version=2023-07-01",
        s.base,
        crate::SUBSCRIPTION
    )
}

/// The subnet.
pub(crate) fn subnet(s: &State, rg: &str, vnet: &str, subnet: &str) -> Reply {
    let k = format!(
        "{}/{}/{}",
        rg.to_ascii_lowercase(),
        vnet.to_ascii_lowercase(),
        subnet.to_ascii_lowercase()
    );
    if !s.subnets.contains(&k) {
        return arm_error(404, "NotFound", &format!("Resource /subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/{vnet}/subnets/{subnet} not found.", crate::SUBSCRIPTION));
    }
    Reply::json(
        200,
        json!({
            "id": format!("/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/{vnet}/subnets/{subnet}", crate::SUBSCRIPTION),
            "name": subnet,
            "properties": {"addressPrefix": "10.250.0.0/16", "provisioningState": "Succeeded"}
        }),
    )
}

/// A marketplace image version (with a plan for the publishers that have one).
pub(crate) fn image(s: &State, loc: &str, p: &str, o: &str, sku: &str, v: &str) -> Reply {
    let mut body = json!({
        "id": format!("/Subscriptions/{}/Providers/Microsoft.Compute/Locations/{loc}/Publishers/{p}/ArtifactTypes/VMImage/Offers/{o}/Skus/{sku}/Versions/{v}", crate::SUBSCRIPTION),
        "name": v,
        "location": loc,
        "properties": {"osImage": {"operatingSystem": "Linux"}}
    });
    if s.plan_publishers.contains(&p.to_ascii_lowercase()) {
        body["properties"]["plan"] = json!({"publisher": p, "name": sku, "product": o});
    }
    Reply::json(200, body)
}

/// Marketplace terms: GET (unaccepted until a PUT accepts them) and PUT.
pub(crate) fn agreement(
    s: &mut State,
    method: &str,
    p: &str,
    o: &str,
    plan: &str,
    body: &Value,
) -> Reply {
    if !s.plan_publishers.contains(&p.to_ascii_lowercase()) {
        return arm_error(404, "NotFound", "no such offer");
    }
    let k = format!("{p}/{o}/{plan}").to_ascii_lowercase();
    if method == "PUT" {
        let accepted = body["properties"]["accepted"].as_bool().unwrap_or(false);
        s.agreements.insert(k.clone(), accepted);
    }
    let accepted = s.agreements.get(&k).copied().unwrap_or(false);
    Reply::json(
        200,
        json!({"name": "current", "type": "Microsoft.MarketplaceOrdering/offertypes",
               "properties": {"publisher": p, "product": o, "plan": plan, "accepted": accepted}}),
    )
}

/// The driver's one Resource Graph query: the resource group and the two tag
/// keys are read from its `where` clauses.
pub(crate) fn graph(s: &State, body: &Value) -> Reply {
    if !s.graph_enabled {
        return arm_error(
            404,
            "InvalidResourceType",
            "Resource Graph is not available",
        );
    }
    let query = body["query"].as_str().unwrap_or_default();
    let quoted_after = |marker: &str| -> Vec<String> {
        query
            .match_indices(marker)
            .filter_map(|(i, _)| {
                let rest = &query[i + marker.len()..];
                rest.find('\'').map(|end| rest[..end].to_string())
            })
            .collect()
    };
    let rgs = quoted_after("resourceGroup =~ '");
    let keys = quoted_after("tagKeys has '");
    let (Some(rg), [k1, k2]) = (rgs.first(), keys.as_slice()) else {
        return arm_error(
            400,
            "BadRequest",
            "the fake understands only the driver's query",
        );
    };
    let mut rows = Vec::new();
    for (kind, ty) in [
        ("virtualmachines", "microsoft.compute/virtualmachines"),
        ("networkinterfaces", "microsoft.network/networkinterfaces"),
        ("disks", "microsoft.compute/disks"),
    ] {
        for (name, v) in s.resources_of(kind, rg) {
            let tags = v["tags"].as_object();
            if tags.is_some_and(|t| t.contains_key(k1) && t.contains_key(k2)) {
                rows.push(json!({"type": ty, "name": name, "id": v["id"], "location": v["location"], "tags": v["tags"]}));
            }
        }
    }
    let offset: usize = body["options"]["$skipToken"]
        .as_str()
        .and_then(|t| t.strip_prefix("offset-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let total = rows.len();
    let page: Vec<Value> = rows
        .into_iter()
        .skip(offset)
        .take(s.graph_page_size)
        .collect();
    let mut out = json!({"totalRecords": total, "count": page.len(), "resultTruncated": "false",
                         "facets": [], "data": page});
    if offset + s.graph_page_size < total {
        out["$skipToken"] = json!(format!("offset-{}", offset + s.graph_page_size));
    }
    Reply::json(200, out)
}

/// GET / PUT / PATCH / DELETE of a VM, NIC or disk.
pub(crate) fn resource(
    s: &mut State,
    method: &str,
    kind: &str,
    rg: &str,
    name: &str,
    body: Value,
    failure: Option<(String, String)>,
) -> Reply {
    if !matches!(kind, "virtualmachines" | "networkinterfaces" | "disks") {
        return arm_error(
            404,
            "InvalidResourceType",
            &format!("the fake has no {kind}"),
        );
    }
    let not_found = || {
        arm_error(
            404,
            "ResourceNotFound",
            &format!("The Resource '{kind}/{name}' under resource group '{rg}' was not found."),
        )
    };
    match method {
        "GET" => match s.get(kind, rg, name) {
            Some(v) => Reply::json(200, v.clone()),
            None => not_found(),
        },
        "PUT" => match kind {
            "virtualmachines" => put_vm(s, rg, name, body, failure),
            "networkinterfaces" => put_nic(s, rg, name, body, failure),
            _ => put_disk(s, rg, name, body, failure),
        },
        "PATCH" => patch(s, kind, rg, name, &body, failure),
        "DELETE" => {
            let Some(v) = s.get(kind, rg, name).cloned() else {
                return Reply::empty(204);
            };
            if kind == "networkinterfaces" && v["properties"].get("virtualMachine").is_some() {
                return arm_error(
                    400,
                    "NicInUse",
                    &format!(
                        "Network Interface {} is used by existing resource {}.",
                        v["id"].as_str().unwrap_or_default(),
                        v["properties"]["virtualMachine"]["id"]
                            .as_str()
                            .unwrap_or_default()
                    ),
                );
            }
            if kind == "disks" && v.get("managedBy").is_some() {
                return arm_error(
                    409,
                    "OperationNotAllowed",
                    &format!(
                        "Disk {name} is attached to VM {}.",
                        v["managedBy"].as_str().unwrap_or_default()
                    ),
                );
            }
            if let Some(v) = s.get_mut(kind, rg, name) {
                v["properties"]["provisioningState"] = json!("Deleting");
            }
            let loc = v["location"].as_str().unwrap_or("x").to_string();
            let id = s.start_op(
                failure,
                Finish::Removed(kind.into(), rg.into(), name.into()),
            );
            let reply = Reply::empty(202);
            if kind == "networkinterfaces" {
                let url = op_url(s, &loc, "operations", &id);
                reply.header("azure-asyncoperation", url)
            } else {
                let url = op_url(s, &loc, "operationResults", &id);
                reply
                    .header("location", url)
                    .header("retry-after", "0".into())
            }
        }
        _ => arm_error(
            405,
            "MethodNotAllowed",
            &format!("{method} is not supported on {kind}"),
        ),
    }
}

/// ARM's tag limits: names of at most 512 characters without `<>%&\?/`,
/// values of at most 256 (`InvalidTagNameCharacters`,
/// `InvalidTagNameLength`, `InvalidTagValueLength`).
fn check_tags(tags: &Value) -> Result<(), Reply> {
    let Some(map) = tags.as_object() else {
        return Err(arm_error(
            400,
            "InvalidRequestContent",
            "The request content was invalid: 'tags' must be an object.",
        ));
    };
    for (k, v) in map {
        if k.chars().any(|c| "<>%&\\?/".contains(c) || c.is_control()) {
            return Err(arm_error(
                400,
                "InvalidTagNameCharacters",
                &format!("The tag names '{k}' have reserved characters '<,>,%,&,\\,?,/' or control characters."),
            ));
        }
        if k.chars().count() > 512 {
            return Err(arm_error(
                400,
                "InvalidTagNameLength",
                &format!("The tag name '{k}' exceeds the maximum length of '512' characters."),
            ));
        }
        let value = v.as_str().unwrap_or_default();
        if value.chars().count() > 256 {
            return Err(arm_error(
                400,
                "InvalidTagValueLength",
                &format!("The tag value '{value}' exceeds the maximum length of '256' characters."),
            ));
        }
    }
    Ok(())
}

/// PATCH of a VM (`VirtualMachines_Update`: delete options, tags; 200 with
/// `Azure-AsyncOperation`), a NIC (`NetworkInterfaces_UpdateTags`: tags; 200,
/// synchronous) or a disk (`Disks_Update`: tags; 202 with `Location`). Tags
/// in the body replace the resource's; a long-running operation that is to
/// fail leaves them as they were.
fn patch(
    s: &mut State,
    kind: &str,
    rg: &str,
    name: &str,
    body: &Value,
    failure: Option<(String, String)>,
) -> Reply {
    let tags = body.get("tags");
    if let Some(t) = tags {
        if let Err(r) = check_tags(t) {
            return r;
        }
    }
    if kind == "networkinterfaces" {
        if let Some((code, message)) = &failure {
            return arm_error(500, code, message);
        }
    }
    let Some(res) = s.get_mut(kind, rg, name) else {
        return arm_error(
            404,
            "ResourceNotFound",
            &format!("The Resource '{kind}/{name}' under resource group '{rg}' was not found."),
        );
    };
    if kind == "virtualmachines" {
        patch_delete_options(res, body);
    }
    if let (Some(t), None) = (tags, &failure) {
        res["tags"] = t.clone();
    }
    let out = res.clone();
    let loc = out["location"].as_str().unwrap_or("x").to_string();
    match kind {
        "virtualmachines" => {
            let id = s.start_op(failure, Finish::Nothing);
            let url = op_url(s, &loc, "operations", &id);
            Reply::json(200, out).header("azure-asyncoperation", url)
        }
        "networkinterfaces" => Reply::json(200, out),
        _ => {
            let id = s.start_op(failure, Finish::Nothing);
            let url = op_url(s, &loc, "operationResults", &id);
            Reply::json(202, out)
                .header("location", url)
                .header("retry-after", "0".into())
        }
    }
}

fn patch_delete_options(vm: &mut Value, patch: &Value) {
    let pp = &patch["properties"];
    if let Some(o) = pp["storageProfile"]["osDisk"]["deleteOption"].as_str() {
        vm["properties"]["storageProfile"]["osDisk"]["deleteOption"] = json!(o);
    }
    for d in pp["storageProfile"]["dataDisks"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(disks) = vm["properties"]["storageProfile"]["dataDisks"].as_array_mut() {
            for have in disks.iter_mut().filter(|h| h["lun"] == d["lun"]) {
                have["deleteOption"] = d["deleteOption"].clone();
            }
        }
    }
    for n in pp["networkProfile"]["networkInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(nics) = vm["properties"]["networkProfile"]["networkInterfaces"].as_array_mut() {
            for have in nics.iter_mut().filter(|h| h["id"] == n["id"]) {
                have["properties"]["deleteOption"] = n["properties"]["deleteOption"].clone();
            }
        }
    }
}

fn put_vm(
    s: &mut State,
    rg: &str,
    name: &str,
    mut body: Value,
    failure: Option<(String, String)>,
) -> Reply {
    if let Err(r) = crate::checks::vm_put(&body) {
        return crate::server::refused(r);
    }
    let location = body["location"].as_str().unwrap_or_default().to_string();
    if location.is_empty() {
        return arm_error(
            400,
            "LocationRequired",
            "The location property is required for this definition.",
        );
    }
    let vm_id = s.id(rg, "Microsoft.Compute", "virtualMachines", name);
    let nics: Vec<String> = body["properties"]["networkProfile"]["networkInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| last(n["id"].as_str().unwrap_or_default()).to_string())
        .collect();
    for nic in &nics {
        match s.get("networkinterfaces", rg, nic) {
            None => {
                return arm_error(
                    400,
                    "InvalidParameter",
                    &format!("Network interface {nic} was not found."),
                )
            }
            Some(n) => {
                let used_by = n["properties"]["virtualMachine"]["id"].as_str();
                if used_by.is_some_and(|u| !u.eq_ignore_ascii_case(&vm_id)) {
                    return arm_error(
                        400,
                        "NicInUse",
                        &format!("Network interface {nic} is used by another VM."),
                    );
                }
            }
        }
    }
    if let Some(aset) = body["properties"]["availabilitySet"]["id"].as_str() {
        let parts: Vec<&str> = aset.split('/').collect();
        let (set_rg, set_name) = (parts.get(4).copied().unwrap_or_default(), last(aset));
        if s.get("availabilitysets", set_rg, set_name).is_none() {
            return arm_error(
                404,
                "NotFound",
                &format!("Availability set {aset} was not found."),
            );
        }
        if body
            .get("zones")
            .is_some_and(|z| z.as_array().is_some_and(|a| !a.is_empty()))
        {
            return arm_error(
                400,
                "InvalidParameter",
                "An availability set cannot be combined with zones.",
            );
        }
    }
    let existing = s.get("virtualmachines", rg, name).cloned();
    let key = crate::state::key(rg, name);
    if let Some(cd) = body["properties"]["osProfile"]
        .as_object_mut()
        .and_then(|o| o.remove("customData"))
        .and_then(|v| v.as_str().map(str::to_string))
    {
        s.custom_data.insert(key, cd);
    }
    let tags = body["tags"].clone();
    let props = &mut body["properties"];
    props["vmId"] = existing
        .as_ref()
        .map(|e| e["properties"]["vmId"].clone())
        .unwrap_or_else(|| json!(format!("00000000-0000-4000-8000-{:012}", s.next_id)));
    props["provisioningState"] = json!(if existing.is_some() {
        "Updating"
    } else {
        "Creating"
    });
    props["timeCreated"] = json!(TIME);
    // The OS disk and the empty data disks come into being with the VM.
    let os_name = props["storageProfile"]["osDisk"]["name"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("{name}_OsDisk_1"));
    props["storageProfile"]["osDisk"]["name"] = json!(os_name);
    props["storageProfile"]["osDisk"]["osType"] = json!("Linux");
    let os_size = props["storageProfile"]["osDisk"]["diskSizeGB"]
        .as_i64()
        .unwrap_or(30);
    props["storageProfile"]["osDisk"]["diskSizeGB"] = json!(os_size);
    let os_sku = props["storageProfile"]["osDisk"]["managedDisk"]["storageAccountType"].clone();
    let mut disks = vec![(os_name.clone(), os_size, os_sku)];
    let os_id = s.id(rg, "Microsoft.Compute", "disks", &os_name);
    props["storageProfile"]["osDisk"]["managedDisk"]["id"] = json!(os_id);
    let mut attach = Vec::new();
    // ARM answers a VM without data disks with an empty list (indexing a
    // missing key mutably would write a null).
    if props["storageProfile"].get("dataDisks").is_none() {
        props["storageProfile"]["dataDisks"] = json!([]);
    }
    for d in props["storageProfile"]["dataDisks"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let dn = d["name"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{name}_disk{}", d["lun"]));
        d["name"] = json!(dn);
        d["toBeDetached"] = json!(false);
        if d["createOption"] == json!("Attach") {
            let id = d["managedDisk"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            attach.push(last(&id).to_string());
        } else {
            d["managedDisk"]["id"] = json!(s.id(rg, "Microsoft.Compute", "disks", &dn));
            disks.push((
                dn,
                d["diskSizeGB"].as_i64().unwrap_or(1),
                d["managedDisk"]["storageAccountType"].clone(),
            ));
        }
    }
    for a in &attach {
        if s.get("disks", rg, a).is_none() {
            return arm_error(404, "NotFound", &format!("Disk {a} was not found."));
        }
    }
    for (dn, size, sku) in disks {
        if s.get("disks", rg, &dn).is_none() {
            let id = s.id(rg, "Microsoft.Compute", "disks", &dn);
            s.insert("disks", rg, &dn, json!({
                "id": id, "name": dn, "type": "Microsoft.Compute/disks", "location": location,
                "managedBy": vm_id, "sku": {"name": sku},
                "properties": {"diskSizeGB": size, "osType": "Linux", "creationData": {"createOption": "FromImage"},
                               "provisioningState": "Succeeded", "timeCreated": TIME, "diskState": "Attached"}
            }));
        }
    }
    for a in &attach {
        if let Some(d) = s.get_mut("disks", rg, a) {
            d["managedBy"] = json!(vm_id);
        }
    }
    for nic in &nics {
        if let Some(n) = s.get_mut("networkinterfaces", rg, nic) {
            n["properties"]["virtualMachine"] = json!({"id": vm_id});
        }
    }
    body["id"] = json!(vm_id);
    body["name"] = json!(name);
    body["type"] = json!("Microsoft.Compute/virtualMachines");
    body["tags"] = if tags.is_null() { json!({}) } else { tags };
    s.insert("virtualmachines", rg, name, body.clone());
    let id = s.start_op(
        failure,
        Finish::Provisioned("virtualmachines".into(), rg.into(), name.into()),
    );
    let url = op_url(s, &location, "operations", &id);
    Reply::json(if existing.is_some() { 200 } else { 201 }, body)
        .header("azure-asyncoperation", url)
}

fn put_nic(
    s: &mut State,
    rg: &str,
    name: &str,
    mut body: Value,
    failure: Option<(String, String)>,
) -> Reply {
    if let Err(r) = crate::checks::nic_put(&body) {
        return crate::server::refused(r);
    }
    let location = body["location"].as_str().unwrap_or_default().to_string();
    let existing = s.get("networkinterfaces", rg, name).cloned();
    let nic_id = s.id(rg, "Microsoft.Network", "networkInterfaces", name);
    let n = s.next_id;
    for (i, c) in body["properties"]["ipConfigurations"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let subnet_id = c["properties"]["subnet"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let parts: Vec<&str> = subnet_id.split('/').collect();
        let known = parts.len() >= 11
            && s.subnets
                .contains(&format!("{}/{}/{}", parts[4], parts[8], parts[10]).to_ascii_lowercase());
        if !known {
            return arm_error(
                400,
                "InvalidResourceReference",
                &format!("Resource {subnet_id} referenced by resource {nic_id} was not found."),
            );
        }
        let cname = c["name"].as_str().unwrap_or("ipconfig1").to_string();
        c["id"] = json!(format!("{nic_id}/ipConfigurations/{cname}"));
        let p = &mut c["properties"];
        p["provisioningState"] = json!("Succeeded");
        p["privateIPAddress"] = json!(format!("10.250.{}.{}", (n / 250) % 250, n % 250 + 4));
        if p["privateIPAllocationMethod"].is_null() {
            p["privateIPAllocationMethod"] = json!("Dynamic");
        }
        p["primary"] = json!(i == 0);
        p["privateIPAddressVersion"] = json!("IPv4");
    }
    s.next_id += 1;
    let props = &mut body["properties"];
    props["provisioningState"] = json!("Succeeded");
    props["dnsSettings"] = json!({"dnsServers": [], "appliedDnsServers": []});
    for (k, d) in [
        ("enableAcceleratedNetworking", false),
        ("enableIPForwarding", false),
        ("vnetEncryptionSupported", false),
    ] {
        if props[k].is_null() {
            props[k] = json!(d);
        }
    }
    if let Some(vm) = existing
        .as_ref()
        .and_then(|e| e["properties"].get("virtualMachine"))
    {
        props["virtualMachine"] = vm.clone();
    }
    body["id"] = json!(nic_id);
    body["name"] = json!(name);
    body["type"] = json!("Microsoft.Network/networkInterfaces");
    s.insert("networkinterfaces", rg, name, body.clone());
    let id = s.start_op(
        failure,
        Finish::Provisioned("networkinterfaces".into(), rg.into(), name.into()),
    );
    let url = op_url(s, &location, "operations", &id);
    Reply::json(if existing.is_some() { 200 } else { 201 }, body)
        .header("azure-asyncoperation", url)
}

fn put_disk(
    s: &mut State,
    rg: &str,
    name: &str,
    mut body: Value,
    failure: Option<(String, String)>,
) -> Reply {
    if let Err(r) = crate::checks::disk_put(&body) {
        return crate::server::refused(r);
    }
    let location = body["location"].as_str().unwrap_or_default().to_string();
    body["id"] = json!(s.id(rg, "Microsoft.Compute", "disks", name));
    body["name"] = json!(name);
    body["type"] = json!("Microsoft.Compute/disks");
    body["properties"]["provisioningState"] = json!("Updating");
    body["properties"]["timeCreated"] = json!(TIME);
    body["properties"]["diskState"] = json!("Unattached");
    s.insert("disks", rg, name, body.clone());
    let id = s.start_op(
        failure,
        Finish::Provisioned("disks".into(), rg.into(), name.into()),
    );
    let url = op_url(s, &location, "operations", &id);
    Reply::json(202, body).header("azure-asyncoperation", url)
}
