//! Writing a package: `package.yaml` and `crds/` of a directory, checked
//! as a puller will read them, into a one-layer image.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{
    BASE_ANNOTATION, META_GROUP, PACKAGE_FILE,
    parse::{objects, parse},
};
use crate::{Config, Error, Image, LayerBuilder, Limits, limits::YamlBudget};

/// Builds a package from `dir`: `package.yaml` (the meta, and possibly
/// CRDs) and every `.yaml`/`.yml` file under `crds/` (by name; CRDs only).
/// With `runtime_image` the meta's spec.controller.image is set to it. The
/// image (linux/amd64: packages are platform independent, and pulls look
/// for linux/amd64) has one layer, annotated `io.crossplane.xpkg: base`,
/// holding the checked `package.yaml`: the meta, then the CRDs, as `---`
/// separated documents. The same input gives the same digest.
pub fn build(dir: &Path, runtime_image: Option<&str>) -> Result<Image, Error> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| Error::read(p, e));
    let source = dir.join(PACKAGE_FILE);
    let mut contents = parse(&dir.display().to_string(), PACKAGE_FILE, &read(&source)?)?;
    let mut budget = YamlBudget::new(&Limits::default());
    let crds = dir.join("crds");
    if crds.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&crds)
            .map_err(|e| Error::read(&crds, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for f in files {
            let name = f.display().to_string();
            let bytes = read(&f)?;
            let text = std::str::from_utf8(&bytes).map_err(|e| {
                Error::invalid(&dir.display().to_string(), &name, format!("not UTF-8: {e}"))
            })?;
            for object in objects(&dir.display().to_string(), &name, &name, text, &mut budget)? {
                if object.meta {
                    return Err(Error::invalid(
                        &dir.display().to_string(),
                        &name,
                        format!(
                            "{}: the {META_GROUP} Provider belongs in {PACKAGE_FILE}, not under crds/",
                            object.at
                        ),
                    ));
                }
                if object.webhook {
                    contents.webhooks.push(object.value);
                } else {
                    contents.objects.push(object.value);
                }
            }
        }
    }
    if let Some(image) = runtime_image {
        set_controller_image(&mut contents.meta.raw, image);
    }
    let mut yaml = String::new();
    for (i, object) in std::iter::once(&contents.meta.raw)
        .chain(contents.objects.iter())
        .chain(contents.webhooks.iter())
        .enumerate()
    {
        if i > 0 {
            yaml.push_str("---\n");
        }
        yaml.push_str(&serde_json::to_string(object).map_err(Error::Json)?);
        yaml.push('\n');
    }
    // Checked as a puller will read it.
    parse(&dir.display().to_string(), PACKAGE_FILE, yaml.as_bytes())?;
    let layer = LayerBuilder::new()
        .file(PACKAGE_FILE, 0o644, yaml.into_bytes())
        .build()?
        .annotate(BASE_ANNOTATION.0, BASE_ANNOTATION.1);
    Ok(Image::new(Config {
        os: "linux".to_owned(),
        architecture: "amd64".to_owned(),
        ..Config::default()
    })
    .layer(layer))
}

/// Sets `spec.controller.image` of a meta object, making `spec` and
/// `spec.controller` as needed.
fn set_controller_image(meta: &mut Value, image: &str) {
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let spec = meta
        .entry("spec")
        .or_insert_with(|| Value::Object(Default::default()));
    if !spec.is_object() {
        *spec = Value::Object(Default::default());
    }
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let controller = spec
        .entry("controller")
        .or_insert_with(|| Value::Object(Default::default()));
    if !controller.is_object() {
        *controller = Value::Object(Default::default());
    }
    if let Some(c) = controller.as_object_mut() {
        c.insert("image".into(), Value::String(image.to_owned()));
    }
}
