//! What a stack's controller Deployment may say, by list: the fields a
//! controller needs (containers with an image, command, args, literal
//! environment, ports, probes, resources within a bound, the security
//! fields "restricted" allows, emptyDir and projected-token volumes) and
//! nothing else. Anything more (a priority class, tolerations, node
//! pinning, other volumes, a Secret or ConfigMap the Extension's own role
//! does not let it read, more replicas than [`MAX_REPLICAS`]) is refused
//! naming the field, so install.yaml cannot schedule around other pods or
//! read what its identity may not.
//!
//! A field set to `null` is unset: [`without_nulls`] drops them before any
//! check, so what is checked and hardened is what runs.
//!
//! Pure functions over the Deployment spec as JSON.

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::Value;

/// The most replicas a stack's controller may ask for.
pub const MAX_REPLICAS: i64 = 3;
/// The most CPU (in millicores) one container may request or be limited to.
pub const MAX_CPU_MILLIS: u64 = 2000;
/// The most memory (in bytes) one container may request or be limited to.
pub const MAX_MEMORY_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// The fields of the Deployment spec.
const DEPLOYMENT: [&str; 7] = [
    "replicas",
    "selector",
    "template",
    "strategy",
    "minReadySeconds",
    "revisionHistoryLimit",
    "progressDeadlineSeconds",
];
/// The fields of the pod template.
const TEMPLATE: [&str; 2] = ["metadata", "spec"];
/// The fields of the pod spec. `serviceAccountName` is replaced by the
/// package-manager; the host fields and the security fields are
/// [`crate::podsecurity`]'s to judge (it refuses a host field set to true
/// with its own reason).
const POD: [&str; 15] = [
    "containers",
    "initContainers",
    "volumes",
    "securityContext",
    "serviceAccountName",
    "serviceAccount",
    "automountServiceAccountToken",
    "restartPolicy",
    "terminationGracePeriodSeconds",
    "dnsPolicy",
    "enableServiceLinks",
    "imagePullSecrets",
    "hostNetwork",
    "hostPID",
    "hostIPC",
];
/// The fields of a container.
const CONTAINER: [&str; 16] = [
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "workingDir",
    "env",
    "envFrom",
    "ports",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "resources",
    "securityContext",
    "volumeMounts",
    "terminationMessagePolicy",
];
/// The sources of a projected volume that hold no other identity's data.
const PROJECTED: [&str; 2] = ["serviceAccountToken", "downwardAPI"];
/// Pod-level `dnsPolicy` values that keep the pod on the cluster's DNS.
const DNS_POLICIES: [&str; 2] = ["ClusterFirst", "Default"];

/// `v` with every object member whose value is `null` removed, at any
/// depth: `runAsNonRoot: null` is unset, and is then hardened like any
/// other unset field.
pub fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, x)| !x.is_null())
                .map(|(k, x)| (k.clone(), without_nulls(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Whether `rules` (the Extension's `permissions.rules`, bound in its
/// namespace) let it `get` the core-group `resource` named `name`.
fn may_read(rules: &[PolicyRule], resource: &str, name: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups.iter().flatten().any(|g| g.is_empty())
            && r.resources.iter().flatten().any(|x| x == resource)
            && r.verbs.iter().any(|v| v == "get")
            && r.resource_names
                .as_ref()
                .is_none_or(|n| n.is_empty() || n.iter().any(|x| x == name))
    })
}

/// The items of the list at `key` of `v`, numbered (none when it is not a
/// list).
fn items<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// Refuses (at `at`) a reference to the core-group `resource` whose name is
/// at `name_key` of `reference`, unless `rules` let the Extension get it.
fn readable(
    rules: &[PolicyRule],
    at: &str,
    (resource, reference, name_key): (&str, &Value, &str),
    out: &mut Vec<String>,
) {
    let name = reference
        .get(name_key)
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !may_read(rules, resource, name) {
        out.push(format!(
            "{at}: its permissions do not let it get {resource} {name:?}"
        ));
    }
}

/// The members of `obj` (at `path`) that are not in `allowed`, each as a
/// refusal (short: a condition keeps 1 KiB, and one pod spec may have
/// several).
fn unknown(obj: &Value, path: &str, allowed: &[&str], out: &mut Vec<String>) {
    let Some(m) = obj.as_object() else { return };
    for k in m.keys() {
        if !allowed.contains(&k.as_str()) {
            out.push(format!(
                "{path}.{k}: not a field a stack's controller may set"
            ));
        }
    }
}

/// A quantity in its base unit times 1000 (millicores, or thousandths of a
/// byte), or `None` when it cannot be read.
fn milli(q: &Value) -> Option<u128> {
    let s = match q {
        Value::String(s) => s.trim().to_owned(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() {
        return None;
    }
    let frac3: String = frac.chars().chain("000".chars()).take(3).collect();
    let base: u128 = format!("{}{frac3}", if whole.is_empty() { "0" } else { whole })
        .parse()
        .ok()?;
    let factor: u128 = match suffix {
        "" => 1,
        "m" => return Some(base / 1000),
        "k" => 1000,
        "M" => 1000u128.pow(2),
        "G" => 1000u128.pow(3),
        "T" => 1000u128.pow(4),
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return None,
    };
    base.checked_mul(factor)
}

fn resources(r: &Value, path: &str, out: &mut Vec<String>) {
    unknown(r, path, &["requests", "limits"], out);
    for list in ["requests", "limits"] {
        let Some(m) = r.get(list).and_then(Value::as_object) else {
            continue;
        };
        for (name, q) in m {
            let (bound, shown) = match name.as_str() {
                "cpu" => (u128::from(MAX_CPU_MILLIS), "2 CPUs"),
                "memory" => (u128::from(MAX_MEMORY_BYTES) * 1000, "2Gi"),
                "ephemeral-storage" => (u128::from(MAX_MEMORY_BYTES) * 1000, "2Gi"),
                _ => {
                    out.push(format!(
                        "{path}.{list}.{name}: only cpu, memory and ephemeral-storage may be asked for"
                    ));
                    continue;
                }
            };
            match milli(q) {
                Some(v) if v <= bound => {}
                Some(_) => out.push(format!("{path}.{list}.{name}: more than {shown}")),
                None => out.push(format!("{path}.{list}.{name}: not a quantity")),
            }
        }
    }
}

fn env(c: &Value, path: &str, rules: &[PolicyRule], out: &mut Vec<String>) {
    for (i, e) in items(c, "env") {
        let at = format!("{path}.env[{i}]");
        unknown(e, &at, &["name", "value", "valueFrom"], out);
        let Some(from) = e.get("valueFrom") else {
            continue;
        };
        for (key, resource) in [
            ("secretKeyRef", "secrets"),
            ("configMapKeyRef", "configmaps"),
        ] {
            if let Some(r) = from.get(key) {
                readable(
                    rules,
                    &format!("{at}.valueFrom.{key}"),
                    (resource, r, "name"),
                    out,
                );
            }
        }
        unknown(
            from,
            &format!("{at}.valueFrom"),
            &[
                "secretKeyRef",
                "configMapKeyRef",
                "fieldRef",
                "resourceFieldRef",
            ],
            out,
        );
    }
    for (i, e) in items(c, "envFrom") {
        let at = format!("{path}.envFrom[{i}]");
        unknown(e, &at, &["prefix", "secretRef", "configMapRef"], out);
        for (key, resource) in [("secretRef", "secrets"), ("configMapRef", "configmaps")] {
            if let Some(r) = e.get(key) {
                readable(rules, &format!("{at}.{key}"), (resource, r, "name"), out);
            }
        }
    }
}

fn volumes(pod: &Value, path: &str, rules: &[PolicyRule], out: &mut Vec<String>) {
    for (i, v) in items(pod, "volumes") {
        let at = format!("{path}.volumes[{i}]");
        let Some(m) = v.as_object() else { continue };
        for (key, source) in m.iter().filter(|(k, _)| *k != "name") {
            match key.as_str() {
                "emptyDir" => {}
                "projected" => {
                    for (j, s) in items(source, "sources") {
                        unknown(s, &format!("{at}.projected.sources[{j}]"), &PROJECTED, out);
                    }
                }
                "secret" => readable(rules, &format!("{at}.{key}"), ("secrets", source, "secretName"), out),
                "configMap" => readable(rules, &format!("{at}.{key}"), ("configmaps", source, "name"), out),
                // hostPath and the like: crate::podsecurity names them.
                other if !crate::podsecurity::ALLOWED_VOLUMES.contains(&other) => {}
                _ => out.push(format!(
                    "{at}.{key}: a stack's controller may mount only emptyDir, projected service-account tokens, and Secrets or ConfigMaps its permissions let it read"
                )),
            }
        }
    }
}

/// Every field of `spec` (a DeploymentSpec, nulls already dropped, at
/// `path`: `spec.controller.deployment.spec`) that a stack's controller may
/// not set, given the Extension's `rules`; each names the field.
pub fn refusals(spec: &Value, path: &str, rules: &[PolicyRule]) -> Vec<String> {
    let mut out = Vec::new();
    unknown(spec, path, &DEPLOYMENT, &mut out);
    if let Some(r) = spec.get("replicas")
        && r.as_i64().is_none_or(|n| !(0..=MAX_REPLICAS).contains(&n))
    {
        out.push(format!(
            "{path}.replicas: at most {MAX_REPLICAS} replicas of a stack's controller"
        ));
    }
    let Some(template) = spec.get("template") else {
        return out;
    };
    unknown(template, &format!("{path}.template"), &TEMPLATE, &mut out);
    let Some(pod) = template.get("spec") else {
        return out;
    };
    let at = format!("{path}.template.spec");
    unknown(pod, &at, &POD, &mut out);
    if let Some(d) = pod.get("dnsPolicy").and_then(Value::as_str)
        && !DNS_POLICIES.contains(&d)
    {
        out.push(format!(
            "{at}.dnsPolicy: only {}",
            DNS_POLICIES.join(" or ")
        ));
    }
    for (i, s) in items(pod, "imagePullSecrets") {
        readable(
            rules,
            &format!("{at}.imagePullSecrets[{i}]"),
            ("secrets", s, "name"),
            &mut out,
        );
    }
    volumes(pod, &at, rules, &mut out);
    for list in ["initContainers", "containers"] {
        for (i, c) in items(pod, list) {
            let cp = format!("{at}.{list}[{i}]");
            unknown(c, &cp, &CONTAINER, &mut out);
            if let Some(r) = c.get("resources") {
                resources(r, &format!("{cp}.resources"), &mut out);
            }
            env(c, &cp, rules, &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::json;

    use super::*;

    const AT: &str = "spec.controller.deployment.spec";

    fn spec(pod: Value) -> Value {
        json!({"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
               "template": {"metadata": {"labels": {"app": "x"}}, "spec": pod}})
    }

    fn plain() -> Value {
        json!({"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}],
               "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}}}]})
    }

    fn read_secret(name: Option<&str>) -> PolicyRule {
        PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".into(), "configmaps".into()]),
            resource_names: name.map(|n| vec![n.to_owned()]),
            verbs: vec!["get".into()],
            ..Default::default()
        }
    }

    #[test]
    fn what_a_controller_needs_passes() {
        assert!(refusals(&spec(plain()), AT, &[]).is_empty());
        let mut pod = plain();
        pod["volumes"] = json!([{"name": "tmp", "emptyDir": {}},
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]);
        assert!(refusals(&spec(pod), AT, &[]).is_empty());
    }

    #[test]
    fn each_field_that_schedules_around_others_or_reads_a_neighbour_is_named() {
        let cases: &[(&str, Value, &str)] = &[
            (
                "priority",
                json!({"priorityClassName": "system-node-critical"}),
                "template.spec.priorityClassName",
            ),
            (
                "tolerations",
                json!({"tolerations": [{"operator": "Exists"}]}),
                "template.spec.tolerations",
            ),
            (
                "node name",
                json!({"nodeName": "n"}),
                "template.spec.nodeName",
            ),
            (
                "node selector",
                json!({"nodeSelector": {"a": "b"}}),
                "template.spec.nodeSelector",
            ),
            (
                "a neighbour's Secret as a volume",
                json!({"volumes": [{"name": "s", "secret": {"secretName": "theirs"}}]}),
                "template.spec.volumes[0].secret",
            ),
            (
                "a claim",
                json!({"volumes": [{"name": "s", "persistentVolumeClaim": {"claimName": "theirs"}}]}),
                "template.spec.volumes[0].persistentVolumeClaim",
            ),
            (
                "a projected Secret",
                json!({"volumes": [{"name": "s", "projected": {"sources": [{"secret": {"name": "theirs"}}]}}]}),
                "template.spec.volumes[0].projected.sources[0].secret",
            ),
        ];
        for (name, extra, field) in cases {
            let mut pod = plain();
            for (k, v) in extra.as_object().unwrap() {
                pod[k] = v.clone();
            }
            let r = refusals(&spec(pod), AT, &[]);
            assert!(
                r.iter().any(|m| m.starts_with(&format!("{AT}.{field}"))),
                "{name}: {r:?}"
            );
        }
    }

    #[test]
    fn secret_and_config_map_references_need_the_extensions_own_read_right() {
        let mut pod = plain();
        pod["containers"][0]["env"] =
            json!([{"name": "P", "valueFrom": {"secretKeyRef": {"name": "theirs", "key": "k"}}}]);
        pod["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "cm"}}]);
        let r = refusals(&spec(pod.clone()), AT, &[]);
        assert!(
            r.iter()
                .any(|m| m.contains("containers[0].env[0].valueFrom.secretKeyRef")),
            "{r:?}"
        );
        assert!(
            r.iter()
                .any(|m| m.contains("containers[0].envFrom[0].configMapRef")),
            "{r:?}"
        );
        assert!(refusals(&spec(pod.clone()), AT, &[read_secret(None)]).is_empty());
        let only_mine = read_secret(Some("mine"));
        assert_eq!(refusals(&spec(pod), AT, &[only_mine]).len(), 2);
    }

    #[test]
    fn replicas_and_resources_are_bounded() {
        let mut s = spec(plain());
        s["replicas"] = json!(50);
        s["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("64");
        s["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("1Ti");
        let r = refusals(&s, AT, &[]);
        for field in [
            "replicas",
            "containers[0].resources.limits.cpu",
            "containers[0].resources.requests.memory",
        ] {
            assert!(r.iter().any(|m| m.contains(field)), "{field}: {r:?}");
        }
        assert_eq!(milli(&json!("1.5")), Some(1500));
        assert_eq!(milli(&json!("250m")), Some(250));
        assert_eq!(milli(&json!("2Gi")), Some(2 * 1024 * 1024 * 1024 * 1000));
        assert_eq!(milli(&json!("lots")), None);
    }

    #[test]
    fn a_null_is_unset() {
        let v = json!({"securityContext": {"runAsNonRoot": null, "runAsUser": null},
                       "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": null}}]});
        let w = without_nulls(&v);
        assert_eq!(
            w,
            json!({"securityContext": {}, "containers": [{"name": "c", "securityContext": {}}]})
        );
    }
}
