//! The package-manager's modes, each with its own flags: the six
//! controllers run as pods from `deploy/` (the shipped installation), and
//! each test sets the package-manager Deployment's flags as an operator
//! would (one set at a time: the Deployment is rolled out with them, and
//! a test holds them while it runs): a registry it does not trust,
//! `--package-runtime=External`, and the deprecated ControllerConfig with
//! `--enable-runtime-config=false` beside its conversion; and, on the
//! package-manager pod's request counters (`counted`), an installed stack
//! whose reconciles write nothing and a Provider's managed kinds made
//! without reading one back.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod counted;

use std::time::Duration;

use e2e::packages::*;
use e2e::{
    pods::package_manager_flags,
    shipped::{metrics_of, operator_flags},
};
use serde_json::Value;

fn pause_package(name: &str) -> (String, String) {
    let e = env();
    let g = group(name);
    let crds = [test_crd(&g, "Part")];
    let reference = format!(
        "{}/test/{}:v1",
        e.registry.address,
        testenv::unique_name(name)
    );
    let digest = xpkg_push(
        &package_dir(name, "v1", &crds_of(&crds)),
        &reference,
        Some(testenv::image::PAUSE_IMAGE),
    );
    (reference, digest)
}

/// The runtime objects of a Provider's revision: its Deployment (named
/// after the revision), Service and ServiceAccount (named after the
/// Provider).
fn runtime_objects(provider: &str, revision: &str) -> Vec<&'static str> {
    [
        ("deployment", revision),
        ("service", provider),
        ("serviceaccount", provider),
    ]
    .into_iter()
    .filter(|(k, name)| get_json(&[k, name, "-n", RUNTIMES]).is_some())
    .map(|(k, _)| k)
    .collect()
}

/// The package-manager's request counters are the whole pod's: the tests
/// of this binary run one after the other.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn untrusted_registry_external_runtime_and_controller_config() {
    let _alone = alone();
    let e = env();
    let trusted = operator_flags();

    // 1. Without the registry's CA, the TLS failure is named.
    let untrusted: Vec<String> = trusted
        .iter()
        .filter(|f| !f.starts_with("--ca-bundle-path"))
        .cloned()
        .collect();
    assert_eq!(untrusted.len(), trusted.len() - 1, "{trusted:?}");
    let pm = package_manager_flags(&untrusted);
    let (reference, _) = pause_package("untrusted");
    let name = testenv::unique_name("untrusted");
    apply(&provider_yaml(&name, &reference, ""));
    let p = wait_provider_condition(
        &name,
        "Healthy",
        "False",
        &[&reference],
        Duration::from_secs(40),
    );
    let message = condition(&p, "Healthy").unwrap().1;
    assert!(message.to_lowercase().contains("certificate"), "{message}");
    eprintln!("packages: an untrusted registry is reported as: {message}");
    delete_provider(&name);
    wait_provider_gone(&name);
    drop(pm);

    // 2. External: the revision and its CRDs, no runtime objects at all.
    let mut external = trusted.clone();
    external.push("--package-runtime=External".into());
    let pm = package_manager_flags(&external);
    let (reference, digest) = pause_package("external");
    let name = testenv::unique_name("external");
    apply(&provider_yaml(&name, &reference, ""));
    let p = wait_provider_healthy(&name, Duration::from_secs(60));
    let revision = format!("{name}-{}", short(&digest));
    assert_eq!(p["status"]["currentRevision"], revision.as_str());
    let r = &revisions_of(&name)[0];
    let runtime = condition(r, "RuntimeHealthy").unwrap();
    assert!(
        runtime.0 == "True" && runtime.1.contains("External"),
        "{runtime:?}"
    );
    assert!(!r["status"]["objectRefs"].as_array().unwrap().is_empty());
    assert!(
        runtime_objects(&name, &revision).is_empty(),
        "External mode made {:?}",
        runtime_objects(&name, &revision)
    );
    // The seed's Cloud Run example applies unchanged; its runtime config
    // kind is none of this package-manager's business.
    let seed = testenv::repo_root().join("examples/seeds/004-provider-cloudrun-runtimeconfig.yaml");
    kubectl(&["apply", "-f", seed.to_str().unwrap()]);
    let p = wait_blocking(
        Duration::from_secs(40),
        "the seed's provider-example reported on",
        || {
            let p = provider("provider-example")?;
            condition(&p, "Healthy").map(|c| c.1)
        },
        explain_packages,
    );
    assert!(
        !p.contains("runtimeConfigRef"),
        "External mode judged the runtime config: {p}"
    );
    for n in [name.as_str(), "provider-example"] {
        delete_provider(n);
        wait_provider_gone(n);
    }
    drop(pm);

    // 3. A ControllerConfig, honoured with --enable-runtime-config=false...
    let mut legacy = trusted.clone();
    legacy.push("--enable-runtime-config=false".into());
    let pm = package_manager_flags(&legacy);
    let (reference, digest) = pause_package("legacy");
    let name = testenv::unique_name("legacy");
    let cc = testenv::unique_name("cc");
    let cc_yaml = format!(
        "apiVersion: pkg.crossplane.io/v1alpha1\nkind: ControllerConfig\nmetadata: {{name: {cc}}}\nspec:\n  replicas: 2\n  args: [\"--debug\"]\n  env: [{{name: FOO, value: bar}}]\n  nodeSelector: {{kubernetes.io/os: linux}}\n  metadata: {{labels: {{team: platform}}}}\n"
    );
    let provider_with_cc = provider_yaml(
        &name,
        &reference,
        &format!("  controllerConfigRef: {{name: {cc}}}\n"),
    );
    apply(&cc_yaml);
    apply(&provider_with_cc);
    wait_provider_healthy(&name, Duration::from_secs(90));
    let revision = format!("{name}-{}", short(&digest));
    // A reconcile with nothing to change writes nothing and reads only
    // what is not watched: no CRD, runtime or status write (patch is how
    // everything is written). This test alone holds the package-manager's
    // flags, so its counters are this Provider's.
    let requests = |verb: &str| {
        e2e::metric_sum(
            &metrics_of("package-manager"),
            "crossplane_rs_kube_api_requests_total",
            &[("cluster", "control"), ("verb", verb)],
        )
    };
    let patches = || requests("patch");
    let reconciles = || e2e::shipped::reconciles("package-manager", "providerrevision");
    // The Provider is Healthy once its CRD is established; its MRD's
    // status and the policy's list of MRDs are written after that.
    wait_mrd_writes();
    let (patched, read, reconciled) = (patches(), requests("get"), reconciles());
    kubectl(&[
        "annotate",
        "providerrevisions.pkg.crossplane.io",
        &revision,
        "poke=1",
    ]);
    wait_blocking(
        Duration::from_secs(30),
        "the revision reconciled again",
        || (reconciles() > reconciled).then_some(()),
        explain_packages,
    );
    assert_eq!(patches(), patched, "an unchanged revision wrote something");
    // One read: the deprecated ControllerConfig is read on every reconcile
    // (it is not watched); the CRD, runtime config and runtime are not.
    let reads = requests("get") - read;
    assert!(
        reads <= 1.0,
        "an unchanged revision read {reads} objects, more than its ControllerConfig"
    );
    let honoured = get_json(&["deployment", &revision, "-n", RUNTIMES]).unwrap();
    assert_eq!(honoured["spec"]["replicas"], 2);
    let pod = &honoured["spec"]["template"];
    assert_eq!(
        pod["spec"]["containers"][0]["args"],
        serde_json::json!(["--debug"])
    );
    assert_eq!(pod["spec"]["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(pod["metadata"]["labels"]["team"], "platform");
    drop(pm);

    // ...and its conversion renders the same runtime with
    // --enable-runtime-config=true, where the old reference is ignored
    // with a Warning.
    let cc_file = e.work.join("cc.yaml");
    let provider_file = e.work.join("provider.yaml");
    std::fs::write(&cc_file, &cc_yaml).unwrap();
    std::fs::write(&provider_file, &provider_with_cc).unwrap();
    let out = std::process::Command::new(testenv::workspace_binary("package-manager"))
        .args(["convert", "controllerconfig"])
        .arg(&cc_file)
        .arg("--provider")
        .arg(&provider_file)
        .output()
        .unwrap();
    let converted = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{converted}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        converted.contains("kind: DeploymentRuntimeConfig")
            && converted.contains("runtimeConfigRef"),
        "{converted}"
    );
    assert!(!converted.contains("controllerConfigRef"), "{converted}");
    let pm = package_manager_flags(&trusted);
    apply(&provider_with_cc);
    e2e_wait_event(&revision, "ControllerConfigIgnored");
    apply(&converted);
    wait_blocking(
        Duration::from_secs(60),
        "the converted runtime config rendering the same pods",
        || {
            let d = get_json(&["deployment", &revision, "-n", RUNTIMES])?;
            (d["spec"]["template"] == honoured["spec"]["template"] && d["spec"]["replicas"] == 2)
                .then_some(())
        },
        || {
            let d: Value = get_json(&["deployment", &revision, "-n", RUNTIMES]).unwrap_or_default();
            format!(
                "now {}\nhonoured {}\n{}",
                d["spec"],
                honoured["spec"],
                explain_packages()
            )
        },
    );
    delete_provider(&name);
    wait_provider_gone(&name);
    drop(pm);
}

/// Waits for an event with `reason` about `involved` in any namespace.
fn e2e_wait_event(involved: &str, reason: &str) {
    wait_blocking(
        Duration::from_secs(60),
        &format!("a {reason} event about {involved}"),
        || {
            let (_, out) = kubectl_try(&[
                "get",
                "events",
                "-A",
                "--field-selector",
                &format!("involvedObject.name={involved}"),
                "-o",
                "json",
            ]);
            out.contains(reason).then_some(())
        },
        explain_packages,
    );
}

/// `--allow-unrestricted-runtimes true` lifts pod-security limits only: a
/// dependency named `…/rbac-manager` becomes a Provider `rbac-manager`, and
/// its runtime still may not run as the rbac-manager's ServiceAccount.
#[test]
fn unrestricted_runtimes_still_never_borrow_a_controllers_identity() {
    let _alone = alone();
    let e = env();
    let mut flags = operator_flags();
    flags.push("--allow-unrestricted-runtimes=true".into());
    let pm = package_manager_flags(&flags);
    let prefix = format!("{}/{}", e.registry.address, testenv::unique_name("borrow"));
    let g = group("borrowed");
    let crds = [test_crd(&g, "Part")];
    let dependency = format!("{prefix}/rbac-manager");
    xpkg_push(
        &package_dir("rbac-manager", "v1", &crds_of(&crds)),
        &format!("{dependency}:v1.0.0"),
        Some(testenv::image::PAUSE_IMAGE),
    );
    let g = group("borrower");
    let crds = [test_crd(&g, "Part")];
    let root_ref = format!("{prefix}/root:v1.0.0");
    xpkg_push(
        &package_dir_with(
            "root",
            "v1",
            &crds_of(&crds),
            &format!("  dependsOn:\n  - provider: {dependency}\n    version: \">=v1.0.0\"\n"),
        ),
        &root_ref,
        Some(testenv::image::PAUSE_IMAGE),
    );
    let root = testenv::unique_name("borrower");
    apply(&provider_yaml(&root, &root_ref, ""));
    let p = wait_provider_condition(
        "rbac-manager",
        "Healthy",
        "False",
        &[
            "ServiceAccount crossplane-rs-runtimes/rbac-manager",
            "never lifts",
        ],
        Duration::from_secs(120),
    );
    eprintln!(
        "packages: the borrowing dependency says: {}",
        condition(&p, "Healthy").unwrap().1
    );
    // Nothing but the rbac-manager itself runs as its ServiceAccount.
    let deployments = get_json(&["deployments", "-A"]).unwrap();
    for d in deployments["items"].as_array().unwrap() {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        let sa = d
            .pointer("/spec/template/spec/serviceAccountName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(
            sa != "rbac-manager" || name == "rbac-manager",
            "Deployment {name} runs as rbac-manager"
        );
    }
    delete_provider(&root);
    delete_provider("rbac-manager");
    wait_provider_gone(&root);
    drop(pm);
}

/// An upgrade from a release that ran Provider runtimes in the controllers'
/// namespace: the package-manager, at start, stops what such a release
/// left there (a Deployment its revision controls), so no provider runs
/// twice, and leaves every other Deployment alone.
#[test]
fn a_runtime_an_earlier_release_ran_in_the_controllers_namespace_is_stopped_at_start() {
    let _alone = alone();
    let pm = package_manager_flags(&operator_flags());
    let (reference, _) = pause_package("moved");
    let name = testenv::unique_name("moved");
    apply(&provider_yaml(&name, &reference, ""));
    wait_provider_healthy(&name, Duration::from_secs(150));
    let revision = revisions_of(&name).remove(0);
    let rev = revision["metadata"]["name"].as_str().unwrap().to_owned();
    let uid = revision["metadata"]["uid"].as_str().unwrap().to_owned();
    let deployment = |name: &str, owner: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {NS}\n  labels: {{pkg.crossplane.io/revision: {rev}}}\n{owner}spec:\n  replicas: 0\n  selector: {{matchLabels: {{left: {name}}}}}\n  template:\n    metadata: {{labels: {{left: {name}}}}}\n    spec: {{containers: [{{name: c, image: {}}}]}}\n",
            testenv::image::PAUSE_IMAGE
        )
    };
    // What the earlier release left: the revision's runtime, controlled by
    // it; beside it a Deployment with the same label that no revision
    // controls, which is not the package-manager's to remove.
    apply(&deployment(
        &rev,
        &format!(
            "  ownerReferences: [{{apiVersion: pkg.crossplane.io/v1, kind: ProviderRevision, name: {rev}, uid: {uid}, controller: true}}]\n"
        ),
    ));
    let bystander = testenv::unique_name("bystander");
    apply(&deployment(&bystander, ""));
    e2e::pods::restart("package-manager");
    wait_blocking(
        Duration::from_secs(60),
        "the runtime left in the controllers' namespace to go",
        || {
            get_json(&["deployment", &rev, "-n", NS])
                .is_none()
                .then_some(())
        },
        || kubectl(&["get", "deployments", "-n", NS]),
    );
    assert!(get_json(&["deployment", &bystander, "-n", NS]).is_some());
    assert!(
        runtime_objects(&name, &rev).contains(&"deployment"),
        "the revision's runtime in {RUNTIMES} stays"
    );
    kubectl(&["delete", "deployment", &bystander, "-n", NS]);
    delete_provider(&name);
    wait_provider_gone(&name);
    drop(pm);
}
