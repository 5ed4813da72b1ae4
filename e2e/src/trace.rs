//! `crossplane-rs trace` as a user sees it: a user bound only to
//! `crossplane-view` and the Role `crossplane-rs:view-runtimes` in
//! crossplane-rs-runtimes (deploy/base/rbac-manager/trace-roles.yaml), reached
//! by impersonation through the admin's kubeconfig (the API server
//! authorizes every request as that user), and the JSON tree the command
//! prints.

use std::{
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use serde_json::Value;

use crate::wait::wait_blocking;

/// A kubeconfig for `control` acting as a fresh user bound to
/// crossplane-view and, when `runtimes`, the runtimes Role in
/// crossplane-rs-runtimes; and to Kubernetes' `view` in each of `namespaces`
/// (where a stack's controller runs). Waits until the aggregated role lets
/// the user read Providers.
pub fn viewer(control: &testenv::Cluster, runtimes: bool, namespaces: &[&str]) -> PathBuf {
    let user = testenv::unique_name("trace-viewer");
    let mut yaml = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {user}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crossplane-view}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]\n"
    );
    if runtimes {
        yaml.push_str(&format!(
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {user}, namespace: crossplane-rs-runtimes}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: \"crossplane-rs:view-runtimes\"}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]\n"
        ));
    }
    for ns in namespaces {
        yaml.push_str(&format!(
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {user}, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]\n"
        ));
    }
    let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(&yaml));
    assert!(
        out.status.success(),
        "binding the trace viewer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut config: Value = serde_saphyr::from_str(&control.kubeconfig).unwrap();
    for u in config["users"].as_array_mut().unwrap() {
        u["user"]["as"] = Value::String(user.clone());
    }
    let path = control.scratch_dir().join(format!("{user}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    wait_blocking(
        Duration::from_secs(60),
        "crossplane-view to carry the trace role (aggregation)",
        || {
            let out = control.kubectl(&[
                "auth",
                "can-i",
                "list",
                "providerrevisions.pkg.crossplane.io",
                "--as",
                &user,
            ]);
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .eq("yes")
                .then_some(())
        },
        || format!("user {user}"),
    );
    path
}

/// `crossplane-rs trace ARGS --kubeconfig KUBECONFIG`.
pub fn run(kubeconfig: &Path, args: &[&str]) -> Output {
    let binary = testenv::workspace_binary("crossplane-rs");
    std::process::Command::new(&binary)
        .arg("trace")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} (cargo build --workspace --bins builds it): {e}",
                binary.display()
            )
        })
}

/// The tree `trace ARGS -o json` prints (it must succeed).
pub fn json(kubeconfig: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = run(kubeconfig, &all);
    assert!(
        out.status.success(),
        "crossplane-rs trace {}: {}",
        all.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "trace printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The text `trace ARGS` prints (it must succeed).
pub fn text(kubeconfig: &Path, args: &[&str]) -> String {
    let out = run(kubeconfig, args);
    assert!(
        out.status.success(),
        "crossplane-rs trace {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every node of `tree` (itself included), depth first.
pub fn nodes(tree: &Value) -> Vec<&Value> {
    let mut out = vec![tree];
    for c in tree["children"].as_array().into_iter().flatten() {
        out.extend(nodes(c));
    }
    out
}

/// The nodes of `kind` in `tree`.
pub fn of_kind<'a>(tree: &'a Value, kind: &str) -> Vec<&'a Value> {
    nodes(tree)
        .into_iter()
        .filter(|n| n["kind"] == kind)
        .collect()
}

/// The node `kind`/`name` in `tree`; fails the test naming the tree.
pub fn node<'a>(tree: &'a Value, kind: &str, name: &str) -> &'a Value {
    nodes(tree)
        .into_iter()
        .find(|n| n["kind"] == kind && n["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} in the trace:\n{tree:#}"))
}

/// The nodes of `tree` that say they could not be read.
pub fn forbidden(tree: &Value) -> Vec<&Value> {
    nodes(tree)
        .into_iter()
        .filter(|n| n["status"]["state"] == "forbidden")
        .collect()
}

/// `crossplane-rs trace ARGS --watch -o json` running: the child (kill it
/// when done) and the trees it prints, as they come.
pub fn watch(
    kubeconfig: &Path,
    args: &[&str],
) -> (std::process::Child, std::sync::mpsc::Receiver<Value>) {
    let binary = testenv::workspace_binary("crossplane-rs");
    let mut child = std::process::Command::new(&binary)
        .arg("trace")
        .args(args)
        .args(["--watch", "-o", "json", "--kubeconfig"])
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for tree in serde_json::Deserializer::from_reader(stdout).into_iter::<Value>() {
            let Ok(tree) = tree else { return };
            if tx.send(tree).is_err() {
                return;
            }
        }
    });
    (child, rx)
}
