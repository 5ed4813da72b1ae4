//! The package formats the fetcher reads, and what each needs: a
//! Crossplane package's `package.yaml` ([`Contents`]) and a stack's
//! `.registry/` files ([`Stack`]). A format names the files it reads from
//! the package layer and checks them; pulling, caching and bounding are the
//! fetcher's, the same for every format.

use std::collections::BTreeMap;

use crate::{
    Error, Limits,
    reference::tag_of,
    stack::{self, Stack},
    xpkg::{self, Contents, PACKAGE_FILE},
};

/// A package format: what is read from a package layer, and how it is
/// checked.
pub trait Format: Sized + Send + 'static {
    /// The format's name in cache file names (one word).
    const NAME: &'static str;
    /// The step reading a package of this format, for messages.
    const READING: &'static str;
    /// The step checking its files, for messages.
    const PARSING: &'static str;

    /// Whether the layer's file at `path` is one this format reads.
    fn wanted(path: &str) -> bool;

    /// The package, from the files read from `layer` of the image
    /// `reference` names, checked within `limits`.
    fn parse(
        reference: &str,
        layer: &str,
        files: &BTreeMap<String, Vec<u8>>,
        limits: &Limits,
    ) -> Result<Self, Error>;

    /// The files the cache keeps of a package parsed from `files`: those
    /// files, unless the format keeps what it parsed in a form quicker to
    /// read again ([`Format::parse_kept`]). A package is read on every
    /// reconcile of what it installs; parsing its YAML again each time was
    /// half of the package-manager's CPU while 20 Providers installed.
    fn kept(&self, files: BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
        files
    }

    /// The package from files the cache kept ([`Format::kept`]): checked
    /// when they were first read.
    fn parse_kept(
        reference: &str,
        layer: &str,
        files: &BTreeMap<String, Vec<u8>>,
        limits: &Limits,
    ) -> Result<Self, Error> {
        Self::parse(reference, layer, files, limits)
    }
}

impl Format for Contents {
    const NAME: &'static str = "package";
    const READING: &'static str = "reading the package";
    const PARSING: &'static str = "parsing package.yaml";

    fn wanted(path: &str) -> bool {
        path == PACKAGE_FILE
    }

    fn parse(
        reference: &str,
        layer: &str,
        files: &BTreeMap<String, Vec<u8>>,
        limits: &Limits,
    ) -> Result<Self, Error> {
        let yaml = files.get(PACKAGE_FILE).ok_or_else(|| {
            Error::invalid(
                reference,
                layer,
                format!("no {PACKAGE_FILE} in the package"),
            )
        })?;
        xpkg::parse_within(reference, layer, yaml, limits)
    }

    /// What was parsed, as JSON: reading it back costs a tenth of parsing
    /// the YAML again.
    fn kept(&self, files: BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
        match xpkg::kept(self) {
            Some(json) => BTreeMap::from([(xpkg::KEPT_FILE.to_owned(), json)]),
            None => files,
        }
    }

    fn parse_kept(
        reference: &str,
        layer: &str,
        files: &BTreeMap<String, Vec<u8>>,
        limits: &Limits,
    ) -> Result<Self, Error> {
        match files.get(xpkg::KEPT_FILE) {
            Some(json) => xpkg::from_kept(reference, layer, json),
            None => Self::parse(reference, layer, files, limits),
        }
    }
}

impl Format for Stack {
    const NAME: &'static str = "stack";
    const READING: &'static str = "reading the stack";
    const PARSING: &'static str = "parsing the stack";

    fn wanted(path: &str) -> bool {
        stack::is_stack_file(path)
    }

    /// The image's tag (when `reference` has one) gives app.yaml's version
    /// when it has none.
    fn parse(
        reference: &str,
        layer: &str,
        files: &BTreeMap<String, Vec<u8>>,
        limits: &Limits,
    ) -> Result<Self, Error> {
        stack::parse_within(
            reference,
            layer,
            files,
            tag_of(reference).as_deref(),
            limits,
        )
    }
}
