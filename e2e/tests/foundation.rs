//! The foundation against real API servers: CRDs, the seeds' examples,
//! API-server validation, kubectl explain and printer columns, every binary's
//! health and metrics, leader election, and the kustomize deployment.

use std::time::{Duration, Instant};

use e2e::{
    Running, http_get, metric_sum,
    proxy::Proxy,
    wait,
    wait::poll,
    workloads::{self, impersonating_kubeconfig},
    yaml_documents,
};
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Secret},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{Api, Client, api::PostParams};
use serde_json::{Value, json};
use types::compute::v1alpha1::KubernetesCluster;

use oci::project::BINARIES;

/// The common metric names every binary exports.
const COMMON_METRICS: [&str; 8] = [
    "crossplane_rs_reconcile_total",
    "crossplane_rs_reconcile_duration_seconds",
    "crossplane_rs_reconcile_in_flight",
    "crossplane_rs_objects_pending",
    "crossplane_rs_kube_api_requests_total",
    "crossplane_rs_leader",
    "crossplane_rs_leader_stand_downs_total",
    "crossplane_rs_leader_not_leading_seconds_total",
];

/// The seed examples the seeds propose (the rest are historical or rejected
/// designs, marked so in their headers).
const SEED_EXAMPLES: [&str; 9] = [
    "examples/seeds/000-wordpress-demo.yaml",
    "examples/seeds/001-extensionrequests.yaml",
    "examples/seeds/001-extension-redis.yaml",
    "examples/seeds/002-object-sample-namespace.yaml",
    "examples/seeds/002-object-csv-kong-managementpolicy.yaml",
    "examples/seeds/002-object-csv-kong-references.yaml",
    "examples/seeds/004-provider-runtimeconfigref.yaml",
    "examples/seeds/004-provider-cloudrun-runtimeconfig.yaml",
    "examples/seeds/004-deploymentruntimeconfig-default.yaml",
];

/// Whether a /metrics body says this replica leads (the sample line, not
/// the HELP text, which also starts with "1").
fn leads(metrics: &str) -> bool {
    metrics
        .lines()
        .any(|l| l.trim() == "crossplane_rs_leader 1")
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn every_crd_installs_and_becomes_established() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let expected = types::crds::all().unwrap();
    assert_eq!(
        expected.len(),
        13,
        "one CRD per kind in the seeds, and ImageConfig"
    );
    for crd in expected {
        let name = crd.metadata.name.unwrap();
        let live = api
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name} is not installed: {e}"));
        let established = live
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "CRD {name} is not Established");
    }
}

/// True when every field `want` sets has the same value in `got`. A null in
/// `want` (a key written without a value) is satisfied by an absent field.
fn subset(want: &Value, got: &Value, path: &str, diffs: &mut Vec<String>) {
    match (want, got) {
        (Value::Null, Value::Null) => {}
        (Value::Null, _) => {}
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                match g.get(k) {
                    Some(gv) => subset(v, gv, &format!("{path}.{k}"), diffs),
                    None if v.is_null() => {}
                    None => diffs.push(format!("{path}.{k} is missing")),
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                subset(wv, gv, &format!("{path}[{i}]"), diffs);
            }
        }
        (w, g) if w == g => {}
        (w, g) => diffs.push(format!("{path}: wrote {w}, read back {g}")),
    }
}

#[tokio::test]
async fn every_seed_example_applies_unchanged_and_reads_back_equal() {
    let plane = testenv::control_plane();
    let control = &plane.control;
    // The seed's wordpress-demo lives in namespace `complex`, as written.
    let _ = control.kubectl(&["create", "namespace", "complex"]);
    let client = control.client().await;
    let ns = control.namespace(&client, "seeds").await;
    for file in SEED_EXAMPLES {
        let path = testenv::repo_root().join(file);
        let docs = yaml_documents(file);
        let path = path.to_string_lossy();
        // Namespaced kinds written without a namespace go to the test's.
        let mut args = vec!["apply", "-f", &path];
        if docs.iter().any(|d| d["metadata"]["namespace"].is_null()) {
            args.extend(["-n", ns.as_str()]);
        }
        let out = control.kubectl(&args);
        assert!(
            out.status.success(),
            "kubectl apply -f {file} was refused: {}",
            stderr(&out)
        );
        for doc in docs {
            let kind = doc["kind"].as_str().unwrap();
            let group = doc["apiVersion"]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap();
            let name = doc["metadata"]["name"].as_str().unwrap();
            let namespace = doc["metadata"]["namespace"].as_str().unwrap_or(&ns);
            let resource = format!(
                "{}.{}.{}",
                kind.to_lowercase(),
                doc["apiVersion"]
                    .as_str()
                    .unwrap()
                    .split('/')
                    .nth(1)
                    .unwrap(),
                group
            );
            let out = control.kubectl(&["get", &resource, name, "-n", namespace, "-o", "json"]);
            assert!(
                out.status.success(),
                "{file}: cannot read back {kind} {name}: {}",
                stderr(&out)
            );
            let live: Value = serde_json::from_str(&stdout(&out)).unwrap();
            let mut want = doc.clone();
            // status is written by controllers through the status
            // subresource; an apply never sets it.
            want.as_object_mut().unwrap().remove("status");
            let mut diffs = Vec::new();
            subset(&want, &live, "", &mut diffs);
            assert!(
                diffs.is_empty(),
                "{file}: {kind} {name} read back different:\n{}",
                diffs.join("\n")
            );
        }
    }
}

async fn create_fixture(ns: &str) {
    let control = &testenv::control_plane().control;
    let app = format!(
        r#"
apiVersion: workload.crossplane.io/v1alpha1
kind: KubernetesApplication
metadata:
  name: wordpress-demo
  namespace: {ns}
spec:
  clusterSelector:
    matchLabels:
      app: wordpress-demo
  resourceTemplates:
  - metadata:
      name: wordpress-demo-namespace
    spec:
      template:
        apiVersion: v1
        kind: Namespace
        metadata:
          name: wordpress
---
apiVersion: workload.crossplane.io/v1alpha1
kind: KubernetesApplicationResource
metadata:
  name: wordpress-demo-deployment
  namespace: {ns}
  labels:
    app: wordpress-demo
spec:
  clusterRef:
    name: wordpress-demo-cluster
  template:
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      namespace: wordpress
      name: wordpress
"#
    );
    let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(&app));
    assert!(
        out.status.success(),
        "creating the fixture: {}",
        stderr(&out)
    );
}

fn expect_refused(ns: &str, args: &[&str], patch: &str, needle: &str) {
    let control = &testenv::control_plane().control;
    let mut all = vec!["patch", "-n", ns];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--type=merge", "-p", patch]);
    let out = control.kubectl(&all);
    assert!(
        !out.status.success(),
        "the API server accepted {patch} on {args:?}"
    );
    let err = stderr(&out);
    assert!(
        err.contains(needle),
        "refusal of {patch} should say {needle:?}, said: {err}"
    );
}

#[tokio::test]
async fn changing_an_immutable_field_is_refused_naming_the_field() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "immutable").await;
    create_fixture(&ns).await;
    let app = ["kubernetesapplication", "wordpress-demo"];
    expect_refused(
        &ns,
        &app,
        r#"{"spec":{"clusterSelector":{"matchLabels":{"app":"other"}}}}"#,
        "spec.clusterSelector is immutable",
    );
    expect_refused(
        &ns,
        &app,
        r#"{"spec":{"clusterSelector":null}}"#,
        "spec.clusterSelector is immutable",
    );
    let res = ["kubernetesapplicationresource", "wordpress-demo-deployment"];
    expect_refused(
        &ns,
        &res,
        r#"{"spec":{"template":{"kind":"StatefulSet"}}}"#,
        "spec.template.kind is immutable",
    );
    expect_refused(
        &ns,
        &res,
        r#"{"spec":{"template":{"apiVersion":"apps/v1beta2"}}}"#,
        "spec.template.apiVersion is immutable",
    );
    expect_refused(
        &ns,
        &res,
        r#"{"spec":{"template":{"metadata":{"name":"other"}}}}"#,
        "spec.template.metadata.name is immutable",
    );
    expect_refused(
        &ns,
        &res,
        r#"{"spec":{"template":{"metadata":{"namespace":"other"}}}}"#,
        "spec.template.metadata.namespace is immutable",
    );
    expect_refused(
        &ns,
        &res,
        r#"{"spec":{"clusterRef":{"name":"elsewhere"}}}"#,
        "spec.clusterRef is immutable",
    );
    // Mutable fields stay mutable: the template's spec may change.
    let out = plane.control.kubectl(&[
        "patch",
        "-n",
        &ns,
        "kubernetesapplicationresource",
        "wordpress-demo-deployment",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"replicas":2}}}}"#,
    ]);
    assert!(
        out.status.success(),
        "changing the template's spec was refused: {}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_malformed_object_is_refused_with_a_clear_message() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "malformed").await;
    let cases = [
        (
            format!("apiVersion: extensions.crossplane.io/v1alpha1\nkind: ExtensionRequest\nmetadata: {{name: both, namespace: {ns}}}\nspec: {{package: 'redis:v0.1.0', crd: redisclusters.cache.crossplane.io/v1alpha1}}\n"),
            "set exactly one of spec.package",
        ),
        (
            format!("apiVersion: extensions.crossplane.io/v1alpha1\nkind: ExtensionRequest\nmetadata: {{name: neither, namespace: {ns}}}\nspec: {{source: registry.crossplane.io}}\n"),
            "set exactly one of spec.package",
        ),
        (
            "apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: Object\nmetadata: {name: bad-policy-e2e}\nspec: {managementPolicy: Sometimes, forProvider: {manifest: {apiVersion: v1, kind: ConfigMap}}}\n".to_owned(),
            "Unsupported value: \"Sometimes\"",
        ),
        (
            "apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: Object\nmetadata: {name: bad-ref-e2e}\nspec: {references: [{fromObject: {apiVersion: v1, kind: ConfigMap, name: x, fieldPath: data.a}}], forProvider: {manifest: {apiVersion: v1, kind: ConfigMap}}}\n".to_owned(),
            "a fromObject reference needs toFieldPath",
        ),
        (
            "apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {name: no-secret-e2e}\nspec: {credentials: {source: Secret}}\n".to_owned(),
            "credentials.source Secret needs credentials.secretRef",
        ),
        (
            format!("apiVersion: workload.crossplane.io/v1alpha1\nkind: KubernetesApplication\nmetadata: {{name: bad, namespace: {ns}}}\nspec: {{resourceTemplates: {{name: not-a-list}}}}\n"),
            "spec.resourceTemplates",
        ),
        (
            format!("apiVersion: compute.crossplane.io/v1alpha1\nkind: KubernetesCluster\nmetadata: {{name: nosecret, namespace: {ns}}}\nspec: {{}}\n"),
            "spec.connectionSecretRef: Required value",
        ),
    ];
    for (manifest, needle) in cases {
        let out = plane
            .control
            .kubectl_stdin(&["apply", "-f", "-"], Some(&manifest));
        assert!(
            !out.status.success(),
            "the API server accepted a malformed object:\n{manifest}"
        );
        let err = stderr(&out);
        assert!(
            err.contains(needle),
            "refusal should say {needle:?}, said: {err}\nfor:\n{manifest}"
        );
    }
}

#[tokio::test]
async fn kubectl_explain_teaches_the_fields() {
    let control = &testenv::control_plane().control;
    let cases = [
        ("kubernetesapplication", "unit of scheduled work"),
        (
            "kubernetesapplication.spec.clusterSelector",
            "ClusterSelector selects the KubernetesClusters",
        ),
        (
            "kubernetesapplicationresource.spec.secrets",
            "<resource name>-<secret name>",
        ),
        (
            "kubernetesapplicationresource.status.remote",
            "copied verbatim",
        ),
        (
            "kubernetescluster.spec.connectionSecretRef",
            "holds a kubeconfig",
        ),
        ("object.spec.managementPolicy", "ObserveCreateUpdate (never"),
        ("object.spec.references.fromObject", "copies the value"),
        ("providerconfig.spec.credentials.source", "InjectedIdentity"),
        (
            "extensionrequest.spec.crd",
            "whose owning package to install",
        ),
        (
            "extension.spec.customresourcedefinitions.dependsOn",
            "dependency resolution",
        ),
        (
            "provider.spec.runtimeConfigRef",
            "DeploymentRuntimeConfig named \"default\"",
        ),
        (
            "deploymentruntimeconfig.spec.deploymentTemplate",
            "package-runtime",
        ),
        (
            "controllerconfig",
            "Deprecated: use DeploymentRuntimeConfig",
        ),
    ];
    for (field, needle) in cases {
        let out = control.kubectl(&["explain", field]);
        assert!(
            out.status.success(),
            "kubectl explain {field}: {}",
            stderr(&out)
        );
        let text = stdout(&out)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            text.contains(needle),
            "kubectl explain {field} should teach {needle:?}; printed:\n{}",
            stdout(&out)
        );
    }
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test]
async fn kubectl_get_shows_the_seed_printer_columns() {
    let plane = testenv::control_plane();
    let control = &plane.control;
    let client = control.client().await;
    let ns = control.namespace(&client, "columns").await;
    create_fixture(&ns).await;
    let out = control.kubectl(&[
        "patch", "-n", &ns, "kubernetesapplication", "wordpress-demo", "--subresource=status", "--type=merge",
        "-p", r#"{"status":{"state":"PartiallySubmitted","clusterRef":{"name":"wordpress-demo-cluster"},"desiredResources":3,"submittedResources":2}}"#,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = control.kubectl(&["-n", &ns, "get", "kubernetesapplication", "wordpress-demo"]);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    // As the seed shows it.
    assert_eq!(
        words(lines[0]),
        ["NAME", "CLUSTER", "STATUS", "DESIRED", "SUBMITTED"],
        "{text}"
    );
    assert_eq!(
        words(lines[1]),
        [
            "wordpress-demo",
            "wordpress-demo-cluster",
            "PartiallySubmitted",
            "3",
            "2"
        ],
        "{text}"
    );

    let out = control.kubectl(&[
        "patch",
        "-n",
        &ns,
        "kubernetesapplicationresource",
        "wordpress-demo-deployment",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"state":"Submitted"}}"#,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = control.kubectl(&[
        "-n",
        &ns,
        "get",
        "kubernetesapplicationresource",
        "--selector",
        "app=wordpress-demo",
    ]);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        words(lines[0]),
        [
            "NAME",
            "TEMPLATE-KIND",
            "TEMPLATE-NAME",
            "CLUSTER",
            "STATUS"
        ],
        "{text}"
    );
    assert_eq!(
        words(lines[1]),
        [
            "wordpress-demo-deployment",
            "Deployment",
            "wordpress",
            "wordpress-demo-cluster",
            "Submitted"
        ],
        "{text}"
    );

    // Short names and categories work too.
    let out = control.kubectl(&["-n", &ns, "get", "crossplane", "-o", "name"]);
    let text = stdout(&out);
    assert!(
        text.contains("kubernetesapplication.workload.crossplane.io/wordpress-demo"),
        "{text}"
    );
    let out = control.kubectl(&["-n", &ns, "get", "kapp", "-o", "name"]);
    assert!(stdout(&out).contains("wordpress-demo"), "{}", stderr(&out));
}

#[tokio::test]
async fn every_binary_serves_health_and_the_common_metrics() {
    for name in BINARIES {
        // Each as its shipped ServiceAccount: the start-up CRD check and the
        // watches must work with its deploy/ role alone.
        let mut bin = Running::start(name, &impersonating_kubeconfig(name), &[]);
        bin.wait_healthy(Duration::from_secs(30)).await;
        let metrics = bin.metrics();
        for metric in COMMON_METRICS {
            assert!(
                metrics.contains(metric),
                "{name}'s /metrics lacks {metric}:\n{metrics}"
            );
        }
        // Prometheus text format: HELP and TYPE lines before the samples.
        assert!(
            metrics.contains("# TYPE crossplane_rs_reconcile_total counter"),
            "{metrics}"
        );
        assert!(
            leads(&metrics),
            "{name} without --leader-elect leads: {metrics}"
        );
        let ready = wait(Duration::from_secs(10), "/readyz", || async {
            matches!(e2e::http_get(bin.addr, "/readyz"), Some((200, _))).then_some(())
        });
        ready.await;
    }
}

#[tokio::test]
async fn a_binary_waits_for_its_crds_and_the_api_server_and_never_exits_for_them() {
    let plane = testenv::control_plane();
    // The remote cluster has no crossplane-rs CRDs: the scheduler says
    // which and how to install them, answers /healthz (a kubelet leaves it
    // running) and /readyz says it waits.
    let mut bin = Running::start("scheduler", &plane.remote.kubeconfig_path, &[]);
    bin.wait_healthy(Duration::from_secs(30)).await;
    let log = wait(
        Duration::from_secs(30),
        "the scheduler to say what it waits for",
        || {
            let log = bin.log();
            async move { log.contains("kubectl apply -f crds/").then_some(log) }
        },
    )
    .await;
    assert!(
        log.contains("CRD (kubernetesapplications.workload.crossplane.io) is not installed"),
        "{log}"
    );
    assert!(
        matches!(http_get(bin.addr, "/readyz"), Some((503, body)) if body.contains("waiting for the API server")),
        "{:?}",
        http_get(bin.addr, "/readyz")
    );
    // Still waiting after several more looks (pauses double up to 5 s):
    // not exited, and nothing reconciled.
    let looks = |b: &Running| b.log().matches("waiting for the API server").count();
    let probes = |b: &Running| {
        metric_sum(
            &b.metrics(),
            "crossplane_rs_kube_api_requests_total",
            &[("cluster", "control")],
        )
    };
    let before = probes(&bin);
    wait(
        Duration::from_secs(30),
        "the scheduler to look three more times",
        || {
            let now = probes(&bin);
            async move { (now >= before + 3.0).then_some(()) }
        },
    )
    .await;
    assert!(
        bin.child.try_wait().ok().flatten().is_none(),
        "exited:\n{}",
        bin.log()
    );
    // Said when it began waiting, then once per 30 s: not at every look.
    assert!(looks(&bin) <= 2, "said at every look:\n{}", bin.log());
    assert_eq!(
        metric_sum(&bin.metrics(), "crossplane_rs_reconcile_total", &[]),
        0.0
    );

    // An API server that does not answer at start (a proxy that accepts and
    // never answers) is waited for too; once it answers, the binary starts
    // in the same process.
    let (proxy, via_proxy) = Proxy::in_front_of(&plane.control.kubeconfig_path).await;
    proxy.cut();
    let mut waiting = Running::start("scheduler", &via_proxy, &[]);
    waiting.wait_healthy(Duration::from_secs(30)).await;
    assert!(matches!(http_get(waiting.addr, "/readyz"), Some((503, _))));
    wait(
        Duration::from_secs(60),
        "the scheduler to say the API server does not answer",
        || {
            let log = waiting.log();
            async move { log.contains("waiting for the API server").then_some(()) }
        },
    )
    .await;
    proxy.heal();
    let healed = Instant::now();
    wait(
        Duration::from_secs(60),
        "the scheduler to start once the API server answers",
        || {
            let ready = http_get(waiting.addr, "/readyz");
            async move { matches!(ready, Some((200, _))).then_some(()) }
        },
    )
    .await;
    assert!(waiting.child.try_wait().ok().flatten().is_none(), "exited");
    eprintln!(
        "start-up: ready {:?} after the API server answered again",
        healed.elapsed()
    );
}

#[tokio::test]
async fn a_standby_replica_takes_over_the_lease_within_20s_of_the_leader_dying() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "leader").await;
    let args = |id: &'static str| {
        vec![
            "--leader-elect",
            "--leader-election-namespace",
            ns.as_str(),
            "--identity",
            id,
            "--leader-election-lease-duration",
            "10s",
        ]
    };
    let kubeconfig = &plane.control.kubeconfig_path;
    let mut first = Running::start("scheduler", kubeconfig, &args("replica-a"));
    let mut second = Running::start("scheduler", kubeconfig, &args("replica-b"));
    first.wait_healthy(Duration::from_secs(30)).await;
    second.wait_healthy(Duration::from_secs(30)).await;
    let leases: Api<Lease> = Api::namespaced(client, &ns);
    let holder = |leases: Api<Lease>| async move {
        leases
            .get_opt("crossplane-rs-scheduler")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    };
    // Exactly one replica leads, and it is the Lease's holder. (Under load a
    // Lease can change hands between two reads, so this waits for a
    // consistent view rather than sampling once; two leaders at once would
    // never become consistent.)
    let leader = wait(
        Duration::from_secs(30),
        "exactly one replica to lead, holding the Lease",
        || {
            let leases = leases.clone();
            let (a, b) = (first.metrics(), second.metrics());
            async move {
                let h = holder(leases).await?;
                let (a_leads, b_leads) = (leads(&a), leads(&b));
                match (h.as_str(), a_leads, b_leads) {
                    ("replica-a", true, false) | ("replica-b", false, true) => Some(h),
                    _ => None,
                }
            }
        },
    )
    .await;
    let (leading, standby) = if leader == "replica-a" {
        (&mut first, &mut second)
    } else {
        (&mut second, &mut first)
    };
    let expected = if leader == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    leading.kill();
    let started = std::time::Instant::now();
    wait(
        Duration::from_secs(20),
        "the standby replica to take over the Lease",
        || {
            let leases = leases.clone();
            async move { holder(leases).await.filter(|h| h == expected) }
        },
    )
    .await;
    wait(
        Duration::from_secs(5),
        "the new leader to report it leads",
        || async { leads(&standby.metrics()).then_some(()) },
    )
    .await;
    eprintln!(
        "leader election: takeover after SIGKILL took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_kustomize_deployment_renders_and_applies() {
    let control = &testenv::control_plane().control;
    let deploy = testenv::repo_root().join("deploy");
    let rendered = control
        .kubectl_ok(&["kustomize", &deploy.to_string_lossy()])
        .unwrap();
    let out = control.kubectl_stdin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&rendered),
    );
    assert!(
        out.status.success(),
        "applying deploy/ failed: {}",
        stderr(&out)
    );
    for name in BINARIES {
        let dep: Value = serde_json::from_str(
            &control
                .kubectl_ok(&[
                    "-n",
                    "crossplane-system",
                    "get",
                    "deployment",
                    name,
                    "-o",
                    "json",
                ])
                .unwrap(),
        )
        .unwrap();
        let container = &dep["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["command"][0], format!("/usr/local/bin/{name}"));
        assert_eq!(dep["spec"]["template"]["spec"]["serviceAccountName"], name);
        let svc: Value = serde_json::from_str(
            &control
                .kubectl_ok(&[
                    "-n",
                    "crossplane-system",
                    "get",
                    "service",
                    name,
                    "-o",
                    "json",
                ])
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            svc["metadata"]["annotations"]["prometheus.io/scrape"],
            "true"
        );
        // The service account may do what it needs: watch its own kinds and
        // hold its Lease; and nothing it does not need (secrets are not the
        // rbac-manager's business).
        let sa = format!("system:serviceaccount:crossplane-system:{name}");
        let can = |args: &[&str]| {
            let mut all = vec!["auth", "can-i", "--as", sa.as_str()];
            all.extend_from_slice(args);
            stdout(&control.kubectl(&all)).trim() == "yes"
        };
        assert!(
            can(&[
                "update",
                &format!("leases/crossplane-rs-{name}"),
                "-n",
                "crossplane-system"
            ]),
            "{name} cannot hold its Lease"
        );
        assert!(
            can(&["create", "events", "-n", "default"]),
            "{name} cannot record events"
        );
        assert!(
            !can(&["delete", "namespaces"]),
            "{name} may delete namespaces"
        );
    }
    let sa = |n: &str| format!("system:serviceaccount:crossplane-system:{n}");
    let can = |who: &str, args: &[&str]| {
        let who = sa(who);
        let mut all = vec!["auth", "can-i", "--as", who.as_str()];
        all.extend_from_slice(args);
        stdout(&control.kubectl(&all)).trim() == "yes"
    };
    assert!(can(
        "scheduler",
        &[
            "watch",
            "kubernetesapplications.workload.crossplane.io",
            "-A"
        ]
    ));
    assert!(can(
        "application-controller",
        &[
            "create",
            "kubernetesapplicationresources.workload.crossplane.io",
            "-n",
            "x"
        ]
    ));
    assert!(!can(
        "scheduler",
        &[
            "create",
            "kubernetesapplicationresources.workload.crossplane.io",
            "-n",
            "x"
        ]
    ));
    assert!(can("resource-controller", &["get", "secrets", "-n", "x"]));
    assert!(!can("rbac-manager", &["get", "secrets", "-n", "x"]));

    // Secrets. The scheduler reads the connection Secret a KubernetesCluster
    // names, the resource-controller that one and the Secrets a resource
    // propagates: `get`. Both watch Secrets by metadata only, which needs
    // `list` and `watch`: RBAC has no verb that allows a metadata-only list
    // and refuses a full one, so these are granted and
    // secret_watches_carry_metadata_not_data proves that the data never
    // travels. Neither may change or delete any Secret of this cluster.
    for who in ["scheduler", "resource-controller"] {
        for verb in ["get", "list", "watch"] {
            assert!(
                can(who, &[verb, "secrets", "-A"]),
                "{who} cannot {verb} secrets"
            );
        }
        for verb in ["create", "update", "patch", "delete", "deletecollection"] {
            assert!(
                !can(who, &[verb, "secrets", "-n", "x"]),
                "{who} may {verb} secrets"
            );
        }
    }
    assert!(!can(
        "application-controller",
        &["get", "secrets", "-n", "x"]
    ));

    // Leader election needs this binary's own Lease only: no listing or
    // watching Leases, no other binary's Lease.
    for who in [
        "scheduler",
        "application-controller",
        "resource-controller",
        "package-manager",
        "rbac-manager",
    ] {
        for verb in ["list", "watch"] {
            assert!(
                !can(who, &[verb, "leases", "-n", "crossplane-system"]),
                "{who} may {verb} leases"
            );
        }
        assert!(
            !can(
                who,
                &[
                    "update",
                    "leases/crossplane-rs-object-provider",
                    "-n",
                    "crossplane-system"
                ]
            ),
            "{who} may update another binary's Lease"
        );
    }

    // The rbac-manager renders revisions' roles and bindings: it may write
    // ClusterRoles and ClusterRoleBindings, and Roles and RoleBindings (an
    // Extension's rights are namespaced, a runtime's Leases too), escalate
    // and bind (the roles it writes grant what it does not hold), its
    // RBACReady condition, and nothing else: no CRDs, no workloads, no
    // Secrets.
    let who = "rbac-manager";
    for args in [
        &["list", "providerrevisions.pkg.crossplane.io"][..],
        &["patch", "providerrevisions.pkg.crossplane.io"],
        &["watch", "extensions.extensions.crossplane.io", "-A"],
        &[
            "patch",
            "providerrevisions.pkg.crossplane.io",
            "--subresource=status",
        ],
        &["create", "clusterroles"],
        &["escalate", "clusterroles"],
        &["bind", "clusterroles"],
        &["create", "clusterrolebindings"],
        &["create", "roles", "-n", "default"],
        &["create", "rolebindings", "-n", "default"],
        &["watch", "deployments", "-n", "crossplane-rs-runtimes"],
        // Runtimes' Secrets are bound per namespace, to the runtimes whose
        // system role is bound.
        &["watch", "namespaces"],
        &["watch", "clusterrolebindings"],
        &["watch", "rolebindings", "-A"],
    ] {
        assert!(can(who, args), "{who} cannot {}", args.join(" "));
    }
    for args in [
        &["create", "customresourcedefinitions"][..],
        &["update", "customresourcedefinitions"],
        &["create", "deployments", "-n", "crossplane-rs-runtimes"],
        &["watch", "deployments", "-n", "crossplane-system"],
        &["watch", "deployments", "-n", "default"],
        &["create", "services", "-n", "crossplane-system"],
        &["create", "serviceaccounts", "-n", "crossplane-system"],
        &["list", "roles", "-A"],
        &["get", "secrets", "-n", "crossplane-system"],
        &["get", "secrets", "-n", "crossplane-rs-runtimes"],
    ] {
        assert!(!can(who, args), "{who} may {}", args.join(" "));
    }

    // The package-manager installs packages: it makes, switches and deletes
    // revisions, applies and deletes CRDs, runs Provider runtimes in their
    // namespace (not its own) and reads pull secrets there by name; an Extension's
    // controller runs in the Extension's namespace, so it makes Deployments
    // and ServiceAccounts there (and nothing else of another namespace's:
    // no Services, Secrets or pods). It never changes Secrets and never
    // grants roles.
    let who = "package-manager";
    for args in [
        &["create", "providerrevisions.pkg.crossplane.io"][..],
        &["create", "providers.pkg.crossplane.io"],
        &["patch", "providerrevisions.pkg.crossplane.io"],
        &["delete", "providerrevisions.pkg.crossplane.io"],
        &[
            "patch",
            "providers.pkg.crossplane.io",
            "--subresource=status",
        ],
        &["create", "customresourcedefinitions"],
        &["patch", "customresourcedefinitions"],
        &["delete", "customresourcedefinitions"],
        &["create", "deployments", "-n", "crossplane-rs-runtimes"],
        &[
            "deletecollection",
            "services",
            "-n",
            "crossplane-rs-runtimes",
        ],
        &["create", "serviceaccounts", "-n", "crossplane-rs-runtimes"],
        &["get", "secrets", "-n", "crossplane-rs-runtimes"],
        &["create", "deploymentruntimeconfigs.pkg.crossplane.io"],
        &[
            "create",
            "extensions.extensions.crossplane.io",
            "-n",
            "default",
        ],
        &[
            "patch",
            "extensionrequests.extensions.crossplane.io/status",
            "-n",
            "default",
        ],
        &["create", "deployments", "-n", "default"],
        &["delete", "deployments", "-n", "default"],
        &["create", "serviceaccounts", "-n", "default"],
        &["watch", "customresourcedefinitions"],
        // Each Provider's certificate Secrets, in the runtimes' namespace
        // only.
        &["create", "secrets", "-n", "crossplane-rs-runtimes"],
        &["patch", "secrets", "-n", "crossplane-rs-runtimes"],
        &["create", "validatingwebhookconfigurations"],
    ] {
        assert!(can(who, args), "{who} cannot {}", args.join(" "));
    }
    for args in [
        &["patch", "deploymentruntimeconfigs.pkg.crossplane.io"][..],
        &["update", "customresourcedefinitions"],
        &["create", "services", "-n", "default"],
        &["delete", "serviceaccounts", "-n", "default"],
        &["list", "pods", "-n", "default"],
        &[
            "create",
            "extensionrequests.extensions.crossplane.io",
            "-n",
            "default",
        ],
        &["get", "secrets", "-n", "default"],
        &["create", "secrets", "-n", "default"],
        &["list", "secrets", "-n", "crossplane-rs-runtimes"],
        &["delete", "secrets", "-n", "crossplane-rs-runtimes"],
        &["get", "secrets", "-n", "crossplane-system"],
        &["update", "validatingwebhookconfigurations"],
        &["watch", "secrets", "-A"],
        &["create", "clusterroles"],
        &["create", "clusterrolebindings"],
        &["escalate", "clusterroles"],
        &["bind", "clusterroles"],
        &["delete", "namespaces"],
    ] {
        assert!(!can(who, args), "{who} may {}", args.join(" "));
    }
    // The object-provider writes status with server-side apply (patch) and
    // nothing else.
    assert!(can(
        "object-provider",
        &["patch", "objects.kubernetes.crossplane.io/status"]
    ));
    assert!(!can(
        "object-provider",
        &["update", "objects.kubernetes.crossplane.io/status"]
    ));
}

/// Whether the binary serving /metrics on `addr` says it leads now; false
/// when it does not answer (it has stopped).
fn leads_now(addr: std::net::SocketAddr) -> bool {
    matches!(http_get(addr, "/metrics"), Some((200, body)) if leads(&body))
}

/// Flags for a replica of a workload binary under leader election in `ns`
/// (its Lease lives there), watching `ns`.
fn elected<'a>(ns: &'a str, identity: &'a str, lease_duration: &'a str) -> Vec<&'a str> {
    vec![
        "--leader-elect",
        "--leader-election-namespace",
        ns,
        "--identity",
        identity,
        "--leader-election-lease-duration",
        lease_duration,
        "--watch-namespace",
        ns,
    ]
}

/// Waits until the binary serving /metrics on `addr` leads.
async fn wait_leads(addr: std::net::SocketAddr, who: &str, timeout: Duration) {
    wait(timeout, &format!("{who} to lead"), || async move {
        leads_now(addr).then_some(())
    })
    .await;
}

/// Who holds the scheduler's Lease in the namespace of `leases`.
async fn scheduler_lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("crossplane-rs-scheduler")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// The status of a KubernetesCluster's Ready condition, once written.
async fn cluster_ready(client: &Client, ns: &str, name: &str) -> Option<String> {
    let cluster = Api::<KubernetesCluster>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()?;
    let status = cluster.status?;
    workloads::condition(&status.conditions, "Ready").map(|c| c.status.clone())
}

/// Waits until a KubernetesCluster's Ready condition is `want`.
async fn wait_cluster_ready(client: &Client, ns: &str, name: &str, want: &str) {
    wait(
        Duration::from_secs(30),
        &format!("KubernetesCluster {ns}/{name} to be Ready={want}"),
        || async { (cluster_ready(client, ns, name).await.as_deref() == Some(want)).then_some(()) },
    )
    .await;
}

/// Asks a binary to stop gracefully (SIGTERM), as Kubernetes does.
fn terminate(bin: &Running) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &bin.child.id().to_string()])
        .status();
    assert!(
        matches!(&status, Ok(s) if s.success()),
        "kill -TERM {}: {status:?}",
        bin.name
    );
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_stops_before_the_standby_leads() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "splitbrain").await;
    // replica-a reaches the API server only through a proxy this test owns.
    let (proxy, via_proxy) = Proxy::in_front_of(&plane.control.kubeconfig_path).await;
    let mut leader = Running::start("scheduler", &via_proxy, &elected(&ns, "replica-a", "6s"));
    leader.wait_healthy(Duration::from_secs(30)).await;
    wait_leads(leader.addr, "replica-a", Duration::from_secs(30)).await;
    let mut standby = Running::start(
        "scheduler",
        &plane.control.kubeconfig_path,
        &elected(&ns, "replica-b", "6s"),
    );
    standby.wait_healthy(Duration::from_secs(30)).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        scheduler_lease_holder(&leases).await.as_deref(),
        Some("replica-a")
    );
    assert!(!leads_now(standby.addr), "replica-b leads beside replica-a");

    // The API server stops answering replica-a: its connections close, new
    // ones hang. Sample both replicas until replica-b leads.
    proxy.cut();
    let cut = Instant::now();
    let mut seen = Vec::new();
    let mut leader_stopped = None;
    // Sampled every 50 ms: often enough to see both lead at once, and to
    // tell replica-a stopping from replica-b starting.
    let taken_over = poll(
        Duration::from_secs(60),
        Duration::from_millis(50),
        "replica-b to take over",
        || {
            let a = leads_now(leader.addr);
            let b = leads_now(standby.addr);
            let at = cut.elapsed();
            seen.push(format!("{at:?}: replica-a leads {a}, replica-b leads {b}"));
            assert!(
                !(a && b),
                "both replicas lead {at:?} after replica-a was cut off:\n{}\nreplica-a's log:\n{}",
                seen.join("\n"),
                leader.log()
            );
            if !a && leader_stopped.is_none() {
                leader_stopped = Some(at);
            }
            std::future::ready(b.then_some(at))
        },
    )
    .await;
    let standby_leads = match taken_over {
        Ok((at, _)) => at,
        Err(out) => panic!(
            "{}:\n{}\nreplica-b's log:\n{}",
            out.message(None),
            seen.join("\n"),
            standby.log()
        ),
    };
    let leader_stopped = leader_stopped.unwrap();
    assert!(
        leader_stopped < standby_leads,
        "replica-a stopped leading {leader_stopped:?} after the cut, not before replica-b led ({standby_leads:?}):\n{}",
        seen.join("\n")
    );
    // replica-a did not exit: it stood down, saying why, counted it, and
    // answers /healthz (a kubelet would not restart it).
    assert!(
        leader.child.try_wait().ok().flatten().is_none(),
        "replica-a exited:\n{}",
        leader.log()
    );
    let log = leader.log();
    assert!(
        log.contains("stopped leading") && log.contains("renew deadline"),
        "replica-a's log should say it stopped leading at its renew deadline:\n{log}"
    );
    assert_eq!(
        scheduler_lease_holder(&leases).await.as_deref(),
        Some("replica-b")
    );
    // The API server answers replica-a again: it stands by while replica-b
    // leads (it says so on /readyz), and takes over in the same process
    // once replica-b stops.
    proxy.heal();
    wait(
        Duration::from_secs(30),
        "replica-a to answer /readyz as a standby",
        || {
            let ready = http_get(leader.addr, "/readyz");
            async move {
                matches!(&ready, Some((200, body)) if body.contains("not leading")).then_some(())
            }
        },
    )
    .await;
    let metrics = leader.metrics();
    assert_eq!(
        metric_sum(&metrics, "crossplane_rs_leader_stand_downs_total", &[]),
        1.0,
        "{metrics}"
    );
    assert!(!leads(&metrics), "replica-a leads beside replica-b");
    assert!(matches!(http_get(leader.addr, "/healthz"), Some((200, _))));
    terminate(&standby);
    let released = Instant::now();
    wait_leads(leader.addr, "replica-a, again", Duration::from_secs(30)).await;
    let led_again = released.elapsed();
    assert_eq!(
        scheduler_lease_holder(&leases).await.as_deref(),
        Some("replica-a")
    );
    assert!(
        leader.child.try_wait().ok().flatten().is_none(),
        "replica-a restarted"
    );
    eprintln!(
        "leader election: cut-off leader stopped after {leader_stopped:?}, standby led after {standby_leads:?}; the first replica led again in the same process {led_again:?} after the second stopped"
    );
}

#[tokio::test]
async fn a_standby_never_reconciles_until_it_leads() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "standby").await;
    let kubeconfig = &plane.control.kubeconfig_path;
    let args = |id| {
        let mut a = elected(&ns, id, "10s");
        a.extend(["--poll-interval", "1s"]);
        a
    };
    let mut first = Running::start("scheduler", kubeconfig, &args("replica-a"));
    first.wait_healthy(Duration::from_secs(30)).await;
    wait_leads(first.addr, "replica-a", Duration::from_secs(30)).await;
    let mut second = Running::start("scheduler", kubeconfig, &args("replica-b"));
    second.wait_healthy(Duration::from_secs(30)).await;

    // Work: a cluster whose Secret is missing. The leader says so and looks
    // again every second.
    workloads::cluster(&client, &ns, "first", json!({}), None).await;
    wait_cluster_ready(&client, &ns, "first", "False").await;
    let reconciles =
        |bin: &Running| metric_sum(&bin.metrics(), "crossplane_rs_reconcile_total", &[]);
    let done = reconciles(&first);
    wait(
        Duration::from_secs(30),
        "the leader to reconcile three more times",
        || {
            let now = reconciles(&first);
            async move { (now >= done + 3.0).then_some(()) }
        },
    )
    .await;

    // Meanwhile the standby only looked at its Lease (and, at start-up, listed
    // its kinds to check their CRDs): no reconcile, no watch, no write.
    let metrics = second.metrics();
    assert!(!leads(&metrics), "replica-b leads beside replica-a");
    assert_eq!(
        metric_sum(&metrics, "crossplane_rs_reconcile_total", &[]),
        0.0,
        "the standby reconciled:\n{metrics}"
    );
    for verb in ["create", "update", "patch", "delete", "watch"] {
        assert_eq!(
            metric_sum(
                &metrics,
                "crossplane_rs_kube_api_requests_total",
                &[("verb", verb)]
            ),
            0.0,
            "the standby sent {verb} requests:\n{metrics}"
        );
    }
    assert!(
        metric_sum(
            &metrics,
            "crossplane_rs_kube_api_requests_total",
            &[("verb", "get")]
        ) > 0.0,
        "the standby never looked at its Lease:\n{metrics}"
    );

    // The leader dies: the standby takes over and does the work.
    first.kill();
    wait_leads(second.addr, "replica-b", Duration::from_secs(30)).await;
    workloads::cluster(&client, &ns, "second", json!({}), None).await;
    wait_cluster_ready(&client, &ns, "second", "False").await;
    assert!(reconciles(&second) > 0.0);
}

#[tokio::test]
async fn a_leader_stopped_gracefully_hands_the_lease_over_at_once() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "handover").await;
    let kubeconfig = &plane.control.kubeconfig_path;
    let mut first = Running::start("scheduler", kubeconfig, &elected(&ns, "replica-a", "15s"));
    first.wait_healthy(Duration::from_secs(30)).await;
    wait_leads(first.addr, "replica-a", Duration::from_secs(30)).await;
    let mut second = Running::start("scheduler", kubeconfig, &elected(&ns, "replica-b", "15s"));
    second.wait_healthy(Duration::from_secs(30)).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        scheduler_lease_holder(&leases).await.as_deref(),
        Some("replica-a")
    );

    // A graceful stop (SIGTERM, as Kubernetes sends) releases the Lease: the
    // standby leads long before the 15s lease would have run out.
    terminate(&first);
    let stopped = Instant::now();
    wait_leads(second.addr, "replica-b", Duration::from_secs(30)).await;
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "replica-b led {took:?} after replica-a stopped gracefully: that is waiting for a 15s lease to run out, not a hand-over\nreplica-a's log:\n{}",
        first.log()
    );
    assert_eq!(
        scheduler_lease_holder(&leases).await.as_deref(),
        Some("replica-b")
    );
    let status = wait(Duration::from_secs(10), "replica-a to exit", || {
        let exited = first.child.try_wait().ok().flatten();
        async move { exited }
    })
    .await;
    assert!(status.success(), "a graceful stop exits 0, not {status}");
    eprintln!("leader election: graceful hand-over took {took:?}");
}

#[tokio::test]
async fn the_package_and_rbac_managers_observe_as_their_service_accounts() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "observers").await;
    // Each runs as its deploy/ ServiceAccount, under leader election on its
    // Lease in crossplane-system as deployed: only the shipped roles apply.
    let mut running = Vec::new();
    for name in ["package-manager", "rbac-manager"] {
        let identity = testenv::unique_name(name);
        let mut bin = Running::start(
            name,
            &impersonating_kubeconfig(name),
            &[
                "--leader-elect",
                "--leader-election-namespace",
                "crossplane-system",
                "--identity",
                &identity,
            ],
        );
        bin.wait_healthy(Duration::from_secs(30)).await;
        wait_leads(bin.addr, name, Duration::from_secs(30)).await;
        running.push(bin);
    }
    let (package_manager, rbac_manager) = (&running[0], &running[1]);
    let watched = [
        (package_manager, "extensionrequest"),
        (package_manager, "extension"),
        (package_manager, "provider"),
        (package_manager, "providerrevision"),
        (package_manager, "controllerconfig"),
        (rbac_manager, "providerrevision"),
        (rbac_manager, "extension"),
    ];
    // Any result counts: the Provider below names a registry that does not
    // exist, so the package-manager's reconciles of it fail (and say so);
    // what matters here is that each controller runs, with the shipped
    // roles, and is refused nothing.
    let reconciled = |bin: &Running, controller: &str| {
        metric_sum(
            &bin.metrics(),
            "crossplane_rs_reconcile_total",
            &[("controller", controller)],
        )
    };
    let before: Vec<f64> = watched
        .iter()
        .map(|(bin, controller)| reconciled(bin, controller))
        .collect();

    // One object of each kind they observe.
    let unique = testenv::unique_name("observed");
    let objects = format!(
        r#"
apiVersion: extensions.crossplane.io/v1alpha1
kind: ExtensionRequest
metadata: {{name: {unique}, namespace: {ns}}}
spec: {{package: "registry.example/redis:v0.1.0"}}
---
apiVersion: extensions.crossplane.io/v1alpha1
kind: Extension
metadata: {{name: {unique}, namespace: {ns}}}
spec: {{}}
---
apiVersion: pkg.crossplane.io/v1
kind: Provider
metadata: {{name: {unique}}}
spec: {{package: "registry.example/provider:v1"}}
---
apiVersion: pkg.crossplane.io/v1
kind: ProviderRevision
metadata: {{name: {unique}}}
spec: {{desiredState: Active, package: "registry.example/provider:v1", revision: 1}}
---
apiVersion: pkg.crossplane.io/v1beta1
kind: DeploymentRuntimeConfig
metadata: {{name: {unique}}}
spec: {{}}
---
apiVersion: pkg.crossplane.io/v1alpha1
kind: ControllerConfig
metadata: {{name: {unique}}}
spec: {{}}
"#
    );
    let out = plane
        .control
        .kubectl_stdin(&["apply", "-f", "-"], Some(&objects));
    assert!(
        out.status.success(),
        "creating the objects: {}",
        stderr(&out)
    );
    for ((bin, controller), before) in watched.iter().zip(before) {
        wait(
            Duration::from_secs(30),
            &format!("{}'s {controller} controller to reconcile", bin.name),
            || {
                let now = reconciled(bin, controller);
                async move { (now > before).then_some(()) }
            },
        )
        .await;
    }
    for bin in &running {
        assert!(leads_now(bin.addr), "{} stopped leading", bin.name);
        let log = bin.log();
        assert!(
            !log.to_lowercase().contains("forbidden"),
            "{} was refused something:\n{log}",
            bin.name
        );
    }
}

/// A Secret with `len` random bytes under key `blob`.
fn random_secret(name: &str, len: usize, seed: u64) -> Secret {
    let mut x = seed | 1;
    let bytes = (0..len)
        .map(|_| {
            // xorshift64: incompressible enough that no layer shrinks it.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some(
            [("blob".to_owned(), k8s_openapi::ByteString(bytes))]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    }
}

#[tokio::test]
async fn secret_watches_carry_metadata_not_data() {
    let plane = testenv::control_plane();
    let (client, remote) = workloads::clients().await;
    let ns = plane.control.namespace(&client, "secretwatch").await;
    let rns = workloads::remote_ns(&remote, "secretwatch").await;
    // The scheduler and the resource-controller run as their deploy/
    // ServiceAccounts, each through a proxy that counts the bytes the API
    // server sends it. They poll once an hour: only a watch wakes them.
    let (scheduler_proxy, kubeconfig) =
        Proxy::in_front_of(&impersonating_kubeconfig("scheduler")).await;
    let mut scheduler = Running::start(
        "scheduler",
        &kubeconfig,
        &["--watch-namespace", &ns, "--poll-interval", "1h"],
    );
    let (resource_proxy, kubeconfig) =
        Proxy::in_front_of(&impersonating_kubeconfig("resource-controller")).await;
    let mut resource = Running::start(
        "resource-controller",
        &kubeconfig,
        &["--watch-namespace", &ns, "--poll-interval", "1h"],
    );
    scheduler.wait_healthy(Duration::from_secs(30)).await;
    resource.wait_healthy(Duration::from_secs(30)).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    // A cluster whose connection Secret does not exist yet is not Ready.
    workloads::cluster(&client, &ns, "late", json!({}), None).await;
    wait_cluster_ready(&client, &ns, "late", "False").await;
    // Its status write wakes the scheduler once more; after that only the
    // Secret watch can.
    wait(Duration::from_secs(30), "the scheduler to settle", || {
        let n = metric_sum(
            &scheduler.metrics(),
            "crossplane_rs_reconcile_total",
            &[("controller", "kubernetescluster")],
        );
        async move { (n >= 2.0).then_some(()) }
    })
    .await;
    // The Secret appears: the cluster becomes Ready.
    let connection: Secret = serde_json::from_value(json!({
        "metadata": {"name": "late-kubeconfig"},
        "stringData": {"kubeconfig": plane.remote.kubeconfig},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &connection)
        .await
        .unwrap();
    wait_cluster_ready(&client, &ns, "late", "True").await;

    // The resource-controller propagates Secret "shared" to the cluster.
    let shared: Secret = serde_json::from_value(json!({
        "metadata": {"name": "shared"},
        "stringData": {"token": "v1"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &shared)
        .await
        .unwrap();
    let resource_body = json!({
        "apiVersion": "workload.crossplane.io/v1alpha1",
        "kind": "KubernetesApplicationResource",
        "metadata": {"name": "propagates", "namespace": ns},
        "spec": {
            "clusterRef": {"name": "late"},
            "secrets": [{"name": "shared"}],
            "template": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": rns},
                "data": {"a": "1"},
            },
        },
    });
    workloads::apply_json(
        &client,
        &ns,
        "kubernetesapplicationresources",
        &resource_body,
    )
    .await;
    let remote_secrets: Api<Secret> = Api::namespaced(remote.clone(), &rns);
    let remote_token = |remote_secrets: Api<Secret>| async move {
        let s = remote_secrets
            .get_opt("propagates-shared")
            .await
            .ok()
            .flatten()?;
        Some(s.data?.get("token")?.0.clone())
    };
    wait(
        Duration::from_secs(30),
        "Secret shared in the remote cluster",
        || {
            let r = remote_secrets.clone();
            async move { (remote_token(r).await? == b"v1").then_some(()) }
        },
    )
    .await;

    // 2 MiB of Secret data lands in the namespace both watch.
    let (scheduler_before, resource_before) = (
        scheduler_proxy.bytes_to_clients(),
        resource_proxy.bytes_to_clients(),
    );
    const BLOB: usize = 256 * 1024;
    for i in 0..8u64 {
        secrets
            .create(
                &PostParams::default(),
                &random_secret(&format!("bulk-{i}"), BLOB, 0x9e37_79b9_7f4a_7c15 ^ i),
            )
            .await
            .unwrap();
    }
    // Then the Secrets they care about change. Each watch delivers events
    // in order, so once each has reacted, it has received every bulk
    // Secret's event. (The resource-controller first: it needs the
    // connection Secret that the scheduler's change then breaks.)
    secrets
        .patch(
            "shared",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"stringData": {"token": "v2"}})),
        )
        .await
        .unwrap();
    wait(
        Duration::from_secs(30),
        "the rotated Secret shared to reach the remote cluster",
        || {
            let r = remote_secrets.clone();
            async move { (remote_token(r).await? == b"v2").then_some(()) }
        },
    )
    .await;
    secrets
        .patch(
            "late-kubeconfig",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"stringData": {"kubeconfig": "not a kubeconfig"}})),
        )
        .await
        .unwrap();
    wait_cluster_ready(&client, &ns, "late", "False").await;
    // What the API server sent them meanwhile: metadata of the bulk Secrets
    // and the few small Secrets they read, never the bulk Secrets' data.
    for (who, proxy, before) in [
        ("scheduler", &scheduler_proxy, scheduler_before),
        ("resource-controller", &resource_proxy, resource_before),
    ] {
        let received = proxy.bytes_to_clients() - before;
        assert!(
            received < BLOB as u64,
            "the {who} received {received} bytes while 8 Secrets of {BLOB} bytes were written in the namespace it watches: its Secret watch carries their data"
        );
        eprintln!(
            "secret watch: the {who} received {received} bytes for 8 × {BLOB} bytes of Secret data"
        );
    }
    assert_eq!(scheduler.child.try_wait().unwrap(), None);
    assert_eq!(resource.child.try_wait().unwrap(), None);
}

#[tokio::test]
async fn a_renew_deadline_not_shorter_than_the_lease_is_refused_at_start() {
    let plane = testenv::control_plane();
    let mut bin = Running::start(
        "scheduler",
        &plane.control.kubeconfig_path,
        &[
            "--leader-elect",
            "--leader-election-lease-duration",
            "10s",
            "--leader-election-renew-deadline",
            "10s",
        ],
    );
    let status = wait(Duration::from_secs(30), "the scheduler to exit", || {
        let done = bin.child.try_wait().ok().flatten();
        async move { done }
    })
    .await;
    assert!(!status.success());
    let log = bin.log();
    assert!(
        log.contains("--leader-election-renew-deadline 10s must be") && log.contains("at most 9s"),
        "the scheduler should say which flag is unsafe and what is allowed:\n{log}"
    );
}
