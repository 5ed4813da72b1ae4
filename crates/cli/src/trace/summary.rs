//! Each kind's node from its JSON: which condition says it works, what its
//! own state is, and which details `-o wide` shows. Pure functions of the
//! object the API server returned.

use serde_json::Value;
use types::pkg::contract::conditions::{HEALTHY, INSTALLED, RBAC_READY, RUNTIME_HEALTHY};

use crate::node::{Node, scalar, text};

/// A Provider: Healthy, and Installed as its state.
pub fn provider(p: &Value) -> Node {
    let mut n = Node::of(p, HEALTHY);
    n.state = n.condition_state(INSTALLED);
    n.detail("package", text(p, "/spec/package"));
    n.detail("currentRevision", text(p, "/status/currentRevision"));
    n.detail("currentIdentifier", text(p, "/status/currentIdentifier"));
    n.detail("resolvedPackage", text(p, "/status/resolvedPackage"));
    n.detail("imageConfigs", image_configs(p));
    n
}

/// The ImageConfigs applied to a package (`status.appliedImageConfigRefs`),
/// as `name(reason)`, comma-separated.
fn image_configs(o: &Value) -> Option<String> {
    let applied: Vec<String> = o
        .pointer("/status/appliedImageConfigRefs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let name = text(r, "/name")?;
            Some(match text(r, "/reason") {
                Some(why) => format!("{name}({why})"),
                None => name,
            })
        })
        .collect();
    Some(applied.join(","))
}

/// A ProviderRevision: ready when Healthy and, if it has a runtime,
/// RuntimeHealthy (as `ProviderRevision::healthy` decides); Active or
/// Inactive as its state.
pub fn revision(r: &Value) -> Node {
    let mut n = Node::of(r, HEALTHY);
    if n.ready.as_deref() == Some("True") && text(r, "/spec/image").is_some() {
        let runtime = n.condition(RUNTIME_HEALTHY).map(|c| c.status.clone());
        n.ready = Some(runtime.unwrap_or_else(|| "Unknown".to_owned()));
    }
    n.state = text(r, "/spec/desiredState");
    n.detail("revision", scalar(r, "/spec/revision"));
    n.detail("image", text(r, "/spec/image"));
    n.detail("package", text(r, "/spec/package"));
    n.detail("resolvedPackage", text(r, "/status/resolvedPackage"));
    n.detail("resolvedImage", text(r, "/status/resolvedImage"));
    n.detail("imageConfigs", image_configs(r));
    n.detail("rbac", n.condition(RBAC_READY).map(|c| c.status.clone()));
    n
}

/// A CRD: Established; its state says whether `owner` (a UID) controls it
/// or only owns it.
/// A ManagedResourceDefinition: ready when Established (its CRD served);
/// its state (Active, Inactive) and its kind.
pub fn mrd(m: &Value) -> Node {
    let mut n = Node::of(m, "Established");
    n.state = Some(text(m, "/spec/state").unwrap_or_else(|| "Inactive".to_owned()));
    n.detail("group", text(m, "/spec/group"));
    n.detail("kind", text(m, "/spec/names/kind"));
    n
}

pub fn crd(c: &Value, owner: Option<&str>) -> Node {
    let mut n = Node::of(c, "Established");
    let refs = c
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mine = refs
        .iter()
        .find(|o| owner.is_some() && o.get("uid").and_then(Value::as_str) == owner);
    n.state = mine.map(|o| {
        if o.get("controller").and_then(Value::as_bool) == Some(true) {
            "controlled".to_owned()
        } else {
            "owned".to_owned()
        }
    });
    n.detail("group", text(c, "/spec/group"));
    n.detail("kind", text(c, "/spec/names/kind"));
    let versions: Vec<String> = c
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| text(v, "/name"))
        .collect();
    n.detail("versions", Some(versions.join(",")));
    n
}

/// A Deployment: Available; `ready/wanted` replicas as its state.
pub fn deployment(d: &Value) -> Node {
    let mut n = Node::of(d, "Available");
    let want = d
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let ready = d
        .pointer("/status/readyReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    n.state = Some(format!("{ready}/{want} ready"));
    n.detail("image", images(d.pointer("/spec/template/spec/containers")));
    n
}

/// The images of `containers`, comma-separated.
fn images(containers: Option<&Value>) -> Option<String> {
    let all: Vec<String> = containers
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| text(c, "/image"))
        .collect();
    Some(all.join(","))
}

/// A pod: Ready; its state is the reason a container waits (ErrImagePull,
/// ImagePullBackOff, CrashLoopBackOff), else its phase, and its message
/// the container's message.
pub fn pod(p: &Value) -> Node {
    let mut n = Node::of(p, "Ready");
    let statuses: Vec<&Value> = ["/status/initContainerStatuses", "/status/containerStatuses"]
        .iter()
        .filter_map(|ptr| p.pointer(ptr).and_then(Value::as_array))
        .flatten()
        .collect();
    let waiting = statuses.iter().find_map(|s| {
        let w = s.pointer("/state/waiting")?;
        let reason = text(w, "/reason")?;
        let name = text(s, "/name").unwrap_or_default();
        let message = text(w, "/message").unwrap_or_else(|| reason.clone());
        Some((reason, format!("container {name}: {message}")))
    });
    let restarts: i64 = statuses
        .iter()
        .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
        .sum();
    if let Some((reason, message)) = waiting {
        n.state = Some(reason);
        n.message = Some(message);
    } else if p.pointer("/metadata/deletionTimestamp").is_some() {
        n.state = Some("Terminating".into());
    } else {
        n.state = text(p, "/status/phase");
    }
    n.detail("image", images(p.pointer("/spec/containers")));
    n.detail("restarts", Some(restarts.to_string()).filter(|r| r != "0"));
    n.detail("node", text(p, "/spec/nodeName"));
    n
}

/// A ClusterRole: its rule count, and the user roles it aggregates to.
pub fn cluster_role(r: &Value) -> Node {
    let mut n = Node::of(r, "");
    let rules = r.get("rules").and_then(Value::as_array).map_or(0, Vec::len);
    n.state = Some(match rules {
        1 => "1 rule".to_owned(),
        n => format!("{n} rules"),
    });
    let to: Vec<String> = r
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, v)| v.as_str() == Some("true"))
        .filter_map(|(k, _)| k.strip_prefix("rbac.crossplane.io/aggregate-to-"))
        .map(|to| format!("crossplane-{to}"))
        .collect();
    n.detail("aggregatesTo", Some(to.join(",")));
    n
}

/// A ClusterRoleBinding: the role it binds, to whom.
pub fn binding(b: &Value) -> Node {
    let mut n = Node::of(b, "");
    // The role is a detail: its name is as long as the binding's, which
    // the tree already shows.
    n.state = Some("bound".to_owned());
    n.detail("role", text(b, "/roleRef/name"));
    let subjects: Vec<String> = b
        .get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| {
            let name = text(s, "/name").unwrap_or_default();
            match text(s, "/namespace") {
                Some(ns) => format!("{}:{ns}/{name}", text(s, "/kind").unwrap_or_default()),
                None => format!("{}:{name}", text(s, "/kind").unwrap_or_default()),
            }
        })
        .collect();
    n.detail("subjects", Some(subjects.join(",")));
    n
}

/// A KubernetesApplication: Ready; its state (Pending … Submitted).
pub fn application(a: &Value) -> Node {
    let mut n = Node::of(a, "Ready");
    n.state = text(a, "/status/state");
    n.detail("cluster", text(a, "/status/clusterRef/name"));
    n.detail("desired", scalar(a, "/status/desiredResources"));
    n.detail("submitted", scalar(a, "/status/submittedResources"));
    n
}

/// A KubernetesCluster.
pub fn cluster(c: &Value) -> Node {
    let mut n = Node::of(c, "Ready");
    n.state = text(c, "/status/state").or_else(|| n.condition_state("Synced"));
    n
}

/// A KubernetesApplicationResource: Ready; its state (Submitted, Failed).
pub fn resource(r: &Value) -> Node {
    let mut n = Node::of(r, "Ready");
    n.state = text(r, "/status/state");
    n.detail("cluster", text(r, "/spec/clusterRef/name"));
    // How it writes and deletes, when not the default (status.delivery).
    if let Some(d) = r.pointer("/status/delivery") {
        let ignored: Vec<String> = d
            .get("ignoredFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(str::to_owned))
            .collect();
        let write = text(d, "/writeStrategy").map(|w| match ignored.is_empty() {
            true => w,
            false => format!("{w} ignoring {}", ignored.join(", ")),
        });
        n.detail("write", write);
        n.detail("deletion", text(d, "/deletionPolicy"));
    }
    n.detail("drift", drift(r));
    n
}

/// "3 in the last hour, last spec.replicas by kubectl-edit", from a
/// resource's or an Object's status.drift.
pub fn drift(r: &Value) -> Option<String> {
    let d = r.pointer("/status/drift")?;
    let count = d.get("correctionsInLastHour").and_then(Value::as_i64)?;
    let paths: Vec<&str> = d
        .get("paths")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut out = format!("{count} corrected in the last hour");
    if !paths.is_empty() {
        out.push_str(&format!(", last {}", paths.join(", ")));
    }
    if let Some(m) = text(d, "/manager") {
        out.push_str(&format!(" by {m}"));
    }
    Some(out)
}

/// The remote object a KubernetesApplicationResource submitted, as the
/// control cluster records it: the template's identity, the resource's
/// state, and readiness from the remote status it copied
/// (`status.remote`). The remote cluster itself is never read.
pub fn remote(r: &Value) -> Node {
    let t = r.pointer("/spec/template").cloned().unwrap_or(Value::Null);
    let remote = r.pointer("/status/remote").cloned();
    let mut n = Node::unread(
        &text(&t, "/apiVersion").unwrap_or_default(),
        &text(&t, "/kind").unwrap_or_default(),
        &text(&t, "/metadata/name").unwrap_or_default(),
        text(&t, "/metadata/namespace").as_deref(),
    );
    n.detail("cluster", text(r, "/spec/clusterRef/name"));
    n.state = text(r, "/status/state");
    match &remote {
        Some(status) => {
            let wrapped = serde_json::json!({"status": status});
            let probe = Node::of(&wrapped, "Ready");
            n.conditions = probe.conditions.clone();
            n.ready = remote_ready(&probe, status);
            n.message = probe.message;
            n.detail("phase", text(status, "/phase"));
            n.detail("replicas", replicas(status));
        }
        // Feedback rules: the values brought back, readiness from the
        // resource's own Ready.
        None if r.pointer("/status/feedback").is_some() => {
            let own = Node::of(r, "Ready");
            n.ready = own.ready;
            n.message = own.message;
            let values = r.pointer("/status/feedback").and_then(Value::as_array);
            for v in values.into_iter().flatten() {
                let (Some(name), Some(fv)) = (text(v, "/name"), v.get("fieldValue")) else {
                    continue;
                };
                let value = ["/integer", "/string", "/boolean", "/jsonRaw"]
                    .iter()
                    .find_map(|p| scalar(fv, p));
                n.detail(&name, value);
            }
        }
        None => {
            n.message = match n.state.as_deref() {
                Some("Submitted") => Some("submitted; the remote kind reports no status".into()),
                // The resource's own condition says why it was not.
                Some("Failed") => Node::of(r, "Ready")
                    .message
                    .map(|m| format!("not submitted: {m}")),
                _ => Some("not in the remote cluster yet (no remote status recorded)".into()),
            };
        }
    }
    n
}

/// Readiness of a remote object from its status: a Ready or Available
/// condition, else its replicas, else a phase that means running.
fn remote_ready(probe: &Node, status: &Value) -> Option<String> {
    if let Some(c) = probe.condition("Ready").or(probe.condition("Available")) {
        return Some(c.status.clone());
    }
    let number = |k: &str| status.get(k).and_then(Value::as_i64);
    if let Some(want) = number("replicas") {
        let ready = number("readyReplicas").unwrap_or(0);
        return Some(if ready >= want { "True" } else { "False" }.to_owned());
    }
    text(status, "/phase").map(|p| {
        if ["Running", "Active", "Bound", "Succeeded"].contains(&p.as_str()) {
            "True".to_owned()
        } else {
            "False".to_owned()
        }
    })
}

fn replicas(status: &Value) -> Option<String> {
    let want = scalar(status, "/replicas")?;
    let ready = scalar(status, "/readyReplicas").unwrap_or_else(|| "0".into());
    Some(format!("{ready}/{want}"))
}

/// An ExtensionRequest: Ready; what it asked for.
pub fn extension_request(r: &Value) -> Node {
    let mut n = Node::of(r, "Ready");
    n.state = n.condition_state("Ready");
    n.detail("package", text(r, "/spec/package"));
    n.detail("crd", text(r, "/spec/crd"));
    n.detail("source", text(r, "/spec/source"));
    n
}

/// An Extension: Ready; its version, and RBACReady.
pub fn extension(e: &Value) -> Node {
    let mut n = Node::of(e, "Ready");
    n.state = text(e, "/spec/version");
    n.detail("rbac", n.condition(RBAC_READY).map(|c| c.status.clone()));
    n.detail("title", text(e, "/spec/title"));
    n
}

/// An Object (or any managed resource): Ready; Synced as its state.
pub fn managed_resource(o: &Value) -> Node {
    let mut n = Node::of(o, "Ready");
    n.state = n.condition_state("Synced");
    n.detail("providerConfig", text(o, "/spec/providerConfigRef/name"));
    n.detail("policy", text(o, "/spec/managementPolicy"));
    n.detail("drift", drift(o));
    n
}

/// Any object read as a reference: Ready (or Available, Established) when
/// it has such a condition, Synced as its state.
pub fn any(o: &Value) -> Node {
    let mut n = Node::of(o, "Ready");
    for other in ["Available", "Established", HEALTHY] {
        if n.ready.is_none() {
            n.ready = n.condition(other).map(|c| c.status.clone());
        }
    }
    n.state = n
        .condition_state("Synced")
        .or_else(|| text(o, "/status/phase"));
    n
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_resource_shows_how_it_writes_its_drift_and_its_feedback() {
        let r = json!({
            "apiVersion": "workload.crossplane.io/v1alpha1", "kind": "KubernetesApplicationResource",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"clusterRef": {"name": "c"}, "template": {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "w"}}},
            "status": {
                "state": "Submitted",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
                "delivery": {"writeStrategy": "ServerSideApply", "ignoredFields": ["spec.replicas"], "deletionPolicy": "Orphan"},
                "drift": {"correctionsInLastHour": 3, "paths": ["spec.template.spec.containers[0].image"], "manager": "kubectl-edit"},
                "feedback": [{"name": "ReadyReplicas", "fieldValue": {"type": "Integer", "integer": 2}}],
            },
        });
        let n = resource(&r);
        assert_eq!(n.details["write"], "ServerSideApply ignoring spec.replicas");
        assert_eq!(n.details["deletion"], "Orphan");
        assert_eq!(
            n.details["drift"],
            "3 corrected in the last hour, last spec.template.spec.containers[0].image by kubectl-edit"
        );
        let remote = remote(&r);
        assert_eq!(remote.ready.as_deref(), Some("True"));
        assert_eq!(remote.details["ReadyReplicas"], "2");
    }

    #[test]
    fn a_pod_that_cannot_pull_says_why_in_its_state_and_message() {
        let p = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p-1", "namespace": "crossplane-system"},
            "spec": {"containers": [{"name": "package-runtime", "image": "r/no-such:v1"}]},
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
                "containerStatuses": [{"name": "package-runtime", "restartCount": 0,
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"r/no-such:v1\""}}}],
            },
        });
        let n = pod(&p);
        assert_eq!(n.state.as_deref(), Some("ImagePullBackOff"));
        assert_eq!(n.ready.as_deref(), Some("False"));
        assert!(
            n.message
                .as_deref()
                .is_some_and(|m| m.contains("Back-off pulling"))
        );
        assert_eq!(n.details["image"], "r/no-such:v1");
    }

    #[test]
    fn a_running_pod_shows_its_phase() {
        let p = json!({"kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "restartCount": 2, "state": {"running": {}}}]}});
        let n = pod(&p);
        assert_eq!(
            (n.state.as_deref(), n.ready.as_deref()),
            (Some("Running"), Some("True"))
        );
        assert_eq!(n.details["restarts"], "2");
        assert_eq!(n.message, None);
    }

    #[test]
    fn a_crd_is_controlled_by_the_active_revision_and_owned_by_others() {
        let c = json!({"kind": "CustomResourceDefinition", "metadata": {"name": "gears.x.io",
            "ownerReferences": [{"uid": "a", "controller": true}, {"uid": "b"}]},
            "spec": {"group": "x.io", "names": {"kind": "Gear"},
                "versions": [{"name": "v1", "served": true}, {"name": "v0", "served": false}]}});
        assert_eq!(crd(&c, Some("a")).state.as_deref(), Some("controlled"));
        assert_eq!(crd(&c, Some("b")).state.as_deref(), Some("owned"));
        assert_eq!(crd(&c, Some("z")).state, None);
        assert_eq!(crd(&c, None).details["versions"], "v1");
    }

    #[test]
    fn a_remote_object_is_ready_by_its_recorded_status_only() {
        let r = |remote: Option<Value>| {
            let mut r = json!({"kind": "KubernetesApplicationResource",
                "metadata": {"name": "wp", "namespace": "app"},
                "spec": {"clusterRef": {"name": "c1"}, "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "wordpress", "namespace": "wp"}}},
                "status": {"state": "Submitted"}});
            if let Some(s) = remote {
                r["status"]["remote"] = s;
            }
            remote_node(&r)
        };
        fn remote_node(r: &Value) -> Node {
            remote(r)
        }
        let ready = r(Some(json!({"replicas": 1, "readyReplicas": 1,
            "conditions": [{"type": "Available", "status": "True"}]})));
        assert_eq!(ready.title(), "Deployment/wordpress");
        assert_eq!(ready.namespace.as_deref(), Some("wp"));
        assert_eq!(ready.ready.as_deref(), Some("True"));
        assert_eq!(ready.details["cluster"], "c1");
        assert_eq!(ready.state.as_deref(), Some("Submitted"));
        let scaling = r(Some(json!({"replicas": 2, "readyReplicas": 1})));
        assert_eq!(scaling.ready.as_deref(), Some("False"));
        assert_eq!(scaling.details["replicas"], "1/2");
        let bare = r(None);
        assert_eq!(bare.ready, None);
        assert!(bare.message.is_some_and(|m| m.contains("no status")));
        let mut failed = json!({"spec": {"template": {"kind": "Widget", "metadata": {"name": "w"}}},
            "status": {"state": "Failed", "conditions": [{"type": "Synced", "status": "False", "message": "no kind Widget"}]}});
        assert_eq!(
            remote(&failed).message.as_deref(),
            Some("not submitted: Synced: no kind Widget")
        );
        failed["status"]["state"] = json!("Pending");
        assert!(
            remote(&failed)
                .message
                .is_some_and(|m| m.contains("not in the remote cluster yet"))
        );
        let bound = r(Some(json!({"phase": "Bound"})));
        assert_eq!(bound.ready.as_deref(), Some("True"));
    }

    #[test]
    fn a_revision_shows_its_desired_state_and_image() {
        let r = json!({"apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision",
            "metadata": {"name": "p-1"},
            "spec": {"desiredState": "Active", "revision": 2, "image": "r/i:v1", "package": "r/p:v1"},
            "status": {"resolvedImage": "mirror/i:v1",
                "appliedImageConfigRefs": [{"name": "mirror", "reason": "RewriteImage"}, {"name": "creds", "reason": "SetImagePullSecret"}],
                "conditions": [{"type": "Healthy", "status": "True"},
                {"type": "RBACReady", "status": "False", "message": "refused: pods/exec"}]}});
        let n = revision(&r);
        assert_eq!(n.state.as_deref(), Some("Active"));
        assert_eq!(n.details["revision"], "2");
        assert_eq!(n.details["rbac"], "False");
        assert_eq!(n.ready.as_deref(), Some("Unknown"), "no RuntimeHealthy yet");
        let mut running = r.clone();
        if let Some(c) = running["status"]["conditions"].as_array_mut() {
            c.push(json!({"type": "RuntimeHealthy", "status": "False"}));
        }
        assert_eq!(revision(&running).ready.as_deref(), Some("False"));
        running["status"]["conditions"][2]["status"] = json!("True");
        assert_eq!(revision(&running).ready.as_deref(), Some("True"));
        running["spec"]["image"] = Value::Null;
        running["status"]["conditions"][2]["status"] = json!("False");
        assert_eq!(
            revision(&running).ready.as_deref(),
            Some("True"),
            "a package of CRDs alone runs nothing"
        );
        assert_eq!(n.details["resolvedImage"], "mirror/i:v1");
        assert_eq!(
            n.details["imageConfigs"],
            "mirror(RewriteImage),creds(SetImagePullSecret)"
        );
        assert_eq!(n.message.as_deref(), Some("RBACReady: refused: pods/exec"));
    }

    #[test]
    fn roles_say_what_they_aggregate_to_and_bindings_whom_they_bind() {
        let r = json!({"kind": "ClusterRole", "metadata": {"name": "r", "labels": {
            "rbac.crossplane.io/aggregate-to-view": "true", "other": "true"}},
            "rules": [{}, {}]});
        let n = cluster_role(&r);
        assert_eq!(n.state.as_deref(), Some("2 rules"));
        assert_eq!(n.details["aggregatesTo"], "crossplane-view");
        let b = json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"},
            "roleRef": {"name": "r"}, "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]});
        let n = binding(&b);
        assert_eq!(n.state.as_deref(), Some("bound"));
        assert_eq!(n.details["role"], "r");
        assert_eq!(n.details["subjects"], "ServiceAccount:ns/sa");
    }
}
