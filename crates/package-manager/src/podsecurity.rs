//! The Kubernetes Pod Security Standard "restricted", for pods a package
//! runs: a stack's controller (its install.yaml) and what a
//! DeploymentRuntimeConfig changes in a provider's runtime. A pod template
//! is data written by a third party: [`violations`] names every field that
//! breaks the standard (the pod is refused, nothing runs), and [`harden`]
//! fills in what the standard requires and the template left unset
//! (non-root, no privilege escalation, every capability dropped, the
//! runtime's default seccomp profile), so a plain template runs restricted.
//!
//! Pure functions over the pod spec as JSON: the same template always gets
//! the same verdict, and nothing here indexes into user JSON for a write.

use serde_json::{Map, Value, json};

/// The container lists of a pod spec.
const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];
/// The volume sources "restricted" allows.
pub(crate) const ALLOWED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];
/// The sysctls "baseline" (and so "restricted") allows.
const SAFE_SYSCTLS: [&str; 10] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
/// The SELinux types "baseline" allows.
const SELINUX_TYPES: [&str; 3] = ["container_t", "container_init_t", "container_kvm_t"];
/// The user a hardened pod runs as when its template names none.
pub const NON_ROOT_USER: i64 = 65532;

fn is_true(v: Option<&Value>) -> bool {
    v.and_then(Value::as_bool) == Some(true)
}

/// Every field of `spec` (a PodSpec; `at` is its path, e.g.
/// `spec.controller.deployment.spec.template.spec`) that breaks the Pod
/// Security Standard "restricted", each as `<path>: <why>`. Empty when the
/// pod may run.
pub fn violations(spec: &Value, at: &str) -> Vec<String> {
    let mut out = Vec::new();
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        if is_true(spec.get(host)) {
            out.push(format!(
                "{at}.{host}: a package's pod may not share the node's namespaces"
            ));
        }
    }
    if let Some(sc) = spec.get("securityContext") {
        security_context(sc, &format!("{at}.securityContext"), &mut out);
        if let Some(sysctls) = sc.get("sysctls").and_then(Value::as_array) {
            for (i, s) in sysctls.iter().enumerate() {
                let name = s.get("name").and_then(Value::as_str).unwrap_or_default();
                if !SAFE_SYSCTLS.contains(&name) {
                    out.push(format!(
                        "{at}.securityContext.sysctls[{i}]: {name} is not a safe sysctl"
                    ));
                }
            }
        }
        if let Some(groups) = sc.get("supplementalGroups").and_then(Value::as_array)
            && groups.iter().any(|g| g.as_i64() == Some(0))
        {
            out.push(format!(
                "{at}.securityContext.supplementalGroups: group 0 (root) is not allowed"
            ));
        }
    }
    if let Some(volumes) = spec.get("volumes").and_then(Value::as_array) {
        for (i, v) in volumes.iter().enumerate() {
            let Some(v) = v.as_object() else { continue };
            for key in v.keys().filter(|k| *k != "name") {
                if !ALLOWED_VOLUMES.contains(&key.as_str()) {
                    out.push(format!(
                        "{at}.volumes[{i}].{key}: only {} volumes are allowed",
                        ALLOWED_VOLUMES.join(", ")
                    ));
                }
            }
        }
    }
    for list in CONTAINER_LISTS {
        let Some(containers) = spec.get(list).and_then(Value::as_array) else {
            continue;
        };
        for (i, c) in containers.iter().enumerate() {
            let path = format!("{at}.{list}[{i}]");
            if let Some(ports) = c.get("ports").and_then(Value::as_array) {
                for (j, p) in ports.iter().enumerate() {
                    if p.get("hostPort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                        out.push(format!(
                            "{path}.ports[{j}].hostPort: a package's pod may not bind node ports"
                        ));
                    }
                }
            }
            let Some(sc) = c.get("securityContext") else {
                continue;
            };
            let path = format!("{path}.securityContext");
            security_context(sc, &path, &mut out);
            if is_true(sc.get("privileged")) {
                out.push(format!(
                    "{path}.privileged: privileged containers are not allowed"
                ));
            }
            if is_true(sc.get("allowPrivilegeEscalation")) {
                out.push(format!(
                    "{path}.allowPrivilegeEscalation: must be false (or unset)"
                ));
            }
            if let Some(add) = sc.pointer("/capabilities/add").and_then(Value::as_array) {
                for cap in add.iter().filter_map(Value::as_str) {
                    if cap != "NET_BIND_SERVICE" {
                        out.push(format!(
                            "{path}.capabilities.add: {cap} (only NET_BIND_SERVICE may be added)"
                        ));
                    }
                }
            }
            if sc
                .get("procMount")
                .and_then(Value::as_str)
                .is_some_and(|p| p != "Default")
            {
                out.push(format!("{path}.procMount: must be Default"));
            }
        }
    }
    out
}

/// The checks shared by a pod's and a container's securityContext.
fn security_context(sc: &Value, path: &str, out: &mut Vec<String>) {
    if sc.get("runAsNonRoot").and_then(Value::as_bool) == Some(false) {
        out.push(format!("{path}.runAsNonRoot: must be true (or unset)"));
    }
    if sc.get("runAsUser").and_then(Value::as_i64) == Some(0) {
        out.push(format!("{path}.runAsUser: 0 (root) is not allowed"));
    }
    if sc.pointer("/seccompProfile/type").and_then(Value::as_str) == Some("Unconfined") {
        out.push(format!(
            "{path}.seccompProfile.type: Unconfined is not allowed"
        ));
    }
    if sc.pointer("/appArmorProfile/type").and_then(Value::as_str) == Some("Unconfined") {
        out.push(format!(
            "{path}.appArmorProfile.type: Unconfined is not allowed"
        ));
    }
    if is_true(sc.pointer("/windowsOptions/hostProcess")) {
        out.push(format!(
            "{path}.windowsOptions.hostProcess: host processes are not allowed"
        ));
    }
    if let Some(se) = sc.get("seLinuxOptions") {
        if se
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty() && !SELINUX_TYPES.contains(&t))
        {
            out.push(format!(
                "{path}.seLinuxOptions.type: only {} are allowed",
                SELINUX_TYPES.join(", ")
            ));
        }
        for field in ["user", "role"] {
            if se
                .get(field)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                out.push(format!("{path}.seLinuxOptions.{field}: may not be set"));
            }
        }
    }
}

/// The object at `key` of `map`, made an object if it is missing or not
/// one.
fn object<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    if !map.get(key).is_some_and(Value::is_object) {
        map.insert(key.to_owned(), json!({}));
    }
    map.get_mut(key).and_then(Value::as_object_mut)
}

/// Fills in what "restricted" requires and `spec` (a PodSpec that passed
/// [`violations`]) leaves unset: the pod runs as non-root (as
/// [`NON_ROOT_USER`] unless it names a user), with the runtime's default
/// seccomp profile, and every container without privilege escalation and
/// with every capability dropped (NET_BIND_SERVICE stays if it was added).
pub fn harden(spec: &mut Value) {
    let Some(pod) = spec.as_object_mut() else {
        return;
    };
    let names_user = pod
        .get("securityContext")
        .and_then(|s| s.get("runAsUser"))
        .is_some()
        || CONTAINER_LISTS.iter().any(|l| {
            pod.get(*l).and_then(Value::as_array).is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.pointer("/securityContext/runAsUser").is_some())
            })
        });
    if let Some(sc) = object(pod, "securityContext") {
        sc.entry("runAsNonRoot").or_insert(Value::Bool(true));
        if !names_user {
            sc.insert("runAsUser".into(), json!(NON_ROOT_USER));
        }
        if let Some(seccomp) = object(sc, "seccompProfile") {
            seccomp
                .entry("type")
                .or_insert_with(|| json!("RuntimeDefault"));
        }
    }
    for list in CONTAINER_LISTS {
        let Some(containers) = pod.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            let Some(sc) = object(c, "securityContext") else {
                continue;
            };
            sc.entry("allowPrivilegeEscalation")
                .or_insert(Value::Bool(false));
            if let Some(caps) = object(sc, "capabilities") {
                caps.insert("drop".into(), json!(["ALL"]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    const AT: &str = "spec.template.spec";

    fn plain() -> Value {
        json!({"containers": [{"name": "c", "image": "x"}]})
    }

    #[test]
    fn a_plain_pod_passes_and_is_hardened_to_restricted() {
        let mut spec = plain();
        assert!(violations(&spec, AT).is_empty());
        harden(&mut spec);
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        assert_eq!(spec["securityContext"]["runAsUser"], NON_ROOT_USER);
        assert_eq!(
            spec["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let c = &spec["containers"][0]["securityContext"];
        assert_eq!(c["allowPrivilegeEscalation"], false);
        assert_eq!(c["capabilities"]["drop"], json!(["ALL"]));
        assert!(violations(&spec, AT).is_empty());
    }

    #[test]
    fn host_access_privilege_and_root_are_each_named_by_field() {
        let spec = json!({
            "hostNetwork": true, "hostPID": true, "hostIPC": true,
            "securityContext": {"runAsUser": 0, "sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}, {"name": "ok", "emptyDir": {}}],
            "containers": [{
                "name": "c", "image": "x",
                "ports": [{"containerPort": 80, "hostPort": 80}],
                "securityContext": {
                    "privileged": true, "allowPrivilegeEscalation": true, "runAsNonRoot": false,
                    "capabilities": {"add": ["SYS_ADMIN", "NET_BIND_SERVICE"]},
                    "seccompProfile": {"type": "Unconfined"},
                },
            }],
        });
        let v = violations(&spec, AT);
        for field in [
            "spec.template.spec.hostNetwork",
            "spec.template.spec.hostPID",
            "spec.template.spec.hostIPC",
            "spec.template.spec.securityContext.runAsUser",
            "spec.template.spec.securityContext.sysctls[0]",
            "spec.template.spec.volumes[0].hostPath",
            "spec.template.spec.containers[0].ports[0].hostPort",
            "spec.template.spec.containers[0].securityContext.privileged",
            "spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation",
            "spec.template.spec.containers[0].securityContext.runAsNonRoot",
            "spec.template.spec.containers[0].securityContext.capabilities.add: SYS_ADMIN",
            "spec.template.spec.containers[0].securityContext.seccompProfile.type",
        ] {
            assert!(
                v.iter().any(|m| m.starts_with(field)),
                "{field} not in {v:#?}"
            );
        }
        assert_eq!(v.len(), 12, "{v:#?}");
    }

    #[test]
    fn a_user_the_template_names_is_kept_and_net_bind_service_may_stay() {
        let mut spec = json!({"containers": [{
            "name": "c", "image": "x",
            "securityContext": {"runAsUser": 1000, "capabilities": {"add": ["NET_BIND_SERVICE"]}},
        }]});
        assert!(violations(&spec, AT).is_empty());
        harden(&mut spec);
        assert!(spec["securityContext"].get("runAsUser").is_none());
        assert_eq!(spec["containers"][0]["securityContext"]["runAsUser"], 1000);
        assert_eq!(
            spec["containers"][0]["securityContext"]["capabilities"]["add"],
            json!(["NET_BIND_SERVICE"])
        );
    }

    #[test]
    fn hardening_odd_json_never_panics() {
        for mut spec in [
            json!(null),
            json!([]),
            json!({"securityContext": 5, "containers": [1, {"securityContext": "x"}]}),
        ] {
            let _ = violations(&spec, AT);
            harden(&mut spec);
        }
    }
}
