//! The phases, the same for either side: one Provider from apply to a Ready
//! runtime, split at the moments a watch saw; N Providers at once; idle;
//! an upgrade of all; deleting all. Times are the watches' moments,
//! requests the control API server's audit log (the referee), CPU and
//! memory /proc's.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use benchmarks::{AuditMark, Probe, latency_json};
use futures::{StreamExt as _, TryStreamExt as _};
use kube::{
    Api, ResourceExt as _,
    api::{DynamicObject, GroupVersionKind},
    discovery::ApiResource,
    runtime::watcher::{self, Event},
};
use serde_json::{Value, json};

use crate::packages::{Generated, provider};
use crate::side::Side;

/// What every phase reads and writes with.
pub struct Run<'a> {
    pub control: &'a testenv::Cluster,
    pub client: kube::Client,
    pub side: Side,
}

/// The status of condition `type_` of `v`.
pub fn condition<'v>(v: &'v Value, type_: &str) -> Option<&'v str> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?["status"]
        .as_str()
}

fn api(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

fn providers(client: &kube::Client) -> Api<DynamicObject> {
    api(client, "pkg.crossplane.io", "v1", "Provider", None)
}

fn crds(client: &kube::Client) -> Api<DynamicObject> {
    api(
        client,
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        None,
    )
}

/// When an object of `api` satisfying `pred` is first changed after the
/// watch's first list (answered by the task; it runs until then). Await
/// the receiver before the change that should cause it: objects the first
/// list shows are not counted.
fn first_seen(
    api: Api<DynamicObject>,
    pred: impl Fn(&Value) -> bool + Send + 'static,
) -> (
    tokio::task::JoinHandle<Instant>,
    tokio::sync::oneshot::Receiver<()>,
) {
    let (listed, synced) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        loop {
            match stream.try_next().await {
                Ok(Some(Event::Apply(o))) => {
                    let now = Instant::now();
                    if serde_json::to_value(&o).is_ok_and(|v| pred(&v)) {
                        return now;
                    }
                }
                Ok(Some(Event::InitDone)) => {
                    if let Some(l) = listed.take() {
                        let _ = l.send(());
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => std::future::pending::<()>().await,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    (task, synced)
}

/// Seconds from `t0` to a moment a task answers, if it did within
/// `timeout` of now.
async fn moment(t0: Instant, task: tokio::task::JoinHandle<Instant>, timeout: Duration) -> Value {
    match tokio::time::timeout(timeout, task).await {
        Ok(Ok(at)) => json!(at.saturating_duration_since(t0).as_secs_f64()),
        _ => Value::Null,
    }
}

fn starts_with(name: &str) -> impl Fn(&Value) -> bool + Send + 'static {
    let name = name.to_owned();
    move |v| {
        v.pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.starts_with(&name))
    }
}

fn mentions(name: &str) -> impl Fn(&Value) -> bool + Send + 'static {
    let name = name.to_owned();
    move |v| {
        v.pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.contains(&name))
    }
}

/// Server-side applies `objects` as one List (taking fields over from other
/// managers when `force`). Without kubectl's validation: it reads the
/// OpenAPI document first, which with thousands of CRDs installed takes the
/// API server longer than kubectl waits (50 Providers of 100 CRDs).
pub fn apply_list(control: &testenv::Cluster, objects: &[Value], force: bool) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let mut args = vec!["apply", "--server-side", "--validate=false", "-f", "-"];
    if force {
        args.push("--force-conflicts");
    }
    let out = control.kubectl_stdin(&args, Some(&list.to_string()));
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn apply(control: &testenv::Cluster, objects: &[Value]) {
    apply_list(control, objects, false);
}

/// One Provider (`name`, of `crds`): the moments from its apply to each
/// step, as a watch saw them; then it is deleted and its CRDs are waited
/// for to go (not measured: the many-Provider phase measures deletion).
pub async fn one(run: &Run<'_>, name: &str, reference: &str, crds_of: &[String]) -> Value {
    let c = &run.client;
    let timeout = Duration::from_secs(300);
    let ready_pod = {
        let name = name.to_owned();
        move |v: &Value| starts_with(&name)(v) && condition(v, "Ready") == Some("True")
    };
    let revision = {
        let name = name.to_owned();
        move |v: &Value| {
            v.pointer("/metadata/labels/pkg.crossplane.io~1package")
                .and_then(Value::as_str)
                == Some(name.as_str())
        }
    };
    let established = Probe::watch(crds(c));
    assert!(established.synced(Duration::from_secs(30)).await);
    for crd in crds_of {
        established.expect(
            crd,
            Box::new(|v| condition(v, "Established") == Some("True")),
        );
    }
    let installed = Probe::watch(providers(c));
    assert!(installed.synced(Duration::from_secs(30)).await);
    installed.expect(
        name,
        Box::new(|v| condition(v, "Installed") == Some("True")),
    );
    let healthy = Probe::watch(providers(c));
    assert!(healthy.synced(Duration::from_secs(30)).await);
    healthy.expect(name, Box::new(|v| condition(v, "Healthy") == Some("True")));
    let firsts = [
        (
            "revision_created",
            first_seen(
                api(c, "pkg.crossplane.io", "v1", "ProviderRevision", None),
                revision,
            ),
        ),
        ("first_crd_created", {
            let names: Vec<String> = crds_of.to_vec();
            first_seen(crds(c), move |v| {
                v.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| names.iter().any(|c| c == n))
            })
        }),
        (
            "cluster_role_created",
            first_seen(
                api(c, "rbac.authorization.k8s.io", "v1", "ClusterRole", None),
                mentions(name),
            ),
        ),
        (
            "runtime_deployment_created",
            first_seen(
                api(c, "apps", "v1", "Deployment", Some(&run.side.runtime_ns)),
                starts_with(name),
            ),
        ),
        (
            "runtime_pod_ready",
            first_seen(
                api(c, "", "v1", "Pod", Some(&run.side.runtime_ns)),
                ready_pod,
            ),
        ),
    ];
    let mut tasks = Vec::new();
    for (what, (task, synced)) in firsts {
        let _ = tokio::time::timeout(Duration::from_secs(30), synced).await;
        tasks.push((what, task));
    }
    let mark = AuditMark::now([run.control]);
    let before = run.side.usage();
    let steps_before = fetch_steps(run);
    let t0 = Instant::now();
    apply(run.control, &[provider(name, reference)]);
    let reached = healthy.wait(&[name.to_owned()], timeout).await;
    let crds_reached = established.wait(crds_of, timeout).await;
    let mut moments = serde_json::Map::new();
    for (what, task) in tasks {
        moments.insert(
            what.to_owned(),
            moment(t0, task, Duration::from_secs(5)).await,
        );
    }
    let at = |p: &Probe| {
        p.met(name)
            .map(|m| m.saturating_duration_since(t0).as_secs_f64())
    };
    let last_crd = crds_of
        .iter()
        .filter_map(|n| established.met(n))
        .max()
        .map(|m| m.saturating_duration_since(t0).as_secs_f64());
    moments.insert("installed".to_owned(), json!(at(&installed)));
    moments.insert("crds_established".to_owned(), json!(last_crd));
    moments.insert("healthy".to_owned(), json!(at(&healthy)));
    let requests = mark.delta(&AuditMark::now([run.control]), &run.side.audit_users(), 1.0);
    let usage = run.side.usage_since(&before);
    let fetch = steps_since(&fetch_steps(run), &steps_before);
    delete_providers(run, &[name.to_owned()], crds_of, delete_wait(crds_of.len())).await;
    json!({
        "provider": name,
        "package": reference,
        "crds": crds_of.len(),
        "healthy": reached.json(),
        "crds_established": crds_reached.json(),
        "seconds_from_apply": moments,
        "package_fetch": fetch,
        "requests": requests,
        "usage": usage,
    })
}

/// What ours counted of reading packages so far: seconds and fetches of
/// each step (`crossplane_rs_package_fetch_seconds`), from the
/// package-manager's /metrics; nothing for upstream, which has no such
/// metric.
fn fetch_steps(run: &Run<'_>) -> Option<[(f64, f64); 2]> {
    if run.side.name != "crossplane-rs" {
        return None;
    }
    let m = tokio::task::block_in_place(|| e2e::shipped::metrics_of("package-manager"));
    let of = |step: &str| {
        let sum = |what: &str| {
            e2e::metric_sum(
                &m,
                &format!("crossplane_rs_package_fetch_seconds_{what}"),
                &[("step", step)],
            )
        };
        (sum("sum"), sum("count"))
    };
    Some([of("pull"), of("parse")])
}

/// The pull and parse seconds (and how many of each) between two
/// [`fetch_steps`]: a package pulled once is parsed as often as it is read.
fn steps_since(after: &Option<[(f64, f64); 2]>, before: &Option<[(f64, f64); 2]>) -> Value {
    let (Some(after), Some(before)) = (after, before) else {
        return Value::Null;
    };
    let step =
        |i: usize| json!({"seconds": after[i].0 - before[i].0, "count": after[i].1 - before[i].1});
    json!({"pull": step(0), "parse": step(1)})
}

/// How long a deletion of `crds` CRDs is waited for by default: fifteen
/// minutes, and a quarter second more per CRD (upstream took 0.27 s per
/// CRD at 10 x 20). A side not done by then is reported as not done, with
/// what it left.
fn delete_wait(crds: usize) -> Duration {
    Duration::from_secs(900) + Duration::from_millis(250) * crds as u32
}

/// Deletes Providers and waits until every one of `crds` is gone (at most
/// `wait`), then until nothing else of theirs is left (at most two minutes
/// more);
/// answers how long the CRDs took (None: not all gone in time), how long
/// everything took and what is left (by kind, the objects whose name
/// names a Provider, and how many of `crds`).
async fn delete_providers(
    run: &Run<'_>,
    names: &[String],
    crd_names: &[String],
    wait: Duration,
) -> (Option<Duration>, Duration, Value) {
    let t0 = Instant::now();
    let mut args = vec!["delete", "providers.pkg.crossplane.io", "--wait=false"];
    args.extend(names.iter().map(String::as_str));
    let out = run.control.kubectl(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = crds(&run.client);
    let wanted: std::collections::HashSet<&String> = crd_names.iter().collect();
    // How many of `crd_names` are left (None: the list failed).
    let crds_left = || async {
        c.list_metadata(&Default::default()).await.ok().map(|l| {
            l.items
                .iter()
                .filter(|o| wanted.contains(&o.name_any()))
                .count()
        })
    };
    let (gone, _) = benchmarks::wait_until(wait, || async { crds_left().await == Some(0) }).await;
    let took = gone.then(|| t0.elapsed());
    // Then what else of theirs goes, by kind: whatever is left after
    // two more minutes is orphaned.
    benchmarks::wait_until(Duration::from_secs(120), || async {
        count(&leftovers(run, names).await) == 0
    })
    .await;
    let all = t0.elapsed();
    let mut left = leftovers(run, names).await;
    if let Some(m) = left.as_object_mut() {
        m.insert("crds".into(), json!(crds_left().await.unwrap_or(0)));
    }
    (took, all, left)
}

/// How many objects `left` names (a list of names, or a number).
fn count(left: &Value) -> usize {
    left.as_object()
        .map(|m| {
            m.values()
                .map(|v| {
                    v.as_array()
                        .map_or(v.as_u64().unwrap_or(0) as usize, Vec::len)
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Objects whose names name one of `names`: CRDs, ClusterRoles and
/// bindings, and the runtime namespace's Deployments, ServiceAccounts,
/// Services and Secrets; and revisions.
async fn leftovers(run: &Run<'_>, names: &[String]) -> Value {
    let c = &run.client;
    let ns = Some(run.side.runtime_ns.as_str());
    let kinds = [
        (
            "providerrevisions",
            api(c, "pkg.crossplane.io", "v1", "ProviderRevision", None),
        ),
        (
            "clusterroles",
            api(c, "rbac.authorization.k8s.io", "v1", "ClusterRole", None),
        ),
        (
            "clusterrolebindings",
            api(
                c,
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRoleBinding",
                None,
            ),
        ),
        ("deployments", api(c, "apps", "v1", "Deployment", ns)),
        ("serviceaccounts", api(c, "", "v1", "ServiceAccount", ns)),
        ("services", api(c, "", "v1", "Service", ns)),
        ("secrets", api(c, "", "v1", "Secret", ns)),
    ];
    let mut out = serde_json::Map::new();
    for (kind, api) in kinds {
        let left: Vec<String> = api
            .list_metadata(&Default::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .map(|o| o.name_any())
                    .collect::<Vec<String>>()
            })
            .unwrap_or_default()
            .into_iter()
            .filter(|n: &String| names.iter().any(|p| n.contains(p.as_str())))
            .collect();
        out.insert(kind.to_owned(), json!(left));
    }
    Value::Object(out)
}

/// N generated Providers at once: time to all Healthy (and each one's,
/// from the apply), requests per revision by verb and resource, CPU and
/// peak memory of the two binaries, the API server's and etcd's CPU.
pub async fn install_many(run: &Run<'_>, gens: &[Generated], servers: &Servers) -> Value {
    let names: Vec<String> = gens.iter().map(|g| g.name.clone()).collect();
    let healthy = Probe::watch(providers(&run.client));
    assert!(healthy.synced(Duration::from_secs(30)).await);
    for n in &names {
        healthy.expect(n, Box::new(|v| condition(v, "Healthy") == Some("True")));
    }
    let timeout = Duration::from_secs(600) + Duration::from_secs(30) * gens.len() as u32;
    let mark = AuditMark::now([run.control]);
    let before = run.side.usage();
    let servers_before = servers.usage();
    let t0 = Instant::now();
    let objects: Vec<Value> = gens.iter().map(|g| provider(&g.name, &g.v1)).collect();
    apply(run.control, &objects);
    let reached = healthy.wait(&names, timeout).await;
    let all = t0.elapsed();
    let at: HashMap<String, Instant> = names.iter().map(|n| (n.clone(), t0)).collect();
    let latencies = healthy.latencies(&at);
    let done = AuditMark::now([run.control]);
    let requests = mark.delta(&done, &run.side.audit_users(), gens.len() as f64);
    // What each binary's resident memory grew by per CRD installed.
    let installed = gens.iter().map(|g| g.crds.len()).sum::<usize>().max(1) as f64;
    let growth: serde_json::Map<String, Value> = run
        .side
        .usage()
        .iter()
        .map(|(b, now)| {
            let then = before.get(b).copied().unwrap_or_default();
            // None when the process was replaced while installing.
            let kib = (now.pid == then.pid)
                .then(|| (now.usage.rss_mib - then.usage.rss_mib) * 1024.0 / installed);
            ((*b).to_owned(), json!(kib))
        })
        .collect();
    json!({
        "rss_growth_kib_per_crd": growth,
        "providers": gens.len(),
        "crds_each": gens.first().map_or(0, |g| g.crds.len()),
        "healthy": reached.json(),
        "all_healthy_s": reached.all().then_some(all.as_secs_f64()),
        "each_healthy_s": latency_json(&latencies),
        "requests_per_revision": requests,
        "usage": run.side.usage_since(&before),
        "servers": servers.usage_since(&servers_before),
        "timeline": mark.timeline(&done, run.control.name, 10.0),
    })
}

/// Nothing to do for `secs`: requests per Provider per minute.
pub async fn idle(run: &Run<'_>, providers: usize, secs: u64) -> Value {
    let mark = AuditMark::now([run.control]);
    let before = run.side.usage();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let minutes = secs as f64 / 60.0;
    let requests = mark.delta(
        &AuditMark::now([run.control]),
        &run.side.audit_users(),
        providers as f64 * minutes,
    );
    json!({
        "seconds": secs,
        "requests_per_provider_per_minute": requests,
        "usage": run.side.usage_since(&before),
        "package_manager_heap_live_mib": heap_live_mib(run),
    })
}

/// What ours holds in live allocations now (`crossplane_rs_heap_allocated_bytes`
/// on the package-manager's /metrics), to tell what it keeps from what its
/// allocator has not returned yet; nothing for upstream.
fn heap_live_mib(run: &Run<'_>) -> Option<f64> {
    if run.side.name != "crossplane-rs" {
        return None;
    }
    let m = tokio::task::block_in_place(|| e2e::shipped::metrics_of("package-manager"));
    Some(e2e::metric_sum(&m, "crossplane_rs_heap_allocated_bytes", &[]) / (1024.0 * 1024.0))
}

/// How long the upgrade waits for each Provider's first kind to be served
/// before it gives up reading that one.
const READ_OBJECT_WAIT: Duration = Duration::from_secs(120);

/// Makes one object of each Provider's first kind at v1alpha1 through the
/// API (not kubectl, whose discovery of thousands of kinds can be stale),
/// retrying while the kind is not served yet. Returns the groups that have
/// one, and each group whose kind was not served in time with the answer.
async fn read_objects(c: &kube::Client, gens: &[Generated]) -> (Vec<String>, Vec<String>) {
    let params = kube::api::PatchParams::apply("package-bench").force();
    let (mut made, mut not_served) = (Vec::new(), Vec::new());
    for g in gens {
        let object = json!({"apiVersion": format!("{}/v1alpha1", g.group), "kind": "Kind000",
                   "metadata": {"name": "read-me"}, "spec": {"forProvider": {"field0": "x"}}});
        let kinds = api(c, &g.group, "v1alpha1", "Kind000", None);
        let deadline = Instant::now() + READ_OBJECT_WAIT;
        loop {
            match kinds
                .patch("read-me", &params, &kube::api::Patch::Apply(&object))
                .await
            {
                Ok(_) => {
                    made.push(g.group.clone());
                    break;
                }
                Err(e) if Instant::now() >= deadline => {
                    eprintln!(
                        "package-bench: {}/v1alpha1 Kind000 not served: {e}",
                        g.group
                    );
                    not_served.push(format!("{}: {e}", g.group));
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
    (made, not_served)
}

/// Every Provider to v2 at once: time until each is Healthy on its new
/// revision; meanwhile one object of each Provider's first kind is read at
/// v1alpha1 over and over, and every failed read counted.
pub async fn upgrade(run: &Run<'_>, gens: &[Generated]) -> Value {
    let c = &run.client;
    // One object of the first kind of each, to read during the upgrade.
    let (groups, not_served) = read_objects(c, gens).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut reads, mut failed) = (0u64, Vec::<String>::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for g in &groups {
                    reads += 1;
                    if let Err(e) = api(&c, g, "v1alpha1", "Kind000", None).get("read-me").await
                        && failed.len() < 20
                    {
                        failed.push(format!("{g}: {e}"));
                    }
                }
            }
            (reads, failed)
        })
    };
    let on_v2 = Probe::watch(providers(c));
    assert!(on_v2.synced(Duration::from_secs(30)).await);
    for g in gens {
        let v2 = g.v2.clone();
        on_v2.expect(
            &g.name,
            Box::new(move |v| {
                condition(v, "Healthy") == Some("True")
                    && v.pointer("/status/currentIdentifier")
                        .and_then(Value::as_str)
                        == Some(v2.as_str())
            }),
        );
    }
    let names: Vec<String> = gens.iter().map(|g| g.name.clone()).collect();
    let mark = AuditMark::now([run.control]);
    let before = run.side.usage();
    let t0 = Instant::now();
    let objects: Vec<Value> = gens.iter().map(|g| provider(&g.name, &g.v2)).collect();
    apply(run.control, &objects);
    let timeout = Duration::from_secs(600) + Duration::from_secs(30) * gens.len() as u32;
    let reached = on_v2.wait(&names, timeout).await;
    let all = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reads, failed) = reader.await.unwrap_or_default();
    let at: HashMap<String, Instant> = names.iter().map(|n| (n.clone(), t0)).collect();
    json!({
        "on_new_revision": reached.json(),
        "all_upgraded_s": reached.all().then_some(all.as_secs_f64()),
        "each_upgraded_s": latency_json(&on_v2.latencies(&at)),
        "reads_of_a_converted_kind": reads,
        // Kinds whose object could not be made before the upgrade (not
        // served at v1alpha1 within READ_OBJECT_WAIT): not read.
        "kinds_not_served_before": not_served,
        "failed_reads": failed.len(),
        "failed_examples": failed,
        "requests_per_revision": mark.delta(&AuditMark::now([run.control]), &run.side.audit_users(), gens.len() as f64),
        "usage": run.side.usage_since(&before),
    })
}

/// Every Provider deleted at once: time until all their CRDs are gone, and
/// what is left of them then; the CRDs are waited for `wait`, else
/// [`delete_wait`].
pub async fn delete_all(run: &Run<'_>, gens: &[Generated], wait: Option<Duration>) -> Value {
    let names: Vec<String> = gens.iter().map(|g| g.name.clone()).collect();
    let crds: Vec<String> = gens.iter().flat_map(|g| g.crds.iter().cloned()).collect();
    // The objects the upgrade read go first, as a user's would: crossplane-rs
    // holds a Provider's deletion while objects of its kinds exist.
    for g in gens {
        let _ = api(&run.client, &g.group, "v1alpha1", "Kind000", None)
            .delete("read-me", &Default::default())
            .await;
    }
    let wait = wait.unwrap_or_else(|| delete_wait(crds.len()));
    let mark = AuditMark::now([run.control]);
    let before = run.side.usage();
    let (took, all, left) = delete_providers(run, &names, &crds, wait).await;
    let orphans = count(&left);
    json!({
        // None: CRDs were still there when the wait ended (left_after
        // counts them).
        "crds_gone_s": took.map(|t| t.as_secs_f64()),
        "waited_at_most_s": wait.as_secs_f64(),
        "all_gone_s": (orphans == 0).then_some(all.as_secs_f64()),
        "left_after": left,
        "orphaned_objects": orphans,
        "requests": mark.delta(&AuditMark::now([run.control]), &run.side.audit_users(), 1.0),
        "usage": run.side.usage_since(&before),
    })
}

/// The control API server and etcd, whose CPU a phase reads.
pub struct Servers {
    pub api_server: u32,
    pub etcd: u32,
}

impl Servers {
    pub fn of(plane: &testenv::ControlPlane) -> Self {
        let pid = |name: &str| benchmarks::plane_pid(plane, name);
        Self {
            api_server: pid("kube-apiserver-control"),
            etcd: pid("etcd"),
        }
    }

    pub fn usage(&self) -> [benchmarks::Usage; 2] {
        [
            benchmarks::Usage::of(self.api_server),
            benchmarks::Usage::of(self.etcd),
        ]
    }

    pub fn usage_since(&self, before: &[benchmarks::Usage; 2]) -> Value {
        let now = self.usage();
        json!({"api_server": now[0].since_json(&before[0]), "etcd": now[1].since_json(&before[1])})
    }
}
