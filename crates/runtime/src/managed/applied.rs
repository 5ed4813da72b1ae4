//! What was last applied for each managed object, to tell an object that is
//! up to date from one that drifted.

use serde_json::Value;

/// What this process last applied for each managed object, by the managed
/// resource's UID: the desired object it applied, and the fields it set as
/// the target stored them (normalised: `1000m` may come back as `1`,
/// defaults filled in), both by hash: a copy of every applied object would
/// double what the process holds, for a comparison a hash answers. A live object is up to date when those fields
/// still read the same; when they do not although the desired object did
/// not change, someone else changed them: drift. No managedFields are
/// needed (watch caches drop them). Lost on restart, which costs at most
/// one apply per object whose fields the target normalises.
#[derive(Default)]
pub struct AppliedMemory {
    by_uid: std::sync::Mutex<std::collections::HashMap<String, Applied>>,
}

struct Applied {
    desired: u64,
    stored: u64,
}

impl AppliedMemory {
    /// Remembers that `desired` was applied for `uid` and the target
    /// answered `answer`.
    pub fn remember(&self, uid: &str, desired: &Value, answer: &Value) {
        let applied = Applied {
            desired: crate::reconciler::value_hash(desired),
            stored: crate::reconciler::value_hash(&project(answer, desired)),
        };
        if let Ok(mut m) = self.by_uid.lock() {
            m.insert(uid.to_owned(), applied);
        }
    }

    /// Judges `live` against `desired` for `uid`: (up to date, drifted).
    pub fn judge(&self, uid: &str, desired: &Value, live: &Value) -> (bool, bool) {
        let hash = crate::reconciler::value_hash(desired);
        let remembered = self.by_uid.lock().ok().and_then(|m| {
            m.get(uid)
                .filter(|a| a.desired == hash)
                .map(|a| crate::reconciler::value_hash(&project(live, desired)) == a.stored)
        });
        match remembered {
            Some(same) => (same, !same),
            None => (crate::ssa::unchanged_by(live, desired), false),
        }
    }

    /// Forgets `uid` (its managed resource is gone).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut m) = self.by_uid.lock() {
            m.remove(uid);
        }
    }

    /// Keeps only the UIDs `keep` accepts (managed resources deleted
    /// without a reconcile, their finalizer removed by hand).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        if let Ok(mut m) = self.by_uid.lock() {
            m.retain(|k, _| keep(k));
        }
    }

    /// How many objects are remembered.
    pub fn len(&self) -> usize {
        self.by_uid.lock().map(|m| m.len()).unwrap_or_default()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The parts of `value` at the paths `shape` sets: objects are followed key
/// by key; anything else (lists, scalars) is taken whole.
pub fn project(value: &Value, shape: &Value) -> Value {
    match (value, shape) {
        (Value::Object(v), Value::Object(s)) => Value::Object(
            s.iter()
                .filter_map(|(k, sub)| v.get(k).map(|x| (k.clone(), project(x, sub))))
                .collect(),
        ),
        (v, _) => v.clone(),
    }
}
