//! The Extension controller: whatever made an Extension (an
//! ExtensionRequest, or a user applying one directly, as seed 001 allows),
//! its controller runs here: the Deployment `spec.controller.deployment`
//! describes and the ServiceAccount it names, in the Extension's namespace,
//! controlled by the Extension. The CRDs it owns and depends on are
//! labelled with it, so that on deletion a CRD a stack installed goes only
//! with the last stack that owns or depends on it. Ready says whether the
//! CRDs are there and established and the controller is available.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::ServiceAccount},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Resource as _, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    runtime::{Controller, WatchStreamExt as _, controller::Action, reflector::ObjectRef, watcher},
};
use oci::stack::CrdSelector;
use runtime::{
    conditions,
    controller::Runtime,
    reconciler::{self, Cleanup, Draft, Reconciler, Skeleton},
};
use serde_json::json;
use types::extensions::v1alpha1::Extension;

use super::{
    error::Error,
    ownership::{
        self, DEPENDS_ON, EXTENSION_LABEL, OWNER_ANNOTATION, OWNS, Release, extension_exists,
        stack_label,
    },
    status::set_ready,
};
use crate::{
    image_configs::ImageConfigs,
    package_runtime::{apply::Runtimes, stack},
};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "extension";
/// Holds an Extension until its controller is stopped and its CRDs let go.
pub const FINALIZER: &str = "extensions.crossplane.io/stack";
/// The rbac-manager's condition: the controller's role is bound.
const TYPE_RBAC_READY: &str = types::pkg::contract::conditions::RBAC_READY;
/// How often an Extension waiting on what no watch shows looks again.
const WAIT_POLL: Duration = Duration::from_secs(5);

/// The reconciler.
pub struct Extensions {
    sk: Skeleton,
    image_configs: Arc<ImageConfigs>,
    crds: super::known::Known,
    /// Applies the controllers (per Extension UID: an unchanged one is not
    /// written again).
    runtimes: Runtimes,
    resync: Duration,
}

/// Why the controller cannot work yet for want of its role: the
/// rbac-manager's RBACReady on an Extension that runs a controller.
fn unbound(e: &Extension) -> Option<String> {
    e.spec.controller.as_ref()?.deployment.as_ref()?;
    match conditions::get(conditions::of(e), TYPE_RBAC_READY) {
        Some(c) if c.status == "True" => None,
        Some(c) => Some(format!(
            "the controller runs without its role: {}",
            c.message.clone().unwrap_or_default()
        )),
        None => Some(
            "waiting for the rbac-manager to bind the controller's role (RBACReady)".to_owned(),
        ),
    }
}

impl Reconciler for Extensions {
    type Object = Extension;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    async fn ready(&self) -> bool {
        self.crds.ready().await && self.image_configs.ready().await
    }

    async fn apply(
        &self,
        e: &Arc<Extension>,
        status: &mut Draft<Extension>,
    ) -> Result<Action, Error> {
        let ns = e.namespace().unwrap_or_default();
        let name = e.name_any();
        let me = format!("{ns}/{name}");
        let label = stack_label(&ns, &name);
        let refs = e
            .spec
            .custom_resource_definitions
            .clone()
            .unwrap_or_default();
        let protected: Vec<String> = refs
            .owns
            .iter()
            .map(|r| ("owns", r))
            .chain(refs.depends_on.iter().map(|r| ("dependsOn", r)))
            .filter(|(_, r)| types::is_protected_group(r.group_version().0))
            .map(|(field, r)| format!("{field} {r}"))
            .collect();
        if !protected.is_empty() {
            return Err(Error::Invalid(format!(
                "spec.customresourcedefinitions names built-in or crossplane-rs kinds, which a stack can never own or depend on: {}; name only the CRDs the stack installs or depends on",
                protected.join(", ")
            )));
        }
        let mut missing = Vec::new();
        let mut pending = Vec::new();
        for r in &refs.owns {
            let Some(crd) = self
                .crds
                .installed(&CrdSelector::of_kind(&r.kind, &r.api_version))
                .await?
            else {
                missing.push(r.to_string());
                continue;
            };
            let holder = ownership::holder(crd.labels(), crd.annotations());
            let owner_exists = match ownership::other_owner(&holder, &me) {
                Some(o) => extension_exists(self.sk.client(), o).await?,
                None => false,
            };
            if let Some(why) = ownership::own_refusal(
                &me,
                &crd.name_any(),
                &crate::crds::maker(&crd),
                &holder,
                owner_exists,
            ) {
                return Err(Error::Conflict(why));
            }
            self.mark(&crd, &label, OWNS, Some(&me)).await?;
            if !crate::crds::established(&crd) {
                pending.push(crd.name_any());
            }
        }
        let mut missing_deps = Vec::new();
        for r in &refs.depends_on {
            match self
                .crds
                .installed(&CrdSelector::of_kind(&r.kind, &r.api_version))
                .await?
            {
                Some(crd) => self.mark(&crd, &label, DEPENDS_ON, None).await?,
                None => missing_deps.push(r.to_string()),
            }
        }
        let controller = self.run_controller(e).await?;
        let (ok, reason, message) = if !missing.is_empty() {
            (
                false,
                "MissingCRDs",
                format!(
                    "the CRDs this stack owns are not installed: {}; install the stack with an ExtensionRequest, or create them",
                    missing.join(", ")
                ),
            )
        } else if !missing_deps.is_empty() {
            (
                false,
                "MissingDependencies",
                format!(
                    "the CRDs this stack depends on are not installed: {}; install the stacks that own them",
                    missing_deps.join(", ")
                ),
            )
        } else if !pending.is_empty() {
            (
                false,
                "Creating",
                format!(
                    "waiting for CRDs to become established: {}",
                    pending.join(", ")
                ),
            )
        } else if let Some(why) = controller {
            (false, "ControllerUnavailable", why)
        } else if let Some(why) = unbound(e) {
            (false, "RolesNotBound", why)
        } else {
            (
                true,
                conditions::reason::AVAILABLE,
                "the stack's CRDs are established and its controller is available".to_owned(),
            )
        };
        set_ready(&mut status.conditions, ok, reason, message);
        Ok(Action::requeue(if ok { self.resync } else { WAIT_POLL }))
    }

    async fn cleanup(
        &self,
        e: &Arc<Extension>,
        _status: &mut Draft<Extension>,
    ) -> Result<Cleanup, Error> {
        let ns = e.namespace().unwrap_or_default();
        let name = e.name_any();
        let me = format!("{ns}/{name}");
        let label = stack_label(&ns, &name);
        if let Some(d) = e
            .spec
            .controller
            .as_ref()
            .and_then(|c| c.deployment.as_ref())
        {
            self.stop_controller(&ns, &d.name, &name).await?;
        }
        let crds = Api::<CustomResourceDefinition>::all(self.sk.client().clone());
        for marked in self.crds.marked_with(&label) {
            // Stacks let go of a CRD concurrently (one request's stacks all
            // go at once): each decides from the CRD as it is now and
            // writes only if it is still so (resourceVersion), else looks
            // again, so the last one to go always sees that it is last.
            let Some(crd) = crds
                .get_opt(&marked)
                .await
                .map_err(|e| Error::request("read a CRD of the stack", e))?
            else {
                continue;
            };
            if !crd.labels().contains_key(&label) {
                continue;
            }
            let rv = crd.resource_version();
            let release = ownership::release(crd.labels(), crd.annotations(), &label, &me);
            if release == Release::Delete {
                tracing::info!(crd = %crd.name_any(), "deleting a CRD no installed stack owns or depends on any more");
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        resource_version: rv,
                        uid: None,
                    }),
                    ..DeleteParams::background()
                };
                match crds.delete(&crd.name_any(), &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(a)) if a.code == 404 => {}
                    Err(e) => return Err(Error::request("delete a CRD of the stack", e)),
                }
                continue;
            }
            let patch = if release == (Release::LetGo { owner: true }) {
                json!({"metadata": {"resourceVersion": rv, "labels": {label.clone(): null}, "annotations": {OWNER_ANNOTATION: null}}})
            } else {
                json!({"metadata": {"resourceVersion": rv, "labels": {label.clone(): null}}})
            };
            crds.patch(
                &crd.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| Error::request("let go of a CRD another stack still uses", e))?;
        }
        self.runtimes.forget(&e.uid().unwrap_or_default());
        Ok(Cleanup::Done)
    }
}

impl Extensions {
    /// Puts this Extension's label (and, for an owner, the owner
    /// annotation) on a CRD, when it is not there yet.
    async fn mark(
        &self,
        crd: &CustomResourceDefinition,
        label: &str,
        value: &str,
        owner: Option<&str>,
    ) -> Result<(), Error> {
        let Some(patch) =
            ownership::mark_patch(crd.labels(), crd.annotations(), (label, value), owner)
        else {
            return Ok(());
        };
        Api::<CustomResourceDefinition>::all(self.sk.client().clone())
            .patch(
                &crd.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| Error::request("label a CRD with the stack that uses it", e))?;
        Ok(())
    }

    /// Deletes the Extension's controller Deployment, if it is there and
    /// its own.
    async fn stop_controller(
        &self,
        ns: &str,
        deployment: &str,
        extension: &str,
    ) -> Result<(), Error> {
        let live = Api::<Deployment>::namespaced(self.sk.client().clone(), ns)
            .get_opt(deployment)
            .await
            .map_err(|e| Error::request("read the stack's controller Deployment", e))?;
        if live.is_some_and(|live| self.ours(&live, extension)) {
            self.delete_controller(ns, deployment).await?;
        }
        Ok(())
    }

    /// Deletes the controller Deployment `ns/deployment` (known to be the
    /// Extension's).
    async fn delete_controller(&self, ns: &str, deployment: &str) -> Result<(), Error> {
        let api = Api::<Deployment>::namespaced(self.sk.client().clone(), ns);
        runtime::objects::delete(&api, deployment)
            .await
            .map_err(|e| Error::request("delete the stack's controller Deployment", e))
    }

    fn ours(&self, d: &Deployment, extension: &str) -> bool {
        d.labels()
            .get(EXTENSION_LABEL)
            .is_some_and(|v| v == extension)
    }

    /// Applies the controller's ServiceAccount and Deployment (only when
    /// they changed); `Some(why)` while the Deployment is not available.
    async fn run_controller(&self, e: &Extension) -> Result<Option<String>, Error> {
        let Some(d) = e
            .spec
            .controller
            .as_ref()
            .and_then(|c| c.deployment.as_ref())
        else {
            return Ok(None);
        };
        let ns = e.namespace().unwrap_or_default();
        let name = e.name_any();
        if !d.spec.is_object() {
            return Err(Error::Invalid(
                "spec.controller.deployment.spec must be an apps/v1 DeploymentSpec (an object)"
                    .to_owned(),
            ));
        }
        let Some(owner) = e.controller_owner_ref(&()) else {
            return Ok(Some("the Extension has no UID yet".to_owned()));
        };
        let client = self.sk.client().clone();
        let live = Api::<Deployment>::namespaced(client.clone(), &ns)
            .get_opt(&d.name)
            .await
            .map_err(|e| Error::request("read the stack's controller Deployment", e))?;
        if let Some(live) = &live
            && !self.ours(live, &name)
        {
            return Err(Error::Conflict(format!(
                "Deployment {ns}/{} exists and is not this Extension's; rename spec.controller.deployment.name or remove that Deployment",
                d.name
            )));
        }
        let service_account = e
            .controller_service_account()
            .unwrap_or_else(|| name.clone());
        let uid = e.uid().unwrap_or_default();
        // What install.yaml asks of the pod is data: host access, privilege,
        // root and any field a controller does not need are refused, the
        // rest is made "restricted", and the pod runs as the ServiceAccount
        // made for this Extension alone.
        let rules = e
            .spec
            .permissions
            .as_ref()
            .map(|p| p.rules.clone())
            .unwrap_or_default();
        let mut refused = stack::refusals(&d.spec, &rules);
        let existing = Api::<ServiceAccount>::namespaced(client.clone(), &ns)
            .get_opt(&service_account)
            .await
            .map_err(|e| Error::request("read the controller's ServiceAccount", e))?;
        if let Some(sa) = &existing
            && !runtime::objects::controlled_by(sa.owner_references(), &uid)
        {
            refused.push(format!(
                "{}.serviceAccountName: ServiceAccount {ns}/{service_account} exists and was not made for this Extension; a stack's controller runs only as a ServiceAccount the package-manager creates for it: name one that does not exist, or leave it unset",
                stack::POD_PATH
            ));
        }
        if !refused.is_empty() {
            // A controller that may not run does not keep running (the live
            // one, read above, is this Extension's).
            if live.is_some() {
                self.delete_controller(&ns, &d.name).await?;
            }
            return Err(Error::Invalid(format!(
                "the stack's controller is not run: {}",
                refused.join("; ")
            )));
        }
        let mut rendered = stack::render(&ns, &name, (&d.name, &d.spec), &service_account, &owner);
        // The node pulls each image where the ImageConfigs say (their pull
        // secrets live in the runtimes' namespace, out of reach of
        // a pod in this one).
        let mut rewritten = Vec::new();
        for image in stack::images(&d.spec) {
            let resolved = self.image_configs.resolve(&image).await;
            if resolved.image != image {
                rewritten.push((image, resolved.image));
            }
        }
        stack::rewrite_images(&mut rendered.deployment, &rewritten);
        let applied = self
            .runtimes
            .apply_controller(
                &uid,
                &ns,
                &rendered.service_account,
                &rendered.deployment,
                live.is_some(),
            )
            .await
            .map_err(|e| match e.refused_deployment() {
                Some(a) => Error::Invalid(format!(
                    "the API server refuses the controller Deployment {ns}/{}: {}; fix spec.controller.deployment",
                    d.name, a.message
                )),
                None => Error::request(e.what, e.source),
            })?;
        if applied {
            return Ok(Some(format!(
                "controller Deployment {ns}/{} was applied; waiting for it to become available",
                d.name
            )));
        }
        let available = crate::package_runtime::health::available(live.as_ref()).cloned();
        Ok(match available {
            Some(c) if c.status == "True" => None,
            Some(c) => Some(format!(
                "controller Deployment {ns}/{} is not available: {}",
                d.name,
                c.message.unwrap_or_default()
            )),
            None => Some(format!(
                "controller Deployment {ns}/{} is not available yet",
                d.name
            )),
        })
    }
}

/// The controller, ready to run: it watches the controller Deployments it
/// made (by label) and the CRDs (an Extension waiting for one of its CRDs
/// is looked at when it appears).
pub fn controller<S>(
    rt: &Runtime,
    crds: super::known::Known,
    crd_changes: S,
    image_configs: &Arc<ImageConfigs>,
    resync: Duration,
) -> impl Future<Output = ()> + Send + 'static + use<S>
where
    S: futures::Stream<Item = Result<CustomResourceDefinition, watcher::Error>> + Send + 'static,
{
    // Anyone who may create Deployments can put this label on one: the
    // watch is of metadata only and nothing of it is kept (a reconcile
    // reads its own Deployment), so a tenant's Deployments cost this
    // binary nothing but the notice that they changed.
    let owned = watcher(
        Api::<kube::core::PartialObjectMeta<Deployment>>::all(rt.client.clone()),
        watcher::Config::default()
            .labels(EXTENSION_LABEL)
            .page_size(50),
    )
    .default_backoff()
    .touched_objects();
    let ctrl = Controller::new(
        Api::<Extension>::all(rt.client.clone()),
        watcher::Config::default(),
    );
    let extensions = ctrl.store();
    let every = crate::image_configs::wake_all(extensions.clone(), |_| true);
    let ctrl = ctrl
        .owns_stream(owned)
        // Stack controllers are few: an ImageConfig change wakes them all.
        .watches_shared_stream(image_configs.changes(), every)
        .watches_stream(crd_changes, move |crd: CustomResourceDefinition| {
            let (group, kind) = (crd.spec.group.clone(), crd.spec.names.kind.clone());
            extensions
                .state()
                .iter()
                .filter(|e| {
                    e.spec
                        .custom_resource_definitions
                        .as_ref()
                        .is_some_and(|r| {
                            r.owns.iter().chain(&r.depends_on).any(|c| {
                                c.kind == kind
                                    && c.api_version.split('/').next() == Some(group.as_str())
                            })
                        })
                })
                .map(|e| ObjectRef::from_obj(e.as_ref()))
                .collect::<Vec<_>>()
        })
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    let reconciler = Arc::new(Extensions {
        // The rbac-manager owns RBACReady.
        sk: Skeleton::new(rt, CONTROLLER)
            .leaving_conditions(&[types::pkg::contract::conditions::RBAC_READY]),
        image_configs: Arc::clone(image_configs),
        crds,
        runtimes: Runtimes::new(rt.client.clone(), &rt.field_manager()),
        resync,
    });
    reconciler::run(ctrl, reconciler)
}
