//! The sample Stack controller.
//!
//! The Stacks e2e tests package this program into a stack image; the stack's
//! `install.yaml` runs it as a pod (on a real kubelet node) with these
//! environment variables:
//!
//! - `STACK_GROUP`, `STACK_VERSION`, `STACK_KIND`, `STACK_PLURAL` (required):
//!   the namespaced custom resource the stack owns;
//! - `WATCH_NAMESPACE` (optional): the namespace to watch; unset or empty
//!   means the namespace it runs in (a stack's rights are its Extension's
//!   namespace's alone), `*` all namespaces (a Provider runtime's).
//!
//! For every custom resource of that kind that is not being deleted, it
//! server-side applies (field manager `stack-controller`) a ConfigMap of the
//! same name in the resource's namespace, labelled
//! `stack-controller.crossplane-rs.io/kind: <kind lowercase>`, holding the
//! resource's `kind`, `name` and `.spec` (compact JSON), and owned by the
//! resource so garbage collection removes it with the resource. The tests
//! read those ConfigMaps to see that the stack's controller really runs.
//!
//! It logs one line per action to stdout, never panics on API data, keeps
//! watching after errors, and exits 0 on SIGTERM.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};

const FIELD_MANAGER: &str = "stack-controller";
const KIND_LABEL: &str = "stack-controller.crossplane-rs.io/kind";

/// What the controller watches, from the environment.
struct Config {
    group: String,
    version: String,
    kind: String,
    plural: String,
    /// `None`: the namespace it runs in; `Some(None)`: all.
    namespace: Option<Option<String>>,
}

impl Config {
    fn from_env() -> Result<Self, String> {
        let required = |name: &str| match std::env::var(name) {
            Ok(value) if !value.is_empty() => Ok(value),
            _ => Err(format!("missing required environment variable {name}")),
        };
        Ok(Self {
            group: required("STACK_GROUP")?,
            version: required("STACK_VERSION")?,
            kind: required("STACK_KIND")?,
            plural: required("STACK_PLURAL")?,
            namespace: std::env::var("WATCH_NAMESPACE")
                .ok()
                .filter(|ns| !ns.is_empty())
                .map(|ns| (ns != "*").then_some(ns)),
        })
    }

    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

#[tokio::main]
async fn main() {
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(message) => {
            eprintln!("stack-controller: {message}");
            std::process::exit(2);
        }
    };
    // kube's rustls-tls leaves the crypto provider open.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let mut sigterm = match signal(SignalKind::terminate()) {
        Ok(sigterm) => sigterm,
        Err(err) => {
            eprintln!("stack-controller: cannot listen for SIGTERM: {err}");
            std::process::exit(1);
        }
    };

    let client = match Client::try_default().await {
        Ok(client) => client,
        Err(err) => {
            eprintln!("stack-controller: cannot build a Kubernetes client: {err}");
            std::process::exit(1);
        }
    };

    tokio::select! {
        () = run(client, &config) => {
            // The watch stream never ends on its own; if it does, say so.
            println!("stack-controller: watch ended");
        }
        _ = sigterm.recv() => {
            println!("stack-controller: SIGTERM received, exiting");
        }
    }
}

/// Watches the stack's custom resources and reconciles each applied one.
async fn run(client: Client, config: &Config) {
    let gvk = GroupVersionKind::gvk(&config.group, &config.version, &config.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &config.plural);
    let namespace = match &config.namespace {
        Some(all_or_one) => all_or_one.clone(),
        None => Some(client.default_namespace().to_owned()),
    };
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    println!(
        "stack-controller: watching {}.{} {} in {}",
        config.plural,
        config.group,
        config.version,
        namespace.as_deref().unwrap_or("all namespaces"),
    );

    // namespace/name -> hash of the last ConfigMap content applied.
    let mut applied: HashMap<String, u64> = HashMap::new();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(object) => reconcile(&client, config, &object, &mut applied).await,
            Err(err) => println!("stack-controller: watch error: {err}"),
        }
    }
}

/// Applies the ConfigMap for one custom resource, unless it is being deleted
/// or the same content was already applied.
async fn reconcile(
    client: &Client,
    config: &Config,
    object: &DynamicObject,
    applied: &mut HashMap<String, u64>,
) {
    let name = object.name_any();
    let Some(namespace) = object.namespace() else {
        println!("stack-controller: skipping {name}: no namespace");
        return;
    };
    let key = format!("{namespace}/{name}");
    if object.metadata.deletion_timestamp.is_some() {
        println!("stack-controller: skipping {key}: being deleted");
        applied.remove(&key);
        return;
    }
    let Some(uid) = object.uid() else {
        println!("stack-controller: skipping {key}: no uid");
        return;
    };

    let spec = object
        .data
        .get("spec")
        .filter(|spec| !spec.is_null())
        .map_or_else(|| "{}".to_owned(), ToString::to_string);
    let data = BTreeMap::from([
        ("kind".to_owned(), config.kind.clone()),
        ("name".to_owned(), name.clone()),
        ("spec".to_owned(), spec),
    ]);

    let mut hasher = DefaultHasher::new();
    (&uid, &data).hash(&mut hasher);
    let digest = hasher.finish();
    if applied.get(&key) == Some(&digest) {
        return;
    }

    let config_map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { KIND_LABEL: config.kind.to_lowercase() },
            "ownerReferences": [{
                "apiVersion": config.api_version(),
                "kind": config.kind,
                "name": name,
                "uid": uid,
                "controller": true,
                "blockOwnerDeletion": false,
            }],
        },
        "data": data,
    });
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match config_maps
        .patch(&name, &params, &Patch::Apply(&config_map))
        .await
    {
        Ok(_) => {
            println!("stack-controller: applied ConfigMap {key}");
            applied.insert(key, digest);
        }
        Err(err) => println!("stack-controller: applying ConfigMap {key} failed: {err}"),
    }
}
