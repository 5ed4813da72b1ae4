//! Start-up check that a binary's CRDs are installed: it waits for the API
//! server and the CRDs, never exits for them. And whether a CRD is
//! Established, for every reader of CRDs.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams},
    discovery::ApiResource,
};

use crate::{
    events::error_chain,
    leader::{Quiet, WAIT_LOG_INTERVAL},
};

/// Whether a CRD is Established.
pub fn established(c: &CustomResourceDefinition) -> bool {
    established_by(c.status.as_ref().and_then(|s| s.conditions.as_deref()))
}

/// Whether a CRD's conditions say it is Established.
pub fn established_by(
    conditions: Option<
        &[k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionCondition],
    >,
) -> bool {
    conditions.is_some_and(|cs| {
        cs.iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    })
}

/// A CRD the binary needs is missing or cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The kind is not served.
    #[error(
        "the {kind} CRD ({plural}.{group}) is not installed in this cluster; install the CRDs with `kubectl apply -f crds/` (or `kubectl apply -k deploy/`)"
    )]
    Missing {
        /// Kind.
        kind: String,
        /// Plural resource name.
        plural: String,
        /// Group.
        group: String,
    },
    /// The probe failed for another reason (the API server does not
    /// answer, RBAC).
    #[error("cannot list {kind} to check that its CRD is installed")]
    Probe {
        /// Kind.
        kind: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

/// The first and the longest pause between two looks while waiting.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);
/// How long one look may wait for an answer (an API server that accepts
/// and never answers is looked at again, on a new request).
const LOOK_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Waits until every kind is served ([`require`]): an API server that does
/// not answer yet, or a CRD not installed yet, is looked at again after a
/// pause that doubles up to 5 s, and said once per interval (or when what
/// is awaited changes). Returns at once when it finds them all.
pub async fn wait_for(client: &Client, kinds: &[ApiResource]) {
    let mut pause = FIRST_PAUSE;
    let mut quiet = Quiet::new(WAIT_LOG_INTERVAL);
    let mut last = String::new();
    loop {
        let why = match tokio::time::timeout(LOOK_TIMEOUT, require(client, kinds)).await {
            Ok(Ok(())) => {
                if !last.is_empty() {
                    tracing::info!("the API server answers and every CRD is installed; starting");
                }
                return;
            }
            Ok(Err(e)) => error_chain(&e),
            Err(_) => format!("the API server did not answer within {LOOK_TIMEOUT:?}"),
        };
        if why != last || quiet.due() {
            tracing::warn!(error = %why, every = ?WAIT_LOG_INTERVAL, "waiting for the API server and this binary's CRDs before starting");
            last = why;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}
