//! One package manager under measure ("side"): crossplane-rs's
//! package-manager and rbac-manager as pods from `deploy/`, or upstream's
//! core and rbac-manager as pods of its chart's shape. What the phases
//! need of either: the users the audit log names, where Provider runtimes
//! run, and the processes whose CPU and memory are read from /proc.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

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
    /// Its package manager and rbac-manager.
    pub processes: Vec<Process>,
}

/// One binary under measure: the pod it runs in, found by label, and its
/// process, found again whenever the one last seen has gone (its container
/// restarted or its pod was replaced), so that a phase reports the binary
/// it ran with and says that it changed instead of reading zeros.
pub struct Process {
    pub label: &'static str,
    ns: String,
    selector: String,
    program: String,
    pid: AtomicU32,
}

/// What a process's pod says of its restarts: the restart count of its
/// first container and how its last run ended, if it did.
fn pod_state(pod: &Value) -> Value {
    let status = pod.pointer("/status/containerStatuses/0");
    json!({
        "pod": pod.pointer("/metadata/name"),
        "restarts": status.and_then(|s| s.get("restartCount")),
        "last_terminated": status.and_then(|s| s.pointer("/lastState/terminated/reason")),
    })
}

impl Process {
    fn new(label: &'static str, ns: &str, selector: String, program: &str) -> Self {
        let process = Self {
            label,
            ns: ns.to_owned(),
            selector,
            program: program.to_owned(),
            pid: AtomicU32::new(0),
        };
        let (pid, _) = process.find();
        let pid =
            pid.unwrap_or_else(|| panic!("no {program} process of {} in /proc", process.selector));
        process.pid.store(pid, Ordering::Relaxed);
        process
    }

    /// Its running, not deleting, pod; the process in it; what the pod
    /// says of its restarts.
    fn find(&self) -> (Option<u32>, Value) {
        let Some(pod) = e2e::kubectl::running_pod(&self.ns, &self.selector) else {
            return (None, Value::Null);
        };
        let uid = pod
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        (e2e::shipped::pod_pid(uid, &self.program), pod_state(&pod))
    }

    /// The process now: the one last seen while it lives, else the one its
    /// pod runs now (and what the pod says of why).
    fn current(&self) -> (u32, Option<Value>) {
        let pid = self.pid.load(Ordering::Relaxed);
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return (pid, None);
        }
        let (found, state) = self.find();
        let found = found.unwrap_or(0);
        self.pid.store(found, Ordering::Relaxed);
        (found, Some(state))
    }
}

/// One binary's usage with the process it was read from.
#[derive(Clone, Copy, Default)]
pub struct Sample {
    pub pid: u32,
    pub usage: Usage,
}

impl Side {
    /// crossplane-rs as installed from deploy/ (e2e::shipped).
    pub fn ours() -> Self {
        let process = |binary: &'static str| {
            Process::new(
                binary,
                e2e::shipped::NS,
                format!("app.kubernetes.io/name={binary}"),
                &format!("/usr/local/bin/{binary}"),
            )
        };
        Self {
            name: "crossplane-rs",
            users: ["package-manager", "rbac-manager"]
                .iter()
                .map(|b| format!("system:serviceaccount:{}:{b}", e2e::shipped::NS))
                .collect(),
            runtime_ns: e2e::shipped::RUNTIMES.to_owned(),
            processes: vec![process("package-manager"), process("rbac-manager")],
        }
    }

    /// Upstream as [`upstream::install`] runs it.
    pub fn upstream() -> Self {
        let process = |label: &'static str, app: &str| {
            Process::new(
                label,
                upstream::NS,
                format!("app={app}"),
                "/usr/local/bin/crossplane",
            )
        };
        Self {
            name: "upstream",
            users: vec![
                upstream::CORE_USER.to_owned(),
                upstream::RBAC_USER.to_owned(),
            ],
            runtime_ns: upstream::NS.to_owned(),
            processes: vec![
                process("core", "crossplane"),
                process("rbac-manager", "crossplane-rbac-manager"),
            ],
        }
    }

    /// The CPU and memory of each binary now.
    pub fn usage(&self) -> BTreeMap<&'static str, Sample> {
        self.processes
            .iter()
            .map(|p| {
                let (pid, _) = p.current();
                (
                    p.label,
                    Sample {
                        pid,
                        usage: Usage::of(pid),
                    },
                )
            })
            .collect()
    }

    /// Each binary's CPU seconds since `before`, its RSS now and its peak.
    /// A binary whose process was replaced since `before` says so, with
    /// what its pod says of the restart; its figures are then the new
    /// process's alone (what the old one used last is gone with it).
    pub fn usage_since(&self, before: &BTreeMap<&'static str, Sample>) -> Value {
        let mut out = serde_json::Map::new();
        for p in &self.processes {
            let (pid, state) = p.current();
            let now = Usage::of(pid);
            let base = before.get(p.label).copied().unwrap_or_default();
            let replaced = base.pid != pid;
            let from = if replaced {
                Usage::default()
            } else {
                base.usage
            };
            let mut entry = now.since_json(&from);
            if replaced && let Some(map) = entry.as_object_mut() {
                let state = state.unwrap_or_else(|| p.find().1);
                map.insert(
                    "replaced".to_owned(),
                    json!({"pid_before": base.pid, "pid_now": pid, "state": state}),
                );
            }
            out.insert(p.label.to_owned(), entry);
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
               "binaries": self.processes.iter().map(|p| p.label).collect::<Vec<_>>()})
    }
}
