//! Which runtime config a revision's runtime is rendered from: its
//! DeploymentRuntimeConfig (`default` when it names none), or with
//! `--enable-runtime-config=false` its deprecated ControllerConfig.

use kube::{Api, Resource as _, ResourceExt as _, runtime::reflector::ObjectRef};
use runtime::reconciler::Draft;
use types::pkg::{
    v1::ProviderRevision,
    v1alpha1::ControllerConfig,
    v1beta1::{DeploymentRuntimeConfigSpec, ImageConfigRef, REASON_RUNTIME},
};

use super::{
    context::{DEFAULT_RUNTIME_CONFIG, ProviderRevisions},
    error::Error,
};
use crate::convert;

impl ProviderRevisions {
    /// The runtime config the revision's runtime is rendered from, and
    /// whether it came from a ControllerConfig (whose image wins).
    pub(super) async fn runtime_config(
        &self,
        r: &ProviderRevision,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<(DeploymentRuntimeConfigSpec, bool), Error> {
        if !self.settings.enable_runtime_config
            && let Some(cc) = &r.spec.controller_config_ref
        {
            let api = Api::<ControllerConfig>::all(self.sk.client().clone());
            let found = api
                .get_opt(&cc.name)
                .await
                .map_err(|e| Error::request("read a ControllerConfig", e))?;
            let Some(found) = found else {
                return Err(Error::RuntimeConfig(format!(
                    "ControllerConfig {} (spec.controllerConfigRef) does not exist; create it or remove the reference",
                    cc.name
                )));
            };
            return Ok((convert::spec_from_controller_config(&found.spec), true));
        }
        if self.settings.enable_runtime_config && r.spec.controller_config_ref.is_some() {
            self.warn_once(
                r,
                "ControllerConfigIgnored",
                "spec.controllerConfigRef is ignored: the package manager runs with --enable-runtime-config=true; convert it with `package-manager convert controllerconfig` and use spec.runtimeConfigRef",
            )
            .await;
        }
        // The Provider's own reference wins; else an ImageConfig matching
        // the package (as it is read) may pick one; else `default`.
        status
            .applied_image_config_refs
            .retain(|a| a.reason != REASON_RUNTIME);
        let mut source = "spec.runtimeConfigRef".to_owned();
        let picked = match &r.spec.runtime_config_ref {
            Some(c) => Some(c.clone()),
            None => {
                let package = status
                    .resolved_package
                    .clone()
                    .unwrap_or_else(|| r.spec.package.clone());
                self.packages
                    .runtime_config_for(&package)
                    .await
                    .map(|(config, reference)| {
                        source = format!("spec.runtime.configRef of ImageConfig {config}");
                        status.applied_image_config_refs.push(ImageConfigRef {
                            name: config,
                            reason: REASON_RUNTIME.to_owned(),
                        });
                        reference
                    })
            }
        };
        let (kind, api_version, name) = match &picked {
            Some(c) => (
                c.kind
                    .clone()
                    .unwrap_or_else(|| "DeploymentRuntimeConfig".into()),
                c.api_version
                    .clone()
                    .unwrap_or_else(|| "pkg.crossplane.io/v1beta1".into()),
                c.name.clone(),
            ),
            None => (
                "DeploymentRuntimeConfig".into(),
                "pkg.crossplane.io/v1beta1".into(),
                DEFAULT_RUNTIME_CONFIG.into(),
            ),
        };
        let group_ok = api_version.split('/').next() == Some("pkg.crossplane.io");
        if kind != "DeploymentRuntimeConfig" || !group_ok {
            return Err(Error::RuntimeConfig(format!(
                "{source} names {api_version} {kind} {name}, which --package-runtime=Deployment cannot use; name a pkg.crossplane.io DeploymentRuntimeConfig"
            )));
        }
        // From the watch's cache: one made a moment ago wakes the revision
        // when the watch sees it.
        let found = self.runtime_configs.get(&ObjectRef::new(&name));
        match found {
            Some(c) => Ok((c.spec.clone(), false)),
            None => Err(Error::RuntimeConfig(format!(
                "DeploymentRuntimeConfig {name} ({source}) does not exist; create it or name another"
            ))),
        }
    }

    pub(super) async fn warn_once(&self, r: &ProviderRevision, reason: &str, note: &str) {
        let key = format!("{}/{reason}", r.name_any());
        if self.warned.get(&key).is_some() {
            return;
        }
        self.warned.insert(key, ());
        self.sk
            .reporting
            .events
            .warning(&r.object_ref(&()), reason, note.to_owned())
            .await;
    }
}
