//! Sessions against a cluster that does not answer.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{api::DynamicObject, discovery::ApiResource, runtime::reflector::ObjectRef};

use super::*;
use crate::{metrics::Metrics, remote::RemoteCluster};

/// A cluster nothing answers for (port 1 is closed).
fn dead_cluster() -> RemoteCluster {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    RemoteCluster::new(kube::Client::try_from(config).unwrap(), "dead")
}

fn target(cluster: &RemoteCluster, name: &str) -> Target {
    Target {
        cluster: cluster.clone(),
        resource: ApiResource::erase::<ConfigMap>(&()),
        namespace: Some("ns".into()),
        name: name.into(),
        scope: Scope::Kind { labels: None },
    }
}

#[tokio::test]
async fn sessions_start_and_stop_watches_and_count_them() {
    let metrics = Metrics::new().unwrap();
    let (watches, _woken) = Watches::<ConfigMap>::new("test", &metrics);
    let open = || metrics.shared_watches.with_label_values(&["test"]).get();
    let cluster = dead_cluster();
    let dep = ObjectRef::new("d").within("deps");
    let mut session = watches.session(dep.clone());
    // Not listed (and never will be): ask the server.
    assert!(matches!(
        session.read(&target(&cluster, "a")),
        Cached::Unknown
    ));
    session.read(&target(&cluster, "b"));
    session.commit();
    assert_eq!((watches.open(), open()), (1, 1));
    // A rotated credential: a new client, a new watch; committing
    // moves the dependent, and the old watch stops.
    let rotated = dead_cluster();
    let mut session = watches.session(dep.clone());
    session.read(&target(&rotated, "a"));
    assert_eq!(open(), 2);
    session.commit();
    assert_eq!(open(), 1);
    watches.release(&dep);
    assert_eq!((watches.open(), open()), (0, 0));
    // Two controllers in one binary share the registry.
    let (_other, _) = Watches::<ConfigMap>::new("other", &metrics);
}

#[tokio::test]
async fn a_poisoned_lock_answers_unknown_and_never_panics() {
    let metrics = Metrics::new().unwrap();
    let (watches, _woken) = Watches::<ConfigMap>::new("test", &metrics);
    let shared = watches.shared.clone();
    let _ = std::thread::spawn(move || {
        let _guard = shared.state.lock().unwrap();
        panic!("poison the lock");
    })
    .join();
    let cluster = dead_cluster();
    let dep = ObjectRef::new("d").within("deps");
    let mut session = watches.session(dep.clone());
    assert!(matches!(
        session.read(&target(&cluster, "a")),
        Cached::Unknown
    ));
    session.commit();
    watches.written(
        &target(&cluster, "a"),
        DynamicObject::new("a", &ApiResource::erase::<ConfigMap>(&())),
    );
    watches.release(&dep);
    assert_eq!(watches.open(), 0);
}

#[tokio::test]
async fn a_listed_object_is_cached_with_the_kind_its_list_left_out() {
    let cluster = dead_cluster();
    // As a ConfigMapList's item: no apiVersion, no kind.
    let mut listed = DynamicObject::new("a", &ApiResource::erase::<ConfigMap>(&()));
    listed.types = None;
    let cached = task::typed(listed, &target(&cluster, "a"));
    let types = cached.types.unwrap();
    assert_eq!(
        (types.api_version.as_str(), types.kind.as_str()),
        ("v1", "ConfigMap")
    );
    // What an object says of itself is kept.
    let mut other = DynamicObject::new("b", &ApiResource::erase::<ConfigMap>(&()));
    other.types.as_mut().unwrap().api_version = "v2".into();
    let kept = task::typed(other, &target(&cluster, "b"));
    assert_eq!(kept.types.unwrap().api_version, "v2");
}
