//! A Provider's runtime is an untrusted identity: it cannot be made privileged, borrow a controller's
//! identity, mint a token, take a controller's Lease, or read Secrets where narrowing says not.

use super::*;

#[test]
fn a_runtime_config_cannot_make_a_runtime_privileged_or_borrow_a_controller() {
    let _rbac = rbac_manager_as_installed();
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("drc"));
    let (file, crd) = test_crd(&g, "Thing");
    let dir = package_dir("provider-drc", "", &[(file, crd)]);
    let reference = format!("{}/drc/provider-drc:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, Some(&shipped().pause_image));
    let config = testenv::unique_name("privileged");
    apply(&format!(
        "apiVersion: pkg.crossplane.io/v1beta1\nkind: DeploymentRuntimeConfig\nmetadata: {{name: {config}}}\nspec:\n  deploymentTemplate:\n    spec:\n      selector: {{}}\n      template:\n        spec:\n          hostNetwork: true\n          containers:\n          - name: package-runtime\n            securityContext: {{privileged: true}}\n  serviceAccountTemplate:\n    metadata: {{name: rbac-manager}}\n"
    ));
    let name = testenv::unique_name("drc");
    apply(&provider_yaml(
        &name,
        &reference,
        &format!(
            "  runtimeConfigRef: {{apiVersion: pkg.crossplane.io/v1beta1, kind: DeploymentRuntimeConfig, name: {config}}}\n"
        ),
    ));
    let text = wait_provider_says(
        &name,
        &[
            "template.spec.hostNetwork",
            "containers[0].securityContext.privileged",
            "ServiceAccount crossplane-rs-runtimes/rbac-manager",
        ],
    );
    eprintln!("runtime config: {text}");
    let revisions = get_json(&[
        "providerrevisions.pkg.crossplane.io",
        "-l",
        &format!("pkg.crossplane.io/package={name}"),
    ])
    .unwrap();
    for r in revisions["items"].as_array().unwrap() {
        let rev = r["metadata"]["name"].as_str().unwrap();
        assert!(
            get_json(&["deployment", rev, "-n", RUNTIMES]).is_none(),
            "the refused runtime {rev} runs"
        );
    }
    delete_provider(&name);
}

/// The policy that keeps package identities' writes out of the runtimes'
/// namespace.
const RUNTIMES_POLICY: &str = "crossplane-rs-package-runtimes";

#[test]
fn a_provider_runtime_cannot_mint_a_token_or_take_a_controllers_lease() {
    let _rbac = rbac_manager_as_installed();
    shipped();
    // A package that asks for nothing: only its own kinds and the runtime's
    // defaults.
    let (name, g) = install_provider("plain", "");
    wait_provider_healthy(&name, Duration::from_secs(150));
    let sa = format!("system:serviceaccount:{RUNTIMES}:{name}");
    wait_blocking(
        Duration::from_secs(60),
        "the runtime's system role to be bound",
        || {
            (may(&sa, "list", "things", &g) && can_i(&sa, &["create", "secrets", "-n", NS]))
                .then_some(())
        },
        explain,
    );
    // What a provider needs still works: a Secret for connection details
    // in the controllers' namespace (where credentials live too), and its
    // own leader-election Lease in its own namespace.
    let detail = testenv::unique_name("detail");
    let (ok, out) = create_as(&sa, &opaque_secret(NS, &detail));
    assert!(ok, "the runtime cannot write a connection Secret: {out}");
    assert!(can_i(&sa, &["create", "leases", "-n", RUNTIMES]));
    // No token for the rbac-manager (escalate and bind), nor for
    // kube-system's default: RBAC lets it write Secrets there, the policy
    // refuses the token.
    assert_cannot_mint(&sa, NS, "rbac-manager");
    assert_cannot_mint(&sa, "kube-system", "default");
    // No Lease outside its namespace: not the controllers' and not
    // kube-system's (the scheduler's and kube-controller-manager's leader
    // election).
    for args in [
        ["update", "leases/crossplane-rs-object-provider", "-n", NS],
        ["create", "leases", "-n", NS],
        ["create", "leases", "-n", "kube-system"],
        ["update", "leases", "-n", "kube-system"],
        ["get", "leases", "-n", "default"],
    ] {
        assert!(!can_i(&sa, &args), "{sa} may {args:?}");
    }
    // A real write to a controller's Lease is refused, and the
    // object-provider goes on leading without a restart.
    let (pod, restarts) = pod_of("object-provider");
    let (holder, transitions) = lease_of("object-provider");
    assert_eq!(holder, pod, "the object-provider leads before the attempt");
    let lease = "crossplane-rs-object-provider";
    let take =
        format!("{{\"spec\":{{\"holderIdentity\":\"{name}\",\"leaseDurationSeconds\":3600}}}}");
    let attempts: [&[&str]; 2] = [
        &[
            "patch",
            "lease",
            lease,
            "-n",
            NS,
            "--type=merge",
            "-p",
            &take,
        ],
        &["delete", "lease", lease, "-n", NS],
    ];
    for attempt in attempts {
        let mut args = attempt.to_vec();
        args.extend(["--as", &sa]);
        let (ok, out) = kubectl_try(&args);
        assert!(
            !ok && out.contains("forbidden"),
            "{sa} may {attempt:?}: {out}"
        );
    }
    // Nor a controller's Lease in its own namespace, where it may write
    // Leases: the policy refuses the name.
    let (ok, out) = create_as(
        &sa,
        &format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: crossplane-rs-scheduler-next, namespace: {RUNTIMES}}}\nspec: {{holderIdentity: {name}}}\n"
        ),
    );
    assert!(!ok && out.contains(POLICY), "{out}");
    assert_eq!(lease_of("object-provider"), (holder, transitions));
    assert_eq!(pod_of("object-provider"), (pod, restarts));
    // A runtime reads Secrets in every namespace by default (upstream's
    // providers need that for credentials), so no CA key is kept in one:
    // what it reads of a provider's CA, its own or another's, is
    // certificates only.
    let (ok, ca) = kubectl_try(&[
        "get",
        "secret",
        &format!("{name}-tls-ca"),
        "-n",
        RUNTIMES,
        "-o",
        "json",
        "--as",
        &sa,
    ]);
    assert!(ok, "{ca}");
    let ca: serde_json::Value = serde_json::from_str(&ca).unwrap();
    let keys: Vec<&String> = ca["data"].as_object().unwrap().keys().collect();
    assert!(
        keys.iter().all(|k| *k == "tls.crt" || *k == "previous.crt") && !keys.is_empty(),
        "the CA Secret holds {keys:?}"
    );
    assert!(!ca.to_string().contains("PRIVATE KEY"), "{ca}");
    // Whatever RBAC a runtime is given in the runtimes' namespace (here
    // the administrator binds it `edit` there, as a wide permission
    // request would), it writes nothing there but Leases and Events: no pod
    // that would mount another runtime's keys, no exec into one.
    let edit = testenv::unique_name("edit");
    kubectl(&[
        "create",
        "rolebinding",
        &edit,
        "-n",
        RUNTIMES,
        "--clusterrole=edit",
        &format!("--serviceaccount={RUNTIMES}:{name}"),
    ]);
    let (ok, out) = create_as(
        &sa,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {edit}, namespace: {RUNTIMES}}}\nspec:\n  containers: [{{name: c, image: {}}}]\n  volumes: [{{name: k, secret: {{secretName: {name}-tls-ca}}}}]\n",
            shipped().pause_image
        ),
    );
    assert!(
        !ok && out.contains(RUNTIMES_POLICY) && out.contains("may write only Leases and Events"),
        "{out}"
    );
    let runtime_pod = get_json(&[
        "pods",
        "-n",
        RUNTIMES,
        "-l",
        &format!("pkg.crossplane.io/provider={name}"),
    ])
    .and_then(|l| {
        l.pointer("/items/0/metadata/name")?
            .as_str()
            .map(str::to_owned)
    })
    .unwrap_or_else(|| panic!("no runtime pod of {name}: {}", explain()));
    let (ok, out) = kubectl_try(&[
        "exec",
        &runtime_pod,
        "-n",
        RUNTIMES,
        "--as",
        &sa,
        "--",
        "true",
    ]);
    assert!(
        !ok && out.contains(RUNTIMES_POLICY) && out.contains("pods/exec"),
        "{out}"
    );
    let (ok, out) = create_as(
        &sa,
        &format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {edit}, namespace: {RUNTIMES}}}\nspec: {{holderIdentity: {name}}}\n"
        ),
    );
    assert!(ok, "the runtime cannot write its own Lease: {out}");
    kubectl(&["delete", "rolebinding", &edit, "-n", RUNTIMES]);
    kubectl(&["delete", "lease", &edit, "-n", RUNTIMES]);
    // The policy leaves every other identity as the cluster has it: the
    // administrator still may.
    let admin_ns = namespace("admin-token");
    apply(&token_secret(&admin_ns, "admin-made", "default"));
    kubectl(&["delete", "secret", &detail, "-n", NS]);
    delete_provider(&name);
}

#[test]
fn with_runtime_secret_namespaces_set_a_runtime_reads_secrets_only_there() {
    let _alone = narrowed_rbac_manager();
    let creds = namespace("creds");
    // Operator configuration: runtimes keep Secrets in the controllers'
    // namespace (credentials there) and in `creds`, nowhere else.
    e2e::pods::controller_flags(
        "rbac-manager",
        &[&format!("--runtime-secret-namespaces={NS},{creds}")],
    );
    let (name, g) = install_provider("narrow", "");
    wait_provider_healthy(&name, Duration::from_secs(150));
    let sa = format!("system:serviceaccount:{RUNTIMES}:{name}");
    wait_blocking(
        Duration::from_secs(90),
        &format!("{sa} to read Secrets in {creds}"),
        || can_i(&sa, &["get", "secrets", "-n", &creds]).then_some(()),
        explain,
    );
    assert!(can_i(&sa, &["create", "secrets", "-n", NS]));
    assert!(may(&sa, "list", "things", &g));
    for ns in ["kube-system", "default", RUNTIMES] {
        assert!(
            !can_i(&sa, &["get", "secrets", "-n", ns]),
            "{sa} may get secrets in {ns}"
        );
        assert!(
            !can_i(&sa, &["create", "configmaps", "-n", ns]),
            "{sa} may create configmaps in {ns}"
        );
    }
    assert!(!can_i(&sa, &["list", "secrets", "-A"]));
    let (ok, out) = kubectl_try(&["get", "secrets", "-n", "kube-system", "--as", &sa]);
    assert!(!ok && out.contains("forbidden"), "{out}");
    // Nothing in the runtimes' namespace: not its own certificates (and so
    // not another provider's server key), nor an ImageConfig's pull Secret.
    let pull = testenv::unique_name("pull");
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {pull}, namespace: {RUNTIMES}}}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{{\"auths\": {{}}}}'\n"
    ));
    assert!(get_json(&["secret", &format!("{name}-tls-ca"), "-n", RUNTIMES]).is_some());
    for secret in [
        format!("{name}-tls-ca"),
        format!("{name}-tls-server"),
        pull.clone(),
    ] {
        let (ok, out) = kubectl_try(&["get", "secret", &secret, "-n", RUNTIMES, "--as", &sa]);
        assert!(
            !ok && out.contains("forbidden"),
            "{sa} read {secret}: {out}"
        );
    }
    kubectl(&["delete", "secret", &pull, "-n", RUNTIMES]);
    delete_provider(&name);
}
