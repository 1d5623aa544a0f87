//! Counts of ARM calls by method and resource kind (`PUT virtualMachines`,
//! `GET operations` for polls, `POST resources` for Resource Graph, ...).

use std::collections::BTreeMap;
use std::sync::Mutex;

/// ARM call counters of a driver.
#[derive(Debug, Default)]
pub struct ApiCalls {
    counts: Mutex<BTreeMap<String, u64>>,
}

const COLLECTIONS: [&str; 3] = ["virtualMachines", "networkInterfaces", "disks"];

/// The resource kind an ARM URL addresses.
pub fn kind_of(url: &str) -> String {
    let path = url.split('?').next().unwrap_or(url);
    let path = path
        .split("://")
        .nth(1)
        .map_or(path, |rest| rest.find('/').map_or("", |i| &rest[i..]));
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        [.., "Microsoft.ResourceGraph", "resources"] => "resources".to_string(),
        [.., last] if COLLECTIONS.contains(last) => format!("{last} (list)"),
        [.., kind, _] => kind.to_string(),
        _ => path.to_string(),
    }
}

impl ApiCalls {
    /// Counts one call.
    pub fn record(&self, method: &reqwest::Method, url: &str) {
        let key = format!("{method} {}", kind_of(url));
        let mut c = match self.counts.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *c.entry(key).or_default() += 1;
    }

    /// The counts so far.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        match self.counts.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// All calls so far.
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }

    /// Forgets the counts.
    pub fn reset(&self) {
        match self.counts.lock() {
            Ok(mut g) => g.clear(),
            Err(p) => p.into_inner().clear(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_counted_by_resource_kind() {
        let b = "https://management.azure.com/subscriptions/s";
        assert_eq!(
            kind_of(&format!("{b}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/m1?api-version=1")),
            "virtualMachines"
        );
        assert_eq!(
            kind_of(&format!(
                "{b}/resourceGroups/rg/providers/Microsoft.Compute/disks?api-version=1"
            )),
            "disks (list)"
        );
        assert_eq!(
            kind_of(&format!("{b}/resourcegroups/rg?api-version=1")),
            "resourcegroups"
        );
        assert_eq!(
            kind_of("https://management.azure.com/providers/Microsoft.ResourceGraph/resources?api-version=1"),
            "resources"
        );
        assert_eq!(
            kind_of(&format!(
                "{b}/providers/Microsoft.Compute/locations/x/operations/123"
            )),
            "operations"
        );
    }
}
