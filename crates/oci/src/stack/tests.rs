//! The stack format's tests: parsing, building.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use serde_json::Value;

use super::*;
use crate::{Error, Limits};

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: redisclusters.cache.crossplane.io\nspec:\n  group: cache.crossplane.io\n  scope: Namespaced\n  names: {kind: RedisCluster, plural: redisclusters}\n  versions:\n  - {name: v1alpha1, served: true, storage: true}\n";

fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(p, t)| ((*p).to_owned(), t.as_bytes().to_vec()))
        .collect()
}

fn fault(r: Result<Stack, Error>) -> String {
    match r {
        Err(Error::Invalid { fault, .. }) => fault,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_stacks_files_over_their_bounds_are_refused_naming_the_bound() {
    let limits = Limits {
        documents: 2,
        file_bytes: 1024,
        ..Limits::default()
    };
    let crd = |n: &str| {
        CRD.replace("redisclusters", &format!("{n}s"))
            .replace("RedisCluster", n)
    };
    let (a, b) = (crd("Aa"), crd("Bb"));
    let three = files(&[
        (APP_FILE, "title: x\n"),
        (".registry/resources/a.crd.yaml", &a),
        (".registry/resources/b.crd.yaml", &b),
    ]);
    assert!(parse("r", "l", &three, None).is_ok());
    assert_eq!(
        fault(parse_within("r", "l", &three, None, &limits)),
        ".registry/resources/b.crd.yaml is over the bound on YAML documents per package (2)"
    );
    let big = format!("title: x\ndescription: {}\n", "x".repeat(2000));
    let f = fault(parse_within(
        "r",
        "l",
        &files(&[(APP_FILE, &big)]),
        None,
        &limits,
    ));
    assert_eq!(
        f,
        format!(
            ".registry/app.yaml ({} bytes) is over the bound on bytes per file read into \
             memory (1024)",
            big.len()
        )
    );
}

#[test]
fn the_seeds_app_yaml_parses_into_the_record() {
    let app = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/seeds/001-app-yaml.yaml"
    ))
    .unwrap();
    let f = files(&[
        (APP_FILE, &app),
        (
            ".registry/resources/cache/redis/v1alpha1/redis.v1alpha1.crd.yaml",
            CRD,
        ),
    ]);
    let stack = parse("r", "l", &f, Some("v0.0.1")).unwrap();
    assert_eq!(stack.app.title, "Sample Crossplane Stack");
    assert_eq!(stack.app.version.as_deref(), Some("0.0.1"));
    assert_eq!(stack.app.company.as_deref(), Some("Upbound"));
    assert_eq!(stack.app.keywords, ["samples", "examples", "tutorials"]);
    assert_eq!(stack.app.links.len(), 2);
    assert_eq!(stack.app.license.as_deref(), Some("Apache-2.0"));
    assert_eq!(stack.owns(), ["redisclusters.cache.crossplane.io/v1alpha1"]);
    // The seed's version 0.0.1 does not match a v0.1.0 tag.
    let f2 = f.clone();
    assert!(
        fault(parse("r", "l", &f2, Some("v0.1.0"))).contains("does not match the image tag v0.1.0")
    );
}

#[test]
fn malformed_and_missing_parts_name_file_and_line() {
    let crd = (".registry/resources/x/redis.crd.yaml", CRD);
    assert!(fault(parse("r", "l", &files(&[crd]), None)).contains("no .registry/app.yaml"));
    let f = fault(parse(
        "r",
        "l",
        &files(&[(APP_FILE, "title: x\nkeywords: [a\n"), crd]),
        None,
    ));
    assert!(f.starts_with(".registry/app.yaml (line "), "{f}");
    let f = fault(parse(
        "r",
        "l",
        &files(&[(APP_FILE, "title: x\nmaintainers: 3\n"), crd]),
        None,
    ));
    assert!(f.contains(".registry/app.yaml (line 2"), "{f}");
    let f = fault(parse(
        "r",
        "l",
        &files(&[(APP_FILE, "version: 1.0.0\n"), crd]),
        None,
    ));
    assert!(f.contains("title is required"), "{f}");
    let f = fault(parse(
        "r",
        "l",
        &files(&[(APP_FILE, "title: x\ntitel: y\n"), crd]),
        None,
    ));
    assert!(f.contains("(line 2") && f.contains("titel"), "{f}");
    let f = fault(parse(
        "r",
        "l",
        &files(&[(APP_FILE, "title: x\ndependsOn:\n- crd: nodots\n"), crd]),
        None,
    ));
    assert!(f.contains("dependsOn[0]"), "{f}");
    let f = fault(parse(
        "r",
        "l",
        &files(&[
            (APP_FILE, "title: x\n"),
            (INSTALL_FILE, "apiVersion: v1\nkind: Pod\n"),
            crd,
        ]),
        None,
    ));
    assert!(f.contains("apps/v1 Deployment"), "{f}");
    let f = fault(parse(
        "r",
        "l",
        &files(&[
            (APP_FILE, "title: x\n"),
            (RBAC_FILE, "rules:\n- resources: [a]\n"),
            crd,
        ]),
        None,
    ));
    assert!(f.contains("rules[0] needs verbs"), "{f}");
    let f = fault(parse(
        "r",
        "l",
        &files(&[
            (APP_FILE, "title: x\n"),
            (
                RBAC_FILE,
                "rules:\n- apiGroups: [1]\n  resources: [a]\n  verbs: [get]\n",
            ),
            crd,
        ]),
        None,
    ));
    assert!(f.contains("rules[0]: invalid type"), "{f}");
    let bad = CRD.replace("name: redisclusters.cache", "name: wrong.cache");
    let f = fault(parse(
        "r",
        "l",
        &files(&[
            (APP_FILE, "title: x\n"),
            (".registry/resources/x/r.crd.yaml", &bad),
        ]),
        None,
    ));
    assert!(
        f.contains("must be named redisclusters.cache.crossplane.io"),
        "{f}"
    );
    let f = fault(parse("r", "l", &files(&[(APP_FILE, "title: x\n")]), None));
    assert!(f.contains("would install nothing"), "{f}");
}

#[test]
fn dependencies_by_name_or_kind() {
    let f = files(&[
        (
            APP_FILE,
            "title: x\ndependsOn:\n- crd: widgets.base.example.org/v1alpha1\n- kind: Gadget\n  apiVersion: base.example.org/v1\n",
        ),
        (".registry/resources/r.crd.yaml", CRD),
    ]);
    let s = parse("r", "l", &f, None).unwrap();
    assert_eq!(
        s.depends_on[0].to_string(),
        "widgets.base.example.org/v1alpha1"
    );
    assert_eq!(s.depends_on[1].to_string(), "Gadget.base.example.org/v1");
    let crd: Value = serde_saphyr::from_str(CRD).unwrap();
    assert!(
        CrdSelector::parse("redisclusters.cache.crossplane.io/v1alpha1")
            .unwrap()
            .matches(&crd)
    );
    assert!(
        CrdSelector::parse("redisclusters.cache.crossplane.io")
            .unwrap()
            .matches(&crd)
    );
    assert!(
        !CrdSelector::parse("redisclusters.cache.crossplane.io/v1")
            .unwrap()
            .matches(&crd)
    );
    assert!(CrdSelector::of_kind("RedisCluster", "cache.crossplane.io/v1alpha1").matches(&crd));
    assert_eq!(
        CrdSelector::parse("redisclusters.cache.crossplane.io/v1alpha1")
            .unwrap()
            .matches_name("redisclusters.cache.crossplane.io/v1alpha1"),
        Some(true)
    );
    assert!(CrdSelector::parse("Redis").is_err());
}

#[test]
fn the_example_redis_stack_builds() {
    let dir = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/stacks/redis"
    ));
    let (image, stack) = build(dir).unwrap();
    assert_eq!(stack.app.title, "Redis");
    assert_eq!(stack.owns(), ["redisclusters.cache.crossplane.io/v1alpha1"]);
    assert_eq!(stack.app.icons.len(), 1);
    assert_eq!(stack.rules.len(), 1);
    let deployment = stack.install.unwrap();
    assert_eq!(
        deployment.pointer("/metadata/name").and_then(Value::as_str),
        Some("redis-controller")
    );
    assert_eq!(image.layers().len(), 1);
}

#[test]
fn build_annotates_owned_crds_and_is_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir
        .path()
        .join(".registry/resources/cache.crossplane.io/redis/v1alpha1");
    std::fs::create_dir_all(&res).unwrap();
    std::fs::write(
        dir.path().join(".registry/app.yaml"),
        "title: Redis\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join(".registry/icon.png"),
        [0x89, b'P', b'N', b'G'],
    )
    .unwrap();
    std::fs::write(res.join("redis.v1alpha1.crd.yaml"), CRD).unwrap();
    let (image, stack) = build(dir.path()).unwrap();
    assert_eq!(stack.app.icons.len(), 1);
    assert_eq!(stack.app.icons[0].mediatype, "image/png");
    let layer = &image.layers()[0];
    assert_eq!(
        layer.annotations().get(OWNS_ANNOTATION).map(String::as_str),
        Some("redisclusters.cache.crossplane.io/v1alpha1")
    );
    let (again, _) = build(dir.path()).unwrap();
    assert_eq!(again.layers()[0].digest(), layer.digest());
}
