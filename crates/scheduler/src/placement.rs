//! Where an application goes: a pure function of the application's selector,
//! the clusters in its namespace and how many applications each already has.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::selector;

/// What the scheduler knows of one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Cluster name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// None when Ready; otherwise why not.
    pub not_ready: Option<String>,
    /// Applications already scheduled to it.
    pub scheduled: usize,
}

/// The decision for one application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Schedule to this cluster.
    Cluster(String),
    /// Nothing fits; the message says why, cluster by cluster.
    Pending(String),
}

/// Picks, among the Ready clusters matching `selector`, the one with the
/// fewest applications, ties broken by name. Deterministic: the same inputs
/// always give the same answer.
pub fn place(
    namespace: &str,
    selector: Option<&LabelSelector>,
    clusters: &[Candidate],
) -> Placement {
    let best = clusters
        .iter()
        .filter(|c| c.not_ready.is_none() && selector::matches(selector, &c.labels))
        .min_by(|a, b| {
            a.scheduled
                .cmp(&b.scheduled)
                .then_with(|| a.name.cmp(&b.name))
        });
    if let Some(c) = best {
        return Placement::Cluster(c.name.clone());
    }
    let wanted = selector::describe(selector);
    if clusters.is_empty() {
        return Placement::Pending(format!(
            "no KubernetesCluster exists in namespace {namespace}; create one labelled to match clusterSelector {wanted}"
        ));
    }
    let mut sorted: Vec<&Candidate> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let why: Vec<String> = sorted
        .iter()
        .map(|c| {
            if !selector::matches(selector, &c.labels) {
                format!("{}: labels do not match", c.name)
            } else {
                format!(
                    "{}: not Ready ({})",
                    c.name,
                    c.not_ready.as_deref().unwrap_or("unknown")
                )
            }
        })
        .collect();
    Placement::Pending(format!(
        "no Ready KubernetesCluster in namespace {namespace} matches clusterSelector {wanted}: {}",
        why.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(name: &str, labels: &[(&str, &str)], ready: bool, scheduled: usize) -> Candidate {
        Candidate {
            name: name.to_owned(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            not_ready: (!ready).then(|| "secret missing".to_owned()),
            scheduled,
        }
    }

    fn app_selector() -> LabelSelector {
        LabelSelector {
            match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
            match_expressions: None,
        }
    }

    #[test]
    fn the_matching_cluster_with_fewest_applications_wins() {
        let clusters = [
            cluster("a", &[("app", "web")], true, 3),
            cluster("b", &[("app", "web")], true, 1),
            cluster("c", &[("app", "db")], true, 0),
        ];
        assert_eq!(
            place("ns", Some(&app_selector()), &clusters),
            Placement::Cluster("b".into())
        );
    }

    #[test]
    fn ties_are_broken_by_name() {
        let clusters = [
            cluster("zeta", &[("app", "web")], true, 1),
            cluster("alpha", &[("app", "web")], true, 1),
        ];
        assert_eq!(
            place("ns", Some(&app_selector()), &clusters),
            Placement::Cluster("alpha".into())
        );
    }

    #[test]
    fn a_cluster_that_is_not_ready_is_never_chosen() {
        let clusters = [
            cluster("a", &[("app", "web")], false, 0),
            cluster("b", &[("app", "web")], true, 9),
        ];
        assert_eq!(
            place("ns", Some(&app_selector()), &clusters),
            Placement::Cluster("b".into())
        );
    }

    #[test]
    fn no_candidate_says_why_for_each_cluster() {
        let clusters = [
            cluster("b", &[("app", "web")], false, 0),
            cluster("a", &[("app", "db")], true, 0),
        ];
        let Placement::Pending(msg) = place("complex", Some(&app_selector()), &clusters) else {
            panic!("expected Pending");
        };
        assert_eq!(
            msg,
            "no Ready KubernetesCluster in namespace complex matches clusterSelector app=web: a: labels do not match; b: not Ready (secret missing)"
        );
    }

    #[test]
    fn no_cluster_at_all_says_so() {
        let Placement::Pending(msg) = place("complex", Some(&app_selector()), &[]) else {
            panic!("expected Pending");
        };
        assert!(
            msg.starts_with("no KubernetesCluster exists in namespace complex"),
            "{msg}"
        );
    }
}
