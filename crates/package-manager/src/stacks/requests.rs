//! The ExtensionRequest controller (seed 001 "Installation Flow"): the
//! request names a package (`spec.package`) or a CRD (`spec.crd`) in a
//! registry (`spec.source`, else `--default-registry`, both read through
//! read where the ImageConfigs say). The stack that owns the CRD is found by searching
//! the registry ([`super::index`]); its `dependsOn` CRDs that are not
//! installed are resolved the same way; then, dependencies first, each
//! stack's Extension record is made in the request's namespace and its CRDs
//! installed, and a stack waits until those it depends on are Ready.
//!
//! Every Extension a request made names the request among its owners, so
//! deleting the request lets garbage collection delete the Extensions no
//! other request still holds; each Extension's finalizer then stops its
//! controller and deletes the CRDs no installed stack still uses.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, Resource as _, ResourceExt,
    runtime::{
        Controller, WatchStreamExt as _,
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use oci::{Digest, stack::CrdSelector};
use runtime::{
    conditions,
    controller::{Runtime, cache_ready},
    reconciler::{self, Cleanup, Draft, Reconciler, Skeleton},
    ssa,
};
use serde_json::json;
use types::{
    common::TypedReference,
    extensions::v1alpha1::{CrdRef, Extension, ExtensionRequest},
};

use crate::image_configs::{self, ImageConfigs};

use super::{
    error::Error,
    index::{Candidate, Index},
    ownership::{
        self, OWNER_ANNOTATION, crd_body, crd_ref_of, crd_refs, extension_exists, stack_label,
    },
    plan::{PACKAGE_ANNOTATION, Planned, extension_body, extension_name, plan},
    status::{ready, ready_message, set_ready},
};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "extensionrequest";
/// How often a request waiting on an installing stack looks again (the
/// Extension watch usually wakes it first).
const WAIT_POLL: Duration = Duration::from_secs(5);

/// The reconciler.
pub struct ExtensionRequests {
    sk: Skeleton,
    field_manager: String,
    index: Index,
    default_source: String,
    crds: super::known::Known,
    extensions: Store<Extension>,
    resync: Duration,
}

impl Reconciler for ExtensionRequests {
    type Object = ExtensionRequest;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    /// What a request makes is owned by it (garbage collection removes it).
    fn finalizer(&self) -> Option<&'static str> {
        None
    }

    async fn ready(&self) -> bool {
        let packages = self.index.packages().ready();
        self.crds.ready().await && cache_ready(&self.extensions).await && packages.await
    }

    async fn apply(
        &self,
        r: &Arc<ExtensionRequest>,
        status: &mut Draft<ExtensionRequest>,
    ) -> Result<Action, Error> {
        let ns = r.namespace().unwrap_or_default();
        let source = r
            .spec
            .source
            .clone()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| self.default_source.clone());
        let source = source.trim().trim_end_matches('/').to_owned();
        // A stack pushed before the request was created is found by it
        // (and by the search for its dependencies).
        let asked = r.creation_timestamp().map(|t| t.0);
        let root = match (&r.spec.package, &r.spec.crd) {
            (Some(p), None) => {
                let wanted = format!("{source}/{}", p.trim());
                match self.recorded(&ns, &wanted) {
                    // Installed already: a tag is resolved once (as a
                    // Provider's IfNotPresent), so a steady request asks
                    // the registry nothing.
                    Some(c) => c,
                    None => {
                        let reference = self.index.tagged(&wanted).await?;
                        let digest = self.index.packages().resolve(&reference, &[]).await?;
                        Candidate { reference, digest }
                    }
                }
            }
            (None, Some(c)) => {
                let selector =
                    CrdSelector::parse(c).map_err(|e| Error::Invalid(format!("spec.crd: {e}")))?;
                if let Some(crd) = self.crds.installed(&selector).await? {
                    return self.already_installed(r, &crd, status).await;
                }
                self.index.owner(&source, &selector, asked).await?
            }
            _ => {
                return Err(Error::Invalid(
                    "set exactly one of spec.package (e.g. redis:v0.1.0) or spec.crd (e.g. redisclusters.cache.crossplane.io/v1alpha1)".to_owned(),
                ));
            }
        };
        let plan = plan(&self.index, &self.crds, (&ns, &source, asked), root).await?;
        let Some(owner) = owner_ref(r) else {
            return Ok(Action::requeue(WAIT_POLL));
        };
        let mut installed = Vec::new();
        for p in &plan {
            let name = extension_name(&p.reference);
            for w in &p.waits_on {
                if let Some(why) = self.not_ready(w) {
                    set_ready(
                        &mut status.conditions,
                        false,
                        conditions::reason::CREATING,
                        format!(
                            "installing {}: waiting for Extension {w}, which owns CRDs it depends on, to become Ready ({why})",
                            p.reference
                        ),
                    );
                    return Ok(Action::requeue(WAIT_POLL));
                }
            }
            let key = format!("{ns}/{name}");
            if let Some(why) = p
                .deleting(&self.extensions, &self.crds, (&ns, &name))
                .await?
            {
                let message = format!(
                    "installing {}: {why}; it is installed once that is gone",
                    p.reference
                );
                set_ready(
                    &mut status.conditions,
                    false,
                    conditions::reason::CREATING,
                    message,
                );
                return Ok(Action::requeue(WAIT_POLL));
            }
            self.install(r, &ns, &name, p, &owner).await?;
            if let Some(why) = self.not_ready(&key) {
                set_ready(
                    &mut status.conditions,
                    false,
                    conditions::reason::CREATING,
                    format!("installing {} as Extension {key}: {why}", p.reference),
                );
                return Ok(Action::requeue(WAIT_POLL));
            }
            installed.push(key);
        }
        let Some((reference, digest)) =
            plan.last().map(|p| (p.reference.clone(), p.digest.clone()))
        else {
            return Err(Error::Invalid("the install plan is empty".to_owned()));
        };
        let name = extension_name(&reference);
        status.extension_record = Some(self.record(&ns, &name));
        // Its dependencies: those installed now, and those found installed.
        installed.pop();
        for w in plan.iter().flat_map(|p| &p.waits_on) {
            if !installed.contains(w) {
                installed.push(w.clone());
            }
        }
        set_ready(
            &mut status.conditions,
            true,
            conditions::reason::AVAILABLE,
            format!(
                "installed {reference} ({digest}) as Extension {ns}/{name}{}",
                if installed.is_empty() {
                    String::new()
                } else {
                    format!(", after its dependencies {}", installed.join(", "))
                }
            ),
        );
        Ok(Action::requeue(self.resync))
    }

    /// A request that became Ready says so with a Normal event.
    async fn written(&self, r: &ExtensionRequest, status: &Draft<ExtensionRequest>) {
        let was = conditions::get(conditions::of(r), conditions::TYPE_READY)
            .is_some_and(|c| c.status == "True");
        let now = conditions::get(&status.conditions, conditions::TYPE_READY)
            .filter(|c| c.status == "True");
        if let Some(c) = now
            && !was
        {
            self.sk
                .reporting
                .events
                .normal(
                    &r.object_ref(&()),
                    types::pkg::contract::conditions::INSTALLED,
                    c.message.clone().unwrap_or_default(),
                )
                .await;
        }
    }

    async fn cleanup(
        &self,
        _r: &Arc<ExtensionRequest>,
        _status: &mut Draft<ExtensionRequest>,
    ) -> Result<Cleanup, Error> {
        Ok(Cleanup::Done)
    }
}

fn owner_ref(r: &ExtensionRequest) -> Option<OwnerReference> {
    let mut o = r.controller_owner_ref(&())?;
    // Several requests may hold one Extension; none controls it.
    o.controller = Some(false);
    o.block_owner_deletion = None;
    Some(o)
}

impl ExtensionRequests {
    /// The package an installed Extension records for `wanted` (a reference
    /// with or without a tag), if it was installed from it.
    fn recorded(&self, ns: &str, wanted: &str) -> Option<Candidate> {
        let name = extension_name(wanted);
        let e = self.extensions.get(&ObjectRef::new(&name).within(ns))?;
        let (reference, digest) = e.annotations().get(PACKAGE_ANNOTATION)?.rsplit_once('@')?;
        let same = if oci::pull::tag_of(wanted).is_some() || wanted.contains('@') {
            reference == wanted
        } else {
            oci::xpkg::repository_of(reference) == oci::xpkg::repository_of(wanted)
        };
        same.then(|| {
            Some(Candidate {
                reference: reference.to_owned(),
                digest: Digest::parse(digest)?,
            })
        })
        .flatten()
    }

    /// What `status.extensionRecord` says of the Extension `ns/name`.
    fn record(&self, ns: &str, name: &str) -> TypedReference {
        TypedReference {
            api_version: "extensions.crossplane.io/v1alpha1".into(),
            kind: "Extension".into(),
            name: name.to_owned(),
            uid: self
                .extensions
                .get(&ObjectRef::new(name).within(ns))
                .and_then(|e| e.uid()),
        }
    }

    /// `Some(why)` while the Extension `namespace/name` is not Ready.
    fn not_ready(&self, key: &str) -> Option<String> {
        let (ns, name) = key.split_once('/')?;
        match self.extensions.get(&ObjectRef::new(name).within(ns)) {
            None => Some(format!("Extension {key} does not exist yet")),
            Some(e) if ready(&e) => None,
            Some(e) => Some(ready_message(&e)),
        }
    }

    /// A request for a CRD that is installed already: it points at the
    /// Extension that owns it (held by this request too when it is in the
    /// same namespace), or says nothing needed installing.
    async fn already_installed(
        &self,
        r: &ExtensionRequest,
        crd: &CustomResourceDefinition,
        status: &mut Draft<ExtensionRequest>,
    ) -> Result<Action, Error> {
        let ns = r.namespace().unwrap_or_default();
        let Some(owner) = crd.annotations().get(OWNER_ANNOTATION).cloned() else {
            status.extension_record = None;
            set_ready(
                &mut status.conditions,
                true,
                conditions::reason::AVAILABLE,
                format!(
                    "CRD {} is already installed, not by a stack; nothing to install",
                    crd.name_any()
                ),
            );
            return Ok(Action::requeue(self.resync));
        };
        let (ens, ename) = owner.split_once('/').unwrap_or_default();
        if ens == ns
            && let Some(o) = owner_ref(r)
        {
            self.hold(r, ename, &o).await?;
        }
        status.extension_record = Some(self.record(ens, ename));
        match self.not_ready(&owner) {
            None => {
                set_ready(
                    &mut status.conditions,
                    true,
                    conditions::reason::AVAILABLE,
                    format!("CRD {} is installed by Extension {owner}", crd.name_any()),
                );
                Ok(Action::requeue(self.resync))
            }
            Some(why) => {
                set_ready(
                    &mut status.conditions,
                    false,
                    conditions::reason::CREATING,
                    format!(
                        "CRD {} is installed by Extension {owner}, which is not Ready: {why}",
                        crd.name_any()
                    ),
                );
                Ok(Action::requeue(WAIT_POLL))
            }
        }
    }

    /// The field manager a request applies its Extensions with: one per
    /// request, so each request holds its own owner reference.
    fn manager_of(&self, r: &ExtensionRequest) -> String {
        let mut m = format!("{}.{}", self.field_manager, r.uid().unwrap_or_default());
        m.truncate(128);
        m
    }

    /// Adds this request to an Extension's owners.
    async fn hold(
        &self,
        r: &ExtensionRequest,
        name: &str,
        owner: &OwnerReference,
    ) -> Result<(), Error> {
        let ns = r.namespace().unwrap_or_default();
        let held = self
            .extensions
            .get(&ObjectRef::new(name).within(&ns))
            .is_some_and(|e| e.owner_references().iter().any(|o| o.uid == owner.uid));
        if held {
            return Ok(());
        }
        let body = json!({
            "apiVersion": "extensions.crossplane.io/v1alpha1", "kind": "Extension",
            "metadata": {"name": name, "namespace": ns, "ownerReferences": [owner]},
        });
        ssa::apply(
            &Api::<Extension>::namespaced(self.sk.client().clone(), &ns),
            name,
            &body,
            &self.manager_of(r),
        )
        .await
        .map_err(|e| Error::request("add the request to the Extension's owners", e))?;
        Ok(())
    }

    /// Makes the Extension record of one planned stack (held by this
    /// request) and installs its CRDs (all checked by a dry run first).
    async fn install(
        &self,
        r: &ExtensionRequest,
        ns: &str,
        name: &str,
        p: &Planned,
        owner: &OwnerReference,
    ) -> Result<(), Error> {
        let me = format!("{ns}/{name}");
        let label = stack_label(ns, name);
        let crds = Api::<CustomResourceDefinition>::all(self.sk.client().clone());
        if let Some(why) = p
            .stack
            .crds
            .iter()
            .find_map(|o| crate::crds::refused(o, false))
        {
            return Err(Error::Conflict(format!("{}: {why}", p.reference)));
        }
        let mut bodies = Vec::new();
        for object in &p.stack.crds {
            let crd_name = object
                .pointer("/metadata/name")
                .and_then(|n| n.as_str())
                .unwrap_or_default()
                .to_owned();
            let live = self.crds.get(&crd_name).await?;
            if let Some(live) = &live {
                let holder = ownership::holder(live.labels(), live.annotations());
                let owner_exists = match ownership::other_owner(&holder, &me) {
                    Some(o) => extension_exists(self.sk.client(), o).await?,
                    None => false,
                };
                if let Some(why) =
                    ownership::install_refusal(&p.reference, &me, &crd_name, &holder, owner_exists)
                {
                    return Err(Error::Conflict(why));
                }
            }
            let body = crd_body(object, &me, &label);
            let unchanged = live
                .as_ref()
                .is_some_and(|l| ownership::crd_unchanged(l, &body));
            bodies.push((crd_name, body, unchanged));
        }
        crate::crds::dry_run(
            &crds,
            &self.field_manager,
            &bodies
                .iter()
                .filter(|b| !b.2)
                .map(|(crd_name, body, _)| (crd_name.as_str(), body))
                .collect::<Vec<_>>(),
        )
        .await?;
        let owns: Vec<CrdRef> = p.stack.crds.iter().flat_map(crd_ref_of).collect();
        let mut depends_on: Vec<CrdRef> = Vec::new();
        for selector in &p.stack.depends_on {
            match (self.crds.installed(selector).await?, &selector.kind) {
                (Some(c), _) => depends_on.extend(crd_refs(&c, selector)),
                (None, Some(kind)) => depends_on.push(CrdRef {
                    kind: kind.clone(),
                    api_version: format!(
                        "{}/{}",
                        selector.group,
                        selector.version.clone().unwrap_or_default()
                    ),
                }),
                // Not installed yet, by name: installed before this stack,
                // so this does not happen; the next reconcile fills it in.
                (None, None) => {}
            }
        }
        let body = extension_body(ns, name, p, owner, (owns, depends_on));
        let api = Api::<Extension>::namespaced(self.sk.client().clone(), ns);
        let current = self.extensions.get(&ObjectRef::new(name).within(ns));
        // An Extension of this name from another repository (or applied
        // by hand) is another stack's: never overwritten.
        if let Some(e) = &current {
            let recorded = e
                .annotations()
                .get(PACKAGE_ANNOTATION)
                .and_then(|a| a.rsplit_once('@'))
                .map(|(reference, _)| oci::xpkg::repository_of(reference));
            if recorded.as_deref() != Some(oci::xpkg::repository_of(&p.reference).as_str()) {
                return Err(Error::Conflict(format!(
                    "{} would be recorded as Extension {ns}/{name}, which exists and {}; uninstall it first, or install this stack in another namespace",
                    p.reference,
                    recorded.map_or_else(
                        || "was not installed by an ExtensionRequest".to_owned(),
                        |r| format!("was installed from {r}")
                    )
                )));
            }
        }
        // Other requests may hold it too: its owners are compared apart.
        let held = current
            .as_ref()
            .is_some_and(|e| e.owner_references().iter().any(|o| o.uid == owner.uid));
        let mut compared = body.clone();
        compared.metadata.owner_references = None;
        let unchanged = held
            && current.as_ref().is_some_and(|e| {
                serde_json::to_value(&compared).is_ok_and(|c| ssa::unchanged(e.as_ref(), &c))
            });
        if !unchanged {
            ssa::apply(&api, name, &body, &self.manager_of(r))
                .await
                .map_err(|e| match e {
                    kube::Error::Api(a) if a.code == 422 || a.code == 400 => {
                        Error::Invalid(format!(
                            "the API server refuses the Extension record of {}: {}",
                            p.reference, a.message
                        ))
                    }
                    e => Error::request("apply the Extension record", e),
                })?;
        }
        for (crd_name, body, unchanged) in bodies {
            if unchanged {
                continue;
            }
            let applied = ssa::apply(&crds, &crd_name, &body, &self.field_manager)
                .await
                .map_err(|e| Error::request("apply a CRD of the stack", e))?;
            if !crate::crds::established(&applied) {
                tracing::debug!(crd = %crd_name, "installed; not established yet");
            }
        }
        Ok(())
    }
}

/// The controller, ready to run: it watches the Extensions requests hold
/// (a request waiting on an installing stack is woken when it changes).
pub fn controller(
    rt: &Runtime,
    index: Index,
    default_source: String,
    image_configs: &ImageConfigs,
    crds: super::known::Known,
    resync: Duration,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    let (extensions, writer) = kube::runtime::reflector::store();
    let extension_stream = watcher(
        Api::<Extension>::all(rt.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects();
    let ctrl = Controller::new(
        Api::<ExtensionRequest>::all(rt.client.clone()),
        watcher::Config::default(),
    );
    let requests = ctrl.store();
    // An ImageConfig change wakes every request not Ready: where a stack is
    // read from, and with which credentials, may have changed.
    let not_ready = image_configs::wake_all(requests.clone(), |r: &ExtensionRequest| {
        conditions::get(conditions::of(r), conditions::TYPE_READY)
            .is_none_or(|c| c.status != "True")
    });
    let ctrl = ctrl
        .watches_shared_stream(image_configs.changes(), not_ready)
        .watches_stream(extension_stream, move |e: Extension| {
            // The requests that hold it, and the requests waiting on it (any
            // in its namespace that is not Ready yet).
            let ns = e.namespace().unwrap_or_default();
            let holders: Vec<String> = e
                .owner_references()
                .iter()
                .filter(|o| o.kind == "ExtensionRequest")
                .map(|o| o.name.clone())
                .collect();
            requests
                .state()
                .iter()
                .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
                .filter(|r| {
                    holders.contains(&r.name_any())
                        || conditions::get(conditions::of(r.as_ref()), conditions::TYPE_READY)
                            .is_none_or(|c| c.status != "True")
                })
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        })
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    let reconciler = Arc::new(ExtensionRequests {
        sk: Skeleton::new(rt, CONTROLLER),
        field_manager: rt.field_manager(),
        index,
        default_source,
        crds,
        extensions,
        resync,
    });
    reconciler::run(ctrl, reconciler)
}
