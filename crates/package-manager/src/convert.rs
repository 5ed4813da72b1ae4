//! ControllerConfig (deprecated) → DeploymentRuntimeConfig: the package
//! manager honours a ControllerConfig through the same rendering
//! ([`spec_from_controller_config`]), and `package-manager convert
//! controllerconfig` prints the equivalent object for users to migrate.

use std::path::Path;

use anyhow::Context as _;
use serde_json::{Map, Value, json};
use types::pkg::{v1alpha1::ControllerConfigSpec, v1beta1::DeploymentRuntimeConfigSpec};

use crate::render::RUNTIME_CONTAINER;

/// The DeploymentRuntimeConfig spec equivalent to a ControllerConfig's.
/// Its `image`, when set, is the runtime container's image (a
/// ControllerConfig's image overrides the package's).
pub fn spec_from_controller_config(cc: &ControllerConfigSpec) -> DeploymentRuntimeConfigSpec {
    let mut container = Map::new();
    container.insert("name".into(), RUNTIME_CONTAINER.into());
    let put = |m: &mut Map<String, Value>, k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    };
    put(&mut container, "image", cc.image.clone().map(Value::from));
    put(
        &mut container,
        "imagePullPolicy",
        cc.image_pull_policy.clone().map(Value::from),
    );
    put(
        &mut container,
        "args",
        (!cc.args.is_empty()).then(|| json!(cc.args)),
    );
    put(&mut container, "env", cc.env.clone());
    put(&mut container, "resources", cc.resources.clone());
    put(
        &mut container,
        "securityContext",
        cc.security_context.clone(),
    );
    let mut pod = Map::new();
    pod.insert("containers".into(), json!([container]));
    put(&mut pod, "securityContext", cc.pod_security_context.clone());
    put(
        &mut pod,
        "nodeSelector",
        cc.node_selector.as_ref().map(|n| json!(n)),
    );
    put(&mut pod, "tolerations", cc.tolerations.clone());
    put(&mut pod, "affinity", cc.affinity.clone());
    let mut template = json!({"spec": pod});
    if let Some(meta) = &cc.metadata {
        template["metadata"] = json!(meta);
    }
    let mut spec = json!({"template": template});
    if let Some(r) = cc.replicas {
        spec["replicas"] = json!(r);
    }
    DeploymentRuntimeConfigSpec {
        deployment_template: Some(json!({"spec": spec})),
        service_template: None,
        service_account_template: cc
            .service_account_name
            .as_ref()
            .map(|n| json!({"metadata": {"name": n}})),
    }
}

/// `convert controllerconfig FILE [--provider FILE]`: prints the
/// DeploymentRuntimeConfig (named like the ControllerConfig) and the
/// Provider rewritten to reference it, as YAML documents.
pub fn command(file: &Path, provider: Option<&Path>) -> anyhow::Result<()> {
    let read = |p: &Path| -> anyhow::Result<Value> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    };
    let cc = read(file)?;
    if cc.get("kind").and_then(Value::as_str) != Some("ControllerConfig") {
        anyhow::bail!("{} is not a ControllerConfig", file.display());
    }
    let name = cc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .context("the ControllerConfig has no metadata.name")?
        .to_owned();
    let spec: ControllerConfigSpec =
        serde_json::from_value(cc.get("spec").cloned().unwrap_or_else(|| json!({})))
            .context("the ControllerConfig's spec")?;
    let config = json!({
        "apiVersion": "pkg.crossplane.io/v1beta1",
        "kind": "DeploymentRuntimeConfig",
        "metadata": {"name": name},
        "spec": spec_from_controller_config(&spec),
    });
    print!("{}", serde_saphyr::to_string(&config)?);
    if let Some(p) = provider {
        let provider = rewrite_provider(read(p)?, &name);
        print!("---\n{}", serde_saphyr::to_string(&provider)?);
    }
    Ok(())
}

/// A Provider that referenced a ControllerConfig, referencing the
/// DeploymentRuntimeConfig `name` instead.
pub fn rewrite_provider(mut provider: Value, name: &str) -> Value {
    if let Some(spec) = provider.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("controllerConfigRef");
        spec.insert(
            "runtimeConfigRef".into(),
            json!({"apiVersion": "pkg.crossplane.io/v1beta1", "kind": "DeploymentRuntimeConfig", "name": name}),
        );
    }
    provider
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::render::{Input, render};

    #[test]
    fn a_converted_controller_config_renders_the_same_deployment() {
        let cc: ControllerConfigSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"team": "a"}},
            "replicas": 2,
            "image": "reg/override:v9",
            "serviceAccountName": "shared",
            "args": ["--debug"],
            "nodeSelector": {"zone": "a"},
            "env": [{"name": "X", "value": "1"}],
            "podSecurityContext": {"runAsUser": 1000},
        }))
        .unwrap();
        // The honoured path renders from spec_from_controller_config; the
        // migration path prints it as an object the user applies.
        let honoured = spec_from_controller_config(&cc);
        let printed = json!({"spec": spec_from_controller_config(&cc)});
        let migrated: DeploymentRuntimeConfigSpec =
            serde_json::from_value(printed["spec"].clone()).unwrap();
        let input = |config| Input {
            revision: "p-1",
            revision_uid: "u",
            provider: "p",
            namespace: "ns",
            image: "reg/pkg:v1",
            pull_policy: None,
            pull_secrets: &[],
            config,
            config_image_wins: true,
        };
        let a = render(&input(&honoured)).unwrap();
        let b = render(&input(&migrated)).unwrap();
        assert_eq!(a, b);
        let pod = &a.deployment["spec"]["template"];
        assert_eq!(a.deployment["spec"]["replicas"], 2);
        assert_eq!(pod["spec"]["containers"][0]["image"], "reg/override:v9");
        assert_eq!(pod["spec"]["containers"][0]["args"], json!(["--debug"]));
        assert_eq!(pod["spec"]["nodeSelector"]["zone"], "a");
        assert_eq!(pod["spec"]["serviceAccountName"], "shared");
        assert_eq!(pod["metadata"]["labels"]["team"], "a");
        assert!(a.service_account_named);
    }

    #[test]
    fn the_provider_references_the_runtime_config_instead() {
        let p = json!({"kind": "Provider", "spec": {"package": "x", "controllerConfigRef": {"name": "cc"}}});
        let r = rewrite_provider(p, "cc");
        assert!(r["spec"].get("controllerConfigRef").is_none());
        assert_eq!(
            r["spec"]["runtimeConfigRef"]["kind"],
            "DeploymentRuntimeConfig"
        );
        assert_eq!(r["spec"]["runtimeConfigRef"]["name"], "cc");
    }
}
