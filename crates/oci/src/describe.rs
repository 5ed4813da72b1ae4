//! What `xpkg inspect` prints of a package and of a stack: plain text, a
//! line per fact.

use std::fmt::Write as _;

use serde_json::Value;

use crate::{pull::Package, stack::Stack};

/// What `xpkg inspect` prints: the reference, digest and meta (name,
/// runtime image, Crossplane constraint, dependencies), then one line per
/// CRD: name, group, kind, versions.
pub fn package(package: &Package) -> String {
    let m = &package.contents.meta;
    let mut out = String::new();
    let _ = writeln!(out, "package:    {}", package.reference);
    let _ = writeln!(out, "digest:     {}", package.digest);
    let _ = writeln!(out, "name:       {}", m.name);
    let _ = writeln!(
        out,
        "controller: {}",
        m.controller_image.as_deref().unwrap_or("(none)")
    );
    let _ = writeln!(
        out,
        "crossplane: {}",
        m.crossplane_version.as_deref().unwrap_or("(any)")
    );
    if m.depends_on.is_empty() {
        let _ = writeln!(out, "dependsOn:  (none)");
    }
    for d in &m.depends_on {
        let version = if d.version.is_empty() {
            "(any)"
        } else {
            &d.version
        };
        let _ = writeln!(out, "dependsOn:  {} {version}", d.package);
    }
    let _ = writeln!(out, "CRDs:       {}", package.contents.objects.len());
    for crd in &package.contents.objects {
        let text = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or("-");
        let versions: Vec<&str> = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| v.get("name").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {} {} {} {}",
            text("/metadata/name"),
            text("/spec/group"),
            text("/spec/names/kind"),
            if versions.is_empty() {
                "-".to_owned()
            } else {
                versions.join(",")
            }
        );
    }
    out
}

/// What `xpkg inspect` prints of a stack.
pub fn stack(reference: &str, digest: &str, stack: &Stack) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "stack:      {reference}");
    let _ = writeln!(out, "digest:     {digest}");
    let _ = writeln!(out, "title:      {}", stack.app.title);
    let _ = writeln!(
        out,
        "version:    {}",
        stack.app.version.as_deref().unwrap_or("(from the tag)")
    );
    let image = stack
        .install
        .as_ref()
        .and_then(|d| d.pointer("/spec/template/spec/containers/0/image"))
        .and_then(Value::as_str)
        .unwrap_or("(none)");
    let _ = writeln!(out, "controller: {image}");
    let _ = writeln!(out, "rules:      {}", stack.rules.len());
    for d in &stack.depends_on {
        let _ = writeln!(out, "dependsOn:  {d}");
    }
    for o in stack.owns() {
        let _ = writeln!(out, "owns:       {o}");
    }
    out
}
