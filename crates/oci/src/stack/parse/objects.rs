//! The objects of a stack: install.yaml's Deployment, rbac.yaml's rules
//! and the CRDs under `.registry/resources/`, each checked to be what a
//! stack may hold.

use std::collections::BTreeMap;

use serde_json::Value;
use types::k8s_openapi::api::rbac::v1::PolicyRule;

use super::file::{At, yaml};
use crate::{
    Error,
    limits::{YamlBudget, object_size, parsed_size},
    stack::{INSTALL_FILE, RBAC_FILE, RESOURCES_DIR, versions_of},
};

/// The CRDs of `files` (`.registry/resources/**/*crd.yaml`), checked; the
/// other YAML files beside them (group.yaml, resource.yaml) checked to be
/// YAML mappings.
pub(crate) fn crds(
    at: &At<'_>,
    budget: &mut YamlBudget,
    files: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<Value>, Error> {
    let mut crds = Vec::new();
    for (path, bytes) in files.range(RESOURCES_DIR.to_owned()..) {
        if !path.starts_with(RESOURCES_DIR) {
            break;
        }
        let name = path.rsplit('/').next().unwrap_or_default();
        if name.ends_with("crd.yaml") || name.ends_with("crd.yml") {
            crds.push(crd(at, budget, path, bytes)?);
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            // group.yaml and resource.yaml: UI metadata, checked to be YAML
            // mappings.
            let _: serde_json::Map<String, Value> = yaml(at, budget, path, bytes, object_size)?;
        }
    }
    Ok(crds)
}

/// Refuses a CRD defined twice.
pub(crate) fn defined_once(at: &At<'_>, crds: &[Value]) -> Result<(), Error> {
    let (reference, layer) = (at.reference, at.layer);
    let mut seen = BTreeMap::new();
    for crd in crds {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if seen.insert(name.clone(), ()).is_some() {
            return Err(Error::invalid(
                reference,
                layer,
                format!("CRD {name} is defined twice under {RESOURCES_DIR}"),
            ));
        }
    }
    Ok(())
}

pub(crate) fn deployment(
    at: &At<'_>,
    budget: &mut YamlBudget,
    bytes: &[u8],
) -> Result<Value, Error> {
    let (reference, layer) = (at.reference, at.layer);
    let value: Value = yaml(at, budget, INSTALL_FILE, bytes, parsed_size)?;
    let text = |p: &str| value.pointer(p).and_then(Value::as_str).unwrap_or_default();
    if text("/kind") != "Deployment" || text("/apiVersion") != "apps/v1" {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "{INSTALL_FILE}: is {} {}; it must be one apps/v1 Deployment (the stack's controller)",
                text("/apiVersion"),
                text("/kind")
            ),
        ));
    }
    if text("/metadata/name").is_empty() {
        return Err(Error::invalid(
            reference,
            layer,
            format!("{INSTALL_FILE}: the Deployment has no metadata.name"),
        ));
    }
    let containers = value
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array);
    if containers.is_none_or(|c| {
        c.is_empty()
            || c.iter().any(|c| {
                c.get("image")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            })
    }) {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "{INSTALL_FILE}: spec.template.spec.containers must list the controller's containers, each with an image"
            ),
        ));
    }
    Ok(value)
}

pub(crate) fn rules(
    at: &At<'_>,
    budget: &mut YamlBudget,
    bytes: &[u8],
) -> Result<Vec<PolicyRule>, Error> {
    let (reference, layer) = (at.reference, at.layer);
    let value: Value = yaml(at, budget, RBAC_FILE, bytes, parsed_size)?;
    let Some(rules) = value.get("rules").and_then(Value::as_array) else {
        return Err(Error::invalid(
            reference,
            layer,
            format!("{RBAC_FILE}: has no rules: list (each rule: apiGroups, resources, verbs)"),
        ));
    };
    for (i, r) in rules.iter().enumerate() {
        let strings = |k: &str| {
            r.get(k)
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string))
        };
        let allowed = [
            "apiGroups",
            "resources",
            "verbs",
            "resourceNames",
            "nonResourceURLs",
        ];
        if let Some(k) = r
            .as_object()
            .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())))
        {
            return Err(Error::invalid(
                reference,
                layer,
                format!("{RBAC_FILE}: rules[{i}] has an unknown field {k}"),
            ));
        }
        if !strings("verbs") || !(strings("resources") || strings("nonResourceURLs")) {
            return Err(Error::invalid(
                reference,
                layer,
                format!("{RBAC_FILE}: rules[{i}] needs verbs and resources (lists of strings)"),
            ));
        }
    }
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            serde_json::from_value(r.clone()).map_err(|e| {
                Error::invalid(
                    reference,
                    layer,
                    format!("{RBAC_FILE}: rules[{i}]: {e} (each field a list of strings)"),
                )
            })
        })
        .collect()
}

fn crd(at: &At<'_>, budget: &mut YamlBudget, path: &str, bytes: &[u8]) -> Result<Value, Error> {
    let (reference, layer) = (at.reference, at.layer);
    let value: Value = yaml(at, budget, path, bytes, parsed_size)?;
    let text = |p: &str| value.pointer(p).and_then(Value::as_str).unwrap_or_default();
    if text("/kind") != "CustomResourceDefinition"
        || text("/apiVersion") != "apiextensions.k8s.io/v1"
    {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "{path}: is {} {}; files named *crd.yaml hold one apiextensions.k8s.io/v1 CustomResourceDefinition",
                text("/apiVersion"),
                text("/kind")
            ),
        ));
    }
    let missing: Vec<&str> = [
        ("metadata.name", "/metadata/name"),
        ("spec.group", "/spec/group"),
        ("spec.names.kind", "/spec/names/kind"),
        ("spec.names.plural", "/spec/names/plural"),
    ]
    .into_iter()
    .filter(|(_, p)| text(p).is_empty())
    .map(|(n, _)| n)
    .collect();
    if !missing.is_empty() {
        return Err(Error::invalid(
            reference,
            layer,
            format!("{path}: the CRD has no {}", missing.join(", ")),
        ));
    }
    let name = format!("{}.{}", text("/spec/names/plural"), text("/spec/group"));
    if text("/metadata/name") != name {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "{path}: the CRD is named {} but must be named {name} (<plural>.<group>)",
                text("/metadata/name")
            ),
        ));
    }
    if versions_of(&value).is_empty() {
        return Err(Error::invalid(
            reference,
            layer,
            format!("{path}: the CRD has no spec.versions"),
        ));
    }
    Ok(value)
}
