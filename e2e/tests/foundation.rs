//! The foundation against real API servers: CRDs, the seeds' examples,
//! API-server validation, kubectl explain and printer columns, every binary's
//! health and metrics, leader election, and the kustomize deployment.

use std::time::Duration;

use e2e::{Running, wait_for, yaml_documents};
use k8s_openapi::{
    api::coordination::v1::Lease,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::Api;
use serde_json::Value;

const BINARIES: [&str; 6] = [
    "scheduler",
    "application-controller",
    "resource-controller",
    "object-provider",
    "package-manager",
    "rbac-manager",
];

/// The common metric names every binary exports.
const COMMON_METRICS: [&str; 6] = [
    "crossplane_rs_reconcile_total",
    "crossplane_rs_reconcile_duration_seconds",
    "crossplane_rs_reconcile_in_flight",
    "crossplane_rs_objects_pending",
    "crossplane_rs_kube_api_requests_total",
    "crossplane_rs_leader",
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
    assert_eq!(expected.len(), 12, "one CRD per kind in the seeds");
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
    let plane = testenv::control_plane();
    for name in BINARIES {
        let mut bin = Running::start(name, &plane.control.kubeconfig_path, &[]);
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
        let ready = wait_for(Duration::from_secs(10), "/readyz", || async {
            matches!(e2e::http_get(bin.addr, "/readyz"), Some((200, _))).then_some(())
        });
        ready.await;
    }
}

#[tokio::test]
async fn a_binary_refuses_to_start_without_its_crds() {
    let plane = testenv::control_plane();
    // The remote cluster has no crossplane-rs CRDs.
    let mut bin = Running::start("scheduler", &plane.remote.kubeconfig_path, &[]);
    let status = wait_for(Duration::from_secs(30), "the scheduler to exit", || {
        let done = bin.child.try_wait().ok().flatten();
        async move { done }
    })
    .await;
    assert!(
        !status.success(),
        "the scheduler should fail without its CRDs"
    );
    let log = bin.log();
    assert!(
        log.contains("CRD (kubernetesapplications.workload.crossplane.io) is not installed"),
        "{log}"
    );
    assert!(
        log.contains("kubectl apply -f crds/"),
        "the message should name the install command: {log}"
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
    let leader = wait_for(
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
    wait_for(
        Duration::from_secs(20),
        "the standby replica to take over the Lease",
        || {
            let leases = leases.clone();
            async move { holder(leases).await.filter(|h| h == expected) }
        },
    )
    .await;
    wait_for(
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
    assert!(can("rbac-manager", &["create", "clusterroles"]));
    assert!(can(
        "package-manager",
        &["create", "deployments", "-n", "crossplane-system"]
    ));
    assert!(can(
        "object-provider",
        &["update", "objects.kubernetes.crossplane.io/status"]
    ));
}
