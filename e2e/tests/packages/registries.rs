//! Where packages come from: unreachable and private registries, image indexes, ImageConfigs.

use super::*;

#[test]
fn an_unreachable_registry_is_reported_and_a_registry_that_comes_up_is_used_without_help() {
    env();
    let plane = testenv::control_plane_with_node();
    let node = plane.node.as_ref().unwrap();
    // A registry that accepts and never answers: the pull times out and
    // says so (the controller does not hang).
    let silent = e2e::stall::Stalled::start_on(node.host_ip.into(), e2e::stall::Mode::Tcp).addr;
    let hung = testenv::unique_name("hung");
    let reference = format!("{silent}/test/hung:v1");
    apply(&provider_yaml(&hung, &reference, ""));
    let p = wait_provider_condition(
        &hung,
        "Healthy",
        "False",
        &[&reference],
        Duration::from_secs(40),
    );
    eprintln!(
        "packages: a silent registry is reported as: {}",
        condition(&p, "Healthy").unwrap().1
    );
    delete_provider(&hung);

    // A closed port, then a registry starts there.
    let port = testenv::registry::Registry::free_port(node).unwrap();
    let late = testenv::unique_name("late");
    let reference = format!("{}:{port}/test/late:v1", node.host_ip);
    apply(&provider_yaml(&late, &reference, ""));
    wait_provider_condition(
        &late,
        "Healthy",
        "False",
        &[&reference, "failed to read"],
        Duration::from_secs(30),
    );
    let registry =
        testenv::registry::Registry::start_on(plane, node, "late.crossplane-rs.test", None, port)
            .unwrap();
    let g = group("late");
    let dir = package_dir("late", "v1", &crds_of(&[test_crd(&g, "Sprocket")]));
    xpkg_push(&dir, &reference, None);
    let started = Instant::now();
    wait_provider_healthy(&late, Duration::from_secs(60));
    eprintln!(
        "packages: installed {:?} after the registry came up",
        started.elapsed()
    );
    // Once installed, the registry going away changes nothing.
    drop(registry);
    let before = e2e::shipped::reconciles("package-manager", "providerrevision");
    kubectl(&[
        "annotate",
        "providerrevisions.pkg.crossplane.io",
        revisions_of(&late)[0]["metadata"]["name"].as_str().unwrap(),
        "poke=1",
        "--overwrite",
    ]);
    wait_blocking(
        Duration::from_secs(30),
        "the revision reconciled after the registry went",
        || {
            let now = e2e::shipped::reconciles("package-manager", "providerrevision");
            (now > before).then_some(())
        },
        explain_packages,
    );
    let p = provider(&late).unwrap();
    assert_eq!(
        condition(&p, "Healthy").unwrap().0,
        "True",
        "an outage after install made it unhealthy: {p}"
    );
    delete_provider(&late);
}

#[test]
fn a_private_registry_needs_the_pull_secret_and_the_dependency_inherits_it() {
    let plane = testenv::control_plane_with_node();
    let node = plane.node.as_ref().unwrap();
    let (user, password) = ("robot", "pull-s3cret");
    let private = testenv::registry::Registry::start(
        plane,
        node,
        "private.crossplane-rs.test",
        Some((user, password)),
    )
    .unwrap();
    let unique = testenv::unique_name("dep");
    let b_repo = format!("{}/test/{unique}-b", private.address);
    let a_repo = format!("{}/test/{unique}-a", private.address);
    let gb = group("depb");
    let ga = group("depa");
    // B at v0.9.0, v1.0.0, v1.2.0, v1 and v2.0.0: A's >=v1.0.0, <v2.0.0
    // picks v1.2.0 (v1 is not a full version).
    for tag in ["v0.9.0", "v1.0.0", "v1.2.0", "v1", "v2.0.0"] {
        let dir = package_dir("b", tag, &crds_of(&[test_crd(&gb, "Bolt")]));
        xpkg_push_as(
            &dir,
            &format!("{b_repo}:{tag}"),
            None,
            Some((user, password)),
        );
    }
    let a_dir = package_dir_with(
        "a",
        "v1.0.0",
        &crds_of(&[test_crd(&ga, "Anchor")]),
        &meta_with_dependency("a", &b_repo, ">=v1.0.0, <v2.0.0"),
    );
    xpkg_push_as(
        &a_dir,
        &format!("{a_repo}:v1.0.0"),
        None,
        Some((user, password)),
    );

    // Without credentials the registry refuses, and the Provider says so.
    let a = format!("{unique}-a");
    apply(&provider_yaml(&a, &format!("{a_repo}:v1.0.0"), ""));
    wait_provider_condition(
        &a,
        "Healthy",
        "False",
        &["refused", "requires credentials"],
        Duration::from_secs(30),
    );
    assert!(revisions_of(&a).is_empty());

    // With the pull secret it installs, and so does B, with A's secret.
    let secret = testenv::unique_name("pull");
    let config = serde_json::json!({"auths": {private.address.clone(): {"username": user, "password": password}}});
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {secret}, namespace: {RUNTIMES}}}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{config}'\n"
    ));
    apply(&provider_yaml(
        &a,
        &format!("{a_repo}:v1.0.0"),
        &format!("  packagePullSecrets:\n  - name: {secret}\n"),
    ));
    wait_provider_healthy(&a, Duration::from_secs(60));
    let b = format!("{unique}-b");
    let bp = wait_provider_healthy(&b, Duration::from_secs(60));
    assert_eq!(bp["spec"]["package"], format!("{b_repo}:v1.2.0"));
    assert_eq!(bp["spec"]["packagePullSecrets"][0]["name"], secret.as_str());
    assert_eq!(
        bp["metadata"]["labels"]["pkg.crossplane.io/dependency"],
        "true"
    );
    let ar = &revisions_of(&a)[0];
    assert_eq!(ar["status"]["foundDependencies"], 1);
    assert_eq!(ar["status"]["installedDependencies"], 1);
    assert_eq!(ar["status"]["invalidDependencies"], 0);
    // B was installed only for A: it goes with A.
    delete_provider(&a);
    wait_provider_gone(&a);
    wait_provider_gone(&b);
}

#[test]
fn an_image_index_resolves_to_its_linux_amd64_package_and_one_without_is_refused() {
    let e = env();
    let unique = testenv::unique_name("index");
    let repo = format!("{}/test/{unique}", e.registry.address);
    let g = group("index");
    let image = oci::xpkg::build(
        &package_dir("index", "v1", &crds_of(&[test_crd(&g, "Gear")])),
        None,
    )
    .unwrap();
    let serialized = image.serialize().unwrap();
    let tls = oci::Tls::Ca(e.registry.ca_pem.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(image.push(&format!("{repo}:single"), &oci::Auth::Anonymous, &tls))
        .unwrap();
    let platform = |architecture: &str| oci::Platform {
        digest: serialized.digest.clone(),
        size: serialized.manifest.len() as u64,
        os: "linux".into(),
        architecture: architecture.into(),
    };
    rt.block_on(oci::push_index(
        &format!("{repo}:multi"),
        &[platform("arm64"), platform("amd64")],
        &oci::Auth::Anonymous,
        &tls,
    ))
    .unwrap();
    rt.block_on(oci::push_index(
        &format!("{repo}:arm-only"),
        &[platform("arm64"), platform("s390x")],
        &oci::Auth::Anonymous,
        &tls,
    ))
    .unwrap();

    // The index resolves to its linux/amd64 image: the revision is named
    // after that image's digest.
    let multi = format!("{unique}-multi");
    apply(&provider_yaml(&multi, &format!("{repo}:multi"), ""));
    let p = wait_provider_healthy(&multi, Duration::from_secs(60));
    assert_eq!(
        p["status"]["currentRevision"],
        format!("{multi}-{}", short(serialized.digest.as_str())).as_str()
    );

    let arm = format!("{unique}-arm");
    apply(&provider_yaml(&arm, &format!("{repo}:arm-only"), ""));
    wait_provider_condition(
        &arm,
        "Healthy",
        "False",
        &["no linux/amd64", "linux/arm64", "linux/s390x"],
        Duration::from_secs(30),
    );
    assert!(revisions_of(&arm).is_empty());
    for n in [&multi, &arm] {
        delete_provider(n);
    }
    for n in [&multi, &arm] {
        wait_provider_gone(n);
    }
}

/// ImageConfigs: a Provider and its dependency, pushed only under a mirror
/// path of a private registry, are applied by their public name (for which
/// the node's containerd has no mirror); one ImageConfig rewrites the
/// packages, one the runtime image, one gives the mirror its pull Secret.
/// Both install; the runtime pod runs the rewritten image; editing an
/// ImageConfig reaches the runtime within 5 s; a deleted pull Secret is
/// named on the Provider with the ImageConfig that names it.
#[test]
fn image_configs_read_public_names_from_a_mirror_with_their_pull_secret() {
    let e = env();
    let plane = testenv::control_plane_with_node();
    let node = plane.node.as_ref().unwrap();
    let (user, password) = ("mirror-robot", "m1rror-s3cret");
    let mirror = testenv::registry::Registry::start(
        plane,
        node,
        "imageconfig-mirror.crossplane-rs.test",
        Some((user, password)),
    )
    .unwrap();
    let unique = testenv::unique_name("ic");
    let public = format!("xpkg.{unique}.test");
    let packages_at = format!("{}/acme-{unique}", mirror.address);
    let runtime_at = |n: u32| format!("{}/{unique}-runtime{n}", e.registry.address);

    // The runtime image, under two mirror paths of the open registry. It
    // carries a file of its own: the node's kubelet records the images it
    // pulls by image ID, and a pull of the preloaded pause image's ID under
    // another name would make it verify (pull) that image for every later
    // pod that runs it by its preloaded name (there is no registry for it).
    let pause = testenv::image::binary_image(&testenv::bin_dir().unwrap().join("pause"))
        .unwrap()
        .layer(
            oci::LayerBuilder::new()
                .file("etc/runtime-of", 0o644, unique.as_bytes().to_vec())
                .build()
                .unwrap(),
        );
    for n in [1, 2] {
        e2e::artifacts::push_image(&e.registry, &format!("{}/pause:v1", runtime_at(n)), &pause);
    }
    // B (CRDs only) and A (depends on B, runs the public runtime name).
    let (ga, gb) = (group("ica"), group("icb"));
    let b_dir = package_dir("b", "v1.0.0", &crds_of(&[test_crd(&gb, "Beam")]));
    xpkg_push_as(
        &b_dir,
        &format!("{packages_at}/{unique}-b:v1.0.0"),
        None,
        Some((user, password)),
    );
    let a_dir = package_dir_with(
        "a",
        "v1.0.0",
        &crds_of(&[test_crd(&ga, "Arch")]),
        &meta_with_dependency("a", &format!("{public}/acme/{unique}-b"), ">=v1.0.0"),
    );
    xpkg_push_as(
        &a_dir,
        &format!("{packages_at}/{unique}-a:v1.0.0"),
        Some(&format!("{public}/runtime/pause:v1")),
        Some((user, password)),
    );

    let secret = format!("{unique}-pull");
    let config = serde_json::json!({"auths": {mirror.address.clone(): {"username": user, "password": password}}});
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {secret}, namespace: {RUNTIMES}}}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{config}'\n"
    ));
    let image_config = |name: &str, prefix: &str, rest: &str| {
        format!(
            "apiVersion: pkg.crossplane.io/v1beta1\nkind: ImageConfig\nmetadata: {{name: {name}}}\nspec:\n  matchImages:\n  - type: Prefix\n    prefix: \"{prefix}\"\n{rest}"
        )
    };
    let (packages_ic, runtime_ic, credentials_ic) = (
        format!("{unique}-packages"),
        format!("{unique}-runtime"),
        format!("{unique}-credentials"),
    );
    apply(&image_config(
        &packages_ic,
        &format!("{public}/acme/"),
        &format!("  rewriteImage: {{prefix: \"{packages_at}/\"}}\n"),
    ));
    let runtime_config = |n: u32| {
        image_config(
            &runtime_ic,
            &format!("{public}/runtime/"),
            &format!("  rewriteImage: {{prefix: \"{}/\"}}\n", runtime_at(n)),
        )
    };
    apply(&runtime_config(1));
    apply(&image_config(
        &credentials_ic,
        &format!("{packages_at}/"),
        &format!("  registry:\n    authentication:\n      pullSecretRef: {{name: {secret}}}\n"),
    ));

    // Applied by their public names: both install, from the mirror.
    let (a, b) = (format!("{unique}-a"), format!("{unique}-b"));
    apply(&provider_yaml(
        &a,
        &format!("{public}/acme/{unique}-a:v1.0.0"),
        "",
    ));
    let ap = wait_provider_healthy(&a, Duration::from_secs(120));
    let bp = wait_provider_healthy(&b, Duration::from_secs(60));
    assert_eq!(
        bp["spec"]["package"],
        format!("{public}/acme/{unique}-b:v1.0.0")
    );
    assert_eq!(
        ap["status"]["resolvedPackage"],
        format!("{packages_at}/{unique}-a:v1.0.0")
    );
    assert_eq!(
        bp["status"]["resolvedPackage"],
        format!("{packages_at}/{unique}-b:v1.0.0")
    );
    let applied = |p: &Value| -> Vec<(String, String)> {
        p["status"]["appliedImageConfigRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["name"].as_str().unwrap_or_default().to_owned(),
                    r["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let expected = vec![
        (packages_ic.clone(), "RewriteImage".to_owned()),
        (credentials_ic.clone(), "SetImagePullSecret".to_owned()),
    ];
    assert_eq!(applied(&ap), expected);
    assert_eq!(applied(&bp), expected);

    // The runtime runs the rewritten name; containerd knows no mirror for
    // the public one.
    let revision = revisions_of(&a)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let rewritten = |n: u32| format!("{}/pause:v1", runtime_at(n));
    let running_pod = |image: &str| {
        let pods = get_json(&[
            "pods",
            "-n",
            RUNTIMES,
            "-l",
            &format!("pkg.crossplane.io/revision={revision}"),
        ])?;
        pods["items"].as_array()?.iter().find_map(|p| {
            (p["spec"]["containers"][0]["image"] == image
                && p["status"]["phase"] == "Running"
                && p["metadata"]["deletionTimestamp"].is_null())
            .then_some(())
        })
    };
    wait_blocking(
        Duration::from_secs(60),
        "the runtime pod Running the rewritten image",
        || running_pod(&rewritten(1)),
        explain_packages,
    );
    assert!(
        !node.registry_config_dir().join(&public).exists(),
        "containerd has no mirror for {public}"
    );
    let rev = get_json(&["providerrevisions.pkg.crossplane.io", &revision]).unwrap();
    assert_eq!(rev["status"]["resolvedImage"], rewritten(1));
    assert_eq!(rev["spec"]["image"], format!("{public}/runtime/pause:v1"));

    // Editing the ImageConfig reaches the runtime Deployment within 5 s.
    let edited = Instant::now();
    apply(&runtime_config(2));
    let image_now = || {
        deployment_of(&revision).and_then(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .map(str::to_owned)
        })
    };
    wait_blocking(
        Duration::from_secs(5),
        "the runtime Deployment to run the newly rewritten image",
        || (image_now().as_deref() == Some(rewritten(2).as_str())).then_some(()),
        || format!("{:?}\n{}", image_now(), explain_packages()),
    );
    let took = edited.elapsed();
    assert!(took <= Duration::from_secs(5), "{took:?}");
    wait_blocking(
        Duration::from_secs(60),
        "the runtime pod Running the newly rewritten image",
        || running_pod(&rewritten(2)),
        explain_packages,
    );

    // The pull Secret deleted: a Provider of the mirror names it and the
    // ImageConfig that names it.
    kubectl(&["delete", "secret", &secret, "-n", RUNTIMES]);
    let c = format!("{unique}-c");
    apply(&provider_yaml(
        &c,
        &format!("{public}/acme/{unique}-b:v1.0.0"),
        "",
    ));
    wait_provider_condition(
        &c,
        "Healthy",
        "False",
        &[&format!(
            "pull Secret {secret} of ImageConfig {credentials_ic} does not exist in namespace {RUNTIMES}"
        )],
        Duration::from_secs(30),
    );

    delete_provider(&c);
    delete_provider(&a);
    wait_provider_gone(&a);
    wait_provider_gone(&b);
    wait_provider_gone(&c);
    for ic in [&packages_ic, &runtime_ic, &credentials_ic] {
        kubectl(&["delete", "imageconfig.pkg.crossplane.io", ic]);
    }
}
