//! MRDs a revision just applied, whole as the API server answered the
//! apply, for the MRD controller to take instead of reading each one again:
//! its cache keeps MRDs without their CRD spec ([`super::body::Listed`]),
//! so an Active MRD was read whole once by the revision's apply and once
//! more by its controller (5000 reads at 50 Providers of 100 kinds).

use std::sync::{Arc, Mutex, PoisonError};

use runtime::lru::Lru;
use types::apiextensions::v1alpha1::ManagedResourceDefinition;

use super::body;

/// How many applied MRDs are held at most: the controller takes each
/// within moments of its apply, and the oldest go first when it falls
/// behind (then it reads them). A few MiB at most.
const HELD: usize = 256;

/// The MRDs a revision applied last, by name. Cheap to clone (clones
/// share).
#[derive(Clone)]
pub struct Applied(Arc<Mutex<Lru<String, Arc<ManagedResourceDefinition>>>>);

impl Default for Applied {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Lru::new(HELD))))
    }
}

impl Applied {
    /// Holds `mrd` as its apply returned it, but for its managed fields
    /// (nothing reads them, and they are as long as the schema).
    pub fn put(&self, mut mrd: ManagedResourceDefinition) {
        mrd.metadata.managed_fields = None;
        let Some(name) = mrd.metadata.name.clone() else {
            return;
        };
        let forgotten = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, Arc::new(mrd));
        drop(forgotten);
    }

    /// The MRD `name` as applied, when it is what the cache shows at
    /// `made_from` ([`body::made_from`]: same uid, generation, labels and
    /// annotations, so the same spec); taken then. One of another version
    /// stays (the cache may be behind it) until a newer apply or age
    /// replaces it.
    pub fn take(&self, name: &str, made_from: &str) -> Option<Arc<ManagedResourceDefinition>> {
        let mut held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let same = held
            .get(name)
            .is_some_and(|m| body::made_from(m).as_deref() == Some(made_from));
        if same { held.remove(name) } else { None }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn mrd(name: &str, generation: i64) -> ManagedResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.crossplane.io/v1alpha1",
            "kind": "ManagedResourceDefinition",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": generation},
            "spec": {
                "group": "example.org",
                "names": {"kind": "Part", "plural": "parts"},
                "scope": "Cluster",
                "versions": [],
                "state": "Active"
            }
        }))
        .unwrap()
    }

    #[test]
    fn an_applied_mrd_is_taken_once_and_only_at_the_version_the_cache_shows() {
        let applied = Applied::default();
        let m2 = mrd("parts.example.org", 2);
        let at2 = body::made_from(&m2).unwrap();
        let at1 = body::made_from(&mrd("parts.example.org", 1)).unwrap();
        applied.put(m2);
        // The cache still shows generation 1: not this one, which stays.
        assert!(applied.take("parts.example.org", &at1).is_none());
        let taken = applied.take("parts.example.org", &at2).unwrap();
        assert_eq!(taken.metadata.generation, Some(2));
        assert!(
            applied.take("parts.example.org", &at2).is_none(),
            "taken once"
        );
        // Bounded: the oldest go first.
        for n in 0..=HELD {
            applied.put(mrd(&format!("k{n}.example.org"), 1));
        }
        let first = body::made_from(&mrd("k0.example.org", 1)).unwrap();
        assert!(applied.take("k0.example.org", &first).is_none());
        let last = body::made_from(&mrd(&format!("k{HELD}.example.org"), 1)).unwrap();
        assert!(
            applied
                .take(&format!("k{HELD}.example.org"), &last)
                .is_some()
        );
    }
}
