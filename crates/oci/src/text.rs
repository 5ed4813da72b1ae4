//! Text a registry (or a package) wrote, made fit for an error message:
//! every room that puts such text into an error goes through [`text`].
//! Imports nothing of the crate.

use std::fmt;

/// The most characters of registry text an error carries: enough for a
/// registry's error message, not enough to flood a status.
pub const MAX_TEXT_CHARS: usize = 200;

/// `s` fit for an error message: control characters (escapes, NULs) are
/// removed, runs of whitespace (newlines too) become one space, and at most
/// [`MAX_TEXT_CHARS`] characters are kept ("…" marks a cut).
pub fn text(s: &str) -> String {
    let mut out = String::new();
    let mut chars = 0;
    let mut space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        if c.is_control() {
            continue;
        }
        if chars + usize::from(space) >= MAX_TEXT_CHARS {
            out.push('…');
            return out;
        }
        if space {
            out.push(' ');
            chars += 1;
            space = false;
        }
        out.push(c);
        chars += 1;
    }
    out
}

/// What a registry (or the way to it) said, sanitized and capped (control
/// characters removed, whitespace collapsed, at most 200
/// characters): the cause errors carry.
#[derive(Debug)]
pub struct RegistryText(String);

impl RegistryText {
    /// `s`, sanitized and capped.
    pub fn new(s: &str) -> Self {
        Self(text(s))
    }
}

impl fmt::Display for RegistryText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RegistryText {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn registry_text_loses_control_characters_and_is_capped() {
        assert_eq!(text(" a\u{1b}[31mb\r\n\tc\u{0}\n"), "a[31mb c");
        let long = text(&"x".repeat(1 << 20));
        assert_eq!(long.chars().count(), MAX_TEXT_CHARS + 1);
        let words = text(&"ab ".repeat(1 << 20));
        assert_eq!(words.chars().count(), MAX_TEXT_CHARS + 1, "{words}");
        assert!(long.ends_with('…'));
    }
}
