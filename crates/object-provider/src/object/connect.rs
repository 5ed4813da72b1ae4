//! The target cluster of an Object: its config's credentials, connected
//! through runtime's [`Connector`].
//! The ProviderConfig comes from the watch cache and is protected by the
//! in-use finalizer before anything is made with it.

use std::time::Duration;

use std::sync::Arc;

use runtime::{
    controller::Runtime,
    managed::{Connector, Known, SecretKey, Wording},
    remote::{RemoteClients, RemoteCluster},
};
use types::kubernetes::v1alpha1::CredentialsSource;

use super::configs::{Config, ConfigRef, Configs};
use super::errors::Error;

/// How long a ProviderConfig's credentials Secret, once read, is used
/// without reading it again. The provider may not list or watch Secrets (a
/// security property: it reads only the Secrets it is pointed at), so a
/// rotated credential is picked up within this long, with one GET per
/// ProviderConfig per period, never one per Object.
pub const CREDENTIALS_TTL: Duration = Duration::from_secs(30);

/// What reaching the cluster of a config takes: the configs' caches, the
/// connector (its clients and the Secrets it read), and the control
/// cluster for InjectedIdentity. Objects and ObservedObjectCollections of
/// one scope reach their targets through one `Reach`, so they share its
/// clients and Secret reads. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct Reach {
    pub(crate) configs: Configs,
    pub(crate) connector: Arc<Connector>,
    pub(crate) local: RemoteCluster,
    client: kube::Client,
}

impl Reach {
    /// Reaches clusters through the configs in `configs`; messages word
    /// them as `wording` says.
    pub fn new(rt: &Runtime, configs: Configs, wording: &'static Wording) -> Self {
        let clients = RemoteClients::new(rt.metrics.clone(), rt.args.allow_insecure_remote_tls);
        let connector = Connector::new(clients, rt.client.clone(), wording, CREDENTIALS_TTL);
        Self {
            configs,
            connector: Arc::new(connector),
            local: RemoteCluster::new(rt.client.clone(), "control"),
            client: rt.client.clone(),
        }
    }

    /// The target cluster of the config `of`. The credentials Secret is
    /// read with a GET at most once per config per [`CREDENTIALS_TTL`]; the
    /// client built from it is kept per (Secret UID, key,
    /// resourceVersion).
    pub async fn connect(&self, of: &ConfigRef) -> Result<RemoteCluster, Error> {
        let key = of.key();
        // The reconcile waited for these caches (`ready`); a deletion too.
        self.configs.wait_ready().await;
        let Some(pc) = self.configs.get(of) else {
            return Err(self.connector.owner_not_found(&key).into());
        };
        self.configs
            .protect(&self.client, of)
            .await
            .map_err(|e| Error::control(format!("protect {of}"), e))?;
        if let Some(why) = unsupported(&pc) {
            return Err(Error::UnsupportedCredentials(why));
        }
        if pc.credentials.source == CredentialsSource::InjectedIdentity {
            // A client built while the config read a Secret is not needed.
            self.connector.release(&key);
            return Ok(self.local.clone());
        }
        let Some(sel) = &pc.credentials.secret_ref else {
            let unset = self.connector.secret_not_found(&key, "<unset>".to_owned());
            return Err(unset.into());
        };
        if let ConfigRef::Local { namespace, .. } = of
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
        Ok(self.connector.connect(&key, at, known).await?)
    }
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
