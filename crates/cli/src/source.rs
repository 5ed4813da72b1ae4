//! Where a trace reads from: [`Source`] (gets, lists and kind lookups that
//! say "forbidden" or "missing" rather than fail), [`Kube`] against the
//! API server, and the kinds a trace reads ([`kinds`]). The tree builders
//! are written against the trait, so unit tests give them objects without
//! a cluster.

use std::{collections::BTreeSet, sync::Mutex};

use kube::{
    Api, Client,
    api::{DynamicObject, ListParams},
    discovery::ApiResource,
};
use serde_json::Value;

/// What a read found.
#[derive(Clone, Debug, PartialEq)]
pub enum Got {
    Found(Value),
    Missing,
    /// The user may not read it: what they would need to read, as
    /// `<resource> [in <namespace>]`.
    Forbidden(String),
    /// Any other failure, said in one line.
    Failed(String),
}

/// Why a list could not be read.
#[derive(Clone, Debug, PartialEq)]
pub enum Refused {
    Forbidden(String),
    Failed(String),
}

impl Refused {
    /// The state and message a node shows for it.
    pub fn explain(&self) -> (&'static str, String) {
        match self {
            Self::Forbidden(what) => ("forbidden", forbidden(what)),
            Self::Failed(why) => ("error", why.clone()),
        }
    }
}

/// The message of a forbidden read.
pub fn forbidden(what: &str) -> String {
    format!("forbidden: {what} (bind crossplane-view)")
}

/// What a trace reads: the cluster's objects, as JSON with their
/// `apiVersion` and `kind` set.
pub trait Source {
    /// The object `name` (in `ns` for a namespaced kind).
    async fn get(&self, r: &ApiResource, ns: Option<&str>, name: &str) -> Got;
    /// The objects of kind `r` (in `ns`, or everywhere), with the labels
    /// `selector` selects.
    async fn list(
        &self,
        r: &ApiResource,
        ns: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<Value>, Refused>;
    /// The resource serving `kind` of `api_version`: `Failed` when the API
    /// server serves none, `Forbidden` when its discovery may not be read.
    async fn resolve(&self, api_version: &str, kind: &str) -> Result<ApiResource, Refused>;
}

/// The kinds a trace reads.
pub mod kinds {
    use k8s_openapi::{
        api::{
            apps::v1::Deployment,
            core::v1::Pod,
            rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
        },
        apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    };
    use kube::discovery::ApiResource;
    use types::{
        compute::v1alpha1::KubernetesCluster,
        extensions::v1alpha1::{Extension, ExtensionRequest},
        kubernetes::v1alpha1::{Object, ProviderConfig},
        pkg::v1::{Provider, ProviderRevision},
        workload::v1alpha1::{KubernetesApplication, KubernetesApplicationResource},
    };

    pub fn provider() -> ApiResource {
        ApiResource::erase::<Provider>(&())
    }
    pub fn revision() -> ApiResource {
        ApiResource::erase::<ProviderRevision>(&())
    }
    pub fn crd() -> ApiResource {
        ApiResource::erase::<CustomResourceDefinition>(&())
    }
    pub fn mrd() -> ApiResource {
        ApiResource::erase::<types::apiextensions::v1alpha1::ManagedResourceDefinition>(&())
    }
    pub fn deployment() -> ApiResource {
        ApiResource::erase::<Deployment>(&())
    }
    pub fn pod() -> ApiResource {
        ApiResource::erase::<Pod>(&())
    }
    pub fn cluster_role() -> ApiResource {
        ApiResource::erase::<ClusterRole>(&())
    }
    pub fn cluster_role_binding() -> ApiResource {
        ApiResource::erase::<ClusterRoleBinding>(&())
    }
    pub fn role() -> ApiResource {
        ApiResource::erase::<Role>(&())
    }
    pub fn role_binding() -> ApiResource {
        ApiResource::erase::<RoleBinding>(&())
    }
    pub fn application() -> ApiResource {
        ApiResource::erase::<KubernetesApplication>(&())
    }
    pub fn application_resource() -> ApiResource {
        ApiResource::erase::<KubernetesApplicationResource>(&())
    }
    pub fn cluster() -> ApiResource {
        ApiResource::erase::<KubernetesCluster>(&())
    }
    pub fn extension_request() -> ApiResource {
        ApiResource::erase::<ExtensionRequest>(&())
    }
    pub fn extension() -> ApiResource {
        ApiResource::erase::<Extension>(&())
    }
    pub fn object() -> ApiResource {
        ApiResource::erase::<Object>(&())
    }
    pub fn provider_config() -> ApiResource {
        ApiResource::erase::<ProviderConfig>(&())
    }
}

/// A kind read (and where), for `--watch` to watch.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Read {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespace: Option<String>,
}

impl Read {
    pub fn resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: if self.group.is_empty() {
                self.version.clone()
            } else {
                format!("{}/{}", self.group, self.version)
            },
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }
}

/// The API server, as the user's kubeconfig reaches it. Remembers what it
/// read, for `--watch`.
pub struct Kube {
    client: Client,
    read: Mutex<BTreeSet<Read>>,
}

impl Kube {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            read: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The kinds (and namespaces) read so far.
    pub fn read(&self) -> BTreeSet<Read> {
        self.read.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn api(&self, r: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
        if let Ok(mut read) = self.read.lock() {
            read.insert(Read {
                group: r.group.clone(),
                version: r.version.clone(),
                kind: r.kind.clone(),
                plural: r.plural.clone(),
                namespace: ns.map(str::to_owned),
            });
        }
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, r),
            None => Api::all_with(self.client.clone(), r),
        }
    }
}

/// `<plural> [in <ns>]`, as a forbidden message names it.
pub fn what(r: &ApiResource, ns: Option<&str>) -> String {
    let plural = if r.group.is_empty() {
        r.plural.clone()
    } else {
        format!("{}.{}", r.plural, r.group)
    };
    match ns {
        Some(ns) => format!("{plural} in {ns}"),
        None => plural,
    }
}

/// The object as JSON, with the type its list response may have left out.
fn typed(o: DynamicObject, r: &ApiResource) -> Value {
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), Value::String(r.api_version.clone()));
        m.insert("kind".into(), Value::String(r.kind.clone()));
    }
    v
}

fn refused(e: kube::Error, r: &ApiResource, ns: Option<&str>) -> Refused {
    match e {
        kube::Error::Api(s) if s.code == 403 => Refused::Forbidden(what(r, ns)),
        e => Refused::Failed(format!("cannot read {}: {e}", what(r, ns))),
    }
}

impl Source for Kube {
    async fn get(&self, r: &ApiResource, ns: Option<&str>, name: &str) -> Got {
        match self.api(r, ns).get_opt(name).await {
            Ok(Some(o)) => Got::Found(typed(o, r)),
            Ok(None) => Got::Missing,
            Err(e) => match refused(e, r, ns) {
                Refused::Forbidden(w) => Got::Forbidden(w),
                Refused::Failed(w) => Got::Failed(w),
            },
        }
    }

    async fn list(
        &self,
        r: &ApiResource,
        ns: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<Value>, Refused> {
        let mut lp = ListParams::default();
        if let Some(s) = selector {
            lp = lp.labels(s);
        }
        let list = self
            .api(r, ns)
            .list(&lp)
            .await
            .map_err(|e| refused(e, r, ns))?;
        Ok(list.items.into_iter().map(|o| typed(o, r)).collect())
    }

    async fn resolve(&self, api_version: &str, kind: &str) -> Result<ApiResource, Refused> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((r, _)) => Ok(r),
            Err(kube::Error::Api(s)) if s.code == 403 => {
                Err(Refused::Forbidden(format!("discovery of {api_version}")))
            }
            Err(_) => Err(Refused::Failed(format!(
                "the API server serves no {kind} in {api_version}"
            ))),
        }
    }
}
