//! Setting up a run: the control plane with audit logs, the provider's
//! identities, the null writer's ceiling, the watches the phases read, and
//! the provider itself.

use std::time::{Duration, Instant};

use benchmarks::{Probe, scaled_timeout};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::ConfigMap};
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, ListParams},
    discovery::ApiResource,
};
use serde_json::{Value, json};

use crate::{
    args::Args,
    run::{
        Bench, CONTROL_USER, Mark, REFS_NS, REMOTE_NS, REMOTE_USER, apply_all, name, objects_api,
    },
};

/// Everything the phases share.
pub struct Run {
    pub args: Args,
    pub bench: Bench,
    pub control: Client,
    pub objects: Api<DynamicObject>,
    pub remote_cms: Api<ConfigMap>,
    /// Watches the Objects in the control cluster.
    pub object_probe: Probe,
    /// Watches the managed ConfigMaps in the remote cluster.
    pub remote_probe: Probe,
    /// The API server's own ceiling (see [`null_writer`]).
    pub null_writer: Value,
    /// The create phase's ceiling (see [`crate::null`]).
    pub null_provider: Value,
    /// The provider's flags.
    pub provider_args: Vec<String>,
    /// The counters before the first phase.
    pub start: Mark,
    /// The Objects of the create, update and delete phases.
    pub names: Vec<String>,
    /// The first `--changes` of them, which the latency phases change.
    pub changed: Vec<String>,
    /// A value no earlier run wrote.
    pub stamp: String,
}

/// Starts the plane and the provider, and measures the null writer.
pub async fn set_up(args: Args) -> Run {
    eprintln!("object-bench: starting a local control plane (audit logs on)");
    let (plane, _) = testenv::start_local_with(testenv::Options {
        audit: true,
        remotes: 1,
        users: vec![REMOTE_USER.to_owned()],
        ..testenv::Options::default()
    })
    .unwrap();
    let control = plane.control.client().await;
    let remote = plane.remote.client().await;
    identities(&plane);

    let null_writer = null_writer(&control, args.objects, args.concurrency).await;
    eprintln!(
        "object-bench: null writer {:.1} ConfigMaps/s",
        null_writer["creates_per_s"].as_f64().unwrap_or(0.0)
    );

    // A provider stands by first (the benchmark holds its Lease): its
    // conversion webhook serves the null provider's Objects of a version
    // other than the stored one, and it reconciles nothing. It stops
    // before the measured provider starts, without leader election.
    let kubeconfig = e2e::impersonating_kubeconfig_for(&plane.control, "object-provider");
    let lease = hold_lease(&control).await;
    let mut standby = e2e::Running::start("object-provider", &kubeconfig, &["--leader-elect"]);
    standby
        .wait_healthy_on(&plane.control, Duration::from_secs(60))
        .await;

    let objects_dyn = objects_api(args.shape, control.clone());
    let cm_ar = ApiResource::erase::<ConfigMap>(&());
    let object_probe = Probe::watch(objects_dyn);
    let remote_probe = Probe::watch(Api::namespaced_with(remote.clone(), REMOTE_NS, &cm_ar));
    assert!(object_probe.synced(Duration::from_secs(30)).await);
    assert!(remote_probe.synced(Duration::from_secs(30)).await);
    // With the benchmark's own watches running, as in the create phase.
    let null_provider = if args.no_null_provider {
        Value::Null
    } else {
        null_provider(&plane, &control, &args).await
    };
    assert!(
        !lease_taken(&lease, &standby).await,
        "the standby provider took its Lease"
    );
    drop(standby);
    lease
        .delete(LEASE, &DeleteParams::default())
        .await
        .expect("letting the object-provider's Lease go");

    let resync = format!("{}s", args.resync.as_secs());
    let mut provider_args: Vec<String> = [
        "--poll-interval",
        &resync,
        "--concurrency",
        "16",
        "--log-format",
        "json",
    ]
    .map(str::to_owned)
    .into();
    provider_args.extend(args.provider_args.iter().cloned());
    let provider_argv: Vec<&str> = provider_args.iter().map(String::as_str).collect();
    let mut provider = e2e::Running::start("object-provider", &kubeconfig, &provider_argv);
    provider
        .wait_healthy_on(&plane.control, Duration::from_secs(60))
        .await;
    let bench = Bench {
        plane,
        provider,
        users: [
            ("control".to_owned(), vec![CONTROL_USER.to_owned()]),
            ("remote".to_owned(), vec![REMOTE_USER.to_owned()]),
        ]
        .into(),
    };
    let names: Vec<String> = (0..args.objects).map(name).collect();
    Run {
        start: bench.mark(),
        objects: objects_api(args.shape, control.clone()),
        remote_cms: Api::namespaced(remote, REMOTE_NS),
        changed: names.iter().take(args.changes).cloned().collect(),
        names,
        stamp: format!("t{}", chrono::Utc::now().timestamp()),
        args,
        bench,
        control,
        object_probe,
        remote_probe,
        null_writer,
        null_provider,
        provider_args,
    }
}

/// The create phase's ceiling (see [`crate::null`]), with the clients it
/// writes with.
async fn null_provider(plane: &testenv::ControlPlane, control: &Client, args: &Args) -> Value {
    let remote_user = plane.remote.kubeconfig_for(REMOTE_USER).unwrap();
    let clients = crate::null::Clients {
        user: control.clone(),
        provider: benchmarks::client_as(&plane.control, "object-provider").await,
        remote: benchmarks::client_of(kube::config::Kubeconfig::from_yaml(remote_user).unwrap())
            .await,
    };
    let ceiling = crate::null::null_provider(clients, args).await;
    eprintln!(
        "object-bench: null provider {:.1} Objects/s (cleared: {})",
        ceiling["objects_per_s"].as_f64().unwrap_or(0.0),
        ceiling["cleared"]
    );
    ceiling
}

/// The provider's identities: its ServiceAccount here, a user of its own
/// (cluster-admin) there, through the kubeconfig in the ProviderConfig's
/// Secret; and the benchmark's namespaces.
fn identities(plane: &testenv::ControlPlane) {
    e2e::apply_deploy(&plane.control);
    benchmarks::grant_cluster_admin(&plane.remote, REMOTE_USER);
    benchmarks::kubeconfig_secret(
        &plane.control,
        "default",
        "bench-kubeconfig",
        plane.remote.kubeconfig_for(REMOTE_USER).unwrap(),
    );
    plane.control.kubectl_stdin(
        &["apply", "-f", "-"],
        Some("apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {name: bench}\nspec: {credentials: {source: Secret, secretRef: {namespace: default, name: bench-kubeconfig, key: kubeconfig}}}\n---\napiVersion: kubernetes.m.crossplane.io/v1alpha1\nkind: ClusterProviderConfig\nmetadata: {name: bench}\nspec: {credentials: {source: Secret, secretRef: {namespace: default, name: bench-kubeconfig, key: kubeconfig}}}\n"),
    );
    plane.remote.kubectl(&["create", "namespace", REMOTE_NS]);
    plane.control.kubectl(&["create", "namespace", REFS_NS]);
    plane
        .control
        .kubectl(&["create", "namespace", "bench-null"]);
}

/// The API server's own ceiling: `n` plain ConfigMaps applied to the
/// control cluster at `concurrency`, as the benchmark applies Objects; then
/// removed (one deletecollection) so they do not weigh on what follows.
pub async fn null_writer(control: &Client, n: usize, concurrency: usize) -> Value {
    let api: Api<ConfigMap> = Api::namespaced(control.clone(), "bench-null");
    let bodies = (0..n)
        .map(|i| {
            let nm = name(i);
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": nm, "namespace": "bench-null", "labels": {"bench": "null"}},
                "data": {"i": i.to_string()}});
            (nm, body)
        })
        .collect();
    let started = Instant::now();
    let (_, errors) = apply_all(&api, "object-bench", bodies, concurrency).await;
    let duration = started.elapsed();
    // Only ours: the namespace also holds kube-root-ca.crt.
    let ours = ListParams::default().labels("bench=null");
    let cleared = match api.delete_collection(&DeleteParams::default(), &ours).await {
        Ok(_) => {
            benchmarks::wait_until(scaled_timeout(n), || async {
                api.list_metadata(&ours.clone().limit(1))
                    .await
                    .is_ok_and(|l| l.items.is_empty())
            })
            .await
            .0
        }
        Err(e) => {
            eprintln!("object-bench: removing the null writer's ConfigMaps: {e}");
            false
        }
    };
    json!({
        "configmaps": n,
        "concurrency": concurrency,
        "request_errors": errors,
        "duration_s": duration.as_secs_f64(),
        "creates_per_s": (n - errors) as f64 / duration.as_secs_f64(),
        "cleared": cleared,
    })
}

/// The provider's leader-election Lease, held by the benchmark.
const LEASE: &str = "crossplane-rs-object-provider";

/// Holds the provider's Lease for an hour: a provider started now stands
/// by.
async fn hold_lease(control: &Client) -> Api<Lease> {
    let leases: Api<Lease> = Api::namespaced(control.clone(), "crossplane-system");
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": LEASE},
        "spec": {"holderIdentity": "object-bench", "leaseDurationSeconds": 3600,
            "acquireTime": now, "renewTime": now},
    }))
    .unwrap();
    leases
        .create(&Default::default(), &lease)
        .await
        .expect("holding the object-provider's Lease");
    leases
}

/// Whether someone other than the benchmark holds the Lease.
async fn lease_taken(leases: &Api<Lease>, provider: &e2e::Running) -> bool {
    let holder = leases
        .get_opt(LEASE)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity);
    let taken = holder.as_deref() != Some("object-bench");
    if taken {
        eprintln!(
            "object-bench: Lease held by {holder:?}; provider log:\n{}",
            provider.log()
        );
    }
    taken
}
