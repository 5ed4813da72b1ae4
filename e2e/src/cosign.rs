//! Signing packages as the world signs them: upstream's `cosign` (built by
//! hack/build-binaries.sh from the Go module proxy) makes key pairs, signs
//! and attests images in the test registry, offline (no transparency log
//! upload, the registry trusted by its CA alone).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn cosign(work: &Path) -> Command {
    let mut c = Command::new(
        testenv::bin_dir()
            .expect("CROSSPLANE_RS_BIN (hack/build-binaries.sh)")
            .join("cosign"),
    );
    // No password on the keys, no state outside the work directory, and
    // nothing sent anywhere but the registry.
    c.env("COSIGN_PASSWORD", "")
        .env("TUF_ROOT", work.join("tuf"))
        .env("HOME", work)
        .current_dir(work);
    c
}

fn run(what: &str, mut cmd: Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run cosign: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A key pair made by `cosign generate-key-pair` in `work`: (private key
/// file, public key PEM).
pub fn key_pair(work: &Path, name: &str) -> (PathBuf, String) {
    std::fs::create_dir_all(work).unwrap();
    let mut c = cosign(work);
    c.args(["generate-key-pair", "--output-key-prefix", name]);
    run("cosign generate-key-pair", c);
    let public = std::fs::read_to_string(work.join(format!("{name}.pub"))).unwrap();
    (work.join(format!("{name}.key")), public)
}

/// `cosign sign --key KEY IMAGE` (`image` by digest), trusting `ca_file`.
pub fn sign(work: &Path, key: &Path, image: &str, ca_file: &Path) {
    let mut c = cosign(work);
    c.args(["sign", "--tlog-upload=false", "-y", "--key"])
        .arg(key)
        .arg("--registry-cacert")
        .arg(ca_file)
        .arg(image);
    run(&format!("cosign sign {image}"), c);
}

/// `cosign attest --key KEY --type TYPE --predicate FILE IMAGE`, trusting
/// `ca_file`.
pub fn attest(work: &Path, key: &Path, image: &str, type_: &str, ca_file: &Path) {
    let predicate = work.join("predicate.json");
    std::fs::write(&predicate, r#"{"built-by": "crossplane-rs e2e"}"#).unwrap();
    let mut c = cosign(work);
    c.args([
        "attest",
        "--tlog-upload=false",
        "-y",
        "--type",
        type_,
        "--key",
    ])
    .arg(key)
    .arg("--predicate")
    .arg(&predicate)
    .arg("--registry-cacert")
    .arg(ca_file)
    .arg(image);
    run(&format!("cosign attest {image}"), c);
}
