//! What a Provider says of itself: Installed and Healthy from the revision
//! that should serve and the one that serves now. Pure.

use kube::ResourceExt as _;
use runtime::{conditions, reconciler::Draft};
use types::pkg::v1::{Provider, ProviderRevision};

use super::error::{Error, TYPE_HEALTHY, TYPE_INSTALLED};
use crate::revision::context::unhealthy_message;

/// Sets Installed and Healthy from the target revision (the one that
/// should serve) and the one that serves now.
pub fn report(
    p: &Provider,
    status: &mut Draft<Provider>,
    target: Option<&ProviderRevision>,
    current: &ProviderRevision,
    serving: Option<&ProviderRevision>,
) {
    let now = conditions::now();
    status.current_identifier = Some(p.spec.package.clone());
    let Some(target) = target else {
        status.current_revision = None;
        conditions::set(
            &mut status.conditions,
            conditions::custom(
                TYPE_INSTALLED,
                false,
                "InactivePackageRevision",
                Some(format!(
                    "revision {} awaits activation (revisionActivationPolicy is Manual): set its spec.desiredState to Active",
                    current.name_any()
                )),
            ),
            &now,
        );
        conditions::set(
            &mut status.conditions,
            conditions::custom(
                TYPE_HEALTHY,
                false,
                "InactivePackageRevision",
                Some("no revision is active".into()),
            ),
            &now,
        );
        return;
    };
    status.current_revision = Some(target.name_any());
    let awaiting = (target.name_any() != current.name_any()).then(|| {
        format!(
            "revision {} of {} awaits activation (revisionActivationPolicy is Manual)",
            current.name_any(),
            p.spec.package
        )
    });
    conditions::set(
        &mut status.conditions,
        conditions::custom(TYPE_INSTALLED, true, "ActivePackageRevision", awaiting),
        &now,
    );
    let healthy = if let Some(why) = target.rbac_refused() {
        // Its CRDs may be in place and its pod running, but a runtime
        // without its roles cannot do its work.
        conditions::custom(
            TYPE_HEALTHY,
            false,
            "UnhealthyPackageRevision",
            Some(format!(
                "revision {} has no roles: the rbac-manager refused them (RBACReady): {why}",
                target.name_any()
            )),
        )
    } else if target.healthy() {
        conditions::custom(TYPE_HEALTHY, true, "HealthyPackageRevision", None)
    } else {
        let mut message = unhealthy_message(target).unwrap_or_else(|| {
            format!(
                "waiting for revision {} to report its health",
                target.name_any()
            )
        });
        if let Some(s) = serving.filter(|s| s.name_any() != target.name_any()) {
            message.push_str(&format!(
                "; revision {} ({}) is still serving",
                s.name_any(),
                s.spec.package
            ));
        }
        conditions::custom(
            TYPE_HEALTHY,
            false,
            "UnhealthyPackageRevision",
            Some(message),
        )
    };
    conditions::set(&mut status.conditions, healthy, &now);
}

/// Healthy=False for a package that could not be turned into a revision,
/// naming the revision that still serves, if any.
pub fn report_failure(status: &mut Draft<Provider>, e: &Error, serving: Option<&ProviderRevision>) {
    let mut message = runtime::events::error_chain(e);
    let transient = matches!(e, Error::Package(p) if p.is_transient());
    let healthy_now = conditions::is_true(&status.conditions, TYPE_HEALTHY);
    if transient && healthy_now && serving.is_some() {
        // A registry outage after install does not make a healthy Provider
        // unhealthy: Synced says what failed.
        return;
    }
    if let Some(s) = serving {
        message.push_str(&format!(
            "; revision {} ({}) is still serving",
            s.name_any(),
            s.spec.package
        ));
    } else {
        conditions::set(
            &mut status.conditions,
            conditions::custom(
                TYPE_INSTALLED,
                false,
                "UnpackingPackage",
                Some(message.clone()),
            ),
            &conditions::now(),
        );
    }
    conditions::set(
        &mut status.conditions,
        conditions::custom(TYPE_HEALTHY, false, "UnhealthyPackage", Some(message)),
        &conditions::now(),
    );
}
