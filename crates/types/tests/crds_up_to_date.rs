//! crds/ is generated: fail when it differs from what the types produce.

#[test]
fn crds_dir_matches_the_types() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds");
    let crds = types::crds::all().unwrap();
    let mut expected = vec![(
        "kustomization.yaml".to_owned(),
        types::crds::kustomization(&crds),
    )];
    for crd in &crds {
        expected.push((
            types::crds::file_name(crd),
            types::crds::to_yaml(crd).unwrap(),
        ));
    }
    let mut stale = Vec::new();
    for (file, yaml) in &expected {
        if std::fs::read_to_string(dir.join(file)).unwrap_or_default() != *yaml {
            stale.push(file.clone());
        }
    }
    let on_disk = std::fs::read_dir(&dir).unwrap().count();
    assert!(
        stale.is_empty() && on_disk == expected.len(),
        "crds/ is out of date ({stale:?}, {on_disk} files for {} expected); run `cargo run -p types --bin crdgen` and commit",
        expected.len()
    );
}
