//! Which custom resources of a package's CRDs exist: they hold a
//! Provider's deletion (deleting their CRDs would delete them).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
};

/// The label of ClusterRoles that grant the package-manager list on a
/// package's kinds (aggregated into its role).
pub const AGGREGATE_LABEL: &str = "rbac.crossplane-rs.io/aggregate-to-package-manager";

/// At most this many names are listed per kind.
const NAMED: usize = 5;
/// How many of a package's kinds are looked at (or let go of) at once:
/// one by one, a Provider of 100 kinds is hundreds of requests in a row,
/// each waiting on an API server busy deleting other Providers' CRDs (at
/// 50 x 100 a deleted Provider read and listed its kinds three times over
/// five minutes before it deleted its revisions).
pub const AT_ONCE: usize = 16;

/// The custom resources of the CRDs called `crds` that exist, as
/// `waiting for 2 Objects: a, b` (one clause per kind), or None when there
/// are none. Each kind is listed as the view `known` shows its CRD (read
/// only when the view has none yet); CRDs that do not exist are skipped.
pub async fn custom_resources(
    client: &kube::Client,
    known: &crate::stacks::known::Known,
    crds: &[String],
) -> kube::Result<Option<String>> {
    use futures::{StreamExt as _, TryStreamExt as _};
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let clauses: Vec<String> = futures::stream::iter(crds.to_vec())
        .map(|name| {
            let (api, client) = (api.clone(), client.clone());
            let viewed = known.api_resource(&name);
            async move {
                let ar = match viewed {
                    Some(ar) => ar,
                    None => match api.get_opt(&name).await?.as_ref().and_then(api_resource) {
                        Some(ar) => ar,
                        None => return Ok(None),
                    },
                };
                of_kind(&client, &ar).await
            }
        })
        .buffered(AT_ONCE)
        .try_collect::<Vec<_>>()
        .await?
        .into_iter()
        .flatten()
        .collect();
    Ok(waiting_for(&clauses))
}

/// `waiting for ...` of what [`of_kind`] found, or None when it found
/// nothing.
pub fn waiting_for(clauses: &[String]) -> Option<String> {
    (!clauses.is_empty()).then(|| format!("waiting for {}", clauses.join("; ")))
}

/// The custom resources of the kind `ar` that exist, as `2
/// Objects: a, b`, or None when there are none (or the kind is no longer
/// served).
pub async fn of_kind(client: &kube::Client, ar: &ApiResource) -> kube::Result<Option<String>> {
    let listed = Api::<DynamicObject>::all_with(client.clone(), ar)
        .list(&ListParams::default().limit(100))
        .await;
    let objects = match listed {
        Ok(o) => o,
        // The kind is no longer served (its CRD is going): none.
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            // Not knowing is not "none": the deletion waits.
            return Ok(Some(format!(
                "permission to list {}.{} (to know whether any exist): grant the package-manager list on it with a ClusterRole labelled {AGGREGATE_LABEL}=\"true\"",
                ar.plural, ar.group
            )));
        }
        Err(e) => return Err(e),
    };
    if objects.items.is_empty() {
        return Ok(None);
    }
    let names: Vec<String> = objects
        .items
        .iter()
        .take(NAMED)
        .map(|o| match o.namespace() {
            Some(ns) => format!("{ns}/{}", o.name_any()),
            None => o.name_any(),
        })
        .collect();
    let more = objects.items.len().saturating_sub(NAMED);
    let mut clause = format!(
        "{} {}: {}",
        objects.items.len(),
        if objects.items.len() == 1 {
            ar.kind.clone()
        } else {
            format!("{}s", ar.kind)
        },
        names.join(", ")
    );
    if more > 0 {
        clause.push_str(&format!(" and {more} more"));
    }
    Ok(Some(clause))
}

/// The ApiResource of a CRD's storage version (else its first served one).
pub fn api_resource(crd: &CustomResourceDefinition) -> Option<ApiResource> {
    let version = crate::crds::listed_version(
        crd.spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage)),
    )?;
    Some(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&crd.spec.group, version, &crd.spec.names.kind),
        &crd.spec.names.plural,
    ))
}
