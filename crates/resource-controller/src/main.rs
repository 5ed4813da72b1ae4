//! `resource-controller`: submits each scheduled
//! KubernetesApplicationResource's templated object and Secrets to its remote
//! cluster and reports the remote object's status.

mod context;
mod controller;
mod error;
mod external;
mod feedback;
mod health;
mod remote_object;
mod strategy;

use std::time::Duration;

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource},
};
use types::workload::v1alpha1::KubernetesApplicationResource;

const BINARY: &str = "resource-controller";

/// Submits KubernetesApplicationResources to their remote clusters.
#[derive(Debug, Parser)]
#[command(name = BINARY, version, about)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// How long a deleted resource keeps trying to remove its remote object
    /// and propagated Secrets from a cluster that does not answer before it
    /// leaves them in place (with a Warning event) and goes. A cluster whose
    /// KubernetesCluster or connection Secret is gone can never answer
    /// again: its objects are left in place at once. The object-provider's
    /// flag of the same name does the same for Objects. Also read from
    /// DELETION_TIMEOUT, or from REMOTE_DELETION_TIMEOUT (the old name, as is
    /// the flag's alias --remote-deletion-timeout). Default 5m.
    #[arg(long, alias = "remote-deletion-timeout", env = "DELETION_TIMEOUT", value_parser = humantime::parse_duration)]
    deletion_timeout: Option<Duration>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let deletion_timeout = deletion_timeout(
        args.deletion_timeout,
        std::env::var("REMOTE_DELETION_TIMEOUT").ok().as_deref(),
    )?;
    runtime::init_process(args.common.log_format);
    let rt = Runtime::new(BINARY, args.common).await?;
    let kinds = [api_resource::<KubernetesApplicationResource>()];
    // Built again each time this replica leads again (fresh caches).
    let build = {
        let rt = rt.clone();
        move || {
            let controller = controller::controller(&rt, deletion_timeout);
            async move {
                controller?.await;
                Ok(())
            }
        }
    };
    rt.run(&kinds, build).await?;
    Ok(())
}

/// What --deletion-timeout comes to: the flag (or DELETION_TIMEOUT), else
/// the old variable REMOTE_DELETION_TIMEOUT, else 5 minutes.
fn deletion_timeout(flag: Option<Duration>, old_env: Option<&str>) -> anyhow::Result<Duration> {
    match (flag, old_env) {
        (Some(d), _) => Ok(d),
        (None, Some(v)) => humantime::parse_duration(v)
            .map_err(|e| anyhow::anyhow!("REMOTE_DELETION_TIMEOUT={v:?} is not a duration: {e}")),
        (None, None) => Ok(DEFAULT_DELETION_TIMEOUT),
    }
}

/// --deletion-timeout when nothing sets it.
const DEFAULT_DELETION_TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Option<Duration> {
        let mut all = vec![BINARY];
        all.extend(args);
        Args::try_parse_from(all).unwrap().deletion_timeout
    }

    #[test]
    fn the_deletion_timeout_has_one_name_and_keeps_the_old_one() {
        assert_eq!(
            parse(&["--deletion-timeout", "15s"]),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            parse(&["--remote-deletion-timeout", "20s"]),
            Some(Duration::from_secs(20))
        );
        assert_eq!(
            deletion_timeout(None, Some("1m")).unwrap(),
            Duration::from_secs(60)
        );
        assert_eq!(
            deletion_timeout(Some(Duration::from_secs(3)), Some("1m")).unwrap(),
            Duration::from_secs(3)
        );
        assert_eq!(
            deletion_timeout(None, None).unwrap(),
            DEFAULT_DELETION_TIMEOUT
        );
        assert!(deletion_timeout(None, Some("soon")).is_err());
    }
}
