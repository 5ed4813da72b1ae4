//! The Object controller: resolves references against the control cluster,
//! then observes, creates, updates or deletes the managed object in the
//! target cluster as the management and deletion policies allow.
//!
//! Deletion policy when the target does not answer: retried with backoff
//! for --deletion-timeout (default 5m) after the Object was deleted, then
//! the managed object is left in place with a Warning event. A missing
//! ProviderConfig or credentials Secret orphans at once (the target can never
//! be reached again).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, DynamicObject, GroupVersionKind, Patch},
    discovery::Scope,
    runtime::{Controller, WatchStreamExt, controller::Action, reflector::Store, watcher},
};
use prometheus::{Histogram, IntCounter, IntGaugeVec};
use runtime::{
    conditions,
    controller::{Reporting, Runtime},
    events::{ReconcileError, error_chain},
    expiring::Expiring,
    fieldpath, finalizers,
    limits::NotAnswering,
    remote::{RemoteClients, RemoteCluster, RemoteError, ResolveError},
    ssa,
};
use serde_json::{Value, json};
use types::{
    common::{ANNOTATION_EXTERNAL_NAME, ANNOTATION_PAUSED},
    kubernetes::v1alpha1::{
        CredentialsSource, ManagedObjectReference, Object, ObjectStatus, ProviderConfig,
        ProviderConfigUsage, ReadinessPolicy,
    },
};

use crate::{policy, references};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "object";
/// The finalizer every Object carries until its managed object is handled.
pub const FINALIZER: &str = "finalizer.managedresource.crossplane.io";
/// How long a connection (and so the credentials Secret read behind it) is
/// reused before the Secret is read again: a rotated kubeconfig takes effect
/// within this time.
const CONNECTION_TTL: Duration = Duration::from_secs(30);
/// How long a usage this process created is trusted to exist before the
/// watch shows it.
const JUST_CREATED: Duration = Duration::from_secs(10);
/// How often a deletion in progress looks again.
const DELETE_POLL: Duration = Duration::from_secs(2);

/// Why reconciling an Object failed; each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ProviderConfig does not exist.
    #[error("ProviderConfig {0} not found: create it, or set spec.providerConfigRef.name")]
    ProviderConfigNotFound(String),
    /// The credentials Secret does not exist.
    #[error("credentials Secret {0} of ProviderConfig {1} not found: create it with a kubeconfig")]
    CredentialsNotFound(String, String),
    /// The kubeconfig is unusable.
    #[error("cannot connect with ProviderConfig {0}")]
    Connect(String, #[source] RemoteError),
    /// The manifest is unusable.
    #[error("{0}")]
    InvalidManifest(String),
    /// The target does not serve the manifest's kind.
    #[error(
        "the target cluster of ProviderConfig {config} does not serve kind {kind} in apiVersion {api_version}: install its CRD there, or fix spec.forProvider.manifest"
    )]
    KindNotServed {
        /// ProviderConfig.
        config: String,
        /// Kind.
        kind: String,
        /// apiVersion.
        api_version: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// A reference is not resolvable yet (its object or field is missing).
    #[error("reference {index} ({what}) cannot be resolved yet: {why}; waiting")]
    ReferenceNotReady {
        /// Position in spec.references.
        index: usize,
        /// The referenced object.
        what: String,
        /// Why.
        why: String,
    },
    /// A reference is malformed.
    #[error("reference {0}: {1}")]
    InvalidReference(usize, String),
    /// References form a cycle.
    #[error("reference cycle: {0}: remove one of these references")]
    Cycle(String),
    /// The policy forbids what is needed.
    #[error("{0}")]
    NotAllowed(String),
    /// A request to the target failed.
    #[error("{what} failed: {hint}")]
    Target {
        /// What was attempted.
        what: String,
        /// What to do.
        hint: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// A request to the control cluster failed.
    #[error("failed to {0}")]
    Control(String, #[source] Box<kube::Error>),
    /// Serializing failed.
    #[error("failed to serialize")]
    Serialize(#[from] serde_json::Error),
    /// The target cluster did not answer in time (--remote-timeout).
    #[error(transparent)]
    NotAnswering(#[from] NotAnswering),
    /// An error whose text held a value read from a Secret: the same error,
    /// with the value replaced, so it reaches no condition, event or log.
    #[error("{message}")]
    Redacted {
        /// The category of the original error.
        category: &'static str,
        /// The original error's text, redacted.
        message: String,
    },
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::ProviderConfigNotFound(_) => "ProviderConfigNotFound",
            Error::CredentialsNotFound(..) => "CredentialsNotFound",
            Error::Connect(..) => "CannotConnectToTarget",
            Error::InvalidManifest(_) => "InvalidManifest",
            Error::KindNotServed { .. } => "KindNotServed",
            Error::ReferenceNotReady { .. } => "ReferenceNotResolved",
            Error::InvalidReference(..) => "InvalidReference",
            Error::Cycle(_) => "ReferenceCycle",
            Error::NotAllowed(_) => "NotAllowedByPolicy",
            Error::Target { .. } => "TargetRequestFailed",
            Error::Control(..) => "ControlClusterRequestFailed",
            Error::Serialize(_) => "CannotSerialize",
            Error::NotAnswering(_) => "TargetNotAnswering",
            Error::Redacted { category, .. } => category,
        }
    }
}

impl Error {
    /// This error, with any value read from a Secret cut out of its text.
    fn redacted(self, secrets: &policy::Redactions) -> Error {
        if secrets.is_empty() {
            return self;
        }
        let text = error_chain(&self);
        let message = secrets.text(&text);
        if message == text {
            return self;
        }
        Error::Redacted {
            category: self.category(),
            message,
        }
    }

    /// The manifest cannot be worked out (as opposed to: the target could
    /// not be reached).
    fn unresolvable(&self) -> bool {
        matches!(
            self,
            Error::InvalidManifest(_)
                | Error::ReferenceNotReady { .. }
                | Error::Cycle(_)
                | Error::InvalidReference(..)
        )
    }

    fn target_gone(&self) -> bool {
        matches!(
            self,
            Error::ProviderConfigNotFound(_) | Error::CredentialsNotFound(..)
        )
    }
}

/// Shared by reconciles.
pub struct Ctx {
    rt: Runtime,
    reporting: Reporting,
    remote: RemoteClients,
    local: RemoteCluster,
    objects: Store<Object>,
    configs: Store<ProviderConfig>,
    /// Targets by ProviderConfig: (the config's generation, the target).
    /// Reused for `CONNECTION_TTL`, so the credentials Secret is read once
    /// per config per TTL, not per Object; the entry of a deleted config
    /// expires with it.
    connections: Expiring<String, (String, RemoteCluster)>,
    /// Every ProviderConfigUsage, watched: a usage that exists costs no
    /// request; one that went missing (deleted by hand, or collected) is
    /// made again.
    usages: Store<ProviderConfigUsage>,
    /// Usages this process wrote in the last moments (by Object UID: for
    /// which ProviderConfig), which the watch may not have delivered yet (so
    /// they are not written twice).
    just_created: Expiring<String, String>,
    /// By Object UID: what this process last applied, as the target stored
    /// it (see `Applied`). Lost on restart, which costs at most one apply
    /// per Object whose manifest the API server normalises.
    applied: std::sync::Mutex<BTreeMap<String, Applied>>,
    deletion_timeout: Duration,
    drift: IntCounter,
    first_ready: Histogram,
}

fn target_error(what: String, source: kube::Error) -> Error {
    let hint = match &source {
        kube::Error::Api(s) if s.code == 404 && s.message.contains("namespaces") => {
            "its namespace does not exist in the target yet; retrying".to_owned()
        }
        kube::Error::Api(s) => format!(
            "the target refused it ({}): fix spec.forProvider.manifest",
            s.message
        ),
        _ => "the target did not answer; retrying".to_owned(),
    };
    Error::Target {
        what,
        hint,
        source: Box::new(source),
    }
}

/// Drops the connection and the client kept for a ProviderConfig, and for
/// every ProviderConfig that no longer exists, so neither outlives its owner.
fn forget_connection(ctx: &Ctx, name: &str) {
    let gone = ctx.connections.remove_where(|n| {
        n.as_str() == name
            || ctx
                .configs
                .get(&kube::runtime::reflector::ObjectRef::new(n))
                .is_none()
    });
    ctx.remote.release(name);
    for n in gone {
        ctx.remote.release(&n);
    }
}

/// The target cluster of a ProviderConfig.
async fn connect(ctx: &Ctx, obj: &Object) -> Result<RemoteCluster, Error> {
    let name = &obj.spec.provider_config_ref.name;
    ctx.configs.wait_until_ready().await.ok();
    let Some(pc) = ctx
        .configs
        .get(&kube::runtime::reflector::ObjectRef::new(name))
    else {
        forget_connection(ctx, name);
        return Err(Error::ProviderConfigNotFound(name.clone()));
    };
    // Keyed on the spec's generation: the config's status (its user count)
    // changes with every new Object and must not invalidate connections.
    let rv = pc.metadata.generation.unwrap_or_default().to_string();
    if let Some((cached_rv, target)) = ctx.connections.get(name)
        && cached_rv == rv
    {
        return Ok(target);
    }
    match pc.spec.credentials.source {
        CredentialsSource::InjectedIdentity => {
            // A client built while the config read a Secret is not needed.
            forget_connection(ctx, name);
            Ok(ctx.local.clone())
        }
        CredentialsSource::Secret => {
            let Some(sel) = &pc.spec.credentials.secret_ref else {
                forget_connection(ctx, name);
                return Err(Error::CredentialsNotFound(
                    "<unset>".to_owned(),
                    name.clone(),
                ));
            };
            let secrets: Api<Secret> = Api::namespaced(ctx.rt.client.clone(), &sel.namespace);
            let Some(secret) = secrets.get_opt(&sel.name).await.map_err(|e| {
                Error::Control(
                    format!("read Secret {}/{}", sel.namespace, sel.name),
                    Box::new(e),
                )
            })?
            else {
                forget_connection(ctx, name);
                return Err(Error::CredentialsNotFound(
                    format!("{}/{}", sel.namespace, sel.name),
                    name.clone(),
                ));
            };
            let target = ctx
                .remote
                .for_secret(name, &secret, &sel.key)
                .map_err(|e| Error::Connect(name.clone(), e))?;
            ctx.connections.insert(name.clone(), (rv, target.clone()));
            Ok(target)
        }
    }
}

/// Label of a ProviderConfigUsage naming its ProviderConfig (the
/// ProviderConfig controller lists its users by it).
const USAGE_LABEL: &str = "kubernetes.crossplane.io/provider-config";

/// Records that `obj` uses its ProviderConfig (a ProviderConfigUsage named
/// after the Object's UID, owned by the Object so it goes with it). When
/// spec.providerConfigRef changes, the usage follows it: the old config is
/// free to go and the new one is protected.
async fn record_usage(ctx: &Ctx, obj: &Object) -> Result<(), Error> {
    let uid = obj.uid().unwrap_or_default();
    let config = &obj.spec.provider_config_ref.name;
    let recorded = ctx
        .usages
        .get(&kube::runtime::reflector::ObjectRef::new(&uid))
        .is_some_and(|u| {
            u.spec.provider_config_ref.name == *config
                && u.labels().get(USAGE_LABEL) == Some(config)
                && u.metadata.deletion_timestamp.is_none()
        });
    let just_written = ctx.just_created.get(&uid).is_some_and(|c| c == *config);
    if recorded || just_written {
        return Ok(());
    }
    let usages: Api<ProviderConfigUsage> = Api::all(ctx.rt.client.clone());
    let body = json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha1",
        "kind": "ProviderConfigUsage",
        "metadata": {
            "name": uid,
            "labels": {USAGE_LABEL: config},
            "ownerReferences": [{
                "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
                "name": obj.name_any(), "uid": uid,
            }],
        },
        "spec": {
            "providerConfigRef": {"name": config},
            "resourceRef": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "name": obj.name_any(), "uid": uid},
        },
    });
    // Server-side apply: creates the usage, or moves an existing one to the
    // config the Object names now.
    ssa::apply(&usages, &uid, &body, &ctx.rt.field_manager())
        .await
        .map_err(|e| Error::Control("record the ProviderConfigUsage".to_owned(), Box::new(e)))?;
    ctx.just_created.insert(uid, config.clone());
    Ok(())
}

/// A kind resolved in a cluster, with the Api for one object of it.
async fn api_for(
    cluster: &RemoteCluster,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    config: &str,
) -> Result<(Api<DynamicObject>, bool), Error> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = match cluster.resolve(&gvk).await {
        Ok(found) => found,
        Err(ResolveError::NotServed(source)) => {
            return Err(Error::KindNotServed {
                config: config.to_owned(),
                kind: kind.to_owned(),
                api_version: api_version.to_owned(),
                source: Box::new(source),
            });
        }
        Err(ResolveError::Unreachable(source)) => {
            return Err(target_error(format!("discovering kind {kind}"), source));
        }
    };
    let namespaced = caps.scope == Scope::Namespaced;
    let api = match (namespaced, namespace) {
        (true, Some(ns)) => Api::namespaced_with(cluster.client.clone(), ns, &ar),
        (true, None) => Api::namespaced_with(cluster.client.clone(), "default", &ar),
        (false, _) => Api::all_with(cluster.client.clone(), &ar),
    };
    Ok((api, namespaced))
}

/// Resolves spec.references in order against the control cluster and
/// returns the Object with every fromObject value written at its
/// toFieldPath, plus the referenced Objects (for uninstall ordering). When
/// `installing`, a referenced Object must also be Ready; a deletion only
/// needs the values to find what it created.
///
/// Values read from a Secret (other than its metadata) are added to
/// `secrets`, so that they are kept out of status, events and logs.
async fn resolve_references(
    ctx: &Ctx,
    obj: &Object,
    installing: bool,
    secrets: &mut policy::Redactions,
) -> Result<(Value, Vec<String>), Error> {
    let mut doc = serde_json::to_value(obj)?;
    let mut referenced = Vec::new();
    // Cycles first: waiting on a cycle would wait forever.
    let edges: BTreeMap<String, Vec<String>> = ctx
        .objects
        .state()
        .iter()
        .map(|o| {
            (
                o.name_any(),
                o.spec
                    .references
                    .iter()
                    .filter_map(references::object_target)
                    .map(str::to_owned)
                    .collect(),
            )
        })
        .chain(std::iter::once((
            obj.name_any(),
            obj.spec
                .references
                .iter()
                .filter_map(references::object_target)
                .map(str::to_owned)
                .collect(),
        )))
        .collect();
    if let Some(cycle) = references::cycle_through(&obj.name_any(), &edges) {
        return Err(Error::Cycle(cycle.join(" → ")));
    }
    for (index, r) in obj.spec.references.iter().enumerate() {
        let (api_version, kind, name, namespace, field_path) = match (&r.from_object, &r.depends_on)
        {
            (Some(f), _) => (
                &f.api_version,
                &f.kind,
                &f.name,
                f.namespace.as_deref(),
                Some(f.field_path.as_str()),
            ),
            (None, Some(d)) => (
                &d.api_version,
                &d.kind,
                &d.name,
                d.namespace.as_deref(),
                None,
            ),
            (None, None) => {
                return Err(Error::InvalidReference(
                    index,
                    "set dependsOn or fromObject".to_owned(),
                ));
            }
        };
        let what = match namespace {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        let not_ready = |why: String| Error::ReferenceNotReady {
            index,
            what: what.clone(),
            why,
        };
        // The paths first: a malformed one is the user's to fix, whatever
        // the referenced object holds (and whether or not it may be read).
        let paths = match field_path {
            Some(fp) => {
                let from = fieldpath::parse(fp).map_err(|e| {
                    Error::InvalidReference(index, format!("fromObject.fieldPath: {e}"))
                })?;
                let to = r.to_field_path.as_deref().unwrap_or_default();
                let to_path = fieldpath::parse(to).map_err(|e| {
                    Error::InvalidReference(index, format!("invalid toFieldPath: {e}"))
                })?;
                if !to.starts_with("spec.") {
                    return Err(Error::InvalidReference(
                        index,
                        format!(
                            "invalid toFieldPath {to:?}: it must be under spec, e.g. spec.forProvider.manifest.metadata.name"
                        ),
                    ));
                }
                Some((fp, from, to, to_path))
            }
            None => None,
        };
        let (api, _) = match api_for(&ctx.local, api_version, kind, namespace, "control").await {
            Ok(a) => a,
            Err(Error::KindNotServed { .. }) => {
                return Err(not_ready(format!(
                    "kind {kind} is not served by the control cluster"
                )));
            }
            Err(e) => return Err(e),
        };
        let Some(target) = api
            .get_opt(name)
            .await
            .map_err(|e| Error::Control(format!("read {what}"), Box::new(e)))?
        else {
            return Err(not_ready("it does not exist".to_owned()));
        };
        if references::object_target(r).is_some() {
            // An Object is there for its dependents once it is Ready: this is
            // what orders an install.
            let ready = target
                .data
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .is_some_and(|c| c["status"] == "True");
            if installing && !ready {
                return Err(not_ready("that Object is not Ready yet".to_owned()));
            }
            referenced.push(name.clone());
        }
        if let Some((fp, path, to, to_path)) = paths {
            let value = fieldpath::get(&serde_json::to_value(&target)?, &path)
                .filter(|v| !v.is_null())
                .cloned()
                .ok_or_else(|| not_ready(format!("{fp} is not set yet")))?;
            if api_version == "v1" && kind == "Secret" && !fp.starts_with("metadata") {
                secrets.add(&value);
            }
            fieldpath::set(&mut doc, &to_path, value).map_err(|e| {
                Error::InvalidReference(index, format!("invalid toFieldPath {to:?}: {e}"))
            })?;
        }
    }
    Ok((doc, referenced))
}

/// The manifest to apply: resolved, named (external-name, else the Object's
/// name), with type metadata checked. A reference's toFieldPath may have put
/// anything anywhere under spec, so every step is checked and a wrong shape
/// is named, never assumed.
fn desired_manifest(obj: &Object, resolved: &Value) -> Result<Value, Error> {
    let mut manifest = resolved
        .pointer("/spec/forProvider/manifest")
        .cloned()
        .unwrap_or(Value::Null);
    if !manifest.is_object() {
        return Err(Error::InvalidManifest("spec.forProvider.manifest is not an object: set it to the managed object's manifest (apiVersion, kind, metadata, ...)".to_owned()));
    }
    if manifest
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(Error::InvalidManifest("spec.forProvider.manifest has no apiVersion: set the apiVersion of the managed object (e.g. v1)".to_owned()));
    }
    if manifest
        .get("kind")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(Error::InvalidManifest("spec.forProvider.manifest has no kind: set the kind of the managed object (e.g. ConfigMap)".to_owned()));
    }
    if manifest
        .get("metadata")
        .is_some_and(|m| !m.is_object() && !m.is_null())
    {
        return Err(Error::InvalidManifest("spec.forProvider.manifest.metadata is not an object: it must hold the managed object's metadata (name, namespace, labels); fix the manifest, or the reference whose toFieldPath writes spec.forProvider.manifest.metadata".to_owned()));
    }
    if manifest
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        let name = obj
            .annotations()
            .get(ANNOTATION_EXTERNAL_NAME)
            .cloned()
            .unwrap_or_else(|| obj.name_any());
        fieldpath::set_fields(&mut manifest, &["metadata", "name"], json!(name)).map_err(|e| {
            Error::InvalidManifest(format!("invalid spec.forProvider.manifest: {e}"))
        })?;
    }
    if let Some(m) = manifest.as_object_mut() {
        m.remove("status");
    }
    policy::fold_string_data(&mut manifest);
    Ok(manifest)
}

/// The field manager of one Object: each Object owns its own fields.
fn field_manager(obj: &Object) -> String {
    format!("crossplane-rs/object/{}", obj.uid().unwrap_or_default())
}

struct Observed {
    live: Option<Value>,
    drifted: bool,
}

/// What this process last applied for an Object: a hash of the manifest it
/// applied, and the fields its field manager owns in the API server's answer
/// (`ssa::owned_by`), in the server's normalised form.
#[derive(Clone)]
struct Applied {
    manifest: u64,
    owned: Value,
}

fn manifest_hash(manifest: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    manifest.to_string().hash(&mut h);
    h.finish()
}

/// The managed object an Object names: its manifest (references resolved,
/// named, scoped), where it lives, and the Objects it references.
struct Located {
    manifest: Value,
    name: String,
    what: String,
    api: Api<DynamicObject>,
    referenced: Vec<String>,
}

/// Connects to the target and works out the managed object. When
/// `installing`, referenced Objects must be Ready (see resolve_references).
async fn locate(
    ctx: &Ctx,
    obj: &Object,
    installing: bool,
    secrets: &mut policy::Redactions,
) -> Result<Located, Error> {
    let target = connect(ctx, obj).await?;
    let (resolved, referenced) = resolve_references(ctx, obj, installing, secrets).await?;
    let mut manifest = desired_manifest(obj, &resolved)?;
    let text = |p: &str| {
        manifest
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (name, api_version, kind) = (text("/metadata/name"), text("/apiVersion"), text("/kind"));
    let namespace = manifest
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let (api, namespaced) = api_for(
        &target,
        &api_version,
        &kind,
        namespace.as_deref(),
        &obj.spec.provider_config_ref.name,
    )
    .await?;
    if !namespaced && let Some(m) = manifest.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("namespace");
    }
    Ok(Located {
        manifest,
        what: format!("{kind} {name}"),
        name,
        api,
        referenced,
    })
}

async fn sync(
    ctx: &Ctx,
    obj: &Object,
    secrets: &mut policy::Redactions,
) -> Result<Observed, Error> {
    record_usage(ctx, obj).await?;
    let wanted: BTreeSet<&str> = obj
        .spec
        .references
        .iter()
        .filter_map(references::object_target)
        .collect();
    release_referenced(ctx, obj, &wanted).await?;
    let Located {
        manifest,
        name,
        what,
        api,
        referenced,
    } = locate(ctx, obj, true, secrets).await?;
    for referenced in &referenced {
        add_referrer_finalizer(ctx, referenced, &obj.name_any()).await?;
    }
    let policy = obj.spec.management_policy;
    let uid = obj.uid().unwrap_or_default();
    let manager = field_manager(obj);
    let hash = manifest_hash(&manifest);
    let apply = || async {
        let applied = api
            .patch(&name, &ssa::params(&manager), &Patch::Apply(&manifest))
            .await
            .map_err(|e| target_error(format!("applying {what}"), e))?;
        let applied = serde_json::to_value(applied)?;
        remember_applied(ctx, &uid, hash, &applied, &manager);
        Ok::<_, Error>(applied)
    };
    let never_observed = obj.status.as_ref().is_none_or(|s| s.at_provider.is_none());
    if never_observed && policy::can_create(policy) {
        // First sync of an Object that may create: apply directly, the
        // answer is the live object (one request instead of two).
        return Ok(Observed {
            live: Some(apply().await?),
            drifted: false,
        });
    }
    let live = api
        .get_opt(&name)
        .await
        .map_err(|e| target_error(format!("reading {what}"), e))?
        .map(serde_json::to_value)
        .transpose()?;
    let remembered = ctx.applied.lock().ok().and_then(|a| a.get(&uid).cloned());
    let last = remembered.clone().filter(|a| a.manifest == hash);
    match live {
        None if !policy::can_create(policy) => Err(Error::NotAllowed(format!(
            "{what} does not exist and managementPolicy {policy:?} does not allow creating it: create it there, or change the policy"
        ))),
        Some(l)
            if !policy::can_update(policy)
                || up_to_date(&l, &manifest, last.as_ref(), &manager) =>
        {
            Ok(Observed {
                live: Some(l),
                drifted: false,
            })
        }
        existing => {
            let applied = apply().await?;
            // Someone changed a field this Object sets, although the Object
            // itself did not change since it last applied it: drift. An
            // apply that changed nothing (same resourceVersion) was only a
            // check after a restart.
            let rv = |v: &Value| v.pointer("/metadata/resourceVersion").cloned();
            let drifted = existing.as_ref().is_some_and(|l| rv(l) != rv(&applied))
                && match &remembered {
                    Some(r) => r.manifest == hash,
                    None => {
                        obj.status.as_ref().is_some_and(|s| s.at_provider.is_some())
                            && synced_generation(obj) == obj.metadata.generation
                    }
                };
            Ok(Observed {
                live: Some(applied),
                drifted,
            })
        }
    }
}

/// Whether applying `manifest` would change nothing: the fields this
/// Object's manager owns are as the API server stored them after our last
/// apply of the same manifest (`last`). Without that memory (a restart, or
/// an object this process never applied), the live object must carry the
/// manifest's values literally; an object the server normalised then gets
/// one apply, whose answer is remembered from then on.
fn up_to_date(live: &Value, manifest: &Value, last: Option<&Applied>, manager: &str) -> bool {
    match last {
        Some(last) => ssa::owned_by(live, manager).as_ref() == Some(&last.owned),
        None => ssa::unchanged_by(live, manifest),
    }
}

fn remember_applied(ctx: &Ctx, uid: &str, manifest: u64, applied: &Value, manager: &str) {
    let Some(owned) = ssa::owned_by(applied, manager) else {
        return;
    };
    if let Ok(mut a) = ctx.applied.lock() {
        // Entries of Objects deleted behind our back (their finalizer
        // removed by hand) are dropped once they could add up.
        if a.len() > ctx.objects.state().len() + 64 {
            let live: BTreeSet<String> =
                ctx.objects.state().iter().filter_map(|o| o.uid()).collect();
            a.retain(|k, _| live.contains(k));
        }
        a.insert(uid.to_owned(), Applied { manifest, owned });
    }
}

fn synced_generation(obj: &Object) -> Option<i64> {
    obj.status
        .as_ref()
        .and_then(|s| conditions::get(&s.conditions, conditions::TYPE_SYNCED))
        .filter(|c| c.status == "True")
        .and_then(|c| c.observed_generation)
}

async fn add_referrer_finalizer(ctx: &Ctx, referenced: &str, referrer: &str) -> Result<(), Error> {
    let api: Api<Object> = Api::all(ctx.rt.client.clone());
    let Some(target) = api
        .get_opt(referenced)
        .await
        .map_err(|e| Error::Control(format!("read Object {referenced}"), Box::new(e)))?
    else {
        return Ok(());
    };
    finalizers::add(&api, &target, &references::finalizer_for(referrer))
        .await
        .map_err(|e| {
            Error::Control(
                format!("add a finalizer to Object {referenced}"),
                Box::new(e),
            )
        })
}

/// Removes this Object's referrer finalizer from every Object it no longer
/// references (all of them when `keep` is empty): a reference removed from
/// the spec must not hold its former target for ever.
async fn release_referenced(ctx: &Ctx, obj: &Object, keep: &BTreeSet<&str>) -> Result<(), Error> {
    let finalizer = references::finalizer_for(&obj.name_any());
    let api: Api<Object> = Api::all(ctx.rt.client.clone());
    // Holders by the cache (no request when there is none); when deleting,
    // the references in the spec too, in case the cache is behind.
    let mut holders: BTreeSet<String> = ctx
        .objects
        .state()
        .iter()
        .filter(|o| finalizers::has(o.as_ref(), &finalizer))
        .map(|o| o.name_any())
        .collect();
    if keep.is_empty() {
        holders.extend(
            obj.spec
                .references
                .iter()
                .filter_map(references::object_target)
                .map(str::to_owned),
        );
    }
    for name in holders.iter().filter(|n| !keep.contains(n.as_str())) {
        // Read fresh: the finalizer patch is guarded by the current list.
        if let Some(target) = api
            .get_opt(name)
            .await
            .map_err(|e| Error::Control(format!("read Object {name}"), Box::new(e)))?
        {
            finalizers::remove(&api, &target, &finalizer)
                .await
                .map_err(|e| {
                    Error::Control(
                        format!("remove a finalizer from Object {name}"),
                        Box::new(e),
                    )
                })?;
        }
    }
    Ok(())
}

/// Where `live` (an object read from or applied to the target) lives.
fn identity(live: &Value) -> Option<ManagedObjectReference> {
    let text = |p: &str| live.pointer(p).and_then(Value::as_str).map(str::to_owned);
    Some(ManagedObjectReference {
        api_version: text("/apiVersion")?,
        kind: text("/kind")?,
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name")?,
    })
}

async fn write_status(
    ctx: &Ctx,
    obj: &Object,
    synced: types::common::Condition,
    ready: types::common::Condition,
    live: Option<Option<Value>>,
    secrets: &policy::Redactions,
) -> Result<bool, Error> {
    let mut status: ObjectStatus = obj.status.clone().unwrap_or_default();
    let now = conditions::now();
    let mut synced = synced;
    synced.observed_generation = obj.metadata.generation;
    synced.message = synced.message.map(|m| secrets.text(&m));
    let mut ready = ready;
    ready.message = ready.message.map(|m| secrets.text(&m));
    let mut changed = conditions::set(&mut status.conditions, synced, &now);
    changed |= conditions::set(&mut status.conditions, ready, &now);
    if let Some(live) = live {
        if let Some(id) = live.as_ref().and_then(identity)
            && status.managed_object_ref.as_ref() != Some(&id)
        {
            status.managed_object_ref = Some(id);
            changed = true;
        }
        let shown = live.map(|l| {
            let mut shown = policy::for_status(&l);
            secrets.value(&mut shown);
            shown
        });
        if status
            .at_provider
            .as_ref()
            .and_then(|a| a.manifest.as_ref())
            != shown.as_ref()
        {
            status.at_provider =
                Some(types::kubernetes::v1alpha1::ObjectObservation { manifest: shown });
            changed = true;
        }
    }
    if !changed {
        return Ok(false);
    }
    let api: Api<Object> = Api::all(ctx.rt.client.clone());
    ssa::apply_status(
        &api,
        &obj.name_any(),
        serde_json::to_value(&status)?,
        &ctx.rt.field_manager(),
    )
    .await
    .map_err(|e| Error::Control("write Object status".to_owned(), Box::new(e)))?;
    Ok(true)
}

fn jittered(d: Duration, obj: &Object) -> Duration {
    // ±10%, stable per object, so resyncs of many Objects spread out.
    let seed = obj
        .uid()
        .unwrap_or_default()
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let permille = 900 + (seed % 201);
    d.mul_f64(permille as f64 / 1000.0)
}

async fn reconcile(obj: Arc<Object>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let paused = obj
        .annotations()
        .get(ANNOTATION_PAUSED)
        .is_some_and(|v| v == "true");
    if paused {
        let already = obj
            .status
            .as_ref()
            .and_then(|s| conditions::get(&s.conditions, conditions::TYPE_SYNCED))
            .is_some_and(|c| c.reason.as_deref() == Some(conditions::reason::RECONCILE_PAUSED));
        if !already {
            let ready = obj
                .status
                .as_ref()
                .and_then(|s| conditions::get(&s.conditions, conditions::TYPE_READY).cloned())
                .unwrap_or_else(conditions::creating);
            let none = policy::Redactions::default();
            write_status(
                &ctx,
                &obj,
                conditions::reconcile_paused(),
                ready,
                None,
                &none,
            )
            .await?;
            let oref = obj.object_ref(&());
            ctx.reporting
                .events
                .normal(
                    &oref,
                    "ReconcilePaused",
                    "reconciling is paused by the crossplane.io/paused annotation".to_owned(),
                )
                .await;
        }
        return Ok(Action::await_change());
    }
    let deleting = obj.metadata.deletion_timestamp.is_some();
    if deleting && !finalizers::has(obj.as_ref(), FINALIZER) {
        return Ok(Action::await_change());
    }
    ctx.reporting
        .reconcile(obj.as_ref(), async {
            let mut secrets = policy::Redactions::default();
            apply_or_cleanup(&ctx, &obj, &mut secrets)
                .await
                .map_err(|e| e.redacted(&secrets))
        })
        .await
}

/// One reconcile of an Object that is not paused. Values read from Secrets
/// while resolving references are added to `secrets`.
async fn apply_or_cleanup(
    ctx: &Ctx,
    obj: &Object,
    secrets: &mut policy::Redactions,
) -> Result<Action, Error> {
    let api: Api<Object> = Api::all(ctx.rt.client.clone());
    if obj.metadata.deletion_timestamp.is_some() {
        return cleanup(ctx, &api, obj, secrets).await;
    }
    finalizers::add(&api, obj, FINALIZER)
        .await
        .map_err(|e| Error::Control("add the finalizer".to_owned(), Box::new(e)))?;
    match ctx
        .rt
        .clusters
        .call(&target_of(obj), sync(ctx, obj, secrets))
        .await
    {
        Ok(observed) => {
            let live = observed.live.unwrap_or(Value::Null);
            let policy = obj
                .spec
                .readiness
                .as_ref()
                .map(|r| r.policy)
                .unwrap_or(ReadinessPolicy::SuccessfulCreate);
            let ready = match policy::unready(policy, &live) {
                None => conditions::available(),
                Some(why) => conditions::unavailable(why),
            };
            let was_ready = obj
                .status
                .as_ref()
                .and_then(|s| conditions::get(&s.conditions, conditions::TYPE_READY))
                .is_some_and(|c| c.status == "True");
            let now_ready = ready.status == "True";
            write_status(
                ctx,
                obj,
                conditions::reconcile_success(),
                ready,
                Some(Some(live.clone())),
                secrets,
            )
            .await?;
            ctx.rt
                .clusters
                .call(&target_of(obj), publish_connection_details(ctx, obj, &live))
                .await?;
            let oref = obj.object_ref(&());
            if observed.drifted {
                ctx.drift.inc();
                ctx.reporting.events.normal(&oref, "DriftCorrected", "the managed object was changed outside this Object; its fields were put back".to_owned()).await;
            }
            if now_ready
                && !was_ready
                && let Some(created) = obj.creation_timestamp()
            {
                let ms = k8s_openapi::jiff::Timestamp::now().as_millisecond()
                    - created.0.as_millisecond();
                ctx.first_ready.observe(ms.max(0) as f64 / 1000.0);
            }
            Ok(Action::requeue(jittered(ctx.rt.args.poll_interval, obj)))
        }
        // A lost race is looked at again, not shown as a failure.
        Err(e) if e.is_conflict() => Err(e),
        Err(e) => {
            let msg = error_chain(&e);
            let ready = obj
                .status
                .as_ref()
                .and_then(|s| conditions::get(&s.conditions, conditions::TYPE_READY).cloned())
                .filter(|c| c.status == "True")
                .unwrap_or_else(|| conditions::unavailable(msg.clone()));
            write_status(
                ctx,
                obj,
                conditions::reconcile_error(msg),
                ready,
                None,
                secrets,
            )
            .await?;
            Err(e)
        }
    }
}

/// Publishes spec.connectionDetails to spec.writeConnectionSecretToRef.
async fn publish_connection_details(ctx: &Ctx, obj: &Object, _live: &Value) -> Result<(), Error> {
    let Some(to) = &obj.spec.write_connection_secret_to_ref else {
        return Ok(());
    };
    if obj.spec.connection_details.is_empty() {
        return Ok(());
    }
    let target = connect(ctx, obj).await?;
    let mut data = serde_json::Map::new();
    for d in &obj.spec.connection_details {
        let (api, _) = api_for(
            &target,
            &d.api_version,
            &d.kind,
            d.namespace.as_deref(),
            &obj.spec.provider_config_ref.name,
        )
        .await?;
        let Some(src) = api
            .get_opt(&d.name)
            .await
            .map_err(|e| target_error(format!("reading {} {}", d.kind, d.name), e))?
        else {
            continue;
        };
        let path = fieldpath::parse(&d.field_path).map_err(Error::InvalidManifest)?;
        let Some(value) = fieldpath::get(&serde_json::to_value(&src)?, &path).cloned() else {
            continue;
        };
        // A Secret's data is already base64; anything else is encoded here.
        let encoded = if d.kind == "Secret" && d.field_path.starts_with("data") {
            value
        } else {
            let text = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            json!(k8s_openapi::ByteString(text.into_bytes()))
        };
        data.insert(d.to_connection_secret_key.clone(), encoded);
    }
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": to.name, "namespace": to.namespace,
            "ownerReferences": [{"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "name": obj.name_any(), "uid": obj.uid().unwrap_or_default(), "controller": true}],
        },
        "type": "connection.crossplane.io/v1alpha1",
        "data": data,
    });
    let secrets: Api<Secret> = Api::namespaced(ctx.rt.client.clone(), &to.namespace);
    if let Some(current) = secrets
        .get_opt(&to.name)
        .await
        .map_err(|e| Error::Control("read the connection Secret".to_owned(), Box::new(e)))?
        && ssa::unchanged_by(&serde_json::to_value(current)?, &secret)
    {
        return Ok(());
    }
    secrets
        .patch(
            &to.name,
            &ssa::params(&ctx.rt.field_manager()),
            &Patch::Apply(&secret),
        )
        .await
        .map_err(|e| Error::Control("write the connection Secret".to_owned(), Box::new(e)))?;
    Ok(())
}

async fn cleanup(
    ctx: &Ctx,
    api: &Api<Object>,
    obj: &Object,
    secrets: &mut policy::Redactions,
) -> Result<Action, Error> {
    // Referrers hold this Object until their own managed objects are gone.
    if obj
        .finalizers()
        .iter()
        .any(|f| f.starts_with(references::REFERRED_BY))
    {
        let ready = conditions::deleting();
        write_status(
            ctx,
            obj,
            conditions::reconcile_success(),
            ready,
            None,
            secrets,
        )
        .await?;
        return Ok(Action::requeue(DELETE_POLL));
    }
    let done = match ctx
        .rt
        .clusters
        .call(&target_of(obj), delete_managed(ctx, obj, secrets))
        .await
    {
        Ok(done) => done,
        Err(e) if e.target_gone() => {
            orphan(ctx, obj, &secrets.text(&error_chain(&e))).await;
            true
        }
        Err(e) if e.unresolvable() || matches!(e, Error::KindNotServed { .. }) => {
            // Nothing was ever applied from it (delete_managed uses the
            // recorded identity when there is one).
            tracing::info!(object = %obj.name_any(), reason = %secrets.text(&error_chain(&e)), "nothing to delete");
            true
        }
        Err(e) => {
            let since = obj
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(|t| {
                    k8s_openapi::jiff::Timestamp::now().as_millisecond() - t.0.as_millisecond()
                })
                .unwrap_or(0);
            if since >= ctx.deletion_timeout.as_millis() as i64 {
                orphan(
                    ctx,
                    obj,
                    &format!(
                        "the target could not be reached for {:?}: {}",
                        ctx.deletion_timeout,
                        secrets.text(&error_chain(&e))
                    ),
                )
                .await;
                true
            } else {
                return Err(e);
            }
        }
    };
    if !done {
        return Ok(Action::requeue(DELETE_POLL));
    }
    release_referenced(ctx, obj, &BTreeSet::new()).await?;
    if let (Ok(mut applied), Some(uid)) = (ctx.applied.lock(), obj.uid()) {
        applied.remove(&uid);
    }
    ctx.just_created.remove(&obj.uid().unwrap_or_default());
    let usages: Api<ProviderConfigUsage> = Api::all(ctx.rt.client.clone());
    match usages
        .delete(&obj.uid().unwrap_or_default(), &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            return Err(Error::Control(
                "delete the ProviderConfigUsage".to_owned(),
                Box::new(e),
            ));
        }
    }
    finalizers::remove(api, obj, FINALIZER)
        .await
        .map_err(|e| Error::Control("remove the finalizer".to_owned(), Box::new(e)))?;
    Ok(Action::await_change())
}

/// The target cluster of an Object, as --remote-timeout's messages and
/// circuit breaker name it.
fn target_of(obj: &Object) -> String {
    format!(
        "the target cluster of ProviderConfig {}",
        obj.spec.provider_config_ref.name
    )
}

async fn orphan(ctx: &Ctx, obj: &Object, why: &str) {
    let oref = obj.object_ref(&());
    ctx.reporting
        .events
        .warning(
            &oref,
            "ManagedObjectOrphaned",
            format!("left the managed object in place: {why}"),
        )
        .await;
}

/// Deletes the managed object when the policies allow. Ok(true) once it is
/// gone (or must be left in place). When the manifest can no longer be
/// worked out (a reference's source is gone), the object recorded in
/// status.managedObjectRef is deleted: it is what was applied.
async fn delete_managed(
    ctx: &Ctx,
    obj: &Object,
    secrets: &mut policy::Redactions,
) -> Result<bool, Error> {
    if !policy::can_delete(obj.spec.management_policy, obj.spec.deletion_policy) {
        return Ok(true);
    }
    let recorded = obj
        .status
        .as_ref()
        .and_then(|s| s.managed_object_ref.clone());
    let (name, what, api) = match (locate(ctx, obj, false, secrets).await, recorded) {
        (
            Ok(Located {
                name, what, api, ..
            }),
            _,
        ) => (name, what, api),
        (Err(e), Some(r)) if e.unresolvable() => {
            tracing::info!(object = %obj.name_any(), reason = %secrets.text(&error_chain(&e)), "deleting the recorded managed object");
            let target = connect(ctx, obj).await?;
            let (api, _) = api_for(
                &target,
                &r.api_version,
                &r.kind,
                r.namespace.as_deref(),
                &obj.spec.provider_config_ref.name,
            )
            .await?;
            (r.name.clone(), format!("{} {}", r.kind, r.name), api)
        }
        (Err(e), _) => return Err(e),
    };
    let Some(live) = api
        .get_opt(&name)
        .await
        .map_err(|e| target_error(format!("reading {what}"), e))?
    else {
        return Ok(true);
    };
    if live.metadata.deletion_timestamp.is_none() {
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(true),
            Err(e) => return Err(target_error(format!("deleting {what}"), e)),
        }
    }
    Ok(api
        .get_opt(&name)
        .await
        .map_err(|e| target_error(format!("reading {what}"), e))?
        .is_none())
}

fn error_policy(obj: Arc<Object>, _error: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.reporting.retry(obj.as_ref())
}

/// Updates the managed-objects gauge from the cache, by Synced and Ready.
fn count_managed(objects: &Store<Object>, gauge: &IntGaugeVec) {
    let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
    for s in ["True", "False", "Unknown"] {
        for r in ["True", "False", "Unknown"] {
            counts.insert((s.to_owned(), r.to_owned()), 0);
        }
    }
    for o in objects.state() {
        let get = |t: &str| {
            o.status
                .as_ref()
                .and_then(|s| conditions::get(&s.conditions, t))
                .map(|c| c.status.clone())
                .unwrap_or_else(|| "Unknown".to_owned())
        };
        *counts
            .entry((get(conditions::TYPE_SYNCED), get(conditions::TYPE_READY)))
            .or_default() += 1;
    }
    for ((s, r), n) in counts {
        gauge.with_label_values(&[&s, &r]).set(n);
    }
}

/// The Object controller.
pub fn controller(
    rt: &Runtime,
    deletion_timeout: Duration,
) -> Result<impl Future<Output = ()> + use<>, prometheus::Error> {
    let drift = IntCounter::new(
        "crossplane_rs_drift_corrections_total",
        "Managed objects changed outside their Object and put back.",
    )?;
    let first_ready = Histogram::with_opts(
        prometheus::HistogramOpts::new(
            "crossplane_rs_time_to_first_ready_seconds",
            "Time from an Object's creation to its first Ready=True.",
        )
        .buckets(vec![0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0]),
    )?;
    let managed = IntGaugeVec::new(
        prometheus::Opts::new(
            "crossplane_rs_managed_objects",
            "Objects by their Synced and Ready condition status.",
        ),
        &["synced", "ready"],
    )?;
    rt.metrics.registry().register(Box::new(drift.clone()))?;
    rt.metrics
        .registry()
        .register(Box::new(first_ready.clone()))?;
    rt.metrics.registry().register(Box::new(managed.clone()))?;
    // Status-only updates (most of them our own) do not wake an Object: only
    // what changes the desired state or the lifecycle does.
    let (objects, writer) = kube::runtime::reflector::store();
    let object_events = watcher(
        Api::<Object>::all(rt.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .applied_objects()
    .predicate_filter(
        desired_state_hash,
        kube::runtime::utils::PredicateConfig::default(),
    );
    let ctrl = Controller::for_stream(object_events, objects.clone());
    let (configs, config_writer) = kube::runtime::reflector::store();
    let config_reflector = watcher(
        Api::<ProviderConfig>::all(rt.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(config_writer)
    .for_each(|_| futures::future::ready(()));
    let (usages, usage_writer) = kube::runtime::reflector::store();
    let usage_reflector = watcher(
        Api::<ProviderConfigUsage>::all(rt.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(usage_writer)
    .for_each(|_| futures::future::ready(()));
    let ctx = Arc::new(Ctx {
        rt: rt.clone(),
        reporting: Reporting::new(rt, CONTROLLER),
        remote: RemoteClients::new(rt.metrics.clone(), rt.args.allow_insecure_remote_tls),
        local: RemoteCluster::new(rt.client.clone(), "control"),
        objects: objects.clone(),
        configs,
        connections: Expiring::new(CONNECTION_TTL),
        usages,
        just_created: Expiring::new(JUST_CREATED),
        applied: Default::default(),
        deletion_timeout,
        drift,
        first_ready,
    });
    // Referrers and referenced Objects wake each other: a referenced Object
    // changes (its status gains the value a referrer waits for) or loses a
    // referrer finalizer.
    let referrers = objects.clone();
    let run = ctrl
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown())
        .watches(
            Api::<Object>::all(rt.client.clone()),
            watcher::Config::default(),
            move |changed: Object| {
                let name = changed.name_any();
                referrers
                    .state()
                    .into_iter()
                    .filter(|o| {
                        o.spec
                            .references
                            .iter()
                            .filter_map(references::object_target)
                            .any(|t| t == name)
                    })
                    .map(|o| kube::runtime::reflector::ObjectRef::from_obj(o.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .run(reconcile, error_policy, ctx)
        .for_each(move |_| {
            count_managed(&objects, &managed);
            futures::future::ready(())
        });
    let shutdown = rt.shutdown();
    Ok(async move {
        tokio::select! {
            () = async { tokio::join!(run, config_reflector, usage_reflector); } => {},
            () = shutdown => {},
        }
    })
}

/// What wakes an Object: its spec (generation), annotations (paused,
/// external-name), labels, finalizers (referrers) and deletion.
fn desired_state_hash(o: &Object) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    o.metadata.generation.hash(&mut h);
    o.metadata.annotations.hash(&mut h);
    o.metadata.labels.hash(&mut h);
    // Finalizers matter only once deleting (a referrer letting go); the
    // finalizer an Object gets on its first sync must not wake it again.
    if let Some(deleted) = &o.metadata.deletion_timestamp {
        deleted.0.as_millisecond().hash(&mut h);
        o.metadata.finalizers.hash(&mut h);
    }
    Some(h.finish())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use runtime::fieldpath;

    use super::*;

    fn object() -> Object {
        serde_json::from_value(json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": "obj"},
            "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns"}}}},
        }))
        .unwrap()
    }

    #[test]
    fn a_string_written_over_the_manifest_metadata_is_refused_naming_the_path() {
        let obj = object();
        let mut doc = serde_json::to_value(&obj).unwrap();
        let path = fieldpath::parse("spec.forProvider.manifest.metadata").unwrap();
        fieldpath::set(&mut doc, &path, json!("a-string")).unwrap();
        let err = desired_manifest(&obj, &doc).unwrap_err().to_string();
        assert!(
            err.contains("spec.forProvider.manifest.metadata is not an object"),
            "{err}"
        );
    }

    #[test]
    fn the_manifest_is_named_after_the_object_by_default() {
        let obj = object();
        let doc = serde_json::to_value(&obj).unwrap();
        let m = desired_manifest(&obj, &doc).unwrap();
        assert_eq!(m.pointer("/metadata/name"), Some(&json!("obj")));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(
                    "apiVersion|kind|metadata|name|namespace|[a-z]",
                    inner,
                    0..3
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        /// Whatever a reference writes wherever under spec, working out the
        /// manifest answers Ok or an error; it never panics.
        #[test]
        fn no_value_written_by_a_reference_crashes_the_provider(
            to in prop_oneof![
                "spec\\.forProvider\\.manifest(\\.(metadata|name|namespace|apiVersion|kind|data|[a-z])){0,3}",
                "spec(\\.(forProvider|manifest|metadata|[a-z])){0,4}",
            ],
            value in json_value(),
        ) {
            let obj = object();
            let mut doc = serde_json::to_value(&obj).unwrap();
            if let Ok(path) = fieldpath::parse(&to) && fieldpath::set(&mut doc, &path, value).is_ok() {
                let _ = desired_manifest(&obj, &doc);
            }
        }
    }
}
