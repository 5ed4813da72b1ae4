//! The client cache, its bounds and the request counting.

use super::*;

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use prometheus::{IntCounterVec, Opts, core::Collector as _};

use super::counting::ClusterLabels;
use crate::{kubeconfig, metrics::Metrics};

const CERT_PEM: &str = include_str!("../testdata/cert.pem");

fn counter() -> IntCounterVec {
    IntCounterVec::new(Opts::new("requests", "test"), &["cluster", "verb"]).unwrap()
}

fn clients(capacity: usize, idle: Duration, labels: usize) -> RemoteClients {
    RemoteClients::with_limits(counter(), false, capacity, idle, labels)
}

fn kubeconfig(port: u16, token: &str) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(CERT_PEM);
    format!(
        "clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', certificate-authority-data: {ca}}}}}]\n\
         users: [{{name: u, user: {{token: {token}}}}}]\n\
         contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n\
         current-context: c\n"
    )
}

fn secret(uid: &str, rv: &str, data: &[(&str, String)]) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("creds".into()),
            namespace: Some("team".into()),
            uid: Some(uid.into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.clone().into_bytes())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

fn two_keys(rv: &str) -> Secret {
    secret(
        "uid-1",
        rv,
        &[
            ("control", kubeconfig(1, "a")),
            ("remote", kubeconfig(2, "b")),
        ],
    )
}

fn refusal(r: Result<RemoteCluster, RemoteError>) -> RemoteError {
    match r {
        Ok(_) => panic!("accepted"),
        Err(e) => e,
    }
}

fn same(a: &RemoteCluster, b: &RemoteCluster) -> bool {
    Arc::ptr_eq(&a.discovery, &b.discovery)
}

fn holds(rc: &RemoteClients, owner: &str) -> bool {
    rc.cache.lock().unwrap().by_owner.contains_key(owner)
}

#[tokio::test]
async fn owners_reading_different_keys_of_one_secret_get_different_clients() {
    let rc = clients(10, IDLE_TIMEOUT, 10);
    let s = two_keys("1");
    let control = rc.for_secret("team/control", &s, "control").unwrap();
    let remote = rc.for_secret("team/remote", &s, "remote").unwrap();
    assert!(!same(&control, &remote));
    assert_eq!(rc.len(), 2);
    // The same (Secret UID, key, resourceVersion) is served from the cache.
    assert!(same(
        &control,
        &rc.for_secret("team/control", &s, "control").unwrap()
    ));
    // An owner that switches keys gets a new client; the old one goes.
    let switched = rc.for_secret("team/control", &s, "remote").unwrap();
    assert!(!same(&control, &switched));
    assert_eq!(rc.len(), 2);
}

#[tokio::test]
async fn a_client_is_found_by_the_secrets_metadata_alone() {
    let rc = clients(10, IDLE_TIMEOUT, 10);
    assert!(rc.cached("team/c", "uid-1", "control", "1").is_none());
    let built = rc.for_secret("team/c", &two_keys("1"), "control").unwrap();
    let found = rc.cached("team/c", "uid-1", "control", "1").unwrap();
    assert!(same(&built, &found));
    assert!(rc.cached("team/c", "uid-1", "control", "2").is_none());
    assert!(rc.cached("team/c", "uid-1", "remote", "1").is_none());
    assert!(rc.cached("team/other", "uid-1", "control", "1").is_none());
}

#[tokio::test]
async fn a_new_resource_version_replaces_the_older_client() {
    let rc = clients(10, IDLE_TIMEOUT, 10);
    let v1 = rc.for_secret("team/c", &two_keys("1"), "control").unwrap();
    let v2 = rc.for_secret("team/c", &two_keys("2"), "control").unwrap();
    assert!(!same(&v1, &v2));
    // A new client has a new identity (and so new shared watches); a
    // cached one keeps its identity.
    assert_ne!(v1.id(), v2.id());
    assert_eq!(
        v2.id(),
        rc.for_secret("team/c", &two_keys("2"), "control")
            .unwrap()
            .id()
    );
    assert_eq!(rc.len(), 1);
    assert!(same(
        &v2,
        &rc.for_secret("team/c", &two_keys("2"), "control").unwrap()
    ));
    // A Secret deleted and created again has a new UID: a new client.
    let recreated = secret("uid-2", "2", &[("control", kubeconfig(1, "a"))]);
    let v3 = rc.for_secret("team/c", &recreated, "control").unwrap();
    assert!(!same(&v2, &v3));
    assert_eq!(rc.len(), 1);
}

#[tokio::test]
async fn released_owners_lose_their_client() {
    let rc = clients(10, IDLE_TIMEOUT, 10);
    rc.for_secret("team/a", &two_keys("1"), "control").unwrap();
    rc.for_secret("team/b", &two_keys("1"), "remote").unwrap();
    rc.release("team/a");
    assert!(!holds(&rc, "team/a") && holds(&rc, "team/b"));
    rc.release("team/gone-already");
    assert_eq!(rc.len(), 1);
}

#[tokio::test]
async fn the_cache_is_bounded_and_drops_the_least_recently_used() {
    let rc = clients(2, IDLE_TIMEOUT, 10);
    let s = two_keys("1");
    rc.for_secret("a", &s, "control").unwrap();
    rc.for_secret("b", &s, "control").unwrap();
    // a is used again, so b is now the least recently used.
    rc.for_secret("a", &s, "control").unwrap();
    rc.for_secret("c", &s, "control").unwrap();
    assert_eq!(rc.len(), 2);
    assert!(holds(&rc, "a") && holds(&rc, "c") && !holds(&rc, "b"));
}

#[tokio::test]
async fn clients_of_owners_that_no_longer_exist_are_dropped() {
    let rc = clients(10, IDLE_TIMEOUT, 10);
    let s = two_keys("1");
    rc.for_secret("team/a", &s, "control").unwrap();
    rc.for_secret("team/b", &s, "remote").unwrap();
    rc.retain_owners(|owner| owner == "team/b");
    assert!(!holds(&rc, "team/a") && holds(&rc, "team/b"));
}

#[tokio::test]
async fn idle_clients_are_dropped() {
    let rc = clients(10, Duration::ZERO, 10);
    let s = two_keys("1");
    rc.for_secret("a", &s, "control").unwrap();
    rc.for_secret("b", &s, "control").unwrap();
    assert!(!holds(&rc, "a") && holds(&rc, "b"));
}

#[tokio::test]
async fn refused_or_missing_kubeconfigs_build_nothing_and_quote_nothing() {
    let rc = clients(10, IDLE_TIMEOUT, 10);
    let s = secret("uid-1", "1", &[("kubeconfig", "s3cr3t-token".to_owned())]);
    let e = refusal(rc.for_secret("team/c", &s, "kubeconfig"));
    let chain = crate::events::error_chain(&e);
    assert!(
        chain.starts_with("Secret team/creds key \"kubeconfig\" does not hold a valid kubeconfig"),
        "{chain}"
    );
    assert!(!chain.contains("s3cr3t"), "{chain}");
    let e = refusal(rc.for_secret("team/c", &s, "other"));
    assert!(matches!(e, RemoteError::MissingKey { .. }), "{e}");
    let exec = kubeconfig(1, "t").replace("{token: t}", "{exec: {command: sh}}");
    let s = secret("uid-1", "2", &[("kubeconfig", exec)]);
    let e = refusal(rc.for_secret("team/c", &s, "kubeconfig"));
    assert!(crate::events::error_chain(&e).contains("users[0].user.exec runs a command"));
    assert!(rc.is_empty());
}

fn series(counter: &IntCounterVec) -> Vec<String> {
    let mut out: Vec<String> = counter
        .collect()
        .iter()
        .flat_map(|f| f.get_metric().to_vec())
        .map(|m| {
            m.get_label()
                .iter()
                .find(|l| l.name() == "cluster")
                .map(|l| l.value().to_owned())
                .unwrap_or_default()
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn cluster_labels_are_capped_then_other_and_freed_with_their_clients() {
    let labels = ClusterLabels::new(counter(), 2);
    let a = labels.acquire("team/a");
    let b = labels.acquire("team/b");
    let a2 = labels.acquire("team/a");
    let c = labels.acquire("team/c");
    assert_eq!(
        [&a, &b, &a2, &c].map(|l| l.value.as_str()),
        ["team/a", "team/b", "team/a", "other"]
    );
    // "control" always means the control cluster.
    assert_eq!(labels.acquire("control").value, "other");
    for l in [&a, &b, &c] {
        labels
            .counter
            .with_label_values(&[l.value.as_str(), "get"])
            .inc();
    }
    assert_eq!(series(&labels.counter), ["other", "team/a", "team/b"]);
    drop(a);
    // Still held by a2.
    assert_eq!(labels.acquire("team/d").value, "other");
    drop(a2);
    assert_eq!(series(&labels.counter), ["other", "team/b"]);
    assert_eq!(labels.acquire("team/d").value, "team/d");
}

#[tokio::test]
async fn remote_clients_count_under_bounded_labels_and_control_under_its_own() {
    let rc = clients(10, IDLE_TIMEOUT, 1);
    let s = two_keys("1");
    let a = rc.for_secret("team/a", &s, "control").unwrap();
    let b = rc.for_secret("team/b", &s, "remote").unwrap();
    // Nothing listens on ports 1 and 2: the requests fail, but are counted.
    let _ = a.client.apiserver_version().await;
    let _ = b.client.apiserver_version().await;
    assert_eq!(series(&rc.labels.counter), ["other", "team/a"]);
    assert_eq!((a.metric_label(), b.metric_label()), ("team/a", "other"));
    let metrics = Metrics::new().unwrap();
    let config = kubeconfig::sanitise(kubeconfig(3, "t").as_bytes(), false)
        .unwrap()
        .config();
    let control = counted_client(config, &metrics).unwrap();
    let _ = control.apiserver_version().await;
    assert_eq!(series(&metrics.api_requests), ["control"]);
    // Once a's client is gone its label is free for another cluster.
    drop(a);
    rc.release("team/a");
    let deadline = Instant::now() + Duration::from_secs(10);
    while rc.labels.held.lock().unwrap().contains_key("team/a") {
        assert!(Instant::now() < deadline, "team/a still held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(series(&rc.labels.counter), ["other"]);
}

#[test]
fn verbs_are_told_apart_by_method_and_path() {
    let get = http::Method::GET;
    assert_eq!(verb(&get, "/api/v1/namespaces/a/configmaps", ""), "list");
    assert_eq!(verb(&get, "/api/v1/namespaces/a/configmaps/b", ""), "get");
    assert_eq!(
        verb(&get, "/apis/apps/v1/deployments", "watch=true&rv=1"),
        "watch"
    );
    assert_eq!(verb(&get, "/api/v1/namespaces", ""), "list");
    assert_eq!(verb(&get, "/api/v1/namespaces/wordpress", ""), "get");
    assert_eq!(
        verb(
            &http::Method::PATCH,
            "/apis/apps/v1/namespaces/a/deployments/b",
            ""
        ),
        "patch"
    );
    assert_eq!(
        verb(&http::Method::DELETE, "/api/v1/namespaces/a/secrets/b", ""),
        "delete"
    );
}
