//! The kinds of ObservedObjectCollection: the cluster one
//! (`kubernetes.crossplane.io/v1alpha1`), whose members are cluster
//! Objects using a ProviderConfig, and the namespaced one
//! (`kubernetes.m.crossplane.io/v1alpha1`), whose members are namespaced
//! Objects in its namespace using its ProviderConfig or
//! ClusterProviderConfig.

use std::fmt::Debug;

use kube::{Resource, ResourceExt};
use runtime::reconciler::ScopedApi;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use types::{
    common::Conditioned,
    kubernetes::{
        v1alpha1::{
            ObserveObjectCriteria, ObservedObjectCollection, ObservedObjectCollectionStatus,
            ObservedObjectTemplate,
        },
        v1alpha2::Object,
    },
    kubernetes_m::v1alpha1 as m,
};

use crate::object::{
    configs::ConfigRef,
    kind::{Namespaced, ObjectKind},
};

/// A kind of ObservedObjectCollection.
pub trait CollectionKind:
    Resource<DynamicType = (), Scope: ScopedApi>
    + Conditioned<Status = ObservedObjectCollectionStatus>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The kind of Object its members are.
    type Member: ObjectKind;
    /// Which objects are members.
    fn criteria(&self) -> &ObserveObjectCriteria;
    /// What its Objects are made with.
    fn template(&self) -> Option<&ObservedObjectTemplate>;
    /// The config it and its Objects use.
    fn config(&self) -> ConfigRef;
    /// That config as a member's `spec.providerConfigRef` names it.
    fn config_ref(&self) -> Value;
}

impl CollectionKind for ObservedObjectCollection {
    type Member = Object;
    fn criteria(&self) -> &ObserveObjectCriteria {
        &self.spec.observe_objects
    }
    fn template(&self) -> Option<&ObservedObjectTemplate> {
        self.spec.object_template.as_ref()
    }
    fn config(&self) -> ConfigRef {
        ConfigRef::Legacy(self.spec.provider_config_ref.name.clone())
    }
    fn config_ref(&self) -> Value {
        json!({"name": self.spec.provider_config_ref.name})
    }
}

impl CollectionKind for m::ObservedObjectCollection {
    type Member = Namespaced;
    fn criteria(&self) -> &ObserveObjectCriteria {
        &self.spec.observe_objects
    }
    fn template(&self) -> Option<&ObservedObjectTemplate> {
        self.spec.object_template.as_ref()
    }
    fn config(&self) -> ConfigRef {
        let r = &self.spec.provider_config_ref;
        ConfigRef::named(Some(r.kind), r.name.clone(), self.namespace())
    }
    fn config_ref(&self) -> Value {
        json!(self.spec.provider_config_ref)
    }
}
