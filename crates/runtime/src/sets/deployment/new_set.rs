//! The new MachineSet: refreshing it and creating it (design:
//! sets-and-deployments.md, "New and old MachineSets").

use super::*;

impl Pass<'_> {
    /// Refreshes the existing new set (design: sets-and-deployments.md, "New and
    /// old MachineSets").
    pub(super) async fn sync_new_set(&mut self) -> Result<(), Error> {
        let Some(n) = self.part.new else {
            return Ok(());
        };
        let s = self.sets[n].clone();
        let new_revision = next_revision(self.part.old.iter().map(|&i| &self.views[i]));
        let annotations = new_set_annotations(
            self.d.annotations(),
            s.annotations(),
            new_revision,
            true,
            0,
            0,
        );
        let dt = &self.d.spec.template.spec;
        let mut upd = (*s).clone();
        let mut changed = Vec::new();
        if &annotations != s.annotations() {
            upd.metadata.annotations = Some(annotations);
            changed.push("annotations");
        }
        let same_node_template = normalize(&serde_json::to_value(&dt.node_template)?)
            == normalize(&serde_json::to_value(
                &upd.spec.template.spec.node_template,
            )?);
        if !same_node_template {
            upd.spec.template.spec.node_template = dt.node_template.clone();
            changed.push("nodeTemplate");
        }
        if dt.configuration != upd.spec.template.spec.configuration {
            upd.spec.template.spec.configuration = dt.configuration.clone();
            changed.push("machineConfiguration");
        }
        if dt.class.kind != upd.spec.template.spec.class.kind {
            upd.spec.template.spec.class.kind = dt.class.kind.clone();
            changed.push("class.kind");
        }
        if self.d.spec.min_ready_seconds != upd.spec.min_ready_seconds {
            upd.spec.min_ready_seconds = self.d.spec.min_ready_seconds;
            changed.push("minReadySeconds");
        }
        if self.d.spec.auto_preserve_failed_machine_max != upd.spec.auto_preserve_failed_machine_max
        {
            upd.spec.auto_preserve_failed_machine_max =
                self.d.spec.auto_preserve_failed_machine_max;
            changed.push("autoPreserveFailedMachineMax");
        }
        if !changed.is_empty() {
            let updated = self
                .ctx
                .machine_sets()
                .replace(&s.name_any(), &PostParams::default(), &upd)
                .await?;
            info!(machineset = %s.name_any(), changed = ?changed, "updated new MachineSet");
            self.views[n] = SetView::from_set(&updated);
            self.sets[n] = Arc::new(updated);
            return Ok(());
        }
        let set_revision = s
            .annotations()
            .get(c::REVISION_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if !set_revision.is_empty()
            && self.d.annotations().get(c::REVISION_ANNOTATION) != Some(&set_revision)
        {
            self.update(|d| {
                d.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(c::REVISION_ANNOTATION.into(), set_revision.clone());
            })
            .await?;
        }
        let mut st = self.status();
        if plan::get_condition(&st.conditions, &MachineDeploymentConditionType::Progressing)
            .is_none()
        {
            set_condition(
                &mut st.conditions,
                plan::new_set_condition(&s.name_any(), plan::NewSet::Found, self.now),
            );
            self.write_status(st).await?;
        }
        Ok(())
    }

    /// Creates the new MachineSet (design: sets-and-deployments.md, "New and old
    /// MachineSets"); answers the created set's name.
    pub(super) async fn create_new_set(&mut self) -> Result<(), Error> {
        let st = self.status();
        let hash = template_hash(&self.d.spec.template, st.collision_count);
        let hash_value = hash.to_string();
        let name = new_set_name(&self.name(), hash);
        let mut template = self.d.spec.template.clone();
        template
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(c::TEMPLATE_HASH_LABEL.into(), hash_value.clone());
        let mut selector = self.d.spec.selector.clone().unwrap_or_default();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(c::TEMPLATE_HASH_LABEL.into(), hash_value.clone());
        let new_revision = next_revision(&self.views);
        let probe = SetView {
            name: name.clone(),
            ..Default::default()
        };
        let mut all = self.views.clone();
        all.push(probe.clone());
        let replicas = new_set_replicas(&self.strategy, self.replicas(), &all, &probe);
        let max = self.replicas().saturating_add(self.strategy.max_surge());
        let annotations = new_set_annotations(
            self.d.annotations(),
            &BTreeMap::new(),
            new_revision,
            false,
            self.replicas(),
            max,
        );
        let ms = MachineSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.ctx.config.namespace.clone()),
                labels: template.metadata.labels.clone(),
                annotations: Some(annotations),
                owner_references: Some(vec![owner_reference(&self.d)]),
                ..Default::default()
            },
            spec: MachineSetSpec {
                replicas,
                selector: Some(selector),
                min_ready_seconds: self.d.spec.min_ready_seconds,
                auto_preserve_failed_machine_max: self.d.spec.auto_preserve_failed_machine_max,
                template,
                ..Default::default()
            },
            status: None,
        };
        match self
            .ctx
            .machine_sets()
            .create(&PostParams::default(), &ms)
            .await
        {
            Ok(created) => {
                info!(machineset = %name, replicas, revision = new_revision, "created new MachineSet");
                if replicas > 0 {
                    self.event(
                        EventType::Normal,
                        "ScalingMachineSet",
                        format!("Scaled up machine set {name} to {replicas}"),
                    )
                    .await;
                }
                let revision = new_revision.to_string();
                if self.d.annotations().get(c::REVISION_ANNOTATION) != Some(&revision) {
                    self.update(|d| {
                        d.metadata
                            .annotations
                            .get_or_insert_with(BTreeMap::new)
                            .insert(c::REVISION_ANNOTATION.into(), revision.clone());
                    })
                    .await?;
                }
                let mut st = self.status();
                set_condition(
                    &mut st.conditions,
                    plan::new_set_condition(&created.name_any(), plan::NewSet::Created, self.now),
                );
                self.write_status(st).await?;
                Ok(())
            }
            Err(e) if is_conflict(&e) => {
                // AlreadyExists: ours (a cache that lags) or a hash collision.
                let existing = self.ctx.machine_sets().get_opt(&name).await?;
                let ours = existing.as_ref().is_some_and(|s| {
                    controller_ref(&s.metadata).is_some_and(|c| Some(c.uid) == self.d.uid())
                        && plan::equal_ignore_hash(&s.spec.template, &self.d.spec.template)
                });
                if ours {
                    return Ok(());
                }
                let mut st = self.status();
                st.collision_count = Some(st.collision_count.unwrap_or(0).saturating_add(1));
                warn!(machineset = %name, collision_count = ?st.collision_count, "hash collision for the new MachineSet");
                self.write_status(st).await?;
                Err(Error::Collision(name))
            }
            Err(e) => {
                let cond = plan::new_set_condition(
                    &name,
                    plan::NewSet::CreateFailed(&e.to_string()),
                    self.now,
                );
                let msg = cond.message.clone();
                let mut st = self.status();
                set_condition(&mut st.conditions, cond);
                let _ = self.write_status(st).await;
                self.event(EventType::Warning, c::FAILED_MACHINE_SET_CREATE_REASON, msg)
                    .await;
                Err(e.into())
            }
        }
    }
}
