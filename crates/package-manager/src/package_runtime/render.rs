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
/// The port a provider's webhooks (conversion, admission) listen on.
pub const WEBHOOK_PORT: i64 = 9443;
/// The Service's second port to the same webhook ([`super::handover`]).
pub const WEBHOOK_ALT_PORT: i64 = 9444;
/// On the Service: which of its two webhook ports the API server is
/// pointed at ([`super::handover`]).
pub const ANNOTATION_WEBHOOK_PORT: &str = "pkg.crossplane.io/webhook-port";
/// Where a provider finds its server certificate (`tls.crt`, `tls.key`,
/// `ca.crt`), as upstream mounts it.
pub const TLS_SERVER_DIR: &str = "/tls/server";
/// Where a provider finds its client certificate.
pub const TLS_CLIENT_DIR: &str = "/tls/client";
/// How long a runtime with webhooks keeps serving after it is told to stop,
/// so that the API server has moved its calls to the new runtime.
const WEBHOOK_DRAIN_SECONDS: i64 = 5;

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
    /// The Provider's controller reference (JSON): it owns what outlives
    /// one revision, the Service and the ServiceAccount, whose names stay
    /// the same across upgrades. `None`: the revision owns them.
    pub provider_owner: Option<&'a Value>,
    /// The Secrets holding the runtime's server and client certificates
    /// ([`crate::tls`]), mounted at [`TLS_SERVER_DIR`] and [`TLS_CLIENT_DIR`].
    pub tls: Option<(&'a str, &'a str)>,
    /// Whether the package serves webhooks: the runtime is then Ready only
    /// once its webhook port answers, and drains before it stops.
    pub webhooks: bool,
    /// The Provider's `spec.commonLabels`, on everything rendered.
    pub common_labels: &'a std::collections::BTreeMap<String, String>,
    /// The Provider's `spec.commonAnnotations`, on everything rendered.
    pub common_annotations: &'a std::collections::BTreeMap<String, String>,
    /// Whom the Service sends to, and which of its webhook ports the API
    /// server calls ([`super::handover`]). `None`: every revision's ready
    /// pods, and one webhook port.
    pub serving: Option<Serving<'a>>,
}

/// The revision a Provider's Service sends to, and the Service port the
/// API server is pointed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Serving<'a> {
    /// The revision.
    pub revision: &'a str,
    /// [`WEBHOOK_PORT`] or [`WEBHOOK_ALT_PORT`].
    pub port: i64,
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

/// The label every runtime pod of the Provider carries.
fn provider_label(input: &Input) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(labels::PROVIDER.into(), input.provider.into());
    m
}

/// What the Service selects: the ready pods of the serving revision
/// ([`super::handover`]), else of any revision of the Provider.
fn service_selector(input: &Input) -> Map<String, Value> {
    let mut m = provider_label(input);
    if let Some(s) = &input.serving {
        m.insert(labels::REVISION.into(), s.revision.into());
    }
    m
}

/// The name of the Service a revision's runtime is reached by (and its
/// webhooks are called at): the template's, else the Provider's name, the
/// same for every revision.
pub fn service_name(config: &DeploymentRuntimeConfigSpec, provider: &str) -> String {
    let template = config.service_template.as_ref().or_else(|| {
        config
            .deployment_template
            .as_ref()
            .and_then(|d| d.get("serviceTemplate"))
    });
    template
        .and_then(|t| t.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(provider)
        .to_owned()
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

/// The name a template gives, else the revision's; and whether the
/// template gave it.
fn name_of(
    meta: &Map<String, Value>,
    default: &str,
    what: &str,
) -> Result<(String, bool), RenderError> {
    match meta.get("name") {
        None | Some(Value::Null) => Ok((default.to_owned(), false)),
        Some(Value::String(n)) if n.is_empty() => Ok((default.to_owned(), false)),
        Some(Value::String(n)) => Ok((n.clone(), true)),
        Some(_) => Err(RenderError(format!(
            "{what}.metadata.name must be a string (or left out to use the default, {default})"
        ))),
    }
}

/// A list in `m` under `key` (absent or null is empty); each item must be
/// an object.
fn object_list(m: &Map<String, Value>, key: &str, what: &str) -> Result<Vec<Value>, RenderError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => {
            if a.iter().all(Value::is_object) {
                Ok(a.clone())
            } else {
                Err(RenderError(format!(
                    "every item of {what}.{key} must be an object"
                )))
            }
        }
        Some(_) => Err(RenderError(format!("{what}.{key} must be a list"))),
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
        .unwrap_or(input.provider)
        .to_owned();
    Ok(Rendered {
        deployment: deployment(input, &dt, &sa_name)?,
        service: service(input, &st)?,
        service_account: service_account.0,
        service_account_named: service_account.1,
    })
}

/// Who owns an object rendered for a revision.
#[derive(Clone, Copy, PartialEq)]
enum Owner {
    /// Nobody: a ServiceAccount the runtime config named is the user's.
    None,
    /// The revision: it goes with the revision.
    Revision,
    /// The Provider: it outlives a revision (when there is no Provider
    /// reference, the revision owns it).
    Provider,
}

/// Adds the Provider's common labels or annotations under what `m` has.
fn with_common(
    mut m: Map<String, Value>,
    common: &std::collections::BTreeMap<String, String>,
) -> Map<String, Value> {
    for (k, v) in common {
        m.entry(k.clone()).or_insert_with(|| v.clone().into());
    }
    m
}

fn metadata(
    input: &Input,
    template: &Map<String, Value>,
    what: &str,
    (default_name, extra_labels): (&str, Option<&Map<String, Value>>),
    owned: Owner,
) -> Result<(Value, bool), RenderError> {
    let meta = object(template.get("metadata"), &format!("{what}.metadata"))?;
    let (name, named) = name_of(&meta, default_name, what)?;
    let mut labels = string_map(meta.get("labels"), &format!("{what}.metadata.labels"))?;
    if let Some(extra) = extra_labels {
        labels.extend(extra.clone());
    }
    let labels = with_common(labels, input.common_labels);
    let annotations = with_common(
        string_map(
            meta.get("annotations"),
            &format!("{what}.metadata.annotations"),
        )?,
        input.common_annotations,
    );
    let mut m = json!({"name": name, "namespace": input.namespace});
    if let Some(o) = m.as_object_mut() {
        if !labels.is_empty() {
            o.insert("labels".into(), Value::Object(labels));
        }
        if !annotations.is_empty() {
            o.insert("annotations".into(), Value::Object(annotations));
        }
        match (owned, input.provider_owner) {
            (Owner::None, _) => {}
            (Owner::Provider, Some(provider)) => {
                o.insert("ownerReferences".into(), json!([provider]));
            }
            (Owner::Revision | Owner::Provider, _) => {
                o.insert("ownerReferences".into(), owner(input));
            }
        }
    }
    Ok((m, named))
}

fn service_account(input: &Input, sat: &Map<String, Value>) -> Result<(Value, bool), RenderError> {
    let meta = object(sat.get("metadata"), "serviceAccountTemplate.metadata")?;
    let named = name_of(&meta, input.provider, "serviceAccountTemplate")?.1;
    let owned = if named { Owner::None } else { Owner::Provider };
    let (m, _) = metadata(
        input,
        sat,
        "serviceAccountTemplate",
        (input.provider, None),
        owned,
    )?;
    Ok((
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": m}),
        named,
    ))
}

fn service(input: &Input, st: &Map<String, Value>) -> Result<Value, RenderError> {
    let (mut m, _) = metadata(
        input,
        st,
        "serviceTemplate",
        (input.provider, None),
        Owner::Provider,
    )?;
    if let (Some(s), Some(meta)) = (&input.serving, m.as_object_mut()) {
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(ANNOTATION_WEBHOOK_PORT.into(), s.port.to_string().into());
        }
    }
    let mut spec = object(st.get("spec"), "serviceTemplate.spec")?;
    spec.insert("selector".into(), Value::Object(service_selector(input)));
    default_if_absent(&mut spec, "type", json!("ClusterIP"));
    let mut ports = object_list(&spec, "ports", "serviceTemplate.spec")?;
    if ports.is_empty() {
        ports.push(json!({"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}));
    }
    // A port to the webhook, unless the template has one of that name.
    let mut webhook_port = |name: &str, port: i64| {
        if !ports.iter().any(|p| p.get("name") == Some(&json!(name))) {
            ports.push(
                json!({"name": name, "port": port, "targetPort": "webhook", "protocol": "TCP"}),
            );
        }
    };
    if input.tls.is_some() {
        webhook_port("webhook", WEBHOOK_PORT);
        if input.serving.is_some() {
            webhook_port("webhook-alt", WEBHOOK_ALT_PORT);
        }
    }
    spec.insert("ports".into(), Value::Array(ports));
    Ok(json!({"apiVersion": "v1", "kind": "Service", "metadata": m, "spec": spec}))
}

fn default_if_absent(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.into(), value);
    }
}

fn deployment(input: &Input, dt: &Map<String, Value>, sa_name: &str) -> Result<Value, RenderError> {
    let sel = selector(input);
    let (m, _) = metadata(
        input,
        dt,
        "deploymentTemplate",
        (input.revision, Some(&sel)),
        Owner::Revision,
    )?;
    let mut spec = object(dt.get("spec"), "deploymentTemplate.spec")?;
    let template = object(spec.get("template"), "deploymentTemplate.spec.template")?;
    let mut pod_meta = object(
        template.get("metadata"),
        "deploymentTemplate.spec.template.metadata",
    )?;
    // A PodTemplateSpec holds the pod spec under `spec`; the seed's example
    // puts its fields directly under `template`, which is read the same.
    let mut pod = match template.get("spec") {
        Some(s) => {
            let stray: Vec<&str> = template
                .keys()
                .map(String::as_str)
                .filter(|k| *k != "metadata" && *k != "spec")
                .collect();
            if !stray.is_empty() {
                return Err(RenderError(format!(
                    "deploymentTemplate.spec.template has both a pod spec and {}; move {} under deploymentTemplate.spec.template.spec",
                    stray.join(", "),
                    if stray.len() == 1 { "it" } else { "them" }
                )));
            }
            object(Some(s), "deploymentTemplate.spec.template.spec")?
        }
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
    pod_labels.extend(provider_label(input));
    pod_meta.insert(
        "labels".into(),
        Value::Object(with_common(pod_labels, input.common_labels)),
    );

    let pod_what = "deploymentTemplate.spec.template.spec";
    let containers = object_list(&pod, "containers", pod_what)?;
    let mut runtime = None;
    let mut sidecars = Vec::new();
    for c in containers {
        let Some(Value::String(name)) = c.get("name") else {
            return Err(RenderError(format!(
                "every container in {pod_what}.containers needs a name; the package runtime's is {RUNTIME_CONTAINER}"
            )));
        };
        if name == RUNTIME_CONTAINER {
            if runtime.is_some() {
                return Err(RenderError(format!(
                    "{pod_what}.containers names {RUNTIME_CONTAINER} more than once; keep one"
                )));
            }
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
    if let Some((server, client)) = input.tls {
        let mut volumes = object_list(&pod, "volumes", pod_what)?;
        for (name, secret) in [("tls-server-certs", server), ("tls-client-certs", client)] {
            volumes.retain(|v| v.get("name").and_then(Value::as_str) != Some(name));
            volumes.push(json!({"name": name, "secret": {"secretName": secret}}));
        }
        pod.insert("volumes".into(), Value::Array(volumes));
    }
    default_if_absent(
        &mut pod,
        "securityContext",
        json!({"runAsNonRoot": true, "runAsUser": 2000, "runAsGroup": 2000}),
    );
    let mut secrets = object_list(&pod, "imagePullSecrets", pod_what)?;
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
    let what = "the package-runtime container";
    // POD_NAMESPACE replaces the template's (in its place), other env stays.
    let pod_namespace = json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}});
    let is_pod_namespace =
        |e: &Value| e.get("name").and_then(Value::as_str) == Some("POD_NAMESPACE");
    let mut env = Vec::new();
    let mut placed = false;
    for e in object_list(&c, "env", what)? {
        if !is_pod_namespace(&e) {
            env.push(e);
        } else if !placed {
            env.push(pod_namespace.clone());
            placed = true;
        }
    }
    if !placed {
        env.push(pod_namespace);
    }
    // What upstream's runtimes read about themselves, replacing any the
    // template set.
    let mut own = vec![
        json!({"name": "PROVIDER_NAME", "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.labels['{}']", labels::PROVIDER)}}}),
        json!({"name": "REVISION_NAME", "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.labels['{}']", labels::REVISION)}}}),
        json!({"name": "REVISION_UID", "value": input.revision_uid}),
    ];
    if input.tls.is_some() {
        own.extend([
            json!({"name": "TLS_SERVER_CERTS_DIR", "value": TLS_SERVER_DIR}),
            json!({"name": "TLS_CLIENT_CERTS_DIR", "value": TLS_CLIENT_DIR}),
            json!({"name": "WEBHOOK_TLS_CERT_DIR", "value": TLS_SERVER_DIR}),
        ]);
    }
    env.retain(|e| {
        let name = e.get("name").and_then(Value::as_str);
        !own.iter()
            .any(|o| o.get("name").and_then(Value::as_str) == name)
    });
    env.extend(own);
    c.insert("env".into(), Value::Array(env));
    let mut ports = object_list(&c, "ports", what)?;
    let mut wanted = vec![("metrics", METRICS_PORT)];
    if input.tls.is_some() {
        wanted.push(("webhook", WEBHOOK_PORT));
    }
    for (name, port) in wanted {
        if !ports.iter().any(|p| p.get("name") == Some(&json!(name))) {
            ports.push(json!({"name": name, "containerPort": port}));
        }
    }
    c.insert("ports".into(), Value::Array(ports));
    if input.tls.is_some() {
        let mut mounts = object_list(&c, "volumeMounts", what)?;
        for (name, dir) in [
            ("tls-server-certs", TLS_SERVER_DIR),
            ("tls-client-certs", TLS_CLIENT_DIR),
        ] {
            mounts.retain(|m| m.get("name").and_then(Value::as_str) != Some(name));
            mounts.push(json!({"name": name, "mountPath": dir, "readOnly": true}));
        }
        c.insert("volumeMounts".into(), Value::Array(mounts));
    }
    if input.webhooks && input.tls.is_some() {
        // Ready only once the webhook answers: the Service sends the API
        // server's calls only to ready pods, and an upgrade keeps the old
        // runtime until the new one is available.
        default_if_absent(
            &mut c,
            "readinessProbe",
            json!({"tcpSocket": {"port": "webhook"}, "periodSeconds": 2, "failureThreshold": 3}),
        );
        default_if_absent(
            &mut c,
            "lifecycle",
            json!({"preStop": {"sleep": {"seconds": WEBHOOK_DRAIN_SECONDS}}}),
        );
    }
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
            provider_owner: None,
            tls: None,
            webhooks: false,
            common_labels: &EMPTY,
            common_annotations: &EMPTY,
            serving: None,
        }
    }

    static EMPTY: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();

    fn spec(v: Value) -> DeploymentRuntimeConfigSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_seeds_default_renders_the_same_pods_as_an_empty_config() {
        let seed: Value = serde_saphyr::from_str(include_str!(
            "../../../../examples/seeds/004-deploymentruntimeconfig-default.yaml"
        ))
        .unwrap();
        let seeded = spec(seed["spec"].clone());
        let empty = DeploymentRuntimeConfigSpec::default();
        let mut a = render(&input(&seeded, &[])).unwrap();
        let b = render(&input(&empty, &[])).unwrap();
        // The seed's example adds one label to the Deployment; without it
        // the whole rendering is the same.
        let extra = a.deployment["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("example");
        assert_eq!(extra, Some(json!("label")));
        assert_eq!(a, b);
    }

    #[test]
    fn an_empty_config_renders_the_hard_coded_defaults() {
        let empty = DeploymentRuntimeConfigSpec::default();
        let r = render(&input(&empty, &[])).unwrap();
        let owner = json!([{
            "apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision",
            "name": "provider-x-0123456789ab", "uid": "uid-1",
            "controller": true, "blockOwnerDeletion": true,
        }]);
        let sel = json!({
            "pkg.crossplane.io/package": "provider-x",
            "pkg.crossplane.io/revision": "provider-x-0123456789ab",
        });
        let pod_labels = json!({
            "pkg.crossplane.io/package": "provider-x",
            "pkg.crossplane.io/revision": "provider-x-0123456789ab",
            "pkg.crossplane.io/provider": "provider-x",
        });
        assert_eq!(
            r.deployment,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": "provider-x-0123456789ab",
                    "namespace": "crossplane-system",
                    "labels": sel,
                    "ownerReferences": owner,
                },
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": sel},
                    "template": {
                        "metadata": {"labels": pod_labels},
                        "spec": {
                            "serviceAccountName": "provider-x",
                            "securityContext": {"runAsNonRoot": true, "runAsUser": 2000, "runAsGroup": 2000},
                            "containers": [{
                                "name": "package-runtime",
                                "image": "reg/runtime@sha256:aa",
                                "imagePullPolicy": "IfNotPresent",
                                "env": [
                                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                                    {"name": "PROVIDER_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['pkg.crossplane.io/provider']"}}},
                                    {"name": "REVISION_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['pkg.crossplane.io/revision']"}}},
                                    {"name": "REVISION_UID", "value": "uid-1"},
                                ],
                                "ports": [{"name": "metrics", "containerPort": 8080}],
                                "securityContext": {
                                    "runAsNonRoot": true, "runAsUser": 2000, "runAsGroup": 2000,
                                    "privileged": false, "allowPrivilegeEscalation": false,
                                },
                            }],
                        },
                    },
                },
            })
        );
        assert_eq!(
            r.service,
            json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": "provider-x",
                    "namespace": "crossplane-system",
                    "ownerReferences": owner,
                },
                "spec": {
                    "type": "ClusterIP",
                    "selector": {"pkg.crossplane.io/provider": "provider-x"},
                    "ports": [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}],
                },
            })
        );
        assert_eq!(
            r.service_account,
            json!({
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": "provider-x",
                    "namespace": "crossplane-system",
                    "ownerReferences": owner,
                },
            })
        );
        assert!(!r.service_account_named);
    }

    #[test]
    fn the_package_overlays_image_and_pull_policy_and_defaults_fill_only_gaps() {
        let config = spec(
            json!({"deploymentTemplate": {"spec": {"template": {"spec": {
                "securityContext": {"runAsUser": 1},
                "containers": [{
                    "name": "package-runtime",
                    "image": "someone/else:1",
                    "imagePullPolicy": "Never",
                    "securityContext": {"readOnlyRootFilesystem": true},
                    "resources": {"limits": {"cpu": "1"}},
                    "ports": [{"name": "metrics", "containerPort": 9090}, {"name": "webhook", "containerPort": 9443}],
                }],
            }}}}}),
        );
        let mut i = input(&config, &[]);
        i.pull_policy = Some("Always");
        let r = render(&i).unwrap();
        let pod = &r.deployment["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(c["image"], "reg/runtime@sha256:aa");
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(
            c["securityContext"],
            json!({"readOnlyRootFilesystem": true})
        );
        assert_eq!(c["resources"]["limits"]["cpu"], "1");
        assert_eq!(
            c["ports"],
            json!([{"name": "metrics", "containerPort": 9090}, {"name": "webhook", "containerPort": 9443}])
        );
        assert_eq!(pod["securityContext"], json!({"runAsUser": 1}));
        assert_eq!(r.deployment["spec"]["replicas"], 1);
        // A ControllerConfig's image and pull policy win over the package's.
        i.config_image_wins = true;
        let r = render(&i).unwrap();
        let c = &r.deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "someone/else:1");
        assert_eq!(c["imagePullPolicy"], "Never");
    }

    #[test]
    fn the_service_template_wins_except_for_the_selector() {
        let config = spec(json!({"serviceTemplate": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"x": "y"}, "namespace": "elsewhere"},
            "spec": {
                "type": "NodePort",
                "selector": {"app": "other"},
                "ports": [{"name": "web", "port": 80, "targetPort": 8080}],
            },
        }}));
        let r = render(&input(&config, &[])).unwrap();
        assert_eq!(r.service["metadata"]["labels"], json!({"team": "a"}));
        assert_eq!(r.service["metadata"]["annotations"], json!({"x": "y"}));
        assert_eq!(r.service["metadata"]["namespace"], "crossplane-system");
        assert_eq!(r.service["spec"]["type"], "NodePort");
        assert_eq!(
            r.service["spec"]["ports"],
            json!([{"name": "web", "port": 80, "targetPort": 8080}])
        );
        // The Service selects every revision's ready pods of the Provider.
        assert_eq!(
            r.service["spec"]["selector"],
            json!({"pkg.crossplane.io/provider": "provider-x"})
        );
    }

    #[test]
    fn deployment_and_pod_template_labels_are_kept_beside_the_selector() {
        let config = spec(json!({"deploymentTemplate": {
            "metadata": {"labels": {"team": "a", "pkg.crossplane.io/revision": "spoofed"}},
            "spec": {"template": {
                "metadata": {"labels": {"tier": "b"}, "annotations": {"scrape": "yes"}},
                "spec": {},
            }},
        }}));
        let r = render(&input(&config, &[])).unwrap();
        let d = &r.deployment;
        assert_eq!(d["metadata"]["labels"]["team"], "a");
        assert_eq!(
            d["metadata"]["labels"]["pkg.crossplane.io/revision"],
            "provider-x-0123456789ab"
        );
        let pod_meta = &d["spec"]["template"]["metadata"];
        assert_eq!(pod_meta["labels"]["tier"], "b");
        assert_eq!(pod_meta["annotations"]["scrape"], "yes");
        assert_eq!(
            d["spec"]["selector"]["matchLabels"]
                .as_object()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn a_service_handing_over_selects_the_serving_revision_on_its_port() {
        let empty = DeploymentRuntimeConfigSpec::default();
        let mut i = input(&empty, &[]);
        i.tls = Some(("s", "c"));
        i.webhooks = true;
        i.serving = Some(Serving {
            revision: "provider-x-old",
            port: WEBHOOK_ALT_PORT,
        });
        let r = render(&i).unwrap();
        // This revision's pods stay its own; the Service sends to the
        // serving revision's.
        let pod_labels = &r.deployment["spec"]["template"]["metadata"]["labels"];
        assert_eq!(pod_labels[labels::REVISION], "provider-x-0123456789ab");
        assert_eq!(pod_labels[labels::PROVIDER], "provider-x");
        assert_eq!(
            r.service["spec"]["selector"],
            json!({labels::PROVIDER: "provider-x", labels::REVISION: "provider-x-old"})
        );
        assert_eq!(
            r.service["metadata"]["annotations"][ANNOTATION_WEBHOOK_PORT],
            "9444"
        );
        let ports: Vec<(String, i64)> = r.service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_owned(),
                    p["port"].as_i64().unwrap(),
                )
            })
            .collect();
        assert!(
            ports.contains(&("webhook".into(), WEBHOOK_PORT)),
            "{ports:?}"
        );
        assert!(
            ports.contains(&("webhook-alt".into(), WEBHOOK_ALT_PORT)),
            "{ports:?}"
        );
    }

    #[test]
    fn selector_pod_labels_and_service_match() {
        let empty = DeploymentRuntimeConfigSpec::default();
        let r = render(&input(&empty, &[])).unwrap();
        let sel = &r.deployment["spec"]["selector"]["matchLabels"];
        let pod_labels = &r.deployment["spec"]["template"]["metadata"]["labels"];
        for (k, v) in r.service["spec"]["selector"].as_object().unwrap() {
            assert_eq!(&pod_labels[k], v, "the Service selects the pods");
        }
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
            r.deployment["spec"]["template"]["spec"]["serviceAccountName"], "provider-x",
            "the ServiceAccount is the Provider's, the same across upgrades"
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
        assert_eq!(env.len(), 5, "A, POD_NAMESPACE and the runtime's own three");
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
            json!({"deploymentTemplate": {"metadata": {"name": 7}}}),
            json!({"serviceAccountTemplate": {"metadata": {"name": ["a"]}}}),
            json!({"deploymentTemplate": {"spec": {"template": {"spec": {"containers": [3]}}}}}),
            json!({"deploymentTemplate": {"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}}),
            json!({"deploymentTemplate": {"spec": {"template": {"spec": {"containers": [
                {"name": "package-runtime"}, {"name": "package-runtime"},
            ]}}}}}),
            json!({"deploymentTemplate": {"spec": {"template": {
                "securityContext": {}, "spec": {},
            }}}}),
            json!({"deploymentTemplate": {"spec": {"template": {"spec": {"imagePullSecrets": ["s"]}}}}}),
            json!({"serviceTemplate": {"spec": {"ports": 8080}}}),
        ] {
            let config = spec(bad.clone());
            let err = render(&input(&config, &[])).unwrap_err().to_string();
            assert!(!err.is_empty(), "{bad}");
        }
        let err = render(&input(
            &spec(json!({"deploymentTemplate": {"spec": {"template": {"spec": {"containers": "x"}}}}})),
            &[],
        ))
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "deploymentTemplate.spec.template.spec.containers must be a list"
        );
    }

    /// Every JSON shape at every place a template is read gives a result
    /// or an error: rendering never panics.
    #[test]
    fn no_json_shape_panics() {
        let shapes = [
            Value::Null,
            json!(true),
            json!(1),
            json!("s"),
            json!([]),
            json!([1, "x", null, {}]),
            json!({}),
            json!({"name": 1}),
            json!([{"name": "package-runtime", "env": [1], "ports": {}}]),
        ];
        let places: &[&[&str]] = &[
            &["deploymentTemplate"],
            &["deploymentTemplate", "metadata"],
            &["deploymentTemplate", "metadata", "labels"],
            &["deploymentTemplate", "metadata", "name"],
            &["deploymentTemplate", "spec"],
            &["deploymentTemplate", "spec", "replicas"],
            &["deploymentTemplate", "spec", "selector"],
            &["deploymentTemplate", "spec", "template"],
            &["deploymentTemplate", "spec", "template", "metadata"],
            &[
                "deploymentTemplate",
                "spec",
                "template",
                "metadata",
                "labels",
            ],
            &["deploymentTemplate", "spec", "template", "spec"],
            &["deploymentTemplate", "spec", "template", "containers"],
            &[
                "deploymentTemplate",
                "spec",
                "template",
                "spec",
                "containers",
            ],
            &[
                "deploymentTemplate",
                "spec",
                "template",
                "spec",
                "imagePullSecrets",
            ],
            &[
                "deploymentTemplate",
                "spec",
                "template",
                "spec",
                "securityContext",
            ],
            &["deploymentTemplate", "serviceTemplate"],
            &["deploymentTemplate", "serviceAccountTemplate"],
            &["serviceTemplate"],
            &["serviceTemplate", "metadata"],
            &["serviceTemplate", "spec"],
            &["serviceTemplate", "spec", "ports"],
            &["serviceAccountTemplate"],
            &["serviceAccountTemplate", "metadata"],
            &["serviceAccountTemplate", "metadata", "annotations"],
        ];
        let container_fields = ["env", "ports", "name", "image", "securityContext"];
        let secrets = ["s".to_owned()];
        for shape in &shapes {
            for place in places {
                let mut root = json!({});
                let mut at = &mut root;
                for (i, key) in place.iter().enumerate() {
                    let value = if i + 1 == place.len() {
                        shape.clone()
                    } else {
                        json!({})
                    };
                    at = at
                        .as_object_mut()
                        .unwrap()
                        .entry(key.to_string())
                        .or_insert(value);
                }
                let config = spec(root);
                let _ = render(&input(&config, &secrets));
            }
            for field in container_fields {
                let config = spec(
                    json!({"deploymentTemplate": {"spec": {"template": {"spec": {
                        "containers": [{"name": "package-runtime", field: shape.clone()}, {"name": "side", field: shape.clone()}],
                    }}}}}),
                );
                let mut i = input(&config, &secrets);
                i.config_image_wins = true;
                let _ = render(&i);
            }
        }
    }

    #[test]
    fn pod_namespace_replaces_the_templates_in_place() {
        let config = spec(
            json!({"deploymentTemplate": {"spec": {"template": {"spec": {"containers": [
                {"name": "package-runtime", "env": [
                    {"name": "A", "value": "1"},
                    {"name": "POD_NAMESPACE", "value": "wrong"},
                    {"name": "B", "value": "2"},
                    {"name": "POD_NAMESPACE", "value": "twice"},
                ]},
            ]}}}}}),
        );
        let r = render(&input(&config, &[])).unwrap();
        let env = &r.deployment["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(
            env,
            &json!([
                {"name": "A", "value": "1"},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "B", "value": "2"},
                {"name": "PROVIDER_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['pkg.crossplane.io/provider']"}}},
                {"name": "REVISION_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['pkg.crossplane.io/revision']"}}},
                {"name": "REVISION_UID", "value": "uid-1"},
            ])
        );
    }

    #[test]
    fn a_provider_with_certificates_and_webhooks_gets_mounts_ports_env_and_a_readiness_probe() {
        let config = spec(
            json!({"deploymentTemplate": {"spec": {"template": {"spec": {
                "volumes": [{"name": "cache", "emptyDir": {}}],
                "containers": [{"name": "package-runtime", "env": [{"name": "TLS_SERVER_CERTS_DIR", "value": "/elsewhere"}]}],
            }}}}}),
        );
        let owner = json!({"apiVersion": "pkg.crossplane.io/v1", "kind": "Provider", "name": "provider-x", "uid": "p-uid", "controller": true});
        let labels = std::collections::BTreeMap::from([("team".to_owned(), "a".to_owned())]);
        let mut i = input(&config, &[]);
        i.provider_owner = Some(&owner);
        i.tls = Some(("provider-x-tls-server", "provider-x-tls-client"));
        i.webhooks = true;
        i.common_labels = &labels;
        let r = render(&i).unwrap();
        let pod = &r.deployment["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(
            pod["volumes"],
            json!([
                {"name": "cache", "emptyDir": {}},
                {"name": "tls-server-certs", "secret": {"secretName": "provider-x-tls-server"}},
                {"name": "tls-client-certs", "secret": {"secretName": "provider-x-tls-client"}},
            ])
        );
        assert_eq!(
            c["volumeMounts"],
            json!([
                {"name": "tls-server-certs", "mountPath": "/tls/server", "readOnly": true},
                {"name": "tls-client-certs", "mountPath": "/tls/client", "readOnly": true},
            ])
        );
        let env: Vec<(String, Value)> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["name"].as_str().unwrap().to_owned(), e["value"].clone()))
            .collect();
        assert!(env.contains(&("TLS_SERVER_CERTS_DIR".into(), json!("/tls/server"))));
        assert!(env.contains(&("TLS_CLIENT_CERTS_DIR".into(), json!("/tls/client"))));
        assert!(env.contains(&("WEBHOOK_TLS_CERT_DIR".into(), json!("/tls/server"))));
        assert_eq!(
            env.iter()
                .filter(|(n, _)| n == "TLS_SERVER_CERTS_DIR")
                .count(),
            1
        );
        assert!(
            c["ports"]
                .as_array()
                .unwrap()
                .contains(&json!({"name": "webhook", "containerPort": 9443}))
        );
        assert_eq!(c["readinessProbe"]["tcpSocket"]["port"], "webhook");
        assert_eq!(c["lifecycle"]["preStop"]["sleep"]["seconds"], 5);
        assert!(r.service["spec"]["ports"].as_array().unwrap().contains(
            &json!({"name": "webhook", "port": 9443, "targetPort": "webhook", "protocol": "TCP"})
        ));
        // What outlives a revision is the Provider's.
        assert_eq!(r.service["metadata"]["ownerReferences"], json!([owner]));
        assert_eq!(
            r.service_account["metadata"]["ownerReferences"],
            json!([owner])
        );
        assert_eq!(
            r.deployment["metadata"]["ownerReferences"][0]["kind"],
            "ProviderRevision"
        );
        for labels in [
            &r.service["metadata"]["labels"],
            &r.service_account["metadata"]["labels"],
            &r.deployment["metadata"]["labels"],
            &r.deployment["spec"]["template"]["metadata"]["labels"],
        ] {
            assert_eq!(labels["team"], "a");
        }
        // Without webhooks: no probe (a runtime that serves none is ready
        // when it runs).
        i.webhooks = false;
        let r = render(&i).unwrap();
        assert!(
            r.deployment["spec"]["template"]["spec"]["containers"][0]
                .get("readinessProbe")
                .is_none()
        );
    }
}
