//! References between Objects: the finalizer a referenced Object carries for
//! each referrer, and cycle detection.

use std::collections::{BTreeMap, BTreeSet};

use types::kubernetes::v1alpha1::Reference;

/// Prefix of the finalizers referrers put on referenced Objects.
pub const REFERRED_BY: &str = "referred-by.kubernetes.crossplane.io/";

/// The finalizer a referenced Object carries while `referrer` exists. A
/// finalizer's name part is at most 63 characters; longer names are cut and
/// suffixed with a hash so they stay unique.
pub fn finalizer_for(referrer: &str) -> String {
    let name: String = referrer
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.len() <= 63 {
        return format!("{REFERRED_BY}{name}");
    }
    let hash = name.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    format!("{REFERRED_BY}{}-{hash:016x}", &name[..46])
}

/// Whether a reference points at an Object (only those are ordered by
/// finalizers and part of cycles).
pub fn object_target(r: &Reference) -> Option<&str> {
    let (api_version, kind, name) = match (&r.from_object, &r.depends_on) {
        (Some(f), _) => (&f.api_version, &f.kind, &f.name),
        (None, Some(d)) => (&d.api_version, &d.kind, &d.name),
        (None, None) => return None,
    };
    (api_version == "kubernetes.crossplane.io/v1alpha1" && kind == "Object")
        .then_some(name.as_str())
}

/// A cycle through `start` in the graph of Object references, as the path
/// `start → … → start`.
pub fn cycle_through(start: &str, edges: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn walk(
        node: &str,
        start: &str,
        edges: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in edges.get(node).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(next, start, edges, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_owned()];
    let mut seen = BTreeSet::new();
    walk(start, start, edges, &mut path, &mut seen).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(a, bs)| {
                (
                    (*a).to_owned(),
                    bs.iter().map(|b| (*b).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_chain_has_no_cycle() {
        let g = graph(&[("kong", &["csv"]), ("csv", &["sub"])]);
        assert_eq!(cycle_through("kong", &g), None);
    }

    #[test]
    fn a_two_object_cycle_is_found_with_its_path() {
        let g = graph(&[("a", &["b"]), ("b", &["a"])]);
        assert_eq!(cycle_through("a", &g).unwrap(), ["a", "b", "a"]);
    }

    #[test]
    fn a_cycle_elsewhere_does_not_implicate_an_object_outside_it() {
        let g = graph(&[("x", &["a"]), ("a", &["b"]), ("b", &["a"])]);
        assert_eq!(cycle_through("x", &g), None);
        assert!(cycle_through("a", &g).is_some());
    }

    #[test]
    fn finalizers_are_named_after_the_referrer_and_stay_valid() {
        assert_eq!(
            finalizer_for("kong"),
            "referred-by.kubernetes.crossplane.io/kong"
        );
        let long = "x".repeat(200);
        let f = finalizer_for(&long);
        assert!(f.len() - REFERRED_BY.len() <= 63, "{f}");
        assert_ne!(finalizer_for(&format!("{long}a")), f);
    }
}
