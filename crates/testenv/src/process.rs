//! The processes of a control plane: started with their logs in its
//! directory, checked for an early exit, and stopped (with anything started
//! beside them and the node's host state) when the plane is dropped or the
//! test process exits.

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::{Context as _, bail};

/// Owns the started processes; a watchdog stops them (and removes their data)
/// when the test process exits, however it exits.
pub(crate) struct Processes {
    children: Vec<(String, Child)>,
    dir: PathBuf,
}

impl Processes {
    /// The directory holding the PKI, logs and data.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Owns what is started for the plane whose data is in `dir`; a
    /// watchdog stops it all when the test process exits.
    pub(crate) fn new(dir: PathBuf) -> anyhow::Result<Self> {
        start_watchdog(&dir)?;
        Ok(Self {
            children: Vec::new(),
            dir,
        })
    }

    pub(crate) fn spawn(&mut self, name: &str, bin: &Path, args: &[String]) -> anyhow::Result<()> {
        if !bin.exists() {
            bail!(
                "{} is missing: run `hack/build-binaries.sh` first (the README's test command does), or set CROSSPLANE_RS_BIN",
                bin.display()
            );
        }
        let mut cmd = Command::new(bin);
        cmd.args(args);
        self.spawn_command(name, cmd)?;
        Ok(())
    }

    /// Starts `cmd` as `name` (output to `<name>.log`, stopped with the
    /// rest) and returns its pid.
    pub(crate) fn spawn_command(&mut self, name: &str, mut cmd: Command) -> anyhow::Result<u32> {
        let log = fs::File::create(self.dir.join(format!("{name}.log")))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", cmd.get_program()))?;
        let pid = child.id();
        self.stop_on_exit(pid)?;
        self.children.push((name.to_owned(), child));
        Ok(pid)
    }

    /// Makes the watchdog stop `pid` when the test process exits, however
    /// it exits (a process started beside these, such as a registry).
    pub(crate) fn stop_on_exit(&self, pid: u32) -> anyhow::Result<()> {
        let mut pids = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.dir.join("pids"))?;
        writeln!(pids, "{pid}")?;
        Ok(())
    }

    /// The processes started, by name ("etcd", "kube-apiserver-control",
    /// ...), with their pids.
    pub(crate) fn pids(&self) -> Vec<(String, u32)> {
        self.children
            .iter()
            .map(|(name, child)| (name.clone(), child.id()))
            .collect()
    }

    /// Fails naming the process and the end of its log when one has exited.
    pub(crate) fn check_alive(&mut self) -> anyhow::Result<()> {
        for (name, child) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                let log =
                    fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                bail!(
                    "{name} exited ({status}); the end of its log:\n{}",
                    tail.join("\n")
                );
            }
        }
        Ok(())
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        // Newest first: the node's components before the API servers.
        for (_, child) in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // What was started beside them (a registry): its pid goes with the
        // directory, so the watchdog could not find it later.
        stop_listed(&self.dir);
        teardown_node(&self.dir);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Runs `cmd` to completion; its stdout, or an error with its stderr
/// naming `what`.
pub(crate) fn run(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: cannot run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The node's teardown script under a plane's directory (the node writes
/// it before it creates anything; the watchdog and `Drop` run it).
pub(crate) fn teardown_path(dir: &Path) -> PathBuf {
    dir.join("node").join("teardown.sh")
}

/// Runs the node's teardown script if there is one (from `Drop`; the
/// watchdog runs it itself).
fn teardown_node(dir: &Path) {
    let script = teardown_path(dir);
    if script.exists() {
        let _ = Command::new("sh").arg(&script).status();
    }
}

/// Kills every process listed in `dir/pids` that still runs from `dir`
/// (its command line names a file there: a pid reused by something else is
/// left alone).
fn stop_listed(dir: &Path) {
    let listed = fs::read_to_string(dir.join("pids")).unwrap_or_default();
    let here = dir.to_string_lossy().into_owned();
    for pid in listed.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&here) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// A shell loop that waits for this test process to exit, then stops every
/// pid listed in `dir/pids` and anything else still running from `dir` (a
/// command line naming a file in it), tears the node down
/// (`dir/node/teardown.sh`) and removes `dir`.
fn start_watchdog(dir: &Path) -> anyhow::Result<()> {
    let script = r#"
while kill -0 "$1" 2>/dev/null; do sleep 1; done
pids=$(cat "$2/pids" 2>/dev/null)
[ -n "$pids" ] && kill $pids 2>/dev/null
pkill -f -- "$2/" 2>/dev/null
sleep 3
[ -n "$pids" ] && kill -9 $pids 2>/dev/null
pkill -9 -f -- "$2/" 2>/dev/null
[ -f "$2/node/teardown.sh" ] && sh "$2/node/teardown.sh"
rm -rf "$2"
"#;
    Command::new("sh")
        .args([
            "-c",
            script,
            "watchdog",
            &std::process::id().to_string(),
            &dir.to_string_lossy(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the test-environment watchdog")?;
    Ok(())
}
