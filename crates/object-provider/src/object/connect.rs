//! The target cluster of an Object: its ProviderConfig's credentials,
//! connected through runtime's [`Connector`](runtime::managed::Connector).
//! The ProviderConfig comes from the watch cache and is protected by the
//! in-use finalizer before anything is made with it.

use std::time::Duration;

use kube::{Api, ResourceExt, runtime::reflector::ObjectRef};
use runtime::{
    finalizers,
    managed::{Known, SecretKey},
    remote::RemoteCluster,
};
use types::kubernetes::{
    v1alpha1::{CredentialsSource, ProviderConfig},
    v1alpha2::Object,
};

use super::context::Objects;
use super::errors::Error;
use super::usage::IN_USE;

/// How long a ProviderConfig's credentials Secret, once read, is used
/// without reading it again. The provider may not list or watch Secrets (a
/// security property: it reads only the Secrets it is pointed at), so a
/// rotated credential is picked up within this long, with one GET per
/// ProviderConfig per period, never one per Object.
pub const CREDENTIALS_TTL: Duration = Duration::from_secs(30);

/// The target cluster of an Object's ProviderConfig. The credentials Secret
/// is read with a GET at most once per ProviderConfig per
/// [`CREDENTIALS_TTL`]; the client built from it is kept per (Secret UID,
/// key, resourceVersion).
pub async fn connect(ctx: &Objects, obj: &Object) -> Result<RemoteCluster, Error> {
    let name = &obj.spec.provider_config_ref.name;
    // The reconcile waited for this cache (`ready`); a deletion too.
    runtime::controller::wait_cache_ready(&ctx.configs).await;
    let Some(pc) = ctx.configs.get(&ObjectRef::new(name)) else {
        return Err(ctx.connector.owner_not_found(name).into());
    };
    protect(ctx, &pc).await?;
    if let Some(why) = unsupported(&pc) {
        return Err(Error::UnsupportedCredentials(why));
    }
    if pc.spec.credentials.source == CredentialsSource::InjectedIdentity {
        // A client built while the config read a Secret is not needed.
        ctx.connector.release(name);
        return Ok(ctx.local.clone());
    }
    let Some(sel) = &pc.spec.credentials.secret_ref else {
        let unset = ctx.connector.secret_not_found(name, "<unset>".to_owned());
        return Err(unset.into());
    };
    let at = SecretKey {
        namespace: &sel.namespace,
        name: &sel.name,
        key: &sel.key,
    };
    let known = Known::Generation(pc.metadata.generation);
    Ok(ctx.connector.connect(name, at, known).await?)
}

/// Why the credentials `pc` names are not used by this provider, if they
/// are not: upstream's words this provider accepts and refuses, never
/// silently ignores.
fn unsupported(pc: &ProviderConfig) -> Option<String> {
    let name = pc.metadata.name.as_deref().unwrap_or_default();
    if let Some(identity) = &pc.spec.identity {
        return Some(format!(
            "ProviderConfig {name}: identity.type {:?} is not supported: this provider does not exchange cloud identities for tokens; put a kubeconfig whose user has its own credentials (a token or a client certificate) in the Secret and remove spec.identity",
            identity.type_
        ));
    }
    let why = match pc.spec.credentials.source {
        CredentialsSource::Secret | CredentialsSource::InjectedIdentity => return None,
        CredentialsSource::None => "None gives no cluster to reach",
        CredentialsSource::Environment => {
            "Environment is not supported: whoever writes a ProviderConfig would choose which of the provider's environment variables it reads"
        }
        CredentialsSource::Filesystem => {
            "Filesystem is not supported: whoever writes a ProviderConfig would choose which of the provider's files it reads"
        }
    };
    Some(format!(
        "ProviderConfig {name}: credentials.source {why}; use source Secret (a kubeconfig in a Secret key) or InjectedIdentity (this cluster)"
    ))
}

/// Puts the in-use finalizer on a ProviderConfig that does not carry it yet
/// (one request per ProviderConfig, not per Object), so that it is
/// protected before anything is made with it, whenever its own controller
/// gets to it.
async fn protect(ctx: &Objects, pc: &ProviderConfig) -> Result<(), Error> {
    if pc.metadata.deletion_timestamp.is_some() || finalizers::has(pc, IN_USE) {
        return Ok(());
    }
    let api: Api<ProviderConfig> = Api::all(ctx.skeleton.client().clone());
    finalizers::add(&api, pc, IN_USE)
        .await
        .map_err(|e| Error::control(format!("protect ProviderConfig {}", pc.name_any()), e))
}
