//! What Provider revisions and stacks both do with the CRDs a package
//! installs.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{Patch, PatchParams},
};

/// A CRD as the package-manager's cache reads it off the wire: what
/// [`trim`] keeps, and nothing else is ever made into objects (the schemas
/// are skipped as they are read, so a page of CRDs costs their names, not
/// their schemas). [`Listed::into_crd`] makes it the CustomResourceDefinition
/// the cache's readers take.
#[derive(Clone, Debug, serde::Deserialize, kube::Resource)]
#[resource(inherit = CustomResourceDefinition)]
pub struct Listed {
    metadata: kube::api::ObjectMeta,
    spec: ListedSpec,
    #[serde(default)]
    status: Option<ListedStatus>,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct ListedSpec {
    group: String,
    names: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionNames,
    scope: String,
    #[serde(default)]
    versions: Vec<ListedVersion>,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct ListedVersion {
    name: String,
    #[serde(default)]
    served: bool,
    #[serde(default)]
    storage: bool,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct ListedStatus {
    conditions: Option<
        Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionCondition>,
    >,
}

impl Listed {
    /// The CustomResourceDefinition the cache keeps, as [`trim`] leaves one.
    pub fn into_crd(self) -> CustomResourceDefinition {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
            CustomResourceDefinitionSpec, CustomResourceDefinitionStatus,
            CustomResourceDefinitionVersion,
        };
        let mut crd = CustomResourceDefinition {
            metadata: self.metadata,
            spec: CustomResourceDefinitionSpec {
                group: self.spec.group,
                names: self.spec.names,
                scope: self.spec.scope,
                versions: self
                    .spec
                    .versions
                    .into_iter()
                    .map(|v| CustomResourceDefinitionVersion {
                        name: v.name,
                        served: v.served,
                        storage: v.storage,
                        ..CustomResourceDefinitionVersion::default()
                    })
                    .collect(),
                ..CustomResourceDefinitionSpec::default()
            },
            status: self.status.map(|s| CustomResourceDefinitionStatus {
                conditions: s.conditions,
                ..CustomResourceDefinitionStatus::default()
            }),
        };
        trim(&mut crd);
        crd
    }
}

/// What the package-manager knows of the cluster's CRDs without asking:
/// every CRD's name and kind (all a lookup by kind needs, about a hundred
/// bytes a CRD), and whole (as [`trim`] leaves them) only the CRDs a stack
/// has marked as its own or as one it depends on. Any other CRD is read by
/// name when a decision needs it, so the CRDs Providers install cost the
/// process their names and kinds, not a copy each.
#[derive(Clone)]
pub struct Known {
    inner: std::sync::Arc<std::sync::RwLock<KnownInner>>,
    ready: tokio::sync::watch::Receiver<bool>,
    api: Api<Listed>,
}

/// name → kind, of every CRD.
type Kinds = std::collections::HashMap<Box<str>, Box<str>>;
/// The CRDs a stack marks, by name.
type Marked = std::collections::HashMap<String, std::sync::Arc<CustomResourceDefinition>>;

#[derive(Default)]
struct KnownInner {
    kinds: Kinds,
    marked: Marked,
    /// What a relist has read so far; it replaces the two above when done.
    relist: Option<(Kinds, Marked)>,
}

/// Whether a stack marks this CRD (a stack's label or its owner annotation).
fn marked_by_a_stack(meta: &kube::api::ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .is_some_and(crate::stacks::ownership::marked)
        || meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(crate::stacks::ownership::OWNER_ANNOTATION))
}

impl Known {
    /// Watches every CRD of the cluster (a page of 100 at a time, without
    /// their schemas): the view, and the stream of CRDs that changed (each
    /// as [`trim`] leaves it, for waking what waits on them; nothing of it
    /// is kept).
    pub fn watch(
        client: kube::Client,
    ) -> (
        Self,
        impl futures::Stream<Item = Result<CustomResourceDefinition, kube::runtime::watcher::Error>>
        + Send
        + 'static,
    ) {
        use futures::TryStreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let (tx, ready) = tokio::sync::watch::channel(false);
        let api = Api::<Listed>::all(client);
        let known = Self {
            inner: std::sync::Arc::default(),
            ready,
            api: api.clone(),
        };
        let view = known.clone();
        let changes = watcher(api, watcher::Config::default().page_size(100))
            .default_backoff()
            .map_ok(move |event| {
                if view.apply(&event) {
                    tx.send_replace(true);
                }
                event
            })
            .touched_objects()
            .map_ok(Listed::into_crd);
        (known, changes)
    }

    /// Takes in one watch event; true once a (re)list is complete.
    fn apply(&self, event: &kube::runtime::watcher::Event<Listed>) -> bool {
        use kube::runtime::watcher::Event;
        let Ok(mut inner) = self.inner.write() else {
            return false;
        };
        let whole = |c: &Listed| std::sync::Arc::new(c.clone().into_crd());
        let name = |c: &Listed| c.metadata.name.clone().unwrap_or_default();
        match event {
            Event::Init => inner.relist = Some(Default::default()),
            Event::InitApply(c) => {
                if let Some((kinds, marked)) = inner.relist.as_mut() {
                    kinds.insert(name(c).into(), c.spec.names.kind.as_str().into());
                    if marked_by_a_stack(&c.metadata) {
                        marked.insert(name(c), whole(c));
                    }
                }
            }
            Event::InitDone => {
                if let Some((kinds, marked)) = inner.relist.take() {
                    inner.kinds = kinds;
                    inner.marked = marked;
                }
                return true;
            }
            Event::Apply(c) => {
                inner
                    .kinds
                    .insert(name(c).into(), c.spec.names.kind.as_str().into());
                if marked_by_a_stack(&c.metadata) {
                    inner.marked.insert(name(c), whole(c));
                } else {
                    inner.marked.remove(&name(c));
                }
            }
            Event::Delete(c) => {
                inner.kinds.remove(name(c).as_str());
                inner.marked.remove(&name(c));
            }
        }
        false
    }

    /// Whether the first list is complete (waiting a moment for it).
    pub async fn ready(&self) -> bool {
        let mut ready = self.ready.clone();
        tokio::time::timeout(std::time::Duration::from_millis(20), ready.wait_for(|r| *r))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The CRD `name`: the kept copy of a CRD a stack marks, else read from
    /// the API server (as [`trim`] leaves it).
    pub async fn get(
        &self,
        name: &str,
    ) -> Result<Option<std::sync::Arc<CustomResourceDefinition>>, kube::Error> {
        let kept = self
            .inner
            .read()
            .ok()
            .and_then(|i| i.marked.get(name).cloned());
        if kept.is_some() {
            return Ok(kept);
        }
        Ok(self
            .api
            .get_opt(name)
            .await?
            .map(|c| std::sync::Arc::new(c.into_crd())))
    }

    /// The installed CRD `selector` names (by name, or by group and kind).
    pub async fn installed(
        &self,
        selector: &oci::stack::CrdSelector,
    ) -> Result<Option<std::sync::Arc<CustomResourceDefinition>>, kube::Error> {
        let name = match (&selector.plural, &selector.kind) {
            (Some(plural), _) => format!("{plural}.{}", selector.group),
            (None, Some(kind)) => {
                let suffix = format!(".{}", selector.group);
                let found = self.inner.read().ok().and_then(|i| {
                    i.kinds
                        .iter()
                        .find(|(n, k)| n.ends_with(&suffix) && k.as_ref() == kind.as_str())
                        .map(|(n, _)| n.to_string())
                });
                match found {
                    Some(n) => n,
                    None => return Ok(None),
                }
            }
            (None, None) => return Ok(None),
        };
        let Some(crd) = self.get(&name).await? else {
            return Ok(None);
        };
        Ok(selector
            .matches_parts(
                &crd.spec.group,
                &crd.spec.names.plural,
                &crd.spec.names.kind,
                crd.spec.versions.iter().map(|v| v.name.as_str()),
            )
            .then_some(crd))
    }

    /// The kept CRDs that carry `label` (a stack's mark).
    pub fn marked_with(&self, label: &str) -> Vec<String> {
        self.inner
            .read()
            .map(|i| {
                i.marked
                    .values()
                    .filter(|c| {
                        c.metadata
                            .labels
                            .as_ref()
                            .is_some_and(|l| l.contains_key(label))
                    })
                    .filter_map(|c| c.metadata.name.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many CRDs are kept whole and how many are known by name.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        self.inner
            .read()
            .map(|i| (i.marked.len(), i.kinds.len()))
            .unwrap_or_default()
    }
}

/// What the package-manager keeps of a CRD it holds ([`Known`]) or reads:
/// names, versions' names, labels, annotations, owners, who manages it and
/// its conditions; not the schemas, printer columns, conversion settings,
/// the fields each manager owns or kubectl's last-applied copy, which
/// together are nearly all of a CRD. Whether a stack's CRD spec is as it wants is read from
/// [`crate::stacks::ownership::SPEC_DIGEST_ANNOTATION`].
pub fn trim(crd: &mut CustomResourceDefinition) {
    for entry in crd.metadata.managed_fields.iter_mut().flatten() {
        entry.fields_v1 = None;
    }
    if let Some(a) = crd.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    crd.spec.conversion = None;
    for v in &mut crd.spec.versions {
        v.schema = None;
        v.additional_printer_columns = None;
        v.selectable_fields = None;
        v.subresources = None;
        v.deprecation_warning = None;
    }
}

/// Whether a CRD is Established.
pub fn established(c: &CustomResourceDefinition) -> bool {
    c.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Why the CRDs of a package did not pass their dry run.
#[derive(Debug)]
pub enum DryRunError {
    /// The API server refuses the CRD `name` as it is.
    Refused {
        /// The CRD.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// The dry run itself failed.
    Failed(kube::Error),
}

/// Checks every CRD of `bodies` (name, object to apply) with a server-side
/// dry run, so that a package's CRDs are written all or none.
pub async fn dry_run(
    crds: &Api<CustomResourceDefinition>,
    field_manager: &str,
    bodies: &[(&str, &serde_json::Value)],
) -> Result<(), DryRunError> {
    for &(name, body) in bodies {
        dry_run_one(crds, field_manager, name, body).await?;
    }
    Ok(())
}

/// [`dry_run`] of one CRD.
pub async fn dry_run_one(
    crds: &Api<CustomResourceDefinition>,
    field_manager: &str,
    name: &str,
    body: &serde_json::Value,
) -> Result<(), DryRunError> {
    let dry = PatchParams::apply(field_manager).force().dry_run();
    crds.patch(name, &dry, &Patch::Apply(body))
        .await
        .map(drop)
        .map_err(|e| match e {
            kube::Error::Api(a) if a.code == 422 || a.code == 400 => DryRunError::Refused {
                name: name.to_owned(),
                message: a.message,
            },
            e => DryRunError::Failed(e),
        })
}

/// Who made or controls a CRD, for a conflict message: its controller
/// (`ProviderRevision provider-x-1a2b`), else the managers that wrote it
/// (`written by kubectl-client-side-apply`), else `made by hand`.
pub fn maker(crd: &CustomResourceDefinition) -> String {
    maker_of(&crd.metadata)
}

/// [`maker`] of any object's metadata.
pub fn maker_of(meta: &kube::api::ObjectMeta) -> String {
    if let Some(o) = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        return format!("controlled by {} {}", o.kind, o.name);
    }
    let mut managers: Vec<&str> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    managers.sort_unstable();
    managers.dedup();
    if managers.is_empty() {
        "made by hand".to_owned()
    } else {
        format!("written by {}", managers.join(", "))
    }
}

/// Why a package may not install the CRD `object` at all, whoever it is:
/// a group of Kubernetes or of crossplane-rs itself; for a stack
/// (`provider_runtime` false: a stack runs no webhook) a conversion webhook.
/// A provider's conversion webhook is always pointed at its own runtime
/// ([`point_conversion`]), whatever the package says. `None` when it may.
pub fn refused(object: &serde_json::Value, provider_runtime: bool) -> Option<String> {
    let name = object
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let group = object
        .pointer("/spec/group")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    if types::is_protected_group(group) {
        return Some(format!(
            "CustomResourceDefinition {name} is in API group \"{group}\", which belongs to Kubernetes or to crossplane-rs itself; no package may install it"
        ));
    }
    if !provider_runtime && converts_by_webhook(object) {
        return Some(format!(
            "CustomResourceDefinition {name} converts by webhook (spec.conversion.strategy: Webhook), but a stack runs no webhook; convert with strategy None"
        ));
    }
    None
}

/// Whether a CRD converts between its versions by webhook.
pub fn converts_by_webhook(object: &serde_json::Value) -> bool {
    object
        .pointer("/spec/conversion/strategy")
        .and_then(serde_json::Value::as_str)
        == Some("Webhook")
}

/// Where the API server calls a provider's webhooks: its runtime's Service,
/// trusting the provider's CA.
pub struct WebhookTarget<'a> {
    /// The Service's name.
    pub service: &'a str,
    /// Its namespace (the package-manager's).
    pub namespace: &'a str,
    /// The Service port ([`crate::runtime::handover`]).
    pub port: i64,
    /// The CA bundle (PEM) that signed the runtime's certificate.
    pub ca_bundle: &'a str,
}

/// The path a provider serves conversions at (as controller-runtime does).
pub const CONVERSION_PATH: &str = "/convert";

/// Points a CRD's conversion webhook (when it has one) at `target`: the
/// package's own client config (a URL, another Service) is replaced, so a
/// package's conversions only ever reach its own runtime.
pub fn point_conversion(body: &mut serde_json::Value, target: &WebhookTarget<'_>) {
    use base64::Engine as _;
    if !converts_by_webhook(body) {
        return;
    }
    let Some(conversion) = body
        .pointer_mut("/spec/conversion")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return;
    };
    let versions = conversion
        .get("webhook")
        .and_then(|w| w.get("conversionReviewVersions"))
        .filter(|v| {
            v.as_array()
                .is_some_and(|a| !a.is_empty() && a.iter().all(serde_json::Value::is_string))
        })
        .cloned()
        .unwrap_or_else(|| serde_json::json!(["v1"]));
    conversion.insert(
        "webhook".into(),
        serde_json::json!({
            "conversionReviewVersions": versions,
            "clientConfig": {
                "service": {
                    "name": target.service,
                    "namespace": target.namespace,
                    "path": CONVERSION_PATH,
                    "port": target.port,
                },
                "caBundle": base64::engine::general_purpose::STANDARD.encode(target.ca_bundle),
            },
        }),
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn crd(group: &str, conversion: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": format!("things.{group}")}, "spec": {"group": group, "conversion": conversion}})
    }

    #[test]
    fn a_package_cannot_install_kubernetes_or_crossplane_rs_groups() {
        for g in [
            "pkg.crossplane.io",
            "extensions.crossplane.io",
            "rbac.authorization.k8s.io",
            "apps",
            "",
            "x.kubernetes.io",
        ] {
            let why = refused(&crd(g, json!(null)), true).unwrap();
            assert!(
                why.contains("belongs to Kubernetes or to crossplane-rs"),
                "{why}"
            );
        }
        assert_eq!(refused(&crd("example.org", json!(null)), true), None);
    }

    #[test]
    fn a_providers_conversion_webhook_is_pointed_at_its_own_runtime() {
        let url = json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"url": "https://10.0.0.1:8443/convert"}}});
        let mut object = crd("example.org", url);
        assert_eq!(refused(&object, true), None);
        assert!(
            refused(&object, false)
                .unwrap()
                .contains("a stack runs no webhook")
        );
        let target = WebhookTarget {
            service: "provider-x",
            namespace: "crossplane-system",
            port: 9443,
            ca_bundle: "PEM",
        };
        point_conversion(&mut object, &target);
        assert_eq!(
            object["spec"]["conversion"]["webhook"],
            json!({"conversionReviewVersions": ["v1"], "clientConfig": {
                "service": {"name": "provider-x", "namespace": "crossplane-system", "path": "/convert", "port": 9443},
                "caBundle": "UEVN",
            }})
        );
        let mut none = crd("example.org", json!({"strategy": "None"}));
        let before = none.clone();
        point_conversion(&mut none, &target);
        assert_eq!(none, before);
    }

    #[test]
    fn the_cache_keeps_a_crds_names_marks_and_conditions_not_its_schemas() {
        let big = "x".repeat(100_000);
        let full = json!({
            "metadata": {"name": "cs.example.org", "labels": {"l": "v"},
                "annotations": {"a": "b", "kubectl.kubernetes.io/last-applied-configuration": big},
                "managedFields": [{"manager": "helm", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"group": "example.org", "scope": "Namespaced",
                "names": {"kind": "C", "plural": "cs"},
                "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"caBundle": "Y2E="}}},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "description": big}},
                    "additionalPrinterColumns": [{"name": "A", "type": "string", "jsonPath": ".a"}]}]},
            "status": {"conditions": [{"type": "Established", "status": "True"}]}
        });
        let mut c: CustomResourceDefinition = serde_json::from_value(full.clone()).unwrap();
        trim(&mut c);
        // Read off the wire as the cache does, it is the same.
        let listed: Listed = serde_json::from_value(full).unwrap();
        assert_eq!(listed.into_crd(), c);
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.len() < 1_000, "{text}");
        assert!(established(&c));
        assert_eq!(maker(&c), "written by helm");
        assert_eq!(c.spec.versions[0].name, "v1");
        assert_eq!(c.spec.names.plural, "cs");
        assert_eq!(c.metadata.labels.as_ref().unwrap()["l"], "v");
        assert_eq!(c.metadata.annotations.as_ref().unwrap().len(), 1);
    }

    fn listed(name: &str, kind: &str, labels: serde_json::Value) -> Listed {
        let (plural, group) = name.split_once('.').unwrap();
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"group": group, "scope": "Cluster",
                "names": {"kind": kind, "plural": plural},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn the_view_keeps_whole_only_the_crds_a_stack_marks() {
        use kube::runtime::watcher::Event;
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let (tx, ready) = tokio::sync::watch::channel(false);
        let known = Known {
            inner: std::sync::Arc::default(),
            ready,
            api: Api::all(kube::Client::try_from(config).unwrap()),
        };
        let label = "stack.extensions.crossplane.io/0123456789abcdef";
        let provider = listed("buckets.aws.example.org", "Bucket", json!({}));
        let stack = listed("redises.cache.example.org", "Redis", json!({label: "owns"}));
        assert!(!known.apply(&Event::Init));
        for c in [&provider, &stack] {
            assert!(!known.apply(&Event::InitApply(c.clone())));
        }
        assert!(!known.ready().await, "ready before the list is done");
        assert_eq!(known.counts(), (0, 0), "a relist shows only when done");
        assert!(known.apply(&Event::InitDone));
        tx.send_replace(true);
        assert!(known.ready().await);
        assert_eq!(known.counts(), (1, 2));
        assert_eq!(known.marked_with(label), vec!["redises.cache.example.org"]);
        // Found by kind from what is kept, without asking the API server
        // (nothing listens at its address).
        let by_kind = oci::stack::CrdSelector::of_kind("Redis", "cache.example.org/v1");
        let found = known.installed(&by_kind).await.unwrap().unwrap();
        assert_eq!(
            found.metadata.name.as_deref(),
            Some("redises.cache.example.org")
        );
        assert!(
            found.spec.versions[0].schema.is_none(),
            "kept without its schema"
        );
        // A CRD that loses its marks is no longer kept; one deleted is gone.
        known.apply(&Event::Apply(listed(
            "redises.cache.example.org",
            "Redis",
            json!({}),
        )));
        assert_eq!(known.counts(), (0, 2));
        known.apply(&Event::Apply(listed(
            "buckets.aws.example.org",
            "Bucket",
            json!({label: "dependsOn"}),
        )));
        assert_eq!(known.counts(), (1, 2));
        known.apply(&Event::Delete(provider));
        assert_eq!(known.counts(), (0, 1));
        // A kind nobody installed is not installed, without a request.
        let missing = oci::stack::CrdSelector::of_kind("Queue", "mq.example.org/v1");
        assert!(known.installed(&missing).await.unwrap().is_none());
    }
}
