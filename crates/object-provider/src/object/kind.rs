//! The kinds of Object this controller reconciles, each as the
//! `kubernetes.crossplane.io/v1alpha2` Object it reads as ([`ObjectKind::view`]):
//! the cluster Object itself, and the namespaced
//! `kubernetes.m.crossplane.io/v1alpha1` Object ([`Namespaced`]), whose
//! connection Secret is in its own namespace and whose `providerConfigRef`
//! names a kind.

use std::{borrow::Cow, fmt::Debug};

use k8s_openapi::{NamespaceResourceScope, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use kube::Resource;
use runtime::reconciler::ScopedApi;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::Value;
use types::{
    common::Conditioned,
    kubernetes::v1alpha2::{Object, ObjectStatus},
    kubernetes_m::v1alpha1::{self as m, ProviderConfigKind},
};

/// A kind of Object.
pub trait ObjectKind:
    Resource<DynamicType = (), Scope: ScopedApi>
    + Conditioned<Status = ObjectStatus>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The Object as the controller reads it.
    fn view(&self) -> &Object;
    /// The same, to change (the cache seals its manifests).
    fn view_mut(&mut self) -> &mut Object;
    /// The kind of config its providerConfigRef names: None for a cluster
    /// Object (a `kubernetes.crossplane.io` ProviderConfig).
    fn config_kind(&self) -> Option<ProviderConfigKind>;
}

impl ObjectKind for Object {
    fn view(&self) -> &Object {
        self
    }
    fn view_mut(&mut self) -> &mut Object {
        self
    }
    fn config_kind(&self) -> Option<ProviderConfigKind> {
        None
    }
}

/// A namespaced Object (`kubernetes.m.crossplane.io/v1alpha1`), read as a
/// cluster Object in its namespace: its connection Secret named with the
/// Object's namespace, `deletionPolicy` Delete (its managementPolicies
/// decide), and the kind of its providerConfigRef kept beside.
#[derive(Clone, Debug)]
pub struct Namespaced {
    object: Object,
    config_kind: ProviderConfigKind,
}

impl Resource for Namespaced {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        m::Object::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        m::Object::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        m::Object::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        m::Object::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.object.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.object.metadata
    }
}

impl Conditioned for Namespaced {
    type Status = ObjectStatus;
    fn status(&self) -> Option<&ObjectStatus> {
        self.object.status.as_ref()
    }
    fn conditions(status: &ObjectStatus) -> &[types::common::Condition] {
        &status.conditions
    }
    fn conditions_mut(status: &mut ObjectStatus) -> &mut Vec<types::common::Condition> {
        &mut status.conditions
    }
}

impl ObjectKind for Namespaced {
    fn view(&self) -> &Object {
        &self.object
    }
    fn view_mut(&mut self) -> &mut Object {
        &mut self.object
    }
    fn config_kind(&self) -> Option<ProviderConfigKind> {
        Some(self.config_kind)
    }
}

impl<'de> Deserialize<'de> for Namespaced {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut v = Value::deserialize(d)?;
        let namespace = v
            .pointer("/metadata/namespace")
            .cloned()
            .unwrap_or(Value::Null);
        let spec = v.get_mut("spec").and_then(Value::as_object_mut);
        let mut config_kind = ProviderConfigKind::ClusterProviderConfig;
        if let Some(spec) = spec {
            if let Some(r) = spec
                .get_mut("providerConfigRef")
                .and_then(Value::as_object_mut)
                && let Some(kind) = r.remove("kind")
            {
                config_kind = serde_json::from_value(kind).map_err(serde::de::Error::custom)?;
            }
            if let Some(to) = spec
                .get_mut("writeConnectionSecretToRef")
                .and_then(Value::as_object_mut)
            {
                to.insert("namespace".to_owned(), namespace);
            }
            spec.remove("deletionPolicy");
        }
        let object = serde_json::from_value(v).map_err(serde::de::Error::custom)?;
        Ok(Self {
            object,
            config_kind,
        })
    }
}

impl Serialize for Namespaced {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut v = serde_json::to_value(&self.object).map_err(serde::ser::Error::custom)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("apiVersion".to_owned(), Value::from(m::API_VERSION));
            o.insert("kind".to_owned(), Value::from("Object"));
        }
        if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("deletionPolicy");
            if let Some(r) = spec
                .get_mut("providerConfigRef")
                .and_then(Value::as_object_mut)
            {
                let kind =
                    serde_json::to_value(self.config_kind).map_err(serde::ser::Error::custom)?;
                r.insert("kind".to_owned(), kind);
            }
            if let Some(to) = spec
                .get_mut("writeConnectionSecretToRef")
                .and_then(Value::as_object_mut)
            {
                to.remove("namespace");
            }
        }
        v.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_namespaced_object_reads_as_a_cluster_object_in_its_namespace_and_writes_back_as_it_was() {
        let written = json!({
            "apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": "o", "namespace": "team-a"},
            "spec": {
                "forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap"}, "deletionPropagationPolicy": "Background"},
                "managementPolicies": ["*"],
                "providerConfigRef": {"kind": "ProviderConfig", "name": "pc"},
                "writeConnectionSecretToRef": {"name": "creds"},
                "readiness": {"policy": "SuccessfulCreate"},
                "watch": false,
            },
        });
        let n: Namespaced = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(n.config_kind(), Some(ProviderConfigKind::ProviderConfig));
        let to = n
            .view()
            .spec
            .write_connection_secret_to_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            (to.namespace.as_str(), to.name.as_str()),
            ("team-a", "creds")
        );
        assert_eq!(n.view().spec.provider_config_ref.name, "pc");
        assert_eq!(serde_json::to_value(&n).unwrap(), written);
        assert_eq!(
            Namespaced::api_version(&()),
            "kubernetes.m.crossplane.io/v1alpha1"
        );
    }
}
