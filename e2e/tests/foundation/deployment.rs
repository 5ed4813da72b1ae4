//! deploy/ renders and applies as kustomize.

use super::*;

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
