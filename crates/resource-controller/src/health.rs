//! What healthy means for a remote object: the resource's health rules
//! (`spec.healthRules`), or without them the built-in rule for its kind
//! ([`remote_object::unhealthy`]). CEL rules are compiled once per source
//! (runtime::cel's cache) and evaluated within its bounds, so a malformed
//! or runaway rule is a verdict of its own ([`Health::RuleFailed`]), never
//! a hang or a crash.

use runtime::cel::Queries;
use serde_json::Value;
use types::workload::v1alpha1::{HealthRule, HealthRuleType};

use crate::remote_object;

/// How many distinct rule sources stay compiled.
pub const COMPILED_RULES: usize = 512;

/// The verdict on a remote object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Healthy.
    Healthy,
    /// Not healthy, and why.
    Unhealthy(String),
    /// A rule could not be evaluated: which and why.
    RuleFailed(String),
}

/// The verdict of `rules` (none: the built-in rule) on the remote object
/// `live` of `kind`.
pub async fn judge(
    queries: &Queries,
    rules: &[HealthRule],
    kind: &str,
    live: Option<&Value>,
) -> Health {
    let status = live.and_then(|l| l.get("status")).filter(|s| !s.is_null());
    if rules.is_empty() {
        return verdict(remote_object::unhealthy(kind, status));
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("healthRules[{i}]");
        match rule.type_ {
            HealthRuleType::WellKnown => {
                if let Some(why) = remote_object::well_known(kind, status) {
                    return Health::Unhealthy(why);
                }
            }
            HealthRuleType::Cel => {
                let Some(object) = live else {
                    return Health::Unhealthy(format!("{kind} is not observed yet"));
                };
                let query = match queries.get(&rule.expression) {
                    Ok(q) => q,
                    Err(e) => return Health::RuleFailed(format!("{at}: {e}")),
                };
                match query.evaluate(object).await {
                    Ok(true) => {}
                    Ok(false) => {
                        return Health::Unhealthy(message(queries, rule, &at, kind, object).await);
                    }
                    // A field the object does not have yet (a status not
                    // written yet) says the object is not there yet.
                    Err(e) if e.is_missing_field() => {
                        return Health::Unhealthy(format!("{kind} is not healthy: {at}: {e}"));
                    }
                    Err(e) => return Health::RuleFailed(format!("{at}: {e}")),
                }
            }
        }
    }
    Health::Healthy
}

fn verdict(why: Option<String>) -> Health {
    why.map_or(Health::Healthy, Health::Unhealthy)
}

/// Why a CEL rule does not hold: its message expression's answer, or its
/// name. A Secret's data never makes a message.
async fn message(
    queries: &Queries,
    rule: &HealthRule,
    at: &str,
    kind: &str,
    object: &Value,
) -> String {
    let named = || format!("{kind} is not healthy: {at} ({}) is false", rule.expression);
    if rule.message_expression.is_empty() || kind == "Secret" {
        return named();
    }
    match queries.get(&rule.message_expression) {
        Ok(q) => match q.evaluate_text(object).await {
            Ok(text) => text,
            Err(e) => format!("{}; its messageExpression failed: {}", named(), e),
        },
        Err(e) => format!("{}; its messageExpression failed: {}", named(), e),
    }
}

#[cfg(test)]
mod tests;
