//! The package API's contract is spelt once, in `types::pkg::contract`: no
//! other crate's code (tests aside) writes one of its strings itself, so a
//! key or condition cannot drift between the package-manager and the
//! rbac-manager.

mod sources;
use sources::{rust_files, workspace};

use types::pkg::contract::{annotations, conditions, finalizers, labels};

const CONTRACT: &[&str] = &[
    labels::PACKAGE,
    labels::PROVIDER,
    labels::REVISION,
    labels::DEPENDENCY,
    annotations::SOURCE,
    annotations::DIGEST,
    annotations::DEPENDENCIES,
    annotations::CAPABILITIES,
    finalizers::PROVIDER,
    finalizers::REVISION,
    conditions::INSTALLED,
    conditions::HEALTHY,
    conditions::RUNTIME_HEALTHY,
    conditions::RBAC_READY,
    conditions::EXTERNAL_RUNTIME,
];

#[test]
fn no_crate_but_types_spells_the_package_contract() {
    let crates = workspace().join("crates");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // types spells it; testenv knows nothing of packages.
        if name == "types" || name == "testenv" {
            continue;
        }
        rust_files(&entry.path().join("src"), &mut files);
    }
    assert!(
        files.len() > 20,
        "found the crates' sources: {}",
        files.len()
    );
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            // Unit tests (a module at the end of the file) spell what they
            // expect to see.
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            for s in CONTRACT {
                if line.contains(&format!("\"{s}\"")) {
                    found.push(format!("{}:{}: \"{s}\"", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "spell these with types::pkg::contract:\n{}",
        found.join("\n")
    );
}
