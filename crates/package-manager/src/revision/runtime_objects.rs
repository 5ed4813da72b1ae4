//! A revision's runtime: rendered from its runtime config, applied when it
//! changed, its health read from the Deployment (and the pods' waiting
//! reasons), stopped when the revision is inactive or goes.

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod, discovery::v1::EndpointSlice};
use kube::{
    Api, ResourceExt as _,
    api::ListParams,
    runtime::{controller::Action, reflector::ObjectRef},
};
use runtime::{conditions, reconciler::Draft};
use types::pkg::{v1::ProviderRevision, v1beta1::DeploymentRuntimeConfigSpec};

use super::{
    context::{
        ProviderRevisions, STEADY_POLL, TYPE_RUNTIME_HEALTHY, WAIT_POLL, condition_true,
        provider_owner, set,
    },
    error::Error,
};
use crate::{
    labels,
    package_runtime::{apply::ApplyError, handover, health, render},
};

/// How soon a runtime handing over is looked at again.
const HANDOVER_POLL: std::time::Duration = std::time::Duration::from_secs(1);

impl From<ApplyError> for Error {
    fn from(e: ApplyError) -> Self {
        Error::request(e.what, e.source)
    }
}

impl ProviderRevisions {
    /// Records where the revision's package and runtime image are read
    /// from, and the ImageConfigs that said so.
    pub(super) async fn resolve_images(
        &self,
        r: &ProviderRevision,
        status: &mut Draft<ProviderRevision>,
    ) {
        let package = self.packages.resolved(&r.spec.package).await;
        let mut applied = package.applied;
        status.resolved_package = Some(package.image);
        status.resolved_image = None;
        if let Some(image) = &r.spec.image {
            let runtime = self.packages.resolved(image).await;
            for a in runtime.applied {
                if !applied.contains(&a) {
                    applied.push(a);
                }
            }
            status.resolved_image = Some(runtime.image);
        }
        status.applied_image_config_refs = applied;
    }

    /// Renders and applies the runtime, then reports its health.
    pub(super) async fn run_runtime(
        &self,
        r: &ProviderRevision,
        config: Option<Result<(DeploymentRuntimeConfigSpec, bool), Error>>,
        tls: bool,
        webhooks: bool,
        handover: &handover::Live,
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
            None => self.runtime_config(r, status).await?,
        };
        let provider = r.labels().get(labels::PACKAGE).cloned().unwrap_or_default();
        // The node pulls the image where the ImageConfigs say, with their
        // pull secret besides the package's own.
        let runtime = self.packages.resolved(image).await;
        let image = runtime.image.as_str();
        let mut secrets: Vec<String> = r
            .spec
            .package_pull_secrets
            .iter()
            .map(|s| s.name.clone())
            .collect();
        if let Some((_, secret)) = &runtime.pull_secret
            && !secrets.contains(secret)
        {
            secrets.push(secret.clone());
        }
        let uid = r.uid().unwrap_or_default();
        let name = r.name_any();
        let provider_owner = provider_owner(r).and_then(|o| serde_json::to_value(o).ok());
        let (_, server_secret, client_secret) = crate::tls::secret_names(&provider);
        let common_labels = r.common_labels();
        let common_annotations = r.common_annotations();
        let serving = if webhooks && tls {
            let own = self
                .deployments
                .state()
                .into_iter()
                .find(|d| d.labels().get(labels::REVISION) == Some(&name));
            handover::decide(
                handover,
                &name,
                r.spec.revision,
                health::is_available(own.as_deref()),
                |other| {
                    self.revisions
                        .get(&ObjectRef::new(other))
                        .map(|p| handover::Peer {
                            number: p.spec.revision,
                            active: p.is_active(),
                        })
                },
            )
        } else {
            None
        };
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
            serving,
        };
        let rendered = render::render(&input).map_err(|e| Error::Render(e.to_string()))?;
        let pod = rendered
            .deployment
            .pointer("/spec/template/spec")
            .unwrap_or(&serde_json::Value::Null);
        // --allow-unrestricted-runtimes lifts the pod-security limits only.
        let mut broken = if self.settings.allow_unrestricted_runtimes {
            Vec::new()
        } else {
            crate::podsecurity::violations(pod, "spec.deploymentTemplate.spec.template.spec")
        };
        // A runtime never borrows the identity of a controller of this
        // control plane (the rbac-manager's may escalate and bind), whatever
        // the flag says.
        let field = |f: &str| pod.get(f).and_then(serde_json::Value::as_str);
        let account =
            types::pod_service_account(field("serviceAccountName"), field("serviceAccount"));
        let borrowed = types::borrowed_identity(&account);
        if let Some(why) = &borrowed {
            broken.push(format!(
                "serviceAccountTemplate.metadata.name: a runtime may not run as ServiceAccount {}/{account} ({why})",
                self.settings.namespace
            ));
        }
        if !broken.is_empty() {
            let fix = if borrowed.is_some() && self.settings.allow_unrestricted_runtimes {
                "name a ServiceAccount of the runtime's own in the runtime config (--allow-unrestricted-runtimes never lifts this)"
            } else {
                "change the runtime config, or (for the pod-security limits only) start the package-manager with --allow-unrestricted-runtimes true"
            };
            return Err(Error::RuntimeConfig(format!(
                "the runtime config would make the runtime break the Pod Security Standard \"restricted\" or borrow a controller's identity: {}; {fix}",
                broken.join("; ")
            )));
        }
        // The Deployment carries the revision label (render puts it there);
        // the Service and the ServiceAccount are the Provider's, the same
        // across revisions.
        let deployment_name = rendered
            .deployment
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or(&name)
            .to_owned();
        let live = self
            .deployments
            .get(&ObjectRef::new(&deployment_name).within(&self.settings.namespace));
        if !self.runtimes.applied(&name) {
            // A dependency's or a runtime config's names are package
            // content: what exists under them and was not made for this
            // Provider (another runtime's ServiceAccount or Service, a
            // hand-made one) is never taken over. Looked at once per
            // revision and process; what is remembered was checked.
            self.refuse_takeover(&rendered).await?;
        }
        self.runtimes
            .apply(&name, &self.settings.namespace, &rendered, live.is_some())
            .await?;
        let action = self
            .runtime_health(r, live.as_deref(), &deployment_name, status)
            .await?;
        match serving {
            Some(s) if condition_true(status, TYPE_RUNTIME_HEALTHY) => {
                let service = rendered
                    .service
                    .pointer("/metadata/name")
                    .and_then(|n| n.as_str())
                    .unwrap_or_default();
                self.handed_over(r, s, handover, service, status).await
            }
            _ => Ok(action),
        }
    }

    /// Refuses (a runtime config error naming the object) to apply a
    /// runtime over a ServiceAccount, Service or Deployment that exists and
    /// was not made for it ([`crate::package_runtime::apply::takes_over`]).
    async fn refuse_takeover(&self, rendered: &render::Rendered) -> Result<(), Error> {
        use k8s_openapi::api::{
            apps::v1::Deployment,
            core::v1::{Service, ServiceAccount},
        };
        self.refuse_takeover_of::<ServiceAccount>(&rendered.service_account)
            .await?;
        self.refuse_takeover_of::<Service>(&rendered.service)
            .await?;
        self.refuse_takeover_of::<Deployment>(&rendered.deployment)
            .await
    }

    /// [`Self::refuse_takeover`] for one object of kind `K`.
    async fn refuse_takeover_of<K>(&self, wanted: &serde_json::Value) -> Result<(), Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let ns = &self.settings.namespace;
        let name = wanted
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        let live = Api::<K>::namespaced(self.sk.client().clone(), ns)
            .get_metadata_opt(name)
            .await
            .map_err(|e| Error::request("read what the runtime would be applied over", e))?;
        match live.and_then(|m| crate::package_runtime::apply::takes_over(&m.metadata, wanted)) {
            Some(why) => Err(Error::RuntimeConfig(format!(
                "{} {ns}/{name} exists and {why}: the package-manager never takes over what it did not make for this Provider; delete or rename it, or name another in the runtime config",
                K::kind(&())
            ))),
            None => Ok(()),
        }
    }

    /// For a runtime that is available and serves webhooks: healthy only
    /// once the API server's calls reach it alone (crate::package_runtime::handover):
    /// the Service selects its pods, the CRDs and webhook configurations
    /// were pointed at the Service's port (`handover`, which this
    /// reconcile's install used, is what `serving` says), and the Service's
    /// endpoints are its pods alone. Else RuntimeHealthy stays False, and
    /// the revision is looked at again in a second.
    async fn handed_over(
        &self,
        r: &ProviderRevision,
        serving: render::Serving<'_>,
        handover: &handover::Live,
        service: &str,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Action, Error> {
        let name = r.name_any();
        if serving.revision != name {
            // An older revision, or one a newer revision has taken over
            // from: its runtime runs, and serves nothing.
            return Ok(Action::requeue(self.settings.resync));
        }
        let was_healthy = r
            .status
            .as_ref()
            .is_some_and(|s| condition_true(s, TYPE_RUNTIME_HEALTHY));
        let why = if handover.revision.as_deref() != Some(name.as_str())
            || handover.port != serving.port
        {
            Some(format!(
                "the webhooks' calls move to this runtime: its Service now sends to it on port {}, where the CRDs and webhook configurations are pointed next",
                serving.port
            ))
        } else if was_healthy {
            None
        } else {
            self.strangers_in_endpoints(&name, service).await?
        };
        let Some(why) = why else {
            return Ok(Action::requeue(self.settings.resync));
        };
        set(
            status,
            TYPE_RUNTIME_HEALTHY,
            false,
            "HandingOver",
            Some(why),
        );
        Ok(Action::requeue(HANDOVER_POLL))
    }

    /// Which pods, not the revision's, its Service's endpoints still list
    /// (or that none of its own is listed ready yet); `None` when only its
    /// own are.
    async fn strangers_in_endpoints(
        &self,
        revision: &str,
        service: &str,
    ) -> Result<Option<String>, Error> {
        let ns = &self.settings.namespace;
        let pods = Api::<Pod>::namespaced(self.sk.client().clone(), ns)
            .list_metadata(
                &ListParams::default().labels(&format!("{}={revision}", labels::REVISION)),
            )
            .await
            .map_err(|e| Error::request("list the runtime's pods", e))?;
        let own: std::collections::BTreeSet<String> =
            pods.items.iter().map(|p| p.name_any()).collect();
        let slices = Api::<EndpointSlice>::namespaced(self.sk.client().clone(), ns)
            .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
            .await
            .map_err(|e| Error::request("list the runtime Service's endpoints", e))?;
        let mut strangers = Vec::new();
        let mut ready = 0;
        for e in slices
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
        {
            let pod = e.target_ref.as_ref().and_then(|t| t.name.clone());
            match pod {
                Some(p) if own.contains(&p) => {
                    if e.conditions.as_ref().and_then(|c| c.ready) == Some(true) {
                        ready += 1;
                    }
                }
                Some(p) => strangers.push(p),
                None => strangers.push(e.addresses.join(",")),
            }
        }
        Ok(if !strangers.is_empty() {
            strangers.sort();
            strangers.dedup();
            Some(format!(
                "the webhooks' calls move to this runtime: Service {ns}/{service} still lists pods {}",
                strangers.join(", ")
            ))
        } else if ready == 0 {
            Some(format!(
                "the webhooks' calls move to this runtime: Service {ns}/{service} lists none of its pods ready yet"
            ))
        } else {
            None
        })
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
        let available = health::available(live);
        if health::is_available(live) {
            set(status, TYPE_RUNTIME_HEALTHY, true, "HealthyRuntime", None);
            return Ok(Action::requeue(self.settings.resync));
        }
        let pods = Api::<Pod>::namespaced(self.sk.client().clone(), &self.settings.namespace)
            .list(&ListParams::default().labels(&format!("{}={}", labels::REVISION, r.name_any())))
            .await
            .map_err(|e| Error::request("list the runtime's pods", e))?;
        let reasons = health::waiting_reasons(&pods.items);
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
        let name = r.name_any();
        let running = self
            .deployments
            .state()
            .iter()
            .any(|d| d.labels().get(labels::REVISION) == Some(&name));
        if !running && !self.runtimes.applied(&name) {
            return Ok(());
        }
        let selector = format!("{}={name}", labels::REVISION);
        self.runtimes
            .stop(&name, &self.settings.namespace, &selector)
            .await?;
        Ok(())
    }
}
