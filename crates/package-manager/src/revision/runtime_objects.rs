//! A revision's runtime: rendered from its runtime config, applied when it
//! changed, its health read from the Deployment (and the pods' waiting
//! reasons), stopped when the revision is inactive or goes.

use super::*;

impl Revisions {
    /// The runtime config the revision's runtime is rendered from, and
    /// whether it came from a ControllerConfig (whose image wins).
    pub(super) async fn runtime_config(
        &self,
        r: &ProviderRevision,
    ) -> Result<(DeploymentRuntimeConfigSpec, bool), Error> {
        if !self.settings.enable_runtime_config
            && let Some(cc) = &r.spec.controller_config_ref
        {
            let api = Api::<ControllerConfig>::all(self.sk.client().clone());
            let found = api
                .get_opt(&cc.name)
                .await
                .map_err(|e| Error::Request("read a ControllerConfig", e))?;
            let Some(found) = found else {
                return Err(Error::RuntimeConfig(format!(
                    "ControllerConfig {} (spec.controllerConfigRef) does not exist; create it or remove the reference",
                    cc.name
                )));
            };
            return Ok((convert::spec_from_controller_config(&found.spec), true));
        }
        if self.settings.enable_runtime_config && r.spec.controller_config_ref.is_some() {
            self.warn_once(
                r,
                "ControllerConfigIgnored",
                "spec.controllerConfigRef is ignored: the package manager runs with --enable-runtime-config=true; convert it with `package-manager convert controllerconfig` and use spec.runtimeConfigRef",
            )
            .await;
        }
        let (kind, api_version, name) = match &r.spec.runtime_config_ref {
            Some(c) => (
                c.kind
                    .clone()
                    .unwrap_or_else(|| "DeploymentRuntimeConfig".into()),
                c.api_version
                    .clone()
                    .unwrap_or_else(|| "pkg.crossplane.io/v1beta1".into()),
                c.name.clone(),
            ),
            None => (
                "DeploymentRuntimeConfig".into(),
                "pkg.crossplane.io/v1beta1".into(),
                DEFAULT_RUNTIME_CONFIG.into(),
            ),
        };
        let group_ok = api_version.split('/').next() == Some("pkg.crossplane.io");
        if kind != "DeploymentRuntimeConfig" || !group_ok {
            return Err(Error::RuntimeConfig(format!(
                "spec.runtimeConfigRef names {api_version} {kind} {name}, which --package-runtime=Deployment cannot use; name a pkg.crossplane.io DeploymentRuntimeConfig"
            )));
        }
        let api = Api::<DeploymentRuntimeConfig>::all(self.sk.client().clone());
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| Error::Request("read a DeploymentRuntimeConfig", e))?;
        match found {
            Some(c) => Ok((c.spec, false)),
            None => Err(Error::RuntimeConfig(format!(
                "DeploymentRuntimeConfig {name} (spec.runtimeConfigRef) does not exist; create it or name another"
            ))),
        }
    }

    pub(super) async fn warn_once(&self, r: &ProviderRevision, reason: &str, note: &str) {
        let key = format!("{}/{reason}", r.name_any());
        if self.applied.get(&key).is_some() {
            return;
        }
        self.applied.insert(key, 0);
        self.sk
            .reporting
            .events
            .warning(&r.object_ref(&()), reason, note.to_owned())
            .await;
    }

    /// Renders and applies the runtime, then reports its health.
    pub(super) async fn run_runtime(
        &self,
        r: &ProviderRevision,
        config: Option<Result<(DeploymentRuntimeConfigSpec, bool), Error>>,
        tls: bool,
        webhooks: bool,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Action, Error> {
        let Some(image) = r.spec.image.as_deref() else {
            // A package of CRDs alone has nothing to run, and no runtime
            // is claimed healthy.
            self.stop_runtime(r).await?;
            status
                .conditions
                .retain(|c| c.type_ != TYPE_RUNTIME_HEALTHY);
            return Ok(Action::requeue(self.settings.resync));
        };
        let (config, config_image_wins) = match config {
            Some(c) => c?,
            None => self.runtime_config(r).await?,
        };
        let provider = r.labels().get(labels::PACKAGE).cloned().unwrap_or_default();
        let secrets: Vec<String> = r
            .spec
            .package_pull_secrets
            .iter()
            .map(|s| s.name.clone())
            .collect();
        let uid = r.uid().unwrap_or_default();
        let name = r.name_any();
        let provider_owner = provider_owner(r).and_then(|o| serde_json::to_value(o).ok());
        let (_, server_secret, client_secret) = crate::tls::secret_names(&provider);
        let common_labels = r.common_labels();
        let common_annotations = r.common_annotations();
        let input = render::Input {
            revision: &name,
            revision_uid: &uid,
            provider: &provider,
            namespace: &self.settings.namespace,
            image,
            pull_policy: r.spec.package_pull_policy.as_deref(),
            pull_secrets: &secrets,
            config: &config,
            config_image_wins,
            provider_owner: provider_owner.as_ref(),
            tls: tls.then_some((server_secret.as_str(), client_secret.as_str())),
            webhooks,
            common_labels: &common_labels,
            common_annotations: &common_annotations,
        };
        let mut rendered = render::render(&input).map_err(|e| Error::Render(e.to_string()))?;
        if !self.settings.allow_unrestricted_runtimes {
            let pod = rendered
                .deployment
                .pointer("/spec/template/spec")
                .unwrap_or(&serde_json::Value::Null);
            let mut broken =
                crate::podsecurity::violations(pod, "spec.deploymentTemplate.spec.template.spec");
            // A runtime never borrows the identity of a controller of this
            // control plane (the rbac-manager's may escalate and bind).
            let field = |f: &str| pod.get(f).and_then(serde_json::Value::as_str);
            let account =
                types::pod_service_account(field("serviceAccountName"), field("serviceAccount"));
            if let Some(why) = types::borrowed_identity(&account) {
                broken.push(format!(
                    "serviceAccountTemplate.metadata.name: a runtime may not run as ServiceAccount {}/{account} ({why})",
                    self.settings.namespace
                ));
            }
            if !broken.is_empty() {
                return Err(Error::RuntimeConfig(format!(
                    "the runtime config would make the runtime break the Pod Security Standard \"restricted\" or borrow a controller's identity: {}; change the runtime config, or start the package-manager with --allow-unrestricted-runtimes true",
                    broken.join("; ")
                )));
            }
        }
        // Only the Deployment is the revision's: the Service and the
        // ServiceAccount are the Provider's, the same across revisions.
        label(&mut rendered.deployment, &name);
        let hash = runtime_hash(&rendered);
        let deployment_name = rendered
            .deployment
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or(&name)
            .to_owned();
        let live = self
            .deployments
            .get(&ObjectRef::new(&deployment_name).within(&self.settings.namespace));
        if self.applied.get(&name) != Some(hash) || live.is_none() {
            self.apply_runtime(&rendered).await?;
            self.applied.insert(name.clone(), hash);
        }
        self.runtime_health(r, live.as_deref(), &deployment_name, status)
            .await
    }

    pub(super) async fn apply_runtime(&self, rendered: &render::Rendered) -> Result<(), Error> {
        let client = self.sk.client().clone();
        let ns = &self.settings.namespace;
        self.apply_one(
            &Api::<ServiceAccount>::namespaced(client.clone(), ns),
            &rendered.service_account,
            "apply the runtime's ServiceAccount",
        )
        .await?;
        self.apply_one(
            &Api::<Service>::namespaced(client.clone(), ns),
            &rendered.service,
            "apply the runtime's Service",
        )
        .await?;
        self.apply_one(
            &Api::<Deployment>::namespaced(client, ns),
            &rendered.deployment,
            "apply the runtime's Deployment",
        )
        .await
    }

    pub(super) async fn apply_one<K>(
        &self,
        api: &Api<K>,
        object: &serde_json::Value,
        what: &'static str,
    ) -> Result<(), Error>
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let name = object
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or_default();
        ssa::apply(api, name, object, &self.field_manager)
            .await
            .map_err(|e| Error::Request(what, e))?;
        Ok(())
    }

    /// RuntimeHealthy from the Deployment's Available condition, naming the
    /// pods' waiting reasons while it is not.
    pub(super) async fn runtime_health(
        &self,
        r: &ProviderRevision,
        live: Option<&Deployment>,
        deployment: &str,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Action, Error> {
        let available = crate::health::available(live);
        if crate::health::is_available(live) {
            set(status, TYPE_RUNTIME_HEALTHY, true, "HealthyRuntime", None);
            return Ok(Action::requeue(self.settings.resync));
        }
        let pods = Api::<Pod>::namespaced(self.sk.client().clone(), &self.settings.namespace)
            .list(&ListParams::default().labels(&format!("{}={}", labels::REVISION, r.name_any())))
            .await
            .map_err(|e| Error::Request("list the runtime's pods", e))?;
        let reasons = crate::health::waiting_reasons(&pods.items);
        let mut message = format!(
            "Deployment {}/{deployment} is not available",
            self.settings.namespace
        );
        if let Some(m) = available.and_then(|c| c.message.as_ref()) {
            message.push_str(&format!(": {m}"));
        }
        if !reasons.is_empty() {
            message.push_str(&format!("; {}", reasons.join("; ")));
        }
        // Pods are not watched: look again soon while the picture changes,
        // and seldom once it stays the same (an image that cannot be pulled
        // stays so until someone acts, which the watches see).
        let unchanged = r
            .status
            .as_ref()
            .and_then(|s| conditions::get(&s.conditions, TYPE_RUNTIME_HEALTHY))
            .is_some_and(|c| c.message.as_deref() == Some(message.as_str()));
        set(
            status,
            TYPE_RUNTIME_HEALTHY,
            false,
            "UnhealthyRuntime",
            Some(message),
        );
        Ok(Action::requeue(if unchanged {
            STEADY_POLL
        } else {
            WAIT_POLL
        }))
    }

    /// Deletes the revision's runtime Deployment (the Service and
    /// ServiceAccount are the Provider's and stay for the next revision).
    pub(super) async fn stop_runtime(&self, r: &ProviderRevision) -> Result<(), Error> {
        let selector = format!("{}={}", labels::REVISION, r.name_any());
        let running = self
            .deployments
            .state()
            .iter()
            .any(|d| d.labels().get(labels::REVISION) == Some(&r.name_any()));
        if !running && self.applied.get(&r.name_any()).is_none() {
            return Ok(());
        }
        let client = self.sk.client().clone();
        let ns = &self.settings.namespace;
        let lp = ListParams::default().labels(&selector);
        let dp = DeleteParams::background();
        Api::<Deployment>::namespaced(client, ns)
            .delete_collection(&dp, &lp)
            .await
            .map_err(|e| Error::Request("delete the runtime's Deployment", e))?;
        self.applied.remove(&r.name_any());
        Ok(())
    }
}

/// The revision's Provider as the controller of what outlives a revision
/// (certificates, Service, ServiceAccount). Not blocking the Provider's
/// deletion: they go after it.
pub(super) fn provider_owner(r: &ProviderRevision) -> Option<OwnerReference> {
    r.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "Provider")
        .cloned()
        .map(|mut o| {
            o.block_owner_deletion = None;
            o
        })
}

/// Adds the revision label to an object the revision owns.
pub(super) fn label(object: &mut serde_json::Value, revision: &str) {
    let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) else {
        return;
    };
    let labels = meta
        .entry("labels")
        .or_insert_with(|| serde_json::json!({}));
    if let Some(l) = labels.as_object_mut() {
        l.insert(labels::REVISION.into(), revision.into());
    }
}

pub(super) fn runtime_hash(rendered: &render::Rendered) -> u64 {
    reconciler::value_hash(&serde_json::json!([
        rendered.service_account,
        rendered.service,
        rendered.deployment,
    ]))
}
