//! Reading a stack: its files (paths as in the layer, `.registry/...`)
//! checked and turned into a [`Stack`]: app.yaml ([`app`]), install.yaml,
//! rbac.yaml and the CRDs ([`objects`]), each YAML file read within the
//! package's bounds ([`file`]).

mod app;
mod file;
mod objects;

use std::collections::BTreeMap;

use self::file::At;
use crate::{
    Error, Limits,
    limits::{YamlBudget, over},
    stack::{INSTALL_FILE, RBAC_FILE, Stack},
    text::text,
};

/// Checks a stack's files (paths as in the layer, `.registry/...`) and
/// returns what it holds. `tag` is the image tag it was pulled by: app.yaml
/// without a version takes it, one with a version must match it. Anything
/// malformed or missing is refused naming the file, the line and what to
/// fix; nothing is half-read. Within the default [`Limits`].
pub fn parse(
    reference: &str,
    layer: &str,
    files: &BTreeMap<String, Vec<u8>>,
    tag: Option<&str>,
) -> Result<Stack, Error> {
    parse_within(reference, layer, files, tag, &Limits::default())
}

/// [`parse`] within `limits`: each file's size, the YAML files parsed and
/// what they take parsed are bounded.
pub fn parse_within(
    reference: &str,
    layer: &str,
    files: &BTreeMap<String, Vec<u8>>,
    tag: Option<&str>,
    limits: &Limits,
) -> Result<Stack, Error> {
    for (path, bytes) in files {
        if bytes.len() as u64 > limits.file_bytes {
            return Err(Error::invalid(
                reference,
                layer,
                over(
                    &format!("{} ({} bytes)", text(path), bytes.len()),
                    "bytes per file read into memory",
                    limits.file_bytes,
                ),
            ));
        }
    }
    let at = At { reference, layer };
    let budget = &mut YamlBudget::new(limits);
    let (app, depends_on) = app::read(&at, budget, files, tag)?;
    let install = match files.get(INSTALL_FILE) {
        None => None,
        Some(bytes) => Some(objects::deployment(&at, budget, bytes)?),
    };
    let rules = match files.get(RBAC_FILE) {
        None => Vec::new(),
        Some(bytes) => objects::rules(&at, budget, bytes)?,
    };
    let crds = objects::crds(&at, budget, files)?;
    if crds.is_empty() && install.is_none() {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "the stack has neither CRDs (.registry/resources/**/*crd.yaml) nor a controller ({INSTALL_FILE}); it would install nothing"
            ),
        ));
    }
    objects::defined_once(&at, &crds)?;
    Ok(Stack {
        app,
        depends_on,
        install,
        rules,
        crds,
    })
}
