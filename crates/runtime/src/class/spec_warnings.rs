//! Warning Events about a MachineClass's providerSpec: what the class's
//! driver reports through [`mcm_driver::Driver::provider_spec_warnings`]
//! (e.g. a key accepted only in another spelling than its canonical one).
//!
//! The class controller reconciles a class on every change of one of its
//! machines, so the warnings are published only when they differ from the
//! ones last published for that class (by UID) in this process: a class
//! costs its Events once per change, not once per reconcile.

use crate::Context;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use mcm_api::MachineClass;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use tracing::warn;

/// The reason of the Events.
pub(crate) const REASON: &str = "ProviderSpecWarning";

/// How many classes the memory of published warnings holds before it starts afresh.
const REMEMBERED_CLASSES: usize = 4096;

/// Class UID → hash of the warnings last published for it, in the Context.
#[derive(Default)]
pub(crate) struct Published(Mutex<HashMap<String, u64>>);

/// Publishes the driver's warnings about the class's providerSpec as Warning
/// Events on the class, unless this process already published the same
/// warnings for it. Never fails: an Event that cannot be written is logged
/// and tried again on the next reconcile.
pub(crate) async fn report(ctx: &Context, class: &MachineClass) {
    if class.meta().deletion_timestamp.is_some() {
        return;
    }
    let Some(driver) = ctx.drivers.get(Some(class.provider.as_str())) else {
        return;
    };
    let warnings = driver.provider_spec_warnings(&class.provider_spec);
    let uid = class.uid().unwrap_or_default();
    let digest = {
        let mut h = DefaultHasher::new();
        warnings.hash(&mut h);
        h.finish()
    };
    let already = ctx
        .spec_warnings
        .0
        .lock()
        .ok()
        .and_then(|m| m.get(&uid).copied());
    if already == Some(digest) || (already.is_none() && warnings.is_empty()) {
        return;
    }
    let mut all_written = true;
    for w in &warnings {
        warn!(class = %class.name_any(), namespace = %class.namespace().unwrap_or_default(), warning = %w, "providerSpec warning");
        let written = ctx
            .recorder
            .note(
                class,
                EventType::Warning,
                REASON,
                w.clone(),
                "DecodeProviderSpec",
            )
            .await;
        all_written &= written;
    }
    if all_written {
        if let Ok(mut m) = ctx.spec_warnings.0.lock() {
            if m.len() >= REMEMBERED_CLASSES && !m.contains_key(&uid) {
                m.clear();
            }
            m.insert(uid, digest);
        }
    }
}
