//! What an application wants: one KubernetesApplicationResource per
//! template, and what its status says. Pure functions of the application and
//! the resources that exist.

use std::collections::{BTreeMap, BTreeSet};

use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use types::workload::v1alpha1::{
    KubernetesApplication, KubernetesApplicationResource, KubernetesApplicationResourceState,
    KubernetesApplicationState, RESOURCE_FINALIZER,
};

/// The KubernetesApplicationResource one template asks for, as a
/// server-side-apply body, or why the template cannot be used.
pub fn resource_for(
    app: &KubernetesApplication,
    index: usize,
    cluster: &str,
) -> Result<(String, Value), String> {
    let template = &app.spec.resource_templates[index];
    let name = template
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            format!("spec.resourceTemplates[{index}].metadata.name is required: name the resource")
        })?;
    let owner = json!({
        "apiVersion": KubernetesApplication::api_version(&()),
        "kind": KubernetesApplication::kind(&()),
        "name": app.name_any(),
        "uid": app.uid().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let mut metadata = serde_json::Map::new();
    metadata.insert("name".to_owned(), json!(name));
    // The template's namespace is ignored: resources live with their
    // application, as ReplicaSets do with Deployments.
    metadata.insert(
        "namespace".to_owned(),
        json!(app.namespace().unwrap_or_default()),
    );
    metadata.insert("ownerReferences".to_owned(), json!([owner]));
    // The resource-controller's finalizer from the start: one request less
    // per resource than it adding it (it removes it once the remote
    // objects are gone).
    metadata.insert("finalizers".to_owned(), json!([RESOURCE_FINALIZER]));
    if let Some(labels) = &template.metadata.labels {
        metadata.insert("labels".to_owned(), json!(labels));
    }
    if let Some(annotations) = &template.metadata.annotations {
        metadata.insert("annotations".to_owned(), json!(annotations));
    }
    let mut spec = serde_json::Map::new();
    spec.insert("template".to_owned(), json!(template.spec.template));
    spec.insert("clusterRef".to_owned(), json!({"name": cluster}));
    if !template.spec.secrets.is_empty() {
        spec.insert("secrets".to_owned(), json!(template.spec.secrets));
    }
    if !template.spec.health_rules.is_empty() {
        spec.insert("healthRules".to_owned(), json!(template.spec.health_rules));
    }
    if !template.spec.feedback_rules.is_empty() {
        spec.insert(
            "feedbackRules".to_owned(),
            json!(template.spec.feedback_rules),
        );
    }
    if let Some(w) = &template.spec.write_strategy {
        spec.insert("writeStrategy".to_owned(), json!(w));
    }
    if let Some(d) = &template.spec.deletion_policy {
        spec.insert("deletionPolicy".to_owned(), json!(d));
    }
    Ok((
        name,
        json!({
            "apiVersion": KubernetesApplicationResource::api_version(&()),
            "kind": KubernetesApplicationResource::kind(&()),
            "metadata": metadata,
            "spec": spec,
        }),
    ))
}

/// Whether `res` is controlled by `app`.
pub fn controlled_by(res: &KubernetesApplicationResource, app: &KubernetesApplication) -> bool {
    controller_of(res).is_some_and(|o| app.metadata.uid.as_ref() == Some(&o.uid))
}

/// The UID of the application (or whatever else) that controls `res`, as
/// the index of resources by controller keeps it.
pub fn controller_uid(res: &KubernetesApplicationResource) -> BTreeSet<String> {
    controller_of(res)
        .map(|o| o.uid.clone())
        .into_iter()
        .collect()
}

/// The controller owner reference of `res`, if any.
pub fn controller_of(
    res: &KubernetesApplicationResource,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    res.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
}

/// What this controller keeps of a resource in its cache: its metadata,
/// its spec with the template as a digest (all it needs of the template is
/// whether it is the one a template asks for: [`up_to_date`]), and its
/// status without `status.remote` (the remote object's status, which it
/// never reads; the resource-controller holds it). A template is most of a
/// resource, and the application already holds it.
pub fn cached(res: &mut KubernetesApplicationResource) {
    res.spec.template = digest(&res.spec.template);
    if let Some(status) = res.status.as_mut() {
        status.remote = None;
    }
}

/// How a digest of a template begins. A template is an object (the CRD
/// says so), never a string, so a digest is never taken for a template.
const DIGEST: &str = "digest:";

/// A template's digest; a digest is its own. A template packed in the
/// application's cache ([`packed_templates`]) has the digest of the
/// template it packs.
fn digest(template: &Value) -> Value {
    match template.as_str() {
        Some(d) if d.starts_with(DIGEST) => template.clone(),
        _ => Value::String(format!("{DIGEST}{:016x}", runtime::packed::hash(template))),
    }
}

/// What this controller keeps of an application in its cache: every
/// template packed ([`runtime::packed`]); a reconcile compares them by
/// digest and unpacks only the ones it applies ([`unpacked_template`]).
pub fn packed_templates(app: &mut KubernetesApplication) {
    for t in &mut app.spec.resource_templates {
        runtime::packed::pack(&mut t.spec.template);
    }
}

/// A body from [`resource_for`] with its template unpacked, to apply.
pub fn unpacked_template(mut body: Value) -> Value {
    if let Some(template) = body.get_mut("spec").and_then(|s| s.get_mut("template")) {
        runtime::packed::unpack(template);
    }
    body
}

/// A spec with its template as a digest.
fn digested(spec: &serde_json::Map<String, Value>) -> serde_json::Map<String, Value> {
    spec.iter()
        .map(|(k, v)| match k.as_str() {
            "template" => (k.clone(), digest(v)),
            _ => (k.clone(), v.clone()),
        })
        .collect()
}

/// Whether the existing resource (as cached, or whole) already is what
/// `desired` asks for (so applying it would change nothing and can be
/// skipped). Templates are compared by digest.
pub fn up_to_date(existing: &KubernetesApplicationResource, desired: &Value) -> bool {
    let Ok(Value::Object(spec)) = serde_json::to_value(&existing.spec) else {
        return false;
    };
    let Some(want) = desired.get("spec").and_then(Value::as_object) else {
        return false;
    };
    let subset = |want: &Value, have: Option<&BTreeMap<String, String>>| match want.as_object() {
        None => true,
        Some(w) => w
            .iter()
            .all(|(k, v)| have.and_then(|h| h.get(k)).map(|s| json!(s)) == Some(v.clone())),
    };
    digested(&spec) == digested(want)
        && subset(
            &desired["metadata"]["labels"],
            existing.metadata.labels.as_ref(),
        )
        && subset(
            &desired["metadata"]["annotations"],
            existing.metadata.annotations.as_ref(),
        )
}

/// Names of resources controlled by the application that no template asks
/// for any more.
pub fn stale<'a>(
    owned: impl Iterator<Item = &'a KubernetesApplicationResource>,
    wanted: &BTreeSet<String>,
) -> Vec<String> {
    owned
        .map(ResourceExt::name_any)
        .filter(|n| !wanted.contains(n))
        .collect()
}

/// The application's state from its resources' states.
pub fn state(desired: usize, submitted: usize, failed: usize) -> KubernetesApplicationState {
    if submitted == desired {
        KubernetesApplicationState::Submitted
    } else if submitted > 0 {
        KubernetesApplicationState::PartiallySubmitted
    } else if failed > 0 {
        KubernetesApplicationState::Failed
    } else {
        KubernetesApplicationState::Scheduled
    }
}

/// The state `resources` (the application's) make, and how many of them
/// are submitted.
pub fn progress<'a>(
    app: &KubernetesApplication,
    resources: impl Iterator<Item = &'a KubernetesApplicationResource>,
) -> (KubernetesApplicationState, usize) {
    let (mut submitted, mut failed) = (0, 0);
    for r in resources {
        submitted += usize::from(self::submitted(r));
        failed += usize::from(self::failed(r));
    }
    (
        state(app.spec.resource_templates.len(), submitted, failed),
        submitted,
    )
}

/// Whether a resource counts as submitted.
pub fn submitted(res: &KubernetesApplicationResource) -> bool {
    res.status.as_ref().and_then(|s| s.state) == Some(KubernetesApplicationResourceState::Submitted)
}

/// Whether a resource is Ready (its remote object healthy).
pub fn ready(res: &KubernetesApplicationResource) -> bool {
    res.status.as_ref().is_some_and(|s| {
        runtime::conditions::is_true(&s.conditions, runtime::conditions::TYPE_READY)
    })
}

/// Whether a resource failed.
pub fn failed(res: &KubernetesApplicationResource) -> bool {
    res.status.as_ref().and_then(|s| s.state) == Some(KubernetesApplicationResourceState::Failed)
}

#[cfg(test)]
mod tests {
    use types::workload::v1alpha1::KubernetesApplicationSpec;

    use super::*;

    fn app() -> KubernetesApplication {
        let spec: KubernetesApplicationSpec = serde_json::from_value(json!({
            "resourceTemplates": [
                {"metadata": {"name": "ns", "namespace": "elsewhere", "labels": {"app": "demo"}},
                 "spec": {"template": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "wordpress"}}}},
                {"metadata": {"name": "dep"},
                 "spec": {"secrets": [{"name": "sql"}],
                          "template": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "wordpress", "namespace": "wordpress"}}}},
                {"metadata": {}, "spec": {"template": {"kind": "ConfigMap"}}}
            ]
        }))
        .unwrap();
        let mut app = KubernetesApplication::new("demo", spec);
        app.metadata.namespace = Some("complex".into());
        app.metadata.uid = Some("uid-1".into());
        app
    }

    #[test]
    fn a_resource_lives_in_the_applications_namespace_whatever_the_template_says() {
        let (name, body) = resource_for(&app(), 0, "c1").unwrap();
        assert_eq!(name, "ns");
        assert_eq!(body["metadata"]["namespace"], "complex");
        assert_eq!(body["metadata"]["labels"]["app"], "demo");
    }

    #[test]
    fn a_resource_is_controlled_by_its_application_and_sent_to_its_cluster() {
        let (_, body) = resource_for(&app(), 1, "c1").unwrap();
        let owner = &body["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], "uid-1");
        assert_eq!(owner["controller"], true);
        assert_eq!(owner["kind"], "KubernetesApplication");
        assert_eq!(body["spec"]["clusterRef"]["name"], "c1");
        assert_eq!(body["spec"]["secrets"][0]["name"], "sql");
        assert_eq!(body["spec"]["template"]["kind"], "Deployment");
        // Created with the resource-controller's finalizer: it need not
        // add it with a request of its own.
        assert_eq!(body["metadata"]["finalizers"], json!([RESOURCE_FINALIZER]));
    }

    #[test]
    fn an_application_cached_with_packed_templates_asks_for_the_same_resources() {
        let whole = app();
        let mut packed = whole.clone();
        packed_templates(&mut packed);
        assert!(packed.spec.resource_templates[1].spec.template.is_string());
        let (_, want) = resource_for(&whole, 1, "c1").unwrap();
        let (_, from_packed) = resource_for(&packed, 1, "c1").unwrap();
        // What is applied is the template itself.
        assert_eq!(unpacked_template(from_packed.clone()), want);
        // The resource as applied, and as this controller caches it, is up
        // to date with the body from the packed template, unapplied.
        let mut res: KubernetesApplicationResource = serde_json::from_value(want).unwrap();
        assert!(up_to_date(&res, &from_packed));
        cached(&mut res);
        assert!(up_to_date(&res, &from_packed));
        // A changed template is not.
        let mut changed = whole.clone();
        changed.spec.resource_templates[1].spec.template["metadata"]["name"] = json!("other");
        packed_templates(&mut changed);
        let (_, stale) = resource_for(&changed, 1, "c1").unwrap();
        assert!(!up_to_date(&res, &stale));
    }

    #[test]
    fn a_template_without_a_name_says_which_one() {
        let err = resource_for(&app(), 2, "c1").unwrap_err();
        assert_eq!(
            err,
            "spec.resourceTemplates[2].metadata.name is required: name the resource"
        );
    }

    #[test]
    fn an_existing_resource_that_matches_needs_no_write() {
        let (_, body) = resource_for(&app(), 1, "c1").unwrap();
        let mut res: KubernetesApplicationResource = serde_json::from_value(body.clone()).unwrap();
        assert!(up_to_date(&res, &body));
        res.spec.secrets.clear();
        assert!(!up_to_date(&res, &body));
    }

    #[test]
    fn a_cached_resource_keeps_a_digest_of_its_template_and_no_remote_status() {
        let (_, body) = resource_for(&app(), 1, "c1").unwrap();
        let mut res: KubernetesApplicationResource = serde_json::from_value(body.clone()).unwrap();
        res.status = serde_json::from_value(json!({
            "state": "Submitted", "remote": {"replicas": 3},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Available",
                            "lastTransitionTime": "2024-01-01T00:00:00Z"}],
        }))
        .unwrap();
        let whole = res.clone();
        cached(&mut res);
        assert!(
            res.spec
                .template
                .as_str()
                .is_some_and(|d| d.starts_with(DIGEST))
        );
        assert_eq!(
            (&res.spec.secrets, &res.spec.cluster_ref),
            (&whole.spec.secrets, &whole.spec.cluster_ref)
        );
        assert_eq!(res.metadata, whole.metadata);
        let (status, was) = (res.status.clone().unwrap(), whole.status.clone().unwrap());
        assert_eq!(status.remote, None);
        assert_eq!(
            (&status.state, &status.conditions),
            (&was.state, &was.conditions)
        );
        assert!(submitted(&res));
        // Trimming twice changes nothing.
        let once = res.spec.clone();
        cached(&mut res);
        assert_eq!(res.spec, once);
        // It tells an up-to-date resource from a stale one as the whole did.
        assert!(up_to_date(&res, &body));
        let mut changed = body.clone();
        changed["spec"]["template"]["spec"] = json!({"replicas": 2});
        assert!(!up_to_date(&res, &changed));
        assert!(!up_to_date(&whole, &changed));
        let mut moved = body.clone();
        moved["spec"]["clusterRef"]["name"] = json!("c2");
        assert!(!up_to_date(&res, &moved));
    }

    #[test]
    fn states_follow_the_counts() {
        assert_eq!(state(3, 3, 0), KubernetesApplicationState::Submitted);
        assert_eq!(
            state(3, 2, 1),
            KubernetesApplicationState::PartiallySubmitted
        );
        assert_eq!(state(3, 0, 1), KubernetesApplicationState::Failed);
        assert_eq!(state(3, 0, 0), KubernetesApplicationState::Scheduled);
    }

    #[test]
    fn resources_no_template_asks_for_are_stale() {
        let (_, a) = resource_for(&app(), 0, "c").unwrap();
        let (_, b) = resource_for(&app(), 1, "c").unwrap();
        let owned: Vec<KubernetesApplicationResource> = vec![
            serde_json::from_value(a).unwrap(),
            serde_json::from_value(b).unwrap(),
        ];
        let wanted: BTreeSet<String> = ["ns".to_owned()].into();
        assert_eq!(stale(owned.iter(), &wanted), vec!["dep".to_owned()]);
    }
}
