//! The target cluster of an Object: its ProviderConfig's credentials,
//! connected through runtime's [`Connector`](runtime::managed::Connector).
//! The ProviderConfig comes from the watch cache and is protected by the
//! in-use finalizer before anything is made with it.

use std::time::Duration;

use runtime::{
    managed::{Known, SecretKey},
    remote::RemoteCluster,
};
use types::kubernetes::v1alpha1::CredentialsSource;

use super::configs::{Config, ConfigRef, config_of};
use super::context::Objects;
use super::errors::Error;
use super::kind::ObjectKind;

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
pub async fn connect<K: ObjectKind>(ctx: &Objects<K>, obj: &K) -> Result<RemoteCluster, Error> {
    let of = config_of(obj);
    let key = of.key();
    // The reconcile waited for these caches (`ready`); a deletion too.
    ctx.configs.wait_ready().await;
    let Some(pc) = ctx.configs.get(&of) else {
        return Err(ctx.connector.owner_not_found(&key).into());
    };
    ctx.configs
        .protect(ctx.skeleton.client(), &of)
        .await
        .map_err(|e| Error::control(format!("protect {of}"), e))?;
    if let Some(why) = unsupported(&pc) {
        return Err(Error::UnsupportedCredentials(why));
    }
    if pc.credentials.source == CredentialsSource::InjectedIdentity {
        // A client built while the config read a Secret is not needed.
        ctx.connector.release(&key);
        return Ok(ctx.local.clone());
    }
    let Some(sel) = &pc.credentials.secret_ref else {
        let unset = ctx.connector.secret_not_found(&key, "<unset>".to_owned());
        return Err(unset.into());
    };
    if let ConfigRef::Local { namespace, .. } = &of
        && &sel.namespace != namespace
    {
        return Err(Error::UnsupportedCredentials(format!(
            "{of}: credentials.secretRef names a Secret in namespace {:?}; a namespaced ProviderConfig reads only Secrets of its own namespace: copy the kubeconfig Secret into {namespace:?}, or use a ClusterProviderConfig",
            sel.namespace
        )));
    }
    let at = SecretKey {
        namespace: &sel.namespace,
        name: &sel.name,
        key: &sel.key,
    };
    let known = Known::Generation(pc.generation);
    Ok(ctx.connector.connect(&key, at, known).await?)
}

/// Why the credentials `pc` names are not used by this provider, if they
/// are not: upstream's words this provider accepts and refuses, never
/// silently ignores.
fn unsupported(pc: &Config) -> Option<String> {
    let name = &pc.of;
    if let Some(identity) = &pc.identity {
        return Some(format!(
            "{name}: identity.type {:?} is not supported: this provider does not exchange cloud identities for tokens; put a kubeconfig whose user has its own credentials (a token or a client certificate) in the Secret and remove spec.identity",
            identity.type_
        ));
    }
    let why = match pc.credentials.source {
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
        "{name}: credentials.source {why}; use source Secret (a kubeconfig in a Secret key) or InjectedIdentity (this cluster)"
    ))
}
