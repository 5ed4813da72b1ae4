//! Faults a test injects into the control plane it owns: an API server
//! stopped and started again, etcd paused and let go on. A control plane
//! that can be hurt on purpose is how a test shows what an outage costs.
//! Every test of the binary shares the plane, so a test that hurts it runs
//! in a binary of its own (or alone).

use std::time::Duration;

use anyhow::Context as _;

use crate::{cluster::Cluster, plane::ControlPlane, process::Processes};

impl ControlPlane {
    fn own(&self) -> anyhow::Result<&Processes> {
        self.started()
            .context("only a control plane testenv started itself can be hurt on purpose")
    }

    /// Stops `cluster`'s kube-apiserver (SIGKILL, as a crash): its clients'
    /// connections are refused until [`Self::start_apiserver`].
    pub fn stop_apiserver(&self, cluster: &Cluster) -> anyhow::Result<()> {
        self.own()?
            .stop(&format!("kube-apiserver-{}", cluster.name))
    }

    /// Starts `cluster`'s kube-apiserver again with the command line it was
    /// first started with (same port, certificates and etcd prefix), and
    /// waits until its /readyz answers ok.
    pub fn start_apiserver(&self, cluster: &Cluster) -> anyhow::Result<()> {
        let own = self.own()?;
        let name = format!("kube-apiserver-{}", cluster.name);
        own.start_again(&name)?;
        cluster.wait_ready(Duration::from_secs(90), || Ok(()))
    }

    /// Pauses etcd (SIGSTOP): every API server's reads and writes hang,
    /// its connections stay open, until [`Self::resume_etcd`].
    pub fn pause_etcd(&self) -> anyhow::Result<()> {
        self.own()?.signal("etcd", "STOP")
    }

    /// Lets a paused etcd go on (SIGCONT).
    pub fn resume_etcd(&self) -> anyhow::Result<()> {
        self.own()?.signal("etcd", "CONT")
    }
}
