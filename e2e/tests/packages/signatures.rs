//! Signed packages: an ImageConfig that requires a cosign key (an
//! upstream ImageConfig manifest, applied unchanged) installs what that key
//! signed and attested, with upstream's own `cosign`; an unsigned package,
//! one signed by another key, and one signed but not attested install
//! nothing and say which authority failed; a dependency is held to the same
//! rule, and installs once signed. A keyless authority installs what a
//! certificate of its identity signed, issued by a private certificate
//! authority the operator's trusted root (made by upstream's `cosign
//! trusted-root create`) lists, and refuses another identity or another
//! authority's certificate.

use e2e::cosign;

use super::*;

/// A package of one CRD, its own kind, pushed as `<prefix><name>:v1.0.0`
/// (with `extra` in its package.yaml): its reference by digest and its
/// CRD's name.
fn push_kind(prefix: &str, name: &str, kind: &str, extra: &str) -> (String, String) {
    let g = group(name);
    let dir = package_dir_with(name, "v1.0.0", &crds_of(&[test_crd(&g, kind)]), extra);
    let digest = xpkg_push(&dir, &format!("{prefix}{name}:v1.0.0"), None);
    (
        format!("{prefix}{name}@{digest}"),
        format!("{}s.{g}", kind.to_lowercase()),
    )
}

#[test]
fn an_image_config_requiring_a_key_installs_only_what_the_key_signed_and_attested() {
    let e = env();
    let unique = testenv::unique_name("signed");
    let work = e.work.join(&unique);
    let (k1, k1_pub) = cosign::key_pair(&work, "k1");
    let (k2, _) = cosign::key_pair(&work, "k2");
    let prefix = format!("{}/signed-{unique}/", e.registry.address);
    let push = |name: &str, kind: &str, extra: &str| push_kind(&prefix, name, kind, extra);
    let (signed, signed_kind) = push(
        "signed",
        "Seal",
        &meta_with_dependency("signed", &format!("{prefix}dependency"), ">=v1.0.0"),
    );
    let (dependency, dependency_kind) = push("dependency", "Stamp", "");
    let (unsigned, unsigned_kind) = push("unsigned", "Blank", "");
    let (other_key, other_kind) = push("other", "Forgery", "");
    let (unattested, unattested_kind) = push("unattested", "Draft", "");
    for image in [&signed, &unattested] {
        cosign::sign(&work, &k1, image, &e.ca_file);
    }
    cosign::attest(&work, &k1, &signed, "custom", &e.ca_file);
    cosign::sign(&work, &k2, &other_key, &e.ca_file);
    cosign::attest(&work, &k2, &other_key, "custom", &e.ca_file);

    // The public key where pull Secrets are, and an upstream ImageConfig.
    let secret = format!("{unique}-cosign");
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {secret}, namespace: {RUNTIMES}}}\nstringData:\n  cosign.pub: |\n{}",
        k1_pub
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    ));
    let config = format!("{unique}-verify");
    apply(&format!(
        "apiVersion: pkg.crossplane.io/v1beta1\nkind: ImageConfig\nmetadata:\n  name: {config}\nspec:\n  matchImages:\n  - type: Prefix\n    prefix: \"{prefix}\"\n  verification:\n    provider: Cosign\n    cosign:\n      authorities:\n      - name: release-key\n        key:\n          secretRef:\n            name: {secret}\n            key: cosign.pub\n          hashAlgorithm: sha256\n        attestations:\n        - name: provenance\n          predicateType: custom\n"
    ));
    let applied = get_json(&["imageconfig", &config]).unwrap();
    assert_eq!(
        applied["spec"]["verification"]["cosign"]["authorities"][0]["attestations"][0]["predicateType"],
        "custom",
        "the verification is kept as written: {applied:#}"
    );

    let name = |n: &str| format!("{unique}-{n}");
    for (n, image) in [
        ("signed", &signed),
        ("unsigned", &unsigned),
        ("other", &other_key),
        ("unattested", &unattested),
    ] {
        apply(&provider_yaml(&name(n), image, ""));
    }
    // What is not verified installs nothing, and says which authority
    // failed and why.
    for (n, kind, why) in [
        (
            "unsigned",
            &unsigned_kind,
            "authority release-key: no signature",
        ),
        (
            "other",
            &other_kind,
            "authority release-key: none of its 1 signature verifies (not made with this key)",
        ),
        (
            "unattested",
            &unattested_kind,
            "authority release-key: attestation provenance: no attestation",
        ),
    ] {
        wait_provider_condition(
            &name(n),
            "Healthy",
            "False",
            &[&config, why],
            Duration::from_secs(60),
        );
        let rev = revisions_of(&name(n))[0].clone();
        assert_eq!(
            condition(&rev, "SignatureVerificationComplete").map(|c| c.0),
            Some("False".to_owned()),
            "{rev:#}"
        );
        assert!(
            get_json(&["mrd", kind]).is_none() && get_json(&["crd", kind]).is_none(),
            "{n} installed {kind}"
        );
    }
    // The signed package's dependency is installed as a Provider, and held
    // to the same rule: unsigned, it installs nothing.
    let waiting = wait_blocking(
        Duration::from_secs(60),
        "the dependency's revision refusing it",
        || {
            let p = get_json(&["providers.pkg.crossplane.io"])?["items"]
                .as_array()?
                .iter()
                .find(|p| {
                    p["spec"]["package"]
                        .as_str()
                        .is_some_and(|s| s.starts_with(&format!("{prefix}dependency")))
                })?
                .clone();
            let name = p["metadata"]["name"].as_str()?.to_owned();
            let rev = revisions_of(&name).first()?.clone();
            (condition(&rev, "SignatureVerificationComplete")?.0 == "False").then_some(name)
        },
        explain_packages,
    );
    assert!(
        get_json(&["mrd", &dependency_kind]).is_none(),
        "the unsigned dependency installed"
    );
    // Signed and attested, it installs; the signed package installs too.
    cosign::sign(&work, &k1, &dependency, &e.ca_file);
    cosign::attest(&work, &k1, &dependency, "custom", &e.ca_file);
    wait_provider_healthy(&waiting, Duration::from_secs(90));
    let p = wait_provider_healthy(&name("signed"), Duration::from_secs(90));
    assert!(get_json(&["mrd", &signed_kind]).is_some(), "{p:#}");
    let rev = revisions_of(&name("signed"))[0].clone();
    let (status, message) = condition(&rev, "SignatureVerificationComplete").unwrap();
    assert_eq!(status, "True", "{message}");
    assert!(
        message.contains("release-key") && message.contains(&config),
        "{message}"
    );
    assert!(
        rev["status"]["appliedImageConfigRefs"]
            .to_string()
            .contains("VerifyImage"),
        "{rev:#}"
    );

    for n in ["signed", "unsigned", "other", "unattested"] {
        delete_provider(&name(n));
    }
    for n in ["signed", "unsigned", "other", "unattested"] {
        wait_provider_gone(&name(n));
    }
    kubectl(&["delete", "imageconfig", &config]);
}

#[test]
fn a_keyless_authority_installs_only_what_a_certificate_of_its_identity_signed() {
    const ISSUER: &str = "https://issuer.keyless.example";
    let e = env();
    let unique = testenv::unique_name("keyless");
    let work = e.work.join(&unique);
    let ours = cosign::Authority::new(&work, "ours");
    let stranger = cosign::Authority::new(&work, "stranger");
    let release = ours.certificate(&work, "release", "release@keyless.example", ISSUER);
    let intern = ours.certificate(&work, "intern", "intern@keyless.example", ISSUER);
    let forged = stranger.certificate(&work, "forged", "release@keyless.example", ISSUER);
    let prefix = format!("{}/keyless-{unique}/", e.registry.address);
    let push = |name: &str, kind: &str| push_kind(&prefix, name, kind, "");
    let (signed, signed_kind) = push("released", "Charter");
    let (other_identity, other_identity_kind) = push("interned", "Memo");
    let (other_ca, other_ca_kind) = push("forged", "Counterfeit");
    ours.sign(&work, &release, &signed, &e.ca_file);
    ours.sign(&work, &intern, &other_identity, &e.ca_file);
    stranger.sign(&work, &forged, &other_ca, &e.ca_file);

    // An ImageConfig naming the release identity (no CT log in a private
    // authority: insecureIgnoreSCT).
    let config = format!("{unique}-verify");
    apply(&format!(
        "apiVersion: pkg.crossplane.io/v1beta1\nkind: ImageConfig\nmetadata:\n  name: {config}\nspec:\n  matchImages:\n  - type: Prefix\n    prefix: \"{prefix}\"\n  verification:\n    provider: Cosign\n    cosign:\n      authorities:\n      - name: release-identity\n        keyless:\n          identities:\n          - issuer: {ISSUER}\n            subject: release@keyless.example\n          insecureIgnoreSCT: true\n"
    ));
    let name = |n: &str| format!("{unique}-{n}");
    for (n, image) in [
        ("released", &signed),
        ("interned", &other_identity),
        ("forged", &other_ca),
    ] {
        apply(&provider_yaml(&name(n), image, ""));
    }
    // Without the operator's trusted root nothing verifies, and the
    // condition says where to put it; then the trusted root, where the
    // package-manager reads it.
    wait_provider_condition(
        &name("released"),
        "Healthy",
        "False",
        &[&format!(
            "ConfigMap {RUNTIMES}/sigstore-trusted-root does not exist"
        )],
        Duration::from_secs(60),
    );
    let trusted_root = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "sigstore-trusted-root", "namespace": RUNTIMES},
        "data": {"trusted_root.json": ours.trusted_root},
    });
    apply(&trusted_root.to_string());
    for (n, kind, why) in [
        (
            "interned",
            &other_identity_kind,
            "authority release-identity: none of its 1 signature verifies (its certificate is issued to intern@keyless.example by https://issuer.keyless.example, which no identity of the authority names)",
        ),
        (
            "forged",
            &other_ca_kind,
            "does not chain to a certificate authority of the trusted root",
        ),
    ] {
        wait_provider_condition(
            &name(n),
            "Healthy",
            "False",
            &[&config, why],
            Duration::from_secs(60),
        );
        assert!(
            get_json(&["mrd", kind]).is_none() && get_json(&["crd", kind]).is_none(),
            "{n} installed {kind}"
        );
    }
    let p = wait_provider_healthy(&name("released"), Duration::from_secs(90));
    assert!(get_json(&["mrd", &signed_kind]).is_some(), "{p:#}");
    let rev = revisions_of(&name("released"))[0].clone();
    let (status, message) = condition(&rev, "SignatureVerificationComplete").unwrap();
    assert_eq!(status, "True", "{message}");
    assert!(message.contains("release-identity"), "{message}");

    for n in ["released", "interned", "forged"] {
        delete_provider(&name(n));
    }
    for n in ["released", "interned", "forged"] {
        wait_provider_gone(&name(n));
    }
    kubectl(&["delete", "imageconfig", &config]);
    kubectl(&[
        "delete",
        "configmap",
        "-n",
        RUNTIMES,
        "sigstore-trusted-root",
    ]);
}

#[test]
fn a_runtime_image_an_image_config_requires_signed_runs_only_once_signed() {
    let e = env();
    let unique = testenv::unique_name("signed-runtime");
    let work = e.work.join(&unique);
    let (key, public) = cosign::key_pair(&work, "release");
    let prefix = format!("{}/signed-runtime-{unique}/", e.registry.address);
    // A v1-style package naming its runtime image (a pause image with a
    // file of its own) by tag; the package is signed, the runtime is not.
    let pause = testenv::image::binary_image(&testenv::bin_dir().unwrap().join("pause"))
        .unwrap()
        .layer(
            oci::LayerBuilder::new()
                .file("etc/runtime-of", 0o644, unique.as_bytes().to_vec())
                .build()
                .unwrap(),
        );
    let runtime = format!("{prefix}runtime:v1");
    let runtime_digest = e2e::artifacts::push_image(&e.registry, &runtime, &pause);
    let g = group("signed-runtime");
    let dir = package_dir(
        "signed-runtime",
        "v1.0.0",
        &crds_of(&[test_crd(&g, "Gear")]),
    );
    let digest = xpkg_push(&dir, &format!("{prefix}package:v1.0.0"), Some(&runtime));
    let package = format!("{prefix}package@{digest}");
    cosign::sign(&work, &key, &package, &e.ca_file);
    let secret = format!("{unique}-cosign");
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {secret}, namespace: {RUNTIMES}}}\nstringData:\n  cosign.pub: |\n{}",
        public
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    ));
    let config = format!("{unique}-verify");
    apply(&format!(
        "apiVersion: pkg.crossplane.io/v1beta1\nkind: ImageConfig\nmetadata: {{name: {config}}}\nspec:\n  matchImages:\n  - prefix: \"{prefix}\"\n  verification:\n    provider: Cosign\n    cosign:\n      authorities:\n      - name: release\n        key: {{secretRef: {{name: {secret}, key: cosign.pub}}, hashAlgorithm: sha256}}\n"
    ));
    let name = format!("{unique}-p");
    apply(&provider_yaml(&name, &package, ""));
    wait_provider_condition(
        &name,
        "Healthy",
        "False",
        &[
            &format!("{prefix}runtime@{runtime_digest}"),
            "authority release: no signature",
        ],
        Duration::from_secs(60),
    );
    let revision = revisions_of(&name)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        deployment_of(&revision).is_none(),
        "an unverified runtime runs"
    );
    assert!(get_json(&["mrd", &format!("gears.{g}")]).is_none());
    // Signed, it runs.
    cosign::sign(
        &work,
        &key,
        &format!("{prefix}runtime@{runtime_digest}"),
        &e.ca_file,
    );
    wait_provider_healthy(&name, Duration::from_secs(120));
    assert!(deployment_of(&revision).is_some());
    delete_provider(&name);
    wait_provider_gone(&name);
    kubectl(&["delete", "imageconfig", &config]);
}
