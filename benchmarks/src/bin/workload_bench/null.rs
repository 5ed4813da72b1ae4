//! The workload bench's ceiling: a null writer making exactly the writes
//! the three controllers must make for N GitLab applications, and nothing
//! else (no reads, no watches, no decisions), with the same clients (each
//! binary's identity: its impersonated ServiceAccount in the control
//! cluster, the bench user in the remote ones) and the same concurrency
//! (applications applied `--concurrency` at a time, as the phases apply
//! them; each controller's 8 workers):
//!
//! - the user: the KubernetesApplication (as the phases apply it);
//! - the scheduler: the application's status (clusterRef, Scheduled);
//! - the application-controller: the application's finalizer, one
//!   KubernetesApplicationResource per template (server-side apply, as the
//!   controller renders it, 8 at a time) and the application's status once
//!   (Submitted);
//! - the resource-controller: per template, the remote object (server-side
//!   apply, with the resource's UID annotation) and the resource's status
//!   once (Submitted, with the remote object's status from the apply's
//!   answer).
//!
//! It writes to its own namespace (`bench-null`, which the binaries do not
//! watch) and to remote namespaces of its own, before the phases, while the
//! binaries hold no remote watch yet; then removes all of it so that it
//! weighs on nothing after. The resources are written without the
//! resource-controller's finalizer (a few bytes) so that they can go with
//! one request. 4 + 3 × 43 = 133 writes per application.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt as _;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
    config::Kubeconfig,
    discovery::ApiResource,
};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use types::workload::v1alpha1::{
    ANNOTATION_RESOURCE_UID, KubernetesApplication, KubernetesApplicationResource,
};

use crate::{REMOTE_USER, gitlab::application, phase::Bench};

/// The null writer's namespace in the control cluster.
pub const NULL_NS: &str = "bench-null";
/// Workers per controller (the binaries' --concurrency default).
const WORKERS: usize = 8;
/// The resources of one application the application-controller applies at
/// once (its APPLY_AT_ONCE).
const APPLY_AT_ONCE: usize = 8;

/// What the writers share.
struct Writers {
    user: Api<DynamicObject>,
    scheduler: Api<DynamicObject>,
    application: Api<DynamicObject>,
    resources: Api<DynamicObject>,
    resource_status: Api<DynamicObject>,
    remotes: Vec<Client>,
    /// The resource-controller's workers.
    workers: Semaphore,
    errors: std::sync::atomic::AtomicUsize,
}

fn apps_api(c: Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        c,
        NULL_NS,
        &ApiResource::erase::<KubernetesApplication>(&()),
    )
}

fn resources_api(c: Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        c,
        NULL_NS,
        &ApiResource::erase::<KubernetesApplicationResource>(&()),
    )
}

/// The API resource of a GitLab template's kind.
fn remote_resource(kind: &str) -> ApiResource {
    let (group, version, plural) = match kind {
        "Deployment" => ("apps", "v1", "deployments"),
        "StatefulSet" => ("apps", "v1", "statefulsets"),
        "Job" => ("batch", "v1", "jobs"),
        "Service" => ("", "v1", "services"),
        _ => ("", "v1", "configmaps"),
    };
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

fn now() -> String {
    benchmarks::now()
}

fn condition(type_: &str, reason: &str) -> Value {
    json!({"type": type_, "status": "True", "reason": reason, "lastTransitionTime": now()})
}

impl Writers {
    fn failed<T, E: std::fmt::Display>(&self, r: Result<T, E>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                // The first few say why; the count says how often.
                let n = self
                    .errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n < 3 {
                    eprintln!("  null writer: a write failed: {e}");
                }
                None
            }
        }
    }

    /// Every write of one application, as the controllers must make them.
    async fn application(&self, name: &str, cluster: usize) {
        let ssa = |fm: &str| PatchParams::apply(fm).force();
        let mut body = application(name, &format!("r{cluster}"), &format!("null-{name}"));
        body["metadata"]["namespace"] = json!(NULL_NS);
        let Some(app) = self.failed(
            self.user
                .patch(name, &ssa("workload-bench"), &Patch::Apply(&body))
                .await,
        ) else {
            return;
        };
        let uid = app.metadata.uid.clone().unwrap_or_default();
        let cluster_name = format!("r{cluster}");
        let scheduled = json!({"apiVersion": "workload.crossplane.io/v1alpha1",
            "kind": "KubernetesApplication", "metadata": {"name": name},
            "status": {"clusterRef": {"name": cluster_name}, "state": "Scheduled",
                "conditions": [condition("Scheduled", "Scheduled")]}});
        self.failed(
            self.scheduler
                .patch_status(name, &ssa("scheduler"), &Patch::Apply(&scheduled))
                .await,
        );
        let finalizer =
            json!({"metadata": {"finalizers": ["workload.crossplane.io/application-controller"]}});
        self.failed(
            self.application
                .patch(name, &PatchParams::default(), &Patch::Merge(&finalizer))
                .await,
        );
        let templates = body["spec"]["resourceTemplates"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let total = templates.len();
        let submitted: Vec<_> = futures::stream::iter(templates)
            .map(|t| self.resource(name, &uid, &cluster_name, t))
            .buffered(APPLY_AT_ONCE)
            .buffer_unordered(total.max(1))
            .collect()
            .await;
        let status = json!({"apiVersion": "workload.crossplane.io/v1alpha1",
            "kind": "KubernetesApplication", "metadata": {"name": name},
            "status": {"state": "Submitted", "desiredResources": total,
                "submittedResources": submitted.iter().filter(|s| **s).count(),
                "observedGeneration": app.metadata.generation,
                "conditions": [condition("Synced", "ReconcileSuccess"), condition("Ready", "Available")]}});
        self.failed(
            self.application
                .patch_status(name, &ssa("application-controller"), &Patch::Apply(&status))
                .await,
        );
    }

    /// The application-controller's write of one resource (8 at a time,
    /// as the controller makes them); answers the resource-controller's
    /// part, which runs on its workers.
    async fn resource(
        &self,
        app: &str,
        app_uid: &str,
        cluster: &str,
        template: Value,
    ) -> impl Future<Output = bool> + '_ {
        let name = template["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let kar = json!({
            "apiVersion": "workload.crossplane.io/v1alpha1",
            "kind": "KubernetesApplicationResource",
            "metadata": {"name": name, "namespace": NULL_NS,
                "labels": template["metadata"]["labels"],
                "ownerReferences": [{"apiVersion": "workload.crossplane.io/v1alpha1",
                    "kind": "KubernetesApplication", "name": app, "uid": app_uid,
                    "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"template": template["spec"]["template"], "clusterRef": {"name": cluster}},
        });
        let written = self.failed(
            self.resources
                .patch(
                    &name,
                    &PatchParams::apply("application-controller").force(),
                    &Patch::Apply(&kar),
                )
                .await,
        );
        let cluster_index: usize = cluster.trim_start_matches('r').parse().unwrap_or_default();
        async move {
            let Some(kar) = written else { return false };
            let Ok(_worker) = self.workers.acquire().await else {
                return false;
            };
            self.remote(kar, cluster_index).await
        }
    }

    /// The resource-controller's writes for one resource.
    async fn remote(&self, kar: DynamicObject, cluster: usize) -> bool {
        let name = kar.metadata.name.clone().unwrap_or_default();
        let uid = kar.metadata.uid.clone().unwrap_or_default();
        let mut object = kar.data["spec"]["template"].clone();
        object["metadata"]["annotations"] = json!({ANNOTATION_RESOURCE_UID: uid});
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let remote_name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let Some(client) = self.remotes.get(cluster) else {
            return false;
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &remote_resource(&kind));
        let Some(live) = self.failed(
            api.patch(
                &remote_name,
                &PatchParams::apply("resource-controller").force(),
                &Patch::Apply(&object),
            )
            .await,
        ) else {
            return false;
        };
        let mut fields = json!({"state": "Submitted",
            "observedGeneration": kar.metadata.generation,
            "conditions": [condition("Synced", "ReconcileSuccess"), condition("Ready", "Available")]});
        // As the controller: the remote object's status when it has one.
        if let (Some(f), Some(remote)) = (fields.as_object_mut(), live.data.get("status")) {
            f.insert("remote".to_owned(), remote.clone());
        }
        let status = json!({"apiVersion": "workload.crossplane.io/v1alpha1",
            "kind": "KubernetesApplicationResource", "metadata": {"name": name},
            "status": fields});
        self.failed(
            self.resource_status
                .patch_status(
                    &name,
                    &PatchParams::apply("resource-controller").force(),
                    &Patch::Apply(&status),
                )
                .await,
        )
        .is_some()
    }
}

/// Runs the null writer for `which` (application name, cluster index) at
/// `concurrency`; answers its figures (its requests and the servers' CPU
/// as the bench counts them, between two marks) and, when something
/// follows (`then_clear`), removes what it wrote.
pub async fn null_writer(
    bench: &Bench,
    which: &[(String, usize)],
    concurrency: usize,
    then_clear: bool,
) -> Value {
    let plane = &bench.plane;
    plane.control.kubectl(&["create", "namespace", NULL_NS]);
    let mut remotes = Vec::new();
    for (c, remote) in plane.remotes().enumerate() {
        let namespaces: String = which
            .iter()
            .filter(|(_, pc)| *pc == c)
            .map(|(n, _)| {
                format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: null-{n}}}\n---\n")
            })
            .collect();
        if !namespaces.is_empty() {
            let out = remote.kubectl_stdin(&["apply", "-f", "-"], Some(&namespaces));
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let kubeconfig = Kubeconfig::from_yaml(remote.kubeconfig_for(REMOTE_USER).unwrap())
            .expect("the remote kubeconfig");
        remotes.push(benchmarks::client_of(kubeconfig).await);
    }
    let admin = plane.control.client().await;
    let resource = benchmarks::client_as(&plane.control, "resource-controller").await;
    let writers = Arc::new(Writers {
        user: apps_api(admin.clone()),
        scheduler: apps_api(benchmarks::client_as(&plane.control, "scheduler").await),
        application: apps_api(
            benchmarks::client_as(&plane.control, "application-controller").await,
        ),
        resources: resources_api(
            benchmarks::client_as(&plane.control, "application-controller").await,
        ),
        resource_status: resources_api(resource),
        remotes,
        workers: Semaphore::new(WORKERS),
        errors: Default::default(),
    });
    let templates = (which.len() * crate::gitlab::TEMPLATES) as f64;
    eprintln!(
        "workload-bench: null writer, {} applications ({templates} templates)",
        which.len()
    );
    let before = bench.mark();
    let started = Instant::now();
    futures::stream::iter(which.iter().cloned())
        .for_each_concurrent(concurrency, |(name, c)| {
            let w = writers.clone();
            async move { w.application(&name, c).await }
        })
        .await;
    let duration = started.elapsed();
    // As a phase counts: 3 s more for what follows the last write.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = bench.mark();
    let figures = bench.between(&before, &after, templates);
    let errors = writers.errors.load(std::sync::atomic::Ordering::Relaxed);
    let cleared = then_clear && clear(plane, &admin, which).await;
    eprintln!(
        "  null writer: {templates} templates in {:.1}s ({:.1}/s), {errors} errors; cleared: {cleared}",
        duration.as_secs_f64(),
        templates / duration.as_secs_f64()
    );
    let mut out = json!({
        "applications": which.len(),
        "templates": templates,
        "concurrency": concurrency,
        "workers": WORKERS,
        "writes_per_application": 4 + 3 * crate::gitlab::TEMPLATES,
        "request_errors": errors,
        "duration_s": duration.as_secs_f64(),
        "templates_per_s": templates / duration.as_secs_f64(),
        "cleared": cleared,
    });
    if let (Some(o), Value::Object(f)) = (out.as_object_mut(), figures) {
        o.extend(f);
    }
    out
}

/// Removes the null writer's applications, resources and remote
/// namespaces, and waits until they are gone.
async fn clear(plane: &testenv::ControlPlane, admin: &Client, which: &[(String, usize)]) -> bool {
    let all = ListParams::default();
    let apps = apps_api(admin.clone());
    let resources = resources_api(admin.clone());
    // The applications hold their (null) finalizer: drop it first.
    let drop_finalizer = json!({"metadata": {"finalizers": null}});
    for (name, _) in which {
        let _ = apps
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&drop_finalizer),
            )
            .await;
    }
    let _ = resources
        .delete_collection(&DeleteParams::default(), &all)
        .await;
    let _ = apps.delete_collection(&DeleteParams::default(), &all).await;
    for (c, remote) in plane.remotes().enumerate() {
        let names: Vec<String> = which
            .iter()
            .filter(|(_, pc)| *pc == c)
            .map(|(n, _)| format!("namespace/null-{n}"))
            .collect();
        if names.is_empty() {
            continue;
        }
        let mut args = vec!["delete", "--wait=false"];
        args.extend(names.iter().map(String::as_str));
        remote.kubectl(&args);
    }
    let remote_clients: Vec<Client> =
        futures::future::join_all(plane.remotes().map(|r| r.client())).await;
    let timeout = Duration::from_secs(120) + Duration::from_millis(20) * which.len() as u32 * 43;
    benchmarks::wait_until(timeout, || async {
        let local = resources
            .list_metadata(&all.clone().limit(1))
            .await
            .is_ok_and(|l| l.items.is_empty());
        let mut remote_gone = true;
        for c in &remote_clients {
            let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
            remote_gone &= namespaces.list_metadata(&all).await.is_ok_and(|l| {
                !l.items.iter().any(|n| {
                    n.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("null-"))
                })
            });
        }
        local && remote_gone
    })
    .await
    .0
}
