//! Crossplane's typed conditions: a small vocabulary built by constructor
//! functions, and a setter that moves lastTransitionTime only on transition.

use types::common::Condition;

/// Condition type: the resource is ready for use.
pub const TYPE_READY: &str = "Ready";
/// Condition type: the last reconcile brought desired and observed state in line.
pub const TYPE_SYNCED: &str = "Synced";

/// Reasons, as Crossplane spells them.
pub mod reason {
    /// Ready=True: the resource is available for use.
    pub const AVAILABLE: &str = "Available";
    /// Ready=False: the resource is not available.
    pub const UNAVAILABLE: &str = "Unavailable";
    /// Ready=False: the resource is being created.
    pub const CREATING: &str = "Creating";
    /// Ready=False: the resource is being deleted.
    pub const DELETING: &str = "Deleting";
    /// Synced=True: the last reconcile succeeded.
    pub const RECONCILE_SUCCESS: &str = "ReconcileSuccess";
    /// Synced=False: the last reconcile failed.
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    /// Synced=False: reconciling is paused by the crossplane.io/paused annotation.
    pub const RECONCILE_PAUSED: &str = "ReconcilePaused";
}

/// The longest condition message written, in bytes (longer ones are cut at
/// a character boundary and marked as cut).
pub const MAX_MESSAGE: usize = 1024;

fn condition(type_: &str, status: bool, reason: &str, message: Option<String>) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        last_transition_time: None,
        reason: Some(reason.to_owned()),
        message,
        observed_generation: None,
    }
}

/// Ready=True, Available.
pub fn available() -> Condition {
    condition(TYPE_READY, true, reason::AVAILABLE, None)
}

/// Ready=False, Unavailable, with a message saying why.
pub fn unavailable(message: impl Into<String>) -> Condition {
    condition(TYPE_READY, false, reason::UNAVAILABLE, Some(message.into()))
}

/// Ready=False, Creating.
pub fn creating() -> Condition {
    condition(TYPE_READY, false, reason::CREATING, None)
}

/// Ready=False, Deleting.
pub fn deleting() -> Condition {
    condition(TYPE_READY, false, reason::DELETING, None)
}

/// Synced=True, ReconcileSuccess.
pub fn reconcile_success() -> Condition {
    condition(TYPE_SYNCED, true, reason::RECONCILE_SUCCESS, None)
}

/// Synced=False, ReconcileError, with a message that says what to fix.
pub fn reconcile_error(message: impl Into<String>) -> Condition {
    condition(
        TYPE_SYNCED,
        false,
        reason::RECONCILE_ERROR,
        Some(message.into()),
    )
}

/// Synced=False, ReconcilePaused.
pub fn reconcile_paused() -> Condition {
    condition(
        TYPE_SYNCED,
        false,
        reason::RECONCILE_PAUSED,
        Some(
            "Reconciling is paused by the crossplane.io/paused annotation; remove it to resume"
                .to_owned(),
        ),
    )
}

/// A condition of any type (for kind-specific conditions such as Scheduled).
pub fn custom(type_: &str, status: bool, reason: &str, message: Option<String>) -> Condition {
    condition(type_, status, reason, message)
}

/// Sets `new` in `conditions`, replacing the condition of the same type.
/// lastTransitionTime is kept when the status did not change and set to `now`
/// (RFC 3339) when it did. Returns whether anything changed, so callers can
/// skip status writes that would change nothing.
pub fn set(conditions: &mut Vec<Condition>, mut new: Condition, now: &str) -> bool {
    // A message can carry text from anywhere (a registry's answer, an API
    // server's refusal, a package's permission request): a status holds at
    // most MAX_MESSAGE bytes of it, with control characters escaped.
    if let Some(m) = new.message.take() {
        let m = types::printable(&m).into_owned();
        new.message = Some(crate::events::truncate(m, MAX_MESSAGE));
    }
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            new.last_transition_time = if existing.status == new.status {
                existing.last_transition_time.clone()
            } else {
                Some(now.to_owned())
            };
            if *existing == new {
                return false;
            }
            *existing = new;
            true
        }
        None => {
            new.last_transition_time = Some(now.to_owned());
            conditions.push(new);
            true
        }
    }
}

/// An object's conditions (none before it has a status).
pub fn of<K: types::common::Conditioned>(obj: &K) -> &[Condition] {
    obj.status().map(K::conditions).unwrap_or_default()
}

/// Whether the condition of a type is present and True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == "True")
}

/// The condition of a type, if present.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Now, as conditions spell time.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_condition_is_added_with_a_transition_time() {
        let mut conds = Vec::new();
        assert!(set(&mut conds, available(), "t1"));
        assert_eq!(conds[0].last_transition_time.as_deref(), Some("t1"));
    }

    #[test]
    fn setting_the_same_condition_again_changes_nothing() {
        let mut conds = Vec::new();
        set(&mut conds, available(), "t1");
        assert!(!set(&mut conds, available(), "t2"));
        assert_eq!(conds[0].last_transition_time.as_deref(), Some("t1"));
    }

    #[test]
    fn a_message_of_a_mebibyte_is_written_as_a_kibibyte() {
        let mut conds = Vec::new();
        set(
            &mut conds,
            custom("Healthy", false, "R", Some("é".repeat(512 * 1024))),
            "t",
        );
        let m = conds[0].message.as_deref().unwrap();
        assert!(m.len() <= MAX_MESSAGE, "{}", m.len());
    }

    #[test]
    fn a_new_message_with_the_same_status_keeps_the_transition_time() {
        let mut conds = Vec::new();
        set(&mut conds, reconcile_error("a"), "t1");
        assert!(set(&mut conds, reconcile_error("b"), "t2"));
        assert_eq!(conds[0].last_transition_time.as_deref(), Some("t1"));
        assert_eq!(conds[0].message.as_deref(), Some("b"));
    }

    #[test]
    fn a_status_change_moves_the_transition_time() {
        let mut conds = Vec::new();
        set(&mut conds, unavailable("down"), "t1");
        assert!(set(&mut conds, available(), "t2"));
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].last_transition_time.as_deref(), Some("t2"));
    }

    #[test]
    fn conditions_of_other_types_are_left_alone() {
        let mut conds = Vec::new();
        set(&mut conds, available(), "t1");
        set(&mut conds, reconcile_success(), "t2");
        assert_eq!(conds.len(), 2);
        assert_eq!(
            get(&conds, TYPE_READY).map(|c| c.status.as_str()),
            Some("True")
        );
    }
}
