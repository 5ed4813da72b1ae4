//! Helpers of the package tests: a registry with packages built by `xpkg`,
//! the six controllers running as pods from `deploy/` (the shipped
//! installation, [`crate::shipped`]), kubectl against the test binary's
//! control plane (with a node), and waits that explain themselves.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::{Duration, Instant},
};

use serde_json::Value;

pub const NS: &str = "crossplane-system";

/// What the package tests of one test binary share.
pub struct Env {
    /// The registry packages are pushed to (HTTPS, testenv's CA): the
    /// shipped installation's, which the node pulls from by its address.
    pub registry: &'static testenv::registry::Registry,
    /// Its CA, as a file (for `xpkg --ca-file`).
    pub ca_file: PathBuf,
    /// The object-provider runtime image, as the node pulls it.
    pub runtime_image: String,
    /// A scratch directory.
    pub work: PathBuf,
}

static ENV: OnceLock<Env> = OnceLock::new();

pub fn kubectl(args: &[&str]) -> String {
    testenv::control_plane_with_node()
        .control
        .kubectl_ok(args)
        .unwrap_or_else(|e| panic!("kubectl {}: {e:#}", args.join(" ")))
}

/// kubectl that may fail: (success, stdout + stderr).
pub fn kubectl_try(args: &[&str]) -> (bool, String) {
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

pub fn apply(yaml: &str) {
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

pub fn get_json(args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let (ok, out) = kubectl_try(&all);
    ok.then(|| serde_json::from_str(&out).ok()).flatten()
}

/// Waits for `check` to return Some, panicking with `explain()` after
/// `timeout`.
pub fn wait<T>(
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

pub fn condition(obj: &Value, type_: &str) -> Option<(String, String)> {
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

/// Providers, revisions, the controllers' pods and the package- and
/// rbac-manager pods' logs, for a failed wait.
pub fn explain_packages() -> String {
    crate::shipped::explain()
}

/// The object-provider alone on the project's base layer, run as the
/// package's runtime.
pub fn push_runtime_image(registry: &testenv::registry::Registry) -> String {
    push_binary_image(
        registry,
        "object-provider",
        "crossplane-rs/object-provider:dev",
    )
}

/// A workspace binary alone on the project's base layer, pushed to
/// `registry` as `repository`; returns the name the node pulls it by (the
/// registry's address: testenv's certs.d maps it).
pub fn push_binary_image(
    registry: &testenv::registry::Registry,
    binary: &str,
    repository: &str,
) -> String {
    let cache = oci::debian::default_cache().expect("the .deb cache");
    let debs =
        oci::debian::download(&oci::debian::BASE_PACKAGES, &cache).expect("the base packages");
    let base = oci::debian::base_layer(&debs).expect("the base layer");
    let program = std::fs::read(testenv::workspace_binary(binary))
        .unwrap_or_else(|e| panic!("{binary} is built: {e}"));
    let path = format!("usr/local/bin/{binary}");
    let layer = oci::LayerBuilder::new()
        .file(path.clone(), 0o755, program)
        .build()
        .unwrap();
    let image = oci::Image::new(oci::Config {
        entrypoint: vec![format!("/{path}")],
        ..oci::project::config()
    })
    .layer(base)
    .layer(layer);
    push_image(
        registry,
        &format!("{}/{repository}", registry.address),
        &image,
    );
    format!("{}/{repository}", registry.address)
}

/// Pushes `image` to `reference` (in `registry`, trusting its CA,
/// anonymously); returns the digest.
pub fn push_image(
    registry: &testenv::registry::Registry,
    reference: &str,
    image: &oci::Image,
) -> String {
    let pushed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(image.push(
            reference,
            &oci::Auth::Anonymous,
            &oci::Tls::Ca(registry.ca_pem.clone()),
        ))
        .unwrap_or_else(|e| panic!("push {reference}: {e}"));
    pushed.digest.as_str().to_owned()
}

/// The shared setup: the shipped installation (the six controllers as
/// pods, made on first use) and the runtime image pushed to its registry.
pub fn env() -> &'static Env {
    ENV.get_or_init(|| {
        let s = crate::shipped::shipped();
        Env {
            registry: &s.registry,
            ca_file: s.ca_file.clone(),
            runtime_image: push_runtime_image(&s.registry),
            work: s.work.clone(),
        }
    })
}

/// Writes a package directory: the meta (with `extra` lines under
/// metadata.annotations) and the CRD files given.
pub fn package_dir(name: &str, version: &str, crds: &[(&str, String)]) -> PathBuf {
    package_dir_with(name, version, crds, "")
}

/// Like [`package_dir`], with `spec_extra` (YAML lines indented two
/// spaces, e.g. a dependsOn) under the meta's spec.
pub fn package_dir_with(
    name: &str,
    version: &str,
    crds: &[(&str, String)],
    spec_extra: &str,
) -> PathBuf {
    package_dir_in(&env().work, name, version, crds, spec_extra)
}

/// A Provider package directory under `work`: its meta (version
/// `version`, `spec_extra` lines under spec) and CRD files.
pub fn package_dir_in(
    work: &Path,
    name: &str,
    version: &str,
    crds: &[(&str, String)],
    spec_extra: &str,
) -> PathBuf {
    let dir = work.join(testenv::unique_name(&format!("{name}-{version}")));
    std::fs::create_dir_all(dir.join("crds")).unwrap();
    std::fs::write(
        dir.join("package.yaml"),
        format!(
            "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: {name}\n  annotations:\n    meta.crossplane.io/version: {version}\nspec:\n  crossplane:\n    version: \">=v1.14.0\"\n{spec_extra}"
        ),
    )
    .unwrap();
    for (file, text) in crds {
        std::fs::write(dir.join("crds").join(file), text).unwrap();
    }
    dir
}

/// `xpkg push DIR REF --runtime-image IMAGE`; returns the pushed digest.
pub fn xpkg_push(dir: &Path, reference: &str, runtime_image: Option<&str>) -> String {
    xpkg_push_as(dir, reference, runtime_image, None)
}

/// Like [`xpkg_push`], as `user` with `password` (read from stdin).
pub fn xpkg_push_as(
    dir: &Path,
    reference: &str,
    runtime_image: Option<&str>,
    credentials: Option<(&str, &str)>,
) -> String {
    xpkg_push_trusting(&env().ca_file, dir, reference, runtime_image, credentials)
}

/// `xpkg push DIR REF`, trusting the registry CA in `ca_file`, with the
/// runtime image and credentials given; returns the pushed digest.
pub fn xpkg_push_trusting(
    ca_file: &Path,
    dir: &Path,
    reference: &str,
    runtime_image: Option<&str>,
    credentials: Option<(&str, &str)>,
) -> String {
    use std::io::Write as _;
    let mut cmd = Command::new(testenv::workspace_binary("xpkg"));
    cmd.arg("push")
        .arg(dir)
        .arg(reference)
        .arg("--ca-file")
        .arg(ca_file)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(i) = runtime_image {
        cmd.args(["--runtime-image", i]);
    }
    if let Some((user, _)) = credentials {
        cmd.args(["--username", user]);
    }
    let mut child = cmd.spawn().expect("run xpkg");
    if let (Some(mut stdin), Some((_, password))) = (child.stdin.take(), credentials) {
        stdin.write_all(password.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().expect("run xpkg");
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

pub fn provider_yaml(name: &str, package: &str, extra: &str) -> String {
    format!(
        "apiVersion: pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: {name}\nspec:\n  package: {package}\n{extra}"
    )
}

pub fn provider(name: &str) -> Option<Value> {
    get_json(&["providers.pkg.crossplane.io", name])
}

/// The Provider, when it is Installed and Healthy.
pub fn provider_healthy(name: &str) -> Option<Value> {
    let p = provider(name)?;
    let ok = condition(&p, "Installed").is_some_and(|c| c.0 == "True")
        && condition(&p, "Healthy").is_some_and(|c| c.0 == "True");
    ok.then_some(p)
}

pub fn wait_provider_healthy(name: &str, timeout: Duration) -> Value {
    wait(
        timeout,
        &format!("Provider {name} Installed and Healthy"),
        || provider_healthy(name),
        explain_packages,
    )
}

pub fn revisions_of(provider: &str) -> Vec<Value> {
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

pub fn short(digest: &str) -> &str {
    &digest.trim_start_matches("sha256:")[..12]
}

/// A cluster-scoped test CRD `<plural>.<group>` of kind `kind`.
pub fn test_crd(group: &str, kind: &str) -> (String, String) {
    let plural = format!("{}s", kind.to_lowercase());
    let singular = kind.to_lowercase();
    (
        format!("{group}_{plural}.yaml"),
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Cluster\n  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}\n  versions:\n  - name: v1alpha1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
        ),
    )
}

pub fn crds_of(crds: &[(String, String)]) -> Vec<(&str, String)> {
    crds.iter().map(|(f, t)| (f.as_str(), t.clone())).collect()
}

/// A unique DNS-safe group for one test; the package-manager may list its
/// kinds (as the operator grants it, until the rbac-manager does), so a
/// Provider's deletion can see whether custom resources of it exist.
pub fn group(prefix: &str) -> String {
    let g = format!("{}.example.org", testenv::unique_name(prefix));
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: test-list-{g}\n  labels: {{rbac.crossplane-rs.io/aggregate-to-package-manager: \"true\"}}\nrules:\n- {{apiGroups: [{g}], resources: [\"*\"], verbs: [list]}}\n"
    ));
    g
}

/// Waits until the Provider's `type_` condition has `status` and its
/// message contains every one of `says`.
pub fn wait_provider_condition(
    name: &str,
    type_: &str,
    status: &str,
    says: &[&str],
    timeout: Duration,
) -> Value {
    wait(
        timeout,
        &format!("Provider {name} {type_}={status} saying {says:?}"),
        || {
            let p = provider(name)?;
            let (s, message) = condition(&p, type_)?;
            (s == status && says.iter().all(|w| message.contains(w))).then_some(p)
        },
        explain_packages,
    )
}

/// Pushes an image whose base layer holds `package_yaml` as is (no
/// checks: for packages xpkg would refuse to build); returns the digest.
pub fn push_raw(reference: &str, package_yaml: &str) -> String {
    let layer = oci::LayerBuilder::new()
        .file("package.yaml", 0o644, package_yaml.as_bytes().to_vec())
        .build()
        .unwrap();
    push_base_layer(env().registry, reference, layer)
}

/// Pushes an image of `layer` alone, annotated as the package's base layer,
/// to `reference` in `registry`; returns the digest.
pub fn push_base_layer(
    registry: &testenv::registry::Registry,
    reference: &str,
    layer: oci::Layer,
) -> String {
    let image =
        oci::Image::new(oci::Config::default()).layer(layer.annotate("io.crossplane.xpkg", "base"));
    push_image(registry, reference, &image)
}

pub fn meta(name: &str) -> String {
    format!("apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: {name}\n")
}

pub fn delete_provider(name: &str) {
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        name,
        "--ignore-not-found",
        "--wait=false",
    ]);
}

pub fn wait_provider_gone(name: &str) {
    wait(
        Duration::from_secs(60),
        &format!("Provider {name} gone"),
        || provider(name).is_none().then_some(()),
        explain_packages,
    );
}

/// A listener that accepts connections and never answers.
pub fn silent_listener(ip: std::net::IpAddr) -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind((ip, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    addr
}

pub fn revision_names(provider: &str) -> Vec<String> {
    revisions_of(provider)
        .iter()
        .map(|r| {
            r["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

pub fn meta_with_dependency(name: &str, dependency: &str, version: &str) -> String {
    format!("  dependsOn:\n  - provider: {dependency}\n    version: \"{version}\"\n")
        .replace("{name}", name)
}

/// Reconciles of the package-manager's Provider controller so far (any
/// result).
pub fn provider_reconciles() -> f64 {
    crate::shipped::reconciles("package-manager", "provider")
}

/// Makes the Provider controller look at `name` at least `n` more times
/// (each annotation is a change it is woken by).
pub fn poke(name: &str, n: usize) {
    for i in 0..n {
        let before = provider_reconciles();
        kubectl(&[
            "annotate",
            "providers.pkg.crossplane.io",
            name,
            &format!("poke={i}"),
            "--overwrite",
        ]);
        wait(
            Duration::from_secs(30),
            "the Provider controller to reconcile",
            || (provider_reconciles() > before).then_some(()),
            explain_packages,
        );
    }
}

pub fn deployment_of(revision: &str) -> Option<Value> {
    get_json(&["deployment", revision, "-n", NS])
}
