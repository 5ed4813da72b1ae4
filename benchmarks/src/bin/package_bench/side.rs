//! One package manager under measure ("side"): crossplane-rs's
//! package-manager and rbac-manager as pods from `deploy/`, or upstream's
//! core and rbac-manager as pods of its chart's shape. What the phases
//! need of either: the users the audit log names, where Provider runtimes
//! run, and the processes whose CPU and memory are read from /proc.

use std::collections::BTreeMap;

use benchmarks::Usage;
use serde_json::{Value, json};

use crate::upstream;

/// A package manager's two binaries, found on the node.
pub struct Side {
    /// "crossplane-rs" or "upstream".
    pub name: &'static str,
    /// The users the audit log names for its package manager and its
    /// rbac-manager.
    pub users: Vec<String>,
    /// Where its Provider runtimes run.
    pub runtime_ns: String,
    /// (binary, pid) of its package manager and rbac-manager.
    pub processes: Vec<(&'static str, u32)>,
}

impl Side {
    /// crossplane-rs as installed from deploy/ (e2e::shipped).
    pub fn ours(control: &testenv::Cluster) -> Self {
        let pid = |binary: &'static str| {
            let (pod, _) = e2e::shipped::pod_of(binary);
            let uid = field(control, e2e::shipped::NS, &pod, "{.metadata.uid}");
            (binary, pod_pid(&uid, &format!("/usr/local/bin/{binary}")))
        };
        Self {
            name: "crossplane-rs",
            users: ["package-manager", "rbac-manager"]
                .iter()
                .map(|b| format!("system:serviceaccount:{}:{b}", e2e::shipped::NS))
                .collect(),
            runtime_ns: e2e::shipped::RUNTIMES.to_owned(),
            processes: vec![pid("package-manager"), pid("rbac-manager")],
        }
    }

    /// Upstream as [`upstream::install`] runs it.
    pub fn upstream(control: &testenv::Cluster) -> Self {
        let pid = |label: &'static str, app: &str| {
            let (_, uid) = upstream::pod(control, app);
            (label, pod_pid(&uid, "/usr/local/bin/crossplane"))
        };
        Self {
            name: "upstream",
            users: vec![
                upstream::CORE_USER.to_owned(),
                upstream::RBAC_USER.to_owned(),
            ],
            runtime_ns: upstream::NS.to_owned(),
            processes: vec![
                pid("core", "crossplane"),
                pid("rbac-manager", "crossplane-rbac-manager"),
            ],
        }
    }

    /// The CPU and memory of each binary now.
    pub fn usage(&self) -> BTreeMap<&'static str, Usage> {
        self.processes
            .iter()
            .map(|(b, pid)| (*b, Usage::of(*pid)))
            .collect()
    }

    /// Each binary's CPU seconds since `before`, its RSS now and its peak.
    pub fn usage_since(&self, before: &BTreeMap<&'static str, Usage>) -> Value {
        let now = self.usage();
        let mut out = serde_json::Map::new();
        for (b, u) in &now {
            let base = before.get(b).copied().unwrap_or_default();
            out.insert((*b).to_owned(), u.since_json(&base));
        }
        Value::Object(out)
    }

    /// The audit-log users, as `AuditMark::delta` takes them.
    pub fn audit_users(&self) -> BTreeMap<String, Vec<String>> {
        BTreeMap::from([("*".to_owned(), self.users.clone())])
    }

    /// What the JSON says of it.
    pub fn json(&self) -> Value {
        json!({"users": self.users, "runtime_namespace": self.runtime_ns,
               "binaries": self.processes.iter().map(|(b, _)| *b).collect::<Vec<_>>()})
    }
}

/// One field of a pod, by JSONPath.
fn field(control: &testenv::Cluster, ns: &str, pod: &str, path: &str) -> String {
    let out = control.kubectl(&[
        "get",
        "pod",
        pod,
        "-n",
        ns,
        "-o",
        &format!("jsonpath={path}"),
    ]);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The process running `program` in the pod of UID `uid`.
fn pod_pid(uid: &str, program: &str) -> u32 {
    e2e::shipped::pod_pid(uid, program)
        .unwrap_or_else(|| panic!("no {program} process of the pod with UID {uid} in /proc"))
}
