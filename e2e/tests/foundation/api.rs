//! The API as users meet it: CRDs install, every seed example applies unchanged and reads back equal,
//! immutable fields and malformed objects are refused clearly, `kubectl explain` teaches, printer columns show.

use super::*;

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

#[tokio::test]
async fn every_crd_installs_and_becomes_established() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let expected = types::crds::all().unwrap();
    assert_eq!(
        expected.len(),
        21,
        "one CRD per kind in the seeds, ImageConfig, ObservedObjectCollection, the five namespaced kinds of kubernetes.m.crossplane.io, ManagedResourceDefinition and ManagedResourceActivationPolicy"
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

/// An object-provider, as its shipped ServiceAccount: it serves the
/// conversion webhook the seed's `v1alpha1` Objects are written through
/// (they are stored at `v1alpha2`), and reconciles them against the remote
/// cluster.
const OBJECT_PROVIDER: e2e::objects::ProviderSetup = e2e::objects::ProviderSetup {
    configs: "apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {name: kubernetes-provider}\nspec: {credentials: {source: Secret, secretRef: {namespace: default, name: remote-kubeconfig, key: kubeconfig}}}\n",
    prepare: || {},
    args: &["--poll-interval", "1m"],
};

#[tokio::test]
async fn every_seed_example_applies_unchanged_and_reads_back_equal() {
    e2e::objects::start_provider(&OBJECT_PROVIDER);
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
        (
            "object.spec.managementPolicy --api-version=kubernetes.crossplane.io/v1alpha1",
            "ObserveCreateUpdate (never",
        ),
        (
            "object.spec.references.fromObject --api-version=kubernetes.crossplane.io/v1alpha1",
            "copies the value",
        ),
        // kubectl prefers v1alpha2, upstream's shape.
        (
            "object.spec.references.patchesFrom",
            "copies the value at its fieldPath into the manifest",
        ),
        ("providerconfig.spec.credentials.source", "InjectedIdentity"),
        // Crossplane v2's namespaced Objects, and how far they reach.
        (
            "object.spec.providerConfigRef --api-version=kubernetes.m.crossplane.io/v1alpha1",
            "ProviderConfig (in this namespace) or",
        ),
        (
            "clusterproviderconfig.spec.reach",
            "OwnNamespace (the default)",
        ),
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
        let args: Vec<&str> = std::iter::once("explain")
            .chain(field.split_whitespace())
            .collect();
        let out = control.kubectl(&args);
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
