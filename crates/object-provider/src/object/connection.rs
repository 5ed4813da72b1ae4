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
use types::kubernetes::v1alpha2::ConnectionDetail;

use super::configs::{config_of, writes_confined_to};
use super::context::{Objects, target_of};
use super::errors::Error;
use super::kind::ObjectKind;
use super::manifest;

/// Publishes spec.connectionDetails to spec.writeConnectionSecretToRef.
pub async fn publish<K: ObjectKind>(
    ctx: &Objects<K>,
    obj: &K,
    cluster: &RemoteCluster,
    session: &mut Session<K>,
) -> Result<(), Error> {
    let Some(to) = &obj.view().spec.write_connection_secret_to_ref else {
        return Ok(());
    };
    if obj.view().spec.connection_details.is_empty() {
        return Ok(());
    }
    let details = obj
        .view()
        .spec
        .connection_details
        .iter()
        .enumerate()
        .map(|(index, d)| Detail::of(index, d))
        .collect::<Result<Vec<_>, _>>()?;
    let confined = ctx
        .reach
        .configs
        .get(&config_of(obj))
        .and_then(|c| writes_confined_to(obj, &c));
    let mut data = Map::new();
    for (index, d) in details.iter().enumerate() {
        let confined = confined.as_deref().map(|ns| (index, ns));
        let Some(source) = read_detail(obj, cluster, d, confined, session).await? else {
            continue;
        };
        if let Some(value) = fieldpath::get(&source, &d.path) {
            data.insert(d.key.to_owned(), encoded(d, value.clone()));
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

/// One connection detail, every field it needs set and its fieldPath
/// parsed.
struct Detail<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    namespace: Option<&'a str>,
    field_path: &'a str,
    path: Vec<fieldpath::Segment>,
    key: &'a str,
}

impl<'a> Detail<'a> {
    /// spec.connectionDetails[`index`], or what to set in it.
    fn of(index: usize, d: &'a ConnectionDetail) -> Result<Self, Error> {
        let need = |value: &'a Option<String>, field: &str, what: &str| {
            value.as_deref().filter(|v| !v.is_empty()).ok_or_else(|| {
                Error::InvalidManifest(format!(
                    "spec.connectionDetails[{index}] has no {field}: set {what}"
                ))
            })
        };
        let api_version = need(
            &d.api_version,
            "apiVersion",
            "the apiVersion of the object the value is read from (e.g. v1)",
        )?;
        let kind = need(
            &d.kind,
            "kind",
            "the kind of the object the value is read from (e.g. Secret)",
        )?;
        let name = need(
            &d.name,
            "name",
            "the name of the object the value is read from",
        )?;
        let field_path = need(
            &d.field_path,
            "fieldPath",
            "the path of the value in that object (e.g. data.password)",
        )?;
        let path = fieldpath::parse(field_path).map_err(|e| {
            Error::InvalidManifest(format!("spec.connectionDetails[{index}].fieldPath: {e}"))
        })?;
        let key = need(
            &d.to_connection_secret_key,
            "toConnectionSecretKey",
            "the key the value is published under in the connection Secret",
        )?;
        Ok(Self {
            api_version,
            kind,
            name,
            namespace: d.namespace.as_deref(),
            field_path,
            path,
            key,
        })
    }
}

/// The object one connection detail reads, through a shared watch of it in
/// the target cluster.
async fn read_detail<K: ObjectKind>(
    obj: &K,
    cluster: &RemoteCluster,
    d: &Detail<'_>,
    confined: Option<(usize, &str)>,
    session: &mut Session<K>,
) -> Result<Option<Value>, Error> {
    let described = target_of(obj);
    let located = managed::locate(
        cluster,
        &described,
        d.api_version,
        d.kind,
        d.namespace,
        "spec.connectionDetails",
    )
    .await?;
    if let Some((index, ns)) = confined
        && located.namespace.as_deref() != Some(ns)
    {
        return Err(Error::OutsideNamespace(
            format!("spec.connectionDetails[{index}]"),
            ns.to_owned(),
            format!("{} {}", d.kind, d.name),
        ));
    }
    let target = Target {
        cluster: cluster.clone(),
        resource: located.resource,
        namespace: located.namespace,
        name: d.name.to_owned(),
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
fn encoded(d: &Detail<'_>, value: Value) -> Value {
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
fn connection_secret<K: ObjectKind>(
    obj: &K,
    name: &str,
    namespace: &str,
    data: Map<String, Value>,
) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": name, "namespace": namespace,
            "ownerReferences": [{
                "apiVersion": K::api_version(&()), "kind": K::kind(&()),
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
    use types::kubernetes::v1alpha2::Object;

    fn detail(kind: &str, field_path: &str) -> ConnectionDetail {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": kind, "name": "n", "namespace": "ns",
            "fieldPath": field_path, "toConnectionSecretKey": "k",
        }))
        .unwrap()
    }

    fn encoded_by(kind: &str, field_path: &str, value: Value) -> Value {
        let d = detail(kind, field_path);
        encoded(&Detail::of(0, &d).unwrap(), value)
    }

    #[test]
    fn secret_data_is_passed_through_and_anything_else_is_encoded() {
        assert_eq!(
            encoded_by("Secret", "data.password", json!("czNjcjN0")),
            json!("czNjcjN0")
        );
        assert_eq!(
            encoded_by("ConfigMap", "data.url", json!("http://x")),
            json!("aHR0cDovL3g=")
        );
        assert_eq!(
            encoded_by("Service", "spec.ports", json!([1])),
            json!("WzFd")
        );
    }

    #[test]
    fn a_detail_missing_a_field_names_the_detail_and_the_field() {
        for field in [
            "apiVersion",
            "kind",
            "name",
            "fieldPath",
            "toConnectionSecretKey",
        ] {
            for unset in [None, Some("")] {
                let mut d = serde_json::to_value(detail("Secret", "data.password")).unwrap();
                let fields = d.as_object_mut().unwrap();
                match unset {
                    None => fields.remove(field),
                    Some(empty) => fields.insert(field.to_owned(), json!(empty)),
                };
                let d: ConnectionDetail = serde_json::from_value(d).unwrap();
                let err = Detail::of(2, &d).err().unwrap().to_string();
                assert!(
                    err.starts_with(&format!("spec.connectionDetails[2] has no {field}: set ")),
                    "{err}"
                );
            }
        }
        let d = detail("Secret", "data..password");
        let err = Detail::of(1, &d).err().unwrap().to_string();
        assert!(
            err.starts_with("spec.connectionDetails[1].fieldPath: invalid field path"),
            "{err}"
        );
        let d = detail("Secret", "data.password");
        let ok = Detail::of(0, &d).unwrap();
        assert_eq!((ok.namespace, ok.key), (Some("ns"), "k"));
    }

    #[test]
    fn the_connection_secret_is_owned_by_its_object() {
        let obj: Object = serde_json::from_value(json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
            "metadata": {"name": "o", "uid": "u1"},
            "spec": {"forProvider": {"manifest": {}}},
        }))
        .unwrap();
        let s = connection_secret(&obj, "conn", "ns", Map::new());
        let owner = &s["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], "u1");
        assert_eq!(owner["apiVersion"], "kubernetes.crossplane.io/v1alpha2");
        assert_eq!(owner["kind"], "Object");
        assert_eq!(s["type"], "connection.crossplane.io/v1alpha1");
    }
}
