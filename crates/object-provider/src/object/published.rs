//! The connection Secret each Object last published, so that an unchanged
//! one is not applied again.

use std::{collections::HashMap, sync::Mutex};

use serde_json::Value;

/// The connection Secret each Object last applied, by Object UID. The
/// provider may not watch Secrets, so an unchanged Secret is told from what
/// was applied, not read: it is applied again only when its content
/// changes, or once after the provider starts.
#[derive(Default)]
pub struct Published(Mutex<HashMap<String, Value>>);

impl Published {
    pub(super) fn is(&self, uid: &str, secret: &Value) -> bool {
        self.0
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|s| s == secret))
    }

    pub(super) fn remember(&self, uid: &str, secret: Value) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(uid.to_owned(), secret);
        }
    }

    /// Forgets a deleted Object's Secret.
    pub fn forget(&self, uid: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_secret_is_applied_again_only_when_its_content_changes() {
        let published = Published::default();
        let one = json!({"data": {"k": "MQ=="}});
        assert!(!published.is("u1", &one));
        published.remember("u1", one.clone());
        assert!(published.is("u1", &one));
        assert!(!published.is("u1", &json!({"data": {"k": "Mg=="}})));
        assert!(!published.is("u2", &one));
        published.forget("u1");
        assert!(!published.is("u1", &one));
    }
}
