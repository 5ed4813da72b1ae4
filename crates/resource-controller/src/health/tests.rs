#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;

use super::*;

fn cel(expression: &str, message_expression: &str) -> HealthRule {
    HealthRule {
        type_: HealthRuleType::Cel,
        expression: expression.to_owned(),
        message_expression: message_expression.to_owned(),
    }
}

fn well_known() -> HealthRule {
    HealthRule::default()
}

fn object(kind: &str, status: Value) -> Value {
    json!({"apiVersion": "example.org/v1", "kind": kind, "metadata": {"name": "x"}, "status": status})
}

#[tokio::test]
async fn without_rules_the_built_in_rule_decides() {
    let q = Queries::new(8);
    let job = object("Job", json!({"active": 1}));
    // No rule for Jobs built in: healthy as today (no Ready condition).
    assert_eq!(judge(&q, &[], "Job", Some(&job)).await, Health::Healthy);
    let deployment = object(
        "Deployment",
        json!({"conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}]}),
    );
    assert_eq!(
        judge(&q, &[], "Deployment", Some(&deployment)).await,
        Health::Unhealthy("Deployment is not available: MinimumReplicasUnavailable".to_owned())
    );
}

#[tokio::test]
async fn a_cel_rule_follows_the_phase_and_says_why_in_its_own_words() {
    let q = Queries::new(8);
    let rules = [cel(
        "object.status.phase == 'Running'",
        "'phase is ' + object.status.phase",
    )];
    let running = object("Database", json!({"phase": "Running"}));
    let pending = object("Database", json!({"phase": "Pending"}));
    assert_eq!(
        judge(&q, &rules, "Database", Some(&running)).await,
        Health::Healthy
    );
    assert_eq!(
        judge(&q, &rules, "Database", Some(&pending)).await,
        Health::Unhealthy("phase is Pending".to_owned())
    );
    // Without a message expression, the rule is named.
    let plain = [cel("object.status.phase == 'Running'", "")];
    assert_eq!(
        judge(&q, &plain, "Database", Some(&pending)).await,
        Health::Unhealthy(
            "Database is not healthy: healthRules[0] (object.status.phase == 'Running') is false"
                .to_owned()
        )
    );
    // No status yet: not healthy (a question of the object, not of the
    // rule).
    let fresh =
        json!({"apiVersion": "example.org/v1", "kind": "Database", "metadata": {"name": "x"}});
    assert_eq!(
        judge(&q, &rules, "Database", Some(&fresh)).await,
        Health::Unhealthy(
            "Database is not healthy: healthRules[0]: the expression reads a field the object does not have: status (guard it with has(...))".to_owned()
        )
    );
    // Not observed yet: not healthy, nothing evaluated.
    assert!(matches!(
        judge(&q, &rules, "Database", None).await,
        Health::Unhealthy(_)
    ));
}

#[tokio::test]
async fn a_well_known_rule_knows_a_job_is_healthy_once_complete() {
    let q = Queries::new(8);
    let rules = [well_known()];
    let complete = object(
        "Job",
        json!({"conditions": [{"type": "Complete", "status": "True"}]}),
    );
    let failed = object(
        "Job",
        json!({"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}),
    );
    let running = object("Job", json!({"active": 1}));
    assert_eq!(
        judge(&q, &rules, "Job", Some(&complete)).await,
        Health::Healthy
    );
    assert_eq!(
        judge(&q, &rules, "Job", Some(&failed)).await,
        Health::Unhealthy(
            "Job failed: BackoffLimitExceeded Job has reached the specified backoff limit"
                .to_owned()
        )
    );
    assert_eq!(
        judge(&q, &rules, "Job", Some(&running)).await,
        Health::Unhealthy("Job has not completed".to_owned())
    );
}

#[tokio::test]
async fn every_rule_must_hold_and_the_first_that_does_not_speaks() {
    let q = Queries::new(8);
    let rules = [
        cel(
            "object.status.phase == 'Running'",
            "'phase is ' + object.status.phase",
        ),
        cel("object.status.ready == true", "'not ready yet'"),
    ];
    let half = object("Database", json!({"phase": "Running", "ready": false}));
    assert_eq!(
        judge(&q, &rules, "Database", Some(&half)).await,
        Health::Unhealthy("not ready yet".to_owned())
    );
}

#[tokio::test]
async fn a_rule_that_cannot_be_evaluated_is_named_not_a_hang() {
    let q = Queries::new(8);
    let o = object("Database", json!({"phase": "Running", "items": [1, 2, 3]}));
    for (rule, says) in [
        (cel("object.status.phase ==", ""), "healthRules[0]: "),
        (cel("object.status.phase", ""), "healthRules[0]: "),
        (
            cel(
                "object.status.items.all(x, object.status.items.all(y, x != y || x == y))",
                "",
            ),
            "healthRules[0]: ",
        ),
    ] {
        match judge(&q, std::slice::from_ref(&rule), "Database", Some(&o)).await {
            Health::RuleFailed(why) => assert!(why.starts_with(says), "{why}"),
            other => panic!("{}: {other:?}", rule.expression),
        }
    }
    // A message expression that fails still says the rule is false.
    let rules = [cel(
        "object.status.phase == 'Stopped'",
        "object.status.phase + 1",
    )];
    match judge(&q, &rules, "Database", Some(&o)).await {
        Health::Unhealthy(why) => assert!(why.contains("messageExpression failed"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_secrets_data_never_makes_a_message() {
    let q = Queries::new(8);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"password": "aHVudGVyMg=="}});
    let rules = [cel("!has(object.data)", "object.data.password")];
    match judge(&q, &rules, "Secret", Some(&secret)).await {
        Health::Unhealthy(why) => assert!(!why.contains("aHVudGVyMg"), "{why}"),
        other => panic!("{other:?}"),
    }
}
