//! ControllerConfig (deprecated) → DeploymentRuntimeConfig: the package
//! manager honours a ControllerConfig through the same rendering
//! ([`spec_from_controller_config`]), and `package-manager convert
//! controllerconfig` prints the equivalent object for users to migrate.

use std::path::Path;

use anyhow::Context as _;
use serde_json::{Map, Value, json};
use types::pkg::{v1alpha1::ControllerConfigSpec, v1beta1::DeploymentRuntimeConfigSpec};

use crate::package_runtime::render::RUNTIME_CONTAINER;

/// The DeploymentRuntimeConfig spec equivalent to a ControllerConfig's;
/// the package manager renders a ControllerConfig through it (with
/// `--enable-runtime-config=false`), and the migration prints it.
///
/// Where each field goes: `replicas` → `deploymentTemplate.spec.replicas`;
/// `metadata` (labels, annotations) → the pod template's metadata;
/// `image`, `imagePullPolicy`, `args`, `env`, `envFrom`, `ports`,
/// `volumeMounts`, `resources`, `securityContext` → the `package-runtime`
/// container; `podSecurityContext` (as `securityContext`),
/// `imagePullSecrets`, `nodeName`, `nodeSelector`, `priorityClassName`,
/// `runtimeClassName`, `tolerations`, `affinity`, `volumes` → the pod
/// spec; `serviceAccountName` →
/// `serviceAccountTemplate.metadata.name` (so that ServiceAccount is
/// updated, never owned).
///
/// A ControllerConfig's `image` (and pull policy) override the package's;
/// a DeploymentRuntimeConfig cannot do that (the seed overlays the
/// package's image), so they are recorded in the container and honoured
/// only on the ControllerConfig path (`render::Input::config_image_wins`).
pub fn spec_from_controller_config(cc: &ControllerConfigSpec) -> DeploymentRuntimeConfigSpec {
    fn put(m: &mut Map<String, Value>, k: &str, v: Option<Value>) {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    }
    let mut container = Map::new();
    container.insert("name".into(), RUNTIME_CONTAINER.into());
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
    put(&mut container, "envFrom", cc.env_from.clone());
    put(&mut container, "ports", cc.ports.clone());
    put(&mut container, "volumeMounts", cc.volume_mounts.clone());
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
    put(&mut pod, "imagePullSecrets", cc.image_pull_secrets.clone());
    put(&mut pod, "nodeName", cc.node_name.clone().map(Value::from));
    put(
        &mut pod,
        "priorityClassName",
        cc.priority_class_name.clone().map(Value::from),
    );
    put(
        &mut pod,
        "runtimeClassName",
        cc.runtime_class_name.clone().map(Value::from),
    );
    put(&mut pod, "volumes", cc.volumes.clone());
    let mut template = Map::new();
    put(
        &mut template,
        "metadata",
        cc.metadata.as_ref().map(|m| json!(m)),
    );
    template.insert("spec".into(), Value::Object(pod));
    let mut spec = Map::new();
    put(&mut spec, "replicas", cc.replicas.map(Value::from));
    spec.insert("template".into(), Value::Object(template));
    DeploymentRuntimeConfigSpec {
        deployment_template: Some(json!({"spec": spec})),
        service_template: None,
        service_account_template: cc
            .service_account_name
            .as_ref()
            .map(|n| json!({"metadata": {"name": n}})),
    }
}

/// The `pkg.crossplane.io/v1beta1` DeploymentRuntimeConfig named `name`
/// equivalent to a ControllerConfig's spec (see
/// [`spec_from_controller_config`]), ready to apply.
pub fn runtime_config_from_controller_config(name: &str, cc: &ControllerConfigSpec) -> Value {
    json!({
        "apiVersion": "pkg.crossplane.io/v1beta1",
        "kind": "DeploymentRuntimeConfig",
        "metadata": {"name": name},
        "spec": spec_from_controller_config(cc),
    })
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
    if let Some(image) = &spec.image {
        eprintln!(
            "note: ControllerConfig {name} overrides the runtime image with {image}; a DeploymentRuntimeConfig cannot (the package's image is always used), so it is recorded in the package-runtime container but ignored: publish a package with that image instead"
        );
    }
    let config = runtime_config_from_controller_config(&name, &spec);
    print!("{}", serde_saphyr::to_string(&config)?);
    if let Some(p) = provider {
        let provider = rewrite_provider(&read(p)?, &name);
        print!("---\n{}", serde_saphyr::to_string(&provider)?);
    }
    Ok(())
}

/// A Provider that referenced a ControllerConfig, referencing the
/// `pkg.crossplane.io/v1beta1` DeploymentRuntimeConfig `runtime_config`
/// instead (spec.controllerConfigRef dropped, spec.runtimeConfigRef set).
/// Anything that is not an object comes back unchanged.
pub fn rewrite_provider(provider: &Value, runtime_config: &str) -> Value {
    let mut provider = provider.clone();
    if let Some(p) = provider.as_object_mut() {
        let spec = p.entry("spec").or_insert_with(|| json!({}));
        if spec.is_null() {
            *spec = json!({});
        }
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("controllerConfigRef");
            spec.insert(
                "runtimeConfigRef".into(),
                json!({
                    "apiVersion": "pkg.crossplane.io/v1beta1",
                    "kind": "DeploymentRuntimeConfig",
                    "name": runtime_config,
                }),
            );
        }
    }
    provider
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::package_runtime::render::{Input, render};

    fn input(config: &DeploymentRuntimeConfigSpec, config_image_wins: bool) -> Input<'_> {
        Input {
            revision: "p-1",
            revision_uid: "u",
            provider: "p",
            namespace: "ns",
            image: "reg/pkg:v1",
            pull_policy: None,
            pull_secrets: &[],
            config,
            config_image_wins,
            provider_owner: None,
            tls: None,
            webhooks: false,
            common_labels: &EMPTY,
            common_annotations: &EMPTY,
            serving: None,
        }
    }

    static EMPTY: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();

    fn controller_config() -> ControllerConfigSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": {"team": "a"}, "annotations": {"scrape": "yes"}},
            "replicas": 2,
            "image": "reg/override:v9",
            "imagePullPolicy": "Always",
            "serviceAccountName": "shared",
            "args": ["--debug"],
            "nodeSelector": {"zone": "a"},
            "env": [{"name": "X", "value": "1"}],
            "resources": {"limits": {"memory": "1Gi"}},
            "securityContext": {"readOnlyRootFilesystem": true},
            "podSecurityContext": {"runAsUser": 1000},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}},
            "envFrom": [{"secretRef": {"name": "creds"}, "prefix": "P_"}],
            "imagePullSecrets": [{"name": "regcred"}],
            "nodeName": "node-1",
            "ports": [{"name": "profiling", "containerPort": 6060}],
            "priorityClassName": "system-cluster-critical",
            "runtimeClassName": "gvisor",
            "volumes": [{"name": "cache", "emptyDir": {}}],
            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
        }))
        .unwrap()
    }

    #[test]
    fn a_converted_controller_config_renders_the_same_deployment() {
        let cc = controller_config();
        // The honoured path renders from spec_from_controller_config; the
        // migration prints an object the user applies, read back here as
        // the API server would store it.
        let honoured = spec_from_controller_config(&cc);
        let printed = runtime_config_from_controller_config("cc", &cc);
        assert_eq!(printed["apiVersion"], "pkg.crossplane.io/v1beta1");
        assert_eq!(printed["kind"], "DeploymentRuntimeConfig");
        assert_eq!(printed["metadata"], json!({"name": "cc"}));
        let yaml = serde_saphyr::to_string(&printed).unwrap();
        let back: Value = serde_saphyr::from_str(&yaml).unwrap();
        let migrated: DeploymentRuntimeConfigSpec =
            serde_json::from_value(back["spec"].clone()).unwrap();
        assert_eq!(migrated, honoured);

        let a = render(&input(&honoured, true)).unwrap();
        let b = render(&input(&migrated, true)).unwrap();
        assert_eq!(a, b);
        let pod = &a.deployment["spec"]["template"];
        let c = &pod["spec"]["containers"][0];
        assert_eq!(a.deployment["spec"]["replicas"], 2);
        assert_eq!(c["image"], "reg/override:v9");
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(c["args"], json!(["--debug"]));
        assert_eq!(c["env"][0], json!({"name": "X", "value": "1"}));
        assert_eq!(c["env"][1]["name"], "POD_NAMESPACE");
        assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
        assert_eq!(
            c["securityContext"],
            json!({"readOnlyRootFilesystem": true})
        );
        assert_eq!(pod["spec"]["securityContext"], json!({"runAsUser": 1000}));
        assert_eq!(pod["spec"]["nodeSelector"]["zone"], "a");
        assert_eq!(pod["spec"]["tolerations"][0]["key"], "k");
        assert_eq!(pod["spec"]["affinity"], json!({"nodeAffinity": {}}));
        assert_eq!(pod["spec"]["serviceAccountName"], "shared");
        assert_eq!(pod["metadata"]["labels"]["team"], "a");
        assert_eq!(pod["metadata"]["annotations"]["scrape"], "yes");
        assert_eq!(
            c["envFrom"],
            json!([{"secretRef": {"name": "creds"}, "prefix": "P_"}])
        );
        // The user's port stays, the metrics port is added beside it.
        assert_eq!(
            c["ports"],
            json!([
                {"name": "profiling", "containerPort": 6060},
                {"name": "metrics", "containerPort": 8080},
            ])
        );
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": "cache", "mountPath": "/cache"}])
        );
        assert_eq!(
            pod["spec"]["imagePullSecrets"],
            json!([{"name": "regcred"}])
        );
        assert_eq!(pod["spec"]["nodeName"], "node-1");
        assert_eq!(pod["spec"]["priorityClassName"], "system-cluster-critical");
        assert_eq!(pod["spec"]["runtimeClassName"], "gvisor");
        assert_eq!(
            pod["spec"]["volumes"],
            json!([{"name": "cache", "emptyDir": {}}])
        );
        assert!(a.service_account_named);
        assert_eq!(a.service_account["metadata"]["name"], "shared");

        // Applied as a DeploymentRuntimeConfig the package's image is used;
        // everything else renders the same.
        let mut c = render(&input(&migrated, false)).unwrap();
        let rc = &mut c.deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(rc["image"], "reg/pkg:v1");
        assert_eq!(rc["imagePullPolicy"], "IfNotPresent");
        rc["image"] = json!("reg/override:v9");
        rc["imagePullPolicy"] = json!("Always");
        assert_eq!(a, c);

        // With the package's pull secrets and the webhook certificates the
        // user's secrets, ports, volumes and mounts stay first, and what
        // the package manager needs is added after them.
        let secrets = ["pkg-secret".to_owned()];
        let mut i = input(&honoured, true);
        i.pull_secrets = &secrets;
        i.tls = Some(("server-certs", "client-certs"));
        let d = render(&i).unwrap().deployment;
        let pod = &d["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(
            pod["imagePullSecrets"],
            json!([{"name": "regcred"}, {"name": "pkg-secret"}])
        );
        assert_eq!(
            c["ports"],
            json!([
                {"name": "profiling", "containerPort": 6060},
                {"name": "metrics", "containerPort": 8080},
                {"name": "webhook", "containerPort": 9443},
            ])
        );
        assert_eq!(
            pod["volumes"],
            json!([
                {"name": "cache", "emptyDir": {}},
                {"name": "tls-server-certs", "secret": {"secretName": "server-certs"}},
                {"name": "tls-client-certs", "secret": {"secretName": "client-certs"}},
            ])
        );
        assert_eq!(
            c["volumeMounts"],
            json!([
                {"name": "cache", "mountPath": "/cache"},
                {"name": "tls-server-certs", "mountPath": "/tls/server", "readOnly": true},
                {"name": "tls-client-certs", "mountPath": "/tls/client", "readOnly": true},
            ])
        );
        assert_eq!(
            c["envFrom"],
            json!([{"secretRef": {"name": "creds"}, "prefix": "P_"}])
        );
        assert_eq!(pod["nodeName"], "node-1");
        assert_eq!(pod["priorityClassName"], "system-cluster-critical");
        assert_eq!(pod["runtimeClassName"], "gvisor");
    }

    #[test]
    fn an_empty_controller_config_renders_the_defaults() {
        let cc = ControllerConfigSpec::default();
        let converted = spec_from_controller_config(&cc);
        assert!(converted.service_account_template.is_none());
        let a = render(&input(&converted, true)).unwrap();
        let b = render(&input(&DeploymentRuntimeConfigSpec::default(), false)).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn the_provider_references_the_runtime_config_instead() {
        let p = json!({"apiVersion": "pkg.crossplane.io/v1", "kind": "Provider", "metadata": {"name": "p"},
            "spec": {"package": "x", "controllerConfigRef": {"name": "cc"}}});
        let r = rewrite_provider(&p, "drc");
        assert!(r["spec"].get("controllerConfigRef").is_none());
        assert_eq!(r["spec"]["package"], "x");
        assert_eq!(r["metadata"], p["metadata"]);
        assert_eq!(
            r["spec"]["runtimeConfigRef"],
            json!({"apiVersion": "pkg.crossplane.io/v1beta1", "kind": "DeploymentRuntimeConfig", "name": "drc"})
        );
        // No spec gets one; shapes that are not a Provider come back as
        // they were.
        let r = rewrite_provider(&json!({"kind": "Provider"}), "drc");
        assert_eq!(r["spec"]["runtimeConfigRef"]["name"], "drc");
        for odd in [json!(null), json!([1]), json!({"spec": 3})] {
            assert_eq!(rewrite_provider(&odd, "drc"), odd);
        }
    }
}
