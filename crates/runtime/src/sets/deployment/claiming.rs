//! Claiming MachineSets for a deployment (design: sets-and-deployments.md,
//! "Claiming").

use super::*;

/// Claims the MachineSets of the cache for this deployment (design:
/// sets-and-deployments.md, "Claiming").
pub(super) async fn claim_sets(
    ctx: &Ctx,
    d: &MachineDeployment,
    deleting: bool,
) -> Result<Vec<Arc<MachineSet>>, Error> {
    let uid = d.uid().unwrap_or_default();
    let selector = d.spec.selector.clone().unwrap_or_default();
    let claimer = Claimer {
        uid: &uid,
        deleting,
    };
    let api = ctx.machine_sets();
    let mut claimed = Vec::new();
    let mut rechecked = false;
    let mut first_error: Option<Error> = None;
    for s in ctx.caches.sets.state() {
        let labels = s.metadata.labels.clone().unwrap_or_default();
        // A machineset of ours that stopped matching only on a label the
        // controllers write is kept, never released and replaced (design:
        // sets-and-deployments.md, "Labels the controllers own").
        let selected = selection(&selector, &labels);
        if selected == Selection::SelectedButForControllerLabels {
            debug!(machineset = %s.name_any(), "selected but for a label the controllers own");
        }
        match claim(
            claimer,
            controller_ref(&s.metadata).as_ref(),
            selected,
            s.metadata.deletion_timestamp.is_some(),
        ) {
            ClaimAction::Keep => claimed.push(s),
            ClaimAction::Ignore => {}
            ClaimAction::Adopt => {
                if !rechecked {
                    let fresh = ctx.machine_deployments().get_opt(&d.name_any()).await?;
                    if !fresh.is_some_and(|f| {
                        f.uid() == d.uid() && f.meta().deletion_timestamp.is_none()
                    }) {
                        return Err(Error::OwnerChanged(d.name_any()));
                    }
                    rechecked = true;
                }
                match adopt(&api, &*s, d).await {
                    Ok(updated) => {
                        info!(machineset = %s.name_any(), "adopted MachineSet");
                        claimed.push(Arc::new(updated));
                    }
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => {
                        first_error.get_or_insert(e.into());
                    }
                }
            }
            ClaimAction::Release => match release(&api, &*s, &uid).await {
                Ok(()) => {
                    info!(machineset = %s.name_any(), "released MachineSet that no longer matches the selector")
                }
                Err(e) => {
                    first_error.get_or_insert(e.into());
                }
            },
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(claimed),
    }
}
