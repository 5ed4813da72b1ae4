//! The Objects' cache keeps an Object's two manifests (the desired one and
//! the one last observed, most of its memory as JSON trees: ~2 KB each for
//! a small ConfigMap against ~130 bytes of text) sealed as their text
//! ([`runtime::packed::seal`]). Whoever reads a manifest from the cache
//! reads the Object [`opened`]; the reconciler gets every Object opened
//! (`Reconciler::open_cached`).

use types::kubernetes::v1alpha2::Object;

use super::kind::ObjectKind;

/// The Object's two manifests: the desired one, and the one last observed
/// when there is one.
fn manifests(o: &mut Object) -> impl Iterator<Item = &mut serde_json::Value> {
    let observed = o
        .status
        .as_mut()
        .and_then(|s| s.at_provider.as_mut())
        .and_then(|a| a.manifest.as_mut());
    std::iter::once(&mut o.spec.for_provider.manifest).chain(observed)
}

/// An Object as the Objects' cache keeps it: both manifests sealed.
pub(crate) fn sealed<K: ObjectKind>(o: &mut K) {
    manifests(o.view_mut()).for_each(runtime::packed::seal);
}

/// A cached Object with its manifests opened: as the API server has it.
pub(crate) fn opened<K: ObjectKind>(o: &K) -> K {
    let mut o = o.clone();
    manifests(o.view_mut()).for_each(runtime::packed::open);
    o
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_cache_keeps_manifests_sealed_and_a_reconcile_sees_them_as_written() {
        for manifest in [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"v": "1"}}),
            // Wrong input stays wrong: a string that reads as JSON is not
            // taken for a manifest.
            json!("{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\"}"),
        ] {
            let written: Object = serde_json::from_value(json!({
                "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
                "metadata": {"name": "o"},
                "spec": {"forProvider": {"manifest": manifest}},
                "status": {"atProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"uid": "u"}}}},
            }))
            .unwrap();
            let mut cached = written.clone();
            sealed(&mut cached);
            assert!(cached.spec.for_provider.manifest.is_string());
            let observed = cached
                .status
                .as_ref()
                .unwrap()
                .at_provider
                .as_ref()
                .unwrap();
            assert!(observed.manifest.as_ref().unwrap().is_string());
            assert_eq!(
                serde_json::to_value(opened(&cached)).unwrap(),
                serde_json::to_value(&written).unwrap()
            );
        }
    }
}
