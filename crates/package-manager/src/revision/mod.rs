//! The ProviderRevision controller: an Active revision installs its
//! package's CRDs (server-side apply, all or nothing: every CRD is dry-run
//! first) and, with `--package-runtime=Deployment`, runs the package's
//! runtime (a ServiceAccount, Deployment and Service rendered from its
//! runtime config). An Inactive revision stops its runtime and keeps a
//! non-controller reference on its CRDs. Deleting a revision removes its
//! runtime and the CRDs no other revision of the Provider delivers.
//!
//! CRD control moves within a Provider by revision number: a revision takes
//! a CRD from an older sibling and leaves one a newer sibling controls, so
//! an upgrade never reports a conflict with itself. A CRD controlled by
//! anything else is a conflict: nothing is written, Healthy=False names the
//! owner, and the revision looks again until the owner is gone.
//!
//! Rooms, as upstream's `internal/controller/pkg/revision`: this module
//! reconciles (apply, cleanup, the controller's watches); [`establish`]
//! installs the package's objects and says who controls one that exists;
//! [`let_go`] removes what a deleted revision delivered;
//! [`runtime_objects`] runs the revision's runtime through
//! [`crate::package_runtime`] and [`runtime_config`] finds what it is rendered
//! from; [`dependencies`] resolves and releases the package's
//! dependencies; [`context`] and [`error`] hold what they all share.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, controller::Action, reflector::ObjectRef, watcher},
};
use runtime::{
    controller::{Runtime, cache_ready},
    expiring::Expiring,
    reconciler::{self, Cleanup, Draft, Reconciler, Skeleton},
};
use types::{
    apiextensions::v1alpha1::ManagedResourceDefinition,
    pkg::{
        v1::{Provider, ProviderRevision, RevisionState},
        v1beta1::{DeploymentRuntimeConfig, ImageConfigRef, REASON_VERIFY},
    },
};

pub mod context;
mod deliver;
mod dependencies;
pub mod error;
mod establish;
mod let_go;
mod runtime_config;
mod runtime_objects;
mod seen;

pub use context::{
    CONTROLLER, DEFAULT_RUNTIME_CONFIG, FINALIZER, ProviderRevisions, Settings, TYPE_HEALTHY,
    TYPE_RUNTIME_HEALTHY,
};
pub use error::Error;

use crate::{
    args::PackageRuntime,
    deps,
    image_configs::{self, ImageConfigs},
    labels,
    packages::Packages,
    signatures::Verdict,
};
use context::{
    PENDING_WINDOW, Unhealthy as _, WAIT_POLL, condition_true, provider_owner, set, unhealthy,
};

impl Reconciler for ProviderRevisions {
    type Object = ProviderRevision;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    async fn ready(&self) -> bool {
        cache_ready(&self.revisions).await
            && cache_ready(&self.deployments).await
            && cache_ready(&self.providers).await
            && cache_ready(&self.runtime_configs).await
            && self.mrd_versions.ready().await
            && self.packages.ready().await
    }

    /// A new list of the CRDs the revision still waits for may wait for
    /// more to be established ([`context::still_pending`]); anything else
    /// is written at once.
    fn may_wait(
        &self,
        before: &Draft<ProviderRevision>,
        after: &Draft<ProviderRevision>,
    ) -> Option<Duration> {
        context::still_pending(before, after).then_some(PENDING_WINDOW)
    }

    /// Every wake is looked at at once: only the writes of new lists wait,
    /// and the last CRD established is Healthy without waiting out the
    /// window (the looks read nothing that did not change).
    fn urgent(&self, _r: &ProviderRevision, _status: &Draft<ProviderRevision>) -> bool {
        true
    }

    async fn apply(
        &self,
        r: &Arc<ProviderRevision>,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Action, Error> {
        if r.spec.desired_state != RevisionState::Active {
            self.stop_runtime(r).await?;
            set(
                status,
                TYPE_RUNTIME_HEALTHY,
                false,
                "InactivePackageRevision",
                Some("the revision is inactive: its runtime is stopped".into()),
            );
            return Ok(Action::requeue(self.settings.resync));
        }
        self.resolve_images(r, status).await;
        self.verify(r, status).await?;
        let contents = match self.package(r).await {
            Ok(c) => c,
            Err(e) => {
                let keep = matches!(&e, Error::Package(p) if p.is_transient())
                    && condition_true(status, TYPE_HEALTHY);
                if !keep {
                    unhealthy(status, "UnhealthyPackageRevision", &e);
                }
                return Err(e);
            }
        };
        if r.spec.ignore_crossplane_constraints != Some(true)
            && let Some(constraint) = &contents.meta.crossplane_version
            && let Err(why) = deps::crossplane_admits(constraint)
        {
            Err(Error::Constraint(why)).unhealthy(status, "IncompatibleCrossplaneVersion")?;
        }
        // What the package asks for its runtime, for the rbac-manager.
        status.permission_requests =
            permission_requests(&contents.meta.raw).unhealthy(status, "InvalidPackage")?;
        let declared = deps::declared(r, &contents.meta.depends_on);
        if r.spec.skip_dependency_resolution != Some(true) && !declared.is_empty() {
            let resolved = self.dependencies(r, &declared, status).await;
            resolved.unhealthy(status, "UnresolvedDependencies")?;
        }
        let provider = r.labels().get(labels::PACKAGE).cloned().unwrap_or_default();
        let config = match self.settings.mode {
            PackageRuntime::Deployment => Some(self.runtime_config(r, status).await),
            PackageRuntime::External => None,
        };
        let service = match &config {
            Some(Ok((c, _))) => crate::package_runtime::render::service_name(c, &provider),
            _ => provider.clone(),
        };
        let webhooks = contents
            .objects
            .iter()
            .any(crate::crds::converts_by_webhook)
            || !contents.webhooks.is_empty();
        // Certificates for a runtime, and for the API server to call its
        // webhooks (whoever runs it).
        let tls = if r.spec.image.is_some() || webhooks {
            let owner = provider_owner(r);
            let bundle = self
                .certificates
                .ensure(
                    &provider,
                    &service,
                    &self.settings.namespace,
                    owner.as_ref(),
                )
                .await
                .map_err(Error::Tls);
            Some(bundle.unhealthy(status, "UnhealthyPackageRevision")?)
        } else {
            None
        };
        // Which of its Service's ports the API server is pointed at, and
        // which revision the Service serves (crate::package_runtime::handover).
        let live_service = if webhooks && self.settings.mode == PackageRuntime::Deployment {
            Api::<Service>::namespaced(self.sk.client().clone(), &self.settings.namespace)
                .get_opt(&service)
                .await
                .map_err(|e| Error::request("read the runtime's Service", e))?
        } else {
            None
        };
        let handover = crate::package_runtime::handover::Live::of(live_service.as_ref());
        let webhook_target = tls.as_deref().map(|bundle| crate::crds::WebhookTarget {
            service: &service,
            namespace: &self.settings.namespace,
            port: handover.port,
            ca_bundle: bundle,
        });
        let installed = self
            .install(r, &contents, webhook_target.as_ref(), status)
            .await;
        // The package's place in memory is another reconcile's now.
        drop(contents);
        if let Some(action) = installed.unhealthy(status, "UnhealthyPackageRevision")? {
            return Ok(action);
        }
        match self.settings.mode {
            PackageRuntime::External => {
                set(
                    status,
                    TYPE_RUNTIME_HEALTHY,
                    true,
                    types::pkg::contract::conditions::EXTERNAL_RUNTIME,
                    Some("the runtime is left to an external controller (--package-runtime=External)".into()),
                );
                Ok(Action::requeue(self.settings.resync))
            }
            PackageRuntime::Deployment => match self
                .run_runtime(r, config, tls.is_some(), webhooks, &handover, status)
                .await
            {
                Ok(action) => Ok(action),
                Err(e) => {
                    set(
                        status,
                        TYPE_RUNTIME_HEALTHY,
                        false,
                        "UnhealthyRuntime",
                        Some(runtime::events::error_chain(&e)),
                    );
                    Err(e)
                }
            },
        }
    }

    async fn cleanup(
        &self,
        r: &Arc<ProviderRevision>,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Cleanup, Error> {
        self.stop_runtime(r).await?;
        let waiting = self.let_go(r).await?;
        if waiting.is_empty() {
            self.release_dependencies(r).await?;
            self.runtimes.forget(&r.name_any());
            return Ok(Cleanup::Done);
        }
        set(
            status,
            TYPE_HEALTHY,
            false,
            "Deleting",
            Some(format!("{}; the CRDs go when they do", waiting.join("; "))),
        );
        Ok(Cleanup::Wait(Action::requeue(WAIT_POLL)))
    }

    /// `apply` set the conditions itself.
    fn failed(&self, _r: &ProviderRevision, _status: &mut Draft<ProviderRevision>, _message: &str) {
    }
}

impl ProviderRevisions {
    /// Verifies the revision's package and runtime image where an
    /// ImageConfig requires them signed: one that is not verified installs
    /// nothing (no CRD, MRD, runtime or role), and the revision's
    /// SignatureVerificationComplete condition names the ImageConfig and
    /// what each authority found.
    async fn verify(
        &self,
        r: &ProviderRevision,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<(), Error> {
        let Some(digest) = r
            .annotations()
            .get(labels::DIGEST)
            .and_then(|d| oci::Digest::parse(d))
        else {
            // Reading the package says what is wrong.
            return Ok(());
        };
        let secrets = &r.spec.package_pull_secrets;
        let mut images = vec![(r.spec.package.clone(), digest.clone())];
        if let Some(image) = &r.spec.image {
            let pinned = image
                .rsplit_once('@')
                .and_then(|(_, d)| oci::Digest::parse(d));
            if pinned.as_ref() != Some(&digest) && self.signatures.required(image).await {
                let resolved = match pinned {
                    Some(d) => d,
                    None => self
                        .packages
                        .resolve(image, secrets)
                        .await
                        .map_err(|e| Error::Package(e.into()))
                        .unhealthy(status, "SignatureVerificationFailed")?,
                };
                images.push((image.clone(), resolved));
            }
        }
        let mut verified = Vec::new();
        for (image, digest) in images {
            match self.signatures.verify(&image, &digest, secrets).await {
                Verdict::NotRequired => {}
                Verdict::Verified { config, authority } => {
                    let applied = ImageConfigRef {
                        name: config.clone(),
                        reason: REASON_VERIFY.to_owned(),
                    };
                    if !status.applied_image_config_refs.contains(&applied) {
                        status.applied_image_config_refs.push(applied);
                    }
                    verified.push(format!(
                        "{image}: authority {authority} of ImageConfig {config}"
                    ));
                }
                Verdict::Refused(why) => {
                    set(
                        status,
                        TYPE_SIGNATURE_VERIFIED,
                        false,
                        "SignatureVerificationFailed",
                        Some(why.clone()),
                    );
                    return Err(Error::Verification(why))
                        .unhealthy(status, "SignatureVerificationFailed");
                }
            }
        }
        if verified.is_empty() {
            status
                .conditions
                .retain(|c| c.type_ != TYPE_SIGNATURE_VERIFIED);
        } else {
            set(
                status,
                TYPE_SIGNATURE_VERIFIED,
                true,
                "SignatureVerificationComplete",
                Some(format!("verified {}", verified.join("; "))),
            );
        }
        Ok(())
    }
}

/// SignatureVerificationComplete: the package's signatures were verified
/// as an ImageConfig requires.
const TYPE_SIGNATURE_VERIFIED: &str = "SignatureVerificationComplete";

/// The rules a package's meta asks for its runtime
/// (`spec.controller.permissionRequests`), or why they cannot be read.
fn permission_requests(
    meta: &serde_json::Value,
) -> Result<Vec<k8s_openapi::api::rbac::v1::PolicyRule>, Error> {
    match meta.pointer("/spec/controller/permissionRequests") {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
            Error::Meta(format!(
                "spec.controller.permissionRequests of the package is not a list of RBAC rules: {e}"
            ))
        }),
    }
}

/// The revision controller, ready to run: it watches the runtime
/// Deployments it owns and wakes the revisions that use a runtime config
/// when it changes.
pub fn controller(
    rt: &Runtime,
    packages: Packages,
    image_configs: &ImageConfigs,
    crds_known: crate::stacks::known::Known,
    served: crate::mrds::Served,
    settings: Settings,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    let (deployments, writer) = kube::runtime::reflector::store();
    let owned = watcher(
        Api::<Deployment>::namespaced(rt.client.clone(), &settings.namespace),
        watcher::Config::default().labels(labels::REVISION),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects();
    let (providers, provider_writer) = kube::runtime::reflector::store();
    let provider_stream = watcher(
        Api::<Provider>::all(rt.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(provider_writer)
    .touched_objects();
    let mrd_versions = runtime::controller::summaries::Summaries::new();
    let mrd_events = mrd_versions.follow(
        runtime::controller::trim::watch(
            Api::<kube::core::PartialObjectMeta<ManagedResourceDefinition>>::all(rt.client.clone()),
            watcher::Config::default(),
            runtime::controller::trim::nothing_else,
        )
        .default_backoff(),
        crate::mrds::body::version,
    );
    let (runtime_configs, config_events) = runtime::controller::trim::reflected(
        Api::<DeploymentRuntimeConfig>::all(rt.client.clone()),
        watcher::Config::default(),
        |_| {},
    );
    let ctrl = runtime::controller::trim::controller(
        Api::<ProviderRevision>::all(rt.client.clone()),
        watcher::Config::default(),
        runtime::controller::trim::nothing_else,
    );
    let revisions = ctrl.store();
    let by_config = revisions.clone();
    let by_image_config = revisions.clone();
    let by_dependency = revisions.clone();
    let ctrl = ctrl
        .owns_stream(owned)
        // A revision's MRDs (activated, deactivated, their CRD served): as
        // metadata (an MRD carries its whole CRD spec), kept so an
        // unchanged one is not read again (seen.rs).
        .owns_stream(mrd_events.touched_objects())
        // A Provider that changes wakes the revisions that depend on its
        // package: what they found (a cycle through it, its version, its
        // health) may have changed. The store is fed first.
        .watches_stream(provider_stream, move |p: Provider| {
            let repository = oci::xpkg::repository_of(&p.spec.package);
            by_dependency
                .state()
                .iter()
                .filter(|r| deps::dependencies_of(r).contains(&repository))
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(image_configs.changes(), move |config| {
            by_image_config
                .state()
                .iter()
                .filter(|r| {
                    let status = r.status.as_ref();
                    let images = [
                        Some(r.spec.package.as_str()),
                        r.spec.image.as_deref(),
                        status.and_then(|s| s.resolved_package.as_deref()),
                        status.and_then(|s| s.resolved_image.as_deref()),
                    ];
                    let applied = status
                        .iter()
                        .flat_map(|s| &s.applied_image_config_refs)
                        .map(|a| a.name.as_str());
                    image_configs::wakes(&config, images.into_iter().flatten(), applied)
                })
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        })
        .watches_stream(
            config_events.touched_objects(),
            move |config: DeploymentRuntimeConfig| {
                let name = config.name_any();
                by_config
                    .state()
                    .iter()
                    .filter(|r| {
                        // A revision whose config an ImageConfig picked is
                        // woken by any runtime config (they are few).
                        let picked_by_image_config = r.spec.runtime_config_ref.is_none()
                            && r.status
                                .iter()
                                .flat_map(|s| &s.applied_image_config_refs)
                                .any(|a| a.reason == types::pkg::v1beta1::REASON_RUNTIME);
                        picked_by_image_config
                            || r.spec
                                .runtime_config_ref
                                .as_ref()
                                .map_or(DEFAULT_RUNTIME_CONFIG, |c| c.name.as_str())
                                == name
                    })
                    .map(|r| ObjectRef::from_obj(r.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    let reconciler = Arc::new(ProviderRevisions {
        // The rbac-manager owns RBACReady.
        sk: Skeleton::new(rt, CONTROLLER)
            .leaving_conditions(&[types::pkg::contract::conditions::RBAC_READY])
            .coalescing(PENDING_WINDOW),
        field_manager: rt.field_manager(),
        signatures: crate::signatures::Signatures::new(
            packages.clone(),
            Api::namespaced(rt.client.clone(), &settings.namespace),
            settings.trusted_root.clone(),
        ),
        packages,
        revisions,
        deployments,
        providers,
        runtimes: crate::package_runtime::apply::Runtimes::new(
            rt.client.clone(),
            &rt.field_manager(),
        ),
        warned: Expiring::new(Duration::from_secs(3600)),
        crds_known,
        mrd_versions,
        runtime_configs,
        seen: seen::Seen::default(),
        served,
        certificates: crate::tls::Certificates::new(
            rt.client.clone(),
            &settings.namespace,
            &rt.field_manager(),
        ),
        settings,
    });
    reconciler::run(ctrl, reconciler)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn permission_requests_are_read_from_the_meta_or_named_as_unreadable() {
        let meta =
            |v: serde_json::Value| json!({"spec": {"controller": {"permissionRequests": v}}});
        let rules = permission_requests(&meta(json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
        ])))
        .unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, ["get"]);
        assert!(
            permission_requests(&json!({"spec": {}}))
                .unwrap()
                .is_empty()
        );
        let why = permission_requests(&meta(json!("all of it")))
            .unwrap_err()
            .to_string();
        assert!(why.contains("not a list of RBAC rules"), "{why}");
    }
}
