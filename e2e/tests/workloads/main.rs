//! Seed 000 end to end: KubernetesApplications applied to the control cluster
//! are scheduled, split into KubernetesApplicationResources and delivered to
//! the remote cluster; their state is visible from the control cluster.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conflicts;
mod deletion;
mod delivery;
mod scheduling;

use e2e::{wait, workloads::*};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Event, Namespace, Secret, Service},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use std::time::Duration;
use types::workload::v1alpha1::{
    ANNOTATION_RESOURCE_UID, KubernetesApplication, KubernetesApplicationResource,
};
