//! Renders a revision's runtime (ServiceAccount, Deployment, Service) from
//! a DeploymentRuntimeConfig (seed 004). Everything in the templates wins,
//! except what the package manager overlays: the image, pull policy and
//! pull secrets from the package; the selector labels that make the
//! Deployment and Service match; the `package-runtime` container (made if
//! absent, always first, sidecars kept after it); the metrics port and the
//! `POD_NAMESPACE` env var a runtime needs. Fields the templates leave
//! unset get the values the package manager used to hard-code (the seed's
//! `default` example), so an empty config renders the same runtime.
//!
//! Pure functions over JSON: any shape of user input gives a result or a
//! [`RenderError`], never a panic.

use serde_json::{Map, Value, json};
use types::pkg::v1beta1::DeploymentRuntimeConfigSpec;

use crate::labels;

/// The container the package runtime runs in.
pub const RUNTIME_CONTAINER: &str = "package-runtime";
/// The metrics port every runtime exposes.
pub const METRICS_PORT: i64 = 8080;

/// What a runtime is rendered from.
pub struct Input<'a> {
    /// The revision's name.
    pub revision: &'a str,
    /// The revision's UID (for ownerReferences).
    pub revision_uid: &'a str,
    /// The Provider's name.
    pub provider: &'a str,
    /// Where runtimes run.
    pub namespace: &'a str,
    /// The runtime image.
    pub image: &'a str,
    /// The package's pull policy (also the runtime image's).
    pub pull_policy: Option<&'a str>,
    /// The package's pull secrets (also the runtime image's).
    pub pull_secrets: &'a [String],
    /// The runtime config.
    pub config: &'a DeploymentRuntimeConfigSpec,
    /// Whether an image in the config wins over the package's (a
    /// converted ControllerConfig's `image` does).
    pub config_image_wins: bool,
}

/// A rendered runtime, ready for server-side apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The ServiceAccount.
    pub service_account: Value,
    /// The Deployment.
    pub deployment: Value,
    /// The Service.
    pub service: Value,
    /// Whether the config named the ServiceAccount: it is then updated,
    /// never owned or deleted.
    pub service_account_named: bool,
}

/// A runtime config that cannot be rendered; the message says what to fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(String);

fn object(v: Option<&Value>, what: &str) -> Result<Map<String, Value>, RenderError> {
    match v {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(RenderError(format!("{what} must be an object"))),
    }
}

fn string_map(v: Option<&Value>, what: &str) -> Result<Map<String, Value>, RenderError> {
    let m = object(v, what)?;
    if m.values().all(Value::is_string) {
        Ok(m)
    } else {
        Err(RenderError(format!("{what} must map strings to strings")))
    }
}

/// The labels that select a revision's runtime pods.
fn selector(input: &Input) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(labels::PACKAGE.into(), input.provider.into());
    m.insert(labels::REVISION.into(), input.revision.into());
    m
}

fn owner(input: &Input) -> Value {
    json!([{
        "apiVersion": "pkg.crossplane.io/v1",
        "kind": "ProviderRevision",
        "name": input.revision,
        "uid": input.revision_uid,
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

/// The name a template gives, else the revision's.
fn name_of(meta: &Map<String, Value>, input: &Input) -> (String, bool) {
    match meta
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        Some(n) => (n.to_owned(), true),
        None => (input.revision.to_owned(), false),
    }
}

/// Renders the runtime of `input`.
pub fn render(input: &Input) -> Result<Rendered, RenderError> {
    let dt = object(
        input.config.deployment_template.as_ref(),
        "spec.deploymentTemplate",
    )?;
    // The seed's example nests the Service and ServiceAccount templates
    // under deploymentTemplate; both places are read.
    let st = match &input.config.service_template {
        Some(v) => object(Some(v), "spec.serviceTemplate")?,
        None => object(
            dt.get("serviceTemplate"),
            "spec.deploymentTemplate.serviceTemplate",
        )?,
    };
    let sat = match &input.config.service_account_template {
        Some(v) => object(Some(v), "spec.serviceAccountTemplate")?,
        None => object(
            dt.get("serviceAccountTemplate"),
            "spec.deploymentTemplate.serviceAccountTemplate",
        )?,
    };
    let service_account = service_account(input, &sat)?;
    let sa_name = service_account
        .0
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or(input.revision)
        .to_owned();
    Ok(Rendered {
        deployment: deployment(input, &dt, &sa_name)?,
        service: service(input, &st)?,
        service_account: service_account.0,
        service_account_named: service_account.1,
    })
}

fn metadata(
    input: &Input,
    template: &Map<String, Value>,
    what: &str,
    extra_labels: Option<&Map<String, Value>>,
    owned: bool,
) -> Result<(Value, bool), RenderError> {
    let meta = object(template.get("metadata"), &format!("{what}.metadata"))?;
    let (name, named) = name_of(&meta, input);
    let mut labels = string_map(meta.get("labels"), &format!("{what}.metadata.labels"))?;
    if let Some(extra) = extra_labels {
        labels.extend(extra.clone());
    }
    let annotations = string_map(
        meta.get("annotations"),
        &format!("{what}.metadata.annotations"),
    )?;
    let mut m = json!({"name": name, "namespace": input.namespace});
    if let Some(o) = m.as_object_mut() {
        if !labels.is_empty() {
            o.insert("labels".into(), Value::Object(labels));
        }
        if !annotations.is_empty() {
            o.insert("annotations".into(), Value::Object(annotations));
        }
        if owned {
            o.insert("ownerReferences".into(), owner(input));
        }
    }
    Ok((m, named))
}

fn service_account(input: &Input, sat: &Map<String, Value>) -> Result<(Value, bool), RenderError> {
    let meta = object(sat.get("metadata"), "serviceAccountTemplate.metadata")?;
    let named = name_of(&meta, input).1;
    let (m, _) = metadata(input, sat, "serviceAccountTemplate", None, !named)?;
    Ok((
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": m}),
        named,
    ))
}

fn service(input: &Input, st: &Map<String, Value>) -> Result<Value, RenderError> {
    let (m, _) = metadata(input, st, "serviceTemplate", None, true)?;
    let mut spec = object(st.get("spec"), "serviceTemplate.spec")?;
    spec.insert("selector".into(), Value::Object(selector(input)));
    let no_ports = spec
        .get("ports")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if no_ports {
        spec.insert(
            "ports".into(),
            json!([{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}]),
        );
    }
    Ok(json!({"apiVersion": "v1", "kind": "Service", "metadata": m, "spec": spec}))
}

fn default_if_absent(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.into(), value);
    }
}

fn deployment(input: &Input, dt: &Map<String, Value>, sa_name: &str) -> Result<Value, RenderError> {
    let sel = selector(input);
    let (m, _) = metadata(input, dt, "deploymentTemplate", Some(&sel), true)?;
    let mut spec = object(dt.get("spec"), "deploymentTemplate.spec")?;
    let template = object(spec.get("template"), "deploymentTemplate.spec.template")?;
    let mut pod_meta = object(
        template.get("metadata"),
        "deploymentTemplate.spec.template.metadata",
    )?;
    // A PodTemplateSpec holds the pod spec under `spec`; the seed's example
    // puts its fields directly under `template`, which is read the same.
    let mut pod = match template.get("spec") {
        Some(s) => object(Some(s), "deploymentTemplate.spec.template.spec")?,
        None => {
            let mut t = template.clone();
            t.remove("metadata");
            t
        }
    };
    let mut pod_labels = string_map(
        pod_meta.get("labels"),
        "deploymentTemplate.spec.template.metadata.labels",
    )?;
    pod_labels.extend(sel.clone());
    pod_meta.insert("labels".into(), Value::Object(pod_labels));

    let containers = match pod.get("containers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => {
            return Err(RenderError(
                "deploymentTemplate.spec.template.spec.containers must be a list".into(),
            ));
        }
    };
    let mut runtime = None;
    let mut sidecars = Vec::new();
    for c in containers {
        let is_runtime = c.get("name").and_then(Value::as_str) == Some(RUNTIME_CONTAINER);
        if is_runtime && runtime.is_none() {
            runtime = Some(object(Some(&c), "the package-runtime container")?);
        } else {
            sidecars.push(c);
        }
    }
    let runtime = runtime_container(input, runtime.unwrap_or_default())?;
    let mut all = vec![Value::Object(runtime)];
    all.extend(sidecars);
    pod.insert("containers".into(), Value::Array(all));
    pod.insert("serviceAccountName".into(), sa_name.into());
    default_if_absent(
        &mut pod,
        "securityContext",
        json!({"runAsNonRoot": true, "runAsUser": 2000, "runAsGroup": 2000}),
    );
    let mut secrets = match pod.get("imagePullSecrets") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => {
            return Err(RenderError(
                "deploymentTemplate.spec.template.spec.imagePullSecrets must be a list".into(),
            ));
        }
    };
    for s in input.pull_secrets {
        if !secrets
            .iter()
            .any(|e| e.get("name").and_then(Value::as_str) == Some(s))
        {
            secrets.push(json!({"name": s}));
        }
    }
    if !secrets.is_empty() {
        pod.insert("imagePullSecrets".into(), Value::Array(secrets));
    }
    default_if_absent(&mut spec, "replicas", json!(1));
    spec.insert("selector".into(), json!({"matchLabels": sel}));
    spec.insert(
        "template".into(),
        json!({"metadata": pod_meta, "spec": pod}),
    );
    Ok(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": m, "spec": spec}))
}

fn runtime_container(
    input: &Input,
    mut c: Map<String, Value>,
) -> Result<Map<String, Value>, RenderError> {
    c.insert("name".into(), RUNTIME_CONTAINER.into());
    let keep_image = input.config_image_wins && c.get("image").is_some_and(Value::is_string);
    if !keep_image {
        c.insert("image".into(), input.image.into());
    }
    let keep_policy =
        input.config_image_wins && c.get("imagePullPolicy").is_some_and(Value::is_string);
    if !keep_policy {
        c.insert(
            "imagePullPolicy".into(),
            input.pull_policy.unwrap_or("IfNotPresent").into(),
        );
    }
    let mut env = match c.get("env") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => {
            return Err(RenderError(
                "the package-runtime container's env must be a list".into(),
            ));
        }
    };
    env.retain(|e| e.get("name").and_then(Value::as_str) != Some("POD_NAMESPACE"));
    env.push(json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}));
    c.insert("env".into(), Value::Array(env));
    let mut ports = match c.get("ports") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => {
            return Err(RenderError(
                "the package-runtime container's ports must be a list".into(),
            ));
        }
    };
    if !ports
        .iter()
        .any(|p| p.get("name").and_then(Value::as_str) == Some("metrics"))
    {
        ports.push(json!({"name": "metrics", "containerPort": METRICS_PORT}));
    }
    c.insert("ports".into(), Value::Array(ports));
    default_if_absent(
        &mut c,
        "securityContext",
        json!({
            "runAsNonRoot": true,
            "runAsUser": 2000,
            "runAsGroup": 2000,
            "privileged": false,
            "allowPrivilegeEscalation": false,
        }),
    );
    Ok(c)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn input<'a>(config: &'a DeploymentRuntimeConfigSpec, secrets: &'a [String]) -> Input<'a> {
        Input {
            revision: "provider-x-0123456789ab",
            revision_uid: "uid-1",
            provider: "provider-x",
            namespace: "crossplane-system",
            image: "reg/runtime@sha256:aa",
            pull_policy: None,
            pull_secrets: secrets,
            config,
            config_image_wins: false,
        }
    }

    fn spec(v: Value) -> DeploymentRuntimeConfigSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_seeds_default_renders_the_same_pods_as_an_empty_config() {
        let seed: Value = serde_saphyr::from_str(include_str!(
            "../../../examples/seeds/004-deploymentruntimeconfig-default.yaml"
        ))
        .unwrap();
        let seeded = spec(seed["spec"].clone());
        let empty = DeploymentRuntimeConfigSpec::default();
        let a = render(&input(&seeded, &[])).unwrap();
        let b = render(&input(&empty, &[])).unwrap();
        // The seed's example adds one label to the Deployment; everything
        // that runs is the same.
        assert_eq!(a.deployment["spec"], b.deployment["spec"]);
        assert_eq!(a.service, b.service);
        assert_eq!(a.service_account, b.service_account);
        assert_eq!(a.deployment["metadata"]["labels"]["example"], "label");
    }

    #[test]
    fn selector_pod_labels_and_service_match() {
        let empty = DeploymentRuntimeConfigSpec::default();
        let r = render(&input(&empty, &[])).unwrap();
        let sel = &r.deployment["spec"]["selector"]["matchLabels"];
        assert_eq!(&r.service["spec"]["selector"], sel);
        for (k, v) in sel.as_object().unwrap() {
            assert_eq!(
                &r.deployment["spec"]["template"]["metadata"]["labels"][k],
                v
            );
        }
        let c = &r.deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["name"], RUNTIME_CONTAINER);
        assert_eq!(c["image"], "reg/runtime@sha256:aa");
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(
            r.deployment["spec"]["template"]["spec"]["serviceAccountName"],
            "provider-x-0123456789ab"
        );
        assert_eq!(
            r.deployment["metadata"]["ownerReferences"][0]["controller"],
            true
        );
    }

    #[test]
    fn template_names_win_and_a_named_service_account_is_not_owned() {
        let config = spec(json!({
            "deploymentTemplate": {"metadata": {"name": "dep"}},
            "serviceTemplate": {"metadata": {"name": "svc"}},
            "serviceAccountTemplate": {"metadata": {"name": "shared", "annotations": {"a": "b"}}},
        }));
        let r = render(&input(&config, &[])).unwrap();
        assert_eq!(r.deployment["metadata"]["name"], "dep");
        assert_eq!(r.service["metadata"]["name"], "svc");
        assert!(r.service_account_named);
        assert!(
            r.service_account["metadata"]
                .get("ownerReferences")
                .is_none()
        );
        assert_eq!(r.service_account["metadata"]["annotations"]["a"], "b");
        assert_eq!(
            r.deployment["spec"]["template"]["spec"]["serviceAccountName"],
            "shared"
        );
    }

    #[test]
    fn sidecars_stay_after_the_runtime_and_template_fields_win() {
        let config = spec(
            json!({"deploymentTemplate": {"spec": {"replicas": 2, "selector": {"matchLabels": {"x": "y"}}, "template": {"spec": {
                "containers": [
                    {"name": "sidecar", "image": "side:1"},
                    {"name": "package-runtime", "args": ["--debug"], "env": [{"name": "A", "value": "1"}, {"name": "POD_NAMESPACE", "value": "wrong"}]},
                ],
                "imagePullSecrets": [{"name": "mine"}],
            }}}}}),
        );
        let secrets = ["pkg".to_owned(), "mine".to_owned()];
        let r = render(&input(&config, &secrets)).unwrap();
        let spec = &r.deployment["spec"];
        assert_eq!(spec["replicas"], 2);
        assert!(spec["selector"]["matchLabels"].get("x").is_none());
        let cs = spec["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs[0]["name"], "package-runtime");
        assert_eq!(cs[0]["args"], json!(["--debug"]));
        assert_eq!(cs[1]["name"], "sidecar");
        let env = cs[0]["env"].as_array().unwrap();
        assert_eq!(env.len(), 2);
        assert_eq!(env[0]["name"], "A");
        assert_eq!(
            env[1]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.namespace"
        );
        assert_eq!(
            spec["template"]["spec"]["imagePullSecrets"],
            json!([{"name": "mine"}, {"name": "pkg"}])
        );
    }

    #[test]
    fn garbage_templates_are_errors_not_panics() {
        for bad in [
            json!({"deploymentTemplate": 3}),
            json!({"deploymentTemplate": {"spec": {"template": {"spec": {"containers": "x"}}}}}),
            json!({"deploymentTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "package-runtime", "env": 1}]}}}}}),
            json!({"serviceTemplate": []}),
            json!({"deploymentTemplate": {"metadata": {"labels": {"a": 1}}}}),
        ] {
            let config = spec(bad.clone());
            assert!(render(&input(&config, &[])).is_err(), "{bad}");
        }
    }
}
