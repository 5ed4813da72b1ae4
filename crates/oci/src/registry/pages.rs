//! Paginated lists of a registry (a repository's tags, the registry's
//! catalog): every page read, within a bound on pages, and only valid
//! names kept.

use serde_json::Value;

use super::{Session, session::MAX_MANIFEST_BYTES};
use crate::{
    Error,
    text::{RegistryText, text},
};

/// Tags asked for per page of a tag list.
const TAGS_PER_PAGE: usize = 1000;

/// The most pages of tags read (a registry that ignores `last` would
/// otherwise be asked forever).
const MAX_TAG_PAGES: usize = 100;

/// A valid tag (the distribution spec's grammar).
fn is_tag(t: &str) -> bool {
    let mut bytes = t.bytes();
    t.len() <= 128
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A valid repository name (lower-case path components).
fn is_repository(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 255
        && r.split('/').all(|c| {
            !c.is_empty()
                && c.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
        })
}

/// A page of a paginated list: the strings of `field`, valid ones only.
async fn page(
    session: &Session<'_>,
    step: &'static str,
    path: &str,
    scope: &str,
    field: &str,
    valid: fn(&str) -> bool,
) -> Result<Vec<String>, Error> {
    let body = session
        .small_body(step, path, scope, None, MAX_MANIFEST_BYTES)
        .await?
        .map_err(|max| Error::Registry {
            reference: text(session.reference()),
            step,
            detail: format!("a page of the list is over {max} bytes"),
            transient: false,
            source: Box::new(RegistryText::new("the answer is too large")),
        })?;
    let json: Value = serde_json::from_slice(&body).map_err(|e| Error::Registry {
        reference: text(session.reference()),
        step,
        detail: text(&format!("the answer is not JSON: {e}")),
        transient: false,
        source: Box::new(RegistryText::new(&e.to_string())),
    })?;
    Ok(json
        .get(field)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
        .filter(|s| valid(s))
        .map(str::to_owned)
        .collect())
}

/// A page of `repository`'s tags: at most `n`, after `last`.
async fn tags(
    session: &Session<'_>,
    repository: &str,
    n: usize,
    last: Option<&str>,
) -> Result<Vec<String>, Error> {
    let mut path = format!("/v2/{repository}/tags/list?n={n}");
    if let Some(last) = last {
        path.push_str(&format!("&last={last}"));
    }
    page(
        session,
        "listing tags",
        &path,
        &format!("repository:{repository}:pull"),
        "tags",
        is_tag,
    )
    .await
}

/// A page of the registry's repositories: at most `n`, after `last`.
async fn catalog(
    session: &Session<'_>,
    n: usize,
    last: Option<&str>,
) -> Result<Vec<String>, Error> {
    let mut path = format!("/v2/_catalog?n={n}");
    if let Some(last) = last {
        path.push_str(&format!("&last={last}"));
    }
    page(
        session,
        "listing the registry's repositories",
        &path,
        "registry:catalog:*",
        "repositories",
        is_repository,
    )
    .await
}

/// Every tag of `repository` (in the session's registry).
pub(crate) async fn all_tags(
    session: &Session<'_>,
    repository: &str,
) -> Result<Vec<String>, Error> {
    all_pages(|last| async move { tags(session, repository, TAGS_PER_PAGE, last.as_deref()).await })
        .await
}

/// Every repository of the session's registry (its catalog).
pub(crate) async fn all_repositories(session: &Session<'_>) -> Result<Vec<String>, Error> {
    all_pages(|last| async move { catalog(session, TAGS_PER_PAGE, last.as_deref()).await }).await
}

/// Every page of a paginated list (tags, the catalog): `page(last)` reads
/// the page after `last`. At most [`MAX_TAG_PAGES`] pages are read, and a
/// registry that ignores `last` (sending the same page again) ends it.
async fn all_pages<F, Fut>(mut page: F) -> Result<Vec<String>, Error>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Vec<String>, Error>>,
{
    let mut all: Vec<String> = Vec::new();
    let mut last: Option<String> = None;
    for _ in 0..MAX_TAG_PAGES {
        let items = page(last.clone()).await?;
        let next = items.last().cloned();
        if next.is_none() || next == last || next.as_ref().is_some_and(|n| all.contains(n)) {
            break;
        }
        all.extend(items);
        last = next;
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_repositories_from_a_registry_are_checked() {
        assert!(is_tag("v1.0.0") && is_tag("latest") && is_tag("_x"));
        assert!(!is_tag("") && !is_tag(".x") && !is_tag("a b") && !is_tag(&"a".repeat(129)));
        assert!(is_repository("a/b-c/d_e.f"));
        assert!(!is_repository("A/b") && !is_repository("a//b") && !is_repository("a\u{1}"));
    }
}
