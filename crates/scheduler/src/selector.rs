//! Label selector matching (matchLabels and matchExpressions), as the API
//! server defines it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` satisfy `selector`. An absent or empty selector matches
/// everything. An unknown operator matches nothing (the API server would have
/// refused it; we fail closed).
pub fn matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

/// A selector as a user would write it: `app=x,tier in (a,b),!legacy`.
pub fn describe(selector: Option<&LabelSelector>) -> String {
    let Some(selector) = selector else {
        return "<everything>".to_owned();
    };
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => format!("{} {other} ({values})", e.key),
        });
    }
    if parts.is_empty() {
        "<everything>".to_owned()
    } else {
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    fn sel(ml: &[(&str, &str)], me: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(ml)),
            match_expressions: Some(me),
        }
    }

    #[test]
    fn no_selector_matches_every_cluster() {
        assert!(matches(None, &labels(&[])));
        assert!(matches(
            Some(&LabelSelector::default()),
            &labels(&[("a", "b")])
        ));
    }

    #[test]
    fn match_labels_need_every_pair() {
        let s = sel(&[("app", "wordpress-demo"), ("env", "prod")], vec![]);
        assert!(matches(
            Some(&s),
            &labels(&[("app", "wordpress-demo"), ("env", "prod"), ("x", "y")])
        ));
        assert!(!matches(Some(&s), &labels(&[("app", "wordpress-demo")])));
        assert!(!matches(
            Some(&s),
            &labels(&[("app", "other"), ("env", "prod")])
        ));
    }

    #[test]
    fn match_expressions_follow_each_operator() {
        let l = labels(&[("tier", "gold"), ("region", "eu")]);
        assert!(matches(
            Some(&sel(&[], vec![expr("tier", "In", &["gold", "silver"])])),
            &l
        ));
        assert!(!matches(
            Some(&sel(&[], vec![expr("tier", "In", &["bronze"])])),
            &l
        ));
        assert!(matches(
            Some(&sel(&[], vec![expr("region", "NotIn", &["us"])])),
            &l
        ));
        assert!(matches(
            Some(&sel(&[], vec![expr("missing", "NotIn", &["us"])])),
            &l
        ));
        assert!(!matches(
            Some(&sel(&[], vec![expr("region", "NotIn", &["eu"])])),
            &l
        ));
        assert!(matches(
            Some(&sel(&[], vec![expr("tier", "Exists", &[])])),
            &l
        ));
        assert!(!matches(
            Some(&sel(&[], vec![expr("gpu", "Exists", &[])])),
            &l
        ));
        assert!(matches(
            Some(&sel(&[], vec![expr("gpu", "DoesNotExist", &[])])),
            &l
        ));
    }

    #[test]
    fn labels_and_expressions_must_both_hold() {
        let s = sel(&[("app", "x")], vec![expr("tier", "In", &["gold"])]);
        assert!(matches(
            Some(&s),
            &labels(&[("app", "x"), ("tier", "gold")])
        ));
        assert!(!matches(
            Some(&s),
            &labels(&[("app", "x"), ("tier", "silver")])
        ));
    }

    #[test]
    fn an_unknown_operator_matches_nothing() {
        assert!(!matches(
            Some(&sel(&[], vec![expr("tier", "Near", &["gold"])])),
            &labels(&[("tier", "gold")])
        ));
    }

    #[test]
    fn selectors_are_described_as_users_write_them() {
        let s = sel(
            &[("app", "x")],
            vec![
                expr("tier", "In", &["a", "b"]),
                expr("legacy", "DoesNotExist", &[]),
            ],
        );
        assert_eq!(describe(Some(&s)), "app=x,tier in (a,b),!legacy");
        assert_eq!(describe(None), "<everything>");
    }
}
