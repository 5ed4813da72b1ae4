//! The stack objects' Ready condition: how the controllers set it and how
//! one reads another's.

use runtime::conditions;
use types::{common::Condition, extensions::v1alpha1::Extension};

/// Sets Ready on a stack object's conditions.
pub fn set_ready(conditions: &mut Vec<Condition>, ok: bool, reason: &str, message: String) {
    conditions::set(
        conditions,
        conditions::custom(conditions::TYPE_READY, ok, reason, Some(message)),
        &conditions::now(),
    );
}

/// Whether an Extension is Ready.
pub fn ready(e: &Extension) -> bool {
    conditions::is_true(conditions::of(e), conditions::TYPE_READY)
}

/// Its Ready message (why not).
pub fn ready_message(e: &Extension) -> String {
    conditions::get(conditions::of(e), conditions::TYPE_READY)
        .and_then(|c| c.message.clone())
        .unwrap_or_else(|| "not reconciled yet".to_owned())
}
