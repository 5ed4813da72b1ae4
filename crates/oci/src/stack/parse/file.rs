//! One file of a stack read as YAML: UTF-8, parsed within the package's
//! YAML budget, and a parser's error said with its line.

use crate::{
    Error,
    limits::{Parse, YamlBudget},
    xpkg::yaml::yaml_error,
};

/// Where a stack's files come from (for messages).
pub(crate) struct At<'a> {
    pub(crate) reference: &'a str,
    pub(crate) layer: &'a str,
}

/// "(line L, column C): what" from a YAML error, on one line.
fn at_line(e: &serde_saphyr::Error) -> String {
    match yaml_error(e) {
        (Some((line, column)), what) => format!("(line {line}, column {column}): {what}"),
        (None, what) => format!(": {what}"),
    }
}

fn text_of<'a>(
    reference: &str,
    layer: &str,
    path: &str,
    bytes: &'a [u8],
) -> Result<&'a str, Error> {
    std::str::from_utf8(bytes)
        .map_err(|e| Error::invalid(reference, layer, format!("{path} is not UTF-8: {e}")))
}

/// One YAML file of a stack, parsed within `budget` (`size` estimates what
/// the result takes in memory).
pub(crate) fn yaml<T: serde::de::DeserializeOwned>(
    at: &At<'_>,
    budget: &mut YamlBudget,
    path: &str,
    bytes: &[u8],
    size: impl FnOnce(&T) -> u64,
) -> Result<T, Error> {
    let (reference, layer) = (at.reference, at.layer);
    let text = text_of(reference, layer, path, bytes)?;
    budget.parse(path, text, size).map_err(|e| match e {
        Parse::Bound(refusal) => Error::invalid(reference, layer, refusal),
        Parse::Yaml(e) => Error::invalid(reference, layer, format!("{path} {}", at_line(&e))),
    })
}
