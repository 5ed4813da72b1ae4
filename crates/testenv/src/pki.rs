//! The test clusters' PKI and identities: a CA, serving and client
//! certificates made with the openssl CLI, and the static token file of
//! the admin, the node's components and the extra users.

use std::{fs, path::Path, process::Command};

use anyhow::bail;

use crate::{node, process::run};

/// The `kubernetes` Service's address (first of the service range).
const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The admin token both apiservers accept (a static token file, member of
/// system:masters). Test clusters only; never used outside them.
pub(crate) const ADMIN_TOKEN: &str = "crossplane-rs-test-admin";

/// A CA, a serving certificate for 127.0.0.1 (and, with a node, for the
/// host's address on the node's veth and the `kubernetes` Service, so pods
/// can use in-cluster config) and a service-account key, made with the
/// openssl CLI; with a node also the API servers' client certificate for
/// kubelets (`kubectl logs`, `exec`).
pub(crate) fn make_pki(
    dir: &Path,
    users: &[String],
    node: Option<&node::Plan>,
) -> anyhow::Result<()> {
    let d = |f: &str| dir.join(f).to_string_lossy().into_owned();
    run(
        Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
            ])
            .args([
                "-keyout",
                &d("ca.key"),
                "-out",
                &d("ca.crt"),
                "-subj",
                "/CN=crossplane-rs-test-ca",
            ]),
        "creating the test CA with openssl (is openssl installed?)",
    )?;
    run(
        Command::new("openssl")
            .args(["req", "-newkey", "rsa:2048", "-nodes"])
            .args([
                "-keyout",
                &d("serving.key"),
                "-out",
                &d("serving.csr"),
                "-subj",
                "/CN=kube-apiserver",
            ]),
        "creating the serving key",
    )?;
    let mut san = "subjectAltName=IP:127.0.0.1,DNS:localhost".to_owned();
    if let Some(plan) = node {
        san.push_str(&format!(
            ",IP:{},IP:{KUBERNETES_SERVICE_IP},DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc",
            plan.host_ip
        ));
    }
    fs::write(dir.join("san.ext"), format!("{san}\n"))?;
    run(
        Command::new("openssl")
            .args(["x509", "-req", "-days", "3650", "-in", &d("serving.csr")])
            .args([
                "-CA",
                &d("ca.crt"),
                "-CAkey",
                &d("ca.key"),
                "-CAcreateserial",
            ])
            .args(["-out", &d("serving.crt"), "-extfile", &d("san.ext")]),
        "signing the serving certificate",
    )?;
    run(
        Command::new("openssl").args(["genrsa", "-out", &d("sa.key"), "2048"]),
        "creating the service-account key",
    )?;
    if node.is_some() {
        run(
            Command::new("openssl")
                .args(["req", "-newkey", "rsa:2048", "-nodes"])
                .args([
                    "-keyout",
                    &d("kubelet-client.key"),
                    "-out",
                    &d("kubelet-client.csr"),
                ])
                .args([
                    "-subj",
                    "/O=system:masters/CN=kube-apiserver-kubelet-client",
                ]),
            "creating the kubelet client key",
        )?;
        run(
            Command::new("openssl")
                .args([
                    "x509",
                    "-req",
                    "-days",
                    "3650",
                    "-in",
                    &d("kubelet-client.csr"),
                ])
                .args([
                    "-CA",
                    &d("ca.crt"),
                    "-CAkey",
                    &d("ca.key"),
                    "-CAcreateserial",
                ])
                .args(["-out", &d("kubelet-client.crt")]),
            "signing the kubelet client certificate",
        )?;
    }
    let mut tokens = format!("{ADMIN_TOKEN},admin,admin-uid,system:masters\n");
    if node.is_some() {
        tokens.push_str(&node::token_lines());
    }
    for user in users {
        tokens.push_str(&format!("{},{user},{user}-uid\n", user_token(user)));
    }
    fs::write(dir.join("tokens.csv"), tokens)?;
    Ok(())
}

/// The bearer token of an extra user (`Options::users`): test clusters only.
pub(crate) fn user_token(user: &str) -> String {
    format!("crossplane-rs-test-user-{user}")
}

/// Refuses user names that would not survive the token file (a CSV) or a
/// kubeconfig unquoted.
pub(crate) fn check_user(user: &str) -> anyhow::Result<()> {
    let ok = !user.is_empty()
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':'));
    if !ok || user == "admin" {
        bail!(
            "testenv user {user:?}: use letters, digits, '-', '.', '_' or ':' (and not \"admin\")"
        );
    }
    Ok(())
}
