//! The ceiling: a null writer that applies exactly what a Provider ends
//! with, in upstream's shape, with no package manager at all: its CRDs,
//! a ServiceAccount, a ClusterRole for the runtime and its binding, two
//! aggregated ClusterRoles (edit, view), the TLS Secrets, the Service and
//! the runtime Deployment of the package's image; then waits until every
//! CRD is Established and every Deployment Available. Server-side apply
//! from this process, 16 Providers at a time; nothing is read first.
//!
//! [`Ceiling::WithMrds`] writes the Crossplane v2 end state besides: each
//! managed kind's ManagedResourceDefinition (the CRD's spec, Active), its
//! status (Established), and the CRD controlled by it; 3 writes per kind
//! where the other writes 1. Both are reported; the package managers are
//! stopped while either runs (an Active MRD is theirs to serve).
//!
//! And a warm-up both sides are spared: every package image pulled onto the
//! node before either runs (pods of them, 25 at a time), so that the side
//! measured first does not pay for the node's pulls.

use std::time::{Duration, Instant};

use benchmarks::Probe;
use futures::StreamExt as _;
use kube::{
    Api,
    api::{DynamicObject, GroupVersionKind, Patch, PatchParams},
    discovery::ApiResource,
};
use serde_json::{Value, json};

use crate::packages::Generated;
use crate::phases::{Servers, condition};

/// Where the null writer's runtimes run.
const NS: &str = "bench-null";
const MANAGER: &str = "bench-null-writer";

/// Which end state the null writer writes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ceiling {
    /// CRDs, roles, binding, Secrets, Service, Deployment.
    Listed,
    /// Those and each kind's MRD with its status, controlling its CRD.
    WithMrds,
}

/// Everything of a Provider's end state but its CRDs.
fn objects_of(g: &Generated) -> Vec<Value> {
    let name = &g.name;
    let labels = json!({"pkg.crossplane.io/provider": name});
    let role = |suffix: &str, verbs: Value| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": format!("bench-null:{name}:{suffix}")},
            "rules": [{"apiGroups": [g.group], "resources": ["*"], "verbs": verbs}],
        })
    };
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NS}}),
        role("system", json!(["*"])),
        role(
            "aggregate-to-edit",
            json!([
                "get", "list", "watch", "create", "update", "patch", "delete"
            ]),
        ),
        role("aggregate-to-view", json!(["get", "list", "watch"])),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("bench-null:{name}:system")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("bench-null:{name}:system")},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}],
        }),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("{name}-tls-server"), "namespace": NS},
               "type": "Opaque", "stringData": {"tls.crt": "-", "tls.key": "-", "ca.crt": "-"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("{name}-tls-client"), "namespace": NS},
               "type": "Opaque", "stringData": {"tls.crt": "-", "tls.key": "-", "ca.crt": "-"}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
               "spec": {"selector": labels, "ports": [{"name": "webhook", "port": 9443, "targetPort": 9443}]}}),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {
                    "serviceAccountName": name,
                    "containers": [{"name": "package-runtime", "image": g.v1}],
                }},
            },
        }),
    ]
}

const MRD_VERSION: &str = "apiextensions.crossplane.io/v1alpha1";
const MRD: &str = "ManagedResourceDefinition";

/// The MRD of `crd`, Active, and its status saying its CRD is served.
fn mrd_of(crd: &Value) -> (Value, Value) {
    let name = &crd["metadata"]["name"];
    let mut spec = crd["spec"].clone();
    if let Some(s) = spec.as_object_mut() {
        s.insert("state".into(), "Active".into());
    }
    let meta = json!({"name": name});
    let status = json!({"conditions": [{
        "type": "Established", "status": "True", "reason": "EstablishedManagedResource",
        "message": format!("the CRD {} is served", name.as_str().unwrap_or_default()),
        "lastTransitionTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }]});
    (
        json!({"apiVersion": MRD_VERSION, "kind": MRD, "metadata": meta, "spec": spec}),
        json!({"apiVersion": MRD_VERSION, "kind": MRD, "metadata": meta, "status": status}),
    )
}

/// Writes one Provider's end state: its CRDs first (with `ceiling`
/// WithMrds, each kind's MRD, its status, then its CRD controlled by it),
/// then the rest.
async fn write_provider(client: &kube::Client, g: &Generated, ceiling: Ceiling) {
    let params = PatchParams::apply(MANAGER).force();
    let mut crds = g.v1_crds();
    if ceiling == Ceiling::WithMrds {
        for crd in &mut crds {
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let (mrd, status) = mrd_of(crd);
            let mrds = api_for(client, &mrd);
            let applied = mrds
                .patch(&name, &params, &Patch::Apply(&mrd))
                .await
                .unwrap_or_else(|e| panic!("null writer: applying MRD {name}: {e}"));
            mrds.patch_status(&name, &params, &Patch::Apply(&status))
                .await
                .unwrap_or_else(|e| panic!("null writer: MRD {name}'s status: {e}"));
            let owner = json!([{"apiVersion": MRD_VERSION, "kind": MRD, "name": name,
                "uid": applied.metadata.uid, "controller": true, "blockOwnerDeletion": true}]);
            if let Some(m) = crd.get_mut("metadata").and_then(Value::as_object_mut) {
                m.insert("ownerReferences".into(), owner);
            }
        }
    }
    apply_all(client, crds).await;
    apply_all(client, objects_of(g)).await;
}

fn api_for(client: &kube::Client, v: &Value) -> Api<DynamicObject> {
    let (group, version) = v["apiVersion"]
        .as_str()
        .unwrap_or("v1")
        .split_once('/')
        .unwrap_or(("", v["apiVersion"].as_str().unwrap_or("v1")));
    let kind = v["kind"].as_str().unwrap_or_default();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match v.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

async fn apply_all(client: &kube::Client, objects: Vec<Value>) {
    let params = PatchParams::apply(MANAGER).force();
    for o in objects {
        let name = o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        api_for(client, &o)
            .patch(&name, &params, &Patch::Apply(&o))
            .await
            .unwrap_or_else(|e| panic!("null writer: applying {name}: {e}"));
    }
}

/// Applies every Provider's end state and waits for it; then removes it
/// all. Answers the time to all Established and Available.
pub async fn run(
    control: &testenv::Cluster,
    client: &kube::Client,
    gens: &[Generated],
    servers: &Servers,
    ceiling: Ceiling,
) -> Value {
    namespace(control, NS);
    let erase = |group: &str, version: &str, kind: &str, ns: Option<&str>| {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        match ns {
            Some(ns) => Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        }
    };
    let crds = Probe::watch(erase(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        None,
    ));
    let deployments = Probe::watch(erase("apps", "v1", "Deployment", Some(NS)));
    assert!(crds.synced(Duration::from_secs(30)).await);
    assert!(deployments.synced(Duration::from_secs(30)).await);
    let crd_names: Vec<String> = gens.iter().flat_map(|g| g.crds.iter().cloned()).collect();
    let names: Vec<String> = gens.iter().map(|g| g.name.clone()).collect();
    for c in &crd_names {
        crds.expect(c, Box::new(|v| condition(v, "Established") == Some("True")));
    }
    for n in &names {
        deployments.expect(n, Box::new(|v| condition(v, "Available") == Some("True")));
    }
    let before = servers.usage();
    let mark = benchmarks::AuditMark::now([control]);
    let t0 = Instant::now();
    futures::stream::iter(gens.iter().map(|g| write_provider(client, g, ceiling)))
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let written = t0.elapsed();
    let timeout = Duration::from_secs(600) + Duration::from_secs(30) * gens.len() as u32;
    let (c, d) = tokio::join!(
        crds.wait(&crd_names, timeout),
        deployments.wait(&names, timeout)
    );
    let all = t0.elapsed();
    let used = servers.usage_since(&before);
    let timeline = mark.timeline(&benchmarks::AuditMark::now([control]), control.name, 10.0);
    // Gone again: the sides install the same CRDs.
    let delete = |args: &[&str]| {
        let out = control.kubectl(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    delete(&["delete", "namespace", NS, "--wait=true"]);
    // From this process, 16 at a time: kubectl deletes one by one at its
    // client's 5 requests a second (thousands of CRDs took half an hour).
    let roles: Vec<String> = gens
        .iter()
        .flat_map(|g| {
            ["system", "aggregate-to-edit", "aggregate-to-view"]
                .map(|s| format!("bench-null:{}:{s}", g.name))
        })
        .collect();
    let bindings: Vec<String> = gens
        .iter()
        .map(|g| format!("bench-null:{}:system", g.name))
        .collect();
    // The ceiling of the sides' deletion: how long the API server takes to
    // remove these CRDs when nothing else asks anything of it.
    let crds_deleting = Instant::now();
    let mut crds_deleted = None;
    // Their MRDs after them (nothing serves these; no finalizer holds them).
    let mrd_names: &[String] = match ceiling {
        Ceiling::WithMrds => &crd_names,
        Ceiling::Listed => &[],
    };
    for (api, names) in [
        (
            erase(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                None,
            ),
            &crd_names[..],
        ),
        (
            erase("apiextensions.crossplane.io", "v1alpha1", MRD, None),
            mrd_names,
        ),
        (
            erase("rbac.authorization.k8s.io", "v1", "ClusterRole", None),
            &roles[..],
        ),
        (
            erase(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRoleBinding",
                None,
            ),
            &bindings[..],
        ),
    ] {
        erase_all(&api, names).await;
        crds_deleted.get_or_insert(crds_deleting.elapsed());
    }
    let writes = match ceiling {
        Ceiling::Listed => {
            "server-side apply of each Provider's end state (CRDs, ServiceAccount, 3 ClusterRoles, a binding, 2 Secrets, Service, Deployment), 16 Providers at a time"
        }
        Ceiling::WithMrds => {
            "server-side apply of each Provider's Crossplane v2 end state (per kind its MRD, Active, the MRD's status, Established, and the CRD controlled by the MRD; ServiceAccount, 3 ClusterRoles, a binding, 2 Secrets, Service, Deployment), 16 Providers at a time"
        }
    };
    json!({
        "writes": writes,
        "crds_established": c.json(),
        "deployments_available": d.json(),
        "written_s": written.as_secs_f64(),
        "all_ready_s": (c.all() && d.all()).then_some(all.as_secs_f64()),
        "servers": used,
        "timeline": timeline,
        "crds_deleted_s": crds_deleted.map(|d| d.as_secs_f64()),
    })
}

/// Deletes `names` of `api`, 16 at a time, and waits until none is left
/// (at most 15 minutes: a CRD goes once its objects are gone).
async fn erase_all(api: &Api<DynamicObject>, names: &[String]) {
    futures::stream::iter(names.iter().map(|n| async move {
        let _ = api.delete(n, &Default::default()).await;
    }))
    .buffer_unordered(16)
    .collect::<Vec<()>>()
    .await;
    let wanted: std::collections::HashSet<&String> = names.iter().collect();
    let (gone, _) = benchmarks::wait_until(Duration::from_secs(900), || async {
        api.list_metadata(&Default::default())
            .await
            .map(|l| {
                !l.items
                    .iter()
                    .any(|o| o.metadata.name.as_ref().is_some_and(|n| wanted.contains(n)))
            })
            .unwrap_or(false)
    })
    .await;
    assert!(
        gone,
        "the null writer's objects are still there after 15 minutes"
    );
}

fn namespace(control: &testenv::Cluster, ns: &str) {
    let out = control.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}).to_string(),
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Pulls every image in `images` onto the node: pods of them, 25 at a
/// time, each waited for Ready and deleted.
pub fn prepull(control: &testenv::Cluster, images: &[String]) {
    const WARM: &str = "bench-prepull";
    namespace(control, WARM);
    for (b, batch) in images.chunks(25).enumerate() {
        let pods: Vec<Value> = batch
            .iter()
            .enumerate()
            .map(|(i, image)| {
                json!({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": format!("pull-{b}-{i}"), "namespace": WARM},
                       "spec": {"containers": [{"name": "c", "image": image}], "terminationGracePeriodSeconds": 0}})
            })
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": pods});
        let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(&list.to_string()));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = control.kubectl(&[
            "wait",
            "pods",
            "--all",
            "-n",
            WARM,
            "--for=condition=Ready",
            "--timeout=600s",
        ]);
        assert!(
            out.status.success(),
            "pre-pulling package images: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = control.kubectl(&["delete", "pods", "--all", "-n", WARM, "--wait=true"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
