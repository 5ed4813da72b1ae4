//! What a dependent reads: a target object, the shared watch that serves
//! it, and what the cache knows about it.

use std::{fmt, sync::Arc};

use kube::{Api, api::DynamicObject, discovery::ApiResource, runtime::watcher};

use crate::remote::RemoteCluster;

/// Which objects of a kind one shared watch covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every object of the kind (all namespaces), optionally only those
    /// matching a label selector (e.g. `app=web,tier!=db`). For the target
    /// kinds of managed objects in a remote cluster: one watch per (cluster
    /// client, kind, selector). An object outside the selector reads as
    /// [`Cached::Absent`].
    Kind {
        /// A label selector, in the API's syntax.
        labels: Option<String>,
    },
    /// One object, by namespace and name (`fieldSelector=metadata.name=…`).
    /// For objects a dependent references in the control cluster (a
    /// ConfigMap or Secret a reference reads), where watching the whole kind
    /// would cache far more than needed.
    Object,
}

/// One object a dependent reads.
#[derive(Clone)]
pub struct Target {
    /// The cluster it lives in; watches are shared per [`RemoteCluster::id`].
    pub cluster: RemoteCluster,
    /// Its kind, as discovery resolved it in that cluster.
    pub resource: ApiResource,
    /// Its namespace; `None` for a cluster-scoped kind.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// What the shared watch that serves it covers.
    pub scope: Scope,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("cluster", &self.cluster.name)
            .field("kind", &self.resource.kind)
            .field("apiVersion", &self.resource.api_version)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("scope", &self.scope)
            .finish()
    }
}

impl Target {
    /// The Api to ask its cluster for it, with a request of its own (not
    /// through the watch).
    pub fn api(&self) -> Api<DynamicObject> {
        let client = self.cluster.client.clone();
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &self.resource),
            None => Api::all_with(client, &self.resource),
        }
    }

    pub(super) fn watch_key(&self) -> WatchKey {
        WatchKey {
            cluster: self.cluster.id(),
            api_version: self.resource.api_version.clone(),
            plural: self.resource.plural.clone(),
            selector: match &self.scope {
                Scope::Kind { labels } => Selector::Labels(labels.clone()),
                Scope::Object => Selector::Name(self.object_key()),
            },
        }
    }

    pub(super) fn object_key(&self) -> ObjKey {
        (self.namespace.clone(), self.name.clone())
    }

    pub(super) fn key(&self) -> TargetKey {
        TargetKey {
            watch: self.watch_key(),
            object: self.object_key(),
        }
    }

    /// The list/watch this target's shared watch makes.
    pub(super) fn watcher(&self) -> (Api<DynamicObject>, watcher::Config) {
        let client = self.cluster.watch_client.clone();
        match &self.scope {
            Scope::Kind { labels } => {
                let config = match labels {
                    Some(l) => watcher::Config::default().labels(l),
                    None => watcher::Config::default(),
                };
                (Api::all_with(client, &self.resource), config)
            }
            Scope::Object => {
                let api = match &self.namespace {
                    Some(ns) => Api::namespaced_with(client, ns, &self.resource),
                    None => Api::all_with(client, &self.resource),
                };
                let fields = format!("metadata.name={}", escape_selector_value(&self.name));
                (api, watcher::Config::default().fields(&fields))
            }
        }
    }
}

/// Escapes a value for a field selector (`\`, `,` and `=` are special), so
/// a name can only ever select itself.
pub(super) fn escape_selector_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// What the cache knows about a target.
#[derive(Clone, Debug)]
pub enum Cached {
    /// The object, as last seen (without `managedFields`).
    Present(Arc<DynamicObject>),
    /// The watch is healthy and the object does not exist (or is outside
    /// the watch's selector).
    Absent,
    /// The watch has not listed yet, or is failing: ask the server.
    Unknown,
}

/// The identity of one shared watch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct WatchKey {
    pub(super) cluster: u64,
    pub(super) api_version: String,
    pub(super) plural: String,
    pub(super) selector: Selector,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Selector {
    Labels(Option<String>),
    Name(ObjKey),
}

/// (namespace, name) of an object in a watch.
pub(super) type ObjKey = (Option<String>, String);

/// One object in one shared watch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct TargetKey {
    pub(super) watch: WatchKey,
    pub(super) object: ObjKey,
}
