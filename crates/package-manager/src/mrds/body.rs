//! What a Provider package's CRDs become on Crossplane v2, as pure
//! decisions: which are managed resources ([`is_managed`]), the
//! ManagedResourceDefinition a revision applies for one ([`mrd_of`]), the
//! CRD an Active MRD serves ([`crd_of`]), and who may control that CRD
//! ([`crd_control`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource as _, ResourceExt as _, api::ObjectMeta};
use types::apiextensions::v1alpha1::{ManagedResourceDefinition, ManagedResourceDefinitionState};

/// The kinds of a Provider package that stay CRDs (as upstream decides:
/// how a provider is configured, not what it manages).
pub const NOT_MANAGED: [&str; 4] = [
    "ProviderConfig",
    "ClusterProviderConfig",
    "ProviderConfigUsage",
    "ClusterProviderConfigUsage",
];

/// Whether the package CRD `crd` is a managed resource, delivered as an
/// MRD: every kind but [`NOT_MANAGED`] (a CRD without a kind counts as
/// managed, as upstream).
pub fn is_managed(crd: &serde_json::Value) -> bool {
    crd.pointer("/spec/names/kind")
        .and_then(serde_json::Value::as_str)
        .is_none_or(|k| !NOT_MANAGED.contains(&k))
}

/// The MRD a revision applies for the CRD body it would have applied
/// (`crd`: metadata with its labels, annotations and owners; spec with its
/// conversion pointed at the runtime). `active` (a package without
/// SafeStart) makes it Active; otherwise its state is left to whoever set
/// it (a policy), Inactive when it is new.
pub fn mrd_of(crd: &serde_json::Value, active: bool) -> serde_json::Value {
    let mut spec = crd
        .get("spec")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    if active && let Some(s) = spec.as_object_mut() {
        s.insert("state".into(), "Active".into());
    }
    serde_json::json!({
        "apiVersion": "apiextensions.crossplane.io/v1alpha1",
        "kind": "ManagedResourceDefinition",
        "metadata": crd.get("metadata").cloned().unwrap_or_default(),
        "spec": spec,
    })
}

/// kubectl's copy of what it last applied: not carried to the CRD, nor
/// kept in the cache (it is the whole MRD again).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The CRD an Active MRD serves: its spec without the MRD's own fields
/// (state, connection details), its labels and annotations, controlled by
/// the MRD (which blocks the MRD's deletion until the CRD is gone).
pub fn crd_of(mrd: &ManagedResourceDefinition) -> serde_json::Value {
    let mut spec = serde_json::to_value(&mrd.spec).unwrap_or_default();
    if let Some(s) = spec.as_object_mut() {
        s.remove("state");
        s.remove("connectionDetails");
    }
    let owner = mrd.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = Some(true);
        o
    });
    let mut metadata = serde_json::Map::new();
    metadata.insert("name".into(), mrd.name_any().into());
    metadata.insert(
        "ownerReferences".into(),
        serde_json::to_value(owner.into_iter().collect::<Vec<_>>()).unwrap_or_default(),
    );
    if !mrd.labels().is_empty() {
        metadata.insert(
            "labels".into(),
            serde_json::to_value(mrd.labels()).unwrap_or_default(),
        );
    }
    let annotations: std::collections::BTreeMap<&String, &String> = mrd
        .annotations()
        .iter()
        .filter(|(k, _)| k.as_str() != LAST_APPLIED)
        .collect();
    if !annotations.is_empty() {
        metadata.insert(
            "annotations".into(),
            serde_json::to_value(annotations).unwrap_or_default(),
        );
    }
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": spec,
    })
}

/// Whether the CRD whose metadata is `crd` is served by the MRD of its
/// name (which controls it).
pub fn served_by_mrd(crd: &ObjectMeta) -> bool {
    let name = crd.name.as_deref().unwrap_or_default();
    crd.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true)
            && o.kind == "ManagedResourceDefinition"
            && o.api_version.starts_with("apiextensions.crossplane.io/")
            && o.name == name
    })
}

/// How a CRD that exists relates to the MRD of the same name.
#[derive(Debug, PartialEq, Eq)]
pub enum CrdControl {
    /// The MRD made it.
    Ours,
    /// A ProviderRevision that delivers the MRD controls it (the CRD was
    /// installed before the package's kinds became MRDs): the MRD takes it.
    Adopt,
    /// Anything else made it; the message names who. An MRD never takes
    /// over a CRD it did not make.
    Foreign(String),
}

/// How the CRD whose metadata is `crd` relates to `mrd`.
pub fn crd_control(mrd: &ManagedResourceDefinition, crd: &ObjectMeta) -> CrdControl {
    let controller = crd
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let delivered_by = |o: &OwnerReference| {
        o.kind == "ProviderRevision"
            && o.api_version.starts_with("pkg.crossplane.io/")
            && mrd.owner_references().iter().any(|m| m.uid == o.uid)
    };
    match controller {
        Some(o) if Some(&o.uid) == mrd.uid().as_ref() => CrdControl::Ours,
        Some(o) if delivered_by(o) => CrdControl::Adopt,
        _ => CrdControl::Foreign(format!(
            "CustomResourceDefinition {} exists and was not made by this ManagedResourceDefinition ({}); an MRD never takes over a CRD it did not make: delete the CRD, or the MRD",
            mrd.name_any(),
            crate::crds::maker_of(crd)
        )),
    }
}

/// An MRD as the caches read it off the wire: its metadata, state and
/// conditions; its CRD spec (a provider's schemas are tens of KiB per
/// kind) is skipped as it is read, so a page of MRDs costs their names. A
/// reconcile that needs the spec reads the MRD.
#[derive(Clone, Debug, serde::Deserialize, kube::Resource)]
#[resource(inherit = ManagedResourceDefinition)]
pub struct Listed {
    metadata: ObjectMeta,
    spec: ListedSpec,
    #[serde(default)]
    status: Option<types::apiextensions::v1alpha1::ManagedResourceDefinitionStatus>,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct ListedSpec {
    #[serde(default)]
    state: ManagedResourceDefinitionState,
}

impl Listed {
    /// What the MRD controller keeps: the MRD's name, identity, owners,
    /// labels, annotations (all but kubectl's copy of what it last applied),
    /// state and status; an Active one is read whole when reconciled. Its
    /// labels and annotations are what its CRD carries ([`crd_of`]), so
    /// they are part of the [`version`] that says whether the CRD is still
    /// as the MRD makes it: an edit of them alone bumps no generation.
    pub fn for_reconcile(self) -> ManagedResourceDefinition {
        ManagedResourceDefinition {
            metadata: kept(self.metadata),
            spec: types::apiextensions::v1alpha1::ManagedResourceDefinitionSpec {
                state: self.spec.state,
                ..Default::default()
            },
            status: self.status,
        }
    }

    /// What the activation policies read: the MRD's name and state.
    pub fn name_and_state(self) -> ManagedResourceDefinition {
        ManagedResourceDefinition {
            metadata: ObjectMeta {
                name: self.metadata.name,
                uid: self.metadata.uid,
                ..ObjectMeta::default()
            },
            spec: types::apiextensions::v1alpha1::ManagedResourceDefinitionSpec {
                state: self.spec.state,
                ..Default::default()
            },
            status: None,
        }
    }
}

/// Every MRD of the cluster, watched as [`Listed`] (in pages of 100) and
/// kept as `keep` leaves it.
pub fn watch(
    client: kube::Client,
    keep: fn(Listed) -> ManagedResourceDefinition,
) -> impl futures::Stream<
    Item = Result<
        kube::runtime::watcher::Event<ManagedResourceDefinition>,
        kube::runtime::watcher::Error,
    >,
> + Send
+ 'static {
    use futures::TryStreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    watcher(
        kube::Api::<Listed>::all(client),
        watcher::Config::default().page_size(100),
    )
    .default_backoff()
    .map_ok(move |event| match event {
        watcher::Event::Apply(m) => watcher::Event::Apply(keep(m)),
        watcher::Event::Delete(m) => watcher::Event::Delete(keep(m)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(m) => watcher::Event::InitApply(keep(m)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    })
}

/// The metadata the MRD controller's cache keeps of an MRD
/// ([`Listed::for_reconcile`]).
fn kept(m: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: m.name,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        owner_references: m.owner_references,
        deletion_timestamp: m.deletion_timestamp,
        labels: m.labels,
        annotations: m
            .annotations
            .map(|mut a| {
                a.remove(LAST_APPLIED);
                a
            })
            .filter(|a| !a.is_empty()),
        ..ObjectMeta::default()
    }
}

/// What an MRD is besides its status, as one string: its uid, its owners
/// (who controls it) and the hash of its generation, labels, annotations,
/// finalizers and deletion. Its status writes leave it the same, so a
/// reader that remembers what it knew of an MRD at this version need not
/// read it again after one. Of the MRD whole or of its metadata alike.
pub fn version<K: kube::Resource>(mrd: &K) -> Option<String> {
    versioned(mrd, true)
}

/// What of an MRD its CRD is made from ([`crd_of`]), as a version like
/// [`version`]'s but without its owners: once the MRD controls its CRD,
/// a revision adding or removing its reference (an upgrade, a deletion)
/// changes nothing of the CRD.
pub fn made_from(mrd: &ManagedResourceDefinition) -> Option<String> {
    versioned(mrd, false)
}

/// [`made_from`] of an MRD whole (as the API server answered its apply),
/// as the MRD controller's cache will show it ([`Listed::for_reconcile`]).
pub fn made_from_whole(mrd: &ManagedResourceDefinition) -> Option<String> {
    made_from(&ManagedResourceDefinition {
        metadata: kept(mrd.metadata.clone()),
        spec: Default::default(),
        status: None,
    })
}

fn versioned<K: kube::Resource>(obj: &K, with_owners: bool) -> Option<String> {
    use std::hash::{Hash as _, Hasher as _};
    let meta = obj.meta();
    let uid = meta.uid.as_deref()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    runtime::controller::trim::spec_or_metadata(obj)?.hash(&mut h);
    if with_owners {
        for o in meta.owner_references.iter().flatten() {
            (&o.uid, o.controller).hash(&mut h);
        }
    }
    Some(format!("{uid}/{:x}", h.finish()))
}

/// Whether an MRD is Active.
pub fn active(mrd: &ManagedResourceDefinition) -> bool {
    mrd.spec.state == ManagedResourceDefinitionState::Active
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn crd(kind: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {
                "name": "things.example.org",
                "labels": {"pkg.crossplane.io/package": "p"},
                "ownerReferences": [{"apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision", "name": "p-1", "uid": "rev-uid", "controller": true}],
            },
            "spec": {
                "group": "example.org",
                "names": {"kind": kind, "plural": "things", "listKind": format!("{kind}List"), "singular": "thing"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}],
            },
        })
    }

    #[test]
    fn an_mrd_whole_is_made_from_what_the_cache_will_show_of_it() {
        let mut whole: serde_json::Value = mrd_of(&crd("Thing"), true);
        let meta = whole.get_mut("metadata").unwrap();
        meta["uid"] = "mrd-uid".into();
        meta["generation"] = 3.into();
        meta["finalizers"] = serde_json::json!(["kept-by-someone"]);
        meta["annotations"] = serde_json::json!({(LAST_APPLIED): "{}", "team": "a"});
        let cached = serde_json::from_value::<Listed>(whole.clone())
            .unwrap()
            .for_reconcile();
        let whole: ManagedResourceDefinition = serde_json::from_value(whole).unwrap();
        assert!(made_from_whole(&whole).is_some());
        assert_eq!(made_from_whole(&whole), made_from(&cached));
    }

    #[test]
    fn provider_configs_stay_crds_and_everything_else_is_managed() {
        for kind in NOT_MANAGED {
            assert!(!is_managed(&crd(kind)), "{kind}");
        }
        assert!(is_managed(&crd("Object")));
        assert!(is_managed(&crd("Bucket")));
        assert!(is_managed(&serde_json::json!({"spec": {}})));
    }

    #[test]
    fn an_mrd_carries_the_crd_and_is_active_only_without_safe_start() {
        let c = crd("Thing");
        let m = mrd_of(&c, true);
        assert_eq!(m["kind"], "ManagedResourceDefinition");
        assert_eq!(m["metadata"], c["metadata"]);
        assert_eq!(m["spec"]["state"], "Active");
        assert_eq!(m["spec"]["versions"], c["spec"]["versions"]);
        // With SafeStart the state is not the revision's to set.
        assert!(mrd_of(&c, false)["spec"].get("state").is_none());
    }

    #[test]
    fn the_crd_of_an_mrd_is_its_spec_controlled_by_it() {
        let mut m: ManagedResourceDefinition =
            serde_json::from_value(mrd_of(&crd("Thing"), true)).unwrap();
        m.metadata.uid = Some("mrd-uid".into());
        m.spec.connection_details = vec![types::apiextensions::v1alpha1::ConnectionDetail {
            name: "password".into(),
            description: "d".into(),
        }];
        let c = crd_of(&m);
        assert_eq!(c["kind"], "CustomResourceDefinition");
        assert!(c["spec"].get("state").is_none());
        assert!(c["spec"].get("connectionDetails").is_none());
        assert_eq!(c["spec"]["group"], "example.org");
        assert_eq!(c["spec"]["names"]["plural"], "things");
        let owners = c["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0]["uid"], "mrd-uid");
        assert_eq!(owners[0]["controller"], true);
        assert_eq!(c["metadata"]["labels"]["pkg.crossplane.io/package"], "p");
    }

    #[test]
    fn what_a_crd_is_made_from_leaves_the_mrds_owners_out() {
        let listed = |owners: serde_json::Value, team: &str| {
            let mut m = mrd_of(&crd("Thing"), true);
            m["metadata"]["uid"] = "mrd-uid".into();
            m["metadata"]["generation"] = 1.into();
            m["metadata"]["labels"] = serde_json::json!({"team": team});
            m["metadata"]["ownerReferences"] = owners;
            let l: Listed = serde_json::from_value(m).unwrap();
            l.for_reconcile()
        };
        let rev = |uid: &str, controller: bool| serde_json::json!({"apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision", "name": uid, "uid": uid, "controller": controller});
        let both = listed(serde_json::json!([rev("r1", false), rev("r2", true)]), "a");
        let one = listed(serde_json::json!([rev("r2", true)]), "a");
        // A revision letting go: the MRD's version changes, its CRD's not.
        assert_ne!(version(&both), version(&one));
        assert_eq!(made_from(&both), made_from(&one));
        // A label is carried to the CRD.
        let relabelled = listed(serde_json::json!([rev("r2", true)]), "b");
        assert_ne!(made_from(&one), made_from(&relabelled));
    }

    #[test]
    fn a_cached_mrd_changes_version_when_only_its_labels_or_annotations_do() {
        let listed = |labels: serde_json::Value, annotations: serde_json::Value| {
            let mut m = mrd_of(&crd("Thing"), true);
            m["metadata"]["uid"] = "mrd-uid".into();
            m["metadata"]["generation"] = 1.into();
            m["metadata"]["labels"] = labels;
            m["metadata"]["annotations"] = annotations;
            let l: Listed = serde_json::from_value(m).unwrap();
            version(&l.for_reconcile()).unwrap()
        };
        let a = listed(
            serde_json::json!({"team": "a"}),
            serde_json::json!({"owner": "x"}),
        );
        // The CRD carries both: an edit of either alone is a change.
        assert_ne!(
            a,
            listed(
                serde_json::json!({"team": "b"}),
                serde_json::json!({"owner": "x"})
            )
        );
        assert_ne!(
            a,
            listed(
                serde_json::json!({"team": "a"}),
                serde_json::json!({"owner": "y"})
            )
        );
        // kubectl's copy of what it applied is neither carried nor kept.
        assert_eq!(
            a,
            listed(
                serde_json::json!({"team": "a"}),
                serde_json::json!({"owner": "x", LAST_APPLIED: "{}"})
            )
        );
    }

    #[test]
    fn an_mrd_takes_a_crd_only_from_itself_or_its_own_revision() {
        let mut m: ManagedResourceDefinition =
            serde_json::from_value(mrd_of(&crd("Thing"), true)).unwrap();
        m.metadata.uid = Some("mrd-uid".into());
        let owned_by = |kind: &str, uid: &str, controller| ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: if kind == "ProviderRevision" {
                    "pkg.crossplane.io/v1".into()
                } else {
                    "apiextensions.crossplane.io/v1alpha1".into()
                },
                kind: kind.into(),
                name: "x".into(),
                uid: uid.into(),
                controller: Some(controller),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        };
        assert_eq!(
            crd_control(&m, &owned_by("ManagedResourceDefinition", "mrd-uid", true)),
            CrdControl::Ours
        );
        assert_eq!(
            crd_control(&m, &owned_by("ProviderRevision", "rev-uid", true)),
            CrdControl::Adopt
        );
        for meta in [
            owned_by("ProviderRevision", "other-rev", true),
            owned_by("ManagedResourceDefinition", "other-mrd", true),
            owned_by("ProviderRevision", "rev-uid", false),
            ObjectMeta::default(),
        ] {
            let CrdControl::Foreign(why) = crd_control(&m, &meta) else {
                panic!("{meta:?} taken over");
            };
            assert!(why.contains("never takes over"), "{why}");
        }
    }
}
