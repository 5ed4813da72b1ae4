//! The package format's tests: parsing, building, describing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read as _;

use super::*;
use crate::{Image, Limits};

const META: &str = "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: provider-test\nspec:\n  controller:\n    image: example/runtime:v1\n  crossplane:\n    version: \">=v1.14.0\"\n  dependsOn:\n  - provider: xpkg.example.org/example/b\n    version: \">=v1.0.0, <v2.0.0\"\n  - function: xpkg.example.org/example/f\n    version: \"sha256:0123\"\n";
const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.org\nspec:\n  group: example.org\n  names:\n    kind: Thing\n";

fn fault(yaml: &str) -> String {
    parse("10.0.0.1:5000/x:v1", "sha256:abcd", yaml.as_bytes())
        .unwrap_err()
        .to_string()
}

/// package.yaml of a built image's only layer.
fn package_yaml(image: &Image) -> String {
    let mut gz = flate2::read::GzDecoder::new(image.layers()[0].blob());
    let mut tar = Vec::new();
    gz.read_to_end(&mut tar).unwrap();
    let mut archive = tar::Archive::new(tar.as_slice());
    let mut entry = archive.entries().unwrap().next().unwrap().unwrap();
    assert_eq!(entry.path().unwrap().to_str(), Some(PACKAGE_FILE));
    let mut text = String::new();
    entry.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn the_example_meta_and_its_crds_parse() {
    let c = parse(
        "r",
        "l",
        format!("# a package\n---\n{META}---\n{CRD}---\n").as_bytes(),
    )
    .unwrap();
    assert_eq!(c.meta.name, "provider-test");
    assert_eq!(
        c.meta.controller_image.as_deref(),
        Some("example/runtime:v1")
    );
    assert_eq!(c.meta.crossplane_version.as_deref(), Some(">=v1.14.0"));
    assert_eq!(
        c.meta.depends_on,
        [
            Dependency {
                kind: "provider".into(),
                package: "xpkg.example.org/example/b".into(),
                version: ">=v1.0.0, <v2.0.0".into()
            },
            Dependency {
                kind: "function".into(),
                package: "xpkg.example.org/example/f".into(),
                version: "sha256:0123".into()
            }
        ]
    );
    assert_eq!(c.meta.raw["kind"], "Provider");
    assert_eq!(c.objects.len(), 1);
    assert_eq!(c.objects[0]["spec"]["group"], "example.org");
    let alpha = META.replace("/v1\n", "/v1alpha1\n");
    assert_eq!(
        parse("r", "l", alpha.as_bytes()).unwrap().meta.name,
        "provider-test"
    );
}

#[test]
fn another_kind_is_refused_naming_reference_layer_document_and_line() {
    let f = fault(&format!(
        "{META}---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n"
    ));
    assert_eq!(
        f,
        "package 10.0.0.1:5000/x:v1, layer sha256:abcd: document 2 (line 16): kind Secret (v1) \
         is not allowed; a package holds one meta.pkg.crossplane.io Provider, \
         CustomResourceDefinitions and admissionregistration.k8s.io/v1 Validating- or \
         MutatingWebhookConfigurations"
    );
    let f = fault(&META.replace("meta.pkg.crossplane.io/v1", "meta.pkg.crossplane.io/v9"));
    assert!(
        f.contains("document 1 (line 1): kind Provider (meta.pkg.crossplane.io/v9) is not allowed"),
        "{f}"
    );
    let f = fault(&format!("{META}---\n- a list\n"));
    assert!(f.contains("document 2 (line 16): not an object"), "{f}");
}

#[test]
fn webhook_configurations_are_held_apart_from_the_crds() {
    let hook = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: things\nwebhooks: []\n";
    let c = parse("r", "l", format!("{META}---\n{CRD}---\n{hook}").as_bytes()).unwrap();
    assert_eq!(c.objects.len(), 1);
    assert_eq!(c.webhooks.len(), 1);
    assert_eq!(c.webhooks[0]["metadata"]["name"], "things");
    let f = fault(&format!(
        "{META}---\n{}",
        hook.replace("  name: things\n", "  labels: {}\n")
    ));
    assert!(
        f.ends_with("ValidatingWebhookConfiguration has no metadata.name"),
        "{f}"
    );
}

#[test]
fn zero_metas_are_refused() {
    assert_eq!(
        fault(CRD),
        "package 10.0.0.1:5000/x:v1, layer sha256:abcd: package.yaml has no \
         meta.pkg.crossplane.io/v1 Provider; a package holds one meta.pkg.crossplane.io \
         Provider, CustomResourceDefinitions and admissionregistration.k8s.io/v1 Validating- \
         or MutatingWebhookConfigurations"
    );
    assert!(fault("").contains("has no meta.pkg.crossplane.io/v1 Provider"));
}

#[test]
fn two_metas_are_refused() {
    let f = fault(&format!("{META}---\n{CRD}---\n{META}"));
    assert!(
        f.ends_with(
            "document 3 (line 25): a second meta.pkg.crossplane.io Provider (the first is \
             document 1); a package has exactly one"
        ),
        "{f}"
    );
}

#[test]
fn malformed_yaml_names_its_document_and_line() {
    let f = fault(&format!("{META}---\n{CRD}---\nkind: [unclosed\n"));
    assert!(
        f.starts_with("package 10.0.0.1:5000/x:v1, layer sha256:abcd: document 3 (line 25, column"),
        "{f}"
    );
    assert!(
        f.contains("): malformed YAML: ") && !f.contains('\n'),
        "{f}"
    );
    // The line of the fault itself, counted in the whole stream.
    let f = fault(&format!("{META}---\nkind: a\nspec:\n  x: 1\n   y: 2\n"));
    assert!(
        f.contains("document 2 (line 19, column 5): malformed YAML: mapping values"),
        "{f}"
    );
}

#[test]
fn an_unqualified_dependency_is_refused() {
    let f = fault(&META.replace("xpkg.example.org/example/b", "example/b"));
    assert!(
        f.ends_with(
            "spec.dependsOn: \"example/b\" is not fully qualified: it must start with its \
             registry host (a package is never looked for on docker.io by default), e.g. \
             xpkg.crossplane.io/crossplane-contrib/provider-nop:v0.4.0"
        ),
        "{f}"
    );
}

#[test]
fn package_yaml_over_its_bounds_is_refused_naming_the_bound() {
    let limits = Limits {
        documents: 3,
        file_bytes: 4096,
        ..Limits::default()
    };
    let within = |yaml: &str| {
        parse_within("r", "l", yaml.as_bytes(), &limits)
            .unwrap_err()
            .to_string()
    };
    // Empty documents count: each costs memory before it is parsed.
    let f = within(&format!("{META}{}", "---\n".repeat(10)));
    assert_eq!(
        f,
        "package r, layer l: package.yaml is over the bound on YAML documents per package (3)"
    );
    let f = within(&format!("{META}---\n{CRD}---\n{CRD}---\n{CRD}"));
    assert!(
        f.ends_with("package.yaml is over the bound on YAML documents per package (3)"),
        "{f}"
    );
    let big = format!("{META}# {}\n", "x".repeat(5000));
    assert!(
        within(&big).ends_with(&format!(
            "package.yaml ({} bytes) is over the bound on bytes per file read into memory \
             (4096)",
            big.len()
        )),
        "{}",
        within(&big)
    );
}

#[test]
fn a_crd_without_group_or_name_is_refused() {
    let f = fault(&format!(
        "{META}---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: x.example.org\n"
    ));
    assert!(
        f.ends_with(
            "document 2 (line 16): CustomResourceDefinition x.example.org has no spec.group"
        ),
        "{f}"
    );
    let f = fault(&format!(
        "{META}---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: {{}}\n"
    ));
    assert!(
        f.ends_with("CustomResourceDefinition has no metadata.name and spec.group"),
        "{f}"
    );
}

fn package_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("package.yaml"), format!("{META}---\n{CRD}")).unwrap();
    std::fs::create_dir(dir.path().join("crds")).unwrap();
    let crd = |group: &str| CRD.replace("example.org", group);
    std::fs::write(dir.path().join("crds/b.yaml"), crd("b.example.org")).unwrap();
    std::fs::write(
        dir.path().join("crds/a.yml"),
        format!("{}---\n{}", crd("a1.example.org"), crd("a2.example.org")),
    )
    .unwrap();
    std::fs::write(dir.path().join("crds/notes.txt"), "not yaml").unwrap();
    dir
}

#[test]
fn build_is_deterministic_and_annotates_its_one_layer() {
    let dir = package_dir();
    let a = build(dir.path(), None).unwrap();
    let b = build(dir.path(), None).unwrap();
    let s = a.serialize().unwrap();
    assert_eq!(s.digest, b.serialize().unwrap().digest);
    assert_eq!(a.layers().len(), 1);
    assert_eq!(
        a.layers()[0]
            .annotations()
            .get("io.crossplane.xpkg")
            .map(String::as_str),
        Some("base")
    );
    let manifest: Value = serde_json::from_slice(&s.manifest).unwrap();
    assert_eq!(
        manifest["layers"][0]["annotations"],
        serde_json::json!({"io.crossplane.xpkg": "base"})
    );
    let config: Value = serde_json::from_slice(&s.config).unwrap();
    assert_eq!(
        (config["os"].as_str(), config["architecture"].as_str()),
        (Some("linux"), Some("amd64"))
    );

    // The meta first, then the CRDs of package.yaml, then crds/ by name.
    let yaml = package_yaml(&a);
    let c = parse("r", "l", yaml.as_bytes()).unwrap();
    assert_eq!(
        c.meta.controller_image.as_deref(),
        Some("example/runtime:v1")
    );
    let groups: Vec<&str> = c
        .objects
        .iter()
        .map(|o| o["spec"]["group"].as_str().unwrap())
        .collect();
    assert_eq!(
        groups,
        [
            "example.org",
            "a1.example.org",
            "a2.example.org",
            "b.example.org"
        ]
    );
    assert!(
        yaml.starts_with('{') && yaml.matches("\n---\n").count() == 4,
        "{yaml}"
    );
}

#[test]
fn the_runtime_image_overrides_or_sets_spec_controller_image() {
    let dir = package_dir();
    let plain = build(dir.path(), None).unwrap();
    let image = build(dir.path(), Some("reg/runtime:v2")).unwrap();
    let c = parse("r", "l", package_yaml(&image).as_bytes()).unwrap();
    assert_eq!(c.meta.controller_image.as_deref(), Some("reg/runtime:v2"));
    assert_ne!(
        plain.serialize().unwrap().digest,
        image.serialize().unwrap().digest
    );

    // A meta without spec gets one.
    let bare = tempfile::tempdir().unwrap();
    std::fs::write(
        bare.path().join("package.yaml"),
        "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: bare\n",
    )
    .unwrap();
    let c = parse(
        "r",
        "l",
        package_yaml(&build(bare.path(), None).unwrap()).as_bytes(),
    )
    .unwrap();
    assert_eq!(c.meta.controller_image, None);
    let image = build(bare.path(), Some("reg/runtime:v3")).unwrap();
    let c = parse("r", "l", package_yaml(&image).as_bytes()).unwrap();
    assert_eq!(c.meta.controller_image.as_deref(), Some("reg/runtime:v3"));
    assert!(c.objects.is_empty());
}

#[test]
fn build_refuses_a_bad_crds_file_naming_it() {
    let dir = package_dir();
    std::fs::write(
        dir.path().join("crds/c.yaml"),
        format!("{CRD}---\napiVersion: v1\nkind: ConfigMap\n"),
    )
    .unwrap();
    let f = build(dir.path(), None).unwrap_err().to_string();
    assert!(
        f.contains("crds/c.yaml") && f.contains("document 2 (line 10): kind ConfigMap"),
        "{f}"
    );
    std::fs::write(dir.path().join("crds/c.yaml"), META).unwrap();
    let f = build(dir.path(), None).unwrap_err().to_string();
    assert!(f.contains("belongs in package.yaml"), "{f}");
    let empty = tempfile::tempdir().unwrap();
    let f = build(empty.path(), None).unwrap_err().to_string();
    assert!(f.contains("package.yaml"), "{f}");
}

#[test]
fn describe_prints_the_meta_and_a_line_per_crd() {
    let crd = CRD.replace(
        "    kind: Thing\n",
        "    kind: Thing\n  versions:\n  - name: v1alpha1\n  - name: v1\n",
    );
    let package = Package {
        reference: "reg/x:v1".into(),
        digest: crate::Digest::of(b"m"),
        contents: parse("r", "l", format!("{META}---\n{crd}").as_bytes()).unwrap(),
        took: crate::pull::Took::default(),
    };
    let text = describe(&package);
    assert!(
        text.contains(&format!("digest:     {}\n", package.digest)),
        "{text}"
    );
    assert!(text.contains("controller: example/runtime:v1\n"), "{text}");
    assert!(text.contains("crossplane: >=v1.14.0\n"), "{text}");
    assert!(
        text.contains("dependsOn:  xpkg.example.org/example/b >=v1.0.0, <v2.0.0\n"),
        "{text}"
    );
    assert!(
        text.ends_with("CRDs:       1\n  things.example.org example.org Thing v1alpha1,v1\n"),
        "{text}"
    );
}

#[test]
fn semver_tags_skip_partial_and_other_tags() {
    let tags: Vec<String> = ["v0.9.0", "v1.0.0", "v1.2.0", "v1", "latest", "2.0.0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let got: Vec<String> = semver_tags(&tags).into_iter().map(|t| t.1).collect();
    assert_eq!(got, ["v0.9.0", "v1.0.0", "v1.2.0", "2.0.0"]);
}
