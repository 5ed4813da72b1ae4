//! What one package may make this process do. A registry and a package are
//! written by third parties: whatever they serve, reading a package costs at
//! most these bounds in bytes, CPU and memory, and a package over one is
//! refused with [`crate::Error::Invalid`] naming the bound and its value
//! ("... is over the bound on unpacked bytes per layer (1073741824)"), which
//! is not transient: the same digest is the same bytes, so trying again
//! cannot help.
//!
//! The bounds are sized for the package-manager pod: a 128 MiB memory limit,
//! a read-only root filesystem with an emptyDir for the package cache, and
//! two cores shared with everything else it does.

use std::{
    fmt,
    io::{self, Read},
};

use serde_json::Value;

const MIB: u64 = 1024 * 1024;

/// The largest (compressed) layer a package may have by default
/// ([`Limits::layer_bytes`]; `xpkg::MAX_BYTES` names it too).
pub const MAX_LAYER_BYTES: u64 = 200 * MIB;

/// The bounds on reading one package. [`Limits::default`] is what the
/// package manager uses; tests and operators with bigger pods may choose
/// others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Compressed bytes of one layer, as downloaded (to a temporary file in
    /// the cache directory, never memory). Default 200 MiB: a provider's
    /// runtime layers are tens of MB; the emptyDir holds a few of these.
    pub layer_bytes: u64,
    /// Bytes read out of one layer's decompressor, every byte counted,
    /// those of entries that are skipped included. Default 1 GiB: inflating
    /// it costs about 0.1 CPU s, and nothing of it is kept.
    pub layer_unpacked_bytes: u64,
    /// The same, summed over the layers of a package. Default 2 GiB.
    pub package_unpacked_bytes: u64,
    /// Bytes read out of a layer's decompressor per compressed byte, once
    /// past [`Limits::ratio_allowance`]. Default 100: YAML, JSON and
    /// binaries compress 3 to 20 times; a layer of zero-filled files
    /// compresses 1000 times (an 82 MB layer of zeros unpacks to 78 GiB).
    pub ratio: u64,
    /// Unpacked bytes of a layer allowed whatever its compression ratio, so
    /// a small layer of a few YAML files (tar's padding compresses to
    /// nothing) is never refused for its ratio. Default 16 MiB.
    pub ratio_allowance: u64,
    /// Tar entries in one layer (each costs a header parse, and a map entry
    /// when kept). Default 100,000: a distribution's base image has 10,000
    /// to 20,000 files.
    pub layer_entries: u64,
    /// Tar entries in a package, summed over its layers. Default 200,000.
    pub package_entries: u64,
    /// Bytes of an entry's path (GNU long names and PAX paths are read into
    /// memory). Default 4096, Linux's PATH_MAX.
    pub path_bytes: u64,
    /// Bytes of one file read into memory: package.yaml, or one file of a
    /// stack. Default 8 MiB. Parsing YAML into objects takes 5 times its
    /// size in memory for real CRDs (measured: 8 MiB of CRDs, 40 MiB of
    /// objects) and up to 14 times for YAML of many small maps; the 128 MiB
    /// pod parses 8 MiB well inside its limit (16 MiB of real CRDs took
    /// 93 MiB, too close to it).
    pub file_bytes: u64,
    /// Bytes of all the files of a package read into memory. Default
    /// 16 MiB.
    pub files_bytes: u64,
    /// YAML documents parsed per package (package.yaml's `---` separated
    /// documents; a stack's YAML files). Default 5,000: the largest
    /// providers have about 1,000 CRDs.
    pub documents: usize,
    /// Memory the objects parsed from a package's YAML may take, estimated
    /// from their shape ([`parsed_size`]), and bounding each document's
    /// parse as it goes. Default 40 MiB: 8 MiB of real CRDs take 39 MiB.
    pub parsed_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            layer_bytes: MAX_LAYER_BYTES,
            layer_unpacked_bytes: 1024 * MIB,
            package_unpacked_bytes: 2048 * MIB,
            ratio: 100,
            ratio_allowance: 16 * MIB,
            layer_entries: 100_000,
            package_entries: 200_000,
            path_bytes: 4096,
            file_bytes: 8 * MIB,
            files_bytes: 16 * MIB,
            documents: 5_000,
            parsed_bytes: 40 * MIB,
        }
    }
}

/// The largest PAX extended header read (its records are parsed in
/// memory); real ones are a few hundred bytes.
pub const MAX_PAX_BYTES: u64 = 64 * 1024;

/// "`what` is over the bound on `bound` (`value`)": the shape of every
/// refusal for a bound, so a condition says which bound and its value.
pub fn over(what: &str, bound: &str, value: impl fmt::Display) -> String {
    format!("{what} is over the bound on {bound} ({value})")
}

/// The error a [`Counted`] reader fails with: the refusal, already worded.
#[derive(Debug)]
pub(crate) struct Exceeded(pub(crate) String);

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Exceeded {}

/// The refusal an I/O error carries, if a bound (not the data) made it.
pub(crate) fn exceeded(e: &io::Error) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = next {
        if let Some(x) = cause.downcast_ref::<Exceeded>() {
            return Some(x.0.clone());
        }
        next = match cause.downcast_ref::<io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as _).or(cause.source()),
            None => cause.source(),
        };
    }
    None
}

/// A reader that counts every byte read through it and fails, with
/// [`Exceeded`], past `limit`: put after a decompressor, it bounds the
/// bytes inflated whoever reads them (tar skipping an entry reads it too).
pub(crate) struct Counted<R> {
    inner: R,
    read: u64,
    limit: u64,
    refusal: String,
}

impl<R> Counted<R> {
    /// `inner`, failing with `refusal` once more than `limit` bytes were
    /// read.
    pub(crate) fn new(inner: R, limit: u64, refusal: String) -> Self {
        Self {
            inner,
            read: 0,
            limit,
            refusal,
        }
    }

    /// The bytes read so far.
    pub(crate) fn read_so_far(&self) -> u64 {
        self.read
    }
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let room = self.limit.saturating_sub(self.read);
        if room == 0 {
            // At the bound: one more byte proves it exceeded (the end of
            // the data right there is fine).
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.read += 1;
                    Err(io::Error::other(Exceeded(self.refusal.clone())))
                }
            };
        }
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.read += n as u64;
        Ok(n)
    }
}

/// What is left of a package's YAML bounds while its documents are parsed.
#[derive(Debug)]
pub(crate) struct YamlBudget {
    documents: usize,
    parsed_bytes: u64,
    limits: Limits,
}

/// The most bytes one YAML node (a scalar, a mapping or a sequence, as the
/// parser counts them) can cost as an object: a mapping with one entry is
/// three nodes (itself, the key, the value) and allocates a B-tree leaf of
/// eleven slots (632 bytes). A document's parse may create at most the
/// bytes left divided by this many nodes, so even the costliest YAML stops
/// within the bound; real YAML costs about a fifth of it.
const WORST_BYTES_PER_NODE: u64 = 216;

impl YamlBudget {
    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            documents: limits.documents,
            parsed_bytes: limits.parsed_bytes,
            limits: limits.clone(),
        }
    }

    /// The documents that may still be parsed.
    pub(crate) fn documents_left(&self) -> usize {
        self.documents
    }

    /// Counts one more document of `file`, refusing past the bound.
    pub(crate) fn document(&mut self, file: &str) -> Result<(), String> {
        if self.documents == 0 {
            return Err(over(
                file,
                "YAML documents per package",
                self.limits.documents,
            ));
        }
        self.documents -= 1;
        Ok(())
    }

    /// Parses one YAML document of `file` within what is left, and counts
    /// what its objects take (`size`: [`parsed_size`] for a [`Value`]).
    /// `Err` holds the refusal (for a bound) or the parser's error.
    pub(crate) fn parse<T: serde::de::DeserializeOwned>(
        &mut self,
        file: &str,
        text: &str,
        size: impl FnOnce(&T) -> u64,
    ) -> Result<T, Parse> {
        self.document(file).map_err(Parse::Bound)?;
        let refusal = || {
            over(
                &format!("the YAML of {file}"),
                "parsed YAML per package",
                format_args!("{} bytes in memory, estimated", self.limits.parsed_bytes),
            )
        };
        let mut budget = serde_saphyr::Budget::default();
        budget.max_nodes = usize::try_from(self.parsed_bytes / WORST_BYTES_PER_NODE)
            .unwrap_or(usize::MAX)
            .max(1);
        let mut options = serde_saphyr::Options::default();
        options.budget = Some(budget);
        let value: T = match serde_saphyr::from_str_with_options(text, options) {
            Ok(v) => v,
            Err(e) if out_of_nodes(&e) => return Err(Parse::Bound(refusal())),
            Err(e) => return Err(Parse::Yaml(e)),
        };
        let size = size(&value);
        if size > self.parsed_bytes {
            self.parsed_bytes = 0;
            return Err(Parse::Bound(refusal()));
        }
        self.parsed_bytes -= size;
        Ok(value)
    }
}

/// Whether the parser stopped for the node budget (perhaps wrapped with a
/// snippet of the input, or in an alias's error).
fn out_of_nodes(e: &serde_saphyr::Error) -> bool {
    use serde_saphyr::{Error as E, budget::BudgetBreach};
    match e {
        E::Budget {
            breach: BudgetBreach::Nodes { .. },
            ..
        } => true,
        E::WithSnippet { error, .. } | E::AliasError { error, .. } => out_of_nodes(error),
        _ => false,
    }
}

/// Why [`YamlBudget::parse`] failed.
#[derive(Debug)]
pub(crate) enum Parse {
    /// A bound: the refusal, worded.
    Bound(String),
    /// Malformed YAML (or not the shape asked for).
    Yaml(serde_saphyr::Error),
}

/// The bytes `value` takes in memory, estimated from its shape: a mapping
/// costs a B-tree leaf (632 bytes) per six entries or part of it, plus its
/// keys; a sequence 48 bytes per element (32 for the value, growth slack);
/// a string its length. Measured against the allocator, within 25% for
/// real CRDs and dense YAML alike.
pub fn parsed_size(value: &Value) -> u64 {
    match value {
        Value::Object(m) => object_size(m),
        Value::Array(a) => a.len() as u64 * 48 + a.iter().map(parsed_size).sum::<u64>(),
        Value::String(s) => s.len() as u64,
        _ => 0,
    }
}

/// [`parsed_size`] of a mapping.
pub fn object_size(m: &serde_json::Map<String, Value>) -> u64 {
    (1 + m.len() as u64 / 6) * 632
        + m.iter()
            .map(|(k, v)| k.len() as u64 + parsed_size(v))
            .sum::<u64>()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_counted_reader_fails_one_byte_past_its_bound_whoever_reads() {
        let data = vec![7u8; 1000];
        let mut r = Counted::new(data.as_slice(), 100, "refused".to_owned());
        let mut sink = Vec::new();
        let e = r.read_to_end(&mut sink).unwrap_err();
        assert_eq!(exceeded(&e).as_deref(), Some("refused"));
        assert_eq!(sink.len(), 100, "nothing past the bound is handed on");
        let mut r = Counted::new(&data[..100], 100, "refused".to_owned());
        assert_eq!(io::copy(&mut r, &mut io::sink()).unwrap(), 100);
        assert_eq!(r.read_so_far(), 100);
    }

    #[test]
    fn the_size_of_parsed_yaml_is_estimated_from_its_shape() {
        let v = serde_json::json!({"a": "xyz", "b": [1, 2]});
        assert_eq!(parsed_size(&v), 632 + 1 + 3 + 1 + 2 * 48);
    }

    #[test]
    fn yaml_of_many_small_maps_is_refused_while_it_is_parsed() {
        let limits = Limits {
            parsed_bytes: 1024 * 1024,
            ..Limits::default()
        };
        // 200,000 one-entry maps: 1.8 MB of text that would take 126 MB.
        let text = "- {a: 1}\n".repeat(200_000);
        let mut budget = YamlBudget::new(&limits);
        let refusal = match budget.parse::<Value>("package.yaml", &text, parsed_size) {
            Err(Parse::Bound(refusal)) => refusal,
            Err(Parse::Yaml(e)) => panic!("not refused for a bound: {e:?}"),
            Ok(_) => panic!("parsed"),
        };
        assert_eq!(
            refusal,
            "the YAML of package.yaml is over the bound on parsed YAML per package (1048576 \
             bytes in memory, estimated)"
        );
        // What fits is parsed and counted.
        let mut budget = YamlBudget::new(&limits);
        let v: Value = budget
            .parse("f", "- {a: 1}\n", parsed_size)
            .map_err(|_| ())
            .unwrap();
        assert_eq!(v, serde_json::json!([{"a": 1}]));
        assert_eq!(budget.parsed_bytes, 1024 * 1024 - (48 + 632 + 1));
    }

    #[test]
    fn documents_past_the_bound_are_refused() {
        let limits = Limits {
            documents: 2,
            ..Limits::default()
        };
        let mut budget = YamlBudget::new(&limits);
        assert!(budget.document("package.yaml").is_ok());
        assert!(budget.document("package.yaml").is_ok());
        assert_eq!(
            budget.document("package.yaml").unwrap_err(),
            "package.yaml is over the bound on YAML documents per package (2)"
        );
    }
}
