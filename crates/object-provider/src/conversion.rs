//! The conversion webhook of the Objects' CRD: `kubernetes.crossplane.io`
//! serves `v1alpha1` (the design's shape) and `v1alpha2` (upstream's, the
//! stored version), converted by [`types::kubernetes::conversion`]. Every
//! replica serves it, leading or not, so that both versions answer while
//! one replica restarts; a replica is not ready until it serves.

use std::net::SocketAddr;

use runtime::{
    controller::Runtime,
    webhook::{
        self,
        serving::{Endpoint, SelfServing},
    },
};

/// The CRD whose conversion this serves.
pub const CRD: &str = "objects.kubernetes.crossplane.io";

/// Where the API server sends ConversionReviews.
const PATH: &str = "/convert";

/// Where the webhook listens and how the API server reaches it.
#[derive(Debug, clap::Args)]
pub struct WebhookArgs {
    /// Serve the conversion webhook (every replica does; false only where
    /// another process of this binary serves it for the same cluster).
    #[arg(long, env = "SERVE_WEBHOOK", default_value_t = true, action = clap::ArgAction::Set)]
    serve_webhook: bool,

    /// Where the conversion webhook listens (HTTPS).
    #[arg(long, env = "WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    webhook_addr: SocketAddr,

    /// The Service, in this pod's namespace (POD_NAMESPACE), through which
    /// the API server calls the webhook: port 443, path /convert.
    #[arg(
        long,
        env = "WEBHOOK_SERVICE",
        default_value = "object-provider-webhook"
    )]
    webhook_service: String,

    /// A URL the API server calls the webhook at instead of the Service,
    /// for this binary running outside the cluster (its host is what the
    /// certificate names), e.g. https://127.0.0.1:9443/convert.
    #[arg(long, env = "WEBHOOK_URL")]
    webhook_url: Option<String>,

    /// The Secret, in this pod's namespace, holding the webhook's
    /// certificate; made and renewed by this binary, shared by replicas.
    #[arg(
        long,
        env = "WEBHOOK_SECRET",
        default_value = "object-provider-webhook-tls"
    )]
    webhook_secret: String,

    /// A directory holding the webhook's certificate (`tls.crt`,
    /// `tls.key`), made by whoever runs this binary: set by a package
    /// manager that runs it as a provider package's runtime (it also points
    /// the CRD at this webhook). This binary then makes no certificate and
    /// leaves the CRD alone; a renewed certificate there is served within
    /// a minute.
    #[arg(long, env = "TLS_SERVER_CERTS_DIR")]
    tls_server_certs_dir: Option<std::path::PathBuf>,

    /// How long a stopping replica, no longer ready, keeps serving the
    /// webhook while the Service stops sending the API server to it.
    #[arg(long, env = "WEBHOOK_DRAIN", default_value = "10s", value_parser = humantime::parse_duration)]
    pub webhook_drain: std::time::Duration,
}

/// Starts serving the webhook: bound now (a port in use stops the binary),
/// serving once its certificate is ready, kept current from then on. The
/// binary is not ready until then. Answers how it stops
/// ([`webhook::Drain::finish`]).
pub async fn serve(
    rt: &Runtime,
    args: &WebhookArgs,
    binary: &str,
) -> anyhow::Result<webhook::Drain> {
    let drain = webhook::Drain::default();
    if !args.serve_webhook {
        return Ok(drain);
    }
    let listener = tokio::net::TcpListener::bind(args.webhook_addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.webhook_addr))?;
    if let Some(dir) = &args.tls_server_certs_dir {
        let read = {
            let dir = dir.clone();
            move || -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
                let file = |name: &str| {
                    std::fs::read(dir.join(name)).map_err(|e| {
                        anyhow::anyhow!("cannot read {}: {e}", dir.join(name).display())
                    })
                };
                Ok((file("tls.crt")?, file("tls.key")?))
            }
        };
        let (cert, key) = read()?;
        let certificate = webhook::ServingCertificate::new(&cert, &key)?;
        tracing::info!(addr = %args.webhook_addr, dir = %dir.display(), "serving the Objects' conversion webhook with the certificate given");
        let router = webhook::conversion_router(PATH, convert);
        tokio::spawn(webhook::serve(
            listener,
            certificate.clone(),
            router,
            drain.clone(),
        ));
        tokio::spawn(async move {
            let mut served = (cert, key);
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                match read() {
                    Ok(now) if now != served => match certificate.replace(&now.0, &now.1) {
                        Ok(()) => served = now,
                        Err(e) => {
                            tracing::warn!(error = %e, "the renewed webhook certificate cannot be served; serving the previous one")
                        }
                    },
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the webhook certificate; serving the previous one")
                    }
                }
            }
        });
        return Ok(drain);
    }
    let namespace = rt.args.leader_election_namespace.clone();
    let endpoint = match &args.webhook_url {
        Some(url) => Endpoint::Url(url.clone()),
        None => Endpoint::Service {
            namespace: namespace.clone(),
            name: args.webhook_service.clone(),
            port: 443,
            path: PATH.to_owned(),
        },
    };
    let serving = SelfServing::new(
        rt.client.clone(),
        &namespace,
        &args.webhook_secret,
        CRD,
        endpoint,
        binary,
    );
    let hold = rt.health.hold();
    tracing::info!(addr = %args.webhook_addr, "serving the Objects' conversion webhook once its certificate is ready");
    let serving_drain = drain.clone();
    let stopping = drain.clone();
    tokio::spawn(async move {
        let certificate = serving.start().await;
        let router = webhook::conversion_router(PATH, convert);
        tokio::spawn(webhook::serve(
            listener,
            certificate.clone(),
            router,
            serving_drain,
        ));
        drop(hold);
        // Pointing the CRD at this replica stops when it starts to stop: a
        // replica on its way out (the object-provider removed for
        // provider-kubernetes, say) would otherwise take the CRD back from
        // the package that now serves it.
        tokio::select! {
            () = serving.keep(certificate) => {}
            () = stopping.draining() => {}
        }
    });
    Ok(drain)
}

fn convert(object: &serde_json::Value, to: &str) -> Result<serde_json::Value, String> {
    types::kubernetes::conversion::convert(object, to).map_err(|e| e.to_string())
}
