//! Helpers for the workload tests (seed 000): the three workload controllers
//! running as their shipped service accounts, KubernetesClusters and
//! KubernetesApplications, and waiting for their states.

use std::time::Duration;

use crate::{Running, wait, wait_explained};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use types::workload::v1alpha1::{KubernetesApplication, KubernetesApplicationResource};

/// How long a workload test waits for a state.
pub const WAIT: Duration = Duration::from_secs(60);

/// The three workload controllers, watching one namespace.
pub struct Controllers {
    /// The scheduler.
    pub scheduler: Running,
    /// The application-controller.
    pub application: Running,
    /// The resource-controller.
    pub resource: Running,
    /// The namespace they watch.
    pub ns: String,
}

impl Controllers {
    /// Starts the three workload controllers watching `ns`, each as its deploy/ service account.
    pub async fn start(ns: &str) -> Self {
        let mut c = Self {
            scheduler: start("scheduler", ns),
            application: start("application-controller", ns),
            resource: start("resource-controller", ns),
            ns: ns.to_owned(),
        };
        for r in [&mut c.scheduler, &mut c.application, &mut c.resource] {
            r.wait_healthy(Duration::from_secs(30)).await;
        }
        c
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        // A failing test shows what the controllers saw.
        if std::thread::panicking() {
            for r in [&self.scheduler, &self.application, &self.resource] {
                eprintln!("----- {} log -----\n{}", r.name, r.log());
            }
        }
    }
}

/// Starts one workload binary watching `ns` as its deploy/ service account,
/// polling every second.
pub fn start(name: &str, ns: &str) -> Running {
    start_with(name, ns, &[])
}

/// [`start`] with more flags.
pub fn start_with(name: &str, ns: &str, more: &[&str]) -> Running {
    let kubeconfig = impersonating_kubeconfig(name);
    let mut args = vec!["--watch-namespace", ns, "--poll-interval", "1s"];
    if name == "resource-controller" {
        args.extend(["--remote-deletion-timeout", "15s"]);
    }
    args.extend(more);
    Running::start(name, &kubeconfig, &args)
}

/// A namespace in the control cluster (named from `prefix`) and one in the
/// remote cluster, the resource-controller alone watching the first (as its
/// deploy/ service account, healthy, with `args`), and KubernetesCluster
/// `target` for the remote cluster: what a resource-controller test starts
/// from.
pub struct OneTarget {
    /// The control cluster.
    pub client: Client,
    /// The remote cluster.
    pub remote: Client,
    /// The control namespace.
    pub ns: String,
    /// The remote namespace.
    pub rns: String,
    /// The resource-controller.
    pub controller: Running,
}

impl OneTarget {
    /// Sets it up.
    pub async fn start(prefix: &str, args: &[&str]) -> Self {
        let plane = testenv::control_plane();
        let (client, remote) = clients().await;
        let ns = plane.control.namespace(&client, prefix).await;
        let rns = remote_ns(&remote, prefix).await;
        let kubeconfig = impersonating_kubeconfig("resource-controller");
        let args = [&["--watch-namespace", ns.as_str()], args].concat();
        let mut controller = Running::start("resource-controller", &kubeconfig, &args);
        controller.wait_healthy(Duration::from_secs(30)).await;
        cluster(
            &client,
            &ns,
            "target",
            json!({}),
            Some(&plane.remote.kubeconfig),
        )
        .await;
        Self {
            client,
            remote,
            ns,
            rns,
            controller,
        }
    }
}

/// A kubeconfig for the control cluster that acts as the binary's own
/// service account from deploy/ (whose RBAC is applied once per test
/// binary): the controllers run with exactly the permissions they ship with.
pub fn impersonating_kubeconfig(binary: &str) -> std::path::PathBuf {
    static RBAC: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    let control = &testenv::control_plane().control;
    RBAC.get_or_init(|| crate::apply_deploy(control));
    crate::impersonating_kubeconfig_for(control, binary)
}

/// Admin clients for the control and the remote cluster.
pub async fn clients() -> (Client, Client) {
    let plane = testenv::control_plane();
    (plane.control.client().await, plane.remote.client().await)
}

/// Server-side apply as the test's own field manager.
pub fn ssa() -> PatchParams {
    PatchParams::apply("e2e-test").force()
}

/// Creates a connection Secret (with `kubeconfig`) and a KubernetesCluster.
pub async fn cluster(
    client: &Client,
    ns: &str,
    name: &str,
    labels: Value,
    kubeconfig: Option<&str>,
) {
    if let Some(kc) = kubeconfig {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-kubeconfig"), "namespace": ns},
            "stringData": {"kubeconfig": kc},
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    let kc = json!({
        "apiVersion": "compute.crossplane.io/v1alpha1",
        "kind": "KubernetesCluster",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"connectionSecretRef": {"name": format!("{name}-kubeconfig")}},
    });
    apply_json(client, ns, "kubernetesclusters", &kc).await;
}

/// Applies a namespaced object of a CRD whose plural is `plural`.
pub async fn apply_json(client: &Client, ns: &str, plural: &str, body: &Value) {
    let (group, version) = body["apiVersion"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap();
    let ar = kube::discovery::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: body["apiVersion"].as_str().unwrap().into(),
        kind: body["kind"].as_str().unwrap().into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    api.patch(
        body["metadata"]["name"].as_str().unwrap(),
        &ssa(),
        &Patch::Apply(body),
    )
    .await
    .unwrap();
}

/// Applies a KubernetesApplication.
pub async fn apply_app(client: &Client, ns: &str, body: Value) {
    apply_json(client, ns, "kubernetesapplications", &body).await;
}

/// A KubernetesApplication with a cluster selector and resource templates.
pub fn app(name: &str, ns: &str, selector: Value, templates: Value) -> Value {
    json!({
        "apiVersion": "workload.crossplane.io/v1alpha1",
        "kind": "KubernetesApplication",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterSelector": selector, "resourceTemplates": templates},
    })
}

/// A resource template for a ConfigMap in the remote cluster.
pub fn configmap_template(
    resource: &str,
    remote_ns: &str,
    remote_name: &str,
    data: Value,
) -> Value {
    json!({
        "metadata": {"name": resource, "labels": {"test": "e2e"}},
        "spec": {"template": {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": remote_name, "namespace": remote_ns},
            "data": data,
        }},
    })
}

/// Remote ConfigMaps in `ns` whose data.v is `v`, among `names`.
pub async fn configmaps_with(remote: &Client, ns: &str, names: &[String], v: &str) -> usize {
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(remote.clone(), ns)
        .list(&kube::api::ListParams::default())
        .await
        .unwrap();
    cms.items
        .iter()
        .filter(|cm| names.contains(&kube::ResourceExt::name_any(*cm)))
        .filter(|cm| {
            cm.data
                .as_ref()
                .and_then(|d| d.get("v"))
                .map(String::as_str)
                == Some(v)
        })
        .count()
}

/// Reads a KubernetesApplication.
pub async fn get_app(client: &Client, ns: &str, name: &str) -> Option<KubernetesApplication> {
    Api::<KubernetesApplication>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// Reads a KubernetesApplicationResource.
pub async fn get_res(
    client: &Client,
    ns: &str,
    name: &str,
) -> Option<KubernetesApplicationResource> {
    Api::<KubernetesApplicationResource>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// An application's status.state, as text (empty when unset).
pub fn state_of_app(app: &KubernetesApplication) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.state)
        .map(|s| format!("{s:?}"))
        .unwrap_or_default()
}

/// A resource's status.state, as text (empty when unset).
pub fn state_of_res(res: &KubernetesApplicationResource) -> String {
    res.status
        .as_ref()
        .and_then(|s| s.state)
        .map(|s| format!("{s:?}"))
        .unwrap_or_default()
}

/// The condition of type `t`.
pub fn condition<'a>(
    conds: &'a [types::common::Condition],
    t: &str,
) -> Option<&'a types::common::Condition> {
    conds.iter().find(|c| c.type_ == t)
}

/// Waits for an application to reach `state`.
pub async fn wait_app_state(
    client: &Client,
    ns: &str,
    name: &str,
    state: &str,
) -> KubernetesApplication {
    wait_explained(
        WAIT,
        &format!("application {ns}/{name} to be {state}"),
        || async {
            get_app(client, ns, name)
                .await
                .filter(|a| state_of_app(a) == state)
        },
        || explain(client, ns),
    )
    .await
}

/// The statuses of the applications and resources in `ns`, for a timeout's
/// message.
pub async fn explain(client: &Client, ns: &str) -> String {
    let lp = kube::api::ListParams::default();
    let apps = Api::<KubernetesApplication>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|a| {
                    format!(
                        "app {}: {}",
                        a.metadata.name.as_deref().unwrap_or_default(),
                        json!(a.status)
                    )
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let resources = Api::<KubernetesApplicationResource>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|r| {
                    format!(
                        "resource {}: {}",
                        r.metadata.name.as_deref().unwrap_or_default(),
                        json!(r.status)
                    )
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    [apps, resources].concat().join("\n")
}

/// Waits for a resource to reach `state`.
pub async fn wait_res_state(
    client: &Client,
    ns: &str,
    name: &str,
    state: &str,
) -> KubernetesApplicationResource {
    wait_explained(
        WAIT,
        &format!("resource {ns}/{name} to be {state}"),
        || async {
            get_res(client, ns, name)
                .await
                .filter(|r| state_of_res(r) == state)
        },
        || explain(client, ns),
    )
    .await
}

/// The message of a resource's Synced condition.
pub fn synced_message(res: &KubernetesApplicationResource) -> String {
    res.status
        .as_ref()
        .and_then(|s| condition(&s.conditions, "Synced"))
        .and_then(|c| c.message.clone())
        .unwrap_or_default()
}

/// A fresh namespace in the remote cluster.
pub async fn remote_ns(remote: &Client, prefix: &str) -> String {
    testenv::control_plane()
        .remote
        .namespace(remote, prefix)
        .await
}

/// Deletes the `K` called `name` in `ns` and waits until it is gone, failing
/// after `WAIT` with `what` (what the test was waiting for).
pub async fn delete_and_wait_gone<K>(client: &Client, ns: &str, name: &str, what: &str)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api = Api::<K>::namespaced(client.clone(), ns);
    api.delete(name, &DeleteParams::default()).await.unwrap();
    wait(WAIT, what, || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// A KubernetesCluster's Ready condition (status, message), once written.
pub async fn cluster_ready(client: &Client, ns: &str, name: &str) -> Option<(String, String)> {
    let kc = Api::<types::compute::v1alpha1::KubernetesCluster>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()?;
    let c = condition(&kc.status?.conditions, "Ready")?.clone();
    Some((c.status, c.message.unwrap_or_default()))
}
