//! Reading the files a package needs out of its layers, within [`Limits`]:
//! every byte out of the decompressor is counted (skipped entries too), and
//! tar's own extension headers (GNU long names, PAX records), which a tar
//! reader keeps in memory, are bounded before they are read.
//!
//! Blocking work: run it with [`crate::limits::off_workers`].

use std::io::{BufRead, Read as _};

use crate::{
    Error,
    limits::{Counted, Limits, MAX_PAX_BYTES, exceeded, over},
};

/// What a layer says about a file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// The layer holds it.
    File(Vec<u8>),
    /// The layer deletes it (an OCI whiteout).
    Deleted,
}

/// What a package's layers have cost so far (bounds per package are on
/// the sums).
#[derive(Debug, Default)]
pub(crate) struct Spent {
    unpacked: u64,
    entries: u64,
    files: u64,
}

/// One layer being read: where, and within which bounds.
pub(crate) struct Layer<'a> {
    /// The package reference (for messages).
    pub reference: &'a str,
    /// The layer's digest (for messages).
    pub layer: &'a str,
    /// Its media type.
    pub media_type: &'a str,
    /// Its compressed size (for the ratio bound).
    pub compressed: u64,
    /// The bounds.
    pub limits: &'a Limits,
}

impl Layer<'_> {
    fn invalid(&self, fault: impl Into<String>) -> Error {
        Error::invalid(self.reference, self.layer, fault)
    }

    /// The most bytes the decompressor may yield, and the refusal past it:
    /// the least of the bounds per layer, per package (what is left), and
    /// on the compression ratio (gzip only).
    fn unpacked_bound(&self, gzip: bool, spent: &Spent) -> (u64, String) {
        let l = self.limits;
        let mut bounds = vec![
            (
                l.layer_unpacked_bytes,
                over(
                    "the layer",
                    "unpacked bytes per layer",
                    l.layer_unpacked_bytes,
                ),
            ),
            (
                l.package_unpacked_bytes.saturating_sub(spent.unpacked),
                over(
                    "the package's layers",
                    "unpacked bytes per package",
                    l.package_unpacked_bytes,
                ),
            ),
        ];
        if gzip {
            bounds.push((
                l.ratio_allowance
                    .max(self.compressed.saturating_mul(l.ratio)),
                over(
                    "the layer",
                    "the compression ratio",
                    format_args!(
                        "{} times its {} compressed bytes, past the first {} bytes",
                        l.ratio, self.compressed, l.ratio_allowance
                    ),
                ),
            ));
        }
        bounds.into_iter().min_by_key(|b| b.0).unwrap_or_default()
    }

    /// A tar error, or the bound that stopped it.
    fn tar_error(&self, e: &std::io::Error) -> Error {
        match exceeded(e) {
            Some(refusal) => self.invalid(refusal),
            None => self.invalid(format!("the layer is not a valid tar archive: {e}")),
        }
    }
}

/// The files of a layer (gzip tar, or plain tar when the media type says
/// so) that `wanted` picks, in archive order, and the whiteouts of such
/// files. `spent` carries the package's totals from layer to layer.
pub(crate) fn layer_files(
    layer: &Layer<'_>,
    mut blob: impl BufRead,
    wanted: fn(&str) -> bool,
    spent: &mut Spent,
) -> Result<Vec<(String, Found)>, Error> {
    let head = blob
        .fill_buf()
        .map_err(|e| layer.invalid(format!("reading the layer: {e}")))?;
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    let media_type = layer.media_type;
    let plain_tar = media_type.ends_with(".tar") || media_type.ends_with(".tar.diff");
    let reader: Box<dyn std::io::Read + '_> = if gzip {
        Box::new(flate2::bufread::GzDecoder::new(blob))
    } else if plain_tar {
        Box::new(blob)
    } else {
        return Err(layer.invalid(format!(
            "the layer ({}) is not gzip-compressed; package layers are gzip tar archives",
            if media_type.is_empty() {
                "no media type"
            } else {
                media_type
            }
        )));
    };
    let (limit, refusal) = layer.unpacked_bound(gzip, spent);
    let mut archive = tar::Archive::new(Counted::new(reader, limit, refusal));
    let found = entries(layer, &mut archive, wanted, spent);
    spent.unpacked += archive.into_inner().read_so_far();
    found
}

/// What extension headers said about the entry after them.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    pax_path: Option<Vec<u8>>,
    pax_size: Option<u64>,
}

/// The entries of `archive`, read raw: tar's extension headers are handled
/// here, each bounded before it is read.
fn entries<R: std::io::Read>(
    layer: &Layer<'_>,
    archive: &mut tar::Archive<R>,
    wanted: fn(&str) -> bool,
    spent: &mut Spent,
) -> Result<Vec<(String, Found)>, Error> {
    let l = layer.limits;
    let entries = archive
        .entries()
        .map_err(|e| layer.invalid(format!("the layer is not a tar archive: {e}")))?
        .raw(true);
    let mut found = Vec::new();
    let mut pending = Pending::default();
    let mut count: u64 = 0;
    for entry in entries {
        let mut entry = entry.map_err(|e| layer.tar_error(&e))?;
        count += 1;
        spent.entries += 1;
        if count > l.layer_entries {
            return Err(layer.invalid(over("the layer", "tar entries per layer", l.layer_entries)));
        }
        if spent.entries > l.package_entries {
            return Err(layer.invalid(over(
                "the package's layers",
                "tar entries per package",
                l.package_entries,
            )));
        }
        let kind = entry.header().entry_type();
        let size = entry.size();
        let path_bound = || {
            layer.invalid(over(
                "an entry's path",
                "path length",
                format_args!("{} bytes", l.path_bytes),
            ))
        };
        if kind.is_gnu_longname() || kind.is_gnu_longlink() {
            if size > l.path_bytes {
                return Err(path_bound());
            }
            if kind.is_gnu_longname() {
                pending.long_name =
                    Some(read_all(&mut entry, size).map_err(|e| layer.tar_error(&e))?);
            }
            continue;
        }
        if kind.is_pax_local_extensions() || kind.is_pax_global_extensions() {
            if size > MAX_PAX_BYTES {
                return Err(layer.invalid(over(
                    "a PAX header",
                    "PAX header size",
                    format_args!("{MAX_PAX_BYTES} bytes"),
                )));
            }
            if kind.is_pax_local_extensions() {
                let records = read_all(&mut entry, size).map_err(|e| layer.tar_error(&e))?;
                pax(&records, &mut pending).map_err(|fault| layer.invalid(fault))?;
            }
            continue;
        }
        let pending = std::mem::take(&mut pending);
        if pending.long_name.is_some() && pending.pax_path.is_some() {
            return Err(layer.invalid(
                "an entry has both a GNU long name and a PAX path; a layer gives a path one way",
            ));
        }
        if pending.pax_size.is_some_and(|s| s != size) {
            return Err(layer.invalid(
                "an entry's PAX size differs from its header's; such entries are not read",
            ));
        }
        if kind.is_gnu_sparse()
            && entry
                .header()
                .as_gnu()
                .is_some_and(tar::GnuHeader::is_extended)
        {
            return Err(layer.invalid(
                "the layer has a sparse file with extended sparse headers; such layers are not read",
            ));
        }
        let mut raw = pending
            .long_name
            .or(pending.pax_path)
            .unwrap_or_else(|| entry.header().path_bytes().into_owned());
        if raw.last() == Some(&0) {
            raw.pop();
        }
        if raw.len() as u64 > l.path_bytes {
            return Err(path_bound());
        }
        let path = String::from_utf8_lossy(&raw);
        let path = path.trim_start_matches("./").trim_start_matches('/');
        let (dir, name) = path.rsplit_once('/').map_or(("", path), |(d, n)| (d, n));
        if let Some(deleted) = name.strip_prefix(".wh.") {
            let deleted = if dir.is_empty() {
                deleted.to_owned()
            } else {
                format!("{dir}/{deleted}")
            };
            if wanted(&deleted) {
                found.push((deleted, Found::Deleted));
            }
            continue;
        }
        if !(wanted(path) && kind.is_file()) {
            // Skipped: tar reads past its data, through the counter.
            continue;
        }
        let path = path.to_owned();
        let shown = crate::text::text(&path);
        if size > l.file_bytes {
            return Err(layer.invalid(over(
                &format!("{shown} ({size} bytes)"),
                "bytes per file read into memory",
                l.file_bytes,
            )));
        }
        spent.files += size;
        if spent.files > l.files_bytes {
            return Err(layer.invalid(over(
                "the package's files",
                "bytes of files read into memory per package",
                l.files_bytes,
            )));
        }
        let bytes = read_all(&mut entry, size).map_err(|e| match exceeded(&e) {
            Some(refusal) => layer.invalid(refusal),
            None => layer.invalid(format!("reading {shown}: {e}")),
        })?;
        found.push((path, Found::File(bytes)));
    }
    Ok(found)
}

/// An entry's data, whose size was checked against a bound already.
fn read_all(entry: &mut impl std::io::Read, size: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(usize::try_from(size.min(1 << 20)).unwrap_or(0));
    entry.take(size).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The `path` and `size` records of a PAX extended header (`<len> <key>=<value>\n`
/// each).
fn pax(records: &[u8], pending: &mut Pending) -> Result<(), String> {
    let mut rest = records;
    while !rest.is_empty() {
        let malformed = || "a PAX header is malformed".to_owned();
        let space = rest.iter().position(|b| *b == b' ').ok_or_else(malformed)?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|n| *n > space + 1 && *n <= rest.len())
            .ok_or_else(malformed)?;
        let record = &rest[space + 1..len];
        let record = record.strip_suffix(b"\n").ok_or_else(malformed)?;
        let eq = record
            .iter()
            .position(|b| *b == b'=')
            .ok_or_else(malformed)?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        match key {
            b"path" => pending.pax_path = Some(value.to_vec()),
            b"size" => {
                pending.pax_size = Some(
                    std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(malformed)?,
                );
            }
            _ => {}
        }
        rest = &rest[len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::io::Write as _;

    use super::*;
    use crate::{LayerBuilder, xpkg::PACKAGE_FILE};

    fn is_package_file(p: &str) -> bool {
        p == PACKAGE_FILE
    }

    fn read(
        blob: &[u8],
        media_type: &str,
        limits: &Limits,
        spent: &mut Spent,
    ) -> Result<Vec<(String, Found)>, Error> {
        let layer = Layer {
            reference: "r",
            layer: "sha256:x",
            media_type,
            compressed: blob.len() as u64,
            limits,
        };
        layer_files(&layer, blob, is_package_file, spent)
    }

    /// package.yaml from a layer: `None` when the layer does not mention it.
    fn package_file(blob: &[u8], media_type: &str) -> Result<Option<Found>, String> {
        read(blob, media_type, &Limits::default(), &mut Spent::default())
            .map(|f| f.into_iter().next_back().map(|(_, f)| f))
            .map_err(|e| e.to_string())
    }

    fn gzip_tar(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut layer = LayerBuilder::new();
        for (path, bytes) in files {
            layer = layer.file(*path, 0o644, bytes.to_vec());
        }
        layer.build().unwrap().blob().to_vec()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    }

    /// A tar of `size` bytes of zeros under `path`, written without holding
    /// them: only the header, then zeros streamed into gzip.
    fn gzip_zeros(path: &str, size: u64, then: &[(&str, &[u8])]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut header = tar::Header::new_gnu();
        header.set_path(path).unwrap();
        header.set_size(size);
        header.set_mode(0o644);
        header.set_cksum();
        gz.write_all(header.as_bytes()).unwrap();
        let zeros = vec![0u8; 1 << 20];
        let mut left = size.next_multiple_of(512);
        while left > 0 {
            let n = left.min(zeros.len() as u64);
            gz.write_all(&zeros[..n as usize]).unwrap();
            left -= n;
        }
        let mut tar = tar::Builder::new(Vec::new());
        for (p, bytes) in then {
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o644);
            tar.append_data(&mut h, p, *bytes).unwrap();
        }
        gz.write_all(&tar.into_inner().unwrap()).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn package_yaml_is_found_in_gzip_or_plain_tar_layers_only() {
        let gz = crate::LAYER_MEDIA_TYPE;
        let blob = gzip_tar(&[("etc/x", b"x"), ("package.yaml", b"yaml")]);
        assert_eq!(
            package_file(&blob, gz).unwrap(),
            Some(Found::File(b"yaml".to_vec()))
        );
        let blob = gzip_tar(&[("other.yaml", b"x")]);
        assert_eq!(package_file(&blob, gz).unwrap(), None);
        let blob = gzip_tar(&[(".wh.package.yaml", b"")]);
        assert_eq!(package_file(&blob, gz).unwrap(), Some(Found::Deleted));
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(4);
        header.set_mode(0o644);
        tar.append_data(&mut header, "package.yaml", &b"tar!"[..])
            .unwrap();
        let tar = tar.into_inner().unwrap();
        assert_eq!(
            package_file(&tar, "application/vnd.oci.image.layer.v1.tar").unwrap(),
            Some(Found::File(b"tar!".to_vec()))
        );
        let f = package_file(&tar, gz).unwrap_err();
        assert!(
            f.starts_with("package r, layer sha256:x: the layer (application/vnd.oci.image.layer.v1.tar+gzip) is not gzip-compressed"),
            "{f}"
        );
    }

    #[test]
    fn a_file_over_the_bound_is_refused_from_its_header() {
        // A header claiming 300 MB, with no data behind it: refused before
        // anything is read.
        let mut header = tar::Header::new_gnu();
        header.set_path("package.yaml").unwrap();
        header.set_size(300 * 1024 * 1024);
        header.set_mode(0o644);
        header.set_cksum();
        let mut tar = header.as_bytes().to_vec();
        tar.extend_from_slice(&[0; 1024]);
        let f = package_file(&tar, "application/vnd.oci.image.layer.v1.tar").unwrap_err();
        assert!(
            f.ends_with(
                "package.yaml (314572800 bytes) is over the bound on bytes per file read into \
                 memory (8388608)"
            ),
            "{f}"
        );
    }

    #[test]
    fn a_package_yaml_that_compresses_well_is_refused_past_the_file_bound() {
        // 9 MiB of YAML compresses to a few KB: refused from its header
        // (today's pods would be OOMKilled parsing 150 MiB of it).
        let yaml = "a: b\n".repeat(9 * 1024 * 1024 / 5);
        let blob = gzip_tar(&[("package.yaml", yaml.as_bytes())]);
        assert!(blob.len() < 1024 * 1024);
        let f = package_file(&blob, crate::LAYER_MEDIA_TYPE).unwrap_err();
        assert!(
            f.contains("is over the bound on bytes per file read into memory (8388608)"),
            "{f}"
        );
    }

    #[test]
    fn a_layer_of_zeros_is_refused_by_its_compression_ratio_counting_skipped_entries() {
        // 40 MiB of zeros compress to ~40 KB: past the 16 MiB allowance the
        // ratio bound (100) stops the inflating, though the entry is one
        // nobody wanted (package.yaml comes after it).
        let blob = gzip_zeros("zeros.bin", 40 << 20, &[("package.yaml", b"yaml")]);
        let started = std::time::Instant::now();
        let f = package_file(&blob, crate::LAYER_MEDIA_TYPE).unwrap_err();
        assert_eq!(
            f,
            format!(
                "package r, layer sha256:x: the layer is over the bound on the compression ratio \
                 (100 times its {} compressed bytes, past the first 16777216 bytes)",
                blob.len()
            )
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn unpacked_bytes_are_bounded_per_layer_and_per_package() {
        let limits = Limits {
            layer_unpacked_bytes: 1 << 20,
            package_unpacked_bytes: 3 << 19,
            ratio: 10_000,
            ..Limits::default()
        };
        let blob = gzip_zeros("skipped.bin", 2 << 20, &[]);
        let f = read(&blob, "", &limits, &mut Spent::default())
            .unwrap_err()
            .to_string();
        assert!(
            f.ends_with("the layer is over the bound on unpacked bytes per layer (1048576)"),
            "{f}"
        );
        // Two layers of 0.9 MiB each: each fits, the package does not.
        let blob = gzip_zeros("a.bin", 900 << 10, &[]);
        let mut spent = Spent::default();
        read(&blob, "", &limits, &mut spent).unwrap();
        let f = read(&blob, "", &limits, &mut spent)
            .unwrap_err()
            .to_string();
        assert!(
            f.ends_with(
                "the package's layers is over the bound on unpacked bytes per package (1572864)"
            ),
            "{f}"
        );
    }

    #[test]
    fn tar_entries_are_bounded_per_layer_and_per_package() {
        let limits = Limits {
            layer_entries: 10,
            package_entries: 15,
            ..Limits::default()
        };
        let names: Vec<String> = (0..11).map(|i| format!("f{i}")).collect();
        let files: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
        let f = read(&gzip_tar(&files), "", &limits, &mut Spent::default())
            .unwrap_err()
            .to_string();
        assert!(
            f.ends_with("the layer is over the bound on tar entries per layer (10)"),
            "{f}"
        );
        let eight = gzip_tar(&files[..8]);
        let mut spent = Spent::default();
        read(&eight, "", &limits, &mut spent).unwrap();
        let f = read(&eight, "", &limits, &mut spent)
            .unwrap_err()
            .to_string();
        assert!(
            f.ends_with("is over the bound on tar entries per package (15)"),
            "{f}"
        );
    }

    #[test]
    fn long_paths_are_bounded_before_they_are_read() {
        // A GNU long name of 5000 bytes (tar::Builder writes one for any
        // path over 100 bytes).
        let long = format!("{}/package.yaml", "d".repeat(5000));
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        tar.append_data(&mut h, &long, &b"x"[..]).unwrap();
        let f = package_file(&gzip(&tar.into_inner().unwrap()), "").unwrap_err();
        assert!(
            f.ends_with("an entry's path is over the bound on path length (4096 bytes)"),
            "{f}"
        );
        // A long-name header claiming 1 GiB, with nothing behind it.
        let mut h = tar::Header::new_gnu();
        h.set_path("././@LongLink").unwrap();
        h.set_entry_type(tar::EntryType::GNULongName);
        h.set_size(1 << 30);
        h.set_cksum();
        let f = package_file(&gzip(h.as_bytes()), "").unwrap_err();
        assert!(f.contains("over the bound on path length"), "{f}");
        // A path just within the bound is read.
        let ok = format!("{}/package.yaml", "d".repeat(4000));
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        tar.append_data(&mut h, &ok, &b"x"[..]).unwrap();
        let found = read(
            &gzip(&tar.into_inner().unwrap()),
            "",
            &Limits::default(),
            &mut Spent::default(),
        );
        assert!(found.unwrap().is_empty(), "not package.yaml, but read");
    }

    #[test]
    fn pax_paths_name_entries_and_pax_headers_are_bounded() {
        let mut records = Vec::new();
        let record = |k: &str, v: &str| {
            // `<len> <key>=<value>\n`, where len counts its own digits.
            let body = format!(" {k}={v}\n");
            let mut len = body.len() + 1;
            while len != body.len() + len.to_string().len() {
                len = body.len() + len.to_string().len();
            }
            format!("{len}{body}")
        };
        records.extend_from_slice(record("path", "package.yaml").as_bytes());
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::XHeader);
        h.set_size(records.len() as u64);
        tar.append_data(&mut h, "PaxHeaders/x", records.as_slice())
            .unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_size(4);
        h.set_mode(0o644);
        tar.append_data(&mut h, "not-this-name", &b"yaml"[..])
            .unwrap();
        let blob = gzip(&tar.into_inner().unwrap());
        assert_eq!(
            package_file(&blob, "").unwrap(),
            Some(Found::File(b"yaml".to_vec()))
        );
        let mut h = tar::Header::new_ustar();
        h.set_path("PaxHeaders/x").unwrap();
        h.set_entry_type(tar::EntryType::XHeader);
        h.set_size(1 << 20);
        h.set_cksum();
        let f = package_file(&gzip(h.as_bytes()), "").unwrap_err();
        assert!(
            f.ends_with("a PAX header is over the bound on PAX header size (65536 bytes)"),
            "{f}"
        );
    }
}
