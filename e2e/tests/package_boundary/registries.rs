//! What a registry serves is data: bombs, redirects, foreign token realms, huge error bodies and hostile
//! tokens are refused and the package-manager keeps working.

use super::*;

/// A gzip tar layer of `files` entries of `each` zero bytes.
fn zeros_layer(files: usize, each: usize) -> oci::Layer {
    let zeros = vec![0u8; each];
    let mut b = oci::LayerBuilder::new().compression(1);
    for i in 0..files {
        b = b.file(format!("zeros/{i}"), 0o644, zeros.clone());
    }
    b.build().unwrap()
}

/// How many times a Warning was reported about the cluster-scoped object
/// `name`: an event repeated as a series counts each time.
fn warnings_about(name: &str) -> u64 {
    let selector = format!("involvedObject.name={name},type=Warning");
    let events = get_json(&["events", "-A", "--field-selector", &selector]).unwrap_or_default();
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let count = e["count"].as_u64().unwrap_or(0);
            let series = e
                .pointer("/series/count")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            count.max(series).max(1)
        })
        .sum()
}

#[test]
fn bombs_are_refused_within_seconds_and_the_package_manager_keeps_working() {
    let _rbac = rbac_manager_as_installed();
    shipped();
    let (pod, restarts) = pod_of("package-manager");
    let (holder, transitions) = package_manager_lease();
    let registry = &shipped().registry.address;
    // Two layers of 1 GiB of zeros (about 1 MB each, gzip), and a
    // package.yaml of 150 MiB (under 1 MB compressed).
    let bomb = zeros_layer(16, 64 * 1024 * 1024);
    eprintln!(
        "bomb: {} bytes compressed, {} inflated",
        bomb.size(),
        bomb.uncompressed_size()
    );
    let mut references = Vec::new();
    for i in 0..2 {
        let reference = format!("{registry}/bombs/zeros-{i}:v1");
        push_layer(&reference, bomb.clone());
        references.push(reference);
    }
    let mut big = b"apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: big\n  annotations:\n    filler: \"".to_vec();
    big.resize(big.len() + 150 * 1024 * 1024, b'a');
    big.extend_from_slice(b"\"\n");
    let yaml_bomb = oci::LayerBuilder::new()
        .compression(1)
        .file("package.yaml", 0o644, big)
        .build()
        .unwrap();
    let reference = format!("{registry}/bombs/big-yaml:v1");
    push_layer(&reference, yaml_bomb);
    references.push(reference);
    // A plain package, installed meanwhile.
    let g = format!("{}.example.org", testenv::unique_name("meanwhile"));
    let (file, crd) = test_crd(&g, "Thing");
    let dir = package_dir("provider-meanwhile", "", &[(file, crd)]);
    let plain = format!("{registry}/bombs/provider-meanwhile:v1");
    xpkg_push(&dir, &plain, None);

    let names: Vec<String> = (0..references.len())
        .map(|i| testenv::unique_name(&format!("bomb{i}")))
        .collect();
    let started = Instant::now();
    for (name, reference) in names.iter().zip(&references) {
        apply(&provider_yaml(name, reference, ""));
    }
    let meanwhile = testenv::unique_name("meanwhile");
    apply(&provider_yaml(&meanwhile, &plain, ""));
    for name in &names {
        let message = wait_blocking(
            Duration::from_secs(60),
            &format!("Provider {name} refused naming the bound"),
            || {
                let p = provider(name)?;
                let (status, message) = condition(&p, "Healthy")?;
                (status == "False" && message.contains("bound")).then_some(message)
            },
            explain,
        );
        eprintln!("{name} refused after {:?}: {message}", started.elapsed());
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "refusals took {:?}",
            started.elapsed()
        );
    }
    wait_blocking(
        Duration::from_secs(30),
        "the plain Provider to become Healthy beside the bombs",
        || {
            let p = provider(&meanwhile)?;
            (condition(&p, "Healthy")?.0 == "True").then_some(())
        },
        explain,
    );
    eprintln!("meanwhile: Healthy {:?} after apply", started.elapsed());
    // Each bomb is refused again (a Warning event more, as the API server
    // counts them): still no restart, same leader.
    for name in &names {
        let before = warnings_about(name);
        wait_blocking(
            Duration::from_secs(120),
            &format!("Provider {name} refused again (Warning events beyond {before})"),
            || {
                let now = warnings_about(name);
                if now > before {
                    Ok(now)
                } else {
                    Err(format!("{now} Warning events"))
                }
            },
            String::new,
        );
    }
    let (pod_after, restarts_after) = pod_of("package-manager");
    assert_eq!(
        (pod_after, restarts_after),
        (pod, restarts),
        "the package-manager restarted"
    );
    assert_eq!(
        package_manager_lease(),
        (holder, transitions),
        "the package-manager lost its lease"
    );
    for n in names.iter().chain(std::iter::once(&meanwhile)) {
        kubectl(&["delete", "providers.pkg.crossplane.io", n, "--wait=false"]);
    }
}

/// A hostile HTTPS registry of testenv's CA (which the package-manager
/// trusts) on the node's host address.
fn hostile_registry() -> Hostile {
    let tls = testenv::control_plane_with_node().serving_tls().unwrap();
    Hostile::https_testenv(host_ip(), &tls).unwrap()
}

/// A pull Secret in the runtimes' namespace with `user`/`password`
/// for `registry`.
fn pull_secret(name: &str, registry: &str, user: &str, password: &str) {
    let auth = serde_json::json!({"auths": {registry: {"username": user, "password": password}}});
    let (_, _) = kubectl_try(&["delete", "secret", name, "-n", RUNTIMES]);
    kubectl(&[
        "create",
        "secret",
        "generic",
        name,
        "-n",
        RUNTIMES,
        "--type=kubernetes.io/dockerconfigjson",
        &format!("--from-literal=.dockerconfigjson={auth}"),
    ]);
}

/// Applies a Provider of package `<registry>/evil/<repository>:v1` (with
/// `extra` spec lines) and waits until a condition of it is False naming
/// the registry and every one of `says`; returns its name and the
/// conditions' text.
fn install_from(
    registry: &Hostile,
    repository: &str,
    extra: &str,
    says: &[&str],
) -> (String, String) {
    let name = testenv::unique_name(repository);
    let host = registry.host();
    apply(&provider_yaml(
        &name,
        &format!("{host}/evil/{repository}:v1"),
        extra,
    ));
    let mut all = vec![host.as_str()];
    all.extend_from_slice(says);
    let text = wait_provider_says(&name, &all);
    (name, text)
}

#[test]
fn registry_credentials_never_follow_a_redirect_or_a_foreign_token_realm() {
    let _rbac = rbac_manager_as_installed();
    let (pod, restarts) = pod_of("package-manager");
    let registry = hostile_registry();
    let other = Hostile::http(host_ip()).unwrap();
    other.script(
        "/stolen",
        Reply::json(
            200,
            &serde_json::json!({"leak": "ANSWER-OF-THE-OTHER-HOST"}),
        ),
    );
    other.script(
        "/token",
        Reply::json(
            200,
            &serde_json::json!({"token": "t0ken-of-the-other-host"}),
        ),
    );
    // The registry asks for Basic credentials, then sends the manifest
    // request to another host (https → http, another port).
    registry.route("/v2/", |s| {
        if s.header("authorization").is_some() {
            Reply::new(200)
        } else {
            Reply::basic_challenge()
        }
    });
    let stolen = other.url("/stolen");
    registry.route("/v2/evil/redirect/manifests/v1", move |_| {
        Reply::redirect(&stolen)
    });
    pull_secret("hostile-pull", &registry.host(), "robot", "s3cret-pull");
    let (redirected, text) = install_from(
        &registry,
        "redirect",
        "  packagePullSecrets:\n  - name: hostile-pull\n",
        &[],
    );
    eprintln!("redirect: {text}");
    assert!(
        !text.contains("ANSWER-OF-THE-OTHER-HOST"),
        "the other host's answer reached status: {text}"
    );
    // A second registry whose token realm is the other host, over http.
    let realm_registry = hostile_registry();
    let realm = other.url("/token");
    let service = realm_registry.host();
    realm_registry.route("/v2/", move |s| {
        if s.header("authorization")
            .is_some_and(|a| a.starts_with("Bearer "))
        {
            Reply::new(200)
        } else {
            Reply::bearer_challenge(&realm, &service)
        }
    });
    pull_secret(
        "hostile-realm-pull",
        &realm_registry.host(),
        "robot",
        "s3cret-realm",
    );
    let (foreign, text) = install_from(
        &realm_registry,
        "realm",
        "  packagePullSecrets:\n  - name: hostile-realm-pull\n",
        &[],
    );
    eprintln!("foreign realm: {text}");
    let seen: Vec<String> = other
        .requests()
        .iter()
        .filter(|s| s.header("authorization").is_some())
        .map(|s| format!("{} {} {:?}", s.method, s.path, s.header("authorization")))
        .collect();
    assert!(
        seen.is_empty(),
        "the other host received credentials: {seen:?}"
    );
    assert!(
        registry
            .requests()
            .iter()
            .any(|s| s.header("authorization").is_some()),
        "the registry itself never got its credentials (the test proves nothing)"
    );
    assert_eq!(pod_of("package-manager"), (pod, restarts));
    for n in [&redirected, &foreign] {
        kubectl(&["delete", "providers.pkg.crossplane.io", n, "--wait=false"]);
    }
}

#[test]
fn a_mebibyte_error_body_leaves_a_short_written_condition() {
    let _rbac = rbac_manager_as_installed();
    let registry = hostile_registry();
    registry.script("/v2/", Reply::new(200));
    // A registry that fails with a mebibyte of text, as JSON errors and as
    // a plain body.
    let body =
        serde_json::json!({"errors": [{"code": "UNKNOWN", "message": "M".repeat(1024 * 1024)}]});
    registry.script("/v2/evil/huge/manifests/v1", Reply::json(500, &body));
    let (name, text) = install_from(&registry, "huge", "", &["MMMM"]);
    let p = provider(&name).unwrap();
    for c in p["status"]["conditions"].as_array().unwrap() {
        let m = c["message"].as_str().unwrap_or_default();
        assert!(
            m.len() <= 1024,
            "a condition of {} bytes: {}",
            m.len(),
            &m[..200]
        );
    }
    eprintln!("huge error body: {text}");
    delete_provider(&name);
}

#[test]
fn a_hostile_token_cannot_crash_the_package_manager() {
    let _rbac = rbac_manager_as_installed();
    let (pod, restarts) = pod_of("package-manager");
    let registry = hostile_registry();
    let realm = registry.url("/token");
    let service = registry.host();
    registry.route("/v2/", move |_| Reply::bearer_challenge(&realm, &service));
    // The token is JSON-valid and a control character inside: no header
    // can carry it.
    registry.script(
        "/token",
        Reply::new(200)
            .header("Content-Type", "application/json")
            .body(r#"{"token":"a\u0001b","access_token":"a\u0001b"}"#),
    );
    let (name, text) = install_from(&registry, "token", "", &[]);
    eprintln!("hostile token: {text}");
    assert!(
        !registry.requests_to("/token").is_empty(),
        "the token endpoint was never asked (the test proves nothing)"
    );
    assert_eq!(
        pod_of("package-manager"),
        (pod, restarts),
        "the package-manager restarted"
    );
    delete_provider(&name);
}
