//! Health rules: a template says what healthy means for its kind. A CEL
//! rule over a custom kind's `status.phase` decides Ready as the remote
//! operator moves the phase; a rule that cannot be evaluated is a
//! condition and a Warning event naming it, and the resource-controller
//! keeps running; a CEL rule without an expression is refused by the API
//! server.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    api::{ApiResource, DynamicObject},
    core::GroupVersionKind,
};

use super::*;

/// A namespaced kind `Database` of `group` in the remote cluster, with a
/// status its operator (here, the test) writes.
async fn database_kind(remote: &Client, group: &str) -> ApiResource {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("databases.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "Database", "plural": "databases", "singular": "database", "listKind": "DatabaseList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    }))
    .unwrap();
    let crds = Api::<CustomResourceDefinition>::all(remote.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let name = format!("databases.{group}");
    wait::wait(WAIT, "the Database CRD to be established", || async {
        crds.get_opt(&name)
            .await
            .ok()
            .flatten()
            .filter(runtime::crds::established)
    })
    .await;
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", "Database"), "databases")
}

/// Waits until resource `name`'s Ready condition has `status` and a
/// message containing `says`; returns (reason, message).
async fn wait_ready(s: &Setup, name: &str, status: &str, says: &str) -> (String, String) {
    wait::wait(
        WAIT,
        &format!("resource {name} Ready={status} saying {says:?}"),
        || async {
            let res = get_res(&s.client, &s.ns, name).await?;
            let conds = res
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default();
            let ready = condition(&conds, "Ready")?;
            let message = ready.message.clone().unwrap_or_default();
            (ready.status == status && message.contains(says))
                .then(|| (ready.reason.clone().unwrap_or_default(), message))
        },
    )
    .await
}

#[tokio::test]
async fn a_cel_health_rule_decides_ready_from_the_remote_objects_phase() {
    let s = with_target("health").await;
    let group = format!("{}.health.e2e.crossplane-rs.io", s.rns);
    let databases = database_kind(&s.remote, &group).await;
    let template = json!({
        "metadata": {"name": "db"},
        "spec": {
            "template": {
                "apiVersion": format!("{group}/v1"), "kind": "Database",
                "metadata": {"name": "orders", "namespace": s.rns},
                "spec": {"size": 1},
            },
            "healthRules": [{
                "type": "CEL",
                "expression": "object.status.phase == 'Running'",
                "messageExpression": "'phase is ' + object.status.phase",
            }],
        },
    });
    apply_app(
        &s.client,
        &s.ns,
        app(
            "app",
            &s.ns,
            json!({"matchLabels": {"c": "1"}}),
            json!([template]),
        ),
    )
    .await;
    // No status yet: not healthy, and not the rule's fault.
    let (reason, _) = wait_ready(&s, "db", "False", "does not have: status").await;
    assert_eq!(reason, "Unavailable");
    // The remote operator moves the phase; Ready follows it.
    let remote = Api::<DynamicObject>::namespaced_with(s.remote.clone(), &s.rns, &databases);
    for (phase, ready, says) in [
        ("Pending", "False", "phase is Pending"),
        ("Running", "True", ""),
        ("Degraded", "False", "phase is Degraded"),
    ] {
        remote
            .patch_status(
                "orders",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": phase}})),
            )
            .await
            .unwrap();
        wait_ready(&s, "db", ready, says).await;
        // The application's Ready follows its resource's.
        wait::wait(WAIT, &format!("the application Ready={ready}"), || async {
            let app = get_app(&s.client, &s.ns, "app").await?;
            let conds = app.status.map(|s| s.conditions).unwrap_or_default();
            (condition(&conds, "Ready")?.status == ready).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn a_health_rule_that_cannot_be_evaluated_is_a_condition_and_an_event_never_a_crash() {
    let mut s = with_target("health-bad").await;
    let rule = |expression: &str| json!({"type": "CEL", "expression": expression});
    let mut malformed = configmap_template("malformed", &s.rns, "malformed", json!({"x": "1"}));
    malformed["spec"]["healthRules"] = json!([rule("object.data.x ==")]);
    // Loops in loops could run for as long as the object is big: refused.
    let mut runaway = configmap_template("runaway", &s.rns, "runaway", json!({"x": "1", "y": "2"}));
    runaway["spec"]["healthRules"] = json!([
        {"type": "WellKnown"},
        rule("object.data.all(k, object.data.all(j, k == j || k != j))"),
    ]);
    apply_app(
        &s.client,
        &s.ns,
        app(
            "app",
            &s.ns,
            json!({"matchLabels": {"c": "1"}}),
            json!([malformed, runaway]),
        ),
    )
    .await;
    for name in ["malformed", "runaway"] {
        let (reason, message) = wait_ready(&s, name, "False", "healthRules[").await;
        assert_eq!(reason, "HealthRuleFailed", "{message}");
        let at = if name == "runaway" {
            "healthRules[1]: "
        } else {
            "healthRules[0]: "
        };
        assert!(message.starts_with(at), "{message}");
        // Delivered all the same: the rule judges health, not delivery.
        let res = get_res(&s.client, &s.ns, name).await.unwrap();
        assert_eq!(state_of_res(&res), "Submitted");
        // A Warning event names the rule.
        let events = wait::wait(WAIT, "a HealthRuleFailed event", || async {
            let list = Api::<Event>::namespaced(s.client.clone(), &s.ns)
                .list(&ListParams::default())
                .await
                .ok()?;
            list.items.into_iter().find(|e| {
                e.involved_object.name.as_deref() == Some(name)
                    && e.reason.as_deref() == Some("HealthRuleFailed")
            })
        })
        .await;
        assert_eq!(events.type_.as_deref(), Some("Warning"));
        assert!(events.message.unwrap_or_default().starts_with(at));
    }
    // The resource-controller never stopped.
    assert!(
        matches!(s.controllers.resource.child.try_wait(), Ok(None)),
        "the resource-controller exited:\n{}",
        s.controllers.resource.log()
    );
    // A CEL rule without an expression never reaches a controller.
    let mut empty = configmap_template("empty", &s.rns, "empty", json!({}));
    empty["spec"]["healthRules"] = json!([{"type": "CEL"}]);
    let refused = Api::<KubernetesApplication>::namespaced(s.client.clone(), &s.ns)
        .patch(
            "refused",
            &ssa(),
            &Patch::Apply(app("refused", &s.ns, json!({}), json!([empty]))),
        )
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("a CEL health rule needs an expression"),
        "{refused}"
    );
}
