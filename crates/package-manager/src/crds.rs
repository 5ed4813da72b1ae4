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

/// The version a CRD's objects are listed at, of its versions as (name,
/// served, storage): the storage version, else the first served one.
pub fn listed_version<'a>(
    versions: impl Iterator<Item = (&'a str, bool, bool)> + Clone,
) -> Option<&'a str> {
    let (mut stored, mut served) = (versions.clone(), versions);
    stored
        .find(|&(_, _, storage)| storage)
        .or_else(|| served.find(|&(_, served, _)| served))
        .map(|(name, _, _)| name)
}

impl Listed {
    /// The kind of the CRD's objects.
    pub fn kind(&self) -> &str {
        &self.spec.names.kind
    }

    /// The version its objects are listed at: the storage version, else
    /// the first served one.
    pub fn listed_at(&self) -> Option<&str> {
        listed_version(
            self.spec
                .versions
                .iter()
                .map(|v| (v.name.as_str(), v.served, v.storage)),
        )
    }

    /// Whether the CRD is Established.
    pub fn established(&self) -> bool {
        runtime::crds::established_by(self.status.as_ref().and_then(|s| s.conditions.as_deref()))
    }

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

/// What the package-manager keeps of a CRD it holds
/// ([`crate::stacks::known::Known`]) or reads: names, versions' names,
/// labels, annotations, owners, who manages it and its conditions; not the
/// schemas, printer columns, conversion settings, the fields each manager
/// owns or kubectl's last-applied copy, which together are nearly all of a
/// CRD. Whether a stack's CRD spec is as it wants is read from
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

pub use runtime::crds::established;

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
    /// The Service port ([`crate::package_runtime::handover`]).
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

    #[test]
    fn objects_are_listed_at_the_storage_version_else_the_first_served_one() {
        let at = |v: &[(&'static str, bool, bool)]| listed_version(v.iter().copied());
        assert_eq!(
            at(&[("v1alpha1", true, false), ("v1", true, true)]),
            Some("v1")
        );
        assert_eq!(
            at(&[
                ("v1alpha1", false, false),
                ("v1beta1", true, false),
                ("v1", true, false)
            ]),
            Some("v1beta1"),
            "no storage version: the first served"
        );
        assert_eq!(at(&[("v1", false, false)]), None, "none served");
    }
}
