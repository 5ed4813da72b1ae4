//! The checks of a query's source made before it is parsed: its size, its
//! tokens, how deep its brackets nest and how many `?` it has. The parser
//! limits some nesting, but not chains such as `1+1+…` or `a.b.c…`, which
//! it builds into deep trees: the token limit bounds those. String literals
//! and comments are skipped as CEL's lexer reads them.

/// Longest source, in bytes.
pub const MAX_SOURCE: usize = 8192;
/// Most tokens (identifiers, numbers, literals, operator characters).
pub const MAX_TOKENS: usize = 1000;
/// Deepest nesting of `(`, `[` and `{`.
pub const MAX_BRACKETS: usize = 24;
/// Most `?` (conditionals and optional selections).
pub const MAX_QUESTION_MARKS: usize = 16;

/// The error for a source of `len` bytes, over MAX_SOURCE.
pub(super) fn too_long(len: usize) -> String {
    format!("the expression is {len} bytes long; at most {MAX_SOURCE} are allowed")
}

/// The checks made before parsing: size, tokens, bracket depth and `?`.
pub(super) fn scan(source: &str) -> Result<(), String> {
    if source.len() > MAX_SOURCE {
        return Err(too_long(source.len()));
    }
    let b = source.as_bytes();
    let (mut i, mut tokens, mut depth, mut questions) = (0, 0, 0usize, 0);
    while i < b.len() {
        let c = b[i];
        if matches!(c, b' ' | b'\t' | b'\r' | b'\n' | 0x0c) {
            i += 1;
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        tokens += 1;
        if tokens > MAX_TOKENS {
            return Err(format!(
                "the expression has more than {MAX_TOKENS} tokens; simplify it"
            ));
        }
        if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            // `r"…"`, `b'…'`, `br"…"`: the prefix and the literal are one token.
            if matches!(b.get(i), Some(b'"' | b'\'')) {
                let raw = match &b[start..i] {
                    b"b" | b"B" => Some(false),
                    b"r" | b"R" | b"br" | b"bR" | b"Br" | b"BR" => Some(true),
                    _ => None,
                };
                if let Some(raw) = raw {
                    i = skip_string(b, i, raw);
                }
            }
            continue;
        }
        match c {
            b'"' | b'\'' => {
                i = skip_string(b, i, false);
                continue;
            }
            b'`' => {
                // An escaped field name, e.g. `a.b/c`: may hold `//`.
                let end = b[i + 1..]
                    .iter()
                    .position(|&x| !(x.is_ascii_alphanumeric() || b"_.-/ ".contains(&x)));
                if let Some(n) = end.filter(|&n| n > 0 && b[i + 1 + n] == b'`') {
                    i += n + 2;
                    continue;
                }
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_BRACKETS {
                    return Err(format!(
                        "the expression nests brackets deeper than {MAX_BRACKETS}; simplify it"
                    ));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'?' => {
                questions += 1;
                if questions > MAX_QUESTION_MARKS {
                    return Err(format!(
                        "the expression has more than {MAX_QUESTION_MARKS} `?`; simplify it"
                    ));
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Where the string literal whose opening quote is at `i` ends, as CEL's
/// lexer reads it; an unterminated one is only its quote (the parser rejects
/// it, and what follows is scanned as code).
fn skip_string(b: &[u8], i: usize, raw: bool) -> usize {
    let q = b[i];
    if b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q) {
        let mut j = i + 3;
        while j < b.len() {
            if b[j..].starts_with(&[q, q, q]) {
                return j + 3;
            }
            j += if !raw && b[j] == b'\\' { 2 } else { 1 };
        }
        return i + 1;
    }
    let mut j = i + 1;
    while j < b.len() && b[j] != b'\n' && b[j] != b'\r' {
        if b[j] == q {
            return j + 1;
        }
        j += if !raw && b[j] == b'\\' { 2 } else { 1 };
    }
    i + 1
}
