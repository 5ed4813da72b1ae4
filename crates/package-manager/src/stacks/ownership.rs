//! Who owns a CRD among stacks: the one room that decides it. A CRD a
//! stack installs carries [`INSTALLED_LABEL`], its owner's `namespace/name`
//! in [`OWNER_ANNOTATION`], and a label per Extension that owns or depends
//! on it ([`stack_label`]). The ExtensionRequest controller installs CRDs
//! as this says ([`crd_body`], [`install_refusal`]); the Extension
//! controller claims them ([`own_refusal`], [`mark_patch`]) and lets go of
//! them ([`release`]), so a CRD goes only with the last stack that uses it.
//!
//! Pure functions of what the CRD carries, except [`extension_exists`]
//! (one GET).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use oci::stack::CrdSelector;
use serde_json::{Value, json};
use types::extensions::v1alpha1::{CrdRef, Extension};

pub use types::extensions::v1alpha1::{EXTENSION_LABEL, OWNER_ANNOTATION};

use super::error::Error;

/// Marks a CRD a stack installed (only those are ever deleted by one).
pub const INSTALLED_LABEL: &str = "extensions.crossplane.io/installed";
/// Prefix of the per-Extension label on CRDs: `owns` or `depends-on`.
pub const STACK_LABEL_PREFIX: &str = "stack.extensions.crossplane.io/";
/// Label values.
pub const OWNS: &str = "owns";
/// Label values.
pub const DEPENDS_ON: &str = "depends-on";
/// On a CRD a stack installed: the digest of the spec it applied. The
/// package-manager's cache of CRDs keeps no schemas
/// ([`crate::crds::trim`]), so whether a CRD's spec is as the stack wants
/// is read here.
pub const SPEC_DIGEST_ANNOTATION: &str = "extensions.crossplane.io/spec-digest";

/// The digest [`SPEC_DIGEST_ANNOTATION`] records of a CRD's `spec`.
pub fn spec_digest(spec: &Value) -> String {
    oci::Digest::of(spec.to_string().as_bytes())
        .as_str()
        .to_owned()
}

/// Whether applying `body` (from [`crd_body`]) would change nothing of
/// `live` (as the trimmed cache holds it): its labels and annotations are
/// there, and its spec is the one last applied.
pub fn crd_unchanged(live: &CustomResourceDefinition, body: &Value) -> bool {
    let metadata = json!({"metadata": body.get("metadata").cloned().unwrap_or_default()});
    runtime::ssa::unchanged(live, &metadata)
}

/// The label an Extension puts on the CRDs it owns or depends on: a key
/// per Extension (a hash of `namespace/name`, which may be too long for a
/// label), so any number of stacks can mark one CRD without a
/// read-modify-write.
pub fn stack_label(namespace: &str, name: &str) -> String {
    let digest = oci::Digest::of(format!("{namespace}/{name}").as_bytes());
    format!("{STACK_LABEL_PREFIX}{}", &digest.hex()[..16])
}

/// Whether a CRD still carries any stack's label.
pub fn marked(labels: &BTreeMap<String, String>) -> bool {
    labels.keys().any(|k| k.starts_with(STACK_LABEL_PREFIX))
}

/// The references (kind and apiVersion, one per version) of an installed
/// CRD's versions that `selector` asks for (all when it names none).
pub fn crd_refs(crd: &CustomResourceDefinition, selector: &CrdSelector) -> Vec<CrdRef> {
    crd.spec
        .versions
        .iter()
        .filter(|v| selector.version.as_ref().is_none_or(|want| *want == v.name))
        .map(|v| CrdRef {
            kind: crd.spec.names.kind.clone(),
            api_version: format!("{}/{}", crd.spec.group, v.name),
        })
        .collect()
}

/// The references (one per version) of a CRD of a package.
pub fn crd_ref_of(crd: &Value) -> Vec<CrdRef> {
    let text = |p: &str| {
        crd.pointer(p)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    oci::stack::versions_of(crd)
        .into_iter()
        .map(|v| CrdRef {
            kind: text("/spec/names/kind"),
            api_version: format!("{}/{v}", text("/spec/group")),
        })
        .collect()
}

/// Whether the Extension `namespace/name` exists.
pub async fn extension_exists(client: &kube::Client, key: &str) -> Result<bool, Error> {
    let Some((ns, name)) = key.split_once('/') else {
        return Ok(false);
    };
    Ok(kube::Api::<Extension>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::request("read the Extension that owns a CRD", e))?
        .is_some())
}

/// The CRD object a package's CRD installs as: installed by a stack, owned
/// by the Extension `owner` (`namespace/name`, whose label is `label`).
pub fn crd_body(object: &Value, owner: &str, label: &str) -> Value {
    let mut labels = object
        .pointer("/metadata/labels")
        .and_then(|l| l.as_object())
        .cloned()
        .unwrap_or_default();
    labels.insert(INSTALLED_LABEL.into(), "true".into());
    labels.insert(label.into(), OWNS.into());
    let mut annotations = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.as_object())
        .cloned()
        .unwrap_or_default();
    annotations.insert(OWNER_ANNOTATION.into(), owner.into());
    let spec = object.get("spec").cloned().unwrap_or_default();
    annotations.insert(SPEC_DIGEST_ANNOTATION.into(), spec_digest(&spec).into());
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": object.pointer("/metadata/name").cloned().unwrap_or_default(),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    })
}

/// What a CRD that exists says of its stack owner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Holder<'a> {
    /// The Extension (`namespace/name`) it names as its owner.
    pub owner: Option<&'a str>,
    /// The [`INSTALLED_LABEL`] it carries ("true" when a stack installed
    /// it).
    pub installed: Option<&'a str>,
}

/// What `labels` and `annotations` of a CRD say of its stack owner.
pub fn holder<'a>(
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
) -> Holder<'a> {
    Holder {
        owner: annotations.get(OWNER_ANNOTATION).map(String::as_str),
        installed: labels.get(INSTALLED_LABEL).map(String::as_str),
    }
}

/// The other Extension a CRD names as its owner (`me` is not one), whose
/// existence decides whether it may be taken.
pub fn other_owner<'a>(h: &Holder<'a>, me: &str) -> Option<&'a str> {
    h.owner.filter(|o| *o != me)
}

/// Why the stack `reference` (recorded as Extension `me`) may not install
/// its CRD `crd` that exists, if it may not. `owner_exists`: whether the
/// other Extension the CRD names as owner still exists.
pub fn install_refusal(
    reference: &str,
    me: &str,
    crd: &str,
    h: &Holder,
    owner_exists: bool,
) -> Option<String> {
    match h.owner {
        Some(o) if o != me && owner_exists => Some(format!(
            "{reference} owns CRD {crd}, which Extension {o} owns already; uninstall {o} first (this request installs by itself once it is gone)"
        )),
        None if h.installed.is_none() => Some(format!(
            "{reference} owns CRD {crd}, which exists and was not installed by a stack; delete it or install another stack"
        )),
        _ => None,
    }
}

/// Why Extension `me` may not own the CRD `crd` (made by `maker`), if it
/// may not. `owner_exists`: whether the other Extension the CRD names as
/// owner still exists.
pub fn own_refusal(
    me: &str,
    crd: &str,
    maker: &str,
    h: &Holder,
    owner_exists: bool,
) -> Option<String> {
    if let Some(o) = other_owner(h, me)
        && owner_exists
    {
        return Some(format!(
            "CRD {crd} is owned by Extension {o}; two stacks cannot own one CRD: remove it from spec.customresourcedefinitions.owns or uninstall {o}"
        ));
    }
    // Only a CRD a stack installed can be owned: one made by hand, by Helm
    // or by a Provider package stays its maker's.
    (h.owner != Some(me) && h.installed != Some("true")).then(|| format!(
        "CRD {crd} was not installed by a stack ({maker}); an Extension can own only CRDs its stack installed: remove it from spec.customresourcedefinitions.owns, or list it under dependsOn"
    ))
}

/// The merge patch that puts an Extension's `label` (with `value`) and,
/// for an owner, the owner annotation on a CRD; None when they are there.
pub fn mark_patch(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    (label, value): (&str, &str),
    owner: Option<&str>,
) -> Option<Value> {
    let has_label = labels.get(label).is_some_and(|v| v == value);
    let has_owner = owner.is_none_or(|o| annotations.get(OWNER_ANNOTATION).is_some_and(|a| a == o));
    if has_label && has_owner {
        return None;
    }
    Some(match owner {
        Some(o) => {
            json!({"metadata": {"labels": {label: value}, "annotations": {OWNER_ANNOTATION: o}}})
        }
        None => json!({"metadata": {"labels": {label: value}}}),
    })
}

/// What an Extension going away does with a CRD that carries its label.
#[derive(Debug, PartialEq)]
pub enum Release {
    /// Delete it: a stack installed it and no other stack uses it.
    Delete,
    /// Take the Extension's label off (and its owner annotation, when it
    /// was the owner): someone else still has a use for it.
    LetGo {
        /// Whether the owner annotation goes too.
        owner: bool,
    },
}

/// What Extension `me` (with `label`) going away does with a CRD that
/// carries `labels` and `annotations`.
pub fn release(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    label: &str,
    me: &str,
) -> Release {
    let mut rest = labels.clone();
    rest.remove(label);
    if !marked(&rest) && labels.get(INSTALLED_LABEL).is_some_and(|v| v == "true") {
        return Release::Delete;
    }
    Release::LetGo {
        owner: annotations.get(OWNER_ANNOTATION).is_some_and(|o| o == me),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const ME: &str = "ns/redis";

    /// A CRD as a case sees it: its labels and its owner annotation.
    type Crd<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);

    #[test]
    fn who_may_install_a_crd_that_exists() {
        let installed = [(INSTALLED_LABEL, "true")];
        // (case, the CRD, whether its owner exists, refused?)
        let cases: &[(&str, Crd, bool, bool)] = &[
            (
                "a CRD the same Extension owns is installed again",
                (&installed, Some(ME)),
                false,
                false,
            ),
            (
                "a CRD another living Extension owns is refused",
                (&installed, Some("ns/other")),
                true,
                true,
            ),
            (
                "a CRD whose owner is gone is taken over",
                (&installed, Some("ns/other")),
                false,
                false,
            ),
            (
                "a CRD a stack installed and nobody owns is taken",
                (&installed, None),
                false,
                false,
            ),
            ("a CRD made by hand is refused", (&[], None), false, true),
        ];
        for (case, (labels, owner), exists, refused) in cases {
            let labels = map(labels);
            let annotations = owner.map_or_else(BTreeMap::new, |o| map(&[(OWNER_ANNOTATION, o)]));
            let h = holder(&labels, &annotations);
            let why = install_refusal("reg/redis:v1", ME, "c.example.org", &h, *exists);
            assert_eq!(why.is_some(), *refused, "{case}: {why:?}");
        }
    }

    #[test]
    fn who_may_own_a_crd() {
        let installed = [(INSTALLED_LABEL, "true")];
        let cases: &[(&str, Crd, bool, Option<&str>)] = &[
            (
                "an Extension owns the CRD its stack installed",
                (&installed, Some(ME)),
                false,
                None,
            ),
            (
                "two stacks cannot own one CRD",
                (&installed, Some("ns/other")),
                true,
                Some("two stacks cannot own one CRD"),
            ),
            (
                "a CRD made by hand is never owned",
                (&[], None),
                false,
                Some("was not installed by a stack (by hand)"),
            ),
            (
                "a CRD of a gone owner that a stack installed is owned",
                (&installed, Some("ns/other")),
                false,
                None,
            ),
        ];
        for (case, (labels, owner), exists, refused) in cases {
            let labels = map(labels);
            let annotations = owner.map_or_else(BTreeMap::new, |o| map(&[(OWNER_ANNOTATION, o)]));
            let h = holder(&labels, &annotations);
            let why = own_refusal(ME, "c.example.org", "by hand", &h, *exists);
            match refused {
                None => assert!(why.is_none(), "{case}: {why:?}"),
                Some(text) => assert!(
                    why.as_ref().is_some_and(|w| w.contains(text)),
                    "{case}: {why:?}"
                ),
            }
        }
    }

    #[test]
    fn what_an_extension_going_away_does_with_a_crd() {
        let mine = stack_label("ns", "redis");
        let theirs = stack_label("ns", "other");
        let cases: &[(&str, Crd, Release)] = &[
            (
                "the last stack to use a CRD a stack installed deletes it",
                (&[(INSTALLED_LABEL, "true"), (&mine, OWNS)], Some(ME)),
                Release::Delete,
            ),
            (
                "a CRD another stack depends on stays, without its owner",
                (
                    &[
                        (INSTALLED_LABEL, "true"),
                        (&mine, OWNS),
                        (&theirs, DEPENDS_ON),
                    ],
                    Some(ME),
                ),
                Release::LetGo { owner: true },
            ),
            (
                "a dependent lets go of a CRD another stack owns",
                (
                    &[
                        (INSTALLED_LABEL, "true"),
                        (&mine, DEPENDS_ON),
                        (&theirs, OWNS),
                    ],
                    Some("ns/other"),
                ),
                Release::LetGo { owner: false },
            ),
            (
                "a CRD no stack installed is never deleted",
                (&[(&mine, DEPENDS_ON)], None),
                Release::LetGo { owner: false },
            ),
        ];
        for (case, (labels, owner), want) in cases {
            let labels = map(labels);
            let annotations = owner.map_or_else(BTreeMap::new, |o| map(&[(OWNER_ANNOTATION, o)]));
            assert_eq!(&release(&labels, &annotations, &mine, ME), want, "{case}");
        }
    }

    #[test]
    fn a_crd_is_marked_only_when_its_label_or_owner_is_missing() {
        let label = stack_label("ns", "redis");
        let labels = map(&[(&label, OWNS)]);
        let annotations = map(&[(OWNER_ANNOTATION, ME)]);
        assert_eq!(
            mark_patch(&labels, &annotations, (&label, OWNS), Some(ME)),
            None
        );
        assert_eq!(
            mark_patch(&labels, &BTreeMap::new(), (&label, OWNS), None),
            None
        );
        let patch =
            mark_patch(&BTreeMap::new(), &BTreeMap::new(), (&label, OWNS), Some(ME)).unwrap();
        assert_eq!(patch["metadata"]["labels"][&label], OWNS);
        assert_eq!(patch["metadata"]["annotations"][OWNER_ANNOTATION], ME);
    }

    #[test]
    fn a_stack_installs_its_crd_as_installed_and_owned() {
        let crd = json!({"metadata": {"name": "c.example.org", "labels": {"keep": "x"}}, "spec": {"group": "example.org"}});
        let body = crd_body(&crd, ME, "stack.extensions.crossplane.io/abc");
        assert_eq!(body["metadata"]["labels"][INSTALLED_LABEL], "true");
        assert_eq!(body["metadata"]["labels"]["keep"], "x");
        assert_eq!(
            body["metadata"]["labels"]["stack.extensions.crossplane.io/abc"],
            OWNS
        );
        assert_eq!(body["metadata"]["annotations"][OWNER_ANNOTATION], ME);
        assert_eq!(body["spec"]["group"], "example.org");
    }

    #[test]
    fn a_crd_as_the_trimmed_cache_holds_it_is_unchanged_until_its_spec_or_marks_differ() {
        let object = |description: &str| {
            json!({"metadata": {"name": "cs.example.org"}, "spec": {
                "group": "example.org", "scope": "Namespaced",
                "names": {"kind": "C", "plural": "cs"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "description": description}}}]}})
        };
        let label = "stack.extensions.crossplane.io/abc";
        let body = crd_body(&object("one"), ME, label);
        let mut live: CustomResourceDefinition = serde_json::from_value(body.clone()).unwrap();
        crate::crds::trim(&mut live);
        assert!(live.spec.versions[0].schema.is_none());
        assert!(crd_unchanged(&live, &body));
        // Another schema: another digest.
        assert!(!crd_unchanged(&live, &crd_body(&object("two"), ME, label)));
        // Its mark taken off by hand: applied again.
        live.metadata.labels.as_mut().unwrap().remove(label);
        assert!(!crd_unchanged(&live, &body));
    }
}
