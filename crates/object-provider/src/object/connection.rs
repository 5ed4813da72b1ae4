//! Connection details: values of objects in the target cluster
//! (spec.connectionDetails), published to the Secret
//! spec.writeConnectionSecretToRef names in the control cluster. Sources are
//! read through shared watches of the target cluster, so a changed source
//! wakes the Object; the Secret is applied only when what it should hold
//! changes (see [`super::published::Published`]).

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt, api::Patch};
use runtime::{
    fieldpath,
    managed::{self, RequestFailed},
    remote::RemoteCluster,
    ssa,
    watches::{Scope, Session, Target},
};
use serde_json::{Map, Value, json};
use types::kubernetes::v1alpha1::{ConnectionDetail, Object};

use super::context::{Objects, target_of};
use super::errors::Error;
use super::manifest;

/// Publishes spec.connectionDetails to spec.writeConnectionSecretToRef.
pub async fn publish(
    ctx: &Objects,
    obj: &Object,
    cluster: &RemoteCluster,
    session: &mut Session<Object>,
) -> Result<(), Error> {
    let Some(to) = &obj.spec.write_connection_secret_to_ref else {
        return Ok(());
    };
    if obj.spec.connection_details.is_empty() {
        return Ok(());
    }
    let mut data = Map::new();
    for d in &obj.spec.connection_details {
        let Some(source) = read_detail(obj, cluster, d, session).await? else {
            continue;
        };
        let path = fieldpath::parse(&d.field_path).map_err(Error::InvalidManifest)?;
        if let Some(value) = fieldpath::get(&source, &path) {
            data.insert(
                d.to_connection_secret_key.clone(),
                encoded(d, value.clone()),
            );
        }
    }
    let secret = connection_secret(obj, &to.name, &to.namespace, data);
    let uid = obj.uid().unwrap_or_default();
    if ctx.published.is(&uid, &secret) {
        return Ok(());
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.skeleton.client().clone(), &to.namespace);
    secrets
        .patch(
            &to.name,
            &ssa::params(&ctx.field_manager),
            &Patch::Apply(&secret),
        )
        .await
        .map_err(|e| Error::control("write the connection Secret", e))?;
    ctx.published.remember(&uid, secret);
    Ok(())
}

/// The object one connection detail reads, through a shared watch of it in
/// the target cluster.
async fn read_detail(
    obj: &Object,
    cluster: &RemoteCluster,
    d: &ConnectionDetail,
    session: &mut Session<Object>,
) -> Result<Option<Value>, Error> {
    let described = target_of(obj);
    let located = managed::locate(
        cluster,
        &described,
        &d.api_version,
        &d.kind,
        d.namespace.as_deref(),
        "spec.connectionDetails",
    )
    .await?;
    let target = Target {
        cluster: cluster.clone(),
        resource: located.resource,
        namespace: located.namespace,
        name: d.name.clone(),
        scope: Scope::Object,
    };
    let found = managed::read_through(session, &target).await.map_err(|e| {
        RequestFailed::new(
            format!("reading {} {}", d.kind, d.name),
            &described,
            "spec.connectionDetails",
            e,
        )
    })?;
    Ok(found
        .object
        .map(|o| manifest::as_value(&o, &target.resource)))
}

/// A value as a Secret holds it: a Secret's data is already base64;
/// anything else is encoded here.
fn encoded(d: &ConnectionDetail, value: Value) -> Value {
    if d.kind == "Secret" && d.field_path.starts_with("data") {
        return value;
    }
    let text = match value {
        Value::String(s) => s,
        other => other.to_string(),
    };
    json!(k8s_openapi::ByteString(text.into_bytes()))
}

/// The connection Secret, owned by the Object (collected with it).
fn connection_secret(obj: &Object, name: &str, namespace: &str, data: Map<String, Value>) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": name, "namespace": namespace,
            "ownerReferences": [{
                "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
                "name": obj.name_any(), "uid": obj.uid().unwrap_or_default(), "controller": true,
            }],
        },
        "type": "connection.crossplane.io/v1alpha1",
        "data": data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(kind: &str, field_path: &str) -> ConnectionDetail {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": kind, "name": "n", "namespace": "ns",
            "fieldPath": field_path, "toConnectionSecretKey": "k",
        }))
        .unwrap()
    }

    #[test]
    fn secret_data_is_passed_through_and_anything_else_is_encoded() {
        assert_eq!(
            encoded(&detail("Secret", "data.password"), json!("czNjcjN0")),
            json!("czNjcjN0")
        );
        assert_eq!(
            encoded(&detail("ConfigMap", "data.url"), json!("http://x")),
            json!("aHR0cDovL3g=")
        );
        assert_eq!(
            encoded(&detail("Service", "spec.ports"), json!([1])),
            json!("WzFd")
        );
    }

    #[test]
    fn the_connection_secret_is_owned_by_its_object() {
        let obj: Object = serde_json::from_value(json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": "o", "uid": "u1"},
            "spec": {"forProvider": {"manifest": {}}},
        }))
        .unwrap();
        let s = connection_secret(&obj, "conn", "ns", Map::new());
        assert_eq!(s["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(s["type"], "connection.crossplane.io/v1alpha1");
    }
}
