//! The reference's cloud API series for ARM: [`super::Arm::call`] reports
//! every HTTP call (each 429 retry too) to the driver's [`CloudApi`] with
//! provider `azure` and the reference's service label for the resource and
//! method ([`service_label`]).

use super::calls::kind_of;
use mcm_driver::cloud_api::CloudApi;
use std::time::Instant;

/// The reference's `provider` label.
pub const PROVIDER: &str = "azure";

/// The reference's service label of an ARM call (`virtual_machine_get`,
/// `nic_create`, `resource_graph_query`, ...; `<kind>_<method>` for calls
/// the reference does not label, such as operation polls).
pub fn service_label(method: &reqwest::Method, url: &str) -> String {
    let kind = kind_of(url);
    let kind = kind.trim_end_matches(" (list)");
    let m = method.as_str();
    let known = match (kind, m) {
        ("virtualMachines", "GET") => "virtual_machine_get",
        ("virtualMachines", "PUT") => "virtual_machine_create",
        ("virtualMachines", "PATCH") => "virtual_machine_update",
        ("virtualMachines", "DELETE") => "virtual_machine_delete",
        ("networkInterfaces", "GET") => "nic_get",
        ("networkInterfaces", "PUT") => "nic_create",
        ("networkInterfaces", "DELETE") => "nic_delete",
        ("disks", "PUT") => "disk_create",
        ("disks", "DELETE") => "disk_delete",
        ("resources", _) => "resource_graph_query",
        ("resourcegroups" | "resourceGroups", _) => "resource_group_exists",
        ("subnets", "GET") => "subnet_get",
        ("versions", "GET") => "virtual_machine_image_get",
        ("agreements", "GET") => "market_place_agreement_get",
        ("agreements", "PUT") => "market_place_agreement_create",
        _ => "",
    };
    if known.is_empty() {
        mcm_driver::cloud_api::snake_case(&format!("{kind}_{}", m.to_ascii_lowercase()))
    } else {
        known.to_string()
    }
}

/// Reports one call that started at `started` to `api`.
pub fn record(api: &CloudApi, method: &reqwest::Method, url: &str, started: Instant, ok: bool) {
    api.record(PROVIDER, &service_label(method, url), started.elapsed(), ok);
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::Method;

    #[test]
    fn arm_calls_get_the_references_service_labels() {
        let sub = "https://management.azure.com/subscriptions/s";
        let cases = [
            (Method::GET, format!("{sub}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm?api-version=1"), "virtual_machine_get"),
            (Method::PUT, format!("{sub}/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic?api-version=1"), "nic_create"),
            (Method::DELETE, format!("{sub}/resourceGroups/rg/providers/Microsoft.Compute/disks/d?api-version=1"), "disk_delete"),
            (Method::HEAD, format!("{sub}/resourcegroups/rg?api-version=1"), "resource_group_exists"),
            (Method::POST, "https://management.azure.com/providers/Microsoft.ResourceGraph/resources?api-version=1".to_string(), "resource_graph_query"),
            (Method::GET, format!("{sub}/providers/Microsoft.Compute/locations/w/operations/abc?api-version=1"), "operations_get"),
        ];
        for (method, url, want) in cases {
            assert_eq!(service_label(&method, &url), want, "{method} {url}");
        }
    }
}
