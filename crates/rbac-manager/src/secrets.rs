//! Where Provider runtimes may read and write Secrets and ConfigMaps
//! (credentials, connection details) when the operator narrowed them to the
//! namespaces `--runtime-secret-namespaces` names (by default they are in
//! each runtime's system role, cluster-wide, as upstream's providers list
//! and watch them through their caches).
//!
//! The grant is a RoleBinding `crossplane-rs:package-runtimes:secrets` in
//! each such namespace, of the ClusterRole `deploy/` ships
//! ([`crate::roles::SECRETS_ROLE`]), to every runtime ServiceAccount that
//! has its `system` role bound (a refused or inactive revision's runtime
//! is not among them). The runtimes' namespace, where their certificates
//! and the pull Secrets of their images live, never gets one.
//! One binding per namespace, whatever the number of runtimes: a new
//! namespace costs one write, a runtime bound or unbound one write per
//! namespace, and nothing changed writes nothing. The bindings are owned by
//! that ClusterRole, so they go when `deploy/` is deleted.
//!
//! Watches: Namespaces (metadata only), the revisions' `system`
//! ClusterRoleBindings (by label) and these RoleBindings (by label). Each
//! change compares every namespace's binding with what it should be and
//! writes only the difference.

use std::{collections::BTreeMap, time::Duration};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::{
    core::v1::Namespace,
    rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding, RoleRef, Subject},
};
use kube::{
    Api, ResourceExt,
    api::ObjectMeta,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use runtime::{
    controller::{CACHE_NOT_READY_RETRY, Runtime, cache_ready, trim},
    events::error_chain,
    ssa,
};

use crate::roles::SECRETS_ROLE;

/// The RoleBinding's name in each namespace.
pub const BINDING: &str = "crossplane-rs:package-runtimes:secrets";
/// The label that marks it (and that its watch selects).
const LABEL: &str = "rbac.crossplane-rs.io/runtime-secrets";
/// The label the revisions' `system` ClusterRoleBindings carry.
const REVISION_LABEL: &str = types::pkg::contract::labels::REVISION;
/// How soon a pass that failed is tried again (when nothing wakes it
/// sooner).
const RETRY: Duration = Duration::from_secs(10);

/// Which namespaces runtimes get Secrets in: those
/// `--runtime-secret-namespaces` names, never the runtimes' own (the
/// second field) even when named.
#[derive(Clone, Debug)]
pub struct Scope(pub Vec<String>, pub String);

impl Scope {
    fn includes(&self, ns: &str) -> bool {
        ns != self.1 && self.0.iter().any(|n| n == ns)
    }

    fn runtimes(&self) -> &str {
        &self.1
    }
}

/// The runtime ServiceAccounts whose `system` role is bound, sorted.
fn bound_runtimes(bindings: &[std::sync::Arc<ClusterRoleBinding>], runtimes: &str) -> Vec<Subject> {
    let mut subjects: Vec<Subject> = bindings
        .iter()
        .flat_map(|b| b.subjects.iter().flatten())
        .filter(|s| s.kind == "ServiceAccount" && s.namespace.as_deref() == Some(runtimes))
        .map(|s| Subject {
            kind: "ServiceAccount".to_owned(),
            name: s.name.clone(),
            namespace: Some(runtimes.to_owned()),
            ..Default::default()
        })
        .collect();
    subjects.sort_by(|a, b| a.name.cmp(&b.name));
    subjects.dedup_by(|a, b| a.name == b.name);
    subjects
}

/// The binding `ns` should have.
fn binding(ns: &str, subjects: &[Subject], owner: &ClusterRole) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(BINDING.to_owned()),
            namespace: Some(ns.to_owned()),
            labels: Some(BTreeMap::from([
                (LABEL.to_owned(), "true".to_owned()),
                (
                    "app.kubernetes.io/part-of".to_owned(),
                    "crossplane-rs".to_owned(),
                ),
            ])),
            owner_references: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "rbac.authorization.k8s.io/v1".to_owned(),
                    kind: "ClusterRole".to_owned(),
                    name: SECRETS_ROLE.to_owned(),
                    uid: owner.uid().unwrap_or_default(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "ClusterRole".to_owned(),
            name: SECRETS_ROLE.to_owned(),
        },
        subjects: Some(subjects.to_vec()),
    }
}

/// What one pass writes: each namespace's binding to apply, and the
/// namespaces whose binding goes.
#[derive(Debug, Default, PartialEq)]
struct Plan {
    apply: Vec<String>,
    delete: Vec<String>,
}

/// Compares what each namespace has with what it should have.
fn plan(
    scope: &Scope,
    namespaces: &[(String, bool)],
    subjects: &[Subject],
    live: &BTreeMap<String, Vec<Subject>>,
) -> Plan {
    let mut p = Plan::default();
    let mut wanted = std::collections::BTreeSet::new();
    if !subjects.is_empty() {
        for (ns, terminating) in namespaces {
            if scope.includes(ns) && !terminating {
                wanted.insert(ns.as_str());
                if live.get(ns).map(Vec::as_slice) != Some(subjects) {
                    p.apply.push(ns.clone());
                }
            }
        }
    }
    for ns in live.keys() {
        if !wanted.contains(ns.as_str()) && namespaces.iter().any(|(n, t)| n == ns && !t) {
            p.delete.push(ns.clone());
        }
    }
    p
}

/// Keeps the bindings, ready to run while this replica leads.
pub fn controller(rt: &Runtime, scope: Scope) -> impl Future<Output = ()> + Send + use<> {
    let client = rt.client.clone();
    let field_manager = rt.field_manager();
    let shutdown = rt.shutdown();
    // Three caches (managedFields dropped: nothing here reads them); any
    // change of any of them is one wake-up.
    let (namespaces, ns_events) = trim::reflected(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
        trim::nothing_else,
    );
    let (system, system_events) = trim::reflected(
        Api::<ClusterRoleBinding>::all(client.clone()),
        watcher::Config::default().labels(REVISION_LABEL),
        trim::nothing_else,
    );
    let (bindings, binding_events) = trim::reflected(
        Api::<RoleBinding>::all(client.clone()),
        watcher::Config::default().labels(LABEL),
        trim::nothing_else,
    );
    let ns_changes = ns_events.touched_objects().map(|_| ());
    let system_changes = system_events.touched_objects().map(|_| ());
    let binding_changes = binding_events.touched_objects().map(|_| ());
    async move {
        let mut changes = futures::stream::select_all([
            ns_changes.boxed(),
            system_changes.boxed(),
            binding_changes.boxed(),
        ]);
        let roles = Api::<ClusterRole>::all(client.clone());
        let mut owner: Option<ClusterRole> = None;
        let mut shutdown = std::pin::pin!(shutdown);
        let mut retry: Option<Duration> = None;
        loop {
            // Wait for a change (or the retry), then let a burst settle.
            let woke = tokio::select! {
                _ = &mut shutdown => return,
                c = changes.next() => c.is_some(),
                () = tokio::time::sleep(retry.unwrap_or(Duration::from_secs(3600))), if retry.is_some() => true,
            };
            if !woke {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            while let Some(Some(_)) = changes.next().now_or_never() {}
            // The caches fill only while `changes` is polled: a cache not
            // yet complete is looked at again shortly, never waited on.
            if !(cache_ready(&namespaces).await
                && cache_ready(&system).await
                && cache_ready(&bindings).await)
            {
                retry = Some(CACHE_NOT_READY_RETRY);
                continue;
            }
            if owner.is_none() {
                owner = match roles.get_opt(SECRETS_ROLE).await {
                    Ok(Some(r)) => Some(r),
                    Ok(None) => {
                        tracing::warn!(
                            role = SECRETS_ROLE,
                            "the ClusterRole deploy/ ships is missing; runtimes get no Secrets until it exists"
                        );
                        retry = Some(RETRY);
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), role = SECRETS_ROLE, "cannot read the ClusterRole");
                        retry = Some(RETRY);
                        continue;
                    }
                };
            }
            let Some(role) = &owner else { continue };
            let subjects = bound_runtimes(&system.state(), scope.runtimes());
            let listed: Vec<(String, bool)> = namespaces
                .state()
                .iter()
                .map(|n| (n.name_any(), n.metadata.deletion_timestamp.is_some()))
                .collect();
            let live: BTreeMap<String, Vec<Subject>> = bindings
                .state()
                .iter()
                .filter(|b| b.name_any() == BINDING)
                .map(|b| {
                    (
                        b.namespace().unwrap_or_default(),
                        b.subjects.clone().unwrap_or_default(),
                    )
                })
                .collect();
            let p = plan(&scope, &listed, &subjects, &live);
            let mut failed = false;
            for ns in &p.apply {
                let api = Api::<RoleBinding>::namespaced(client.clone(), ns);
                if let Err(e) =
                    ssa::apply(&api, BINDING, &binding(ns, &subjects, role), &field_manager).await
                {
                    failed = true;
                    tracing::warn!(namespace = %ns, error = %error_chain(&e), "cannot grant runtimes Secrets in a namespace");
                }
            }
            for ns in &p.delete {
                let api = Api::<RoleBinding>::namespaced(client.clone(), ns);
                if let Err(e) = runtime::objects::delete(&api, BINDING).await {
                    failed = true;
                    tracing::warn!(namespace = %ns, error = %error_chain(&e), "cannot take runtimes' Secrets away in a namespace");
                }
            }
            if !p.apply.is_empty() || !p.delete.is_empty() {
                tracing::info!(
                    granted = p.apply.len(),
                    removed = p.delete.len(),
                    runtimes = subjects.len(),
                    "runtime Secret bindings written"
                );
            }
            // The owner may have been deleted and made again (a new uid).
            if failed {
                owner = None;
            }
            retry = failed.then_some(RETRY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(name: &str) -> Subject {
        Subject {
            kind: "ServiceAccount".to_owned(),
            name: name.to_owned(),
            namespace: Some("rt".to_owned()),
            ..Default::default()
        }
    }

    fn nss(names: &[&str]) -> Vec<(String, bool)> {
        names.iter().map(|n| ((*n).to_owned(), false)).collect()
    }

    #[test]
    fn each_named_namespace_gets_one_binding_and_unchanged_ones_are_not_written() {
        let scope = Scope(vec!["x".into(), "y".into()], "rt".into());
        let subjects = vec![sa("a"), sa("b")];
        let live = BTreeMap::from([("x".to_owned(), subjects.clone())]);
        let p = plan(&scope, &nss(&["rt", "x", "y"]), &subjects, &live);
        assert_eq!(
            p,
            Plan {
                apply: vec!["y".into()],
                delete: vec![]
            }
        );
    }

    #[test]
    fn named_namespaces_only_never_the_runtimes_and_others_lose_theirs() {
        let scope = Scope(vec!["x".into(), "rt".into()], "rt".into());
        let subjects = vec![sa("a")];
        let live = BTreeMap::from([
            ("y".to_owned(), subjects.clone()),
            ("rt".to_owned(), subjects.clone()),
        ]);
        let p = plan(&scope, &nss(&["rt", "x", "y"]), &subjects, &live);
        assert_eq!(
            p,
            Plan {
                apply: vec!["x".into()],
                delete: vec!["rt".into(), "y".into()]
            }
        );
    }

    #[test]
    fn no_runtime_bound_means_no_binding_and_terminating_namespaces_are_left_to_go() {
        let scope = Scope(vec!["x".into(), "gone".into()], "rt".into());
        let live = BTreeMap::from([
            ("x".to_owned(), vec![sa("a")]),
            ("gone".to_owned(), vec![sa("a")]),
        ]);
        let namespaces = vec![("x".to_owned(), false), ("gone".to_owned(), true)];
        let p = plan(&scope, &namespaces, &[], &live);
        assert_eq!(
            p,
            Plan {
                apply: vec![],
                delete: vec!["x".into()]
            }
        );
    }

    #[test]
    fn only_service_accounts_of_the_runtimes_namespace_count_once_each() {
        let crb = |subjects: Vec<Subject>| {
            std::sync::Arc::new(ClusterRoleBinding {
                subjects: Some(subjects),
                ..Default::default()
            })
        };
        let mut elsewhere = sa("c");
        elsewhere.namespace = Some("crossplane-system".into());
        let user = Subject {
            kind: "User".into(),
            name: "u".into(),
            ..Default::default()
        };
        let got = bound_runtimes(
            &[
                crb(vec![sa("b"), elsewhere, user]),
                crb(vec![sa("a"), sa("b")]),
            ],
            "rt",
        );
        assert_eq!(got, vec![sa("a"), sa("b")]);
    }
}
