//! The demo, as a user runs it: `hack/run.sh` (the README's run command)
//! with `RUN_ONCE=1` on the real node, in a run directory of its own. It
//! starts its own control plane, node and registry, pushes the seeds'
//! packages and images, applies the ImageConfigs and every seed file that
//! applies unchanged, and ends with one verdict per seed; every verdict must
//! say ok (the exceptions the script names, OLM for seed 002's csv-kong and
//! the seed Extension's CRD, are part of an ok line). Afterwards nothing it
//! started may still run: the script stops its control plane (and with it
//! the registry, containerd, kubelet and the API servers) when it exits.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    io::Read as _,
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// How long the whole demo may take (builds are done: `cargo test` built
/// the binaries, the script's `cargo build` finds them fresh).
const DEMO: Duration = Duration::from_secs(20 * 60);

/// The script's process group: terminated (then killed) if the test ends
/// while it runs, so a failing or timed-out test leaves nothing behind.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let group = format!("-{}", self.0.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            let deadline = Instant::now() + Duration::from_secs(60);
            while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = self.0.wait();
        }
    }
}

/// Processes whose command line names `path` (the run directory, or the
/// control plane's data directory).
fn processes_naming(path: &Path) -> Vec<String> {
    let needle = path.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

#[test]
fn the_demo_shows_every_seed_working() {
    let repo = testenv::repo_root();
    let dir = std::env::temp_dir().join(testenv::unique_name("demo-run"));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("run.out");
    let out = std::fs::File::create(&log).unwrap();
    let started = Instant::now();
    let mut run = Command::new(repo.join("hack/run.sh"));
    // What cargo sets for this test alone: the script's `cargo build` would
    // see it as a change (ring's build script reads CARGO_MANIFEST_DIR) and
    // build again what the next plain build then builds once more.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if [
            "CARGO_MANIFEST_",
            "CARGO_PKG_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
            "OUT_DIR",
        ]
        .iter()
        .any(|p| name.starts_with(p))
        {
            run.env_remove(name.as_ref());
        }
    }
    let child = run
        .current_dir(&repo)
        .env("RUN_ONCE", "1")
        .env("CROSSPLANE_RS_RUN_DIR", &dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .spawn()
        .expect("run hack/run.sh");
    let mut group = Group(child);
    let status = loop {
        if let Some(status) = group.0.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > DEMO {
            break None;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    let took = started.elapsed();
    drop(group);
    let mut output = String::new();
    std::fs::File::open(&log)
        .unwrap()
        .read_to_string(&mut output)
        .unwrap();
    eprintln!("hack/run.sh took {took:?}; its output:\n{output}");
    let status = status.unwrap_or_else(|| panic!("hack/run.sh ran over {DEMO:?}"));

    let verdicts: Vec<&str> = output
        .lines()
        .filter(|l| l.starts_with("seed 00"))
        .collect();
    for seed in ["000", "001", "002", "003", "004"] {
        let line = verdicts
            .iter()
            .find(|l| l.starts_with(&format!("seed {seed}: ")))
            .unwrap_or_else(|| panic!("no verdict for seed {seed}: {verdicts:#?}"));
        assert!(
            line.starts_with(&format!("seed {seed}: ok — ")),
            "seed {seed}: {line}"
        );
    }
    assert!(
        verdicts
            .iter()
            .any(|l| l.starts_with("seed 002: ok") && l.contains("OLM")),
        "seed 002's verdict names the OLM exception: {verdicts:#?}"
    );
    assert!(
        output.contains("==> demo up in "),
        "the demo says how long it took"
    );
    assert!(status.success(), "hack/run.sh exited {status}");

    // Nothing it started still runs: not the control plane (named by the
    // run directory), nor what it started (named by its data directory).
    let plane_log = std::fs::read_to_string(dir.join("logs/controlplane.log")).unwrap_or_default();
    let data = plane_log
        .lines()
        .filter(|l| l.starts_with("control plane ready:"))
        .find_map(|l| {
            l.split_once("(logs in ")
                .map(|(_, d)| d.trim_end_matches(')'))
        })
        .map(str::to_owned);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut left = processes_naming(&dir);
        if let Some(d) = &data {
            left.extend(processes_naming(Path::new(d)));
        }
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after hack/run.sh exited: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
