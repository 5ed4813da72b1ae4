//! A YAML stream as a package holds it: split into documents with the line
//! each starts on, and a parser's error said on one line with where it is.

/// A YAML stream split into documents: the line (1-based) each document's
/// content starts on, and its text. More than `max` documents (empty ones
/// too: each costs memory here) is `Err(max)`.
pub(crate) fn documents(text: &str, max: usize) -> Result<Vec<(usize, String)>, usize> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") || trimmed.starts_with("---\t") {
            if docs.len() >= max {
                return Err(max);
            }
            docs.push((start, std::mem::take(&mut current)));
            // Content after the marker (`--- {a: 1}`) stays on its line.
            let rest = &trimmed[3..];
            if rest.trim().is_empty() {
                start = i + 2;
            } else {
                start = i + 1;
                current.push_str(rest);
                current.push('\n');
            }
            continue;
        }
        if trimmed == "..." {
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    docs.push((start, current));
    Ok(docs)
}

/// Where a YAML error is (line and column within the parsed text, when
/// known) and what it says, on one line (the parser's message may add a
/// snippet, and starts with its own "line N column M: ").
pub(crate) fn yaml_error(e: &serde_saphyr::Error) -> (Option<(usize, u64)>, String) {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let what = match first.split_once(": ") {
        Some((place, rest)) if place.starts_with("line ") => rest,
        _ => first,
    };
    let place = e
        .location()
        .filter(|l| l.line() > 0)
        .map(|l| (usize::try_from(l.line()).unwrap_or(1), l.column()));
    (place, what.to_owned())
}

/// "(line L[, column C]): malformed YAML: what", L counted in the whole
/// stream (the parser counts within the document starting on `start`).
pub(crate) fn yaml_fault(start: usize, e: &serde_saphyr::Error) -> String {
    match yaml_error(e) {
        (Some((line, column)), what) => {
            let line = start + line - 1;
            format!("(line {line}, column {column}): malformed YAML: {what}")
        }
        (None, what) => format!("(line {start}): malformed YAML: {what}"),
    }
}
