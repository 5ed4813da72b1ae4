//! A revision's dependencies: resolved (missing ones installed) while it
//! is active, released when it goes.

use kube::{Api, Resource as _, ResourceExt as _};
use runtime::reconciler::Draft;
use types::pkg::v1::{Provider, ProviderRevision};

use super::{context::ProviderRevisions, error::Error};
use crate::{deps, labels};

impl ProviderRevisions {
    /// Resolves the package's dependencies, installing missing ones.
    pub(super) async fn dependencies(
        &self,
        r: &ProviderRevision,
        declared: &[oci::xpkg::Dependency],
        status: &mut Draft<ProviderRevision>,
    ) -> Result<(), Error> {
        let revisions = self.revisions.state();
        let report = deps::resolve(
            self.sk.client(),
            &self.packages,
            &self.providers,
            &revisions,
            r,
            declared,
            self.settings.allow_dependency_downgrades,
        )
        .await
        .map_err(|e| Error::request("install a dependency", e))?;
        for name in &report.created {
            self.sk
                .reporting
                .events
                .normal(
                    &r.object_ref(&()),
                    "InstallDependency",
                    format!("installed Provider {name} as a dependency"),
                )
                .await;
        }
        for m in &report.moved {
            let note = format!(
                "moved dependency Provider {} from {} to {}, which this package needs ({})",
                m.provider, m.from, m.to, m.why
            );
            self.sk
                .reporting
                .events
                .normal(&r.object_ref(&()), "MoveDependency", note.clone())
                .await;
            if let Some(p) = self
                .providers
                .get(&kube::runtime::reflector::ObjectRef::new(&m.provider))
            {
                self.sk
                    .reporting
                    .events
                    .normal(&p.object_ref(&()), "MovedAsDependency", note)
                    .await;
            }
            // The dependent's own Provider says it too.
            if let Some(owner) = r.owner_references().iter().find(|o| o.kind == "Provider")
                && let Some(p) = self
                    .providers
                    .get(&kube::runtime::reflector::ObjectRef::new(&owner.name))
            {
                self.sk
                    .reporting
                    .events
                    .normal(
                        &p.object_ref(&()),
                        "MoveDependency",
                        format!(
                            "moved dependency Provider {} from {} to {}",
                            m.provider, m.from, m.to
                        ),
                    )
                    .await;
            }
        }
        let count = |n: usize| Some(i64::try_from(n).unwrap_or(i64::MAX));
        status.found_dependencies = count(report.found);
        status.installed_dependencies = count(report.installed);
        status.invalid_dependencies = count(report.problems.len());
        if report.problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Dependencies(report.problems.join("; ")))
        }
    }

    /// Removes the dependency Providers (installed by the package manager,
    /// not the user) that nothing depends on once this revision is gone.
    pub(super) async fn release_dependencies(&self, r: &ProviderRevision) -> Result<(), Error> {
        let wanted = deps::dependencies_of(r);
        if wanted.is_empty() {
            return Ok(());
        }
        let providers = self.providers.state();
        let revisions: Vec<_> = self
            .revisions
            .state()
            .into_iter()
            .filter(|o| o.name_any() != r.name_any())
            .collect();
        let api = Api::<Provider>::all(self.sk.client().clone());
        for p in providers.iter().filter(|p| {
            p.labels()
                .get(labels::DEPENDENCY)
                .is_some_and(|v| v == "true")
                && wanted.contains(&oci::xpkg::repository_of(&p.spec.package))
                && p.metadata.deletion_timestamp.is_none()
        }) {
            if deps::depended_on(p, &providers, &revisions) {
                continue;
            }
            runtime::objects::delete(&api, &p.name_any())
                .await
                .map_err(|e| Error::request("remove a dependency", e))?;
            self.sk
                .reporting
                .events
                .normal(
                    &r.object_ref(&()),
                    "RemoveDependency",
                    format!(
                        "removed Provider {}: no installed package depends on it",
                        p.name_any()
                    ),
                )
                .await;
        }
        Ok(())
    }
}
