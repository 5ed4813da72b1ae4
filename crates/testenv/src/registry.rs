//! OCI registries for tests that run pods: the CNCF `registry` that
//! `hack/build-binaries.sh` builds, serving HTTPS with testenv's serving
//! certificate on the host end of the node's link, and trusted by the
//! node's containerd under a registry host name of the test's choosing
//! (certs.d `hosts.toml`), so pods pull `<host>/<repository>:<tag>` from it.
//! Optionally private: basic authentication against an htpasswd (bcrypt)
//! entry.

use std::{
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{node::Node, plane::ControlPlane};

/// One running registry; stopped, and its data removed, when dropped.
pub struct Registry {
    child: Child,
    /// `<node host address>:<port>`: where pushes go (from this machine).
    pub address: String,
    /// The CA (PEM) that signed its certificate, for clients to trust.
    pub ca_pem: Vec<u8>,
    dir: PathBuf,
}

impl Registry {
    /// Starts a registry the node's containerd trusts for `host` (e.g.
    /// `registry.example`: images named `host/...` are pulled from it).
    /// With `auth` (user, password) it answers only requests carrying those
    /// credentials.
    pub fn start(
        plane: &ControlPlane,
        node: &Node,
        host: &str,
        auth: Option<(&str, &str)>,
    ) -> anyhow::Result<Self> {
        let port = Self::free_port(node)?;
        Self::start_on(plane, node, host, auth, port)
    }

    /// A free port on the node's host address, for a registry started
    /// later with [`Registry::start_on`] (a test that names the registry
    /// before it exists).
    pub fn free_port(node: &Node) -> anyhow::Result<u16> {
        crate::ports::free_port_on(node.host_ip.into())
            .context("a free port on the node's host address")
    }

    /// Like [`Registry::start`], on `port` of the node's host address.
    pub fn start_on(
        plane: &ControlPlane,
        node: &Node,
        host: &str,
        auth: Option<(&str, &str)>,
        port: u16,
    ) -> anyhow::Result<Self> {
        let tls = plane
            .serving_tls()
            .context("a registry needs testenv's own PKI (not an existing cluster)")?;
        let address = format!("{}:{port}", node.host_ip);
        let dir = plane.scratch_dir("registry");
        std::fs::create_dir_all(dir.join("data"))?;
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {address}\n  tls:\n    certificate: {}\n    key: {}\n",
            dir.join("data").display(),
            tls.cert.display(),
            tls.key.display(),
        );
        if let Some((user, password)) = auth {
            let hash = bcrypt::hash(password, 5).context("hashing the registry password")?;
            std::fs::write(dir.join("htpasswd"), format!("{user}:{hash}\n"))?;
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: testenv\n    path: {}\n",
                dir.join("htpasswd").display()
            ));
        }
        let config_path = dir.join("config.yml");
        std::fs::write(&config_path, config)?;
        let log = std::fs::File::create(dir.join("registry.log"))?;
        let child = Command::new(crate::paths::bin_dir()?.join("registry"))
            .arg("serve")
            .arg(&config_path)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the registry (hack/build-binaries.sh builds it)")?;
        plane.stop_on_exit(child.id())?;
        let registry = Self {
            child,
            address,
            ca_pem: std::fs::read(&tls.ca)?,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&registry.address).is_err() {
            if Instant::now() >= deadline {
                bail!(
                    "the registry did not listen on {} within 30s",
                    registry.address
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // The node pulls by the registry's host name and by its address
        // (a package image that is its own runtime is pulled from where the
        // package-manager read it).
        let server = format!("https://{}", registry.address);
        for name in [host, registry.address.as_str()] {
            let hosts = node.registry_config_dir().join(name);
            std::fs::create_dir_all(&hosts)?;
            std::fs::write(
                hosts.join("hosts.toml"),
                format!(
                    "server = \"{server}\"\n\n[host.\"{server}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"{}\"\n",
                    tls.ca.display()
                ),
            )?;
        }
        Ok(registry)
    }
}

impl Registry {
    /// The registry process's id (a test checks it is gone after its test
    /// binary exits).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
