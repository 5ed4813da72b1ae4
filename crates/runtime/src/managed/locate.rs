//! Where a managed object lives in its target cluster (its kind resolved
//! there), and the fix-it hints of failed requests to a target, so both
//! controllers word them alike.

use kube::{
    Api,
    api::{DynamicObject, GroupVersionKind},
    discovery::{ApiResource, Scope},
};

use crate::remote::{RemoteCluster, ResolveError};

/// A kind resolved in a target cluster, and where one object of it lives.
#[derive(Clone)]
pub struct Located {
    /// The Api for the object's namespace (or the cluster, for
    /// cluster-scoped kinds).
    pub api: Api<DynamicObject>,
    /// The kind as the cluster serves it.
    pub resource: ApiResource,
    /// The object's namespace: None for cluster-scoped kinds, the given one
    /// or "default" for namespaced kinds.
    pub namespace: Option<String>,
}

/// Why a kind could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum KindError {
    /// The cluster answered that it does not serve the kind.
    #[error(
        "{cluster} does not serve kind {kind} in apiVersion {api_version}: install its CRD there, or fix {field}"
    )]
    NotServed {
        /// The cluster, as messages name it.
        cluster: String,
        /// Kind.
        kind: String,
        /// apiVersion.
        api_version: String,
        /// The field to fix.
        field: &'static str,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The cluster did not answer discovery.
    #[error(transparent)]
    Request(#[from] RequestFailed),
}

/// Resolves `api_version`/`kind` in `cluster` and scopes it to `namespace`
/// (ignored for cluster-scoped kinds, "default" when unset for namespaced
/// ones). `described` names the cluster in messages; `field` is what the
/// user fixes when the kind is wrong.
pub async fn locate(
    cluster: &RemoteCluster,
    described: &str,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    field: &'static str,
) -> Result<Located, KindError> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = match cluster.resolve(&gvk).await {
        Ok(found) => found,
        Err(ResolveError::NotServed(source)) => {
            return Err(KindError::NotServed {
                cluster: described.to_owned(),
                kind: kind.to_owned(),
                api_version: api_version.to_owned(),
                field,
                source: Box::new(source),
            });
        }
        Err(ResolveError::Unreachable(source)) => {
            return Err(RequestFailed::new(
                format!("discovering kind {kind}"),
                described,
                field,
                source,
            )
            .into());
        }
    };
    let namespace = (caps.scope == Scope::Namespaced).then(|| {
        namespace
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
            .to_owned()
    });
    let api = match &namespace {
        Some(ns) => Api::namespaced_with(cluster.client.clone(), ns, &resource),
        None => Api::all_with(cluster.client.clone(), &resource),
    };
    Ok(Located {
        api,
        resource,
        namespace,
    })
}

/// A request to a target cluster failed; the message says what to do.
#[derive(Debug, thiserror::Error)]
#[error("{what} in {cluster} failed: {hint}")]
pub struct RequestFailed {
    /// What was attempted ("applying ConfigMap a/b").
    pub what: String,
    /// The cluster, as messages name it.
    pub cluster: String,
    /// What to do about it.
    pub hint: String,
    /// Cause.
    #[source]
    pub source: Box<kube::Error>,
}

impl RequestFailed {
    /// A failed request: `what` was attempted in `cluster`; `field` is what
    /// the user fixes when the cluster refuses it.
    pub fn new(what: String, cluster: &str, field: &str, source: kube::Error) -> Self {
        Self {
            what,
            cluster: cluster.to_owned(),
            hint: hint(&source, field),
            source: Box::new(source),
        }
    }
}

/// What to do about a failed request to a target.
pub fn hint(source: &kube::Error, field: &str) -> String {
    match source {
        kube::Error::Api(s) if s.code == 404 && s.message.contains("namespaces") => {
            "its namespace does not exist there yet (something else may be about to create it); retrying".to_owned()
        }
        kube::Error::Api(s) if s.code == 409 => {
            format!("it changed while it was written ({}); retrying", s.message)
        }
        kube::Error::Api(s) => format!("the cluster refused it ({}): fix {field}", s.message),
        _ => "the cluster did not answer; retrying".to_owned(),
    }
}

/// Whether a failed request found nothing there.
pub fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}
