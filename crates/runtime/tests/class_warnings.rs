//! The MachineClass controller publishes what a driver says about a class's
//! providerSpec (`Driver::provider_spec_warnings`) as Warning Events on the
//! class, once per change of the warnings, not once per reconcile; against
//! the real control plane.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use mcm_api::MachineClass;
use mcm_driver::*;
use mcm_runtime::{class, metrics::Metrics, Config, Context, DriverRegistry};
use mcm_testenv::must_eventually;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// A driver that warns about every providerSpec key starting with `old`.
struct WarningDriver;

#[async_trait]
impl Driver for WarningDriver {
    async fn create_machine(
        &self,
        _req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        Err(Status::unimplemented("test"))
    }

    async fn delete_machine(
        &self,
        _req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        Ok(DeleteMachineResponse::default())
    }

    async fn get_machine_status(
        &self,
        _req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        Err(Status::not_found("test"))
    }

    async fn list_machines(
        &self,
        _req: &ListMachinesRequest,
    ) -> DriverResult<ListMachinesResponse> {
        Ok(ListMachinesResponse::default())
    }

    fn provider_spec_warnings(&self, provider_spec: &serde_json::Value) -> Vec<String> {
        provider_spec
            .as_object()
            .map(|m| {
                m.keys()
                    .filter(|k| k.starts_with("old"))
                    .map(|k| format!("providerSpec.{k}: write the new key"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The ProviderSpecWarning Events on the class: (message, count).
async fn warnings(events: &Api<Event>, class: &str) -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = events
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("MachineClass")
                && e.involved_object.name.as_deref() == Some(class)
                && e.reason.as_deref() == Some("ProviderSpecWarning")
                && e.type_.as_deref() == Some("Warning")
        })
        .map(|e| (e.message.unwrap_or_default(), e.count.unwrap_or(1)))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn provider_spec_warnings_become_warning_events_on_the_class_once_per_change() {
    let Some(env) =
        crate::machine_common::namespace_with_secret("class-warnings", "#!/bin/sh").await
    else {
        return;
    };
    env.create_class("warned", "warning", "creds", json!({"oldKey": 1, "new": 2}))
        .await
        .expect("class");
    let mut drivers = DriverRegistry::new();
    drivers.register("warning", Arc::new(WarningDriver));
    let mut registry = prometheus_client::registry::Registry::default();
    let cfg = Config {
        namespace: env.namespace.clone(),
        ..Config::default()
    };
    let ctx = Context::new(
        env.client.clone(),
        None,
        cfg,
        drivers,
        Arc::new(Metrics::new(&mut registry)),
    );
    ctx.caches.secrets.start();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(class::run(ctx, async move {
        let _ = stopped.await;
    }));

    let events: Api<Event> = env.api();
    let first = must_eventually(
        Duration::from_secs(30),
        "a ProviderSpecWarning Event on the class",
        || async {
            let w = warnings(&events, "warned").await;
            (!w.is_empty()).then_some(w)
        },
    )
    .await;
    assert_eq!(
        first,
        vec![("providerSpec.oldKey: write the new key".to_string(), 1)]
    );

    // Reconciles without a change of the warnings publish nothing again:
    // checked below, once the change that follows was reconciled (the
    // controller works through one object's versions in order, so the
    // touches' reconciles are done by then).
    let classes: Api<MachineClass> = env.api();
    for i in 0..3 {
        classes
            .patch(
                "warned",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"touch": i.to_string()}}})),
            )
            .await
            .expect("touch the class");
    }
    // Changed warnings are published.
    classes
        .patch(
            "warned",
            &PatchParams::default(),
            &Patch::Merge(json!({"providerSpec": {"oldKey": null, "oldOther": 3}})),
        )
        .await
        .expect("change the spec");
    must_eventually(
        Duration::from_secs(30),
        "the new warning is published",
        || async {
            warnings(&events, "warned")
                .await
                .iter()
                .any(|(m, _)| m == "providerSpec.oldOther: write the new key")
                .then_some(())
        },
    )
    .await;
    let after = warnings(&events, "warned").await;
    assert!(
        after.contains(&first[0]),
        "no repeat of the unchanged warning after the touches: {after:?}"
    );
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
}
