//! The package manager for real: packages built with `xpkg` and pushed to a
//! CNCF registry (HTTPS, testenv's CA), Providers installed by the
//! package-manager (running as its shipped ServiceAccount), their runtimes
//! run as pods on the test node, which pulls the runtime image from the
//! same registry.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::{Duration, Instant},
};

use serde_json::Value;

/// The host name the node's containerd maps to the test registry.
const NODE_REGISTRY: &str = "xpkg.crossplane-rs.test";
const NS: &str = "crossplane-system";

struct Env {
    registry: testenv::registry::Registry,
    ca_file: PathBuf,
    /// The object-provider runtime image, as the node pulls it.
    runtime_image: String,
    package_manager: e2e::Running,
    work: PathBuf,
}

static ENV: OnceLock<Env> = OnceLock::new();

fn kubectl(args: &[&str]) -> String {
    testenv::control_plane_with_node()
        .control
        .kubectl_ok(args)
        .unwrap_or_else(|e| panic!("kubectl {}: {e:#}", args.join(" ")))
}

/// kubectl that may fail: (success, stdout + stderr).
fn kubectl_try(args: &[&str]) -> (bool, String) {
    let out = testenv::control_plane_with_node().control.kubectl(args);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn apply(yaml: &str) {
    let out = testenv::control_plane_with_node().control.kubectl_stdin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(yaml),
    );
    assert!(
        out.status.success(),
        "apply: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn get_json(args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let (ok, out) = kubectl_try(&all);
    ok.then(|| serde_json::from_str(&out).ok()).flatten()
}

/// Waits for `check` to return Some, panicking with `explain()` after
/// `timeout`.
fn wait<T>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
    explain: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}; state:\n{}",
                explain()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn condition(obj: &Value, type_: &str) -> Option<(String, String)> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

fn explain_packages() -> String {
    let (_, providers) = kubectl_try(&["get", "providers,providerrevisions", "-o", "yaml"]);
    let (_, pods) = kubectl_try(&["get", "deployments,pods", "-n", NS, "-o", "wide"]);
    let log = ENV
        .get()
        .map(|e| e.package_manager.log())
        .unwrap_or_default();
    let tail: String = log
        .lines()
        .rev()
        .take(40)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    format!("{providers}\n{pods}\npackage-manager log (tail):\n{tail}")
}

/// deploy/ without its Deployments and Services: the ServiceAccounts and
/// RBAC this test's package-manager runs under (the six controllers are not
/// run as pods here).
fn apply_deploy_rbac() {
    let rendered = kubectl(&[
        "kustomize",
        &testenv::repo_root().join("deploy").to_string_lossy(),
    ]);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&rendered).unwrap();
    let keep: Vec<String> = docs
        .into_iter()
        .filter(|d| !d.is_null() && d["kind"] != "Deployment" && d["kind"] != "Service")
        .map(|d| serde_json::to_string(&d).unwrap())
        .collect();
    apply(&keep.join("\n---\n"));
}

/// The object-provider alone on the project's base layer, run as the
/// package's runtime.
fn push_runtime_image(registry: &testenv::registry::Registry) -> String {
    let cache = oci::debian::default_cache().expect("the .deb cache");
    let debs =
        oci::debian::download(&oci::debian::BASE_PACKAGES, &cache).expect("the base packages");
    let base = oci::debian::base_layer(&debs).expect("the base layer");
    let program = std::fs::read(testenv::workspace_binary("object-provider"))
        .expect("object-provider is built");
    let layer = oci::LayerBuilder::new()
        .file("usr/local/bin/object-provider", 0o755, program)
        .build()
        .unwrap();
    let image = oci::Image::new(oci::Config {
        entrypoint: vec!["/usr/local/bin/object-provider".into()],
        ..oci::project::config()
    })
    .layer(base)
    .layer(layer);
    let repository = "crossplane-rs/object-provider:dev";
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(image.push(
            &format!("{}/{repository}", registry.address),
            &oci::Auth::Anonymous,
            &oci::Tls::Ca(registry.ca_pem.clone()),
        ))
        .expect("push the runtime image");
    format!("{NODE_REGISTRY}/{repository}")
}

fn env() -> &'static Env {
    ENV.get_or_init(|| {
        let plane = testenv::control_plane_with_node();
        let node = plane.node.as_ref().expect("this test needs testenv's node");
        let registry =
            testenv::registry::Registry::start(plane, node, NODE_REGISTRY, None).unwrap();
        let work = std::env::temp_dir().join(testenv::unique_name("packages"));
        std::fs::create_dir_all(&work).unwrap();
        let ca_file = work.join("registry-ca.pem");
        std::fs::write(&ca_file, &registry.ca_pem).unwrap();
        let runtime_image = push_runtime_image(&registry);
        apply_deploy_rbac();
        let kubeconfig = e2e::impersonating_kubeconfig_for(&plane.control, "package-manager");
        let cache = work.join("cache");
        let package_manager = e2e::Running::start(
            "package-manager",
            &kubeconfig,
            &[
                "--ca-bundle-path",
                ca_file.to_str().unwrap(),
                "--package-cache-dir",
                cache.to_str().unwrap(),
                "--package-pull-interval",
                "2s",
            ],
        );
        Env {
            registry,
            ca_file,
            runtime_image,
            package_manager,
            work,
        }
    })
}

/// Writes a package directory: the meta (with `extra` lines under
/// metadata.annotations) and the CRD files given.
fn package_dir(name: &str, version: &str, crds: &[(&str, String)]) -> PathBuf {
    let dir = env().work.join(format!("{name}-{version}"));
    std::fs::create_dir_all(dir.join("crds")).unwrap();
    std::fs::write(
        dir.join("package.yaml"),
        format!(
            "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: {name}\n  annotations:\n    meta.crossplane.io/version: {version}\nspec:\n  crossplane:\n    version: \">=v1.14.0\"\n"
        ),
    )
    .unwrap();
    for (file, text) in crds {
        std::fs::write(dir.join("crds").join(file), text).unwrap();
    }
    dir
}

/// `xpkg push DIR REF --runtime-image IMAGE`; returns the pushed digest.
fn xpkg_push(dir: &Path, reference: &str, runtime_image: Option<&str>) -> String {
    let e = env();
    let mut cmd = Command::new(testenv::workspace_binary("xpkg"));
    cmd.arg("push")
        .arg(dir)
        .arg(reference)
        .arg("--ca-file")
        .arg(&e.ca_file);
    if let Some(i) = runtime_image {
        cmd.args(["--runtime-image", i]);
    }
    let out = cmd.output().expect("run xpkg");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "xpkg push {reference}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .trim()
        .rsplit_once('@')
        .map(|(_, d)| d.to_owned())
        .unwrap_or_else(|| panic!("xpkg push printed no digest: {stdout}"))
}

fn provider_yaml(name: &str, package: &str, extra: &str) -> String {
    format!(
        "apiVersion: pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: {name}\nspec:\n  package: {package}\n{extra}"
    )
}

fn provider(name: &str) -> Option<Value> {
    get_json(&["providers.pkg.crossplane.io", name])
}

fn wait_provider_healthy(name: &str, timeout: Duration) -> Value {
    wait(
        timeout,
        &format!("Provider {name} Installed and Healthy"),
        || {
            let p = provider(name)?;
            let ok = condition(&p, "Installed").is_some_and(|c| c.0 == "True")
                && condition(&p, "Healthy").is_some_and(|c| c.0 == "True");
            ok.then_some(p)
        },
        explain_packages,
    )
}

fn revisions_of(provider: &str) -> Vec<Value> {
    let list = get_json(&[
        "providerrevisions.pkg.crossplane.io",
        "-l",
        &format!("pkg.crossplane.io/package={provider}"),
    ])
    .unwrap_or_default();
    let mut items = list["items"].as_array().cloned().unwrap_or_default();
    items.sort_by_key(|r| r["spec"]["revision"].as_i64());
    items
}

fn short(digest: &str) -> &str {
    &digest.trim_start_matches("sha256:")[..12]
}

/// The kubernetes.crossplane.io CRDs of the repository, as package files.
fn object_provider_crds() -> Vec<(&'static str, String)> {
    [
        "kubernetes.crossplane.io_objects.yaml",
        "kubernetes.crossplane.io_providerconfigs.yaml",
        "kubernetes.crossplane.io_providerconfigusages.yaml",
    ]
    .into_iter()
    .map(|f| {
        (
            f,
            std::fs::read_to_string(testenv::repo_root().join("crds").join(f)).unwrap(),
        )
    })
    .collect()
}

const OBJECT_CRDS: [&str; 3] = [
    "objects.kubernetes.crossplane.io",
    "providerconfigs.kubernetes.crossplane.io",
    "providerconfigusages.kubernetes.crossplane.io",
];

/// What is not yet true of a finished upgrade from `rev1` to `rev2`.
fn upgrade_unmet(rev1: &str, rev2: &str) -> Vec<&'static str> {
    let mut unmet = Vec::new();
    let p = provider("provider-kubernetes").unwrap_or_default();
    let revs = revisions_of("provider-kubernetes");
    if p["status"]["currentRevision"] != rev2 {
        unmet.push("currentRevision is revision 2");
    }
    if condition(&p, "Healthy").is_none_or(|c| c.0 != "True") {
        unmet.push("the Provider Healthy");
    }
    if revs.len() != 2 {
        unmet.push("two revisions");
    }
    if revs
        .first()
        .is_none_or(|r| r["spec"]["desiredState"] != "Inactive")
    {
        unmet.push("revision 1 Inactive");
    }
    if revs
        .get(1)
        .is_none_or(|r| r["spec"]["desiredState"] != "Active" || r["spec"]["revision"] != 2)
    {
        unmet.push("revision 2 Active");
    }
    if get_json(&["deployment", rev1, "-n", NS]).is_some() {
        unmet.push("revision 1's Deployment gone");
    }
    unmet
}

#[test]
fn a_provider_package_installs_runs_upgrades_and_uninstalls() {
    let e = env();
    // The control cluster starts without the package's CRDs.
    let crds: Vec<String> = OBJECT_CRDS.iter().map(|c| format!("crd/{c}")).collect();
    let mut delete = vec!["delete", "--ignore-not-found", "--wait=true"];
    delete.extend(crds.iter().map(String::as_str));
    kubectl(&delete);

    let repository = format!("{}/crossplane-rs/provider-kubernetes", e.registry.address);
    let v1 = package_dir("provider-kubernetes", "v0.1.0", &object_provider_crds());
    let v2 = package_dir("provider-kubernetes", "v0.2.0", &object_provider_crds());
    let d1 = xpkg_push(&v1, &format!("{repository}:v0.1.0"), Some(&e.runtime_image));
    let d2 = xpkg_push(&v2, &format!("{repository}:v0.2.0"), Some(&e.runtime_image));
    assert_ne!(d1, d2);

    // xpkg inspect reads it back from the registry.
    let out = Command::new(testenv::workspace_binary("xpkg"))
        .args(["inspect", &format!("{repository}:v0.1.0"), "--ca-file"])
        .arg(&e.ca_file)
        .output()
        .unwrap();
    let inspected = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{inspected}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        inspected.contains(&d1) && inspected.contains("objects.kubernetes.crossplane.io"),
        "{inspected}"
    );

    // Until the rbac-manager lands, the operator lets the package-manager
    // see the package's custom resources (it waits for them on deletion).
    apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: test-list-kubernetes-crossplane-io\n  labels: {rbac.crossplane-rs.io/aggregate-to-package-manager: \"true\"}\nrules:\n- {apiGroups: [kubernetes.crossplane.io], resources: [\"*\"], verbs: [list]}\n",
    );
    let started = Instant::now();
    apply(&provider_yaml(
        "provider-kubernetes",
        &format!("{repository}:v0.1.0"),
        "",
    ));
    let rev1 = format!("provider-kubernetes-{}", short(&d1));
    // The runtime needs roles until the rbac-manager grants them.
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: test-{rev1}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects:\n- {{kind: ServiceAccount, name: {rev1}, namespace: {NS}}}\n"
    ));
    let p = wait_provider_healthy("provider-kubernetes", Duration::from_secs(180));
    eprintln!(
        "packages: provider-kubernetes v0.1.0 Healthy {:?} after apply",
        started.elapsed()
    );
    assert_eq!(p["status"]["currentRevision"], rev1.as_str());
    let revs = revisions_of("provider-kubernetes");
    assert_eq!(revs.len(), 1);
    assert_eq!(revs[0]["spec"]["revision"], 1);
    assert_eq!(revs[0]["spec"]["desiredState"], "Active");
    assert_eq!(revs[0]["spec"]["image"], e.runtime_image.as_str());
    // Controlled by the Provider; its CRDs controlled by the revision.
    let owner = &revs[0]["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["controller"].as_bool()),
        (Some("Provider"), Some(true))
    );
    for crd in OBJECT_CRDS {
        let c = get_json(&["crd", crd]).unwrap();
        let controller: Vec<&Value> = c["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["controller"] == true)
            .collect();
        assert_eq!(controller.len(), 1, "{crd}");
        assert_eq!(controller[0]["name"], rev1.as_str());
    }
    // The runtime: a Deployment named after the revision, Available on the
    // node, its pod running the pushed image under the revision's SA.
    let dep = get_json(&["deployment", &rev1, "-n", NS]).unwrap();
    assert_eq!(
        dep["spec"]["template"]["spec"]["serviceAccountName"],
        rev1.as_str()
    );
    assert_eq!(
        dep["spec"]["template"]["spec"]["containers"][0]["name"],
        "package-runtime"
    );
    assert!(get_json(&["service", &rev1, "-n", NS]).is_some());
    assert!(get_json(&["serviceaccount", &rev1, "-n", NS]).is_some());
    let columns = kubectl(&["get", "providers,providerrevisions"]);
    for col in [
        "INSTALLED",
        "HEALTHY",
        "PACKAGE",
        "REVISION",
        "IMAGE",
        "STATE",
    ] {
        assert!(columns.contains(col), "{col} missing: {columns}");
    }

    // The runtime works: an Object (InjectedIdentity, the control cluster)
    // becomes Ready and its ConfigMap exists.
    let cm = testenv::unique_name("pkg-cm");
    apply(&format!(
        "apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {{name: in-cluster}}\nspec: {{credentials: {{source: InjectedIdentity}}}}\n---\napiVersion: kubernetes.crossplane.io/v1alpha1\nkind: Object\nmetadata: {{name: {cm}}}\nspec:\n  providerConfigRef: {{name: in-cluster}}\n  forProvider:\n    manifest:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: {cm}, namespace: default}}\n      data: {{from: package}}\n"
    ));
    let object_ready = || {
        get_json(&["objects.kubernetes.crossplane.io", &cm])
            .is_some_and(|o| condition(&o, "Ready").is_some_and(|c| c.0 == "True"))
    };
    wait(
        Duration::from_secs(90),
        "the Object Ready",
        || object_ready().then_some(()),
        explain_packages,
    );
    assert!(get_json(&["configmap", &cm, "-n", "default"]).is_some());

    // Upgrade: revision 2 serves, revision 1 goes Inactive and its runtime
    // away; the Object stays Ready.
    let rev2 = format!("provider-kubernetes-{}", short(&d2));
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: test-{rev2}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects:\n- {{kind: ServiceAccount, name: {rev2}, namespace: {NS}}}\n"
    ));
    apply(&provider_yaml(
        "provider-kubernetes",
        &format!("{repository}:v0.2.0"),
        "",
    ));
    wait(
        Duration::from_secs(180),
        "revision 2 serving and revision 1 inactive without a runtime",
        || upgrade_unmet(&rev1, &rev2).is_empty().then_some(()),
        || {
            format!(
                "unmet: {:?}\n{}",
                upgrade_unmet(&rev1, &rev2),
                explain_packages()
            )
        },
    );
    for crd in OBJECT_CRDS {
        let c = get_json(&["crd", crd]).unwrap();
        let refs = c["metadata"]["ownerReferences"].as_array().unwrap().clone();
        let controller: Vec<_> = refs.iter().filter(|o| o["controller"] == true).collect();
        assert_eq!(controller.len(), 1);
        assert_eq!(
            controller[0]["name"],
            rev2.as_str(),
            "{crd} handed to revision 2"
        );
    }
    assert!(object_ready(), "the Object stays Ready across the upgrade");
    // No revision ever reported a conflict with its own Provider.
    let (_, events) = kubectl_try(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        "type=Warning",
        "-o",
        "json",
    ]);
    assert!(
        !events.contains("already controlled by"),
        "an upgrade reported a conflict with itself: {events}"
    );

    // Deleting the Provider waits for the Object, says so, then removes
    // everything.
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        "provider-kubernetes",
        "--wait=false",
    ]);
    wait(
        Duration::from_secs(30),
        "the Provider saying which custom resources hold it",
        || {
            let p = provider("provider-kubernetes")?;
            let (_, message) = condition(&p, "Healthy")?;
            (message.contains("waiting for 1 Object") && message.contains(&cm)).then_some(())
        },
        explain_packages,
    );
    assert!(provider("provider-kubernetes").is_some());
    assert!(
        get_json(&["crd", OBJECT_CRDS[0]]).is_some(),
        "CRDs stay while custom resources exist"
    );
    kubectl(&[
        "delete",
        "objects.kubernetes.crossplane.io",
        &cm,
        "--wait=false",
    ]);
    kubectl(&[
        "delete",
        "providerconfig.kubernetes.crossplane.io",
        "in-cluster",
        "--wait=false",
    ]);
    let gone_from = Instant::now();
    wait(
        Duration::from_secs(60),
        "the Provider, its revisions, CRDs and runtime gone",
        || {
            let gone = provider("provider-kubernetes").is_none()
                && revisions_of("provider-kubernetes").is_empty()
                && OBJECT_CRDS.iter().all(|c| get_json(&["crd", c]).is_none())
                && get_json(&["deployment", &rev2, "-n", NS]).is_none()
                && get_json(&["serviceaccount", &rev2, "-n", NS]).is_none();
            gone.then_some(())
        },
        explain_packages,
    );
    eprintln!(
        "packages: uninstalled {:?} after the last Object went",
        gone_from.elapsed()
    );
    // The test binary's other tests may need the CRDs back.
    testenv::control_plane_with_node()
        .control
        .install_crds()
        .unwrap();
}
