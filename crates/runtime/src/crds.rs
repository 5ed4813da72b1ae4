//! Start-up check that a binary's CRDs are installed.

use kube::{
    Api, Client,
    api::{DynamicObject, ListParams},
    discovery::ApiResource,
};

/// A CRD the binary needs is missing or cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The kind is not served.
    #[error(
        "the {kind} CRD ({plural}.{group}) is not installed in this cluster; install the CRDs with `kubectl apply -f crds/` (or `kubectl apply -k deploy/`) and start again"
    )]
    Missing {
        /// Kind.
        kind: String,
        /// Plural resource name.
        plural: String,
        /// Group.
        group: String,
    },
    /// The probe failed for another reason (e.g. RBAC).
    #[error("cannot list {kind} to check that its CRD is installed")]
    Probe {
        /// Kind.
        kind: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

/// Probes each kind with a `list(limit=1)`; fails naming the install command
/// when one is missing.
pub async fn require(client: &Client, kinds: &[ApiResource]) -> Result<(), CrdError> {
    for ar in kinds {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(CrdError::Missing {
                    kind: ar.kind.clone(),
                    plural: ar.plural.clone(),
                    group: ar.group.clone(),
                });
            }
            Err(source) => {
                return Err(CrdError::Probe {
                    kind: ar.kind.clone(),
                    source,
                });
            }
        }
    }
    Ok(())
}
