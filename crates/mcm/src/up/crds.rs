//! Installing the CRDs for `mcm up` (the shipped binary does not link the
//! test support, which has its own copy for tests: mcm-testenv).

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::Client;
use std::time::Duration;

/// How long one CRD may take to be established.
const ESTABLISHED_WITHIN: Duration = Duration::from_secs(30);

/// Applies mcm-api's CRDs (server-side apply, field manager `mcm-up`) and
/// returns once the API server serves every one of them.
pub async fn install(client: &Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds = mcm_api::crds();
    let apply = PatchParams::apply("mcm-up").force();
    for crd in &crds {
        let name = crd.metadata.name.as_deref().unwrap_or_default();
        api.patch(name, &apply, &Patch::Apply(crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
    }
    for crd in &crds {
        let name = crd.metadata.name.as_deref().unwrap_or_default();
        let established = await_condition(api.clone(), name, conditions::is_crd_established());
        tokio::time::timeout(ESTABLISHED_WITHIN, established)
            .await
            .with_context(|| format!("CRD {name} not established within {ESTABLISHED_WITHIN:?}"))?
            .with_context(|| format!("watching CRD {name}"))?;
    }
    Ok(())
}
