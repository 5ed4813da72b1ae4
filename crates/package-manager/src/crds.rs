//! What Provider revisions and stacks both do with the CRDs a package
//! installs.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{Patch, PatchParams},
};

/// Whether a CRD is Established.
pub fn established(c: &CustomResourceDefinition) -> bool {
    c.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Why the CRDs of a package did not pass their dry run.
#[derive(Debug)]
pub enum DryRunError {
    /// The API server refuses the CRD `name` as it is.
    Refused {
        /// The CRD.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// The dry run itself failed.
    Failed(kube::Error),
}

/// Checks every CRD of `bodies` (name, object to apply) with a server-side
/// dry run, so that a package's CRDs are written all or none.
pub async fn dry_run(
    crds: &Api<CustomResourceDefinition>,
    field_manager: &str,
    bodies: &[(&str, &serde_json::Value)],
) -> Result<(), DryRunError> {
    let dry = PatchParams::apply(field_manager).force().dry_run();
    for &(name, body) in bodies {
        if let Err(e) = crds.patch(name, &dry, &Patch::Apply(body)).await {
            return Err(match e {
                kube::Error::Api(a) if a.code == 422 || a.code == 400 => DryRunError::Refused {
                    name: name.to_owned(),
                    message: a.message,
                },
                e => DryRunError::Failed(e),
            });
        }
    }
    Ok(())
}
