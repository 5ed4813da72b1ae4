//! The processes of a control plane: started with their logs in its
//! directory, checked for an early exit, and stopped (with anything started
//! beside them and the node's host state) when the plane is dropped or the
//! test process exits.

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Mutex, MutexGuard, PoisonError},
};

use anyhow::{Context as _, bail};

/// Owns the started processes; a watchdog stops them (and removes their data)
/// when the test process exits, however it exits.
pub(crate) struct Processes {
    /// Locked: a test may stop and start one of them again
    /// ([`Processes::stop`], [`Processes::start_again`]).
    children: Mutex<Vec<Started>>,
    dir: PathBuf,
}

/// One process started, and how (to start it again the same way).
struct Started {
    name: String,
    child: Child,
    bin: Option<PathBuf>,
    args: Vec<String>,
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
            children: Mutex::new(Vec::new()),
            dir,
        })
    }

    fn children(&self) -> MutexGuard<'_, Vec<Started>> {
        self.children.lock().unwrap_or_else(PoisonError::into_inner)
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
        if let Some(started) = self.children().last_mut() {
            started.bin = Some(bin.to_owned());
            started.args = args.to_vec();
        }
        Ok(())
    }

    /// Kills the process `name` (SIGKILL, as a crash or an OOM kill would)
    /// and waits until it is gone.
    pub(crate) fn stop(&self, name: &str) -> anyhow::Result<()> {
        let mut children = self.children();
        let started = children
            .iter_mut()
            .find(|s| s.name == name)
            .with_context(|| format!("no process {name} was started"))?;
        let _ = started.child.kill();
        started.child.wait()?;
        Ok(())
    }

    /// Starts the process `name` again with the command line it was first
    /// started with (its log goes on in the same file); it must have been
    /// stopped.
    pub(crate) fn start_again(&self, name: &str) -> anyhow::Result<()> {
        let mut children = self.children();
        let started = children
            .iter_mut()
            .find(|s| s.name == name)
            .with_context(|| format!("no process {name} was started"))?;
        if started.child.try_wait()?.is_none() {
            bail!("{name} still runs: stop it first");
        }
        let bin = started
            .bin
            .clone()
            .with_context(|| format!("{name} was not started from a binary and arguments"))?;
        let log = fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join(format!("{name}.log")))?;
        let child = Command::new(&bin)
            .args(&started.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {name} again"))?;
        self.stop_on_exit(child.id())?;
        started.child = child;
        Ok(())
    }

    /// Sends `signal` ("STOP", "CONT") to the process `name`: a test pauses
    /// a server (it keeps its connections and answers nothing) and lets it
    /// go on.
    pub(crate) fn signal(&self, name: &str, signal: &str) -> anyhow::Result<()> {
        let pid = self
            .children()
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.child.id())
            .with_context(|| format!("no process {name} was started"))?;
        run(
            Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]),
            &format!("kill -{signal} {name}"),
        )?;
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
        self.children().push(Started {
            name: name.to_owned(),
            child,
            bin: None,
            args: Vec::new(),
        });
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
        self.children()
            .iter()
            .map(|s| (s.name.clone(), s.child.id()))
            .collect()
    }

    /// Fails naming the process and the end of its log when one has exited.
    pub(crate) fn check_alive(&mut self) -> anyhow::Result<()> {
        for Started { name, child, .. } in self.children().iter_mut() {
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
        for Started { child, .. } in self.children().iter_mut().rev() {
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
